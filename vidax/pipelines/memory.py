"""How much memory a generation request needs, estimated before any weight is read, and what
the devices have (:meth:`vidax.pipelines.base.PipelineBase.check_memory`).

The estimate is an upper-ish bound, not a measurement:

* **Weights**: each component's parameter count from its abstract tree (``nnx.eval_shape``,
  no weight read) times the itemsize of the dtype the precision policy loads it in.
* **The DiT step**: one transformer block's intermediates (XLA keeps one block's alive at a
  time inside the jitted step): the float32 residual stream, the modulated input, q / k / v
  and the attention output, the MLP's hidden layer and its activation, all counted in
  float32, plus the attention logits where the kernel materialises them -- the kernel
  :func:`vidax.nn.attention.choose_implementation` would pick: ``[B, H, L, L]`` logits
  (``LOGIT_COPIES_XLA`` float32 copies and the probabilities) for XLA's attention (CPU under
  2,048 queries, GPU in float32, TPU without a splash kernel), ``[B, H, 512, L]`` for the
  CPU's blocked attention, none for cuDNN's flash attention.
* **The VAE decode**: ``VAE_FEATURE_COPIES`` copies of the decoder's widest feature map of
  one decoded chunk (the family's :class:`VAEGeometry`), float32, plus the decoded video
  on the host (float32) and its uint8 frames -- counted against the devices' memory on the
  CPU only, where the host *is* the device.

Peak: the weights plus the larger of the two phases (they run one after the other). On a
mesh, kept simple: the DiT's weights are divided by ``fsdp x tp`` (the other components are
counted whole, as if replicated), the activations by the share of the batch each ``dp``
device holds and by ``sp`` (the tokens); on the CPU every device is the same host RAM, so
nothing is divided. Measured against peak RSS on CPU by ``benchmarks/memory_estimate.py``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

#: Feature maps of the widest decoder stage alive at once during a chunk's decode, float32:
#: the block's input, its norm and activation, the conv's output (4), doubled for the CPU
#: convolutions' workspace and the causal caches -- calibrated on the measured growth of
#: peak RSS (``benchmarks/memory_estimate.py``: 4 copies gave 0.65-0.75 of it).
VAE_FEATURE_COPIES = 8
#: Float32 tensors of ``[B, L, D]`` one DiT block keeps alive (residual, modulated input, q,
#: k, v, attention output, its projection, the gated update).
DIT_WIDTH_COPIES = 8
#: Float32 tensors of ``[B, L, ffn]`` (the MLP's hidden layer and its activation).
DIT_FFN_COPIES = 2
#: Float32 ``[B, H, Lq, Lk]`` logit-sized tensors alive at once (besides the probabilities in
#: the compute dtype): XLA's attention keeps the logits, their scaled and exponentiated
#: copies and the softmax's output; the blocked kernel, one block's, fused tighter. Measured
#: on CPU (``benchmarks/memory_estimate.py``, sampling alone: ~20 bytes per logit for XLA's,
#: 8-15 for the blocked one), rounded up.
LOGIT_COPIES_XLA = 5
LOGIT_COPIES_BLOCKED = 3


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class DiTGeometry:
    """One DiT step's shape: ``batch`` (2 with CFG), video ``tokens`` (plus ``joint`` text
    tokens in the same attention, CogVideoX / HunyuanVideo), ``dim``, ``heads``, ``ffn``
    (the MLP's width), ``context`` (cross-attention tokens); ``split``: its self-attention
    must split over a mesh's ``sp`` (``sequence_parallel=True``: Wan, Cosmos)."""

    batch: int
    tokens: int
    dim: int
    heads: int
    ffn: int
    context: int = 0
    joint: int = 0
    split: bool = False
    #: Its self-attention takes a mask (HunyuanVideo's text padding): the kernel chosen so.
    masked: bool = False


@dataclass(frozen=True)
class VAEGeometry:
    """One decoded chunk: ``frames`` output frames at ``height`` x ``width`` with the decoder's
    widest stage holding ``channels`` float32 values per output pixel (a stage at half the
    resolution counts a quarter of its channels); ``chunks`` of them, ``total_frames`` in
    all; ``attention`` as below."""

    frames: int
    height: int
    width: int
    channels: float
    chunks: int
    total_frames: int
    #: The decoder's single-head attention (its mid block): ``[batch, tokens, dim]`` queries,
    #: ``masked`` (a causal frame mask: XLA's kernel, the logits materialised).
    attention: tuple[int, int, int] | None = None
    masked: bool = False
    #: The whole frame's (width, height) when the chunks are spatial tiles (the host video's
    #: size); None: ``width`` x ``height``.
    frame_size: tuple[int, int] | None = None


@dataclass
class Phase:
    """A phase's activations: ``bytes`` in all, its ``largest`` intermediate (name, bytes)."""

    bytes: int
    largest: tuple[str, int]
    note: str = ""
    logits: int = 0   # of ``bytes``: the attention's materialised logits

@dataclass
class Estimate:
    """The estimate for one request (:mod:`vidax.pipelines.memory`'s docstring): per device,
    the ``weights`` per component (with their ``dtypes``), the ``phases`` (``DiT step``,
    ``VAE decode``), what the devices have (``available`` bytes per device, None: unknown,
    ``where`` they were read)."""

    what: str
    weights: dict = field(default_factory=dict)
    dtypes: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)
    available: int | None = None
    where: str = ""
    mesh: str = ""
    #: Under ``--offload model|block`` (:mod:`vidax.pipelines.offload`): the weights on the
    #: device in each phase (None: all of them throughout), those in host memory, a note.
    on_device: dict | None = None
    host: int = 0
    offload: str = "none"
    #: An attention budget (:func:`vidax.nn.attention.set_budget`) that makes the DiT step
    #: fit where its full logits would not: the sampling step runs under it (None: none).
    attention_budget: int | None = None

    @property
    def weight_bytes(self) -> int:
        return sum(self.weights.values())

    @property
    def peak(self) -> int:
        if self.on_device is None:
            return self.weight_bytes + max((p.bytes for p in self.phases.values()), default=0)
        return max(self.on_device.get(name, 0) + (self.phases[name].bytes
                                                  if name in self.phases else 0)
                   for name in {**self.on_device, **self.phases})

    @property
    def fits(self) -> bool:
        return self.available is None or self.peak <= self.available

    def summary(self) -> str:
        """One paragraph: the peak, its parts, the largest intermediate, what is available."""
        parts = [f"{name} {gib(n)} ({self.dtypes.get(name, '?')})"
                 for name, n in self.weights.items()]
        weights = f"weights {gib(self.weight_bytes)}" + (f" [{', '.join(parts)}]" if parts
                                                         else " (already loaded)")
        phases = []
        for name, p in self.phases.items():
            note = f", {p.note}" if p.note else ""
            phases.append(f"{name} {gib(p.bytes)} (largest: {p.largest[0]} "
                          f"{gib(p.largest[1])}{note})")
        have = (f"{gib(self.available)} available ({self.where})" if self.available is not None
                else f"the available memory is unknown ({self.where})")
        mesh = f" per device on the mesh {self.mesh}" if self.mesh else ""
        if self.on_device is not None:
            weights += (", of which on the device: " + ", ".join(
                f"{gib(n)} for the {name}" for name, n in self.on_device.items())
                + f"; {gib(self.host)} in host memory ({self.offload})")
        return (f"{self.what}: an estimated {gib(self.peak)}{mesh} at the peak -- {weights}; "
                f"activations, the larger phase counted: {'; '.join(phases)}; {have}")


