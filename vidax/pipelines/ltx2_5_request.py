"""LTX-2.x's generation options: the authors' constants (``ltx_pipelines/utils/constants.py``
1.0.0), the dev guidance (``MultiModalGuiderParams``; the DiT rows a step runs and
``MultiModalGuider.calculate``), a release's defaults and the
:class:`Request` (what :func:`vidax.pipelines.ltx2_5.make_request` validates and resolves).
Split out of :mod:`vidax.pipelines.ltx2_5`, which re-exports every name here."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from vidax.pipelines import base

VERSIONS = ("2.0", "2.3", "2.5")
TEMPORAL, SPATIAL = 8, 32             # the video VAE's compression
AUDIO_LATENTS_PER_SECOND = 16000 / 160 / 4   # AudioLatentShape.from_duration's defaults
# ltx_pipelines/utils/constants.py (1.0.0); diffusers' pipelines/ltx2/utils.py holds the same.
DISTILLED_SIGMAS = (1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875, 0.0)
STAGE_2_SIGMAS = (0.909375, 0.725, 0.421875, 0.0)
DEFAULT_NEGATIVE_PROMPT = (
    "blurry, out of focus, overexposed, underexposed, low contrast, washed out colors, "
    "excessive noise, grainy texture, poor lighting, flickering, motion blur, distorted "
    "proportions, unnatural skin tones, deformed facial features, asymmetrical face, missing "
    "facial features, extra limbs, disfigured hands, wrong hand count, artifacts around text, "
    "inconsistent perspective, camera shake, incorrect depth of field, background too sharp, "
    "background clutter, distracting reflections, harsh shadows, inconsistent lighting "
    "direction, color banding, cartoonish rendering, 3D CGI look, unrealistic materials, "
    "uncanny valley effect, incorrect ethnicity, wrong gender, exaggerated expressions, wrong "
    "gaze direction, mismatched lip sync, silent or muted audio, distorted voice, robotic "
    "voice, echo, background noise, off-sync audio, incorrect dialogue, added dialogue, "
    "repetitive speech, jittery movement, awkward pauses, incorrect timing, unnatural "
    "transitions, inconsistent framing, tilted camera, flat lighting, inconsistent tone, "
    "cinematic oversaturation, stylized filters, or AI artifacts.")



# ----------------------------------------------------------------------------- guidance
@dataclass(frozen=True)
class Guider:
    """ltx-core's ``MultiModalGuiderParams`` for one stream (``skip_step`` 0 only)."""

    cfg_scale: float
    stg_scale: float
    rescale_scale: float
    modality_scale: float
    stg_blocks: tuple[int, ...]

    @property
    def cfg(self) -> bool:
        return not math.isclose(self.cfg_scale, 1.0)

    @property
    def stg(self) -> bool:
        return not math.isclose(self.stg_scale, 0.0)

    @property
    def modality(self) -> bool:
        return not math.isclose(self.modality_scale, 1.0)


def default_guiders(version: str) -> tuple[Guider, Guider]:
    """The authors' dev guidance (``LTX_2_PARAMS`` / ``LTX_2_3_PARAMS``): video, audio. 2.5
    takes 2.3's (ltx-pipelines 1.0.0 predates it)."""
    block = (29,) if version == "2.0" else (28,)
    return (Guider(3.0, 1.0, 0.7, 3.0, block), Guider(7.0, 1.0, 0.7, 3.0, block))



@jax.tree_util.register_static
@dataclass(frozen=True)
class Kind:
    """A step's static passes: which rows the DiT runs (cond, uncond, STG, modality), the
    STG blocks, whether each stream rescales."""

    rows: tuple[str, ...]
    video: Guider | None
    audio: Guider | None
    split: int                 # the video token count (audio tokens follow)


def _rows(video: Guider | None, audio: Guider | None) -> tuple[str, ...]:
    if video is None:
        return ("cond",)
    rows = ["cond"]
    if video.cfg or audio.cfg:
        rows.append("uncond")
    if video.stg or audio.stg:
        rows.append("stg")
    if video.modality or audio.modality:
        rows.append("modality")
    return tuple(rows)


def _guide(out: dict, g: Guider) -> jax.Array:
    """``MultiModalGuider.calculate`` on one stream's x0 predictions ``{row: [1, T, C]}``."""
    cond = out["cond"]
    pred = cond
    if g.cfg:
        pred = pred + (g.cfg_scale - 1) * (cond - out["uncond"])
    if g.stg:
        pred = pred + g.stg_scale * (cond - out["stg"])
    if g.modality:
        pred = pred + (g.modality_scale - 1) * (cond - out["modality"])
    if g.rescale_scale != 0:
        factor = jnp.std(cond, ddof=1) / jnp.std(pred, ddof=1)
        pred = pred * (g.rescale_scale * factor + (1 - g.rescale_scale))
    return pred

# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True, kw_only=True)
class Defaults(base.Defaults):
    """A release's defaults: one-stage 768x512 / two-stage 1536x1024, 121 frames at 24 fps
    (``PipelineParams``), dev 40 steps (2.0) or 30 (2.3+), distilled the fixed lists."""

    mode: str               # "dev" | "distilled"
    version: str


def defaults_for(variant: str, two_stage: bool = False) -> Defaults:
    version = variant.split("-")[0] if variant.split("-")[0] in VERSIONS else "2.3"
    mode = "distilled" if variant.endswith("distilled") else "dev"
    steps = len(DISTILLED_SIGMAS) - 1 if mode == "distilled" else (40 if version == "2.0" else 30)
    return Defaults(steps=steps, guidance_scale=3.0 if mode == "dev" else 1.0,
                    size=(1536, 1024) if two_stage else (768, 512), frames=121, fps=24.0,
                    negative_prompt=DEFAULT_NEGATIVE_PROMPT if mode == "dev" else "",
                    mode=mode, version=version)


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """An LTX-2 generation: ``mode`` dev / distilled, ``stages`` 1 or 2, the two guiders (dev),
    the image's ``strength`` and ``crf``, ``audio`` (False: the audio stream is sampled with
    the video, as the model needs, but not decoded), the 2.5 ``video_decoder``."""

    mode: str = "distilled"
    stages: int = 1
    video_guider: Guider | None = None
    audio_guider: Guider | None = None
    image_strength: float = 1.0
    image_crf: int = 33
    audio: bool = True
    video_decoder: str = "default"
    draws: dict | None = None

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        width, height = self.size
        return ((self.frames - 1) // TEMPORAL + 1, height // SPATIAL, width // SPATIAL,
                self.latent_channels)

    def latent_shape_at(self, size) -> tuple[int, int, int, int]:
        return dataclasses.replace(self, size=tuple(size)).latent_shape

    @property
    def audio_frames(self) -> int:
        """``AudioLatentShape.from_video_pixel_shape``: ``round(frames / fps * 25)``."""
        return round(self.frames / self.fps * AUDIO_LATENTS_PER_SECOND)

    def stage_sizes(self) -> list[tuple[int, int]]:
        width, height = self.size
        return [(width // 2, height // 2), (width, height)] if self.stages == 2 else [self.size]
