"""LTX-Video 0.9.8 text-to-video and image-to-video, as the authors run them.

Mirrors Lightricks/LTX-Video ``ltx_video/inference.py`` (``infer``) driving
``ltx_video/pipelines/pipeline_ltx_video.py`` (``LTXVideoPipeline.__call__``), with the numbers
of their release configs ``configs/ltxv-{13b,2b}-0.9.8-*.yaml`` copied here as data
(:data:`DEFAULTS`). One *pass* is one call of their ``LTXVideoPipeline``:

1. Text: prompt and negative prompt, stripped, tokenized to 256 tokens (T5 ``</s>``,
   ``<pad>`` padding) and encoded by T5-v1.1-XXL; the attention mask goes with them into the
   DiT's cross-attention. The negative prompt is encoded always (their
   ``encode_prompt(..., True)``), default: :data:`NEGATIVE_PROMPT`.
2. Schedule: the release file's ``RectifiedFlowScheduler`` (``sampler: "from_checkpoint"``),
   its steps for this latent size (:mod:`vidax.schedulers.rectified_flow`), the skipped
   initial/final steps, or the distilled models' explicit list (checked against the file's
   ``allowed_inference_steps``, as theirs).
3. Noise: ``[F', H/32, W/32, 128]`` from the seed (JAX's PRNG) or given; tokens in (f, h, w)
   order, the order of their ``randn((b, f*h*w, c))``.
4. Image-to-video (their ``ConditioningItem(image, frame 0, strength 1)``): the image,
   preprocessed as their ``load_image_to_tensor_with_resize_and_crop(just_crop=True)`` (centre
   crop to the aspect ratio, 3x3 Gaussian blur) and bilinearly resized to the pass's size, is
   encoded by the VAE (a posterior *sample*, as their ``vae_encode``) and normalised; its latent
   frame replaces latent frame 0 and those tokens get conditioning mask 1. Each step first
   re-noises them to ``init + image_cond_noise_scale * noise * t^2`` (0.15, their default);
   their timestep is ``min(t, 1 - mask) = 0``, so the DiT sees them as clean and the
   scheduler leaves them in place.
5. Each step, one jitted function: the DiT on the batch the step needs --
   ``[negative, prompt, prompt-with-skipped-blocks]``, dropping the negative where the step's
   CFG scale is <= 1 and the perturbed copy where its STG scale is 0 -- then their guidance:
   CFG ``u + g (c - u)`` (with ``cfg_star_rescale`` first ``u <- (<c, u> / |u|^2) u``), STG
   ``+ s (c - p)`` and, where ``rescaling_scale`` r != 1, ``* (r std(c) / std(pred) + 1 - r)``;
   then the rectified-flow step (per token). Scales and skipped blocks may be per-timestep lists
   (their ``guidance_timesteps`` mapping: each step takes the first entry whose timestep is <=
   its own).
6. Decoding: ``(1 - s) z + s noise`` with ``s = decode_noise_scale`` (0.025), the tone-map
   compression of the latents where the pass sets ``tone_map_compression_ratio``, then the VAE
   with the decode timestep (0.05); frames [-1, 1] -> uint8 (their ``(x / 2 + 0.5).clamp(0, 1)
   * 255`` truncated).

``frame_rate`` is an input of the DiT (RoPE time coordinates are divided by it) and the mp4's
rate: ``fps`` feeds both, as their ``--frame_rate``.

Multi-scale (what every 0.9.8 config selects, ``pipeline_type: multi-scale``; their
``LTXMultiScalePipeline``), when the folder holds the spatial upscaler: a first pass at
``int(size * 0.6666666)`` floored to multiples of 32, the upscaler on the un-normalised latents,
AdaIN to the first pass's per-channel mean and std, a second pass at twice the first size from
those latents (noised to its first timestep), the decode, and a bilinear resize of the [0, 1]
frames to the requested size. Without the upscaler vidax runs one pass at the requested size
with the ``first_pass`` settings (not an authors' configuration for 0.9.8).

Precision policies (``precision=``): ``"bf16"`` runs T5 and the DiT in bfloat16 (the authors'
``precision: "bfloat16"`` casts both models), keeping latents, guidance and the scheduler in
float32 (theirs keep the latents in bfloat16 too); the VAE in float32. ``"fp32"``: everything
float32 with "highest" matmul precision.

Where vidax differs from the authors' code, on purpose:

* Sizes and frame counts the VAE cannot take are refused, not padded and cropped back.
* Their image preprocessing ends with an H.264 round trip of the conditioning image at CRF 29
  (``crf_compressor.compress``, PyAV); vidax skips it (no PyAV dependency) -- set
  ``Request.image`` to their preprocessed frame (float32 [-1, 1] ``[H, W, 3]``) to reproduce
  theirs exactly.
* Noise comes from JAX's PRNG for a seed (pass ``noise=`` / :class:`Draws` for bit-comparable runs).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import loading, registry
from vidax.errors import VidaxError
from vidax.models.ltx_video.dit import SKIP_LAYER_STRATEGIES
from vidax.models.t5.model import T5Config
from vidax.pipelines.base import (
    PipelineBase,
    read_noise,
    precision_policy,
    Progress,
    load_image,
    parse_size,
    verify_component,
)
from vidax.pipelines.base import number as _number
from vidax.schedulers.rectified_flow import RectifiedFlowScheduler
from vidax.schedulers.rectified_flow import step as rf_step
from vidax.translator.io import open_checkpoint

MODEL_TYPE = "ltx_video"
TASKS = ("t2v", "i2v")
#: Both tasks run on every release (I2V is conditioning, not another model).
RELEASE_TASK = "t2v+i2v"
VARIANTS = ("0.9.8-13b-dev", "0.9.8-13b-distilled", "0.9.8-2b-distilled")
_FILE_VARIANTS = {"ltxv-13b-0.9.8-dev": "0.9.8-13b-dev",
                  "ltxv-13b-0.9.8-distilled": "0.9.8-13b-distilled",
                  "ltxv-2b-0.9.8-distilled": "0.9.8-2b-distilled"}
UPSAMPLER_PATTERN = "ltxv-spatial-upscaler-*.safetensors"
TEXT_ENCODER_DIR = "text_encoder"
TOKENIZER_DIR = "tokenizer"
#: ``text_encoder_max_tokens`` of their pipeline.
TEXT_LEN = 256

# ----------------------------------------------------------------------------- the authors' data
#: ``InferenceConfig.negative_prompt`` (ltx_video/inference.py).
NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"
#: ``InferenceConfig.image_cond_noise_scale``.
IMAGE_COND_NOISE_SCALE = 0.15
#: ``add_noise_to_image_conditioning_latents``' eps: tokens with mask > 1 - eps are re-noised.
_HARD_EPS = 1e-6
#: ``denoising_step``'s ``t_eps``.
_T_EPS = 1e-6


@dataclass(frozen=True)
class PassSettings:
    """One ``first_pass`` / ``second_pass`` section of the authors' YAML: the arguments of one
    ``LTXVideoPipeline.__call__``. Field defaults are that method's own defaults.

    ``guidance_scale``, ``stg_scale``, ``rescaling_scale`` are a number or a per-timestep
    tuple read through ``guidance_timesteps``; ``skip_block_list`` a tuple of block indices,
    or a per-timestep tuple of such tuples.
    """

    num_inference_steps: int | None = 20
    timesteps: tuple[float, ...] | None = None
    skip_initial_inference_steps: int = 0
    skip_final_inference_steps: int = 0
    guidance_scale: float | tuple[float, ...] = 4.5
    stg_scale: float | tuple[float, ...] = 1.0
    rescaling_scale: float | tuple[float, ...] = 0.7
    guidance_timesteps: tuple[float, ...] | None = None
    skip_block_list: tuple | None = None
    cfg_star_rescale: bool = False
    tone_map_compression_ratio: float = 0.0

    def schedule(self, scheduler: RectifiedFlowScheduler, num_tokens: int) -> np.ndarray:
        """The pass's float32 timesteps (their ``retrieve_timesteps``)."""
        if self.timesteps is not None:
            return scheduler.timesteps(timesteps=self.timesteps)
        return scheduler.timesteps(self.num_inference_steps, num_tokens,
                                   skip_initial=self.skip_initial_inference_steps,
                                   skip_final=self.skip_final_inference_steps)

    def per_step(self, timesteps: np.ndarray) -> list[StepGuidance]:
        """Each step's guidance, resolved as their ``__call__`` resolves the lists."""
        mapping = None
        if self.guidance_timesteps:
            mapping = []
            for t in timesteps:
                hits = [i for i, v in enumerate(self.guidance_timesteps) if np.float32(v) <= t]
                mapping.append(hits[0] if hits else len(self.guidance_timesteps) - 1)

        def pick(value, name):
            if not isinstance(value, (tuple, list)):
                return [value] * len(timesteps)
            if mapping is None:
                raise VidaxError(f"a per-timestep {name} list needs guidance_timesteps")
            return [value[m] for m in mapping]

        blocks = self.skip_block_list
        if blocks is None:
            skips = [None] * len(timesteps)
        elif len(blocks) == 0 or not isinstance(blocks[0], (tuple, list)):
            skips = [tuple(blocks)] * len(timesteps)
        else:
            skips = [tuple(b) for b in pick(blocks, "skip_block_list")]
        return [StepGuidance(float(g), float(s), float(r), b) for g, s, r, b in zip(
            pick(self.guidance_scale, "guidance_scale"), pick(self.stg_scale, "stg_scale"),
            pick(self.rescaling_scale, "rescaling_scale"), skips)]


