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
  stored with a scale tensor (``scale`` is the template of its key): the value is
  ``weight * scale`` in ``dtype``; the scale tensor is consumed. The scale is a scalar (per
  tensor) or one value per output row (``[out]`` / ``[out, 1]``); each stored part keeps
  its own scale through a split (the rows of its part) or a merge. The target records the
  ``format`` (``Target.quantized``), which is what lets its stored data be integers, and
  :meth:`Target.quantized_parts` gives the data and scale as they are stored, for a model
  that keeps them quantized on the device (``vidax.nn.quant.QArray``).
* ``Asset(pattern, what)`` -- a stored tensor that is a file's bytes, not a weight
  (LTX-2.5's text-encoder file keeps its tokenizer and Hugging Face sidecar files as uint8
  tensors): fed to no parameter, listed as an asset (``Plan.assets``) with ``what``.
* ``Rename(pattern, repl)`` -- ordered ``re.sub`` rewrites of the key into the Flax
  module path. All of them are applied in order.

The weight policy (``vidax.translator.verify.compare``): a parameter the model holds in a
float dtype is fed only by stored float data, unless its target is declared quantized (a
``Dequantize`` rule, or a later quantization rule that sets ``Target.quantized``, e.g.
GGUF blocks, whose reader marks them with a ``quant`` attribute, or ``comfy_quant``
layers). Integer and boolean tensors that are no weight are
``Ignore``-d or declared an ``Asset``; anything else integer or boolean is a verification
error naming its key.

Order of application per key: ignore/asset -> dequantize -> split -> tie -> merge -> transform ->
rename -> leaf/layout. ``Mapper.with_rules`` puts a file's own rules (its quantization's,
``vidax.translator.quant``) ahead of a family's table. Every stored tensor ends up mapped or
ignored with its reason; two tensors landing on one path is an error.
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
    quant: str | None = None      # a quantized storage format the reader declared (GGUF's)


@dataclass(frozen=True)
class Source:
    """A stored tensor, or the sub-block ``axis[start:stop]`` of one (a split part), with the
    key of its dequantization scale, if any (``Dequantize``)."""

    key: str
    axis: int | None = None
    start: int = 0
    stop: int = 0
    scale: str | None = None

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
    stored_dtype: str | None = None   # the stored dtype of the sources (before any step)
    quantized: str | None = None      # the quantization format a rule declared, if any

    @property
    def keys(self) -> tuple[str, ...]:
        keys = [s.key for s in self.sources] + [s.scale for s in self.sources if s.scale]
        return tuple(dict.fromkeys(keys))

    @property
    def scaled(self) -> bool:
        """Whether any stored part is dequantized by a scale (``Dequantize``)."""
        return any(s.scale for s in self.sources)

    def copies_on_host(self, stored: Mapping, dtype=None) -> bool:
        """Whether :meth:`materialize` may make a host copy rather than return a view of the
        map: a merge, a dequantization (a scale, or a reader's quantized blocks) or a cast
        does; a reshape is counted as one (it is a view only of a contiguous block); a layout
        permutation never copies."""
        want = dtype if dtype is not None else self.cast
        return (len(self.sources) > 1 or self.scaled or self.reshape is not None
                or getattr(stored[self.sources[0].key], "quant", None) is not None
                or (want is not None and converter.as_dtype(want)
                    != converter.as_dtype(stored[self.sources[0].key].dtype)))

    def _part(self, tensors: Mapping, source: Source, raw: bool = False) -> np.ndarray:
        ref = tensors[source.key]
        part = _read(ref, source.index(len(ref.shape)))
        if source.scale is None or raw:
            return part
        scale = scale_rows(_read(tensors[source.scale], None), part.ndim, source)
        return (part.astype(np.float32) * scale).astype(converter.as_dtype(self.dtype))

    def materialize(self, tensors: Mapping, dtype=None) -> np.ndarray:
        """The Flax-layout array, read from ``tensors`` (key -> object with ``read_view()``,
        e.g. a ``vidax.translator.io.Checkpoint``, or an array), cast to ``dtype`` (or the
        rule's cast) on the host. A view of the memory map -- strided where the layout
        permutes axes or a split cuts an inner one -- where no step copies."""
        parts = [self._part(tensors, s) for s in self.sources]
        array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=self.concat_axis)
        if self.reshape is not None:
            array = array.reshape(self.reshape)
        array = converter.convert(array, self.layout)
        want = dtype if dtype is not None else self.cast
        if want is not None and converter.as_dtype(want) != array.dtype:
            array = array.astype(converter.as_dtype(want))
        return array


    def quantized_parts(self, tensors: Mapping) -> tuple[np.ndarray, np.ndarray] | None:
        """``(data, scale)`` of a scaled target as stored -- the data in the Flax layout (a
        view of the map for one part), the scale as float32 broadcastable against it: a
        scalar, or one value per output row (torch axis 0, which a ``linear`` / ``conv``
        layout moves last) -- or None where the parts' scales cannot be one such array (a
        merge across another axis with distinct scales, a reshape). ``data * scale`` is
        :meth:`materialize`'s value before its cast."""
        if not self.sources or not all(s.scale for s in self.sources) or self.reshape:
            return None
        # each part's scale over its rows (torch axis 0; the planner allows a per-row scale
        # only where the part keeps or splits that axis)
        scales = [np.broadcast_to(scale_rows(_read(tensors[s.scale], None), 1, s),
                                  ((s.stop - s.start) if s.axis == 0
                                   else tensors[s.key].shape[0],))
                  for s in self.sources]
        if len(scales) > 1 and self.concat_axis != 0:
            if len({float(v) for a in scales for v in np.unique(a)}) != 1:
                return None           # parts side by side on another axis: one scale only
            scales = scales[:1]
        vector = np.concatenate(scales)
        data = [self._part(tensors, s, raw=True) for s in self.sources]
        data = data[0] if len(data) == 1 else np.concatenate(data, axis=self.concat_axis)
        data = converter.convert(data, self.layout)
        if np.all(vector == vector[0]):
            return data, np.asarray(vector[0], np.float32)
        if self.layout in ("linear", "conv"):        # torch axis 0 is the last Flax axis
            return data, vector
        if self.layout == "none":
            return data, vector.reshape(-1, *([1] * (data.ndim - 1)))
        return None                   # conv_transpose: torch axis 0 is its input channels


