"""vidax's LTX-2.x vocoders (``vidax.models.ltx2_audio.vocoder``) against the authors' ltx-core
1.0.0 (``ltx_core.model.audio_vae``: ``Vocoder`` / ``VocoderWithBWE`` built by
``VocoderConfigurator``).

Oracles (DESIGN.md §6): for each kind -- the 19B HiFi-GAN (flat ``config["vocoder"]``) and the
2.3 / 2.5 BigVGAN-v2 + bandwidth extension (``{"vocoder", "bwe"}``) -- ltx-core's tiny model
with random values in every parameter, its own kaiser anti-alias filters, a Hann-windowed DFT
``forward_basis`` and a random non-negative ``mel_basis`` (ltx-core leaves both at zero for
the checkpoint to fill), written as a release file's ``vocoder.*`` with the config in the
metadata. The reference is rebuilt from that file through ltx-core's
``VOCODER_COMFY_KEYS_FILTER``; vidax loads it with ``vidax.load`` and no config.

Measured: the waveform of a stereo mel [2, 2, T, 64] (N(0, 1)), float32, matmul precision
"highest", bound max |vidax - reference| <= 1e-4 x std(reference). Negative controls that
must fail it: the 19B's first ConvTranspose1d weight with its taps reversed (a transposed
convolution computed as a plain correlation), the 19B's final leaky ReLU at slope 0.1 instead
of ``nn.LeakyReLU()``'s 0.01, and SnakeBeta's alpha and beta exchanged in one BWE activation.

Structure at full size: every ``ltx2_5`` vocoder manifest verifies 1:1 and its ``config``
gives the preset.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
# ltx_core (requirements/reference.txt) is a required oracle: imported plainly.
import ltx_core  # noqa: F401
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.reference.ltx2 import import_ltx_audio
from tests.parity import assert_fails, assert_parity, edited_copy, randomize, swap
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx2_audio import vocoder as voc
from vidax.models.ltx2_audio.config import LTX2VocoderConfig

jax.config.update("jax_default_matmul_precision", "highest")

import_ltx_audio()    # ltx_core.model.audio_vae without torchaudio (tests/reference/ltx2.py)

_AMP = {"resblock": "AMP1", "stereo": True, "activation": "snakebeta",
        "use_tanh_at_final": False, "use_bias_at_final": False,
        "resblock_kernel_sizes": [3, 5], "resblock_dilation_sizes": [[1, 3, 5], [1, 2, 3]],
        "upsample_initial_channel": 16}
# The tiny configs as a release file's metadata carries them (LTX2VocoderConfig.tiny*).
CONFIGS = {
    "hifigan": {"resblock_kernel_sizes": [3, 5], "upsample_rates": [3, 2],
                "upsample_kernel_sizes": [7, 4],
                "resblock_dilation_sizes": [[1, 3, 5], [1, 2, 3]],
                "upsample_initial_channel": 16, "stereo": True, "resblock": "1",
                "output_sampling_rate": 24000},
    "bwe": {"vocoder": {**_AMP, "upsample_rates": [2, 2], "upsample_kernel_sizes": [4, 4]},
            "bwe": {**_AMP, "upsample_rates": [5, 3, 2], "upsample_kernel_sizes": [11, 5, 4],
                    "apply_final_activation": False, "input_sampling_rate": 16000,
                    "output_sampling_rate": 48000, "hop_length": 10, "n_fft": 32,
                    "win_size": 32, "num_mels": 64}},
}
PRESETS = {"hifigan": LTX2VocoderConfig.tiny(), "bwe": LTX2VocoderConfig.tiny_bwe()}
# mel frames: HiFi-GAN x6 -> 60 samples; BWE x4 -> 48 at 16 kHz (padded to 50, 5 BWE frames)
# -> 144 at 48 kHz
FRAMES = {"hifigan": 10, "bwe": 12}


def _stft_basis(n_fft: int):
    """A causal-Hann-windowed DFT as ltx-core's ``_STFTFn`` reads it: [2 * n_freqs, 1, n_fft],
    the real rows, then the imaginary ones."""
    import torch

    n, k = torch.arange(n_fft, dtype=torch.float64), torch.arange(n_fft // 2 + 1)[:, None]
    window = torch.hann_window(n_fft, dtype=torch.float64)
    angle = 2 * torch.pi * k * n / n_fft
    return torch.cat([torch.cos(angle) * window, -torch.sin(angle) * window]).float()[:, None]


def _write_release(kind: str, path: Path) -> Path:
    import safetensors.torch
    import torch
    from ltx_core.model.audio_vae import VocoderConfigurator

    config = {"vocoder": CONFIGS[kind]}
    model = VocoderConfigurator.from_config(config)
    randomize(model.named_parameters(), seed=1)
    state = model.state_dict()
    if kind == "bwe":
        # smaller outputs, so that the clamps to [-1, 1] cut few samples
        for key in ("vocoder.conv_post.weight", "bwe_generator.conv_post.weight"):
            state[key] = state[key] * 0.1
        n_fft = CONFIGS[kind]["bwe"]["n_fft"]
        gen = torch.Generator().manual_seed(2)
        state["mel_stft.stft_fn.forward_basis"] = _stft_basis(n_fft)
        state["mel_stft.stft_fn.inverse_basis"] = torch.randn(
            state["mel_stft.stft_fn.inverse_basis"].shape, generator=gen)
        state["mel_stft.mel_basis"] = torch.rand(state["mel_stft.mel_basis"].shape,
                                                 generator=gen) / 4
    tensors = {f"vocoder.{k}": v.contiguous() for k, v in state.items()}
    safetensors.torch.save_file(tensors, str(path), metadata={"config": json.dumps(config)})
    return path


def _reference(path: Path):
    import safetensors.torch
    from ltx_core.model.audio_vae import VOCODER_COMFY_KEYS_FILTER, VocoderConfigurator

    config = json.loads(safetensors.safe_open(str(path), "pt").metadata()["config"])
    model = VocoderConfigurator.from_config(config)
    stored = safetensors.torch.load_file(str(path))
    ops = VOCODER_COMFY_KEYS_FILTER
    state = {r.new_key: r.new_value for k, v in stored.items() if ops.apply_to_key(k)
             for r in ops.apply_to_key_value(ops.apply_to_key(k), v)}
    model.load_state_dict(state, strict=True)
    return model.eval()


@nnx.jit
def _run(model, mel):
    return model(mel)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """``cases(kind)``: the release file, the mel, ltx-core's waveform and the model."""
    import torch

    made = {}

    def get(kind: str) -> dict:
        if kind not in made:
            path = _write_release(kind, tmp_path_factory.mktemp(kind) / "ltx-2-test.safetensors")
            ref = _reference(path)
            mel = np.random.default_rng(3).standard_normal(
                (2, 2, FRAMES[kind], 64)).astype(np.float32)
            with torch.no_grad():
                wave = ref(torch.from_numpy(mel)).numpy()
            made[kind] = {"path": path, "ref": ref, "mel": mel, "wave": wave}
        return made[kind]
    return get


