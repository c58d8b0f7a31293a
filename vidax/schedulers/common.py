"""What the Wan authors' two flow-matching samplers share: the shifted sigma schedule, its
integer timesteps, and the float32 scalar arithmetic of their solver coefficients.

Flow matching here means ``x_sigma = (1 - sigma) * x0 + sigma * noise``: the solvers read
``alpha = 1 - sigma`` and the log signal-to-noise ratio ``lambda = log(alpha) - log(sigma)``
(``_sigma_to_alpha_sigma_t`` and the ``lambda_*`` lines of ``wan/utils/fm_solvers*.py``).

Precision. The authors keep ``sigmas`` as a float32 tensor and derive every solver
coefficient from its 0-d elements, so their coefficients are float32 scalars with float32
round-off (``exp(-h) - 1`` and ``lambda_t - lambda_s`` lose digits to cancellation). vidax
reproduces that arithmetic on the host with numpy float32 scalars, operation for operation.
The transcendental functions are the one place where two float32 libraries disagree
(torch's and numpy's ``log``/``exp``/``expm1`` differ in the last bit for ~1 input in 5);
:func:`f32` evaluates them in float64 and rounds once, which agrees with torch's float32
results far more often than numpy's float32 kernels do (measured: log 95 %, exp 99.3 %,
expm1 99.8 % of inputs bit-identical).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vidax.errors import VidaxError


def shift_sigmas(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """``shift * sigma / (1 + (shift - 1) * sigma)`` in float64, evaluated in the authors'
    order (``set_timesteps`` of both schedulers, ``get_sampling_sigmas``).

    ``shift > 1`` keeps the sampler longer at high noise; ``shift == 1`` is the identity.
    """
    sigmas = np.asarray(sigmas, dtype=np.float64)
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def flow_schedule(shifted: np.ndarray, num_train_timesteps: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The ``timesteps`` and ``sigmas`` that ``set_timesteps`` stores for the float64
    shifted sigmas ``shifted`` (final sigma type "zero").

    * timesteps: ``shifted * num_train_timesteps`` cast to int64, i.e. truncated toward
      zero (the authors' ``.to(torch.int64)``): 999.9 becomes 999. These are the values the
      DiT is called with and the ones Wan2.2's expert boundary compares against.
    * sigmas: ``shifted`` followed by 0.0, cast to float32; one more than the steps.
    """
    timesteps = (shifted * num_train_timesteps).astype(np.int64)
    sigmas = np.concatenate([shifted, [0.0]]).astype(np.float32)
    return timesteps, sigmas


def f32(fn: Callable[[np.ndarray], np.ndarray], x) -> np.float32 | np.ndarray:
    """``fn`` (``np.log``, ``np.exp``, ``np.expm1``) of float32 ``x`` as a float32 result,
    computed in float64 and rounded once (see the module docstring for why)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = fn(np.asarray(x, dtype=np.float32).astype(np.float64)).astype(np.float32)
    return out[()] if out.ndim == 0 else out


def log_snr(sigmas: np.ndarray) -> np.ndarray:
    """float32 ``lambda = log(1 - sigma) - log(sigma)`` per sigma; ``-inf`` at sigma 1 and
    ``+inf`` at sigma 0, which the solvers' formulas absorb (``exp(-inf) = 0``,
    ``1 / inf = 0``) exactly as the authors' float32 tensors do."""
    sigmas = np.asarray(sigmas, dtype=np.float32)
    return f32(np.log, 1 - sigmas) - f32(np.log, sigmas)


def check_steps(name: str, num_inference_steps, shift, solver_order, max_order: int | None):
    """One-paragraph errors for impossible schedule settings."""
    if not isinstance(num_inference_steps, (int, np.integer)) or num_inference_steps < 1:
        raise VidaxError(f"{name}: num_inference_steps must be a positive integer, got "
                         f"{num_inference_steps!r}.")
    if not np.isfinite(shift) or shift <= 0:
        raise VidaxError(f"{name}: shift must be a positive number, got {shift!r}.")
    if (not isinstance(solver_order, (int, np.integer)) or solver_order < 1
            or (max_order is not None and solver_order > max_order)):
        allowed = "a positive integer" if max_order is None else f"1..{max_order}"
        raise VidaxError(f"{name}: solver_order must be {allowed}, got {solver_order!r}.")


def check_step_index(name: str, step_index, num_steps: int):
    """A Python-int ``step_index`` must name one of the ``num_steps`` steps. A traced index
    cannot be checked; out of range, JAX's indexing clamps it to the last step."""
    if isinstance(step_index, (int, np.integer)) and not 0 <= step_index < num_steps:
        raise VidaxError(f"{name}.step: step_index {step_index} is outside the schedule's "
                         f"{num_steps} steps (0..{num_steps - 1}).")
