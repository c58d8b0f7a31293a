"""vidax.video with sound: an mp4 with an AAC track (H.264 from imageio-ffmpeg as without
sound, the AAC stream and the mux through PyAV), 16-bit WAV files, and reading audio back.

Measured (1 s, stereo: 440 Hz at 0.5 and 660 Hz at 0.3, muxed with 9 frames at 9 fps): the
decoded AAC against the float input, sample-aligned (the decoder drops the encoder's 1024
priming samples by the file's edit list; the last frame's padding stays, so up to 1023 more
samples come back): SNR 27.7 dB at 48 kHz, 33.8 dB at 24 kHz; bound 20 dB. Negative controls
that must fail it: a 445 Hz left channel (-1.7 dB), and the input shifted by the 1024 priming
samples, as if they were not dropped (-4.2 dB at 48 kHz, -1.8 dB at 24 kHz).
"""

from __future__ import annotations

import wave

import numpy as np
import pytest

from vidax import video
from vidax.errors import VidaxError

FRAMES, FPS = 9, 9
SNR_DB = 20.0


def _frames() -> np.ndarray:
    t, y, x = np.meshgrid(np.arange(FRAMES), np.linspace(0, 1, 32), np.linspace(0, 1, 48),
                          indexing="ij")
    rgb = np.stack([np.sin(3 * x + 0.3 * t), np.cos(2 * y - 0.2 * t), np.sin(2 * (x + y))], -1)
    return ((0.5 + 0.4 * rgb) * 255).astype(np.uint8)


def _sines(rate: int, left_hz: float = 440.0) -> np.ndarray:
    t = np.arange(rate) / rate
    return np.stack([0.5 * np.sin(2 * np.pi * left_hz * t),
                     0.3 * np.sin(2 * np.pi * 660 * t + 0.3)]).astype(np.float32)


def _snr_db(decoded: np.ndarray, ref: np.ndarray) -> float:
    err = decoded[:, :ref.shape[1]] - ref
    return float(10 * np.log10((ref.astype(np.float64) ** 2).sum() / (err ** 2).sum()))


@pytest.fixture(scope="module", params=[48000, 24000], ids=["48k", "24k"])
def clip(request, tmp_path_factory):
    rate = request.param
    audio = _sines(rate)
    path = video.write_mp4(tmp_path_factory.mktemp(f"av{rate}") / "clip.mp4", _frames(), FPS,
                           audio=audio, sample_rate=rate)
    return path, audio, rate


def test_one_video_and_one_aac_stream(clip):
    import av

    path, audio, rate = clip
    with av.open(str(path)) as c:
        assert [s.type for s in c.streams] == ["video", "audio"]
        v, a = c.streams.video[0], c.streams.audio[0]
        assert (v.codec_context.name, v.codec_context.width, v.codec_context.height) == \
            ("h264", 48, 32)
        assert v.codec_context.pix_fmt == "yuv420p" and v.average_rate == FPS
        assert (a.codec_context.name, a.rate, a.codec_context.layout.name) == \
            ("aac", rate, "stereo")
    frames, fps = video.read_video(path)
    assert frames.shape == (FRAMES, 32, 48, 3) and fps == FPS
    assert np.abs(frames.astype(int) - _frames().astype(int)).mean() < 3


def test_the_decoded_sound_is_the_input(clip, record_property):
    path, audio, rate = clip
    decoded, got_rate = video.read_audio(path)
    assert got_rate == rate and decoded.dtype == np.float32 and decoded.shape[0] == 2
    assert 0 <= decoded.shape[1] - rate < 1024          # the last AAC frame's padding
    assert np.sqrt((decoded ** 2).mean()) > 0.2         # not silence
    snr = _snr_db(decoded, audio)
    wrong = _snr_db(decoded, _sines(rate, left_hz=445.0))
    shifted = _snr_db(decoded[:, 1024:], audio[:, :rate - 1024])
    record_property(f"aac_{rate}", {"snr_db": snr, "wrong_snr_db": wrong,
                                    "priming_shift_snr_db": shifted})
    print(f"AAC {rate} Hz: SNR {snr:.1f} dB; 445 Hz input {wrong:.1f} dB; "
          f"shifted by the priming {shifted:.1f} dB")
    assert snr > SNR_DB
    assert wrong < SNR_DB and shifted < SNR_DB            # the negative controls


def test_same_input_same_bytes(clip, tmp_path):
    path, audio, rate = clip
    again = video.write_mp4(tmp_path / "again.mp4", _frames(), FPS, audio=audio,
                            sample_rate=rate)
    assert again.read_bytes() == path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.mp4"]


