"""The LTX-Video authors' rectified-flow sampler (``RectifiedFlowScheduler``).

Mirrors Lightricks/LTX-Video ``ltx_video/schedulers/rf.py`` as their pipeline drives it
(``retrieve_timesteps`` and ``denoising_step`` of ``ltx_video/pipelines/pipeline_ltx_video.py``).
A release file carries the scheduler's settings in its metadata (``config["scheduler"]``:
every 0.9.8 file says ``sampler: "LinearQuadratic"``), and the pipeline configs choose
``sampler: "from_checkpoint"``, so :meth:`RectifiedFlowScheduler.from_dict` of that section is
what the authors run.

Flow: ``x_sigma = (1 - sigma) x0 + sigma noise``; the DiT predicts the velocity
``noise - x0``; the timesteps *are* the sigmas in (0, 1] (the DiT multiplies them by 1000).

The schedule (:meth:`RectifiedFlowScheduler.timesteps`), float32 as the authors' tensors:

* ``sampler``: ``"Uniform"`` ``linspace(1, 1/n, n)``; ``"LinearQuadratic"`` (their
  ``linear_quadratic_schedule``: half the steps linear down to sigma 0.975, the rest
  quadratic down to 0); ``"Constant"`` the uniform steps through ``time_shift(shift)``.
* ``shifting``: ``"SD3"`` the resolution-dependent shift ``mu = 0.95 + 1.1 (tokens - 1024) /
  3072`` (their ``get_normal_shift``), ``t' = e^mu / (e^mu + 1/t - 1)``, then, with
  ``target_shift_terminal``, stretched so the last step lands on that value
  (``strech_shifts_to_terminal``); ``"SimpleDiffusion"`` the log-SNR shift by
  ``2 log(tokens / base_resolution)``; None: unchanged.
* Skipping: ``skip_initial`` / ``skip_final`` drop steps from either end of the computed
  schedule (the multi-scale second pass starts late; the dev first pass ends early, its
  last step then jumping straight to sigma 0).
* Explicit ``timesteps`` (the distilled models' step lists) replace all of that.

The step (:func:`step`): every token moves from its timestep ``t`` to the next *lower* entry
of the schedule (0 after the last), ``x <- x - (t - t_lower) v``. Per-token timesteps are how
the pipeline freezes conditioning tokens: at ``t = 0`` nothing is lower, so they stay put.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import VidaxError

SAMPLERS = ("Uniform", "LinearQuadratic", "Constant")
SHIFTINGS = (None, "SD3", "SimpleDiffusion")
#: The authors' ``t_eps`` of ``step``: a schedule entry counts as lower only below ``t - 1e-6``.
T_EPS = 1e-6
_F32 = np.float32


def linear_quadratic_schedule(num_steps: int, threshold_noise: float = 0.025,
                              linear_steps: int | None = None) -> np.ndarray:
    """The authors' ``linear_quadratic_schedule`` (python floats, then float32)."""
    if num_steps == 1:
        return np.array([1.0], _F32)
    if linear_steps is None:
        linear_steps = num_steps // 2
    linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
    step_diff = linear_steps - threshold_noise * num_steps
    quadratic_steps = num_steps - linear_steps
    quadratic_coef = step_diff / (linear_steps * quadratic_steps ** 2)
    linear_coef = threshold_noise / linear_steps - 2 * step_diff / quadratic_steps ** 2
    const = quadratic_coef * linear_steps ** 2
    quadratic = [quadratic_coef * i ** 2 + linear_coef * i + const
                 for i in range(linear_steps, num_steps)]
    return np.array([1.0 - x for x in linear + quadratic], _F32)


def uniform_schedule(num_steps: int) -> np.ndarray:
    """``torch.linspace(1, 1 / n, n)`` in float32: the step in float32 and the second half
    counted back from the end, as torch's CPU kernel does."""
    start, end = _F32(1.0), _F32(1.0 / num_steps)
    if num_steps == 1:
        return np.array([start], _F32)
    step = (end - start) / _F32(num_steps - 1)
    i = np.arange(num_steps)
    half = num_steps // 2
    return np.where(i < half, start + step * i.astype(_F32),
                    end - step * (num_steps - 1 - i).astype(_F32)).astype(_F32)


