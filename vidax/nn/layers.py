"""Parameter-holding building blocks shared by every family.

Parameter leaf names are fixed across vidax, and the translator relies on them:

* ``kernel`` -- ``Linear``: ``[in, out]``; ``Conv``: channels-last ``[*window, in, out]``
* ``bias``   -- every bias
* ``scale``  -- the weight of a normalisation layer
* ``embedding`` -- an embedding table ``[num, dim]``

Layers take a :class:`KeyGen` instead of ``nnx.Rngs``: drawing from ``nnx.Rngs`` inside
``nnx.eval_shape`` costs time super-linear in the number of parameters (300 Linear layers
take seconds), while folding a Python counter into one key costs almost nothing, so the
abstract tree of a 14B model builds in well under a second.

Compute dtype: a layer computes in the dtype of its input (parameters are cast to it),
accumulating in float32 and adding the bias there before the one rounding back (PyTorch's
autocast epilogue); normalisation layers compute their statistics in float32, as the
authors' code does.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx


class KeyGen:
    """Hands out a fresh PRNG key per call: ``fold_in(root, counter)``."""

    def __init__(self, seed: int | jax.Array = 0):
        if isinstance(seed, int):
            seed = jax.random.key(seed)
        self._root = seed
        self._count = 0

    def __call__(self) -> jax.Array:
        self._count += 1
        return jax.random.fold_in(self._root, self._count)


def _normal(keys: KeyGen, shape, std: float, dtype) -> jax.Array:
    return (jax.random.normal(keys(), shape, jnp.float32) * std).astype(dtype)


def _add_bias(y: jax.Array, bias: nnx.Param | None, dtype) -> jax.Array:
    """The bias added to the float32 accumulator, then one rounding to the compute dtype --
    as PyTorch's autocast does; adding it after rounding to bfloat16 rounds twice."""
    if bias is not None:
        y = y + bias[...].astype(jnp.float32)
    return y.astype(dtype)


def init_param(keys: KeyGen, shape, *, std: float = 0.02, dtype=jnp.float32) -> nnx.Param:
    """A free-standing parameter (e.g. Wan's ``modulation``), drawn from N(0, std)."""
    return nnx.Param(_normal(keys, tuple(shape), std, dtype))


class Linear(nnx.Module):
    def __init__(self, in_features: int, out_features: int, *, keys: KeyGen, bias: bool = True,
                 param_dtype=jnp.float32):
        self.in_features, self.out_features = in_features, out_features
        self.kernel = nnx.Param(_normal(keys, (in_features, out_features), in_features ** -0.5,
                                        param_dtype))
        self.bias = nnx.Param(jnp.zeros((out_features,), param_dtype)) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jnp.matmul(x, self.kernel[...].astype(x.dtype), preferred_element_type=jnp.float32)
        return _add_bias(y, self.bias, x.dtype)


