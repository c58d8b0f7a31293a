"""LTX-Video 0.9.8 text-to-video and image-to-video as the authors run them
(``ltx_video/inference.py`` driving ``LTXVideoPipeline`` / ``LTXMultiScalePipeline``). The
guide, with each step of their pipeline, the precision policies and where vidax differs on
purpose, is docs/models/ltx_video.md.

LTX-Video's own on the skeleton (:mod:`vidax.pipelines.base`): their YAML configs as data
(:data:`DEFAULTS`, :class:`PassSettings`); one release file holding the DiT, the VAE and the
scheduler's settings; T5 with its mask. A *pass* (one call of their ``LTXVideoPipeline``) is
one run of the shared loop, each step the DiT on ``[negative, prompt, prompt-with-skipped-
blocks]`` as the step's CFG / STG scales need, their guidance (:func:`guide`) and the
per-token rectified-flow step; image-to-video is their ``ConditioningItem(image, frame 0,
strength 1)`` (:meth:`LTXVideoPipeline.after_step`); multi-scale is two passes around the
spatial upscaler (:meth:`LTXVideoPipeline.denoise`). Noise comes from JAX's PRNG for a seed
(:class:`Draws` replays theirs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.ltx_video.dit import SKIP_LAYER_STRATEGIES, skip_layer_mask
from vidax.models.t5.model import T5Config
from vidax.pipelines import base, ltx_tiles, memory, overrides
from vidax.pipelines.base import Needed, Part, PipelineBase, Run, find_files, open_folder
from vidax.pipelines.inputs import (check_frames, check_size, load_image, read_json_config, refuse,
                                    seed_key, tokenize)
from vidax.pipelines.image import crop_to_aspect, gaussian_blur, resize_bilinear
from vidax.schedulers.rectified_flow import RectifiedFlowScheduler, RectifiedFlowSteps
from vidax.translator.io import open_checkpoint
from vidax.translator.mappings.common import metadata_config

MODEL_TYPE = "ltx_video"
TASKS = ("t2v", "i2v")
#: Both tasks run on every release (I2V is conditioning, not another model).
RELEASE_TASK = "t2v+i2v"
VARIANTS = ("0.9.8-13b-dev", "0.9.8-13b-distilled", "0.9.8-2b-distilled")
_FILE_VARIANTS = {"ltxv-{1}-{0}-{2}".format(*v.split("-")): v for v in VARIANTS}
UPSAMPLER_PATTERN = "ltxv-spatial-upscaler-*.safetensors"
TEXT_ENCODER_DIR = "text_encoder"
TOKENIZER_DIR = "tokenizer"
#: ``--dit FILE``: the release file (DiT + VAE, their configs in its metadata); ``--text-encoder
#: PATH`` (a folder: with its config.json) -- :mod:`vidax.pipelines.overrides`.
COMPONENT_OPTIONS = {"dit": "dit", "text_encoder": "text_encoder"}
#: ``text_encoder_max_tokens`` of their pipeline.
TEXT_LEN = 256

# ----------------------------------------------------------------------------- the authors' data
#: ``InferenceConfig.negative_prompt`` (ltx_video/inference.py).
NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"
#: ``InferenceConfig.image_cond_noise_scale``.
IMAGE_COND_NOISE_SCALE = 0.15
#: ``add_noise_to_image_conditioning_latents``' eps: tokens with mask > 1 - eps are re-noised.
_HARD_EPS = 1e-6


@dataclass(frozen=True)
class PassSettings:
    """One ``first_pass`` / ``second_pass`` section of the authors' YAML: the arguments of one
    ``LTXVideoPipeline.__call__`` (field defaults are its own). ``guidance_scale``,
    ``stg_scale``, ``rescaling_scale``: a number or a per-timestep tuple read through
    ``guidance_timesteps``; ``skip_block_list``: block indices, or a per-timestep tuple of them.
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
        marks = self.guidance_timesteps
        mapping = [next((i for i, v in enumerate(marks) if np.float32(v) <= t), len(marks) - 1)
                   for t in timesteps] if marks else None

        def pick(value, name):
            if not isinstance(value, (tuple, list)):
                return [value] * len(timesteps)
            if mapping is None:
                raise VidaxError(f"a per-timestep {name} list needs guidance_timesteps")
            return [value[m] for m in mapping]

        blocks = self.skip_block_list
        if blocks and isinstance(blocks[0], (tuple, list)):
            skips = [tuple(b) for b in pick(blocks, "skip_block_list")]
        else:
            skips = [None if blocks is None else tuple(blocks)] * len(timesteps)
        return [StepGuidance(float(g), float(s), float(r), b) for g, s, r, b in zip(
            pick(self.guidance_scale, "guidance_scale"), pick(self.stg_scale, "stg_scale"),
            pick(self.rescaling_scale, "rescaling_scale"), skips)]