def wan_vae(cfg, request) -> VAEGeometry:
    """A Wan2.1 / Wan2.2 VAE decode chunk (one latent frame -> ``temporal_stride`` frames;
    also Cosmos-Predict2.5's tokenizer): the last stage's channels (``dec_dim`` or ``dim``,
    twice: the upsampling's output beside the block's) at its resolution (Wan2.2's is half,
    2x2 pixels unpatchified after it), the mid block's per-frame attention over the latent
    pixels."""
    width, height = request.size
    t, h, w, _ = request.latent_shape
    patch = cfg.spatial_stride // 2 ** (len(cfg.dim_mult) - 1)
    top = getattr(cfg, "dec_dim", None) or cfg.dim
    return VAEGeometry(cfg.temporal_stride, height, width, 2 * top * cfg.dim_mult[0] / patch**2,
                       t, request.frames, attention=(1, h * w, top * cfg.dim_mult[-1]))


def tiled_vae(tiles, channels: float, request, attention_dim: int) -> VAEGeometry:
    """A tiled decode's chunk (the HunyuanVideo VAEs' ``tile_geometry``: the largest tile,
    decoded alone, ``count`` passes) with its mid block's frame-causal single-head attention
    over that tile's latent positions."""
    frames, height, width = tiles.sample
    return VAEGeometry(frames, height, width, channels, tiles.count, request.frames,
                       attention=(1, math.prod(tiles.latent), attention_dim), masked=True,
                       frame_size=request.size)


