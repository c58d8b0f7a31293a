"""Wan2.1 text-to-video, image-to-video and first-last-frame-to-video, as the authors run them.

Mirrors Wan-Video/Wan2.1's ``generate.py`` with ``wan/text2video.py`` (``WanT2V.generate``),
``wan/image2video.py`` (``WanI2V.generate``) and ``wan/first_last_frame2video.py``
(``WanFLF2V.generate``):

1. Text: the prompt and the negative prompt (default: the authors' ``sample_neg_prompt`` of
   the task) are tokenized to 512 tokens (longer prompts are truncated, with a warning) and
   encoded by UMT5; each is cut to its real length and zero-padded back to 512, which is what
   the authors' DiT does with their unpadded ``context`` list.
2. Images (i2v, flf2v): the output size follows the first image's aspect ratio within the
   area ``--size`` gives (their ``max_area`` logic, :func:`output_size_for_image`). CLIP
   encodes the image(s) at their own size (its preprocessing resizes to 224); the VAE encodes
   the condition video ``[image, zeros...]`` (flf2v: ``[first, zeros..., last]``), each image
   bicubic-resized to the output size. ``y`` = the 4 mask channels then the 16 condition
   latent channels (:func:`condition_channels`), concatenated after the noisy latents.
3. Noise: ``[T_lat, H/8, W/8, 16]`` with ``T_lat = (F - 1) / 4 + 1``, from a seed (JAX's PRNG;
   the authors' CUDA generator cannot be reproduced) or given (``noise=``, see
   :func:`noise_array` for the layouts accepted).
4. Sampling: the authors' UniPC (default) or DPM++ sampler with their shifted schedule.
   Classifier-free guidance ``uncond + g * (cond - uncond)``. One jitted function does a
   whole step -- the DiT on the conditional and the unconditional input as one batch of 2
   (the authors make two calls; per sample the computation is identical), the guidance and
   the scheduler update -- with the latents and the scheduler state donated; Python loops
   over the steps.
5. Decoding: the VAE, chunk by chunk; frames in [-1, 1] become uint8 as the authors'
   ``cache_video`` makes them (:func:`vidax.video.to_uint8`).

Precision policies (``precision=``):

* ``"bf16"`` (default, the authors' settings): the DiT keeps float32 weights, residual stream
  and latents, and computes its matmuls and attention in bfloat16 with the authors' float32
  islands (their ``torch.amp.autocast(dtype=bfloat16)``; exactly what runs in which dtype is
  listed in :mod:`vidax.models.wan2_1.dit`); UMT5 runs in bfloat16 (``t5_dtype``), the VAE
  in float32. CLIP runs in float32 where the authors use float16 (``clip_dtype``): XLA has
  no float16 attention on TPU or CPU, and bfloat16 would round more than their float16 does;
  the encoder runs once per video, so float32 costs nothing that matters.
* ``"fp32"``: everything in float32, and every matmul at "highest" precision (no TF32).

Where vidax differs from the authors' code, on purpose:

* FLF2V builds its mask for the requested frame count; the authors' hard-code 81 frames
  there (their code fails for any other count), so at 81 frames both are the same.
* Noise comes from JAX's PRNG for a seed (pass ``noise=`` for bit-comparable runs).
"""

from __future__ import annotations

import contextlib
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
from vidax.models.clip.model import CLIPVisionConfig, preprocess
from vidax.models.clip.model import _cubic_resize_matrix as _torch_bicubic_matrix
from vidax.models.t5.model import T5Config
from vidax.models.wan2_1.dit import CLIP_DIM, WanDiTConfig
from vidax.pipelines.common import verify_component as common_verify
from vidax.pipelines.common import (  # noqa: F401  (re-exported: the CLI's family API)
    PipelineBase,
    PRECISIONS,
    Precision,
    Progress,
    load_image,
    number,
    parse_size,
    precision_policy,
    to_unit_range,
)
from vidax.schedulers import SAMPLE_SOLVERS
from vidax.sharding import constrain_batch, shard_batch, use_mesh

MODEL_TYPE = "wan2_1"
TASKS = ("t2v", "i2v", "flf2v")
_TASK_NAMES = {"t2v": "text-to-video", "i2v": "image-to-video",
               "flf2v": "first-last-frame-to-video"}
