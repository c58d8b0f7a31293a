"""vidax's Cosmos3 DiT (Nano and Edge) against diffusers' ``Cosmos3OmniTransformer``.

Oracle (DESIGN.md §6): diffusers 0.42.1 ``Cosmos3OmniTransformer`` at a tiny config of each
released kind -- Nano-like (SwiGLU, q/k norms on both pathways, eps 1e-6, theta 5e6, action and
sound heads) and Edge-like (squared ReLU, no prompt q/k norm but ``k_norm_und_for_gen``, eps
1e-5, theta 1e8, action head) -- with GQA (4 query / 2 key-value heads) and interleaved 3D RoPE
axes (4, 2, 2) over head_dim 16, random values in every tensor, saved by its own
``save_pretrained``; vidax reads the ``config.json`` and loads the weights through
``vidax.load`` (the action / sound / text-head tensors in the file are ignored by the mapper).

The reference is called as ``Cosmos3OmniPipeline`` calls it for one prompt and one video: the
position ids from the pipeline's own ``get_3d_mrope_ids_text_tokens`` /
``get_3d_mrope_ids_vae_tokens`` (real temporal margin 15000, fps modulation on at 16 fps), one
timestep per noisy token, the noisy frames' token indexes; one call per batch item. Inputs: two
items with different prompts (7 tokens), latents 3 x 5 x 6 x 8 (odd height: padded to the
patch), timesteps 937 and 421.5, item 1 with a clean conditioning frame 0 (no timestep
embedding, zero output).

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference)
over the whole velocity. Negative controls (two same-shaped projections of one layer swapped
in the saved file: Nano the prompt pathway's k / v, Edge the video pathway's k / v) must fail
it. Measured: see docs/models/cosmos3.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

import vidax
from tests.parity import (AbstractModel, assert_fails, assert_parity, compare, edited_copy,
                          randomize, swap)
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.cosmos3.dit import (Cosmos3DiT, Cosmos3DiTConfig, rope_inv_freq, text_positions,
                                  video_positions)

jax.config.update("jax_default_matmul_precision", "highest")

DIT_MANIFESTS = sorted(m.name for m in all_manifests()
                       if m.family == "cosmos3" and m.component == "dit")
FRAMES, HEIGHT, WIDTH = 3, 5, 6        # latent grid; tokens 3 x 3 x 3 after padding H to 6
TEXT_TOKENS = 7
TIMESTEPS = (937.0, 421.5)
CONDITION = ((0, 0, 0), (1, 0, 0))     # item 1: latent frame 0 is a clean conditioning frame
FPS = 16.0
# Heads video generation does not use, built into the reference so its file holds them.
ACTION_DIM, DOMAINS, SOUND_DIM = 6, 3, 5


# ----------------------------------------------------------------------------- structure
@pytest.mark.parametrize("name", DIT_MANIFESTS)
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    # lm_head, norm and 5 action tensors; Nano also 5 sound tensors
    ignored = manifest.num_tensors - report.matched
    assert ignored == (12 if manifest.variant == "nano" else 7)


def test_both_manifests_are_covered():
    assert DIT_MANIFESTS == ["cosmos3/edge__dit", "cosmos3/nano__dit"]


@pytest.mark.parametrize("name", DIT_MANIFESTS)
def test_presets_are_the_released_configs(name):
    manifest = get_manifest(name)
    preset = getattr(Cosmos3DiTConfig, manifest.variant)()
    assert Cosmos3DiTConfig.from_dict(manifest.config) == preset
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    assert spec.make_config(variant) == preset


def test_config_rejects_other_networks():
    config = dict(get_manifest("cosmos3/edge__dit").config)
    with pytest.raises(VidaxError, match="hidden_act"):
        Cosmos3DiTConfig.from_dict(dict(config, hidden_act="gelu"))
    with pytest.raises(VidaxError, match="patch_latent_dim"):
        Cosmos3DiTConfig.from_dict(dict(config, patch_latent_dim=96))


@pytest.mark.parametrize("head_dim, theta", [(128, 5e6), (128, 1e8), (16, 5e6), (16, 1e8)])
def test_inv_freq_is_torchs_within_an_ulp(head_dim, theta):
    """vidax's frequencies are correctly rounded; torch's float32 ``pow`` on CPU is within one
    ulp of that (it differs at one of the 64 frequencies of each release), and on GPU it is
    another implementation again, so one ulp is the tolerance the reference itself has."""
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3VLTextRotaryEmbedding
    rope = Cosmos3VLTextRotaryEmbedding(head_dim, theta, (head_dim // 2, 0, 0))
    np.testing.assert_array_max_ulp(rope_inv_freq(head_dim, theta), rope.inv_freq.numpy(),
                                    maxulp=1)


@pytest.mark.parametrize("fps", [None, 16.0, 24.0, 30.0, 10.0])
def test_positions_are_the_pipelines_bitwise(fps):
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        get_3d_mrope_ids_text_tokens, get_3d_mrope_ids_vae_tokens)
    cfg = Cosmos3DiTConfig.nano()
    text, offset = get_3d_mrope_ids_text_tokens(123, 0, use_float_positions=True)
    video, _ = get_3d_mrope_ids_vae_tokens(21, 4, 5, offset + 15000, fps=fps, base_fps=24.0,
                                           temporal_compression_factor=4)
    np.testing.assert_array_equal(text_positions(123), text.numpy())
    np.testing.assert_array_equal(video_positions(cfg, 123, (21, 4, 5), fps),
                                  video.float().numpy())


# ----------------------------------------------------------------------------- numerics
def _reference(cfg: Cosmos3DiTConfig, kind: str):
    from diffusers import Cosmos3OmniTransformer
    return Cosmos3OmniTransformer(
        attention_bias=cfg.attention_bias, head_dim=cfg.head_dim, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, latent_channel=cfg.latent_channel,
        latent_patch_size=cfg.latent_patch_size, num_attention_heads=cfg.num_attention_heads,
        num_hidden_layers=cfg.num_hidden_layers, num_key_value_heads=cfg.num_key_value_heads,
        patch_latent_dim=cfg.patch_latent_dim, rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta, rope_axes_dim=list(cfg.rope_axes_dim),
        vocab_size=cfg.vocab_size, hidden_act=cfg.hidden_act,
        qk_norm_for_text=cfg.qk_norm_for_text, use_und_k_norm_for_gen=cfg.use_und_k_norm_for_gen,
        action_gen=True, action_dim=ACTION_DIM, num_embodiment_domains=DOMAINS,
        sound_gen=kind == "nano", sound_dim=SOUND_DIM if kind == "nano" else None).eval()


def _inputs(cfg: Cosmos3DiTConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "latents": rng.standard_normal((2, FRAMES, HEIGHT, WIDTH, cfg.latent_channel)
                                       ).astype(np.float32),
        "input_ids": rng.integers(0, cfg.vocab_size, (2, TEXT_TOKENS)),
        "timesteps": np.asarray(TIMESTEPS, np.float32),
        "condition_mask": np.asarray(CONDITION, np.float32),
    }


def _reference_output(ref, cfg: Cosmos3DiTConfig, inputs) -> np.ndarray:
    """One ``forward`` per batch item, packed as ``Cosmos3OmniPipeline`` packs it."""
    import torch
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        get_3d_mrope_ids_text_tokens, get_3d_mrope_ids_vae_tokens)
    p = cfg.latent_patch_size
    grid = (FRAMES, -(-HEIGHT // p), -(-WIDTH // p))
    per_frame = grid[1] * grid[2]
    outs = []
    for i in range(len(TIMESTEPS)):
        text_ids, next_offset = get_3d_mrope_ids_text_tokens(TEXT_TOKENS, 0,
                                                             use_float_positions=True)
        video_ids, _ = get_3d_mrope_ids_vae_tokens(
            *grid, next_offset + cfg.unified_3d_mrope_temporal_modality_margin,
            reset_spatial_indices=True, fps=FPS, base_fps=cfg.base_fps,
            temporal_compression_factor=cfg.temporal_compression_factor)
        noisy = [f for f in range(FRAMES) if not CONDITION[i][f]]
        mse = [TEXT_TOKENS + f * per_frame + j for f in noisy for j in range(per_frame)]
        latents = torch.from_numpy(inputs["latents"][i]).permute(3, 0, 1, 2)[None]
        with torch.no_grad():
            out = ref(input_ids=torch.from_numpy(inputs["input_ids"][i]),
                      text_indexes=torch.arange(TEXT_TOKENS),
                      position_ids=torch.cat([text_ids, video_ids], dim=1),
                      und_len=TEXT_TOKENS, sequence_length=TEXT_TOKENS + FRAMES * per_frame,
                      vision_tokens=[latents], vision_token_shapes=[grid],
                      vision_sequence_indexes=torch.arange(TEXT_TOKENS,
                                                           TEXT_TOKENS + FRAMES * per_frame),
                      vision_mse_loss_indexes=torch.tensor(mse),
                      vision_timesteps=torch.full((len(mse),), TIMESTEPS[i]),
                      vision_noisy_frame_indexes=[torch.tensor(noisy, dtype=torch.long)],
                      return_dict=False)[0][0]
        outs.append(out[0].permute(1, 2, 3, 0).numpy())
    return np.stack(outs)


@functools.partial(nnx.jit, static_argnames=("fps", "compute_dtype"))
def _run(model, latents, timesteps, input_ids, condition_mask, fps, compute_dtype=jnp.float32):
    return model(latents, timesteps, input_ids, condition_mask=condition_mask, fps=fps,
                 compute_dtype=compute_dtype)


def _load(path: Path, cfg: Cosmos3DiTConfig) -> Cosmos3DiT:
    model = vidax.load("cosmos3", "dit", path, config=cfg)
    assert isinstance(model, Cosmos3DiT)
    return model


def _vidax_output(model: Cosmos3DiT, inputs, compute_dtype=jnp.float32) -> np.ndarray:
    return np.asarray(_run(model, fps=FPS, compute_dtype=compute_dtype, **inputs))


# Edge in the fast lane; Nano (the larger, with the sound heads) in CI (``-m slow``).
@pytest.fixture(scope="module", params=[pytest.param("nano", marks=pytest.mark.slow), "edge"])
def case(request, tmp_path_factory):
    """diffusers' tiny Cosmos3 transformer of one kind, saved, its inputs and outputs."""
    kind = request.param
    tiny = Cosmos3DiTConfig.tiny(kind)
    ref = _reference(tiny, kind)
    randomize(sorted(ref.named_parameters()), seed=4)
    folder = tmp_path_factory.mktemp(f"cosmos3_{kind}_dit")
    ref.save_pretrained(folder)
    cfg = registry.get("cosmos3", "dit", "diffusers").make_config(
        overrides=json.loads((folder / "config.json").read_text()))
    assert cfg == tiny
    inputs = _inputs(cfg)
    return {"kind": kind, "cfg": cfg, "inputs": inputs,
            "expected": _reference_output(ref, cfg, inputs),
            "file": folder / "diffusion_pytorch_model.safetensors"}


