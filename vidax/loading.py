"""The Python API (README.md, "Use"; docs/loading_weights.md): ``config``, ``load`` /
``load_with_report``, ``verify`` (the entry points behind ``vidax verify``) and ``compiled``.

The way of a tensor: memory map -> mapper plan -> (verified 1:1 against the model's
abstract tree) -> host-side layout view and dtype cast -> one placement on its device(s),
whose transfer copies the strided view (the transpose of a Linear weight is that copy).
No tensor is read before the whole tree has verified -- names, shapes and the weight
policy's dtypes (``vidax.translator.mapping``) -- so a mismatched file is rejected with
nothing half-loaded. What is placed is first counted for NaN/Inf on the host, in the
placement thread (``vidax.translator.verify.count_nonfinite``); a model with any is refused,
naming the stored keys.

On a mesh, "one placement" is per device block: each parameter's sharding comes from the
component's partition rules (:mod:`vidax.sharding`) and ``jax.make_array_from_callback``
asks for the block of each device this process addresses; the block is read from the
memory map alone, through the target's steps run backwards (:class:`_BlockReader`), and
cast on the host. No whole unsharded tensor is ever placed, and in a multi-host job each
process reads only its own devices' blocks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
from flax import nnx

from vidax import registry
from vidax import sharding as _sharding
from vidax.errors import MappingError, VerificationError, VidaxError
from vidax.nn import offload
from vidax.nn.quant import QArray
from vidax.sharding import PartitionRules
from vidax.translator import converter
from vidax.translator import quant
from vidax.translator import quantize as _quantize
from vidax.translator.quantize import keeps_quantized  # noqa: F401  (memory.py uses it here)
from vidax.translator.quantize import q8_0_linear as _q8_0_linear
from vidax.translator.quantize import scale_sharding as _scale_sharding
from vidax.translator.quantize import stays_fp8 as _stays_fp8
from vidax.translator import verify as _verify
from vidax.translator.io import Checkpoint, converted, gguf, open_checkpoint
from vidax.translator.mapping import Plan, PrefixView, Source, Target, TensorInfo, scale_rows

Progress = Callable[[int, int, str], None]

#: Threads placing parameters concurrently in ``load`` (docs/benchmarks.md: on 2 cores, two
#: threads load a bf16 Wan 1.3B DiT 1.8x faster than one; more do not help there).
PLACEMENT_THREADS = min(8, os.cpu_count() or 1)


def config(model_type: str, component: str, variant: str, *, layout: str | None = None):
    """The frozen config of a released variant (``"tiny"`` for tests)."""
    return registry.get(model_type, component, layout).make_config(variant)


def plan_tensors(spec: registry.ComponentSpec, tensors: Mapping) -> tuple[Plan, Mapping]:
    """Plan a component's tensors (under the spec's prefix, or without the container prefix
    ComfyUI puts on a single model's file) through its mapper, with the rules of the file's
    quantization (``vidax.translator.quant``) ahead of the family's."""
    plan, view, _ = _plan(spec, tensors)
    return plan, view


def _plan(spec: registry.ComponentSpec, tensors: Mapping):
    metadata = getattr(tensors, "metadata", None) or {}
    source = getattr(tensors, "path", None) or "the checkpoint"
    if spec.prefix:
        view = PrefixView(tensors, spec.prefix)
    else:
        view = quant.unwrapped(tensors)
    found = quant.detect(view, metadata, source=str(source))
    mapper = spec.get_mapper().with_rules(found.rules, found.form or "")
    try:
        return mapper.plan(view), view, found
    except MappingError as e:
        raise MappingError(f"{source}: {e}") from None


def verify_tensors(spec: registry.ComponentSpec, cfg, tensors: Mapping, *,
                   source: str) -> tuple[_verify.Report, Plan, Mapping]:
    """Translate names/shapes and compare with the model's abstract tree at ``cfg``."""
    plan, view, found = _plan(spec, tensors)
    abstract = _verify.abstract_params(spec.model_class(), cfg)
    report = _verify.compare(plan, abstract, source=source, num_tensors=len(view))
    report.quantization = found.describe() if found.form else ""
    return report, plan, view


def verify_manifest(manifest) -> _verify.Report:
    """``vidax verify --manifest``: the manifest's names and shapes through the mapper,
    against the model at the manifest's release config."""
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    cfg = spec.make_config(variant)
    # a manifest's shape may be null (a byte asset whose length was not established)
    tensors = {k: TensorInfo(None if t.shape is None else tuple(t.shape), t.dtype)
               for k, t in manifest.tensors.items()}
    report, _, _ = verify_tensors(spec, cfg, tensors, source=f"manifest {manifest.name}")
    return report


