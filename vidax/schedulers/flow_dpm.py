"""DPM-Solver++ for flow matching: the Wan authors' ``--sample_solver dpm++``.

Mirrors ``FlowDPMSolverMultistepScheduler`` (``wan/utils/fm_solvers.py``) as the Wan
pipelines drive it: built with ``shift=1``; the sigmas come from
``get_sampling_sigmas(steps, shift)`` and are handed over by
``retrieve_timesteps(scheduler, sigmas=...)``. Its settings: ``algorithm_type="dpmsolver++"``,
``solver_type="midpoint"``, ``solver_order=2``, ``lower_order_final=True``, final sigma 0,
``prediction_type="flow_prediction"``, no thresholding. It is deterministic: the
``generator`` the pipelines pass only feeds the SDE variants, which Wan does not use.

Each step: ``x0 = sample - sigma_k * model_output`` (``convert_model_output``), then
``x_next = (sigma_t / sigma_s0) * sample - alpha_t (e^{-h} - 1) * D0
- 0.5 * alpha_t (e^{-h} - 1) * D1`` with ``D0 = x0`` and ``D1 = (x0 - x0_prev) / r0``
(``multistep_dpm_solver_second_order_update``); the first step and the last one are first
order (``dpm_solver_first_order_update``: the same expression without ``D1``).

The schedule starts at sigma exactly 1 (timestep 1000), where ``lambda = -inf``: the first
step's ``h`` is infinite (``e^{-h} = 0``, so it jumps to ``sigma_1 * noise + alpha_1 * x0``)
and the second step's ``1 / r0`` is 0, so the second step is effectively first order too.
The float32 scalars reproduce those infinities as the authors' tensors do.

As in :mod:`vidax.schedulers.flow_unipc`, the per-step scalars are computed on the host in
the authors' float32 arithmetic and travel in the state, so :meth:`step` is pure and
branch-free. Only ``solver_order`` 1 and 2 are provided: Wan only ever uses 2, and the
authors' third-order update is not ported.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import VidaxError
from vidax.schedulers.common import (
    check_step_index,
    check_steps,
    f32,
    flow_schedule,
    log_snr,
    shift_sigmas,
)

_NAME = "FlowDPMSolverMultistepScheduler"


class DPMCoefficients(NamedTuple):
    """Per-step float32 scalars (``[N]`` each): ``x_next = ratio * sample - d0 * x0
    - d1 * (inv_r0 * (x0 - x0_prev))``. First-order steps have ``d1 = inv_r0 = 0``, which
    subtracts an exact zero."""

    sigma: np.ndarray  # sigma_k, for x0 = sample - sigma_k * model_output
    ratio: np.ndarray  # sigma_t / sigma_s0
    d0: np.ndarray  # alpha_t * (exp(-h) - 1)
    d1: np.ndarray  # 0.5 * d0 on second-order steps
    inv_r0: np.ndarray  # 1 / r0, r0 = (lambda_s0 - lambda_s1) / h


class DPMState(NamedTuple):
    """The carry between steps: the previous ``solver_order - 1`` ``x0`` predictions
    (float32; zeros before they exist) and the schedule's :class:`DPMCoefficients`."""

    model_outputs: tuple[jax.Array, ...]
    coefficients: DPMCoefficients


def get_sampling_sigmas(num_inference_steps: int, shift: float) -> np.ndarray:
    """float64 ``linspace(1, 0, N + 1)[:N]``, shifted (the authors' ``get_sampling_sigmas``)."""
    return shift_sigmas(np.linspace(1, 0, num_inference_steps + 1)[:num_inference_steps], shift)


def dpm_coefficients(sigmas: np.ndarray, solver_order: int) -> DPMCoefficients:
    """The table of :class:`DPMCoefficients` for float32 ``sigmas`` (``N + 1`` values)."""
    n = len(sigmas) - 1
    lam = log_snr(sigmas)
    alpha = np.float32(1) - sigmas
    one, zero = np.float32(1), np.float32(0)
    rows = []
    for k in range(n):
        h = lam[k + 1] - lam[k]
        d0 = alpha[k + 1] * (f32(np.exp, -h) - one)
        # step(): first order with no history yet (lower_order_nums < 1) and, because the
        # final sigma is 0, on the last step; second order otherwise.
        if solver_order == 1 or k == 0 or k == n - 1:
            d1 = inv_r0 = zero
        else:
            r0 = (lam[k] - lam[k - 1]) / h
            d1, inv_r0 = np.float32(0.5) * d0, one / r0
        rows.append((sigmas[k], sigmas[k + 1] / sigmas[k], d0, d1, inv_r0))
    return DPMCoefficients(*(np.asarray(col, dtype=np.float32) for col in zip(*rows)))


class FlowDPMSolverMultistepScheduler:
    """DPM-Solver++ (midpoint, order 2) over Wan's shifted flow-matching schedule.

    Attributes (host numpy):
      timesteps: int64 ``[N]``, what the DiT is called with (the authors' values; the first
        is always 1000).
      sigmas: float32 ``[N + 1]``: :func:`get_sampling_sigmas` followed by 0.
      num_inference_steps, shift, solver_order, num_train_timesteps.
    """

    def __init__(self, num_inference_steps: int, shift: float = 1.0, *, solver_order: int = 2,
                 num_train_timesteps: int = 1000):
        check_steps(type(self).__name__, num_inference_steps, shift, solver_order, 2)
        self.num_inference_steps = int(num_inference_steps)
        self.shift = float(shift)
        self.solver_order = int(solver_order)
        self.num_train_timesteps = int(num_train_timesteps)
        # retrieve_timesteps(sigmas=...) reaches set_timesteps(sigmas=...), which shifts
        # again by the constructor's shift of 1: an exact identity in float64.
        self.timesteps, self.sigmas = flow_schedule(
            get_sampling_sigmas(self.num_inference_steps, self.shift), self.num_train_timesteps)
        self.coefficients = dpm_coefficients(self.sigmas, self.solver_order)

    def init(self, shape, sharding=None) -> DPMState:
        """The state before step 0 for latents of ``shape``: float32 carries, each its own
        buffer (so the whole state can be donated), placed like the latents when given
        their ``sharding``."""
        return DPMState(model_outputs=tuple(jnp.zeros(shape, jnp.float32, device=sharding)
                                            for _ in range(self.solver_order - 1)),
                        coefficients=DPMCoefficients(*(jnp.asarray(c)
                                                       for c in self.coefficients)))

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array, state: DPMState
             ) -> tuple[jax.Array, DPMState]:
        """One sampling step: the sample at ``sigmas[step_index + 1]`` and the next state.

        Same contract as :meth:`FlowUniPCMultistepScheduler.step`: float32 in and out (the
        authors upcast the sample to float32 here), ``step_index`` a Python int (checked)
        or traced, pure and jit-able with donated carries.
        """
        coef = state.coefficients
        check_step_index(_NAME, step_index, coef.sigma.shape[0])
        c = jax.tree.map(lambda column: column[step_index], coef)
        v = jnp.asarray(model_output, jnp.float32)
        x = jnp.asarray(sample, jnp.float32)
        if v.shape != x.shape:
            raise VidaxError(f"{_NAME}.step: model_output {v.shape} and sample {x.shape} "
                             "differ in shape.")
        x0 = x - c.sigma * v
        x_next = c.ratio * x - c.d0 * x0
        if state.model_outputs:
            x_next = x_next - c.d1 * (c.inv_r0 * (x0 - state.model_outputs[-1]))
        return x_next, DPMState((*state.model_outputs, x0)[1:], coef)
