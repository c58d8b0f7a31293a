"""The Python API of DESIGN.md §4: ``config``, ``load``, and the verification entry points
behind ``vidax verify``.

The way of a tensor: memory map -> mapper plan -> (verified 1:1 against the model's
abstract tree) -> host-side layout view and dtype cast -> one placement on its device(s),
whose transfer copies the strided view (the transpose of a Linear weight is that copy).
No tensor is read before the whole tree has verified, so a mismatched file is rejected
with nothing half-loaded.

On a mesh, "one placement" is per device block: each parameter's sharding comes from the
component's partition rules (:mod:`vidax.sharding`) and ``jax.make_array_from_callback``
asks for the block of each device this process addresses; the block is read from the
memory map alone, through the target's steps run backwards (:class:`_BlockReader`), and
cast on the host. No whole unsharded tensor is ever placed, and in a multi-host job each
process reads only its own devices' blocks.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from vidax import registry
from vidax import sharding as _sharding
from vidax.errors import VerificationError, VidaxError
from vidax.sharding import PartitionRules
from vidax.translator import converter
from vidax.translator import verify as _verify
from vidax.translator.io import Checkpoint, converted, open_checkpoint
from vidax.translator.mapping import Plan, PrefixView, Source, Target, TensorInfo

Progress = Callable[[int, int, str], None]

#: Threads placing parameters concurrently in ``load`` (docs/benchmarks.md: on 2 cores, two
#: threads load a bf16 Wan 1.3B DiT 1.8x faster than one; more do not help there).
PLACEMENT_THREADS = min(8, os.cpu_count() or 1)


def config(model_type: str, component: str, variant: str, *, layout: str | None = None):
    """The frozen config of a released variant (``"tiny"`` for tests)."""
    return registry.get(model_type, component, layout).make_config(variant)


def plan_tensors(spec: registry.ComponentSpec, tensors: Mapping) -> tuple[Plan, Mapping]:
    """Plan a component's tensors (under the spec's prefix) through its mapper."""
    view = PrefixView(tensors, spec.prefix) if spec.prefix else tensors
    return spec.get_mapper().plan(view), view


def verify_tensors(spec: registry.ComponentSpec, cfg, tensors: Mapping, *,
                   source: str) -> tuple[_verify.Report, Plan, Mapping]:
    """Translate names/shapes and compare with the model's abstract tree at ``cfg``."""
    plan, view = plan_tensors(spec, tensors)
    abstract = _verify.abstract_params(spec.model_class(), cfg)
    report = _verify.compare(plan, abstract, source=source, num_tensors=len(view))
    return report, plan, view


def verify_manifest(manifest) -> _verify.Report:
    """``vidax verify --manifest``: the manifest's names and shapes through the mapper,
    against the model at the manifest's release config."""
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    cfg = spec.make_config(variant)
    tensors = {k: TensorInfo(tuple(t.shape), t.dtype) for k, t in manifest.tensors.items()}
    report, _, _ = verify_tensors(spec, cfg, tensors, source=f"manifest {manifest.name}")
    return report


def verify_checkpoint(model_type: str, component: str, checkpoint, *,
                      variant: str | None = None, config=None,
                      layout: str | None = None) -> _verify.Report:
    """``vidax verify MODEL_TYPE ...``: a real file's names and shapes through the mapper,
    against the model at the variant's (or the detected) config. Reads no weights."""
    if layout is None:
        layout = _detect_layout(model_type, component, checkpoint, config)
    spec = registry.get(model_type, component, layout)
    if config is None:
        config = spec.make_config(variant) if variant else _detect_config(spec, checkpoint)
    with open_checkpoint(checkpoint) as ckpt:
        report, _, _ = verify_tensors(spec, config, ckpt, source=str(checkpoint))
    return report


def load(model_type: str, component: str, checkpoint, *,
         variant: str | None = None, config=None, dtype=None, mesh=None,
         layout: str | None = None, rules: PartitionRules | None = None,
         progress: Progress | None = None) -> nnx.Module:
    """The model with the checkpoint's weights, verified 1:1 first (raises on mismatch).

    ``checkpoint``: a file or folder of the authors' release, a folder written by
    ``vidax convert`` (detected; loads without translation), or an already open
    ``vidax.translator.io.Checkpoint`` (left open; its ``bytes_read`` shows what the load
    touched). ``dtype``: cast every parameter to it on the host before placement (default:
    keep the stored dtype). ``mesh``: a ``jax.sharding.Mesh`` (``vidax.sharding.make_mesh``);
    each parameter is then placed straight into its sharding by ``rules`` (default: the
    model class's table in ``vidax.sharding``), every device's block read from the memory map
    on its own; default: the first device. ``layout``: the file's key layout (``original``,
    ``diffusers``); default: detected from the keys where the component has several.
    ``progress(done, total, name)`` is called after each parameter is placed.
    """
    return load_with_report(model_type, component, checkpoint, variant=variant, config=config,
                            dtype=dtype, mesh=mesh, layout=layout, rules=rules,
                            progress=progress)[0]


