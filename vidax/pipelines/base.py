"""The skeleton every family pipeline shares (docs/development.md): find a release's files, verify
every component before any weight is read, load them, validate a request, place inputs, draw
the initial noise, run the denoising loop, decode to uint8 frames, write the mp4. A family
module (``vidax/pipelines/<model_type>.py``) holds only what is its own.
The checks of user inputs it builds on (sizes, frames, numbers, images, noise files, prompts
past the text encoder's length) are :mod:`vidax.pipelines.inputs`'; torch-exact image ops
are :mod:`vidax.pipelines.image`'s.

What a family module provides (the names :mod:`vidax.pipelines` and ``vidax generate`` call):

``inspect_folder(folder, variant=None) -> Release``
    :func:`open_folder` (the folder exists, the variant is known), the family's reading of
    its own config files (which release and task), :func:`find_files` (each weight file by its
    registry file patterns, each needed folder; one error that lists every missing file), then
    a :class:`Release`: the defaults and, per weight file, its path, config and registry spec.
    ``COMPONENT_OPTIONS`` (module attribute): which Part key ``--dit`` / ``--vae`` /
    ``--text-encoder`` / ``--image-encoder`` replace; :func:`find_files` takes such a part
    from where it was given (:mod:`vidax.pipelines.overrides`, docs/generating.md).
``make_request(task, variant, prompt, **options) -> Request``
    the family's own checks (which images a task takes, ...), then :meth:`Request.resolve`
    for the shared options (one clear error each) with the family's extra fields (a
    :class:`Request` subclass), then :meth:`Request.with_noise` (``--noise FILE.npy``).
``Pipeline``: a :class:`PipelineBase` subclass, which implements the hooks below.

The hooks of :class:`PipelineBase` (the Wan modules are the worked example, ~410 lines each):

* ``NAME`` (class attribute): the family in messages, e.g. ``"Wan2.1"``.
* ``make_request``: the module's ``make_request``, as ``staticmethod(make_request)``.
* ``__init__(release, *, mesh, precision, console, **options)``: extend it for the family's
  own ``from_release`` options (checked there, before any weight is read).
* :meth:`~PipelineBase.param_dtype` ``(component)``: the dtype each component's weights are
  loaded in (default :func:`component_dtype`: the policy's compute dtype).
* :meth:`~PipelineBase.adopt` ``(key, model)``: keep a loaded model (default
  ``self.<key> = model``); called right after each file is read, so a family can move it
  elsewhere before the next one (Wan2.2's experts).
* :meth:`~PipelineBase.setup` ``()``: after loading, e.g. the tokenizers.
* :meth:`~PipelineBase.resolve` ``(request, draws=None) -> Request``: the request checked
  against the loaded weights, with explicit :class:`Draws` (default: unchanged, no draws).
* :meth:`~PipelineBase.prepare` ``(request) -> Run`` (**required**): encode the prompt (and
  images), the initial latents (:meth:`~PipelineBase.initial_noise`), the scheduler (any
  :class:`vidax.schedulers.base.Scheduler`) and the step's inputs.
* :meth:`~PipelineBase.step_inputs` ``(request, run, index, t)``: per step, the model to run,
  its timestep and inputs that change per step (default: ``run.model``, ``float32(t)``).
* ``predict(model, x, t, inputs, compute_dtype)`` (**required**, a staticmethod, traced):
  the DiT on ``x`` -- with CFG ``x`` is the ``[cond, uncond]`` batch of 2 and inputs that
  differ between the halves must be batched so too (:func:`cfg_pair`).
* ``guide(cond, uncond, scale)`` (staticmethod, traced): how cond/uncond combine (default
  ``uncond + scale (cond - uncond)``); CFG runs when ``inputs["guidance_scale"]`` is present.
* ``after_step(latents, inputs)`` (staticmethod, traced): after the scheduler's update
  (default: unchanged; Wan2.2 TI2V re-imposes its first frame).
* ``velocity(model, latents, t, inputs, compute_dtype)`` (classmethod, traced): ``predict``
  + ``guide``; override it whole for guidance that is not one cond/uncond pair (LTX-Video's
  STG batch of 3, CFG-star). ``inputs["solver"]``: keywords for the scheduler's ``step``
  (CogVideoX DPM's ``noise``, the rectified flow's per-token ``timestep``).
* :meth:`~PipelineBase.decode_latents` ``(latents, on_chunk=None)``: the VAE (default
  ``self.vae.decode``), calling ``on_chunk(done, total)`` per decoded chunk (progress);
  ``to_uint8``: frames in [-1, 1] to uint8 (default :func:`vidax.video.to_uint8`).
* :meth:`~PipelineBase.dit_geometry` / :meth:`~PipelineBase.vae_geometry` ``(request)``: the
  shapes :meth:`~PipelineBase.check_memory` estimates activations from
  (:mod:`vidax.pipelines.memory`); :meth:`~PipelineBase.weights_on_device` ``(weights)``
  (Wan2.2's swapped experts).

Each sampling step also returns whether its latents are all finite (fused into the jitted
step, read with the progress): the first step that is not stops the run with a
:class:`~vidax.errors.NumericalError`; the final latents and the decoded frames are checked
too, so no black video is written.

The traced hooks get no ``self``: the jitted step is cached per pipeline class, and a cached
``self`` would keep every weight alive. ``inputs`` is a dict pytree (a None value is part of
the traced structure). Building blocks for the hooks: :meth:`~PipelineBase._place` (an input
on the devices, its batch split over the mesh), :meth:`~PipelineBase._mesh` (the mesh as
context mesh), :meth:`~PipelineBase._matmul_precision`, ``self._progress.phase(...)``;
:class:`Draws` (explicit random numbers replaying the authors', subclassed by CogVideoX and
LTX-Video). A minimal family::

    class Pipeline(PipelineBase):
        NAME = "Foo"
        make_request = staticmethod(make_request)

        def setup(self):
            self.tokenizer = Tokenizer(self.release.files["tokenizer"], seq_len=512)

        def prepare(self, request):
            context = self.encode_text([request.prompt, request.negative_prompt])
            return Run(self.initial_noise(request), FlowMatchEulerScheduler(request.steps),
                       {"context": context, "guidance_scale": jnp.float32(request.guidance_scale)},
                       nnx.split(self.dit))

        @staticmethod
        def predict(dit, x, t, inputs, compute_dtype):
            return dit(x, jnp.broadcast_to(t, x.shape[:1]), constrain_batch(inputs["context"]),
                       compute_dtype=compute_dtype)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import loading
from vidax.lora import for_release as lora_for_release
from vidax.nn import step_cache
from vidax.nn.attention import budget as within_attention_budget
from vidax.pipelines import memory
from vidax.pipelines import offload as offloading
from vidax.pipelines import step_cache as step_caching
from vidax.pipelines.release import (Needed, Part, Release, find_files,  # noqa: F401
                                     open_folder, verify_component)
from vidax.pipelines.precision import (PRECISIONS, Precision,  # noqa: F401  (re-exported)
                                       component_dtype, precision_policy)
from vidax.pipelines.progress import Progress, log_every  # noqa: F401  (the hooks' names)
from vidax.pipelines.step_cache import Guidance
from vidax.errors import MemoryEstimateError, NumericalError, VidaxError
from vidax.sharding import constrain_batch, shard_batch, use_mesh
from vidax.pipelines.inputs import recognise  # noqa: F401  (re-exported)
from vidax.pipelines.inputs import (check_count, check_frames, check_seed, check_size,
                                    noise_array, number, parse_size, seed_key)
from vidax.video import to_uint8, write_mp4


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True, kw_only=True)
class Defaults:
    """A release's value of each shared option (``size`` is (width, height)); a family
    subclasses it for its own (Wan2.2's ``boundary``, ...). ``shift`` / ``sample_solver``
    None: the family has no such choice."""

    steps: int
    guidance_scale: float
    size: tuple[int, int]
    frames: int
    fps: float
    shift: float | None = None
    negative_prompt: str | None = None
    sample_solver: str | None = None

    def shift_for(self, size: tuple[int, int]) -> float | None:
        """The default shift at an output size (Wan2.1 i2v changes it at 480p)."""
        return self.shift


@dataclass(frozen=True, kw_only=True)
class Request:
    """One generation, every option resolved and validated (:meth:`resolve`). A family
    subclasses it for its own fields. ``size`` is the output (width, height); ``noise``
    ``[T, h, w, C]`` or None (drawn from ``seed``); ``image`` the family's conditioning
    frame; ``latent_channels`` and ``vae_stride`` (time, height, width) give
    :attr:`latent_shape`."""

    task: str
    prompt: str
    negative_prompt: str | None
    frames: int
    size: tuple[int, int]
    steps: int
    guidance_scale: float
    shift: float | None
    sample_solver: str | None
    seed: int
    fps: float
    noise: np.ndarray | None = None
    image: np.ndarray | None = None
    step_cache: Any = None
    guidance: Guidance | None = None
    latent_channels: int = 16
    vae_stride: tuple[int, int, int] = (4, 8, 8)

    #: The noise layouts :meth:`with_noise` accepts besides vidax's (:func:`noise_array`).
    noise_layouts: ClassVar[dict[str, str]] = {"the authors'": "CTHW"}

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        width, height = self.size
        stride = self.vae_stride
        return ((self.frames - 1) // stride[0] + 1, height // stride[1], width // stride[2],
                self.latent_channels)

    @classmethod
    def resolve(cls, task: str, defaults: Defaults, prompt: str, *,
                negative_prompt: str | None = None, frames: int | None = None,
                size: tuple[int, int] | str | None = None, steps: int | None = None,
                guidance_scale: float | None = None, shift: float | None = None,
                sample_solver: str | None = None, seed: int = 0, fps: float | None = None,
                solvers=None, size_multiple: int | None = None, size_why: str | None = None,
                **extras) -> Request:
        """The shared options, each None taking the release's default (``negative_prompt``
        also when empty), each checked with one clear error; ``extras``: the subclass's own
        fields (and ``latent_channels`` / ``vae_stride``). ``solvers``: the sampler names
        allowed (None: the family has no choice). Sizes must be multiples of
        ``size_multiple`` (default: the VAE's spatial stride times 2, the DiT's patch)."""
        d = defaults
        if not isinstance(prompt, str):
            raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
        stride = extras.get("vae_stride", (4, 8, 8))
        frames = check_frames(d.frames if frames is None else frames, stride[0])
        if isinstance(size, str):
            size = parse_size(size)
        size = check_size(d.size if size is None else size, size_multiple or 2 * stride[1],
                          size_why)
        steps = check_count("steps", d.steps if steps is None else steps)
        guidance_scale = number("guidance_scale", d.guidance_scale if guidance_scale is None
                                else guidance_scale, positive=False)
        if shift is not None or d.shift is not None:
            shift = number("shift", d.shift_for(size) if shift is None else shift)
        sample_solver = sample_solver or d.sample_solver
        if solvers is not None and sample_solver not in solvers:
            raise VidaxError(f"sample_solver must be one of {', '.join(solvers)}, got "
                             f"{sample_solver!r}")
        fps = number("fps", d.fps if fps is None else fps)
        seed = check_seed(seed)
        return cls(task=task, prompt=prompt, negative_prompt=negative_prompt or
                   d.negative_prompt, frames=frames, size=size, steps=steps,
                   guidance_scale=guidance_scale, shift=shift, sample_solver=sample_solver,
                   seed=seed, fps=fps, **extras)

    def with_noise(self, noise) -> Request:
        """This request with the given initial noise (an array or a ``.npy`` path, in one
        of :attr:`noise_layouts` or vidax's); unchanged for None."""
        if noise is None:
            return self
        return dataclasses.replace(self, noise=noise_array(noise, self.latent_shape,
                                                           self.noise_layouts))


def load_component(progress: Progress, model_type: str, component: str, path: Path, config,
                   dtype, mesh=None, *, layout: str | None = None, label: str | None = None,
                   quantized: str | None = None, loras=None, lora_mode: str = "merge",
                   host=None, quantize: str | None = None):
    """One component through ``vidax.load`` (verified 1:1), with a progress bar and its
    report's headline (and the LoRAs it applied); ``host``: which parameters go to host
    memory (:meth:`PipelineBase.host_placement`)."""
    label = label or component
    with progress.phase(f"loading {label} ({Path(path).name})") as advance:
        model, report = loading.load_with_report(
            model_type, component, path, config=config, dtype=dtype, mesh=mesh, layout=layout,
            progress=lambda done, total, name: advance(total=total), quantized=quantized,
            loras=loras, lora_mode=lora_mode, host=host,
            **({} if quantize is None else {"quantize": quantize}))
    progress.line(f"  {label}: {report.headline()}")
    for line in report.loras.lines if report.loras is not None else ():
        progress.line(f"  {label} LoRA ({report.loras.mode}) {line}")
    return model


# ----------------------------------------------------------------------------- sampling
@dataclass
class Run:
    """One sampling run as :meth:`PipelineBase.prepare` sets it up: the initial ``latents``
    ``[1, ...]`` on the pipeline's devices, the ``scheduler``, the jitted step's ``inputs``
    for every step (a dict pytree; None values allowed), the ``model`` ``(graphdef, params)``
    every step runs, the sampler's settings for the progress line (``what``) and the
    family's host-side bookkeeping (``extra``)."""

    latents: jax.Array
    scheduler: Any
    inputs: dict
    model: tuple
    what: str = ""
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Draws:
    """Explicit random numbers for a run, to replay the authors' draws (each None: drawn from
    the request's seed): ``initial`` ``[T, h, w, C]`` (the request's ``noise`` wins), ``encode``
    the image posterior sample's noise ``[1, h, w, C]``. A family subclasses it for its own
    (per-step noise, ...)."""

    initial: np.ndarray | None = None
    encode: np.ndarray | None = None

    def pick(self, name: str, key, shape, index: int | None = None) -> np.ndarray:
        """The numbers ``name`` (at ``index``, for per-step ones) as float32 ``shape``: the
        given ones, else a standard-normal draw from ``key``."""
        given = getattr(self, name)
        if given is None:
            return np.asarray(jax.random.normal(key, shape, jnp.float32))
        return np.asarray(given if index is None else given[index], np.float32).reshape(shape)


def cfg_pair(a):
    """``[a, a]`` along the batch (split over the mesh's batch axes): an input of the
    ``[cond, uncond]`` batch that both halves share. None stays None."""
    return None if a is None else constrain_batch(jnp.concatenate([a, a]))


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4), donate_argnums=(6, 7, 11))
def _sampling_step(family, solver_step, graphdef, compute_dtype, cache, params, latents, state,
                   index, t, inputs, cache_states):
    """One sampling step: the family's guided velocity, the scheduler's update (with
    ``inputs["solver"]``, a dict of its extra per-step arguments), ``after_step``. The
    latents, the scheduler state and the step cache's states are donated. Also returns
    whether every latent is finite (a scalar bool fused into the step, read on the host with
    the progress) and, with a step cache (``cache``, static), what it hands back
    (:meth:`vidax.nn.step_cache.Slot.outputs`: the new states, which rows ran the blocks)."""
    model = nnx.merge(graphdef, params)
    with step_cache.active(cache, cache_states, index) as slot:
        velocity = family.velocity(model, latents, t, inputs, compute_dtype)
    latents, state = solver_step(velocity, index, latents, state, **inputs.get("solver", {}))
    latents = family.after_step(latents, inputs)
    return latents, state, jnp.all(jnp.isfinite(latents)), (
        None if slot is None else slot.outputs())


