"""UniPC for flow matching: the Wan authors' default sampler.

Mirrors ``FlowUniPCMultistepScheduler`` (``wan/utils/fm_solvers_unipc.py``) as the Wan
pipelines drive it: built with ``shift=1``, then ``set_timesteps(steps, shift=shift)``;
``solver_type="bh2"``, ``predict_x0=True``, ``prediction_type="flow_prediction"``,
``lower_order_final=True``, final sigma 0, no corrector disabled, no thresholding.

Each step (``step`` of the authors' class):

1. ``x0 = sample - sigma_k * model_output`` (``convert_model_output``; the model predicts
   the velocity ``noise - x0``), taken at the *uncorrected* sample.
2. From step 1 on, the UniC corrector rewrites the incoming sample with the new ``x0``
   (``multistep_uni_c_bh_update``, at the order the previous predictor used).
3. The UniP predictor moves the corrected sample to ``sigma_{k+1}`` from the last
   ``order`` ``x0`` predictions (``multistep_uni_p_bh_update``). The order warms up
   (1, 2, ...) and drops to 1 on the last step, whose result is that step's ``x0``.

Everything that depends only on the schedule (which order, every float32 scalar of both
updates, whether the corrector runs) is computed once on the host, in the authors' float32
arithmetic, into a per-step table that travels in the state. :meth:`step` is then a pure,
branch-free function of its arguments: under ``jax.jit`` one program (per latent shape and
step count) serves every shift and every step index (the index may be traced), and its
latent-sized carries can be donated.

Deliberate difference: the authors find the first step's index by looking the timestep up
in the schedule and take the *second* match when the first integer timestep repeats
(``index_for_timestep``); that happens when many steps meet a large shift (from 68 steps at
shift 16: timesteps 999, 999, 998, ...) and their sampler then skips a sigma and fails an
assertion on its last step. vidax takes the step index from the caller, which is what the
authors' ``set_begin_index(0)`` gives, so those schedules simply run. Wan's own settings
(<= 50 steps, shift <= 16) never repeat the first timestep.
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

_NAME = "FlowUniPCMultistepScheduler"


class UniPCCoefficients(NamedTuple):
    """Per-step float32 scalars, one row per step (``[N]``, or ``[N, solver_order - 1]``).

    ``ratio * x - m0_coef * m0 - gain * (sum_i rho_i * (m_i - m0) / rk_i [+ rho_t * D1_t])``
    is each update of the authors' ``multistep_uni_{c,p}_bh_update``: ``ratio`` is
    ``sigma_t / sigma_s0``, ``m0_coef`` is ``alpha_t * h_phi_1``, ``gain`` is
    ``alpha_t * B(h)``. Unused history slots get ``rho = 0, rk = 1`` so that they add an
    exact zero, which keeps the step free of order-dependent branches.
    """

    sigma: np.ndarray  # sigma_k, for x0 = sample - sigma_k * model_output
    use_corrector: np.ndarray  # bool: False on step 0
    c_ratio: np.ndarray
    c_m0_coef: np.ndarray
    c_gain: np.ndarray
    c_rk: np.ndarray
    c_rho: np.ndarray
    c_rho_t: np.ndarray  # weight of D1_t = x0_k - x0_{k-1}
    p_ratio: np.ndarray
    p_m0_coef: np.ndarray
    p_gain: np.ndarray
    p_rk: np.ndarray
    p_rho: np.ndarray


class UniPCState(NamedTuple):
    """The carry between steps (a pytree of float32 arrays).

    model_outputs: the last ``solver_order`` ``x0`` predictions, oldest first (zeros before
      they exist; the coefficients give those slots an exact zero weight).
    last_sample: the corrected sample the previous predictor started from (UniC needs it).
    coefficients: the schedule's :class:`UniPCCoefficients`, indexed by the step index.
    """

    model_outputs: tuple[jax.Array, ...]
    last_sample: jax.Array
    coefficients: UniPCCoefficients


def _bh2_scalars(lam, alpha, sigmas, t: int, s0: int, earlier: list[int], order: int):
    """The float32 scalars of one B(h) update from index ``s0`` to ``t``, with
    ``earlier[i - 1]`` the index of the i-th older model output, at ``order``.

    Follows ``multistep_uni_{p,c}_bh_update`` line by line: ``rks``, ``h_phi_1``, ``B_h``
    (bh2: ``expm1(-h)``) and the ``R``/``b`` system its rho coefficients solve.
    """
    one = np.float32(1)
    h = lam[t] - lam[s0]
    rks = [(lam[si] - lam[s0]) / h for si in earlier[:order - 1]] + [one]
    rks = np.asarray(rks, dtype=np.float32)
    hh = -h
    h_phi_1 = f32(np.expm1, hh)
    h_phi_k = h_phi_1 / hh - one
    b_h = h_phi_1  # bh2: B(h) = expm1(hh), the same float32 value as h_phi_1
    factorial = 1
    rows, b = [], []
    for i in range(1, order + 1):
        rows.append(rks ** (i - 1))
        b.append(h_phi_k * np.float32(factorial) / b_h)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - np.float32(1 / factorial)
    matrix = np.stack(rows).astype(np.float32)
    b = np.asarray(b, dtype=np.float32)
    ratio = sigmas[t] / sigmas[s0]
    return ratio, alpha[t] * h_phi_1, alpha[t] * b_h, rks[:-1], matrix, b


def _pad(values, width: int, fill: float) -> np.ndarray:
    out = np.full(width, fill, dtype=np.float32)
    out[:len(values)] = values
    return out


def unipc_coefficients(sigmas: np.ndarray, solver_order: int) -> UniPCCoefficients:
    """The table of :class:`UniPCCoefficients` for float32 ``sigmas`` (``N + 1`` values)."""
    n = len(sigmas) - 1
    p = solver_order
    lam = log_snr(sigmas)
    alpha = np.float32(1) - sigmas
    # The authors' order bookkeeping: lower_order_nums counts finished steps up to p, and
    # lower_order_final drops the order as the steps run out (the last step is order 1).
    orders = [min(p, n - k, min(k, p) + 1) for k in range(n)]
    rows = []
    for k in range(n):
        q = orders[k]
        ratio, m0_coef, gain, rk, matrix, b = _bh2_scalars(
            lam, alpha, sigmas, k + 1, k, [k - i for i in range(1, q)], q)
        if q == 1:
            rho = np.zeros(0, np.float32)
        elif q == 2:
            rho = np.asarray([0.5], np.float32)  # the authors' simplified order-2 predictor
        else:
            rho = np.linalg.solve(matrix[:-1, :-1], b[:-1]).astype(np.float32)
        predictor = (ratio, m0_coef, gain, _pad(rk, p - 1, 1.0), _pad(rho, p - 1, 0.0))
        if k == 0:
            corrector = (np.float32(0),) * 3 + (np.ones(p - 1, np.float32),
                                                np.zeros(p - 1, np.float32), np.float32(0))
        else:
            qc = orders[k - 1]  # UniC runs at the order of the predictor it corrects
            ratio, m0_coef, gain, rk, matrix, b = _bh2_scalars(
                lam, alpha, sigmas, k, k - 1, [k - 1 - i for i in range(1, qc)], qc)
            if qc == 1:
                rho = np.asarray([0.5], np.float32)  # the authors' simplified order 1
            else:
                rho = np.linalg.solve(matrix, b).astype(np.float32)
            corrector = (ratio, m0_coef, gain, _pad(rk, p - 1, 1.0),
                         _pad(rho[:-1], p - 1, 0.0), rho[-1])
        rows.append((sigmas[k], k > 0, *corrector, *predictor))
    columns = [np.asarray(col) for col in zip(*rows)]
    return UniPCCoefficients(*[c if c.dtype == np.bool_ else c.astype(np.float32)
                               for c in columns])


def _bh_update(x, history, ratio, m0_coef, gain, rk, rho, rho_t=None, model_t=None):
    """``ratio * x - m0_coef * m0 - gain * res`` with ``m0 = history[-1]`` and
    ``res = sum_i rho_i * (m_i - m0) / rk_i (+ rho_t * (model_t - m0))``: the tensor part
    of ``multistep_uni_{p,c}_bh_update`` in the authors' order of operations."""
    m0 = history[-1]
    out = ratio * x - m0_coef * m0
    terms = [rho[i - 1] * ((history[-(i + 1)] - m0) / rk[i - 1])
             for i in range(1, len(history))]
    if model_t is not None:
        terms.append(rho_t * (model_t - m0))
    if not terms:
        return out
    res = terms[0]
    for term in terms[1:]:
        res = res + term
    return out - gain * res


