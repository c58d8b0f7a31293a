"""1:1 verification of a translated checkpoint against the model's own parameter tree.

The target is the model's *abstract* tree: ``nnx.eval_shape`` of the model at the given
config -- shapes only, no memory. vidax layers take a ``KeyGen`` rather than ``nnx.Rngs``,
so this stays fast at 14B scale, and trees are cached per (model class, config).

What a passing report proves: every stored tensor found exactly one home (or was ignored
with a stated reason), every parameter of the model is fed, every shape is equal. What it
does not prove: that the *meaning* is right -- swapped q/k of one block, a reversed channel
order or a missing rescale all pass it. Only output comparison against the reference
implementation catches those (see tests/models/).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import jax
from flax import nnx

from vidax.errors import VerificationError
from vidax.translator.mapping import Plan


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
    missing: list[tuple[str, tuple]] = field(default_factory=list)            # (path, shape)
    unexpected: list[tuple[str, str, tuple]] = field(default_factory=list)    # (path, key, shape)
    mismatched: list[tuple[str, str, tuple, tuple]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    @property
    def expected(self) -> int:
        return self.num_tensors - len(self.ignored)

    def headline(self) -> str:
        return (f"matched {self.matched}/{self.expected} tensors, "
                f"{self.num_params:,} parameters")

    def lines(self, limit: int | None = 20) -> list[str]:
        out = [self.headline()]
        if self.ignored:
            reasons: dict[str, list[str]] = {}
            for k, why in self.ignored.items():
                reasons.setdefault(why, []).append(k)
            for why, keys in reasons.items():
                out.append(f"ignored {len(keys)} tensor(s) ({why}): {_names(keys, 3)}")

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
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _names(keys, n):
    keys = sorted(keys)
    return ", ".join(keys[:n]) + (f", ... (+{len(keys) - n})" if len(keys) > n else "")


def compare(plan: Plan, abstract: dict[str, jax.ShapeDtypeStruct], *, source: str,
            num_tensors: int) -> Report:
    """Match a plan's targets against an abstract parameter tree."""
    report = Report(source=source, num_tensors=num_tensors, ignored=dict(plan.ignored))
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