@functools.lru_cache(maxsize=4)
def _budgeted_step(budget: int):
    """``_sampling_step`` as its own jitted function for an attention budget, traced under it
    (a jitted function keeps the kernels it was traced with: the budget is read at trace
    time, :func:`vidax.nn.attention.budget`)."""
    def traced(*args):   # a function of its own: jit's caches key on the function
        return _sampling_step.__wrapped__(*args)

    step = jax.jit(traced, static_argnums=(0, 1, 2, 3, 4), donate_argnums=(6, 7, 11))

    def run(*args):
        with within_attention_budget(budget):
            return step(*args)

    run.lower = step.lower
    return run


def non_finite_error(what: str, where: str, precision: str) -> NumericalError:
    """The error for non-finite numbers (NaN or Inf) in ``what``, made by ``where``."""
    hint = (" or run again with --precision fp32 (precision='fp32'), in case bfloat16 "
            "overflows" if precision != "fp32" else "")
    return NumericalError(
        f"{what} became non-finite (NaN or Inf) with {where}; no video was written. The "
        "weights are the likeliest cause: check them against their release (vidax verify, "
        f"or a fresh download){hint}; a custom --noise, --guidance-scale or --shift far from "
        "the release's defaults can do it too")


class PipelineBase(offloading.Offloading):
    """A loaded release: ``pipe(prompt, **options)`` -> uint8 frames ``[F, H, W, 3]``;
    :meth:`sample` returns the final latents, :meth:`decode` turns latents into frames,
    :meth:`write` writes an mp4 atomically. The hooks a family implements are listed in the
    module docstring."""

    NAME: ClassVar[str] = "?"
    make_request: ClassVar = None
    #: Whether :attr:`Request.guidance` applies: the family's ``predict`` takes the pair or
    #: the prompt alone (``guidance_scale`` None; its inputs of :attr:`PAIRED_INPUTS` cut
    #: to the prompt's row, :attr:`PROMPT_ROW` of the pair).
    CHEAPER_GUIDANCE: ClassVar[bool] = False
    PROMPT_ROW: ClassVar[int] = 0
    PAIRED_INPUTS: ClassVar[tuple[str, ...]] = ()
    to_uint8 = staticmethod(to_uint8)

    def __init__(self, release: Release, *, mesh=None, precision: str = "bf16", console=None,
                 quantized: str | None = None, loras=None, lora_mode: str = "merge",
                 offload: str | None = None, max_device_memory: int | None = None,
                 quantize: str | None = None):
        self._init_offload(offload)  # where the weights live (vidax.pipelines.offload)
        #: A device-memory budget in bytes the memory check plans to (None: the devices').
        self.max_device_memory = max_device_memory
        self.release, self.task, self.variant = release, release.task, release.variant
        self.precision = precision_policy(precision)
        self.mesh = mesh
        self.quantized = quantized   # vidax.load's quantized= for every component
        self.quantize = quantize     # vidax.load's quantize= ("fp8", "int8") for the DiT
        self.loras, self.lora_mode = loras, lora_mode   # the DiT's LoRAs (vidax.lora)
        self._progress = Progress(console)
        #: What each sampling loop of the last generation did (a multi-stage family has one
        #: a stage): :class:`vidax.pipelines.step_cache.SamplingReport`.
        self.sampling_reports: list = []

    @property
    def defaults(self) -> Defaults:
        return self.release.defaults

    # ------------------------------------------------------------------------- loading
    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None, quantized: str | None = None, loras=None,
                     lora_mode: str = "merge", offload: str | None = None,
                     max_device_memory: int | None = None, quantize: str | None = None,
                     **options) -> PipelineBase:
        """Verify every weight file against its model (no weight read) and every LoRA
        against the DiT(s), then load each one (``quantized``: ``vidax.load``'s, for
        quantized files: ``"keep"``, ``"dequantize"``, default keep fp8 and dequantize GGUF;
        ``loras``/``lora_mode``: the DiT's LoRAs, ``vidax.lora``; ``options``: the family's,
        see its ``__init__``; ``offload``: where the weights live between uses,
        :mod:`vidax.pipelines.offload`)."""
        pipe = cls(release, mesh=mesh, precision=precision, console=console,
                   quantized=quantized, loras=loras, lora_mode=lora_mode, offload=offload,
                   max_device_memory=max_device_memory, quantize=quantize, **options)
        for key, spec in release.specs.items():
            verify_component(spec, release.files[key], release.configs[key])
        per_dit = lora_for_release(release, loras, lora_mode)
        pipe._progress.line(f"{pipe.describe()} in {release.folder}: every component "
                            f"verified; loading with precision {pipe.precision.name}")
        for key, spec in release.specs.items():
            pipe.adopt(key, load_component(
                pipe._progress, spec.model_type, spec.component, release.files[key],
                release.configs[key], pipe.param_dtype(spec.component), mesh,
                layout=spec.layout, label=key, quantized=pipe.quantized,
                loras=per_dit.get(key), lora_mode=lora_mode,
                host=pipe.host_placement(key, spec, release.configs[key]),
                quantize=pipe.quantize if spec.component == "dit" else None))
            pipe.keep_offloaded(key, spec)
        pipe.setup()
        pipe.release_components()
        return pipe

    def describe(self) -> str:
        return f"{self.NAME} {self.variant} ({self.task})"

    # ------------------------------------------------------------------------- memory
    @classmethod
    def check_memory(cls, release: Release, request: Request, *, mesh=None,
                     precision: str = "bf16", weights: bool = True,
                     enforce: bool = True, quantized: str | None = None,
                     offload: str | None = None, max_device_memory: int | None = None,
                     quantize: str | None = None) -> memory.Estimate:
        """The memory ``request`` needs on ``release`` (:mod:`vidax.pipelines.memory`: an
        upper-ish estimate from the abstract shapes, no weight read) against what the
        devices have; raises :class:`~vidax.errors.MemoryEstimateError` with the numbers
        when it does not fit, unless ``enforce=False`` (``--skip-memory-check``). First the
        request is checked against the release (:meth:`resolve`: what the family checks
        against its configs, e.g. CogVideoX's position grid; its step cache's published
        calibration), so that every input error comes before loading. ``weights=False``: the
        activations only (weights loaded). ``quantized``: as :meth:`from_release` will load
        (quantized weights kept count at their stored size). ``offload``: as
        :meth:`from_release` will load, or ``"auto"``: the first mode that fits (the
        estimate's ``offload``; :func:`vidax.pipelines.offload.plan`);
        ``max_device_memory``: a budget in bytes below what the devices have."""
        step_caching.bind(cls(release, precision=precision), request.step_cache,
                          request.steps, request)  # calibrated?
        if not weights:
            pipe = cls(release, mesh=mesh, precision=precision, quantized=quantized,
                       offload=offload, max_device_memory=max_device_memory,
                       quantize=quantize)
            return pipe.memory_fits(pipe.resolve(request), weights, enforce)
        return offloading.plan(cls, release, request, offload=offload, enforce=enforce,
                               mesh=mesh, precision=precision, quantized=quantized,
                               max_device_memory=max_device_memory, quantize=quantize)

    def memory_fits(self, request: Request, weights: bool = True,
                    enforce: bool = True) -> memory.Estimate:
        """:meth:`check_memory` on this pipeline, for a resolved request."""
        estimate = self.estimate_memory(request, weights=weights)
        if enforce and not estimate.fits:
            raise MemoryEstimateError(
                f"{estimate.summary()}. This request does not fit: try a smaller --size or "
                "fewer --frames, --offload model|block, --quantize fp8, or a mesh over more "
                "devices (--mesh); or proceed anyway with "
                "--skip-memory-check (memory_check=False in Python). "
                + ("Nothing was loaded." if weights else "Nothing was sampled."), estimate)
        return estimate

    def estimate_memory(self, request: Request, *, weights: bool = True) -> memory.Estimate:
        """:meth:`check_memory`'s estimate, without the check (:func:`memory.estimate`)."""
        return memory.estimate(self, request, weights=weights)

    def component_config(self, component: str):
        """The config of the release's (first) weight file of ``component``."""
        return next(self.release.configs[k] for k, spec in self.release.specs.items()
                    if spec.component == component)

    def weights_on_device(self, weights: dict) -> dict:
        """The estimate's weights that are on the devices at once (default: all)."""
        return weights

    def dit_geometry(self, request: Request) -> memory.DiTGeometry | None:
        """The DiT step's shape for ``request`` (None: not estimated); a family's hook."""
        return None

    def vae_geometry(self, request: Request) -> memory.VAEGeometry | None:
        """A decoded chunk's shape for ``request`` (None: not estimated); a family's hook."""
        return None

    def step_cache_key(self, request: Request | None) -> str:
        """The model's key in the published step-cache calibrations
        (:func:`vidax.pipelines.step_cache.model_key`); a family whose authors calibrate per
        size or task adds its ``@...`` for ``request``."""
        return step_caching.model_key(self)

    def param_dtype(self, component: str):
        return component_dtype(self.precision, component)

    def adopt(self, key: str, model) -> None:
        setattr(self, key, model)

    def setup(self) -> None:
        pass

    # ------------------------------------------------------------------------- pieces
    def request(self, prompt: str, **options) -> Request:
        return type(self).make_request(self.task, self.variant, prompt, **options)

    def _matmul_precision(self):
        """The precision policy's matmul precision as a context (none: JAX's default)."""
        if self.precision.matmul is None:
            return contextlib.nullcontext()
        return jax.default_matmul_precision(self.precision.matmul)

    def _mesh(self):
        """The pipeline's mesh as the context mesh (``vidax.sharding.use_mesh``), if any."""
        return contextlib.nullcontext() if self.mesh is None else use_mesh(self.mesh)

    def _place(self, array) -> jax.Array:
        """An input on the pipeline's device(s): its batch split over the mesh's batch axes
        (``vidax.sharding.shard_batch``), the rest replicated."""
        return jnp.asarray(array) if self.mesh is None else shard_batch(array, self.mesh)

    def initial_noise(self, request: Request) -> jax.Array:
        """``[1, *latent_shape]`` float32: the request's noise, else JAX's normal draw from
        its seed."""
        if request.noise is not None:
            return self._place(request.noise[None])
        key = seed_key(request.seed)
        return self._place(jax.random.normal(key, (1, *request.latent_shape), jnp.float32))

    # ------------------------------------------------------------------------- generation
    def __call__(self, prompt: str | None = None, *, request=None, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]``."""
        return self.decode(self.sample(prompt, request=request, **options))

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               draws=None, memory_check: bool = True, **options) -> np.ndarray:
        """The final latents ``[T, h, w, C]`` (float32) for ``prompt`` with ``options``, or
        for a prepared ``request``; ``draws``: explicit random numbers (:meth:`resolve`).
        The request's activations are first checked to fit (:meth:`check_memory`; a
        :class:`~vidax.errors.MemoryEstimateError` if not) unless ``memory_check=False``."""
        request = self.resolve(self._request(prompt, request, options), draws)
        self.attention_budget = None
        if memory_check:   # its attention budget, where chunked attention makes it fit
            self.attention_budget = self.memory_fits(request, weights=False).attention_budget
        with self._matmul_precision():
            latents = self.denoise(request, self.prepare(request))
        return np.asarray(latents[0])

    def _request(self, prompt, request, options: dict) -> Request:
        """The given request, else one made from ``prompt`` and ``options``; either with the
        option ``step_cache`` (:func:`vidax.pipelines.step_cache.parse`). Starts a new
        generation's :attr:`sampling_reports`."""
        self.sampling_reports = []
        cache = step_caching.parse(options.pop("step_cache", None))
        guidance = options.pop("guidance", None)
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        if cache is not None:
            request = dataclasses.replace(request, step_cache=cache)
        if guidance is not None:
            request = dataclasses.replace(request, guidance=guidance)
        self.check_guidance(request)
        return request

    @classmethod
    def check_guidance(cls, request: Request) -> None:
        """A :class:`Guidance` only where the family's DiT runs the ``[cond, uncond]`` pair
        and the prompt alone (:attr:`CHEAPER_GUIDANCE`)."""
        if request.guidance is not None and not cls.CHEAPER_GUIDANCE:
            raise VidaxError(
                f"{cls.NAME}: the guidance window and CFG-Zero* (--guidance-window, "
                "--cfg-zero-star) are not wired for this family: its guidance is not one "
                "[cond, uncond] pair (LTX-Video: its own per-step guidance lists and CFG-star; "
                "LTX-2: its guiders)")

    def resolve(self, request: Request, draws=None) -> Request:
        """The request for the loaded release, with explicit ``draws`` (a family's
        :class:`Draws`): a hook for what only the loaded weights tell (CogVideoX's and
        LTX-Video's latent channels, ...); by default the request as it is, and no draws."""
        if draws is not None:
            raise VidaxError(f"{self.NAME} takes no explicit draws")
        return request

    def prepare(self, request: Request) -> Run:
        raise NotImplementedError

    def step_inputs(self, request: Request, run: Run, index: int, t):
        """``((graphdef, params), timestep, inputs of this step)`` of step ``index`` at the
        scheduler's timestep ``t``; the inputs update ``run.inputs``."""
        return run.model, jnp.float32(t), {}

    @staticmethod
    def predict(model, x, t, inputs, compute_dtype):
        raise NotImplementedError

    @staticmethod
    def guide(cond, uncond, scale):
        return uncond + scale * (cond - uncond)

    @staticmethod
    def after_step(latents, inputs):
        return latents

    @classmethod
    def velocity(cls, model, latents, t, inputs, compute_dtype):
        """What the scheduler steps with: ``predict`` on the latents, or with
        ``inputs["guidance_scale"]`` on the ``[cond, uncond]`` pair, combined by
        :meth:`guided`; CFG-Zero*'s zeroed first steps with ``inputs["zero_star"]``."""
        scale = inputs.get("guidance_scale")
        if scale is None:
            flow = cls.predict(model, latents, t, inputs, compute_dtype)
        else:
            flow = cls.predict(model, cfg_pair(latents), t, inputs, compute_dtype)
            flow = cls.guided(flow[:1], flow[1:], scale, inputs)
        return step_caching.zero_init(flow, inputs)

    @classmethod
    def guided(cls, first, second, scale, inputs):
        """``guide`` on the pair's rows in the family's order (:attr:`PROMPT_ROW` is the
        prompt's), the unconditional one rescaled first under CFG-Zero*."""
        if "zero_star" in inputs and cls.PROMPT_ROW == 0:
            second = step_caching.zero_star(first, second)
        elif "zero_star" in inputs:
            first = step_caching.zero_star(second, first)
        return cls.guide(first, second, scale)

    def denoise(self, request: Request, run: Run) -> jax.Array:
        """The sampling loop: one jitted step per scheduler timestep (latents, scheduler state
        and step-cache states donated, under the pipeline's mesh), a progress bar, each step
        finished before the next is queued; then one line of what the DiT did
        (:class:`vidax.pipelines.step_cache.SamplingReport`, kept in
        :attr:`sampling_reports`)."""
        latents, scheduler = run.latents, run.scheduler
        state = scheduler.init(latents.shape, sharding=latents.sharding)
        steps = len(scheduler.timesteps)
        cache = step_caching.bind(self, request.step_cache, steps, request)
        report = step_caching.SamplingReport(cache, steps)
        states, states_for = None, None
        budget = getattr(self, "attention_budget", None)
        step = _sampling_step if budget is None else _budgeted_step(budget)
        self.release_components()    # the encoders' device copies (--offload model/block)
        width, height = request.size
        what = f", {run.what}" if run.what else ""
        with self._progress.phase(f"sampling {request.frames} frames at {width}x{height}{what}",
                                  total=steps, unit="step") as advance:
            for index, t in enumerate(scheduler.timesteps):
                start = time.perf_counter()
                (graphdef, params), timestep, inputs = self.step_inputs(request, run, index, t)
                params = self.dit_on_device(params)
                inputs = step_caching.guided_inputs(type(self), {**run.inputs, **inputs},
                                                    request.guidance, index, steps)
                args = (type(self), scheduler.step, graphdef, self.precision.dit_compute, cache,
                        params, latents, state, jnp.int32(index), timestep, inputs)
                if cache is not None and states_for != id(params):
                    # a new model (Wan2.2's other expert) starts with fresh states, as
                    # diffusers' hooks keep one state per transformer
                    states, states_for = self._fresh_cache_states(args), id(params)
                with self._mesh():
                    try:
                        latents, state, finite, cached = step(*args, states)
                    except step_cache.LayoutChanged:  # another batch or model: start afresh
                        states = self._fresh_cache_states(args)
                        latents, state, finite, cached = step(*args, states)
                latents.block_until_ready()
                if not bool(finite):  # ready with the latents: no extra wait
                    raise non_finite_error(
                        f"the latents of sampling step {index + 1} of "
                        f"{len(scheduler.timesteps)} (timestep {float(t):g})",
                        f"{self.describe()} from {self.release.folder}", self.precision.name)
                if cached is not None:
                    states = cached["states"]
                report.step(time.perf_counter() - start, cached,
                            alone=request.guidance is not None
                            and inputs.get("guidance_scale") is None)
                advance()
        self.release_dit()
        self.sampling_reports.append(report)
        self._progress.line(f"  {report.summary()}")
        return latents

    def _fresh_cache_states(self, args) -> list:
        """Zero step-cache states for the step ``args`` (their shapes traced, not compiled),
        placed as the step hands them back (batch split over the mesh)."""
        with self._mesh():
            shapes = jax.eval_shape(functools.partial(_sampling_step, *args[:5]), *args[5:],
                                    None)[3]["states"]
        return jax.tree.map(lambda s: self._place(np.zeros(s.shape, s.dtype)), shapes)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """Latents ``[1, T, h, w, C]`` on the devices -> frames ``[1, F, H, W, 3]`` in
        [-1, 1]; ``on_chunk(done, total)`` after each decoded chunk (the VAE's own)."""
        return self.vae.decode(latents, on_chunk=on_chunk)

    def decode(self, latents) -> np.ndarray:
        """Latents ``[T, h, w, C]`` -> uint8 frames ``[F, H, W, 3]``; non-finite latents or
        frames are a :class:`~vidax.errors.NumericalError`."""
        latents = self.check_finite(np.asarray(latents, np.float32), "the final latents")
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[0]} latent frames", unit="chunk") as advance:
            video = self.decode_latents(self._place(latents[None]),
                                        on_chunk=lambda done, total: advance(total=total))
        self.release_components()
        return self.to_uint8(self.check_finite(np.asarray(video[0]), "the decoded video"))

    def check_finite(self, array: np.ndarray, what: str) -> np.ndarray:
        """``array``, checked to hold finite numbers only."""
        if not np.isfinite(array).all():
            raise non_finite_error(what, f"{self.describe()} from {self.release.folder}",
                                   self.precision.name)
        return array

    def write(self, frames, path: str | os.PathLike, *, fps: float | None = None) -> Path:
        """Write frames as an H.264 mp4 at ``fps`` (default: the release's), atomically."""
        return write_mp4(path, frames, fps=fps or self.defaults.fps)
