"""Cheaper classifier-free guidance (``vidax.pipelines.base.Guidance``): the guidance window and
CFG-Zero* against diffusers' own guiders (``ClassifierFreeGuidance`` with ``start`` / ``stop``,
``ClassifierFreeZeroStarGuidance``) on the same predictions, step by step; and through the tiny
Wan2.1 pipeline: the DiT runs the [cond, uncond] pair inside the window and the prompt alone
outside it, a full window is the plain run exactly, and families without the hooks refuse it.

Bound: float32, max |vidax - diffusers| <= 1e-6 x std (the same float32 arithmetic)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import vidax
from vidax.demo import wan2_1 as demo
from vidax.errors import VidaxError
from vidax.pipelines import step_cache, wan2_1
from vidax.pipelines.base import Guidance, PipelineBase

STEPS = 10
SCALE = 5.0


class _Linear(PipelineBase):
    """A stand-in family: the prediction of each row is a fixed affine map of the latents."""

    CHEAPER_GUIDANCE = True

    @staticmethod
    def predict(model, x, t, inputs, compute_dtype):
        n = x.shape[0]
        return x * inputs["gain"][:n].reshape(n, 1, 1, 1, 1) + inputs["bias"][:n]


def _vidax(guidance: Guidance, latents: np.ndarray, gain, bias):
    out, guided = [], []
    for index in range(STEPS):
        inputs = step_cache.guided_inputs(_Linear, {"guidance_scale": jnp.float32(SCALE),
                                                    "gain": gain, "bias": bias},
                                          guidance, index, STEPS)
        guided.append(inputs["guidance_scale"] is not None)
        out.append(np.asarray(_Linear.velocity(None, jnp.asarray(latents), 0.0, inputs,
                                               jnp.float32)))
    return np.stack(out), guided


def _diffusers(guider, latents: np.ndarray, gain, bias):
    out, guided = [], []
    x = torch.from_numpy(latents)
    cond = x * float(gain[0]) + torch.from_numpy(np.asarray(bias[0]))
    uncond = x * float(gain[1]) + torch.from_numpy(np.asarray(bias[1]))
    for index in range(STEPS):
        guider.set_state(step=index, num_inference_steps=STEPS, timestep=torch.tensor(0))
        guided.append(guider._is_cfg_enabled())
        out.append(guider.forward(cond, uncond if guided[-1] else None).pred.numpy())
    return np.stack(out), guided


@pytest.mark.parametrize("guidance, make", [
    (Guidance(0.0, 0.5), lambda g: g.ClassifierFreeGuidance(SCALE, start=0.0, stop=0.5)),
    (Guidance(0.2, 0.9), lambda g: g.ClassifierFreeGuidance(SCALE, start=0.2, stop=0.9)),
    (Guidance(zero_star=True, zero_init_steps=2),
     lambda g: g.ClassifierFreeZeroStarGuidance(SCALE, zero_init_steps=2)),
    (Guidance(0.0, 0.6, zero_star=True),
     lambda g: g.ClassifierFreeZeroStarGuidance(SCALE, zero_init_steps=0, stop=0.6)),
])
def test_guidance_matches_diffusers_guiders(guidance, make):
    from diffusers import guiders

    rng = np.random.default_rng(0)
    latents = rng.standard_normal((1, 3, 4, 4, 8)).astype(np.float32)
    gain = jnp.asarray([1.3, 0.7], jnp.float32)
    bias = jnp.asarray(rng.standard_normal((2, 3, 4, 4, 8)).astype(np.float32))
    ours, our_steps = _vidax(guidance, latents, gain, bias)
    theirs, their_steps = _diffusers(make(guiders), latents, gain, bias)
    assert our_steps == their_steps
    assert any(our_steps) and (not all(our_steps) or guidance.zero_star)
    diff = float(np.abs(ours - theirs).max())
    print(f"{guidance}: guided steps {our_steps}, max abs diff {diff:.2e}")
    assert diff <= 1e-6 * theirs.std()
    # negative control: CFG on every step
    plain, _ = _vidax(Guidance(), latents, gain, bias)
    assert np.abs(plain - theirs).max() > 1e-3 * theirs.std()


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guidance") / demo.FOLDER
    demo.write(folder)
    return folder


class _Counting(wan2_1.WanPipeline):
    """The Wan2.1 pipeline recording the batch of each DiT pass as it runs."""

    passes: list = []

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        jax.debug.callback(lambda n=x.shape[0]: _Counting.passes.append(n))
        return wan2_1.WanPipeline.predict(dit, x, t, inputs, compute_dtype)


OPTIONS = dict(frames=9, size=(64, 48), steps=STEPS, seed=0)


def test_the_window_runs_the_prompt_alone_outside_it(release):
    pipe = _Counting.from_release(wan2_1.inspect_folder(release), precision="fp32")
    plain = pipe.sample(demo.PROMPT, **OPTIONS)
    _Counting.passes.clear()
    full = pipe.sample(demo.PROMPT, guidance=Guidance(0.0, 1.0), **OPTIONS)
    assert _Counting.passes == [2] * STEPS and np.array_equal(full, plain)
    _Counting.passes.clear()
    windowed = pipe.sample(demo.PROMPT, guidance=Guidance(0.0, 0.6), **OPTIONS)
    assert _Counting.passes == [2] * 6 + [1] * 4
    assert np.isfinite(windowed).all() and not np.array_equal(windowed, plain)


def test_families_without_the_hooks_refuse_it(release):
    pipe = vidax.pipeline("wan2_1", release)
    type(pipe).CHEAPER_GUIDANCE = False
    try:
        with pytest.raises(VidaxError, match="not wired for this family"):
            pipe.sample(demo.PROMPT, guidance=Guidance(0.0, 0.5), **OPTIONS)
    finally:
        type(pipe).CHEAPER_GUIDANCE = True
    with pytest.raises(VidaxError, match="start <= stop"):
        Guidance(0.5, 0.2)


def test_the_window_with_a_step_cache(release):
    """Leaving the window halves the DiT batch: the cache starts fresh states there (the first
    step on the prompt alone computes) and keeps skipping after it."""
    from vidax.pipelines import step_cache

    pipe = vidax.pipeline("wan2_1", release, precision="fp32")
    latents = pipe.sample(demo.PROMPT, guidance=Guidance(0.0, 0.6),
                          step_cache=step_cache.parse("first-block", threshold=10.0), **OPTIONS)
    report = pipe.sampling_reports[-1]
    ran = report.computed.any((1, 2)).tolist()
    assert ran == [True] + [False] * 5 + [True] + [False] * 3, ran
    assert report.alone == 4 and np.isfinite(latents).all()
    assert "4 steps on the prompt alone" in report.summary()
