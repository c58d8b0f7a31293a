"""Every vidax sampler follows the one protocol (``vidax.schedulers.base.Scheduler``: host
``timesteps``, ``init(shape, sharding)``, a pure ``step`` jitted once with donated carries), and
the two that moved out of the pipelines -- HunyuanVideo's flow-matching Euler and
Cosmos-Predict2.5's Karras-schedule UniPC -- against diffusers' schedulers, which their
pipelines run (``FlowMatchEulerDiscreteScheduler``, ``UniPCMultistepScheduler`` with Karras
flow sigmas).

Oracle and bound as ``test_flow_schedulers.py``: bit-identical schedules; trajectories from
the same noise under the same deterministic pseudo-model, every step within
``2e-6 x max |x_ref|``. Negative controls (the wrong shift, the wrong sigma range) must miss
the bound by far.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_flow_schedulers import (  # the pseudo-model, its noise and the trajectory helpers
    FIELD,
    NOISE,
    REL_TOL,
    SHAPE,
    reference_trajectory,
    vidax_trajectory,
    worst_rel_diff,
)

from vidax.schedulers import (
    FlowDPMSolverMultistepScheduler,
    FlowMatchEulerScheduler,
    FlowUniPCMultistepScheduler,
    KarrasFlowUniPCScheduler,
    RectifiedFlowScheduler,
    RectifiedFlowSteps,
    Scheduler,
)
from vidax.schedulers import rectified_flow
from vidax.schedulers.cogvideox import CogVideoXDDIMScheduler, CogVideoXDPMScheduler

STEP_NOISE = np.random.default_rng(1).standard_normal((8, *SHAPE)).astype(np.float32)
SCHEDULERS = {
    "unipc": lambda n: FlowUniPCMultistepScheduler(n, 5.0),
    "dpm++": lambda n: FlowDPMSolverMultistepScheduler(n, 5.0),
    "karras-unipc": KarrasFlowUniPCScheduler,
    "euler": lambda n: FlowMatchEulerScheduler(n, 7.0),
    "cogvideox-ddim": CogVideoXDDIMScheduler,
    "cogvideox-dpm": CogVideoXDPMScheduler,
    "rectified-flow": lambda n: RectifiedFlowSteps(
        RectifiedFlowScheduler(sampler="LinearQuadratic").timesteps(n)),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_every_scheduler_follows_the_protocol(name):
    """timesteps [N] on the host; a state pytree; one jitted program (traced index, donated
    sample and state) for every step, equal to the step run eagerly with Python indices."""
    sched = SCHEDULERS[name](6)
    assert isinstance(sched, Scheduler)
    assert isinstance(sched.timesteps, np.ndarray) and sched.timesteps.shape == (6,)
    traces = []

    def traced(*args, **kwargs):
        traces.append(1)
        return sched.step(*args, **kwargs)

    def with_noise(step):  # CogVideoX's DPM takes each step's fresh draw
        if name != "cogvideox-dpm":
            return step
        return lambda v, k, x, s: step(v, k, x, s, noise=jnp.asarray(STEP_NOISE[int(k)]))

    jitted = jax.jit(traced, donate_argnums=(2, 3))
    eager = vidax_trajectory(sched, with_noise(sched.step))
    ours = vidax_trajectory(sched, with_noise(lambda v, k, x, s, **kw: jitted(
        v, jnp.int32(k), x, s, **kw)))
    assert len(traces) == 1
    assert all(np.isfinite(x).all() and x.shape == SHAPE for x in ours)
    assert worst_rel_diff(ours, eager) <= REL_TOL


def _diffusers_euler(steps: int):
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=7.0)
    sched.set_timesteps(sigmas=np.linspace(1.0, 0.0, steps + 1)[:-1])
    return sched


def _diffusers_karras(steps: int):
    from diffusers import UniPCMultistepScheduler

    sched = UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
                                    prediction_type="flow_prediction", sigma_max=200.0,
                                    sigma_min=0.01)
    sched.set_timesteps(steps)
    return sched


#: name -> (vidax's scheduler, diffusers', a negative control: the wrong shift / sigma_max)
MOVED = {
    "euler": (lambda n: FlowMatchEulerScheduler(n, 7.0), _diffusers_euler,
              lambda n: FlowMatchEulerScheduler(n, 3.0)),
    "karras-unipc": (KarrasFlowUniPCScheduler, _diffusers_karras,
                     lambda n: KarrasFlowUniPCScheduler(n, sigma_max=80.0)),
}


@pytest.mark.parametrize("name,steps", [("euler", 1), ("euler", 3), ("euler", 30),
                                        ("euler", 50), ("karras-unipc", 3),
                                        ("karras-unipc", 20), ("karras-unipc", 36)])
def test_moved_schedulers_are_diffusers(name, steps):
    make, make_reference, make_wrong = MOVED[name]
    ours, ref = make(steps), make_reference(steps)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy())
    np.testing.assert_array_equal(ours.sigmas, ref.sigmas.numpy())
    expected = reference_trajectory(ref, ref.timesteps)
    diff = worst_rel_diff(vidax_trajectory(ours), expected)
    print(f"{name} {steps} steps: max |diff| / max |ref| = {diff:.2e}")
    assert diff <= REL_TOL
    if steps > 1:  # one Euler step from sigma 1 to 0 does not depend on the shift
        wrong = worst_rel_diff(vidax_trajectory(make_wrong(steps)), expected)
        assert wrong > 100 * REL_TOL, wrong


def test_rectified_flow_steps_is_the_authors_step():
    """Every token at the step's timestep by default; a per-token timestep of 0 (a
    conditioning token) stays put, as in ``rectified_flow.step``."""
    sched = RectifiedFlowSteps(RectifiedFlowScheduler(sampler="LinearQuadratic").timesteps(8))
    state = sched.init()
    x, v = jnp.asarray(NOISE), jnp.asarray(FIELD)
    for k, t in enumerate(sched.timesteps):
        ours, _ = sched.step(v, k, x, state)
        per_token = jnp.full(SHAPE[:-1], t)
        np.testing.assert_array_equal(ours, rectified_flow.step(v, per_token, x, state))
    frozen = jnp.zeros(SHAPE[:-1]).at[:, 0].set(0.0).at[:, 1:].set(sched.timesteps[0])
    ours, _ = sched.step(v, 0, x, state, timestep=frozen)
    np.testing.assert_array_equal(ours[:, 0], x[:, 0])
    assert not np.allclose(ours[:, 1:], x[:, 1:])