class FlowUniPCMultistepScheduler:
    """UniPC (bh2, predict x0) over Wan's shifted flow-matching schedule.

    Attributes (host numpy):
      timesteps: int64 ``[N]``, what the DiT is called with at each step (the authors' values).
      sigmas: float32 ``[N + 1]``, the noise level before each step and 0 at the end.
      num_inference_steps, shift, solver_order, num_train_timesteps.

    ``sigmas`` are ``linspace(sigma_max, 0, N + 1)[:-1]`` shifted, with ``sigma_max`` the
    float32 value of ``1 - 1/num_train_timesteps`` (0.99900001287 for 1000): the first
    noise level of the authors' training table, which they read back from a float32
    tensor. This differs from :class:`FlowDPMSolverMultistepScheduler`, which starts at 1.
    """

    def __init__(self, num_inference_steps: int, shift: float = 1.0, *, solver_order: int = 2,
                 num_train_timesteps: int = 1000):
        check_steps(type(self).__name__, num_inference_steps, shift, solver_order, None)
        self.num_inference_steps = int(num_inference_steps)
        self.shift = float(shift)
        self.solver_order = int(solver_order)
        self.num_train_timesteps = int(num_train_timesteps)
        # __init__ builds 1 - linspace(1, 1/T, T)[::-1] in float64, stores it as float32 and
        # keeps its first element as sigma_max (its last, sigma_min, is exactly 0).
        sigma_max = float(np.float32(1.0 - 1.0 / self.num_train_timesteps))
        base = np.linspace(sigma_max, 0.0, self.num_inference_steps + 1)[:-1]
        self.timesteps, self.sigmas = flow_schedule(shift_sigmas(base, self.shift),
                                                    self.num_train_timesteps)
        self.coefficients = unipc_coefficients(self.sigmas, self.solver_order)

    def init(self, shape, sharding=None) -> UniPCState:
        """The state before step 0 for latents of ``shape``: float32 carries, each its own
        buffer (so the whole state can be donated), placed like the latents when given
        their ``sharding``."""
        return UniPCState(
            model_outputs=tuple(jnp.zeros(shape, jnp.float32, device=sharding)
                                for _ in range(self.solver_order)),
            last_sample=jnp.zeros(shape, jnp.float32, device=sharding),
            coefficients=UniPCCoefficients(*(jnp.asarray(c) for c in self.coefficients)))

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array, state: UniPCState
             ) -> tuple[jax.Array, UniPCState]:
        """One sampling step: the sample at ``sigmas[step_index + 1]`` and the next state.

        ``model_output`` is the (guided) velocity the model predicted at ``sample`` and
        ``timesteps[step_index]``. Inputs are cast to float32, the authors' dtype for Wan
        (float32 latents; the DiT returns float32). ``step_index`` may be a Python int
        (checked) or a traced integer. Pure: safe to ``jax.jit`` with the sample and the
        state donated.
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
        corrected = _bh_update(state.last_sample, state.model_outputs, c.c_ratio,
                               c.c_m0_coef, c.c_gain, c.c_rk, c.c_rho, c.c_rho_t, x0)
        x = jnp.where(c.use_corrector, corrected, x)
        history = (*state.model_outputs[1:], x0)
        x_next = _bh_update(x, history, c.p_ratio, c.p_m0_coef, c.p_gain, c.p_rk, c.p_rho)
        return x_next, UniPCState(history, x, coef)


# ----------------------------------------------------------------------------- Karras flow
def karras_flow_sigmas(num_inference_steps: int, sigma_min: float = 0.01,
                       sigma_max: float = 200.0, rho: float = 7.0,
                       num_train_timesteps: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(int64 timesteps ``[N]``, float32 sigmas ``[N + 1]``) of diffusers'
    ``UniPCMultistepScheduler.set_timesteps`` with ``use_karras_sigmas`` and
    ``use_flow_sigmas`` (``_convert_to_karras``, then ``s / (s + 1)``, final sigma 0), in its
    float64 arithmetic; timesteps truncated as its ``.to(torch.int64)``."""
    ramp = np.linspace(0, 1, num_inference_steps)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    karras = (hi + ramp * (lo - hi)) ** rho
    flow = karras / (karras + 1)
    timesteps = (flow * num_train_timesteps).astype(np.int64)
    return timesteps, np.concatenate([flow, [0.0]]).astype(np.float32)


