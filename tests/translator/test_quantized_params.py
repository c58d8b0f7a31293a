"""Quantized weights through the mapper and onto the devices (``vidax.translator.quant``,
``vidax.nn.quant.QArray``, ``vidax.load(quantized=...)``).

What is checked here is the machinery every format shares, with hand-made tensors whose
values are known: per-part scales through a split (HunyuanVideo's fused qkv, one scale for
the three) and a merge (distinct scales per part), the kept-quantized ``(data, scale)`` pair
against the dequantized value, a QArray inside a Linear and under ``jit``, sharded placement
of the data and its scale, plain fp8 skipping the load's cast, and the quantization's own keys
left out when a quantized copy is identified. The formats themselves (ComfyUI, LTX-2,
HunyuanVideo, GGUF) are checked against their own tools in test_fp8_formats.py and
test_gguf.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx
from jax.sharding import PartitionSpec as P

import vidax
from vidax.errors import MappingError, VidaxError
from vidax.nn.layers import KeyGen, Linear
from vidax.nn.quant import QArray
from vidax.translator import quant
from vidax.translator.mapping import Dequantize, Mapper, Merge, Split, TensorInfo

F8 = ml_dtypes.float8_e4m3fn
RULES = (Split(r"qkv\.weight", ("q.weight", "k.weight", "v.weight")),
         Merge(r"parts\.(?P<part>a|b)\.weight", "ab.weight", ("a", "b")),
         Merge(r"cols\.(?P<part>a|b)\.weight", "cd.weight", ("a", "b"), axis=1),
         Dequantize(r"(.*)\.weight", r"\1.weight_scale", "float32", "fp8-weight-scale"))


def _stored(rng):
    def fp8(*shape):
        return rng.standard_normal(shape).astype(F8)

    return {
        "qkv.weight": fp8(12, 8), "qkv.weight_scale": np.array(0.25, np.float32),
        "row.weight": fp8(6, 8), "row.weight_scale": rng.uniform(0.5, 2, 6).astype(np.float32),
        "parts.a.weight": fp8(4, 8), "parts.a.weight_scale": np.array(0.5, np.float32),
        "parts.b.weight": fp8(2, 8), "parts.b.weight_scale": np.array(3.0, np.float32),
        "cols.a.weight": fp8(4, 3), "cols.a.weight_scale": np.array(0.5, np.float32),
        "cols.b.weight": fp8(4, 5), "cols.b.weight_scale": np.array(2.0, np.float32),
    }


def _deq(stored, name):
    return stored[f"{name}.weight"].astype(np.float32) * stored[f"{name}.weight_scale"].reshape(
        (-1, 1) if stored[f"{name}.weight_scale"].ndim else ())


def test_scales_follow_each_part_through_split_and_merge():
    stored = _stored(np.random.default_rng(0))
    plan = Mapper("t", RULES).plan(stored)
    assert plan.consumed == set(stored)
    qkv = _deq(stored, "qkv")
    want = {"q.kernel": qkv[:4].T, "k.kernel": qkv[4:8].T, "v.kernel": qkv[8:].T,
            "row.kernel": _deq(stored, "row").T,
            "ab.kernel": np.concatenate([_deq(stored, "parts.a"), _deq(stored, "parts.b")]).T,
            "cd.kernel": np.concatenate([_deq(stored, "cols.a"), _deq(stored, "cols.b")],
                                        axis=1).T}
    for path, value in want.items():
        target = plan.targets[path]
        assert target.quantized == "fp8-weight-scale"
        np.testing.assert_array_equal(target.materialize(stored), value, err_msg=path)
        parts = target.quantized_parts(stored)
        if path == "cd.kernel":        # distinct scales across the input axis: no one vector
            assert parts is None
            continue
        data, scale = parts
        assert data.dtype == F8
        np.testing.assert_array_equal(data.astype(np.float32) * scale, value, err_msg=path)
    # one scale for the three parts of the split stays one scalar; distinct rows a vector
    assert plan.targets["q.kernel"].quantized_parts(stored)[1].shape == ()
    assert plan.targets["ab.kernel"].quantized_parts(stored)[1].shape == (6,)


def test_a_split_scale_must_be_per_tensor_or_per_row():
    tensors = {"qkv.weight": TensorInfo((12, 8), "float8_e4m3fn"),
               "qkv.weight_scale": TensorInfo((8,), "float32")}
    with pytest.raises(MappingError, match="qkv.weight_scale"):
        Mapper("t", RULES).plan(tensors)


def test_qarray_in_a_linear_and_under_jit():
    rng = np.random.default_rng(1)
    layer = Linear(8, 6, keys=KeyGen(0))
    data = rng.standard_normal((8, 6)).astype(F8)
    scale = rng.uniform(0.5, 2, 6).astype(np.float32)
    dense = Linear(8, 6, keys=KeyGen(0))
    dense.kernel.set_value(jnp.asarray(data.astype(np.float32) * scale))
    layer.kernel.set_value(QArray(jnp.asarray(data), jnp.asarray(scale)))
    x = jnp.asarray(rng.standard_normal((3, 8)), jnp.float32)
    with jax.default_matmul_precision("highest"):
        want = np.asarray(dense(x))
        np.testing.assert_allclose(np.asarray(layer(x)), want, rtol=1e-6, atol=1e-6)
        graphdef, state = nnx.split(layer)
        out = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, x)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
    assert layer.kernel.get_value().nbytes == 8 * 6 + 6 * 4
    # Q8_0's form: blocks of 32 along the input axis, one scale per block and output
    qs = rng.integers(-127, 128, (64, 3)).astype(np.int8)
    d = rng.uniform(0.01, 0.1, (2, 3)).astype(np.float16)
    blocks = QArray(jnp.asarray(qs), jnp.asarray(d), 32, "gguf-Q8_0")
    want = qs.reshape(2, 32, 3).astype(np.float32) * d.astype(np.float32)[:, None, :]
    np.testing.assert_array_equal(np.asarray(blocks[...]), want.reshape(64, 3))


class _Tiny(nnx.Module):
    def __init__(self, cfg=None):
        keys = KeyGen(0)
        self.row = Linear(8, 8, keys=keys, bias=False)
        self.plain = Linear(8, 4, keys=keys, bias=False)


def _file(tmp_path, plain_dtype=ml_dtypes.bfloat16):
    rng = np.random.default_rng(2)
    tensors = {"row.weight": rng.standard_normal((8, 8)).astype(F8),
               "row.weight_scale": rng.uniform(0.5, 2, 8).astype(np.float32),
               "plain.weight": rng.standard_normal((4, 8)).astype(plain_dtype)}
    path = tmp_path / "q.safetensors"
    safetensors.numpy.save_file(tensors, path)
    return path, tensors


@pytest.fixture
def tiny_spec(monkeypatch):
    from vidax import registry

    registry.specs()
    spec = registry.ComponentSpec("test_q", "dit", "original", f"{__name__}:_Tiny",
                                  f"{__name__}:_Config", f"{__name__}:_MAPPER", {})
    monkeypatch.setitem(registry._SPECS, spec.key, spec)
    return spec


class _Config:
    @classmethod
    def tiny(cls):
        return cls()


_MAPPER = Mapper("test.quantized", ())


@pytest.mark.parametrize("mesh_spec", [None, "fsdp=2,tp=4"])
def test_load_keeps_fp8_quantized_and_sharded(tmp_path, tiny_spec, mesh_spec):
    from vidax import sharding

    path, stored = _file(tmp_path)
    mesh = sharding.make_mesh(mesh_spec) if mesh_spec else None
    rules = sharding.PartitionRules("test", ((r"row\.kernel", (None, "tp")),),
                                    min_shard_bytes=0, fsdp=False)
    model, report = vidax.load_with_report("test_q", "dit", path, variant="tiny",
                                           dtype="bf16", mesh=mesh, rules=rules)
    assert report.quantization.startswith("fp8-weight-scale")
    assert report.kept_quantized == 1
    row = model.row.kernel.get_value()
    assert isinstance(row, QArray) and row.data.dtype == F8 and row.scale.shape == (8,)
    want = (stored["row.weight"].astype(np.float32) * stored["row.weight_scale"][:, None]).T
    np.testing.assert_array_equal(np.asarray(row[...]), want)
    assert model.plain.kernel.get_value().dtype == jnp.bfloat16
    if mesh is not None:
        assert row.data.sharding.spec == P(None, "tp")
        assert row.scale.sharding.spec == P("tp")
        assert len({str(s.index) for s in row.data.addressable_shards}) == 4
    dense = vidax.load("test_q", "dit", path, variant="tiny", dtype="bf16",
                       quantized="dequantize")
    assert dense.row.kernel.get_value().dtype == jnp.bfloat16
    assert dense.plain.kernel.get_value().dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(dense.row.kernel.get_value(), np.float32),
                                  want.astype(ml_dtypes.bfloat16).astype(np.float32))
    with pytest.raises(VidaxError, match="quantized="):
        vidax.load("test_q", "dit", path, variant="tiny", quantized="int4")


def test_plain_fp8_is_held_as_stored(tmp_path, tiny_spec):
    """fp8 weights without scales (a plain cast of the bf16 weights) skip the load's cast:
    held in fp8, each layer casts as it reads; ``quantized="dequantize"`` casts them."""
    path, stored = _file(tmp_path)
    stored = {"row.weight": stored["row.weight"], "plain.weight": stored["row.weight"][:4]}
    safetensors.numpy.save_file(stored, path)
    model, report = vidax.load_with_report("test_q", "dit", path, variant="tiny", dtype="bf16")
    assert report.quantization == "fp8 (2 float8_e4m3fn)" and report.kept_quantized == 0
    assert model.plain.kernel.get_value().dtype == F8
    np.testing.assert_array_equal(np.asarray(model.plain.kernel.get_value()),
                                  stored["plain.weight"].T)
    dense = vidax.load("test_q", "dit", path, variant="tiny", dtype="bf16",
                       quantized="dequantize")
    assert dense.plain.kernel.get_value().dtype == jnp.bfloat16


def test_a_missing_scale_is_named(tmp_path, tiny_spec):
    path, stored = _file(tmp_path)
    stored["row2.weight"] = stored["row.weight"]
    stored["plain.weight_scale"] = np.array(1.5, np.float32)
    del stored["row.weight_scale"]
    safetensors.numpy.save_file(stored, path)
    with pytest.raises(VidaxError, match=r"row\.weight_scale|row2\.weight_scale"):
        vidax.load("test_q", "dit", path, variant="tiny")


def test_a_quantized_copy_is_identified_by_its_weights():
    """The scaled-fp8 copy of a release (ComfyUI's legacy form under its container prefix):
    its own keys match no manifest; its weights, scales and marker aside, are the release."""
    from vidax import manifests

    release = manifests.get_manifest("wan2_1/t2v-1.3b__dit")
    tensors = {}
    for key, spec in release.tensors.items():
        fp8 = key.endswith(".weight") and len(spec.shape) == 2 and key.startswith("blocks.")
        tensors["model.diffusion_model." + key] = TensorInfo(
            tuple(spec.shape), "float8_e4m3fn" if fp8 else "bfloat16")
        if fp8:
            tensors[f"model.diffusion_model.{key[:-7]}.scale_weight"] = TensorInfo((), "float32")
    tensors["model.diffusion_model.scaled_fp8"] = TensorInfo((0,), "float8_e4m3fn")
    view = quant.unwrapped(tensors)
    found = quant.detect(view)
    assert found.form == "comfyui-scaled-fp8"
    assert found.types == {"float8_e4m3fn": 30 * 10}
    weights = quant.weights_only(view, found)
    assert set(weights) == set(release.tensors)
    copy = manifests.identify({k: (v.shape, v.dtype) for k, v in weights.items()})
    assert copy.kind == "dtype" and "wan2_1/t2v-1.3b" in copy.releases
    assert manifests.identify({k: (v.shape, v.dtype) for k, v in tensors.items()}).kind == "near"


def test_inspect_names_the_quantization(tmp_path, capsys):
    """``vidax inspect`` of a scaled-fp8 file under ComfyUI's container prefix, and of a
    ComfyUI format vidax does not read: the form is named (and, for the second, why it is not
    read), without reading any weight."""
    import json

    from vidax import cli

    rng = np.random.default_rng(3)
    tensors = {"model.diffusion_model.scaled_fp8": np.zeros(0, F8),
               "model.diffusion_model.a.weight": rng.standard_normal((4, 4)).astype(F8),
               "model.diffusion_model.a.scale_weight": np.array(0.5, np.float32),
               "model.diffusion_model.a.bias": np.zeros(4, np.float32)}
    path = tmp_path / "scaled.safetensors"
    safetensors.numpy.save_file(tensors, path)
    assert cli.main(["inspect", str(path)]) == 0
    assert "quantization: comfyui-scaled-fp8 (1 float8_e4m3fn)" in capsys.readouterr().out
    record = np.frombuffer(json.dumps({"format": "nvfp4"}).encode(), np.uint8)
    nvfp4 = {"b.weight": rng.integers(0, 255, (4, 2)).astype(np.uint8),
             "b.weight_scale": np.ones(1, np.float32), "b.comfy_quant": record.copy()}
    path = tmp_path / "nvfp4.safetensors"
    safetensors.numpy.save_file(nvfp4, path)
    assert cli.main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["quantization"]["form"] == "unsupported"
    assert "its layers b are quantized as nvfp4" in info["quantization"]["description"]
