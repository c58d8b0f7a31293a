"""vidax's HunyuanVideo-1.5 DiT against diffusers' ``HunyuanVideo15Transformer3DModel``.

The authors' ``HunyuanVideo_1_5_DiffusionTransformer`` is not installable (not on PyPI), so the
oracle is diffusers' port, fed through diffusers' OWN conversion from the same authors'-layout
state dict vidax loads (DESIGN.md §6):

1. a tiny random state dict in the authors' key layout (:func:`authors_state`; its key set is
   checked against the full-size release manifests', block indices aside), random values in
   every tensor (refiner, byT5 mapper, vision projection, condition-type table included);
2. saved as the release is, ``safetensors`` ``diffusion_pytorch_model.safetensors``, and
   loaded by vidax through ``vidax.load``;
3. converted by diffusers' conversion (:data:`DIFFUSERS_RENAMES` / :func:`to_diffusers`, copied
   as data from diffusers' ``scripts/convert_hunyuan_video1_5_to_diffusers.py``, which is not
   in the PyPI package) and loaded strictly into a tiny diffusers model.

Inputs: batch 2 with different timesteps and text lengths (Qwen 6 and 10 of 10 tokens, byT5 5
and 2 of 8; the padded states are random, not zero, so a mask that leaks shows), a 3 x 4 x 6
token grid (unequal axes, so a transposed RoPE axis or unpatchify order shows), random values
in all 2C + 1 image-in channels. Text-to-video: all-zero vision states (masked out by both);
image-to-video: random vision states (valid tokens); step-distilled: a MeanFlow config with
``t_r``. Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x
std(reference). The negative control swaps one double block's ``img_attn_q`` and
``img_attn_k`` (weight and bias) in the authors' file and must fail that bound.
"""

from __future__ import annotations

import dataclasses
import re
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
from vidax.manifests import all_manifests, get_manifest
from vidax.models.hunyuan_video.dit import FREQ_DIM, REFINER_DEPTH
from vidax.models.hunyuan_video1_5.dit import HunyuanVideo15DiTConfig, concat_condition
from vidax.registry import resolve

jax.config.update("jax_default_matmul_precision", "highest")
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 4, 6
TEXT_LEN, TEXT_LENS = 10, (6, 10)
BYT5_LEN, BYT5_LENS = 8, (5, 2)
VISION_LEN = 7
TIMESTEPS, TIMESTEPS_R = (937.0, 121.5), (600.0, 0.0)
FILE = "diffusion_pytorch_model.safetensors"
BF16_REL_TOL = 5e-2


