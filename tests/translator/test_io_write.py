"""vidax.translator.io.save_pth (io/pth_writer.py): torch.save's zip format written without
torch, read back bit-identically by torch.load (plain and mmap) and by vidax's own reader."""

from __future__ import annotations

import collections
import io
import os
import struct
import zipfile

import ml_dtypes
import numpy as np
import pytest
import torch

from vidax.errors import VidaxError
from vidax.translator.io import open_checkpoint, pth_writer, save_pth

# Every dtype the reader supports: numpy dtype -> the torch dtype torch.load must give back.
DTYPES = {
    np.dtype(np.float64): torch.float64,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn,
    np.dtype(ml_dtypes.float8_e5m2): torch.float8_e5m2,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.uint64): torch.uint64,
    np.dtype(np.uint32): torch.uint32,
    np.dtype(np.uint16): torch.uint16,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(bool): torch.bool,
}

# Shapes that exercise the stride and storage-size bookkeeping: 0-d, empty, size-1 dims.
SHAPES = [(3, 5), (), (0, 4), (2, 1, 3), (7,)]


def random_array(shape, dtype: np.dtype, seed: int) -> np.ndarray:
    """Random bit patterns (NaNs, infs and subnormals included); bools are 0/1 bytes."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == np.dtype(bool):
        return rng.integers(0, 2, n, dtype=np.uint8).astype(bool).reshape(shape)
    return rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def every_dtype_and_shape() -> dict[str, np.ndarray]:
    state, seed = {}, 0
    for dtype in DTYPES:
        for shape in SHAPES:
            state[f"{dtype.name}.{'x'.join(map(str, shape)) or 'scalar'}"] = random_array(
                shape, dtype, seed
            )
            seed += 1
    return state


def raw(tensor: torch.Tensor) -> bytes:
    flat = tensor.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def assert_torch_identical(tensor: torch.Tensor, array: np.ndarray) -> None:
    assert tensor.dtype == DTYPES[array.dtype]
    assert tuple(tensor.shape) == array.shape
    assert tensor.is_contiguous() and tensor.storage_offset() == 0
    assert raw(tensor) == array.tobytes()


def data_offsets(path) -> dict[str, tuple[int, int]]:
    """Record name -> (offset of its stored bytes, compression method), from local headers."""
    with open(path, "rb") as f:
        blob = f.read()
    out = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name_length, extra_length = struct.unpack(
                "<HH", blob[info.header_offset + 26 : info.header_offset + 30]
            )
            start = info.header_offset + 30 + name_length + extra_length
            out[info.filename] = (start, info.compress_type)
    return out


# ------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("mmap", [False, True])
def test_torch_load_reads_every_dtype_bit_identically(tmp_path, mmap):
    state = every_dtype_and_shape()
    save_pth(tmp_path / "m.pth", state)
    loaded = torch.load(tmp_path / "m.pth", weights_only=True, mmap=mmap)
    assert type(loaded) is collections.OrderedDict
    assert list(loaded) == list(state)  # the given order
    for key, array in state.items():
        assert_torch_identical(loaded[key], array)


def test_vidax_reader_reads_every_dtype_bit_identically(tmp_path):
    state = every_dtype_and_shape()
    save_pth(tmp_path / "m.pth", state)
    with open_checkpoint(tmp_path / "m.pth") as ckpt:
        assert ckpt.format == "pth" and list(ckpt) == list(state) and ckpt.extras == {}
        for key, array in state.items():
            got = ckpt[key].read()
            assert got.dtype == array.dtype and got.shape == array.shape
            assert got.tobytes() == array.tobytes()
            if array.size:
                assert not got.flags.owndata  # contiguous storages: zero-copy views on the map


def test_layout_matches_torch_save(tmp_path):
    """The records, their order, storage and 64-byte alignment are those torch.save writes."""
    state = {
        "w": random_array((4, 3), np.dtype(np.float32), 0),
        "f8": random_array((5,), np.dtype(ml_dtypes.float8_e5m2), 1),
    }
    save_pth(tmp_path / "ours.pth", state)
    buffer = io.BytesIO()  # torch names the records "archive/..." when saving to a file object
    torch.save(
        {
            k: torch.from_numpy(v.view(np.uint8)).view(DTYPES[v.dtype]).reshape(v.shape)
            for k, v in state.items()
        },
        buffer,
    )
    with zipfile.ZipFile(buffer) as theirs, zipfile.ZipFile(tmp_path / "ours.pth") as ours:
        assert ours.namelist() == theirs.namelist()
        for name in (
            "archive/version",
            "archive/byteorder",
            "archive/.format_version",
            "archive/.storage_alignment",
        ):
            assert ours.read(name) == theirs.read(name)
        serial = ours.read("archive/.data/serialization_id")
        assert len(serial) == len(theirs.read("archive/.data/serialization_id")) == 40
        assert serial.isdigit()
        assert ours.testzip() is None  # every CRC right
    for name, (start, method) in data_offsets(tmp_path / "ours.pth").items():
        assert method == zipfile.ZIP_STORED and start % 64 == 0, name


def test_zip64_headers_keep_alignment(tmp_path, monkeypatch):
    """Entries above 1 GiB get zip64 local headers; forced here on small ones, the padding
    still puts every storage on a 64-byte boundary and both readers accept the file."""
    monkeypatch.setattr(pth_writer, "_ZIP64_FROM", 0)
    state = {
        "a": random_array((33,), np.dtype(np.float32), 0),
        "b": random_array((2, 3), np.dtype(ml_dtypes.bfloat16), 1),
    }
    save_pth(tmp_path / "z.pth", state)
    assert all(start % 64 == 0 for start, _ in data_offsets(tmp_path / "z.pth").values())
    loaded = torch.load(tmp_path / "z.pth", weights_only=True, mmap=True)
    with open_checkpoint(tmp_path / "z.pth") as ckpt:
        for key, array in state.items():
            assert_torch_identical(loaded[key], array)
            assert ckpt[key].read().tobytes() == array.tobytes()


def test_module_wrapper(tmp_path):
    state = {
        "blocks.0.weight": random_array((4, 2), np.dtype(ml_dtypes.bfloat16), 0),
        "blocks.0.bias": random_array((4,), np.dtype(np.float32), 1),
    }
    save_pth(tmp_path / "hunyuan.pt", state, wrapper="module")
    loaded = torch.load(tmp_path / "hunyuan.pt", weights_only=True, mmap=True)
    assert type(loaded) is dict and list(loaded) == ["module"]
    for key, array in state.items():
        assert_torch_identical(loaded["module"][key], array)
    with open_checkpoint(tmp_path / "hunyuan.pt") as ckpt:  # "auto" finds the wrapped dict
        assert {k: ckpt[k].read().tobytes() for k in ckpt} == {
            k: v.tobytes() for k, v in state.items()
        }


def test_nested_wrapper_path(tmp_path):
    state = {"w": random_array((2, 2), np.dtype(np.float16), 0)}
    save_pth(tmp_path / "n.pt", state, wrapper="model/module")
    loaded = torch.load(tmp_path / "n.pt", weights_only=True)
    assert_torch_identical(loaded["model"]["module"]["w"], state["w"])
    with open_checkpoint(tmp_path / "n.pt", wrapper="model/module") as ckpt:
        assert ckpt["w"].read().tobytes() == state["w"].tobytes()
    for bad in ("", "model/", 3):
        with pytest.raises(VidaxError, match="wrapper="):
            save_pth(tmp_path / "bad.pt", state, wrapper=bad)
    assert sorted(os.listdir(tmp_path)) == ["n.pt"]


def test_same_array_shares_one_storage_like_tied_weights(tmp_path):
    shared = random_array((6, 4), np.dtype(np.float32), 0)
    save_pth(tmp_path / "t.pth", {"shared.weight": shared, "encoder.embed_tokens.weight": shared})
    with zipfile.ZipFile(tmp_path / "t.pth") as archive:
        assert [n for n in archive.namelist() if "/data/" in n] == ["archive/data/0"]
    loaded = torch.load(tmp_path / "t.pth", weights_only=True)
    a, b = loaded.values()
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert raw(a) == shared.tobytes()


def test_non_contiguous_and_big_endian_inputs_are_written_as_their_values(tmp_path):
    base = random_array((5, 6), np.dtype(np.float32), 0)
    state = {
        "transposed": base.T,
        "stepped": base[::2, 1::3],
        "big_endian": base.astype(">f4"),
        "list": [[1, 2], [3, 4]],
    }
    save_pth(tmp_path / "v.pth", state)
    loaded = torch.load(tmp_path / "v.pth", weights_only=True, mmap=True)
    for key, value in state.items():
        want = np.asarray(value).astype(np.asarray(value).dtype.newbyteorder("<"))
        assert_torch_identical(loaded[key], np.ascontiguousarray(want))


def test_file_mode_follows_umask_like_torch_save(tmp_path):
    save_pth(tmp_path / "ours.pth", {"a": np.zeros(2, np.float32)})
    torch.save({"a": torch.zeros(2)}, tmp_path / "theirs.pth")
    assert os.stat(tmp_path / "ours.pth").st_mode == os.stat(tmp_path / "theirs.pth").st_mode


# ------------------------------------------------------------------------------------ atomicity


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    """An exception after some storages were written: nothing at the target, no temporary
    left behind, and a file already there keeps its old contents."""
    real_add = pth_writer._add_aligned
    added = []

    def failing_add(archive, name, data):
        if name == "archive/data/2":
            raise KeyboardInterrupt  # a BaseException, as a Ctrl-C mid-write would raise
        added.append(name)
        return real_add(archive, name, data)

    monkeypatch.setattr(pth_writer, "_add_aligned", failing_add)
    state = {f"t{i}": random_array((64, 64), np.dtype(np.float32), i) for i in range(4)}
    with pytest.raises(KeyboardInterrupt):
        save_pth(tmp_path / "new.pth", state)
    assert "archive/data/1" in added  # it failed mid-way, with storages already written
    assert os.listdir(tmp_path) == []

    (tmp_path / "old.pth").write_bytes(b"previous contents")
    with pytest.raises(KeyboardInterrupt):
        save_pth(tmp_path / "old.pth", state)
    assert os.listdir(tmp_path) == ["old.pth"]
    assert (tmp_path / "old.pth").read_bytes() == b"previous contents"


def test_overwrites_an_existing_file_atomically(tmp_path):
    save_pth(tmp_path / "m.pth", {"a": np.ones(3, np.float32)})
    save_pth(tmp_path / "m.pth", {"b": np.zeros(2, np.int64)})
    assert os.listdir(tmp_path) == ["m.pth"]
    assert list(torch.load(tmp_path / "m.pth", weights_only=True)) == ["b"]


@pytest.mark.parametrize(
    "state, words",
    [
        ({"c": np.zeros(2, np.complex64)}, ["'c'", "complex64", "bfloat16"]),
        ({"fnuz": np.zeros(2, ml_dtypes.float8_e4m3fnuz)}, ["'fnuz'", "float8_e4m3fnuz"]),
        ({"obj": np.array([object()])}, ["'obj'", "object"]),
        ({3: np.zeros(2, np.float32)}, ["key 3", "strings"]),
    ],
)
def test_unwritable_input_is_refused_before_anything_is_written(tmp_path, state, words):
    with pytest.raises(VidaxError) as error:
        save_pth(tmp_path / "bad.pth", {"fine": np.zeros(1, np.float32), **state})
    message = str(error.value)
    assert message.startswith(str(tmp_path / "bad.pth"))
    for word in words:
        assert word in message
    assert os.listdir(tmp_path) == []
