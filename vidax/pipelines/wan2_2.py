"""Wan2.2 TI2V-5B (text- and image-to-video) and the two-expert A14B T2V / I2V, as the
authors run them.

Mirrors Wan-Video/Wan2.2's ``generate.py`` with ``wan/textimage2video.py`` (``WanTI2V``),
``wan/text2video.py`` (``WanT2V``) and ``wan/image2video.py`` (``WanI2V``). Everything the
three share with Wan2.1 -- the UMT5 prompt encoding, the noise, the UniPC / DPM++ samplers,
one jitted CFG + scheduler step, the VAE decoding, the precision policies, the request
checks -- is :mod:`vidax.pipelines.wan2_1`'s, reused; this module adds what Wan2.2 changes:

* **TI2V-5B** (``ti2v-5b``): one 5B DiT with 48 latent channels and the Wan2.2 VAE (stride
  4 x 16 x 16, so sizes are multiples of 32). Text-to-video is Wan2.1's loop at those
  shapes. Image-to-video (``image=``) does not concatenate a condition: the image is resized
  to cover the output size (the size whose aspect ratio is closest to the image's within the
  area ``--size`` gives, the authors' ``best_output_size``), Lanczos-resampled and
  center-cropped as theirs (Pillow), encoded to one latent frame ``z``, and the first latent
  frame is overwritten with it -- ``latent = (1 - mask) z + mask latent`` before the first
  step and after every step -- while the DiT gets a per-token timestep that is 0 on that
  frame's tokens (``WanTI2V.i2v``).
* **A14B** (``t2v-a14b``, ``i2v-a14b``): two complete 14B DiTs, ``high_noise_model/`` and
  ``low_noise_model/``; step ``t`` runs the high-noise expert with the high guidance scale
  while ``t >= boundary * 1000`` (t2v 0.875, i2v 0.900), the low-noise one with the low
  scale after (``_prepare_model_for_timestep``). Timesteps only decrease, so the expert
  changes once per run. The Wan2.1 VAE. I2V-A14B conditions as Wan2.1's I2V (the 4 mask
  channels then the 16 condition-latent channels after the noisy latents, 36 in all) but has
  no CLIP branch, and its negative prompt is the shared one.

Experts' memory (``expert_policy=``, A14B only):

* ``"resident"``: both experts' weights stay on the device(s): no transfer at the switch.
* ``"swap"``: one expert on the device at a time, the other in host memory (the authors'
  ``offload_model``): at the switch the high-noise expert's device buffers are freed and the
  low-noise expert's weights are copied in. A run places each expert at most once.
* ``"auto"`` (default): ``resident`` when both experts plus a quarter of the device's memory
  for activations fit in what the first device reports (``memory_stats()["bytes_limit"]``),
  else ``swap``; ``resident`` when the device reports nothing (the CPU).

Defaults (``generate.py`` with ``wan/configs``): TI2V-5B 50 steps, shift 5, guidance 5, 121
frames at 24 fps, 1280x704 (the only sizes it supports are 1280*704 and 704*1280);
T2V-A14B 40 steps, shift 12, guidance (low 3, high 4), boundary 0.875; I2V-A14B 40 steps,
shift 5, guidance (3.5, 3.5), boundary 0.9; A14B 81 frames at 16 fps, 1280x720. A single
``guidance_scale`` sets both experts' scales, as the authors' float ``--sample_guide_scale``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.pipelines import wan2_1
from vidax.pipelines.common import (  # noqa: F401  (re-exported: the CLI's family API)
    Progress,
    load_image,
    number,
    parse_size,
    to_unit_range,
)
from vidax.pipelines.wan2_1 import NEGATIVE_PROMPT, TaskDefaults, noise_array
from vidax.schedulers import SAMPLE_SOLVERS
from vidax.translator.mappings.wan2_2 import Wan22DiTConfigs

MODEL_TYPE = "wan2_2"
VARIANTS = ("ti2v-5b", "t2v-a14b", "i2v-a14b")
#: The release's task: what its DiT(s) take (``ti2v``: with or without an image).
TASKS = ("ti2v", "t2v", "i2v")
_TASK_VARIANT = {"ti2v": "ti2v-5b", "t2v": "t2v-a14b", "i2v": "i2v-a14b"}
_VARIANT_TASK = {v: t for t, v in _TASK_VARIANT.items()}
_TASK_NAMES = {"ti2v": "text/image-to-video", "t2v": "text-to-video", "i2v": "image-to-video"}
#: The A14B experts' folders (``low_noise_checkpoint`` / ``high_noise_checkpoint``).
HIGH, LOW = "high_noise_model", "low_noise_model"
EXPERTS = (HIGH, LOW)
NUM_TRAIN_TIMESTEPS = 1000
#: TI2V-5B's VAE (Wan2.2): 48 latent channels, stride 4 x 16 x 16; sizes in multiples of 32.
TI2V_VAE_STRIDE = (4, 16, 16)
TI2V_LATENT_CHANNELS = 48
TI2V_SIZE_MULTIPLE = TI2V_VAE_STRIDE[1] * wan2_1.PATCH[1]
EXPERT_POLICIES = ("auto", "resident", "swap")


@dataclass(frozen=True)
class Defaults(TaskDefaults):
    """Wan2.1's defaults plus the A14B pair: ``guidance_scale`` is the low-noise expert's
    (or the only model's), ``guidance_scale_high`` the high-noise expert's."""

    guidance_scale_high: float | None = None
    boundary: float | None = None


DEFAULTS = {
    "ti2v-5b": Defaults(50, 5.0, 5.0, (1280, 704), NEGATIVE_PROMPT, frames=121, fps=24),
    "t2v-a14b": Defaults(40, 12.0, 3.0, (1280, 720), NEGATIVE_PROMPT,
                         guidance_scale_high=4.0, boundary=0.875),
    "i2v-a14b": Defaults(40, 5.0, 3.5, (1280, 720), NEGATIVE_PROMPT,
                         guidance_scale_high=3.5, boundary=0.900),
}


def defaults_for(variant: str, task: str) -> Defaults:
    if variant in DEFAULTS:
        return DEFAULTS[variant]
    # tiny: a short clip at a small size (the tests, a demo); the rest is the task's release's
    size = (96, 64) if task == "ti2v" else (64, 48)
    return dataclasses.replace(DEFAULTS[_TASK_VARIANT[task]], steps=4, frames=9, size=size)


# ----------------------------------------------------------------------------- tiny releases
def tiny_configs(task: str) -> dict:
    """A consistent set of tiny component configs for a tiny Wan2.2 release: Wan2.1's
    (:func:`vidax.pipelines.wan2_1.tiny_configs`) with the DiT at the task's channels (ti2v
    48 in and out with the Wan2.2 VAE at 48 latent channels and the released statistics;
    i2v 36 in, no CLIP branch)."""
    from vidax.models.wan2_2.vae import (WAN2_2_LATENTS_MEAN, WAN2_2_LATENTS_STD,
                                         Wan22VAEConfig)

    if task not in TASKS:
        raise VidaxError(f"Wan2.2 task must be one of {TASKS}, got {task!r}")
    configs = wan2_1.tiny_configs("t2v")
    if task == "ti2v":
        configs["dit"] = dataclasses.replace(configs["dit"], in_dim=TI2V_LATENT_CHANNELS,
                                             out_dim=TI2V_LATENT_CHANNELS)
        configs["vae"] = dataclasses.replace(
            Wan22VAEConfig.tiny(), z_dim=TI2V_LATENT_CHANNELS,
            latents_mean=WAN2_2_LATENTS_MEAN, latents_std=WAN2_2_LATENTS_STD)
    elif task == "i2v":
        configs["dit"] = dataclasses.replace(configs["dit"], in_dim=36)
    return configs


# ----------------------------------------------------------------------------- the release
def _spec(task: str, component: str) -> tuple[registry.ComponentSpec, str]:
    """The registered model of a component and the variant to build it at, through the
    registry's alias table (the A14B VAE is the Wan2.1 VAE; UMT5 is Wan2.1's)."""
    return registry.resolve(MODEL_TYPE, _TASK_VARIANT[task], component)


@dataclass(frozen=True)
class Release(wan2_1.Release):
    """A Wan2.2 release folder. ``files`` holds ``dit`` (TI2V-5B) or ``high_noise_model`` /
    ``low_noise_model`` (A14B), ``vae``, ``text_encoder``, ``tokenizer``; ``configs`` the
    same keys but ``tokenizer``."""

    @property
    def defaults(self) -> Defaults:
        return defaults_for(self.variant, self.task)

    @property
    def experts(self) -> tuple[str, ...]:
        return ("dit",) if self.task == "ti2v" else EXPERTS

    def parts(self) -> list[tuple[str, str]]:
        """(key in ``files``, component) of every weight file, DiT(s) first."""
        return [(e, "dit") for e in self.experts] + [("vae", "vae"),
                                                      ("text_encoder", "text_encoder")]


def _task_of(raw: dict, path: Path) -> str:
    model_type = raw.get("model_type", "t2v")
    if model_type == "ti2v":
        return "ti2v"
    if model_type in ("t2v", "i2v"):
        return model_type
    raise VidaxError(f"{path}: model_type {model_type!r} is not a Wan2.2 TI2V/T2V/I2V DiT")


def _dit_config(path: Path) -> tuple[str, WanDiTConfig]:
    raw = wan2_1.read_json_config(path)
    task = _task_of(raw, path)
    try:
        return task, Wan22DiTConfigs.from_dict(raw)
    except (TypeError, ValueError) as e:
        raise VidaxError(f"{path}: not a Wan2.2 DiT config ({e})") from e


def _identify(task: str, dit: WanDiTConfig) -> str | None:
    variant = _TASK_VARIANT[task]
    if _spec(task, "dit")[0].make_config(_spec(task, "dit")[1]) == dit:
        return variant
    if tiny_configs(task)["dit"] == dit:
        return "tiny"
    return None


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find every component of a Wan2.2 release folder without reading a weight.

    TI2V-5B keeps its DiT (and ``config.json``) at the top; A14B keeps one DiT per expert in
    ``high_noise_model/`` and ``low_noise_model/``. ``variant``: one of :data:`VARIANTS` or
    ``"tiny"``; default: identified from the DiT's ``config.json``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a Wan2.2 release folder, as the "
                         "authors publish it)")
    if variant is not None and variant not in (*VARIANTS, "tiny"):
        raise VidaxError(f"unknown Wan2.2 variant {variant!r}; known: {', '.join(VARIANTS)} "
                         "(and 'tiny')")
    two_experts = any((folder / e).is_dir() for e in EXPERTS) or variant in ("t2v-a14b",
                                                                              "i2v-a14b")
    dit_dirs = {e: folder / e for e in EXPERTS} if two_experts else {"dit": folder}
    missing, found = [], {}
    for key, where in dit_dirs.items():
        config_path = where / wan2_1.CONFIG_FILE
        if config_path.is_file():
            found[key] = (config_path, *_dit_config(config_path))
        elif variant in (None, "tiny"):
            missing.append(f"{config_path.relative_to(folder)} (the DiT's config; or name "
                           "the variant)")
    if found:
        tasks = {task for _, task, _ in found.values()}
        dits = {cfg for _, _, cfg in found.values()}
        if len(tasks) > 1 or len(dits) > 1:
            raise VidaxError(f"{folder}: the two experts' config.json files describe different "
                             "DiTs; both A14B experts have the same architecture")
        task = tasks.pop()
    elif variant not in (None, "tiny"):
        task = _VARIANT_TASK[variant]
    else:
        task = "t2v" if two_experts else "ti2v"
    if two_experts == (task == "ti2v"):
        raise VidaxError(f"{folder}: a {_TASK_NAMES[task]} DiT "
                         + ("in high_noise_model/ and low_noise_model/: TI2V-5B has one DiT"
                            if two_experts else "at the top of the folder: the A14B releases "
                            "keep one DiT per expert in high_noise_model/ and "
                            "low_noise_model/"))
    if variant not in (None, "tiny") and _TASK_VARIANT[task] != variant:
        raise VidaxError(f"{folder} holds a {_TASK_NAMES[task]} DiT, but variant {variant} "
                         f"is {_TASK_NAMES[_VARIANT_TASK[variant]]}")

    files = {}
    for key, where in dit_dirs.items():
        files[key] = wan2_1.component_files(where, "dit", MODEL_TYPE)
        if files[key] is None:
            missing.append(f"{(where / 'diffusion_pytorch_model.safetensors').relative_to(folder)}"
                           " (the DiT)")
    for component in ("vae", "text_encoder"):
        spec, _ = _spec(task, component)
        files[component] = wan2_1.component_files(folder, component, spec.model_type)
        if files[component] is None:
            missing.append(f"{spec.files[-1]} ({wan2_1.ROLES[component]})")
    tokenizer = folder / wan2_1.TOKENIZER_DIR
    if not (tokenizer / "tokenizer.json").is_file():
        missing.append(f"{wan2_1.TOKENIZER_DIR}/tokenizer.json ({wan2_1.ROLES['tokenizer']})")
    files["tokenizer"] = tokenizer
    if missing:
        what = f"Wan2.2 {variant} release" if variant else "Wan2.2 release"
        raise VidaxError(f"{folder} is not a complete {what} folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")

    dit_config = next(iter(found.values()))[2] if found else None
    if dit_config is not None:
        identified = _identify(task, dit_config)
        if variant is None:
            if identified is None:
                raise VidaxError(f"{next(iter(found.values()))[0]} describes a Wan2.2 "
                                 f"{task} DiT that is none of the releases "
                                 f"({', '.join(VARIANTS)}); name the variant")
            variant = identified
    if variant == "tiny":
        configs = tiny_configs(task)
    else:
        configs = {c: _spec(task, c)[0].make_config(_spec(task, c)[1])
                   for c in ("dit", "vae", "text_encoder")}
    if dit_config is not None:
        configs["dit"] = dit_config
    if configs["dit"].text_dim != configs["text_encoder"].dim:
        raise VidaxError(f"{folder}: the DiT reads text of width {configs['dit'].text_dim}, "
                         f"but the text encoder makes {configs['text_encoder'].dim}")
    dit = configs.pop("dit")
    configs.update({e: dit for e in dit_dirs})
    return Release(folder, task, variant, configs, files)


# ----------------------------------------------------------------------------- inputs
def best_output_size(w: int, h: int, dw: int, dh: int, expected_area: int) -> tuple[int, int]:
    """(width, height) in multiples of (dw, dh) within ``expected_area`` whose aspect ratio is
    closest to ``w / h``: the authors' ``wan.utils.utils.best_output_size``, the same
    float64 arithmetic (width-first and height-first candidates, ties to the height-first)."""
    ratio = w / h
    ow = (expected_area * ratio) ** 0.5
    oh = expected_area / ow
    ow1 = int(ow // dw * dw)
    oh1 = int(expected_area / ow1 // dh * dh) if ow1 else 0
    oh2 = int(oh // dh * dh)
    ow2 = int(expected_area / oh2 // dw * dw) if oh2 else 0
    if min(ow1, oh1) < 1 and min(ow2, oh2) < 1:
        raise VidaxError(f"an area of {expected_area} pixels is too small for an image of "
                         f"aspect {w}x{h}: increase --size")
    if min(ow1, oh1) < 1:
        return ow2, oh2
    if min(ow2, oh2) < 1:
        return ow1, oh1
    ratio1, ratio2 = ow1 / oh1, ow2 / oh2
    if max(ratio / ratio1, ratio1 / ratio) < max(ratio / ratio2, ratio2 / ratio):
        return ow1, oh1
    return ow2, oh2


def ti2v_image(image: np.ndarray, max_area: int) -> np.ndarray:
    """TI2V-5B's first frame, float32 [-1, 1] at the output size: resized (Pillow's Lanczos)
    to cover :func:`best_output_size`, then center-cropped (``WanTI2V.i2v``)."""
    try:
        from PIL import Image
    except ImportError as e:
        raise VidaxError("image-to-video needs Pillow: pip install 'vidax[video]'") from e
    ih, iw = image.shape[:2]
    ow, oh = best_output_size(iw, ih, TI2V_SIZE_MULTIPLE, TI2V_SIZE_MULTIPLE, max_area)
    scale = max(ow / iw, oh / ih)
    img = Image.fromarray(image).resize((round(iw * scale), round(ih * scale)), Image.LANCZOS)
    x1, y1 = (img.width - ow) // 2, (img.height - oh) // 2
    img = img.crop((x1, y1, x1 + ow, y1 + oh))
    return to_unit_range(np.asarray(img))


@dataclass(frozen=True)
class Request(wan2_1.Request):
    """Wan2.1's request plus the A14B pair: ``guidance_scale`` is the low-noise expert's (or
    TI2V-5B's only), ``guidance_scale_high`` the high-noise expert's; ``boundary`` the
    switch (None for TI2V-5B). A TI2V ``image`` is already at the output size."""

    guidance_scale_high: float | None = None
    boundary: float | None = None


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, last_image=None, frames: int | None = None,
                 size: tuple[int, int] | str | None = None, steps: int | None = None,
                 guidance_scale: float | tuple[float, float] | None = None,
                 shift: float | None = None, sample_solver: str | None = None, seed: int = 0,
                 noise=None, fps: float | None = None, boundary: float | None = None
                 ) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``guidance_scale``: one number for both A14B experts, or ``(low, high)``. ``size``
    (width, height): the frame size for text-to-video; with an image, the pixel area the
    image's aspect ratio is fitted into (as the authors' ``--size``). ``boundary`` (A14B):
    the switch, as a fraction of the 1000 training timesteps.
    """
    if task not in TASKS:
        raise VidaxError(f"Wan2.2 task must be one of {TASKS}, got {task!r}")
    if last_image is not None:
        raise VidaxError("Wan2.2 releases take no --last-image (first-last-frame-to-video is "
                         "Wan2.1's FLF2V)")
    if task == "t2v" and image is not None:
        raise VidaxError("a text-to-video release takes no image (--image); use i2v-a14b or "
                         "ti2v-5b")
    if task == "i2v" and image is None:
        raise VidaxError("i2v needs the first frame: --image IMAGE")
    d = defaults_for(variant, task)
    high = None
    if isinstance(guidance_scale, (tuple, list)):
        if len(guidance_scale) != 2 or task == "ti2v":
            raise VidaxError(f"guidance_scale {guidance_scale!r}: a (low-noise, high-noise) "
                             "pair is for the A14B releases; TI2V-5B takes one number")
        guidance_scale, high = guidance_scale
        high = number("guidance_scale (high-noise)", high, positive=False)
    elif guidance_scale is not None:
        high = guidance_scale
    if task != "ti2v":
        high = d.guidance_scale_high if high is None else high
        boundary = number("boundary", d.boundary if boundary is None else boundary)
    elif boundary is not None:
        raise VidaxError("boundary is for the two-expert A14B releases; TI2V-5B has one DiT")
    ti2v = task == "ti2v"
    if isinstance(size, str):
        size = parse_size(size)
    size = wan2_1.check_size(d.size if size is None else size,
                             TI2V_SIZE_MULTIPLE if ti2v else wan2_1.SIZE_MULTIPLE)
    base = wan2_1.make_request(
        "t2v", "tiny", prompt, negative_prompt=negative_prompt or d.negative_prompt,
        frames=d.frames if frames is None else frames, size=size,
        steps=d.steps if steps is None else steps,
        guidance_scale=d.guidance_scale if guidance_scale is None else guidance_scale,
        shift=d.shift if shift is None else shift,
        sample_solver=sample_solver or d.sample_solver, seed=seed,
        fps=d.fps if fps is None else fps)
    first = None
    if image is not None:
        pixels = load_image(image)
        if ti2v:
            first = ti2v_image(pixels, size[0] * size[1])
            size = (first.shape[1], first.shape[0])
        else:
            first = to_unit_range(pixels)
            height, width = wan2_1.output_size_for_image(first.shape[:2], size[0] * size[1])
            size = (width, height)
    request = Request(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                      guidance_scale_high=None if ti2v else float(high),
                      boundary=None if ti2v else boundary)
    request = dataclasses.replace(
        request, task=task, size=size, image=first,
        latent_channels=TI2V_LATENT_CHANNELS if ti2v else wan2_1.LATENT_CHANNELS,
        vae_stride=TI2V_VAE_STRIDE if ti2v else wan2_1.VAE_STRIDE)
    if noise is not None:
        request = dataclasses.replace(request, noise=noise_array(noise, request.latent_shape))
    return request


def expert_for(t, boundary: float) -> str:
    """The A14B expert of scheduler timestep ``t``: the high-noise one while
    ``t >= boundary * 1000`` (``_prepare_model_for_timestep``)."""
    return HIGH if t >= boundary * NUM_TRAIN_TIMESTEPS else LOW


def expert_schedule(request: Request) -> list[str]:
    """The expert each sampling step of ``request`` runs."""
    scheduler = SAMPLE_SOLVERS[request.sample_solver](request.steps, request.shift)
    return [expert_for(t, request.boundary) for t in scheduler.timesteps]


def first_frame_tokens(latent_shape, patch=wan2_1.PATCH) -> np.ndarray:
    """``[L]`` float32: 0 on the first latent frame's DiT tokens, 1 elsewhere -- the authors'
    ``mask2[0][0][:, ::2, ::2]`` flattened; times t it is TI2V's per-token timestep."""
    t, h, w, _ = latent_shape
    mask = np.ones((t // patch[0], h // patch[1], w // patch[2]), np.float32)
    mask[0] = 0
    return mask.reshape(-1)


# ----------------------------------------------------------------------------- experts
class Experts:
    """The DiT(s) of a release, by name (``dit``, or ``high_noise_model`` /
    ``low_noise_model``), and where their weights live (the module docstring's policies).

    :meth:`add` takes each loaded DiT (``auto`` is decided at the first one, from its size);
    :meth:`params` returns ``(graphdef, params)`` on the device -- under ``swap`` it frees
    the other expert's device buffers and copies this one's in from host memory first.
    ``placements`` counts those copies.
    """

    def __init__(self, policy: str = "resident"):
        if policy not in EXPERT_POLICIES:
            raise VidaxError(f"expert_policy must be one of {', '.join(EXPERT_POLICIES)}, got "
                             f"{policy!r}")
        self.policy, self.placements = policy, 0
        self._graphdefs, self._device, self._host, self._shardings = {}, {}, {}, {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._graphdefs)

    def add(self, name: str, model: nnx.Module) -> None:
        graphdef, params = nnx.split(model)
        if self.policy == "auto":
            self.policy = choose_expert_policy(_nbytes(params))
        self._graphdefs[name] = graphdef
        if self.policy == "resident":
            self._device[name] = params
        else:  # off the device before the next expert is read, so one fits at a time
            self._shardings[name] = jax.tree.map(lambda a: a.sharding, params)
            self._host[name] = jax.device_get(params)
            jax.tree.map(lambda a: a.delete(), params)

    def module(self, name: str) -> nnx.Module:
        return nnx.merge(*self.params(name))

    def params(self, name: str):
        if name not in self._device:
            for other in list(self._device):  # one expert on the device at a time
                jax.tree.map(lambda a: a.delete(), self._device.pop(other))
            self._device[name] = jax.device_put(self._host[name], self._shardings[name])
            self.placements += 1
        return self._graphdefs[name], self._device[name]


def _nbytes(params) -> int:
    return sum(a.nbytes for a in jax.tree.leaves(params))


def choose_expert_policy(expert_bytes: int, device=None) -> str:
    """``auto``: both experts resident when they and a quarter of the device's memory (for
    activations) fit in it; ``resident`` where the device reports no limit (the CPU)."""
    device = device or jax.devices()[0]
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 -- a backend without memory statistics
        stats = {}
    limit = stats.get("bytes_limit")
    if not limit:
        return "resident"
    return "resident" if 2 * expert_bytes <= 0.75 * limit else "swap"


# ----------------------------------------------------------------------------- the pipeline
class Wan22Pipeline(wan2_1.WanPipeline):
    """A loaded Wan2.2 release: ``pipe(prompt, **options)`` -> uint8 frames ``[F, H, W, 3]``.

    Options are :func:`make_request`'s. :meth:`sample` returns the final latents; after it,
    ``expert_log`` lists the DiT each step ran (``dit``, or the A14B expert's name).
    """

    def __init__(self, release: Release, *, experts: Experts, vae, text_encoder, tokenizer,
                 mesh=None, precision: str = "bf16", console=None):
        super().__init__(release, dit=None, vae=vae, text_encoder=text_encoder,
                         tokenizer=tokenizer, mesh=mesh, precision=precision, console=console)
        self.experts = experts
        if release.task == "ti2v":
            self.dit = experts.module("dit")
        self.expert_log: list[str] = []

    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None, expert_policy: str = "auto") -> Wan22Pipeline:
        """Verify every component file against its model (no weight read), then load them;
        A14B experts under ``expert_policy`` (module docstring)."""
        from vidax.text import Tokenizer

        if expert_policy not in EXPERT_POLICIES:
            raise VidaxError(f"expert_policy must be one of {', '.join(EXPERT_POLICIES)}, got "
                             f"{expert_policy!r}")
        policy = wan2_1.precision_policy(precision)
        progress = Progress(console)
        parts = release.parts()
        for key, component in parts:
            wan2_1.verify_component(component, release.files[key], release.configs[key],
                           _spec(release.task, component)[0].model_type)
        progress.line(f"Wan2.2 {release.variant} ({release.task}) in {release.folder}: every "
                      f"component verified; loading with precision {policy.name}")
        models = {}
        experts = Experts("resident" if release.task == "ti2v" else expert_policy)
        for key, component in parts:
            model = wan2_1.load_component(
                progress, _spec(release.task, component)[0].model_type, component,
                release.files[key], release.configs[key],
                wan2_1.component_dtype(policy, component), mesh)
            if component == "dit":
                experts.add(key, model)
            else:
                models[key] = model
        if release.task != "ti2v":
            progress.line(f"  experts: {experts.policy}")
        tokenizer = Tokenizer(release.files["tokenizer"],
                              seq_len=release.configs[release.experts[0]].text_len)
        return cls(release, experts=experts, vae=models["vae"],
                   text_encoder=models["text_encoder"], tokenizer=tokenizer, mesh=mesh,
                   precision=precision, console=console)

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, **options)

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               **options) -> np.ndarray:
        """The final latents ``[T_lat, h, w, C]`` (normalised as the VAE's encoder makes
        them) for ``prompt`` with ``options``, or for a prepared ``request``."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        progress = self._progress
        with self._matmul_precision():
            with progress.phase("encoding the prompt and the negative prompt"):
                context = self.encode_text([request.prompt, request.negative_prompt])
            latents = self.initial_noise(request)
            y = keep = tokens = None
            if request.task == "i2v":
                with progress.phase("encoding the image"):
                    y = self.condition(request)
            elif request.image is not None:  # TI2V image-to-video
                with progress.phase("encoding the image"):
                    z = jnp.asarray(self.vae.encode(request.image[None, None]), jnp.float32)
                    mask = np.ones((1, latents.shape[1], 1, 1, 1), np.float32)
                    mask[:, 0] = 0
                    keep = (self._place(mask), self._place(z))
                    latents = (1 - keep[0]) * keep[1] + keep[0] * latents
                    tokens = first_frame_tokens(request.latent_shape)
            self.expert_log = []

            def step_inputs(index, t):
                name = "dit" if request.boundary is None else expert_for(t, request.boundary)
                self.expert_log.append(name)
                guidance = request.guidance_scale_high if name == HIGH else \
                    request.guidance_scale
                timestep = jnp.float32(t) if tokens is None else \
                    self._place(tokens * np.float32(t))
                return self.experts.params(name), jnp.float32(guidance), timestep

            if request.boundary is None:
                what = f"guidance {request.guidance_scale:g}"
            else:
                what = (f"guidance {request.guidance_scale_high:g} (high noise) / "
                        f"{request.guidance_scale:g} (low noise), boundary "
                        f"{request.boundary:g}")
            latents = self.denoise(request, latents, context, step_inputs, y=y, keep=keep,
                                   what=what)
        if request.boundary is not None:
            n = self.expert_log.count(HIGH)
            progress.line(f"  experts: {HIGH} for {n} steps, {LOW} for "
                          f"{len(self.expert_log) - n}")
        return np.asarray(latents[0])


Pipeline = Wan22Pipeline
