"""vidax's CogVideoX / CogVideoX1.5 DiT against diffusers' ``CogVideoXTransformer3DModel``.

Oracle (DESIGN.md §6): diffusers' model at a tiny config of each structural kind
(``CogVideoXDiTConfig.tiny(kind)``: 2 layers, 2 heads of 16, 8 text tokens), random values
in every tensor (the 5b-i2v learned ``pos_embedding`` buffer included), written by diffusers
itself (``save_pretrained``: ``diffusion_pytorch_model.safetensors`` + ``config.json``).
vidax reads the config from that ``config.json`` and the weights through ``vidax.load``.

The kinds and what each one exercises:

* ``2b``: Conv2d patch embedding, the 3D sincos table (recomputed: the grid is not the
  sample size), no RoPE.
* ``5b``: 3D RoPE over a 5 x 6 patch grid in a 4 x 6 sample grid, so the pipeline's
  resize-crop region gives fractional ``linspace`` positions.
* ``5b-i2v``: 32 input channels, RoPE, and the learned table, used because the input is the
  tiny config's sample size (3 latent frames of 4 x 6 patches).
* ``1.5-5b``: Linear patch embedding over (C, p_t, p, p), temporal patch 2 (4 latent frames
  -> 2), slice-grid RoPE.
* ``1.5-5b-i2v``: the same with 32 channels and the ``ofs`` embedding (ofs = 2.0).

diffusers gets its RoPE tables from its pipeline's own
``_prepare_rotary_positional_embeddings``; vidax computes its own from the grid (so the table
code is under test too). Batch 2, timesteps 937 and 121.5.

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers).
Measured (this machine): 2b 1.3e-6, 5b 1.2e-6, 5b-i2v 1.4e-6 (at 2 latent frames, where
the learned table falls back to sincos: 1.7e-6), 1.5-5b 1.7e-6, 1.5-5b-i2v 1.6e-6 (x std).
Negative controls, one per kind, on an edited copy of the saved file against the same reference
output: 5b ``to_q`` and ``to_k`` of block 0 exchanged (measured 0.46 x std); 2b and 1.5-5b the
patch embedding's last axis reversed, 5b-i2v the learned table's rows shifted by one,
1.5-5b-i2v the ``ofs`` embedding's first Linear negated.

bfloat16 compute (``compute_dtype=jnp.bfloat16``, every kind) against the same float32
reference: bound 5e-2 x std and correlation > 0.999, output float32. Measured: 2b 1.4e-2,
5b 1.6e-2, 5b-i2v 1.3e-2, 1.5-5b 1.9e-2, 1.5-5b-i2v 1.3e-2 (x std), correlation 0.999995
to 0.999996 for all.

Also: the RoPE tables against the pipeline's and the sincos table against diffusers' at
released sizes, every ``cogvideox/*__dit`` release manifest verifying 1:1 with the preset as
its config, and the config / input errors.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import (AbstractModel, assert_fails, assert_parity, compare, edited_copy,
                          randomize, swap)
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.models.cogvideox.dit import CogVideoXDiT, CogVideoXDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

BATCH = 2
TIMESTEPS = (937.0, 121.5)
VAE_SPATIAL = 8   # the pipelines' vae_scale_factor_spatial: RoPE grids are given in pixels
# kind -> (latent frames, latent height, latent width, text tokens)
INPUTS = {
    "2b": (3, 10, 12, 8),
    "5b": (3, 10, 12, 6),
    "5b-i2v": (3, 8, 12, 8),
    "1.5-5b": (4, 6, 10, 6),
    "1.5-5b-i2v": (4, 6, 10, 6),
}
KINDS = sorted(INPUTS)
#: The kinds in the fast lane: 2b (the sincos table, Conv2d patches) and 5b (RoPE, the negative
#: control's file); the other three, and the bfloat16 runs, in CI (``-m slow``).
FAST_KINDS = ("2b", "5b")
PRESETS = {"2b": CogVideoXDiTConfig.cogvideox_2b, "5b": CogVideoXDiTConfig.cogvideox_5b,
           "5b-i2v": CogVideoXDiTConfig.cogvideox_5b_i2v,
           "1.5-5b": CogVideoXDiTConfig.cogvideox1_5_5b,
           "1.5-5b-i2v": CogVideoXDiTConfig.cogvideox1_5_5b_i2v}


def _reference_rope(ref, frames: int, height: int, width: int):
    """The tables diffusers' pipeline hands its transformer (the pipeline's own method,
    called with the two attributes it reads)."""
    import torch
    from diffusers import CogVideoXPipeline

    pipe = SimpleNamespace(vae_scale_factor_spatial=VAE_SPATIAL, transformer=ref)
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(
        pipe, height * VAE_SPATIAL, width * VAE_SPATIAL, frames, torch.device("cpu"))


@pytest.fixture(scope="module", params=[k if k in FAST_KINDS else
                                        pytest.param(k, marks=pytest.mark.slow)
                                        for k in KINDS])
def case(request, tmp_path_factory):
    """diffusers' tiny model of one kind, saved by itself, its inputs and its output."""
    import torch
    from diffusers import CogVideoXTransformer3DModel

    kind = request.param
    cfg = CogVideoXDiTConfig.tiny(kind)
    ref = CogVideoXTransformer3DModel(**dataclasses.asdict(cfg)).eval()
    randomize(sorted(ref.named_parameters()), seed=0)
    if cfg.use_learned_positional_embeddings:   # a persistent buffer, not a parameter
        gen = torch.Generator().manual_seed(1)
        table = ref.patch_embed.pos_embedding
        table.copy_(0.5 * torch.randn(table.shape, generator=gen))
    folder = tmp_path_factory.mktemp(f"cogvideox_{kind}_dit")
    ref.save_pretrained(folder)

    frames, height, width, text_len = INPUTS[kind]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((BATCH, frames, height, width, cfg.in_channels)).astype(np.float32)
    context = rng.standard_normal((BATCH, text_len, cfg.text_embed_dim)).astype(np.float32)
    t = np.asarray(TIMESTEPS, np.float32)
    ofs = 2.0 if cfg.ofs_embed_dim else None
    rope = (_reference_rope(ref, frames, height, width)
            if cfg.use_rotary_positional_embeddings else None)
    with torch.no_grad():
        out = ref(torch.from_numpy(x).permute(0, 1, 4, 2, 3), torch.from_numpy(context),
                  torch.from_numpy(t), ofs=None if ofs is None else torch.full((BATCH,), ofs),
                  image_rotary_emb=rope, return_dict=False)[0]
    return {"kind": kind, "cfg": cfg, "folder": folder, "model": ref,
            "path": folder / "diffusion_pytorch_model.safetensors",
            "inputs": (x, context, t, ofs), "ref": out.permute(0, 1, 3, 4, 2).numpy()}


