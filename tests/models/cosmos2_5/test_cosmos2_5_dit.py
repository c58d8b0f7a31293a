"""vidax's Cosmos-Predict2.5 DiT against diffusers' ``CosmosTransformer3DModel``, in both layouts.

Oracle (DESIGN.md §6): diffusers' ``CosmosTransformer3DModel`` at a tiny config with the 2.5
structure (adaLN-LoRA, the text projection ``crossattn_proj``, ``concat_padding_mask``,
``rope_scale (1, 3, 3)``, no extra position embedding), random values in every tensor. The
authors' ``MinimalV1LVGDiT`` needs TransformerEngine (CUDA), so it cannot run here; diffusers'
class is the same network under other names, with one difference: diffusers builds the q/k
RMSNorms with its ``Attention`` default eps 1e-5, the authors with 1e-6. The main oracle is
diffusers with those norms set to the authors' 1e-6; diffusers as shipped is checked against
vidax at ``qk_norm_eps=1e-5``.

* diffusers layout: the reference saved by its own ``save_pretrained``; vidax reads
  ``config.json`` and loads the weights through ``vidax.load(..., layout="diffusers")``.
* original layout: the authors' ``.pt`` rebuilt from the reference's state dict by inverting
  diffusers' own rename table (``TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0`` of its
  ``scripts/convert_cosmos_to_diffusers.py``, copied below as data; the inverse is mechanical
  and checked to round-trip), ``net.`` in front, plus every non-weight entry a released file
  holds (int64 counters, ``accum_train_in_hours``, the ``pos_embedder`` buffers, TE
  ``_extra_state`` uint8[5] per RMSNorm), written with ``torch.save``.

Inputs: batch 2, per-frame timesteps (one conditioning frame near 0), a random binary
condition mask and a pixel-resolution padding mask (a 2.5x nearest resize), 12 text tokens,
a 3 x 4 x 6 token grid. Bound: float32, matmul precision "highest",
max |vidax - reference| <= 1e-4 x std(reference). Negative controls (q and k of one block's
self-attention swapped in each saved file) must fail it. Measured: see docs/models/cosmos2_5.md.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity, edited_copy, randomize, swap
from vidax import loading, registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.cosmos2_5.dit import CosmosDiT, CosmosDiTConfig, nearest_indices

jax.config.update("jax_default_matmul_precision", "highest")

DIT_MANIFESTS = sorted(m.name for m in all_manifests()
                       if m.family == "cosmos2_5" and m.component.startswith("dit"))
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 8, 12     # latent size; tokens 3 x 4 x 6
PIXEL_H, PIXEL_W = 20, 30                       # padding-mask grid: a 2.5x nearest resize
TEXT_TOKENS = 12
# per latent frame, scheduler units; sample 0's first frame is a conditioning frame
TIMESTEPS = ((0.1, 937.0, 937.0), (421.5, 421.5, 421.5))

# diffusers' scripts/convert_cosmos_to_diffusers.py, TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0
# (huggingface/diffusers; the scripts/ folder is not in the PyPI package, so the table is
# copied here as data). diffusers applies it as ordered substring replacements after
# stripping "net.".
DIFFUSERS_RENAME_COSMOS_2_0 = {
    "t_embedder.1": "time_embed.t_embedder",
    "t_embedding_norm": "time_embed.norm",
    "blocks": "transformer_blocks",
    "adaln_modulation_self_attn.1": "norm1.linear_1",
    "adaln_modulation_self_attn.2": "norm1.linear_2",
    "adaln_modulation_cross_attn.1": "norm2.linear_1",
    "adaln_modulation_cross_attn.2": "norm2.linear_2",
    "adaln_modulation_mlp.1": "norm3.linear_1",
    "adaln_modulation_mlp.2": "norm3.linear_2",
    "self_attn": "attn1",
    "cross_attn": "attn2",
    "q_proj": "to_q",
    "k_proj": "to_k",
    "v_proj": "to_v",
    "output_proj": "to_out.0",
    "q_norm": "norm_q",
    "k_norm": "norm_k",
    "mlp.layer1": "ff.net.0.proj",
    "mlp.layer2": "ff.net.2",
    "x_embedder.proj.1": "patch_embed.proj",
    "final_layer.adaln_modulation.1": "norm_out.linear_1",
    "final_layer.adaln_modulation.2": "norm_out.linear_2",
    "final_layer.linear": "proj_out",
}


def to_diffusers(original_key: str) -> str:
    """diffusers' conversion of one key, as its script does it."""
    key = original_key.removeprefix("net.")
    for old, new in DIFFUSERS_RENAME_COSMOS_2_0.items():
        key = key.replace(old, new)
    return key


