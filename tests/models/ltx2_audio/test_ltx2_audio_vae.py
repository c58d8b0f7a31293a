"""vidax's LTX-2.x audio VAE against the authors' ltx-core 1.0.0 (``ltx_core.model.audio_vae``:
``AudioEncoder`` / ``AudioDecoder`` built by ``AudioEncoderConfigurator`` /
``AudioDecoderConfigurator``).

Oracle (DESIGN.md §6): ltx-core's tiny encoder and decoder (the released structure: 3 levels,
2 resnets, pixel norm, causal in time, no attention; 16 -> 64 wide, 4 x 4 latents from 2 x 16
mels) with random values in every tensor and statistics buffer, written as LTX-2.5's audio
file would hold them (``audio_vae.encoder.*``, ``audio_vae.decoder.*``,
``audio_vae.per_channel_statistics.*`` beside a ``vocoder.*`` tensor, ``{"audio_vae": ...,
"vocoder": ...}`` in the metadata). The references are rebuilt from that file through
ltx-core's own key filters (``AUDIO_VAE_{ENCODER,DECODER}_COMFY_KEYS_FILTER``); vidax loads
it with ``vidax.load`` and no config.

Measured, float32, matmul precision "highest", bound max |vidax - reference| <= 1e-4 x
std(reference): the encoder's means (ltx-core's own layers up to the ``double_z`` split) and
its normalised output (vidax ``normalize(encode(mel))``) for a batch of 2 mels of 18 frames;
the decode of normalised 1 x 4 x 5 x 4 latents (vidax ``decode_normalized``, 17 mel frames).
Negative controls that must fail the bound: every causal conv padded symmetrically in time;
two decoder convs swapped in the file; the statistics applied in frequency-major token order;
(mel) an HTK-scale filter bank instead of Slaney's.

Mel front end: vidax's ``waveform_to_mel`` against ltx-core's ``AudioProcessor`` where
torchaudio is installed, else against ``torch.stft`` with transformers' Slaney filter bank
(``transformers.audio_utils.mel_filter_bank``), the same definition read independently; the
resampler against torchaudio's ``functional.resample`` where installed, and everywhere on
band-limited tones (and a 10 kHz tone it must remove).
ltx-core's package imports torchaudio, which is not a dependency: where it is missing a stand-in
module is registered so the VAE classes import (they do not use it).

Structure at full size: the five ``ltx2_5/*__audio_vae`` manifests verify 1:1 and their
``config`` gives the preset.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jax
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from flax import nnx

import vidax
from tests.reference.ltx2 import import_ltx_audio
from tests.parity import assert_fails, assert_parity, edited_copy, randomize, swap
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx2_audio import audio_vae as av
from vidax.models.ltx2_audio.config import LTX2AudioVAEConfig

jax.config.update("jax_default_matmul_precision", "highest")

# a real torchaudio (tests/reference/ltx2.py's stand-in never outlives ltx-core's import)
HAS_TORCHAUDIO = importlib.util.find_spec("torchaudio") is not None


def _import_ltx_audio():
    """``ltx_core.model.audio_vae``, imported as tests/reference/ltx2.py says (without
    torchaudio a stand-in serves the import only)."""
    import_ltx_audio()
    return importlib.import_module("ltx_core.model.audio_vae")


def _mel_filter_bank_of_transformers():
    """``transformers.audio_utils.mel_filter_bank``."""
    from transformers.audio_utils import mel_filter_bank

    return mel_filter_bank


ltx_audio = _import_ltx_audio()

MEL = (2, 2, 18, 16)        # [B, C, T, mel_bins] -> latents [2, 4, 5, 4]
LATENTS = (1, 4, 5, 4)      # -> mel [1, 2, 17, 16]
TINY = {"model": {"params": {"ddconfig": {
    "double_z": True, "mel_bins": 16, "z_channels": 4, "resolution": 256, "in_channels": 2,
    "out_ch": 2, "ch": 16, "ch_mult": [1, 2, 4], "num_res_blocks": 2, "attn_resolutions": [],
    "dropout": 0.0, "mid_block_add_attention": False, "norm_type": "pixel",
    "causality_axis": "height"}, "sampling_rate": 16000}}}
VOCODER = {"vocoder": {"resblock": "AMP1"}, "bwe": {"resblock": "AMP1"}}


def _write_release(path: Path) -> Path:
    """ltx-core's tiny encoder + decoder, random everywhere, as LTX-2.5's audio file."""
    import safetensors.torch
    import torch

    config = {"audio_vae": TINY}
    encoder = ltx_audio.AudioEncoderConfigurator.from_config(config)
    decoder = ltx_audio.AudioDecoderConfigurator.from_config(config)
    randomize(encoder.named_parameters(), seed=1)
    randomize(decoder.named_parameters(), seed=2)
    gen = torch.Generator().manual_seed(3)
    width = TINY["model"]["params"]["ddconfig"]["ch"]
    stats = {"mean-of-means": torch.randn(width, generator=gen),
             "std-of-means": 0.5 + torch.rand(width, generator=gen)}
    tensors = {f"audio_vae.per_channel_statistics.{k}": v for k, v in stats.items()}
    for part, module in (("encoder", encoder), ("decoder", decoder)):
        tensors.update({f"audio_vae.{part}.{k}": v for k, v in module.state_dict().items()
                        if not k.startswith("per_channel_statistics.")})
    tensors["vocoder.vocoder.conv_pre.weight"] = torch.randn(8, 32, 7, generator=gen)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
                                metadata={"config": json.dumps({**config, "vocoder": VOCODER})})
    return path


def _references(path: Path):
    """ltx-core's encoder and decoder rebuilt from the file through its own key filters."""
    import safetensors.torch

    config = json.loads(safetensors.safe_open(str(path), "pt").metadata()["config"])
    stored = safetensors.torch.load_file(str(path))
    models = []
    for configurator, keys in (
            (ltx_audio.AudioEncoderConfigurator, ltx_audio.AUDIO_VAE_ENCODER_COMFY_KEYS_FILTER),
            (ltx_audio.AudioDecoderConfigurator, ltx_audio.AUDIO_VAE_DECODER_COMFY_KEYS_FILTER)):
        model = configurator.from_config(config)
        state = {keys.apply_to_key(k): v for k, v in stored.items()
                 if keys.apply_to_key(k) is not None}
        model.load_state_dict(state, strict=True)
        models.append(model.eval())
    return models


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The release file, the inputs and ltx-core's outputs."""
    import torch

    from ltx_core.model.audio_vae.audio_vae import run_mid_block

    path = _write_release(tmp_path_factory.mktemp("audio_vae") / "ltx-2.5-audio-vae-bf16"
                          ".safetensors")
    encoder, decoder = _references(path)
    rng = np.random.default_rng(4)
    mel = rng.normal(-4.0, 2.0, MEL).astype(np.float32)       # log-mel-like values
    latents = rng.standard_normal(LATENTS).astype(np.float32)
    with torch.no_grad():
        x = torch.from_numpy(mel)
        h = encoder._finalize_output(run_mid_block(
            encoder.mid, encoder._run_downsampling_path(encoder.conv_in(x))))
        expected = {"means": torch.chunk(h, 2, dim=1)[0].numpy(),
                    "encoded": encoder(x).numpy(),
                    "decoded": decoder(torch.from_numpy(latents)).numpy()}
    return {"path": path, "mel": mel, "latents": latents, **expected}