# ----------------------------------------------------------------------------- the authors' layout
def authors_state(cfg: HunyuanVideo15DiTConfig) -> dict:
    """An (uninitialised) torch state dict with the authors'
    ``HunyuanVideo_1_5_DiffusionTransformer`` names and shapes at ``cfg`` (as their
    ``__init__`` builds them)."""
    import torch

    h, mlp, hd = cfg.hidden_size, cfg.mlp_dim, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {}

    def linear(name, n_in, n_out):
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)

    def layer_norm(name, n):
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (n,)

    shapes["img_in.proj.weight"] = (h, cfg.img_in_channels, *cfg.patch_size)
    shapes["img_in.proj.bias"] = (h,)
    linear("txt_in.input_embedder", cfg.text_states_dim, h)
    linear("txt_in.t_embedder.mlp.0", FREQ_DIM, h)
    linear("txt_in.t_embedder.mlp.2", h, h)
    linear("txt_in.c_embedder.linear_1", cfg.text_states_dim, h)
    linear("txt_in.c_embedder.linear_2", h, h)
    for i in range(REFINER_DEPTH):
        p = f"txt_in.individual_token_refiner.blocks.{i}"
        layer_norm(f"{p}.norm1", h)
        layer_norm(f"{p}.norm2", h)
        linear(f"{p}.self_attn_qkv", h, 3 * h)
        linear(f"{p}.self_attn_proj", h, h)
        linear(f"{p}.mlp.fc1", h, mlp)
        linear(f"{p}.mlp.fc2", mlp, h)
        linear(f"{p}.adaLN_modulation.1", h, 2 * h)
    layer_norm("byt5_in.layernorm", cfg.byt5_states_dim)
    linear("byt5_in.fc1", cfg.byt5_states_dim, cfg.byt5_hidden_dim)
    linear("byt5_in.fc2", cfg.byt5_hidden_dim, cfg.byt5_hidden_dim)
    linear("byt5_in.fc3", cfg.byt5_hidden_dim, h)
    layer_norm("vision_in.proj.0", cfg.vision_states_dim)
    linear("vision_in.proj.1", cfg.vision_states_dim, cfg.vision_states_dim)
    linear("vision_in.proj.3", cfg.vision_states_dim, h)
    layer_norm("vision_in.proj.4", h)
    shapes["cond_type_embedding.weight"] = (3, h)
    for embedder in ("time_in", "time_r_in") if cfg.use_meanflow else ("time_in",):
        linear(f"{embedder}.mlp.0", FREQ_DIM, h)
        linear(f"{embedder}.mlp.2", h, h)
    for i in range(cfg.mm_double_blocks_depth):
        for s in ("img", "txt"):
            p = f"double_blocks.{i}.{s}"
            linear(f"{p}_mod.linear", h, 6 * h)
            for n in "qkv":
                linear(f"{p}_attn_{n}", h, h)
            shapes[f"{p}_attn_q_norm.weight"] = shapes[f"{p}_attn_k_norm.weight"] = (hd,)
            linear(f"{p}_attn_proj", h, h)
            linear(f"{p}_mlp.fc1", h, mlp)
            linear(f"{p}_mlp.fc2", mlp, h)
    linear("final_layer.adaLN_modulation.1", h, 2 * h)
    linear("final_layer.linear", h, int(np.prod(cfg.patch_size)) * cfg.out_channels)
    return {k: torch.empty(v) for k, v in sorted(shapes.items())}


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", key)


@pytest.mark.parametrize("variant,meanflow", [("480p_t2v", False),
                                               ("480p_i2v_step_distilled", True)])
def test_tiny_state_has_the_release_names(variant, meanflow):
    """The tiny file uses exactly the release's key names (block indices aside)."""
    release = {_pattern(k) for k in get_manifest(f"hunyuan_video1_5/{variant}__dit").tensors}
    cfg = dataclasses.replace(HunyuanVideo15DiTConfig.tiny(), use_meanflow=meanflow)
    assert {_pattern(k) for k in authors_state(cfg)} == release


# ----------------------------------------------------------------------------- the reference
# diffusers' conversion, as data. Source: huggingface/diffusers
# ``scripts/convert_hunyuan_video1_5_to_diffusers.py`` (commit 9cc3601a),
# ``convert_hyvideo15_transformer_to_diffusers``: one ``converted[new] = original.pop(old)``
# per key; the block counts there are the release's (54 / 2), hence the ``{i}`` templates here.
# Its three non-renames follow in :func:`to_diffusers`: the refiner ``self_attn_qkv`` is
# ``torch.chunk``ed in 3 (q, k, v), and the final ``adaLN_modulation.1`` halves are swapped
# (``swap_scale_shift``).
DIFFUSERS_RENAMES = {
    "time_in.mlp.0": "time_embed.timestep_embedder.linear_1",
    "time_in.mlp.2": "time_embed.timestep_embedder.linear_2",
    "time_r_in.mlp.0": "time_embed.timestep_embedder_r.linear_1",
    "time_r_in.mlp.2": "time_embed.timestep_embedder_r.linear_2",
    "txt_in.t_embedder.mlp.0": "context_embedder.time_text_embed.timestep_embedder.linear_1",
    "txt_in.t_embedder.mlp.2": "context_embedder.time_text_embed.timestep_embedder.linear_2",
    "txt_in.c_embedder.linear_1": "context_embedder.time_text_embed.text_embedder.linear_1",
    "txt_in.c_embedder.linear_2": "context_embedder.time_text_embed.text_embedder.linear_2",
    "txt_in.input_embedder": "context_embedder.proj_in",
    "byt5_in.layernorm": "context_embedder_2.norm",
    "byt5_in.fc1": "context_embedder_2.linear_1",
    "byt5_in.fc2": "context_embedder_2.linear_2",
    "byt5_in.fc3": "context_embedder_2.linear_3",
    "vision_in.proj.0": "image_embedder.norm_in",
    "vision_in.proj.1": "image_embedder.linear_1",
    "vision_in.proj.3": "image_embedder.linear_2",
    "vision_in.proj.4": "image_embedder.norm_out",
    "img_in.proj": "x_embedder.proj",
    "cond_type_embedding": "cond_type_embed",
    "final_layer.linear": "proj_out",
}
DIFFUSERS_REFINER_RENAMES = {   # txt_in.individual_token_refiner.blocks.{i}.
    "norm1": "norm1", "self_attn_proj": "attn.to_out.0", "norm2": "norm2",
    "mlp.fc1": "ff.net.0.proj", "mlp.fc2": "ff.net.2", "adaLN_modulation.1": "norm_out.linear",
}
DIFFUSERS_BLOCK_RENAMES = {     # double_blocks.{i}. -> transformer_blocks.{i}.
    "img_mod.linear": "norm1.linear", "txt_mod.linear": "norm1_context.linear",
    "img_attn_q": "attn.to_q", "img_attn_k": "attn.to_k", "img_attn_v": "attn.to_v",
    "img_attn_q_norm": "attn.norm_q", "img_attn_k_norm": "attn.norm_k",
    "img_attn_proj": "attn.to_out.0",
    "txt_attn_q": "attn.add_q_proj", "txt_attn_k": "attn.add_k_proj",
    "txt_attn_v": "attn.add_v_proj",
    "txt_attn_q_norm": "attn.norm_added_q", "txt_attn_k_norm": "attn.norm_added_k",
    "txt_attn_proj": "attn.to_add_out",
    "img_mlp.fc1": "ff.net.0.proj", "img_mlp.fc2": "ff.net.2",
    "txt_mlp.fc1": "ff_context.net.0.proj", "txt_mlp.fc2": "ff_context.net.2",
}