VARIANTS = ("t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b")

# ----------------------------------------------------------------------------- release layout
#: The DiT's hyper-parameters, next to its weights (``WanModel.from_pretrained``).
CONFIG_FILE = "config.json"
#: The UMT5 tokenizer folder (the authors' ``t5_tokenizer``); vidax reads its tokenizer.json.
TOKENIZER_DIR = "google/umt5-xxl"
TEXT_LEN = 512
#: The Wan2.1 VAE's strides (``vae_stride``) and the DiT's patch (``patch_size``).
VAE_STRIDE = (4, 8, 8)
PATCH = (1, 2, 2)
#: Output sizes must be multiples of this (VAE stride x DiT patch).
SIZE_MULTIPLE = VAE_STRIDE[1] * PATCH[1]
LATENT_CHANNELS = 16

# ----------------------------------------------------------------------------- the authors' data
#: ``wan_shared_cfg.sample_neg_prompt`` (``wan/configs/shared_config.py``).
NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，"
    "低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，"
    "毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走")
#: i2v_14B's (``wan/configs/wan_i2v_14B.py``) and flf2v_14B's (a copy of i2v_14B's config,
#: prefixed once more; ``wan/configs/__init__.py``).
NEGATIVE_PROMPT_I2V = "镜头晃动，" + NEGATIVE_PROMPT
NEGATIVE_PROMPT_FLF2V = "镜头切换，" + NEGATIVE_PROMPT_I2V


@dataclass(frozen=True)
class TaskDefaults:
    """What the authors' ``generate.py`` uses when a flag is not given.

    ``size`` is (width, height); for i2v/flf2v it is an area (``MAX_AREA_CONFIGS``) and the
    first image's aspect ratio shapes the frame. ``shift_480p``: the shift used instead when
    the size is 832x480 or 480x832 (i2v only).
    """

    steps: int
    shift: float
    guidance_scale: float
    size: tuple[int, int]
    negative_prompt: str
    frames: int = 81
    fps: int = 16
    sample_solver: str = "unipc"
    shift_480p: float | None = None

    def shift_for(self, size: tuple[int, int]) -> float:
        if self.shift_480p is not None and tuple(size) in ((832, 480), (480, 832)):
            return self.shift_480p
        return self.shift


#: Per variant. generate.py: 50 steps (40 for "i2v" tasks), shift 5.0 (i2v at 480p: 3.0;
#: flf2v: 16), guidance 5.0, 81 frames, 16 fps, --size 1280*720 (t2v-1.3B supports only
#: 832*480 / 480*832).
DEFAULTS = {
    "t2v-1.3b": TaskDefaults(50, 5.0, 5.0, (832, 480), NEGATIVE_PROMPT),
    "t2v-14b": TaskDefaults(50, 5.0, 5.0, (1280, 720), NEGATIVE_PROMPT),
    "i2v-14b": TaskDefaults(40, 5.0, 5.0, (1280, 720), NEGATIVE_PROMPT_I2V, shift_480p=3.0),
    "flf2v-14b": TaskDefaults(50, 16.0, 5.0, (1280, 720), NEGATIVE_PROMPT_FLF2V),
}
#: The variant whose defaults each task uses when the release is not one of the four
#: (the tiny test/demo releases): everything but frames, size and steps.
_TASK_VARIANT = {"t2v": "t2v-1.3b", "i2v": "i2v-14b", "flf2v": "flf2v-14b"}


def defaults_for(variant: str, task: str) -> TaskDefaults:
    if variant in DEFAULTS:
        return DEFAULTS[variant]
    # tiny: a short clip at a small size, so the demo and the tests run in seconds
    return dataclasses.replace(DEFAULTS[_TASK_VARIANT[task]], steps=4, frames=9, size=(64, 48))


