"""Step caching: a DiT's block work skipped on the sampling steps where it would change little.

Every DiT runs its transformer blocks through :func:`run_blocks`. Outside a sampling step
with a cache (:func:`active`) that is the plain loop. Inside one, the cache's policy
decides, in the traced step itself (no host round trip), whether the blocks run, and what
stands in for them when they do not:

``first-block`` (diffusers' ``FirstBlockCacheConfig``, after ParaAttention's First Block
    Cache): the first block always runs; when the change of its residual since the last
    computed step, ``mean|r - r_prev| / mean|r_prev|``, is at most ``threshold``, the other
    blocks are skipped and their cached residual (last output minus first output) is added.
``magcache`` (diffusers' ``MagCacheConfig``, after Ma et al.'s MagCache): per step a
    magnitude ratio of the residual (the model's calibrated ``mag_ratios``) accumulates into
    an error; while it stays at most ``threshold`` over at most ``max_skip_steps`` steps past
    the first ``retention_ratio`` of them, the whole stack is skipped and its last residual
    added. ``calibrate=True`` skips nothing and measures the ratios instead.
``taylorseer`` (diffusers' ``TaylorSeerCacheConfig``, after Liu et al.'s TaylorSeer): the
    stack runs on the first ``warmup_steps`` steps, then every ``interval``-th; between, its
    output is a Taylor expansion (``order``) of the outputs at the computed steps, from
    divided differences.
``teacache`` (the authors' rule, ali-vilab/TeaCache): the relative L1 change of a
    timestep-modulated input the DiT gives (``signal``) is rescaled by the model's published
    polynomial and accumulated; below ``threshold`` the stack is skipped and its last
    residual added; the first ``compute_first`` and last ``compute_last`` steps always run.

State: one per DiT call of a step (a step may call several models or call one twice), a
pytree whose every leaf has the call's batch as its leading axis. Each batch row (the
``[cond, uncond]`` pair of CFG, LTX-Video's STG rows) keeps its own state and decision, as
diffusers' pipelines give the cond and uncond passes their own cache context: the blocks
run when any row needs them, and a row that decided to skip takes its cached value even
then, so its numbers are those of a run of its own. The caller threads the state through
the jitted step (:func:`active` in, :attr:`Slot.states` out) and donates it. A fresh state is
all zeros (a caller makes it from the shapes alone, as ``PipelineBase._fresh_cache_states``
does), the same as :func:`active` given no states.

The carry through the blocks is any pytree (Wan's hidden states; HunyuanVideo's image and
text streams; LTX-2's video and audio): its first leaf is the one decisions are taken on,
and every leaf's residual is cached (diffusers caches the hidden states' and, for
first-block, the text stream's too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from vidax.nn import offload
from vidax.sharding import constrain_batch

#: The kinds a sampling run can take (``none``: no cache).
KINDS = ("first-block", "magcache", "taylorseer", "teacache")


#: What each kind runs with where the policy leaves a setting None: diffusers' config
#: defaults (``FirstBlockCacheConfig``, ``MagCacheConfig``, ``TaylorSeerCacheConfig``) and,
#: for TeaCache, the authors' (ali-vilab/TeaCache ``TeaCache4Wan2.1``: threshold 0.2, the
#: first and the last step computed).
DEFAULTS = {"first-block": {"threshold": 0.05},
            "magcache": {"threshold": 0.06, "max_skip_steps": 3, "retention_ratio": 0.2},
            "taylorseer": {"interval": 5, "warmup_steps": 3, "order": 1},
            "teacache": {"threshold": 0.2, "compute_first": 1, "compute_last": 1}}


@dataclass(frozen=True)
class StepCache:
    """A step-caching policy (static: part of the compiled step); a None setting takes the
    kind's :data:`DEFAULTS` in :meth:`for_steps`, which also sets ``steps``, the sampling
    run's step count. ``mag_ratios``: one tuple per batch row (CFG's cond, uncond) or one for
    all rows, each at any length (resampled to ``steps`` by nearest index, as diffusers
    does). ``coefficients``: TeaCache's polynomial, highest power first (``numpy.poly1d``'s
    order). ``cooldown_step``: TaylorSeer computes every step from there on."""

    kind: str
    threshold: float | None = None
    # magcache
    max_skip_steps: int | None = None
    retention_ratio: float | None = None
    mag_ratios: tuple[tuple[float, ...], ...] | None = None
    calibrate: bool = False
    # taylorseer
    interval: int | None = None
    warmup_steps: int | None = None
    cooldown_step: int | None = None
    order: int | None = None
    # teacache
    coefficients: tuple[float, ...] | None = None
    compute_first: int | None = None
    compute_last: int | None = None
    steps: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"step cache kind must be one of {', '.join(KINDS)}, got "
                             f"{self.kind!r}")

    def for_steps(self, steps: int) -> StepCache:
        """This policy for a run of ``steps`` steps, its None settings at :data:`DEFAULTS`."""
        unset = {k: v for k, v in DEFAULTS[self.kind].items() if getattr(self, k) is None}
        return dataclasses.replace(self, steps=steps, **unset)

    def ratio_table(self) -> np.ndarray:
        """``[rows, steps]`` float32: the magnitude ratios at each step (rows: 1 or one per
        batch row)."""
        table = []
        for ratios in self.mag_ratios:
            src = np.asarray(ratios, np.float32)
            if len(src) == self.steps:
                table.append(src)
            elif self.steps == 1:
                table.append(src[-1:])
            else:  # diffusers' nearest_interp: round(i * (len - 1) / (steps - 1))
                scale = (len(src) - 1) / (self.steps - 1)
                idx = np.round(np.arange(self.steps, dtype=np.float32) * np.float32(scale))
                table.append(src[idx.astype(np.int64)])
        return np.stack(table)


# ------------------------------------------------------------------------------- the slot
class Slot:
    """A sampling step's cache while it is traced: the policy, the step index (traced), the
    incoming states (None: fresh ones are made), and what each DiT call hands back."""

    def __init__(self, policy: StepCache, states, index):
        self.policy, self.index = policy, index
        self._incoming = states
        self.states: list = []      # each call's new state
        self.computed: list = []    # each call's [rows] bool: which rows ran the blocks
        self.measured: list = []    # each call's [rows] float32 (magcache calibration)

    def _take(self):
        if self._incoming is None:
            return None
        if len(self.states) >= len(self._incoming):
            raise LayoutChanged("the step calls its DiT more often than the cache holds")
        return self._incoming[len(self.states)]

    def _give(self, state, computed, measured=None) -> None:
        self.states.append(jax.tree.map(constrain_batch, state))
        self.computed.append(computed)
        self.measured.append(jnp.ones_like(computed, jnp.float32) if measured is None
                             else measured)

    def outputs(self) -> dict:
        return {"states": self.states, "computed": self.computed, "measured": self.measured}


class LayoutChanged(Exception):
    """The given cache states do not fit this step's DiT calls (another batch, another
    model): the caller starts fresh states."""


_ACTIVE: list[Slot] = []


@contextlib.contextmanager
def active(policy: StepCache | None, states, index):
    """Within this (traced) context, :func:`run_blocks` applies ``policy`` with ``states``
    (a list, one per DiT call; None: fresh) at step ``index``; yields the :class:`Slot`
    (None without a policy)."""
    if policy is None:
        yield None
        return
    slot = Slot(policy, states, jnp.asarray(index, jnp.int32))
    _ACTIVE.append(slot)
    try:
        yield slot
    finally:
        _ACTIVE.pop()


# ------------------------------------------------------------------------------- the blocks
Segment = tuple[Sequence, Callable]


def run_blocks(carry, *segments: Segment, signal: jax.Array | None = None):
    """``carry`` through every block of ``segments`` (each ``(blocks, call)``, ``call(block,
    carry) -> carry``), or what the active step cache decides. ``signal``: the timestep-
    modulated input TeaCache measures (``[rows, ...]``), where the family has that rule."""
    calls = [(block, call) for blocks, call in segments for block in blocks]
    slot = _ACTIVE[-1] if _ACTIVE else None
    if slot is None:
        return _run(calls, carry)
    kind = slot.policy.kind
    if kind == "teacache" and signal is None:
        raise ValueError("this DiT gives TeaCache no modulated input: its authors publish no "
                         "TeaCache rule for it")
    state = slot._take()
    fresh = _RULES[kind].init(slot.policy, calls, carry, signal)
    if state is None:
        state = fresh
    elif jax.tree.structure(state) != jax.tree.structure(fresh) or any(
            a.shape != b.shape for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(fresh))):
        raise LayoutChanged("the cache states do not fit this DiT call")
    out, state, computed, measured = _RULES[kind].apply(slot.policy, slot.index, calls, carry,
                                                        state, signal)
    slot._give(state, computed, measured)
    return out


def _run(calls, carry):
    if any(offload.held_on_host(block) for block, _ in calls):   # --offload block
        return offload.stream(calls, carry)
    for block, call in calls:
        carry = call(block, carry)
    return carry


def _lead(tree) -> jax.Array:
    return jax.tree.leaves(tree)[0]


def _rows(tree) -> int:
    return _lead(tree).shape[0]


def _mean_abs(x: jax.Array) -> jax.Array:
    """Per row: mean of |x| over all but the leading axis, float32."""
    return jnp.abs(x.astype(jnp.float32)).reshape(x.shape[0], -1).mean(-1)


def _where(rows: jax.Array, a, b):
    """Per row of the leading axis: ``a`` where ``rows``, else ``b`` (pytrees alike)."""
    def pick(x, y):
        return jnp.where(rows.reshape(rows.shape + (1,) * (x.ndim - 1)), x, y)
    return jax.tree.map(pick, a, b)


def _add(a, b):
    return jax.tree.map(lambda x, y: (x.astype(jnp.float32) + y).astype(x.dtype), a, b)


def _sub(a, b):
    return jax.tree.map(lambda x, y: x.astype(jnp.float32) - y.astype(jnp.float32), a, b)


def _zeros(tree):
    return jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), tree)


def _flags(rows: int, value=False):
    return jnp.full((rows,), value, bool)


def _maybe_run(needed: jax.Array, run: Callable, otherwise: Callable):
    """``run()`` when any row needs it, else ``otherwise()``: a ``lax.cond``, so a step that
    skips does none of ``run``'s work."""
    return jax.lax.cond(jnp.any(needed), lambda _: run(), lambda _: otherwise(), None)


