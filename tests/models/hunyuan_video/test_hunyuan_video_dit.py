"""vidax's HunyuanVideo 1.0 DiT against diffusers' ``HunyuanVideoTransformer3DModel``.

The authors' ``HYVideoDiffusionTransformer`` is not installable (not on PyPI), so the oracle
is diffusers' port, fed through diffusers' OWN converter
(``convert_hunyuan_video_transformer_to_diffusers``) from the same authors'-layout state dict
vidax loads (DESIGN.md §6):

1. a tiny random state dict in the authors' key layout (:func:`authors_state`; its key set is
   checked against the full-size release manifest's, block indices aside), random values in
   every tensor (token refiner, norms and guidance embedding included);
2. saved as the release is, ``torch.save({"module": sd}, "mp_rank_00_model_states.pt")``, and
   loaded by vidax through ``vidax.load`` (the reader picks the ``module`` wrapper);
3. converted by diffusers' converter and loaded strictly into a tiny diffusers model.

diffusers' converter hard-codes ``hidden_size = 3072`` for splitting the single blocks'
``linear1`` (the release's width); :func:`diffusers_converter` runs the same code object with
that one constant replaced by the tiny width (asserting it is the only 3072 in the converter),
so the conversion logic stays diffusers' own.

Inputs: batch 2 with different timesteps, guidance scales and text lengths (6 and 10 of 10
tokens; the padded text states are random, not zero, so a mask that leaks shows), a 3 x 4 x 6
token grid (unequal axes, so a transposed RoPE axis or unpatchify order shows). Bound:
float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference). The
negative control swaps the q and k row blocks of one double block's fused ``img_attn_qkv``
(weight and bias) in the authors' file and must fail that bound.

Measured residue: 4.5e-5 x std. Nearly all of it is the guidance embedding at 6000: torch's
float32 ``exp`` (in diffusers' and the authors' ``timestep_embedding``) is one ulp off the
correctly rounded value in 2 of the 128 sinusoid frequencies, which vidax's
``diffusers_timestep_embedding`` takes; at phase ~6000 that moves cos/sin by 2e-4. With
timesteps and guidance below 1 the residue is 2e-6 x std (diffusers in float64: 2e-6 x std too).
"""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity, compare, randomize
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.models.hunyuan_video.dit import FREQ_DIM, REFINER_DEPTH, HunyuanVideoDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 8, 12   # latent size; tokens 3 x 4 x 6
TEXT_LEN, TEXT_LENS = 10, (6, 10)
TIMESTEPS = (937.0, 121.5)
GUIDANCE = (6000.0, 3500.0)                  # embedded CFG scale x 1000
RELEASE_WIDTH = 3072                         # what diffusers' converter hard-codes
BF16_REL_TOL = 5e-2


# ----------------------------------------------------------------------------- the authors' layout
def authors_state(cfg: HunyuanVideoDiTConfig) -> dict:
    """An (uninitialised) torch state dict with the authors' ``HYVideoDiffusionTransformer``
    names and shapes at ``cfg`` (as ``hyvideo/modules/models.py`` and ``token_refiner.py``
    build them)."""
    import torch

    h, mlp, hd = cfg.hidden_size, cfg.mlp_dim, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {}

    def linear(name, n_in, n_out):
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)

    shapes["img_in.proj.weight"] = (h, cfg.in_channels, *cfg.patch_size)
    shapes["img_in.proj.bias"] = (h,)
    linear("txt_in.input_embedder", cfg.text_states_dim, h)
    linear("txt_in.t_embedder.mlp.0", FREQ_DIM, h)
    linear("txt_in.t_embedder.mlp.2", h, h)
    linear("txt_in.c_embedder.linear_1", cfg.text_states_dim, h)
    linear("txt_in.c_embedder.linear_2", h, h)
    for i in range(REFINER_DEPTH):
        p = f"txt_in.individual_token_refiner.blocks.{i}"
        for norm in ("norm1", "norm2"):
            shapes[f"{p}.{norm}.weight"] = shapes[f"{p}.{norm}.bias"] = (h,)
        linear(f"{p}.self_attn_qkv", h, 3 * h)
        linear(f"{p}.self_attn_proj", h, h)
        linear(f"{p}.mlp.fc1", h, mlp)
        linear(f"{p}.mlp.fc2", mlp, h)
        linear(f"{p}.adaLN_modulation.1", h, 2 * h)
    for embedder in ("time_in", "guidance_in"):
        linear(f"{embedder}.mlp.0", FREQ_DIM, h)
        linear(f"{embedder}.mlp.2", h, h)
    linear("vector_in.in_layer", cfg.text_states_dim_2, h)
    linear("vector_in.out_layer", h, h)
    for i in range(cfg.mm_double_blocks_depth):
        for s in ("img", "txt"):
            p = f"double_blocks.{i}.{s}"
            linear(f"{p}_mod.linear", h, 6 * h)
            linear(f"{p}_attn_qkv", h, 3 * h)
            shapes[f"{p}_attn_q_norm.weight"] = shapes[f"{p}_attn_k_norm.weight"] = (hd,)
            linear(f"{p}_attn_proj", h, h)
            linear(f"{p}_mlp.fc1", h, mlp)
            linear(f"{p}_mlp.fc2", mlp, h)
    for i in range(cfg.mm_single_blocks_depth):
        p = f"single_blocks.{i}"
        linear(f"{p}.linear1", h, 3 * h + mlp)
        linear(f"{p}.linear2", h + mlp, h)
        shapes[f"{p}.q_norm.weight"] = shapes[f"{p}.k_norm.weight"] = (hd,)
        linear(f"{p}.modulation.linear", h, 3 * h)
    linear("final_layer.adaLN_modulation.1", h, 2 * h)
    linear("final_layer.linear", h, int(np.prod(cfg.patch_size)) * cfg.out_channels)
    return {k: torch.empty(v) for k, v in sorted(shapes.items())}


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", key)


