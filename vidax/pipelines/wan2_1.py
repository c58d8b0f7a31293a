"""Wan2.1 text-, image- and first-last-frame-to-video as the authors' ``generate.py`` runs
them (``WanT2V`` / ``WanI2V`` / ``WanFLF2V.generate``); the guide is docs/models/wan2_1.md.

What is Wan's own on the skeleton (:mod:`vidax.pipelines.base`): UMT5 prompt states zero past
each prompt's length (512 tokens; longer prompts truncated with a warning); for i2v/flf2v the
output size from the first image's aspect ratio within the ``--size`` area, CLIP features of
the image(s) and ``y`` = 4 mask channels + the VAE latents of ``[image, zeros..., (last)]``;
noise ``[(F - 1) / 4 + 1, H/8, W/8, 16]``; UniPC or DPM++ over the authors' shifted schedule;
CFG ``uncond + g (cond - uncond)`` with the DiT on ``[cond, uncond]`` as one batch of 2.

Precision: ``"bf16"`` (default, the authors'): float32 DiT weights, residual stream and
latents with bfloat16 matmuls and attention (their autocast; :mod:`vidax.models.wan2_1.dit`),
UMT5 in bfloat16, VAE and CLIP in float32 (theirs: float16, which XLA cannot run attention in
on TPU/CPU). ``"fp32"``: everything float32 at "highest" matmul precision. On purpose unlike
the authors: FLF2V's mask is built for the requested frame count (theirs is hard-coded to 81
frames); noise comes from JAX's PRNG for a seed (``noise=`` for bit-comparable runs).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.clip.config import CLIPVisionConfig
from vidax.models.clip.model import preprocess
from vidax.models.t5.config import T5Config
from vidax.models.wan2_1.config import (CLIP_DIM, FLF2V_CLIP_TOKENS, WAN2_1_LATENTS_MEAN,
                                        WAN2_1_LATENTS_STD, WanDiTConfig, WanVAEConfig)
from vidax.models.wan2_1.vae import TileSettings, tile_geometry
from vidax.pipelines import base, memory
from vidax.pipelines.base import (Defaults, Needed, Part, PipelineBase, Precision, Release, Run,
                                  cfg_pair, find_files, open_folder)
from vidax.pipelines.inputs import load_image, read_json_config, to_unit_range, tokenize
from vidax.pipelines.inputs import noise_array  # noqa: F401  (the tests' name for it)
from vidax.pipelines.image import center_crop, resize_bicubic
from vidax.schedulers import WAN_SOLVERS
from vidax.sharding import constrain_batch

MODEL_TYPE = "wan2_1"
TASKS = ("t2v", "i2v", "flf2v")
_TASK_NAMES = {"t2v": "text-to-video", "i2v": "image-to-video",
               "flf2v": "first-last-frame-to-video"}
VARIANTS = ("t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b")
#: The DiT's hyper-parameters, next to its weights; the UMT5 tokenizer folder.
CONFIG_FILE = "config.json"
TOKENIZER_DIR = "google/umt5-xxl"
TEXT_LEN = 512
#: The VAE's strides (``vae_stride``) and the DiT's patch: sizes are multiples of 16.
VAE_STRIDE = (4, 8, 8)
PATCH = (1, 2, 2)
SIZE_MULTIPLE = VAE_STRIDE[1] * PATCH[1]
LATENT_CHANNELS = 16
#: The largest frame the Wan-VAE releases make (720p; Wan2.2 TI2V-5B's and Cosmos-Predict2.5's
#: 1280 x 704 and Cosmos3's 1280 x 720 are within it). Up to this many pixels the VAE decodes
#: whole frames, as the authors (and diffusers' pipelines) do; above it, in diffusers'
#: ``enable_tiling()`` tiles (256 px every 192), so the decode's activations stay one tile's.
UNTILED_PIXELS = 1280 * 720
COMPONENTS = {"t2v": ("dit", "vae", "text_encoder"),
              "i2v": ("dit", "vae", "text_encoder", "image_encoder"),
              "flf2v": ("dit", "vae", "text_encoder", "image_encoder")}
ROLES = {"dit": "the DiT", "vae": "the VAE", "text_encoder": "the UMT5 text encoder",
         "image_encoder": "the CLIP image encoder"}
#: ``--dit`` / ``--vae`` / ``--text-encoder`` / ``--image-encoder`` -> the Part each replaces
#: (:mod:`vidax.pipelines.overrides`).
COMPONENT_OPTIONS = {c: c for c in ROLES}

#: ``wan_shared_cfg.sample_neg_prompt``; i2v_14B's, and flf2v_14B's (prefixed once more).
NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，"
    "低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，"
    "毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走")
NEGATIVE_PROMPT_I2V = "镜头晃动，" + NEGATIVE_PROMPT
NEGATIVE_PROMPT_FLF2V = "镜头切换，" + NEGATIVE_PROMPT_I2V


@dataclass(frozen=True, kw_only=True)
class TaskDefaults(Defaults):
    """``generate.py``'s defaults: 81 frames at 16 fps, guidance 5, UniPC; for i2v/flf2v
    ``size`` is an area the image's aspect ratio shapes; ``shift_480p``: i2v's shift at
    832x480 / 480x832."""

    guidance_scale: float = 5.0
    frames: int = 81
    fps: float = 16
    sample_solver: str = "unipc"
    shift_480p: float | None = None

    def shift_for(self, size: tuple[int, int]) -> float:
        if self.shift_480p is not None and tuple(size) in ((832, 480), (480, 832)):
            return self.shift_480p
        return self.shift


DEFAULTS = {
    "t2v-1.3b": TaskDefaults(steps=50, shift=5.0, size=(832, 480),
                             negative_prompt=NEGATIVE_PROMPT),
    "t2v-14b": TaskDefaults(steps=50, shift=5.0, size=(1280, 720),
                            negative_prompt=NEGATIVE_PROMPT),
    "i2v-14b": TaskDefaults(steps=40, shift=5.0, size=(1280, 720),
                            negative_prompt=NEGATIVE_PROMPT_I2V, shift_480p=3.0),
    "flf2v-14b": TaskDefaults(steps=50, shift=16.0, size=(1280, 720),
                              negative_prompt=NEGATIVE_PROMPT_FLF2V),
}
_TASK_VARIANT = {"t2v": "t2v-1.3b", "i2v": "i2v-14b", "flf2v": "flf2v-14b"}


def defaults_for(variant: str, task: str) -> TaskDefaults:
    """The release's defaults; a tiny release (tests, the demo) takes its task's release's,
    but a short clip at a small size in 4 steps."""
    if variant in DEFAULTS:
        return DEFAULTS[variant]
    return dataclasses.replace(DEFAULTS[_TASK_VARIANT[task]], steps=4, frames=9, size=(64, 48))


def tiny_configs(task: str) -> dict:
    """Consistent tiny component configs of a tiny release (tests, the demo): the DiT reads
    UMT5-tiny's width, the VAE keeps 16 latent channels and the released statistics, CLIP
    makes the 257 tokens of 1280 the DiT's image branch is built for."""
    if task not in TASKS:
        raise VidaxError(f"Wan2.1 task must be one of {TASKS}, got {task!r}")
    t5 = T5Config.tiny()
    configs = {
        "dit": dataclasses.replace(WanDiTConfig.tiny(task), text_dim=t5.dim),
        "text_encoder": t5,
        "vae": dataclasses.replace(WanVAEConfig.tiny(), z_dim=LATENT_CHANNELS,
                                   latents_mean=WAN2_1_LATENTS_MEAN,
                                   latents_std=WAN2_1_LATENTS_STD)}
    if task != "t2v":  # 16 x 16 one-pixel patches + the class token; 2 thin blocks
        configs["image_encoder"] = CLIPVisionConfig(
            image_size=16, patch_size=1, dim=CLIP_DIM, mlp_ratio=0.25, num_heads=4,
            num_layers=2, pool_type="token", pre_norm=True, activation="gelu")
    return configs