# ------------------------------------------------------------------------------- the rules
class _FirstBlock:
    @staticmethod
    def init(policy, calls, carry, signal):
        head = jax.eval_shape(lambda c: _run(calls[:1], c), carry)
        return {"have": _flags(_rows(carry)), "head_residual": _zeros(_lead(head)),
                "tail_residual": _zeros(head)}

    @staticmethod
    def apply(policy, index, calls, carry, state, signal):
        head = _run(calls[:1], carry)
        residual = _lead(head).astype(jnp.float32) - _lead(carry).astype(jnp.float32)
        prev = state["head_residual"]
        change = _mean_abs(residual - prev) / _mean_abs(prev)
        compute = ~state["have"] | (change > policy.threshold)
        cached = _add(head, state["tail_residual"])

        def full():
            out = _run(calls[1:], head)
            return out, _sub(out, head)

        out, tail = _maybe_run(compute, full, lambda: (cached, state["tail_residual"]))
        out = _where(compute, out, cached)
        state = {"have": state["have"] | compute,
                 "head_residual": _where(compute, residual, prev),
                 "tail_residual": _where(compute, tail, state["tail_residual"])}
        return out, state, compute, None


class _Stack:
    """What MagCache and TeaCache share: the whole stack skipped, its last residual added."""

    @staticmethod
    def stack(calls, carry, state, compute):
        cached = _add(carry, state["residual"])

        def full():
            out = _run(calls, carry)
            return out, _sub(out, carry)

        out, residual = _maybe_run(compute, full, lambda: (cached, state["residual"]))
        return (_where(compute, out, cached),
                _where(compute, residual, state["residual"]))