@nnx.jit
def _encode(vae, mel):
    means = vae.encode(mel)
    return means, vae.normalize(means)


@nnx.jit
def _decode(vae, latents):
    return vae.decode_normalized(latents)


def _load(path):
    return vidax.load("ltx2_5", "audio_vae", path)


# ----------------------------------------------------------------------------- parity
def test_config_comes_from_the_file_metadata(case):
    spec = registry.get("ltx2_5", "audio_vae", "original")
    with safetensors.safe_open(str(case["path"]), "np") as f:
        cfg = spec.config_from_file_metadata(f.metadata(), str(case["path"]))
    assert cfg == LTX2AudioVAEConfig.tiny() == LTX2AudioVAEConfig.from_dict(TINY)


def test_encode_and_decode_match_ltx_core(case, record_property):
    vae = _load(case["path"])
    means, encoded = _encode(vae, case["mel"])
    assert case["encoded"].shape == (2, 4, 5, 4)
    assert_parity("audio_vae_encode_means", means, case["means"], record_property)
    assert_parity("audio_vae_encode_normalized", encoded, case["encoded"], record_property)
    decoded = _decode(vae, case["latents"])
    assert case["decoded"].shape == (1, 2, 17, 16) == decoded.shape
    assert_parity("audio_vae_decode", decoded, case["decoded"], record_property)
    # the round trip of the statistics, and the sizes the pipeline uses
    np.testing.assert_allclose(vae.denormalize(encoded), means, rtol=1e-5, atol=1e-5)
    cfg = vae.config
    assert cfg.latent_frames(MEL[2]) == 5 and cfg.mel_frames(LATENTS[2]) == 17
    assert vae.patchify(encoded).shape == (2, 5, cfg.latent_dim)
    np.testing.assert_array_equal(vae.unpatchify(vae.patchify(encoded)), encoded)