def time_shift(mu: float, t: np.ndarray) -> np.ndarray:
    """The authors' ``time_shift(mu, 1, t)``: ``e^mu / (e^mu + (1/t - 1))`` in float32, in
    torch's operation order: the python scalar ``e^mu`` rounded to float32, and ``scalar /
    tensor`` evaluated as ``reciprocal(tensor) * scalar`` (``Tensor.__rtruediv__``)."""
    e = _F32(math.exp(mu))
    with np.errstate(divide="ignore"):
        inner = _F32(1) / np.asarray(t, _F32) * _F32(1) - _F32(1)
        return ((_F32(1) / (e + inner)) * e).astype(_F32)


def normal_shift(num_tokens: int, min_tokens: int = 1024, max_tokens: int = 4096,
                 min_shift: float = 0.95, max_shift: float = 2.05) -> float:
    """The authors' ``get_normal_shift``: ``mu`` linear in the token count."""
    m = (max_shift - min_shift) / (max_tokens - min_tokens)
    return m * num_tokens + (min_shift - m * min_tokens)


def stretch_to_terminal(shifts: np.ndarray, terminal: float) -> np.ndarray:
    """The authors' ``strech_shifts_to_terminal``: rescale ``1 - t`` so the last value is
    ``terminal``."""
    if not 0 < terminal < 1:
        raise VidaxError(f"target_shift_terminal must be in (0, 1), got {terminal}")
    one_minus = _F32(1) - shifts
    scale = one_minus[-1] / _F32(1 - terminal)
    return (_F32(1) - one_minus / scale).astype(_F32)