def to_original(diffusers_key: str) -> str:
    """The table inverted mechanically: swapped pairs, applied in reverse order."""
    key = diffusers_key
    for old, new in reversed(DIFFUSERS_RENAME_COSMOS_2_0.items()):
        key = key.replace(new, old)
    return "net." + key


# ----------------------------------------------------------------------------- structure
# The 2B pre-trained release in both layouts in the fast lane; the rest in CI (``-m slow``).
FAST_MANIFESTS = ("cosmos2_5/predict-2b-pre-trained__dit", "cosmos2_5/predict-2b__dit_diffusers")


@pytest.mark.parametrize("name", [n if n in FAST_MANIFESTS else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in DIT_MANIFESTS])
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    ignored = manifest.num_tensors - report.matched
    # original .pt: 4 counters, 3 RoPE buffers, one TE extra state per RMSNorm (4/block + 1)
    blocks = 28 if "2b" in manifest.variant else 36
    assert ignored == (0 if manifest.layout == "diffusers" else 4 + 3 + 4 * blocks + 1)


def test_all_six_dit_manifests_are_covered():
    assert len(DIT_MANIFESTS) == 6


@pytest.mark.parametrize("name", DIT_MANIFESTS)
def test_presets_are_the_released_configs(name):
    manifest = get_manifest(name)
    preset = CosmosDiTConfig.predict_14b() if "14b" in name else CosmosDiTConfig.predict_2b()
    assert CosmosDiTConfig.from_dict(manifest.config) == preset
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    assert spec.make_config(variant) == preset


@pytest.mark.parametrize("key, value", [("rope_enable_fps_modulation", True),
                                        ("extra_per_block_abs_pos_emb", True),
                                        ("mystery", 1)])
def test_config_rejects_other_networks(key, value):
    config = dict(get_manifest("cosmos2_5/predict-2b-pre-trained__dit").config, **{key: value})
    with pytest.raises(VidaxError, match=key):
        CosmosDiTConfig.from_dict(config)


def test_rename_table_inverse_round_trips():
    """Every original key of the 2B release survives original -> diffusers -> original."""
    original = get_manifest("cosmos2_5/predict-2b-pre-trained__dit").tensors
    diffusers = get_manifest("cosmos2_5/predict-2b__dit_diffusers").tensors
    weights = [k for k in original if to_diffusers(k) in diffusers]
    assert len(weights) == len(diffusers)
    assert all(to_original(to_diffusers(k)) == k for k in weights)


@pytest.mark.parametrize("size_in, size_out", [(20, 8), (30, 12), (8, 8), (5, 13)])
def test_nearest_indices_are_torch_nearest(size_in, size_out):
    import torch

    grid = torch.arange(size_in, dtype=torch.float32)[None, None]
    ref = torch.nn.functional.interpolate(grid, size=size_out, mode="nearest")
    assert nearest_indices(size_in, size_out).tolist() == ref[0, 0].long().tolist()


# ----------------------------------------------------------------------------- numerics
def _torchvision_resize_stub():
    """diffusers' Cosmos forward resizes the padding mask with torchvision, which is not
    installed here. torchvision's tensor ``resize`` with NEAREST is ``interpolate(mode=
    "nearest")`` (no antialiasing for nearest); this stub is exactly that."""
    import torch

    def resize(img, size, interpolation):
        assert interpolation == "nearest"
        return torch.nn.functional.interpolate(img, size=list(size), mode="nearest")
    return types.SimpleNamespace(functional=types.SimpleNamespace(resize=resize),
                                 InterpolationMode=types.SimpleNamespace(NEAREST="nearest"))


