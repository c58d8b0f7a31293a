"""The declarative mapper framework: PyTorch state-dict keys -> Flax parameter paths.

A family's mapper is data: an ordered tuple of rules. The driver here knows nothing of
any model. It works on *shapes* first (``Mapper.plan``), so the same code verifies a
manifest (names and shapes only) and loads a real file (lazy arrays): a ``Plan`` says,
for every Flax path, which stored tensor(s) feed it and which shape-level steps turn them
into the Flax array; ``Target.materialize`` runs those steps on the host, as numpy views
wherever possible.

Rules (each pattern is a regular expression):

* ``Ignore(pattern, reason)`` -- a stored tensor that is not a weight of this model
  (EMA copy, rotary buffer recomputed at run time, unused tower...). Full match.
* ``Split(pattern, parts, axis=0, sizes=None)`` -- one fused tensor becomes several keys
  (fused ``qkv`` -> q, k, v). ``parts`` are replacement templates for the new keys;
  ``sizes`` are their extents on ``axis`` (equal thirds etc. when omitted).
* ``Merge(pattern, into, order, axis=0)`` -- several stored tensors become one; the
  pattern has a named group ``part`` whose values are concatenated in ``order``.
* ``Tie(pattern, repl)`` -- one stored tensor also feeds a second key (T5's ``shared``
  embedding is the encoder's ``embed_tokens``).
* ``Transform(pattern, layout=, leaf=, reshape=, cast=)`` -- per-key override of the
  converter's automatic layout (``vidax.translator.converter.auto_layout``), of the Flax
  leaf name, a reshape of the stored tensor, or an explicit dtype cast. Search match
  against the key before renaming.
* ``Dequantize(pattern, scale, dtype, format="scaled")`` -- a quantized weight (fp8, int8)
  stored with a scale tensor (``scale`` is the template of its key): the target is
  ``weight * scale`` in ``dtype``; the scale tensor is consumed. The target records the
  ``format`` (``Target.quantized``), which is what lets its stored data be integers.
* ``Asset(pattern, what)`` -- a stored tensor that is a file's bytes, not a weight
  (LTX-2.5's text-encoder file keeps its tokenizer and Hugging Face sidecar files as uint8
  tensors): fed to no parameter, listed as an asset (``Plan.assets``) with ``what``.
* ``Rename(pattern, repl)`` -- ordered ``re.sub`` rewrites of the key into the Flax
  module path. All of them are applied in order.

The weight policy (``vidax.translator.verify.compare``): a parameter the model holds in a
float dtype is fed only by stored float data, unless its target is declared quantized (a
``Dequantize`` rule, or a later quantization rule that sets ``Target.quantized``, e.g.
GGUF blocks or ``comfy_quant`` layers). Integer and boolean tensors that are no weight are
``Ignore``-d or declared an ``Asset``; anything else integer or boolean is a verification
error naming its key.

Order of application per key: ignore/asset -> dequantize -> split -> tie -> merge -> transform ->
rename -> leaf/layout. Every stored tensor ends up mapped or ignored with its reason; two tensors
landing on one path is an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from vidax.errors import MappingError
from vidax.translator import converter


@dataclass(frozen=True)
class Rename:
    pattern: str
    repl: str


@dataclass(frozen=True)
class Ignore:
    pattern: str
    reason: str


@dataclass(frozen=True)
class Split:
    pattern: str
    parts: tuple[str, ...]
    axis: int = 0
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Merge:
    pattern: str
    into: str
    order: tuple[str, ...]
    axis: int = 0


@dataclass(frozen=True)
class Tie:
    pattern: str
    repl: str


@dataclass(frozen=True)
class Transform:
    pattern: str
    layout: str | None = None
    leaf: str | None = None
    reshape: tuple[int, ...] | Callable[[tuple[int, ...]], tuple[int, ...]] | None = None
    cast: str | None = None


@dataclass(frozen=True)
class Dequantize:
    pattern: str
    scale: str
    dtype: str = "bfloat16"
    format: str = "scaled"        # recorded as Target.quantized: "weight * scale"


@dataclass(frozen=True)
class Asset:
    pattern: str
    what: str


Rule = Rename | Ignore | Split | Merge | Tie | Transform | Dequantize | Asset


@dataclass(frozen=True)
class TensorInfo:
    """What the planner needs of a stored tensor: its shape and stored dtype."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Source:
    """A stored tensor, or the sub-block ``axis[start:stop]`` of one (a split part)."""

    key: str
    axis: int | None = None
    start: int = 0
    stop: int = 0

    def index(self, rank: int) -> tuple[slice, ...] | None:
        if self.axis is None:
            return None
        idx = [slice(None)] * rank
        idx[self.axis] = slice(self.start, self.stop)
        return tuple(idx)


