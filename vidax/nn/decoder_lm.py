"""Decoder language-model blocks, shared by the text encoders that are transformers decoder LMs:
the Qwen2.5-VL language model (:mod:`vidax.models.reason1.model`), Llama
(:mod:`vidax.models.llama.model`) and, where it computes the same thing, Gemma 3
(:mod:`vidax.models.gemma.model`: the attention and the gated MLP; its norms and its
four-norm layer are its own).

Attribute names are transformers' (``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``,
``input_layernorm``, ``post_attention_layernorm``): the mappers only strip a prefix and the
partition rules (``vidax.sharding.REASON1``) match these paths.

The modules read their sizes from a config with transformers' field names: ``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
``rms_norm_eps`` (:class:`~vidax.models.reason1.config.Reason1Config`,
:class:`~vidax.models.llama.config.LlamaConfig`, :class:`~vidax.models.gemma.config.GemmaConfig`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.nn.attention import attention
from vidax.nn.layers import KeyGen, Linear
from vidax.nn.rope import apply_rope_half


def rope_inv_freq(theta: float, dim: int) -> np.ndarray:
    """The RoPE frequencies ``theta ** (-2i / dim)``, ``i < dim / 2``, computed in float64 and
    rounded once to float32 (transformers raises in float32, which can land one unit in the
    last place away on some frequencies)."""
    return (1.0 / np.power(float(theta),
                           np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32)


def causal_padding_mask(length: int, attention_mask: jax.Array | None
                        ) -> tuple[jax.Array, jax.Array | None]:
    """The boolean attention mask ``[B or 1, 1, L, L]`` (causal, and padded keys removed:
    transformers' ``create_causal_mask``) and, under a padding mask, ``no_keys`` ``[B, L]``:
    the queries left with no key to attend to (left pads), else None."""
    mask = jnp.tril(jnp.ones((length, length), bool))[None, None]          # [1, 1, L, L]
    if attention_mask is None:
        return mask, None
    mask = mask & (jnp.asarray(attention_mask) != 0)[:, None, None, :]
    return mask, ~mask[:, 0].any(-1)                                       # [B, L]


class DecoderRMSNorm(nnx.Module):
    """Mirrors ``LlamaRMSNorm`` / ``Qwen2_5_VLRMSNorm``: ``weight * (x / rms(x)).to(x.dtype)``.
    Not ``vidax.nn.layers.RMSNorm``, which scales in float32 before its one rounding: in
    bfloat16 transformers rounds the normalised activations first, then the product."""

    def __init__(self, dim: int, *, eps: float, param_dtype):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x.dtype) * y.astype(x.dtype)


class DecoderAttention(nnx.Module):
    """Mirrors transformers' decoder self-attention (no cache): q/k/v/o projections
    (``qkv_bias``, ``o_bias``), optionally a per-head norm of q and k (``qk_norm``: a factory
    ``dim -> module``, Gemma 3), RoPE on q and k, key/value heads repeated over their
    query-head groups, logits scaled by ``scale`` (default ``head_dim ** -0.5``).

    ``cos`` / ``sin`` are ``[L, head_dim / 2]`` (one table for every row) or
    ``[B, L, head_dim / 2]`` (a table per batch row). A query with no key to attend to
    (``no_keys``: a left pad under a padding mask) gets a zero attention output, as torch's
    ``scaled_dot_product_attention`` (transformers' default kernel) returns for a fully masked
    row; XLA's softmax would average every value instead."""

    def __init__(self, cfg: Any, *, qkv_bias: bool, o_bias: bool, keys: KeyGen, param_dtype,
                 scale: float | None = None,
                 qk_norm: Callable[[int], nnx.Module] | None = None):
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.scale = scale
        q = cfg.num_attention_heads * cfg.head_dim
        kv = cfg.num_key_value_heads * cfg.head_dim
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.q_proj = Linear(cfg.hidden_size, q, bias=qkv_bias, **kw)
        self.k_proj = Linear(cfg.hidden_size, kv, bias=qkv_bias, **kw)
        self.v_proj = Linear(cfg.hidden_size, kv, bias=qkv_bias, **kw)
        self.o_proj = Linear(q, cfg.hidden_size, bias=o_bias, **kw)
        self.q_norm = None if qk_norm is None else qk_norm(cfg.head_dim)
        self.k_norm = None if qk_norm is None else qk_norm(cfg.head_dim)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 no_keys: jax.Array | None) -> jax.Array:
        b, n, _ = x.shape
        q = self.q_proj(x).reshape(b, n, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        rotate = jax.vmap(apply_rope_half) if cos.ndim == 3 else apply_rope_half
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = attention(q, k, v, mask=mask, scale=self.scale)   # grouped-query: k/v shared
        if no_keys is not None:
            out = jnp.where(no_keys[:, :, None, None], jnp.zeros((), out.dtype), out)
        return self.o_proj(out.reshape(b, n, -1))


class GatedMLP(nnx.Module):
    """Mirrors transformers' gated decoder MLPs: ``down(act(gate(x)) * up(x))``, no biases
    (``act``: SiLU for Llama / Qwen2's SwiGLU, tanh-GELU for Gemma 3)."""

    def __init__(self, cfg: Any, act: Callable[[jax.Array], jax.Array], *, keys: KeyGen,
                 param_dtype):
        kw = dict(keys=keys, bias=False, param_dtype=param_dtype)
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, **kw)
        self.act = act

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    """Mirrors ``LlamaDecoderLayer`` / ``Qwen2_5_VLDecoderLayer``: ``x + attn(rms(x))``, then
    ``x + mlp(rms(x))`` (:class:`DecoderRMSNorm`, :class:`DecoderAttention`, a SiLU
    :class:`GatedMLP`)."""

    def __init__(self, cfg: Any, *, qkv_bias: bool, o_bias: bool, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        norm = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.input_layernorm = DecoderRMSNorm(cfg.hidden_size, **norm)
        self.self_attn = DecoderAttention(cfg, qkv_bias=qkv_bias, o_bias=o_bias, **kw)
        self.post_attention_layernorm = DecoderRMSNorm(cfg.hidden_size, **norm)
        self.mlp = GatedMLP(cfg, jax.nn.silu, **kw)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 no_keys: jax.Array | None) -> jax.Array:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, no_keys)
        return x + self.mlp(self.post_attention_layernorm(x))