@nnx.jit(static_argnames="ofs")
def _run(model, x, context, t, ofs):
    return model(x, context, t, ofs=ofs)


def _vidax_output(path, cfg, inputs):
    model = vidax.load("cogvideox", "dit", path, config=cfg)
    assert isinstance(model, CogVideoXDiT)
    return np.asarray(_run(model, *inputs))


def test_matches_diffusers(case, record_property):
    config_json = json.loads((case["folder"] / "config.json").read_text())
    cfg = CogVideoXDiTConfig.from_dict(config_json)
    assert cfg == case["cfg"]
    assert_parity(f"cogvideox_{case['kind']}_dit", _vidax_output(case["path"], cfg,
                                                                  case["inputs"]),
                  case["ref"], record_property)


@pytest.mark.parametrize("case", ["5b"], indirect=True)
def test_negative_control_swapped_q_k(case, tmp_path, record_property):
    bad = edited_copy(case["path"], tmp_path / "diffusion_pytorch_model.safetensors",
                      swap(("transformer_blocks.0.attn1.to_q.weight",
                            "transformer_blocks.0.attn1.to_k.weight")))
    assert_fails(f"cogvideox_{case['kind']}_negative", _vidax_output(bad, case["cfg"],
                                                                      case["inputs"]),
                 case["ref"], record_property)


def _flip_last(key):
    """An edit reversing the last axis of ``key``: the Conv2d kernel's width taps (2b), the
    Linear patch embedding's (C, p_t, p, p) input order (1.5)."""
    def edit(tensors):
        tensors[key] = np.ascontiguousarray(tensors[key][..., ::-1])
    return edit


def _roll_table(tensors):
    """The learned position table's rows shifted by one (5b-i2v)."""
    key = "patch_embed.pos_embedding"
    tensors[key] = np.ascontiguousarray(np.roll(tensors[key], 1, axis=1))


