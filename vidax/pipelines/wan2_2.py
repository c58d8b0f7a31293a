"""Wan2.2 TI2V-5B (text- and image-to-video) and the two-expert A14B T2V / I2V as the authors'
``generate.py`` runs them (``WanTI2V`` / ``WanT2V`` / ``WanI2V``); the guide is
docs/models/wan2_2.md. The Wan2.1 pipeline (:mod:`vidax.pipelines.wan2_1`) with what Wan2.2
changes:

* TI2V-5B: 48 latent channels, the Wan2.2 VAE (stride 4 x 16 x 16: sizes in multiples of 32).
  Its image-to-video Lanczos-resizes the image to cover the output size (the aspect ratio
  nearest the image's within the ``--size`` area: ``best_output_size``), center-crops it and
  encodes it to one latent frame ``z`` that overwrites the first (``(1 - mask) z + mask x``
  before the first step and after each), and gives that frame's DiT tokens timestep 0.
* A14B: two DiTs, ``high_noise_model/`` and ``low_noise_model/``; a step at ``t >= boundary *
  1000`` runs the high-noise expert with the high guidance scale, the later ones the
  low-noise expert with the low scale. I2V-A14B conditions as Wan2.1's I2V without CLIP.
  ``expert_policy``: ``"resident"`` both experts on the device(s), ``"swap"`` one at a time
  (the other in host memory, each placed at most once per run; the authors'
  ``offload_model``), ``"auto"`` (default) resident when both and a quarter of the device's
  memory for activations fit in what the first device reports.

A single ``guidance_scale`` sets both experts' scales, as the authors' float
``--sample_guide_scale``; ``(low, high)`` sets them apart.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.wan2_2.config import (WAN2_2_LATENTS_MEAN, WAN2_2_LATENTS_STD,
                                        Wan22DiTConfigs, Wan22VAEConfig)
from vidax.pipelines import overrides, wan2_1
from vidax.pipelines import step_cache as step_caching
from vidax.pipelines.base import Part, Release, find_files, open_folder
from vidax.pipelines.inputs import load_image, number, read_json_config, refuse, to_unit_range
from vidax.pipelines.inputs import noise_array  # noqa: F401  (the tests' name for it)
from vidax.pipelines.wan2_1 import NEGATIVE_PROMPT, TaskDefaults
from vidax.schedulers import WAN_SOLVERS

MODEL_TYPE = "wan2_2"
VARIANTS = ("ti2v-5b", "t2v-a14b", "i2v-a14b")
#: The release's task: what its DiT(s) take (``ti2v``: with or without an image).
TASKS = ("ti2v", "t2v", "i2v")
_TASK_VARIANT = {"ti2v": "ti2v-5b", "t2v": "t2v-a14b", "i2v": "i2v-a14b"}
_VARIANT_TASK = {v: t for t, v in _TASK_VARIANT.items()}
_TASK_NAMES = {"ti2v": "text/image-to-video", "t2v": "text-to-video", "i2v": "image-to-video"}
#: The A14B experts' folders (``high_noise_checkpoint`` / ``low_noise_checkpoint``).
HIGH, LOW = "high_noise_model", "low_noise_model"
EXPERTS = (HIGH, LOW)
NUM_TRAIN_TIMESTEPS = 1000
#: TI2V-5B's VAE (Wan2.2): 48 latent channels, stride 4 x 16 x 16; sizes in multiples of 32.
TI2V_VAE_STRIDE = (4, 16, 16)
TI2V_LATENT_CHANNELS = 48
TI2V_SIZE_MULTIPLE = TI2V_VAE_STRIDE[1] * wan2_1.PATCH[1]
EXPERT_POLICIES = ("auto", "resident", "swap")
#: The Parts ``--dit`` (``--dit high=FILE --dit low=FILE``: the A14B experts), ``--vae`` and
#: ``--text-encoder`` replace (:mod:`vidax.pipelines.overrides`).
COMPONENT_OPTIONS = {"dit": {"": "dit", "high": HIGH, "low": LOW}, "vae": "vae",
                     "text_encoder": "text_encoder"}


@dataclass(frozen=True, kw_only=True)
class Defaults(TaskDefaults):
    """Wan2.1's plus the A14B pair: ``guidance_scale`` is the low-noise expert's (or the
    only DiT's), ``guidance_scale_high`` the high-noise expert's; ``boundary`` the switch."""

    guidance_scale_high: float | None = None
    boundary: float | None = None


DEFAULTS = {
    "ti2v-5b": Defaults(steps=50, shift=5.0, size=(1280, 704), negative_prompt=NEGATIVE_PROMPT,
                        frames=121, fps=24),
    "t2v-a14b": Defaults(steps=40, shift=12.0, guidance_scale=3.0, size=(1280, 720),
                         negative_prompt=NEGATIVE_PROMPT, guidance_scale_high=4.0,
                         boundary=0.875),
    "i2v-a14b": Defaults(steps=40, shift=5.0, guidance_scale=3.5, size=(1280, 720),
                         negative_prompt=NEGATIVE_PROMPT, guidance_scale_high=3.5,
                         boundary=0.900),
}


def defaults_for(variant: str, task: str) -> Defaults:
    if variant in DEFAULTS:
        return DEFAULTS[variant]
    # tiny: a short clip at a small size (the tests, a demo); the rest is the task's release's
    size = (96, 64) if task == "ti2v" else (64, 48)
    return dataclasses.replace(DEFAULTS[_TASK_VARIANT[task]], steps=4, frames=9, size=size)


def tiny_configs(task: str) -> dict:
    """Wan2.1's tiny configs (:func:`vidax.pipelines.wan2_1.tiny_configs`) with the DiT at
    the task's channels: ti2v 48 in and out with the Wan2.2 VAE at 48 latent channels and the
    released statistics; i2v 36 in, no CLIP branch."""
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
    """The registered model of a component and its variant, through the registry's alias
    table (the A14B VAE is the Wan2.1 VAE; UMT5 is Wan2.1's)."""
    return registry.resolve(MODEL_TYPE, _TASK_VARIANT[task], component)


def _dit_config(path) -> tuple[str, object]:
    task = read_json_config(path).get("model_type", "t2v")
    if task not in TASKS:
        raise VidaxError(f"{path}: model_type {task!r} is not a Wan2.2 TI2V/T2V/I2V DiT")
    return task, wan2_1.dit_config(path, Wan22DiTConfigs.from_dict, "Wan2.2")


def inspect_folder(folder, variant: str | None = None) -> Release:
    """Find every component of a Wan2.2 release folder without reading a weight: TI2V-5B
    keeps its DiT (and ``config.json``) at the top, A14B one DiT per expert in
    ``high_noise_model/`` and ``low_noise_model/``; the variant (default) is identified
    from the DiTs' ``config.json``."""
    folder = open_folder(folder, "Wan2.2", VARIANTS, variant)
    two = any((folder / e).is_dir() for e in EXPERTS) or variant in ("t2v-a14b", "i2v-a14b") \
        or (any(map(overrides.given, EXPERTS)) and not (folder / wan2_1.CONFIG_FILE).is_file())
    dit_dirs = EXPERTS if two else ("",)
    for key in ("dit",) if two else EXPERTS:
        if overrides.given(key):
            raise VidaxError(f"{overrides.given(key).label}: " + (
                "an A14B release has two experts: --dit high=FILE and/or --dit low=FILE "
                "(dit={'high': ..., 'low': ...})" if two else "TI2V-5B has one DiT: --dit FILE"))
    paths = [folder / d / wan2_1.CONFIG_FILE for d in dit_dirs]
    found = [(p, *_dit_config(p)) for p in paths if p.is_file()]
    if len({(task, dit) for _, task, dit in found}) > 1:
        raise VidaxError(f"{folder}: the two experts' config.json files describe different "
                         "DiTs; both A14B experts have the same architecture")
    task = found[0][1] if found else _VARIANT_TASK.get(variant, "t2v" if two else "ti2v")
    if two == (task == "ti2v"):
        raise VidaxError(f"{folder}: a {_TASK_NAMES[task]} DiT " + (
            "in high_noise_model/ and low_noise_model/: TI2V-5B has one DiT" if two else
            "at the top of the folder: the A14B releases keep one DiT per expert in "
            "high_noise_model/ and low_noise_model/"))
    if variant not in (None, "tiny") and _TASK_VARIANT[task] != variant:
        raise VidaxError(f"{folder} holds a {_TASK_NAMES[task]} DiT, but variant {variant} "
                         f"is {_TASK_NAMES[_VARIANT_TASK[variant]]}")
    parts = [Part(d or "dit", _spec(task, "dit")[0], "the DiT", under=d,
                  shown="diffusion_pytorch_model.safetensors") for d in dit_dirs]
    parts += [Part(c, _spec(task, c)[0], wan2_1.ROLES[c]) for c in ("vae", "text_encoder")]
    specs = {part.key: part.spec for part in parts}
    missing = [f"{p.relative_to(folder)} (the DiT's config; or name the variant)"
               for p in paths if not p.is_file()] if variant in (None, "tiny") else []
    files = find_files(folder, parts, [wan2_1.TOKENIZER],
                       what=" ".join(filter(None, ("Wan2.2", variant, "release"))),
                       also_missing=missing)
    dit = found[0][2] if found else None
    if dit is not None:
        spec, name = _spec(task, "dit")
        identified = wan2_1.identify(dit, {_TASK_VARIANT[task]: spec.make_config(name)},
                                     tiny_configs(task)["dit"])
        if variant is None and identified is None:
            raise VidaxError(f"{found[0][0]} describes a Wan2.2 {task} DiT that is none of "
                             f"the releases ({', '.join(VARIANTS)}); name the variant")
        variant = variant or identified
    configs = tiny_configs(task) if variant == "tiny" else {
        c: _spec(task, c)[0].make_config(_spec(task, c)[1]) for c in ("dit", "vae",
                                                                        "text_encoder")}
    configs["dit"] = dit or configs["dit"]
    wan2_1.check_text_width(folder, configs)
    configs.update({e: configs["dit"] for e in dit_dirs if e})
    return Release(folder, task, variant, defaults_for(variant, task), configs, files, specs)


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
    from PIL import Image

    ih, iw = image.shape[:2]
    ow, oh = best_output_size(iw, ih, TI2V_SIZE_MULTIPLE, TI2V_SIZE_MULTIPLE, max_area)
    scale = max(ow / iw, oh / ih)
    img = Image.fromarray(image).resize((round(iw * scale), round(ih * scale)), Image.LANCZOS)
    x1, y1 = (img.width - ow) // 2, (img.height - oh) // 2
    return to_unit_range(np.asarray(img.crop((x1, y1, x1 + ow, y1 + oh))))


@dataclass(frozen=True, kw_only=True)
class Request(wan2_1.Request):
    """Wan2.1's request plus the A14B pair: ``guidance_scale`` is the low-noise expert's (or
    TI2V-5B's only), ``guidance_scale_high`` the high-noise expert's; ``boundary`` the switch
    (None for TI2V-5B). A TI2V ``image`` is already at the output size."""

    guidance_scale_high: float | None = None
    boundary: float | None = None


def make_request(task: str, variant: str, prompt: str, *, image=None, last_image=None,
                 size=None, guidance_scale=None, boundary: float | None = None, noise=None,
                 distill: str | None = None, **options) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``guidance_scale``: one number for both A14B experts, or ``(low, high)``. ``size``
    (width, height): the frame size for text-to-video; with an image, the pixel area the
    image's aspect ratio is fitted into (as the authors' ``--size``). ``boundary`` (A14B):
    the switch, as a fraction of the 1000 training timesteps. ``distill``: a
    step-distillation preset (``wan2_1.DISTILL``: both experts' guidance 1; LightX2V's A14B
    switch after step 2 of 4 is where the default boundary puts it, at timesteps 1000, 937.5 |
    833.3, 625).
    """
    if task not in TASKS:
        raise VidaxError(f"Wan2.2 task must be one of {TASKS}, got {task!r}")
    options = wan2_1.distilled(distill, {**options, "guidance_scale": guidance_scale})
    guidance_scale = options.pop("guidance_scale")
    if distill is not None and not isinstance(guidance_scale, (tuple, list)):
        guidance_scale = (guidance_scale, guidance_scale) if task != "ti2v" else guidance_scale
    refuse("Wan2.2", last_image=(last_image, "first-last-frame-to-video is Wan2.1's FLF2V"))
    if task == "t2v" and image is not None:
        raise VidaxError("a text-to-video release takes no image (--image); use i2v-a14b or "
                         "ti2v-5b")
    if task == "i2v" and image is None:
        raise VidaxError("i2v needs the first frame: --image IMAGE")
    d, ti2v, high = defaults_for(variant, task), task == "ti2v", guidance_scale
    if isinstance(guidance_scale, (tuple, list)):
        if len(guidance_scale) != 2 or ti2v:
            raise VidaxError(f"guidance_scale {guidance_scale!r}: a (low-noise, high-noise) "
                             "pair is for the A14B releases; TI2V-5B takes one number")
        guidance_scale, high = guidance_scale
        high = number("guidance_scale (high-noise)", high, positive=False)
    if not ti2v:
        high = number("guidance_scale", d.guidance_scale_high if high is None else high,
                      positive=False)
        boundary = number("boundary", d.boundary if boundary is None else boundary)
    elif boundary is not None:
        raise VidaxError("boundary is for the two-expert A14B releases; TI2V-5B has one DiT")
    request = Request.resolve(
        task, d, prompt, size=size, guidance_scale=guidance_scale, solvers=WAN_SOLVERS,
        latent_channels=TI2V_LATENT_CHANNELS if ti2v else wan2_1.LATENT_CHANNELS,
        vae_stride=TI2V_VAE_STRIDE if ti2v else wan2_1.VAE_STRIDE,
        guidance_scale_high=None if ti2v else high, boundary=None if ti2v else boundary,
        **options)
    if image is not None:
        pixels, area = load_image(image), request.size[0] * request.size[1]
        if ti2v:
            first = ti2v_image(pixels, area)
            size = (first.shape[1], first.shape[0])
        else:
            first = to_unit_range(pixels)
            size = wan2_1.output_size_for_image(first.shape[:2], area)[::-1]
        request = dataclasses.replace(request, size=size, image=first)
    return request.with_noise(noise)


def expert_for(t, boundary: float) -> str:
    """The A14B expert of scheduler timestep ``t``: the high-noise one while
    ``t >= boundary * 1000`` (``_prepare_model_for_timestep``)."""
    return HIGH if t >= boundary * NUM_TRAIN_TIMESTEPS else LOW


def expert_schedule(request: Request) -> list[str]:
    """The expert each sampling step of ``request`` runs."""
    scheduler = WAN_SOLVERS[request.sample_solver](request.steps, request.shift)
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
    """The DiT(s) of a release by name (``dit``, or ``high_noise_model`` /
    ``low_noise_model``) and where their weights live (the module docstring's policies):
    :meth:`add` takes each loaded DiT (``auto`` is decided at the first, from its size);
    :meth:`params` returns ``(graphdef, params)`` on the device -- under ``swap`` after
    freeing the other expert's device buffers and copying this one's in from host memory
    (``placements`` counts those copies)."""

    def __init__(self, policy: str = "resident"):
        if policy not in EXPERT_POLICIES:
            raise VidaxError(f"expert_policy must be one of {', '.join(EXPERT_POLICIES)}, got "
                             f"{policy!r}")
        self.policy, self.placements = policy, 0
        self._graphdefs, self._device, self._host, self._shardings = {}, {}, {}, {}

    def add(self, name: str, model: nnx.Module) -> None:
        graphdef, params = nnx.split(model)
        if self.policy == "auto":
            self.policy = choose_expert_policy(sum(a.nbytes for a in jax.tree.leaves(params)))
        self._graphdefs[name] = graphdef
        if self.policy == "resident":
            self._device[name] = params
        else:  # off the device before the next expert is read, so one fits at a time
            self._shardings[name] = jax.tree.map(lambda a: a.sharding, params)
            self._host[name] = jax.device_get(params)
            jax.tree.map(lambda a: a.delete(), params)

    def params(self, name: str):
        if name not in self._device:
            for other in list(self._device):  # one expert on the device at a time
                jax.tree.map(lambda a: a.delete(), self._device.pop(other))
            self._device[name] = jax.device_put(self._host[name], self._shardings[name])
            self.placements += 1
        return self._graphdefs[name], self._device[name]


def choose_expert_policy(expert_bytes: int, device=None) -> str:
    """``auto``: both experts resident when they and a quarter of the device's memory (for
    activations) fit in it; ``resident`` where the device reports no limit (the CPU)."""
    device = device or jax.devices()[0]
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit")
    except Exception:  # noqa: BLE001 -- a backend without memory statistics
        limit = None
    return "resident" if not limit or 2 * expert_bytes <= 0.75 * limit else "swap"


# ----------------------------------------------------------------------------- the pipeline
class Wan22Pipeline(wan2_1.WanPipeline):
    """A loaded Wan2.2 release; options are :func:`make_request`'s. After :meth:`sample`,
    ``expert_log`` lists the DiT each step ran (``dit``, or the A14B expert's name)."""

    NAME = "Wan2.2"
    make_request = staticmethod(make_request)

    def __init__(self, release: Release, *, expert_policy: str = "auto", **options):
        super().__init__(release, **options)
        self.experts = Experts(expert_policy)
        if release.task == "ti2v" or self.offload != "none":
            # one DiT: nothing to swap; offloaded: the offload moves them
            self.experts.policy = "resident"
        self.dit, self.expert_log = None, []

    def weights_on_device(self, weights: dict) -> dict:
        """Under ``swap`` (what ``auto`` picks where both experts do not fit) one expert is on
        the device at a time."""
        experts = [k for k in (HIGH, LOW) if k in weights]
        policy = self.experts.policy
        if len(experts) == 2 and policy == "auto":
            policy = choose_expert_policy(weights[experts[0]])
        if len(experts) == 2 and policy == "swap":
            weights = {k: v for k, v in weights.items() if k != LOW}
        return weights

    def adopt(self, key: str, model) -> None:
        if self.release.specs[key].component != "dit":
            return super().adopt(key, model)
        self.experts.add(key, model)
        if key == "dit":  # TI2V-5B's only DiT, resident
            self.dit = model

    def setup(self) -> None:
        super().setup()
        if self.task != "ti2v":
            self._progress.line(f"  experts: {self.experts.policy}")

    def guidance_text(self, request: Request) -> str:
        if request.boundary is None:
            return super().guidance_text(request)
        return (f"guidance {request.guidance_scale_high:g} (high noise) / "
                f"{request.guidance_scale:g} (low noise), boundary {request.boundary:g}")

    def conditions(self, request: Request) -> dict:
        """I2V-A14B: ``y`` (Wan2.1's, no CLIP); TI2V: the encoded first frame to keep."""
        if request.task == "i2v":
            return {"y": self.condition(request)}
        z = jnp.asarray(self.vae.encode(request.image[None, None]), jnp.float32)
        mask = np.ones((1, request.latent_shape[0], 1, 1, 1), np.float32)
        mask[:, 0] = 0
        return {"keep": (self._place(mask), self._place(z))}

    def prepare(self, request: Request) -> wan2_1.Run:
        run = super().prepare(request)
        if "keep" in run.inputs:  # TI2V image-to-video: the first frame is the image's
            run.latents = self.after_step(run.latents, run.inputs)
            run.extra["tokens"] = first_frame_tokens(request.latent_shape)
        return run

    def step_cache_key(self, request: wan2_1.Request | None) -> str:
        """MagCache's authors calibrate the TI2V-5B with and without its image (and the
        A14B i2v at one size: no 480p / 720p key, unlike Wan2.1's i2v)."""
        key = step_caching.model_key(self)
        if self.task != "ti2v" or request is None:
            return key
        return key + ("@t2v" if request.image is None else "@i2v")

    def step_inputs(self, request: Request, run: wan2_1.Run, index: int, t):
        name = "dit" if request.boundary is None else expert_for(t, request.boundary)
        self.expert_log.append(name)
        tokens = run.extra.get("tokens")
        timestep = jnp.float32(t) if tokens is None else self._place(tokens * np.float32(t))
        scale = request.guidance_scale_high if name == HIGH else request.guidance_scale
        return self.experts.params(name), timestep, {"guidance_scale": wan2_1.one_pass_or(scale)}

    @staticmethod
    def after_step(latents, inputs):
        if inputs.get("keep") is None:
            return latents
        mask, z = inputs["keep"]
        return (1 - mask) * z + mask * latents

    def sample(self, prompt: str | None = None, **options) -> np.ndarray:
        self.expert_log = []
        latents = super().sample(prompt, **options)
        if self.task != "ti2v":
            n = self.expert_log.count(HIGH)
            self._progress.line(f"  experts: {HIGH} for {n} steps, {LOW} for "
                                f"{len(self.expert_log) - n}")
        return latents


Pipeline = Wan22Pipeline