class _MagCache(_Stack):
    @staticmethod
    def init(policy, calls, carry, signal):
        rows = _rows(carry)
        return {"have": _flags(rows), "residual": _zeros(carry),
                "ratio": jnp.zeros((rows,), jnp.float32), "err": jnp.zeros((rows,), jnp.float32),
                "skipped": jnp.zeros((rows,), jnp.int32)}

    @classmethod
    def apply(cls, policy, index, calls, carry, state, signal):
        rows = _rows(carry)
        if policy.calibrate:
            compute = _flags(rows, True)
            acc = {k: state[k] for k in ("ratio", "err", "skipped")}
        else:
            table = jnp.asarray(policy.ratio_table())
            scale = jnp.broadcast_to(table[:, jnp.minimum(index, policy.steps - 1)], (rows,))
            scale = jnp.where(index < policy.steps, scale, 1.0)
            # the accumulated ratio is 1 while no step is skipped (diffusers resets it with
            # the count), so a fresh, all-zero state needs no 1 stored
            ratio = jnp.where(state["skipped"] == 0, 1.0, state["ratio"]) * scale
            skipped = state["skipped"] + 1
            err = state["err"] + jnp.abs(1.0 - ratio)
            retained = index < int(policy.retention_ratio * policy.steps + 0.5)
            skip = (~retained & state["have"] & (err <= policy.threshold)
                    & (skipped <= policy.max_skip_steps))
            compute = ~skip
            reset = {"ratio": jnp.ones_like(ratio), "err": jnp.zeros_like(err),
                     "skipped": jnp.zeros_like(skipped)}
            moved = _where(skip, {"ratio": ratio, "err": err, "skipped": skipped}, reset)
            acc = _where(jnp.broadcast_to(retained, (rows,)),
                         {k: state[k] for k in reset}, moved)
        out, residual = cls.stack(calls, carry, state, compute)
        measured = None
        if policy.calibrate:  # mean over tokens of |r| / |r_prev| (diffusers' formula)
            cur, prev = _lead(residual), _lead(state["residual"])
            per_token = (jnp.linalg.norm(cur, axis=-1)
                         / (jnp.linalg.norm(prev, axis=-1) + 1e-8))
            measured = jnp.where(state["have"], per_token.reshape(rows, -1).mean(-1), 1.0)
        return out, {"have": state["have"] | compute, "residual": residual, **acc}, compute, \
            measured


