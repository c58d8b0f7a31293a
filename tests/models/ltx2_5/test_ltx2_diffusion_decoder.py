"""vidax's LTX-2.5 diffusion video VAE (``ltx-2.5-video-vae-bf16``, ``CausalDiffusionVAE``).

Oracles (DESIGN.md §6):

* the decoder: diffusers 0.42.1 ``LTX2VideoDiffusionDecoderModel``
  (``models/autoencoders/ltx2_diffusion_decoder.py``; its FlexAttention processor, the
  neighborhood window as a mask) at a tiny config with the released upsample strides, random
  values in every tensor and in the latent statistics. Its own sampling
  (``LTX2VideoDiffusionDecoder3d.forward``: stages 1-3, stage 4, ``denoise`` of
  ``randn(B, 3, F, H, W)``) is run with the noise given explicitly, the same array vidax gets.
* the encoder: ltx-core 1.0.0 ``VideoEncoder`` (the conv VAE's encoder; ``latent_log_var
  ="constant"``), which returns normalised means: vidax ``normalize(encode(video))``.

No installed converter writes the authors' layout of this file, so the test writes it here,
from the authors' key names (the manifest ``ltx2_5/2.5__video_vae``, derived from ltx-core
@400fd31 ``_build_diffusion_vae_decoder_sd_ops``, whose renames this inverts): the encoder's
state dict under ``encoder.``; diffusers' ``attn.to_q / to_k / to_v`` concatenated (q | k | v)
into ``attn.qkv``, ``attn.to_out.0`` -> ``attn.proj``, ``attn.norm_q / norm_k`` ->
``attn.q_norm / k_norm``, ``t_embedder.timestep_embedder.linear_1 / linear_2`` ->
``t_embedder.mlp.0 / mlp.2``, ``latents_mean / latents_std`` ->
``per_channel_statistics.mean-of-means / std-of-means``, everything else by its diffusers name
(which is the authors'). The written key set has the real manifest's key patterns exactly.
The file carries ``{"vae": config}`` (the release's nested form) and is loaded by
``vidax.load("ltx2_5", "video_vae", path)`` with no config.

Measured: float32, matmul precision "highest", bound max |vidax - reference| <= 1e-4 x
std(reference): the decode of normalised latents [1, 3, 3, 4, 8] -> [1, 17, 48, 64, 3] in one
x0 step (and two steps, slow; and of [1, 1, 2, 4, 8], padded, slow); the encode of a
[2, 9, 32, 48, 3] video. Negative controls that
must fail: the q and k blocks of two fused ``qkv`` tensors swapped in the file; the
neighborhood attention with truncated (zero-padded) windows instead of NATTEN's inward-shifted
ones. The window mask itself equals diffusers' ``_neighborhood_block_mask`` mask function
exactly, and the blocked attention equals a dense masked softmax.

Latents under the decoder's minimum are padded as the authors' ltx-core @400fd31 pads them
(diffusers refuses them): checked here against diffusers on the padded latents; vidax equals
the authors' own ``DiffusionVideoDecoder`` (from the Lightricks/LTX-2 source at 400fd31, with
its eager neighborhood attention; not installed, so not run here) within 1.2e-5 x std at five
latent shapes, padded ones included.

Structure at full size: the manifest verifies 1:1 (395 tensors -> 491 parameters,
736,070,769 elements) and its config gives the preset.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors
from flax import nnx

import vidax
from tests.parity import (AbstractModel, assert_fails, assert_parity, draw_inputs,
                          edited_copy, randomize, to_channels_last, to_ncthw)
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.models.ltx2_5 import diffusion_decoder as dd
from vidax.models.ltx2_5.config import LTX2DiffusionVAEConfig

jax.config.update("jax_default_matmul_precision", "highest")
# diffusers' flex path runs unfused on CPU (it materialises the masked scores): expected here.
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

LATENTS = (1, 3, 3, 4, 8)          # -> video [1, 17, 48, 64, 3]; stage-5 grid 17 x 12 x 16
VIDEO = (2, 9, 32, 48, 3)          # -> latents [2, 2, 2, 3, 8]
MANIFEST = "ltx2_5/2.5__video_vae"
_BLOCKS = [["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
           ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}],
           ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 1}],
           ["res_x", {"num_layers": 1}]]
# LTX2DiffusionVAEConfig.tiny() in the release file's nested form (t_emb_dim is not in the
# release config; ltx-core reads it when present).
CONFIG = {
    "_class_name": "CausalDiffusionVAE", "dims": 3, "model_output_type": "x0",
    "spatial_padding_mode": "zeros",
    "encoder": {"_class_name": "Encoder", "dims": 3, "in_channels": 3, "out_channels": 8,
                "blocks": _BLOCKS, "patch_size": 4, "latent_log_var": "constant",
                "latent_log_var_value": -7.824046010856292, "norm_layer": "pixel_norm",
                "base_channels": 8, "spatial_padding_mode": "zeros"},
    "decoder": {"_class_name": "NADiffusionDecoder", "in_channels": 8, "out_channels": 3,
                "patch_size": 4, "head_dim": 16, "stage_channels": [64, 32, 32, 32, 32],
                "stage_depths": [1, 1, 1, 1, 2],
                "stage_kernels": [[3, 3, 3], [3, 3, 3], [3, 3, 3], [3, 5, 5], [5, 7, 7]],
                "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 1], [[2, 2, 2], 1], [[2, 1, 1], 1]],
                "spatial_padding_mode": "zeros", "resampler_kind": "linear",
                "stage5_kernel": [5, 7, 7], "t_emb_dim": 48, "timestep_scale_multiplier": 1000.0,
                "default_num_inference_steps": 1},
}


def _diffusers_decoder():
    from diffusers.models.autoencoders.ltx2_diffusion_decoder import (
        LTX2VideoDiffusionDecoderModel)

    d = CONFIG["decoder"]
    return LTX2VideoDiffusionDecoderModel(
        out_channels=3, latent_channels=8, patch_size=4, decoder_head_dim=16,
        decoder_stage_channels=tuple(d["stage_channels"]),
        decoder_stage_depths=tuple(d["stage_depths"]),
        decoder_stage_kernels=tuple(tuple(k) for k in d["stage_kernels"][:4]),
        decoder_upsample_strides=tuple(tuple(s) for s, _ in d["upsamples"]),
        decoder_upsample_channel_reductions=tuple(r for _, r in d["upsamples"]),
        decoder_stage5_kernel=tuple(d["stage5_kernel"]), decoder_t_emb_dim=48,
        decoder_timestep_scale_multiplier=1000.0, decoder_model_output_type="x0",
        decoder_num_inference_steps=1, temporal_compression_ratio=8).eval()


# diffusers name -> the authors' (see the module docstring)
_RENAMES = ((".attn.to_out.0.", ".attn.proj."), (".attn.norm_q.", ".attn.q_norm."),
            (".attn.norm_k.", ".attn.k_norm."),
            ("t_embedder.timestep_embedder.linear_1.", "t_embedder.mlp.0."),
            ("t_embedder.timestep_embedder.linear_2.", "t_embedder.mlp.2."))


def authors_decoder_state(diffusers_state: dict) -> dict:
    """diffusers' ``LTX2VideoDiffusionDecoderModel`` state dict in the authors' layout."""
    out = {"per_channel_statistics.mean-of-means": diffusers_state["latents_mean"],
           "per_channel_statistics.std-of-means": diffusers_state["latents_std"]}
    for key, value in diffusers_state.items():
        if not key.startswith("decoder."):
            continue
        m = re.fullmatch(r"(.*\.attn)\.to_([qkv])\.(weight|bias)", key)
        if m is not None:
            if m[2] == "q":
                import torch
                out[f"{m[1]}.qkv.{m[3]}"] = torch.cat(
                    [diffusers_state[f"{m[1]}.to_{p}.{m[3]}"] for p in "qkv"], 0)
            continue
        for a, b in _RENAMES:
            key = key.replace(a, b)
        out[key] = value
    return out


def _write_release(path: Path):
    """The tiny release file, and the two references built before it was written."""
    import safetensors.torch
    import torch
    from ltx_core.model import video_vae as vv

    decoder = _diffusers_decoder()
    randomize(decoder.named_parameters(), seed=1)
    gen = torch.Generator().manual_seed(3)
    decoder.latents_mean.copy_(torch.randn(8, generator=gen))
    decoder.latents_std.copy_(0.5 + torch.randn(8, generator=gen).abs())
    encoder = vv.VideoEncoderConfigurator.from_config({"vae": {
        "dims": 3, "in_channels": 3, "latent_channels": 8, "encoder_blocks": _BLOCKS,
        "patch_size": 4, "norm_layer": "pixel_norm", "latent_log_var": "constant",
        "spatial_padding_mode": "zeros"}}).eval()
    randomize(encoder.named_parameters(), seed=2)
    encoder.per_channel_statistics.load_state_dict(
        {"mean-of-means": decoder.latents_mean, "std-of-means": decoder.latents_std},
        strict=False)
    tensors = authors_decoder_state(decoder.state_dict())
    tensors.update({f"encoder.{k}": v for k, v in encoder.state_dict().items()
                    if not k.startswith("per_channel_statistics.")})
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
                                metadata={"config": json.dumps({"vae": CONFIG})})
    return decoder, encoder


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+(?=\.)", ".N", key)


@nnx.jit
def _decode(vae, latents, noise):
    return vae.decode_normalized(latents, noise)


@nnx.jit
def _decode_2_steps(vae, latents, noise):
    return vae.decode_normalized(latents, noise, num_steps=2)


@nnx.jit
def _encode(vae, video):
    return vae.normalize(vae.encode(video))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The tiny file, its inputs, the references' outputs (lazily), vidax's model."""
    import torch

    path = tmp_path_factory.mktemp("ltx2_5_diffusion_vae") / "ltx-2.5-video-vae-bf16.safetensors"
    decoder, encoder = _write_release(path)
    videos, zs = draw_inputs(5, {"video": VIDEO}, {"latents": LATENTS})
    vae = vidax.load("ltx2_5", "video_vae", path)
    noise = np.random.default_rng(6).standard_normal(vae.noise_shape(LATENTS)).astype(np.float32)
    made = {}

    def reference(what: str) -> np.ndarray:
        if what not in made:
            with torch.no_grad():
                if what == "encoded":
                    made[what] = to_channels_last(encoder(to_ncthw(videos["video"])))
                else:
                    d = decoder.decoder
                    if "context" not in made:
                        z = to_ncthw(zs["latents"])
                        z = (z * decoder.latents_std.view(1, -1, 1, 1, 1)
                             + decoder.latents_mean.view(1, -1, 1, 1, 1))
                        made["context"] = d.forward_stage_4(d.forward_stages_1_to_3(z))
                    steps = 1 if what == "decoded" else 2
                    made[what] = to_channels_last(d.denoise(made["context"], to_ncthw(noise),
                                                            steps))
        return made[what]

    return {"path": path, "vae": vae, "video": videos["video"], "latents": zs["latents"],
            "noise": noise, "reference": reference, "diffusers": decoder}


