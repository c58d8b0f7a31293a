"""CogVideoX / CogVideoX1.5 text-to-video and image-to-video, as diffusers runs them.

Mirrors diffusers' ``CogVideoXPipeline`` and ``CogVideoXImageToVideoPipeline``
(``pipelines/cogvideo/``) on a release folder (``transformer/``, ``vae/``, ``text_encoder/``,
``tokenizer/``, ``scheduler/``), with the settings of the authors' ``inference/cli_demo.py``
as defaults (:data:`DEFAULTS`):

1. Text: the prompt and the negative prompt (default ``""``, as theirs) are tokenized to
   ``max_text_seq_length`` (226) tokens -- ``</s>`` appended, ``<pad>`` padding, truncation
   keeping the EOS -- and encoded by T5-v1.1-XXL WITHOUT an attention mask (the padding
   tokens are encoded and attended, as in diffusers). The DiT attends every text token too.
2. Schedule: the folder's ``scheduler/scheduler_config.json`` with DDIM
   (:class:`~vidax.schedulers.cogvideox.CogVideoXDDIMScheduler`, the class the releases
   name) or the authors' stochastic DPM-Solver++ (``sample_solver="dpm++"``,
   :class:`~vidax.schedulers.cogvideox.CogVideoXDPMScheduler`, what their demo swaps in,
   with "trailing" spacing). DPM draws fresh noise every step.
3. Noise: ``[F', H/8, W/8, 16]`` with ``F' = (frames - 1) / 4 + 1`` latent frames; the 1.5
   models (temporal patch 2) get ``F'`` rounded up to even with EXTRA NOISE FRAMES AT THE
   FRONT, which are sampled with the rest and cropped before decoding (diffusers'
   ``additional_frames``).
4. Image-to-video (5b-i2v, 1.5-5b-i2v): the image is resized to the output size with
   Pillow's Lanczos filter (diffusers' ``VideoProcessor.preprocess``), mapped to [-1, 1] and
   encoded by the VAE as a posterior SAMPLE (mean + std * noise, their ``retrieve_latents``);
   the latent is scaled by ``scaling_factor`` (1.0) or DIVIDED by it (1.5,
   ``invert_scale_latents``: a training quirk), then followed by zero frames up to ``F'``
   (in diffusers 0.42.1 the 1.5 padding frame is noise added at the front, so the image
   latent sits in front of it, and the first-frame duplication of ``prepare_latents`` never
   triggers). Each step the DiT reads ``[noisy latents | image latents]`` on channels; the
   1.5-I2V DiT also reads ``ofs = 2.0``.
5. Each step, one jitted function: the DiT on ``[negative, prompt]`` as one batch of 2
   (one batch of 1 when ``guidance_scale <= 1``), CFG ``u + g (c - u)`` -- with
   ``dynamic_cfg`` (the authors' demo: on with DPM) ``g_t = 1 + g (1 - cos(pi ((N - t) /
   N)^5)) / 2`` with ``t`` the integer timestep, exactly their expression -- then the
   scheduler step; latents and the scheduler state donated.
6. Decoding: ``latents * (1 / scaling_factor)``, the VAE in diffusers' frame batches,
   frames ``(x / 2 + 0.5)`` clamped to [0, 1], ``* 255`` rounded (their ``numpy_to_pil``).

Precision policies (``precision=``): ``"bf16"`` stores the DiT's and T5's weights in
bfloat16 (the authors' demo runs the pipeline in bfloat16) and computes both in bfloat16 --
the DiT with its float32 islands (timestep embedding, modulation, norm statistics, q/k norm
and RoPE, output head) and a float32 residual stream (see :mod:`vidax.models.cogvideox.dit`);
latents, CFG, the scheduler and the VAE stay float32. ``"fp32"``: everything float32,
"highest" matmuls.

Where vidax differs from diffusers, on purpose:

* Frame counts must be ``4k + 1`` and sizes multiples of 16 (8 x the patch size); diffusers
  silently returns another frame count / fails inside the DiT.
* Noise comes from JAX's PRNG for a seed (pass ``noise=`` / :class:`Draws` for runs
  comparable with diffusers' ``latents=`` and generator draws).
* The tokenizer is read from ``tokenizer/tokenizer.json`` when the folder has one, else from
  ``tokenizer/spiece.model`` (what the hub folders ship), converted as transformers' T5
  tokenizer does (:func:`vidax.text.load_tokenizer`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import loading, registry
from vidax.errors import VerificationError, VidaxError
from vidax.models.cogvideox.dit import CogVideoXDiTConfig
from vidax.models.cogvideox.vae import CogVideoXVAEConfig
from vidax.models.t5.model import T5Config
from vidax.pipelines.base import (
    read_noise,
    precision_policy,
    PipelineBase,
    Progress,
    load_image,
    number,
    parse_size,
)
from vidax.schedulers.cogvideox import SAMPLE_SOLVERS
from vidax.translator.io import open_checkpoint

MODEL_TYPE = "cogvideox"
TASKS = ("t2v", "i2v")
VARIANTS = ("2b", "5b", "5b-i2v", "1.5-5b", "1.5-5b-i2v")
I2V_VARIANTS = ("5b-i2v", "1.5-5b-i2v")
#: The 1.5 models patch 2 latent frames at a time.
_PATCH_T = {"1.5-5b": 2, "1.5-5b-i2v": 2}
#: diffusers' I2V pipelines feed the 1.5-I2V DiT this ``ofs`` (``new_full((1,), 2.0)``).
OFS = 2.0
_DIRS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


@dataclass(frozen=True)
class ReleaseDefaults:
    """The authors' ``cli_demo.py`` settings for a release: ``RESOLUTION_MAP`` sizes, 50
    steps, guidance 6.0, the DPM sampler with dynamic CFG for the 5B models (their comment:
    DDIM for 2B); 49 frames at 8 fps (1.0 READMEs) or 81 at 16 fps (1.5)."""

    frames: int
    size: tuple[int, int]
    fps: float
    sample_solver: str
    steps: int = 50
    guidance_scale: float = 6.0
    negative_prompt: str = ""

    @property
    def dynamic_cfg(self) -> bool:
        return self.sample_solver == "dpm++"


DEFAULTS = {
    "2b": ReleaseDefaults(49, (720, 480), 8.0, "ddim"),
    "5b": ReleaseDefaults(49, (720, 480), 8.0, "dpm++"),
    "5b-i2v": ReleaseDefaults(49, (720, 480), 8.0, "dpm++"),
    "1.5-5b": ReleaseDefaults(81, (1360, 768), 16.0, "dpm++"),
    "1.5-5b-i2v": ReleaseDefaults(81, (1360, 768), 16.0, "dpm++"),
}


def variant_of(cfg: CogVideoXDiTConfig) -> str:
    """The release kind a DiT config is (its structure, whatever its widths)."""
    if cfg.patch_size_t is not None:
        return "1.5-5b-i2v" if cfg.ofs_embed_dim else "1.5-5b"
    if cfg.use_learned_positional_embeddings:
        return "5b-i2v"
    return "5b" if cfg.use_rotary_positional_embeddings else "2b"


# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True)
class Release:
    """A CogVideoX release folder (diffusers' pipeline layout): component files, their
    configs, and the scheduler config."""

    folder: Path
    variant: str
    configs: dict       # "dit", "vae", "text_encoder" -> config dataclasses
    files: dict         # component -> Path ("tokenizer": the folder)
    scheduler_config: dict

    @property
    def task(self) -> str:
        return "i2v" if self.variant in I2V_VARIANTS else "t2v"

    @property
    def defaults(self) -> ReleaseDefaults:
        return DEFAULTS[self.variant]


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{path}: not a readable {what} ({e})") from e
    if not isinstance(data, dict):
        raise VidaxError(f"{path}: a {what} must be a JSON object")
    return data


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find every component of a CogVideoX release folder without reading a weight.

    ``variant``: one of :data:`VARIANTS`; default: read from ``transformer/config.json``
    (given, it must agree with it).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a CogVideoX release folder: "
                         f"{', '.join(d + '/' for d in _DIRS)})")
    if variant is not None and variant not in VARIANTS:
        raise VidaxError(f"unknown CogVideoX variant {variant!r}; known: {', '.join(VARIANTS)}")
    specs = {"dit": registry.get(MODEL_TYPE, "dit", layout="diffusers"),
             "vae": registry.get(MODEL_TYPE, "vae", layout="diffusers"),
             "text_encoder": registry.get("t5", "encoder", layout="transformers")}
    roots = {"dit": folder, "vae": folder, "text_encoder": folder / "text_encoder"}
    config_files = {"dit": folder / "transformer" / "config.json",
                    "vae": folder / "vae" / "config.json",
                    "text_encoder": folder / "text_encoder" / "config.json"}
    missing, files = [], {}
    for component, spec in specs.items():
        if not config_files[component].is_file():
            missing.append(f"{config_files[component].relative_to(folder)}")
        try:
            files[component] = loading.find_files(roots[component], spec)
        except VidaxError:
            missing.append(f"the {component} weights ({', '.join(spec.files)} under "
                           f"{roots[component].relative_to(folder.parent)})")
    tokenizer = folder / "tokenizer"
    if not any((tokenizer / name).is_file() for name in ("tokenizer.json", "spiece.model")):
        missing.append("tokenizer/spiece.model (or tokenizer/tokenizer.json)")
    scheduler_file = folder / "scheduler" / "scheduler_config.json"
    if not scheduler_file.is_file():
        missing.append("scheduler/scheduler_config.json")
    if missing:
        raise VidaxError(f"{folder} is not a complete CogVideoX release folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")
    files["tokenizer"] = tokenizer
    parsers = {"dit": CogVideoXDiTConfig.from_dict, "vae": CogVideoXVAEConfig.from_dict,
               "text_encoder": T5Config.from_dict}
    configs = {}
    for component, parse in parsers.items():
        path = config_files[component]
        try:
            configs[component] = parse(_read_json(path, "config"))
        except (TypeError, KeyError, ValueError) as e:
            raise VidaxError(f"{path}: not a {component} config vidax can build ({e})") from e
    scheduler_config = _read_json(scheduler_file, "scheduler config")
    # the DDIM scheduler checks the config; the DPM one reads the same keys
    SAMPLE_SOLVERS["ddim"](1, scheduler_config)
    dit, vae, te = configs["dit"], configs["vae"], configs["text_encoder"]
    found = variant_of(dit)
    if variant is not None and variant != found:
        raise VidaxError(f"{folder / 'transformer' / 'config.json'} is a CogVideoX {found} "
                         f"DiT, not {variant}")
    channels = vae.latent_channels * (2 if found in I2V_VARIANTS else 1)
    if dit.in_channels != channels or dit.out_channels != vae.latent_channels:
        raise VidaxError(f"{folder}: the DiT takes {dit.in_channels} and makes "
                         f"{dit.out_channels} channels; the VAE's latents have "
                         f"{vae.latent_channels} (a {found} DiT needs {channels} in)")
    if dit.text_embed_dim != te.dim:
        raise VidaxError(f"{folder}: the DiT reads text of width {dit.text_embed_dim}, but "
                         f"text_encoder/ encodes {te.dim}")
    return Release(folder, found, configs, files, scheduler_config)


# ----------------------------------------------------------------------------- inputs
def check_frames(frames, temporal: int = 4) -> int:
    """The VAE turns ``temporal * k + 1`` frames into ``k + 1`` latent frames."""
    if not isinstance(frames, (int, np.integer)) or frames < 1 or (frames - 1) % temporal:
        raise VidaxError(f"frames {frames!r}: the frame count must be {temporal}k+1 (1, "
                         f"{temporal + 1}, ..., 49, ..., 81), because the VAE turns "
                         f"{temporal}k+1 frames into k+1 latent frames")
    return int(frames)


def check_size(size, multiple: int = 16) -> tuple[int, int]:
    """Width and height: positive multiples of 16 (VAE 8 x DiT patch 2)."""
    width, height = (int(s) for s in size)
    if width < multiple or height < multiple or width % multiple or height % multiple:
        def nearest(n):
            return max(multiple, multiple * round(n / multiple))
        raise VidaxError(f"size {width}x{height}: width and height must be multiples of "
                         f"{multiple} (the VAE's 8x compression times the DiT's 2x2 patches);"
                         f" the nearest valid size is {nearest(width)}x{nearest(height)}")
    return width, height


def resize_image(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> float32 [-1, 1] ``[height, width, 3]``: diffusers'
    ``VideoProcessor.preprocess`` (Pillow Lanczos resize, ``/ 255``, ``2 x - 1``)."""
    from PIL import Image

    pil = Image.fromarray(image)
    if pil.size != (width, height):
        pil = pil.resize((width, height), resample=Image.Resampling.LANCZOS)
    x = np.asarray(pil).astype(np.float32) / np.float32(255)
    return np.float32(2) * x - np.float32(1)


def latent_frames(variant: str, frames: int, temporal: int = 4) -> tuple[int, int]:
    """(latent frames sampled, leading padding frames cropped after sampling)."""
    n = (frames - 1) // temporal + 1
    pad = (-n) % _PATCH_T.get(variant, 1)
    return n + pad, pad


@dataclass(frozen=True)
class Request:
    """One generation, every option resolved. ``image``: float32 [-1, 1] ``[H, W, 3]`` at
    the output size (i2v) or None; ``noise``: the initial noise as given (checked against the
    release's latent shape when sampling) or None (drawn from ``seed``)."""

    task: str
    variant: str
    prompt: str
    negative_prompt: str
    frames: int
    size: tuple[int, int]
    steps: int
    guidance_scale: float
    dynamic_cfg: bool
    sample_solver: str
    seed: int
    fps: float
    noise: np.ndarray | None = None
    image: np.ndarray | None = None

    def latent_shape(self, channels: int, spatial: int = 8, temporal: int = 4
                     ) -> tuple[int, int, int, int]:
        """``[F', h, w, C]`` of the sampled latents (1.5: padded to even ``F'``)."""
        width, height = self.size
        return (latent_frames(self.variant, self.frames, temporal)[0], height // spatial,
                width // spatial, channels)


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, last_image=None, frames: int | None = None, size=None,
                 steps: int | None = None, guidance_scale: float | None = None,
                 shift: float | None = None, sample_solver: str | None = None,
                 dynamic_cfg: bool | None = None, seed: int = 0, noise=None,
                 fps: float | None = None) -> Request:
    """Validate and resolve a generation's options (None: the release's default,
    :data:`DEFAULTS`). ``sample_solver``: ``"ddim"`` or ``"dpm++"``; ``dynamic_cfg``
    default: on with ``"dpm++"`` (the authors' demo), off with DDIM (diffusers' default)."""
    if variant not in VARIANTS:
        raise VidaxError(f"unknown CogVideoX variant {variant!r}; known: {', '.join(VARIANTS)}")
    expected = "i2v" if variant in I2V_VARIANTS else "t2v"
    if task != expected:
        raise VidaxError(f"the CogVideoX {variant} release does {expected}, not {task!r}")
    if expected == "i2v" and image is None:
        raise VidaxError(f"the CogVideoX {variant} release is image-to-video: give the first "
                         "frame (--image)")
    if expected == "t2v" and image is not None:
        raise VidaxError(f"the CogVideoX {variant} release is text-to-video; image-to-video "
                         "needs the 5b-i2v or 1.5-5b-i2v release")
    if last_image is not None:
        raise VidaxError("CogVideoX takes no last frame (--last-image)")
    if shift is not None:
        raise VidaxError("CogVideoX has no --shift: its schedule is the release's "
                         "scheduler_config.json")
    if not isinstance(prompt, str):
        raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
    d = DEFAULTS[variant]
    frames = check_frames(d.frames if frames is None else frames)
    if isinstance(size, str):
        size = parse_size(size)
    size = check_size(d.size if size is None else size)
    steps = d.steps if steps is None else steps
    if not isinstance(steps, (int, np.integer)) or not 1 <= steps <= 1000:
        raise VidaxError(f"steps must be an integer in 1..1000, got {steps!r}")
    guidance_scale = number("guidance_scale", d.guidance_scale if guidance_scale is None
                            else guidance_scale, positive=False)
    sample_solver = sample_solver or d.sample_solver
    if sample_solver not in SAMPLE_SOLVERS:
        raise VidaxError(f"CogVideoX sample_solver must be one of "
                         f"{', '.join(SAMPLE_SOLVERS)}, got {sample_solver!r}")
    if dynamic_cfg is None:
        dynamic_cfg = sample_solver == "dpm++"
    fps = number("fps", d.fps if fps is None else fps)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VidaxError(f"seed must be a non-negative integer, got {seed!r}")
    frame = None if image is None else resize_image(load_image(image), *size)
    if noise is not None:
        noise = read_noise(noise)
    return Request(expected, variant, prompt, d.negative_prompt if negative_prompt is None
                   else negative_prompt, frames, size, int(steps), guidance_scale,
                   bool(dynamic_cfg), sample_solver, int(seed), fps, noise=noise, image=frame)


def noise_array(noise, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Initial noise as float32 ``[F', h, w, C]``; accepted: that, or diffusers' ``latents=``
    layout ``[F', C, h, w]``, either with a leading batch axis of 1."""
    array = np.asarray(noise)
    f, h, w, c = shape
    if array.ndim == 5 and array.shape[0] == 1:
        array = array[0]
    if array.shape == (f, h, w, c):
        pass
    elif array.shape == (f, c, h, w):
        array = array.transpose(0, 2, 3, 1)
    else:
        raise VidaxError(f"noise of shape {list(np.shape(noise))} does not fit this video: "
                         f"expected [{f}, {h}, {w}, {c}] ([F', H/8, W/8, C]) or diffusers' "
                         f"[{f}, {c}, {h}, {w}]")
    return np.ascontiguousarray(array, dtype=np.float32)


@dataclass(frozen=True)
class Draws:
    """Explicit random numbers for a run (each None: drawn from the request's seed).

    ``initial``: ``[F', h, w, C]`` (the request's ``noise`` wins); ``encode``: the image
    posterior sample's normal noise ``[1, h, w, C]`` (i2v); ``steps``: per step, the DPM
    sampler's noise ``[N, F', h, w, C]`` (the draw their step uses).
    """

    initial: np.ndarray | None = None
    encode: np.ndarray | None = None
    steps: np.ndarray | None = None


def dynamic_guidance(guidance_scale: float, timestep: int, num_steps: int) -> float:
    """diffusers' ``use_dynamic_cfg`` scale, evaluated as their Python float expression."""
    return 1 + guidance_scale * (
        (1 - math.cos(math.pi * ((num_steps - timestep) / num_steps) ** 5.0)) / 2)


def to_uint8(video: np.ndarray) -> np.ndarray:
    """Frames in [-1, 1] -> uint8 as diffusers' ``postprocess_video`` + ``numpy_to_pil``:
    ``x * 0.5 + 0.5`` clamped to [0, 1], ``* 255``, rounded."""
    unit = np.clip(np.asarray(video, np.float32) * np.float32(0.5) + np.float32(0.5), 0, 1)
    return np.round(unit * np.float32(255)).astype(np.uint8)


# ----------------------------------------------------------------------------- jitted pieces
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids):
    return nnx.merge(graphdef, params)(ids)


@dataclass(frozen=True)
class _StepKind:
    """What changes the traced step: CFG on/off, the sampler, image latents, ofs, and the
    DiT's compute dtype."""

    cfg: bool
    solver: str
    image: bool
    ofs: float | None
    compute_dtype: object


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(3, 4))
def _denoise_step(graphdef, kind: _StepKind, params, latents, state, image_latents, context,
                  t, g, k, noise):
    """One step of their loop on ``latents [1, F', h, w, C]``; ``context`` ``[2, L, D]``
    (negative, prompt) with CFG, else ``[1, L, D]``."""
    dit = nnx.merge(graphdef, params)
    n = 2 if kind.cfg else 1
    x = jnp.concatenate([latents] * n)
    if kind.image:
        x = jnp.concatenate([x, jnp.concatenate([image_latents] * n)], axis=-1)
    out = dit(x, context, jnp.broadcast_to(t, (n,)), ofs=kind.ofs,
              compute_dtype=kind.compute_dtype).astype(jnp.float32)
    pred = out[:1] + g * (out[1:] - out[:1]) if kind.cfg else out
    return SAMPLE_SOLVERS[kind.solver].step(pred, k, latents, state, noise)


# ----------------------------------------------------------------------------- the pipeline
class CogVideoXPipeline(PipelineBase):
    """A loaded CogVideoX release: ``pipe(prompt, **options)`` -> uint8 frames
    ``[F, H, W, 3]``. Options are :func:`make_request`'s; :meth:`sample` returns the final
    latents, :meth:`decode` turns them into frames, :meth:`write` writes an mp4."""

    def __init__(self, release: Release, *, dit, vae, text_encoder, tokenizer, mesh=None,
                 precision: str = "bf16", console=None):
        super().__init__(release, mesh=mesh, precision=precision, console=console)
        self.dit, self.vae, self.text_encoder, self.tokenizer = dit, vae, text_encoder, tokenizer

    @property
    def defaults(self) -> ReleaseDefaults:
        return self.release.defaults

    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None) -> CogVideoXPipeline:
        """Verify every component against its model (no weight read), then load them."""
        from vidax.text import load_tokenizer

        policy = precision_policy(precision)
        progress = Progress(console)
        specs = {"dit": registry.get(MODEL_TYPE, "dit", layout="diffusers"),
                 "vae": registry.get(MODEL_TYPE, "vae", layout="diffusers"),
                 "text_encoder": registry.get("t5", "encoder", layout="transformers")}
        for component, spec in specs.items():
            path = release.files[component]
            with open_checkpoint(path) as ckpt:
                report, _, _ = loading.verify_tensors(spec, release.configs[component], ckpt,
                                                      source=str(path))
            if not report.ok:
                raise VerificationError(
                    f"{path} does not hold the CogVideoX {component} at its config (no "
                    f"weights were loaded): " + "; ".join(report.lines(5)[1:]), report)
        progress.line(f"CogVideoX {release.variant} in {release.folder}: every component "
                      f"verified; loading with precision {policy.name}")
        dtypes = {"dit": policy.dit_compute, "vae": policy.vae,
                  "text_encoder": policy.text_encoder}
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
        tokenizer = load_tokenizer(release.files["tokenizer"],
                                   seq_len=release.configs["dit"].max_text_seq_length, clean=None)
        return cls(release, tokenizer=tokenizer, mesh=mesh, precision=precision,
                   console=console, **models)

    # ------------------------------------------------------------------------- pieces
    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, **options)

    def _place(self, array):
        if self.mesh is None:
            return jnp.asarray(array)
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(array, NamedSharding(self.mesh, PartitionSpec()))

    @property
    def _factors(self) -> tuple[int, int]:
        """(temporal, spatial) compression of the VAE."""
        vae = self.release.configs["vae"]
        return vae.temporal_compression_ratio, vae.spatial_stride

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """T5 states ``[len(prompts), max_text_seq_length, D]`` (float32), no mask."""
        tokens = self.tokenizer(prompts)
        graphdef, params = nnx.split(self.text_encoder)
        return _encode_text(graphdef, params, self._place(tokens.ids)).astype(jnp.float32)

    def encode_image(self, frame: np.ndarray, noise) -> jax.Array:
        """The scaled image latent ``[1, 1, h, w, C]`` of a [-1, 1] frame ``[H, W, 3]``: a
        posterior sample with the standard-normal ``noise [1, h, w, C]``, times
        ``scaling_factor`` (1.0) or times ``1 / scaling_factor`` (1.5,
        ``invert_scale_latents``), each factor a float32 as diffusers multiplies."""
        vae_cfg = self.release.configs["vae"]
        video = np.asarray(frame, np.float32)[None, None]
        mean, log_var = self.vae.encode(video, normalize=False, return_log_var=True)
        z = mean + jnp.exp(0.5 * log_var) * self._place(np.asarray(noise, np.float32)[None])
        sf = vae_cfg.scaling_factor
        return z * np.float32(1 / sf if vae_cfg.invert_scale_latents else sf)

    def _resolve(self, request: Request) -> Request:
        """Checks that need the loaded release's configs."""
        if request.variant != self.variant:
            raise VidaxError(f"the request is for CogVideoX {request.variant}; this pipeline "
                             f"is {self.variant}")
        cfg = self.dit.config
        temporal, spatial = self._factors
        check_frames(request.frames, temporal)
        width, height = request.size
        multiple = spatial * cfg.patch_size
        if width % multiple or height % multiple:
            raise VidaxError(f"size {width}x{height}: must be multiples of {multiple}")
        grid = (height // multiple, width // multiple)
        if cfg.use_learned_positional_embeddings and grid != cfg.sample_grid[1:]:
            raise VidaxError(f"the CogVideoX {self.variant} DiT runs only at its sample size "
                             f"{cfg.sample_width * spatial}x{cfg.sample_height * spatial} "
                             f"(its learned position table); got {width}x{height}")
        if cfg.patch_size_t is not None:
            rows, cols = cfg.sample_height // cfg.patch_size, cfg.sample_width // cfg.patch_size
            if grid[0] > rows or grid[1] > cols:
                raise VidaxError(f"size {width}x{height} is beyond the CogVideoX1.5 DiT's "
                                 f"position grid ({cols * multiple}x{rows * multiple} at most)")
        if request.noise is not None:
            shape = request.latent_shape(self.release.configs["vae"].latent_channels, spatial,
                                         temporal)
            return dataclasses.replace(request, noise=noise_array(request.noise, shape))
        return request

    # ------------------------------------------------------------------------- generation
    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               draws: Draws | None = None, **options) -> np.ndarray:
        """The final latents ``[F', h, w, C]`` (float32, scaled as the DiT sees them), with the
        1.5 padding frames already cropped."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        request = self._resolve(request)
        draws = draws or Draws()
        temporal, spatial = self._factors
        channels = self.release.configs["vae"].latent_channels
        shape = request.latent_shape(channels, spatial, temporal)
        pad = latent_frames(self.variant, request.frames, temporal)[1]
        keys = jax.random.split(jax.random.key(request.seed), 3)
        scheduler = SAMPLE_SOLVERS[request.sample_solver](request.steps,
                                                          self.release.scheduler_config)
        cfg = request.guidance_scale > 1.0
        dit_cfg = self.dit.config
        kind = _StepKind(cfg, request.sample_solver, request.image is not None,
                         OFS if dit_cfg.ofs_embed_dim else None, self.precision.dit_compute)
        initial = request.noise if request.noise is not None else draws.initial
        if initial is None:
            initial = jax.random.normal(keys[0], shape, jnp.float32)
        latents = self._place(np.asarray(initial, np.float32).reshape(shape)[None])
        with self._matmul_precision():
            with self._progress.phase("encoding the prompt and the negative prompt"):
                texts = [request.negative_prompt, request.prompt] if cfg else [request.prompt]
                context = self.encode_text(texts)
            image_latents = None
            if request.image is not None:
                with self._progress.phase("encoding the image"):
                    noise = draws.encode
                    if noise is None:
                        noise = jax.random.normal(keys[1], (1, *shape[1:]), jnp.float32)
                    first = self.encode_image(request.image, noise)
                    image_latents = jnp.concatenate(
                        [first, jnp.zeros((1, shape[0] - 1, *shape[1:]), jnp.float32)], axis=1)
            state = scheduler.init(latents.shape)
            graphdef, params = nnx.split(self.dit)
            n = len(scheduler.timesteps)
            with self._progress.phase(f"sampling {request.frames} frames at "
                                      f"{request.size[0]}x{request.size[1]}, {n} steps "
                                      f"({request.sample_solver})", total=n) as advance:
                for k, t in enumerate(scheduler.timesteps):
                    g = (dynamic_guidance(request.guidance_scale, int(t), n)
                         if request.dynamic_cfg else request.guidance_scale)
                    noise = None
                    if request.sample_solver == "dpm++":
                        noise = (draws.steps[k] if draws.steps is not None else
                                 jax.random.normal(jax.random.fold_in(keys[2], k), shape))
                        noise = self._place(np.asarray(noise, np.float32).reshape(shape)[None])
                    latents, state = _denoise_step(
                        graphdef, kind, params, latents, state, image_latents, context,
                        jnp.float32(t), jnp.float32(g), k, noise)
                    latents.block_until_ready()
                    advance()
        return np.asarray(latents[0, pad:])

    def decode(self, latents) -> np.ndarray:
        """Latents ``[F', h, w, C]`` (cropped) -> uint8 frames ``[F, H, W, 3]``."""
        return to_uint8(self.decode_video(latents))

    def decode_video(self, latents) -> np.ndarray:
        """Latents -> frames in [-1, 1] (unclamped float32, diffusers' ``vae.decode``)."""
        sf = np.float32(1 / self.release.configs["vae"].scaling_factor)
        z = jnp.asarray(np.asarray(latents, np.float32)[None]) * sf
        with self._matmul_precision(), self._progress.phase(
                f"decoding {z.shape[1]} latent frames"):
            return self.vae.decode(z, normalized=False, clamp=False)[0]

    def __call__(self, prompt: str | None = None, *, request: Request | None = None,
                 draws: Draws | None = None, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]``."""
        if request is None:
            request = self.request(prompt, **options)
        return self.decode(self.sample(request=request, draws=draws))


Pipeline = CogVideoXPipeline
