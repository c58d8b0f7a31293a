"""The image inputs of the LTX-Video pipeline from raw files, against the authors' loader.

Raw uint8 images of sizes and aspect ratios that need cropping and resizing are saved as PNG
and handed to vidax's pipeline by path (``Pipeline.request(image=path)``: ``load_image``,
``preprocess_image``, ``crop_to_aspect``, ``gaussian_blur``); the frame that reaches the VAE
(``Pipeline.encode_image``'s argument, recorded there, sampling stopped) is compared with what
the authors' code gives their VAE: ``load_image_to_tensor_with_resize_and_crop(path, height,
width, just_crop=True)`` (``ltx_video/inference.py``, as their ``load_media_file`` calls it for
a conditioning image), then their pipeline's ``_resize_conditioning_item`` (bilinear,
``F.interpolate``) to the pass size.

Stand-ins, for the import of ``ltx_video.inference`` only:

* ``ltx_video.pipelines.crf_compressor``: its ``compress`` (the CRF-29 H.264 round trip,
  PyAV) is the identity here -- vidax skips that round trip on purpose
  (docs/models/ltx_video.md), so the comparison is of everything else. (The round trip also
  trims an odd crop to even sizes before the codec; vidax does not.)
* ``torchvision`` is not installed: ``transforms.functional.to_tensor`` is
  ``tests.reference.wan22._to_tensor`` (``uint8 / 255``, ``[C, H, W]``) and ``gaussian_blur``
  with kernel 3, sigma 1 is written here as torchvision documents it (a separable Gaussian
  ``exp(-x^2 / (2 sigma^2))`` at ``x = -1, 0, 1``, normalised; reflect padding; a depthwise
  conv). With torchvision installed its own functions are used instead.

Bound: crop and ``/ 255`` are exact; vidax's blur and bilinear resize sum in float64, torch
in float32, so the frames agree to float32 rounding: max |diff| <= 2e-6 on values in [-1, 1]
(measured 2.4e-7..5.8e-7, printed per case). Negative control: vidax's blur skipped must
fail. ~6 s (a tiny release written and loaded, sampling stopped at the image encode): slow.
"""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest
import torch

from tests.pipelines import test_ltx_video_pipeline as tl
from tests.reference import wan22
from vidax.pipelines import ltx_video as ltx

#: (height, width) of the raw images: each needs a crop to 3:2 (the target 48x32), some a
#: resize up, some down; odd sizes so the crop's floors matter.
RAW_SIZES = ((37, 53), (61, 200), (90, 47), (33, 50))
BOUND = 2e-6


class _Stop(Exception):
    pass


def _gaussian_blur(img, kernel_size, sigma):
    k = torch.arange(kernel_size, dtype=torch.float32) - (kernel_size - 1) / 2
    k = torch.exp(-0.5 * (k / sigma[0] if isinstance(sigma, (list, tuple)) else k / sigma) ** 2)
    k = k / k.sum()
    c = img.shape[-3]
    kernel = (k[:, None] * k[None, :]).expand(c, 1, kernel_size, kernel_size)
    pad = kernel_size // 2
    x = torch.nn.functional.pad(img[None], (pad, pad, pad, pad), mode="reflect")
    return torch.nn.functional.conv2d(x, kernel, groups=c)[0]


def _authors_loader():
    """``load_image_to_tensor_with_resize_and_crop`` with the stand-ins of the docstring."""
    import ltx_video.pipelines

    crf = types.ModuleType("ltx_video.pipelines.crf_compressor")
    crf.compress = lambda image, crf=29: image
    stand_ins = {crf.__name__: crf}
    try:
        importlib.import_module("torchvision")
    except ImportError:
        functional = types.ModuleType("torchvision.transforms.functional")
        functional.to_tensor, functional.gaussian_blur = wan22._to_tensor, _gaussian_blur
        transforms = types.ModuleType("torchvision.transforms")
        transforms.functional = functional
        package = types.ModuleType("torchvision")
        package.transforms = transforms
        stand_ins.update({"torchvision": package, "torchvision.transforms": transforms,
                          functional.__name__: functional})
    saved = {k: sys.modules.get(k) for k in (*stand_ins, "ltx_video.inference")}
    sys.modules.update(stand_ins)
    sys.modules.pop("ltx_video.inference", None)
    try:
        module = importlib.import_module("ltx_video.inference")
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        if getattr(ltx_video.pipelines, "crf_compressor", None) is crf:
            del ltx_video.pipelines.crf_compressor
    return module.load_image_to_tensor_with_resize_and_crop


@pytest.fixture(scope="module")
def ltx_pipe(tmp_path_factory):
    folder = tl.write_release(tmp_path_factory.mktemp("ltx_image") / "release")
    return ltx.Pipeline.from_release(ltx.inspect_folder(folder), precision="fp32")


def _vae_input(pipe, path, monkeypatch) -> np.ndarray:
    """The frame vidax's pipeline hands its VAE for the image at ``path``."""
    seen = []

    def record(frame, noise):
        seen.append(np.asarray(frame))
        raise _Stop

    monkeypatch.setattr(pipe, "encode_image", record)
    request = pipe.request(tl.PROMPT, image=path, frames=tl.FRAMES, size=(tl.WIDTH, tl.HEIGHT),
                           fps=tl.FPS, settings=tl.I2V_SETTINGS)
    with pytest.raises(_Stop):
        pipe.sample(request=request)
    return seen[0]


def _image(height, width, seed) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    smooth = np.stack([np.sin(2 * np.pi * (rng.uniform(1, 4) * x + rng.uniform(1, 4) * y))
                       for _ in range(3)], -1)
    noise = rng.uniform(-0.3, 0.3, (height, width, 3))
    return np.clip((smooth * 0.6 + noise + 1) * 127.5, 0, 255).astype(np.uint8)


@pytest.mark.slow
def test_ltx_image_input_is_the_authors_loader(ltx_pipe, tmp_path, monkeypatch):
    from ltx_video.pipelines.pipeline_ltx_video import ConditioningItem, LTXVideoPipeline
    from PIL import Image

    load = _authors_loader()
    for i, (h, w) in enumerate(RAW_SIZES):
        path = tmp_path / f"raw_{h}x{w}.png"
        Image.fromarray(_image(h, w, seed=i)).save(path)
        ours = _vae_input(ltx_pipe, path, monkeypatch)
        media = load(str(path), tl.HEIGHT, tl.WIDTH, just_crop=True)
        item = LTXVideoPipeline._resize_conditioning_item(
            ConditioningItem(media, 0, 1.0), tl.HEIGHT, tl.WIDTH)
        theirs = item.media_item[0, :, 0].permute(1, 2, 0).numpy()
        assert ours.shape == theirs.shape == (tl.HEIGHT, tl.WIDTH, 3)
        diff = float(np.abs(ours - theirs).max())
        print(f"{h}x{w}: cropped to {media.shape[-2]}x{media.shape[-1]}, "
              f"max |vidax - authors| {diff:.2e}")
        assert diff <= BOUND, (h, w, diff)

    # negative control: the blur skipped in vidax's preprocessing
    monkeypatch.setattr(ltx, "gaussian_blur", lambda x: x)
    bad = _vae_input(ltx_pipe, path, monkeypatch)
    assert float(np.abs(bad - theirs).max()) > BOUND