# ----------------------------------------------------------------------------- parity
def test_decode_matches_diffusers(case, record_property):
    ref = case["reference"]("decoded")
    assert ref.shape == (1, 17, 48, 64, 3) == case["noise"].shape
    assert_parity("decode_1_step", _decode(case["vae"], case["latents"], case["noise"]), ref,
                  record_property)


@pytest.mark.slow
def test_decode_two_steps_matches_diffusers(case, record_property):
    assert_parity("decode_2_steps", _decode_2_steps(case["vae"], case["latents"],
                                                    case["noise"]),
                  case["reference"]("decoded_2"), record_property)


@pytest.mark.slow
def test_small_latents_decode_padded_as_the_authors_do(case, record_property):
    """Latents under the minimum (1 frame, 2 rows: 3 x 3 x 3 here) are padded as ltx-core
    @400fd31 pads them (the last frame repeated, edge rows half before and half after) and
    the pixels cropped back; diffusers, which refuses them, decodes the padded latents."""
    import torch

    small = case["latents"][:, :1, :2]                          # [1, 1, 2, 4, 8]
    padded = np.pad(np.repeat(small, 3, axis=1), ((0, 0), (0, 0), (0, 1), (0, 0), (0, 0)),
                    mode="edge")
    noise = np.random.default_rng(8).standard_normal(
        case["vae"].noise_shape(small.shape)).astype(np.float32)
    d, std, mean = case["diffusers"], case["diffusers"].latents_std, case["diffusers"].latents_mean
    with torch.no_grad():
        z = to_ncthw(padded) * std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)
        ctx = d.decoder.forward_stage_4(d.decoder.forward_stages_1_to_3(z))
        ref = to_channels_last(d.decoder.denoise(ctx, to_ncthw(noise), 1))[:, :1, :32]
    assert_parity("decode_small_padded", _decode(case["vae"], small, noise), ref,
                  record_property)