def _negate_ofs(tensors):
    """The ``ofs`` embedding's first Linear negated (1.5-5b-i2v)."""
    key = "ofs_embedding.linear_1.weight"
    tensors[key] = -tensors[key]


#: kind -> the edit of its saved file that must fail the bound: each kind's own structure
#: (the patch embedding's layout, the learned table, the ofs embedding); 5b: the q/k swap above.
KIND_EDITS = {"2b": _flip_last("patch_embed.proj.weight"), "5b-i2v": _roll_table,
              "1.5-5b": _flip_last("patch_embed.proj.weight"), "1.5-5b-i2v": _negate_ofs}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(KIND_EDITS), indirect=True)
def test_negative_control_per_kind(case, tmp_path, record_property):
    """The saved reference output against vidax on an edited copy of the file (one new
    vidax run, no new reference run)."""
    bad = edited_copy(case["path"], tmp_path / "diffusion_pytorch_model.safetensors",
                      KIND_EDITS[case["kind"]])
    assert_fails(f"cogvideox_{case['kind']}_negative_kind", _vidax_output(bad, case["cfg"],
                                                                           case["inputs"]),
                 case["ref"], record_property)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["5b-i2v"], indirect=True)
def test_learned_table_falls_back_at_other_frame_counts(case, record_property):
    """5b-i2v at 2 latent frames instead of the sample's 3: diffusers (and vidax) replace
    the learned table by the sincos one; the RoPE tables follow the grid."""
    import torch

    x, context, t, _ = case["inputs"]
    x = x[:, :2]
    with torch.no_grad():
        ref = case["model"](torch.from_numpy(x).permute(0, 1, 4, 2, 3),
                            torch.from_numpy(context), torch.from_numpy(t),
                            image_rotary_emb=_reference_rope(case["model"], *x.shape[1:4]),
                            return_dict=False)[0].permute(0, 1, 3, 4, 2).numpy()
    assert_parity("cogvideox_5b-i2v_2_frames", _vidax_output(case["path"], case["cfg"],
                                                             (x, context, t, None)),
                  ref, record_property)


# (variant, latent frames, latent height, latent width) at full size: the default 480 x 720,
# a wide 768 x 1360 (fractional crop-region positions for 1.0), a portrait shape, and 1.5's
# odd latent frame count (the pipeline's RoPE rounds the patch frames up).
TABLE_CASES = [("5b", 13, 60, 90), ("5b", 13, 96, 170), ("5b", 7, 100, 60),
               ("1.5-5b", 22, 96, 170), ("1.5-5b", 21, 60, 90)]


