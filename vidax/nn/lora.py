"""LoRA deltas on the device: :class:`LoraDelta` (one file's change to one parameter) and
:class:`LoraArray` (a parameter with live, unmerged adapters).

A ``LoraDelta`` holds a LoRA file's factors for one Flax parameter as the file stores them
(PyTorch layout, the file's dtype) and, as static data, how the family's mapper turns the
PyTorch weight(s) they adapt into that parameter: the pieces (one per stored tensor the
parameter is cut from or merged out of, :class:`vidax.translator.mapping.Source`), the axis
they are joined on, a reshape and the layout permutation. :meth:`LoraDelta.value` runs those
same steps on the delta, in float32: what ``Target.materialize`` does to a weight, done to
its change. So a LoRA on HunyuanVideo's fused ``img_attn_qkv`` lands on the three
parameters the fused weight is split into, each getting its rows.

A piece is one of (the formulas: see ``vidax.translator.lora``, which cites their sources):

* ``lora`` -- ``up [rows, r] @ down [r, ...]``, reshaped to the adapted weight's shape (a
  convolution's ``down`` is ``[r, in, *k]``, its ``up`` ``[out, r, 1, ...]``). A split that
  takes rows of the weight takes the same rows of ``up``: the cut is made once, on the host.
* ``dense`` -- a full delta (``.diff``, ``.diff_b``), already cut to its piece.
* ``loha`` -- ``(w1a @ w1b) * (w2a @ w2b)`` (Hadamard product of two low-rank products).
* ``lokr`` -- ``kron(w1, w2)``, each factor stored whole or as a low-rank pair.

LoHa and LoKr deltas are formed whole and then cut (``index``). Each piece carries its file's
``alpha / rank`` (``scale``).

A ``LoraArray`` is the value of an ``nnx.Param`` with live adapters: ``base`` (an array or a
:class:`vidax.nn.quant.QArray`), its deltas and a float32 vector of strengths. Reading it --
``param[...]``, the way every layer reads a kernel -- gives ``base + sum(strength * delta)``
in float32, formed in the layer's program, so no model code changes and the strengths are
data: changing them (``vidax.lora.set_strengths``) recompiles nothing. Forming the delta costs
``r * in * out`` multiply-adds per weight per call; applying the factors to the activations
instead would cost ``tokens * r * (in + out)``, more as soon as a video has more tokens than
``in * out / (in + out)`` (2,560 for Wan 14B's 5120-wide layers; a 480p 81-frame video has
32,760).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vidax.translator import converter

f32 = jnp.float32


def _piece_value(kind: str, arrays, shape: tuple[int, ...], index) -> jax.Array:
    """One piece's PyTorch-layout delta (before its scale), float32: ``shape`` is the piece's
    (``lora``, ``dense``: cut already) or the whole adapted weight's, which ``index`` cuts
    (``loha``, ``lokr``)."""
    if kind == "lora":
        up, down = arrays
        rank = down.shape[0]
        value = jnp.matmul(up.reshape(up.shape[0], rank).astype(f32),
                           down.reshape(rank, -1).astype(f32),
                           precision=jax.lax.Precision.HIGHEST)
        return value.reshape(shape)
    if kind == "dense":
        return arrays[0].astype(f32).reshape(shape)
    if kind == "loha":
        w1a, w1b, w2a, w2b = (a.astype(f32) for a in arrays)
        hi = jax.lax.Precision.HIGHEST
        value = (jnp.matmul(w1a, w1b.reshape(w1b.shape[0], -1), precision=hi)
                 * jnp.matmul(w2a, w2b.reshape(w2b.shape[0], -1), precision=hi))
    elif kind == "lokr":
        w1, w2 = (_lokr_factor(f) for f in arrays)
        value = jnp.kron(w1, w2.reshape(w2.shape[0], -1) if w2.ndim > 2 else w2)
    else:
        raise ValueError(f"unknown LoRA piece kind {kind!r}")
    full = value.reshape(shape)
    return full if index is None else full[index]


def _lokr_factor(factor) -> jax.Array:
    """A LoKr factor: stored whole (one array) or as a low-rank pair ``a @ b``."""
    if len(factor) == 1:
        return factor[0].astype(f32)
    a, b = factor
    return jnp.matmul(a.astype(f32), b.astype(f32).reshape(b.shape[0], -1),
                      precision=jax.lax.Precision.HIGHEST)


@jax.tree_util.register_pytree_node_class
class LoraDelta:
    """One LoRA file's change to one Flax parameter (see the module doc)."""

    def __init__(self, arrays, pieces, concat_axis, reshape, layout, name: str = ""):
        # arrays: per piece, a tuple of arrays (LoKr: a tuple of tuples)
        # pieces: per piece, (kind, torch shape, index or None, scale): see _piece_value
        self.arrays, self.pieces = tuple(arrays), tuple(pieces)
        self.concat_axis, self.reshape, self.layout, self.name = (concat_axis, reshape,
                                                                  layout, name)

    def tree_flatten(self):
        return (self.arrays,), (self.pieces, self.concat_axis, self.reshape, self.layout,
                                self.name)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], *aux)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in jax.tree_util.tree_leaves(self.arrays))

    def value(self) -> jax.Array:
        """The delta in the parameter's Flax layout, float32, strength 1."""
        parts = [_piece_value(kind, arrays, shape, index) * scale
                 for arrays, (kind, shape, index, scale) in zip(self.arrays, self.pieces)]
        delta = parts[0] if len(parts) == 1 else jnp.concatenate(parts, self.concat_axis)
        if self.reshape is not None:
            delta = delta.reshape(self.reshape)
        perm = converter.permutation(self.layout, delta.ndim)
        return delta if perm is None else jnp.transpose(delta, perm)


def combined(deltas, strengths) -> jax.Array:
    """``sum(strength_i * delta_i)``, float32 (``strengths`` one per delta)."""
    total = None
    for i, delta in enumerate(deltas):
        term = strengths[i].astype(f32) * delta.value()
        total = term if total is None else total + term
    return total


def base_value(base) -> jax.Array:
    """A parameter's value as float32 (a ``QArray`` dequantized)."""
    return base[...].astype(f32)


@jax.tree_util.register_pytree_node_class
class LoraArray:
    """A parameter with live adapters: ``self[...]`` is ``base + sum(strength * delta)``."""

    def __init__(self, base, deltas, strengths):
        self.base, self.deltas = base, tuple(deltas)
        self.strengths = strengths

    def tree_flatten(self):
        return (self.base, self.deltas, self.strengths), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.deltas)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.base.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dtype(self):
        """The dtype a read gives (``self[...]``): float32."""
        return jnp.dtype(f32)

    @property
    def nbytes(self) -> int:
        """Bytes held: the base, the factors and the strengths."""
        return (int(self.base.nbytes) + sum(d.nbytes for d in self.deltas)
                + int(self.strengths.nbytes))

    def value(self) -> jax.Array:
        return base_value(self.base) + combined(self.deltas, self.strengths)

    def astype(self, dtype) -> jax.Array:
        return self.value().astype(dtype)

    def __getitem__(self, index) -> jax.Array:
        value = self.value()
        return value if index is Ellipsis else value[index]

    def __repr__(self) -> str:
        return (f"LoraArray({list(self.shape)}, base {type(self.base).__name__}, "
                f"{len(self.deltas)} adapter(s): {', '.join(self.names)})")
