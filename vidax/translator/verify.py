"""1:1 verification of a translated checkpoint against the model's own parameter tree.

The target is the model's *abstract* tree: ``nnx.eval_shape`` of the model at the given
config -- shapes only, no memory. vidax layers take a ``KeyGen`` rather than ``nnx.Rngs``,
so this stays fast at 14B scale, and trees are cached per (model class, config).

What a passing report proves: every stored tensor found exactly one home (or was ignored
with a stated reason, or declared an asset), every parameter of the model is fed, every
shape is equal, and every float parameter is fed by float data or by data a rule declared
quantized (the weight policy: ``vidax.translator.mapping``), all from the stored names,
shapes and dtypes alone. What it
does not prove: that the *meaning* is right -- swapped q/k of one block, a reversed channel
order or a missing rescale all pass it. Only output comparison against the reference
implementation catches those (see tests/models/).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import jax
import ml_dtypes
import numpy as np
from flax import nnx

from vidax.errors import NonFiniteWeightsError, VerificationError
from vidax.translator.mapping import Plan, is_float_data


def flat_params(module: nnx.Module) -> dict[str, object]:
    """``'a.b.0.kernel' -> leaf`` for every ``nnx.Param`` of a module (abstract or real)."""
    state = nnx.state(module, nnx.Param)
    return {".".join(str(p) for p in path): var.get_value()
            for path, var in nnx.to_flat_state(state)}


@functools.lru_cache(maxsize=32)
def abstract_params(model_cls: type, config) -> dict[str, jax.ShapeDtypeStruct]:
    """The parameter shapes of ``model_cls(config)``, built abstractly (no memory)."""
    return flat_params(abstract_model(model_cls, config))


@functools.lru_cache(maxsize=8)
def abstract_model(model_cls: type, config) -> nnx.Module:
    """``model_cls(config)`` built abstractly (shapes only), once per class and config. Shared:
    callers split it (``nnx.split``) and merge real arrays into a new module, never mutate it."""
    return nnx.eval_shape(lambda: model_cls(config))


@dataclass
class Report:
    """What matched and what did not. ``ok`` only on an exact 1:1 match."""

    source: str
    num_tensors: int                                   # stored tensors, ignored ones included
    matched: int = 0                                   # stored tensors that found a home
    num_params: int = 0                                # parameters (elements) of the model tree
    num_leaves: int = 0                                # parameter arrays of the model tree
    ignored: dict[str, str] = field(default_factory=dict)
    assets: dict[str, str] = field(default_factory=dict)     # stored key -> what it holds
    missing: list[tuple[str, tuple]] = field(default_factory=list)            # (path, shape)
    unexpected: list[tuple[str, str, tuple]] = field(default_factory=list)    # (path, key, shape)
    mismatched: list[tuple[str, str, tuple, tuple]] = field(default_factory=list)
    # (path, key, model dtype, stored dtype): integer/boolean data where the model is float
    wrong_dtype: list[tuple[str, str, str, str]] = field(default_factory=list)
    config_from: str = ""          # where the config compared against came from, if detected
    quantization: str = ""         # the file's quantized form (vidax.translator.quant), if any
    kept_quantized: int = 0        # parameters a load kept quantized on the device
    loras: object = None           # vidax.lora.Applied: the LoRAs a load applied

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched or self.wrong_dtype)

    @property
    def expected(self) -> int:
        return self.num_tensors - len(self.ignored) - len(self.assets)

    def headline(self) -> str:
        return (f"matched {self.matched}/{self.expected} tensors, "
                f"{self.num_params:,} parameters")

    def lines(self, limit: int | None = 20) -> list[str]:
        out = [self.headline()]
        if self.config_from:
            out.append(f"config: {self.config_from}")
        if self.quantization:
            kept = (f"; {self.kept_quantized} kept quantized on the device"
                    if self.kept_quantized else "")
            out.append(f"quantization: {self.quantization}{kept}")
        if self.ignored:
            reasons: dict[str, list[str]] = {}
            for k, why in self.ignored.items():
                reasons.setdefault(why, []).append(k)
            for why, keys in reasons.items():
                out.append(f"ignored {len(keys)} tensor(s) ({why}): {_names(keys, 3)}")
        if self.assets:
            out.append(f"assets (file bytes, not weights) {len(self.assets)}: "
                       f"{_names(self.assets, 3)}")

        def section(title, rows, fmt):
            if rows:
                out.append(f"{title} ({len(rows)}):")
                shown = rows if limit is None else rows[:limit]
                out.extend("  " + fmt(r) for r in shown)
                if len(shown) < len(rows):
                    out.append(f"  ... and {len(rows) - len(shown)} more")

        section("missing: model parameters no stored tensor feeds", self.missing,
                lambda r: f"{r[0]} {list(r[1])}")
        section("unexpected: stored tensors with no home in the model", self.unexpected,
                lambda r: f"{r[1]} -> {r[0]} {list(r[2])}")
        section("mis-shaped", self.mismatched,
                lambda r: f"{r[1]} -> {r[0]}: model {list(r[2])}, checkpoint {list(r[3])}")
        section("wrong dtype: integer or boolean data where the model has float parameters "
                "(no rule declares it quantized or an asset)", self.wrong_dtype,
                lambda r: f"{r[1]} -> {r[0]}: model {r[2]}, checkpoint {r[3]}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _names(keys, n):
    keys = sorted(keys)
    return ", ".join(keys[:n]) + (f", ... (+{len(keys) - n})" if len(keys) > n else "")


def compare(plan: Plan, abstract: dict[str, jax.ShapeDtypeStruct], *, source: str,
            num_tensors: int) -> Report:
    """Match a plan's targets against an abstract parameter tree."""
    report = Report(source=source, num_tensors=num_tensors, ignored=dict(plan.ignored),
                    assets=dict(plan.assets))
    report.num_leaves = len(abstract)
    report.num_params = sum(int(v.size) for v in abstract.values())
    bad_keys: set[str] = set()
    for path, target in plan.targets.items():
        want = abstract.get(path)
        if want is None:
            report.unexpected.append((path, ", ".join(target.keys), target.shape))
            bad_keys.update(target.keys)
        elif tuple(want.shape) != tuple(target.shape):
            report.mismatched.append((path, ", ".join(target.keys), tuple(want.shape),
                                      target.shape))
            bad_keys.update(target.keys)
        elif target.quantized is None and is_float_data(want.dtype):
            stored = (target.stored_dtype if target.stored_dtype is not None
                      else target.dtype if target.cast is None else None)
            if is_float_data(stored) is False:
                report.wrong_dtype.append((path, ", ".join(target.keys), str(want.dtype),
                                           str(stored)))
                bad_keys.update(target.keys)
    report.missing = [(p, tuple(v.shape)) for p, v in abstract.items()
                      if p not in plan.targets]
    report.matched = len(plan.consumed - bad_keys)
    return report