def scale_rows(scale, ndim: int, source: Source) -> np.ndarray:
    """A dequantization scale as float32, broadcastable against its stored part (rank
    ``ndim``): a scalar stays one; one value per output row (``[out]``, ``[out, 1]``) is cut to
    the part's rows when a split took them (``source.axis == 0``) and shaped ``[rows, 1, ...]``."""
    scale = np.asarray(scale, np.float32)
    if scale.size == 1:
        return scale.reshape(())
    scale = scale.reshape(-1)
    if source.axis == 0:
        scale = scale[source.start:source.stop]
    return scale.reshape(scale.shape[0], *([1] * (ndim - 1)))


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

    def with_rules(self, rules: tuple[Rule, ...], note: str = "") -> Mapper:
        """This table with ``rules`` ahead of its own (a file's quantization rules, which
        hold for any family); the same mapper when there are none."""
        if not rules:
            return self
        return Mapper(f"{self.name} + {note}" if note else self.name, (*rules, *self.rules),
                      self.description)

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
                               _dtype_name(v.dtype), getattr(v, "quant", None))
                 for k, v in tensors.items()}

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
            scale, dtype, quantized = scales.get(k, (None, info.dtype, info.quant))
            rule = next((r for r in self._of(Split) if re.fullmatch(r.pattern, k)), None)
            if rule is None:
                virtual[k] = _Pending((Source(k, scale=scale),), None, info.shape, dtype,
                                      info.dtype, quantized)
                continue
            m = re.fullmatch(rule.pattern, k)
            axis = rule.axis % len(info.shape)
            total = info.shape[axis]
            scale_shape = infos[scale].shape if scale is not None else None
            n = int(np.prod(scale_shape)) if scale_shape is not None else 1
            if n != 1 and (axis != 0 or n != info.shape[0]):
                raise MappingError(
                    f"mapper {self.name}: {k} is split on axis {axis}, but its scale {scale} "
                    f"{list(scale_shape)} is neither one value nor one per row of axis 0")
            sizes = rule.sizes or (total // len(rule.parts),) * len(rule.parts)
            if sum(sizes) != total or len(sizes) != len(rule.parts):
                raise MappingError(
                    f"mapper {self.name}: {k} has {total} rows on axis {axis}; split rule "
                    f"{rule.pattern!r} expects parts of sizes {list(sizes)}")
            start = 0
            for part, size in zip(rule.parts, sizes):
                shape = list(info.shape)
                shape[axis] = size
                virtual[m.expand(part)] = _Pending(
                    (Source(k, axis, start, start + size, scale),), None, tuple(shape), dtype,
                    stored_dtype=info.dtype, quantized=quantized)
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
                axis = rule.axis % len(members[0].shape)
                shape = list(members[0].shape)
                shape[axis] = sum(p.shape[axis] for p in members)
                stored = [p.stored_dtype for p in members]
                virtual[into] = _Pending(tuple(s for p in members for s in p.sources), axis,
                                         tuple(shape), members[0].dtype,
                                         stored_dtype=_least_float(stored),
                                         quantized=next((p.quantized for p in members
                                                         if p.quantized), None))

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
                            cast or dtype, pending.stored_dtype, pending.quantized)
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