def test_encode_matches_ltx_core(case, record_property):
    ref = case["reference"]("encoded")
    assert ref.shape == (2, 2, 2, 3, 8)
    assert_parity("encode", _encode(case["vae"], case["video"]), ref, record_property)


def _swap_q_k(*keys: str):
    def edit(tensors):
        for key in keys:
            q, k, v = np.split(tensors[key], 3, axis=0)
            tensors[key] = np.concatenate([k, q, v], 0)
    return edit


def test_decode_negative_control_q_k_swapped(case, tmp_path, record_property):
    bad = edited_copy(case["path"], tmp_path / case["path"].name, _swap_q_k(
        "decoder.det_stages.3.0.attn.qkv.weight", "decoder.diff_blocks.1.attn.qkv.weight",
        "decoder.diff_blocks.1.attn.qkv.bias"))
    vae = vidax.load("ltx2_5", "video_vae", bad)
    assert_fails("decode_negative_q_k_swapped", _decode(vae, case["latents"], case["noise"]),
                 case["reference"]("decoded"), record_property)


# ----------------------------------------------------------------------------- attention
GRIDS = [((5, 7, 9), (3, 5, 7), (2, 3, 4)), ((4, 6, 6), (3, 3, 5), (4, 8, 8)),
         ((3, 9, 5), (3, 7, 5), (1, 4, 2))]


