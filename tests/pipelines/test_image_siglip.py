"""HunyuanVideo-1.5's image inputs (``vidax.pipelines.image``) against their oracles.

* :func:`siglip_pixels`: transformers 5's ``SiglipImageProcessorPil`` (the PIL backend: what
  the authors' pinned transformers 4.57.1 ``SiglipImageProcessor`` was; 5.x's class of that
  name is the torchvision backend, not installed here) built from FLUX.1-Redux-dev's
  ``preprocessor_config.json`` values, from an empty config (the class defaults) and from one
  with a different size and resample. Exactly equal.
* :func:`resize_cover_center_crop` and :func:`hunyuan_condition_image`: the authors' chains
  (Tencent-Hunyuan/HunyuanVideo-1.5@60783e70) rebuilt here from their calls, since the
  authors' package is not installed: ``resize_and_center_crop`` (``hyvideo/utils/
  data_utils.py``: Pillow LANCZOS resize to cover, ``Image.crop`` with the float box it
  computes) and the ``get_image_condition_latents`` transform (torchvision ``Resize`` LANCZOS
  on the PIL image = Pillow's ``resize``; ``CenterCrop`` with torchvision's
  ``int(round((h - th) / 2.0))`` offsets; ``ToTensor`` = ``uint8 / 255`` in float32;
  ``Normalize(0.5, 0.5)``, in torch). torchvision's own transforms are used when installed.
  Exactly equal, on non-square odd-size images, up- and down-scaled, and at the size itself.
* :func:`resolution_bucket`: diffusers 0.42.1's ``generate_crop_size_list`` /
  ``get_closest_ratio`` (``pipelines/hunyuan_video1_5/image_processor.py``, compiled from that
  file alone to skip its torch imports). The bucket lists are equal; the choice equals
  diffusers' wherever diffusers' one-sided search finds the nearest bucket, and on the five
  cases where it does not, vidax returns the authors' plain nearest (their
  ``get_closest_ratio`` is an ``argmin`` of ``|ratio - aspect|``; diffusers keeps only buckets
  no farther from square than the input).

Negative controls: bilinear instead of the reference resample for SigLIP, bicubic instead of
LANCZOS for the crop, each must make the comparison fail. ~1 s.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.parity import assert_fails
from tests.pipelines.test_image import _image as smooth_image
from vidax.errors import VidaxError
from vidax.pipelines import image as im

REDUX = {"do_convert_rgb": None, "do_normalize": True, "do_rescale": True, "do_resize": True,
         "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor",
         "image_std": [0.5, 0.5, 0.5], "processor_class": "SiglipProcessor", "resample": 3,
         "rescale_factor": 0.00392156862745098, "size": {"height": 384, "width": 384}}
#: (raw height, raw width) -> target (height, width): down, up, mixed, identity, odd offsets
CROPS = [((211, 317), (128, 176)), ((97, 61), (160, 96)), ((300, 401), (272, 368)),
         ((144, 256), (144, 256)), ((123, 250), (64, 112))]


def _image(height, width, seed=0):
    return smooth_image(height, width, seed)


def _siglip_oracle(image, config):
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    processor = SiglipImageProcessorPil(**config)
    out = processor.preprocess(images=image, return_tensors="np")["pixel_values"][0]
    return np.moveaxis(out, 0, -1)


def test_siglip_pixels_are_transformers():
    image = _image(211, 317)
    for config, expect in ((REDUX, 384), (None, 384), ({}, 224),
                           ({"size": {"height": 98, "width": 70}, "resample": 1}, (98, 70))):
        ours = im.siglip_pixels(image, config)
        theirs = _siglip_oracle(image, REDUX if config is None else config)
        size = expect if isinstance(expect, tuple) else (expect, expect)
        assert ours.shape == theirs.shape == (*size, 3) and ours.dtype == np.float32
        print(f"siglip {config and config.get('size')}: max |diff| "
              f"{np.abs(ours - theirs).max():.1e}")
        np.testing.assert_array_equal(ours, theirs)
    # negative control: bilinear instead of the config's bicubic
    bad = im.siglip_pixels(image, {**REDUX, "resample": 2})
    assert_fails("siglip bilinear", bad, _siglip_oracle(image, REDUX), rel_tol=1e-6)


def _authors_resize_and_center_crop(image, width, height):
    """``resize_and_center_crop`` as the authors call it (Pillow, their float crop box)."""
    from PIL import Image

    if image.shape[:2] == (height, width):
        return image
    pil = Image.fromarray(image)
    scale = max(width / pil.width, height / pil.height)
    w, h = int(round(pil.width * scale)), int(round(pil.height * scale))
    pil = pil.resize((w, h), Image.LANCZOS)
    return np.array(pil.crop(((w - width) / 2, (h - height) / 2,
                              (w + width) / 2, (h + height) / 2)))


def _authors_condition(image, height, width):
    """``get_image_condition_latents``' transform of the PIL image, ``[H, W, 3]``."""
    import torch
    from PIL import Image

    pil = Image.fromarray(image)
    scale = max(width / pil.width, height / pil.height)
    size = (int(round(pil.height * scale)), int(round(pil.width * scale)))
    try:
        from torchvision import transforms

        chain = transforms.Compose([
            transforms.Resize(size, interpolation=transforms.InterpolationMode.LANCZOS),
            transforms.CenterCrop((height, width)), transforms.ToTensor(),
            transforms.Normalize([0.5], [0.5])])
        return chain(pil).permute(1, 2, 0).numpy()
    except ImportError:
        pass
    if size != (pil.height, pil.width):
        pil = pil.resize(size[::-1], Image.LANCZOS)
    top = int(round((pil.height - height) / 2.0))
    left = int(round((pil.width - width) / 2.0))
    pil = pil.crop((left, top, left + width, top + height))
    x = torch.from_numpy(np.array(pil)).permute(2, 0, 1).float().div(255)
    return x.sub(0.5).div(0.5).permute(1, 2, 0).numpy()


