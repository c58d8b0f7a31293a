"""vidax's LTX-Video 0.9.8 DiT, causal VAE and latent upsampler against the authors' own code
(PyPI ``ltx-video``: ``ltx_video.models.*``, see ``tests/reference/ltx_video.py``).

Oracles (DESIGN.md §6):

* One release-layout file: the authors' tiny ``Transformer3DModel`` and
  ``CausalVideoAutoencoder`` with random values in every tensor (norm weights, biases, the
  modulation tables, the decoder's scalar ``timestep_scale_multiplier`` and all five latent
  statistics included), written as ``model.diffusion_model.*`` + ``vae.*`` +
  ``vae.per_channel_statistics.*`` with the JSON config in ``__metadata__``. The references are
  built from that file by the authors' own ``from_pretrained``; vidax loads it through
  ``vidax.load`` with no config, so the configs come from the metadata too.
* The upsampler: its own file, as ``ltxv-spatial-upscaler-0.9.8.safetensors`` is.

Cases: the DiT forward (batch 2; per-token timesteps with the first latent frame of one sample
at t = 0, as conditioning tokens get; text padding; ``frame_rate`` 24; STG skip masks under
every strategy), VAE encode (means, and per-channel normalised), VAE decode with timestep
conditioning and the pipeline's decode noise over 3 latent frames (9 output frames), and the
spatial and temporal upsampler. Bound: float32, matmul precision "highest",
max |vidax - reference| <= 1e-4 x std(reference); each component has a negative control (two
stored tensors swapped) that must fail it.

Structure at full size: every ltx_video manifest verifies 1:1 (tests below), and the released
upsampler's key set, which no manifest records, is derived from the authors' class at the
release config.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jax
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

import vidax
from tests.parity import (assert_fails, assert_parity, edited_copy, swap, to_channels_last,
                          to_ncthw)
from tests.reference import ltx_video as ref
from vidax import registry
from vidax.errors import VerificationError, VidaxError
from vidax.loading import verify_manifest, verify_tensors
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx_video.dit import LTXVideoDiTConfig
from vidax.models.ltx_video.upsampler import LTXVideoUpsamplerConfig
from vidax.models.ltx_video.vae import LTXVideoVAEConfig
from vidax.translator.mapping import TensorInfo

jax.config.update("jax_default_matmul_precision", "highest")
# The authors' SymmetricPatchifier calls torch.meshgrid without indexing= (torch warns).
pytestmark = pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning")
FRAME_RATE = 24.0            # 1/24 is inexact in float32: the division is exercised
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 4, 6          # latent grid; 72 tokens
TEXT_LEN, TEXT_LENS = 8, (5, 8)
VIDEO = (BATCH, 9, 32, 48, 3)                      # 9 frames -> 3 latent frames, 2 x 3 latents

# The authors' configs, as a release file's metadata carries them (tiny sizes).
DIT_CONFIG = {
    "_class_name": "Transformer3DModel", "_diffusers_version": "0.25.1",
    "activation_fn": "gelu-approximate", "attention_bias": True, "attention_head_dim": 16,
    "attention_type": "default", "caption_channels": 24, "cross_attention_dim": 32,
    "double_self_attention": False, "dropout": 0.0, "in_channels": 16,
    "norm_elementwise_affine": False, "norm_eps": 1e-06, "norm_num_groups": 32,
    "num_attention_heads": 2, "num_embeds_ada_norm": 1000, "num_layers": 2,
    "num_vector_embeds": None, "only_cross_attention": False, "out_channels": 16,
    "project_to_2d_pos": True, "upcast_attention": False, "use_linear_projection": False,
    "qk_norm": "rms_norm", "standardization_norm": "rms_norm",
    "positional_embedding_type": "rope", "positional_embedding_theta": 10000.0,
    "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
    "causal_temporal_positioning": True}
VAE_CONFIG = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
    "latent_channels": 16,
    "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}]],
    "decoder_blocks": [["res_x", {"num_layers": 2, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 2}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_time", {}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_space", {}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}]],
    "encoder_base_channels": 8, "decoder_base_channels": 16, "scaling_factor": 1.0,
    "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": True}


# ----------------------------------------------------------------------------- helpers
def _randomize(named_params, gen) -> None:
    """Random values in every tensor, scaled so activations stay O(1)."""
    import torch

    with torch.no_grad():
        for name, p in named_params:
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("timestep_scale_multiplier"):
                p.copy_(1000 * (1 + 0.1 * noise))
            elif "scale_shift_table" in name:
                p.copy_(0.5 * noise)
            elif p.ndim >= 2:                              # Linear / Conv weights
                p.copy_(noise / p[0].numel() ** 0.5)
            elif name.endswith("weight"):                  # norm scales
                p.copy_(1 + 0.2 * noise)
            else:                                          # biases
                p.copy_(0.1 * noise)


def _swapped(path: Path, out: Path, *pairs: tuple[str, str]) -> Path:
    """A copy of the file (metadata kept) with each pair of tensors exchanged."""
    return edited_copy(path, out, swap(*pairs))


# ----------------------------------------------------------------------------- the release file
@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A tiny ``ltxv-*.safetensors`` in the release layout, and the authors' models read back
    from it by their own single-file loaders."""
    import torch

    gen = torch.Generator().manual_seed(0)
    dit = ref.Transformer3DModel.from_config(copy.deepcopy(DIT_CONFIG))
    vae = ref.CausalVideoAutoencoder.from_config(copy.deepcopy(VAE_CONFIG))
    _randomize(dit.named_parameters(), gen)
    _randomize(vae.named_parameters(), gen)
    statistics = {name: torch.randn(16, generator=gen) for name in ref.STATISTICS}
    statistics["std-of-means"] = 0.5 + torch.rand(16, generator=gen)
    path = tmp_path_factory.mktemp("ltx_video") / "ltxv-tiny-0.9.8.safetensors"
    ref.write_release_file(path, dit, DIT_CONFIG, vae, VAE_CONFIG, statistics)
    ref_dit = ref.Transformer3DModel.from_pretrained(path).eval()
    ref_vae = ref.CausalVideoAutoencoder.from_pretrained(path).eval()
    return path, ref_dit, ref_vae


