"""The Python API of DESIGN.md §4: ``config``, ``load``, and the verification entry points
behind ``vidax verify``.

The way of a tensor: memory map -> mapper plan -> (verified 1:1 against the model's
abstract tree) -> host-side layout view and dtype cast -> one placement on its device(s).
No tensor is read before the whole tree has verified, so a mismatched file is rejected
with nothing half-loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VerificationError, VidaxError
from vidax.translator import verify as _verify
from vidax.translator.io import open_checkpoint
from vidax.translator.mapping import Plan, PrefixView, TensorInfo

Progress = Callable[[int, int, str], None]


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


def load(model_type: str, component: str, checkpoint: str | os.PathLike, *,
         variant: str | None = None, config=None, dtype=None, mesh=None,
         layout: str | None = None, progress: Progress | None = None) -> nnx.Module:
    """The model with the checkpoint's weights, verified 1:1 first (raises on mismatch).

    ``dtype``: cast every parameter to it on the host before placement (default: keep
    the stored dtype). ``mesh``: a ``jax.sharding.Mesh`` to replicate the parameters over
    (per-parameter partitioning arrives with the sharding work); default: the first device.
    ``progress(done, total, name)`` is called after each parameter is placed.
    """
    return load_with_report(model_type, component, checkpoint, variant=variant, config=config,
                            dtype=dtype, mesh=mesh, layout=layout, progress=progress)[0]


def load_with_report(model_type: str, component: str, checkpoint: str | os.PathLike, *,
                     variant: str | None = None, config=None, dtype=None, mesh=None,
                     layout: str | None = None,
                     progress: Progress | None = None) -> tuple[nnx.Module, _verify.Report]:
    """``load``, also returning the verification report (what matched, what was ignored)."""
    spec = registry.get(model_type, component, layout)
    if config is None:
        config = spec.make_config(variant) if variant else _detect_config(spec, checkpoint)
    with open_checkpoint(checkpoint) as ckpt:
        report, plan, view = verify_tensors(spec, config, ckpt, source=str(checkpoint))
        if not report.ok:
            raise VerificationError(
                f"{checkpoint} is not a {model_type} {component} checkpoint at this config "
                f"(no weights were loaded): " + "; ".join(report.lines(5)[1:]), report)
        abstract = _verify.abstract_model(spec.model_class(), config)
        graphdef, state = nnx.split(abstract)
        sharding = None
        if mesh is not None:
            sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        flat = nnx.to_flat_state(state)
        total = len(plan.targets)
        leaves = []
        done = 0
        for path, var in flat:
            name = ".".join(str(p) for p in path)
            target = plan.targets.get(name)
            if target is None:
                raise VidaxError(f"internal: {spec.model_type} {spec.component} has state "
                                 f"{name} that is not a parameter; models keep no buffers")
            array = target.materialize(view, dtype=dtype)
            leaves.append((path, var.replace(jax.device_put(np.asarray(array), sharding))))
            done += 1
            if progress is not None:
                progress(done, total, name)
        return nnx.merge(graphdef, nnx.from_flat_state(leaves)), report


def _detect_config(spec: registry.ComponentSpec, checkpoint):
    """The release config of a checkpoint, from its key/shape set (packaged manifests)."""
    from vidax import manifests

    with open_checkpoint(checkpoint) as ckpt:
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