def verify_checkpoint(model_type: str, component: str, checkpoint, *,
                      variant: str | None = None, config=None,
                      layout: str | None = None) -> _verify.Report:
    """``vidax verify MODEL_TYPE ...``: a real file's names, shapes and dtypes through the
    mapper, against the model at the variant's (or the detected) config. Reads no weights;
    the report is not raised on (``report.ok``, ``str(report)``)."""
    with _verified(model_type, component, checkpoint, variant=variant, config=config,
                   layout=layout) as (_, _, report, _, _):
        return report


def verify(model_type: str, component: str, checkpoint, *, variant: str | None = None,
           config=None, layout: str | None = None) -> _verify.Report:
    """The verification report of a checkpoint, reading no weights: what matched, what was
    ignored (with the reasons), what is missing, unexpected, mis-shaped or of a wrong dtype
    (``report.ok``, ``report.lines()``, ``str(report)``). ``checkpoint``, ``variant``,
    ``config`` and ``layout`` as for :func:`load`, which raises where this reports."""
    return verify_checkpoint(model_type, component, checkpoint, variant=variant,
                             config=config, layout=layout)


def load(model_type: str, component: str, checkpoint, *,
         variant: str | None = None, config=None, dtype=None, mesh=None,
         layout: str | None = None, rules: PartitionRules | None = None,
         progress: Progress | None = None, quantized: str | None = None,
         loras=None, lora_mode: str = "merge", quantize: str | None = None) -> nnx.Module:
    """The model with the checkpoint's weights, verified 1:1 first (raises on mismatch).

    ``checkpoint``: a file or folder of the authors' release, a folder written by
    ``vidax convert`` (detected; loads without translation), or an already open
    ``vidax.translator.io.Checkpoint`` (left open; its ``bytes_read`` shows what the load
    touched). ``variant``/``config``: which model to build; default: the config the file's
    metadata declares, else the ``config.json`` beside diffusers/transformers weights, else
    the named release its tensors identify. ``dtype``: cast every parameter to it on the
    host before placement (``"bf16"``, ``"float32"``, ...; default: keep the stored dtype).
    ``mesh``: a ``jax.sharding.Mesh`` (``vidax.sharding.make_mesh``);
    each parameter is then placed straight into its sharding by ``rules`` (default: the
    model class's table in ``vidax.sharding``), every device's block read from the memory map
    on its own; default: the first device. ``layout``: the file's key layout (``original``,
    ``diffusers``); default: detected from the keys where the component has several.
    ``progress(done, total, name)`` is called after each parameter is placed.
    ``quantized``: what becomes of quantized weights (``vidax.translator.quant``):
    ``"keep"`` -- fp8 weights with their scales, and GGUF's Q8_0 Linear weights as int8
    with their block scales, stay so on the device (``vidax.nn.quant.QArray``, dequantized
    inside each layer; ``dtype`` casts the rest); ``"dequantize"`` -- every weight becomes
    floats (``dtype``, else the scale's float32; fp8 and Q8_0 data are placed as stored and
    dequantized on the device); default (None): keep fp8, dequantize GGUF.
    ``quantize``: ``"int8"`` or ``"fp8"`` quantizes every float Linear kernel of at least 2**14
    values as it is placed (one float32 scale per output channel; a ``QArray``, dequantized
    in each layer) -- the rest stays float (``dtype``), stored-quantized weights as
    ``quantized`` says (``vidax.translator.quantize``; default None: no quantizing).
    ``loras``: LoRA files to apply (paths, ``"FILE[:STRENGTH]"``, ``(path, strength)``
    pairs, ``vidax.lora.LoraSpec``), merged into the weights or kept live (``lora_mode``);
    each is read and mapped onto the model before any weight is placed (``vidax.lora``).

    Refused (``VidaxError``, nothing returned): a tree that does not match 1:1, integer or
    boolean data where the model has float parameters (no rule declares it quantized or an
    asset), and weights holding NaN or Inf values (``NonFiniteWeightsError``, checked on the
    device once every parameter is placed).
    """
    return load_with_report(model_type, component, checkpoint, variant=variant, config=config,
                            dtype=dtype, mesh=mesh, layout=layout, rules=rules,
                            progress=progress, quantized=quantized, loras=loras,
                            lora_mode=lora_mode, quantize=quantize)[0]