def _inputs(cfg: CosmosDiTConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    f32 = np.float32
    return {
        "x": rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, cfg.in_channels)).astype(f32),
        "timesteps": np.asarray(TIMESTEPS, f32),
        "context": rng.standard_normal((BATCH, TEXT_TOKENS, cfg.crossattn_proj_in_channels)
                                       ).astype(f32),
        "condition_mask": (rng.random((BATCH, FRAMES, HEIGHT, WIDTH, 1)) < 0.5).astype(f32),
        "padding_mask": (rng.random((1, PIXEL_H, PIXEL_W)) < 0.3).astype(f32),
    }


def _diffusers_output(ref, cfg: CosmosDiTConfig, inputs) -> np.ndarray:
    """diffusers' forward: NCTHW, the timesteps already scaled (its pipeline passes sigma),
    per frame as [B, 1, T, 1, 1], the padding mask [1, 1, H', W']."""
    import torch

    def ncthw(a):
        return torch.from_numpy(a).permute(0, 4, 1, 2, 3)
    t = inputs["timesteps"] * np.float32(cfg.timestep_scale)
    with torch.no_grad():
        out = ref(hidden_states=ncthw(inputs["x"]),
                  timestep=torch.from_numpy(t).reshape(BATCH, 1, FRAMES, 1, 1),
                  encoder_hidden_states=torch.from_numpy(inputs["context"]),
                  condition_mask=ncthw(inputs["condition_mask"]),
                  padding_mask=torch.from_numpy(inputs["padding_mask"])[:, None],
                  return_dict=False)[0]
    return out.permute(0, 2, 3, 4, 1).numpy()


@nnx.jit
def _run(model, x, timesteps, context, condition_mask, padding_mask):
    return model(x, timesteps, context, condition_mask=condition_mask,
                 padding_mask=padding_mask)


def _vidax_output(path: Path, cfg: CosmosDiTConfig, inputs, layout: str) -> np.ndarray:
    model = vidax.load("cosmos2_5", "dit", path, config=cfg, layout=layout)
    assert isinstance(model, CosmosDiT)
    return np.asarray(_run(model, **inputs))


def _set_qk_norm_eps(ref, eps: float) -> None:
    for block in ref.transformer_blocks:
        for attn in (block.attn1, block.attn2):
            attn.norm_q.eps = attn.norm_k.eps = eps