def test_tiny_file_holds_the_ignored_heads(case):
    report = vidax.loading.verify_checkpoint("cosmos3", "dit", case["file"], config=case["cfg"])
    assert report.ok, str(report)
    stored = len(safetensors.numpy.load_file(case["file"]))
    assert stored - report.matched == (12 if case["kind"] == "nano" else 7)


def test_matches_diffusers(case, record_property):
    model = _load(case["file"], case["cfg"])
    out = _vidax_output(model, case["inputs"])
    assert np.all(out[1, 0] == 0) and np.abs(case["expected"][1, 0]).max() == 0
    assert_parity(f"cosmos3_{case['kind']}_dit", out, case["expected"], record_property)

    # the cached prompt keys / values give the same velocity
    kv = nnx.jit(lambda m, ids: m.encode_prompt(ids))(model, case["inputs"]["input_ids"])
    inputs = {k: v for k, v in case["inputs"].items() if k != "input_ids"}
    cached = nnx.jit(lambda m, kv, **kw: m(prompt_kv=kv, fps=FPS, **kw))(model, kv, **inputs)
    np.testing.assert_allclose(np.asarray(cached), out, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_bfloat16_compute_is_close(case, record_property):
    """bfloat16 matmuls and attention (float32 islands, see the model docstring): a loose
    sanity bound, not parity (bf16 has 8 bits of mantissa)."""
    model = _load(case["file"], case["cfg"])
    out = _vidax_output(model, case["inputs"], compute_dtype=jnp.bfloat16)
    stats = compare(f"cosmos3_{case['kind']}_dit_bf16", out, case["expected"], record_property,
                    rel_tol=0.1)
    assert stats["max_abs_diff"] <= stats["bound"] and stats["corr"] > 0.999, stats


def test_negative_control(case, tmp_path, record_property):
    pair = (("layers.0.self_attn.to_k.weight", "layers.0.self_attn.to_v.weight")
            if case["kind"] == "nano" else
            ("layers.1.self_attn.add_k_proj.weight", "layers.1.self_attn.add_v_proj.weight"))
    bad = edited_copy(case["file"], tmp_path / "diffusion_pytorch_model.safetensors",
                      swap(pair))
    out = _vidax_output(_load(bad, case["cfg"]), case["inputs"])
    assert_fails(f"cosmos3_{case['kind']}_dit_negative", out, case["expected"],
                 record_property)


def test_inputs_are_checked():
    model = AbstractModel(lambda: Cosmos3DiT(dataclasses.replace(Cosmos3DiTConfig.tiny(),
                                                                 num_hidden_layers=1)))
    latents = jnp.zeros((1, 2, 4, 4, 8))
    with pytest.raises(VidaxError, match="exactly one"):
        model(latents, 500.0)
    with pytest.raises(VidaxError, match="latents"):
        model(jnp.zeros((1, 2, 4, 4, 7)), 500.0, jnp.zeros((1, 3), jnp.int32))
    with pytest.raises(VidaxError, match="condition_mask"):
        model(latents, 500.0, jnp.zeros((1, 3), jnp.int32), condition_mask=jnp.zeros((3,)))
    with pytest.raises(VidaxError, match="timesteps"):
        model(latents, jnp.zeros((1, 3)), jnp.zeros((1, 3), jnp.int32))
    kv = jnp.zeros((1, 1, 3, 1, 16))    # one key/value head; the config has two
    with pytest.raises(VidaxError, match="prompt_kv"):
        model(latents, 500.0, prompt_kv=(kv, kv))
