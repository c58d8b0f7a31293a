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
* Sound (LTX-2.x): ``write_mp4(..., audio=, sample_rate=)`` adds an AAC track; :func:`write_wav`
  writes 16-bit PCM WAV; :func:`read_audio` decodes a file's audio stream. Audio is float
  ``[channels, samples]`` (1 or 2 channels; channels first, as ltx-core's vocoders return a
  batch item), clipped to [-1, 1] and quantised as ltx-pipelines' ``encode_video`` does it
  (``utils/media_io.py``, ltx-pipelines 1.0.0: clip, ``* 32767``, truncated to int16); the mp4's
  AAC (ffmpeg's native encoder, at the given rate) is encoded from those samples.

With audio, the video stream is still encoded by imageio-ffmpeg's ffmpeg exactly as without
(same settings, same H.264 bytes) into a temporary video-only mp4 in the target's folder; PyAV
(``av``) then writes the final temporary mp4: the H.264 packets copied unchanged, the AAC
stream encoded next to them, the same atomic rename at the end. Same frames and samples give
the same bytes (x264's threads are fixed, the AAC encoder is single-threaded).

imageio-ffmpeg is the ``video`` extra (``pip install vidax[video]``); it ships its own ffmpeg
binary. PyAV ships its own FFmpeg libraries.
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
#: The AAC encoder's sample rates (ffmpeg's native ``aac``).
AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025,
             8000, 7350)
_LAYOUTS = {1: "mono", 2: "stereo"}


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


def _av():
    try:
        import av
    except ImportError as e:
        raise VidaxError("audio in and out of files needs PyAV: pip install av") from e
    return av


def _check_audio(audio, sample_rate, *, aac: bool) -> tuple[np.ndarray, int]:
    """Float audio ``[channels, samples]`` (1 or 2 channels, finite) and a positive integer
    sample rate (one of :data:`AAC_RATES` for an mp4) -> (int16 ``[samples, channels]`` as
    ltx-pipelines quantises it, the rate)."""
    if audio is None or sample_rate is None:
        raise VidaxError("audio and sample_rate go together: pass both (audio "
                         "[channels, samples] float in [-1, 1], sample_rate in Hz)")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) \
            or sample_rate <= 0:
        raise VidaxError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
    sample_rate = int(sample_rate)
    if aac and sample_rate not in AAC_RATES:
        raise VidaxError(f"AAC cannot store {sample_rate} Hz; its rates: "
                         f"{', '.join(map(str, AAC_RATES))} (resample first)")
    a = np.asarray(audio)
    if not np.issubdtype(a.dtype, np.floating) and a.dtype.name != "bfloat16":
        raise VidaxError(f"audio must be float samples in [-1, 1], got {a.dtype}")
    if a.ndim != 2 or a.shape[0] not in _LAYOUTS:
        hint = (" (it looks like [samples, channels]: pass audio.T)"
                if a.ndim == 2 and a.shape[1] in _LAYOUTS else "")
        raise VidaxError(f"audio must be [channels, samples] with 1 or 2 channels, got shape "
                         f"{list(a.shape)}{hint}")
    if a.shape[1] == 0:
        raise VidaxError("audio holds no samples")
    a = a.astype(np.float32)
    if not np.isfinite(a).all():
        raise VidaxError("audio holds NaN or infinite samples")
    pcm = (np.clip(a, -1.0, 1.0) * np.float32(32767)).astype(np.int16)   # truncation
    return np.ascontiguousarray(pcm.T), sample_rate


def _check_target(path, suffix: str) -> Path:
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise VidaxError(f"{path}: the output must be an {suffix} file")
    if not path.parent.is_dir():
        raise VidaxError(f"{path}: the folder {path.parent} does not exist")
    return path


def _encode_video(tmp: Path, frames: np.ndarray, fps: float, quality: float) -> None:
    ffmpeg = _ffmpeg()
    height, width = frames.shape[1:3]
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


def _mux_audio(video: Path, out: Path, pcm: np.ndarray, sample_rate: int) -> None:
    """``out``: ``video``'s H.264 packets unchanged plus an AAC stream of ``pcm``."""
    av = _av()
    layout = _LAYOUTS[pcm.shape[1]]
    with av.open(str(video)) as src, av.open(str(out), "w", format="mp4") as dst:
        v_in = src.streams.video[0]
        v_out = dst.add_stream_from_template(v_in)
        a_out = dst.add_stream("aac", rate=sample_rate, layout=layout)
        for packet in src.demux(v_in):
            if packet.dts is None:       # the demuxer's final empty packet
                continue
            packet.stream = v_out
            dst.mux(packet)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout=layout)
        frame.sample_rate, frame.pts = sample_rate, 0
        for packet in a_out.encode(frame):
            dst.mux(packet)
        for packet in a_out.encode(None):
            dst.mux(packet)


