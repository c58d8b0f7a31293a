"""``vidax demo ltx2_5``: a tiny LTX-2.3 distilled release in the authors' single-file layout
(tests/test_demo.py covers what every demo shares), generated with sound.

Fast: the folder's files, their dtypes and metadata sections, and each component of the single
file verified 1:1 from the CLI under its own prefix. Slow: the demo run (two stages and the
audio decode) writes an mp4 whose H.264 stream has the requested frames, size and rate and whose
AAC stream is stereo at the vocoder's 48 kHz, as long as the vocoder's waveform (AAC's last
frame padding aside); that waveform, made again in Python from the same release and seed, is
what the file's audio decodes to within the codec's loss, and it is not silence; the printed
command writes the same mp4 byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors  # noqa: E402

from vidax import cli, demo  # noqa: E402
from vidax.demo import ltx2_5 as module  # noqa: E402
from vidax.video import read_audio, read_video  # noqa: E402

PREFIXES = {"dit": "model.diffusion_model.", "vae": "vae.", "audio_vae": "audio_vae.",
            "vocoder": "vocoder.", "text_projection": "text_embedding_projection."}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ltx2") / module.FOLDER
    module.write(folder)
    return folder


def test_writes_the_authors_single_file(written):
    with safetensors.safe_open(str(written / module.SINGLE), "np") as f:
        keys, metadata = set(f.keys()), f.metadata()
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    assert dtypes == {"BF16"}
    for component, prefix in PREFIXES.items():
        assert any(k.startswith(prefix) for k in keys), component
    assert all(k.startswith(tuple(PREFIXES.values())) for k in keys)
    config = json.loads(metadata["config"])
    assert set(config) == {"transformer", "vae", "audio_vae", "vocoder"}
    assert metadata["model_version"].startswith("2.3")
    gemma = written / "gemma-3-12b-it-qat-q4_0-unquantized"
    assert json.loads((gemma / "config.json").read_text())["model_type"] == "gemma3"
    assert (gemma / "tokenizer.json").is_file()


def test_every_component_verifies_from_the_cli(written, capsys):
    for component, file in module.COMPONENTS:
        target = "gemma" if component == "text_encoder" else "ltx2_5"
        path = written / file
        # the projection's input width is its Gemma's: a file alone gives ltx-core's fixed
        # Gemma 3 12B (3840 x 49), --variant tiny the demo's
        tiny = ["--variant", "tiny"] if component == "text_projection" else []
        rc = cli.main(["verify", target, "--component", component, *tiny, "--checkpoint",
                       str(path.parent if component == "text_encoder" else path)])
        out = " ".join(capsys.readouterr().out.split())
        assert rc == 0, (component, out)
        n, total = out.split("matched ")[1].split(" tensors")[0].split("/")
        assert n == total, out


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    from io import StringIO

    from rich.console import Console

    root = tmp_path_factory.mktemp("ltx2_run")
    buffer = StringIO()
    video = demo.run("ltx2_5", out=str(root / "demo.mp4"), cache_dir=str(root / "cache"),
                     console=Console(file=buffer, width=100, highlight=False))
    return root / "cache" / module.FOLDER, video, video.read_bytes(), buffer.getvalue()


def _option(name: str) -> str:
    return module.GENERATE[module.GENERATE.index(name) + 1]


@pytest.mark.slow
def test_demo_writes_video_and_sound(ran, tmp_path):
    import vidax

    folder, video, _, printed = ran
    frames, fps = read_video(video)
    width, height = map(int, _option("--size").split("x"))
    assert frames.shape == (int(_option("--frames")), height, width, 3)
    assert fps == float(_option("--fps")) and frames.std() > 1
    assert str(video) in printed
    audio, rate = read_audio(video)
    # the waveform the file was made from: the same release, request and seed, in Python
    pipe = vidax.pipeline("ltx2_5", folder)
    again = pipe(_option("--prompt"), frames=int(_option("--frames")), size=(width, height),
                 fps=fps, seed=int(_option("--seed")))
    assert again.shape == frames.shape        # (the file's frames went through H.264)
    wave = pipe.audio
    assert rate == pipe.sample_rate == 48000 and audio.shape[0] == wave.shape[0] == 2
    # the decoder drops AAC's priming samples; its last frame's padding stays (< 1024)
    assert wave.shape[1] <= audio.shape[1] < wave.shape[1] + 1024
    decoded = audio[:, :wave.shape[1]]
    assert np.abs(wave).max() > 1e-2                           # not silence
    # AAC keeps a waveform where its psychoacoustic model spends bits; the random-weight
    # vocoder makes broadband noise, so compare below 4 kHz (measured: 16.5 dB there, 5.5 dB
    # over the whole band; sines keep 28 dB, tests/test_video_audio.py)
    freqs = np.fft.rfftfreq(wave.shape[1], 1 / rate)

    def low(x):
        spectrum = np.fft.rfft(x)
        spectrum[..., freqs >= 4000] = 0
        return np.fft.irfft(spectrum, n=x.shape[-1])

    def snr(x):
        return -10 * np.log10(np.sum((low(x) - low(wave)) ** 2) / np.sum(low(wave) ** 2))

    assert snr(decoded) > 10, f"AAC round trip SNR below 4 kHz {snr(decoded):.1f} dB"
    assert snr(np.roll(wave, 4800, axis=1)) < 3                # negative control
    # the WAV file: the waveform to 16 bits
    wav, wav_rate = read_audio(pipe.write_audio(tmp_path / "demo.wav"))
    assert wav_rate == rate and wav.shape == wave.shape
    # int16 codes of x * 32767 (truncated, as ltx-pipelines), read back as code / 32768
    np.testing.assert_allclose(wav, wave, rtol=0, atol=2 / 32767)


@pytest.mark.slow
def test_printed_command_reproduces_the_file(ran, capsys, tmp_path):
    folder, video, first, printed = ran
    line = next(ln for ln in printed.splitlines() if ln.startswith("running: "))
    argv = shlex.split(line[len("running: "):])[1:]
    out = tmp_path / "again.mp4"
    argv[argv.index("--out") + 1] = str(out)
    assert cli.main([*argv, "--audio-out", str(tmp_path / "again.wav")]) == 0
    capsys.readouterr()
    assert out.read_bytes() == first
    wav, rate = read_audio(tmp_path / "again.wav")
    assert rate == 48000 and wav.shape[0] == 2


# ----------------------------------------------------------------------------- bad input
def _copy(written, tmp_path):
    import shutil

    folder = tmp_path / "release"
    shutil.copytree(written, folder)
    return folder


def test_single_file_missing_a_component_names_file_and_prefix(written, tmp_path):
    """A single file without its ``vocoder.`` tensors is refused before anything loads."""
    import safetensors.numpy

    from vidax.errors import VidaxError
    from vidax.pipelines import ltx2_5 as ltx2

    folder = _copy(written, tmp_path)
    path = folder / module.SINGLE
    with safetensors.safe_open(str(path), "np") as f:
        metadata = f.metadata()
    tensors = {k: v for k, v in safetensors.numpy.load_file(str(path)).items()
               if not k.startswith("vocoder.")}
    safetensors.numpy.save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(VidaxError) as info:
        ltx2.inspect_folder(folder)
    message = str(info.value)
    assert str(path) in message and "'vocoder.'" in message and "Nothing was loaded" in message
    assert ltx2.inspect_folder(written).variant == "2.3-22b-distilled"   # the intact one


def test_missing_text_encoder_is_named(written, tmp_path):
    import shutil

    from vidax.errors import VidaxError
    from vidax.pipelines import ltx2_5 as ltx2

    folder = _copy(written, tmp_path)
    shutil.rmtree(folder / "gemma-3-12b-it-qat-q4_0-unquantized")
    with pytest.raises(VidaxError, match="missing the Gemma 3 folder"):
        ltx2.inspect_folder(folder)


# ----------------------------------------------------------------------------- LTX-2.5
@pytest.fixture(scope="module")
def split(tmp_path_factory):
    from vidax.demo import ltx2_5_split

    folder = tmp_path_factory.mktemp("ltx2_5") / ltx2_5_split.FOLDER
    ltx2_5_split.write(folder)
    return ltx2_5_split, folder


def test_split_release_files_and_dtypes(split, capsys):
    """The transformer keeps its scale/shift tables float32 beside bfloat16 (as released), the
    text-encoder file carries the tokenizer and HF files as uint8 tensors and the stamped HF
    config; every component verifies 1:1 from the CLI."""
    mod, folder = split
    with safetensors.safe_open(str(folder / mod.DIT), "np") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118
        metadata = f.metadata()
    assert {d for k, d in dtypes.items() if "scale_shift_table" in k} == {"F32"}
    assert {d for k, d in dtypes.items() if "scale_shift_table" not in k} == {"BF16"}
    assert json.loads(metadata["gemma_source_checkpoint"])["gemma_version"] == mod.GEMMA_VERSION
    with safetensors.safe_open(str(folder / mod.TEXT), "np") as f:
        assert f.get_slice("tokenizer_json").get_dtype() == "U8"
        assert json.loads(f.metadata()["gemma_config"])["gemma_version"] == mod.GEMMA_VERSION
    for component, file in mod.COMPONENTS:
        tiny = ["--variant", "tiny"] if component == "text_projection" else []
        rc = cli.main(["verify", "ltx2_5", "--component", component, *tiny, "--checkpoint",
                       str(folder / file)])
        out = " ".join(capsys.readouterr().out.split())
        assert rc == 0, (component, out)


def test_split_release_with_a_stock_gemma4_is_refused(split, tmp_path):
    """LTX-2.5's DiT names the Gemma it was trained with; a text encoder without LTX's
    ``gemma_version`` stamp (a stock Gemma 4) is refused naming both files."""
    import safetensors.numpy

    from vidax.errors import VidaxError
    from vidax.pipelines import ltx2_5 as ltx2

    mod, written = split
    folder = _copy(written, tmp_path)
    path = folder / mod.TEXT
    with safetensors.safe_open(str(path), "np") as f:
        metadata = f.metadata()
    config = json.loads(metadata["gemma_config"])
    del config["gemma_version"]
    safetensors.numpy.save_file(safetensors.numpy.load_file(str(path)), str(path),
                                metadata={**metadata, "gemma_config": json.dumps(config)})
    with pytest.raises(VidaxError) as info:
        ltx2.inspect_folder(folder)
    message = str(info.value)
    assert str(path) in message and mod.DIT in message and "stock Gemma" in message
    assert ltx2.inspect_folder(written).version == "2.5"           # the stamped one


def test_split_release_without_its_audio_file(split, tmp_path):
    from vidax.errors import VidaxError
    from vidax.pipelines import ltx2_5 as ltx2

    mod, written = split
    folder = _copy(written, tmp_path)
    (folder / mod.AUDIO).unlink()
    with pytest.raises(VidaxError, match=r"missing vae/ltx-2\.5-audio-vae-bf16\.safetensors"):
        ltx2.inspect_folder(folder)


@pytest.mark.slow
def test_split_demo_writes_video_and_sound(tmp_path):
    from io import StringIO

    from rich.console import Console

    video = demo.run("ltx2_5-2.5", out=str(tmp_path / "demo.mp4"),
                     cache_dir=str(tmp_path / "cache"),
                     console=Console(file=StringIO(), width=100, highlight=False))
    frames, fps = read_video(video)
    assert frames.shape == (9, 64, 128, 3) and fps == 24.0 and frames.std() > 1
    audio, rate = read_audio(video)
    assert rate == 48000 and audio.shape[0] == 2 and audio.shape[1] >= 9 / 24 * 48000 * 0.8
    assert np.abs(audio).max() > 1e-2
    # the release's video VAE is the diffusion decoder; the conv file decodes on request
    import vidax
    from vidax.errors import VidaxError

    pipe = vidax.pipeline("ltx2_5", tmp_path / "cache" / "LTX-2.5-tiny")
    assert pipe.release.specs["vae"].component == "video_vae"
    request = pipe.request("a fox", frames=9, size=(128, 64), fps=24.0)
    latents, _ = pipe.sample(request=request)
    diffusion = pipe.decode(latents, request)
    conv = pipe.decode(latents, dataclasses.replace(request, video_decoder="conv"))
    assert diffusion.shape == conv.shape == (9, 64, 128, 3)
    assert np.abs(diffusion.astype(int) - conv.astype(int)).mean() > 5
    with pytest.raises(VidaxError, match="video_decoder must be"):
        pipe.request("a fox", video_decoder="nadiffusion")


def test_sound_options_are_checked_before_loading(written, tmp_path, capsys):
    base = ["generate", "ltx2_5", "--checkpoint-dir", str(written), "--prompt", "a fox",
            "--out", str(tmp_path / "x.mp4")]
    for extra, message in ((["--no-audio", "--audio-out", str(tmp_path / "x.wav")],
                            "pass one"),
                           (["--audio-out", str(tmp_path / "x.mp3")], "must be a .wav"),
                           (["--audio-out", str(tmp_path / "none" / "x.wav")],
                            "does not exist")):
        assert cli.main([*base, *extra]) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert message in err and "loading" not in err, err
    assert not (tmp_path / "x.mp4").exists()


def test_memory_is_estimated_before_loading(written, split):
    """The request's estimate counts the DiT step and the video decode (conv, and the 2.5
    diffusion decoder), from the configs alone; an impossible size is refused with it."""
    from vidax.errors import MemoryEstimateError
    from vidax.pipelines import ltx2_5 as ltx2

    for folder in (written, split[1]):
        release = ltx2.inspect_folder(folder)
        request = ltx2.make_request(release.task, release.variant, "a fox", frames=9,
                                    size=(128, 64), release=release)
        estimate = ltx2.Pipeline.check_memory(release, request, enforce=False)
        assert {"VAE decode"} <= set(estimate.phases) and estimate.fits
        big = ltx2.make_request(release.task, release.variant, "a fox", frames=2001,
                                size=(8192, 8192), release=release)
        with pytest.raises(MemoryEstimateError, match="Nothing was loaded"):
            ltx2.Pipeline.check_memory(release, big)
