"""Video frames to and from files.

* :func:`to_uint8`: the pipelines' float frames in [-1, 1] -> uint8, as the Wan authors'
  ``cache_video`` does it (``wan/utils/utils.py``): clamp to [-1, 1], map to [0, 1] with
  torchvision's ``make_grid(normalize=True, value_range=(-1, 1))`` (``(x + 1) / 2``), times
  255, then truncate (``.type(torch.uint8)``), all in float32.
* :func:`write_mp4`: H.264 (libx264, yuv420p) through imageio-ffmpeg's ffmpeg -- never a
  hand-written muxer -- with the authors' settings (``imageio.get_writer(file, fps=fps,
  codec='libx264', quality=8)``; quality 8 is ``-crf 10``). The file appears atomically: the
  frames go to a temporary file in the same folder, renamed onto the target only once
  ffmpeg has finished, so an interrupted or failed run leaves no half-written video.
* :func:`read_video`: decode a file back to uint8 frames (tests, round trips).

imageio-ffmpeg is the ``video`` extra (``pip install vidax[video]``); it ships its own ffmpeg
binary.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

import numpy as np

from vidax.errors import VidaxError

#: The authors' ``cache_video`` settings.
CODEC = "libx264"
#: x264's thread count, fixed: its default follows the CPU count, and the bytes it writes
#: depend on the thread count (measured: 1, 2, 8, 16 threads and the default gave five
#: different streams of the same frames), so a fixed count makes the same frames the same
#: file on any machine.
ENCODER_THREADS = 4
QUALITY = 8


def _ffmpeg():
    try:
        import imageio_ffmpeg
    except ImportError as e:
        raise VidaxError("writing and reading video needs imageio-ffmpeg: "
                         "pip install 'vidax[video]' (or imageio-ffmpeg)") from e
    return imageio_ffmpeg


@contextlib.contextmanager
def _spawning_ffmpeg():
    """JAX warns on every ``os.fork`` (a forked child of a multithreaded process may deadlock).
    Starting ffmpeg forks and at once execs it from C (``subprocess``'s ``_fork_exec``): no
    Python, no lock taken in the child, so the warning does not apply."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                category=RuntimeWarning)
        yield


def to_uint8(video) -> np.ndarray:
    """Float frames in [-1, 1] (``[F, H, W, 3]``, any float dtype) -> uint8 ``[F, H, W, 3]``,
    exactly as the authors' ``cache_video`` rounds them (truncation, not rounding)."""
    x = np.asarray(video, dtype=np.float32)
    x = (np.clip(x, -1.0, 1.0) + np.float32(1)) / np.float32(2)
    return (x * np.float32(255)).astype(np.uint8)


def _check_frames(frames: np.ndarray) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise VidaxError(f"video frames must be uint8 [frames, height, width, 3], got "
                         f"{frames.dtype} {list(frames.shape)} (see vidax.video.to_uint8)")
    if frames.shape[0] == 0:
        raise VidaxError("no frames to write")
    height, width = frames.shape[1:3]
    if height % 2 or width % 2:
        raise VidaxError(f"H.264 (yuv420p) needs an even frame size; got {width}x{height}")
    return np.ascontiguousarray(frames)


def write_mp4(path: str | os.PathLike, frames, *, fps: float, quality: float = QUALITY
              ) -> Path:
    """Write uint8 frames ``[F, H, W, 3]`` to ``path`` as an H.264 mp4 at ``fps``.

    Atomic: ``path`` is either the complete video or untouched (an existing file at ``path``
    is replaced only on success). Returns the path written.
    """
    ffmpeg = _ffmpeg()
    frames = _check_frames(frames)
    if not fps or fps <= 0:
        raise VidaxError(f"fps must be positive, got {fps!r}")
    path = Path(path)
    if path.suffix.lower() != ".mp4":
        raise VidaxError(f"{path}: the output must be an .mp4 file")
    if not path.parent.is_dir():
        raise VidaxError(f"{path}: the folder {path.parent} does not exist")
    # Same folder (so the rename is atomic), and an .mp4 suffix (ffmpeg picks the container
    # from it).
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial.mp4")
    height, width = frames.shape[1:3]
    done = False
    try:
        # macro_block_size 2: keep the exact frame size (imageio-ffmpeg would otherwise
        # rescale sizes that are not multiples of 16); yuv420p itself needs even sizes.
        writer = ffmpeg.write_frames(str(tmp), (width, height), fps=float(fps), codec=CODEC,
                                     quality=quality, macro_block_size=2,
                                     output_params=["-threads", str(ENCODER_THREADS)],
                                     ffmpeg_log_level="error")
        with _spawning_ffmpeg():
            writer.send(None)
        try:
            for frame in frames:
                writer.send(frame)
        finally:
            writer.close()
        os.replace(tmp, path)
        done = True
    except (OSError, RuntimeError) as e:
        raise VidaxError(f"{path}: writing the video failed ({e}); nothing was written") from e
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    return path


def read_video(path: str | os.PathLike) -> tuple[np.ndarray, float]:
    """Decode a video file: uint8 frames ``[F, H, W, 3]`` and its frame rate."""
    ffmpeg = _ffmpeg()
    path = Path(path)
    if not path.is_file():
        raise VidaxError(f"{path}: no such video file")
    try:
        reader = ffmpeg.read_frames(str(path), pix_fmt="rgb24")
        with _spawning_ffmpeg():
            meta = reader.__next__()
        width, height = meta["size"]
        frames = [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]
    except (OSError, RuntimeError, StopIteration) as e:
        raise VidaxError(f"{path}: not a readable video ({e})") from e
    if not frames:
        raise VidaxError(f"{path}: the video holds no frames")
    return np.stack(frames), float(meta["fps"])
