"""The other families' models on meshes of 8 simulated CPU devices: the LTX-Video 0.9.8 DiT,
the Wan2.2 TI2V-5B DiT (per-token timesteps), the Cosmos-Predict2.5 DiT, the CogVideoX DiT (5b
kind: RoPE), the Cosmos3 DiT (Nano kind), the HunyuanVideo 1.0 and 1.5 DiTs (masked text), the
LTX-2 DiT (video and audio streams) and the Reason1 and Gemma text encoders give the
single-device output on meshes that split every axis (dp, fsdp, tp, sp: ``sp=8`` and two mixed
meshes, see MESHES), with their parameters placed by their partition rules.

Bound as in test_sharded_dit.py: float32 "highest", max |sharded - single| <= 1e-4 x std.
On ``sp=8`` the masked models' compiled programs are also checked to be Ulysses
(test_masked_sp.assert_ulysses: all-to-alls, no floating-point all-gather over a full attention
length), so a mask that sent attention back to XLA's partitioner fails here.
Random (KeyGen) weights suffice here: the loading path is covered there; this is about the
models' computation under sharding."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax import sharding
from vidax.models.cogvideox.dit import CogVideoXDiT, CogVideoXDiTConfig
from vidax.models.cosmos2_5.dit import CosmosDiT, CosmosDiTConfig
from vidax.models.cosmos3.dit import Cosmos3DiT, Cosmos3DiTConfig
from vidax.models.gemma.model import GemmaConfig, GemmaModel
from vidax.models.hunyuan_video.dit import HunyuanVideoDiT, HunyuanVideoDiTConfig
from vidax.models.hunyuan_video1_5.dit import HunyuanVideo15DiT, HunyuanVideo15DiTConfig
from vidax.models.reason1.model import Reason1Config, Reason1TextModel
from vidax.models.ltx2_5.dit import (LTX2DiT, LTX2DiTConfig, Modality, audio_positions,
                                     video_positions)
from vidax.models.ltx_video.dit import LTXVideoDiT, LTXVideoDiTConfig
from vidax.models.wan2_1.dit import WanDiT
from vidax.translator.mappings.wan2_2 import Wan22DiTConfigs
from vidax.translator.verify import flat_params
from tests.sharding.common import assert_placed
from tests.sharding.test_masked_sp import assert_ulysses

jax.config.update("jax_default_matmul_precision", "highest")
REL_TOL = 1e-4
# The fast lane runs the mixed fsdp x sp x tp mesh (every axis that splits weights or tokens
# at once) for the cheaper models; CI (``-m slow``) runs every mesh below for every model.
# Every axis splits here: dp beside fsdp and tp (the batch over dp), fsdp beside sp and tp
# (the batch over fsdp, sp's heads inside tp's), sp alone at 8 (one head a device, the batch
# whole). Not here: the single-axis ``dp=2`` (dp x fsdp=4), ``fsdp=8`` and ``tp=8`` meshes.
# Their batch layouts are those above, and on them the models' code is that of
# ``dp=2,fsdp=2,tp=2`` (only sp > 1 changes it: vidax.nn.attention's shard_map), so they add
# XLA's partitioner at other sizes only; tests/sharding/test_sharded_dit.py runs each axis
# alone (the Wan2.1 DiT), test_mesh_and_rules.py the rules' specs at fsdp=8 / tp=8 (and a
# split that does not divide, replicated) and test_rules_split_the_ltx_attention_by_heads
# below the LTX-Video attention on tp=8.
SLOW_MESHES = [pytest.param(spec, marks=pytest.mark.slow) for spec in
               ("sp=8,fsdp=1", "dp=2,fsdp=2,tp=2")]
MESHES = SLOW_MESHES + ["fsdp=2,sp=2,tp=2"]
#: HunyuanVideo 1.0 / 1.5, LTX-2 and Gemma: 5-30 s a mesh here, so CI only.
#: (Their dp x fsdp x tp run is left to the cheaper models above: dp only splits the batch,
#: and these models' code is the same under it; sp=8 and fsdp x sp x tp are where they differ.)
CI_MESHES = [pytest.param(spec, marks=pytest.mark.slow)
             for spec in ("sp=8,fsdp=1", "fsdp=2,sp=2,tp=2")]


def _place(model: nnx.Module, mesh) -> nnx.Module:
    """The model's parameters re-placed by its class's partition rules."""
    graphdef, state = nnx.split(model)
    flat = nnx.to_flat_state(state)
    names = [".".join(map(str, p)) for p, _ in flat]
    values = {n: v.get_value() for n, (_, v) in zip(names, flat)}
    shardings = sharding.param_shardings(values, mesh, sharding.rules_for(type(model)))
    leaves = [(p, v.replace(jax.device_put(values[n], shardings[n])))
              for n, (p, v) in zip(names, flat)]
    return nnx.merge(graphdef, nnx.from_flat_state(leaves))


def _check(run, model, inputs, spec, lengths=(), known=()):
    """``lengths``: the model's attention lengths; on ``sp=8`` its program must be Ulysses
    (``known``: the shapes of all-gathers named as a known gap, see the callers)."""
    ref = np.asarray(run(model, **inputs))
    mesh = sharding.make_mesh(spec)
    placed = _place(model, mesh)
    with sharding.use_mesh(mesh):
        args = {k: sharding.shard_batch(v, mesh) for k, v in inputs.items()}
        out = np.asarray(run(placed, **args))
        if lengths and spec == "sp=8,fsdp=1":
            assert_ulysses(run.lower(placed, **args).compile().as_text(), lengths, 8, known)
    diff, std = float(np.abs(out - ref).max()), float(ref.std())
    print(f"{spec}: max|diff| {diff:.3e} = {diff / std:.2e} x std")
    assert diff <= REL_TOL * std
    # Each parameter's spec as the rules give it and each device's bytes as the specs give them
    # (tests/sharding/common.assert_placed; the spec half is by construction here, _place uses
    # the rules, the bytes half is not); on fsdp / tp some weight really is split.
    assert_placed(placed, mesh, sharding.rules_for(type(model)))
    if dict(mesh.shape)["fsdp"] > 1 or dict(mesh.shape)["tp"] > 1:   # sp/dp keep weights whole
        assert any(not a.sharding.is_fully_replicated for a in flat_params(placed).values())


# ----------------------------------------------------------------------------- LTX-Video
def _ltx_config():
    return dataclasses.replace(LTXVideoDiTConfig.tiny(), num_attention_heads=8,
                               attention_head_dim=16, cross_attention_dim=128)


@pytest.fixture(scope="module")
def ltx():
    cfg = _ltx_config()
    rng = np.random.default_rng(0)
    inputs = {"latents": rng.standard_normal((2, 2, 4, 6, cfg.in_channels)).astype(np.float32),
              "timestep": np.array([0.9, 0.3], np.float32),
              "context": rng.standard_normal((2, 8, cfg.caption_channels)).astype(np.float32),
              "context_mask": np.array([[1] * 8, [1] * 5 + [0] * 3], np.int32)}
    return LTXVideoDiT(cfg, keys=1), inputs


@nnx.jit
def _run_ltx(model, latents, timestep, context, context_mask):
    return model(latents, timestep, context, context_mask, frame_rate=25.0)


@pytest.mark.parametrize("spec", MESHES)
def test_ltx_video_dit_on_a_mesh(ltx, spec):
    _check(_run_ltx, *ltx, spec, lengths=[48])   # cross-attention: the text mask as a bias


# ----------------------------------------------------------------------------- Wan2.2 TI2V
@pytest.fixture(scope="module")
def ti2v():
    cfg = dataclasses.replace(Wan22DiTConfigs.ti2v_5b(), dim=128, ffn_dim=256, num_heads=8,
                              num_layers=2, text_dim=64)
    rng = np.random.default_rng(0)
    grid = (2, 8, 12)                  # latent T, H, W -> 2 x 4 x 6 = 48 tokens
    tokens = grid[0] * grid[1] * grid[2] // 4
    t = np.tile(np.float32(700.0), (2, tokens))
    t[:, : tokens // grid[0]] = 0.0    # the first latent frame: the image, t = 0
    inputs = {"x": rng.standard_normal((2, *grid, cfg.in_dim)).astype(np.float32),
              "t": t,
              "context": rng.standard_normal((2, 10, cfg.text_dim)).astype(np.float32)}
    return WanDiT(cfg, keys=2), inputs


@nnx.jit
def _run_wan(model, x, t, context):
    return model(x, t, context)


@pytest.mark.parametrize("spec", MESHES)
def test_wan2_2_ti2v_dit_on_a_mesh(ti2v, spec):
    _check(_run_wan, *ti2v, spec)


# ----------------------------------------------------------------------------- Cosmos2.5
@pytest.fixture(scope="module")
def cosmos():
    cfg = dataclasses.replace(CosmosDiTConfig.tiny(), model_channels=128, num_heads=8)
    rng = np.random.default_rng(0)
    grid = (2, 8, 12)                  # latent T, H, W -> 2 x 4 x 6 = 48 tokens
    condition = np.zeros((2, *grid, 1), np.float32)
    condition[:, 0] = 1.0              # the first latent frame conditions (video2world)
    inputs = {"x": rng.standard_normal((2, *grid, cfg.in_channels)).astype(np.float32),
              "timesteps": np.array([[0.1, 800.0], [0.1, 300.0]], np.float32),
              "context": rng.standard_normal(
                  (2, 10, cfg.crossattn_proj_in_channels)).astype(np.float32),
              "condition_mask": condition}
    return CosmosDiT(cfg, keys=3), inputs


@nnx.jit
def _run_cosmos(model, x, timesteps, context, condition_mask):
    return model(x, timesteps, context, condition_mask=condition_mask)


@pytest.mark.parametrize("spec", MESHES)
def test_cosmos2_5_dit_on_a_mesh(cosmos, spec):
    _check(_run_cosmos, *cosmos, spec)


# ----------------------------------------------------------------------------- CogVideoX
@pytest.fixture(scope="module")
def cogvideox():
    cfg = dataclasses.replace(CogVideoXDiTConfig.tiny("5b"), num_attention_heads=8)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2, 2, 8, 12, cfg.in_channels)).astype(np.float32),
              "context": rng.standard_normal(
                  (2, cfg.max_text_seq_length, cfg.text_embed_dim)).astype(np.float32),
              "t": np.array([900.0, 250.0], np.float32)}
    return CogVideoXDiT(cfg, keys=4), inputs


@nnx.jit
def _run_cogvideox(model, x, context, t):
    return model(x, context, t)


@pytest.mark.parametrize("spec", MESHES)
def test_cogvideox_dit_on_a_mesh(cogvideox, spec):
    _check(_run_cogvideox, *cogvideox, spec)


# ----------------------------------------------------------------------------- Cosmos3
@pytest.fixture(scope="module")
def cosmos3():
    # 8 query and 8 key/value heads of 16: sp=8 (Ulysses) splits both pathways by whole heads
    cfg = dataclasses.replace(Cosmos3DiTConfig.tiny("nano"), hidden_size=128,
                              num_attention_heads=8, num_key_value_heads=8)
    rng = np.random.default_rng(0)
    inputs = {"latents": rng.standard_normal((2, 2, 8, 12, cfg.latent_channel)
                                             ).astype(np.float32),
              "timesteps": np.array([937.0, 421.5], np.float32),
              "input_ids": rng.integers(0, cfg.vocab_size, (2, 8)).astype(np.int32)}
    return Cosmos3DiT(cfg, keys=5), inputs


@nnx.jit
def _run_cosmos3(model, latents, timesteps, input_ids):
    return model(latents, timesteps, input_ids)


@pytest.mark.parametrize("spec", MESHES)
def test_cosmos3_dit_on_a_mesh(cosmos3, spec):
    # The prompt's causal attention (8 tokens) and the video queries' attention over
    # [prompt, video] keys (8 + 48: keys_sequence_parallel=True) are Ulysses: no k/v
    # [2, 56, 8, 16] gathered whole.
    _check(_run_cosmos3, *cosmos3, spec, lengths=[8, 48, 56])


# ----------------------------------------------------------------------------- Reason1
@pytest.fixture(scope="module")
def reason1():
    cfg = dataclasses.replace(Reason1Config.tiny(), hidden_size=128, num_attention_heads=8,
                              num_key_value_heads=8)
    rng = np.random.default_rng(0)
    mask = np.ones((2, 16), np.int32)
    mask[1, 11:] = 0                   # HunyuanVideo-1.5 pads its prompts
    inputs = {"input_ids": rng.integers(0, cfg.vocab_size, (2, 16)).astype(np.int32),
              "attention_mask": mask}
    return Reason1TextModel(cfg, keys=6), inputs


@nnx.jit
def _run_reason1(model, input_ids, attention_mask):
    return jnp.stack(model(input_ids, attention_mask))   # every hidden state


@pytest.mark.parametrize("spec", MESHES)
def test_reason1_text_encoder_on_a_mesh(reason1, spec):
    _check(_run_reason1, *reason1, spec, lengths=[16])


# ----------------------------------------------------------------------------- HunyuanVideo
@pytest.fixture(scope="module")
def hunyuan():
    cfg = dataclasses.replace(HunyuanVideoDiTConfig.tiny(), hidden_size=256, heads_num=8)
    rng = np.random.default_rng(0)
    mask = np.ones((2, 8), np.int32)
    mask[1, 5:] = 0                    # right-padded prompt
    inputs = {"x": rng.standard_normal((2, 2, 8, 12, cfg.in_channels)).astype(np.float32),
              "t": np.array([900.0, 250.0], np.float32),
              "text_states": rng.standard_normal((2, 8, cfg.text_states_dim)).astype(np.float32),
              "text_mask": mask,
              "text_states_2": rng.standard_normal((2, cfg.text_states_dim_2)
                                                   ).astype(np.float32),
              "guidance": np.array([6000.0, 6000.0], np.float32)}
    return HunyuanVideoDiT(cfg, keys=7), inputs


@nnx.jit
def _run_hunyuan(model, x, t, text_states, text_mask, text_states_2, guidance):
    return model(x, t, text_states, text_mask, text_states_2, guidance)


@pytest.mark.parametrize("spec", CI_MESHES)
def test_hunyuan_video_dit_on_a_mesh(hunyuan, spec):
    # 48 image + 8 text tokens; the token refiner: 8 text tokens, pairwise mask
    _check(_run_hunyuan, *hunyuan, spec, lengths=[56, 8])


# ----------------------------------------------------------------------------- LTX-2
_LTX2_GRID, _LTX2_AUDIO = (2, 4, 6), 8       # 48 video tokens, 8 audio frames


@pytest.fixture(scope="module")
def ltx2():
    # 8 heads in both streams (video 8 x 16, audio 8 x 8), the text widths following
    cfg = dataclasses.replace(LTX2DiTConfig.tiny(), num_attention_heads=8,
                              audio_num_attention_heads=8, cross_attention_dim=128,
                              audio_cross_attention_dim=64)
    rng = np.random.default_rng(0)
    n_video = int(np.prod(_LTX2_GRID))
    f = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    mask = np.ones((2, 8), np.int32)
    mask[1, :3] = 0                    # left padding
    v_sigma, a_sigma = np.array([0.83, 0.21], np.float32), np.array([0.55, 0.9], np.float32)
    inputs = {"v_latent": f(2, n_video, cfg.in_channels), "v_sigma": v_sigma,
              "v_t": np.repeat(v_sigma[:, None], n_video, axis=1),
              "v_context": f(2, 8, cfg.caption_channels), "mask": mask,
              "a_latent": f(2, _LTX2_AUDIO, cfg.audio_in_channels), "a_sigma": a_sigma,
              "a_t": np.repeat(a_sigma[:, None], _LTX2_AUDIO, axis=1),
              "a_context": f(2, 8, cfg.caption_channels)}   # 19B: the DiT projects both
    return LTX2DiT(cfg, keys=8), inputs


@nnx.jit
def _run_ltx2(model, v_latent, v_sigma, v_t, v_context, mask, a_latent, a_sigma, a_t,
              a_context):
    video = Modality(v_latent, v_sigma, v_t, video_positions(*_LTX2_GRID, 24.0), v_context, mask)
    audio = Modality(a_latent, a_sigma, a_t, audio_positions(_LTX2_AUDIO), a_context, mask)
    v, a = model(video, audio)
    return jnp.concatenate([v.reshape(v.shape[0], -1), a.reshape(a.shape[0], -1)], axis=1)


@pytest.mark.parametrize("spec", CI_MESHES)
def test_ltx2_dit_on_a_mesh(ltx2, spec):
    # video->audio (audio queries over the 48 video tokens, keys_sequence_parallel=True) is
    # Ulysses: no video k/v [2, 48, 8, 8] gathered. Named: audio->video stays cross-attention,
    # gathering the short audio k/v [2, 8, 8, 8] (cheaper than exchanging the video queries;
    # docs/hardware_and_sharding.md).
    _check(_run_ltx2, *ltx2, spec, lengths=[48, 8], known=[(2, 8, 8, 8)])


@pytest.fixture(scope="module")
def hunyuan15():
    cfg = dataclasses.replace(HunyuanVideo15DiTConfig.tiny(), hidden_size=256, heads_num=8)
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    # 48 image + 8 vision + 8 ByT5 + 8 text = 72 tokens: sp=8 divides the joint attention
    text_mask, byt5_mask = np.ones((2, 8), np.int32), np.ones((2, 8), np.int32)
    text_mask[1, 5:], byt5_mask[0, 2:] = 0, 0
    inputs = {"x": f(2, 2, 4, 6, 2 * cfg.in_channels + 1),   # [noisy | condition | mask]
              "t": np.array([900.0, 250.0], np.float32),
              "text_states": f(2, 8, cfg.text_states_dim), "text_mask": text_mask,
              "byt5_states": f(2, 8, cfg.byt5_states_dim), "byt5_mask": byt5_mask,
              "vision_states": f(2, 8, cfg.vision_states_dim)}     # image-to-video
    return HunyuanVideo15DiT(cfg, keys=9), inputs


@nnx.jit
def _run_hunyuan15(model, x, t, text_states, text_mask, byt5_states, byt5_mask, vision_states):
    return model(x, t, text_states, text_mask, byt5_states, byt5_mask, vision_states)


@pytest.mark.parametrize("spec", CI_MESHES)
def test_hunyuan_video1_5_dit_on_a_mesh(hunyuan15, spec):
    _check(_run_hunyuan15, *hunyuan15, spec, lengths=[72, 8])


@pytest.fixture(scope="module")
def gemma():
    # 8 query and 8 key/value heads; local (sliding-window) layers around a global one
    cfg = dataclasses.replace(GemmaConfig.tiny(), hidden_size=128, num_attention_heads=8,
                              num_key_value_heads=8)
    rng = np.random.default_rng(0)
    mask = np.ones((2, 16), np.int32)
    mask[1, :4] = 0                    # LTX-2 pads its prompts on the left
    inputs = {"input_ids": rng.integers(0, cfg.vocab_size, (2, 16)).astype(np.int32),
              "attention_mask": mask}
    return GemmaModel(cfg, keys=10), inputs


@pytest.mark.parametrize("spec", CI_MESHES)
def test_gemma_text_encoder_on_a_mesh(gemma, spec):
    _check(_run_reason1, *gemma, spec, lengths=[16])   # the same call: every hidden state


def test_rules_split_the_ltx_attention_by_heads():
    mesh = sharding.make_mesh("tp=8,fsdp=1")
    params = flat_params(_place(LTXVideoDiT(_ltx_config()), mesh))
    for name, dim in (("attn1.to_q.kernel", 1), ("attn2.to_v.kernel", 1),
                      ("ff.proj_in.kernel", 1), ("attn1.to_out.kernel", 0),
                      ("ff.proj_out.kernel", 0)):
        array = params[f"transformer_blocks.0.{name}"]
        assert array.sharding.spec[dim] == "tp", (name, array.sharding.spec)
        assert array.addressable_shards[0].data.shape[dim] == array.shape[dim] // 8
