"""The T5 family of text encoders: UMT5 (Wan2.1/2.2), T5-v1.1 and byT5 through one config.

Mirrors the Wan authors' ``wan/modules/t5.py`` ``T5Encoder`` (itself "modified from
transformers.models.t5.modeling_t5"), with their module names, so their file
``models_t5_umt5-xxl-enc-bf16.pth`` maps on by a rename of one ``nn.Sequential`` index:

==================================  ===================================================
authors (torch)                     vidax
==================================  ===================================================
``token_embedding.weight``          ``token_embedding.embedding``  [vocab, dim]
``blocks.N.attn.{q,k,v,o}``         ``blocks.N.attn.{q,k,v,o}`` (Linear, no bias)
``blocks.N.ffn.gate.0``             ``blocks.N.ffn.gate`` (GELU-tanh applied in ``ffn``)
``blocks.N.ffn.{fc1,fc2}``          ``blocks.N.ffn.{fc1,fc2}``
``blocks.N.norm1/norm2``, ``norm``  same (``scale``)
``blocks.N.pos_embedding...``       ``blocks.N.pos_embedding.embedding.embedding``
                                    [num_buckets, heads]; ``shared_pos=False`` (UMT5)
``pos_embedding.embedding.weight``  ``pos_embedding.embedding.embedding``, one table for
                                    every block; ``shared_pos=True`` (T5-v1.1, byT5)
==================================  ===================================================

transformers' ``T5EncoderModel`` / ``UMT5EncoderModel`` compute the same function under other
names (``encoder.block.N.layer.0.SelfAttention.q`` -> ``blocks.N.attn.q``, ``DenseReluDense.wi_0``
-> ``ffn.gate``, ``wi_1`` -> ``ffn.fc1``, ``wo`` -> ``ffn.fc2``, ``shared`` -> ``token_embedding``,
the block-0 ``relative_attention_bias`` -> the shared ``pos_embedding`` of a T5-v1.1), so their
layouts are mapper rules, not model code.

The math, as the authors' modules compute it:

* ``T5LayerNorm``: RMS norm without mean subtraction, variance in float32; the normalised
  activations are cast to the weight's dtype when that is float16/bfloat16, *then* scaled
  (two roundings in half precision, as theirs).
* ``T5Attention``: no ``1/sqrt(head_dim)`` scaling; a learned relative-position bias and the
  key padding mask are added to the logits; softmax in float32. Padded *queries* are not
  masked: they attend to the valid keys and get well-defined outputs (the authors' pipeline
  drops them afterwards, ``T5EncoderModel.__call__`` keeps ``u[:seq_len]``).
* ``T5RelativeEmbedding``: bidirectional buckets (half for keys after the query), exact
  below ``num_buckets // 4``, logarithmic up to ``max_distance``; computed on the host from
  the static sequence length (numpy, float32 as torch does it, so bucket edges agree).
* ``T5FeedForward``: ``fc2(fc1(x) * gelu_tanh(gate(x)))``.
* ``fp16_clamp`` after each residual add: only in float16 and only when an inf appeared,
  it clamps to ``finfo(float16).max - 1000``. A no-op in float32 and bfloat16.

Precision: the computation runs in the parameters' dtype (``token_embedding``'s), as the
authors' ``model.to(dtype)``: the released file is bfloat16 and the authors run it in
bfloat16 (``t5_dtype``); ``vidax.load(..., dtype=jnp.float32)`` gives a float32 encoder.
Dropout is inference-off and has no code here.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.models.t5.config import T5Config
from vidax.nn.attention import attention
from vidax.nn.layers import Embedding, KeyGen, Linear


# ---------------------------------------------------------------------------- functions
def relative_position_buckets(lq: int, lk: int, num_buckets: int,
                              max_distance: int) -> np.ndarray:
    """``[lq, lk]`` int32 buckets of ``key_pos - query_pos``, bidirectional: the authors'
    ``T5RelativeEmbedding._relative_position_bucket`` (= transformers' encoder buckets).

    Half the buckets are for keys after the query. Within a half, distances below
    ``max_exact = num_buckets // 4`` get their own bucket; larger ones share logarithmically
    wider buckets up to ``max_distance``, beyond which all fall in the last one. The log is
    taken in float32 and truncated toward zero, as torch's ``.long()`` does: float64 would
    agree today, but bucket edges sit on exact powers, so the same precision is kept.
    """
    rel = np.arange(lk, dtype=np.int64)[None, :] - np.arange(lq, dtype=np.int64)[:, None]
    half = num_buckets // 2
    buckets = (rel > 0).astype(np.int64) * half
    dist = np.abs(rel)
    max_exact = half // 2
    with np.errstate(divide="ignore"):   # log(0) for dist 0, which takes the exact branch
        log_ratio = (np.log(dist.astype(np.float32) / np.float32(max_exact))
                     / np.float32(math.log(max_distance / max_exact))
                     * np.float32(half - max_exact))
    large = max_exact + np.where(dist < max_exact, 0, log_ratio).astype(np.int64)
    large = np.minimum(large, half - 1)
    buckets += np.where(dist < max_exact, dist, large)
    return buckets.astype(np.int32)


def fp16_clamp(x: jax.Array) -> jax.Array:
    """The authors' ``fp16_clamp``: in float16 only, when any value overflowed to inf, clamp
    everything to ``+-(max - 1000)``. Other dtypes pass through untouched (trace-time check)."""
    if x.dtype != jnp.float16:
        return x
    limit = float(jnp.finfo(jnp.float16).max) - 1000
    return jnp.where(jnp.isinf(x).any(), jnp.clip(x, -limit, limit), x)


# ---------------------------------------------------------------------------- modules
class T5LayerNorm(nnx.Module):
    """Mirrors ``T5LayerNorm``: ``weight * (x / rms(x))``, no mean, no bias."""

    def __init__(self, dim: int, *, eps: float, param_dtype):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.scale[...]
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + self.eps)
        if scale.dtype in (jnp.float16, jnp.bfloat16):
            y = y.astype(scale.dtype)
        return scale * y


class T5RelativeEmbedding(nnx.Module):
    """Mirrors ``T5RelativeEmbedding(bidirectional=True)``: a ``[num_buckets, heads]`` table
    looked up by bucket; the bias ``[1, heads, lq, lk]``."""

    def __init__(self, num_buckets: int, num_heads: int, *, max_distance: int, keys: KeyGen,
                 param_dtype):
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.embedding = Embedding(num_buckets, num_heads, keys=keys, param_dtype=param_dtype)

    def __call__(self, lq: int, lk: int) -> jax.Array:
        buckets = relative_position_buckets(lq, lk, self.num_buckets, self.max_distance)
        bias = self.embedding(jnp.asarray(buckets))          # [lq, lk, heads]
        return jnp.transpose(bias, (2, 0, 1))[None]


class T5Attention(nnx.Module):
    """Mirrors ``T5Attention`` (self-attention only): no scaling, additive position bias,
    key padding mask."""

    def __init__(self, dim: int, dim_attn: int, num_heads: int, *, keys: KeyGen, param_dtype):
        self.num_heads = num_heads
        kw = dict(keys=keys, bias=False, param_dtype=param_dtype)
        self.q = Linear(dim, dim_attn, **kw)
        self.k = Linear(dim, dim_attn, **kw)
        self.v = Linear(dim, dim_attn, **kw)
        self.o = Linear(dim_attn, dim, **kw)

    def __call__(self, x: jax.Array, mask: jax.Array | None, pos_bias: jax.Array) -> jax.Array:
        b, n = x.shape[0], x.shape[1]
        heads = lambda t: t.reshape(b, n, self.num_heads, -1)  # noqa: E731
        out = attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), bias=pos_bias,
                        mask=None if mask is None else mask[:, None, None, :], scale=1.0)
        return self.o(out.reshape(b, n, -1))


class T5FeedForward(nnx.Module):
    """Mirrors ``T5FeedForward``: ``fc2(fc1(x) * gelu_tanh(gate(x)))``; ``gate`` is the
    authors' ``gate.0`` (their ``nn.Sequential(Linear, GELU)``)."""

    def __init__(self, dim: int, dim_ffn: int, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, bias=False, param_dtype=param_dtype)
        self.gate = Linear(dim, dim_ffn, **kw)
        self.fc1 = Linear(dim, dim_ffn, **kw)
        self.fc2 = Linear(dim_ffn, dim, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(self.fc1(x) * jax.nn.gelu(self.gate(x), approximate=True))


class T5SelfAttention(nnx.Module):
    """Mirrors ``T5SelfAttention`` (one encoder block): pre-norm attention and FFN, each
    residual add followed by ``fp16_clamp``. Owns a relative-bias table unless shared."""

    def __init__(self, cfg: T5Config, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.norm1 = T5LayerNorm(cfg.dim, eps=cfg.eps, param_dtype=param_dtype)
        self.attn = T5Attention(cfg.dim, cfg.dim_attn, cfg.num_heads, **kw)
        self.norm2 = T5LayerNorm(cfg.dim, eps=cfg.eps, param_dtype=param_dtype)
        self.ffn = T5FeedForward(cfg.dim, cfg.dim_ffn, **kw)
        self.pos_embedding = None if cfg.shared_pos else T5RelativeEmbedding(
            cfg.num_buckets, cfg.num_heads, max_distance=cfg.max_distance, **kw)

    def __call__(self, x: jax.Array, mask: jax.Array | None,
                 pos_bias: jax.Array | None) -> jax.Array:
        if self.pos_embedding is not None:
            pos_bias = self.pos_embedding(x.shape[1], x.shape[1])
        x = fp16_clamp(x + self.attn(self.norm1(x), mask, pos_bias))
        return fp16_clamp(x + self.ffn(self.norm2(x)))


class T5Encoder(nnx.Module):
    """Mirrors the authors' ``T5Encoder``: ``__call__(ids [B, L] int, mask [B, L]) -> [B, L, dim]``.

    ``mask``: nonzero/True for real tokens, 0 for padding (the tokenizer's attention mask);
    ``None`` treats every position as real. Outputs at padded positions are computed as the
    authors compute them (valid keys only); callers usually keep ``[:length]`` per prompt.
    """

    def __init__(self, config: T5Config, *, keys: KeyGen | int = 0, param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.token_embedding = Embedding(cfg.vocab_size, cfg.dim, **kw)
        self.pos_embedding = T5RelativeEmbedding(
            cfg.num_buckets, cfg.num_heads, max_distance=cfg.max_distance,
            **kw) if cfg.shared_pos else None
        self.blocks = nnx.List([T5SelfAttention(cfg, **kw) for _ in range(cfg.num_layers)])
        self.norm = T5LayerNorm(cfg.dim, eps=cfg.eps, param_dtype=param_dtype)

    def __call__(self, ids: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        x = self.token_embedding(ids)
        length = ids.shape[1]
        pos_bias = None if self.pos_embedding is None else self.pos_embedding(length, length)
        keep = None if mask is None else jnp.asarray(mask) != 0
        for block in self.blocks:
            x = block(x, keep, pos_bias)
        return self.norm(x)