def test_the_video_stream_is_the_one_written_without_sound(clip, tmp_path):
    """The H.264 packets are copied, not re-encoded: the same bytes as the silent file's."""
    import av

    path, _, _ = clip
    silent = video.write_mp4(tmp_path / "silent.mp4", _frames(), FPS)

    def packets(p):
        with av.open(str(p)) as c:
            return [bytes(k) for k in c.demux(c.streams.video[0]) if k.size]
    assert packets(path) == packets(silent)


def test_wav_round_trip_is_exact_to_16_bits(tmp_path):
    """Clipped, ``* 32767`` truncated to int16 (ltx-pipelines' quantisation); read back by
    PyAV at 1 / 32768: the int16 codes exactly, mono and stereo."""
    rng = np.random.default_rng(3)
    for channels, rate in [(2, 24000), (1, 16000)]:
        audio = rng.uniform(-1.2, 1.2, (channels, 3001)).astype(np.float32)
        codes = (np.clip(audio, -1, 1) * np.float32(32767)).astype(np.int16)
        path = video.write_wav(tmp_path / f"a{channels}.wav", audio, rate)
        with wave.open(str(path)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == \
                (channels, 2, rate, 3001)
        back, got = video.read_audio(path)
        assert got == rate and back.shape == audio.shape
        np.testing.assert_array_equal(back * 32768, codes.astype(np.float32))
        assert np.abs(back - np.clip(audio, -1, 1)).max() < 2 / 32768
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a1.wav", "a2.wav"]


_OK = _sines(24000)


@pytest.mark.parametrize("audio,rate,message", [
    (_OK.astype(np.int16), 24000, "must be float"),
    (_OK.T, 24000, r"looks like \[samples, channels\]"),
    (np.zeros((3, 100), np.float32), 24000, "1 or 2 channels"),
    (_OK[0], 24000, r"\[channels, samples\]"),
    (np.zeros((2, 0), np.float32), 24000, "no samples"),
    (np.where(np.arange(24000) == 5, np.nan, _OK).astype(np.float32), 24000, "NaN"),
    (np.where(np.arange(24000) == 5, np.inf, _OK).astype(np.float32), 24000, "infinite"),
    (_OK, 0, "positive integer"),
    (_OK, 24000.0, "positive integer"),
    (_OK, 12345, "AAC cannot store 12345 Hz"),
    (_OK, None, "go together"),
    (None, 24000, "go together"),
], ids=["int16", "samples-first", "3-channels", "1-d", "empty", "nan", "inf", "rate-0",
        "rate-float", "rate-aac", "no-rate", "no-audio"])
def test_bad_audio_is_refused_with_nothing_written(tmp_path, audio, rate, message):
    with pytest.raises(VidaxError, match=message):
        video.write_mp4(tmp_path / "a.mp4", _frames(), FPS, audio=audio, sample_rate=rate)
    if rate != 12345 and audio is not None and rate is not None:
        with pytest.raises(VidaxError, match=message):
            video.write_wav(tmp_path / "a.wav", audio, rate)
    assert list(tmp_path.iterdir()) == []


def test_wav_takes_any_rate_and_checks_its_path(tmp_path):
    video.write_wav(tmp_path / "odd.wav", _OK, 12345)
    assert video.read_audio(tmp_path / "odd.wav")[1] == 12345
    with pytest.raises(VidaxError, match="must be an .wav"):
        video.write_wav(tmp_path / "a.mp3", _OK, 24000)
    with pytest.raises(VidaxError, match="does not exist"):
        video.write_wav(tmp_path / "missing" / "a.wav", _OK, 24000)
    assert [p.name for p in tmp_path.iterdir()] == ["odd.wav"]


def test_a_failed_mux_leaves_the_target_as_it_was(tmp_path, monkeypatch):
    target = tmp_path / "out.mp4"
    target.write_bytes(b"old")

    def failing(video_path, out, pcm, rate):
        out.write_bytes(b"half")
        raise OSError("disk full")
    monkeypatch.setattr(video, "_mux_audio", failing)
    with pytest.raises(VidaxError, match="disk full.*nothing was written"):
        video.write_mp4(target, _frames(), FPS, audio=_OK, sample_rate=24000)
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]
    assert target.read_bytes() == b"old"


def test_reading_audio_needs_an_audio_stream(tmp_path):
    silent = video.write_mp4(tmp_path / "silent.mp4", _frames(), FPS)
    with pytest.raises(VidaxError, match="no audio stream"):
        video.read_audio(silent)
    with pytest.raises(VidaxError, match="no such file"):
        video.read_audio(tmp_path / "none.wav")
    (tmp_path / "junk.wav").write_bytes(b"not audio")
    with pytest.raises(VidaxError, match="not a readable audio file"):
        video.read_audio(tmp_path / "junk.wav")