def to_diffusers(state: dict) -> dict:
    """diffusers' ``convert_hyvideo15_transformer_to_diffusers`` on ``state`` (any depth)."""
    import torch

    out = {}
    for key, value in state.items():
        module, leaf = key.rsplit(".", 1)
        if m := re.fullmatch(r"txt_in\.individual_token_refiner\.blocks\.(\d+)\.(.+)", module):
            prefix = f"context_embedder.token_refiner.refiner_blocks.{m[1]}."
            if m[2] == "self_attn_qkv":
                for n, part in zip("qkv", torch.chunk(value, 3, dim=0)):
                    out[f"{prefix}attn.to_{n}.{leaf}"] = part
                continue
            out[f"{prefix}{DIFFUSERS_REFINER_RENAMES[m[2]]}.{leaf}"] = value
        elif m := re.fullmatch(r"double_blocks\.(\d+)\.(.+)", module):
            out[f"transformer_blocks.{m[1]}.{DIFFUSERS_BLOCK_RENAMES[m[2]]}.{leaf}"] = value
        elif module == "final_layer.adaLN_modulation.1":
            shift, scale = value.chunk(2, dim=0)
            out[f"norm_out.linear.{leaf}"] = torch.cat([scale, shift], dim=0)
        else:
            out[f"{DIFFUSERS_RENAMES[module]}.{leaf}"] = value
    return out


def diffusers_model(cfg: HunyuanVideo15DiTConfig, state: dict):
    from diffusers import HunyuanVideo15Transformer3DModel

    model = HunyuanVideo15Transformer3DModel(
        in_channels=cfg.img_in_channels, out_channels=cfg.out_channels,
        num_attention_heads=cfg.heads_num, attention_head_dim=cfg.head_dim,
        num_layers=cfg.mm_double_blocks_depth, num_refiner_layers=REFINER_DEPTH,
        mlp_ratio=cfg.mlp_width_ratio, patch_size=cfg.patch_size[1],
        patch_size_t=cfg.patch_size[0], qk_norm="rms_norm", text_embed_dim=cfg.text_states_dim,
        text_embed_2_dim=cfg.byt5_states_dim, image_embed_dim=cfg.vision_states_dim,
        rope_theta=cfg.rope_theta, rope_axes_dim=cfg.rope_dim_list,
        use_meanflow=cfg.use_meanflow)
    model.load_state_dict(to_diffusers(state), strict=True)
    return model.eval()