def test_window_mask_is_diffusers_flex_mask():
    """vidax's windows are diffusers' ``_neighborhood_block_mask`` mask function, exactly."""
    import torch
    from diffusers.models.autoencoders import ltx2_diffusion_decoder as ref
    from torch.nn.attention import flex_attention

    seen = {}

    def grab(mask_mod, **kwargs):
        seen["mask_mod"] = mask_mod
    for grid, kernel, _ in GRIDS:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(flex_attention, "create_block_mask", grab)
            ref._neighborhood_block_mask(*grid, kernel, device="cpu")
        n = int(np.prod(grid))
        idx = torch.arange(n)
        want = seen["mask_mod"](0, 0, idx[:, None], idx[None, :]).numpy()
        np.testing.assert_array_equal(dd.dense_neighborhood_mask(grid, kernel), want)


def _dense_attention(q, k, v, mask):
    b, *grid, h, d = q.shape
    n = int(np.prod(grid))
    q, k, v = (x.reshape(b, n, h, d).astype(np.float64) for x in (q, k, v))
    logits = np.where(mask, np.einsum("bqhd,bkhd->bhqk", q, k), -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v).reshape(b, *grid, h, d)


def _truncated_mask(grid, kernel):
    """Zero-padding windows: centered, cut at the borders (not NATTEN's)."""
    axes = [np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= k // 2
            for n, k in zip(grid, kernel)]
    t, h, w = axes
    m = t[:, None, None, :, None, None] & h[None, :, None, None, :, None] & w[None, None, :, None,
                                                                           None, :]
    return m.reshape(int(np.prod(grid)), -1)


@pytest.mark.parametrize("grid,kernel,block", GRIDS)
def test_blocked_attention_is_dense_masked_attention(grid, kernel, block, record_property,
                                                     monkeypatch):
    if block == GRIDS[0][2]:
        # 27 blocks of 24 queries, 2 a step: lax.map with a remainder (long grids' path)
        monkeypatch.setattr(dd, "NA_QUERIES_PER_STEP", 48)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, *grid, 2, 8)).astype(np.float32) for _ in range(3))
    out = np.asarray(dd.neighborhood_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                               kernel, block))
    assert_parity(f"na_{grid}", out, _dense_attention(q, k, v, dd.dense_neighborhood_mask(
        grid, kernel)), record_property)
    assert_fails(f"na_{grid}_negative_truncated_windows", out,
                 _dense_attention(q, k, v, _truncated_mask(grid, kernel)), record_property)