def test_tiny_state_has_the_release_names():
    """The tiny file uses exactly the release's key names (block indices aside)."""
    release = {_pattern(k) for k in get_manifest("hunyuan_video/t2v-720p__dit").tensors}
    assert {_pattern(k) for k in authors_state(HunyuanVideoDiTConfig.tiny())} == release


# ----------------------------------------------------------------------------- the reference
def diffusers_converter(hidden: int):
    """diffusers' ``convert_hunyuan_video_transformer_to_diffusers`` with its hard-coded
    single-block width 3072 replaced by ``hidden`` (the same code object otherwise)."""
    from diffusers.loaders import single_file_utils

    return with_width(single_file_utils.convert_hunyuan_video_transformer_to_diffusers, hidden)


def with_width(fn, hidden: int):
    """``fn`` (one of diffusers' HunyuanVideo converters: the checkpoint's, the LoRA's) with its
    hard-coded single-block width 3072 replaced by ``hidden`` in
    ``remap_single_transformer_blocks_``, the same code object otherwise."""
    replaced = []

    def patch(code: types.CodeType) -> types.CodeType:
        consts = []
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                c = patch(c)
            elif type(c) is int and c == RELEASE_WIDTH:
                replaced.append(code.co_name)
                c = hidden
            consts.append(c)
        return code.replace(co_consts=tuple(consts))

    converted = types.FunctionType(patch(fn.__code__), fn.__globals__, fn.__name__)
    assert replaced == ["remap_single_transformer_blocks_"], replaced
    return converted


def diffusers_model(cfg: HunyuanVideoDiTConfig, state: dict):
    from diffusers import HunyuanVideoTransformer3DModel

    converted = diffusers_converter(cfg.hidden_size)(dict(state))
    model = HunyuanVideoTransformer3DModel(
        in_channels=cfg.in_channels, out_channels=cfg.out_channels,
        num_attention_heads=cfg.heads_num, attention_head_dim=cfg.head_dim,
        num_layers=cfg.mm_double_blocks_depth, num_single_layers=cfg.mm_single_blocks_depth,
        num_refiner_layers=REFINER_DEPTH, mlp_ratio=cfg.mlp_width_ratio,
        patch_size=cfg.patch_size[1], patch_size_t=cfg.patch_size[0], qk_norm="rms_norm",
        guidance_embeds=cfg.guidance_embed, text_embed_dim=cfg.text_states_dim,
        pooled_projection_dim=cfg.text_states_dim_2, rope_theta=cfg.rope_theta,
        rope_axes_dim=cfg.rope_dim_list)
    model.load_state_dict(converted, strict=True)
    return model.eval()


def _inputs(cfg: HunyuanVideoDiTConfig, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    mask = np.zeros((BATCH, TEXT_LEN), bool)
    for i, n in enumerate(TEXT_LENS):
        mask[i, :n] = True
    return {
        "x": rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, cfg.in_channels)).astype(f32),
        "t": np.asarray(TIMESTEPS, f32),
        "text_states": rng.standard_normal((BATCH, TEXT_LEN, cfg.text_states_dim)).astype(f32),
        "text_mask": mask,
        "text_states_2": rng.standard_normal((BATCH, cfg.text_states_dim_2)).astype(f32),
        "guidance": np.asarray(GUIDANCE, f32),
    }


def _diffusers_output(model, inputs) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(hidden_states=torch.from_numpy(inputs["x"]).permute(0, 4, 1, 2, 3),
                    timestep=torch.from_numpy(inputs["t"]),
                    encoder_hidden_states=torch.from_numpy(inputs["text_states"]),
                    encoder_attention_mask=torch.from_numpy(inputs["text_mask"]).long(),
                    pooled_projections=torch.from_numpy(inputs["text_states_2"]),
                    guidance=torch.from_numpy(inputs["guidance"]), return_dict=False)[0]
    return out.permute(0, 2, 3, 4, 1).numpy()