@dataclass(frozen=True)
class RectifiedFlowScheduler:
    """The authors' ``RectifiedFlowScheduler`` settings (its ``__init__`` arguments and
    defaults); build it from a release file's metadata with :meth:`from_dict`."""

    num_train_timesteps: int = 1000
    shifting: str | None = None
    base_resolution: int = 32 ** 2
    target_shift_terminal: float | None = None
    sampler: str = "Uniform"
    shift: float | None = None

    def __post_init__(self):
        if self.sampler not in SAMPLERS:
            raise VidaxError(f"rectified-flow sampler {self.sampler!r} is not one of {SAMPLERS}")
        if self.shifting not in SHIFTINGS:
            raise VidaxError(f"rectified-flow shifting {self.shifting!r} is not one of "
                             f"{SHIFTINGS}")
        if self.sampler == "Constant" and self.shift is None:
            raise VidaxError("the rectified-flow 'Constant' sampler needs a shift")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RectifiedFlowScheduler:
        """From the ``scheduler`` section of a release file's metadata config (diffusers'
        ``_class_name`` / ``_diffusers_version`` entries are bookkeeping and dropped)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown rectified-flow scheduler config keys {unknown}")
        name = d.get("_class_name", "RectifiedFlowScheduler")
        if name != "RectifiedFlowScheduler":
            raise VidaxError(f"scheduler {name!r}: LTX-Video releases use "
                             "RectifiedFlowScheduler")
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("base_resolution") is None:
            kwargs.pop("base_resolution", None)
        return cls(**kwargs)

    def initial_timesteps(self, num_steps: int) -> np.ndarray:
        """``get_initial_timesteps``: the unshifted schedule."""
        if self.sampler == "LinearQuadratic":
            return linear_quadratic_schedule(num_steps)
        uniform = uniform_schedule(num_steps)
        return time_shift(self.shift, uniform) if self.sampler == "Constant" else uniform

    def shift_timesteps(self, num_tokens: int, t: np.ndarray) -> np.ndarray:
        """``shift_timesteps`` for a latent of ``num_tokens`` tokens (frames x height x width)."""
        if self.shifting == "SD3":
            shifted = time_shift(normal_shift(num_tokens), t)
            if self.target_shift_terminal is not None:
                shifted = stretch_to_terminal(shifted, self.target_shift_terminal)
            return shifted
        if self.shifting == "SimpleDiffusion":
            t64 = np.asarray(t, _F32).astype(np.float64)
            with np.errstate(divide="ignore"):
                snr = np.square(t64 / (1 - t64)).astype(_F32).astype(np.float64)
                log_snr = np.log(snr).astype(_F32) + _F32(
                    2 * math.log(num_tokens / self.base_resolution))
            x = _F32(0.5) * log_snr
            return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(_F32)
        return np.asarray(t, _F32)

    def timesteps(self, num_inference_steps: int | None = None, num_tokens: int | None = None,
                  *, timesteps=None, skip_initial: int = 0, skip_final: int = 0) -> np.ndarray:
        """float32 timesteps (sigmas), as the authors' ``retrieve_timesteps`` leaves them.

        Either ``num_inference_steps`` (with ``num_tokens`` for the shifting, and the skips)
        or an explicit descending list ``timesteps`` (no skipping, as theirs).
        """
        if timesteps is not None:
            if num_inference_steps is not None:
                raise VidaxError("give either timesteps or num_inference_steps, not both")
            out = np.asarray(timesteps, _F32).reshape(-1)
            if out.size == 0 or not np.all(np.isfinite(out)) or np.any(out <= 0) \
                    or np.any(out > 1) or np.any(np.diff(out) >= 0):
                raise VidaxError(f"timesteps {list(np.asarray(timesteps).tolist())} must be a "
                                 "strictly descending list in (0, 1]")
            return out
        if not isinstance(num_inference_steps, (int, np.integer)) or num_inference_steps < 1:
            raise VidaxError(f"num_inference_steps must be a positive integer, got "
                             f"{num_inference_steps!r}")
        steps = min(self.num_train_timesteps, int(num_inference_steps))
        out = self.shift_timesteps(num_tokens, self.initial_timesteps(steps))
        if skip_initial < 0 or skip_final < 0 or skip_initial + skip_final >= steps:
            raise VidaxError(
                f"cannot skip {skip_initial} initial and {skip_final} final of {steps} steps: "
                "the skips must be non-negative and leave at least one step")
        return out[skip_initial:steps - skip_final].astype(_F32)


def step(velocity: jax.Array, timestep: jax.Array, sample: jax.Array,
         schedule: jax.Array) -> jax.Array:
    """One Euler step of the authors' ``RectifiedFlowScheduler.step`` (deterministic).

    Args:
      velocity: the guided DiT output, shaped like ``sample``.
      timestep: the current timestep, a scalar or per token (broadcastable to ``sample``
        without its channel axis, e.g. ``[B, N]`` for tokens ``[B, N, C]``).
      sample: the latents.
      schedule: the float32 timesteps of the run (``[S]``).

    Each token goes to the largest schedule entry below ``timestep - 1e-6`` (0 if none).
    """
    schedule = jnp.concatenate([jnp.asarray(schedule, jnp.float32), jnp.zeros((1,), jnp.float32)])
    t = jnp.asarray(timestep, jnp.float32)
    lower = jnp.where(schedule.reshape((-1,) + (1,) * t.ndim) < t[None] - T_EPS,
                      schedule.reshape((-1,) + (1,) * t.ndim), 0.0).max(axis=0)
    dt = (t - lower)[..., None]
    return sample - dt.astype(sample.dtype) * velocity


class RectifiedFlowSteps:
    """A computed rectified-flow schedule in the shared scheduler protocol
    (:mod:`vidax.schedulers.base`): ``timesteps`` float32 ``[S]`` (e.g.
    :meth:`RectifiedFlowScheduler.timesteps`' result, what the DiT is called with),
    ``sigmas`` the same followed by 0, the state the schedule on the device, and
    :meth:`step` :func:`step` -- every token at ``timesteps[step_index]`` unless a per-token
    ``timestep`` is given (conditioning tokens at 0 stay put)."""

    def __init__(self, timesteps):
        self.timesteps = np.asarray(timesteps, _F32).reshape(-1)
        self.sigmas = np.concatenate([self.timesteps, np.zeros(1, _F32)])

    def init(self, shape=None, sharding=None) -> jax.Array:
        del shape, sharding
        return jnp.asarray(self.timesteps)

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array, state: jax.Array,
             timestep: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        if timestep is None:
            timestep = jnp.broadcast_to(state[step_index], sample.shape[:-1])
        return step(model_output, timestep, sample, state), state
