"""vidax.translator.io: torch.save and safetensors files read back bit-identically, lazily."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from vidax.errors import CheckpointError
from vidax.translator.io import Checkpoint, TensorRef, open_checkpoint

# Every dtype vidax reads, with the numpy dtype it must come back as.
DTYPES = {
    torch.float64: np.dtype(np.float64),
    torch.float32: np.dtype(np.float32),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    torch.int64: np.dtype(np.int64),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint64: np.dtype(np.uint64),
    torch.uint32: np.dtype(np.uint32),
    torch.uint16: np.dtype(np.uint16),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(bool),
}


def random_tensor(shape, dtype, seed=0):
    """A tensor of random bit patterns (any float bit pattern may occur: NaNs, infs, subnormals)."""
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape))
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, dtype=torch.uint8).bool().reshape(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return (
        torch.randint(0, 256, (n * itemsize,), generator=g, dtype=torch.uint8)
        .view(dtype)
        .reshape(shape)
    )


def raw(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def assert_identical(array: np.ndarray, tensor: torch.Tensor) -> None:
    assert array.dtype == DTYPES[tensor.dtype]
    assert array.shape == tuple(tensor.shape)
    # C-order bytes: bit-identical, whatever the stored layout
    assert array.tobytes() == raw(tensor)


def read_all(ckpt: Checkpoint) -> dict[str, np.ndarray]:
    return {key: ref.read() for key, ref in ckpt.items()}


def mapping_rss_kib(path) -> int:
    """Resident pages of this process's memory maps of ``path`` (kB), from /proc/self/smaps."""
    target, total, inside = os.path.realpath(path), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header
                inside = len(fields) >= 6 and fields[5] == target
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


# -------------------------------------------------------------------------------- pth round trips


@pytest.mark.parametrize("protocol", [2, 4])
def test_pth_every_dtype_bit_identical(tmp_path, protocol):
    sd = collections.OrderedDict(
        (str(dt), random_tensor((3, 5), dt, seed=i)) for i, dt in enumerate(DTYPES)
    )
    torch.save(sd, tmp_path / "m.pth", pickle_protocol=protocol)
    with open_checkpoint(tmp_path / "m.pth") as ckpt:
        assert ckpt.format == "pth" and list(ckpt) == list(sd)
        for key, tensor in sd.items():
            ref = ckpt[key]
            assert (ref.key, ref.shape, ref.dtype) == (key, (3, 5), DTYPES[tensor.dtype])
            assert ref.nbytes == tensor.nbytes
            assert ref.path == str(tmp_path / "m.pth")
            array = ref.read()
            assert_identical(array, tensor)
            assert not array.flags.writeable and not array.flags.owndata  # a view on the map


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.uint16, torch.bool]
)
def test_pth_views_offsets_and_shared_storage(tmp_path, dtype):
    base = random_tensor((6, 8), dtype)
    sd = {
        "base": base,
        "transposed": base.t(),
        "stepped": base[::2, 1::3],
        "offset_rows": base[2:4],  # storage offset, contiguous
        "offset_column": base[1:, 5],  # storage offset and a stride
        "alias": base,  # the same tensor under two names
        "expanded": base[0:1, 2:3].expand(4, 3),  # zero strides
        "flipped_dims": base.reshape(2, 3, 8).permute(2, 0, 1),
        "scalar": base[3, 3],  # 0-d view at an offset
        "empty": base[:0],
        "empty_strided": base[:, 2:2],
    }
    torch.save(sd, tmp_path / "v.pt")
    with open_checkpoint(tmp_path / "v.pt") as ckpt:
        got = read_all(ckpt)
    for key, tensor in sd.items():
        assert_identical(got[key], tensor)
        assert not got[key].flags.writeable
    assert not got["offset_rows"].flags.owndata  # contiguous slices of a shared storage stay views
    assert got["transposed"].flags.owndata  # a non-contiguous layout costs exactly one copy