def test_configs_come_from_the_file_metadata(release):
    path = release[0]
    assert vidax.load("ltx_video", "dit", path).config == LTXVideoDiTConfig.tiny()
    assert vidax.load("ltx_video", "vae", path).config == LTXVideoVAEConfig.tiny()


# ----------------------------------------------------------------------------- DiT
def _dit_inputs(seed: int, per_token: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    context = rng.standard_normal((BATCH, TEXT_LEN, DIT_CONFIG["caption_channels"]))
    mask = np.zeros((BATCH, TEXT_LEN), np.float32)
    for i, n in enumerate(TEXT_LENS):
        mask[i, :n] = 1
    sigma = np.array([0.83, 0.21], np.float32)
    t = np.broadcast_to(sigma[:, None, None, None], (BATCH, FRAMES, HEIGHT, WIDTH)).copy()
    if per_token:   # the first latent frame of sample 1 is a conditioning frame: t = 0
        t[1, 0] = 0.0
    return {"latents": rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, 16)).astype(np.float32),
            "timestep": t.reshape(BATCH, -1) if per_token else sigma,
            "context": context.astype(np.float32), "context_mask": mask}


def _dit_reference(model, vae, inputs, skip_mask, strategy) -> np.ndarray:
    """The authors' forward with their pipeline's position bookkeeping."""
    import torch

    coords = ref.pixel_coords(FRAMES, HEIGHT, WIDTH, BATCH, vae, causal_fix=True).float()
    coords[:, 0] = coords[:, 0] * (1.0 / FRAME_RATE)
    t = torch.from_numpy(inputs["timestep"])
    with torch.no_grad():
        out = model(torch.from_numpy(inputs["latents"]).reshape(BATCH, -1, 16),
                    indices_grid=coords,
                    encoder_hidden_states=torch.from_numpy(inputs["context"]),
                    encoder_attention_mask=torch.from_numpy(inputs["context_mask"]),
                    timestep=t if t.ndim == 2 else t[:, None],
                    skip_layer_mask=None if skip_mask is None else torch.from_numpy(skip_mask),
                    skip_layer_strategy=ref.SKIP_LAYER_STRATEGIES.get(strategy),
                    return_dict=False)[0]
    return out.reshape(BATCH, FRAMES, HEIGHT, WIDTH, 16).numpy()


