"""PyTorch -> Flax tensor layouts, decided by the PyTorch name and rank.

The rule every mapper starts from (``auto_layout``):

=====================  ====================  ============================================
PyTorch leaf, rank      Flax leaf             layout
=====================  ====================  ============================================
``weight``, 2           ``kernel``            ``linear``: ``[out, in] -> [in, out]``
``weight``, 3..5        ``kernel``            ``conv``: ``[out, in, *k] -> [*k, in, out]``
``weight``, 1           ``scale``             unchanged (a norm's weight)
``bias``                ``bias``              unchanged
anything else           same name             unchanged (free parameters, tables, buffers)
=====================  ====================  ============================================

A mapper overrides it per key where the name alone cannot tell (embedding tables,
transposed convolutions, ``gamma`` norms stored ``[C, 1, 1, 1]``).

Everything here is shape-level or a numpy *view*: a layout never copies. The one copy a
tensor needs happens when it is placed on its device(s): the transfer copies the strided view.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from vidax import dtypes
from vidax.errors import MappingError

#: layout name -> human description (``vidax models`` and the docs print this table)
LAYOUTS = {
    "linear": "Linear weight [out, in] -> kernel [in, out]",
    "conv": "ConvNd weight [out, in, *k] -> kernel [*k, in, out]",
    "conv_transpose": "ConvTransposeNd weight [in, out, *k] -> kernel [*k, in, out]",
    "embedding": "embedding table [num, dim], unchanged",
    "none": "unchanged",
}


def auto_layout(torch_key: str, rank: int) -> tuple[str, str]:
    """The Flax leaf name and layout for a PyTorch key of the given rank."""
    leaf = torch_key.rsplit(".", 1)[-1]
    if leaf == "weight":
        if rank == 2:
            return "kernel", "linear"
        if 3 <= rank <= 5:
            return "kernel", "conv"
        if rank == 1:
            return "scale", "none"
    return leaf, "none"


def permutation(layout: str, rank: int) -> tuple[int, ...] | None:
    """The axis permutation a layout applies to a tensor of ``rank`` (None: identity)."""
    if layout in ("none", "embedding"):
        return None
    if layout == "linear":
        if rank != 2:
            raise MappingError(f"layout 'linear' needs a 2-D weight, got rank {rank}")
        return (1, 0)
    if layout == "conv":
        if rank < 3:
            raise MappingError(f"layout 'conv' needs a weight of rank >= 3, got rank {rank}")
        return (*range(2, rank), 1, 0)
    if layout == "conv_transpose":
        if rank < 3:
            raise MappingError(f"layout 'conv_transpose' needs rank >= 3, got rank {rank}")
        return (*range(2, rank), 0, 1)
    raise MappingError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")


def convert(array: np.ndarray, layout: str) -> np.ndarray:
    """Apply a layout to an array: a transposed view, never a copy."""
    perm = permutation(layout, array.ndim)
    return array if perm is None else np.transpose(array, perm)


#: Tile edge of :func:`contiguous`'s blocked copy: 256 x 256 float32 tiles (256 KiB) keep the
#: source rows and destination columns of a tile in cache together.
_TILE = 256


def contiguous(array: np.ndarray) -> np.ndarray:
    """A C-contiguous host copy of a layout view, for writing the Flax layout to a file
    (``vidax convert``; placement on a device copies the strided view itself). A transposed
    matrix is copied tile by tile: numpy's own strided copy of ``W.T`` reads one element per
    cache line (about 1.1 GB/s here against 10 GB/s for a plain copy); tiles of 256 x 256
    run at about 2.4 GB/s. Already-contiguous arrays come back as they are."""
    if array.flags.c_contiguous:
        return array
    if array.ndim != 2 or min(array.shape) < 2 * _TILE:
        return np.ascontiguousarray(array)
    out = np.empty(array.shape, array.dtype)
    rows, cols = array.shape
    for i in range(0, rows, _TILE):
        for j in range(0, cols, _TILE):
            out[i:i + _TILE, j:j + _TILE] = array[i:i + _TILE, j:j + _TILE]
    return out


def converted_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    perm = permutation(layout, len(shape))
    return tuple(shape) if perm is None else tuple(shape[p] for p in perm)


def as_dtype(dtype) -> np.dtype:
    """A numpy dtype from a name as the manifests, numpy and PyTorch spell it (``bfloat16``,
    ``float8_e4m3fn``, ``int64``, ``uint8``, ...), from a spelling of the user vocabulary
    (``vidax.dtypes``: ``bf16``, ``fp16``, ``half``, ...), or from any numpy-compatible
    dtype: the stored and per-key dtypes of the translator, every kind allowed. A name that is
    none of these is a ``VidaxError`` listing the accepted spellings.

    A dtype a *user* names for a cast goes through :func:`cast_dtype` instead, which accepts
    only the floating dtypes of the vocabulary."""
    given = dtype
    if isinstance(dtype, str):
        name = dtype.strip().removeprefix("torch.")
        short = dtypes.ALIASES.get(name.lower())
        if short is not None:
            return dtypes.DTYPES[short]
        if not name.startswith("_") and isinstance(getattr(ml_dtypes, name, None), type):
            dtype = getattr(ml_dtypes, name)
    try:
        result = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        result = None
    # numbers only: not numpy's object, string, datetime or record dtypes (np.dtype(None)
    # would be float64)
    if result is None or result.kind in "OUSMm" or result.fields is not None:
        return dtypes.parse(given)             # another spelling, or raises with the list
    return result


def cast_dtype(dtype) -> np.dtype | None:
    """The dtype a user asked every parameter to be cast to (``vidax.load(dtype=)``,
    ``vidax convert --dtype``): None stays None; anything else must be a spelling of
    ``vidax.dtypes`` (``bf16``, ``bfloat16``, ``torch.float16``, ``np.float32``, ...) and is
    refused otherwise with the accepted list. Call it before opening any file."""
    return None if dtype is None else dtypes.parse(dtype)
