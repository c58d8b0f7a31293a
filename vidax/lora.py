"""LoRAs on a loaded model: merged into its weights, or live with strengths that change
between calls.

``vidax.load(..., loras=[...])``, ``vidax.pipeline(..., loras=[...])`` and ``vidax generate
--lora FILE[:STRENGTH][@high|@low]`` come here. Every LoRA is read and mapped onto the
model (``vidax.translator.lora``: every tensor must land on a parameter of its shape) before
any is applied, so a bad one leaves the model as it was.

* ``mode="merge"`` (default): each changed parameter becomes ``W + sum(s_i * delta_i)`` on
  its device(s), one parameter at a time, the old buffer donated to the new one: besides the
  model, only the one parameter in flight and its delta are ever held. The LoRA's factors go
  to the device as stored (a few MiB) and their product is formed there. A quantized base
  stays quantized: fp8 weights are re-encoded under a new scale (as ltx-core re-quantizes a
  fused fp8 weight), GGUF's Q8_0 blocks get new block scales (:func:`requantized`; what the
  rounding costs is measured in ``tests/lora/test_lora_quantized.py``).
* ``mode="live"``: each changed parameter becomes a :class:`vidax.nn.lora.LoraArray` -- the
  base, the factors, and a strengths vector -- read as ``base + sum(s_i * delta_i)`` inside
  each layer. :func:`set_strengths` changes the strengths without reloading or recompiling.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.nn import offload
from vidax.nn.lora import LoraArray, LoraDelta, base_value, combined
from vidax.nn.quant import QArray
from vidax.translator.lora import LoraError, LoraFile, LoraPlan, plan_lora, read_lora

MODES = ("merge", "live")
EXPERTS = ("high", "low")


@dataclass(frozen=True)
class LoraSpec:
    """One LoRA to apply: its file, strength, and (Wan2.2 A14B) the expert it is for."""

    path: str
    strength: float = 1.0
    expert: str | None = None

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @classmethod
    def parse(cls, text: str) -> LoraSpec:
        """``FILE[:STRENGTH][@high|@low]`` (a ``:`` followed by a number is the strength)."""
        rest, expert = str(text), None
        head, at, tail = rest.rpartition("@")
        if at and tail in EXPERTS:
            rest, expert = head, tail
        elif at and not os.path.exists(rest):
            raise VidaxError(f"--lora {text}: after '@' comes the expert, {' or '.join(EXPERTS)}"
                             f" (Wan2.2 A14B), not {tail!r}")
        strength = 1.0
        head, colon, tail = rest.rpartition(":")
        if colon and head:
            try:
                strength = float(tail)
                rest = head
            except ValueError:
                pass
        if not np.isfinite(strength):
            raise VidaxError(f"--lora {text}: the strength must be a finite number")
        return cls(rest, strength, expert)


def as_specs(loras) -> list[LoraSpec]:
    """``loras`` as specs: each a ``LoraSpec``, a path / ``FILE[:S][@expert]`` string, or a
    ``(path, strength)`` pair."""
    if loras is None:
        return []
    if isinstance(loras, (str, os.PathLike, LoraSpec)):
        loras = [loras]
    out = []
    for item in loras:
        if isinstance(item, LoraSpec):
            out.append(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            out.append(LoraSpec(os.fspath(item[0]), float(item[1])))
        elif isinstance(item, os.PathLike):
            out.append(LoraSpec(os.fspath(item)))
        elif isinstance(item, str):
            out.append(LoraSpec.parse(item))
        else:
            raise VidaxError(f"loras: {item!r} is not a path, a 'FILE[:STRENGTH]' string, a "
                             f"(path, strength) pair or a LoraSpec")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise VidaxError(f"loras: two LoRAs share a name ({', '.join(names)}); rename a file")
    return out


# ----------------------------------------------------------------------------- planning
def layouts_for(model_type: str, component: str) -> dict:
    """Layout name -> mapper, for every key layout vidax registers for this component."""
    from vidax import registry

    return {s.layout: s.get_mapper() for s in registry.specs()
            if s.model_type == model_type and s.component == component}


@functools.lru_cache(maxsize=16)
def _vocab(model_type: str) -> frozenset[str]:
    """The module-name segments of the family's released files (for kohya's underscores)."""
    from vidax import manifests

    return frozenset(seg for m in manifests.all_manifests() if m.family == model_type
                     for key in m.tensors for seg in key.split("."))


def params_of(model: nnx.Module) -> dict[str, tuple[int, ...]]:
    """Flax path -> shape of every parameter."""
    return {".".join(map(str, path)): tuple(var.get_value().shape)
            for path, var in nnx.iter_graph(model) if isinstance(var, nnx.Param)}


@dataclass
class Prepared:
    """LoRAs read and mapped onto one model, not applied yet."""

    specs: list[LoraSpec]
    plans: list[LoraPlan]

    def close(self) -> None:
        """Close the LoRA files (their arrays already placed stay valid)."""
        for plan in self.plans:
            close = getattr(plan.file.tensors, "close", None)
            if close is not None:
                close()

    def summary(self) -> list[str]:
        return [f"{s.name}: {p.file.form}, layout {p.layout}, rank {_join(p.file.ranks())}, "
                f"alpha {_join(p.file.alphas()) or 'none (scale 1)'}, {p.num_tensors} tensors -> "
                f"{len(p.targets)} parameters, strength {s.strength:g}"
                for s, p in zip(self.specs, self.plans)]


def _join_names(names, n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _join(values) -> str:
    return "/".join(f"{v:g}" for v in values)


def prepare(loras, model_type: str, component: str, params: Mapping[str, tuple],
            *, expert: str | None = None, mode: str = "merge") -> Prepared:
    """Read and map every LoRA (``loras``: see :func:`as_specs`) onto a model whose
    parameters are ``params`` (path -> shape); with ``expert`` (a Wan2.2 A14B expert) the
    ones marked for the other are left out (a bare load applies every one it is given).
    Raises ``LoraError`` naming the file and the keys; nothing is applied here."""
    _check_mode(mode)
    specs = [s for s in as_specs(loras) if expert is None or s.expert in (None, expert)]
    layouts = layouts_for(model_type, component)
    if specs and not layouts:
        raise LoraError(f"{model_type} {component}: vidax registers no layout to map a LoRA")
    prepared = Prepared([], [])
    try:
        for spec in specs:
            file = read_lora(spec.path)
            prepared.specs.append(spec)
            prepared.plans.append(plan_lora(file, layouts, params,
                                            vocab=set(_vocab(model_type)),
                                            what=f"this {model_type} {component}"))
    except BaseException:
        prepared.close()
        if len(prepared.plans) < len(prepared.specs):     # the file that failed to map
            getattr(file.tensors, "close", lambda: None)()
        raise
    return prepared


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise VidaxError(f"LoRA mode {mode!r}: choose one of {', '.join(MODES)}")


# ----------------------------------------------------------------------------- deltas
def _delta(plan: LoraPlan, target, name: str, put) -> LoraDelta:
    """One LoRA's change to one target, its arrays placed by ``put``."""
    file: LoraFile = plan.file
    arrays, pieces = [], []
    for source in target.sources:
        module = plan.module_of[source.key]
        full = tuple(file.changes(module, plan.names[module.name],
                                  module.name in plan.bare)[source.key])
        index = source.index(len(full))
        part = tuple(full) if index is None else tuple(
            len(range(*sl.indices(n))) for sl, n in zip(index, full))
        role = ("diff_b" if source.key.endswith(".bias") else
                "diff_m" if "diff_m" in module.keys and source.key.endswith("modulation") else
                "diff" if "diff" in module.keys else None)
        if role is not None:
            data = file.array(module.keys[role])
            arrays.append((put(data if index is None else data[index]),))
            pieces.append(("dense", part, None, 1.0))
            continue
        scale = file.scale(module)
        if module.kind == "lora":
            up = file.array(module.keys["up"])
            up = up.reshape(up.shape[0], up.shape[1])
            down = file.array(module.keys["down"])
            if source.axis == 0:
                up = up[source.start:source.stop]
            elif source.axis is not None:
                cut = [slice(None)] * down.ndim
                cut[source.axis] = slice(source.start, source.stop)
                down = down[tuple(cut)]
            arrays.append((put(up), put(down)))
            pieces.append(("lora", part, None, scale))
        elif module.kind == "loha":
            arrays.append(tuple(put(file.array(module.keys[r])) for r in
                                ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")))
            pieces.append(("loha", full, index, scale))
        else:   # lokr
            factors = []
            for stem in ("lokr_w1", "lokr_w2"):
                factors.append((put(file.array(module.keys[stem])),) if stem in module.keys
                               else (put(file.array(module.keys[f"{stem}_a"])),
                                     put(file.array(module.keys[f"{stem}_b"]))))
            arrays.append(tuple(factors))
            pieces.append(("lokr", full, index, scale))
    return LoraDelta(arrays, pieces, target.concat_axis, target.reshape, target.layout, name)


def _placer(value):
    """Where a parameter's LoRA arrays go: replicated over its mesh, or onto its device --
    committed there only where the parameter is (``vidax.load`` without a mesh leaves arrays
    uncommitted; a committed delta would make the merged weight committed, and jit would
    compile the model again for it)."""
    data = value.data if isinstance(value, QArray) else value
    sharding = getattr(data, "sharding", None)
    if not getattr(data, "committed", True):
        sharding = None
    elif isinstance(sharding, jax.sharding.NamedSharding):
        sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    elif sharding is not None:
        sharding = jax.sharding.SingleDeviceSharding(next(iter(sharding.device_set)))
    return lambda array: jax.device_put(np.asarray(array), sharding)


# ----------------------------------------------------------------------------- applying
@dataclass
class Applied:
    """What :func:`apply` did: per LoRA, its summary line; the parameters changed."""

    mode: str
    lines: list[str]
    changed: int


def apply(model: nnx.Module, model_type: str, component: str, loras, *, mode: str = "merge",
          expert: str | None = None, prepared: Prepared | None = None) -> Applied:
    """Apply ``loras`` to ``model`` in place (see the module doc). ``expert``: the Wan2.2 A14B
    expert this model is (``high`` / ``low``): LoRAs marked for the other are left out."""
    _check_mode(mode)
    if prepared is None:
        prepared = prepare(loras, model_type, component, params_of(model), expert=expert)
    try:
        return _apply(model, prepared, mode)
    finally:
        prepared.close()


def _apply(model: nnx.Module, prepared: Prepared, mode: str) -> Applied:
    if not prepared.plans:
        return Applied(mode, [], 0)
    by_path: dict[str, list[tuple[LoraSpec, LoraPlan]]] = {}
    for spec, plan in zip(prepared.specs, prepared.plans):
        for path in plan.targets:
            by_path.setdefault(path, []).append((spec, plan))
    changed = [(".".join(map(str, path)), var) for path, var in nnx.iter_graph(model)
               if isinstance(var, nnx.Param) and ".".join(map(str, path)) in by_path]
    live = [name for name, var in changed if isinstance(var.get_value(), LoraArray)]
    if live:                  # refused before any parameter changes
        raise LoraError(f"{_join_names(live)} already hold live LoRAs; apply all LoRAs in "
                        f"one call")
    for name, var in changed:
        value = var.get_value()
        put = _placer(value)
        deltas = tuple(_delta(plan, plan.targets[name], spec.name, put)
                       for spec, plan in by_path[name])
        strengths = jnp.asarray([spec.strength for spec, _ in by_path[name]], jnp.float32)
        if mode == "live":
            var.set_value(LoraArray(value, deltas, put(np.asarray(strengths))))
        else:  # a weight kept in host memory (--offload) is merged on the device
            merged = _merged(offload.to_device(value), deltas, strengths)
            var.set_value(offload.to_host(merged) if offload.held_on_host(value) else merged)
    return Applied(mode, prepared.summary(), len(by_path))


@functools.partial(jax.jit, donate_argnums=0)
def _merged(base, deltas, strengths):
    """``base + sum(s_i * delta_i)`` in the base's form (a QArray re-encoded)."""
    merged = base_value(base) + combined(deltas, strengths)
    if not isinstance(base, QArray):
        return merged.astype(base.dtype)
    return requantized(base, merged)


def requantized(base: QArray, merged: jax.Array) -> QArray:
    """``merged`` in ``base``'s quantized form. fp8 (and int8) data get a new scale of the
    base's granularity (per tensor, or per row): ``max|w| / max`` of the format, the data
    ``clip(w * (max / max|w|))`` -- ltx-core 1.0.0's re-quantization of a LoRA-fused scaled
    fp8 weight (``loader/fuse_loras.py`` ``_fuse_delta_with_scaled_fp8``,
    ``quantization/fp8_scaled_mm.py`` ``quantize_weight_to_fp8_per_tensor``), here also per
    row. Q8_0 blocks get new block scales: ``d = max|w| / 127``, the quants ``w / d`` rounded
    half away from zero, ``d`` stored float16 (gguf 0.19's ``quants.Q8_0.quantize_blocks``,
    bit-exact with ggml's ``quantize_row_q8_0``)."""
    dtype = base.data.dtype
    if base.block is None:
        floating = jnp.issubdtype(dtype, jnp.floating)
        top = float(jnp.finfo(dtype).max) if floating else float(jnp.iinfo(dtype).max)
        scale = jnp.asarray(base.scale)
        shape = (1,) * (merged.ndim - scale.ndim) + tuple(scale.shape)
        axes = tuple(i for i, n in enumerate(shape) if n == 1)
        amax = jnp.max(jnp.abs(merged), axis=axes, keepdims=True) if axes else jnp.abs(merged)
        inv = jnp.where(amax > 0, top / jnp.where(amax > 0, amax, 1), 1.0)
        data = jnp.clip(merged * inv, -top, top)
        data = data if floating else jnp.round(data)
        return QArray(data.astype(dtype), (1 / inv).reshape(scale.shape).astype(scale.dtype),
                      None, base.format)
    *lead, rows, cols = merged.shape
    blocks = merged.reshape(*lead, rows // base.block, base.block, cols)
    scale = jnp.max(jnp.abs(blocks), axis=-2, keepdims=True) / 127
    inv = jnp.where(scale == 0, 0, 1 / jnp.where(scale == 0, 1, scale))
    x = blocks * inv                     # rounded half away from zero, as ggml does
    data = jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)
    return QArray(data.astype(dtype).reshape(merged.shape),
                  scale[..., 0, :].astype(base.scale.dtype), base.block, base.format)


def set_strengths(model: nnx.Module, strengths: Mapping[str, float]) -> int:
    """Change the strengths of live LoRAs by name (the file's stem); returns the number of
    parameters changed. Unknown names are refused, naming the ones the model has, before any
    strength changes."""
    live = [(var, var.get_value()) for _, var in nnx.iter_graph(model)
            if isinstance(var, nnx.Param) and isinstance(var.get_value(), LoraArray)]
    known = {n for _, value in live for n in value.names}
    unknown = set(strengths) - known
    if unknown:
        raise VidaxError(f"set_strengths: no live LoRA named {', '.join(sorted(unknown))}; "
                         f"the model has {', '.join(sorted(known)) or 'none'}")
    changed = 0
    for var, value in live:
        if not set(value.names) & set(strengths):
            continue
        now = np.asarray(value.strengths, np.float32).copy()
        for i, n in enumerate(value.names):
            if n in strengths:
                now[i] = float(strengths[n])
        keep = value.strengths.sharding if value.strengths.committed else None
        var.set_value(LoraArray(value.base, value.deltas, jax.device_put(now, keep)))
        changed += 1
    return changed


def live_strengths(model: nnx.Module) -> dict[str, float]:
    """Name -> strength of every live LoRA on the model."""
    out: dict[str, float] = {}
    for _, var in nnx.iter_graph(model):
        value = var.get_value() if isinstance(var, nnx.Param) else None
        if isinstance(value, LoraArray):
            for n, s in zip(value.names, np.asarray(value.strengths)):
                out[n] = float(s)
    return out


def expert_of(key: str) -> str | None:
    """The Wan2.2 A14B expert a release key holds (``high_noise_model`` -> ``high``)."""
    return next((e for e in ("high", "low") if key.startswith(e)), None)


def for_release(release, loras, lora_mode: str = "merge") -> dict[str, object]:
    """A pipeline release's key -> the LoRAs for that DiT (its expert's and the unmarked
    ones), each read and mapped onto the DiT's abstract parameters first: a LoRA that does
    not fit is refused before any weight is read."""
    from vidax.translator import verify as _verify

    specs = as_specs(loras)
    if not specs:
        return {}
    keys = [k for k, spec in release.specs.items() if spec.component == "dit"]
    marked = {s.expert for s in specs if s.expert}
    if marked and not any(expert_of(k) for k in keys):
        raise VidaxError(f"--lora ...@{'/@'.join(sorted(marked))}: this release has one DiT; "
                         f"'@high' / '@low' pick a Wan2.2 A14B expert")
    out = {}
    for key in keys:
        spec = release.specs[key]
        shapes = {n: tuple(a.shape) for n, a in _verify.abstract_params(
            spec.model_class(), release.configs[key]).items()}
        mine = [s for s in specs if s.expert in (None, expert_of(key))]
        prepare(mine, spec.model_type, spec.component, shapes, mode=lora_mode).close()
        out[key] = mine
    return out