class KarrasFlowUniPCScheduler(FlowUniPCMultistepScheduler):
    """UniPC (bh2, order 2, x0) over Cosmos-Predict2.5's Karras flow schedule: ``sigma_k =
    s_k / (1 + s_k)`` with ``s`` Karras' rho-7 ramp from ``sigma_max`` 200 down to
    ``sigma_min`` 0.01, then 0 (:func:`karras_flow_sigmas`).

    diffusers' ``UniPCMultistepScheduler`` with flow sigmas does the same update as the Wan
    authors' ``FlowUniPCMultistepScheduler`` (x0 = sample - sigma v; alpha = 1 - sigma; the
    same order warm-up, ``lower_order_final`` and corrector); only the schedule differs, so
    this class keeps :meth:`step` and :meth:`init` and replaces the schedule.
    """

    def __init__(self, num_inference_steps: int, *, sigma_min: float = 0.01,
                 sigma_max: float = 200.0, solver_order: int = 2,
                 num_train_timesteps: int = 1000):
        check_steps(type(self).__name__, num_inference_steps, 1.0, solver_order, None)
        self.num_inference_steps = int(num_inference_steps)
        self.shift = 1.0
        self.solver_order = int(solver_order)
        self.num_train_timesteps = int(num_train_timesteps)
        self.timesteps, self.sigmas = karras_flow_sigmas(
            self.num_inference_steps, sigma_min, sigma_max,
            num_train_timesteps=self.num_train_timesteps)
        self.coefficients = unipc_coefficients(self.sigmas, self.solver_order)