def component_dtype(policy: Precision, component: str):
    """The DiT keeps float32 weights (its compute dtype is the policy's); the others are
    loaded in their compute dtype."""
    return jnp.float32 if component == "dit" else base.component_dtype(policy, component)


# ----------------------------------------------------------------------------- the release
TOKENIZER = Needed("tokenizer", TOKENIZER_DIR, ("tokenizer.json",), "the UMT5 tokenizer")


def dit_config(path, reader, family: str) -> WanDiTConfig:
    """A DiT's ``config.json`` through ``reader`` (one clear error if it is not one)."""
    try:
        return reader(read_json_config(path))
    except (TypeError, ValueError) as e:
        raise VidaxError(f"{path}: not a {family} DiT config ({e})") from e


def identify(dit: WanDiTConfig, releases: dict, tiny: WanDiTConfig) -> str | None:
    """The variant whose DiT config (``releases``: variant -> config) this is, ``tiny``, or
    None."""
    found = [v for v, config in releases.items() if config == dit]
    return found[0] if found else "tiny" if dit == tiny else None


def check_text_width(where, configs: dict) -> None:
    if configs["dit"].text_dim != configs["text_encoder"].dim:
        raise VidaxError(f"{where}: the DiT reads text of width {configs['dit'].text_dim}, "
                         f"but the text encoder makes {configs['text_encoder'].dim}")


