"""vidax.video: the authors' float -> uint8 conversion, mp4 round trips through ffmpeg, and
atomic writes (a failed or interrupted write leaves nothing behind, and never a half file)."""

from __future__ import annotations

import numpy as np
import pytest

from vidax import video
from vidax.errors import VidaxError


def _smooth_frames(frames: int, height: int, width: int) -> np.ndarray:
    """Moving colour gradients: what H.264 keeps almost exactly (noise it does not)."""
    t, y, x = np.meshgrid(np.arange(frames), np.linspace(0, 1, height), np.linspace(0, 1, width),
                          indexing="ij")
    rgb = np.stack([np.sin(3 * x + 0.3 * t), np.cos(2 * y - 0.2 * t), np.sin(2 * (x + y))], -1)
    return ((0.5 + 0.4 * rgb) * 255).astype(np.uint8)


def test_to_uint8_is_the_authors_cache_video():
    """``cache_video``: clamp to value_range, make_grid(normalize=True) -> (x - low) /
    (high - low), * 255, ``.type(torch.uint8)`` (truncation), float32 throughout."""
    import torch

    x = np.random.default_rng(0).uniform(-1.3, 1.3, (5, 8, 10, 3)).astype(np.float32)
    x[0, 0, :4, 0] = [-1.0, 1.0, 0.0, 1 / 255]
    t = torch.from_numpy(x).clamp(-1, 1)
    t = t.clamp_(min=-1, max=1).sub_(-1).div_(max(1 - (-1), 1e-5))
    expected = (t * 255).type(torch.uint8).numpy()
    np.testing.assert_array_equal(video.to_uint8(x), expected)


def test_mp4_round_trip(tmp_path):
    frames = _smooth_frames(9, 48, 64)
    path = video.write_mp4(tmp_path / "clip.mp4", frames, fps=16)
    assert path == tmp_path / "clip.mp4"
    back, fps = video.read_video(path)
    assert back.shape == frames.shape and back.dtype == np.uint8 and fps == 16
    error = np.abs(back.astype(int) - frames.astype(int)).mean()
    assert error < 3, error  # lossy (crf 10, 4:2:0 chroma), but the same picture
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


def test_keeps_sizes_that_are_not_multiples_of_16(tmp_path):
    back, _ = video.read_video(video.write_mp4(tmp_path / "a.mp4", _smooth_frames(2, 18, 34),
                                               fps=8))
    assert back.shape == (2, 18, 34, 3)


class _Boom(Exception):
    pass


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()],
                         ids=["failure", "interrupt"])
def test_a_broken_write_leaves_nothing(tmp_path, monkeypatch, error):
    """ffmpeg dying (or Ctrl-C) after two frames: no video, no temporary file; a video
    already at the target path is left as it was."""
    import imageio_ffmpeg

    real = imageio_ffmpeg.write_frames

    def failing(path, *args, **kwargs):
        writer = real(path, *args, **kwargs)
        writer.send(None)
        sent = 0
        while True:
            frame = yield
            if sent == 2:
                writer.close()
                raise error
            writer.send(frame)
            sent += 1

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", failing)
    target = tmp_path / "out.mp4"
    expected = VidaxError if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected):
        video.write_mp4(target, _smooth_frames(6, 16, 16), fps=16)
    assert list(tmp_path.iterdir()) == []

    target.write_bytes(b"an earlier video")
    with pytest.raises(expected):
        video.write_mp4(target, _smooth_frames(6, 16, 16), fps=16)
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]
    assert target.read_bytes() == b"an earlier video"


@pytest.mark.parametrize("frames,message", [
    (np.zeros((2, 16, 16, 3), np.float32), "must be uint8"),
    (np.zeros((2, 16, 16), np.uint8), "must be uint8"),
    (np.zeros((0, 16, 16, 3), np.uint8), "no frames"),
    (np.zeros((2, 15, 16, 3), np.uint8), "even frame size"),
])
def test_bad_frames(tmp_path, frames, message):
    with pytest.raises(VidaxError, match=message):
        video.write_mp4(tmp_path / "a.mp4", frames, fps=16)
    assert list(tmp_path.iterdir()) == []


def test_bad_paths(tmp_path):
    frames = _smooth_frames(1, 16, 16)
    with pytest.raises(VidaxError, match="must be an .mp4"):
        video.write_mp4(tmp_path / "a.avi", frames, fps=16)
    with pytest.raises(VidaxError, match="does not exist"):
        video.write_mp4(tmp_path / "missing" / "a.mp4", frames, fps=16)
    with pytest.raises(VidaxError, match="fps must be positive"):
        video.write_mp4(tmp_path / "a.mp4", frames, fps=0)
    with pytest.raises(VidaxError, match="no such video"):
        video.read_video(tmp_path / "none.mp4")
    (tmp_path / "junk.mp4").write_bytes(b"not a video")
    with pytest.raises(VidaxError, match="not a readable video"):
        video.read_video(tmp_path / "junk.mp4")