@contextlib.contextmanager
def _verified(model_type: str, component: str, checkpoint, *, variant, config, layout):
    """The open checkpoint with its spec, config, report, plan and tensor view (the prefix
    view or the converted cache itself), reading no weights; closed after unless the caller
    passed an open ``Checkpoint``."""
    if layout is None:
        layout = _detect_layout(model_type, component, checkpoint, config)
    spec = registry.get(model_type, component, layout)
    if isinstance(checkpoint, Checkpoint):
        ckpt, owned = checkpoint, contextlib.nullcontext()
        source = checkpoint.path
    elif converted.is_converted(checkpoint):
        config, ckpt = converted.open_converted(checkpoint, spec, config)
        owned, source = ckpt, checkpoint
    else:
        ckpt = None
        source = checkpoint
    origin = ""
    if config is None and variant and variant != "tiny":
        config = spec.make_config(variant)
    if ckpt is None:
        ckpt = owned = open_checkpoint(checkpoint)
    with owned:
        gguf.check_architecture(ckpt, spec.model_type, spec.component)
        if config is None:
            config, origin = _resolve_config(spec, ckpt, variant, None)
        if converted.is_converted_checkpoint(ckpt):
            plan, view = converted.identity_plan(ckpt), ckpt
            abstract = _verify.abstract_params(spec.model_class(), config)
            report = _verify.compare(plan, abstract, source=str(source), num_tensors=len(ckpt))
        else:
            report, plan, view = verify_tensors(spec, config, ckpt, source=str(source))
        report.config_from = origin
        yield spec, config, report, plan, view


def load_with_report(model_type: str, component: str, checkpoint, *,
                     variant: str | None = None, config=None, dtype=None, mesh=None,
                     layout: str | None = None, rules: PartitionRules | None = None,
                     progress: Progress | None = None, quantized: str | None = None,
                     loras=None, lora_mode: str = "merge", host=None,
                     quantize: str | None = None) -> tuple[nnx.Module, _verify.Report]:
    """``load``, also returning the verification report (what matched, what was ignored).
    ``host(name) -> bool``: which parameters (by Flax path) go to host memory once placed,
    one at a time, so the device never holds them all (``vidax.nn.offload``)."""
    from vidax import dtypes

    if dtype is not None:
        dtype = dtypes.parse(dtype, what="the load dtype")
    if quantized not in QUANTIZED_MODES:
        raise VidaxError(f"quantized={quantized!r}: choose one of "
                         f"{', '.join(repr(m) for m in QUANTIZED_MODES)}")
    _quantize.check_mode(quantize)
    with _verified(model_type, component, checkpoint, variant=variant, config=config,
                   layout=layout) as (spec, config, report, plan, view):
        source = report.source
        if not report.ok:
            raise VerificationError(
                f"{source} is not a {model_type} {component} checkpoint at this config "
                f"(no weights were loaded): " + "; ".join(report.lines(5)[1:]), report)
        abstract = _verify.abstract_model(spec.model_class(), config)
        graphdef, state = nnx.split(abstract)
        flat = nnx.to_flat_state(state)
        to_quantize = _quantize.chosen(abstract, plan, view, quantize)
        names = [".".join(str(p) for p in path) for path, _ in flat]
        for name in names:
            if name not in plan.targets:
                raise VidaxError(f"internal: {spec.model_type} {spec.component} has state "
                                 f"{name} that is not a parameter; models keep no buffers")
        adapters = None
        if loras:                 # every LoRA read and mapped before any weight is placed
            from vidax import lora as _lora

            adapters = _lora.prepare(loras, spec.model_type, spec.component,
                                     {n: plan.targets[n].shape for n in names},
                                     mode=lora_mode)
        shardings = None
        if mesh is not None:
            rules = rules or _sharding.rules_for(spec.model)
            shapes = {n: jax.ShapeDtypeStruct(plan.targets[n].shape,
                                              _out_dtype(plan.targets[n], dtype))
                      for n in names}
            shardings = _sharding.param_shardings(shapes, mesh, rules)
        # Parameters are placed by a few threads at once: a placement is one strided copy
        # out of the page cache (memory-bound, GIL released), so threads overlap copies and
        # page faults. A target that needs a host copy first (a cast, a merge) takes the one
        # copy slot, so host memory beyond the placed arrays stays within one such copy.
        copy_slot = threading.Lock()

        # Non-finite values are counted on the host, in the placement thread, on the data
        # about to be placed: the stored tensor (contiguous in the map; its pages are read
        # once, by the test, and placed from the page cache), or the host copy a cast /
        # merge / dequantization made, or each device block on a mesh. Once one tensor is
        # bad, the rest are only counted, not placed.
        stored_counts: dict[str, int] = {}
        bad_seen = threading.Event()

        def count_stored(key: str) -> int:
            if key not in stored_counts:      # split parts share their fused tensor's test
                stored_counts[key] = _verify.count_nonfinite(_read_whole(view[key]))
            return stored_counts[key]

        def place_one(name: str) -> tuple[jax.Array | None, _Count]:
            target = plan.targets[name]
            if name in to_quantize:       # a float copy and its codes: one weight's, in the slot
                with copy_slot:
                    kept, bad = _quantize.quantized_host(target, view, quantize)
                    if kept is None or bad_seen.is_set():
                        bad_seen.set()
                        return None, _Count(bad, int(np.prod(target.shape)), False)
                    return _place_quantized(kept, None if shardings is None
                                            else shardings[name], bad_seen)
            kept, keep = _quantized_host(target, view, quantized, dtype)
            if kept is not None:
                with copy_slot if len(target.sources) > 1 else contextlib.nullcontext():
                    placed, count = _place_quantized(kept, None if shardings is None
                                                     else shardings[name], bad_seen)
                if placed is not None and not keep:
                    placed = _dequantized(placed, _out_dtype(target, dtype))
                    placed.block_until_ready()
                return placed, count
            cast = None if _stays_fp8(target, view, quantized) else dtype
            copies = target.copies_on_host(view, cast)
            with copy_slot if copies else contextlib.nullcontext():
                if shardings is not None:
                    array, bad = _place_counted(target, view, shardings[name], cast)
                    count = _Count(bad, int(np.prod(target.shape)), False)
                else:
                    host = target.materialize(view, dtype=cast)
                    if copies:
                        count = _Count(_verify.count_nonfinite(host), int(host.size), False)
                    else:                     # the stored tensor itself, tested once
                        keys = dict.fromkeys(s.key for s in target.sources)
                        count = _Count(sum(count_stored(k) for k in keys),
                                       sum(int(np.prod(view[k].shape)) for k in keys), True)
                    if count.bad or bad_seen.is_set():
                        bad_seen.set()
                        return None, count
                    # the Flax-layout view of the map: the transfer's copy transposes
                    array = jax.device_put(np.asarray(host))
                array.block_until_ready()   # the host buffer is free once it returns
            return array, count

        total = len(plan.targets)
        leaves, counts = [], {}
        with ThreadPoolExecutor(PLACEMENT_THREADS, thread_name_prefix="vidax-place") as pool:
            arrays = pool.map(place_one if host is None else _to_host(place_one, host), names)
            for done, ((path, var), name, (array, count)) in enumerate(
                    zip(flat, names, arrays), 1):
                leaves.append((path, var.replace(array) if array is not None else None))
                counts[name] = count
                if progress is not None:
                    progress(done, total, name)
        _check_finite(counts, plan, view, source, dtype, total)
        report.kept_quantized = sum(isinstance(v.get_value(), QArray) for _, v in leaves
                                    if v is not None)
        if to_quantize:
            report.quantization = "; ".join(filter(None, (report.quantization, (
                f"{len(to_quantize)} weights quantized to {quantize} at load"))))
        model = nnx.merge(graphdef, nnx.from_flat_state(leaves))
        if adapters is not None:
            report.loras = _lora.apply(model, spec.model_type, spec.component, None,
                                       mode=lora_mode, prepared=adapters)
        return model, report


