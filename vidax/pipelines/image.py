"""Image operations the pipelines share, each reproducing one torch / torchvision op on a
host numpy image ``[H, W, C]`` (channels last), so that a conditioning image reaches the VAE
as the authors' preprocessing leaves it:

* :func:`resize_bilinear`: ``F.interpolate(mode="bilinear", align_corners=False)``;
* :func:`resize_bicubic`: ``F.interpolate(mode="bicubic", align_corners=False)``;
* :func:`center_crop`: torchvision's ``F.center_crop``;
* :func:`crop_to_aspect`: the centre crop to an aspect ratio by slicing (sizes truncated,
  offsets floored), as LTX-Video's ``load_image_to_tensor_with_resize_and_crop``;
* :func:`gaussian_blur`: torchvision's ``F.gaussian_blur(kernel_size=3, sigma=1.0)``.
* :func:`resize_nearest`: ``F.interpolate`` in its default mode (nearest), on frames
  ``[..., H, W, C]`` of any dtype;
* :func:`h264_round_trip`: a uint8 frame through one H.264 frame and back (PyAV), as
  LTX-2's ``ltx_pipelines.utils.media_io.preprocess``;
* HunyuanVideo-1.5's image inputs, with Pillow where the authors use it (bit-equal):
  :func:`resize_cover_center_crop` (their ``resize_and_center_crop``),
  :func:`hunyuan_condition_image` (the VAE's first frame), :func:`siglip_pixels` (SigLIP's
  ``preprocess``) and :func:`resolution_bucket` (their aspect-ratio buckets).

The resizes are separable matrices (no antialiasing, no clamping) applied in float64 and
returned as float32: within ~5e-6 of torch's float32 sums on values in [-1, 1].
"""

from __future__ import annotations

import numpy as np

from vidax.errors import VidaxError
from vidax.models.clip.model import _cubic_resize_matrix


def _separable(image: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``rows @ image @ cols.T`` per channel (``rows [height, H]``, ``cols [width, W]``)."""
    return np.einsum("oh,hwc,pw->opc", rows.astype(np.float64), image.astype(np.float64),
                     cols.astype(np.float64)).astype(np.float32)


def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]``: ``F.interpolate(mode="bilinear", align_corners=False)`` along one
    axis, without antialiasing, from torch's float32 source coordinates
    (``area_pixel_compute_source_index``)."""
    scale = np.float32(n_in / n_out)
    src = np.maximum((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale
                     - np.float32(0.5), np.float32(0))
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo.astype(np.float32)).astype(np.float64)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] += 1 - frac
    m[np.arange(n_out), hi] += frac
    return m


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """float ``[H, W, C]`` -> float32 ``[height, width, C]`` as torch's ``F.interpolate(...,
    mode="bilinear", align_corners=False)`` (the image itself, as float32, at its own
    size)."""
    if image.shape[:2] == (height, width):
        return image.astype(np.float32)
    return _separable(image, bilinear_matrix(image.shape[0], height),
                      bilinear_matrix(image.shape[1], width))


