"""The GGUF reader (vidax/translator/io/gguf.py) against the ``gguf`` package's own reader and
dequantizer.

Fixtures are written by ``gguf.GGUFWriter`` the way city96/ComfyUI-GGUF's ``tools/convert.py``
(commit 795e451) writes a Wan DiT: ``arch="wan"``, ``add_quantization_version``,
``add_file_type``, tensors quantized by ``gguf.quants.quantize`` (Q8_0, Q5_0, Q4_0, F16, BF16,
F32), a 5-D tensor stored flattened with its ``comfy.gguf.orig_shape.<name>`` ARRAY of INT32
(``convert.py``'s reshape rule) and one stored whole in F32 (``tools/fix_5d_tensors.py``).
gguf 0.19 cannot quantize K types, so the K-quant (and IQ4) tensors are random blocks whose fp16
scale fields are overwritten by finite values. Oracle: ``gguf.GGUFReader`` +
``gguf.quants.dequantize``, never vidax.

End to end: the authors' tiny Wan2.1 t2v ``WanModel`` written to GGUF (block 0's matrices Q8_0,
block 1's Q4_0, the other matrices F16, vectors / modulation / the 5-D patch embedding F32),
loaded with ``vidax.load`` and run; the reference is the same PyTorch model holding the values
``gguf.quants.dequantize`` gives; negative control: the model with its original (unquantized)
weights must fail that bound.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax.errors import CheckpointError  # noqa: E402
from vidax.translator.io import open_checkpoint  # noqa: E402
from vidax.translator.io.gguf import ARCHITECTURES, check_architecture  # noqa: E402

FLOAT = {"q8": T.Q8_0, "q5": T.Q5_0, "q4": T.Q4_0, "f16": T.F16, "bf16": T.BF16, "f32": T.F32}
# K / IQ types: (type, byte offsets of the fp16 scale fields in a block), per gguf 0.19's
# quants.py dequantize_blocks splits.
RANDOM = {"q6k": (T.Q6_K, (208,)), "q5k": (T.Q5_K, (0, 2)), "q4k": (T.Q4_K, (0, 2)),
          "q3k": (T.Q3_K, (108,)), "q2k": (T.Q2_K, (80, 82)), "q4_1": (T.Q4_1, (0, 2)),
          "q5_1": (T.Q5_1, (0, 2)), "iq4nl": (T.IQ4_NL, (0,)), "iq4xs": (T.IQ4_XS, (0,))}
QNAME = {T.F16: None, T.BF16: None, T.F32: None}


def _writer(path, arch="wan"):
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    return w


def _finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _random_blocks(rng, qtype, scale_at, rows, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for at in scale_at:
        raw[..., at:at + 2] = rng.uniform(0.01, 0.1, (rows, cols // block, 1)).astype(
            np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A wan GGUF of every type, the values it was quantized from, and its path."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("gguf") / "wan-tiny-Q8_0.gguf"
    w = _writer(path)
    values = {}
    for name, qtype in FLOAT.items():
        values[name] = rng.standard_normal((64, 96)).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(values[name], qtype), raw_dtype=qtype)
    for name, (qtype, scale_at) in RANDOM.items():
        w.add_tensor(name, _random_blocks(rng, qtype, scale_at, 3, 512), raw_dtype=qtype)
    values["bias"] = rng.standard_normal(64).astype(np.float32)
    w.add_tensor("bias", values["bias"], raw_dtype=T.F32)
    values["blocks.0.modulation"] = rng.standard_normal((1, 6, 64)).astype(np.float32)
    w.add_tensor("blocks.0.modulation", values["blocks.0.modulation"], raw_dtype=T.F32)
    # convert.py's reshape (n // 256, 256) with the original shape in metadata ...
    values["patch_q8"] = rng.standard_normal((64, 16, 1, 2, 2)).astype(np.float32)
    w.add_tensor("patch_q8", gguf.quants.quantize(values["patch_q8"].reshape(-1, 256), T.Q8_0),
                 raw_dtype=T.Q8_0)
    w.add_array("comfy.gguf.orig_shape.patch_q8", [64, 16, 1, 2, 2])
    values["q8_3d"] = rng.standard_normal((8, 4, 64)).astype(np.float32)
    w.add_tensor("q8_3d", gguf.quants.quantize(values["q8_3d"].reshape(-1, 256), T.Q8_0),
                 raw_dtype=T.Q8_0)
    w.add_array("comfy.gguf.orig_shape.q8_3d", [8, 4, 64])
    # ... and fix_5d_tensors.py's whole 5-D F32 tensor.
    values["patch_embedding.weight"] = rng.standard_normal((64, 16, 1, 2, 2)).astype(np.float32)
    w.add_tensor("patch_embedding.weight", values["patch_embedding.weight"], raw_dtype=T.F32)
    _finish(w)
    return path, values


def _oracle(path) -> dict[str, tuple[np.ndarray, T]]:
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out[t.name] = (gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape),
                       t.tensor_type)
    return out


def test_metadata_and_refs(case):
    path, _ = case
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "gguf"
        assert ckpt.metadata["general.architecture"] == "wan"
        assert ckpt.metadata["general.quantization_version"] == str(gguf.GGML_QUANT_VERSION)
        assert ckpt.metadata["comfy.gguf.orig_shape.patch_q8"] == "[64, 16, 1, 2, 2]"
        assert all(isinstance(v, str) for v in ckpt.metadata.values())
        oracle = _oracle(path)
        assert set(ckpt) == set(oracle)
        for key, (values, qtype) in oracle.items():
            ref = ckpt[key]
            assert ref.key == key and ref.path == str(path)
            quant = QNAME.get(qtype, qtype.name)
            assert ref.quant == quant, key
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            assert ref.nbytes == values.size // block * size
            want = {T.F16: np.float16, T.BF16: "bfloat16", T.F32: np.float32}.get(qtype,
                                                                                 np.float32)
            assert ref.dtype == np.dtype(want), key
        assert ckpt["patch_q8"].shape == (64, 16, 1, 2, 2)
        assert ckpt["patch_embedding.weight"].shape == (64, 16, 1, 2, 2)
        assert ckpt["blocks.0.modulation"].shape == (1, 6, 64)
        assert ckpt["q6k"].shape == (3, 512)
        assert ckpt.bytes_read == 0


def test_values_equal_the_oracle(case):
    path, values = case
    oracle = _oracle(path)
    with open_checkpoint(path) as ckpt:
        for key, (want, _) in oracle.items():
            got = ckpt[key].read()
            assert got.dtype == ckpt[key].dtype and not got.flags.writeable
            want = want.reshape(ckpt[key].shape)
            assert np.isfinite(want).all(), key
            np.testing.assert_array_equal(got.astype(np.float32), want, err_msg=key)
        total = sum(ref.nbytes for ref in ckpt.values())
        assert ckpt.bytes_read == total
        # The quantized values are near the ones quantized (the fixture is what it says).
        np.testing.assert_allclose(ckpt["q8"].read(), values["q8"], atol=0.03)
        np.testing.assert_array_equal(ckpt["patch_embedding.weight"].read(),
                                      values["patch_embedding.weight"])
        np.testing.assert_allclose(ckpt["patch_q8"].read(), values["patch_q8"], atol=0.03)


INDEXES = [(), (5,), (slice(3, 9), slice(40, 70)), (..., 33), (slice(None, None, 2), -1),
           (slice(10, 11), slice(None, None, 3)), (-64, slice(95, 200)), (slice(5, 5),)]


@pytest.mark.parametrize("key", ["q8", "q4", "f16", "bf16", "f32", "q6k", "iq4xs"])
def test_slices_equal_the_whole(case, key):
    path, _ = case
    with open_checkpoint(path) as ckpt:
        ref = ckpt[key]
        whole = ref.read()
        indexes = INDEXES if ref.shape == (64, 96) else [(1,), (..., slice(300, 301)), (2, 7)]
        for index in indexes:
            before = ckpt.bytes_read
            got = ref.read_slice(index)
            assert got.dtype == ref.dtype and not got.flags.writeable
            np.testing.assert_array_equal(got, whole[index], err_msg=str(index))
            assert ckpt.bytes_read - before <= ref.nbytes
            np.testing.assert_array_equal(ref.read_view(index), whole[index])
        if ref.quant is None:       # a float tensor's view is the map itself
            view = ref.read_view((slice(None), slice(2, 50)))
            assert not view.flags.writeable and not view.flags.owndata
            assert not view.flags.c_contiguous
        else:                       # one row reads one row's blocks
            before = ckpt.bytes_read
            ref.read_slice((1,))
            assert ckpt.bytes_read - before == ref.nbytes // ref.shape[0]
        with pytest.raises(IndexError):
            ref.read_slice((ref.shape[0],))
        with pytest.raises(TypeError):
            ref.read_slice(np.array([0, 1]))


def test_q8_0_blocks_reconstruct_exactly(case):
    path, _ = case
    with open_checkpoint(path) as ckpt:
        for key in ("q8", "q8_3d"):
            ref = ckpt[key]
            qs, d = ref.q8_0_blocks()
            assert qs.dtype == np.int8 and qs.shape == ref.shape
            assert d.dtype == np.float16 and d.shape == (*ref.shape[:-1], ref.shape[-1] // 32)
            assert not qs.flags.writeable and not d.flags.writeable
            blocks = qs.astype(np.float32).reshape(*d.shape, 32) * d.astype(np.float32)[..., None]
            np.testing.assert_array_equal(blocks.reshape(ref.shape), ref.read())
        assert not ckpt["q8"].q8_0_blocks()[1].flags.owndata      # d: a view of the map
        qs, d = ckpt["q8"].q8_0_blocks()
        pairs = [((slice(3, 9),), (slice(3, 9),)), ((5, slice(32, 96)), (5, slice(1, 3))),
                 ((..., slice(0, 32)), (..., slice(0, 1))),
                 ((slice(None, None, 2),), (slice(None, None, 2),))]
        for index, d_index in pairs:
            before = ckpt.bytes_read
            got_qs, got_d = ckpt["q8"].q8_0_blocks(index)
            np.testing.assert_array_equal(got_qs, qs[index])
            np.testing.assert_array_equal(got_d, d[d_index])
            assert ckpt.bytes_read - before == got_qs.size + 2 * got_d.size
        qs3, d3 = ckpt["q8_3d"].q8_0_blocks((1, slice(None), slice(32, 64)))
        np.testing.assert_array_equal(qs3, ckpt["q8_3d"].q8_0_blocks()[0][1, :, 32:])
        np.testing.assert_array_equal(d3, ckpt["q8_3d"].q8_0_blocks()[1][1, :, 1:])
        for bad in [(0, slice(0, 40)), (0, 3), (0, slice(0, 64, 2))]:
            with pytest.raises(IndexError, match="whole 32-element blocks"):
                ckpt["q8"].q8_0_blocks(bad)
        with pytest.raises(ValueError, match="not Q8_0"):
            ckpt["q4"].q8_0_blocks()
        with pytest.raises(ValueError, match="32-element blocks"):   # last axis of 2
            ckpt["patch_q8"].q8_0_blocks()


def test_magic_routes_and_names(case, tmp_path):
    path, _ = case
    other = tmp_path / "model.bin"          # routed by its bytes, not its name
    other.write_bytes(path.read_bytes())
    with open_checkpoint(other) as ckpt:
        assert ckpt.format == "gguf" and len(ckpt) == len(_oracle(path))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"\0" * 64)
    with pytest.raises(CheckpointError, match="fake.gguf.*magic"):
        open_checkpoint(fake)
    with pytest.raises(CheckpointError, match="GGUF file"):
        open_checkpoint(path, wrapper="ema")


@pytest.mark.parametrize("cut", ["header", "data"])
def test_truncated_file(case, tmp_path, cut):
    path, _ = case
    data = path.read_bytes()
    size = 200 if cut == "header" else len(data) - 100
    bad = tmp_path / f"cut-{cut}.gguf"
    bad.write_bytes(data[:size])
    with pytest.raises(CheckpointError, match="cut-") as e:
        open_checkpoint(bad)
    assert "truncated" in str(e.value)
    if cut == "data":
        assert "patch_embedding.weight" in str(e.value)


def _hostile(tmp_path, name, counts, kv: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(b"GGUF" + np.uint32(3).tobytes() + np.array(counts, "<u8").tobytes() + kv)
    return path


def test_hostile_counts_fail_fast(tmp_path):
    key = np.uint64(3).tobytes() + b"abc"
    cases = {
        "kv.gguf": ([0, 1 << 62], b""),                                  # 2^62 fields
        "tensors.gguf": ([1 << 62, 0], b""),                             # 2^62 tensors
        # an ARRAY of 2^40 UINT8 in a 60-byte file
        "array.gguf": ([0, 1], key + np.uint32(9).tobytes() + np.uint32(0).tobytes()
                       + np.uint64(1 << 40).tobytes() + b"\1" * 8),
        "string.gguf": ([0, 1], key + np.uint32(8).tobytes() + np.uint64(1 << 60).tobytes()),
    }
    for name, (counts, kv) in cases.items():
        start = time.perf_counter()
        with pytest.raises(CheckpointError, match=name):
            open_checkpoint(_hostile(tmp_path, name, counts, kv))
        assert time.perf_counter() - start < 2, name


def test_wrong_architecture_refused_before_reading(case, tmp_path):
    path = tmp_path / "hunyuan.gguf"
    w = _writer(path, arch="hyvid")
    w.add_tensor("double_blocks.0.img_attn_proj.weight", np.ones((8, 32), np.float32))
    _finish(w)
    with open_checkpoint(path) as ckpt:
        with pytest.raises(CheckpointError) as e:
            check_architecture(ckpt, "wan2_1")
        assert all(s in str(e.value) for s in ("hunyuan.gguf", "'hyvid'", "'wan'", "wan2_1"))
        check_architecture(ckpt, "hunyuan_video")
        check_architecture(ckpt, "hunyuan_video1_5")
        assert ckpt.bytes_read == 0
    with open_checkpoint(case[0]) as ckpt:
        for model_type in ("wan2_1", "wan2_2"):
            check_architecture(ckpt, model_type)
        with pytest.raises(CheckpointError, match="knows no GGUF architecture for cogvideox"):
            check_architecture(ckpt, "cogvideox")
        with pytest.raises(CheckpointError, match="'t5' or 't5encoder'"):
            check_architecture(ckpt, "wan2_1", "text_encoder")
    assert ARCHITECTURES["ltx_video"] == ("ltxv",) and ARCHITECTURES["cosmos2_5"] == ("cosmos",)


def test_unsupported_types_named(tmp_path):
    path = tmp_path / "odd.gguf"
    w = _writer(path)
    w.add_tensor("ok", np.ones((2, 32), np.float32))
    w.add_tensor("ids", np.arange(64, dtype=np.int32).reshape(2, 32))           # I32
    w.add_tensor("tern", np.zeros((1, 66), np.uint8), raw_dtype=T.TQ2_0)         # TQ2_0
    _finish(w)
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(path)
    message = str(e.value)
    assert all(s in message for s in ("odd.gguf", "'ids' (I32)", "'tern' (TQ2_0)", "Q8_0"))
    assert "'ok'" not in message
    # A type id gguf itself does not know: the tensor is still named.
    data = bytearray(path.read_bytes())
    at = data.index(b"tern") + 4 + 4 + 2 * 8          # name, n_dims, two dims -> the type
    data[at:at + 4] = np.uint32(77).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="'tern' \\(unknown type id 77\\)"):
        open_checkpoint(path)


# ------------------------------------------------------------------------------ end to end

def _wan_gguf_type(name: str, shape: tuple[int, ...]) -> T:
    if len(shape) != 2 or name.endswith("modulation"):
        return T.F32
    if name.startswith("blocks.0."):
        return T.Q8_0
    if name.startswith("blocks.1."):
        return T.Q4_0
    return T.F16


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
def test_wan2_1_dit_from_gguf_matches_dequantized_reference(tmp_path, record_property):
    import torch

    import vidax
    from tests.models.wan2_1.test_wan2_1_dit import (BATCH, FRAMES, HEIGHT, TEXT_LENS, WIDTH,
                                                      _inputs, _run_vidax)
    from tests.reference import wan22
    from vidax.models.wan2_1.dit import WanDiTConfig

    cfg = WanDiTConfig.tiny("t2v")
    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed=0)
    original = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    path = tmp_path / "wan2.1-t2v-tiny-Q8_0.gguf"
    w = _writer(path)
    types = {}
    for key, value in original.items():
        types[key] = _wan_gguf_type(key, value.shape)
        w.add_tensor(key, gguf.quants.quantize(value, types[key]), raw_dtype=types[key])
    _finish(w)
    assert {T.Q8_0, T.Q4_0, T.F16, T.F32} <= set(types.values())

    inputs = _inputs(cfg, seed=1)
    seq_len = FRAMES * (HEIGHT // 2) * (WIDTH // 2)

    def torch_output(state):
        model.load_state_dict({k: torch.from_numpy(np.array(v, np.float32))
                               for k, v in state.items()})
        with torch.no_grad():
            out = model([torch.from_numpy(u).permute(3, 0, 1, 2) for u in inputs["x"]],
                        t=torch.from_numpy(inputs["t"])[:, None].expand(BATCH, seq_len),
                        context=[torch.from_numpy(c[:n])
                                 for c, n in zip(inputs["context"], TEXT_LENS)],
                        seq_len=seq_len)
        return torch.stack(out).permute(0, 2, 3, 4, 1).numpy()

    oracle = {k: v for k, (v, _) in _oracle(path).items()}
    assert oracle["patch_embedding.weight"].shape == original["patch_embedding.weight"].shape
    ref = torch_output(oracle)
    ref_original = torch_output(original)

    dit = vidax.load("wan2_1", "dit", path, variant="tiny", dtype="float32")
    out = np.asarray(_run_vidax(dit, **inputs))
    stats = assert_parity("wan2_1_gguf", out, ref, record_property)
    control = assert_fails("wan2_1_gguf_vs_unquantized", out, ref_original, record_property)
    assert control["rel"] > 100 * stats["rel"]