@dataclass(frozen=True)
class Target:
    """One Flax parameter: where its data comes from and how it is shaped."""

    path: str
    sources: tuple[Source, ...]
    concat_axis: int | None
    reshape: tuple[int, ...] | None
    layout: str
    cast: str | None
    shape: tuple[int, ...]
    dtype: str
    scale: str | None = None      # key of a dequantization scale (``Dequantize``)
    stored_dtype: str | None = None   # the stored dtype of the sources (before any step)
    quantized: str | None = None      # the quantization format a rule declared, if any

    @property
    def keys(self) -> tuple[str, ...]:
        keys = [s.key for s in self.sources] + ([self.scale] if self.scale else [])
        return tuple(dict.fromkeys(keys))

    def copies_on_host(self, stored: Mapping, dtype=None) -> bool:
        """Whether :meth:`materialize` may make a host copy rather than return a view of the
        map: a merge, a dequantization or a cast does; a reshape is counted as one (it is a
        view only of a contiguous block); a layout permutation never copies."""
        want = dtype if dtype is not None else self.cast
        return (len(self.sources) > 1 or self.scale is not None or self.reshape is not None
                or (want is not None and converter.as_dtype(want)
                    != converter.as_dtype(stored[self.sources[0].key].dtype)))

    def materialize(self, tensors: Mapping, dtype=None) -> np.ndarray:
        """The Flax-layout array, read from ``tensors`` (key -> object with ``read_view()``,
        e.g. a ``vidax.translator.io.Checkpoint``, or an array), cast to ``dtype`` (or the
        rule's cast) on the host. A view of the memory map -- strided where the layout
        permutes axes or a split cuts an inner one -- where no step copies."""
        parts = [_read(tensors[s.key], s.index(len(tensors[s.key].shape)))
                 for s in self.sources]
        array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=self.concat_axis)
        if self.scale is not None:
            scale = _read(tensors[self.scale], None).astype(np.float32)
            if scale.ndim and scale.ndim < array.ndim:   # per output channel: [out] or [out, 1]
                scale = scale.reshape(scale.shape[0], *([1] * (array.ndim - 1)))
            array = (array.astype(np.float32) * scale).astype(converter.as_dtype(self.dtype))
        if self.reshape is not None:
            array = array.reshape(self.reshape)
        array = converter.convert(array, self.layout)
        want = dtype if dtype is not None else self.cast
        if want is not None and converter.as_dtype(want) != array.dtype:
            array = array.astype(converter.as_dtype(want))
        return array


def _read(ref, index):
    """A stored tensor (or a block of it), as a view: a ``TensorRef``'s on its file's map; a
    plain array (an in-memory state dict) is indexed."""
    if hasattr(ref, "read_view"):
        return ref.read_view(() if index is None else index)
    array = np.asarray(ref)
    return array if index is None else array[index]


@dataclass
class Plan:
    """The outcome of planning a checkpoint through a mapper."""

    targets: dict[str, Target] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)   # stored key -> reason
    assets: dict[str, str] = field(default_factory=dict)    # stored key -> what it holds
    consumed: set[str] = field(default_factory=set)          # stored keys that feed a target

    def by_key(self) -> dict[str, list[str]]:
        """Stored key -> the Flax paths it feeds."""
        out: dict[str, list[str]] = {}
        for path, t in self.targets.items():
            for k in t.keys:
                out.setdefault(k, []).append(path)
        return out


@dataclass(frozen=True)
class _Pending:
    """A key on its way to becoming a target (after split/tie/merge, before renaming)."""

    sources: tuple[Source, ...]
    concat_axis: int | None
    shape: tuple[int, ...]
    dtype: str
    scale: str | None = None
    stored_dtype: str | None = None
    quantized: str | None = None


def _dtype_name(dtype) -> str:
    return str(dtype) if not isinstance(dtype, str) else dtype