def test_negative_control_non_causal_padding(case, record_property):
    """Every 3x3 causal conv padded (1, 1) in time instead of (2, 0): the encode fails."""
    vae = _load(case["path"])
    for _, module in nnx.iter_graph(vae):
        if isinstance(module, av.CausalConv2d) and module.conv.padding[0] == (2, 0):
            module.conv.padding = ((1, 1), module.conv.padding[1])
    assert_fails("audio_vae_encode_negative_symmetric_time_padding",
                 _encode(vae, case["mel"])[0], case["means"], record_property)


def test_negative_control_swapped_decoder_convs(case, tmp_path, record_property):
    block = "audio_vae.decoder.up.1.block.1."
    bad = edited_copy(case["path"], tmp_path / "swapped.safetensors",
                      swap((block + "conv1.conv.weight", block + "conv2.conv.weight")))
    assert_fails("audio_vae_decode_negative_swapped_convs",
                 _decode(_load(bad), case["latents"]), case["decoded"], record_property)


def test_negative_control_token_order(case, monkeypatch, record_property):
    """The statistics indexed f * z + c (frequency-major tokens) instead of c * F + f."""
    vae = _load(case["path"])

    def patchify(latents):
        b, c, t, f = latents.shape
        return latents.transpose(0, 2, 3, 1).reshape(b, t, f * c)

    def unpatchify(self, tokens):
        b, t, _ = tokens.shape
        return tokens.reshape(b, t, -1, self.config.z_channels).transpose(0, 3, 1, 2)
    monkeypatch.setattr(av.LTX2AudioVAE, "patchify", staticmethod(patchify))
    monkeypatch.setattr(av.LTX2AudioVAE, "unpatchify", unpatchify)
    assert_fails("audio_vae_encode_negative_token_order", vae.normalize(case["means"]),
                 case["encoded"], record_property)


# ----------------------------------------------------------------------------- mel front end
def _reference_mel(waveform: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int):
    import torch

    if HAS_TORCHAUDIO:   # the authors' own front end
        from ltx_core.model.audio_vae.ops import AudioProcessor
        from ltx_core.types import Audio

        processor = AudioProcessor(target_sample_rate=sr, mel_bins=n_mels,
                                   mel_hop_length=hop, n_fft=n_fft)
        return processor.waveform_to_mel(Audio(torch.from_numpy(waveform), sr)).numpy()
    mel_filter_bank = _mel_filter_bank_of_transformers()
    x = torch.from_numpy(waveform)
    spec = torch.stft(x.reshape(-1, x.shape[-1]), n_fft, hop, n_fft,
                      torch.hann_window(n_fft), center=True, pad_mode="reflect",
                      return_complex=True).abs()
    bank = torch.from_numpy(mel_filter_bank(n_fft // 2 + 1, n_mels, 0.0, sr / 2, sr,
                                            norm="slaney", mel_scale="slaney")).float()
    mel = torch.log(torch.clamp(bank.T @ spec, min=1e-5))
    return mel.reshape(*x.shape[:2], n_mels, -1).permute(0, 1, 3, 2).numpy()