def write_mp4(path: str | os.PathLike, frames, fps: float, *,
              quality: float = QUALITY, audio=None, sample_rate: int | None = None) -> Path:
    """Write uint8 frames ``[F, H, W, 3]`` to ``path`` as an H.264 mp4 at ``fps``; with
    ``audio`` (float ``[channels, samples]``, 1 or 2 channels, in [-1, 1]: clipped) and
    ``sample_rate`` (Hz, an AAC rate) also an AAC track at that rate.

    Atomic: ``path`` is either the complete video or untouched (an existing file at ``path``
    is replaced only on success); bad audio is refused before anything is written. Returns the
    path written.
    """
    _ffmpeg()
    frames = _check_frames(frames)
    if not fps or fps <= 0:
        raise VidaxError(f"fps must be positive, got {fps!r}")
    path = _check_target(path, ".mp4")
    pcm = None
    if audio is not None or sample_rate is not None:
        pcm, sample_rate = _check_audio(audio, sample_rate, aac=True)
        _av()
    # Same folder (so the rename is atomic), and an .mp4 suffix (ffmpeg picks the container
    # from it).
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial.mp4")
    video_only = path.with_name(f".{path.stem}.{os.getpid()}.video.partial.mp4")
    done = False
    try:
        if pcm is None:
            _encode_video(tmp, frames, fps, quality)
        else:
            _encode_video(video_only, frames, fps, quality)
            _mux_audio(video_only, tmp, pcm, sample_rate)
        os.replace(tmp, path)
        done = True
    except (OSError, RuntimeError) as e:
        raise VidaxError(f"{path}: writing the video failed ({e}); nothing was written") from e
    except Exception as e:
        if type(e).__module__.split(".")[0] != "av":
            raise
        raise VidaxError(f"{path}: writing the video failed ({e}); nothing was written") from e
    finally:
        video_only.unlink(missing_ok=True)
        if not done:
            tmp.unlink(missing_ok=True)
    return path


def write_wav(path: str | os.PathLike, audio, sample_rate: int) -> Path:
    """Write float audio ``[channels, samples]`` (1 or 2 channels, in [-1, 1]: clipped) as a
    16-bit PCM WAV at ``sample_rate`` Hz (quantised as for the mp4's AAC track). Atomic, as
    :func:`write_mp4`. Returns the path written."""
    import wave

    pcm, sample_rate = _check_audio(audio, sample_rate, aac=False)
    path = _check_target(path, ".wav")
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial.wav")
    done = False
    try:
        with wave.open(str(tmp), "wb") as w:
            w.setnchannels(pcm.shape[1])
            w.setsampwidth(2)
            w.setframerate(sample_rate)
            w.writeframes(pcm.astype("<i2").tobytes())
        os.replace(tmp, path)
        done = True
    except OSError as e:
        raise VidaxError(f"{path}: writing the audio failed ({e}); nothing was written") from e
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    return path


def read_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode the first audio stream of a file (an mp4's AAC, a WAV, ...) with PyAV: float32
    samples ``[channels, n]`` (integer formats scaled by 1 / 32768, as FFmpeg converts them)
    and the sample rate. The mp4's AAC encoder delay is dropped by the decoder (the file's
    edit list); its last frame's padding is not: ``n`` can exceed the samples written by up
    to one AAC frame (1024)."""
    av = _av()
    path = Path(path)
    if not path.is_file():
        raise VidaxError(f"{path}: no such file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise VidaxError(f"{path}: the file has no audio stream")
            stream = container.streams.audio[0]
            chunks = []
            for frame in container.decode(stream):
                a = frame.to_ndarray()
                if not frame.format.is_planar:
                    a = a.reshape(-1, len(frame.layout.channels)).T
                if frame.format.name.startswith("s16"):
                    a = a.astype(np.float32) / np.float32(32768)
                elif frame.format.name.startswith("s32"):
                    a = (a / 2.0 ** 31).astype(np.float32)
                chunks.append(a.astype(np.float32))
            rate = int(stream.rate)
    except VidaxError:
        raise
    except Exception as e:
        if not isinstance(e, OSError) and type(e).__module__.split(".")[0] != "av":
            raise
        raise VidaxError(f"{path}: not a readable audio file ({e})") from e
    if not chunks:
        raise VidaxError(f"{path}: the audio stream holds no samples")
    return np.concatenate(chunks, axis=1), rate


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
