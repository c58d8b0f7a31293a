"""Step caching on a mesh for the DiTs whose carry is two streams: HunyuanVideo 1.0 (image and
text, joined by its single-stream blocks) and LTX-2 (video and audio). Three sampling steps of
the DiT under ``vidax.nn.step_cache.active`` (first-block on HunyuanVideo, TaylorSeer on
LTX-2: one skipping by residual, one by schedule), jitted with the states threaded, on one
device and on ``fsdp=2,sp=2,tp=2`` with the parameters placed by the family's rules: the same
decisions, outputs within 1e-4 x std (float32 "highest"). The Wan pipeline's cached sampling
on meshes is tests/sharding/test_pipeline_mesh.py's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.sharding.test_family_models import (_LTX2_AUDIO, _LTX2_GRID, _place, hunyuan,  # noqa: F401
                                               ltx2)
from vidax import sharding
from vidax.models.ltx2_5.dit import Modality, audio_positions, video_positions
from vidax.nn import step_cache
from vidax.nn.step_cache import StepCache

jax.config.update("jax_default_matmul_precision", "highest")
STEPS = 3
POLICIES = {"first-block": StepCache("first-block", threshold=1e9),
            "taylorseer": StepCache("taylorseer", interval=2, warmup_steps=1)}


def _hunyuan(model, x, t, text_states, text_mask, text_states_2, guidance):
    return model(x, t, text_states, text_mask, text_states_2, guidance)


def _ltx2(model, v_latent, v_sigma, v_t, v_context, mask, a_latent, a_sigma, a_t, a_context):
    video = Modality(v_latent, v_sigma, v_t, video_positions(*_LTX2_GRID, 24.0), v_context, mask)
    audio = Modality(a_latent, a_sigma, a_t, audio_positions(_LTX2_AUDIO), a_context, mask)
    v, a = model(video, audio)
    return jnp.concatenate([v.reshape(v.shape[0], -1), a.reshape(a.shape[0], -1)], axis=1)


def _sample(run, model, inputs, policy, mesh=None):
    """Per step: the output and which rows ran the blocks; the latent input moves a little
    each step, as sampling moves it."""
    latent = "x" if "x" in inputs else "v_latent"

    @nnx.jit
    def step(model, inputs, states, index):
        with step_cache.active(policy, states, index) as slot:
            out = run(model, **inputs)
        return out, slot.outputs()

    outs, computed, states = [], [], None
    for index in range(STEPS):
        given = {**inputs, latent: inputs[latent] * np.float32(1 + 0.02 * index)}
        if mesh is not None:
            given = {k: sharding.shard_batch(v, mesh) for k, v in given.items()}
        out, cached = step(model, given, states, jnp.int32(index))
        states = cached["states"]
        outs.append(np.asarray(out))
        computed.append(np.asarray(cached["computed"][0]).tolist())
    return np.stack(outs), computed


# One kind a family (each pair is ~13 s here): first-block's residuals over HunyuanVideo's
# joined streams, TaylorSeer's factors over LTX-2's two outputs.
@pytest.mark.parametrize("case, run, kind", [("hunyuan", _hunyuan, "first-block"),
                                             ("ltx2", _ltx2, "taylorseer")])
def test_cached_steps_on_a_mesh_match_one_device(case, run, kind, request):
    model, inputs = request.getfixturevalue(case)
    policy = POLICIES[kind].for_steps(STEPS)
    ref, decided = _sample(run, model, inputs, policy)
    flat = [c for step in decided for c in step]
    assert any(flat) and not all(flat), decided
    mesh = sharding.make_mesh("fsdp=2,sp=2,tp=2")
    placed = _place(model, mesh)
    with sharding.use_mesh(mesh):
        out, on_mesh = _sample(run, placed, inputs, policy, mesh)
    assert on_mesh == decided
    diff, std = float(np.abs(out - ref).max()), float(ref.std())
    print(f"{case} {kind}: decisions {decided}, max|diff| {diff:.3e} = {diff / std:.2e} x std")
    assert diff <= 1e-4 * std