class StepGuidance(NamedTuple):
    """One step's CFG scale (on above 1), STG scale (on above 0), rescaling, skipped blocks."""

    guidance_scale: float
    stg_scale: float
    rescaling_scale: float
    skip_blocks: tuple[int, ...] | None


@dataclass(frozen=True, kw_only=True)
class ReleaseDefaults(base.Defaults):
    """A release's YAML config (``configs/ltxv-*-0.9.8-*.yaml``) and their ``inference.py``'s
    ``InferenceConfig`` defaults. ``steps`` and ``guidance_scale`` are the first pass's (its
    step count, its largest CFG scale): what ``--steps`` and ``--guidance-scale`` replace."""

    first_pass: PassSettings
    second_pass: PassSettings
    steps: int = 0
    guidance_scale: float = 0.0
    downscale_factor: float = 0.6666666
    stg_mode: str = "attention_values"
    decode_timestep: float = 0.05
    decode_noise_scale: float = 0.025
    frames: int = 121
    size: tuple[int, int] = (1216, 704)
    fps: float = 30.0
    negative_prompt: str = NEGATIVE_PROMPT
    image_cond_noise_scale: float = IMAGE_COND_NOISE_SCALE

    def __post_init__(self):
        first = self.first_pass
        object.__setattr__(self, "steps", len(first.timesteps or ()) or first.num_inference_steps)
        object.__setattr__(self, "guidance_scale", float(np.max(first.guidance_scale)))


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
_DISTILLED = dict(num_inference_steps=None, guidance_scale=1, stg_scale=0, rescaling_scale=1,
                  skip_block_list=(42,))
_DISTILLED_FIRST = PassSettings(
    timesteps=(1.0000, 0.9937, 0.9875, 0.9812, 0.9750, 0.9094, 0.7250), **_DISTILLED)