@dataclass(frozen=True)
class StepGuidance:
    """One step's CFG scale, STG scale, rescaling and skipped blocks."""

    guidance_scale: float
    stg_scale: float
    rescaling_scale: float
    skip_blocks: tuple[int, ...] | None

    @property
    def cfg(self) -> bool:
        return self.guidance_scale > 1.0

    @property
    def stg(self) -> bool:
        return self.stg_scale > 0


@dataclass(frozen=True)
class ReleaseDefaults:
    """A release's YAML config (``configs/ltxv-*-0.9.8-*.yaml``) and the ``InferenceConfig``
    defaults of their ``inference.py`` (size 1216x704, 121 frames, 30 fps)."""

    first_pass: PassSettings
    second_pass: PassSettings
    downscale_factor: float = 0.6666666
    stg_mode: str = "attention_values"
    decode_timestep: float = 0.05
    decode_noise_scale: float = 0.025
    frames: int = 121
    size: tuple[int, int] = (1216, 704)
    fps: float = 30.0
    negative_prompt: str = NEGATIVE_PROMPT
    image_cond_noise_scale: float = IMAGE_COND_NOISE_SCALE


_DEV = ReleaseDefaults(
    first_pass=PassSettings(
        num_inference_steps=30, skip_final_inference_steps=3,
        guidance_scale=(1, 1, 6, 8, 6, 1, 1), stg_scale=(0, 0, 4, 4, 4, 2, 1),
        rescaling_scale=(1, 1, 0.5, 0.5, 1, 1, 1),
        guidance_timesteps=(1.0, 0.996, 0.9933, 0.9850, 0.9767, 0.9008, 0.6180),
        skip_block_list=((), (11, 25, 35, 39), (22, 35, 39), (28,), (28,), (28,), (28,)),
        cfg_star_rescale=True),
    second_pass=PassSettings(
        num_inference_steps=30, skip_initial_inference_steps=17, guidance_scale=(1,),
        stg_scale=(1,), rescaling_scale=(1,), guidance_timesteps=(1.0,),
        skip_block_list=(27,), cfg_star_rescale=True))
_DISTILLED_FIRST = PassSettings(
    num_inference_steps=None, timesteps=(1.0000, 0.9937, 0.9875, 0.9812, 0.9750, 0.9094, 0.7250),
    guidance_scale=1, stg_scale=0, rescaling_scale=1, skip_block_list=(42,))
_DISTILLED_SECOND = PassSettings(
    num_inference_steps=None, timesteps=(0.9094, 0.7250, 0.4219), guidance_scale=1,
    stg_scale=0, rescaling_scale=1, skip_block_list=(42,))
