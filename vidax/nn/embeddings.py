"""Timestep embeddings."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def sinusoidal_embedding(t: jax.Array, dim: int, *, max_period: float = 10000.0) -> jax.Array:
    """``[cos(t f) | sin(t f)]`` with ``f_i = max_period ** (-i / (dim // 2))``: ``[*t.shape, dim]``.

    The cos half comes first. The phases ``t * f`` reach ~1000 rad for diffusion timesteps,
    where float32 rounding alone moves cos/sin by ~1e-4, so the embedding is computed in
    float64 (inside a scoped ``jax.enable_x64``, also when traced under jit) and returned
    in float32.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal embedding needs an even dim, got {dim}")
    half = dim // 2
    freqs = np.power(max_period, -np.arange(half, dtype=np.float64) / half)
    with jax.enable_x64(True):
        phase = jnp.asarray(t).astype(jnp.float64)[..., None] * jnp.asarray(freqs, jnp.float64)
        emb = jnp.concatenate([jnp.cos(phase), jnp.sin(phase)], axis=-1)
        return emb.astype(jnp.float32)
