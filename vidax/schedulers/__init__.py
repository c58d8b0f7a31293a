"""Samplers: the step rules that turn a model's predictions into the next latents.

Every sampler follows one protocol (:class:`~vidax.schedulers.base.Scheduler`: host
``timesteps``, ``init(shape, sharding)`` -> a donatable state pytree, a pure jit-able
``step(model_output, step_index, sample, state, **extra)``), which
:meth:`vidax.pipelines.base.PipelineBase.denoise` drives:

* the Wan authors' two flow-matching samplers (below), ported to give their timesteps
  exactly and their sample trajectories to float32 round-off;
* :class:`KarrasFlowUniPCScheduler`: the same UniPC over Cosmos-Predict2.5's Karras flow
  schedule (diffusers' ``UniPCMultistepScheduler(use_karras_sigmas, use_flow_sigmas)``);
* :class:`FlowMatchEulerScheduler`: HunyuanVideo's flow-matching Euler
  (:mod:`vidax.schedulers.flow_euler`);
* CogVideoX's DDIM and stochastic DPM-Solver++ (:mod:`vidax.schedulers.cogvideox`);
* LTX-Video's rectified flow: :class:`RectifiedFlowScheduler` reads the release file's
  settings and computes the schedule, :class:`RectifiedFlowSteps` steps it (per-token
  timesteps; :mod:`vidax.schedulers.rectified_flow`).

* :class:`FlowUniPCMultistepScheduler` (``--sample_solver unipc``, the default): UniPC
  bh2, order 2, predicting x0; the schedule starts at sigma 0.999.
* :class:`FlowDPMSolverMultistepScheduler` (``--sample_solver dpm++``): DPM-Solver++
  midpoint, order 2; the schedule starts at sigma 1 (timestep 1000).

Both shift the sigmas as ``sigma' = shift * sigma / (1 + (shift - 1) * sigma)``, end at
sigma 0, and call the DiT with ``int64(sigma' * 1000)`` (truncated).

A scheduler is a host object holding the schedule (numpy ``timesteps``, ``sigmas``); the
state between steps is an explicit pytree of float32 arrays; ``step`` is a pure function,
jitted once and called in a Python loop::

    sched = FlowUniPCMultistepScheduler(num_inference_steps=50, shift=5.0)
    state = sched.init(latents.shape)
    step = jax.jit(sched.step, donate_argnums=(2, 3))     # donate sample and state
    for k, t in enumerate(sched.timesteps):               # int64 timesteps, host side
        cond = dit(latents, t, context)
        uncond = dit(latents, t, context_null)
        v = uncond + guide_scale * (cond - uncond)        # what the authors pass to step()
        latents, state = step(v, k, latents, state)
    # latents is now the sample at sigma 0 (the final x0 prediction)

Per-task defaults belong to the pipelines; for reference, the authors' values
(``/work/shared/families/wan.md``; Wan2.1 ``generate.py``; Wan2.2 ``wan/configs``):

===============================  =====  =====  ======================  =====================
task                             shift  steps  guidance                notes
===============================  =====  =====  ======================  =====================
Wan2.1 t2v-1.3B / t2v-14B        5.0    50     5.0                     README: shift 8-12,
                                                                       guidance 6 for 1.3B
Wan2.1 t2i-14B                   5.0    50     5.0                     1 frame
Wan2.1 i2v-14B, 720P             5.0    40     5.0
Wan2.1 i2v-14B at 832x480        3.0    40     5.0
Wan2.1 flf2v-14B                 16.0   50     5.0
Wan2.2 t2v-A14B                  12.0   40     3.0 low / 4.0 high      boundary 0.875
Wan2.2 i2v-A14B                  5.0    40     3.5 low / 3.5 high      boundary 0.900
Wan2.2 ti2v-5B                   5.0    50     5.0                     121 frames, 24 fps
Wan2.2 s2v-14B                   3.0    40     4.5
Wan2.2 animate-14B               5.0    20     1.0                     77 frames, 30 fps
===============================  =====  =====  ======================  =====================

All use ``unipc`` unless ``--sample_solver dpm++`` is given; 81 frames at 16 fps unless
stated. Wan2.2 A14B runs the high-noise expert (and its guidance) while the integer
timestep ``t >= boundary * 1000``, the low-noise expert after.
"""

from vidax.schedulers.base import Scheduler
from vidax.schedulers.common import flow_schedule, shift_sigmas
from vidax.schedulers.flow_dpm import (
    DPMCoefficients,
    DPMState,
    FlowDPMSolverMultistepScheduler,
    get_sampling_sigmas,
)
from vidax.schedulers.flow_euler import (FlowMatchEulerScheduler, flow_match_schedule,
                                         step_distill_scheduler, step_distill_sigmas)
from vidax.schedulers.flow_unipc import (
    FlowUniPCMultistepScheduler,
    KarrasFlowUniPCScheduler,
    UniPCCoefficients,
    UniPCState,
    karras_flow_sigmas,
)
from vidax.schedulers.rectified_flow import RectifiedFlowScheduler, RectifiedFlowSteps

#: The authors' ``--sample_solver`` names.
SAMPLE_SOLVERS = {
    "unipc": FlowUniPCMultistepScheduler,
    "dpm++": FlowDPMSolverMultistepScheduler,
}
#: What the Wan pipelines sample with: the authors' solvers and LightX2V's step-distillation
#: Euler (``lightx2v``, the sampler of its step-distillation LoRAs; docs/lora.md).
WAN_SOLVERS = {**SAMPLE_SOLVERS, "lightx2v": step_distill_scheduler}

__all__ = [
    "SAMPLE_SOLVERS",
    "DPMCoefficients",
    "DPMState",
    "FlowDPMSolverMultistepScheduler",
    "FlowMatchEulerScheduler",
    "FlowUniPCMultistepScheduler",
    "KarrasFlowUniPCScheduler",
    "RectifiedFlowScheduler",
    "RectifiedFlowSteps",
    "Scheduler",
    "UniPCCoefficients",
    "UniPCState",
    "WAN_SOLVERS",
    "flow_match_schedule",
    "flow_schedule",
    "get_sampling_sigmas",
    "karras_flow_sigmas",
    "shift_sigmas",
    "step_distill_scheduler",
    "step_distill_sigmas",
]