# ----------------------------------------------------------------------------- tiny releases
def tiny_configs(task: str) -> dict:
    """One consistent set of tiny component configs for a tiny Wan2.1 release (tests, the
    demo): the DiT reads UMT5-tiny's width, the VAE keeps 16 latent channels (and the
    released statistics) because the DiT and the authors' i2v noise assume 16, and the CLIP
    tower makes 257 tokens of 1280 (the DiT's image branch is built for exactly that)."""
    from vidax.models.wan2_1.vae import WAN2_1_LATENTS_MEAN, WAN2_1_LATENTS_STD, WanVAEConfig

    if task not in TASKS:
        raise VidaxError(f"Wan2.1 task must be one of {TASKS}, got {task!r}")
    t5 = T5Config.tiny()
    configs = {
        "dit": dataclasses.replace(WanDiTConfig.tiny(task), text_dim=t5.dim),
        "text_encoder": t5,
        "vae": dataclasses.replace(WanVAEConfig.tiny(), z_dim=LATENT_CHANNELS,
                                   latents_mean=WAN2_1_LATENTS_MEAN,
                                   latents_std=WAN2_1_LATENTS_STD),
    }
    if task != "t2v":
        # 16 x 16 one-pixel patches + the class token = 257 tokens; 1280 wide, 2 thin blocks.
        configs["image_encoder"] = CLIPVisionConfig(
            image_size=16, patch_size=1, dim=CLIP_DIM, mlp_ratio=0.25, num_heads=4,
            num_layers=2, pool_type="token", pre_norm=True, activation="gelu")
    return configs


# ----------------------------------------------------------------------------- precision
def component_dtype(policy: Precision, component: str):
    """The parameter dtype a component is loaded in: the DiT keeps float32 weights (its
    compute dtype is the policy's), the others are stored in their compute dtype."""
    return {"dit": jnp.float32, "vae": policy.vae, "text_encoder": policy.text_encoder,
            "image_encoder": policy.image_encoder}[component]


def load_component(progress, model_type: str, component: str, path: Path, config, dtype,
                   mesh=None):
    """One component through ``vidax.load`` (verified 1:1), with a progress bar and its
    report's headline."""
    with progress.phase(f"loading {component} ({path.name})") as advance:
        model, report = loading.load_with_report(
            model_type, component, path, config=config, dtype=dtype, mesh=mesh,
            progress=lambda done, total, name: advance(total=total))
    progress.line(f"  {component}: {report.headline()}")
    return model


# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True)
class Release:
    """A Wan2.1 release folder: its task, variant, the DiT's config and each component's file."""

    folder: Path
    task: str
    variant: str
    configs: dict
    files: dict  # component -> Path; "tokenizer" -> the tokenizer folder

    @property
    def defaults(self) -> TaskDefaults:
        return defaults_for(self.variant, self.task)


_COMPONENTS = {"t2v": ("dit", "vae", "text_encoder"),
               "i2v": ("dit", "vae", "text_encoder", "image_encoder"),
               "flf2v": ("dit", "vae", "text_encoder", "image_encoder")}
ROLES = {"dit": "the DiT", "vae": "the VAE", "text_encoder": "the UMT5 text encoder",
          "image_encoder": "the CLIP image encoder", "tokenizer": "the UMT5 tokenizer",
          "config": "the DiT's config"}


def _variant_task(variant: str) -> str:
    return variant.split("-")[0]


def component_files(folder: Path, component: str, model_type: str = MODEL_TYPE
                     ) -> Path | None:
    """The component's file in ``folder`` by the authors' file names; None if absent."""
    spec = registry.get(model_type, component)
    if not any(any(folder.glob(pattern)) for pattern in spec.files):
        return None
    return loading.find_files(folder, spec)