@functools.partial(nnx.jit, static_argnames=("strategy",))
def _run_dit(model, latents, timestep, context, context_mask, skip_mask, strategy):
    vae = LTXVideoVAEConfig.tiny()   # positions scale by the tiny VAE's factors, as theirs do
    return model(latents, timestep, context, context_mask, frame_rate=FRAME_RATE,
                 skip_layer_mask=skip_mask, skip_layer_strategy=strategy,
                 vae_scale_factors=(vae.temporal_downscale_factor, vae.spatial_downscale_factor,
                                    vae.spatial_downscale_factor))


def _dit_vidax(model, inputs, skip_mask, strategy) -> np.ndarray:
    return np.asarray(_run_dit(model, inputs["latents"], inputs["timestep"], inputs["context"],
                               inputs["context_mask"], skip_mask, strategy))


# Block 1 of sample 1 is skipped (STG's perturbed pass).
SKIP_MASK = np.array([[1, 1], [1, 0]], np.float32)


@pytest.fixture(scope="module")
def dit_case(release):
    path, ref_dit, ref_vae = release
    inputs = _dit_inputs(1, per_token=True)
    expected = _dit_reference(ref_dit, ref_vae, inputs, SKIP_MASK, "attention_values")
    return path, inputs, expected


def test_dit_matches_authors(dit_case, record_property):
    path, inputs, expected = dit_case
    model = vidax.load("ltx_video", "dit", path)
    assert_parity("dit", _dit_vidax(model, inputs, SKIP_MASK, "attention_values"), expected,
                  record_property)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["attention_skip", "transformer_block", "residual"])
def test_dit_skip_layer_strategies_match_authors(release, strategy, record_property):
    path, ref_dit, ref_vae = release
    inputs = _dit_inputs(2, per_token=False)
    expected = _dit_reference(ref_dit, ref_vae, inputs, SKIP_MASK, strategy)
    out = _dit_vidax(vidax.load("ltx_video", "dit", path), inputs, SKIP_MASK, strategy)
    assert_parity(f"dit_{strategy}", out, expected, record_property)


def test_dit_negative_control_swapped_q_k(dit_case, tmp_path, record_property):
    path, inputs, expected = dit_case
    block = "model.diffusion_model.transformer_blocks.1.attn1."
    bad = _swapped(path, tmp_path / "swapped.safetensors",
                   (block + "to_q.weight", block + "to_k.weight"),
                   (block + "to_q.bias", block + "to_k.bias"))
    out = _dit_vidax(vidax.load("ltx_video", "dit", bad), inputs, SKIP_MASK, "attention_values")
    assert_fails("dit_negative", out, expected, record_property)


# ----------------------------------------------------------------------------- VAE encode
@pytest.fixture(scope="module")
def encode_case(release):
    import torch

    path, _, ref_vae = release
    video = np.random.default_rng(3).uniform(-1, 1, VIDEO).astype(np.float32)
    with torch.no_grad():
        mean = ref_vae.encode(to_ncthw(video)).latent_dist.mode()
        normalized = ref.vae_encode.normalize_latents(mean, ref_vae, vae_per_channel_normalize=True)
    return path, video, to_channels_last(mean), to_channels_last(normalized)


@nnx.jit
def _run_encode(vae, video):
    mean = vae.encode(video)
    return mean, vae.normalize(mean)


def _encode_vidax(path, video):
    mean, normalized = _run_encode(vidax.load("ltx_video", "vae", path), video)
    return np.asarray(mean), np.asarray(normalized)


def test_vae_encode_matches_authors(encode_case, record_property):
    path, video, mean, normalized = encode_case
    out_mean, out_normalized = _encode_vidax(path, video)
    assert_parity("vae_encode", out_mean, mean, record_property)
    assert_parity("vae_encode_normalized", out_normalized, normalized, record_property)


def test_vae_encode_negative_control_swapped_convs(encode_case, tmp_path, record_property):
    path, video, mean, _ = encode_case
    block = "vae.encoder.down_blocks.2.res_blocks.0."
    bad = _swapped(path, tmp_path / "swapped.safetensors",
                   (block + "conv1.conv.weight", block + "conv2.conv.weight"))
    assert_fails("vae_encode_negative", _encode_vidax(bad, video)[0], mean, record_property)