# ----------------------------------------------------------------------------- file, API
def test_written_layout_has_the_release_key_patterns(case):
    with safetensors.safe_open(str(case["path"]), "np") as f:
        ours = {_pattern(k) for k in f.keys()}
    assert ours == {_pattern(k) for k in get_manifest(MANIFEST).tensors}


def test_config_comes_from_the_file_metadata(case):
    spec = registry.get("ltx2_5", "video_vae", "original")
    with safetensors.safe_open(str(case["path"]), "np") as f:
        cfg = spec.config_from_file_metadata(f.metadata(), str(case["path"]))
    assert cfg == LTX2DiffusionVAEConfig.tiny() == case["vae"].config


def test_decode_arguments_are_checked():
    vae = AbstractModel(lambda: dd.LTX2DiffusionVAE(LTX2DiffusionVAEConfig.tiny()))
    z = jnp.zeros(LATENTS)
    assert vae.decode_normalized(z, key=jax.random.key(0)).shape == (1, 17, 48, 64, 3)
    with pytest.raises(VidaxError, match="exactly one"):
        vae.decode_normalized(z)
    with pytest.raises(VidaxError, match="expected"):
        vae.decode_normalized(z, jnp.zeros((1, 17, 48, 48, 3)))
    # under the minimum (3, 3, 3 here): padded, the pixels cropped back
    assert dd.min_latent_shape(LTX2DiffusionVAEConfig.tiny().decoder) == (3, 3, 3)
    small = jnp.zeros((1, 1, 2, 4, 8))
    abstract = nnx.eval_shape(lambda: dd.LTX2DiffusionVAE(LTX2DiffusionVAEConfig.tiny()))
    assert abstract.noise_shape(small.shape) == (1, 17, 48, 64, 3)
    assert vae.decode_normalized(small, key=jax.random.key(0)).shape == (1, 1, 32, 64, 3)


# ----------------------------------------------------------------------------- manifest
def test_release_manifest_verifies():
    manifest = get_manifest(MANIFEST)
    report = verify_manifest(manifest)
    assert report.ok, report.headline()
    assert (report.num_tensors, report.matched, report.num_leaves, report.num_params) == (
        395, 395, 491, 736_070_769)
    assert LTX2DiffusionVAEConfig.from_dict(manifest.config["instantiated_with"]) == (
        LTX2DiffusionVAEConfig.ltx2_5())


def test_an_extra_type_emb_is_ignored_with_its_reason():
    """A third-party header count has one more decoder tensor, ``decoder.type_emb`` [128]:
    the authors' model has no such parameter and their loader is not strict."""
    from vidax.loading import verify_tensors
    from vidax.translator.mapping import TensorInfo

    manifest = get_manifest(MANIFEST)
    tensors = {k: TensorInfo(tuple(t.shape), t.dtype) for k, t in manifest.tensors.items()}
    tensors["decoder.type_emb"] = TensorInfo((128,), "bfloat16")
    spec = registry.get("ltx2_5", "video_vae", "original")
    report, _, _ = verify_tensors(spec, LTX2DiffusionVAEConfig.ltx2_5(), tensors, source="x")
    assert report.ok and report.matched == 395
    assert "DiffusionVideoDecoder" in report.ignored["decoder.type_emb"]


def test_unknown_and_unsupported_config_is_refused():
    with pytest.raises(VidaxError, match="unknown"):
        LTX2DiffusionVAEConfig.from_dict({**CONFIG, "decoder": {**CONFIG["decoder"], "x": 1}})
    with pytest.raises(VidaxError, match="resampler_kind"):
        LTX2DiffusionVAEConfig.from_dict(
            {**CONFIG, "decoder": {**CONFIG["decoder"], "resampler_kind": "conv"}})
    with pytest.raises(VidaxError, match="CausalDiffusionVAE"):
        LTX2DiffusionVAEConfig.from_dict({**CONFIG, "_class_name": "CausalVideoAutoencoder"})