def read_json_config(path: Path) -> dict:
    """A DiT's ``config.json`` as a dict (one clear error if it is not one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{path}: not a readable JSON file ({e})") from e
    if not isinstance(data, dict):
        raise VidaxError(f"{path}: expected a JSON object of WanModel settings")
    return data


def _read_dit_config(path: Path) -> WanDiTConfig:
    data = read_json_config(path)
    try:
        return WanDiTConfig.from_dict(data)
    except (TypeError, ValueError) as e:
        raise VidaxError(f"{path}: not a Wan2.1 DiT config ({e})") from e


def _identify(dit: WanDiTConfig) -> str | None:
    """The variant whose DiT config this is (or ``tiny``), else None."""
    spec = registry.get(MODEL_TYPE, "dit")
    for variant in VARIANTS:
        if spec.make_config(variant) == dit:
            return variant
    if tiny_configs(dit.model_type)["dit"] == dit:
        return "tiny"
    return None


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find every component of a Wan2.1 release folder without reading a weight.

    ``variant``: one of :data:`VARIANTS` or ``"tiny"``; default: identified from the DiT's
    ``config.json``. Raises one :class:`VidaxError` naming the folder and every missing file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a Wan2.1 release folder, as the "
                         "authors publish it)")
    if variant is not None and variant not in (*VARIANTS, "tiny"):
        raise VidaxError(f"unknown Wan2.1 variant {variant!r}; known: {', '.join(VARIANTS)} "
                         "(and 'tiny')")
    config_path = folder / CONFIG_FILE
    dit_config = _read_dit_config(config_path) if config_path.is_file() else None

    task = dit_config.model_type if dit_config else (
        _variant_task(variant) if variant and variant != "tiny" else None)
    components = _COMPONENTS[task] if task else _COMPONENTS["t2v"]
    files, missing = {}, []
    for component in components:
        path = component_files(folder, component)
        if path is None:
            spec = registry.get(MODEL_TYPE, component)
            missing.append(f"{spec.files[-1]} ({ROLES[component]})")
        files[component] = path
    tokenizer = folder / TOKENIZER_DIR
    if not (tokenizer / "tokenizer.json").is_file():
        missing.append(f"{TOKENIZER_DIR}/tokenizer.json ({ROLES['tokenizer']})")
    files["tokenizer"] = tokenizer
    if dit_config is None and variant in (None, "tiny"):
        missing.append(f"{CONFIG_FILE} ({ROLES['config']}; or name the variant)")
    if missing:
        what = f"Wan2.1 {variant} release" if variant else "Wan2.1 release"
        raise VidaxError(f"{folder} is not a complete {what} folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")

    if dit_config is not None:
        found = _identify(dit_config)
        if variant is None:
            if found is None:
                raise VidaxError(
                    f"{config_path} describes a Wan2.1 {dit_config.model_type} DiT that is none "
                    f"of the releases ({', '.join(VARIANTS)}); name the variant whose text and "
                    "image encoders it uses")
            variant = found
        elif _variant_task(variant) != dit_config.model_type and variant != "tiny":
            raise VidaxError(f"{config_path} is a {_TASK_NAMES[dit_config.model_type]} DiT, "
                             f"but variant {variant} is "
                             f"{_TASK_NAMES[_variant_task(variant)]}")
    task = dit_config.model_type if dit_config else _variant_task(variant)

    if variant == "tiny":
        configs = tiny_configs(task)
    else:
        configs = {c: registry.get(MODEL_TYPE, c).make_config(variant)
                   for c in _COMPONENTS[task]}
    if dit_config is not None:
        configs["dit"] = dit_config
    if configs["dit"].text_dim != configs["text_encoder"].dim:
        raise VidaxError(f"{config_path}: the DiT reads text of width "
                         f"{configs['dit'].text_dim}, but the {variant} text encoder makes "
                         f"{configs['text_encoder'].dim}")
    return Release(folder, task, variant, configs, files)


# ----------------------------------------------------------------------------- inputs
def check_size(size: tuple[int, int], multiple: int = SIZE_MULTIPLE) -> tuple[int, int]:
    """Width and height must be positive multiples of ``multiple``: 16 here (VAE stride 8 x
    DiT patch 2); Wan2.2 TI2V-5B passes 32 (its VAE's stride 16)."""
    width, height = (int(s) for s in size)
    if width < multiple or height < multiple or width % multiple or height % multiple:
        def nearest(n):
            return max(multiple, multiple * round(n / multiple))
        raise VidaxError(f"size {width}x{height}: width and height must be multiples of "
                         f"{multiple} (the VAE's {multiple // PATCH[1]}x downsampling times the "
                         f"DiT's 2x2 patches); the nearest valid size is "
                         f"{nearest(width)}x{nearest(height)}")
    return width, height


def check_frames(frames: int) -> int:
    """The frame count must be 4n+1 (the VAE turns 4n+1 frames into n+1 latent frames)."""
    if not isinstance(frames, (int, np.integer)) or frames < 1 or (frames - 1) % VAE_STRIDE[0]:
        lower = max(1, (int(frames) - 1) // 4 * 4 + 1) if isinstance(frames, (int, np.integer)) \
            else 81
        raise VidaxError(f"frames {frames!r}: the frame count must be 4n+1 (1, 5, 9, ..., 81), "
                         f"because the VAE turns 4n+1 frames into n+1 latent frames; e.g. "
                         f"{lower} or {lower + 4}")
    return int(frames)


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


def resize_bicubic(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """float32 ``[H, W, 3]`` -> ``[height, width, 3]`` as PyTorch's ``F.interpolate(...,
    mode='bicubic')`` (align_corners False, no antialiasing, no clamping): what the authors
    apply to the [-1, 1] image before the VAE encodes it."""
    rows = _torch_bicubic_matrix(image.shape[0], height).astype(np.float64)
    cols = _torch_bicubic_matrix(image.shape[1], width).astype(np.float64)
    out = np.einsum("oh,hwc,pw->opc", rows, image.astype(np.float64), cols)
    return out.astype(np.float32)


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """torchvision's ``F.center_crop`` of a ``[H, W, C]`` image to (height, width): zero
    padding first where the crop is larger, then a crop whose offsets round half to even."""
    h, w = image.shape[:2]
    if height > h or width > w:
        top = (height - h) // 2 if height > h else 0
        left = (width - w) // 2 if width > w else 0
        bottom = (height - h + 1) // 2 if height > h else 0
        right = (width - w + 1) // 2 if width > w else 0
        image = np.pad(image, ((top, bottom), (left, right), (0, 0)))
        h, w = image.shape[:2]
    top = int(round((h - height) / 2.0))
    left = int(round((w - width) / 2.0))
    return image[top:top + height, left:left + width]


def match_last_frame(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The authors' handling of a last frame whose size differs from the first's
    (``WanFLF2V.generate``), reproduced as it runs: a ratio ``r = max(W1/W2, H1/H2)`` gives
    ``[round(W2 r), round(H2 r)]``, which ``TF.center_crop`` reads as (height, width) -- so
    the last frame is cropped/zero-padded to a swapped size and never resized here (the VAE
    path resizes it to the output size later). Same-sized images pass unchanged."""
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


def noise_array(noise, latent_shape: tuple[int, int, int, int]) -> np.ndarray:
    """Initial noise as float32 ``[T, h, w, C]`` (vidax's layout).

    Accepted: the authors' layout ``[C, T, h, w]`` -- what ``torch.randn(16, T, h, w)`` in
    their ``generate`` makes, e.g. dumped with ``np.save(f, noise.cpu().numpy())`` -- or
    vidax's ``[T, h, w, C]``, either optionally with a leading batch axis of 1. When both
    readings fit (only if T = h = w = C), the authors' is taken. ``noise`` may be a path to
    a ``.npy`` file.
    """
    if isinstance(noise, (str, os.PathLike)):
        path = Path(noise)
        try:
            noise = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise VidaxError(f"{path}: not a readable .npy array ({e})") from e
    array = np.asarray(noise)
    t, h, w, c = latent_shape
    authors, ours = (c, t, h, w), (t, h, w, c)
    if array.ndim == 5 and array.shape[0] == 1:
        array = array[0]
    if array.shape == authors:
        array = array.transpose(1, 2, 3, 0)
    elif array.shape != ours:
        raise VidaxError(f"noise of shape {list(np.shape(noise))} does not fit this video: "
                         f"expected the authors' layout {list(authors)} [C, T, H/8, W/8] or "
                         f"vidax's {list(ours)} [T, H/8, W/8, C]")
    if not np.issubdtype(array.dtype, np.floating) or not np.isfinite(array).all():
        raise VidaxError("noise must be finite floating-point numbers")
    return np.ascontiguousarray(array, dtype=np.float32)


def condition_mask(frames: int, latent_hw: tuple[int, int], last_frame: bool) -> np.ndarray:
    """The i2v/flf2v mask channels ``[T_lat, h, w, 4]``, built as the authors build ``msk``:
    1 on pixel frame 0 (flf2v: also on the last), 0 elsewhere; frame 0 repeated 4 times; then
    read 4 at a time, so channel ``c`` of latent frame ``t`` is entry ``4t + c``. (For flf2v
    the last frame lands on channel 3 of the last latent frame only.)"""
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


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class Request:
    """One generation, every option resolved and validated.

    ``size`` is the output (width, height); ``image`` / ``last_image`` are float32 [-1, 1]
    ``[H, W, 3]`` at their own size (flf2v's last already matched to the first);
    ``noise`` is ``[T, h, w, C]`` or None (then drawn from ``seed``). ``latent_channels``
    and ``vae_stride`` describe the VAE's latents (the Wan2.1 VAE's unless a Wan2.2 release
    says otherwise).
    """

    task: str
    prompt: str
    negative_prompt: str
    frames: int
    size: tuple[int, int]
    steps: int
    guidance_scale: float
    shift: float
    sample_solver: str
    seed: int
    fps: float
    noise: np.ndarray | None = None
    image: np.ndarray | None = None
    last_image: np.ndarray | None = None
    latent_channels: int = LATENT_CHANNELS
    vae_stride: tuple[int, int, int] = VAE_STRIDE

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        width, height = self.size
        stride = self.vae_stride
        return ((self.frames - 1) // stride[0] + 1, height // stride[1], width // stride[2],
                self.latent_channels)


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, last_image=None, frames: int | None = None,
                 size: tuple[int, int] | str | None = None, steps: int | None = None,
                 guidance_scale: float | None = None, shift: float | None = None,
                 sample_solver: str | None = None, seed: int = 0, noise=None,
                 fps: float | None = None) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``size`` (width, height) or ``"WxH"``: the frame size for t2v; for i2v/flf2v the pixel
    area (width x height) that the first image's aspect ratio is fitted into, as the authors'
    ``--size``. ``negative_prompt`` None or ``""``: the authors' default for the task.
    """
    if task not in TASKS:
        raise VidaxError(f"Wan2.1 task must be one of {TASKS}, got {task!r}")
    d = defaults_for(variant, task)
    if not isinstance(prompt, str):
        raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
    frames = check_frames(d.frames if frames is None else frames)
    if isinstance(size, str):
        size = parse_size(size)
    size = check_size(d.size if size is None else size)
    steps = d.steps if steps is None else steps
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise VidaxError(f"steps must be a positive integer, got {steps!r}")
    guidance_scale = number("guidance_scale", d.guidance_scale if guidance_scale is None
                             else guidance_scale, positive=False)
    shift = number("shift", d.shift_for(size) if shift is None else shift)
    sample_solver = sample_solver or d.sample_solver
    if sample_solver not in SAMPLE_SOLVERS:
        raise VidaxError(f"sample_solver must be one of {', '.join(SAMPLE_SOLVERS)}, got "
                         f"{sample_solver!r}")
    fps = number("fps", d.fps if fps is None else fps)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VidaxError(f"seed must be a non-negative integer, got {seed!r}")

    if task == "t2v" and (image is not None or last_image is not None):
        raise VidaxError("a text-to-video release takes no image (--image / --last-image); "
                         "use an i2v or flf2v release")
    if task != "t2v" and image is None:
        raise VidaxError(f"{task} needs the first frame: --image IMAGE")
    if task == "flf2v" and last_image is None:
        raise VidaxError("flf2v needs the last frame too: --last-image IMAGE")
    if task == "i2v" and last_image is not None:
        raise VidaxError("an i2v release takes one image; --last-image needs an flf2v release")
    first = last = None
    if task != "t2v":
        first = to_unit_range(load_image(image))
        height, width = output_size_for_image(first.shape[:2], size[0] * size[1])
        size = (width, height)
        if task == "flf2v":
            last = match_last_frame(first, to_unit_range(load_image(last_image)))
    request = Request(task, prompt, negative_prompt or d.negative_prompt, frames, size,
                      int(steps), guidance_scale, shift, sample_solver, int(seed), fps,
                      image=first, last_image=last)
    if noise is not None:
        request = dataclasses.replace(request, noise=noise_array(noise, request.latent_shape))
    return request


# ----------------------------------------------------------------------------- progress
# ----------------------------------------------------------------------------- jitted pieces
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids, mask):
    """UMT5 hidden states, zero past each prompt's length (the authors' ``u[:v]`` followed
    by the DiT's zero padding)."""
    hidden = nnx.merge(graphdef, params)(ids, mask)
    return jnp.where(mask[..., None] != 0, hidden, jnp.zeros((), hidden.dtype))


@functools.partial(jax.jit, static_argnums=0)
def _encode_image(graphdef, params, pixels):
    """CLIP tokens after all but the last block (the authors' ``use_31_block=True``)."""
    return nnx.merge(graphdef, params)(pixels, num_blocks=-1)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(4, 5))
def _denoise_step(graphdef, solver_step, compute_dtype, params, latents, state, index, t,
                  context, clip_fea, y, guidance_scale, keep=None):
    """One sampling step: the DiT on [cond, uncond] as one batch of 2, classifier-free
    guidance ``uncond + g * (cond - uncond)``, the scheduler update. ``latents [1, T, h, w, C]``
    and the scheduler state are donated; ``context [2, 512, D]`` is (prompt, negative).

    ``t``: a scalar, or one timestep per DiT token ``[L]`` (Wan2.2 TI2V). ``keep``: None, or
    ``(mask, z)`` -- after the update the latents become ``(1 - mask) z + mask latents``
    (Wan2.2 TI2V's image-to-video keeps its encoded first frame so)."""
    dit = nnx.merge(graphdef, params)
    # The [cond, uncond] batch: split over dp/fsdp when a context mesh is set (use_mesh).
    pair = lambda a: None if a is None else constrain_batch(jnp.concatenate([a, a]))  # noqa: E731
    flow = dit(pair(latents), jnp.broadcast_to(t, (2, *jnp.shape(t))), constrain_batch(context),
               clip_fea=pair(clip_fea), y=pair(y), compute_dtype=compute_dtype)
    cond, uncond = flow[:1], flow[1:]
    latents, state = solver_step(uncond + guidance_scale * (cond - uncond), index, latents,
                                 state)
    if keep is not None:
        mask, z = keep
        latents = (1 - mask) * z + mask * latents
    return latents, state


# ----------------------------------------------------------------------------- the pipeline
class WanPipeline(PipelineBase):
    """A loaded Wan2.1 release: ``pipe(prompt, **options)`` -> uint8 frames ``[F, H, W, 3]``.

    Options are :func:`make_request`'s. :meth:`sample` returns the final latents instead,
    :meth:`decode` turns latents into frames, :meth:`write` writes an mp4 atomically.
    """

    def __init__(self, release: Release, *, dit, vae, text_encoder, tokenizer,
                 image_encoder=None, mesh=None, precision: str = "bf16", console=None):
        self.release, self.task, self.variant = release, release.task, release.variant
        self.precision = precision_policy(precision)
        self.dit, self.vae, self.text_encoder = dit, vae, text_encoder
        self.tokenizer, self.image_encoder, self.mesh = tokenizer, image_encoder, mesh
        self._progress = Progress(console)

    @property
    def defaults(self) -> TaskDefaults:
        return self.release.defaults

    # ------------------------------------------------------------------------- loading
    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None) -> WanPipeline:
        """Verify every component file against its model (no weight read), then load them."""
        from vidax.text import Tokenizer

        policy = precision_policy(precision)
        progress = Progress(console)
        components = _COMPONENTS[release.task]
        for component in components:
            verify_component(component, release.files[component], release.configs[component])
        progress.line(f"Wan2.1 {release.variant} ({release.task}) in {release.folder}: every "
                      f"component verified; loading with precision {policy.name}")
        models = {}
        for component in components:
            models[component] = load_component(
                progress, MODEL_TYPE, component, release.files[component],
                release.configs[component], component_dtype(policy, component), mesh)
        tokenizer = Tokenizer(release.files["tokenizer"], seq_len=release.configs["dit"].text_len)
        return cls(release, dit=models["dit"], vae=models["vae"],
                   text_encoder=models["text_encoder"], tokenizer=tokenizer,
                   image_encoder=models.get("image_encoder"), mesh=mesh, precision=precision,
                   console=console)

    # ------------------------------------------------------------------------- pieces
    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, **options)

    def _place(self, array):
        """An input on the pipeline's device(s): its batch split over the mesh's batch axes."""
        return jnp.asarray(array) if self.mesh is None else shard_batch(array, self.mesh)

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """``[len(prompts), 512, D]``: UMT5 states, zero past each prompt's tokens. A prompt
        over 512 tokens keeps its first 511 and the EOS (the authors' truncation), with a
        warning."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # replaced by the warning below
            tokens = self.tokenizer(prompts)
        names = ("prompt", "negative prompt")
        for i, dropped in enumerate(tokens.dropped):
            if dropped:
                warnings.warn(
                    f"the {names[i] if i < 2 else f'prompt {i}'} is "
                    f"{dropped + self.tokenizer.seq_len} tokens long, more than the text "
                    f"encoder's {self.tokenizer.seq_len}: its last {dropped} tokens were "
                    "dropped (the authors truncate the same way)", UserWarning, stacklevel=3)
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

    def initial_noise(self, request: Request) -> jax.Array:
        if request.noise is not None:
            return self._place(request.noise[None])
        key = jax.random.key(request.seed)
        return self._place(jax.random.normal(key, (1, *request.latent_shape), jnp.float32))

    # ------------------------------------------------------------------------- generation
    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               **options) -> np.ndarray:
        """The final latents ``[T_lat, H/8, W/8, 16]`` (float32, normalised as the VAE's
        encoder makes them) for ``prompt`` with ``options``, or for a prepared ``request``."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        progress = self._progress
        with self._matmul_precision():
            with progress.phase("encoding the prompt and the negative prompt"):
                context = self.encode_text([request.prompt, request.negative_prompt])
            clip_fea = y = None
            if request.task != "t2v":
                with progress.phase("encoding the image" + ("s" if request.task == "flf2v"
                                                            else "")):
                    clip_fea = self.encode_images(request)
                    y = self.condition(request)
            split = nnx.split(self.dit)
            guidance = jnp.float32(request.guidance_scale)
            latents = self.denoise(
                request, self.initial_noise(request), context,
                lambda index, t: (split, guidance, jnp.float32(t)), clip_fea=clip_fea, y=y,
                what=f"guidance {request.guidance_scale:g}")
        return np.asarray(latents[0])

    def denoise(self, request: Request, latents, context, step_inputs, *, clip_fea=None,
                y=None, keep=None, what: str = "") -> jax.Array:
        """The sampling loop: the request's scheduler from ``latents``; step ``index`` at
        timestep ``t`` runs the DiT ``(graphdef, params)``, guidance and DiT timestep(s) that
        ``step_inputs(index, t)`` returns, in one jitted step (:func:`_denoise_step`)."""
        scheduler = SAMPLE_SOLVERS[request.sample_solver](request.steps, request.shift)
        state = scheduler.init(latents.shape, sharding=latents.sharding)
        width, height = request.size
        with self._progress.phase(f"sampling {request.frames} frames at {width}x{height}, "
                                  f"{request.sample_solver} shift {request.shift:g}, {what}",
                                  total=request.steps) as advance:
            for index, t in enumerate(scheduler.timesteps):
                (graphdef, params), guidance, timestep = step_inputs(index, t)
                with use_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext():
                    latents, state = _denoise_step(
                        graphdef, scheduler.step, self.precision.dit_compute, params, latents,
                        state, jnp.int32(index), timestep, context, clip_fea, y, guidance, keep)
                latents.block_until_ready()
                advance()
        return latents

    def decode(self, latents) -> np.ndarray:
        """Latents ``[T_lat, h, w, 16]`` -> uint8 frames ``[4(T_lat - 1) + 1, 8h, 8w, 3]``."""
        from vidax.video import to_uint8

        latents = np.asarray(latents, np.float32)
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[0]} latent frames"):
            video = self.vae.decode(self._place(latents[None]))
        return to_uint8(video[0])


Pipeline = WanPipeline


def verify_component(component: str, path: Path, config, model_type: str = MODEL_TYPE) -> None:
    """The component file's names and shapes against the model at ``config``
    (:func:`vidax.pipelines.common.verify_component` of the family's registered spec)."""
    common_verify(registry.get(model_type, component), path, config)
