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
  LTX-2's ``ltx_pipelines.utils.media_io.preprocess``.

The resizes are separable matrices (no antialiasing, no clamping) applied in float64 and
returned as float32: within ~5e-6 of torch's float32 sums on values in [-1, 1].
"""

from __future__ import annotations

import numpy as np

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
