"""vidax's flow-matching samplers against the Wan authors' (``wan/utils/fm_solvers*.py``).

Oracle: the authors' ``FlowUniPCMultistepScheduler`` and ``FlowDPMSolverMultistepScheduler``
(torch, CPU), built and driven exactly as ``wan/text2video.py`` does: constructed with
``shift=1``; UniPC through ``set_timesteps(steps, shift=shift)``, DPM++ through
``retrieve_timesteps(sigmas=get_sampling_sigmas(steps, shift))``; then
``step(noise_pred, t, latents, return_dict=False)`` once per timestep.

* Schedules: ``timesteps`` (int64) and ``sigmas`` (float32) must be bit-identical.
* Trajectories: both sides start from the same noise and call the same deterministic
  pseudo-model on their own current sample, ``v = 0.3 x + sin(t / 1000) * field`` (numpy
  float32, identical code), so any solver difference feeds back into later steps. Bound:
  every step's ``max |x_vidax - x_ref| <= 2e-6 * max |x_ref|``, about 17 float32 ulps.
  The residue is the authors' own float32 scalar arithmetic met in the last bit: torch's
  float32 ``log``/``exp``/``expm1`` and LAPACK solve round differently from vidax's
  (see ``vidax.schedulers.common``). Measured: <= 6e-7 (printed per case).
* Negative controls: the wrong solver order and the wrong shift must miss the bound by far.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.reference import wan22
from vidax.errors import VidaxError
from vidax.schedulers import (
    SAMPLE_SOLVERS,
    FlowDPMSolverMultistepScheduler,
    FlowUniPCMultistepScheduler,
)

REL_TOL = 2e-6
SHAPE = (1, 16, 3, 8, 8)  # the authors' [B, C, T, H, W]; the solvers are elementwise
SHIFTS = (1.0, 3.0, 5.0, 12.0, 16.0)
_rng = np.random.default_rng(0)
NOISE = _rng.standard_normal(SHAPE).astype(np.float32)
FIELD = _rng.standard_normal(SHAPE).astype(np.float32)


def pseudo_model(x, t) -> np.ndarray:
    """A deterministic stand-in for the guided DiT output, the same code on both sides."""
    return np.float32(0.3) * np.asarray(x, np.float32) + np.sin(np.float32(t) / 1000) * FIELD


def reference_scheduler(solver: str, steps: int, shift: float, order: int = 2):
    """The authors' scheduler and its timesteps, set up as ``wan/text2video.py`` does."""
    unipc, dpm = wan22.fm_solvers()
    if solver == "unipc":
        sched = unipc.FlowUniPCMultistepScheduler(num_train_timesteps=1000, shift=1,
                                                  use_dynamic_shifting=False,
                                                  solver_order=order)
        sched.set_timesteps(steps, device="cpu", shift=shift)
        return sched, sched.timesteps
    sched = dpm.FlowDPMSolverMultistepScheduler(num_train_timesteps=1000, shift=1,
                                                use_dynamic_shifting=False, solver_order=order)
    timesteps, _ = dpm.retrieve_timesteps(sched, device="cpu",
                                          sigmas=dpm.get_sampling_sigmas(steps, shift))
    return sched, timesteps


def reference_trajectory(sched, timesteps) -> list[np.ndarray]:
    x = torch.from_numpy(NOISE)
    out = []
    for t in timesteps:
        v = torch.from_numpy(pseudo_model(x.numpy(), t.item()))
        x = sched.step(v, t, x, return_dict=False)[0]
        out.append(x.numpy())
    return out


def vidax_trajectory(sched, step=None) -> list[np.ndarray]:
    step = step or sched.step
    x, state = jnp.asarray(NOISE), sched.init(SHAPE)
    out = []
    for k, t in enumerate(sched.timesteps):
        x, state = step(jnp.asarray(pseudo_model(x, t)), k, x, state)
        out.append(np.asarray(x))
    return out


def worst_rel_diff(ours, ref) -> float:
    assert len(ours) == len(ref)
    return max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(ours, ref))


@pytest.mark.parametrize("solver", list(SAMPLE_SOLVERS))
def test_schedule_is_bit_identical(solver):
    for steps in (1, 2, 3, 10, 20, 30, 40, 50, 80, 100):
        for shift in (*SHIFTS, 8.0, 20.0):
            ref, timesteps = reference_scheduler(solver, steps, shift)
            ours = SAMPLE_SOLVERS[solver](steps, shift)
            assert ours.timesteps.dtype == np.int64 and ours.sigmas.dtype == np.float32
            np.testing.assert_array_equal(ours.timesteps, timesteps.numpy(),
                                          err_msg=f"{solver} {steps} steps, shift {shift}")
            np.testing.assert_array_equal(ours.sigmas, ref.sigmas.numpy(),
                                          err_msg=f"{solver} {steps} steps, shift {shift}")


def test_the_two_schedules_differ_as_the_authors_build_them():
    # UniPC starts from float32(0.999) (its training table's first sigma), DPM++ from 1.0.
    unipc, dpm = FlowUniPCMultistepScheduler(50, 5.0), FlowDPMSolverMultistepScheduler(50, 5.0)
    assert unipc.sigmas[0] == np.float32(5 * 0.999 / (1 + 4 * 0.999)) and unipc.timesteps[0] == 999
    assert dpm.sigmas[0] == 1.0 and dpm.timesteps[0] == 1000
    assert unipc.sigmas[-1] == dpm.sigmas[-1] == 0.0 and len(unipc.sigmas) == 51