def inspect_folder(folder, variant: str | None = None) -> Release:
    """Find every component of a Wan2.1 release folder without reading a weight; the variant
    (default) is identified from the DiT's ``config.json``."""
    folder = open_folder(folder, "Wan2.1", VARIANTS, variant)
    config_path = folder / CONFIG_FILE
    dit = dit_config(config_path, WanDiTConfig.from_dict, "Wan2.1") \
        if config_path.is_file() else None
    task = dit.model_type if dit else variant.split("-")[0] if variant not in (None, "tiny") \
        else "t2v"
    specs = {c: registry.get(MODEL_TYPE, c) for c in COMPONENTS[task]}
    files = find_files(
        folder, [Part(c, spec, ROLES[c]) for c, spec in specs.items()], [TOKENIZER],
        what=" ".join(filter(None, ("Wan2.1", variant, "release"))),
        also_missing=[f"{CONFIG_FILE} (the DiT's config; or name the variant)"]
        if dit is None and variant in (None, "tiny") else [])
    if dit is not None:
        found = identify(dit, {v: specs["dit"].make_config(v) for v in VARIANTS},
                         tiny_configs(task)["dit"])
        if variant is None and found is None:
            raise VidaxError(f"{config_path} describes a Wan2.1 {task} DiT that is none of the "
                             f"releases ({', '.join(VARIANTS)}); name the variant whose text "
                             "and image encoders it uses")
        if variant not in (None, "tiny") and variant.split("-")[0] != task:
            raise VidaxError(f"{config_path} is a {_TASK_NAMES[task]} DiT, but variant "
                             f"{variant} is {_TASK_NAMES[variant.split('-')[0]]}")
        variant = variant or found
    configs = tiny_configs(task) if variant == "tiny" else {
        c: spec.make_config(variant) for c, spec in specs.items()}
    configs["dit"] = dit or configs["dit"]
    check_text_width(config_path, configs)
    return Release(folder, task, variant, defaults_for(variant, task), configs, files, specs)