def _inputs(cfg: HunyuanVideo15DiTConfig, seed: int, *, i2v: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def mask(length, lens):
        return np.arange(length)[None, :] < np.asarray(lens)[:, None]

    inputs = {
        "x": normal(BATCH, FRAMES, HEIGHT, WIDTH, cfg.img_in_channels),
        "t": np.asarray(TIMESTEPS, np.float32),
        "text_states": normal(BATCH, TEXT_LEN, cfg.text_states_dim),
        "text_mask": mask(TEXT_LEN, TEXT_LENS),
        "byt5_states": normal(BATCH, BYT5_LEN, cfg.byt5_states_dim),
        "byt5_mask": mask(BYT5_LEN, BYT5_LENS),
        "vision_states": (normal(BATCH, VISION_LEN, cfg.vision_states_dim) if i2v else
                          np.zeros((BATCH, VISION_LEN, cfg.vision_states_dim), np.float32)),
    }
    if cfg.use_meanflow:
        inputs["t_r"] = np.asarray(TIMESTEPS_R, np.float32)
    return inputs


def _diffusers_output(model, inputs) -> np.ndarray:
    import torch

    def tensor(name):
        return torch.from_numpy(inputs[name])

    with torch.no_grad():
        out = model(hidden_states=tensor("x").permute(0, 4, 1, 2, 3), timestep=tensor("t"),
                    encoder_hidden_states=tensor("text_states"),
                    encoder_attention_mask=tensor("text_mask").long(),
                    timestep_r=tensor("t_r") if "t_r" in inputs else None,
                    encoder_hidden_states_2=tensor("byt5_states"),
                    encoder_attention_mask_2=tensor("byt5_mask").long(),
                    image_embeds=tensor("vision_states"), return_dict=False)[0]
    return out.permute(0, 2, 3, 4, 1).numpy()


# ----------------------------------------------------------------------------- vidax
@nnx.jit(static_argnames="compute_dtype")
def _run_vidax(model, x, t, text_states, text_mask, byt5_states, byt5_mask,
               vision_states=None, t_r=None, compute_dtype=jnp.float32):
    return model(x, t, text_states, text_mask, byt5_states, byt5_mask, vision_states, t_r,
                 compute_dtype=compute_dtype)


def _save(state: dict, folder: Path) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, folder / FILE)
    return folder / FILE


def _vidax_output(path: Path, cfg, inputs, **kw) -> np.ndarray:
    model = vidax.load("hunyuan_video1_5", "dit", path, config=cfg)
    return np.asarray(_run_vidax(model, **inputs, **kw))


def _case(cfg, folder: Path, seed: int):
    state = authors_state(cfg)
    randomize(state.items(), seed=seed)
    return state, _save(state, folder), diffusers_model(cfg, state)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The tiny base config, its authors'-layout state, file and diffusers model."""
    cfg = HunyuanVideo15DiTConfig.tiny()
    return (cfg, *_case(cfg, tmp_path_factory.mktemp("hy15_dit"), seed=0))


@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_matches_diffusers(base, task, record_property):
    cfg, _, path, model = base
    inputs = _inputs(cfg, seed=1, i2v=task == "i2v")
    ref = _diffusers_output(model, inputs)
    assert_parity(f"hy15_dit_{task}", _vidax_output(path, cfg, inputs), ref, record_property)


@pytest.mark.slow
def test_step_distilled_matches_diffusers(tmp_path, record_property):
    """The MeanFlow path: ``time_r_in(t_r)`` added to ``vec`` (image-to-video inputs)."""
    cfg = dataclasses.replace(HunyuanVideo15DiTConfig.tiny(), use_meanflow=True)
    _, path, model = _case(cfg, tmp_path, seed=2)
    inputs = _inputs(cfg, seed=3, i2v=True)
    ref = _diffusers_output(model, inputs)
    assert_parity("hy15_dit_meanflow", _vidax_output(path, cfg, inputs), ref, record_property)


@pytest.mark.slow
def test_no_vision_stream_equals_zero_vision(base, record_property):
    """``vision_states=None`` (the authors' path without a vision encoder) gives the output of
    the all-zero text-to-video vision input, which both masks out."""
    cfg, _, path, model = base
    inputs = _inputs(cfg, seed=1, i2v=False)
    ref = _diffusers_output(model, inputs)
    assert_parity("hy15_dit_no_vision", _vidax_output(path, cfg, dict(inputs,
                                                                      vision_states=None)),
                  ref, record_property)