# HiFi-GAN in the fast lane; the BWE kind (about 10 s: its fixture and compile) in CI.
KINDS = ["hifigan", pytest.param("bwe", marks=pytest.mark.slow)]


@pytest.mark.parametrize("kind", KINDS)
def test_config_comes_from_the_file_metadata(cases, kind):
    import safetensors

    path = cases(kind)["path"]
    spec = registry.get("ltx2_5", "vocoder", "original")
    with safetensors.safe_open(str(path), "np") as f:
        cfg = spec.config_from_file_metadata(f.metadata(), str(path))
    assert cfg == LTX2VocoderConfig.from_dict(CONFIGS[kind]) == PRESETS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_waveform_matches_ltx_core(cases, kind, record_property):
    case = cases(kind)
    model = vidax.load("ltx2_5", "vocoder", case["path"])
    wave = _run(model, case["mel"])
    frames = FRAMES[kind]
    assert wave.dtype == np.float32
    assert wave.shape == case["wave"].shape == (2, 2, model.num_samples(frames))
    assert model.num_samples(frames) == frames * model.samples_per_frame
    assert model.sample_rate == case["ref"].output_sampling_rate
    # not saturated: the clamp / tanh would hide differences
    assert np.mean(np.abs(case["wave"]) > 0.999) < 0.05
    assert_parity(f"vocoder_{kind}", np.asarray(wave), case["wave"], record_property)