def resize_bicubic(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """float ``[H, W, C]`` -> float32 ``[height, width, C]`` as torch's ``F.interpolate(...,
    mode="bicubic", align_corners=False)`` (a = -0.75, no antialiasing, no clamping)."""
    return _separable(image, _cubic_resize_matrix(image.shape[0], height),
                      _cubic_resize_matrix(image.shape[1], width))


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """torchvision's ``F.center_crop`` of ``[H, W, C]`` to (height, width): zero padding
    first where the crop is larger, then a crop whose offsets round half to even."""
    h, w = image.shape[:2]
    pad_h, pad_w = max(height - h, 0), max(width - w, 0)
    image = np.pad(image, ((pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2),
                           (0, 0)))
    top = int(round((image.shape[0] - height) / 2.0))
    left = int(round((image.shape[1] - width) / 2.0))
    return image[top:top + height, left:left + width]


def crop_to_aspect(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """The largest centred window of ``[H, W, C]`` with the aspect ratio ``width / height``
    (sizes truncated to int, offsets floored), as LTX-Video's
    ``load_image_to_tensor_with_resize_and_crop`` slices it."""
    in_h, in_w = image.shape[:2]
    target, frame = width / height, in_w / in_h
    if frame > target:
        new_w, new_h = int(in_h * target), in_h
        x0, y0 = (in_w - new_w) // 2, 0
    else:
        new_w, new_h = in_w, int(in_w / target)
        x0, y0 = 0, (in_h - new_h) // 2
    return image[y0:y0 + new_h, x0:x0 + new_w]


def gaussian_blur(image: np.ndarray) -> np.ndarray:
    """torchvision's ``F.gaussian_blur(kernel_size=3, sigma=1.0)`` of a float ``[H, W, C]``
    image, float32: the separable kernel ``exp(-x^2 / 2)`` at x = -1, 0, 1, normalised,
    reflect padding."""
    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    pdf = np.exp(-0.5 * np.square(x / np.float32(1.0)))
    kernel = (pdf / pdf.sum()).astype(np.float32)
    padded = np.pad(image.astype(np.float32), ((1, 1), (1, 1), (0, 0)), mode="reflect")
    rows = sum(kernel[i] * padded[i:i + image.shape[0]] for i in range(3))
    return sum(kernel[j] * rows[:, j:j + image.shape[1]] for j in range(3)).astype(np.float32)


def resize_nearest(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[..., H, W, C]`` -> ``[..., height, width, C]`` by nearest neighbour: the source pixels
    torch's ``F.interpolate`` picks in its default mode (``floor(i * in / out)`` in float32,
    :func:`vidax.models.cosmos2_5.dit.nearest_indices`), e.g. diffusers'
    ``VaeImageProcessor.resize`` on tensors."""
    from vidax.models.cosmos2_5.dit import nearest_indices

    rows = nearest_indices(frames.shape[-3], height)
    return frames[..., rows, :, :][..., nearest_indices(frames.shape[-2], width), :]


def h264_round_trip(image: np.ndarray, crf: int) -> np.ndarray:
    """ltx-pipelines' ``preprocess``: the uint8 frame through one H.264 frame at ``crf``
    (libx264 ``veryfast``, yuv420p; odd sizes cut to even) and back, so that the condition
    looks like a video frame; ``crf`` 0: unchanged."""
    if crf == 0:
        return image
    import io

    import av

    height, width = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=1,
                                      options={"crf": str(crf), "preset": "veryfast"})
        stream.height, stream.width = height, width
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image[:height, :width]),
                                           format="rgb24").reformat(format="yuv420p")
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    buffer.seek(0)
    with av.open(buffer) as container:
        decoded = next(container.decode(video=0))
        return decoded.to_ndarray(format="rgb24")


# ----------------------------------------------------------------- HunyuanVideo-1.5 inputs
#: Pillow's resampling filters by the names vidax takes and the codes image-processor JSON
#: files store (``PIL.Image.Resampling``).
PIL_FILTERS = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


def _pil_resize(image: np.ndarray, height: int, width: int, resample: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), resample=resample))


def _uint8_rgb(image, what: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise VidaxError(f"{what} takes a uint8 [H, W, 3] image; got {image.dtype} "
                         f"{list(image.shape)}")
    return image


def resize_cover_center_crop(image: np.ndarray, height: int, width: int,
                             resample: str = "lanczos") -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> uint8 ``[height, width, 3]``: scaled with Pillow (LANCZOS by
    default) by the larger of the two ratios so that it covers the target, sizes rounded, then
    the centre window, offsets rounded half to even; the image itself when it already has the
    size. The HunyuanVideo-1.5 authors' ``resize_and_center_crop``
    (``hyvideo/utils/data_utils.py``, the SigLIP input) and, for even targets, the same pixels
    as their VAE condition transform (``get_image_condition_latents``: torchvision
    ``Resize((h, w), LANCZOS)`` on the PIL image, then ``CenterCrop``, whose offsets round the
    same way)."""
    image = _uint8_rgb(image, "resize_cover_center_crop")
    if resample not in PIL_FILTERS:
        raise VidaxError(f"unknown resample {resample!r}; choose one of {sorted(PIL_FILTERS)}")
    in_h, in_w = image.shape[:2]
    if (in_h, in_w) == (height, width):
        return image
    scale = max(width / in_w, height / in_h)
    new_w, new_h = int(round(in_w * scale)), int(round(in_h * scale))
    resized = _pil_resize(image, new_h, new_w, PIL_FILTERS[resample])
    top, left = round((new_h - height) / 2), round((new_w - width) / 2)
    return np.ascontiguousarray(resized[top:top + height, left:left + width])


def hunyuan_condition_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """The frame HunyuanVideo-1.5's VAE encodes for image-to-video: float32 ``[height, width,
    3]`` in [-1, 1] -- :func:`resize_cover_center_crop` (LANCZOS) then ``ToTensor`` and
    ``Normalize(0.5, 0.5)`` in float32 (the authors' ``get_image_condition_latents``)."""
    crop = resize_cover_center_crop(image, height, width)
    return (crop.astype(np.float32) / np.float32(255) - np.float32(0.5)) / np.float32(0.5)


#: transformers' ``SiglipImageProcessor`` class defaults: what a preprocessor_config.json
#: key left out means.
SIGLIP_DEFAULTS = {"do_resize": True, "size": {"height": 224, "width": 224}, "resample": 3,
                   "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                   "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
#: FLUX.1-Redux-dev's ``feature_extractor/preprocessor_config.json`` (the processor
#: HunyuanVideo-1.5 runs): 384 x 384 bicubic, the rest SigLIP's defaults.
SIGLIP_REDUX = {**SIGLIP_DEFAULTS, "size": {"height": 384, "width": 384}}


def siglip_pixels(image: np.ndarray, config: dict | None = None) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> float32 ``[height, width, 3]``: SigLIP's image preprocessing as
    the HunyuanVideo-1.5 authors run it (``VisionEncoder.encode_images`` ->
    ``SiglipImageProcessor.preprocess``; transformers 4.57's PIL processor, 5.x's
    ``SiglipImageProcessorPil``): Pillow resize of the uint8 image to ``size`` (no aspect kept)
    with ``resample``, ``* rescale_factor`` in float64 then float32, ``(x - mean) / std`` in
    float32. ``config``: a ``preprocessor_config.json`` dict, missing keys taking SigLIP's
    class defaults (:data:`SIGLIP_DEFAULTS`); ``None``: FLUX.1-Redux-dev's (:data:`SIGLIP_REDUX`).
    """
    image = _uint8_rgb(image, "siglip_pixels")
    cfg = SIGLIP_REDUX if config is None else {**SIGLIP_DEFAULTS, **config}
    x = image
    if cfg["do_resize"]:
        size, resample = cfg["size"], cfg["resample"]
        if not (isinstance(size, dict) and {"height", "width"} <= size.keys()):
            raise VidaxError(f"SigLIP preprocessor_config.json: size {size!r}; vidax reads "
                             "{'height': H, 'width': W} (FLUX.1-Redux-dev's form)")
        if resample not in PIL_FILTERS.values():
            raise VidaxError(f"SigLIP preprocessor_config.json: resample {resample!r} is not "
                             f"a Pillow filter code {sorted(PIL_FILTERS.values())}")
        x = _pil_resize(x, int(size["height"]), int(size["width"]), resample)
    if cfg["do_rescale"]:
        x = (x.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    if cfg["do_normalize"]:
        x = x.astype(np.float32)
        mean = np.asarray(cfg["image_mean"], np.float32).reshape(-1)
        std = np.asarray(cfg["image_std"], np.float32).reshape(-1)
        if mean.size not in (1, 3) or std.size not in (1, 3):
            raise VidaxError("SigLIP preprocessor_config.json: image_mean / image_std need 1 "
                             f"or 3 values, got {cfg['image_mean']!r} / {cfg['image_std']!r}")
        x = (x - mean) / std
    return x.astype(np.float32)


#: The authors' ``target_size_config``: bucket base size per resolution name (stride 16).
BUCKET_BASE = {"360p": 480, "480p": 640, "720p": 960, "1080p": 1440}
BUCKET_STRIDE = 16


def bucket_sizes(base_size: int, stride: int = BUCKET_STRIDE,
                 max_ratio: float = 4.0) -> list[tuple[int, int]]:
    """``(height, width)`` buckets of about ``base_size**2`` pixels, multiples of ``stride``,
    aspect ratio within ``max_ratio``: the authors' ``generate_crop_size_list`` walk (tallest
    first), ``hyvideo/utils/data_utils.py``."""
    budget = round((base_size / stride) ** 2)
    out, tall, wide = [], budget, 1
    while tall > 0:
        if max(tall, wide) / min(tall, wide) <= max_ratio:
            out.append((tall * stride, wide * stride))
        if (wide + 1) * tall <= budget:
            wide += 1
        else:
            tall -= 1
    return out


def resolution_bucket(height: float, width: float, resolution: str | int) -> tuple[int, int]:
    """The ``(height, width)`` bucket HunyuanVideo-1.5 generates at for an aspect ratio: the
    bucket of ``resolution`` (``"480p"``, ..., or a base size) whose ``round(h / w, 5)`` is
    nearest ``height / width``, the first of equals (the authors'
    ``get_closest_resolution_given_original_size``: text-to-video passes the ``"W:H"`` aspect
    ratio, image-to-video the image's size). diffusers' ``get_closest_ratio`` differs: it only
    looks at buckets no farther from square than the input (docs/models/hunyuan_video1_5.md)."""
    if isinstance(resolution, str):
        if resolution not in BUCKET_BASE:
            raise VidaxError(f"unknown resolution {resolution!r}; the authors' buckets are "
                             f"{', '.join(BUCKET_BASE)}")
        resolution = BUCKET_BASE[resolution]
    if not height > 0 or not width > 0:
        raise VidaxError(f"an aspect ratio needs a positive height and width, got "
                         f"{height} x {width}")
    buckets = bucket_sizes(int(resolution))
    aspect = float(height) / float(width)
    gaps = [abs(round(float(h) / float(w), 5) - aspect) for h, w in buckets]
    return buckets[gaps.index(min(gaps))]