def test_pth_module_state_dict_parameters_and_scalars(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(5, 2)
    )
    sd = model.state_dict()  # an OrderedDict carrying _metadata, with a 0-d int64 buffer
    wrapped = {
        "weight": torch.nn.Parameter(torch.randn(2, 3)),
        "frozen": torch.nn.Parameter(torch.randn(2), requires_grad=False),
    }
    torch.save(sd, tmp_path / "sd.pt")
    torch.save(wrapped, tmp_path / "params.pt")
    for path, expected in [(tmp_path / "sd.pt", sd), (tmp_path / "params.pt", wrapped)]:
        with open_checkpoint(path) as ckpt:
            assert list(ckpt) == list(expected) and ckpt.extras == {}
            for key, tensor in expected.items():
                assert_identical(ckpt[key].read(), tensor)
    with open_checkpoint(tmp_path / "sd.pt") as ckpt:
        assert ckpt["1.num_batches_tracked"].shape == ()


def optimizer_state(model: torch.nn.Module) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(1, 4)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


@pytest.fixture(scope="module")
def wrapped_files(tmp_path_factory):
    """Training-style wrappers around two different state dicts; returns (folder, sd, ema_sd)."""
    tmp_path = tmp_path_factory.mktemp("wrapped")
    torch.manual_seed(0)
    model, ema = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    sd, ema_sd = model.state_dict(), ema.state_dict()
    layouts = {
        "hunyuan": {"module": sd},
        "state_dict": {"state_dict": sd, "epoch": 3},
        "training": {
            "model": sd,
            "ema": ema_sd,
            "optimizer": optimizer_state(model),
            "step": 10,
            "args": ["a", 1.5],
        },
        "ema_only": {"ema": sd, "step": 1},
        "nested": {"model": {"module": sd}, "meta": {"version": "1"}},
        "same_dict_twice": {"model": sd, "state_dict": sd},
        "ambiguous": {"model": sd, "net": ema_sd},
        "unknown_key": {"weights": sd},
        "counter_tensor": {"state_dict": sd, "global_step": torch.tensor(7)},
    }
    for name, obj in layouts.items():
        torch.save(obj, tmp_path / f"{name}.pt")
    return tmp_path, sd, ema_sd


@pytest.mark.parametrize(
    "name, wrapper, expect",
    [
        ("hunyuan", "auto", "sd"),
        ("state_dict", "auto", "sd"),
        ("training", "auto", "sd"),  # the non-EMA copy wins
        ("training", "ema", "ema"),
        ("ema_only", "auto", "sd"),
        ("nested", "auto", "sd"),
        ("nested", "model/module", "sd"),
        ("same_dict_twice", "auto", "sd"),
        ("counter_tensor", "auto", "sd"),  # a wrapper key beats a stray top-level tensor
        ("unknown_key", "weights", "sd"),
    ],
)
def test_pth_wrappers(wrapped_files, name, wrapper, expect):
    folder, sd, ema_sd = wrapped_files
    expected = sd if expect == "sd" else ema_sd
    with open_checkpoint(folder / f"{name}.pt", wrapper=wrapper) as ckpt:
        assert list(ckpt) == list(expected)
        for key, tensor in expected.items():
            assert_identical(ckpt[key].read(), tensor)


@pytest.mark.parametrize(
    "name, wrapper, words",
    [
        ("ambiguous", "auto", ["'model'", "'net'", "wrapper="]),
        ("unknown_key", "auto", ["'weights'", "wrapper="]),
        ("training", "model/missing", ["'missing'", "'weight'"]),
        ("training", "step", ["leads to a int"]),
    ],
)
def test_pth_wrapper_errors(wrapped_files, name, wrapper, words):
    folder = wrapped_files[0]
    with pytest.raises(CheckpointError) as excinfo:
        open_checkpoint(folder / f"{name}.pt", wrapper=wrapper)
    message = str(excinfo.value)
    assert str(folder / f"{name}.pt") in message
    for word in words:
        assert word in message