#: Per release: ``configs/ltxv-13b-0.9.8-dev.yaml``, ``...-13b-0.9.8-distilled.yaml`` (the
#: second pass tone-maps with ratio 0.6), ``...-2b-0.9.8-distilled.yaml``.
DEFAULTS = {
    "0.9.8-13b-dev": _DEV,
    "0.9.8-13b-distilled": ReleaseDefaults(
        _DISTILLED_FIRST, dataclasses.replace(_DISTILLED_SECOND, tone_map_compression_ratio=0.6)),
    "0.9.8-2b-distilled": ReleaseDefaults(_DISTILLED_FIRST, _DISTILLED_SECOND),
}


def defaults_for(variant: str) -> ReleaseDefaults:
    if variant in DEFAULTS:
        return DEFAULTS[variant]
    # a file that is none of the releases (tiny tests, custom fine-tunes): the dev model's
    # guidance lists with STG perturbing block 0 (every DiT has it), 8 steps per pass (the
    # second pass runs the last 3), a short clip at a small size
    first = _DEV.first_pass
    return dataclasses.replace(
        _DEV, frames=9, size=(96, 64), fps=24.0,
        first_pass=dataclasses.replace(first, num_inference_steps=8, skip_block_list=tuple(
            (0,) if b else () for b in first.skip_block_list)),
        second_pass=dataclasses.replace(_DEV.second_pass, num_inference_steps=8,
                                        skip_initial_inference_steps=5, skip_block_list=(0,)))


# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True)
class Release:
    """An LTX-Video release folder: the single DiT+VAE file, T5, the tokenizer, optionally the
    spatial upscaler; the configs from the file's metadata and ``text_encoder/config.json``."""

    folder: Path
    variant: str
    configs: dict
    files: dict           # component -> Path ("dit" and "vae" are the same file)
    scheduler: RectifiedFlowScheduler
    allowed_inference_steps: tuple[float, ...] | None = None
    task: str = RELEASE_TASK

    @property
    def defaults(self) -> ReleaseDefaults:
        return defaults_for(self.variant)

    @property
    def vae_scale_factors(self) -> tuple[int, int, int]:
        vae = self.configs["vae"]
        return (vae.temporal_downscale_factor, vae.spatial_downscale_factor,
                vae.spatial_downscale_factor)