def test_negative_control_conv_transpose_as_correlation(cases, tmp_path, record_property):
    """The 19B ``ups.0`` taps reversed: a transposed conv without its flip must fail."""
    case = cases("hifigan")

    def reverse(tensors):
        key = "vocoder.ups.0.weight"
        tensors[key] = np.ascontiguousarray(tensors[key][..., ::-1])
    bad = edited_copy(case["path"], tmp_path / "reversed.safetensors", reverse)
    assert_fails("vocoder_hifigan_negative_taps",
                 np.asarray(_run(vidax.load("ltx2_5", "vocoder", bad), case["mel"])),
                 case["wave"], record_property)


def test_negative_control_mapper_without_conv_transpose_layout(monkeypatch):
    """Without its conv_transpose rule the mapper gives ups.* the Conv1d layout [k, out, in]:
    the 19B manifest no longer verifies (every upsampler mis-shaped)."""
    import dataclasses

    from vidax.translator.mapping import Transform
    from vidax.translator.mappings import ltx2_audio

    rules = tuple(r for r in ltx2_audio.VOCODER.rules if not isinstance(r, Transform))
    monkeypatch.setattr(ltx2_audio, "VOCODER", dataclasses.replace(ltx2_audio.VOCODER, rules=rules))
    report = verify_manifest(get_manifest("ltx2_5/2.0-19b-dev__vocoder"))
    assert not report.ok
    assert sorted(m[1] for m in report.mismatched) == [f"ups.{i}.weight" for i in range(5)]


def test_negative_control_final_leaky_slope(cases, monkeypatch, record_property):
    """HiFi-GAN's act_post is ``nn.LeakyReLU()`` (0.01), not the resblocks' 0.1."""
    case = cases("hifigan")
    monkeypatch.setattr(voc, "FINAL_LRELU_SLOPE", voc.LRELU_SLOPE)
    model = vidax.load("ltx2_5", "vocoder", case["path"])
    assert_fails("vocoder_hifigan_negative_slope", np.asarray(model(case["mel"])),
                 case["wave"], record_property)


@pytest.mark.slow
def test_negative_control_snake_alpha_beta_swapped(cases, tmp_path, record_property):
    case = cases("bwe")
    act = "vocoder.bwe_generator.resblocks.0.acts1.0.act."
    bad = edited_copy(case["path"], tmp_path / "swapped.safetensors",
                      swap((act + "alpha", act + "beta")))
    assert_fails("vocoder_bwe_negative_snake",
                 np.asarray(_run(vidax.load("ltx2_5", "vocoder", bad), case["mel"])),
                 case["wave"], record_property)