# ----------------------------------------------------------------------------- VAE decode
@pytest.fixture(scope="module")
def decode_case(release):
    """The authors' pipeline decode: noise mixed into the normalised latents with the decode
    timestep as its scale, then ``vae_decode`` (un-normalise, timestep-conditioned decoder)."""
    import torch

    path, _, ref_vae = release
    rng = np.random.default_rng(4)
    shape = (BATCH, FRAMES, 2, 3, 16)
    latents = rng.standard_normal(shape).astype(np.float32)
    noise = rng.standard_normal(shape).astype(np.float32)
    timestep = np.array([0.05, 0.2], np.float32)
    scale = torch.from_numpy(timestep)[:, None, None, None, None]
    mixed = to_ncthw(latents) * (1 - scale) + to_ncthw(noise) * scale
    with torch.no_grad():
        video = ref.vae_encode.vae_decode(mixed, ref_vae, is_video=True,
                                          vae_per_channel_normalize=True,
                                          timestep=torch.from_numpy(timestep))
    return path, latents, noise, timestep, to_channels_last(video)


@nnx.jit
def _run_decode(vae, latents, timestep, noise):
    return vae.decode_normalized(latents, timestep, noise=noise)


def _decode_vidax(path, latents, noise, timestep):
    return np.asarray(_run_decode(vidax.load("ltx_video", "vae", path), latents, timestep, noise))


def test_vae_decode_matches_authors(decode_case, record_property):
    path, latents, noise, timestep, expected = decode_case
    assert expected.shape == VIDEO
    assert_parity("vae_decode", _decode_vidax(path, latents, noise, timestep), expected,
                  record_property)


def test_vae_decode_negative_control_swapped_statistics(decode_case, tmp_path, record_property):
    path, latents, noise, timestep, expected = decode_case
    bad = _swapped(path, tmp_path / "swapped.safetensors",
                   ("vae.per_channel_statistics.mean-of-means",
                    "vae.per_channel_statistics.std-of-means"))
    assert_fails("vae_decode_negative", _decode_vidax(bad, latents, noise, timestep),
                 expected, record_property)


# ----------------------------------------------------------------------------- upsampler
@nnx.jit
def _run_upsampler(model, latents):
    return model(latents)


@pytest.mark.parametrize("temporal", [False, True], ids=["spatial", "temporal"])
def test_upsampler_matches_authors(temporal, tmp_path, record_property):
    import torch

    cfg = LTXVideoUpsamplerConfig.tiny(temporal)
    model = ref.LatentUpsampler(in_channels=cfg.in_channels, mid_channels=cfg.mid_channels,
                                num_blocks_per_stage=cfg.num_blocks_per_stage, dims=3,
                                spatial_upsample=cfg.spatial_upsample,
                                temporal_upsample=cfg.temporal_upsample)
    _randomize(model.named_parameters(), torch.Generator().manual_seed(5))
    path = ref.write_upsampler_file(tmp_path / "ltxv-upscaler.safetensors", model)
    reference = ref.LatentUpsampler.from_pretrained(path).eval()
    latents = np.random.default_rng(6).standard_normal(
        (BATCH, FRAMES, HEIGHT, WIDTH, cfg.in_channels)).astype(np.float32)
    with torch.no_grad():
        expected = to_channels_last(reference(to_ncthw(latents)))

    loaded = vidax.load("ltx_video", "upsampler", path)
    assert loaded.config == cfg
    name = "upsampler_" + ("temporal" if temporal else "spatial")
    assert_parity(name, _run_upsampler(loaded, latents), expected, record_property)

    bad = _swapped(path, tmp_path / "swapped.safetensors",
                   ("res_blocks.0.conv1.weight", "res_blocks.0.conv2.weight"))
    assert_fails(name + "_negative",
                 _run_upsampler(vidax.load("ltx_video", "upsampler", bad), latents),
                 expected, record_property)


def test_released_upsampler_key_set_verifies():
    """``ltxv-spatial-upscaler-0.9.8.safetensors`` has no manifest: its names and shapes are
    the authors' class at the release config, built on the meta device."""
    import torch

    with torch.device("meta"):
        model = ref.LatentUpsampler(in_channels=128, mid_channels=512, num_blocks_per_stage=4,
                                    dims=3, spatial_upsample=True, temporal_upsample=False)
    tensors = {k: TensorInfo(tuple(v.shape), "bfloat16") for k, v in model.state_dict().items()}
    spec = registry.get("ltx_video", "upsampler")
    report, _, _ = verify_tensors(spec, spec.make_config("0.9.8-13b-dev"), tensors,
                                  source="LatentUpsampler(128, 512, 4, dims=3)")
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == len(tensors) == 72
    assert report.num_params == sum(p.numel() for p in model.parameters())
    assert LTXVideoUpsamplerConfig.from_dict(model.config()) == LTXVideoUpsamplerConfig()


