"""Rotary position embeddings (RoPE).

Conventions:

* The rotated feature vector is read as complex pairs: ``(x[2i], x[2i+1])`` is the complex
  number ``x[2i] + 1j*x[2i+1]`` (torch's ``view_as_complex`` over a trailing ``(-1, 2)``
  reshape), and pair ``i`` of an axis with ``d`` real dims turns by
  ``position * theta ** (-2i / d)``.
* Axial (multi-axis) RoPE splits the pairs into consecutive groups, one per axis of a
  token grid (e.g. time / height / width), and the tokens are the grid in row-major order.

Precision: token grids are static, so the angle tables are computed on the host with numpy
in float64 (whether or not JAX's x64 mode is on) and only then cast: to float64 when x64 is
enabled, else to float32. The rotation runs in the table's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import jax
import jax.numpy as jnp
import numpy as np


def rope_angles(num_positions: int, dim: int, *, theta: float = 10000.0) -> np.ndarray:
    """float64 angles ``[num_positions, dim // 2]``: ``p * theta ** (-2i / dim)``."""
    if dim % 2:
        raise ValueError(f"RoPE needs an even number of dims, got {dim}")
    inv_freq = 1.0 / np.power(theta, np.arange(0, dim, 2, dtype=np.float64) / dim)
    return np.outer(np.arange(num_positions, dtype=np.float64), inv_freq)


def default_table_dtype():
    """float64 when JAX's x64 mode is on, else float32."""
    return jnp.float64 if jax.config.x64_enabled else jnp.float32


def axial_rope(grid: Sequence[int], axis_dims: Sequence[int], *, theta: float = 10000.0,
               dtype=None) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables ``[prod(grid), sum(axis_dims) // 2]`` for a row-major token grid.

    Axis ``a`` of ``grid`` owns ``axis_dims[a]`` real dims (``axis_dims[a] // 2`` pairs),
    placed in axis order; every axis counts its positions from 0 with its own frequencies.
    Only the small per-axis tables are constants; the broadcast over the grid happens in
    the traced program.
    """
    if len(grid) != len(axis_dims):
        raise ValueError(f"grid {tuple(grid)} and axis_dims {tuple(axis_dims)} differ in rank")
    dtype = dtype or default_table_dtype()
    grid = tuple(int(n) for n in grid)
    cos, sin = [], []
    for axis, (n, d) in enumerate(zip(grid, axis_dims)):
        angles = rope_angles(n, d, theta=theta)
        shape = [1] * len(grid) + [d // 2]
        shape[axis] = n
        full = (*grid, d // 2)
        cos.append(jnp.broadcast_to(jnp.asarray(np.cos(angles), dtype).reshape(shape), full))
        sin.append(jnp.broadcast_to(jnp.asarray(np.sin(angles), dtype).reshape(shape), full))
    pairs = sum(axis_dims) // 2
    return (jnp.concatenate(cos, -1).reshape(prod(grid), pairs),
            jnp.concatenate(sin, -1).reshape(prod(grid), pairs))


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate ``x [B, L, heads, D]`` (interleaved complex pairs) by tables ``[L, D // 2]``.

    Computes in the tables' dtype and returns ``x``'s dtype.
    """
    pairs = x.astype(cos.dtype).reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    re, im = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    out = jnp.stack([re * cos - im * sin, re * sin + im * cos], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)


def apply_rope_half(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate ``x [B, L, heads, D]`` in the half-split ("NeoX", ``rotate_half``) convention by
    tables ``[L, D // 2]``: feature ``i`` and feature ``i + D/2`` form pair ``i``, so a table of
    ``D // 2`` angles serves both halves (the authors' ``cat([angles] * 2)`` layouts: TE's
    non-interleaved ``apply_rotary_pos_emb``, diffusers' ``use_real_unbind_dim=-2``).

    Computes in the tables' dtype and returns ``x``'s dtype.
    """
    xf = x.astype(cos.dtype)
    first, second = jnp.split(xf, 2, axis=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return out.astype(x.dtype)