def test_waveform_to_mel_matches_the_authors_front_end(record_property):
    rng = np.random.default_rng(5)
    t = np.arange(4000) / 16000.0
    tone = 0.3 * np.sin(2 * np.pi * 440.0 * t) + 0.05 * rng.standard_normal((1, 2, t.size))
    waveform = tone.astype(np.float32)
    ref = _reference_mel(waveform, 16000, 1024, 160, 64)
    vae = nnx.eval_shape(lambda: av.LTX2AudioVAE(LTX2AudioVAEConfig.ltx2_19b()))
    out = vae.waveform_to_mel(waveform, sample_rate=16000)
    assert out.shape == ref.shape == (1, 2, 1 + 4000 // 160, 64)
    assert_parity("audio_mel" + ("_ltx_core" if HAS_TORCHAUDIO else "_stft"), out, ref,
                  record_property)
    # negative control: an HTK-scale filter bank (transformers' default) instead of Slaney's
    mel_filter_bank = _mel_filter_bank_of_transformers()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(av, "mel_filter_bank", lambda sr, n_fft, n_mels: mel_filter_bank(
            n_fft // 2 + 1, n_mels, 0.0, sr / 2, sr, norm="slaney").astype(np.float32))
        assert_fails("audio_mel_negative_htk_scale", vae.waveform_to_mel(waveform), ref,
                     record_property)


def test_resample_follows_torchaudio(record_property):
    """:func:`av.resample` against torchaudio's ``functional.resample`` (what ltx-core's
    ``AudioProcessor`` calls for other rates) where torchaudio is installed; everywhere, a
    band-limited signal at 44.1 kHz comes out as the same signal sampled at 16 kHz."""
    rng = np.random.default_rng(6)
    if HAS_TORCHAUDIO:
        import torch
        import torchaudio

        for orig in (44100, 48000, 22050):
            x = rng.standard_normal((1, 2, orig // 4)).astype(np.float32)
            ref = torchaudio.functional.resample(torch.from_numpy(x), orig, 16000).numpy()
            assert_parity(f"audio_resample_{orig}", av.resample(x, orig, 16000), ref,
                          record_property)
        # and the whole front end from 48 kHz: ltx-core's AudioProcessor
        from ltx_core.model.audio_vae.ops import AudioProcessor
        from ltx_core.types import Audio

        x = (0.3 * rng.standard_normal((1, 2, 12000))).astype(np.float32)
        ref = AudioProcessor(target_sample_rate=16000, mel_bins=64, mel_hop_length=160,
                             n_fft=1024).waveform_to_mel(Audio(torch.from_numpy(x), 48000))
        vae = nnx.eval_shape(lambda: av.LTX2AudioVAE(LTX2AudioVAEConfig.ltx2_19b()))
        assert_parity("audio_mel_ltx_core_48k", vae.waveform_to_mel(x, 48000), ref.numpy(),
                      record_property)

    def tones(rate, n):
        t = np.arange(n) / rate
        return (0.5 * np.sin(2 * np.pi * 440.0 * t + 0.3)
                + 0.2 * np.sin(2 * np.pi * 3100.0 * t))[None, None].astype(np.float32)
    out = np.asarray(av.resample(tones(44100, 11025), 44100, 16000))
    want = tones(16000, 4000)
    assert out.shape == want.shape
    interior = slice(64, -64)    # the filters reach 17 input samples past each edge
    error = np.abs(out[..., interior] - want[..., interior]).max()
    record_property("audio_resample_tones_max_error", float(error))
    assert error < 1e-3, error
    # an aliasing control: plain decimation of 48 kHz -> 16 kHz keeps a 10 kHz tone that the
    # filters remove
    t = np.arange(4800) / 48000
    high = np.sin(2 * np.pi * 10000.0 * t)[None, None].astype(np.float32)
    assert np.abs(np.asarray(av.resample(high, 48000, 16000))[..., interior]).max() < 1e-2
    assert np.abs(high[..., ::3][..., interior]).max() > 0.5


# ----------------------------------------------------------------------------- configs, files
def test_audio_latent_frames_follow_ltx_core():
    from ltx_core.types import AudioLatentShape, VideoPixelShape

    cfg = LTX2AudioVAEConfig.ltx2_19b()
    assert cfg.latents_per_second == 25.0
    for frames, fps in ((121, 25.0), (97, 24.0), (121, 30.0), (9, 8.0), (1, 25.0)):
        want = AudioLatentShape.from_video_pixel_shape(
            VideoPixelShape(batch=1, frames=frames, height=64, width=64, fps=fps)).frames
        assert cfg.audio_latent_frames(frames, fps) == want, (frames, fps)


def test_from_dict_refuses_what_vidax_does_not_build():
    dd = TINY["model"]["params"]["ddconfig"]
    # ltx-core's default adds a mid-block attention no release has
    without = {k: v for k, v in dd.items() if k != "mid_block_add_attention"}
    with pytest.raises(VidaxError, match="mid_block_add_attention"):
        LTX2AudioVAEConfig.from_dict({"model": {"params": {"ddconfig": without}}})
    with pytest.raises(VidaxError, match="attn_resolutions"):
        LTX2AudioVAEConfig.from_dict({"model": {"params": {"ddconfig": {
            **dd, "attn_resolutions": [64]}}}})
    with pytest.raises(VidaxError, match="causality_axis"):
        LTX2AudioVAEConfig.from_dict({"model": {"params": {"ddconfig": {
            **dd, "causality_axis": "width"}}}})
    with pytest.raises(VidaxError, match="statistics"):
        LTX2AudioVAEConfig.from_dict({"model": {"params": {"ddconfig": {**dd, "ch": 32}}}})


def test_file_without_the_prefix_is_refused_naming_it(case, tmp_path):
    """A monolith whose audio VAE keys lack ``audio_vae.``: a VidaxError naming the file."""
    tensors = safetensors.numpy.load_file(str(case["path"]))
    with safetensors.safe_open(str(case["path"]), "np") as f:
        metadata = f.metadata()
    bare = tmp_path / "ltx-2.3-22b-dev.safetensors"
    safetensors.numpy.save_file({k.removeprefix("audio_vae."): v for k, v in tensors.items()},
                                str(bare), metadata=metadata)
    with pytest.raises(VidaxError) as err:
        _load(bare)
    # what vidax.load says today: the file, the component, every parameter missing (it does
    # not yet name the prefix it looked under)
    message = str(err.value)
    assert message.startswith(f"{bare} is not a ltx2_5 audio_vae checkpoint"), message
    assert "no weights were loaded" in message and "missing" in message, message
    assert "(102)" in message, message


AUDIO_VAE_MANIFESTS = sorted(m.name for m in all_manifests()
                             if m.name.startswith("ltx2_5/") and m.name.endswith("__audio_vae"))


def test_manifest_coverage():
    assert len(AUDIO_VAE_MANIFESTS) == 5, AUDIO_VAE_MANIFESTS


@pytest.mark.parametrize("name", AUDIO_VAE_MANIFESTS)
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, report.headline()
    assert report.headline().startswith("matched 102/102 tensors"), report.headline()
    assert (LTX2AudioVAEConfig.from_dict(manifest.config["instantiated_with"])
            == LTX2AudioVAEConfig.ltx2_19b())


def test_full_size_shapes():
    """The released VAE, abstract (no memory): 121 frames at 25 fps of audio (77440 samples)
    -> 485 mel frames -> 122 latent frames; the pipeline's 121 latent frames -> 481 mel frames."""
    from tests.parity import AbstractModel

    cfg = LTX2AudioVAEConfig.ltx2_19b()
    vae = AbstractModel(lambda: av.LTX2AudioVAE(cfg))
    samples = 121 * cfg.sample_rate // 25
    mel_frames = 1 + samples // cfg.mel_hop_length
    assert vae.shapes("encode", (1, 2, mel_frames, 64)).shape == (1, 8, 122, 16)
    assert cfg.latent_frames(mel_frames) == 122
    frames = cfg.audio_latent_frames(121, 25.0)
    assert frames == 121
    assert vae.shapes("decode_normalized", (1, 8, frames, 16)).shape == (1, 2, 481, 64)
    assert cfg.mel_frames(frames) == 481 and cfg.latent_dim == 128