# ----------------------------------------------------------------------------- structure
LTX_MANIFESTS = sorted(m.name for m in all_manifests()
                       if m.family == "ltx_video" and m.component in ("dit", "vae"))
DIT_PRESETS = {"0.9.8-13b-dev": LTXVideoDiTConfig.ltxv_13b_0_9_8_dev,
               "0.9.8-13b-distilled": LTXVideoDiTConfig.ltxv_13b_0_9_8_distilled,
               "0.9.8-2b-distilled": LTXVideoDiTConfig.ltxv_2b_0_9_8_distilled}


# The 2B DiT and the VAE in the fast lane; the 13B DiTs and the other VAE copies in CI.
FAST_MANIFESTS = ("ltx_video/0.9.8-2b-distilled__dit", "ltx_video/0.9.8-13b-dev__vae")


@pytest.mark.parametrize("name", [n if n in FAST_MANIFESTS else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in LTX_MANIFESTS])
def test_release_manifest_verifies(name):
    """Every stored tensor of the release through the mapper, 1:1 against the model at the
    preset, and the preset equal to the config in the file's metadata."""
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched + len(report.ignored) == report.num_tensors == manifest.num_tensors
    metadata = manifest.config["safetensors_metadata"]["config_json_example"]
    if manifest.component == "dit":
        assert report.num_params == manifest.num_params
        assert report.matched == manifest.num_tensors
        assert LTXVideoDiTConfig.from_dict(metadata["transformer"]) == \
            DIT_PRESETS[manifest.variant]()
    else:
        # The three statistics vectors the authors never read are ignored.
        assert sorted(report.ignored) == [f"per_channel_statistics.{k}" for k in
                                          ("channel", "mean-of-stds",
                                           "mean-of-stds_over_std-of-means")]
        assert report.num_params + 3 * 128 == manifest.num_params
        assert LTXVideoVAEConfig.from_dict(metadata["vae"]) == LTXVideoVAEConfig.ltxv_0_9_8()


def test_manifest_coverage():
    assert len(LTX_MANIFESTS) == 6


# ----------------------------------------------------------------------------- bad input
def test_extra_vae_key_is_refused_where_the_authors_drop_it(release, tmp_path):
    """The authors' VAE loader silently drops a ``*norm*`` key its model lacks; vidax names it."""
    path = release[0]
    tensors = safetensors.numpy.load_file(path)
    with open(path, "rb") as f:
        metadata = json.loads(f.read(int.from_bytes(f.read(8), "little")))["__metadata__"]
    tensors["vae.decoder.up_blocks.0.norm3.weight"] = np.ones(32, np.float32)
    bad = tmp_path / "extra.safetensors"
    safetensors.numpy.save_file(tensors, bad, metadata=metadata)
    ref.CausalVideoAutoencoder.from_pretrained(bad)          # accepted by the authors
    with pytest.raises(VerificationError, match="up_blocks.0.norm3"):
        vidax.load("ltx_video", "vae", bad)


def test_file_without_its_vae_part_is_refused(release, tmp_path):
    path = release[0]
    tensors = {k: v for k, v in safetensors.numpy.load_file(path).items()
               if not k.startswith("vae.")}
    bad = tmp_path / "no_vae.safetensors"
    safetensors.numpy.save_file(tensors, bad, metadata={
        "config": json.dumps({"transformer": DIT_CONFIG, "vae": VAE_CONFIG})})
    assert vidax.load("ltx_video", "dit", bad).config == LTXVideoDiTConfig.tiny()
    with pytest.raises(VerificationError, match="missing"):
        vidax.load("ltx_video", "vae", bad)