@pytest.mark.parametrize("shift", SHIFTS)
@pytest.mark.parametrize("solver", list(SAMPLE_SOLVERS))
def test_trajectory_matches_the_authors(solver, shift):
    for steps in (10, 40, 50):
        ref = reference_trajectory(*reference_scheduler(solver, steps, shift))
        ours = vidax_trajectory(SAMPLE_SOLVERS[solver](steps, shift))
        diff = worst_rel_diff(ours, ref)
        print(f"{solver} shift {shift} steps {steps}: max |diff| / max |ref| = {diff:.2e}")
        assert diff <= REL_TOL, (solver, shift, steps, diff)


@pytest.mark.parametrize("solver,order", [("unipc", 1), ("unipc", 3), ("dpm++", 1)])
def test_other_solver_orders_match_the_authors(solver, order):
    # order 1 exercises the history-free path, UniPC order 3 the solved (not simplified) rhos.
    ref = reference_trajectory(*reference_scheduler(solver, 20, 5.0, order))
    ours = vidax_trajectory(SAMPLE_SOLVERS[solver](20, 5.0, solver_order=order))
    diff = worst_rel_diff(ours, ref)
    print(f"{solver} order {order}: {diff:.2e}")
    assert diff <= REL_TOL


@pytest.mark.parametrize("solver", list(SAMPLE_SOLVERS))
def test_jit_with_donation_matches_and_compiles_once(solver):
    traces = []

    def traced_step(*args):
        traces.append(1)  # runs once per trace, not per call
        return SAMPLE_SOLVERS[solver].step(*args)

    step = jax.jit(traced_step, donate_argnums=(2, 3))
    for shift in (3.0, 12.0):  # the schedule is data in the state: no retrace per shift
        sched = SAMPLE_SOLVERS[solver](40, shift)
        eager = vidax_trajectory(sched)
        jitted = vidax_trajectory(sched, step)
        ref = reference_trajectory(*reference_scheduler(solver, 40, shift))
        print(f"{solver} shift {shift}: jit vs eager {worst_rel_diff(jitted, eager):.2e}, "
              f"jit vs reference {worst_rel_diff(jitted, ref):.2e}")
        assert worst_rel_diff(jitted, ref) <= REL_TOL
    assert len(traces) == 1


@pytest.mark.parametrize("solver", list(SAMPLE_SOLVERS))
def test_negative_controls_fail_the_bound(solver):
    ref = reference_trajectory(*reference_scheduler(solver, 40, 5.0))
    wrong_order = vidax_trajectory(SAMPLE_SOLVERS[solver](40, 5.0, solver_order=1))
    wrong_shift = vidax_trajectory(SAMPLE_SOLVERS[solver](40, 3.0))
    for name, ours in (("order 1", wrong_order), ("shift 3", wrong_shift)):
        diff = worst_rel_diff(ours, ref)
        print(f"{solver} negative control {name}: {diff:.2e}")
        assert diff > 100 * REL_TOL, (name, diff)


def test_unipc_runs_schedules_whose_first_timestep_repeats():
    # 80 steps at shift 16 start 999, 999, ...: the authors' index lookup then starts at step 1
    # and their sampler fails on its last step. Started at index 0 (set_begin_index(0), the
    # authors' own override) it agrees with vidax, which takes the index from the caller.
    sched, timesteps = reference_scheduler("unipc", 80, 16.0)
    assert timesteps[0] == timesteps[1]
    with pytest.raises(AssertionError):
        reference_trajectory(sched, timesteps)
    sched, timesteps = reference_scheduler("unipc", 80, 16.0)
    sched.set_begin_index(0)
    ref = reference_trajectory(sched, timesteps)
    diff = worst_rel_diff(vidax_trajectory(FlowUniPCMultistepScheduler(80, 16.0)), ref)
    print(f"unipc 80 steps shift 16 from index 0: {diff:.2e}")
    assert diff <= REL_TOL


@pytest.mark.parametrize("cls", [FlowUniPCMultistepScheduler, FlowDPMSolverMultistepScheduler])
def test_bad_settings_raise(cls):
    for kwargs in ({"num_inference_steps": 0}, {"num_inference_steps": 2.5},
                   {"num_inference_steps": 10, "shift": 0.0},
                   {"num_inference_steps": 10, "shift": float("nan")},
                   {"num_inference_steps": 10, "solver_order": 0}):
        with pytest.raises(VidaxError):
            cls(**kwargs)
    sched = cls(10, 5.0)
    state = sched.init(SHAPE)
    with pytest.raises(VidaxError, match="step_index 10"):
        sched.step(jnp.zeros(SHAPE), 10, jnp.zeros(SHAPE), state)
    with pytest.raises(VidaxError, match="differ in shape"):
        sched.step(jnp.zeros((1, 2)), 0, jnp.zeros(SHAPE), state)
    if cls is FlowDPMSolverMultistepScheduler:
        with pytest.raises(VidaxError, match="solver_order"):
            cls(10, 5.0, solver_order=3)
