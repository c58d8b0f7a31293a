"""Flow-matching Euler: HunyuanVideo 1.0's sampler.

Mirrors diffusers' ``FlowMatchEulerDiscreteScheduler`` as ``HunyuanVideoPipeline`` drives it
(``set_timesteps(sigmas=linspace(1, 0, N + 1)[:-1])`` with a static ``shift``), which computes
the same schedule as the authors' ``FlowMatchDiscreteScheduler`` with ``reverse=True``
(``--flow-reverse``): sigmas shifted by ``s sigma / (1 + (s - 1) sigma)``, the model called at
``t = 1000 sigma``, then ``x <- x + (sigma_next - sigma) v`` (the model predicts the velocity
``noise - x0``).

:func:`ltx2_sigmas` is LTX-2's schedule (ltx-core's ``LTX2Scheduler``), sampled with
:meth:`FlowMatchEulerScheduler.from_sigmas`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vidax.schedulers.common import check_step_index, check_steps

_NAME = "FlowMatchEulerScheduler"


def flow_match_schedule(num_inference_steps: int, shift: float,
                        num_train_timesteps: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(float32 timesteps ``[N]``, float32 sigmas ``[N + 1]``, the last 0) of diffusers'
    ``FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=linspace(1, 0, N + 1)[:-1])`` with
    a static ``shift``, in its arithmetic: the linspace in float64 rounded to float32, the shift
    evaluated on the float32 array, ``timesteps = sigmas * 1000`` in float32. The authors'
    ``FlowMatchDiscreteScheduler`` (``reverse=True``) computes the same schedule."""
    check_steps(_NAME, num_inference_steps, shift, 1, None)
    sigmas = np.linspace(1.0, 0.0, int(num_inference_steps) + 1)[:-1].astype(np.float32)
    sigmas = (shift * sigmas / (1 + (shift - 1) * sigmas)).astype(np.float32)
    timesteps = sigmas * np.float32(num_train_timesteps)
    return timesteps, np.concatenate([sigmas, np.zeros(1, np.float32)])


def step_distill_sigmas(num_inference_steps: int, shift: float) -> np.ndarray:
    """float32 sigmas ``[N + 1]`` (the last 0) of LightX2V's step-distillation sampler
    (ModelTC/LightX2V @ f8aee98, ``lightx2v/models/schedulers/wan/step_distill/
    scheduler.py`` ``WanStepDistillScheduler``): the 1000 training sigmas ``1 - i / 1000``,
    shifted by ``s sigma / (1 + (s - 1) sigma)``, taken at the ``denoising_step_list``
    timesteps ``t`` (index ``1000 - t``). Its configs
    (``configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json`` and the Wan2.2 ones) give
    4 steps ``[1000, 750, 500, 250]`` with shift 5; ``N`` steps here are ``1000 (1 - k / N)``,
    the same list at N = 4. Each step is then Euler's ``x + (sigma' - sigma) v``."""
    check_steps("step-distill", num_inference_steps, shift, 1, None)
    n = int(num_inference_steps)
    full = np.linspace(1.0, 0.0, 1001)[:-1]
    full = shift * full / (1 + (shift - 1) * full)
    steps = [1000 - (1000 * k) // n for k in range(n)]
    return np.asarray([*full[[1000 - t for t in steps]], 0.0], np.float32)


class EulerState(NamedTuple):
    """The state: the float32 sigmas ``[N + 1]`` (Euler carries nothing between steps)."""

    sigmas: jax.Array


def step_distill_scheduler(num_inference_steps: int, shift: float = 5.0):
    """Euler over :func:`step_distill_sigmas` (the ``lightx2v`` sample solver)."""
    return FlowMatchEulerScheduler.from_sigmas(step_distill_sigmas(num_inference_steps, shift))


class FlowMatchEulerScheduler:
    """Euler over the shifted flow-matching schedule (:func:`flow_match_schedule`).

    Attributes (host numpy): ``timesteps`` float32 ``[N]`` (``1000 sigma``, what the DiT is
    called with), ``sigmas`` float32 ``[N + 1]``, ``num_inference_steps``, ``shift``.
    """

    def __init__(self, num_inference_steps: int, shift: float = 1.0, *,
                 num_train_timesteps: int = 1000):
        self.timesteps, self.sigmas = flow_match_schedule(num_inference_steps, shift,
                                                          num_train_timesteps)
        self.num_inference_steps, self.shift = int(num_inference_steps), float(shift)

    @classmethod
    def from_sigmas(cls, sigmas, *, num_train_timesteps: int = 1000) -> FlowMatchEulerScheduler:
        """Euler over a given sigma list ``[N + 1]`` ending at 0 (LTX-2's
        ``EulerDiffusionStep`` over its fixed distilled lists or :func:`ltx2_sigmas`)."""
        sigmas = np.asarray(sigmas, np.float32)
        if sigmas.ndim != 1 or len(sigmas) < 2 or sigmas[-1] != 0:
            raise ValueError(f"{_NAME}: sigmas must be a list of at least 2 ending at 0, got "
                             f"{sigmas.tolist()}")
        self = cls.__new__(cls)
        self.sigmas, self.timesteps = sigmas, sigmas[:-1] * np.float32(num_train_timesteps)
        self.num_inference_steps, self.shift = len(sigmas) - 1, 1.0
        return self

    def init(self, shape=None, sharding=None) -> EulerState:
        del shape, sharding
        return EulerState(jnp.asarray(self.sigmas))

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array, state: EulerState
             ) -> tuple[jax.Array, EulerState]:
        """``sample + (sigmas[k + 1] - sigmas[k]) * model_output`` in float32."""
        check_step_index(_NAME, step_index, state.sigmas.shape[0] - 1)
        dt = state.sigmas[step_index + 1] - state.sigmas[step_index]
        return (jnp.asarray(sample, jnp.float32)
                + dt * jnp.asarray(model_output, jnp.float32)), state


def ltx2_sigmas(steps: int, tokens: int = 4096, *, max_shift: float = 2.05,
                base_shift: float = 0.95, terminal: float = 0.1) -> np.ndarray:
    """ltx-core's ``LTX2Scheduler.execute(steps)`` (float32 ``[steps + 1]``): linspace(1, 0),
    shifted by ``exp(s) / (exp(s) + 1 / sigma - 1)`` with ``s`` linear in the token count
    (anchors 1024 -> 0.95, 4096 -> 2.05; the pipelines pass no latent: 4096), the nonzero
    sigmas stretched so that the last is ``terminal``. Computed in float32 as torch does (its
    vectorised linspace aside: up to 5e-7 apart, the terminal value exact)."""
    sigmas = np.linspace(1.0, 0.0, steps + 1, dtype=np.float32)
    mm = (max_shift - base_shift) / (4096 - 1024)
    shift = tokens * mm + (base_shift - mm * 1024)
    e = np.float32(math.exp(shift))
    with np.errstate(divide="ignore"):   # torch's ``scalar / tensor`` is reciprocal, times
        shifted = np.where(sigmas != 0, (np.float32(1) / (e + (np.float32(1) / sigmas - 1))) * e,
                           0).astype(np.float32)
    nonzero = shifted != 0
    one_minus = np.float32(1) - shifted[nonzero]
    scale = one_minus[-1] / np.float32(1.0 - terminal)
    shifted[nonzero] = np.float32(1) - one_minus / scale
    return shifted.astype(np.float32)
