"""Timestep embeddings."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def sinusoidal_embedding(t: jax.Array, dim: int, *, max_period: float = 10000.0) -> jax.Array:
    """``[cos(t f) | sin(t f)]``, ``f_i = max_period ** (-i / (dim // 2))``: ``[*t.shape, dim]``.

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


def diffusers_timestep_embedding(t: jax.Array, dim: int, *, flip_sin_to_cos: bool = False,
                                 downscale_freq_shift: float = 1.0, scale: float = 1.0,
                                 max_period: float = 10000.0) -> jax.Array:
    """diffusers' ``get_timestep_embedding`` (``Timesteps``), in float32 as diffusers computes
    it: ``[*t.shape, dim]``.

    For the families whose authors call diffusers' embedding (LTX-Video, ...). Unlike
    :func:`sinusoidal_embedding` it keeps diffusers' float32 phases: matching the authors
    means matching their rounding too (at t ~ 1000 float32 phases are off by ~1e-4 rad, the
    same in both). The frequency table ``exp(-ln(max_period) * i / (half - shift))`` is built
    on the host with diffusers' float32 operation order, the ``exp`` correctly rounded
    (through float64: torch's float32 ``exp`` is within an ulp of that, numpy's float32 one
    is not, and an ulp of a frequency is ~6e-5 rad of phase at t = 1000); the phases
    ``t * f`` and their ``sin`` / ``cos`` run in float32 on the device. ``flip_sin_to_cos``
    puts the cos half first; an odd ``dim`` gets one zero column at the end.
    """
    half = dim // 2
    exponent = np.float32(-math.log(max_period)) * np.arange(half, dtype=np.float32)
    exponent = exponent / np.float32(half - downscale_freq_shift)
    freqs = jnp.asarray(np.exp(exponent.astype(np.float64)).astype(np.float32))
    phase = jnp.asarray(t).astype(jnp.float32)[..., None] * freqs
    phase = jnp.float32(scale) * phase
    sin, cos = jnp.sin(phase), jnp.cos(phase)
    emb = jnp.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    if dim % 2:
        emb = jnp.pad(emb, [(0, 0)] * (emb.ndim - 1) + [(0, 1)])
    return emb