@pytest.mark.slow
def test_filters_are_ltx_cores(cases):
    """The stored anti-alias filters load unchanged and equal what ltx-core computes (so
    does vidax's own fallback); the BWE's Hann resampler (not stored) equals ltx-core's."""
    import torch
    from ltx_core.model.audio_vae.vocoder import UpSample1d, kaiser_sinc_filter1d

    model = vidax.load("ltx2_5", "vocoder", cases("bwe")["path"])
    want = kaiser_sinc_filter1d(0.25, 0.3, 12).numpy()
    act = model.bwe_generator.resblocks[1].acts2[2]
    np.testing.assert_array_equal(np.asarray(act.upsample.filter[...]), want)
    np.testing.assert_array_equal(np.asarray(act.downsample.lowpass.filter[...]), want)
    np.testing.assert_allclose(voc.kaiser_sinc_filter(0.25, 0.3, 12), want.reshape(-1),
                               rtol=0, atol=1e-7)
    with torch.device("cpu"):
        hann = UpSample1d(ratio=3, persistent=False, window_type="hann").filter.numpy()
    np.testing.assert_allclose(voc.hann_resample_filter(3), hann.reshape(-1), rtol=0, atol=1e-7)


@pytest.mark.slow
def test_bfloat16_weights_compute_in_float32(cases):
    """Stored bfloat16 (the releases): the forward is float32 all the same -- the same
    numbers as the weights upcast first."""
    case = cases("hifigan")
    low = vidax.load("ltx2_5", "vocoder", case["path"], dtype="bfloat16")
    graphdef, state = nnx.split(low)
    assert {leaf.dtype for leaf in jax.tree.leaves(state)} == {jnp.dtype(jnp.bfloat16)}
    high = nnx.merge(graphdef, jax.tree.map(lambda a: a.astype(jnp.float32), state))
    wave = _run(low, case["mel"])
    assert wave.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(wave), np.asarray(_run(high, case["mel"])))


def test_bad_input_is_refused():
    model = nnx.eval_shape(lambda: voc.LTX2Vocoder(LTX2VocoderConfig.tiny()))
    with pytest.raises(VidaxError, match=r"\[B, 2, T, 64\]"):
        model(np.zeros((1, 10, 64), np.float32))


# ----------------------------------------------------------------------------- configs
def test_from_dict_refuses_what_ltx_core_refuses_or_ignores():
    flat = CONFIGS["hifigan"]
    with pytest.raises(VidaxError, match="stereo"):
        LTX2VocoderConfig.from_dict({k: v for k, v in flat.items() if k != "stereo"})
    with pytest.raises(VidaxError, match="resblock"):
        LTX2VocoderConfig.from_dict({**flat, "resblock": "2"})
    with pytest.raises(VidaxError, match="unknown"):
        LTX2VocoderConfig.from_dict({**flat, "upsample_factors": [3, 2]})
    nested = CONFIGS["bwe"]
    with pytest.raises(VidaxError, match="win_size"):
        LTX2VocoderConfig.from_dict({**nested, "bwe": {**nested["bwe"], "win_size": 16}})
    with pytest.raises(VidaxError, match="activation"):
        LTX2VocoderConfig.from_dict({**nested, "vocoder": {**nested["vocoder"],
                                                           "activation": "snake"}})
    with pytest.raises(VidaxError, match="samples per mel frame"):
        LTX2VocoderConfig.from_dict({**nested, "bwe": {**nested["bwe"], "hop_length": 8}})


VOCODER_MANIFESTS = sorted(m.name for m in all_manifests()
                           if m.name.startswith("ltx2_5/") and m.name.endswith("__vocoder"))


def test_manifest_coverage():
    assert len(VOCODER_MANIFESTS) == 5, VOCODER_MANIFESTS


@pytest.mark.parametrize("name", VOCODER_MANIFESTS)
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, report.headline()
    bwe = "2.0-19b" not in name
    assert report.num_tensors == (1227 if bwe else 194)
    assert report.matched == (1226 if bwe else 194)
    assert list(report.ignored) == (["mel_stft.stft_fn.inverse_basis"] if bwe else [])
    config = LTX2VocoderConfig.from_dict(manifest.config["instantiated_with"])
    assert config == (LTX2VocoderConfig.ltx2_3_22b() if bwe else LTX2VocoderConfig.ltx2_19b())
    assert (config.sample_rate, config.samples_per_frame) == ((48000, 480) if bwe
                                                              else (24000, 240))
