"""The one attention entry point every vidax model calls.

All models route scaled dot-product attention through :func:`attention`, so the kernel
(XLA, cuDNN flash, later TPU splash under ``shard_map``) is a single switch here rather
than a code path in each model.

Layout: ``[batch, length, heads, head_dim]`` for q, k and v (the layout of
``jax.nn.dot_product_attention`` and of the authors' flash-attention calls), and the
output has the query's shape.
"""

from __future__ import annotations

import jax

IMPLEMENTATIONS = ("xla", "cudnn")


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, mask: jax.Array | None = None,
              bias: jax.Array | None = None, scale: float | None = None,
              implementation: str | None = None) -> jax.Array:
    """Softmax attention ``softmax(scale * q k^T + bias) v`` over ``[B, L, heads, head_dim]``.

    Args:
      q: queries ``[B, Lq, H, D]``.
      k, v: keys and values ``[B, Lk, H, D]``.
      mask: optional boolean mask broadcastable to ``[B, H, Lq, Lk]``; ``True`` = attend.
      bias: optional additive logit bias broadcastable to ``[B, H, Lq, Lk]`` (T5's relative
        position bias).
      scale: the logit scale; default ``1/sqrt(head_dim)`` (T5 passes 1.0).
      implementation: ``"xla"`` (the default, runs everywhere) or ``"cudnn"`` (flash
        attention on NVIDIA GPUs, half precision only).
    """
    implementation = implementation or "xla"
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attention implementation {implementation!r}; "
                         f"choose one of {IMPLEMENTATIONS}")
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale,
                                        implementation=implementation)