def _to_host(place_one, host):
    """``place_one``, its placed array moved to host memory where ``host(name)``."""
    def place(name: str):
        array, count = place_one(name)
        if array is not None and host(name):
            array = jax.block_until_ready(offload.to_host(array))
        return array, count
    return place


#: The ``quantized=`` choices of :func:`load` (None: keep fp8, dequantize GGUF).
QUANTIZED_MODES = (None, "keep", "dequantize")


def _quantized_host(target: Target, view: Mapping, mode: str | None, dtype):
    """``((data, scale, block, format), keep)`` of a weight placed as it is stored, as host
    arrays (the data a view of the map where one part feeds it), and whether it stays so
    (``keep``) or is dequantized on the device right after (the host would convert float8
    or GGUF blocks in numpy, several times slower: benchmarks/quantized_weights.py); or
    ``(None, False)`` to load it through the host as floats. Placed as stored: an fp8 (or
    int8) weight with its scale(s), kept unless ``mode`` is ``"dequantize"``; a plain fp8
    weight the load casts (``mode="dequantize"``); a GGUF Q8_0 Linear weight, kept only when
    ``mode`` is ``"keep"``."""
    if target.scaled:
        parts = target.quantized_parts(view)
        return ((None, False) if parts is None
                else ((*parts, None, target.quantized), mode != "dequantize"))
    if target.reshape is not None or target.cast is not None or len(target.sources) != 1:
        return None, False
    ref = view[target.sources[0].key]
    if str(ref.dtype).startswith("float8") and mode == "dequantize" and dtype is not None:
        return (target.materialize(view), np.asarray(1.0, np.float32), None, "fp8"), False
    if _q8_0_linear(target, view):
        qs, d = ref.q8_0_blocks()
        return (qs.T, d.T, 32, "gguf-Q8_0"), mode == "keep"
    return None, False