def _metadata_config(path: Path) -> dict:
    with open_checkpoint(path) as ckpt:
        metadata = ckpt.metadata
    if "config" not in metadata:
        raise VidaxError(f"{path}: the file's metadata has no 'config'; LTX-Video release files "
                         "carry their models' and scheduler's settings there")
    try:
        config = json.loads(metadata["config"])
    except ValueError as e:
        raise VidaxError(f"{path}: the metadata 'config' is not valid JSON ({e})") from e
    for section in ("transformer", "vae", "scheduler"):
        if not isinstance(config.get(section), dict):
            raise VidaxError(f"{path}: the metadata config has no '{section}' section (it has "
                             f"{sorted(config)}); is this an LTX-Video release file?")
    return config


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find every component of an LTX-Video release folder without reading a weight.

    The folder holds one ``ltxv-*.safetensors`` (DiT + VAE), ``text_encoder/`` (transformers'
    T5EncoderModel: ``config.json`` + safetensors), ``tokenizer/`` (``spiece.model`` as
    released, or a ``tokenizer.json``), and optionally
    ``ltxv-spatial-upscaler-*.safetensors``. ``variant``: one of :data:`VARIANTS`; default: from
    the file name (any other name gets the dev model's settings at a small default size).
    """
    from vidax.translator.mappings import ltx_video as mapping

    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected an LTX-Video release folder: "
                         "ltxv-*.safetensors, text_encoder/, tokenizer/)")
    if variant is not None and variant not in VARIANTS:
        raise VidaxError(f"unknown LTX-Video variant {variant!r}; known: {', '.join(VARIANTS)}")
    upscalers = sorted(folder.glob(UPSAMPLER_PATTERN))
    singles = sorted(p for p in folder.glob("ltxv-*.safetensors") if p not in upscalers)
    missing = []
    if not singles:
        missing.append("ltxv-*.safetensors (the DiT + VAE release file)")
    elif len(singles) > 1:
        raise VidaxError(f"{folder} holds {len(singles)} LTX-Video release files "
                         f"({', '.join(p.name for p in singles)}); keep one per folder")
    te_dir = folder / TEXT_ENCODER_DIR
    te_spec = registry.get("t5", "encoder", layout="transformers")
    te_file = None
    if not (te_dir / "config.json").is_file():
        missing.append(f"{TEXT_ENCODER_DIR}/config.json (the T5 text encoder's config)")
    if not any(any(te_dir.glob(p)) for p in te_spec.files):
        missing.append(f"{TEXT_ENCODER_DIR}/model*.safetensors (the T5 text encoder)")
    else:
        te_file = loading.find_files(te_dir, te_spec)
    tokenizer = folder / TOKENIZER_DIR
    if not ((tokenizer / "tokenizer.json").is_file() or (tokenizer / "spiece.model").is_file()):
        missing.append(f"{TOKENIZER_DIR}/spiece.model or tokenizer.json (the T5 tokenizer)")
    if missing:
        raise VidaxError(f"{folder} is not a complete LTX-Video release folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")
    single = singles[0]
    config = _metadata_config(single)
    source = str(single)
    try:
        te_config = T5Config.from_dict(json.loads((te_dir / "config.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise VidaxError(f"{te_dir / 'config.json'}: not a T5 encoder config ({e})") from e
    metadata = {"config": json.dumps(config)}
    configs = {"dit": mapping.dit_config(metadata, source),
               "vae": mapping.vae_config(metadata, source), "text_encoder": te_config}
    if configs["dit"].caption_channels != te_config.dim:
        raise VidaxError(f"{single}: the DiT reads text of width "
                         f"{configs['dit'].caption_channels}, but {te_dir} encodes "
                         f"{te_config.dim}")
    files = {"dit": single, "vae": single, "text_encoder": te_file, "tokenizer": tokenizer}
    if upscalers:
        if len(upscalers) > 1:
            raise VidaxError(f"{folder} holds several upscalers "
                             f"({', '.join(p.name for p in upscalers)}); keep one")
        files["upsampler"] = upscalers[0]
        with open_checkpoint(upscalers[0]) as ckpt:
            configs["upsampler"] = mapping.upsampler_config(ckpt.metadata, str(upscalers[0]))
        if configs["upsampler"] is None:
            raise VidaxError(f"{upscalers[0]}: the file's metadata has no 'config' (the "
                             "upscaler's settings)")
        if configs["upsampler"].in_channels != configs["vae"].latent_channels:
            raise VidaxError(f"{upscalers[0]} upsamples {configs['upsampler'].in_channels}-"
                             f"channel latents; the VAE makes {configs['vae'].latent_channels}")
    allowed = config.get("allowed_inference_steps")
    if variant is None:
        variant = _FILE_VARIANTS.get(single.stem, "custom")
    return Release(folder, variant, configs, files,
                   RectifiedFlowScheduler.from_dict(config["scheduler"]),
                   None if allowed is None else tuple(float(a) for a in allowed))


# ----------------------------------------------------------------------------- inputs
def check_frames(frames, temporal: int = 8) -> int:
    """The VAE turns ``temporal * n + 1`` frames into ``n + 1`` latent frames."""
    if not isinstance(frames, (int, np.integer)) or frames < 1 or (frames - 1) % temporal:
        lower = max(1, (int(frames) - 1) // temporal * temporal + 1) \
            if isinstance(frames, (int, np.integer)) else 121
        raise VidaxError(f"frames {frames!r}: the frame count must be {temporal}n+1 (1, "
                         f"{temporal + 1}, {2 * temporal + 1}, ...), because the VAE turns "
                         f"{temporal}n+1 frames into n+1 latent frames; e.g. {lower} or "
                         f"{lower + temporal}")
    return int(frames)


def check_size(size, spatial: int = 32) -> tuple[int, int]:
    """Width and height must be positive multiples of the VAE's spatial factor (32)."""
    width, height = (int(s) for s in size)
    if width < spatial or height < spatial or width % spatial or height % spatial:
        def nearest(n):
            return max(spatial, spatial * round(n / spatial))
        raise VidaxError(f"size {width}x{height}: width and height must be multiples of "
                         f"{spatial} (the VAE's spatial compression); the nearest valid size "
                         f"is {nearest(width)}x{nearest(height)}")
    return width, height


def gaussian_blur(image: np.ndarray) -> np.ndarray:
    """torchvision's ``gaussian_blur(kernel_size=3, sigma=1.0)`` of a float ``[H, W, C]``
    image: the separable kernel ``exp(-x^2 / 2)`` at x = -1, 0, 1, normalised, reflect padding."""
    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    pdf = np.exp(-0.5 * np.square(x / np.float32(1.0)))
    kernel = (pdf / pdf.sum()).astype(np.float32)
    padded = np.pad(image.astype(np.float32), ((1, 1), (1, 1), (0, 0)), mode="reflect")
    rows = sum(kernel[i] * padded[i:i + image.shape[0]] for i in range(3))
    return sum(kernel[j] * rows[:, j:j + image.shape[1]] for j in range(3)).astype(np.float32)


def crop_to_aspect(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """The centre crop of ``load_image_to_tensor_with_resize_and_crop``: the largest window of
    the target aspect ratio (sizes truncated to int, offsets floored)."""
    in_h, in_w = image.shape[:2]
    target, frame = width / height, in_w / in_h
    if frame > target:
        new_w, new_h = int(in_h * target), in_h
        x0, y0 = (in_w - new_w) // 2, 0
    else:
        new_w, new_h = in_w, int(in_w / target)
        x0, y0 = 0, (in_h - new_h) // 2
    return image[y0:y0 + new_h, x0:x0 + new_w]


def _bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``F.interpolate(mode="bilinear", align_corners=False)`` along one axis, no antialias."""
    # torch's float32 source coordinates (``area_pixel_compute_source_index``)
    scale = np.float32(n_in / n_out)
    src = np.maximum((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale
                     - np.float32(0.5), np.float32(0))
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo.astype(np.float32)).astype(np.float64)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] += 1 - frac
    m[np.arange(n_out), hi] += frac
    return m


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """float ``[H, W, C]`` -> ``[height, width, C]`` as their ``resize_tensor``."""
    if image.shape[:2] == (height, width):
        return image.astype(np.float32)
    rows, cols = _bilinear_matrix(image.shape[0], height), _bilinear_matrix(image.shape[1], width)
    return np.einsum("oh,hwc,pw->opc", rows, image.astype(np.float64), cols).astype(np.float32)


def preprocess_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> the float32 [-1, 1] conditioning frame at its own resolution,
    cropped to the aspect ratio of ``height x width``: their
    ``load_image_to_tensor_with_resize_and_crop(just_crop=True)`` (centre crop, blur,
    ``x * 255 / 127.5 - 1``) without the CRF round trip. Each pass resizes it to its own size
    (their ``_resize_conditioning_item``, :func:`resize_bilinear`)."""
    x = crop_to_aspect(image, height, width).astype(np.float32) / np.float32(255)
    x = gaussian_blur(x) * np.float32(255)
    return x / np.float32(127.5) - np.float32(1)


def noise_array(noise, latent_shape: tuple[int, int, int, int]) -> np.ndarray:
    """Initial noise as float32 ``[F', h, w, C]``. Accepted: vidax's layout, the authors' token
    layout ``[F'*h*w, C]`` (what their ``randn((b, f*h*w, c))`` draws), or their video layout
    ``[C, F', h, w]``; each optionally with a leading batch axis of 1; or a ``.npy`` path."""
    array = noise = read_noise(noise)
    f, h, w, c = latent_shape
    if array.ndim in (3, 5) and array.shape[0] == 1:
        array = array[0]
    if array.shape == (f * h * w, c):
        array = array.reshape(f, h, w, c)
    elif array.shape == (c, f, h, w) and array.shape != (f, h, w, c):
        array = array.transpose(1, 2, 3, 0)
    elif array.shape != (f, h, w, c):
        raise VidaxError(f"noise of shape {list(np.shape(noise))} does not fit this video: "
                         f"expected [{f}, {h}, {w}, {c}] [F', H/32, W/32, C], the authors' "
                         f"tokens [{f * h * w}, {c}] or [{c}, {f}, {h}, {w}]")
    return np.ascontiguousarray(array, dtype=np.float32)


@dataclass(frozen=True)
class Request:
    """One generation, every option resolved. ``size`` is the output (width, height);
    ``image`` the float32 [-1, 1] conditioning frame (:func:`preprocess_image`) or None;
    ``noise`` the first pass's initial noise ``[F', h, w, C]`` or None (drawn from ``seed``).
    ``multiscale``: None chooses it when the release has the spatial upscaler; then
    ``settings`` is the first pass and ``second_settings`` the second.
    """

    task: str
    prompt: str
    negative_prompt: str
    frames: int
    size: tuple[int, int]
    fps: float
    seed: int
    settings: PassSettings
    stg_mode: str
    decode_timestep: float
    decode_noise_scale: float
    image_cond_noise_scale: float
    vae_scale_factors: tuple[int, int, int]
    latent_channels: int
    noise: np.ndarray | None = None
    image: np.ndarray | None = None
    multiscale: bool | None = None
    second_settings: PassSettings | None = None
    downscale_factor: float = 0.6666666

    def pass_sizes(self) -> list[tuple[int, int]]:
        """Each pass's (width, height): the requested size, or (multi-scale) their
        ``LTXMultiScalePipeline``'s ``int(size * downscale_factor)`` floored to the VAE's
        factor, then twice that."""
        if not self.multiscale:
            return [self.size]
        s = self.vae_scale_factors[1]
        small = tuple(int(n * self.downscale_factor) // s * s for n in self.size)
        if min(small) < s:
            raise VidaxError(f"size {self.size[0]}x{self.size[1]} is too small for the "
                             f"multi-scale pipeline: its first pass at x{self.downscale_factor:.3g}"
                             f" would be {small[0]}x{small[1]}")
        return [small, (2 * small[0], 2 * small[1])]

    def latent_shape_at(self, size: tuple[int, int]) -> tuple[int, int, int, int]:
        width, height = size
        t, s, _ = self.vae_scale_factors
        return (self.frames - 1) // t + 1, height // s, width // s, self.latent_channels

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """The first pass's latent shape (that of ``noise``)."""
        return self.latent_shape_at(self.pass_sizes()[0])


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, last_image=None, frames: int | None = None, size=None,
                 steps: int | None = None, guidance_scale: float | None = None,
                 shift: float | None = None, sample_solver: str | None = None, seed: int = 0,
                 noise=None, fps: float | None = None, settings: PassSettings | None = None,
                 second_settings: PassSettings | None = None, multiscale: bool | None = None,
                 release: Release | None = None) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``task`` is the release's (:data:`RELEASE_TASK`): an ``image`` makes it image-to-video.
    ``steps`` replaces the dev schedule's step count; ``guidance_scale`` replaces the
    per-timestep CFG list by one scale (both apply to the first pass); ``settings`` /
    ``second_settings`` replace the passes. ``multiscale``: None runs the authors'
    multi-scale pipeline when the release has the spatial upscaler, else one pass at the
    output size. ``release`` gives the VAE's scale factors and latent width (default: the
    0.9.8 VAE's).
    """
    if task not in (RELEASE_TASK, *TASKS):
        raise VidaxError(f"LTX-Video task must be one of {TASKS}, got {task!r}")
    if last_image is not None:
        raise VidaxError("LTX-Video takes one conditioning image (--image); --last-image is "
                         "not supported")
    if shift is not None:
        raise VidaxError("LTX-Video has no --shift: its schedule comes from the release file's "
                         "scheduler settings (resolution-dependent where they say so)")
    if sample_solver is not None:
        raise VidaxError("LTX-Video has one sampler (rectified flow); --sample-solver does not "
                         "apply")
    d = defaults_for(variant)
    if not isinstance(prompt, str):
        raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
    factors = (8, 32, 32) if release is None else release.vae_scale_factors
    channels = 128 if release is None else release.configs["vae"].latent_channels
    frames = check_frames(d.frames if frames is None else frames, factors[0])
    if isinstance(size, str):
        size = parse_size(size)
    size = check_size(d.size if size is None else size, factors[1])
    fps = _number("fps", d.fps if fps is None else fps)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VidaxError(f"seed must be a non-negative integer, got {seed!r}")
    settings = settings or d.first_pass
    if steps is not None:
        if settings.timesteps is not None:
            raise VidaxError(f"the {variant} release samples a fixed list of "
                             f"{len(settings.timesteps)} timesteps (a distilled model); "
                             "--steps does not apply")
        if not isinstance(steps, (int, np.integer)) or steps < 1:
            raise VidaxError(f"steps must be a positive integer, got {steps!r}")
        settings = dataclasses.replace(settings, num_inference_steps=int(steps))
    if guidance_scale is not None:
        settings = dataclasses.replace(settings, guidance_scale=_number(
            "guidance_scale", guidance_scale, positive=False))
    second_settings = second_settings or d.second_pass
    width, height = size
    frame = None if image is None else preprocess_image(load_image(image), height, width)
    request = Request("i2v" if image is not None else "t2v", prompt.strip(),
                      (negative_prompt if negative_prompt is not None
                       else d.negative_prompt).strip(),
                      frames, size, fps, int(seed), settings, d.stg_mode, d.decode_timestep,
                      d.decode_noise_scale, d.image_cond_noise_scale, tuple(factors), channels,
                      image=frame, multiscale=multiscale, second_settings=second_settings,
                      downscale_factor=d.downscale_factor)
    if noise is not None:
        request = dataclasses.replace(request, noise=noise_array(noise, request.latent_shape))
    return request


@dataclass(frozen=True)
class Draws:
    """Explicit random numbers for a run (each None: drawn from the request's seed).

    ``initial``: ``[F', h, w, C]`` (the request's ``noise`` wins); ``encode``: the VAE
    posterior sample's normal noise for the image latent ``[1, h, w, C]``; ``conditioning``:
    per step, ``[F', h, w, C]``, the re-noising of the image tokens; ``decode``: ``[F', h, w,
    C]`` mixed in before decoding.
    """

    initial: np.ndarray | None = None
    encode: np.ndarray | None = None
    conditioning: np.ndarray | None = None
    decode: np.ndarray | None = None


def tone_map_latents(latents: jax.Array, compression: float) -> jax.Array:
    """Their ``tone_map_latents``: ``x * (1 - 0.8 c' sigmoid(4 c' (|x| - 1)))``, ``c' = 0.75
    compression``; the identity at 0."""
    if not 0 <= compression <= 1:
        raise VidaxError(f"tone-map compression must be in [0, 1], got {compression}")
    scale = jnp.float32(compression * 0.75)
    sig = jax.nn.sigmoid(4.0 * scale * (jnp.abs(latents) - 1.0))
    return latents * (1.0 - 0.8 * scale * sig)


def skip_layer_mask(num_layers: int, num_conds: int, blocks) -> np.ndarray | None:
    """Their ``create_skip_layer_mask(1, num_conds, num_conds - 1, blocks)``: ``[layers,
    num_conds]``, 0 for the listed blocks in the last (perturbed) sample."""
    if not blocks:
        return None
    mask = np.ones((num_layers, num_conds), np.float32)
    for b in blocks:
        if not -num_layers <= b < num_layers:
            raise VidaxError(f"skip block {b} does not exist in a DiT of {num_layers} blocks")
        mask[b, num_conds - 1] = 0
    return mask


# ----------------------------------------------------------------------------- jitted pieces
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids, mask):
    return nnx.merge(graphdef, params)(ids, mask)


@dataclass(frozen=True)
class _StepKind:
    """What changes the traced step: which of (negative, prompt, perturbed) run, rescaling,
    CFG-star, the STG strategy, the DiT's position scale and compute dtype."""

    cfg: bool
    stg: bool
    rescale: bool
    cfg_star: bool
    strategy: str
    vae_scale_factors: tuple[int, int, int]
    compute_dtype: object

    @property
    def rows(self) -> tuple[int, ...]:
        """Rows of the (prompt, negative) text batch, in their [negative, prompt, prompt] order."""
        return ((1,) if self.cfg else ()) + (0,) + ((0,) if self.stg else ())


def _std(x: jax.Array) -> jax.Array:
    """torch's ``.std(dim=1)`` (unbiased) of ``[B, n]``."""
    return jnp.std(x, axis=1, ddof=1, keepdims=True)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(3,))
def _denoise_step(graphdef, kind: _StepKind, params, latents, init, cond_mask, cond_noise,
                  image_noise_scale, t, schedule, context, context_mask, frame_rate, g, s, r,
                  skip_mask):
    """One step of their loop, on ``latents [1, F, H, W, C]``; ``cond_mask [1, F, H, W]`` (or
    None for t2v); ``context [2, L, D]`` (prompt, negative)."""
    dit = nnx.merge(graphdef, params)
    if cond_mask is not None:
        hard = (cond_mask > 1.0 - _HARD_EPS)[..., None]
        latents = jnp.where(hard, init + image_noise_scale * cond_noise * t ** 2, latents)
    n = len(kind.rows)
    rows = jnp.asarray(kind.rows)
    timestep = jnp.broadcast_to(t, latents.shape[:-1])
    if cond_mask is not None:
        timestep = jnp.minimum(timestep, 1.0 - cond_mask)
    flat_t = timestep.reshape(1, -1)
    out = dit(jnp.concatenate([latents] * n).astype(kind.compute_dtype),
              jnp.concatenate([flat_t] * n), context[rows].astype(kind.compute_dtype),
              context_mask[rows], frame_rate=frame_rate, skip_layer_mask=skip_mask,
              skip_layer_strategy=kind.strategy,
              vae_scale_factors=kind.vae_scale_factors).astype(jnp.float32)
    flat = out.reshape(n, -1)
    if kind.stg:
        text, perturbed = flat[-2:-1], flat[-1:]
    if kind.cfg:
        uncond, text = flat[:1], flat[1:2]
        if kind.cfg_star:
            alpha = (jnp.sum(text * uncond, axis=1, keepdims=True)
                     / (jnp.sum(uncond ** 2, axis=1, keepdims=True) + 1e-8))
            uncond = alpha * uncond
        pred = uncond + g * (text - uncond)
    elif kind.stg:
        pred = text
    else:
        pred = flat
    if kind.stg:
        pred = pred + s * (text - perturbed)
        if kind.rescale:
            factor = r * (_std(text) / _std(pred)) + (1 - r)
            pred = pred * factor
    velocity = pred.reshape(latents.shape)
    new = rf_step(velocity, timestep, latents, schedule)
    if cond_mask is not None:
        new = jnp.where((t - _T_EPS < 1.0 - cond_mask)[..., None], new, latents)
    return new


# ----------------------------------------------------------------------------- the pipeline
class LTXVideoPipeline(PipelineBase):
    """A loaded LTX-Video release: ``pipe(prompt, **options)`` -> uint8 frames ``[F, H, W, 3]``.

    Options are :func:`make_request`'s. :meth:`sample` returns the final (normalised) latents,
    :meth:`decode` turns them into frames, :meth:`write` writes an mp4 atomically.
    """

    def __init__(self, release: Release, *, dit, vae, text_encoder, tokenizer, upsampler=None,
                 mesh=None, precision: str = "bf16", console=None):
        super().__init__(release, mesh=mesh, precision=precision, console=console)
        self.dit, self.vae, self.text_encoder, self.tokenizer = dit, vae, text_encoder, tokenizer
        self.upsampler = upsampler
        self._last_draws: Draws | None = None   # the last sample's, for its decode noise

    @property
    def defaults(self) -> ReleaseDefaults:
        return self.release.defaults

    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None) -> LTXVideoPipeline:
        """Verify every component against its model (no weight read), then load them."""
        from vidax.text import load_tokenizer

        policy = precision_policy(precision)
        progress = Progress(console)
        specs = {"dit": registry.get(MODEL_TYPE, "dit"), "vae": registry.get(MODEL_TYPE, "vae"),
                 "text_encoder": registry.get("t5", "encoder", layout="transformers")}
        if "upsampler" in release.files:
            specs["upsampler"] = registry.get(MODEL_TYPE, "upsampler")
        for component, spec in specs.items():
            verify_component(spec, release.files[component], release.configs[component])
        progress.line(f"LTX-Video {release.variant} in {release.folder}: every component "
                      f"verified; loading with precision {policy.name}")
        dtypes = {"dit": policy.dit_compute, "vae": policy.vae,
                  "text_encoder": policy.text_encoder, "upsampler": policy.vae}
        models = {}
        for component, spec in specs.items():
            path = release.files[component]
            with progress.phase(f"loading {component} ({path.name})") as advance:
                model, report = loading.load_with_report(
                    spec.model_type, spec.component, path, config=release.configs[component],
                    layout=spec.layout, dtype=dtypes[component], mesh=mesh,
                    progress=lambda done, total, name: advance(total=total))
            progress.line(f"  {component}: {report.headline()}")
            models[component] = model
        tokenizer = load_tokenizer(release.files["tokenizer"], seq_len=TEXT_LEN, clean=None)
        return cls(release, tokenizer=tokenizer, mesh=mesh, precision=precision,
                   console=console, **models)

    # ------------------------------------------------------------------------- pieces
    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, release=self.release, **options)

    def _place(self, array):
        if self.mesh is None:
            return jnp.asarray(array)
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(array, NamedSharding(self.mesh, PartitionSpec()))

    def encode_text(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """T5 states ``[len(prompts), 256, D]`` (float32) and the masks ``[len(prompts), 256]``."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tokens = self.tokenizer(prompts)
        for i, dropped in enumerate(tokens.dropped):
            if dropped:
                warnings.warn(f"the {('prompt', 'negative prompt')[i]} is "
                              f"{dropped + TEXT_LEN} tokens long, more than the text encoder's "
                              f"{TEXT_LEN}: its last {dropped} tokens were dropped (the "
                              "authors truncate the same way)", UserWarning, stacklevel=3)
        graphdef, params = nnx.split(self.text_encoder)
        mask = self._place(tokens.mask)
        hidden = _encode_text(graphdef, params, self._place(tokens.ids), mask)
        return hidden.astype(jnp.float32), mask.astype(jnp.float32)

    def encode_image(self, frame: np.ndarray, noise) -> jax.Array:
        """The normalised latent ``[1, 1, h, w, C]`` of a [-1, 1] frame ``[H, W, 3]``: a
        posterior sample with the given standard-normal ``noise [1, h, w, C]``."""
        video = self._place(np.asarray(frame, np.float32)[None, None])
        z = self.vae.encode(video, noise=self._place(np.asarray(noise, np.float32)[None]))
        return self.vae.normalize(z)

    def _resolve(self, request: Request) -> Request:
        """The request checked against this release: its VAE's factors (``vidax generate``
        makes requests before loading, with the 0.9.8 VAE's) and, for ``multiscale=None``,
        multi-scale exactly when the spatial upscaler is loaded."""
        factors = self.release.vae_scale_factors
        channels = self.release.configs["vae"].latent_channels
        multiscale = (self.upsampler is not None if request.multiscale is None
                      else request.multiscale)
        if multiscale and self.upsampler is None:
            raise VidaxError(f"the multi-scale pipeline needs the spatial upscaler "
                             f"({UPSAMPLER_PATTERN}) in {self.release.folder}")
        if (request.vae_scale_factors, request.latent_channels, request.multiscale) == \
                (factors, channels, multiscale):
            return request
        check_frames(request.frames, factors[0])
        check_size(request.size, factors[1])
        resolved = dataclasses.replace(request, vae_scale_factors=factors,
                                       latent_channels=channels, multiscale=multiscale)
        if request.noise is not None:
            resolved = dataclasses.replace(
                resolved, noise=noise_array(request.noise.reshape(-1, request.latent_channels),
                                            resolved.latent_shape))
        return resolved

    def _draws(self, request: Request, draws: Draws | None, steps: int,
               shape: tuple[int, int, int, int], index: int) -> Draws:
        """Pass ``index``'s random numbers: the given ones, the rest from the seed."""
        keys = jax.random.split(jax.random.fold_in(jax.random.key(request.seed), index), 4)
        d = draws or Draws()

        def pick(given, key, full_shape):
            if given is not None:
                return np.asarray(given, np.float32).reshape(full_shape)
            return np.asarray(jax.random.normal(key, full_shape, jnp.float32))

        initial = request.noise if index == 0 and request.noise is not None else d.initial
        return Draws(
            initial=pick(initial, keys[0], shape),
            encode=None if request.image is None else pick(d.encode, keys[1], (1, *shape[1:])),
            conditioning=None if request.image is None else pick(
                d.conditioning, keys[2], (steps, *shape)),
            decode=pick(d.decode, keys[3], shape))

    # ------------------------------------------------------------------------- generation
    def _pass(self, request: Request, settings: PassSettings, size: tuple[int, int],
              draws: Draws | None, context, context_mask, index: int,
              start: jax.Array | None = None) -> tuple[jax.Array, Draws]:
        """One call of their ``LTXVideoPipeline`` (``output_type="latent"``) at ``size``;
        ``start``: the latents a second pass refines (noised to its first timestep)."""
        release, progress = self.release, self._progress
        shape = request.latent_shape_at(size)
        schedule = settings.schedule(release.scheduler, shape[0] * shape[1] * shape[2])
        if release.allowed_inference_steps is not None:
            bad = [round(float(t), 4) for t in schedule
                   if round(float(t), 4) not in release.allowed_inference_steps]
            if bad:
                raise VidaxError(f"timesteps {bad} are not among the release file's "
                                 f"allowed_inference_steps {list(release.allowed_inference_steps)}")
        guidance = settings.per_step(schedule)
        draws = self._draws(request, draws, len(schedule), shape, index)
        num_layers = self.dit.config.num_layers
        latents = self._place(draws.initial[None])
        if start is not None:
            # their prepare_latents: ``t0 * noise + (1 - t0) * latents``
            t0 = np.float32(schedule[0])
            if not t0 < 1.0:
                raise VidaxError("a pass that refines given latents must start below sigma 1 "
                                 "(skip initial steps or give a timestep list)")
            latents = t0 * latents + (np.float32(1) - t0) * start
        cond_mask = init = None
        if request.image is not None:
            width, height = size
            with progress.phase("encoding the image"):
                frame = resize_bilinear(request.image, height, width)
                image_latent = self.encode_image(frame, draws.encode)
            latents = latents.at[:, :1].set(image_latent.astype(jnp.float32))
            mask = np.zeros((1, *shape[:3]), np.float32)
            mask[:, 0] = 1.0
            cond_mask = self._place(mask)
            init = latents.copy()
        graphdef, params = nnx.split(self.dit)
        schedule_arr = self._place(schedule)
        with progress.phase(f"sampling {request.frames} frames at {size[0]}x{size[1]}, "
                            f"{len(schedule)} steps", total=len(schedule)) as advance:
            for i, (t, step) in enumerate(zip(schedule, guidance)):
                kind = _StepKind(step.cfg, step.stg, step.stg and step.rescaling_scale != 1.0,
                                 settings.cfg_star_rescale, request.stg_mode,
                                 release.vae_scale_factors, self.precision.dit_compute)
                mask = (skip_layer_mask(num_layers, len(kind.rows), step.skip_blocks)
                        if step.stg else None)
                latents = _denoise_step(
                    graphdef, kind, params, latents, init, cond_mask,
                    None if cond_mask is None else self._place(draws.conditioning[i][None]),
                    jnp.float32(request.image_cond_noise_scale), jnp.float32(t),
                    schedule_arr, context, context_mask, jnp.float32(request.fps),
                    jnp.float32(step.guidance_scale), jnp.float32(step.stg_scale),
                    jnp.float32(step.rescaling_scale),
                    None if mask is None else self._place(mask))
                latents.block_until_ready()
                advance()
        return latents, draws

    def upsample(self, latents: jax.Array) -> jax.Array:
        """Their ``_upsample_latents`` + ``adain_filter_latent``: the upscaler on un-normalised
        latents, normalised again, then each channel given the mean and (unbiased) std that
        it had before upsampling."""
        up = self.vae.normalize(_run_module(self.upsampler, self.vae.denormalize(latents)))
        axes = (1, 2, 3)
        ref_mean, ref_std = latents.mean(axes, keepdims=True), jnp.std(latents, axes, ddof=1,
                                                                        keepdims=True)
        mean, std = up.mean(axes, keepdims=True), jnp.std(up, axes, ddof=1, keepdims=True)
        return (up - mean) / std * ref_std + ref_mean

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               draws: Draws | tuple[Draws, Draws] | None = None, **options) -> np.ndarray:
        """The final latents ``[F', h, w, C]`` (float32, normalised as the DiT sees them): one
        pass, or (multi-scale) the second pass's. ``draws``: explicit random numbers, a
        :class:`Draws` per pass (a pair for multi-scale)."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        request = self._resolve(request)
        if request.stg_mode not in SKIP_LAYER_STRATEGIES:
            raise VidaxError(f"stg_mode {request.stg_mode!r} is not one of "
                             f"{SKIP_LAYER_STRATEGIES}")
        sizes = request.pass_sizes()
        passes = [request.settings] + ([request.second_settings] if request.multiscale else [])
        if draws is None or isinstance(draws, Draws):
            draws = (draws,) + (None,) * (len(passes) - 1)
        with self._matmul_precision():
            with self._progress.phase("encoding the prompt and the negative prompt"):
                context, context_mask = self.encode_text([request.prompt,
                                                          request.negative_prompt])
            latents = None
            for index, (settings, size) in enumerate(zip(passes, sizes)):
                if index:
                    with self._progress.phase("upsampling the latents"):
                        latents = self.upsample(latents)
                latents, used = self._pass(request, settings, size, draws[index], context,
                                           context_mask, index, start=latents)
        self._last_draws = used
        return np.asarray(latents[0])

    def decode(self, latents, request: Request, draws: Draws | None = None) -> np.ndarray:
        """Normalised latents ``[F', h, w, C]`` -> uint8 frames ``[F, H, W, 3]`` at the
        request's size (:meth:`decode_unit` times 255, truncated, as their ``inference.py``)."""
        return (self.decode_unit(latents, request, draws) * np.float32(255)).astype(np.uint8)

    def decode_unit(self, latents, request: Request, draws: Draws | None = None) -> np.ndarray:
        """Normalised latents -> float32 frames in [0, 1] ``[F, H, W, 3]`` as their pipeline's
        ``output_type="pt"``: decode noise, tone mapping, the timestep-conditioned VAE,
        ``(x / 2 + 0.5).clamp(0, 1)``, and (multi-scale) their bilinear resize to the
        requested size."""
        request = self._resolve(request)
        latents = jnp.asarray(np.asarray(latents, np.float32)[None])
        noise = (draws.decode if draws is not None and draws.decode is not None else
                 self._draws(request, None, 0, tuple(latents.shape[1:]),
                             len(request.pass_sizes()) - 1).decode)
        # the tone mapping of the pass that decodes in the authors' configs (the second);
        # a single pass uses its own where it sets one
        ratio = request.second_settings.tone_map_compression_ratio
        if not request.multiscale and request.settings.tone_map_compression_ratio:
            ratio = request.settings.tone_map_compression_ratio
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[1]} latent frames"):
            s = jnp.float32(request.decode_noise_scale)
            mixed = latents * (1 - s) + self._place(np.asarray(noise, np.float32)[None]) * s
            mixed = tone_map_latents(mixed, ratio)
            timestep = (request.decode_timestep if self.vae.config.timestep_conditioning
                        else None)
            video = np.asarray(_decode(self.vae, mixed, timestep)[0])
        unit = np.clip(video / np.float32(2) + np.float32(0.5), 0, 1)   # their postprocess
        width, height = request.size
        if unit.shape[1:3] != (height, width):
            unit = np.stack([resize_bilinear(frame, height, width) for frame in unit])
        return unit

    def __call__(self, prompt: str | None = None, *, request: Request | None = None,
                 draws=None, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]``."""
        if request is None:
            request = self.request(prompt, **options)
        request = self._resolve(request)
        latents = self.sample(request=request, draws=draws)
        return self.decode(latents, request, self._last_draws)


Pipeline = LTXVideoPipeline


@nnx.jit
def _run_module(module, x):
    return module(x)


@nnx.jit
def _decode_jit(vae, latents, timestep):
    return vae.decode_normalized(latents, timestep)


@nnx.jit
def _decode_plain(vae, latents):
    return vae.decode(vae.denormalize(latents))


def _decode(vae, latents, timestep):
    if timestep is None:
        return _decode_plain(vae, latents)
    return _decode_jit(vae, latents, jnp.float32(timestep))