@pytest.mark.slow
def test_bfloat16_compute_stays_close(base, record_property):
    """``compute_dtype=bfloat16`` (bf16 Linears and attention, float32 islands): no bit-level
    oracle exists for vidax's mixed policy, so this bounds its distance from the float32
    reference loosely (bf16 carries 8 bits of mantissa)."""
    cfg, _, path, model = base
    inputs = _inputs(cfg, seed=1, i2v=True)
    ref = _diffusers_output(model, inputs)
    out = _vidax_output(path, cfg, inputs, compute_dtype=jnp.bfloat16)
    stats = compare("hy15_dit_bf16", out, ref, record_property, rel_tol=BF16_REL_TOL)
    assert stats["max_abs_diff"] <= stats["bound"] and stats["corr"] > 0.9999, stats


def test_negative_control_swapped_q_k(base, tmp_path, record_property):
    cfg, state, _, model = base
    inputs = _inputs(cfg, seed=1, i2v=True)
    ref = _diffusers_output(model, inputs)
    bad = dict(state)
    for leaf in ("weight", "bias"):
        q, k = f"double_blocks.1.img_attn_q.{leaf}", f"double_blocks.1.img_attn_k.{leaf}"
        bad[q], bad[k] = state[k], state[q]
    assert_fails("hy15_dit_negative", _vidax_output(_save(bad, tmp_path), cfg, inputs), ref,
                 record_property)


# ----------------------------------------------------------------------------- structure, config
RELEASES = sorted(m.name for m in all_manifests()
                  if m.family == "hunyuan_video1_5" and m.component == "dit")


def test_all_releases_listed():
    assert len(RELEASES) == 9, RELEASES


# 480p t2v in the fast lane; the other eight releases in CI (``-m slow``).
@pytest.mark.parametrize("name", [n if n == "hunyuan_video1_5/480p_t2v__dit" else
                                  pytest.param(n, marks=pytest.mark.slow) for n in RELEASES])
def test_release_manifest_verifies(name):
    """The full-size release's names and shapes, through the mapper, match the model's abstract
    tree 1:1, and the manifest's config is the variant's preset."""
    manifest = get_manifest(name)
    spec, variant = resolve(manifest.family, manifest.variant, manifest.component,
                            manifest.layout)
    assert HunyuanVideo15DiTConfig.from_dict(manifest.config) == spec.make_config(variant)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors
    assert report.num_params == manifest.num_params


def test_config_from_dict():
    release = get_manifest("hunyuan_video1_5/480p_t2v__dit").config
    assert HunyuanVideo15DiTConfig.from_dict(release) == HunyuanVideo15DiTConfig.t2v_480p()
    with pytest.raises(VidaxError, match="mm_single_blocks_depth"):
        HunyuanVideo15DiTConfig.from_dict(dict(release, mm_single_blocks_depth=2))
    with pytest.raises(VidaxError, match="unknown HunyuanVideo-1.5 DiT config keys"):
        HunyuanVideo15DiTConfig.from_dict(dict(release, depth=3))
    with pytest.raises(VidaxError, match="rope_dim_list"):
        HunyuanVideo15DiTConfig.from_dict(dict(release, rope_dim_list=[16, 56, 48]))


def test_concat_condition_layout():
    """[noisy | condition | mask]: zeros for text-to-video; the image latent and a 1 on frame
    0 only for image-to-video (the authors' i2v conditioning)."""
    lat = jnp.ones((1, 3, 2, 2, 4))
    t2v = concat_condition(lat)
    assert t2v.shape == (1, 3, 2, 2, 9) and not t2v[..., 4:].any()
    img = jnp.full((1, 1, 2, 2, 4), 2.0)
    i2v = concat_condition(lat, img)
    assert (i2v[:, 0, ..., 4:8] == 2).all() and not i2v[:, 1:, ..., 4:].any()
    assert (i2v[:, 0, ..., 8] == 1).all()
    with pytest.raises(VidaxError, match="image latents"):
        concat_condition(lat, jnp.ones((1, 2, 2, 2, 4)))