def test_metadata_that_disagrees_with_the_shapes_is_refused(release, tmp_path):
    path = release[0]
    wrong = dict(DIT_CONFIG, num_layers=3)
    bad = tmp_path / "wrong_config.safetensors"
    safetensors.numpy.save_file(safetensors.numpy.load_file(path), bad, metadata={
        "config": json.dumps({"transformer": wrong, "vae": VAE_CONFIG})})
    with pytest.raises(VerificationError, match="transformer_blocks.2"):
        vidax.load("ltx_video", "dit", bad)


def test_metadata_without_the_section_is_refused(release, tmp_path):
    bad = tmp_path / "no_section.safetensors"
    safetensors.numpy.save_file(safetensors.numpy.load_file(release[0]), bad,
                                metadata={"config": json.dumps({"transformer": DIT_CONFIG})})
    with pytest.raises(VidaxError, match="no 'vae' section"):
        vidax.load("ltx_video", "vae", bad)


def test_unsupported_configs_are_refused():
    with pytest.raises(VidaxError, match="standardization_norm"):
        LTXVideoDiTConfig.from_dict(dict(DIT_CONFIG, standardization_norm="layer_norm"))
    with pytest.raises(VidaxError, match="unknown LTX-Video transformer config keys"):
        LTXVideoDiTConfig.from_dict(dict(DIT_CONFIG, audio_layers=2))
    with pytest.raises(VidaxError, match="inject_noise"):
        LTXVideoVAEConfig.from_dict(dict(VAE_CONFIG, decoder_blocks=[
            ["res_x", {"num_layers": 1, "inject_noise": True}]]))
    with pytest.raises(VidaxError, match="norm_layer"):
        LTXVideoVAEConfig.from_dict(dict(VAE_CONFIG, norm_layer="group_norm"))


def test_video_shapes_the_vae_cannot_take_are_refused(release):
    vae = vidax.load("ltx_video", "vae", release[0])
    with pytest.raises(VidaxError, match="F = 1 \\+ 4k frames and H, W multiples of 16"):
        vae.encode(np.zeros((1, 8, 32, 32, 3), np.float32))
    with pytest.raises(VidaxError, match="timestep-conditioned"):
        vae.decode(np.zeros((1, 2, 2, 2, 16), np.float32))


def test_dit_is_an_nnx_module_without_buffers(release):
    model = vidax.load("ltx_video", "dit", release[0])
    assert set(nnx.state(model).keys()) == set(nnx.state(model, nnx.Param).keys())


@pytest.mark.slow     # traces three full-size models at 121 frames: seconds of tracing
def test_full_size_forwards_trace():
    """The 13B DiT (inner dim 4096: 682 RoPE frequencies per axis, 4 unrotated features), the
    0.9.8 VAE and upsampler at 121 frames x 256 x 384 pixels, abstractly, with bfloat16
    weights as released and float32 activations."""
    import jax.numpy as jnp

    from vidax.models.ltx_video.dit import LTXVideoDiT
    from vidax.models.ltx_video.upsampler import LTXVideoLatentUpsampler
    from vidax.models.ltx_video.vae import LTXVideoVAE

    def trace(model_cls, cfg, fn, *args):
        graphdef, state = nnx.split(nnx.eval_shape(
            lambda: model_cls(cfg, param_dtype=jnp.bfloat16)))
        return jax.eval_shape(lambda s, *a: fn(nnx.merge(graphdef, s), *a), state, *args)

    f32 = jnp.float32
    latents = jax.ShapeDtypeStruct((1, 16, 8, 12, 128), f32)
    out = trace(LTXVideoDiT, LTXVideoDiTConfig(),
                lambda m, x, c, k: m(x, 0.5, c, k, frame_rate=25.0), latents,
                jax.ShapeDtypeStruct((1, 256, 4096), f32), jax.ShapeDtypeStruct((1, 256), f32))
    assert out.shape == latents.shape and out.dtype == f32
    video = jax.ShapeDtypeStruct((1, 121, 256, 384, 3), f32)
    z = trace(LTXVideoVAE, LTXVideoVAEConfig(), lambda m, v: m.encode(v), video)
    assert z.shape == latents.shape
    out = trace(LTXVideoVAE, LTXVideoVAEConfig(),
                lambda m, x: m.decode_normalized(x, 0.05, noise=x), latents)
    assert out.shape == video.shape
    out = trace(LTXVideoLatentUpsampler, LTXVideoUpsamplerConfig(), lambda m, x: m(x), latents)
    assert out.shape == (1, 16, 16, 24, 128)