def test_pth_wrapper_none_takes_the_top_level_and_extras(tmp_path):
    weight = torch.randn(2, 2)
    torch.save(
        {"w": weight, "step": 5, "name": "x", "extra": [torch.ones(3), {"k": torch.zeros(1)}]},
        tmp_path / "a.pt",
    )
    with open_checkpoint(tmp_path / "a.pt", wrapper=None) as ckpt:
        assert list(ckpt) == ["w"]
        assert ckpt.extras["step"] == 5 and ckpt.extras["name"] == "x"
        listed, nested = ckpt.extras["extra"]
        assert isinstance(listed, TensorRef) and listed.key == "extra[0]"
        assert_identical(listed.read(), torch.ones(3))
        assert nested["k"].key == "extra[1].k"
    torch.save({"module": {"w": weight}}, tmp_path / "b.pt")
    with open_checkpoint(tmp_path / "b.pt", wrapper=None) as ckpt:
        assert len(ckpt) == 0 and list(ckpt.extras) == ["module"]


def test_pth_top_level_not_a_dict(tmp_path):
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="top-level object is a list"):
        open_checkpoint(tmp_path / "list.pt")


# ------------------------------------------------------------------------ safetensors round trips


def test_safetensors_every_dtype_bit_identical(tmp_path):
    tensors = {str(dt): random_tensor((4, 3), dt, seed=i) for i, dt in enumerate(DTYPES)}
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.bfloat16)
    tensors["empty"] = torch.zeros(0, 7, dtype=torch.float16)
    safetensors.torch.save_file(
        tensors, tmp_path / "m.safetensors", metadata={"format": "pt", "config": "{}"}
    )
    with open_checkpoint(tmp_path / "m.safetensors") as ckpt:
        assert ckpt.format == "safetensors" and ckpt.files == [str(tmp_path / "m.safetensors")]
        assert ckpt.metadata == {"format": "pt", "config": "{}"} and ckpt.extras == {}
        assert sorted(ckpt) == sorted(tensors)
        for key, tensor in tensors.items():
            array = ckpt[key].read()
            assert_identical(array, tensor)
            assert not array.flags.writeable


def write_shards(
    folder: pathlib.Path, shard_of: dict[str, int], metadata=None
) -> dict[str, torch.Tensor]:
    tensors = {key: random_tensor((2, 3), torch.bfloat16, seed=i) for i, key in enumerate(shard_of)}
    for shard in sorted(set(shard_of.values())):
        part = {k: tensors[k] for k, s in shard_of.items() if s == shard}
        safetensors.torch.save_file(
            part, folder / f"model-{shard:05d}-of-00003.safetensors", metadata={"shard": str(shard)}
        )
    index = {
        "metadata": metadata or {"total_size": 123},
        "weight_map": {k: f"model-{s:05d}-of-00003.safetensors" for k, s in shard_of.items()},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return tensors


def test_sharded_safetensors_index_and_folder(tmp_path):
    tensors = write_shards(tmp_path, {"a": 1, "b": 2, "c": 1, "d": 3})
    for path in (tmp_path / "model.safetensors.index.json", tmp_path):
        with open_checkpoint(path) as ckpt:
            assert list(ckpt) == ["a", "b", "c", "d"]
            assert [os.path.basename(f) for f in ckpt.files] == [
                f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
            ]
            assert ckpt.metadata == {"shard": "3", "total_size": "123"}
            assert os.path.basename(ckpt["b"].path) == "model-00002-of-00003.safetensors"
            for key, tensor in tensors.items():
                assert_identical(ckpt[key].read(), tensor)


def test_sharded_index_problems(tmp_path):
    write_shards(tmp_path, {"a": 1, "b": 2})
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["b"] = index["weight_map"]["a"]  # b is not in shard 1
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="places tensor 'b' in this shard"):
        open_checkpoint(index_path)
    del index["weight_map"]["b"]
    index["weight_map"]["a"] = "model-00001-of-00003.safetensors"
    index_path.write_text(json.dumps(index))
    with open_checkpoint(index_path) as ckpt:  # a key only one shard holds is kept even if unlisted
        assert list(ckpt) == ["a"]
    index["weight_map"]["z"] = "missing.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="missing.safetensors"):
        open_checkpoint(index_path)
    index["weight_map"]["z"] = "../escape.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="outside the index's folder"):
        open_checkpoint(index_path)
    index_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        open_checkpoint(index_path)