# ----------------------------------------------------------------------------- vidax
@nnx.jit(static_argnames="compute_dtype")
def _run_vidax(model, x, t, text_states, text_mask, text_states_2, guidance,
               compute_dtype=jnp.float32):
    return model(x, t, text_states, text_mask, text_states_2, guidance,
                 compute_dtype=compute_dtype)


def _save(state: dict, path: Path) -> Path:
    import torch

    torch.save({"module": {k: v.contiguous() for k, v in state.items()}}, path)
    return path


def _vidax_output(path: Path, cfg, inputs, **kw) -> np.ndarray:
    model = vidax.load("hunyuan_video", "dit", path, config=cfg)
    return np.asarray(_run_vidax(model, **inputs, **kw))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The authors'-layout file, its state dict, the inputs and diffusers' output."""
    cfg = HunyuanVideoDiTConfig.tiny()
    state = authors_state(cfg)
    randomize(state.items(), seed=0)
    path = _save(state, tmp_path_factory.mktemp("hunyuan_dit") / "mp_rank_00_model_states.pt")
    inputs = _inputs(cfg, seed=1)
    return cfg, state, path, inputs, _diffusers_output(diffusers_model(cfg, state), inputs)


def test_matches_diffusers(case, record_property):
    cfg, _, path, inputs, ref = case
    assert_parity("hunyuan_dit", _vidax_output(path, cfg, inputs), ref, record_property)


def test_negative_control_swapped_q_k_rows(case, tmp_path, record_property):
    import torch

    cfg, state, _, inputs, ref = case
    h = cfg.hidden_size
    bad = dict(state)
    for leaf in ("weight", "bias"):
        key = f"double_blocks.1.img_attn_qkv.{leaf}"
        q, k, v = state[key].split(h)
        bad[key] = torch.cat([k, q, v])
    path = _save(bad, tmp_path / "mp_rank_00_model_states.pt")
    assert_fails("hunyuan_dit_negative", _vidax_output(path, cfg, inputs), ref, record_property)


@pytest.mark.slow
def test_cropped_text_needs_no_mask(case, record_property):
    """Sample 0 with its text cropped to the valid tokens and ``text_mask=None`` (unmasked
    attention, what a batch-1 pipeline can run) reproduces the reference's masked output."""
    cfg, _, path, inputs, ref = case
    n = TEXT_LENS[0]
    one = {k: v[:1] for k, v in inputs.items()}
    one["text_states"], one["text_mask"] = one["text_states"][:, :n], None
    assert_parity("hunyuan_dit_cropped", _vidax_output(path, cfg, one), ref[:1], record_property)


@pytest.mark.slow
def test_bfloat16_compute_stays_close(case, record_property):
    """``compute_dtype=bfloat16`` (bf16 Linears and attention, float32 islands): no bit-level
    oracle exists for vidax's mixed policy, so this bounds its distance from the float32
    reference loosely (bf16 carries 8 bits of mantissa; two blocks of each kind here)."""
    cfg, _, path, inputs, ref = case
    out = _vidax_output(path, cfg, inputs, compute_dtype=jnp.bfloat16)
    stats = compare("hunyuan_dit_bf16", out, ref, record_property, rel_tol=BF16_REL_TOL)
    assert stats["max_abs_diff"] <= stats["bound"] and stats["corr"] > 0.9999, stats


# ----------------------------------------------------------------------------- structure, config
def test_release_manifest_verifies():
    """The full-size release's names and shapes, through the mapper, match the model's abstract
    tree 1:1, and the manifest's config is the preset."""
    manifest = get_manifest("hunyuan_video/t2v-720p__dit")
    assert HunyuanVideoDiTConfig.from_dict(manifest.config) == HunyuanVideoDiTConfig.t2v_720p()
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors == 856
    assert report.num_params == manifest.num_params


def test_config_from_dict():
    release = get_manifest("hunyuan_video/t2v-720p__dit").config
    assert HunyuanVideoDiTConfig.from_dict({"model": "HYVideo-T/2"}) == dataclasses.replace(
        HunyuanVideoDiTConfig.t2v_720p(), guidance_embed=False)
    with pytest.raises(VidaxError, match="qk_norm_type"):
        HunyuanVideoDiTConfig.from_dict(dict(release, qk_norm_type="layer"))
    with pytest.raises(VidaxError, match="unknown HunyuanVideo DiT config keys"):
        HunyuanVideoDiTConfig.from_dict(dict(release, depth=3))
    with pytest.raises(VidaxError, match="rope_dim_list"):
        HunyuanVideoDiTConfig.from_dict(dict(release, rope_dim_list=[16, 56, 48]))