@pytest.mark.parametrize("variant, frames, height, width", TABLE_CASES)
def test_rope_tables_match_pipeline(variant, frames, height, width):
    """vidax's RoPE tables (float64 host math) against the ones diffusers' pipeline builds
    (float32) at released configs: equal within float32 rounding of angles up to ~85 rad."""
    from vidax.models.cogvideox.dit import rope_tables

    cfg = PRESETS[variant]()
    fields = ("patch_size", "patch_size_t", "sample_width", "sample_height",
              "attention_head_dim")
    ref = SimpleNamespace(config=SimpleNamespace(**{k: getattr(cfg, k) for k in fields}))
    cos, sin = _reference_rope(ref, frames, height, width)
    pt = cfg.patch_size_t or 1
    grid = (-(-frames // pt), height // cfg.patch_size, width // cfg.patch_size)
    ours = rope_tables(cfg, grid)
    # diffusers repeats each pair's angle for the pair's two entries.
    for mine, theirs in zip(ours, (cos, sin)):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy()[:, ::2], rtol=0, atol=1e-5)
        np.testing.assert_array_equal(theirs.numpy()[:, ::2], theirs.numpy()[:, 1::2])


@pytest.mark.slow
@pytest.mark.parametrize("grid", [(13, 30, 45), (7, 48, 85)])
def test_sincos_table_matches_diffusers(grid):
    """The 2b's table against ``get_3d_sincos_pos_embed`` at full width (1920)."""
    from diffusers.models.embeddings import get_3d_sincos_pos_embed

    from vidax.models.cogvideox.dit import sincos_pos_embed

    t, h, w = grid
    ref = get_3d_sincos_pos_embed(1920, (w, h), t, 1.875, 1.0).flatten(0, 1).numpy()
    np.testing.assert_allclose(sincos_pos_embed(grid, 1920), ref, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- structure, config
@pytest.mark.parametrize("variant", [k if k in FAST_KINDS else
                                     pytest.param(k, marks=pytest.mark.slow) for k in KINDS])
def test_release_manifest_verifies(variant):
    """The full-size release's names and shapes, through the mapper, match the model's
    abstract tree 1:1, and the manifest's config is the preset."""
    manifest = get_manifest(f"cogvideox/{variant}__dit")
    assert CogVideoXDiTConfig.from_dict(manifest.config) == PRESETS[variant]()
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors
    assert report.num_params == manifest.num_params


def test_config_errors():
    released = dict(get_manifest("cogvideox/5b__dit").config, _class_name="X")
    with pytest.raises(VidaxError, match="unknown"):
        CogVideoXDiTConfig.from_dict(dict(released, use_magic=True))
    with pytest.raises(VidaxError, match="activation_fn"):
        CogVideoXDiTConfig.from_dict(dict(released, activation_fn="gelu"))
    with pytest.raises(VidaxError, match="learned"):
        CogVideoXDiTConfig.from_dict(dict(released, use_rotary_positional_embeddings=False,
                                          use_learned_positional_embeddings=True))


def test_input_errors():
    cfg = CogVideoXDiTConfig.tiny("5b-i2v")
    model = AbstractModel(lambda: CogVideoXDiT(cfg))
    context = np.zeros((1, cfg.max_text_seq_length, cfg.text_embed_dim), np.float32)
    with pytest.raises(VidaxError, match="sample resolution"):
        model(np.zeros((1, 3, 10, 12, 32), np.float32), context, 1.0)
    with pytest.raises(VidaxError, match="max_text_seq_length"):
        model(np.zeros((1, 3, 8, 12, 32), np.float32), context[:, :5], 1.0)
    with pytest.raises(VidaxError, match="ofs"):
        model(np.zeros((1, 3, 8, 12, 32), np.float32), context, 1.0, ofs=2.0)
    model15 = AbstractModel(lambda: CogVideoXDiT(CogVideoXDiTConfig.tiny("1.5-5b")))
    with pytest.raises(VidaxError, match="divisible"):
        model15(np.zeros((1, 3, 6, 10, 16), np.float32), context, 1.0)
    with pytest.raises(VidaxError, match="at most"):
        model15(np.zeros((1, 2, 10, 10, 16), np.float32), context, 1.0)


# ----------------------------------------------------------------------------- bfloat16 compute
#: ``compute_dtype=bfloat16`` against the float32 reference: bf16 carries 8 bits of mantissa,
#: so this is a loose bound, not parity (the other DiTs' bf16 checks land at 1-3e-2 x std).
BF16_REL_TOL = 5e-2


@nnx.jit(static_argnames=("ofs", "compute_dtype"))
def _run_compute(model, x, context, t, ofs, compute_dtype):
    return model(x, context, t, ofs=ofs, compute_dtype=compute_dtype)


@pytest.mark.slow
def test_bfloat16_compute_stays_close(case, record_property):
    """bf16 Linears, attention and FFN with float32 islands (timestep embedding, modulation,
    norm statistics, q/k norm + RoPE, output head) and a float32 residual stream: no
    bit-level oracle exists for this mixed policy (diffusers runs all-bf16), so this bounds
    its distance from the float32 diffusers output (measured: see the module docstring)."""
    model = vidax.load("cogvideox", "dit", case["path"], config=case["cfg"])
    out = _run_compute(model, *case["inputs"], compute_dtype=jnp.bfloat16)
    assert out.dtype == jnp.float32
    stats = compare(f"cogvideox_{case['kind']}_dit_bf16", np.asarray(out), case["ref"],
                    record_property, rel_tol=BF16_REL_TOL)
    assert stats["max_abs_diff"] <= stats["bound"] and stats["corr"] > 0.999, stats


def test_compute_dtype_errors():
    cfg = CogVideoXDiTConfig.tiny("2b")
    model = AbstractModel(lambda: CogVideoXDiT(cfg))
    x = np.zeros((1, 1, 4, 4, cfg.in_channels), np.float32)
    context = np.zeros((1, cfg.max_text_seq_length, cfg.text_embed_dim), np.float32)
    with pytest.raises(VidaxError, match="compute_dtype"):
        model(x, context, 1.0, compute_dtype=jnp.float16)