# ----------------------------------------------------------------------------- inputs
def output_size_for_image(image_hw: tuple[int, int], max_area: int) -> tuple[int, int]:
    """(height, width) of an i2v/flf2v video: the image's aspect ratio within ``max_area``
    pixels, in whole DiT patches -- the authors' ``lat_h`` / ``lat_w`` lines, float64 as
    theirs (so the same rounding)."""
    h, w = image_hw
    aspect_ratio = h / w
    lat_h = round(np.sqrt(max_area * aspect_ratio) // VAE_STRIDE[1] // PATCH[1] * PATCH[1])
    lat_w = round(np.sqrt(max_area / aspect_ratio) // VAE_STRIDE[2] // PATCH[2] * PATCH[2])
    if lat_h < 1 or lat_w < 1:
        raise VidaxError(f"an area of {max_area} pixels is too small for an image of aspect "
                         f"{w}x{h}: increase --size")
    return lat_h * VAE_STRIDE[1], lat_w * VAE_STRIDE[2]


def match_last_frame(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The authors' handling of a last frame whose size differs from the first's
    (``WanFLF2V.generate``), reproduced as it runs: ``r = max(W1/W2, H1/H2)`` gives
    ``[round(W2 r), round(H2 r)]``, which ``TF.center_crop`` reads as (height, width) -- so
    the last frame is cropped/zero-padded to a swapped size and never resized here (the VAE
    path resizes it later). Same-sized images pass unchanged."""
    (h1, w1), (h2, w2) = first.shape[:2], last.shape[:2]
    if (h1, w1) == (h2, w2):
        return last
    ratio = max(w1 / w2, h1 / h2)
    size = [round(w2 * ratio), round(h2 * ratio)]
    warnings.warn(
        f"the last image is {w2}x{h2} and the first {w1}x{h1}: vidax reproduces the "
        f"authors' handling, a center crop (with zero padding) to {size[1]}x{size[0]} "
        "(their size in (height, width) order read as (width, height)); give two images "
        "of the same size to avoid it", UserWarning, stacklevel=3)
    return center_crop(last, size[0], size[1])


def condition_mask(frames: int, latent_hw: tuple[int, int], last_frame: bool) -> np.ndarray:
    """The i2v/flf2v mask channels ``[T_lat, h, w, 4]``, built as the authors' ``msk``: 1 on
    pixel frame 0 (flf2v: also on the last), frame 0 repeated 4 times, read 4 at a time (so
    flf2v's last frame lands on channel 3 of the last latent frame only)."""
    mask = np.zeros(frames, np.float32)
    mask[0] = 1
    if last_frame:
        mask[-1] = 1
    mask = np.concatenate([np.repeat(mask[:1], VAE_STRIDE[0]), mask[1:]])
    mask = mask.reshape(-1, VAE_STRIDE[0])  # [T_lat, 4]
    return np.broadcast_to(mask[:, None, None, :], (*mask.shape[:1], *latent_hw, 4)).copy()


def condition_channels(mask, latent):
    """``y`` for the DiT: the mask channels, then the condition latent's (the authors'
    ``torch.concat([msk, y])``), channels-last."""
    return jnp.concatenate([jnp.asarray(mask, jnp.float32), jnp.asarray(latent, jnp.float32)],
                           axis=-1)


@dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """:class:`vidax.pipelines.base.Request`; ``image`` / ``last_image`` float32 [-1, 1]
    ``[H, W, 3]`` at their own size (flf2v's last already matched to the first)."""

    last_image: np.ndarray | None = None


#: Step-distillation presets (``distill=``, ``--distill``): what the authors of the
#: step-distillation LoRAs prescribe -- LightX2V's Wan2.1 / Wan2.2 4-step LoRAs
#: (``configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json``,
#: ``configs/distill/wan22/wan_moe_t2v_distill_lora.json`` @ f8aee98): 4 steps of their
#: Euler (:func:`vidax.schedulers.step_distill_sigmas`), shift 5, no CFG (guidance 1: one DiT
#: pass per step). An option given explicitly wins over the preset.
DISTILL = {"lightx2v": {"steps": 4, "shift": 5.0, "sample_solver": "lightx2v",
                        "guidance_scale": 1.0}}


def distilled(distill: str | None, options: dict) -> dict:
    """``options`` with a step-distillation preset's values where they are not given."""
    if distill is None:
        return options
    if distill not in DISTILL:
        raise VidaxError(f"distill {distill!r}: known presets are {', '.join(DISTILL)}")
    return {**options, **{k: v for k, v in DISTILL[distill].items()
                          if options.get(k) is None}}


def make_request(task: str, variant: str, prompt: str, *, image=None, last_image=None,
                 size=None, noise=None, distill: str | None = None, **options) -> Request:
    """Validate and resolve a generation's options (:meth:`base.Request.resolve`'s; None:
    the release's default). ``size`` (width, height) or ``"WxH"``: the frame size for t2v,
    for i2v/flf2v the area the first image's aspect ratio is fitted into (the authors'
    ``--size``). ``negative_prompt`` None or ``""``: the authors' default for the task.
    ``distill``: a step-distillation preset (:data:`DISTILL`), for its LoRA."""
    if task not in TASKS:
        raise VidaxError(f"Wan2.1 task must be one of {TASKS}, got {task!r}")
    options = distilled(distill, options)
    request = Request.resolve(task, defaults_for(variant, task), prompt, size=size,
                              solvers=WAN_SOLVERS, size_multiple=SIZE_MULTIPLE, **options)
    if task == "t2v" and (image is not None or last_image is not None):
        raise VidaxError("a text-to-video release takes no image (--image / --last-image); "
                         "use an i2v or flf2v release")
    if task != "t2v" and image is None:
        raise VidaxError(f"{task} needs the first frame: --image IMAGE")
    if task == "flf2v" and last_image is None:
        raise VidaxError("flf2v needs the last frame too: --last-image IMAGE")
    if task == "i2v" and last_image is not None:
        raise VidaxError("an i2v release takes one image; --last-image needs an flf2v release")
    if task != "t2v":
        first = to_unit_range(load_image(image))
        height, width = output_size_for_image(first.shape[:2], request.size[0] * request.size[1])
        last = None if task == "i2v" else match_last_frame(
            first, to_unit_range(load_image(last_image)))
        request = dataclasses.replace(request, size=(width, height), image=first,
                                      last_image=last)
    return request.with_noise(noise)


def one_pass_or(scale: float):
    """The step's ``guidance_scale`` input: None at 1 -- ``cond + 1 (cond - uncond)`` is the
    prompt's prediction, so the step runs the DiT once, on the prompt alone."""
    return None if scale == 1 else jnp.float32(scale)


# ----------------------------------------------------------------------------- VAE tiles
def vae_tiles(size) -> TileSettings | None:
    """The tiles a Wan-VAE decode of frames ``(width, height)`` runs in: None (whole frames)
    up to :data:`UNTILED_PIXELS`, diffusers' ``enable_tiling()`` defaults above it (the VAE
    then tiles where the frame is larger than one tile, as diffusers' ``_decode`` does)."""
    width, height = size
    return TileSettings() if width * height > UNTILED_PIXELS else None


def vae_geometry(cfg, request) -> memory.VAEGeometry:
    """A Wan-VAE decode chunk for ``request`` (:func:`memory.wan_vae`), over the largest
    spatial tile where :func:`vae_tiles` tiles (one chunk per tile and latent frame, the mid
    block's per-frame attention over the tile's latent pixels)."""
    whole = memory.wan_vae(cfg, request)
    tiles = vae_tiles(request.size)
    if tiles is None:
        return whole
    g = tile_geometry(request.latent_shape, tiled=tiles, config=cfg)
    _, height, width = g.sample
    return dataclasses.replace(whole, height=height, width=width, chunks=g.count,
                               attention=(1, g.latent[1] * g.latent[2], whole.attention[2]),
                               frame_size=request.size)


def decode_latents(vae, latents, on_chunk=None):
    """``vae.decode`` of latents ``[1, T, h, w, C]`` in :func:`vae_tiles`'s tiles."""
    s = vae.config.spatial_stride
    tiles = vae_tiles((s * latents.shape[3], s * latents.shape[2]))
    return vae.decode(latents, tiled=tiles or False, on_chunk=on_chunk)


# ----------------------------------------------------------------------------- the pipeline
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids, mask):
    """UMT5 states, zero past each prompt's length (the authors' ``u[:v]``, then the DiT's
    zero padding)."""
    hidden = nnx.merge(graphdef, params)(ids, mask)
    return jnp.where(mask[..., None] != 0, hidden, jnp.zeros((), hidden.dtype))


@functools.partial(jax.jit, static_argnums=0)
def _encode_image(graphdef, params, pixels):
    """CLIP tokens after all but the last block (the authors' ``use_31_block=True``)."""
    return nnx.merge(graphdef, params)(pixels, num_blocks=-1)


class WanPipeline(PipelineBase):
    """A loaded Wan2.1 release (:class:`vidax.pipelines.base.PipelineBase`); options are
    :func:`make_request`'s."""

    NAME = "Wan2.1"
    CHEAPER_GUIDANCE = True
    PAIRED_INPUTS = ("context",)
    make_request = staticmethod(make_request)

    def param_dtype(self, component: str):
        return component_dtype(self.precision, component)

    def setup(self) -> None:
        from vidax.text import Tokenizer

        self.tokenizer = Tokenizer(self.release.files["tokenizer"],
                                   seq_len=self.release.configs["dit"].text_len)

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """``[len(prompts), 512, D]``: UMT5 states, zero past each prompt's tokens. A prompt
        over 512 tokens keeps its first 511 and the EOS (the authors' truncation), with a
        warning."""
        tokens = tokenize(self.tokenizer, prompts)
        graphdef, params = nnx.split(self.text_encoder)
        return _encode_text(graphdef, params, self._place(tokens.ids), self._place(tokens.mask))

    def encode_images(self, request: Request) -> jax.Array:
        """CLIP features ``[1, 257, 1280]`` (flf2v: ``[1, 514, 1280]``, first then last)."""
        images = [request.image] + ([request.last_image] if request.task == "flf2v" else [])
        size = self.image_encoder.config.image_size
        pixels = preprocess(images, size).astype(self.precision.image_encoder)
        graphdef, params = nnx.split(self.image_encoder)
        tokens = _encode_image(graphdef, params, self._place(pixels))
        return tokens.astype(jnp.float32).reshape(1, -1, tokens.shape[-1])

    def condition(self, request: Request) -> jax.Array:
        """``y [1, T_lat, h, w, 20]``: mask channels, then the VAE latents of the condition
        video (the image(s) resized to the output size, zeros elsewhere)."""
        width, height = request.size
        video = np.zeros((1, request.frames, height, width, 3), np.float32)
        video[0, 0] = resize_bicubic(request.image, height, width)
        if request.task == "flf2v":
            video[0, -1] = resize_bicubic(request.last_image, height, width)
        latent = self.vae.encode(video)  # the VAE moves it to the device chunk by chunk
        mask = condition_mask(request.frames, latent.shape[2:4], request.task == "flf2v")
        return condition_channels(mask[None], latent)

    def conditions(self, request: Request) -> dict:
        """The step's image inputs: CLIP features and ``y``."""
        return {"clip_fea": self.encode_images(request), "y": self.condition(request)}

    def guidance_text(self, request: Request) -> str:
        return f"guidance {request.guidance_scale:g}"

    def prepare(self, request: Request) -> Run:
        with self._progress.phase("encoding the prompt and the negative prompt"):
            inputs = {"context": self.encode_text([request.prompt, request.negative_prompt]),
                      "guidance_scale": one_pass_or(request.guidance_scale)}
        if request.image is not None:
            plural = "s" if request.last_image is not None else ""
            with self._progress.phase(f"encoding the image{plural}"):
                inputs.update(self.conditions(request))
        scheduler = WAN_SOLVERS[request.sample_solver](request.steps, request.shift)
        return Run(self.initial_noise(request), scheduler, inputs,
                   None if self.dit is None else nnx.split(self.dit),
                   f"{request.sample_solver} shift {request.shift:g}, "
                   f"{self.guidance_text(request)}")

    def step_cache_key(self, request: Request | None) -> str:
        """MagCache's authors calibrate the i2v 14B per checkpoint, 480p or 720p: the 480p
        ratios at 832x480 / 480x832 (as the 480p shift), the 720p ones otherwise."""
        key = super().step_cache_key(request)
        if self.task != "i2v" or request is None:
            return key
        return key + ("@480p" if tuple(request.size) in ((832, 480), (480, 832)) else "@720p")

    def dit_geometry(self, request: Request):
        """The ``[cond, uncond]`` batch of the DiT's tokens, its text (and CLIP) context."""
        cfg = self.component_config("dit")
        context = cfg.text_len + (FLF2V_CLIP_TOKENS if cfg.has_image_branch else 0)
        return memory.DiTGeometry(2, memory.patches(request.latent_shape, cfg.patch_size),
                                  cfg.dim, cfg.num_heads, cfg.ffn_dim, context, split=True)

    def vae_geometry(self, request: Request):
        return vae_geometry(self.component_config("vae"), request)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """The VAE over whole frames up to 720p, in spatial tiles above (:func:`vae_tiles`)."""
        return decode_latents(self.vae, latents, on_chunk)

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        """The DiT on the ``[cond, uncond]`` batch, or on the prompt alone (guidance 1: one
        pass); ``t`` a scalar or per token."""
        n = x.shape[0]
        pair = cfg_pair if n == 2 else (lambda a: a)
        return dit(x, jnp.broadcast_to(t, (n, *jnp.shape(t))),
                   constrain_batch(inputs["context"][:n]), clip_fea=pair(inputs.get("clip_fea")),
                   y=pair(inputs.get("y")), compute_dtype=compute_dtype)


Pipeline = WanPipeline
