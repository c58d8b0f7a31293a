"""The one attention entry point every vidax model calls.

All models route scaled dot-product attention through :func:`attention`, so the kernel and
its parallel layout are a single switch here rather than a code path in each model.

Layout: ``[batch, length, heads, head_dim]`` for q, k and v (the layout of
``jax.nn.dot_product_attention`` and of the authors' flash-attention calls), and the
output has the query's shape.

**Kernels** (``implementation=``, else the ``VIDAX_ATTENTION`` environment variable, else
chosen automatically; the automatic choice is logged once per kind of call on the
``vidax.attention`` logger):

* ``"xla"``: ``jax.nn.dot_product_attention``'s XLA lowering; every backend, every dtype.
  The choice on CPU for short or masked attention, and on TPU while no splash kernel is
  registered.
* ``"blocked"``: the queries in blocks of 512 under ``lax.map`` (plain XLA ops); the choice
  on CPU for unmasked attention of at least 2,048 queries, where one ``[H, L, L]`` logit
  tensor would spill the caches (a video DiT's self-attention).
* ``"chunked"``: exact softmax attention with the queries in blocks of ``CHUNK_QUERY_BLOCK``
  (512) and the keys in blocks of ``CHUNK_KEY_BLOCK`` (1024) under an online softmax (the
  FlashAttention recurrence in plain XLA ops, :func:`chunked_attention`): only one
  ``[B, H, 512, 1024]`` float32 block of logits exists at a time, on every backend, with any
  mask or bias. The automatic choice only under an attention budget (below).
* ``"cudnn"``: cuDNN flash attention (``implementation="cudnn"`` of the same function);
  the automatic choice on GPU for bfloat16/float16 inputs with a head size that is a
  multiple of 8 up to 128 and no additive bias. XLA partitions it like any op.
* ``"splash"`` (TPU): a hook. :func:`register_kernel` ``("splash", fn)`` with a Pallas
  kernel (e.g. one built on ``jax.experimental.pallas.ops.tpu.splash_attention``) makes it
  the automatic choice on TPU. Pallas/Mosaic kernels are not partitioned by XLA, so a kernel
  registered with ``needs_shard_map=True`` is always called inside a ``shard_map`` over the
  context mesh (batch over ``dp``/``fsdp``, heads over ``tp``): it only ever sees one
  device's block.

**Attention budget**: :func:`set_budget` ``(nbytes)``, the :func:`budget` context manager or
``VIDAX_ATTENTION_BUDGET`` (bytes, ``"2GiB"`` style units accepted) caps the float32 logits
one attention call materialises: where the automatic choice is ``"xla"`` (its
``[B, H, Lq, Lk]`` logits) or ``"blocked"`` (one ``[B, H, 512, Lk]`` query block) and those
logits exceed the budget, it takes ``"chunked"`` instead (the reason logged like any choice).
cuDNN and splash materialise no logits and are kept. Under sequence parallelism the
comparison is with one device's kernel call (after the Ulysses exchange:
``[B / dp, H / (tp sp), Lq, Lk]``). The count is one float32 copy of the logits; the peak of
the xla kernel is a few of them (:mod:`vidax.pipelines.memory`). Default: no budget, the
choices above unchanged. The budget is read when an attention is *traced*: a function jitted
before the budget changed keeps its kernel until it is traced again.

**Sequence parallelism** (Ulysses): when the context mesh (``jax.set_mesh`` /
:func:`vidax.sharding.use_mesh`) has an ``sp`` axis larger than 1, self-attention (keys as
long as the queries) runs inside a ``shard_map``: q, k, v enter split over ``sp`` along the
tokens, an all-to-all turns them into full-length, head-split blocks, the kernel runs on
``heads / sp`` heads, and a second all-to-all returns the output to token-split.
Cross-attention (keys of another length: text, CLIP tokens) needs no exchange: each device
attends its own queries over the full keys. An attention whose keys are of another length
but are themselves sequence-split activations (Cosmos3's video queries over [prompt, video]
keys, LTX-2's audio queries over the video tokens) passes ``keys_sequence_parallel=True``:
k and v then enter split over ``sp`` along their own tokens and get their own all-to-all, so
no device gathers the long keys whole. Heads and tokens (the keys' too, under that flag)
must divide ``sp``; nothing is padded. A model marks the attention that *must* be split (a
video DiT's self-attention) with ``sequence_parallel=True``, which turns a count that does
not divide into a clear error; any other attention on such a mesh (a VAE's single-head
attention, CLIP's 257 tokens) is split where it can be and otherwise left to XLA's
automatic partitioning, with a logged warning (a ``keys_sequence_parallel`` call whose keys
or heads do not divide falls back to cross-attention, its keys gathered, with a logged
warning). ``VIDAX_SEQUENCE_PARALLEL=0`` turns the split off everywhere.

*Masks and biases under Ulysses.* After the exchange a device holds every query and key of
``heads / (tp sp)`` heads, so it needs the whole ``[Lq, Lk]`` plane of the mask for those
heads. The mask (or additive bias, e.g. T5's relative-position bias) therefore never goes
through the all-to-all: it enters the ``shard_map`` beside q/k/v, broadcastable to
``[B, H, Lq, Lk]``, each size-1 dimension replicated, the batch over q's batch axes, a head
dimension split like the kernel's heads (the ``tp`` block, then the ``sp`` share of it) and
the keys whole (cross-attention: the queries split with q). The masks the models pass are
small -- a DiT's key padding ``[B, 1, 1, Lk]``, a text encoder's causal ``[B, 1, L, L]`` over
a few hundred tokens -- so replicating them is cheap; if XLA had split one over ``sp``,
only that mask is all-gathered. Causal masks are built by the models and shipped, not
regenerated per device. The kernels take the per-device block: ``"xla"`` any mask or bias,
``"chunked"`` too (sliced per block), ``"cudnn"`` the boolean mask through
``jax.nn.dot_product_attention(mask=)`` (its ``key_value_seq_lengths`` encodes right padding
only, and Gemma pads on the left; untested without a GPU), a ``needs_shard_map`` kernel the
``[B/dp, H/(tp sp), Lq, Lk]`` block.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from vidax import sharding
from vidax.errors import VidaxError

log = logging.getLogger("vidax.attention")

#: The environment variable that overrides the automatic kernel choice.
ENV_VAR = "VIDAX_ATTENTION"
#: ``VIDAX_SEQUENCE_PARALLEL=0`` turns the Ulysses split off (every call then behaves as
#: ``sequence_parallel=False``): XLA's partitioner handles the ``sp`` axis.
SP_ENV_VAR = "VIDAX_SEQUENCE_PARALLEL"
_HALF = (jnp.bfloat16, jnp.float16)


@dataclass(frozen=True)
class Kernel:
    """An attention kernel over one device's (or XLA-partitioned) ``[B, L, H, D]`` blocks:
    ``fn(q, k, v, *, mask, bias, scale)``. ``needs_shard_map``: XLA cannot partition it
    (Pallas/Mosaic), so it is called per device inside ``shard_map``."""

    fn: Callable
    needs_shard_map: bool = False


def _jax_dpa(q, k, v, *, mask, bias, scale, implementation):
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale,
                                        implementation=implementation)


#: CPU: long attentions run with the queries in blocks of about this many, so each block's
#: ``[H, block, Lk]`` logits stay cache-sized instead of one ``[H, L, L]`` tensor (measured on
#: the Wan2.1-1.3B width at 4,680 tokens: self-attention 28 % faster, benchmarks/bench_dit.py).
CPU_QUERY_BLOCK = 512
CPU_BLOCKED_MIN_QUERIES = 2048


def _blocked(q, k, v, *, mask, bias, scale, block: int = CPU_QUERY_BLOCK):
    """Softmax attention with the queries in blocks (``lax.map`` over them): float32 logits
    and softmax, the probabilities in the inputs' dtype, as ``jax.nn.dot_product_attention``
    does. Takes no mask or bias (the automatic choice only picks it without them)."""
    if mask is not None or bias is not None:
        raise VidaxError("the blocked attention kernel takes no mask or bias; use 'xla'")
    b, lq, h, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    nb = -(-lq // block)
    qt = jnp.swapaxes(q, 1, 2)                                          # [B, H, Lq, D]
    qt = jnp.pad(qt, ((0, 0), (0, 0), (0, nb * block - lq), (0, 0)))
    kt, vt = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
    blocks = qt.reshape(b, h, nb, block, d).transpose(2, 0, 1, 3, 4)   # [nb, B, H, block, D]

    def one(qi):
        logits = jnp.einsum("bhqd,bhkd->bhqk", qi, kt, preferred_element_type=jnp.float32)
        p = jax.nn.softmax(logits * scale, axis=-1).astype(v.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", p, vt, preferred_element_type=jnp.float32)

    out = jax.lax.map(one, blocks).transpose(1, 0, 3, 2, 4)            # [B, nb, block, H, D]
    return out.reshape(b, nb * block, h, d)[:, :lq].astype(q.dtype)


#: The chunked kernel's blocks: ``[B, H, CHUNK_QUERY_BLOCK, CHUNK_KEY_BLOCK]`` float32 logits
#: at a time (2 MiB per batch row and head); ``chunked_attention(q_block=, k_block=)`` or
#: ``register_kernel("chunked", functools.partial(chunked_attention, ...),
#: needs_shard_map=False)`` for others.
CHUNK_QUERY_BLOCK = 512
CHUNK_KEY_BLOCK = 1024
#: Block-logit-sized float32 tensors the chunked kernel keeps alive at once (the scaled
#: logits, their exponentials, the masked copy), besides the probabilities in the inputs'
#: dtype: measured with ``memory_analysis()`` on CPU (tests/nn/test_attention_chunked.py:
#: 2.25 blocks' worth of temporaries at L = 4096, the stacked output blocks included),
#: rounded up.
CHUNK_LOGIT_COPIES = 3
# Where a mask excludes a key: jax.nn.dot_product_attention's value (jax/_src/nn/functions.py,
# _get_large_negative: -0.7 x the float32 maximum), so a row with every key masked averages
# the values over all keys as the "xla" kernel does. Padded keys get -inf (they do not exist).
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def _blocks(t, axis: int, full: int, index, size: int):
    """Block ``index`` (of ``size``) of a mask or bias along ``axis`` (2: queries, 3: keys)
    where ``t`` spans ``full`` there; a size-1 (broadcast) dimension is kept whole."""
    if t is None or t.shape[axis] == 1 or size == full:
        return t
    return jax.lax.dynamic_slice_in_dim(t, index * size, size, axis=axis)


def _pad_to(t, axis: int, length: int, full: int):
    """``t`` zero/False-padded along ``axis`` to ``length`` where it spans ``full`` there."""
    if t is None or t.shape[axis] != full or length == full:
        return t
    pads = [(0, 0)] * t.ndim
    pads[axis] = (0, length - full)
    return jnp.pad(t, pads)


def chunked_attention(q, k, v, *, mask=None, bias=None, scale=None,
                      q_block: int = CHUNK_QUERY_BLOCK, k_block: int = CHUNK_KEY_BLOCK):
    """Exact softmax attention with the queries in blocks (``lax.map``) and, per query
    block, the keys in blocks (``lax.scan``) under an online softmax: a running maximum
    ``m`` and sum ``l`` of ``exp(logit - m)`` per query and the running output, rescaled by
    ``exp(m_old - m_new)`` whenever the maximum grows -- the recurrence of Milakov & Gimelshein
    2018 ("Online normalizer calculation for softmax", arXiv:1805.02867), Rabe & Staats 2021
    ("Self-attention does not need O(n^2) memory", arXiv:2112.05682) and Dao et al. 2022
    ("FlashAttention", arXiv:2205.14135, Algorithm 1), written from those papers in plain XLA
    ops. Only ``[B, H, q_block, k_block]`` float32 logits exist at a time.

    Same arithmetic as ``jax.nn.dot_product_attention``'s XLA lowering: float32 logits times
    ``scale``, plus ``bias``, masked keys set to ``-0.7 x`` the float32 maximum (so a row
    whose keys are all masked is the mean of the values, as there), the probabilities in
    the values' dtype for the product with the values, accumulated in float32; the output
    in q's dtype. Lq and Lk need not divide the blocks: the last blocks are padded, padded
    keys excluded. ``mask``/``bias`` broadcast to ``[B, H, Lq, Lk]`` (size-1 dimensions
    stay size 1); k/v with fewer heads than q are repeated (grouped-query attention).
    """
    b, lq, h, d = q.shape
    lk = k.shape[1]
    if k.shape[2] != h:
        k, v = (jnp.repeat(t, h // k.shape[2], axis=2) for t in (k, v))
    mask, bias = _as_4d(mask), _as_4d(bias)
    for name, t in (("mask", mask), ("bias", bias)):
        if t is not None and any(n not in (1, full) for n, full in zip(t.shape, (b, h, lq, lk))):
            raise VidaxError(f"attention {name} {t.shape} does not broadcast to "
                             f"{(b, h, lq, lk)}")
    scale = d ** -0.5 if scale is None else scale
    qb, kb = max(1, min(q_block, lq)), max(1, min(k_block, lk))
    nq, nk = -(-lq // qb), -(-lk // kb)
    q = _pad_to(q, 1, nq * qb, lq)
    k, v = (_pad_to(t, 1, nk * kb, lk) for t in (k, v))
    mask, bias = (_pad_to(_pad_to(t, 2, nq * qb, lq), 3, nk * kb, lk) for t in (mask, bias))

    def query_block(i):
        qi = jax.lax.dynamic_slice_in_dim(q, i * qb, qb, axis=1)            # [B, qb, H, D]
        mi, bi = _blocks(mask, 2, nq * qb, i, qb), _blocks(bias, 2, nq * qb, i, qb)

        def key_block(carry, j):
            acc, m, total = carry
            kj, vj = (jax.lax.dynamic_slice_in_dim(t, j * kb, kb, axis=1) for t in (k, v))
            s = jnp.einsum("bqhd,bkhd->bhqk", qi, kj, preferred_element_type=jnp.float32)
            s = s * jnp.float32(scale)
            if bi is not None:
                s = s + _blocks(bi, 3, nk * kb, j, kb).astype(jnp.float32)
            if mi is not None:
                s = jnp.where(_blocks(mi, 3, nk * kb, j, kb), s, jnp.float32(_MASKED))
            if lk % kb:
                s = jnp.where(j * kb + jnp.arange(kb) < lk, s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(axis=-1))
            # a row with no finite logit yet (-inf bias): exponentiate against 0, not -inf
            m_ref = jnp.where(m_new == -jnp.inf, 0.0, m_new)
            p = jnp.exp(s - m_ref[..., None])
            rescale = jnp.exp(m - m_ref)
            pv = jnp.einsum("bhqk,bkhd->bhqd", p.astype(v.dtype), vj,
                            preferred_element_type=jnp.float32)
            total = total * rescale + p.sum(axis=-1)
            return (acc * rescale[..., None] + pv, m_new, total), None

        init = (jnp.zeros((b, h, qb, d), jnp.float32),
                jnp.full((b, h, qb), -jnp.inf, jnp.float32), jnp.zeros((b, h, qb), jnp.float32))
        # the first key block outside the scan: its carry then varies over the manual axes
        # q/k/v/mask vary over inside a shard_map, as the scan needs its input carry to
        carry, _ = key_block(init, 0)
        if nk > 1:
            carry, _ = jax.lax.scan(key_block, carry, jnp.arange(1, nk))
        acc, _, total = carry
        return jnp.swapaxes(acc / total[..., None], 1, 2)                        # [B, qb, H, D]

    if nq == 1:
        return query_block(0)[:, :lq].astype(q.dtype)
    out = jax.lax.map(query_block, jnp.arange(nq))                           # [nq, B, qb, H, D]
    out = jnp.moveaxis(out, 0, 1).reshape(b, nq * qb, h, d)
    return out[:, :lq].astype(q.dtype)


_KERNELS: dict[str, Kernel] = {
    "xla": Kernel(functools.partial(_jax_dpa, implementation="xla")),
    "cudnn": Kernel(functools.partial(_jax_dpa, implementation="cudnn")),
    "blocked": Kernel(_blocked),
    "chunked": Kernel(chunked_attention),
}
#: Names the automatic choice knows; "splash" works once registered.
IMPLEMENTATIONS = ("xla", "cudnn", "blocked", "chunked", "splash")


def register_kernel(name: str, fn: Callable, *, needs_shard_map: bool = True) -> None:
    """Add (or replace) a kernel; ``"splash"`` is picked automatically on TPU once present."""
    _KERNELS[name] = Kernel(fn, needs_shard_map)


#: The environment variable that gives the initial attention budget (bytes; ``2GiB`` /
#: ``500MB`` suffixes accepted); :func:`set_budget` and :func:`budget` override it.
BUDGET_ENV_VAR = "VIDAX_ATTENTION_BUDGET"
_UNSET = object()
_budget: object = _UNSET
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _parse_bytes(text: str) -> int:
    found = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    try:
        return int(float(found[1]) * _UNITS[found[2].upper()])
    except (TypeError, KeyError, ValueError):
        raise VidaxError(f"{BUDGET_ENV_VAR}={text!r}: expected a number of bytes, optionally "
                         "with a unit (KB, MB, GB, KiB, MiB, GiB)") from None


def set_budget(nbytes: int | None) -> None:
    """The most bytes the float32 logits one attention call materialises at once may take
    (``None``: no budget, whatever ``VIDAX_ATTENTION_BUDGET`` says). Above it the automatic
    choice takes the ``"chunked"`` kernel instead of ``"xla"`` / ``"blocked"``. Process-wide,
    and read when an attention is *traced*: a function jitted before the change keeps the
    kernel it was compiled with."""
    global _budget
    if nbytes is not None and (isinstance(nbytes, bool) or int(nbytes) != nbytes
                               or nbytes < 0):
        raise VidaxError(f"attention budget: a number of bytes >= 0 or None, got {nbytes!r}")
    _budget = None if nbytes is None else int(nbytes)


def get_budget() -> int | None:
    """The attention budget in force: :func:`set_budget`'s, else ``VIDAX_ATTENTION_BUDGET``'s,
    else ``None`` (no budget: the choice of the kernel list in the module docstring)."""
    if _budget is not _UNSET:
        return _budget  # type: ignore[return-value]
    text = os.environ.get(BUDGET_ENV_VAR)
    return _parse_bytes(text) if text else None


@contextlib.contextmanager
def budget(nbytes: int | None):
    """:func:`set_budget` for a ``with`` block (traced inside it), restored after."""
    global _budget
    saved = _budget
    set_budget(nbytes)
    try:
        yield
    finally:
        _budget = saved


def _gib(n: float) -> str:
    if n < 2**20:
        return f"{n:,} bytes"
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def choose_implementation(q: jax.Array, *, has_bias: bool = False, has_mask: bool = False,
                          backend: str | None = None, keys: int | None = None,
                          local_shape: tuple[int, int, int, int] | None = None
                          ) -> tuple[str, str]:
    """The automatic kernel for queries like ``q`` on ``backend`` (default: JAX's default
    backend), and why. ``keys``: the key count (default: q's length); ``local_shape``: the
    ``(batch, heads, queries, keys)`` one device's kernel sees (default: q's and ``keys``),
    what the attention budget (:func:`get_budget`) is compared with."""
    name, why = _base_choice(q, has_bias=has_bias, has_mask=has_mask,
                             backend=backend or jax.default_backend())
    limit = get_budget()
    if limit is None or name not in ("xla", "blocked"):
        return name, why
    b, h, lq, lk = local_shape or (q.shape[0], q.shape[2], q.shape[1],
                                   q.shape[1] if keys is None else keys)
    rows = min(lq, CPU_QUERY_BLOCK) if name == "blocked" else lq
    logits = b * h * rows * lk * 4
    if logits <= limit:
        return name, why
    return "chunked", (f"{why}; {name}'s [{b}, {h}, {rows}, {lk}] float32 logits "
                       f"({_gib(logits)}) exceed the attention budget ({_gib(limit)}): queries "
                       f"in blocks of {CHUNK_QUERY_BLOCK}, keys in blocks of {CHUNK_KEY_BLOCK}")


def _base_choice(q, *, has_bias: bool, has_mask: bool, backend: str) -> tuple[str, str]:
    """The choice without a budget."""
    head_dim = q.shape[-1]
    if backend == "gpu":
        if q.dtype not in _HALF:
            return "xla", f"GPU, {q.dtype} inputs (cuDNN flash attention takes bf16/fp16)"
        if head_dim % 8 or head_dim > 128:
            return "xla", f"GPU, head size {head_dim} (cuDNN needs a multiple of 8 up to 128)"
        if has_bias:
            return "xla", "GPU, additive logit bias"
        return "cudnn", f"GPU, {q.dtype} inputs"
    if backend == "tpu":
        if "splash" in _KERNELS:
            return "splash", "TPU, splash kernel registered"
        return "xla", "TPU, no splash kernel registered (vidax.nn.attention.register_kernel)"
    if backend == "cpu" and not (has_bias or has_mask) and q.shape[1] >= CPU_BLOCKED_MIN_QUERIES:
        return "blocked", f"CPU, {q.shape[1]} queries in blocks of {CPU_QUERY_BLOCK}"
    return "xla", backend


@functools.cache
def _log_once(message: str) -> None:
    log.info(message)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, mask: jax.Array | None = None,
              bias: jax.Array | None = None, scale: float | None = None,
              implementation: str | None = None,
              sequence_parallel: bool | None = None,
              keys_sequence_parallel: bool = False) -> jax.Array:
    """Softmax attention ``softmax(scale * q k^T + bias) v`` over ``[B, L, heads, head_dim]``.

    Args:
      q: queries ``[B, Lq, H, D]``.
      k, v: keys and values ``[B, Lk, H, D]``, or ``[B, Lk, H / g, D]`` for grouped-query
        attention: key/value head ``j`` then serves the ``g`` consecutive query heads
        ``j g .. j g + g - 1`` (transformers' ``repeat_kv``, torch's ``enable_gqa``).
      mask: optional boolean mask broadcastable to ``[B, H, Lq, Lk]``; ``True`` = attend.
      bias: optional additive logit bias broadcastable to ``[B, H, Lq, Lk]`` (T5's relative
        position bias).
      scale: the logit scale; default ``1/sqrt(head_dim)`` (T5 passes 1.0).
      implementation: ``"xla"``, ``"cudnn"``, ``"blocked"``, ``"chunked"``, or a registered
        kernel (``"splash"``);
        default: the ``VIDAX_ATTENTION`` environment variable, else the automatic choice
        (see the module docstring).
      sequence_parallel: on a context mesh with ``sp > 1``: ``True`` -- this attention must
        be split over ``sp`` (a ``VidaxError`` naming the heads or tokens that do not divide;
        what a video DiT's long self-attention passes, since leaving 75k tokens to XLA would
        cost O(L^2) memory on every device); ``None`` (default) -- split where it divides
        evenly, else left to XLA's partitioner with a logged warning (a VAE's one-head or
        CLIP's 257-token attention on a DiT's mesh); ``False`` -- never split.
      keys_sequence_parallel: the keys/values are sequence-split activations too, of another
        length than the queries (not text): on ``sp > 1`` the call is Ulysses like a
        self-attention -- q, k and v each all-to-all from token-split to head-split blocks
        -- instead of cross-attention, which would gather k/v whole on every device. The
        key count must divide ``sp`` too; where it or the heads do not, the call is
        cross-attention with a logged warning (``sequence_parallel=True``: a
        ``VidaxError``). No effect on self-attention (already split so).
    """
    if k.shape[2] != q.shape[2]:
        groups, rest = divmod(q.shape[2], k.shape[2])
        if rest or k.shape[2] != v.shape[2]:
            raise VidaxError(f"attention: {q.shape[2]} query heads cannot share {k.shape[2]} "
                             f"key / {v.shape[2]} value heads (grouped-query attention needs "
                             "the key/value head count to divide the query head count)")
        # every kernel (and the Ulysses split) then sees one key/value head per query head
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    mesh = jax.sharding.get_abstract_mesh()
    if os.environ.get(SP_ENV_VAR, "1") == "0":
        sequence_parallel = False
    sp, ulysses = _sequence_parallel_plan(q, k, mesh, sequence_parallel,
                                          keys_sequence_parallel)
    name = implementation or os.environ.get(ENV_VAR) or None
    if name is None:
        name, why = choose_implementation(
            q, has_bias=bias is not None, has_mask=mask is not None, keys=k.shape[1],
            local_shape=_local_shape(q, k, mesh, sp, ulysses) if sp > 1 else None)
        _log_once(f"attention kernel: {name} ({why}); override with implementation= or "
                  f"{ENV_VAR}")
    kernel = _KERNELS.get(name)
    if kernel is None:
        hint = (" (a TPU Pallas kernel: register it with "
                "vidax.nn.attention.register_kernel('splash', fn))" if name == "splash" else "")
        raise VidaxError(f"unknown attention implementation {name!r}{hint}; available: "
                         f"{', '.join(_KERNELS)}")
    if name == "cudnn" and q.dtype not in _HALF:
        raise VidaxError(f"cuDNN flash attention takes bfloat16 or float16 inputs, got "
                         f"{q.dtype}; use implementation='xla' (or unset {ENV_VAR})")

    if sp > 1 or (kernel.needs_shard_map and not mesh.empty and mesh.size > 1):
        return _sharded_attention(q, k, v, mask, bias, scale, kernel, mesh, sp, ulysses)
    return kernel.fn(q, k, v, mask=mask, bias=bias, scale=scale)


def _sequence_parallel_plan(q, k, mesh, wanted: bool | None,
                            keys_split: bool = False) -> tuple[int, bool]:
    """``(sp, ulysses)``: the ``sp`` this call is split over (1: not split) and whether k/v
    are split and exchanged with the queries (Ulysses) or gathered whole (cross-attention),
    by the rules of ``attention``."""
    manual = set(getattr(mesh, "manual_axes", ()))
    if wanted is False or sharding.SEQUENCE_AXIS in manual:
        return 1, False
    sp = sharding.axis_size(mesh, sharding.SEQUENCE_AXIS)
    if sp == 1:
        return 1, False
    self_attention = k.shape[1] == q.shape[1]
    if keys_split and not self_attention:
        problems = [p for p in (
            sharding.sequence_parallel_problem(
                sp, num_heads=q.shape[2], num_tokens=q.shape[1],
                what="attention (keys_sequence_parallel=True)"),
            sharding.sequence_parallel_problem(
                sp, num_heads=None, num_tokens=k.shape[1],
                what="attention's keys (keys_sequence_parallel=True)")) if p]
        if not problems:
            return sp, True
        if wanted:
            raise VidaxError(" ".join(problems))
        _warn_once(f"{' '.join(problems)} This attention ({list(q.shape)} queries over "
                   f"{list(k.shape)} keys) falls back to cross-attention: its keys are "
                   f"gathered whole on every device; sequence_parallel=True makes this an "
                   f"error.")
    problem = sharding.sequence_parallel_problem(
        sp, num_heads=q.shape[2] if self_attention else None, num_tokens=q.shape[1],
        what="self-attention" if self_attention else "cross-attention's queries")
    if problem is None:
        return sp, self_attention
    if wanted:
        raise VidaxError(problem)
    _warn_once(f"{problem} This attention ({list(q.shape)} queries) is left to XLA's "
               f"partitioner; sequence_parallel=True makes this an error.")
    return 1, False


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)


def _logit_spec(t, q_shape, batch, head_group, query_axis):
    """The ``shard_map`` spec of a mask or bias ``t`` (already 4-D, broadcastable to
    ``[B, H, Lq, Lk]``): a dimension of size 1 is replicated, the batch follows q's batch
    axes, the heads the device's head group, the queries ``query_axis`` (cross-attention's
    token split; None under Ulysses, where every device holds every query) and the keys are
    always whole."""
    b, lq, heads, _ = q_shape
    return P((batch or None) if t.shape[0] == b and b > 1 else None,
             (head_group or None) if t.shape[1] == heads and heads > 1 else None,
             query_axis if t.shape[2] == lq and lq > 1 else None, None)


def _as_4d(t):
    return None if t is None else t.reshape((1,) * (4 - t.ndim) + t.shape)


def _split_axes(q_shape, mesh, sp: int) -> tuple[tuple[str, ...], str | None]:
    """The mesh axes ``_sharded_attention`` splits the batch over and the heads' ``tp`` axis
    (None where ``tp`` is absent, manual, or does not divide the heads with ``sp``)."""
    manual = set(getattr(mesh, "manual_axes", ()))
    batch = tuple(a for a in sharding.batch_axes(mesh, q_shape[0]) if a not in manual)
    tp = sharding.axis_size(mesh, sharding.TENSOR_AXIS)
    head_axis = (sharding.TENSOR_AXIS if tp > 1 and sharding.TENSOR_AXIS not in manual
                 and q_shape[2] % (tp * sp) == 0 else None)
    return batch, head_axis


def _local_shape(q, k, mesh, sp: int, ulysses: bool) -> tuple[int, int, int, int]:
    """``(batch, heads, queries, keys)`` of one device's kernel call under ``sp > 1``: after
    the Ulysses exchange every query over ``heads / (tp sp)`` heads, else (cross-attention)
    ``Lq / sp`` queries over the device's ``tp`` heads; the keys whole."""
    batch, head_axis = _split_axes(q.shape, mesh, sp)
    b = q.shape[0] // math.prod(sharding.axis_size(mesh, a) for a in batch)
    heads = q.shape[2] // (sharding.axis_size(mesh, head_axis) if head_axis else 1)
    if ulysses:
        return b, heads // sp, q.shape[1], k.shape[1]
    return b, heads, q.shape[1] // sp, k.shape[1]


