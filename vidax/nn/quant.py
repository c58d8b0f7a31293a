"""Quantized parameters kept quantized on the device: :class:`QArray`.

A ``QArray`` is the value of an ``nnx.Param`` whose checkpoint stores it quantized and whose
load was asked to keep it so (``vidax.load(..., quantized="keep")``, the default for fp8
files): the stored data (float8, or the int8 quants of GGUF's Q8_0) and its float32/float16
scale, in the Flax layout -- or of a float weight a load quantized
(``vidax.load(..., quantize="int8" | "fp8")``, ``vidax.translator.quantize``: int8 or
float8_e4m3fn codes, one float32 scale per output channel, formats ``"int8"`` /
``"fp8-e4m3fn"``). It is a pytree, so it travels through ``nnx.split``, ``jax.jit``
and shardings like any array; a layer reads it the way it reads a plain kernel --
``param[...]`` -- and gets the dequantized float32 array, which the layer casts to its
compute dtype right away: XLA fuses the convert-and-multiply into the consumer, so no
dequantized copy of the whole model is ever held, only the one weight in flight.

Two forms:

* ``block=None`` -- ``data * scale``, ``scale`` broadcast against ``data``: a scalar (per
  tensor: ComfyUI's scaled fp8, LTX-2's fp8, HunyuanVideo's fp8 map) or one value per output
  channel (the last Flax axis of a kernel).
* ``block=B`` -- ``data`` ``[..., in, out]`` in blocks of ``B`` along ``in`` (GGUF's Q8_0,
  whose blocks run along the PyTorch weight's input dimension), ``scale`` ``[..., in // B,
  out]``: each block's values times its scale.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_pytree_node_class
class QArray:
    """Stored data and scale of a quantized parameter; ``self[...]`` dequantizes."""

    def __init__(self, data, scale, block: int | None = None, fmt: str = "scaled"):
        self.data, self.scale, self.block, self.format = data, scale, block, fmt

    # pytree ------------------------------------------------------------------------------
    def tree_flatten(self):
        return (self.data, self.scale), (self.block, self.format)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    # array-like --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.data.shape))

    @property
    def dtype(self):
        """The dtype a read gives (``self[...]``): float32."""
        return jnp.dtype(jnp.float32)

    @property
    def nbytes(self) -> int:
        """Bytes held: the stored data and the scales."""
        return int(self.data.nbytes) + int(self.scale.nbytes)

    def dequantize(self, dtype=jnp.float32) -> jax.Array:
        data = jnp.asarray(self.data).astype(jnp.float32)
        scale = jnp.asarray(self.scale).astype(jnp.float32)
        if self.block is None:
            return (data * scale).astype(dtype)
        *lead, rows, cols = data.shape
        blocks = data.reshape(*lead, rows // self.block, self.block, cols)
        return (blocks * scale[..., :, None, :]).reshape(data.shape).astype(dtype)

    def astype(self, dtype) -> jax.Array:
        return self.dequantize(dtype)

    def __getitem__(self, index) -> jax.Array:
        value = self.dequantize()
        return value if index is Ellipsis else value[index]

    def __repr__(self) -> str:
        how = f"blocks of {self.block}" if self.block else f"scale {list(np.shape(self.scale))}"
        return (f"QArray({self.format}, {list(self.shape)} {jnp.dtype(self.data.dtype).name}, "
                f"{how})")