def load_with_report(model_type: str, component: str, checkpoint, *,
                     variant: str | None = None, config=None, dtype=None, mesh=None,
                     layout: str | None = None, rules: PartitionRules | None = None,
                     progress: Progress | None = None) -> tuple[nnx.Module, _verify.Report]:
    """``load``, also returning the verification report (what matched, what was ignored)."""
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
    if config is None:
        config = spec.make_config(variant) if variant else _detect_config(spec, source)
    if ckpt is None:
        ckpt = owned = open_checkpoint(checkpoint)
    with owned:
        if converted.is_converted_checkpoint(ckpt):
            plan, view = converted.identity_plan(ckpt), ckpt
            abstract = _verify.abstract_params(spec.model_class(), config)
            report = _verify.compare(plan, abstract, source=str(source), num_tensors=len(ckpt))
        else:
            report, plan, view = verify_tensors(spec, config, ckpt, source=str(source))
        if not report.ok:
            raise VerificationError(
                f"{source} is not a {model_type} {component} checkpoint at this config "
                f"(no weights were loaded): " + "; ".join(report.lines(5)[1:]), report)
        abstract = _verify.abstract_model(spec.model_class(), config)
        graphdef, state = nnx.split(abstract)
        flat = nnx.to_flat_state(state)
        names = [".".join(str(p) for p in path) for path, _ in flat]
        for name in names:
            if name not in plan.targets:
                raise VidaxError(f"internal: {spec.model_type} {spec.component} has state "
                                 f"{name} that is not a parameter; models keep no buffers")
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

        def place_one(name: str) -> jax.Array:
            target = plan.targets[name]
            slot = (copy_slot if target.copies_on_host(view, dtype)
                    else contextlib.nullcontext())
            with slot:
                if shardings is None:
                    # the Flax-layout view of the map: the transfer's copy transposes
                    array = jax.device_put(np.asarray(target.materialize(view, dtype=dtype)))
                else:
                    array = place(target, view, shardings[name], dtype=dtype)
                return array.block_until_ready()   # the host buffer is free once it returns

        total = len(plan.targets)
        leaves = []
        with ThreadPoolExecutor(PLACEMENT_THREADS, thread_name_prefix="vidax-place") as pool:
            arrays = pool.map(place_one, names)
            for done, ((path, var), name, array) in enumerate(zip(flat, names, arrays), 1):
                leaves.append((path, var.replace(array)))
                if progress is not None:
                    progress(done, total, name)
        return nnx.merge(graphdef, nnx.from_flat_state(leaves)), report


# ------------------------------------------------------------------------ streamed placement
def place(target: Target, tensors: Mapping, sharding: jax.sharding.Sharding, *,
          dtype=None) -> jax.Array:
    """One parameter, straight into its sharding: ``jax.make_array_from_callback`` asks for
    the block of every device *this process* addresses (and once for a fully replicated
    sharding), and each block is read from the memory map on its own and cast on the host.
    Devices holding the same block (replicas over ``dp``) share one read."""
    reader = _BlockReader(target, tensors, dtype)
    return jax.make_array_from_callback(target.shape, sharding, reader,
                                        dtype=_out_dtype(target, dtype))


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
        self.scale: np.ndarray | None = None

    def __call__(self, index: tuple[slice, ...]) -> np.ndarray:
        bounds = tuple(s.indices(n)[:2] for s, n in zip(index, self.target.shape))
        block = self.blocks.get(bounds)
        if block is None:
            block = self.blocks[bounds] = self._read(bounds)
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
        if t.scale is not None:
            array = self._dequantize(array, stored)
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
        return ref.read_view(index) if hasattr(ref, "read_view") else np.asarray(ref)[index]

    def _dequantize(self, array: np.ndarray, stored: list[tuple[int, int]]) -> np.ndarray:
        """``block * scale`` (as ``Target.materialize``), with the scale's matching block."""
        t = self.target
        if self.scale is None:
            ref = self.tensors[t.scale]
            scale = (ref.read() if hasattr(ref, "read") else np.asarray(ref)).astype(np.float32)
            if scale.ndim and scale.ndim < len(stored):   # per output channel: [out]
                scale = scale.reshape(scale.shape[0], *([1] * (len(stored) - 1)))
            self.scale = scale
        scale = self.scale
        if scale.ndim:
            scale = scale[tuple(slice(a, b) if n != 1 else slice(None)
                                for (a, b), n in zip(stored, scale.shape))]
        return (array.astype(np.float32) * scale).astype(converter.as_dtype(t.dtype))


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
    owned = (contextlib.nullcontext(checkpoint) if isinstance(checkpoint, Checkpoint)
             else open_checkpoint(checkpoint))
    with owned as ckpt:
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
            scores[s.layout] = sum(p in paths for p in plan.targets) / max(len(ckpt), 1)
    best = max(scores, key=scores.get, default=None)
    return best if best is not None and scores[best] > 0.5 else None


def _detect_config(spec: registry.ComponentSpec, checkpoint):
    """The config of a checkpoint: the one its embedded metadata declares (where the spec has
    a ``config_from_metadata`` hook), else its release's, from its key/shape set (packaged
    manifests)."""
    from vidax import manifests

    with open_checkpoint(checkpoint) as ckpt:
        declared = spec.config_from_file_metadata(ckpt.metadata, str(checkpoint))
        if declared is not None:
            return declared
        tensors = {k: (tuple(v.shape), str(v.dtype)) for k, v in ckpt.items()}
    found = manifests.identify(tensors, path=str(checkpoint))
    for m in found.candidates():
        try:
            s, variant = registry.resolve(m.family, m.variant, m.component, m.layout)
        except VidaxError:
            continue
        if s is spec:
            return s.make_config(variant)
    raise VidaxError(
        f"{checkpoint}: could not tell which {spec.model_type} {spec.component} release this "
        f"is from its tensors; pass variant= (one of {', '.join(spec.variants)}) or config=")


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