class _TeaCache(_Stack):
    @staticmethod
    def init(policy, calls, carry, signal):
        rows = _rows(carry)
        return {"have": _flags(rows), "residual": _zeros(carry), "signal": _zeros(signal),
                "acc": jnp.zeros((rows,), jnp.float32)}

    @classmethod
    def apply(cls, policy, index, calls, carry, state, signal):
        rows = _rows(carry)
        prev = state["signal"]
        change = _mean_abs(signal.astype(jnp.float32) - prev) / _mean_abs(prev)
        poly = jnp.zeros_like(change)
        for c in policy.coefficients:  # Horner, highest power first (numpy.poly1d)
            poly = poly * change + jnp.float32(c)
        acc = state["acc"] + poly
        forced = (index < policy.compute_first) | (index >= policy.steps - policy.compute_last)
        skip = ~forced & state["have"] & (acc < policy.threshold)
        compute = ~skip
        out, residual = cls.stack(calls, carry, state, compute)
        state = {"have": state["have"] | compute, "residual": residual,
                 "signal": signal.astype(jnp.float32),
                 "acc": jnp.where(skip, acc, jnp.zeros((rows,), jnp.float32))}
        return out, state, compute, None


class _TaylorSeer:
    @staticmethod
    def init(policy, calls, carry, signal):
        rows = _rows(carry)
        out = jax.eval_shape(lambda c: _run(calls, c), carry)
        factors = jax.tree.map(
            lambda x: jnp.zeros((x.shape[0], policy.order + 1, *x.shape[1:]), jnp.float32), out)
        return {"orders": jnp.zeros((rows,), jnp.int32), "last": jnp.zeros((rows,), jnp.int32),
                "factors": factors}

    @staticmethod
    def apply(policy, index, calls, carry, state, signal):
        rows = _rows(carry)
        warm = index < policy.warmup_steps
        due = jnp.remainder(index - policy.warmup_steps - 1, policy.interval) == 0
        cool = (index >= policy.cooldown_step) if policy.cooldown_step is not None else False
        compute = jnp.broadcast_to(warm | due | cool, (rows,)) | (state["orders"] == 0)
        orders, last, factors = state["orders"], state["last"], state["factors"]

        def full():
            out = _run(calls, carry)
            delta = (index - last).astype(jnp.float32)

            def update(new, old):
                new = new.astype(jnp.float32)
                terms = [new]
                for j in range(policy.order):  # divided differences, where order j exists
                    step = (terms[j] - old[:, j]) / delta.reshape((rows,) + (1,) * (new.ndim - 1))
                    have_j = (orders > j).reshape((rows,) + (1,) * (new.ndim - 1))
                    terms.append(jnp.where(have_j, step, 0.0))
                return jnp.stack(terms, axis=1)

            return out, jax.tree.map(update, out, factors)

        offset = (index - last).astype(jnp.float32)
        coef = jnp.stack([jnp.where(orders > k, offset ** k / math.factorial(k), 0.0)
                          for k in range(policy.order + 1)], axis=1)   # [rows, order+1]

        def expand(f, like):
            return (f * coef.reshape(coef.shape + (1,) * (f.ndim - 2))).sum(1).astype(like.dtype)

        predicted = jax.tree.map(expand, factors, jax.eval_shape(lambda c: _run(calls, c), carry))
        out, new_factors = _maybe_run(compute, full, lambda: (predicted, factors))
        state = {"orders": jnp.where(compute, jnp.minimum(orders + 1, policy.order + 1), orders),
                 "last": jnp.where(compute, index, last),
                 "factors": _where(compute, new_factors, factors)}
        return _where(compute, out, predicted), state, compute, None


_RULES = {"first-block": _FirstBlock, "magcache": _MagCache, "taylorseer": _TaylorSeer,
          "teacache": _TeaCache}
