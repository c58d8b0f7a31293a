"""Quantizing a float release as it is loaded: ``vidax.load(..., quantize="int8" | "fp8")``.

(:mod:`vidax.translator.quant` reads files that are *stored* quantized; this module makes
quantized weights out of a float file.)

What is quantized: every ``vidax.nn.layers.Linear`` kernel (``[in, out]``; in an authors'
file, exactly the 2-D targets of the converter's ``linear`` layout) of at least
:data:`MIN_ELEMENTS` values whose stored data is floating point (float16, bfloat16, float32,
float64). The rule is read off the model's abstract tree (:func:`eligible`), so a ``vidax
convert`` folder (whose targets carry no layout) is quantized the same way, and the memory
estimate (:func:`quantized_bytes`) needs no file. What is not: convolution kernels, embedding
tables, norms, biases, modulation tables and every other parameter (kept in the load's
``dtype``), Linear kernels below the minimum size, and weights the file already stores
quantized (fp8 with or without scales, GGUF blocks): those follow ``quantized=``, never
re-quantized here.

The rule: symmetric, one scale per output channel (the kernel's last axis), from the
float32 values -- ``s = max|w[:, j]| / top`` (``top`` = 127 for int8, 448 = float8_e4m3fn's
largest finite value for fp8), a channel of zeros getting ``s = 1``; int8 data
``clip(round(w / s), -127, 127)`` (round half to even), fp8 data ``float8_e4m3fn(w / s)``
(round to nearest even, |w / s| <= 448). The scale is float32 ``[1, out]``, so
``data * scale`` broadcasts against the kernel: a ``vidax.nn.quant.QArray`` of format
``"int8"`` / ``"fp8-e4m3fn"``, dequantized inside each layer. This is the per-channel
absmax ("abs-max", symmetric) weight-only scheme of int8/fp8 weight-only quantization in
general; its formula here is the one ``vidax.lora.requantized`` already uses to re-encode a
LoRA-merged int8/fp8 weight per row (``max|w| / top``, zero channels scale 1), whose per-
tensor fp8 form is ltx-core 1.0.0's ``quantization/fp8_scaled_mm.py``
``quantize_weight_to_fp8_per_tensor``; so a LoRA merged into a weight quantized here is
re-encoded by the same rule.

Why a minimum size (2**14 values, 64 KiB in float32): below it a weight saves at most 48 KiB,
while its per-channel scale and the dequantization in its layer cost as much as for a large
one. No Linear of any released DiT is that small (the smallest are HunyuanVideo-1.5's
``final_layer.linear``, 2048 x 32 = 65,536, and Wan2.1-1.3B's ``head.head``, 1536 x 64); it
leaves float the tiny projections of test-size models and small encoders, where the saving
is nothing and the relative error is largest.

Host memory: one weight at a time, inside ``vidax.loading``'s copy slot -- its float32 copy
(a view of the map where the file stores float32 in one piece), then the 1-byte data,
encoded in chunks of :data:`_CHUNK` values so the temporaries stay small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from vidax.errors import VidaxError

#: ``quantize=`` choice -> the ``QArray`` format of the weights it makes.
FORMATS = {"int8": "int8", "fp8": "fp8-e4m3fn"}
QUANTIZE_MODES = tuple(FORMATS)
#: The largest magnitude of a code: symmetric int8, and float8_e4m3fn's largest finite value.
TOP = {"int8": 127.0, "fp8": 448.0}
CODES = {"int8": np.dtype(np.int8), "fp8": np.dtype(ml_dtypes.float8_e4m3fn)}
#: Linear kernels with fewer values stay float (see the module docstring).
MIN_ELEMENTS = 2 ** 14
#: Values encoded at a time: a 4 MiB float32 temporary, cache-friendly (an unchunked
#: ``w / s`` of a 5120 x 5120 weight runs 5x slower here, faulting in a fresh 100 MB array).
_CHUNK = 1 << 20
_FLOAT_STORED = ("float16", "bfloat16", "float32", "float64")


def check_mode(quantize: str | None) -> str | None:
    """``quantize`` if it is a choice (or None), else one ``VidaxError`` naming the choices."""
    if quantize is not None and quantize not in FORMATS:
        raise VidaxError(f"quantize={quantize!r}: choose one of "
                         f"{', '.join(repr(m) for m in QUANTIZE_MODES)} (or None: keep the "
                         f"weights' floats)")
    return quantize


def linear_kernels(model) -> dict[str, tuple[int, ...]]:
    """Flax path -> shape of the kernel of every ``vidax.nn.layers.Linear`` in ``model``
    (an abstract or a real module)."""
    from flax import nnx

    from vidax.nn.layers import Linear

    out = {}
    for path, node in nnx.iter_graph(model):
        if isinstance(node, Linear):
            out[".".join(str(p) for p in (*path, "kernel"))] = tuple(node.kernel.get_value().shape)
    return out


def eligible(model, min_elements: int = MIN_ELEMENTS) -> dict[str, tuple[int, ...]]:
    """The Linear kernels of ``model`` a quantizing load quantizes when stored as floats:
    those of at least ``min_elements`` values (path -> shape)."""
    return {k: s for k, s in linear_kernels(model).items() if math.prod(s) >= min_elements}


def stored_float(target, tensors: Mapping) -> bool:
    """Whether a plan target's stored data is plain floats: no scale, no fp8, no GGUF
    blocks (a weight stored quantized is left to ``quantized=``)."""
    if target.scaled:
        return False
    refs = [tensors[s.key] for s in target.sources]
    return all(str(r.dtype) in _FLOAT_STORED and getattr(r, "quant", None) is None
               for r in refs)


def chosen(model, plan, tensors: Mapping, quantize: str | None) -> frozenset[str]:
    """The parameters a load with ``quantize`` quantizes: the :func:`eligible` kernels of the
    abstract ``model`` whose plan target (``plan.targets``) is stored as floats."""
    if quantize is None:
        return frozenset()
    return frozenset(name for name in eligible(model)
                     if name in plan.targets and stored_float(plan.targets[name], tensors))


def quantize_kernel(kernel, quantize: str) -> tuple[np.ndarray, np.ndarray]:
    """``(data, scale)`` of a float ``[in, out]`` kernel: per output channel (last axis)
    symmetric absmax, ``data`` int8 or float8_e4m3fn in the kernel's memory order (a
    transposed view of a stored ``[out, in]`` weight gives a transposed ``data``), ``scale``
    float32 ``[1, out]``; ``data * scale`` approximates the kernel. The values must be
    finite (a load counts NaN/Inf first: :func:`quantized_host`)."""
    check_mode(quantize)
    kernel = np.asarray(kernel, np.float32)
    if kernel.ndim != 2 or kernel.size == 0:
        raise VidaxError(f"quantize: a Linear kernel is 2-D and not empty, got {kernel.shape}")
    amax = np.maximum(kernel.max(axis=0), -kernel.min(axis=0))    # no |w| temporary
    scale = np.where(amax > 0, amax / np.float32(TOP[quantize]), 1).astype(np.float32)
    # encode in chunks along the axis with the largest stride, so each chunk is contiguous
    by_columns = kernel.flags.f_contiguous and not kernel.flags.c_contiguous
    data = np.empty(kernel.shape, CODES[quantize], order="F" if by_columns else "C")
    axis = 1 if by_columns else 0
    step = max(1, _CHUNK // kernel.shape[1 - axis])
    for i in range(0, kernel.shape[axis], step):
        if by_columns:
            part, s = (slice(None), slice(i, i + step)), scale[i:i + step]
        else:
            part, s = (slice(i, i + step),), scale
        data[part] = _encode(kernel[part] / s, quantize)
    return data, scale.reshape(1, -1)


def _encode(x: np.ndarray, quantize: str) -> np.ndarray:
    """``x`` (a float32 temporary, changed in place) as codes: int8 rounded half to even,
    fp8 by ml_dtypes' cast (round to nearest even); both clipped to the code's range."""
    top = TOP[quantize]
    if quantize == "int8":
        np.rint(x, out=x)
    np.clip(x, -top, top, out=x)
    return x.astype(CODES[quantize])


def quantized_host(target, tensors: Mapping, quantize: str):
    """``(kept, bad)`` for ``vidax.loading``: the target's float32 values on the host (one
    copy, or a view of the map), their NaN/Inf count ``bad`` taken before anything is
    rounded, and -- when ``bad`` is 0 -- ``kept = (data, scale, None, format)``, what
    ``vidax.loading`` places as a ``QArray`` (else ``kept`` is None)."""
    from vidax.translator.verify import count_nonfinite

    values = target.materialize(tensors, dtype=np.float32)
    bad = count_nonfinite(values)
    if bad:
        return None, bad
    data, scale = quantize_kernel(values, quantize)
    return (data, scale, None, FORMATS[quantize]), 0


def quantized_bytes(spec, config, dtype=None, quantize: str | None = None) -> tuple[int, str]:
    """``(bytes, dtypes)`` a component's parameters hold once loaded from a float file with
    ``vidax.load(..., dtype=dtype, quantize=quantize)``, from its abstract tree alone (no
    file is read): each :func:`eligible` Linear kernel 1 byte a value plus its float32 scale
    (4 bytes an output channel), every other parameter at ``dtype`` (None: the model's own
    parameter dtype, float32 -- what a float32 file keeps). For a file that already stores
    quantized weights, which a load leaves as stored, see
    ``vidax.pipelines.memory.held_bytes``."""
    from vidax import dtypes
    from vidax.translator import verify

    check_mode(quantize)
    if isinstance(dtype, str):
        dtype = dtypes.parse(dtype, what="the load dtype")
    model = verify.abstract_model(spec.model_class(), config)
    kernels = eligible(model) if quantize else {}
    total, kinds = 0, set()
    for name, leaf in verify.flat_params(model).items():
        size = math.prod(leaf.shape)
        if name in kernels:
            total += size * CODES[quantize].itemsize + leaf.shape[-1] * 4
        else:
            kind = np.dtype(dtype if dtype is not None else leaf.dtype)
            total += size * kind.itemsize
            kinds.add(kind.name)
    text = ", ".join(sorted(kinds))
    if kernels:
        text += f", {len(kernels)} Linear weights {FORMATS[quantize]} (+ float32 scales)"
    return total, text


# ------------------------------------------------------------------ weights stored quantized
# (moved here from vidax.loading, which imports them under their old names)
def stays_fp8(target, view: Mapping, mode: str | None) -> bool:
    """Whether a plain fp8 weight (stored float8, no scale) skips the load's cast: it is
    placed as stored, and each layer casts it as it reads it."""
    return (mode != "dequantize" and not target.scaled and target.cast is None
            and str(target.stored_dtype).startswith("float8") and len(target.shape) >= 2)


def q8_0_linear(target, view: Mapping) -> bool:
    """Whether a target is one GGUF Q8_0 Linear weight, whose blocks can be placed as stored."""
    ref = view[target.sources[0].key]
    return (getattr(ref, "quant", None) == "Q8_0" and hasattr(ref, "q8_0_blocks")
            and len(target.sources) == 1 and target.sources[0].axis is None
            and target.layout == "linear" and target.reshape is None and target.cast is None)


def keeps_quantized(target, view: Mapping, mode: str | None) -> bool:
    """Whether ``vidax.load`` with ``quantized=mode`` holds this weight on the device as
    stored (fp8 with its scales, plain fp8, Q8_0 blocks with ``"keep"``): what the memory
    estimate counts at the stored size (``vidax.pipelines.memory.held_bytes``)."""
    return ((target.scaled and mode != "dequantize") or stays_fp8(target, view, mode)
            or (mode == "keep" and q8_0_linear(target, view)))


def scale_sharding(sharding, data_shape, scale_shape):
    """The sharding of a quantized weight's scale: the data's partitioning on each trailing
    axis the scale spans at full or block-divided length (where it divides evenly), else
    replicated on it."""
    from jax.sharding import NamedSharding, PartitionSpec

    spec = tuple(sharding.spec) + (None,) * (len(data_shape) - len(sharding.spec))
    out = []
    for i, n in enumerate(scale_shape):
        axis = spec[len(data_shape) - len(scale_shape) + i]
        names = () if axis is None else (axis if isinstance(axis, tuple) else (axis,))
        ways = int(np.prod([sharding.mesh.shape[a] for a in names])) if names else 1
        out.append(axis if n > 1 and n % ways == 0 else None)
    return NamedSharding(sharding.mesh, PartitionSpec(*out))
