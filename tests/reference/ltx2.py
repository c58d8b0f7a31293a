"""The authors' LTX-2 packages (PyPI ``ltx-core`` and ``ltx-pipelines`` 1.0.0, installed with
``--no-deps``) as CPU float32 oracles.

Two things are stubbed, neither of which the oracles run:

* ``torchaudio``: ``ltx_core.model.audio_vae.ops`` imports it at module level for its
  ``AudioProcessor`` (waveform -> mel) only; there is no torchaudio wheel for torch 2.13.
  :func:`import_ltx_audio` imports the audio modules (and ``ltx_pipelines``, which imports
  them) with a bare module standing in, then takes the stand-in out of ``sys.modules`` again
  (transformers' later ``find_spec("torchaudio")`` would raise on a module without a spec); a
  call of ``AudioProcessor`` fails loudly (the stand-in has no attributes).
* the pipelines' ``__call__`` (``DistilledPipeline``, ``TI2VidOneStagePipeline``) hard-code
  bfloat16, build their models through a ``ModelLedger`` from real checkpoint paths and call
  ``torch.cuda.synchronize()``. The tests run what those calls run, one level down, at float32:
  ``ltx_pipelines.utils.helpers.denoise_audio_video`` with ``euler_denoising_loop``,
  ``EulerDiffusionStep``, ``simple_denoising_func`` (distilled) or
  ``multi_modal_guider_denoising_func`` (dev), ``upsample_video`` between the distilled stages,
  in the order ``distilled.py`` / ``ti2vid_one_stage.py`` call them. The noise comes from a
  :class:`GivenNoiser` (the ``GaussianNoiser`` arithmetic on given draws) so that vidax can be
  fed the same numbers.

Test-only; vidax never imports torch.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def import_ltx_audio() -> None:
    """Import ``ltx_core.model.audio_vae`` and ``ltx_pipelines``' helpers without torchaudio
    (see the module docstring); a no-op where torchaudio is installed or they are imported."""
    if "ltx_pipelines.utils.helpers" in sys.modules:
        return
    stub = ("torchaudio" not in sys.modules
            and importlib.util.find_spec("torchaudio") is None)
    if stub:
        # transformers asks once (lru_cache) and must hear "absent" before the stand-in exists
        from transformers.utils import import_utils

        import_utils.is_torchaudio_available()
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    try:
        importlib.import_module("ltx_core.model.audio_vae")
        importlib.import_module("ltx_pipelines.utils.helpers")
    finally:
        if stub:
            del sys.modules["torchaudio"]


class GivenNoiser:
    """``GaussianNoiser`` with the draws given in call order (stage 1 video, stage 1 audio,
    stage 2 video, ...): ``latent = noise * mask * scale + latent * (1 - mask * scale)``."""

    def __init__(self, draws):
        self.draws = list(draws)

    def __call__(self, latent_state, noise_scale: float = 1.0):
        from dataclasses import replace

        import torch

        noise = torch.as_tensor(self.draws.pop(0)).reshape(latent_state.latent.shape)
        mask = latent_state.denoise_mask * noise_scale
        return replace(latent_state, latent=noise * mask + latent_state.latent * (1 - mask))


def guider_params(g):
    """vidax's :class:`~vidax.pipelines.ltx2_5.Guider` as ltx-core's
    ``MultiModalGuiderParams``."""
    from ltx_core.components.guiders import MultiModalGuiderParams

    return MultiModalGuiderParams(cfg_scale=g.cfg_scale, stg_scale=g.stg_scale,
                                  rescale_scale=g.rescale_scale,
                                  modality_scale=g.modality_scale, skip_step=0,
                                  stg_blocks=list(g.stg_blocks))


def run_stages(model, *, frames: int, sizes, fps: float, sigmas, draws, contexts,
               guiders=None, image_latents=None, video_encoder=None, upsampler=None):
    """The authors' sampling at float32: one ``denoise_audio_video`` per stage (``sizes``:
    (width, height) per stage), ``upsample_video`` between stages (stage 2 re-noised to its
    first sigma from the upsampled video and the stage-1 audio), as ``DistilledPipeline``;
    ``guiders`` (video, audio) switch stage 1 to ``multi_modal_guider_denoising_func`` with
    the negative context ``contexts[1]`` (``TI2VidOneStagePipeline``). ``image_latents``:
    per stage, the encoded first frame ``[1, C, 1, h, w]`` (``VideoConditionByLatentIndex``
    at strength 1). Returns the final (video ``[1, C, F, h, w]``, audio ``[1, C, T, M]``)."""
    import_ltx_audio()
    import torch
    from ltx_core.components.diffusion_steps import EulerDiffusionStep
    from ltx_core.conditioning import VideoConditionByLatentIndex
    from ltx_core.components.guiders import MultiModalGuider
    from ltx_core.model.transformer.model import X0Model
    from ltx_core.model.upsampler import upsample_video
    from ltx_core.types import VideoPixelShape
    from ltx_pipelines.utils.helpers import (
        denoise_audio_video,
        multi_modal_guider_denoising_func,
        simple_denoising_func,
    )
    from ltx_pipelines.utils.samplers import euler_denoising_loop
    from ltx_pipelines.utils.types import PipelineComponents

    class Components(PipelineComponents):
        def __init__(self):
            super().__init__(dtype=torch.float32, device=torch.device("cpu"))
            self.video_latent_channels = model.patchify_proj.in_features

    transformer = X0Model(model).eval()
    noiser = GivenNoiser(draws)
    (v_pos, a_pos), negative = contexts[0], contexts[1] if len(contexts) > 1 else None
    video_state = audio_state = None
    with torch.no_grad():
        for stage, ((width, height), stage_sigmas) in enumerate(zip(sizes, sigmas)):
            stage_sigmas = torch.tensor(stage_sigmas, dtype=torch.float32)
            if guiders is not None and stage == 0:
                denoise_fn = multi_modal_guider_denoising_func(
                    MultiModalGuider(guider_params(guiders[0]), negative_context=negative[0]),
                    MultiModalGuider(guider_params(guiders[1]), negative_context=negative[1]),
                    v_pos, a_pos, transformer)
            else:
                denoise_fn = simple_denoising_func(v_pos, a_pos, transformer)

            def loop(sigmas_, vs, as_, stepper, fn=denoise_fn):
                return euler_denoising_loop(sigmas=sigmas_, video_state=vs, audio_state=as_,
                                            stepper=stepper, denoise_fn=fn)

            conditionings = [] if image_latents is None else [VideoConditionByLatentIndex(
                latent=image_latents[stage], strength=1.0, latent_idx=0)]
            initial_video = initial_audio = None
            if stage:
                initial_video = upsample_video(latent=video_state.latent[:1],
                                               video_encoder=video_encoder, upsampler=upsampler)
                initial_audio = audio_state.latent
            video_state, audio_state = denoise_audio_video(
                output_shape=VideoPixelShape(batch=1, frames=frames, width=width,
                                             height=height, fps=fps),
                conditionings=conditionings, noiser=noiser, sigmas=stage_sigmas,
                stepper=EulerDiffusionStep(), denoising_loop_fn=loop, components=Components(),
                dtype=torch.float32, device=torch.device("cpu"),
                noise_scale=float(stage_sigmas[0]) if stage else 1.0,
                initial_video_latent=initial_video, initial_audio_latent=initial_audio)
    return video_state.latent.numpy(), audio_state.latent.numpy()