def check(report: Report) -> Report:
    """Raise ``VerificationError`` unless the report is an exact 1:1 match."""
    if not report.ok:
        raise VerificationError(
            f"{report.source} does not match the model 1:1: " + "; ".join(report.lines(5)[1:]),
            report)
    return report


# ----------------------------------------------------------------------- non-finite weights
#: Elements per block of :func:`count_nonfinite` (its temporaries are one block each).
_HOST_BLOCK = 1 << 20

#: IEEE layouts: dtype -> (unsigned word of its size, exponent mask). A value is NaN or Inf
#: exactly when its exponent bits are all ones (IEEE 754-2019 §3.4; bfloat16 is float32's
#: top half).
_EXPONENT = {np.dtype(np.float16): (np.uint16, 0x7C00),
             np.dtype(ml_dtypes.bfloat16): (np.uint16, 0x7F80),
             np.dtype(np.float32): (np.uint32, 0x7F800000),
             np.dtype(np.float64): (np.uint64, 0x7FF0000000000000)}


def count_nonfinite(array) -> int:
    """NaN and Inf values in a host array (0 for integer data), in blocks so temporaries stay
    small, whatever the layout (a strided view is not copied whole). float16/bfloat16/
    float32/float64 by their exponent bits (about 4 GB/s on one core, faster than numpy's
    ``isfinite``); other float kinds (float8) by ``isfinite``."""
    array = np.asarray(array)
    if is_float_data(array.dtype) is not True or array.size == 0:
        return 0
    if array.ndim == 0:
        return int(not np.isfinite(array))
    if array.flags.c_contiguous or array.flags.f_contiguous:
        array = array.ravel(order="K")                 # a view: memory order, no copy
    rows = max(1, _HOST_BLOCK // max(1, array[0].size))
    bits = _EXPONENT.get(array.dtype)
    count = 0
    for i in range(0, array.shape[0], rows):
        block = array[i:i + rows]
        if bits is None:
            count += int(np.count_nonzero(~np.isfinite(block)))
        else:
            word, mask = bits
            exponent = np.bitwise_and(block.view(word), word(mask))
            count += int(np.count_nonzero(exponent == word(mask)))
    return count


def check_finite(array, key: str, *, source: str) -> None:
    """Raise ``NonFiniteWeightsError`` naming ``source`` and ``key`` if the host array holds
    NaN or Inf values (``vidax convert`` calls it on each tensor as it writes it)."""
    bad = count_nonfinite(array)
    if bad:
        raise nonfinite_error(source, {key: (bad, int(np.size(array)))}, total=None)


def nonfinite_error(source: str, bad: Mapping[str, tuple[int, int]], *, total: int | None,
                    cast: str | None = None, limit: int = 5) -> NonFiniteWeightsError:
    """One paragraph naming the checkpoint and the first ``limit`` bad stored keys with
    their counts (``bad``: key -> (non-finite values, values))."""
    keys = sorted(bad, key=lambda k: (-bad[k][0] / max(bad[k][1], 1), k))
    shown = "; ".join(f"{k} ({n:,} of {size:,} values)" for k, (n, size) in
                      ((k, bad[k]) for k in keys[:limit]))
    more = f"; and {len(keys) - limit} more" if len(keys) > limit else ""
    of = f" of {total}" if total is not None else ""
    if cast:
        what = (f"hold NaN or Inf values after the cast to {cast} (the stored values are "
                "finite; values beyond that dtype's range become Inf)")
        advice = "Load it in a wider dtype (the stored one, or float32)."
    else:
        what = "hold NaN or Inf values, so no output of this model could be right"
        advice = ("The file is damaged, or was saved after training diverged; use another "
                  "copy of the checkpoint.")
    return NonFiniteWeightsError(
        f"{source}: {len(keys)}{of} weight tensor(s) {what}: {shown}{more}. {advice}",
        {k: n for k, (n, _) in bad.items()})