def _sharded_attention(q, k, v, mask, bias, scale, kernel: Kernel, mesh, sp: int,
                       ulysses: bool) -> jax.Array:
    """Attention inside ``shard_map``: batch over the batch axes that divide it, heads over
    ``tp`` where they divide, and with ``sp > 1`` either the Ulysses exchange (``ulysses``:
    self-attention, or keys split over ``sp`` too) or the queries split over ``sp`` over
    whole keys (cross-attention).

    Under Ulysses q and k/v each enter split over ``sp`` along their own tokens, in
    ``shard_map``'s contiguous blocks (device ``i`` of ``sp`` holds tokens ``i L/sp ..``); the
    tiled all-to-all concatenates the blocks it receives in ``sp`` order, so after it every
    device holds all of the queries and all of the keys in their global order, whatever their
    lengths -- the order the mask's columns (the whole key axis) are in.

    A mask or bias travels beside q/k/v, never through the all-to-all: after the exchange a
    device holds every query and key of ``heads / (tp sp)`` heads, so it takes the whole
    ``[Lq, Lk]`` plane of its own head group (a mask without a head dimension, the usual
    key-padding ``[B, 1, 1, Lk]`` or causal ``[1, 1, L, L]``, is simply replicated). The mask
    is tiny next to the activations (``[B, Lk]`` bools for a DiT's text padding; an ``L x L``
    plane only for the short text encoders); if XLA had split it over ``sp``, shard_map
    all-gathers that mask alone, q/k/v stay token-split until the all-to-all.

    Only the axes named in the specs become manual; the others stay Auto, for XLA.
    """
    batch, head_axis = _split_axes(q.shape, mesh, sp)
    seq_axis = sharding.SEQUENCE_AXIS if sp > 1 else None
    q_spec = P(batch or None, seq_axis, head_axis, None)
    ulysses = seq_axis is not None and ulysses
    kv_spec = P(batch or None, seq_axis if ulysses else None, head_axis, None)
    # the heads a device holds when the kernel runs: its tp block, then (Ulysses) its sp
    # share of that block -- the all-to-all below splits the local heads in sp order
    head_group = tuple(a for a in (head_axis, seq_axis if ulysses else None) if a)
    query_axis = None if ulysses else seq_axis
    mask, bias = _as_4d(mask), _as_4d(bias)
    extras = [t for t in (mask, bias) if t is not None]
    extra_specs = [_logit_spec(t, q.shape, batch, head_group, query_axis) for t in extras]

    def local(q, k, v, *extra):
        it = iter(extra)
        m = next(it) if mask is not None else None
        bi = next(it) if bias is not None else None
        if ulysses:   # [b, L/sp, H, D] -> [b, L, H/sp, D], q and k/v each at their length
            q, k, v = (jax.lax.all_to_all(t, seq_axis, 2, 1, tiled=True) for t in (q, k, v))
        out = kernel.fn(q, k, v, mask=m, bias=bi, scale=scale)
        if ulysses:   # [b, L, H/sp, D] -> [b, L/sp, H, D]
            out = jax.lax.all_to_all(out, seq_axis, 1, 2, tiled=True)
        return out

    names = {a for a in (*batch, seq_axis, head_axis) if a}
    if not names:    # nothing to split (e.g. a one-device mesh with a Pallas kernel)
        return kernel.fn(q, k, v, mask=mask, bias=bias, scale=scale)
    return jax.shard_map(local, mesh=mesh,
                         in_specs=(q_spec, kv_spec, kv_spec, *extra_specs),
                         out_specs=q_spec, axis_names=names)(q, k, v, *extras)
