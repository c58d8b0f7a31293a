"""The one protocol every vidax sampler follows (docs/development.md, "Adding a family
pipeline"), so that one denoising loop (:meth:`vidax.pipelines.base.PipelineBase.denoise`)
drives any of them.

A scheduler is a host object built from the run's settings (steps, shift, a release's config):

``timesteps``
    host numpy ``[N]``: what the model is called with at step ``k`` (int64 for the Wan
    samplers, float32 for the Euler and rectified-flow ones; a family may convert it, e.g.
    Cosmos hands its DiT ``1000 * sigmas[k]``). ``len(timesteps)`` is the number of steps.
``sigmas``
    host float32 ``[N + 1]`` where the sampler has noise levels (the last one 0).
``init(shape, sharding=None) -> state``
    the state before step 0 for latents of ``shape``: a pytree of device arrays (the
    per-step coefficient table and any carries), each its own buffer so that the whole state
    can be donated, placed like the latents when given their ``sharding``.
``step(model_output, step_index, sample, state, **extra) -> (sample, state)``
    a static, pure, jit-able function: the sample at the next noise level and the next
    state. ``step_index`` may be traced (one compiled program serves every step).
    Stochastic or per-token samplers take what else a step needs as keywords after
    ``state``: CogVideoX's DPM its fresh standard-normal ``noise``
    (:class:`~vidax.schedulers.cogvideox.CogVideoXDPMScheduler`), the rectified flow
    per-token ``timestep`` (:class:`~vidax.schedulers.rectified_flow.RectifiedFlowSteps`).

The implementations: :class:`~vidax.schedulers.flow_unipc.FlowUniPCMultistepScheduler` and
:class:`~vidax.schedulers.flow_dpm.FlowDPMSolverMultistepScheduler` (Wan),
:class:`~vidax.schedulers.flow_unipc.KarrasFlowUniPCScheduler` (Cosmos-Predict2.5),
:class:`~vidax.schedulers.flow_euler.FlowMatchEulerScheduler` (HunyuanVideo),
:class:`~vidax.schedulers.cogvideox.CogVideoXDDIMScheduler` /
:class:`~vidax.schedulers.cogvideox.CogVideoXDPMScheduler` and
:class:`~vidax.schedulers.rectified_flow.RectifiedFlowSteps` (LTX-Video).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Scheduler(Protocol):
    """See the module docstring."""

    timesteps: np.ndarray

    def init(self, shape, sharding=None) -> Any: ...

    @staticmethod
    def step(model_output, step_index, sample, state, **extra) -> tuple[Any, Any]: ...