@functools.partial(jax.jit, static_argnums=1)
def _dequantized(placed: QArray, dtype) -> jax.Array:
    """A placed quantized weight dequantized where it lies (its sharding kept)."""
    return placed.dequantize(dtype)


def _place_quantized(kept, sharding, bad_seen) -> tuple[QArray | None, _Count]:
    """A kept-quantized weight onto its device(s): the data in the weight's sharding (each
    device's block read from the map on its own), the scale beside it (sharded along the
    axes it shares with the data, else replicated). NaN/Inf are counted in both."""
    data, scale, block, fmt = kept
    scale = np.asarray(scale)
    bad = _verify.count_nonfinite(data) + _verify.count_nonfinite(scale)
    count = _Count(bad, int(np.prod(data.shape)), False)
    if bad or bad_seen.is_set():
        bad_seen.set()
        return None, count
    if sharding is None:
        placed = QArray(jax.device_put(np.asarray(data)), jax.device_put(scale), block, fmt)
    else:
        placed = QArray(
            jax.make_array_from_callback(data.shape, sharding, lambda i: np.asarray(data[i])),
            jax.device_put(scale, _scale_sharding(sharding, data.shape, scale.shape)),
            block, fmt)
    jax.block_until_ready(placed)
    return placed, count


def _read_whole(ref) -> np.ndarray:
    """A stored tensor whole, as a view of the map where it can be."""
    return ref.read_view(()) if hasattr(ref, "read_view") else np.asarray(ref)


class _Count(NamedTuple):
    """A parameter's NaN/Inf test: ``bad`` of ``size`` values, counted on its stored
    tensor(s) (``stored``: split parts of one fused tensor report the same count) or on what
    was placed (a host copy, the device blocks: parts add up)."""

    bad: int
    size: int
    stored: bool


def _check_finite(counts: dict[str, _Count], plan: Plan, view: Mapping, source: str,
                  dtype, total: int) -> None:
    """Raise ``NonFiniteWeightsError`` if a parameter held NaN/Inf: the error names the
    stored keys (checkpoint names, not Flax paths) with their counts, and says whether the
    cast to ``dtype`` made them (the stored data of the bad ones re-checked)."""
    bad_paths = [name for name, c in counts.items() if c.bad]
    if not bad_paths:
        return
    bad: dict[str, tuple[int, int]] = {}
    for name in bad_paths:
        c, key = counts[name], ", ".join(plan.targets[name].keys)
        if c.stored or key not in bad:
            bad[key] = (c.bad, c.size)
        else:
            bad[key] = (bad[key][0] + c.bad, bad[key][1] + c.size)
    cast = None
    if dtype is not None and not any(
            _verify.count_nonfinite(plan.targets[n].materialize(view)) for n in bad_paths):
        cast = np.dtype(dtype).name
    raise _verify.nonfinite_error(str(source), bad, total=total, cast=cast)


# ------------------------------------------------------------------------ compiled calls
def compiled(model, method: str = "__call__"):
    """``model.method`` as one compiled XLA program per input signature: the call a loaded
    model should get from Python (an eager NNX call runs op by op, seconds even at tiny size).

    ``vidax.compiled(dit)(x, context, t)`` or ``vidax.compiled(dit.__call__)``. The weights
    are split out of the module once (``nnx.split``) and passed as the jitted function's
    argument, never baked in as constants; the module's structure is static. Arrays (jax or
    numpy, anywhere in the arguments' pytrees) are traced; everything else (Python numbers,
    strings, None, enums) is a compile-time constant, so a new value of it compiles anew:
    pass numbers that change per call (timesteps) as arrays. Compiled programs are cached per
    shape, dtype and constant values, for the life of the returned callable. The module is
    read, never mutated (vidax models keep no state but their parameters); a later change to
    its parameters is not seen: call ``compiled`` again.

    Methods that already run compiled steps from a host loop (a video VAE's chunked
    ``encode`` / ``decode``, which go to numpy between chunks) are not traceable as one
    program: call them directly.
    """
    if not isinstance(model, nnx.Module) and isinstance(getattr(model, "__self__", None),
                                                        nnx.Module):
        model, method = model.__self__, model.__name__
    if not isinstance(model, nnx.Module):
        raise VidaxError(f"vidax.compiled takes a loaded model (an nnx.Module) or one of its "
                         f"methods, got {type(model).__name__}")
    if not callable(getattr(model, method, None)):
        raise VidaxError(f"{type(model).__name__} has no method {method!r}")
    graphdef, state = nnx.split(model)

    @functools.partial(jax.jit, static_argnums=(1, 2))
    def run(state, treedef, constants, arrays):
        leaves, it = list(constants), iter(arrays)
        leaves = [next(it) if leaf is _TRACED else leaf for leaf in leaves]
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        return getattr(nnx.merge(graphdef, state), method)(*args, **kwargs)

    @functools.wraps(getattr(model, method))
    def call(*args, **kwargs):
        treedef, constants, arrays = _split_args(args, kwargs)
        try:
            hash(constants)
        except TypeError as e:
            raise VidaxError(f"vidax.compiled: every argument that is not an array must be "
                             f"hashable (it becomes a compile-time constant): {e}") from e
        try:
            return run(state, treedef, constants, arrays)
        except (jax.errors.TracerArrayConversionError,
                jax.errors.ConcretizationTypeError) as e:
            raise VidaxError(
                f"{type(model).__name__}.{method} runs host code between compiled steps (a "
                f"chunked VAE's encode/decode are compiled per chunk already), so it cannot be "
                f"compiled as one program: call it directly ({type(e).__name__})") from e

    call.lower = lambda *args, **kwargs: run.lower(state, *_split_args(args, kwargs))
    return call