_DISTILLED_SECOND = PassSettings(timesteps=(0.9094, 0.7250, 0.4219), **_DISTILLED)
#: Per release: ``configs/ltxv-13b-0.9.8-dev.yaml``, ``...-13b-0.9.8-distilled.yaml`` (the
#: second pass tone-maps with ratio 0.6), ``...-2b-0.9.8-distilled.yaml``.
DEFAULTS = {
    "0.9.8-13b-dev": _DEV,
    "0.9.8-13b-distilled": ReleaseDefaults(
        first_pass=_DISTILLED_FIRST,
        second_pass=dataclasses.replace(_DISTILLED_SECOND, tone_map_compression_ratio=0.6)),
    "0.9.8-2b-distilled": ReleaseDefaults(first_pass=_DISTILLED_FIRST,
                                          second_pass=_DISTILLED_SECOND),
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
@dataclass(frozen=True, kw_only=True)
class Release(base.Release):
    """An LTX-Video release folder (:class:`vidax.pipelines.base.Release`) with the release
    file's scheduler and allowed timesteps."""

    scheduler: RectifiedFlowScheduler
    allowed_inference_steps: tuple[float, ...] | None = None

    @property
    def vae_scale_factors(self) -> tuple[int, int, int]:
        vae = self.configs["vae"]
        return (vae.temporal_downscale_factor, vae.spatial_downscale_factor,
                vae.spatial_downscale_factor)


def inspect_folder(folder, variant: str | None = None) -> Release:
    """Every component of an LTX-Video release folder, without reading a weight: one
    ``ltxv-*.safetensors`` (DiT + VAE, the configs in its metadata), ``text_encoder/``
    (transformers' T5EncoderModel), ``tokenizer/`` (``spiece.model`` or ``tokenizer.json``),
    optionally ``ltxv-spatial-upscaler-*.safetensors``. ``variant`` (default: from the file
    name; any other name gets the dev model's settings at a small default size)."""
    folder = open_folder(folder, "LTX-Video", VARIANTS, variant,
                         "ltxv-*.safetensors, text_encoder/, tokenizer/")
    upscalers = sorted(folder.glob(UPSAMPLER_PATTERN))
    singles = [overrides.path_for("dit")] if overrides.given("dit") else sorted(
        p for p in folder.glob("ltxv-*.safetensors") if p not in upscalers)
    for found, what in ((singles, "LTX-Video release files"), (upscalers, "upscalers")):
        if len(found) > 1:
            raise VidaxError(f"{folder} holds {len(found)} {what} "
                             f"({', '.join(p.name for p in found)}); keep one per folder")
    tokenizer, te_dir = folder / TOKENIZER_DIR, folder / TEXT_ENCODER_DIR
    specs = {"dit": registry.get(MODEL_TYPE, "dit"), "vae": registry.get(MODEL_TYPE, "vae"),
             "text_encoder": registry.get("t5", "encoder", layout="transformers")}
    files = find_files(
        folder, [Part("text_encoder", specs["text_encoder"], "the T5 text encoder",
                      TEXT_ENCODER_DIR)],
        [Needed("text_encoder_dir", TEXT_ENCODER_DIR, ("config.json",),
                "the T5 text encoder's config")], what="LTX-Video release",
        also_missing=[line for line, ok in (
            ("ltxv-*.safetensors (the DiT + VAE release file)", singles),
            (f"{TOKENIZER_DIR}/spiece.model or tokenizer.json (the T5 tokenizer)",
             (tokenizer / "tokenizer.json").is_file() or (tokenizer / "spiece.model").is_file()))
            if not ok])
    single, te_dir = singles[0], files["text_encoder_dir"]
    with open_checkpoint(single) as ckpt:
        metadata = ckpt.metadata
    # the models' configs by the registry's config_from_metadata (which checks their sections)
    configs = {k: specs[k].config_from_file_metadata(metadata, str(single)) for k in ("dit", "vae")}
    config = metadata_config(metadata, str(single)) or {}
    if configs["dit"] is None or not isinstance(config.get("scheduler"), dict):
        raise VidaxError(f"{single}: the file's metadata has no 'config' with a 'scheduler' "
                         "section (LTX-Video release files carry their models' and scheduler's "
                         "settings there)")
    try:
        configs["text_encoder"] = te = T5Config.from_dict(read_json_config(te_dir / "config.json"))
    except (ValueError, TypeError, KeyError) as e:
        raise VidaxError(f"{te_dir / 'config.json'}: not a T5 encoder config ({e})") from e
    if configs["dit"].caption_channels != te.dim:
        raise VidaxError(f"{single}: the DiT reads text of width "
                         f"{configs['dit'].caption_channels}, but {te_dir} encodes {te.dim}")
    files.update(dit=single, vae=single, tokenizer=tokenizer)
    if upscalers:
        up, specs["upsampler"] = upscalers[0], registry.get(MODEL_TYPE, "upsampler")
        with open_checkpoint(up) as ckpt:
            files["upsampler"], configs["upsampler"] = up, specs[
                "upsampler"].config_from_file_metadata(ckpt.metadata, str(up))
        if configs["upsampler"] is None:
            raise VidaxError(f"{up}: the file's metadata has no 'config' (the upscaler's settings)")
        if configs["upsampler"].in_channels != configs["vae"].latent_channels:
            raise VidaxError(f"{up} upsamples {configs['upsampler'].in_channels}-channel "
                             f"latents; the VAE makes {configs['vae'].latent_channels}")
    allowed = config.get("allowed_inference_steps")
    variant = variant or _FILE_VARIANTS.get(single.stem, "custom")
    return Release(folder, RELEASE_TASK, variant, defaults_for(variant), configs, files, specs,
                   scheduler=RectifiedFlowScheduler.from_dict(config["scheduler"]),
                   allowed_inference_steps=None if allowed is None else tuple(
                       float(a) for a in allowed))


# ----------------------------------------------------------------------------- inputs
def preprocess_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> the float32 [-1, 1] conditioning frame at its own resolution,
    cropped to the aspect ratio of ``height x width``: their
    ``load_image_to_tensor_with_resize_and_crop(just_crop=True)`` (centre crop, blur,
    ``x * 255 / 127.5 - 1``) without the CRF round trip. Each pass resizes it to its size."""
    x = crop_to_aspect(image, height, width).astype(np.float32) / np.float32(255)
    x = gaussian_blur(x) * np.float32(255)
    return x / np.float32(127.5) - np.float32(1)


@dataclass(frozen=True)
class Draws(base.Draws):
    """A pass's explicit random numbers, :class:`vidax.pipelines.base.Draws` (``initial``
    ``[F', h, w, C]``, ``encode`` for the image latent) with ``conditioning``, per step ``[N,
    F', h, w, C]``, the re-noising of the image tokens, and ``decode`` ``[F', h, w, C]``."""

    conditioning: np.ndarray | None = None
    decode: np.ndarray | None = None


def pass_keys(seed: int, index: int) -> jax.Array:
    """Pass ``index``'s four streams: initial, encode, conditioning, decode."""
    return jax.random.split(jax.random.fold_in(seed_key(seed), index), 4)


@dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """:class:`vidax.pipelines.base.Request` with the passes: ``settings`` (the first, or
    only) and ``second_settings``; ``multiscale`` None: multi-scale when the release has the
    spatial upscaler. ``image``: the [-1, 1] frame (:func:`preprocess_image`); ``noise``: the
    first pass's; ``draws``: a :class:`Draws` (the first pass's) or one per pass;
    ``vae_stride``: the VAE's scale factors (time, height, width)."""

    settings: PassSettings
    second_settings: PassSettings
    stg_mode: str
    decode_timestep: float
    decode_noise_scale: float
    image_cond_noise_scale: float
    downscale_factor: float
    multiscale: bool | None = None
    draws: Draws | tuple[Draws | None, ...] | None = None

    #: Besides vidax's: their tokens ``[F'*h*w, C]`` (``randn((b, f*h*w, c))``), ``[C, F', h, w]``.
    noise_layouts: ClassVar[dict[str, str]] = {"the authors' tokens": "NC",
                                               "the authors'": "CTHW"}

    def pass_sizes(self) -> list[tuple[int, int]]:
        """Each pass's (width, height): the requested size, or (multi-scale) their
        ``int(size * downscale_factor)`` floored to the VAE's factor, then twice that."""
        if not self.multiscale:
            return [self.size]
        s = self.vae_stride[1]
        small = tuple(int(n * self.downscale_factor) // s * s for n in self.size)
        if min(small) < s:
            raise VidaxError(f"size {self.size[0]}x{self.size[1]} is too small for the "
                             f"multi-scale pipeline: its first pass at x{self.downscale_factor:.3g}"
                             f" would be {small[0]}x{small[1]}")
        return [small, (2 * small[0], 2 * small[1])]

    def latent_shape_at(self, size: tuple[int, int]) -> tuple[int, int, int, int]:
        width, height = size
        t, s, _ = self.vae_stride
        return (self.frames - 1) // t + 1, height // s, width // s, self.latent_channels

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """The first pass's latent shape (that of ``noise``)."""
        return self.latent_shape_at(self.pass_sizes()[0])

    def given_draws(self, index: int) -> Draws:
        """Pass ``index``'s given random numbers (a single :class:`Draws` is the first's)."""
        draws = self.draws if isinstance(self.draws, tuple) else (self.draws,)
        return (draws[index] if index < len(draws) else None) or Draws()


#: The request fields that come from the release's defaults as they are.
_FROM_DEFAULTS = ("stg_mode", "decode_timestep", "decode_noise_scale", "image_cond_noise_scale",
                  "downscale_factor")


def make_request(task: str, variant: str, prompt: str, *, negative_prompt=None, image=None,
                 last_image=None, steps=None, guidance_scale=None, shift=None,
                 sample_solver=None, noise=None, settings: PassSettings | None = None,
                 second_settings: PassSettings | None = None, multiscale: bool | None = None,
                 draws=None, release: Release | None = None, **options) -> Request:
    """Validate and resolve a generation's options (None: the release's default; the shared
    ones as :meth:`base.Request.resolve`). ``task``: the release's (:data:`RELEASE_TASK`); an
    ``image`` makes it image-to-video. ``steps`` / ``guidance_scale`` replace the first pass's
    step count / per-timestep CFG list; ``settings`` / ``second_settings`` the passes.
    ``release`` gives the VAE's factors and latent width (default: the 0.9.8 VAE's)."""
    if task not in (RELEASE_TASK, *TASKS):
        raise VidaxError(f"LTX-Video task must be one of {TASKS}, got {task!r}")
    refuse("LTX-Video", last_image=(last_image, "it takes one conditioning image "
                                         "(--image)"),
                shift=(shift, "its schedule comes from the release file's scheduler settings "
                       "(resolution-dependent where they say so)"),
                sample_solver=(sample_solver, "it has one sampler (rectified flow)"))
    d = defaults_for(variant)
    settings = settings or d.first_pass
    if steps is not None and settings.timesteps is not None:
        raise VidaxError(f"the {variant} release samples a fixed list of "
                         f"{len(settings.timesteps)} timesteps (a distilled model); "
                         "--steps does not apply")
    factors = (8, 32, 32) if release is None else release.vae_scale_factors
    request = Request.resolve(
        "i2v" if image is not None else "t2v", d, prompt, steps=steps,
        guidance_scale=guidance_scale, size_multiple=factors[1],
        size_why="the VAE's spatial compression", vae_stride=tuple(factors),
        latent_channels=128 if release is None else release.configs["vae"].latent_channels,
        settings=settings, second_settings=second_settings or d.second_pass,
        multiscale=multiscale, draws=draws, **{k: getattr(d, k) for k in _FROM_DEFAULTS},
        **options)
    if steps is not None:
        settings = dataclasses.replace(settings, num_inference_steps=request.steps)
    if guidance_scale is not None:
        settings = dataclasses.replace(settings, guidance_scale=request.guidance_scale)
    width, height = request.size
    request = dataclasses.replace(
        request, prompt=prompt.strip(), settings=settings,
        negative_prompt=(d.negative_prompt if negative_prompt is None else negative_prompt).strip(),
        image=None if image is None else preprocess_image(load_image(image), height, width))
    return request.with_noise(noise)


# ----------------------------------------------------------------------------- guidance
def tone_map_latents(latents: jax.Array, compression: float) -> jax.Array:
    """Their ``tone_map_latents``: ``x * (1 - 0.8 c' sigmoid(4 c' (|x| - 1)))``, ``c' = 0.75
    compression``; the identity at 0."""
    if not 0 <= compression <= 1:
        raise VidaxError(f"tone-map compression must be in [0, 1], got {compression}")
    scale = jnp.float32(compression * 0.75)
    sig = jax.nn.sigmoid(4.0 * scale * (jnp.abs(latents) - 1.0))
    return latents * (1.0 - 0.8 * scale * sig)


@jax.tree_util.register_static
@dataclass(frozen=True)
class StepKind:
    """What changes the traced step (static: a pytree without leaves in the step's inputs):
    which of (negative, prompt, perturbed) run, rescaling, CFG-star, the STG strategy, the
    DiT's position scale."""

    cfg: bool
    stg: bool
    rescale: bool
    cfg_star: bool
    strategy: str
    vae_scale_factors: tuple[int, int, int]

    @property
    def rows(self) -> tuple[int, ...]:
        """Rows of the (prompt, negative) text batch, in their [negative, prompt, prompt] order."""
        return ((1,) if self.cfg else ()) + (0,) + ((0,) if self.stg else ())


def guide(flat: jax.Array, kind: StepKind, g, s, r) -> jax.Array:
    """Their guidance of the DiT's outputs ``[len(kind.rows), n]`` (rows ``[negative, prompt,
    perturbed]`` as the step runs them) -> ``[1, n]``: CFG (CFG-star first), STG, its
    rescaling by torch's unbiased ``.std(dim=1)``."""
    text = pred = flat[1:2] if kind.cfg else flat[:1]
    if kind.cfg:
        uncond = flat[:1]
        if kind.cfg_star:
            alpha = (jnp.sum(text * uncond, axis=1, keepdims=True)
                     / (jnp.sum(uncond ** 2, axis=1, keepdims=True) + 1e-8))
            uncond = alpha * uncond
        pred = uncond + g * (text - uncond)
    if kind.stg:
        pred = pred + s * (text - flat[-1:])
        if kind.rescale:
            def std(x):
                return jnp.std(x, axis=1, ddof=1, keepdims=True)
            pred = pred * (r * (std(text) / std(pred)) + (1 - r))
    return pred


# ----------------------------------------------------------------------------- the pipeline
_encode_text = jax.jit(lambda graphdef, params, ids, mask: nnx.merge(graphdef, params)(ids, mask),
                       static_argnums=0)
_run_module = nnx.jit(lambda module, x: module(x))
_decode_jit = nnx.jit(lambda vae, latents, timestep: vae.decode_normalized(latents, timestep))
_decode_plain = nnx.jit(lambda vae, latents: vae.decode(vae.denormalize(latents)))


class LTXVideoPipeline(PipelineBase):
    """A loaded LTX-Video release; options are :func:`make_request`'s. :meth:`sample` returns
    the final latents (normalised as the DiT sees them; multi-scale: the second pass's),
    :meth:`decode` frames at the request's size; both take ``draws`` (a :class:`Draws` per
    pass)."""

    NAME = "LTX-Video"
    make_request = staticmethod(make_request)
    upsampler = None   # the spatial upscaler, where the folder has it

    def param_dtype(self, component: str):
        """The upscaler in the VAE's dtype."""
        return super().param_dtype("vae" if component == "upsampler" else component)

    def setup(self) -> None:
        from vidax.text import load_tokenizer

        self.tokenizer = load_tokenizer(self.release.files["tokenizer"], seq_len=TEXT_LEN,
                                        clean=None)

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, release=self.release, **options)

    def dit_geometry(self, request: Request) -> memory.DiTGeometry:  # the last pass, CFG+STG
        cfg, shape = self.release.configs["dit"], request.latent_shape_at(request.pass_sizes()[-1])
        return memory.DiTGeometry(3, int(np.prod(shape[:3])), cfg.inner_dim,
                                  cfg.num_attention_heads, 4 * cfg.inner_dim, TEXT_LEN)

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        """One pass of :mod:`~vidax.pipelines.ltx_tiles`' decode at the last pass's size: the
        largest ltx-core tile, or the whole video."""
        size, c = request.pass_sizes()[-1], self.release.configs["vae"]
        return ltx_tiles.vae_geometry(c, request.latent_shape_at(size), size, request.frames,
                                      2 * c.decoder_base_channels / c.patch_size ** 2)

    def encode_text(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """T5 states ``[len(prompts), 256, D]`` (float32) and the masks ``[len(prompts), 256]``."""
        tokens = tokenize(self.tokenizer, prompts)
        graphdef, params = nnx.split(self.text_encoder)
        mask = self._place(tokens.mask)
        hidden = _encode_text(graphdef, params, self._place(tokens.ids), mask)
        return hidden.astype(jnp.float32), mask.astype(jnp.float32)

    def encode_image(self, frame: np.ndarray, noise) -> jax.Array:
        """The normalised latent ``[1, 1, h, w, C]`` of a [-1, 1] frame ``[H, W, 3]``: a
        posterior sample with the standard-normal ``noise [1, h, w, C]``."""
        video = self._place(np.asarray(frame, np.float32)[None, None])
        z = self.vae.encode(video, noise=self._place(np.asarray(noise, np.float32)[None]))
        return self.vae.normalize(z)

    def resolve(self, request: Request, draws=None) -> Request:
        """The request with ``draws`` (a :class:`Draws` per pass), checked against this
        release: its VAE's factors (``vidax generate`` makes requests before loading, with
        the 0.9.8 VAE's); ``multiscale=None``: exactly when the upscaler is loaded."""
        if draws is not None:
            request = dataclasses.replace(request, draws=draws)
        factors = self.release.vae_scale_factors
        channels = self.release.configs["vae"].latent_channels
        has_upsampler = "upsampler" in self.release.specs   # known before it is loaded
        multiscale = has_upsampler if request.multiscale is None else request.multiscale
        if multiscale and not has_upsampler:
            raise VidaxError(f"the multi-scale pipeline needs the spatial upscaler "
                             f"({UPSAMPLER_PATTERN}) in {self.release.folder}")
        if request.stg_mode not in SKIP_LAYER_STRATEGIES:
            raise VidaxError(f"stg_mode {request.stg_mode!r} is not one of "
                             f"{SKIP_LAYER_STRATEGIES}")
        check_frames(request.frames, factors[0])
        check_size(request.size, factors[1], "the VAE's spatial compression")
        resolved = dataclasses.replace(request, vae_stride=factors, latent_channels=channels,
                                       multiscale=multiscale, noise=None)
        return resolved if request.noise is None else resolved.with_noise(
            request.noise.reshape(-1, request.latent_channels))

    # ------------------------------------------------------------------------- sampling
    def __call__(self, prompt: str | None = None, *, request: Request | None = None,
                 draws=None, memory_check: bool = True, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]`` (:meth:`sample`'s latents, :meth:`decode`)."""
        request = self.resolve(self._request(prompt, request, options), draws)
        return self.decode(self.sample(request=request, memory_check=memory_check), request)

    def prepare(self, request: Request) -> Run:
        """The first pass: the text encoded (for every pass), its latents and steps."""
        request = self.resolve(request)
        with self._progress.phase("encoding the prompt and the negative prompt"):
            context, context_mask = self.encode_text([request.prompt, request.negative_prompt])
        return self.prepare_pass(request, 0, {"context": context, "context_mask": context_mask})

    def prepare_pass(self, request: Request, index: int, text: dict, start=None) -> Run:
        """Pass ``index`` (one call of their ``LTXVideoPipeline``, ``output_type="latent"``);
        ``start``: the latents a second pass refines (noised to its first timestep)."""
        settings = (request.settings, request.second_settings)[index]
        size = request.pass_sizes()[index]
        shape = request.latent_shape_at(size)
        schedule = settings.schedule(self.release.scheduler, shape[0] * shape[1] * shape[2])
        allowed = self.release.allowed_inference_steps
        bad = [round(float(t), 4) for t in schedule
               if allowed is not None and round(float(t), 4) not in allowed]
        if bad:
            raise VidaxError(f"timesteps {bad} are not among the release file's "
                             f"allowed_inference_steps {list(allowed)}")
        given, keys = request.given_draws(index), pass_keys(request.seed, index)
        latents = self._place((request.noise if index == 0 and request.noise is not None
                               else given.pick("initial", keys[0], shape))[None])
        if start is not None:
            # their prepare_latents: ``t0 * noise + (1 - t0) * latents``
            t0 = np.float32(schedule[0])
            if not t0 < 1.0:
                raise VidaxError("a pass that refines given latents must start below sigma 1 "
                                 "(skip initial steps or give a timestep list)")
            latents = t0 * latents + (np.float32(1) - t0) * start
        inputs = {**text, "frame_rate": jnp.float32(request.fps), "cond_mask": None,
                  "init": None, "image_noise_scale": jnp.float32(request.image_cond_noise_scale)}
        extra = {"request": request, "size": size, "settings": settings, "shape": shape[:3],
                 "guidance": settings.per_step(schedule)}
        if request.image is not None:
            with self._progress.phase("encoding the image"):
                image_latent = self.encode_image(resize_bilinear(request.image, size[1], size[0]),
                                                 given.pick("encode", keys[1], (1, *shape[1:])))
            latents = latents.at[:, :1].set(image_latent.astype(jnp.float32))
            mask = np.zeros((1, *shape[:3]), np.float32)
            mask[:, 0] = 1.0
            inputs.update(cond_mask=self._place(mask), init=latents.copy())
            extra["conditioning"] = given.pick("conditioning", keys[2], (len(schedule), *shape))
        return Run(latents, RectifiedFlowSteps(schedule), inputs, nnx.split(self.dit),
                   f"{len(schedule)} steps", extra)

    def denoise(self, request: Request, run: Run) -> jax.Array:
        """Each pass through the shared loop, the spatial upscaler between them."""
        request, latents = run.extra["request"], None
        for index in range(len(request.pass_sizes())):
            if index:
                with self._progress.phase("upsampling the latents"):
                    latents = self.upsample(latents)
                run = self.prepare_pass(request, index, {k: run.inputs[k] for k in (
                    "context", "context_mask")}, start=latents)
            latents = super().denoise(dataclasses.replace(request, size=run.extra["size"]), run)
        return latents

    def step_inputs(self, request: Request, run: Run, index: int, t):
        """Step ``index``'s guidance (static :class:`StepKind`, scales, skipped blocks), the
        per-token timestep ``min(t, 1 - mask)`` (the DiT's and the scheduler's), the image
        tokens' re-noising."""
        step, cond_mask = run.extra["guidance"][index], run.inputs["cond_mask"]
        stg = step.stg_scale > 0
        kind = StepKind(step.guidance_scale > 1.0, stg, stg and step.rescaling_scale != 1.0,
                        run.extra["settings"].cfg_star_rescale, request.stg_mode,
                        self.release.vae_scale_factors)
        mask = (skip_layer_mask(self.dit.config.num_layers, len(kind.rows), step.skip_blocks)
                if stg else None)
        timestep = jnp.broadcast_to(jnp.float32(t), (1, *run.extra["shape"]))
        if cond_mask is not None:
            timestep = jnp.minimum(timestep, 1.0 - cond_mask)
        return run.model, timestep, {
            "kind": kind, "sigma": jnp.float32(t), "stg_scale": jnp.float32(step.stg_scale),
            "guidance_scale": jnp.float32(step.guidance_scale),
            "rescaling_scale": jnp.float32(step.rescaling_scale),
            "skip_mask": None if mask is None else jnp.asarray(mask),
            "cond_noise": None if cond_mask is None else self._place(
                run.extra["conditioning"][index][None]),
            "solver": {"timestep": timestep}}

    @classmethod
    def velocity(cls, dit, latents, timestep, inputs, compute_dtype):
        """The DiT on the rows the step runs, with the image tokens re-noised, then
        :func:`guide`."""
        kind = inputs["kind"]
        n, rows = len(kind.rows), jnp.asarray(kind.rows)
        out = dit(jnp.concatenate([cls.after_step(latents, inputs)] * n).astype(compute_dtype),
                  jnp.concatenate([timestep.reshape(1, -1)] * n),
                  inputs["context"][rows].astype(compute_dtype), inputs["context_mask"][rows],
                  frame_rate=inputs["frame_rate"], skip_layer_mask=inputs["skip_mask"],
                  skip_layer_strategy=kind.strategy,
                  vae_scale_factors=kind.vae_scale_factors).astype(jnp.float32)
        pred = guide(out.reshape(n, -1), kind, inputs["guidance_scale"], inputs["stg_scale"],
                     inputs["rescaling_scale"])
        return pred.reshape(latents.shape)

    @staticmethod
    def after_step(latents, inputs):
        """The image tokens (mask 1) at ``init + image_cond_noise_scale * noise * t^2``: what
        the DiT sees and what the step leaves (the scheduler keeps tokens at timestep 0)."""
        mask = inputs["cond_mask"]
        if mask is None:
            return latents
        hard = (mask > 1.0 - _HARD_EPS)[..., None]
        return jnp.where(hard, inputs["init"] + inputs["image_noise_scale"]
                         * inputs["cond_noise"] * inputs["sigma"] ** 2, latents)

    def upsample(self, latents: jax.Array) -> jax.Array:
        """Their ``_upsample_latents`` + ``adain_filter_latent``: the upscaler on un-normalised
        latents, normalised again, then each channel given the mean and (unbiased) std that
        it had before upsampling."""
        up = self.vae.normalize(_run_module(self.upsampler, self.vae.denormalize(latents)))
        def stats(x):
            return x.mean((1, 2, 3), keepdims=True), jnp.std(x, (1, 2, 3), ddof=1, keepdims=True)
        (ref_mean, ref_std), (mean, std) = stats(latents), stats(up)
        return (up - mean) / std * ref_std + ref_mean

    # ------------------------------------------------------------------------- decoding
    def decode_latents(self, latents: jax.Array, timestep: float | None = None,
                       on_chunk=None) -> jax.Array:
        """Normalised latents -> frames in [-1, 1]: the VAE at the decode ``timestep`` where it
        is timestep-conditioned, in ltx-core's default tiles where they split the latent
        (:mod:`vidax.pipelines.ltx_tiles`; their ``inference.py`` decodes whole)."""
        if timestep is None or not self.vae.config.timestep_conditioning:
            return ltx_tiles.decode(self.vae, latents, lambda z: _decode_plain(self.vae, z),
                                    on_chunk=on_chunk)
        t = jnp.float32(timestep)
        return ltx_tiles.decode(self.vae, latents, lambda z: _decode_jit(self.vae, z, t),
                                timestep=t, on_chunk=on_chunk)

    def decode(self, latents, request: Request, draws: Draws | None = None) -> np.ndarray:
        """Normalised latents ``[F', h, w, C]`` -> uint8 frames ``[F, H, W, 3]`` at the
        request's size (:meth:`decode_unit` times 255, truncated, as their ``inference.py``)."""
        return (self.decode_unit(latents, request, draws) * np.float32(255)).astype(np.uint8)

    def decode_unit(self, latents, request: Request, draws: Draws | None = None) -> np.ndarray:
        """Normalised latents -> float32 frames in [0, 1] ``[F, H, W, 3]`` as their pipeline's
        ``output_type="pt"``: decode noise (``draws.decode``, else the last pass's), tone
        mapping, the timestep-conditioned VAE, ``(x / 2 + 0.5).clamp(0, 1)``, and
        (multi-scale) their bilinear resize to the requested size."""
        request = self.resolve(request)
        latents = self._place(self.check_finite(np.asarray(latents, np.float32), "latents")[None])
        last = len(request.pass_sizes()) - 1
        noise = (draws or request.given_draws(last)).pick(
            "decode", pass_keys(request.seed, last)[3], tuple(latents.shape[1:]))
        # the tone mapping of the pass that decodes in the authors' configs (the second);
        # a single pass uses its own where it sets one
        ratio = request.second_settings.tone_map_compression_ratio
        if not request.multiscale and request.settings.tone_map_compression_ratio:
            ratio = request.settings.tone_map_compression_ratio
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[1]} latent frames", unit="chunk") as advance:
            s = jnp.float32(request.decode_noise_scale)
            mixed = latents * (1 - s) + self._place(noise[None]) * s
            video = self.check_finite(np.asarray(self.decode_latents(
                tone_map_latents(mixed, ratio), request.decode_timestep,
                on_chunk=lambda done, total: advance(total=total))[0]), "the video")
        unit = np.clip(video / np.float32(2) + np.float32(0.5), 0, 1)   # their postprocess
        width, height = request.size
        if unit.shape[1:3] != (height, width):
            unit = np.stack([resize_bilinear(frame, height, width) for frame in unit])
        return unit


Pipeline = LTXVideoPipeline