def test_folder_needs_exactly_one_checkpoint(tmp_path):
    safetensors.torch.save_file({"x": torch.zeros(2)}, tmp_path / "one.safetensors")
    with open_checkpoint(tmp_path) as ckpt:
        assert list(ckpt) == ["x"]
    safetensors.torch.save_file({"y": torch.zeros(2)}, tmp_path / "two.safetensors")
    with pytest.raises(CheckpointError) as excinfo:
        open_checkpoint(tmp_path)
    assert "one.safetensors" in str(excinfo.value) and "two.safetensors" in str(excinfo.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="found 0 index files and 0 safetensors files"):
        open_checkpoint(empty)


def test_safetensors_rejects_a_wrapper_path(tmp_path):
    safetensors.torch.save_file({"x": torch.zeros(2)}, tmp_path / "a.safetensors")
    with open_checkpoint(tmp_path / "a.safetensors", wrapper=None) as ckpt:
        assert list(ckpt) == ["x"]
    with pytest.raises(CheckpointError, match="wrapper='ema'"):
        open_checkpoint(tmp_path / "a.safetensors", wrapper="ema")


# ---------------------------------------------------------------------------------------- reading


@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
def test_read_slice_matches_numpy_indexing(tmp_path, fmt):
    base = random_tensor((6, 5, 4), torch.float32)
    tensors = {"c": base, "t": base.permute(2, 0, 1)} if fmt == "pth" else {"c": base}
    path = tmp_path / f"s.{fmt}"
    if fmt == "pth":
        torch.save(tensors, path)
    else:
        safetensors.torch.save_file(tensors, path)
    indices = [
        (slice(1, 3),),
        (2,),
        (-1, slice(None, None, 2)),
        (Ellipsis, 1),
        (slice(None), slice(4, 1, -1), 0),
        (np.int64(1), slice(0, 0)),
        slice(2, 5),
        3,
    ]
    with open_checkpoint(path) as ckpt:
        for key, tensor in tensors.items():
            full = tensor.numpy()
            for index in indices:
                before = ckpt.bytes_read
                got = ckpt[key].read_slice(index)
                expected = full[index]
                assert got.shape == expected.shape
                assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
                assert not got.flags.writeable and got.flags.c_contiguous
                assert ckpt.bytes_read - before == expected.nbytes
        with pytest.raises(TypeError):
            ckpt["c"].read_slice(([0, 1],))
        with pytest.raises(IndexError):
            ckpt["c"].read_slice((9,))


@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
def test_read_view_is_a_strided_view_on_the_map(tmp_path, fmt):
    """What placement hands to a device transfer: never a copy, whatever the selection."""
    base = random_tensor((6, 5, 4), torch.float32)
    tensors = {"c": base, "t": base.permute(2, 0, 1)} if fmt == "pth" else {"c": base}
    path = tmp_path / f"v.{fmt}"
    if fmt == "pth":
        torch.save(tensors, path)
    else:
        safetensors.torch.save_file(tensors, path)
    with open_checkpoint(path) as ckpt:
        for key, tensor in tensors.items():
            full = tensor.numpy()
            for index in [(), (slice(1, 3),), (slice(None), slice(1, 4)), (Ellipsis, 2)]:
                before = ckpt.bytes_read
                got = ckpt[key].read_view(index)
                np.testing.assert_array_equal(got, full[index])
                assert not got.flags.writeable and not got.flags.owndata
                assert ckpt.bytes_read - before == full[index].nbytes
        assert not ckpt["c"].read_view((slice(None), slice(1, 4))).flags.c_contiguous
        with pytest.raises(TypeError, match="read_view"):
            ckpt["c"].read_view(([0, 1],))


def test_bytes_read_counts_only_what_is_read(tmp_path):
    tensors = {
        "a": torch.zeros(10, 10),
        "b": torch.zeros(3, dtype=torch.bfloat16),
        "c": torch.zeros(0),
    }
    safetensors.torch.save_file(tensors, tmp_path / "a.safetensors")
    with open_checkpoint(tmp_path / "a.safetensors") as ckpt:
        assert ckpt.bytes_read == 0
        ckpt["b"].read()
        assert ckpt.bytes_read == 6
        ckpt["a"].read_slice((slice(2, 4),))
        ckpt["c"].read()
        assert ckpt.bytes_read == 6 + 80


