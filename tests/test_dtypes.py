"""``vidax.dtypes``: one vocabulary for every dtype a user names (``convert --dtype``,
``generate --precision``, ``vidax.load(dtype=)``), and the translator's two readers of it:
``converter.cast_dtype`` (a user's cast: floating dtypes only) and ``converter.as_dtype``
(stored and per-key dtypes: every kind, the vocabulary too)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from vidax import dtypes
from vidax.errors import VidaxError
from vidax.translator import converter

SPELLINGS = {
    "bf16": ["bf16", "BF16", " bfloat16 ", "torch.bfloat16", "jnp.bfloat16", "ml_dtypes.bfloat16",
             ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16)],
    "fp16": ["fp16", "f16", "float16", "half", "torch.float16", "torch.half", "np.float16",
             np.float16, np.dtype("float16")],
    "fp32": ["fp32", "f32", "float32", "float", "torch.float32", "torch.float", "numpy.float32",
             np.float32, np.dtype("<f4")],
    "fp64": ["fp64", "f64", "float64", "double", "torch.double", np.float64],
}
REFUSED = ["float33", "bf61", "int8", "int64", "uint8", "bool", "float8_e4m3fn", "", "auto",
           None, True, 3, 16, np.int64, np.dtype("int32"), object]


@pytest.mark.parametrize("short", SPELLINGS)
def test_every_spelling_means_one_dtype(short):
    for spelling in SPELLINGS[short]:
        assert dtypes.canonical(spelling) == short, spelling
        assert dtypes.parse(spelling) == dtypes.DTYPES[short], spelling
        assert converter.cast_dtype(spelling) == dtypes.DTYPES[short], spelling
        assert converter.as_dtype(spelling) == dtypes.DTYPES[short], spelling


def test_torch_and_jax_dtype_objects():
    import jax.numpy as jnp   # runtime dependency
    import torch              # test.lock: required in the test environment

    assert [dtypes.canonical(d) for d in (torch.bfloat16, torch.float16, torch.float32)] == [
        "bf16", "fp16", "fp32"]
    assert [dtypes.canonical(d) for d in (jnp.bfloat16, jnp.float16, jnp.float32)] == [
        "bf16", "fp16", "fp32"]
    with pytest.raises(VidaxError, match="torch.int8 is not one vidax accepts"):
        dtypes.canonical(torch.int8)


@pytest.mark.parametrize("bad", REFUSED, ids=repr)
def test_anything_else_is_refused_with_the_accepted_list(bad):
    listed = r"accepted: bf16 / bfloat16; fp16 / f16 / float16 / half; fp32 / .*float64 / double"
    with pytest.raises(VidaxError, match=r"dtype .* is not one vidax accepts.*" + listed):
        dtypes.parse(bad)
    with pytest.raises(VidaxError, match=listed):
        converter.cast_dtype(bad) if bad is not None else dtypes.canonical(bad)


def test_a_near_miss_is_suggested():
    with pytest.raises(VidaxError, match=r"'float33' .*did you mean 'float32'"):
        dtypes.parse("float33")
    with pytest.raises(VidaxError, match=r"'bf61' .*did you mean 'bf16'"):
        converter.cast_dtype("bf61")


def test_a_use_may_take_fewer():
    assert dtypes.canonical("bfloat16", what="--precision", allowed=("bf16", "fp32")) == "bf16"
    with pytest.raises(VidaxError, match=r"--precision 'fp16' is not one vidax accepts \(fp16 "
                                         r"is a dtype, but not one --precision takes\); "
                                         r"accepted: bf16 / bfloat16; fp32 / f32 / float32 / "
                                         r"float$"):
        dtypes.canonical("fp16", what="--precision", allowed=("bf16", "fp32"))


def test_the_api():
    assert set(dtypes.DTYPES) == {"bf16", "fp16", "fp32", "fp64"}
    assert set(dtypes.ALIASES.values()) == set(dtypes.DTYPES)
    assert all(dtypes.ALIASES[short] == short for short in dtypes.DTYPES)
    assert converter.cast_dtype(None) is None            # "keep the stored dtypes"


def test_as_dtype_keeps_the_stored_dtype_names():
    """What manifests, checkpoints and mapper rules name (every kind) still reads, and a
    name that is none of them is a VidaxError with the list, not numpy's TypeError."""
    for name, want in {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
                       "float8_e5m2": ml_dtypes.float8_e5m2, "int64": np.int64,
                       "uint8": np.uint8, "bool": np.bool_, "float32": np.float32,
                       "torch.bfloat16": ml_dtypes.bfloat16, "<f4": np.float32,
                       "complex64": np.complex64}.items():
        assert converter.as_dtype(name) == np.dtype(want), name
    assert converter.as_dtype(np.dtype("int8")) == np.dtype("int8")
    for bad in ("float33", "finfo", "object", "U8", None, [("a", "f4")]):
        with pytest.raises(VidaxError, match="is not one vidax accepts.*accepted: bf16"):
            converter.as_dtype(bad)
