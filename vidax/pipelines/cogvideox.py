"""CogVideoX / CogVideoX1.5 text-to-video and image-to-video, as diffusers runs them.

Mirrors diffusers' ``CogVideoXPipeline`` and ``CogVideoXImageToVideoPipeline``
(``pipelines/cogvideo/``) on a release folder (``transformer/``, ``vae/``, ``text_encoder/``,
``tokenizer/``, ``scheduler/``), with the settings of the authors' ``inference/cli_demo.py``
as defaults (:data:`DEFAULTS`). What is CogVideoX's own on the skeleton
(:mod:`vidax.pipelines.base`):

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
5. Each step: the DiT on ``[negative, prompt]`` as one batch of 2 (one batch of 1 when
   ``guidance_scale <= 1``), CFG ``u + g (c - u)`` -- with ``dynamic_cfg`` (the authors'
   demo: on with DPM) ``g_t = 1 + g (1 - cos(pi ((N - t) / N)^5)) / 2`` with ``t`` the
   integer timestep, exactly their expression -- then the scheduler step.
6. Decoding: ``latents * (1 / scaling_factor)``, the VAE in diffusers' frame batches and,
   where the frame is larger than 240 x 360, its ``enable_tiling()`` spatial tiles (the
   demo's ``pipe.vae.enable_tiling()``; :data:`VAE_TILES`), frames ``(x / 2 + 0.5)``
   clamped to [0, 1], ``* 255`` rounded (their ``numpy_to_pil``).

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
import math
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.cogvideox.dit import CogVideoXDiTConfig
from vidax.models.cogvideox.vae import (DECODE_FRAMES_PER_CHUNK, CogVideoXVAEConfig,
                                        TileSettings, frame_batches, tile_geometry)
from vidax.models.t5.model import T5Config
from vidax.pipelines import base, memory, overrides
from vidax.pipelines.base import (Defaults, Needed, Part, PipelineBase, Release, Run, find_files,
                                  open_folder)
from vidax.pipelines.inputs import load_image, read_json_config, read_noise, refuse, seed_key
from vidax.schedulers.cogvideox import SAMPLE_SOLVERS
from vidax.sharding import constrain_batch

MODEL_TYPE = "cogvideox"
TASKS = ("t2v", "i2v")
VARIANTS = ("2b", "5b", "5b-i2v", "1.5-5b", "1.5-5b-i2v")
I2V_VARIANTS = ("5b-i2v", "1.5-5b-i2v")
#: The 1.5 models patch 2 latent frames at a time.
_PATCH_T = {"1.5-5b": 2, "1.5-5b-i2v": 2}
#: diffusers' I2V pipelines feed the 1.5-I2V DiT this ``ofs`` (``new_full((1,), 2.0)``).
OFS = 2.0
#: Every CogVideoX VAE: 4x temporal, 8x spatial; the DiT's 2x2 patches: sizes multiples of 16.
VAE_STRIDE = (4, 8, 8)
PATCH = 2
#: The VAE decodes in ``enable_tiling()``'s spatial tiles (240 x 360 px, overlaps 1/6 and
#: 1/5) wherever the frame is larger than one, as the authors' ``cli_demo.py`` does
#: (``pipe.vae.enable_tiling()``; diffusers' pipeline leaves it off): one untiled float32
#: chunk needs 44 GiB of temporaries at 720 x 480 (XLA's count; ~3x that at 1.5's 1360 x
#: 768), a tile 11 GiB. Frames of at most one tile (the tests' sizes) decode whole.
VAE_TILES = TileSettings()
#: component -> (its folder, its config class, what it is)
COMPONENTS = {"dit": ("transformer", CogVideoXDiTConfig, "the DiT"),
              "vae": ("vae", CogVideoXVAEConfig, "the VAE"),
              "text_encoder": ("text_encoder", T5Config, "the T5 text encoder")}
TOKENIZER_FILES = ("tokenizer.json", "spiece.model")
SCHEDULER = Needed("scheduler", "scheduler", ("scheduler_config.json",), "the scheduler config")
#: The Parts ``--dit`` / ``--vae`` / ``--text-encoder`` replace (:mod:`vidax.pipelines.overrides`;
#: a folder given also holds that component's ``config.json``).
COMPONENT_OPTIONS = {key: key for key in COMPONENTS}


@dataclass(frozen=True, kw_only=True)
class ReleaseDefaults(Defaults):
    """The authors' ``cli_demo.py`` settings for a release: ``RESOLUTION_MAP`` sizes, 50
    steps, guidance 6.0, the DPM sampler with dynamic CFG for the 5B models (their comment:
    DDIM for 2B); 49 frames at 8 fps (1.0 READMEs) or 81 at 16 fps (1.5)."""

    steps: int = 50
    guidance_scale: float = 6.0
    negative_prompt: str = ""

    @property
    def dynamic_cfg(self) -> bool:
        return self.sample_solver == "dpm++"


_V1 = dict(frames=49, size=(720, 480), fps=8.0)
_V15 = dict(frames=81, size=(1360, 768), fps=16.0)
DEFAULTS = {
    "2b": ReleaseDefaults(**_V1, sample_solver="ddim"),
    "5b": ReleaseDefaults(**_V1, sample_solver="dpm++"),
    "5b-i2v": ReleaseDefaults(**_V1, sample_solver="dpm++"),
    "1.5-5b": ReleaseDefaults(**_V15, sample_solver="dpm++"),
    "1.5-5b-i2v": ReleaseDefaults(**_V15, sample_solver="dpm++"),
}


def variant_of(cfg: CogVideoXDiTConfig) -> str:
    """The release kind a DiT config is (its structure, whatever its widths)."""
    if cfg.patch_size_t is not None:
        return "1.5-5b-i2v" if cfg.ofs_embed_dim else "1.5-5b"
    if cfg.use_learned_positional_embeddings:
        return "5b-i2v"
    return "5b" if cfg.use_rotary_positional_embeddings else "2b"


def task_of(variant: str) -> str:
    return "i2v" if variant in I2V_VARIANTS else "t2v"


# ----------------------------------------------------------------------------- the release
def inspect_folder(folder, variant: str | None = None) -> Release:
    """Find every component of a CogVideoX release folder (diffusers' pipeline layout)
    without reading a weight. ``variant``: one of :data:`VARIANTS`; default: read from
    ``transformer/config.json`` (given, it must agree with it)."""
    folder = open_folder(folder, "CogVideoX", VARIANTS, variant,
                         "diffusers' layout: " + ", ".join(
                             f"{d}/" for d in ("transformer", "vae", "text_encoder",
                                               "tokenizer", "scheduler")))
    specs = {"dit": registry.get(MODEL_TYPE, "dit", layout="diffusers"),
             "vae": registry.get(MODEL_TYPE, "vae", layout="diffusers"),
             "text_encoder": registry.get("t5", "encoder", layout="transformers")}
    parts = [Part(key, spec, COMPONENTS[key][2], "text_encoder" if key == "text_encoder"
                  else "") for key, spec in specs.items()]
    dirs = {key: overrides.folder_for(key) or folder / d for key, (d, _, _) in COMPONENTS.items()}
    also = [f"{overrides.folder_for(key) or d}/config.json ({role}'s config)" for key, (
        d, _, role) in COMPONENTS.items() if not (dirs[key] / "config.json").is_file()]
    if not any((folder / "tokenizer" / name).is_file() for name in TOKENIZER_FILES):
        also.append("tokenizer/spiece.model or tokenizer/tokenizer.json (the T5 tokenizer)")
    files = find_files(folder, parts, [SCHEDULER], what="CogVideoX release",
                       also_missing=also)
    files["tokenizer"] = folder / "tokenizer"
    configs = {}
    for key, (_, config_class, role) in COMPONENTS.items():
        path = dirs[key] / "config.json"
        try:
            configs[key] = config_class.from_dict(read_json_config(path))
        except (TypeError, KeyError, ValueError) as e:
            raise VidaxError(f"{path}: not a config of {role} vidax can build ({e})") from e
    configs["scheduler"] = read_json_config(files["scheduler"] / "scheduler_config.json")
    SAMPLE_SOLVERS["ddim"](1, configs["scheduler"])  # checks it; the DPM reads the same keys
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
    if (vae.temporal_compression_ratio, vae.spatial_stride, dit.patch_size) != (
            *VAE_STRIDE[:2], PATCH):
        raise VidaxError(f"{folder}: vidax runs CogVideoX VAEs of 4x temporal and 8x spatial "
                         f"compression with a DiT of 2x2 patches; this one is "
                         f"{vae.temporal_compression_ratio}x, {vae.spatial_stride}x, "
                         f"{dit.patch_size}x{dit.patch_size}")
    if dit.text_embed_dim != te.dim:
        raise VidaxError(f"{folder}: the DiT reads text of width {dit.text_embed_dim}, but "
                         f"text_encoder/ encodes {te.dim}")
    return Release(folder, task_of(found), found, DEFAULTS[found], configs, files, specs)


# ----------------------------------------------------------------------------- inputs
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
class Draws(base.Draws):
    """:class:`vidax.pipelines.base.Draws` (``initial`` ``[F', h, w, C]``, ``encode`` for
    i2v) with ``steps``: per step, the DPM sampler's noise ``[N, F', h, w, C]`` (the draw
    their step uses)."""

    steps: np.ndarray | None = None


@dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """:class:`vidax.pipelines.base.Request` with the release ``variant``, ``dynamic_cfg``
    and explicit ``draws``; ``image``: float32 [-1, 1] ``[H, W, 3]`` at the output size.
    ``noise`` is kept as given until the loaded pipeline knows its VAE's latent channels
    (``latent_channels``); :attr:`latent_shape` counts the 1.5 padding frames."""

    variant: str
    dynamic_cfg: bool
    draws: Draws | None = None

    noise_layouts: ClassVar[dict[str, str]] = {"diffusers'": "TCHW"}

    @property
    def pad(self) -> int:
        """The leading latent frames sampled and cropped (1.5's temporal patch)."""
        return latent_frames(self.variant, self.frames, self.vae_stride[0])[1]

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        t, h, w, c = super().latent_shape
        return t + self.pad, h, w, c


def make_request(task: str, variant: str, prompt: str, *, image=None, last_image=None,
                 frames: int | None = None, steps: int | None = None,
                 shift: float | None = None, sample_solver: str | None = None,
                 dynamic_cfg: bool | None = None, noise=None, **options) -> Request:
    """Validate and resolve a generation's options (:meth:`base.Request.resolve`'s; None:
    the release's default, :data:`DEFAULTS`). ``sample_solver``: ``"ddim"`` or ``"dpm++"``;
    ``dynamic_cfg`` default: on with ``"dpm++"`` (the authors' demo), off with DDIM
    (diffusers' default)."""
    if variant not in VARIANTS:
        raise VidaxError(f"unknown CogVideoX variant {variant!r}; known: {', '.join(VARIANTS)}")
    expected = task_of(variant)
    if task != expected:
        raise VidaxError(f"the CogVideoX {variant} release does {expected}, not {task!r}")
    if expected == "i2v" and image is None:
        raise VidaxError(f"the CogVideoX {variant} release is image-to-video: give the first "
                         "frame (--image)")
    if expected == "t2v" and image is not None:
        raise VidaxError(f"the CogVideoX {variant} release is text-to-video; image-to-video "
                         "needs the 5b-i2v or 1.5-5b-i2v release")
    refuse("CogVideoX", last_image=(last_image, "it has no last-frame conditioning"),
           shift=(shift, "its schedule is the release's scheduler_config.json"))
    if frames is not None and (not isinstance(frames, (int, np.integer)) or frames < 1
                               or (frames - 1) % VAE_STRIDE[0]):
        raise VidaxError(f"frames {frames!r}: CogVideoX makes 4k+1 frames (its VAE turns 4k+1 "
                         "frames into k+1 latent frames): 49 for the 1.0 releases, 81 for 1.5")
    d = DEFAULTS[variant]
    solver = sample_solver or d.sample_solver
    request = Request.resolve(
        task, d, prompt, frames=frames, steps=steps, sample_solver=sample_solver,
        solvers=SAMPLE_SOLVERS, variant=variant, vae_stride=VAE_STRIDE,
        dynamic_cfg=solver == "dpm++" if dynamic_cfg is None else bool(dynamic_cfg), **options)
    if request.steps > 1000:
        raise VidaxError(f"steps must be an integer in 1..1000 (the schedule's training "
                         f"timesteps), got {request.steps}")
    return dataclasses.replace(
        request, image=None if image is None else resize_image(load_image(image), *request.size),
        noise=None if noise is None else read_noise(noise))


def dynamic_guidance(guidance_scale: float, timestep: int, num_steps: int) -> float:
    """diffusers' ``use_dynamic_cfg`` scale, evaluated as their Python float expression."""
    return 1 + guidance_scale * (
        (1 - math.cos(math.pi * ((num_steps - timestep) / num_steps) ** 5.0)) / 2)


def to_uint8(video: np.ndarray) -> np.ndarray:
    """Frames in [-1, 1] -> uint8 as diffusers' ``postprocess_video`` + ``numpy_to_pil``:
    ``x * 0.5 + 0.5`` clamped to [0, 1], ``* 255``, rounded."""
    unit = np.clip(np.asarray(video, np.float32) * np.float32(0.5) + np.float32(0.5), 0, 1)
    return np.round(unit * np.float32(255)).astype(np.uint8)


def seed_keys(seed: int) -> jax.Array:
    """The seed's three streams: the initial noise, the image posterior sample, the DPM
    steps' noise (folded with the step index)."""
    return jax.random.split(seed_key(seed), 3)


# ----------------------------------------------------------------------------- the pipeline
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids):
    return nnx.merge(graphdef, params)(ids)


class CogVideoXPipeline(PipelineBase):
    """A loaded CogVideoX release (:class:`vidax.pipelines.base.PipelineBase`); options are
    :func:`make_request`'s; :meth:`sample` also takes explicit :class:`Draws`."""

    NAME = "CogVideoX"
    CHEAPER_GUIDANCE = True
    PROMPT_ROW = 1   # diffusers' [negative, prompt]
    PAIRED_INPUTS = ("context",)
    make_request = staticmethod(make_request)
    to_uint8 = staticmethod(to_uint8)

    def setup(self) -> None:
        from vidax.text import load_tokenizer

        self.tokenizer = load_tokenizer(self.release.files["tokenizer"], clean=None,
                                        seq_len=self.release.configs["dit"].max_text_seq_length)

    def dit_geometry(self, request: Request) -> memory.DiTGeometry:
        """The video tokens and the text in one joint attention; diffusers' 4x MLP."""
        cfg = self.release.configs["dit"]
        patch = (cfg.patch_size_t or 1, cfg.patch_size, cfg.patch_size)
        return memory.DiTGeometry(
            2 if request.guidance_scale > 1 else 1, memory.patches(request.latent_shape, patch),
            cfg.inner_dim, cfg.num_attention_heads, 4 * cfg.inner_dim,
            joint=cfg.max_text_seq_length)

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        """Chunks of 2 latent frames (the first 3: 9 frames); at full size the upsampled
        input of the last block (``block_out_channels[1]``, twice: beside its spatial norm's
        two convs of the latent) and the block's own (calibrated on measured peak RSS:
        ``benchmarks/memory_estimate.py``); over the largest spatial tile, each tile's
        chunks counted, where the frame is larger than one (:data:`VAE_TILES`)."""
        cfg, (width, height) = self.release.configs["vae"], request.size
        chunks = len(frame_batches(request.latent_shape[0], DECODE_FRAMES_PER_CHUNK))
        channels = 2 * cfg.block_out_channels[1] + cfg.block_out_channels[0]
        whole = memory.VAEGeometry(9, height, width, channels, chunks, request.frames)
        if not VAE_TILES.spatial(cfg.spatial_stride).applies(*request.latent_shape[1:3]):
            return whole
        g = tile_geometry(request.latent_shape, tiled=VAE_TILES, config=cfg)
        return dataclasses.replace(whole, height=g.sample[1], width=g.sample[2],
                                   chunks=g.count, frame_size=request.size)

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """T5 states ``[len(prompts), max_text_seq_length, D]`` (float32), no mask."""
        graphdef, params = nnx.split(self.text_encoder)
        ids = self._place(self.tokenizer(prompts).ids)
        return _encode_text(graphdef, params, ids).astype(jnp.float32)

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

    def resolve(self, request: Request, draws: Draws | None = None) -> Request:
        """The request for this release: its variant and the DiT's position grid checked,
        the VAE's latent channels, the initial noise (or ``draws.initial``) read against
        them."""
        if request.variant != self.variant:
            raise VidaxError(f"the request is for CogVideoX {request.variant}; this pipeline "
                             f"is {self.variant}")
        cfg = self.release.configs["dit"]   # the loaded DiT's, known before it is loaded
        width, height = request.size
        multiple = VAE_STRIDE[1] * PATCH
        grid = (height // multiple, width // multiple)
        if cfg.use_learned_positional_embeddings and grid != cfg.sample_grid[1:]:
            raise VidaxError(f"the CogVideoX {self.variant} DiT runs only at its sample size "
                             f"{cfg.sample_width * VAE_STRIDE[1]}x"
                             f"{cfg.sample_height * VAE_STRIDE[1]} (its learned position "
                             f"table); got {width}x{height}")
        if cfg.patch_size_t is not None:
            rows, cols = cfg.sample_height // cfg.patch_size, cfg.sample_width // cfg.patch_size
            if grid[0] > rows or grid[1] > cols:
                raise VidaxError(f"size {width}x{height} is beyond the CogVideoX1.5 DiT's "
                                 f"position grid ({cols * multiple}x{rows * multiple} at most)")
        draws = draws or request.draws or Draws()
        noise = request.noise if request.noise is not None else draws.initial
        return dataclasses.replace(
            request, draws=draws, noise=None,
            latent_channels=self.release.configs["vae"].latent_channels).with_noise(noise)

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               draws: Draws | None = None, memory_check: bool = True,
               **options) -> np.ndarray:
        """The final latents ``[F', h, w, C]`` (float32, scaled as the DiT sees them), with the
        1.5 padding frames already cropped."""
        request = self._request(prompt, request, options)   # resolved (once) by base.sample
        return super().sample(request=request, draws=draws,
                              memory_check=memory_check)[request.pad:]

    def initial_noise(self, request: Request) -> jax.Array:
        if request.noise is not None:
            return super().initial_noise(request)
        noise = jax.random.normal(seed_keys(request.seed)[0], request.latent_shape)
        return self._place(noise[None])

    def prepare(self, request: Request) -> Run:
        cfg = request.guidance_scale > 1.0
        keys = seed_keys(request.seed)
        with self._progress.phase("encoding the prompt and the negative prompt"):
            texts = [request.negative_prompt, request.prompt] if cfg else [request.prompt]
            inputs = {"context": self.encode_text(texts), "image_latents": None}
        if request.image is not None:
            shape = request.latent_shape
            with self._progress.phase("encoding the image"):
                first = self.encode_image(request.image,
                                          request.draws.pick("encode", keys[1], (1, *shape[1:])))
                inputs["image_latents"] = jnp.concatenate(
                    [first, jnp.zeros((1, shape[0] - 1, *shape[1:]), jnp.float32)], axis=1)
        scheduler = SAMPLE_SOLVERS[request.sample_solver](request.steps,
                                                          self.release.configs["scheduler"])
        guidance = (f", guidance {request.guidance_scale:g}"
                    f"{' (dynamic)' if request.dynamic_cfg else ''}" if cfg else "")
        return Run(self.initial_noise(request), scheduler, inputs, nnx.split(self.dit),
                   f"{request.steps} steps ({request.sample_solver}){guidance}",
                   {"cfg": cfg, "key": keys[2]})

    def step_inputs(self, request: Request, run: Run, index: int, t):
        """Per step: the (dynamic) guidance scale; the DPM sampler's noise."""
        inputs = {}
        if run.extra["cfg"]:
            g = request.guidance_scale
            if request.dynamic_cfg:
                g = dynamic_guidance(g, int(t), len(run.scheduler.timesteps))
            inputs["guidance_scale"] = jnp.float32(g)
        if request.sample_solver == "dpm++":
            noise = request.draws.pick("steps", jax.random.fold_in(run.extra["key"], index),
                                       request.latent_shape, index)
            inputs["solver"] = {"noise": self._place(noise[None])}
        return run.model, jnp.float32(t), inputs

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        """The DiT on ``[noisy latents | image latents]`` (i2v) with ``ofs`` (1.5-I2V)."""
        image = inputs["image_latents"]
        if image is not None:
            x = jnp.concatenate([x, constrain_batch(jnp.concatenate([image] * len(x)))], -1)
        out = dit(x, constrain_batch(inputs["context"]), jnp.broadcast_to(t, x.shape[:1]),
                  ofs=OFS if dit.config.ofs_embed_dim else None, compute_dtype=compute_dtype)
        return out.astype(jnp.float32)

    @staticmethod
    def guide(negative, prompt, scale):
        """The pair is ``[negative, prompt]``, as diffusers batches it: ``u + g (c - u)``."""
        return negative + scale * (prompt - negative)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """diffusers' ``vae.decode(latents * (1 / scaling_factor))``, unclamped, with
        ``enable_tiling()`` on as the authors' ``cli_demo.py`` runs it (:data:`VAE_TILES`)."""
        sf = np.float32(1 / self.release.configs["vae"].scaling_factor)
        return self.vae.decode(latents * sf, normalized=False, clamp=False, tiled=VAE_TILES,
                               on_chunk=on_chunk)


Pipeline = CogVideoXPipeline