@functools.lru_cache(maxsize=64)
def is_float_data(dtype) -> bool | None:
    """Whether a stored dtype (a name as the files and manifests spell it, or a numpy dtype)
    holds real floating-point numbers: float16/32/64, bfloat16, the float8 kinds. False for
    integers, booleans and complex numbers; None where the dtype is unknown (a manifest
    without dtypes) or not one numpy knows."""
    if dtype is None or dtype == "None":
        return None
    try:
        d = converter.as_dtype(dtype)
    except (TypeError, ValueError, MappingError):
        return None
    if d.kind == "f":
        return True
    if d.kind in "iubc":
        return False
    # ml_dtypes' bfloat16 / float8_* are kind "V": floats by their finfo
    try:
        import ml_dtypes

        ml_dtypes.finfo(d)
        return True
    except (TypeError, ValueError):
        return None


def _least_float(dtypes: list[str | None]) -> str | None:
    """The stored dtype a merge reports: the first non-float part's (so the policy sees it),
    else the first part's."""
    return next((d for d in dtypes if is_float_data(d) is False), dtypes[0] if dtypes else None)


@dataclass(frozen=True)
class Mapper:
    """An ordered rule table for one component layout (e.g. the Wan DiT, authors' layout)."""

    name: str
    rules: tuple[Rule, ...]
    description: str = ""

    def __post_init__(self):
        for r in self.rules:
            try:
                re.compile(r.pattern)
            except re.error as e:
                raise MappingError(f"mapper {self.name}: bad pattern {r.pattern!r}: {e}") from e

    def _of(self, kind):
        return [r for r in self.rules if isinstance(r, kind)]

    def rename(self, key: str) -> str:
        for r in self._of(Rename):
            key = re.sub(r.pattern, r.repl, key)
        return key

    def plan(self, tensors: Mapping[str, object]) -> Plan:
        """Plan every stored tensor. ``tensors`` maps key -> anything with ``shape`` and
        ``dtype`` (a ``TensorRef``, a ``TensorInfo``, a numpy array)."""
        plan = Plan()
        infos = {k: TensorInfo(None if v.shape is None else tuple(v.shape),
                               _dtype_name(v.dtype)) for k, v in tensors.items()}

        # 1. ignore, assets
        live: dict[str, TensorInfo] = {}
        for k, info in infos.items():
            rule = next((r for r in self._of(Ignore) if re.fullmatch(r.pattern, k)), None)
            asset = next((r for r in self._of(Asset) if re.fullmatch(r.pattern, k)), None)
            if rule is not None:
                plan.ignored[k] = rule.reason
            elif asset is not None:
                plan.assets[k] = asset.what
            else:
                live[k] = info

        # 2. dequantize: a quantized weight absorbs its scale tensor
        scales: dict[str, tuple[str, str, str]] = {}   # weight key -> (scale key, dtype, format)
        for k in list(live):
            rule = next((r for r in self._of(Dequantize) if re.fullmatch(r.pattern, k)), None)
            if rule is None:
                continue
            scale_key = re.fullmatch(rule.pattern, k).expand(rule.scale)
            if scale_key in live:
                scales[k] = (scale_key, rule.dtype, rule.format)
            elif live[k].dtype.startswith("float8"):
                raise MappingError(f"mapper {self.name}: {k} is stored as {live[k].dtype} "
                                   f"but its scale {scale_key} is not in the checkpoint")
        for scale_key, _, _ in scales.values():
            live.pop(scale_key, None)

        # 3. split: virtual key -> pending target
        virtual: dict[str, _Pending] = {}
        for k, info in live.items():
            scale, dtype, quantized = scales.get(k, (None, info.dtype, None))
            rule = next((r for r in self._of(Split) if re.fullmatch(r.pattern, k)), None)
            if rule is None:
                virtual[k] = _Pending((Source(k),), None, info.shape, dtype, scale,
                                      info.dtype, quantized)
                continue
            if scale is not None:
                raise MappingError(f"mapper {self.name}: {k} is both quantized and split; "
                                   "dequantize it into its own key first")
            m = re.fullmatch(rule.pattern, k)
            axis = rule.axis % len(info.shape)
            total = info.shape[axis]
            sizes = rule.sizes or (total // len(rule.parts),) * len(rule.parts)
            if sum(sizes) != total or len(sizes) != len(rule.parts):
                raise MappingError(
                    f"mapper {self.name}: {k} has {total} rows on axis {axis}; split rule "
                    f"{rule.pattern!r} expects parts of sizes {list(sizes)}")
            start = 0
            for part, size in zip(rule.parts, sizes):
                shape = list(info.shape)
                shape[axis] = size
                virtual[m.expand(part)] = _Pending((Source(k, axis, start, start + size),),
                                                   None, tuple(shape), dtype,
                                                   stored_dtype=info.dtype)
                start += size

        # 4. tie: the same data under a second key
        for rule in self._of(Tie):
            for k in list(virtual):
                if re.fullmatch(rule.pattern, k):
                    virtual[re.sub(rule.pattern, rule.repl, k)] = virtual[k]

        # 5. merge
        for rule in self._of(Merge):
            groups: dict[str, dict[str, str]] = {}
            for k in list(virtual):
                m = re.fullmatch(rule.pattern, k)
                if m is not None:
                    groups.setdefault(m.expand(rule.into), {})[m.group("part")] = k
            for into, parts in groups.items():
                if set(parts) != set(rule.order):
                    raise MappingError(
                        f"mapper {self.name}: merging into {into} needs parts {list(rule.order)}, "
                        f"the checkpoint has {sorted(parts)} ({', '.join(sorted(parts.values()))})")
                members = [virtual.pop(parts[p]) for p in rule.order]
                if any(p.scale for p in members):
                    raise MappingError(f"mapper {self.name}: cannot merge quantized tensors "
                                       f"into {into}")
                axis = rule.axis % len(members[0].shape)
                shape = list(members[0].shape)
                shape[axis] = sum(p.shape[axis] for p in members)
                stored = [p.stored_dtype for p in members]
                virtual[into] = _Pending(tuple(s for p in members for s in p.sources), axis,
                                         tuple(shape), members[0].dtype,
                                         stored_dtype=_least_float(stored))

        # 6. transform + rename + leaf/layout
        for vk, pending in virtual.items():
            sources, concat_axis, shape, dtype = (pending.sources, pending.concat_axis,
                                                  pending.shape, pending.dtype)
            rule = next((r for r in self._of(Transform) if re.search(r.pattern, vk)), None)
            reshape = None
            if rule is not None and rule.reshape is not None:
                reshape = tuple(rule.reshape(shape) if callable(rule.reshape) else rule.reshape)
                if int(np.prod(reshape)) != int(np.prod(shape)):
                    raise MappingError(f"mapper {self.name}: cannot reshape {vk} {list(shape)} "
                                       f"to {list(reshape)}")
            rank_shape = reshape if reshape is not None else shape
            renamed = self.rename(vk)
            leaf, layout = converter.auto_layout(renamed, len(rank_shape))
            if rule is not None and rule.layout is not None:
                layout = rule.layout
            if rule is not None and rule.leaf is not None:
                leaf = rule.leaf
            module = renamed.rsplit(".", 1)[0] if "." in renamed else ""
            path = f"{module}.{leaf}" if module else leaf
            out_shape = converter.converted_shape(rank_shape, layout)
            cast = rule.cast if rule is not None else None
            target = Target(path, sources, concat_axis, reshape, layout, cast, out_shape,
                            cast or dtype, pending.scale, pending.stored_dtype,
                            pending.quantized)
            if path in plan.targets:
                raise MappingError(
                    f"mapper {self.name}: {', '.join(plan.targets[path].keys)} and "
                    f"{', '.join(target.keys)} both map to {path}")
            plan.targets[path] = target
            plan.consumed.update(target.keys)
        return plan


class PrefixView(Mapping):
    """The tensors of one component inside a multi-component file: keys under ``prefix``,
    with the prefix stripped. ``outside`` lists the file's other keys."""

    def __init__(self, tensors: Mapping, prefix: str):
        self._tensors, self.prefix = tensors, prefix
        self._keys = [k for k in tensors if k.startswith(prefix)]
        self.outside = [k for k in tensors if not k.startswith(prefix)]

    def __getitem__(self, key):
        return self._tensors[self.prefix + key]

    def __iter__(self):
        return (k[len(self.prefix):] for k in self._keys)

    def __len__(self):
        return len(self._keys)
