"""Group normalisation over channels-last activations (``torch.nn.GroupNorm`` semantics)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError


class GroupNorm(nnx.Module):
    """``torch.nn.GroupNorm(num_groups, num_channels, eps, affine)`` over ``[B, *spatial, C]``.

    Channels split into ``num_groups`` consecutive groups (channel ``c`` is in group
    ``c // (C / num_groups)``, torch's order); each sample and group is normalised over its
    channels and every spatial position together. Statistics in float32 (mean, then the
    biased variance of the centred values), the result cast back to the input's dtype.
    Parameters: ``scale`` / ``bias`` ``[C]`` (torch's ``weight`` / ``bias``).
    """

    def __init__(self, num_groups: int, num_channels: int, *, eps: float = 1e-5,
                 affine: bool = True, param_dtype=jnp.float32):
        if num_channels % num_groups:
            raise VidaxError(f"GroupNorm: {num_channels} channels do not split into "
                             f"{num_groups} groups")
        self.num_groups, self.eps = num_groups, eps
        self.scale = nnx.Param(jnp.ones((num_channels,), param_dtype)) if affine else None
        self.bias = nnx.Param(jnp.zeros((num_channels,), param_dtype)) if affine else None

    def __call__(self, x: jax.Array) -> jax.Array:
        shape = x.shape
        xf = x.astype(jnp.float32).reshape(shape[0], -1, self.num_groups,
                                           shape[-1] // self.num_groups)
        mean = xf.mean(axis=(1, 3), keepdims=True)
        var = jnp.square(xf - mean).mean(axis=(1, 3), keepdims=True)
        y = ((xf - mean) * jax.lax.rsqrt(var + self.eps)).reshape(shape)
        if self.scale is not None:
            y = y * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)
        return y.astype(x.dtype)