def patches(latent_shape, patch) -> int:
    """DiT tokens of latents ``[T, h, w, C]`` in ``(pt, ph, pw)`` patches."""
    t, h, w, _ = latent_shape
    pt, ph, pw = patch
    return -(-t // pt) * (h // ph) * (w // pw)


# ----------------------------------------------------------------------------- activations
def attention_logits(batch: int, heads: int, queries: int, keys: int, head_dim: int,
                     compute_dtype, platform: str, masked: bool = False) -> tuple[int, str]:
    """Bytes of the attention logits and probabilities the chosen kernel materialises, and
    the kernel's name. The choice follows the attention budget in force
    (:func:`vidax.nn.attention.get_budget`): where it makes the kernel ``"chunked"``, one
    ``[B, H, CHUNK_QUERY_BLOCK, CHUNK_KEY_BLOCK]`` block's ``CHUNK_LOGIT_COPIES`` float32
    copies and probabilities, plus its running output, maximum and sum (float32
    ``[B, H, CHUNK_QUERY_BLOCK, head_dim + 2]``)."""
    import jax

    from vidax.nn.attention import (CHUNK_KEY_BLOCK, CHUNK_LOGIT_COPIES, CHUNK_QUERY_BLOCK,
                                    CPU_QUERY_BLOCK, choose_implementation)

    q = jax.ShapeDtypeStruct((batch, queries, heads, head_dim), compute_dtype)
    kernel, _ = choose_implementation(q, has_mask=masked, backend=platform, keys=keys)
    if kernel in ("cudnn", "splash"):
        return 0, kernel
    itemsize = jax.numpy.dtype(compute_dtype).itemsize
    if kernel == "chunked":
        rows, cols = min(queries, CHUNK_QUERY_BLOCK), min(keys, CHUNK_KEY_BLOCK)
        running = batch * heads * rows * (head_dim + 2) * 4
        return (batch * heads * rows * cols * (4 * CHUNK_LOGIT_COPIES + itemsize) + running,
                kernel)
    rows = min(queries, CPU_QUERY_BLOCK) if kernel == "blocked" else queries
    copies = LOGIT_COPIES_BLOCKED if kernel == "blocked" else LOGIT_COPIES_XLA
    return batch * heads * rows * keys * (4 * copies + itemsize), kernel


def logits_shape(batch: int, heads: int, queries: int, keys: int, kernel: str) -> str:
    from vidax.nn.attention import CHUNK_KEY_BLOCK, CHUNK_QUERY_BLOCK, CPU_QUERY_BLOCK

    if kernel == "chunked":
        return (f"[{batch}, {heads}, {min(queries, CHUNK_QUERY_BLOCK)}, "
                f"{min(keys, CHUNK_KEY_BLOCK)}] (chunked)")
    rows = min(queries, CPU_QUERY_BLOCK) if kernel == "blocked" else queries
    return f"[{batch}, {heads}, {rows}, {keys}] ({kernel})"


def dit_step(g: DiTGeometry, compute_dtype, platform: str, *, dp: int = 1,
             sp: int = 1) -> Phase:
    """One sampling step's activations (the module docstring's count)."""
    batch = math.ceil(g.batch / max(1, min(dp, g.batch)))
    length = g.tokens + g.joint
    local = math.ceil(length / sp)
    width = batch * local * g.dim * 4
    ffn = batch * local * g.ffn * 4
    heads, queries = g.heads, local
    if sp > 1:  # Ulysses: full-length, head-split blocks
        heads, queries = max(1, g.heads // sp), length
    logits, kernel = attention_logits(batch, heads, queries, length, g.dim // g.heads,
                                      compute_dtype, platform, g.masked)
    context = batch * g.context * g.dim * 4 * 3  # the context and its keys and values
    total = DIT_WIDTH_COPIES * width + DIT_FFN_COPIES * ffn + logits + context
    largest = max((f"attention logits {logits_shape(batch, heads, queries, length, kernel)}",
                   logits), (f"MLP hidden [{batch}, {local}, {g.ffn}]", ffn),
                  (f"residual stream [{batch}, {local}, {g.dim}]", width), key=lambda x: x[1])
    return Phase(total, largest, f"{length} tokens, {kernel} attention", logits)


def cache_state(g: DiTGeometry, cache, dp: int = 1) -> int:
    """The bytes of a step cache's state (:mod:`vidax.nn.step_cache`) a device holds: float32
    copies of the hidden states per batch row (the batch split over ``dp``, the tokens whole):
    first-block two (its first block's residual and the others'), MagCache one (the stack's
    residual), TeaCache two (the residual and its measured input, which is the modulated
    hidden states on HunyuanVideo), TaylorSeer ``order + 1`` factors."""
    from vidax.nn.step_cache import DEFAULTS

    order = cache.order or DEFAULTS["taylorseer"]["order"]
    copies = {"first-block": 2, "magcache": 1, "teacache": 2, "taylorseer": order + 1}
    batch = math.ceil(g.batch / max(1, min(dp, g.batch)))
    return copies[cache.kind] * batch * (g.tokens + g.joint) * g.dim * 4


def vae_decode(g: VAEGeometry, platform: str) -> Phase:
    """The decode's activations: the widest feature maps of one chunk, and (on the CPU) the
    decoded video on the host."""
    import jax.numpy as jnp

    feature = int(g.frames * g.height * g.width * g.channels * 4)
    total = VAE_FEATURE_COPIES * feature
    largest = (f"decoder feature map [{g.frames}, {g.height}, {g.width}, {g.channels:g}]",
               feature)
    if g.attention is not None:
        batch, tokens, dim = g.attention
        logits, kernel = attention_logits(batch, 1, tokens, tokens, dim, jnp.float32,
                                          platform, g.masked)
        total += logits
        if logits > feature:
            largest = (f"mid-block attention logits "
                       f"{logits_shape(batch, 1, tokens, tokens, kernel)}", logits)
    frame_width, frame_height = g.frame_size or (g.width, g.height)
    video = g.total_frames * frame_height * frame_width * 3
    note = f"{g.chunks} chunk{'s' * (g.chunks > 1)} of {g.frames} frames"
    if g.frame_size is not None and (g.width, g.height) != g.frame_size:
        note += f" at {g.width}x{g.height} (tiles)"
    if platform == "cpu":  # float32 chunks, their concatenation and clip, the uint8 frames
        total += 3 * 4 * video + video
        note += ", the video on the host included"
    return Phase(total, largest, note)


# ----------------------------------------------------------------------------- a request
def estimate(pipe, request, *, weights: bool = True, device=None) -> Estimate:
    """The estimate for ``request`` on ``pipe`` (a :class:`~vidax.pipelines.base.PipelineBase`,
    its weights loaded or not): each weight file's parameters from its abstract tree at
    ``pipe.param_dtype`` (``weights=False``: none, they are loaded), the family's
    ``dit_geometry`` / ``vae_geometry``, the devices of ``pipe.mesh``. A token count the
    family's sequence-parallel attention cannot split is a :class:`VidaxError` here, before
    the DiT runs. ``device``: ``(available bytes, where, platform)`` to plan for instead of
    the devices of ``pipe.mesh`` (docs/memory.md's table, made on a CPU for accelerators)."""
    import numpy as np

    from vidax.errors import VidaxError
    from vidax.sharding import SEQUENCE_AXIS, sequence_parallel_problem
    from vidax.translator.verify import abstract_params

    available, where, platform = device or device_available(pipe.mesh)
    budget = getattr(pipe, "max_device_memory", None)
    if budget is not None:   # --max-device-memory: what the plan may use
        available = budget if available is None else min(available, budget)
        where = f"{where}, capped by max_device_memory {gib(budget)}"
    shape = {} if pipe.mesh is None else dict(pipe.mesh.shape)
    axes = {} if platform == "cpu" else shape   # CPU devices share the host's RAM
    width, height = request.size
    what = f"{pipe.describe()}, {request.frames} frames at {width}x{height}"
    result = Estimate(what, available=available, where=where,
                      mesh=",".join(f"{k}={v}" for k, v in axes.items()))
    for key, spec in pipe.release.specs.items() if weights else ():
        dtype = np.dtype(pipe.param_dtype(spec.component))
        config = pipe.release.configs[key]
        held = held_bytes(spec, pipe.release.files.get(key), config, dtype,
                          getattr(pipe, "quantized", None))
        quantize = getattr(pipe, "quantize", None) if spec.component == "dit" else None
        if held is None and quantize is not None:   # --quantize: a float file's Linears
            from vidax.translator.quantize import quantized_bytes

            held = quantized_bytes(spec, config, dtype, quantize)
        if held is None:
            count = sum(math.prod(a.shape) for a in abstract_params(
                spec.model_class(), config).values())
            held = (count * dtype.itemsize, dtype.name)
        shards = axes.get("fsdp", 1) * axes.get("tp", 1) if spec.component == "dit" else 1
        result.weights[key] = -(-held[0] // shards)
        result.dtypes[key] = held[1]
    result.weights = pipe.weights_on_device(result.weights)
    offload = getattr(pipe, "offload", "none")
    result.offload = offload
    if weights and offload != "none" and platform != "cpu":   # the CPU's host is its device
        from vidax.pipelines.offload import phase_weights

        shards = {k: axes.get("fsdp", 1) * axes.get("tp", 1) for k, spec in
                  pipe.release.specs.items() if spec.component == "dit"}
        result.on_device, result.host, _ = phase_weights(pipe, result.weights, shards)
    dit, vae = pipe.dit_geometry(request), pipe.vae_geometry(request)
    problem = dit is not None and dit.split and sequence_parallel_problem(
        shape.get(SEQUENCE_AXIS, 1), num_heads=dit.heads, num_tokens=dit.tokens)
    if problem:  # what the DiT's first step would raise
        raise VidaxError(f"{what}: {problem} "
                         + ("Nothing was loaded." if weights else "Nothing was sampled."))
    if dit is not None:
        result.phases["DiT step"] = dit_step(dit, pipe.precision.dit_compute, platform,
                                             dp=axes.get("dp", 1), sp=axes.get("sp", 1))
        cache = getattr(request, "step_cache", None)
        if cache is not None:
            phase, held = result.phases["DiT step"], cache_state(dit, cache, axes.get("dp", 1))
            result.phases["DiT step"] = Phase(phase.bytes + held, phase.largest, phase.note
                                              + f", {cache.kind} state {held / 2**30:.2f} GiB",
                                              phase.logits)
        _budget_attention(result, dit, pipe.precision.dit_compute, platform, axes)
    if vae is not None:
        result.phases["VAE decode"] = vae_decode(vae, platform)
    return result


def _budget_attention(result: Estimate, dit: DiTGeometry, compute_dtype, platform: str,
                      axes: dict) -> None:
    """Where the DiT step's logits make the estimate exceed what is available, the largest
    attention budget (one float32 copy of the logits, :func:`vidax.nn.attention.set_budget`)
    that the rest leaves room for: under it the attention runs in query and key chunks
    (``"chunked"``), its step re-estimated so; kept when that fits."""
    from vidax.nn.attention import budget as within

    phase = result.phases["DiT step"]
    if result.available is None or result.fits or not phase.logits:
        return
    result.phases["DiT step"] = dataclasses.replace(phase, bytes=phase.bytes - phase.logits)
    room = result.available - result.peak
    result.phases["DiT step"] = phase
    if room <= 0:
        return
    budget = room // (LOGIT_COPIES_XLA + 1)     # the copies the estimate counts per logit
    with within(budget):
        chunked = dit_step(dit, compute_dtype, platform, dp=axes.get("dp", 1),
                           sp=axes.get("sp", 1))
    rest = phase.bytes - phase.logits
    trial = dataclasses.replace(chunked, bytes=rest + chunked.logits,
                                note=f"{chunked.note} within an attention budget of "
                                     f"{gib(budget)}")
    result.phases["DiT step"] = trial
    if result.fits:
        result.attention_budget = budget
    else:
        result.phases["DiT step"] = phase


# ----------------------------------------------------------------------------- devices
def held_bytes(spec, path, config, dtype, quantized=None) -> tuple[int, str] | None:
    """``(bytes, dtypes)`` a weight file's parameters hold on the devices once loaded at
    ``dtype`` with ``vidax.load``'s ``quantized`` -- fp8 weights kept as stored with their
    scales (unless ``"dequantize"``), GGUF Q8_0 Linear weights as their blocks (with
    ``"keep"``), the rest at ``dtype`` -- from its header alone; None where nothing stays
    quantized (the abstract count is then exact) or the file cannot be planned here (the
    load's own verification will say why)."""
    import numpy as np

    from vidax import loading
    from vidax.errors import VidaxError
    from vidax.translator.io import open_checkpoint

    if path is None:
        return None
    try:
        with open_checkpoint(path) as ckpt:
            plan, view = loading.plan_tensors(spec, ckpt)
            staying = {id(t) for t in plan.targets.values()
                       if loading.keeps_quantized(t, view, quantized)}
            if not staying:
                return None
            total, kept = 0, set()
            for t in plan.targets.values():
                if id(t) in staying:
                    kept.update(t.keys)       # split parts share their fused tensor
                else:
                    total += math.prod(t.shape) * np.dtype(dtype).itemsize
            total += sum(view[k].nbytes for k in kept)
            kept = sum(str(view[k].dtype).startswith("float8")
                       or getattr(view[k], "quant", None) == "Q8_0" for k in kept)
    except (VidaxError, OSError):
        return None
    return total, f"{np.dtype(dtype).name}, {kept} quantized weights kept"


def host_available() -> tuple[int | None, str]:
    """Host RAM available: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the free
    pages ``os.sysconf`` reports."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host RAM, MemAvailable"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return (os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
                "host RAM, free pages")
    except (OSError, ValueError, AttributeError):
        return None, "no memory statistics on this host"


def device_available(mesh=None) -> tuple[int | None, str, str]:
    """(bytes available on the fullest device, where that was read, the platform): an
    accelerator's ``memory_stats()`` ``bytes_limit - bytes_in_use``; host RAM on the CPU,
    where JAX reports none."""
    import jax

    devices = list(mesh.devices.flat) if mesh is not None else jax.local_devices()[:1]
    platform = devices[0].platform
    free = []
    for d in devices:
        try:
            stats = d.memory_stats() or {}
        except Exception:  # noqa: BLE001 -- a backend without memory statistics
            stats = {}
        if "bytes_limit" in stats:
            free.append(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    if free and platform != "cpu":
        return min(free), f"{len(devices)} {platform} device(s), memory_stats()", platform
    return (*host_available(), platform)