def test_crop_and_condition_are_the_authors(monkeypatch):
    for i, ((h, w), (th, tw)) in enumerate(CROPS):
        raw = _image(h, w, seed=i)
        crop = im.resize_cover_center_crop(raw, th, tw)
        assert crop.shape == (th, tw, 3) and crop.dtype == np.uint8
        np.testing.assert_array_equal(crop, _authors_resize_and_center_crop(raw, tw, th))
        cond = im.hunyuan_condition_image(raw, th, tw)
        np.testing.assert_array_equal(cond, _authors_condition(raw, th, tw))
        np.testing.assert_array_equal(im.siglip_pixels(crop), _siglip_oracle(crop, REDUX))
    # negative control: bicubic instead of LANCZOS
    raw, ((h, w), (th, tw)) = _image(*CROPS[0][0]), CROPS[0]
    bad = im.resize_cover_center_crop(raw, th, tw, resample="bicubic").astype(np.float32)
    assert_fails("crop bicubic", bad, _authors_resize_and_center_crop(raw, tw, th), rel_tol=1e-6)
    with pytest.raises(VidaxError, match="uint8"):
        im.resize_cover_center_crop(raw.astype(np.float32), th, tw)
    with pytest.raises(VidaxError, match="size"):
        im.siglip_pixels(raw, {"size": {"shortest_edge": 384}})


@functools.cache
def _diffusers_buckets():
    spec = importlib.util.find_spec("diffusers")
    path = Path(spec.origin).parent / "pipelines/hunyuan_video1_5/image_processor.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name in ("generate_crop_size_list", "get_closest_ratio")]
    namespace = {"np": np}
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    return namespace["generate_crop_size_list"], namespace["get_closest_ratio"]


#: (resolution, height, width) where diffusers' one-sided search misses the nearest bucket:
#: vidax's (the authors') answer, diffusers' answer.
DIFFERS = {("480p", 5, 4): ((704, 560), (704, 576)), ("480p", 21, 9): ((976, 416), (960, 416)),
           ("480p", 9, 21): ((416, 976), (416, 960)), ("720p", 16, 9): ((1280, 720), (1264, 720)),
           ("720p", 9, 21): ((624, 1456), (624, 1440))}


def test_resolution_bucket_is_the_authors():
    generate, closest = _diffusers_buckets()
    for base in im.BUCKET_BASE.values():
        assert im.bucket_sizes(base) == [tuple(b) for b in generate(base, 16)]
    ratios = [(9, 16), (16, 9), (1, 1), (3, 4), (4, 3), (211, 317), (317, 211), (5, 4),
              (21, 9), (9, 21), (1, 4), (4, 1), (333, 500)]
    for resolution in ("480p", "720p"):
        buckets = generate(im.BUCKET_BASE[resolution], 16)
        table = np.array([round(float(h) / float(w), 5) for h, w in buckets])
        for h, w in ratios:
            ours = im.resolution_bucket(h, w, resolution)
            theirs = tuple(closest(h, w, table, buckets)[0])
            nearest = buckets[int(np.abs(table - h / w).argmin())]   # the authors' argmin
            assert ours == tuple(nearest)
            if (resolution, h, w) in DIFFERS:
                assert (ours, theirs) == DIFFERS[(resolution, h, w)]
            else:
                assert ours == theirs, (resolution, h, w)
    assert im.resolution_bucket(9, 16, "480p") == (480, 848)      # t2v default 16:9
    assert im.resolution_bucket(9, 16, 640) == (480, 848)
    with pytest.raises(VidaxError, match="unknown resolution"):
        im.resolution_bucket(9, 16, "540p")