def test_close_keeps_returned_arrays_valid(tmp_path):
    torch.save({"w": torch.arange(6.0)}, tmp_path / "a.pt")
    ckpt = open_checkpoint(str(tmp_path / "a.pt"))
    array = ckpt["w"].read()
    ckpt.close()
    assert array.tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="closed"):
        ckpt["w"].read()
    ckpt.close()  # idempotent
    with open_checkpoint(tmp_path / "a.pt") as ckpt:
        ref = ckpt["w"]
    with pytest.raises(ValueError, match="closed"):
        ref.read_slice((0,))


def test_missing_path(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        open_checkpoint(tmp_path / "nope.safetensors")


def test_no_torch_import(tmp_path):
    torch.save({"w": torch.ones(2, dtype=torch.bfloat16)}, tmp_path / "a.pt")
    safetensors.torch.save_file({"w": torch.ones(2)}, tmp_path / "a.safetensors")
    code = (
        "import sys; from vidax.translator.io import open_checkpoint\n"
        f"for p in ({str(tmp_path / 'a.pt')!r}, {str(tmp_path / 'a.safetensors')!r}):\n"
        "    assert open_checkpoint(p)['w'].read().tolist() == [1, 1]\n"
        "assert not {'torch', 'safetensors'} & set(sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=pathlib.Path(__file__).parents[2])


# --------------------------------------------------------------------------------------- laziness


# The kernel maps file pages into a process a page-cache folio at a time, plus fault-around
# (64 KiB); on recent kernels a folio can be 2 MiB, so each spot touched may map ~2 MiB.
FOLIO_KIB = 2 * 1024
SLACK_KIB = FOLIO_KIB + 256


def test_safetensors_reads_only_the_pages_it_needs(tmp_path):
    """In a ~200 MB file, reading a small tensor maps a few pages, and reading rows about those."""
    row = 1 << 20  # 1 MiB rows
    big = np.zeros((200, row // 4), np.float32)
    path = tmp_path / "big.safetensors"
    safetensors.numpy.save_file({"big": big, "small": np.arange(16, dtype=np.float32)}, path)
    del big
    with open_checkpoint(path) as ckpt:
        assert mapping_rss_kib(path) == 0  # opening reads headers only, and not through the map
        small = np.array(ckpt["small"].read())
        assert small.tolist() == list(range(16))
        assert mapping_rss_kib(path) <= SLACK_KIB  # not 200 MB
        rows = np.array(ckpt["big"].read_slice((slice(100, 103),)))
        assert rows.shape == (3, row // 4)
        assert 3 * 1024 <= mapping_rss_kib(path) <= 3 * 1024 + 3 * SLACK_KIB  # small + two ends
        assert ckpt.bytes_read == 64 + 3 * row
        np.array(ckpt["big"].read())  # control: touching everything is visible in the same measure
        assert mapping_rss_kib(path) >= 199 * 1024


def test_pth_reads_only_the_pages_it_needs(tmp_path):
    big = torch.zeros(64, 1 << 18)  # 64 MiB, in 1 MiB rows
    path = tmp_path / "big.pt"
    torch.save({"big": big, "small": torch.arange(8.0), "sparse_rows_t": big[::16].t()}, path)
    with open_checkpoint(path) as ckpt:
        assert mapping_rss_kib(path) == 0
        assert np.array(ckpt["small"].read()).tolist() == list(range(8))
        assert mapping_rss_kib(path) <= SLACK_KIB
        np.array(ckpt["big"].read_slice((slice(10, 12),)))
        after_rows = mapping_rss_kib(path)
        assert 2 * 1024 <= after_rows <= 2 * 1024 + 3 * SLACK_KIB
        # one element from each of the rows 0, 16, 32 and 48: four spots, not 64 MiB
        column = ckpt["sparse_rows_t"].read_slice((5,))
        assert column.shape == (4,) and column.flags.owndata
        assert mapping_rss_kib(path) <= after_rows + 4 * SLACK_KIB