class Conv(nnx.Module):
    """N-d convolution over channels-last input ``[B, *spatial, C]``.

    ``padding`` is an int/tuple of per-dim symmetric padding, or a sequence of
    ``(low, high)`` pairs (causal convolutions pass ``(k-1, 0)`` in time); ``dilation`` the
    kernel's (torch's ``dilation``).
    """

    def __init__(self, in_features: int, out_features: int, kernel_size: Sequence[int], *,
                 keys: KeyGen, stride: Sequence[int] | int = 1,
                 padding: Sequence[int] | Sequence[tuple[int, int]] | int = 0, bias: bool = True,
                 dilation: Sequence[int] | int = 1, param_dtype=jnp.float32):
        kernel_size = tuple(kernel_size)
        n = len(kernel_size)
        self.stride = (stride,) * n if isinstance(stride, int) else tuple(stride)
        self.dilation = (dilation,) * n if isinstance(dilation, int) else tuple(dilation)
        if isinstance(padding, int):
            padding = (padding,) * n
        self.padding = tuple(p if isinstance(p, tuple) else (p, p) for p in padding)
        fan_in = in_features
        for k in kernel_size:
            fan_in *= k
        self.kernel = nnx.Param(_normal(keys, (*kernel_size, in_features, out_features),
                                        fan_in ** -0.5, param_dtype))
        self.bias = nnx.Param(jnp.zeros((out_features,), param_dtype)) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        n = len(self.stride)
        spatial = "DHW"[-n:]
        dn = (f"N{spatial}C", f"{spatial}IO", f"N{spatial}C")
        y = jax.lax.conv_general_dilated(x, self.kernel[...].astype(x.dtype), self.stride,
                                         self.padding, rhs_dilation=self.dilation,
                                         dimension_numbers=dn,
                                         preferred_element_type=jnp.float32)
        return _add_bias(y, self.bias, x.dtype)


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis; statistics in float32. ``affine=False`` has no params."""

    def __init__(self, dim: int, *, eps: float = 1e-6, affine: bool = True, bias: bool = True,
                 param_dtype=jnp.float32):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype)) if affine else None
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype)) if affine and bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        mean = xf.mean(-1, keepdims=True)
        var = jnp.square(xf - mean).mean(-1, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + self.eps)
        if self.scale is not None:
            y = y * self.scale[...].astype(jnp.float32)
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(x.dtype)


class RMSNorm(nnx.Module):
    """RMSNorm over the last axis; statistics in float32."""

    def __init__(self, dim: int, *, eps: float = 1e-6, param_dtype=jnp.float32):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + self.eps)
        return (y * self.scale[...].astype(jnp.float32)).astype(x.dtype)


def layer_norm(x: jax.Array, eps: float) -> jax.Array:
    """``nn.LayerNorm(elementwise_affine=False)`` over the last axis (no parameters):
    statistics in float32, the result in the input's dtype."""
    xf = x.astype(jnp.float32)
    mean = xf.mean(-1, keepdims=True)
    var = jnp.square(xf - mean).mean(-1, keepdims=True)
    return ((xf - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype)


def rms_norm(x: jax.Array, eps: float) -> jax.Array:
    """RMS normalisation over the last axis without a weight (diffusers'
    ``RMSNorm(elementwise_affine=False)``, ltx-core's ``rms_norm`` without one): statistics and
    the product in float32, the result in the input's dtype."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + eps)).astype(x.dtype)


class Embedding(nnx.Module):
    def __init__(self, num_embeddings: int, features: int, *, keys: KeyGen,
                 param_dtype=jnp.float32):
        self.embedding = nnx.Param(_normal(keys, (num_embeddings, features), 1.0, param_dtype))

    def __call__(self, ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], ids, axis=0)


class ConvTranspose(nnx.Module):
    """N-d transposed convolution over channels-last input, PyTorch semantics.

    ``kernel`` is ``[*window, in, out]`` -- PyTorch's ``[in, out, *window]`` moved
    channels-last (the converter's ``conv_transpose`` layout), not flipped: the flip that
    turns a transposed convolution into a dilated correlation happens here.
    """

    def __init__(self, in_features: int, out_features: int, kernel_size: Sequence[int], *,
                 keys: KeyGen, stride: Sequence[int] | int = 1, padding: Sequence[int] | int = 0,
                 output_padding: Sequence[int] | int = 0, bias: bool = True,
                 param_dtype=jnp.float32):
        kernel_size = tuple(kernel_size)
        n = len(kernel_size)
        as_tuple = lambda v: (v,) * n if isinstance(v, int) else tuple(v)  # noqa: E731
        self.stride = as_tuple(stride)
        pad, out_pad = as_tuple(padding), as_tuple(output_padding)
        self.padding = tuple((k - 1 - p, k - 1 - p + op)
                             for k, p, op in zip(kernel_size, pad, out_pad))
        fan_in = in_features
        for k in kernel_size:
            fan_in *= k
        self.kernel = nnx.Param(_normal(keys, (*kernel_size, in_features, out_features),
                                        fan_in ** -0.5, param_dtype))
        self.bias = nnx.Param(jnp.zeros((out_features,), param_dtype)) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        n = len(self.stride)
        spatial = "DHW"[-n:]
        kernel = jnp.flip(self.kernel[...].astype(x.dtype), axis=tuple(range(n)))
        y = jax.lax.conv_transpose(x, kernel, self.stride, self.padding,
                                   dimension_numbers=(f"N{spatial}C", f"{spatial}IO",
                                                      f"N{spatial}C"),
                                   preferred_element_type=jnp.float32)
        return _add_bias(y, self.bias, x.dtype)