class _Traced:
    """The place of a traced array among the constants of a :func:`compiled` call."""

    def __repr__(self):
        return "<traced>"


_TRACED = _Traced()


def _split_args(args, kwargs):
    """``(treedef, constants, arrays)`` of a call's arguments: the arrays are traced, the
    other leaves (with a placeholder where each array was) are static."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    traced = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
    return (treedef, tuple(_TRACED if t else x for t, x in zip(traced, leaves)),
            [x for t, x in zip(traced, leaves) if t])


# ------------------------------------------------------------------------ streamed placement
def place(target: Target, tensors: Mapping, sharding: jax.sharding.Sharding, *,
          dtype=None) -> jax.Array:
    """One parameter, straight into its sharding: ``jax.make_array_from_callback`` asks for
    the block of every device *this process* addresses (and once for a fully replicated
    sharding), and each block is read from the memory map on its own and cast on the host.
    Devices holding the same block (replicas over ``dp``) share one read."""
    return _place_counted(target, tensors, sharding, dtype)[0]


def _place_counted(target: Target, tensors: Mapping, sharding: jax.sharding.Sharding,
                   dtype) -> tuple[jax.Array, int]:
    """:func:`place`, also returning the NaN/Inf count of the blocks this process read (the
    whole parameter's, on one host: distinct blocks partition it)."""
    reader = _BlockReader(target, tensors, dtype)
    array = jax.make_array_from_callback(target.shape, sharding, reader,
                                         dtype=_out_dtype(target, dtype))
    return array, reader.nonfinite


def _out_dtype(target: Target, dtype) -> np.dtype:
    return converter.as_dtype(dtype if dtype is not None else (target.cast or target.dtype))


class _BlockReader:
    """``index -> block`` of one target in the Flax layout, read through the target's steps
    backwards: layout permutation (inverse-permute the index), merge (only the parts the
    block overlaps), split (offset on the split axis), dequantize (the scale's matching
    block), then the forward steps on the block alone and the cast."""

    def __init__(self, target: Target, tensors: Mapping, dtype):
        self.target, self.tensors, self.dtype = target, tensors, dtype
        self.perm = converter.permutation(target.layout, len(target.shape))
        self.blocks: dict[tuple, np.ndarray] = {}
        self.whole: np.ndarray | None = None
        self.scales: dict[str, np.ndarray] = {}   # scale key -> its rows, float32
        self.nonfinite = 0            # NaN/Inf values in the distinct blocks read so far

    def __call__(self, index: tuple[slice, ...]) -> np.ndarray:
        bounds = tuple(s.indices(n)[:2] for s, n in zip(index, self.target.shape))
        block = self.blocks.get(bounds)
        if block is None:
            block = self.blocks[bounds] = self._read(bounds)
            self.nonfinite += _verify.count_nonfinite(block)
        return block

    def _read(self, bounds: tuple[tuple[int, int], ...]) -> np.ndarray:
        t = self.target
        if t.reshape is not None:
            # A reshape mixes dimensions, so a block of the result is no block of the stored
            # tensor: read this (small: norm gammas, 0-d scalars, tables) target whole, once,
            # and cut every device's block from it.
            if self.whole is None:
                self.whole = t.materialize(self.tensors, dtype=self.dtype)
            return self.whole[tuple(slice(a, b) for a, b in bounds)]
        stored = list(bounds)
        if self.perm is not None:     # flax dim i is stored dim perm[i]
            for i, p in enumerate(self.perm):
                stored[p] = bounds[i]
        array = self._read_sources(stored)
        # A strided view: the transfer's own copy makes it contiguous on the device.
        array = converter.convert(array, t.layout)
        want = _out_dtype(t, self.dtype)
        return array if array.dtype == want else array.astype(want)

    def _read_sources(self, stored: list[tuple[int, int]]) -> np.ndarray:
        t = self.target
        if len(t.sources) == 1:
            return self._read_source(t.sources[0], stored)
        axis, (lo, hi) = t.concat_axis, stored[t.concat_axis]
        parts, offset = [], 0
        for source in t.sources:
            extent = (source.stop - source.start if source.axis == axis
                      else self.tensors[source.key].shape[axis])
            a, b = max(lo, offset), min(hi, offset + extent)
            if a < b:
                local = list(stored)
                local[axis] = (a - offset, b - offset)
                parts.append(self._read_source(source, local))
            offset += extent
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def _read_source(self, source: Source, bounds: list[tuple[int, int]]) -> np.ndarray:
        index = [slice(a, b) for a, b in bounds]
        if source.axis is not None:   # a split part: its rows start at source.start
            a, b = bounds[source.axis]
            index[source.axis] = slice(source.start + a, source.start + b)
        ref = self.tensors[source.key]
        index = tuple(index)
        block = ref.read_view(index) if hasattr(ref, "read_view") else np.asarray(ref)[index]
        if source.scale is None:
            return block
        # ``block * scale`` (as ``Target.materialize``), with the scale's rows of the block
        scale = self.scales.get(source.scale)
        if scale is None:
            scale = self.scales[source.scale] = scale_rows(
                _read_whole(self.tensors[source.scale]), len(bounds), source)
        if scale.ndim:
            a, b = bounds[0]
            scale = scale[a:b]
        return (block.astype(np.float32) * scale).astype(converter.as_dtype(self.target.dtype))


def _detect_layout(model_type: str, component: str, checkpoint, config) -> str | None:
    """The key layout of a checkpoint (``original``, ``diffusers``, ...) when the caller
    names none and the component has several: the layout whose mapper puts the largest share
    of the file's tensors onto the model's parameter paths, at ``config`` or else at the
    ``tiny`` config (paths do not depend on widths). The one registered layout when there is
    one (T5-v1.1 has only ``transformers``). None (the default layout) when the checkpoint
    is a ``vidax convert`` folder, or no layout places more than half of the tensors (the
    default layout's verification then says what is wrong)."""
    from vidax.errors import MappingError

    specs = [s for s in registry.specs() if (s.model_type, s.component) == (model_type,
                                                                           component)]
    if len(specs) == 1:
        return specs[0].layout
    if not specs or converted.is_converted(checkpoint):
        return None
    with _opened(checkpoint) as ckpt:
        if converted.is_converted_checkpoint(ckpt):
            return None
        scores = {}
        for s in specs:
            try:
                plan, _ = plan_tensors(s, ckpt)
            except MappingError:
                continue
            cfg = config if config is not None else s.make_config("tiny")
            paths = _verify.abstract_params(s.model_class(), cfg)
            placed = sum(p in paths for p in plan.targets)
            # the share of the tensors the layout reads (not those it ignores with a reason:
            # a Gemma 3 folder's vision tower); a tie goes to the layout leaving fewer tensors
            # without a home (ComfyUI's Gemma file, whose tower only one layout ignores)
            read = len(ckpt) - len(plan.ignored) - len(plan.assets)
            scores[s.layout] = (placed / max(read, 1), placed - len(plan.targets))
    best = max(scores, key=scores.get, default=None)
    return best if best is not None and scores[best][0] > 0.5 else None


def resolve_config(spec: registry.ComponentSpec, checkpoint, *, variant: str | None = None,
                   config=None):
    """The config to verify, load or convert ``checkpoint`` (a path or an open
    ``Checkpoint``) at: ``config`` as given; else the ``variant``'s (``"tiny"`` on a file
    ``vidax demo`` wrote is that demo's config, ``vidax.demo.layouts.tiny_config``, else the
    component's ``tiny()``); else the one the file declares or its tensors identify
    (:func:`_detect_config`)."""
    return _resolve_config(spec, checkpoint, variant, config)[0]


def _resolve_config(spec, checkpoint, variant, config) -> tuple[object, str]:
    """:func:`resolve_config` and where the config came from, for the report ("" when the
    caller named it)."""
    if config is not None:
        return config, ""
    if variant == "tiny":
        from vidax.demo.layouts import tiny_config

        with _opened(checkpoint) as ckpt:
            found = tiny_config(spec, ckpt)
        return ((found, "the vidax demo's tiny config") if found is not None
                else (spec.make_config("tiny"), ""))
    if variant:
        return spec.make_config(variant), ""
    return _detect(spec, checkpoint)


def _opened(checkpoint):
    return (contextlib.nullcontext(checkpoint) if isinstance(checkpoint, Checkpoint)
            else open_checkpoint(checkpoint))


def _detect_config(spec: registry.ComponentSpec, checkpoint):
    """The config of a checkpoint (a path or an open ``Checkpoint``): the one its embedded
    metadata declares (where the spec has a ``config_from_metadata`` hook), else the one its
    ``config.json`` describes (:func:`config_from_json`), else its release's, from its
    key/shape set (packaged manifests)."""
    return _detect(spec, checkpoint)[0]


def _detect(spec: registry.ComponentSpec, checkpoint) -> tuple[object, str]:
    from vidax import manifests

    with _opened(checkpoint) as ckpt:
        source = ckpt.path if isinstance(checkpoint, Checkpoint) else str(checkpoint)
        declared = spec.config_from_file_metadata(ckpt.metadata, source)
        if declared is not None:
            return declared, "the file's metadata"
        declared, note = config_from_json(spec, ckpt)
        if declared is not None:
            return declared, str(Path(ckpt.files[0]).parent / "config.json")
        tensors = {k: (tuple(v.shape), str(v.dtype)) for k, v in ckpt.items()}
    found = manifests.identify(tensors, path=source)
    for m in found.candidates():
        try:
            s, variant = registry.resolve(m.family, m.variant, m.component, m.layout)
        except VidaxError:
            continue
        if s is spec:
            return s.make_config(variant), f"release {m.name}, identified by its tensors"
    first = next(iter(spec.variants), "NAME")
    raise VidaxError(
        f"{source}: could not tell which {spec.model_type} {spec.component} release this "
        f"is from its tensors{note}; name the variant (--variant {first} on the command line, "
        f"variant=\"{first}\" in Python; one of {', '.join(spec.variants)}, or tiny), or in "
        f"Python pass config= (vidax.config(\"{spec.model_type}\", \"{spec.component}\", "
        f"...) or the config class {spec.config.rsplit(':', 1)[-1]})")


#: Layouts whose weights sit in a folder of their own beside the ``config.json`` that
#: describes them (diffusers' and transformers' ``save_pretrained``).
CONFIG_JSON_LAYOUTS = ("diffusers", "transformers")


def reads_config_json(spec: registry.ComponentSpec) -> bool:
    """Whether a ``config.json`` beside this component's weights is its own: diffusers and
    transformers layouts; weights under ``save_pretrained``'s file names
    (``diffusion_pytorch_model*``, ``model*.safetensors``: Wan's authors save their DiT
    with diffusers' ``ModelMixin``, whose ``config.json`` sits beside it); and release
    layouts that keep the component in a folder of its own (HunyuanVideo-1.5's
    ``transformer/480p_t2v/``). Not a file of another name in a folder that several
    components share (the Wan VAE beside its DiT's ``config.json``)."""
    if spec.layout in CONFIG_JSON_LAYOUTS:
        return True
    return any("/" in f or f.startswith(_SAVE_PRETRAINED_NAMES) for f in spec.files)


_SAVE_PRETRAINED_NAMES = ("diffusion_pytorch_model", "model.safetensors", "model*.safetensors",
                          "model-")


def config_from_json(spec: registry.ComponentSpec, ckpt: Checkpoint):
    """``(config, note)``: the config the ``config.json`` beside the checkpoint's files
    describes, built by the config class's ``from_dict`` (the reader of the diffusers /
    transformers keys), where the spec :func:`reads_config_json`; ``(None, note)`` where
    there is none or it cannot be read (``note`` says why, for the caller's error)."""
    import json

    if not reads_config_json(spec) or not ckpt.files:
        return None, ""
    path = Path(ckpt.files[0]).parent / "config.json"
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return spec.make_config(overrides=data), ""
    except (OSError, ValueError, TypeError, KeyError, VidaxError) as e:
        return None, f" (the config.json beside it, {path}, is not a config vidax can build: {e})"


def find_files(folder: str | os.PathLike, spec: registry.ComponentSpec) -> Path:
    """The checkpoint of a component inside a release folder, by the authors' file names."""
    folder = Path(folder)
    for pattern in spec.files:
        hits = sorted(folder.glob(pattern))
        index = [h for h in hits if h.name.endswith(".index.json")]
        if index:
            return index[0]
        if len(hits) == 1:
            return hits[0]
    raise VidaxError(f"{folder}: no {spec.model_type} {spec.component} file found "
                     f"(looked for {', '.join(spec.files)})")