def _original_pt(state_dict: dict, cfg: CosmosDiTConfig, path: Path) -> Path:
    """The authors' file: renamed weights under ``net.`` plus the non-weights a release holds."""
    import torch

    sd = {to_original(k): v.clone() for k, v in state_dict.items()}
    sd["net.accum_video_sample_counter"] = torch.tensor(123456, dtype=torch.int64)
    sd["net.accum_image_sample_counter"] = torch.tensor(7890, dtype=torch.int64)
    sd["net.accum_iteration"] = torch.tensor(42000, dtype=torch.int64)
    sd["net.accum_train_in_hours"] = torch.tensor(1234.5, dtype=torch.bfloat16)
    dim_t, dim_h, _ = cfg.rope_axis_dims
    sd["net.pos_embedder.seq"] = torch.arange(max(cfg.max_grid), dtype=torch.bfloat16)
    sd["net.pos_embedder.dim_spatial_range"] = (torch.arange(0, dim_h, 2) / dim_h).bfloat16()
    sd["net.pos_embedder.dim_temporal_range"] = (torch.arange(0, dim_t, 2) / dim_t).bfloat16()
    te_state = torch.frombuffer(bytearray(pickle.dumps({}, protocol=4)), dtype=torch.uint8)
    assert te_state.shape == (5,)
    for key in [k for k in sd if k.endswith(("q_norm.weight", "k_norm.weight"))] + [
            "net.t_embedding_norm.weight"]:
        sd[key.removesuffix("weight") + "_extra_state"] = te_state.clone()
    torch.save(sd, path)
    return path


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """diffusers' tiny 2.5 DiT saved both ways, the inputs and its outputs."""
    import diffusers.models.transformers.transformer_cosmos as cosmos_module
    from diffusers import CosmosTransformer3DModel

    tiny = CosmosDiTConfig.tiny()
    ref = CosmosTransformer3DModel(
        in_channels=tiny.in_channels + 1, out_channels=tiny.out_channels,
        num_attention_heads=tiny.num_heads, attention_head_dim=tiny.head_dim,
        num_layers=tiny.num_blocks, mlp_ratio=tiny.mlp_ratio,
        text_embed_dim=tiny.crossattn_emb_channels, adaln_lora_dim=tiny.adaln_lora_dim,
        max_size=(tiny.max_frames, tiny.max_img_h, tiny.max_img_w), patch_size=tiny.patch_size,
        rope_scale=(1.0, 3.0, 3.0), concat_padding_mask=True, extra_pos_embed_type=None,
        use_crossattn_projection=True,
        crossattn_proj_in_channels=tiny.crossattn_proj_in_channels,
        encoder_hidden_states_channels=tiny.crossattn_emb_channels).eval()
    randomize(sorted(ref.named_parameters()), seed=2)
    folder = tmp_path_factory.mktemp("cosmos2_5_dit")
    ref.save_pretrained(folder)
    cfg = registry.get("cosmos2_5", "dit", "diffusers").make_config(
        overrides=json.loads((folder / "config.json").read_text()))
    assert cfg == tiny
    inputs = _inputs(cfg)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cosmos_module, "transforms", _torchvision_resize_stub(), raising=False)
        shipped = _diffusers_output(ref, cfg, inputs)          # q/k norm eps 1e-5
        _set_qk_norm_eps(ref, cfg.qk_norm_eps)
        expected = _diffusers_output(ref, cfg, inputs)         # the authors' eps 1e-6
    return {"cfg": cfg, "inputs": inputs, "expected": expected, "shipped": shipped,
            "safetensors": folder / "diffusion_pytorch_model.safetensors",
            "pt": _original_pt(ref.state_dict(), cfg, folder / "tiny_ema_bf16.pt")}


def test_diffusers_layout_matches(case, record_property):
    out = _vidax_output(case["safetensors"], case["cfg"], case["inputs"], "diffusers")
    assert_parity("cosmos2_5_dit_diffusers", out, case["expected"], record_property)


@pytest.mark.slow
def test_diffusers_as_shipped_matches_at_its_qk_norm_eps(case, record_property):
    cfg = dataclasses.replace(case["cfg"], qk_norm_eps=1e-5)
    out = _vidax_output(case["safetensors"], cfg, case["inputs"], "diffusers")
    assert_parity("cosmos2_5_dit_diffusers_eps1e-5", out, case["shipped"], record_property)


def test_original_layout_matches(case, record_property):
    assert loading._detect_layout("cosmos2_5", "dit", case["pt"], case["cfg"]) == "original"
    out = _vidax_output(case["pt"], case["cfg"], case["inputs"], "original")
    assert_parity("cosmos2_5_dit_original", out, case["expected"], record_property)


def test_negative_control_original_layout(case, tmp_path, record_property):
    bad = edited_copy(case["pt"], tmp_path / "swapped_ema_bf16.pt",
                      swap(("net.blocks.0.self_attn.q_proj.weight",
                            "net.blocks.0.self_attn.k_proj.weight")))
    out = _vidax_output(bad, case["cfg"], case["inputs"], "original")
    assert_fails("cosmos2_5_dit_original_negative", out, case["expected"], record_property)


def test_negative_control_diffusers_layout(case, tmp_path, record_property):
    bad = edited_copy(case["safetensors"], tmp_path / "diffusion_pytorch_model.safetensors",
                      swap(("transformer_blocks.1.attn1.to_q.weight",
                            "transformer_blocks.1.attn1.to_k.weight")))
    out = _vidax_output(bad, case["cfg"], case["inputs"], "diffusers")
    assert_fails("cosmos2_5_dit_diffusers_negative", out, case["expected"], record_property)
