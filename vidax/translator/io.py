"""Lazy, torch-free readers for PyTorch checkpoint files.

``open_checkpoint(path)`` returns a :class:`Checkpoint`: a read-only mapping from the file's tensor
names to :class:`TensorRef` objects that know where each tensor's bytes lie but have not read them.
Reading one gives a numpy array in its exact stored dtype (bf16 and fp8 through ``ml_dtypes``): a
zero-copy, read-only view on a memory map of the file whenever the stored layout is contiguous, so
only the pages a caller touches are ever read, and nothing stays resident that it does not keep.

Formats:

* safetensors: one file, a folder holding one, or a sharded ``*.safetensors.index.json``. The header
  is parsed and every entry validated here; the data is memory-mapped.
* ``.pth`` / ``.pt`` zip archives written by ``torch.save``. ``data.pkl`` goes through a restricted
  unpickler whose only reachable callables are the inert stand-ins in ``_ALLOWED_GLOBALS`` for what
  ``torch.save`` writes for a state dict: no code from a file ever runs and torch is never imported.
  Storages are memory-mapped straight out of their zip entries, which ``torch.save`` stores
  uncompressed (a compressed entry is refused rather than inflated).

Every problem caused by a file raises :class:`vidax.errors.CheckpointError` naming the file.

``save_pth(path, tensors)`` writes the same zip format, again without torch: the bytes
``torch.save(state_dict, path)`` would write, so that tiny checkpoints in the authors' ``.pth``
layout can be made on machines that have no torch (the demo, tests).
"""

from __future__ import annotations

import collections
import io
import json
import math
import mmap
import os
import pickle
import pickletools
import re
import reprlib
import struct
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from vidax.errors import CheckpointError, VidaxError

__all__ = ["Checkpoint", "TensorRef", "open_checkpoint", "save_pth"]

# ------------------------------------------------------------------------------------------ dtypes

# torch dtype name -> numpy dtype, for the dtypes vidax reads (both formats store little-endian).
_TORCH_DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint64": np.dtype("<u8"),
    "uint32": np.dtype("<u4"),
    "uint16": np.dtype("<u2"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype(bool),
}

# safetensors dtype name -> numpy dtype.
_SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    name: _TORCH_DTYPES[torch_name]
    for name, torch_name in {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U64": "uint64",
        "U32": "uint32",
        "U16": "uint16",
        "U8": "uint8",
        "BOOL": "bool",
    }.items()
}

# The typed storage classes torch.save names (`torch.<Name>`) for tensors it rebuilds with
# `_rebuild_tensor_v2`, with the dtype each holds. The complex ones are recognised only so that the
# error says "unsupported dtype" rather than "forbidden global".
_TYPED_STORAGES: dict[str, str] = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}

# The dtypes torch.save names as `torch.<dtype>` objects: those it rebuilds with
# `_rebuild_tensor_v3` from an untyped storage (`torch.storage._new_dtypes()`). Only the first five
# are readable here; the others are recognised for a precise error.
_V3_DTYPES = (
    "float8_e4m3fn",
    "float8_e5m2",
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "complex32",
    "bits8",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
)

_MAX_SAFETENSORS_HEADER = 100_000_000  # bytes: the limit of the safetensors library itself
_MAX_TENSOR_BYTES = 2**62  # beyond any real tensor; keeps numpy's index arithmetic in int64
_MAX_EXTRAS_DEPTH = 64  # nesting of the non-tensor entries of a pth state dict


# ------------------------------------------------------------------------------------ mapped files


class _MappedFile:
    """One checkpoint file, memory-mapped read-only for the lifetime of its Checkpoint.

    Headers are read with ``pread``, not through the map, so opening a checkpoint maps none of its
    pages into the process: only tensor reads do.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self._file = open(path, "rb")
        except FileNotFoundError:
            raise CheckpointError(path, "the file does not exist.") from None
        except (OSError, ValueError) as e:
            raise CheckpointError(path, f"the file cannot be opened: {e}.") from None
        try:
            self.size = os.fstat(self._file.fileno()).st_size
            if self.size == 0:
                raise CheckpointError(path, "the file is empty (0 bytes).")
            self._map: mmap.mmap | None = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            self._file.close()
            raise CheckpointError(path, f"the file cannot be memory-mapped: {e}.") from None
        except BaseException:
            self._file.close()
            raise

    def buffer(self) -> mmap.mmap:
        if self._map is None:
            raise ValueError(f"{self.path}: the checkpoint is closed; reopen it to read tensors")
        return self._map

    def read(self, offset: int, size: int) -> bytes:
        """Bytes [offset, offset + size) of the file (fewer at its end), bypassing the map."""
        self.buffer()  # raises once closed
        return os.pread(self._file.fileno(), size, offset)

    def close(self) -> None:
        """Drop the mapping; arrays already handed out keep it alive until they are freed."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # views returned by read() still use it
                pass
            self._map = None
            self._file.close()


class _ReadCounter:
    """Tensor bytes materialised through one Checkpoint (thread-safe)."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


# -------------------------------------------------------------------------------------- public API


class TensorRef:
    """One stored tensor, not read yet: where its bytes lie and how to view them.

    ``read()`` returns the whole tensor and ``read_slice(index)`` a sub-block. Both return a
    read-only, zero-copy view on the file's memory map when the selected elements are contiguous in
    the file, else one copy (read-only too, so callers cannot come to depend on which they got).
    """

    __slots__ = (
        "key",
        "shape",
        "dtype",
        "path",
        "nbytes",
        "_source",
        "_offset",
        "_strides",
        "_extent",
        "_counter",
    )

    def __init__(
        self,
        key: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        source: _MappedFile,
        offset: int,
        counter: _ReadCounter,
        strides: tuple[int, ...] | None = None,
        extent: int = 0,
    ):
        self.key = key
        self.shape = shape
        self.dtype = dtype
        self.path = source.path
        self.nbytes = math.prod(shape) * dtype.itemsize
        self._source = source
        self._offset = offset  # byte offset of element [0, ..., 0] in the file
        self._strides = strides  # in bytes; None: C-contiguous
        self._extent = extent  # elements from _offset that a strided view spans
        self._counter = counter

    def __repr__(self) -> str:
        return f"TensorRef({self.key!r}, {self.shape}, {self.dtype.name}, {self.path!r})"

    def _view(self) -> np.ndarray:
        """The whole tensor as a read-only view on the map; no bytes are touched yet."""
        buffer = self._source.buffer()
        if self.nbytes == 0:
            empty = np.empty(self.shape, self.dtype)
            empty.flags.writeable = False
            return empty
        if self._strides is None:
            count = math.prod(self.shape)
            return np.frombuffer(buffer, self.dtype, count, self._offset).reshape(self.shape)
        base = np.frombuffer(buffer, self.dtype, self._extent, self._offset)
        return np.lib.stride_tricks.as_strided(base, self.shape, self._strides, writeable=False)

    def _materialise(self, view: np.ndarray) -> np.ndarray:
        if not view.flags.c_contiguous:
            view = np.ascontiguousarray(view)
            view.flags.writeable = False
        self._counter.add(view.nbytes)
        return view

    def read(self) -> np.ndarray:
        """The whole tensor, in its stored dtype and shape."""
        return self._materialise(self._view())

    def read_slice(self, index: Any) -> np.ndarray:
        """The sub-block ``tensor[index]`` (ints, slices and ``...``; numpy semantics), reading
        only the file pages that hold the selected elements."""
        return self._materialise(self._select(index, "read_slice"))

    def read_view(self, index: Any = ()) -> np.ndarray:
        """``tensor[index]`` as a read-only view on the map, strided where the selection is
        not contiguous in the file: never a copy. For a consumer that copies anyway -- a
        device transfer copies a strided host array itself (transposing as it goes), so a
        copy here would only be a second one. Counts the selected bytes in ``bytes_read``."""
        view = self._select(index, "read_view")
        self._counter.add(view.nbytes)
        return view

    def _select(self, index: Any, method: str) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        for item in index:
            if isinstance(item, (bool, np.bool_)) or not (
                item is Ellipsis or isinstance(item, (slice, int, np.integer))
            ):
                raise TypeError(f"{method} takes ints, slices and ..., not {type(item).__name__}")
        return self._view()[index]


class Checkpoint(Mapping[str, TensorRef]):
    """The tensors of one checkpoint (a file or a set of shards) by name, unread until asked for.

    Attributes: ``path`` (as given), ``format`` ("safetensors" | "pth"), ``files`` (every file
    backing it), ``metadata`` (safetensors ``__metadata__`` merged over shards, then the index's
    "metadata"; {} for pth), ``extras`` (the non-tensor entries of a pth state dict) and
    ``bytes_read`` (tensor bytes handed out by ``read``/``read_slice`` so far). Arrays already read
    stay valid after ``close()``.
    """

    def __init__(
        self,
        path: str,
        format: str,
        tensors: dict[str, TensorRef],
        *,
        sources: list[_MappedFile],
        counter: _ReadCounter,
        metadata: dict[str, str] | None = None,
        extras: dict[str, object] | None = None,
    ):
        self.path = path
        self.format = format
        self.files = [source.path for source in sources]
        self.metadata = metadata or {}
        self.extras = extras or {}
        self._tensors = tensors
        self._sources = sources
        self._counter = counter

    @property
    def bytes_read(self) -> int:
        return self._counter.value

    def __getitem__(self, key: str) -> TensorRef:
        return self._tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        gb = sum(ref.nbytes for ref in self._tensors.values()) / 1e9
        return f"Checkpoint({self.path!r}, {self.format}, {len(self)} tensors, {gb:.3g} GB)"

    def close(self) -> None:
        for source in self._sources:
            source.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def open_checkpoint(path: str | os.PathLike, *, wrapper: str | None = "auto") -> Checkpoint:
    """Open a checkpoint lazily: a safetensors file, a sharded ``*.safetensors.index.json``, a
    folder holding exactly one of those, or a zip ``.pth``/``.pt`` written by ``torch.save``.

    ``wrapper`` chooses the state dict inside a pth file: "auto" (see ``_select_state_dict``), a key
    path such as "ema" or "model/module", or None for "the top-level object is the state dict".
    Raises CheckpointError for any problem with the file(s).
    """
    given = os.fspath(path)
    if not os.path.exists(given):
        raise CheckpointError(given, "no such file or folder.")
    target = _file_in_folder(given) if os.path.isdir(given) else given
    counter = _ReadCounter()
    if target.endswith(".json"):
        _check_flat_wrapper(target, wrapper)
        return _open_safetensors_index(given, target, counter)
    source = _MappedFile(target)
    try:
        head = source.read(0, 16)
        # A safetensors header starts at byte 8 with "{"; a zip's byte 8 is its compression method.
        is_safetensors = head[8:9] == b"{"
        if not is_safetensors and head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            return _open_pth(given, source, wrapper, counter)
        if is_safetensors or target.endswith(".safetensors"):
            _check_flat_wrapper(target, wrapper)
            tensors, metadata = _safetensors_tensors(source, counter)
            return Checkpoint(
                given, "safetensors", tensors, sources=[source], counter=counter, metadata=metadata
            )
        if head[:1] == b"\x80":  # the PROTO opcode that starts every binary pickle
            raise CheckpointError(
                target, "this is a raw pickle stream, not a zip archive: " + _LEGACY
            )
        if target.endswith((".pt", ".pth", ".bin", ".ckpt")):
            raise CheckpointError(
                target, "this is not a zip archive written by torch.save; " + _LEGACY
            )
        raise CheckpointError(
            target, "this is neither a safetensors file nor a zip archive written by torch.save."
        )
    except BaseException:
        source.close()
        raise


_LEGACY = (
    "if torch wrote it, it is in the legacy torch serialization format (torch < 1.6, or "
    "_use_new_zipfile_serialization=False). vidax does not unpickle such files, because unpickling "
    "them can run arbitrary code. Re-save it in the zip format, in an environment with torch: "
    "`torch.save(torch.load(f, weights_only=True), out)`."
)


def _check_flat_wrapper(path: str, wrapper: str | None) -> None:
    if wrapper not in ("auto", None):
        raise CheckpointError(
            path,
            f"wrapper={wrapper!r} selects a state dict inside a .pth file, but this is a "
            "safetensors checkpoint, one flat dict of tensors; pass wrapper='auto' or None.",
        )


def _file_in_folder(folder: str) -> str:
    """The one ``*.safetensors.index.json``, else the one ``*.safetensors``, in ``folder``."""
    names = sorted(os.listdir(folder))
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    files = [n for n in names if n.endswith(".safetensors")]
    if len(indexes) == 1:
        return os.path.join(folder, indexes[0])
    if not indexes and len(files) == 1:
        return os.path.join(folder, files[0])
    found = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    raise CheckpointError(
        folder,
        "a checkpoint folder must hold exactly one *.safetensors.index.json or exactly one "
        f"*.safetensors file; found {len(indexes)} index files and {len(files)} safetensors "
        f"files among: {found or 'nothing'}.",
    )


# ------------------------------------------------------------------------------------- safetensors


def _safetensors_header(source: _MappedFile) -> tuple[dict, int]:
    """The parsed JSON header of a safetensors file and its length in bytes."""
    path, size = source.path, source.size
    if size < 8:
        raise CheckpointError(path, f"the file has {size} bytes, too few for a safetensors header.")
    (length,) = struct.unpack("<Q", source.read(0, 8))
    if length > size - 8:
        raise CheckpointError(
            path,
            f"the header length {length} runs past the end of the file ({size} bytes): the file "
            "is truncated or not a safetensors file.",
        )
    if length > _MAX_SAFETENSORS_HEADER:
        raise CheckpointError(path, f"the header length {length} exceeds the 100 MB limit.")
    try:
        header = json.loads(source.read(8, length), object_pairs_hook=_no_duplicate_keys)
    except (ValueError, RecursionError) as e:  # JSON and UTF-8 decoding errors are ValueErrors
        raise CheckpointError(path, f"the header is not valid JSON: {e}.") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, f"the header is a JSON {type(header).__name__}, not an object.")
    return header, length


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        duplicates = [k for k, n in collections.Counter(k for k, _ in pairs).items() if n > 1]
        raise ValueError(f"duplicate keys {duplicates[:5]}")
    return result


def _safetensors_tensors(source: _MappedFile, counter: _ReadCounter) -> tuple[dict, dict]:
    """The validated tensors of a safetensors file, and its ``__metadata__``."""
    path = source.path
    header, length = _safetensors_header(source)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(path, "the header's __metadata__ is not an object of strings.")

    data_start, data_size = 8 + length, source.size - 8 - length
    entries, unknown = [], []
    for key, info in header.items():
        where = f"tensor {_show(key)}:"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(
                path, f"{where} its entry must hold exactly dtype, shape and data_offsets."
            )
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise CheckpointError(
                path, f"{where} shape {_show(shape)} is not a list of non-negative integers."
            )
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(n) is int for n in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            raise CheckpointError(
                path,
                f"{where} data_offsets {_show(offsets)} is not [begin, end], 0 <= begin <= end.",
            )
        if offsets[1] > data_size:
            raise CheckpointError(
                path,
                f"{where} its data_offsets {offsets} run past the end of the data ({data_size} "
                "bytes): the file is truncated or its header lies.",
            )
        if not isinstance(dtype, str) or dtype not in _SAFETENSORS_DTYPES:
            unknown.append(f"{_show(key)} ({dtype if isinstance(dtype, str) else _show(dtype)})")
            continue
        expected = math.prod(shape) * _SAFETENSORS_DTYPES[dtype].itemsize
        if offsets[1] - offsets[0] != expected:
            raise CheckpointError(
                path,
                f"{where} data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, but shape "
                f"{shape} of {dtype} needs {expected}.",
            )
        entries.append((offsets[0], offsets[1], key, tuple(shape), _SAFETENSORS_DTYPES[dtype]))
    if unknown:
        raise CheckpointError(
            path,
            f"vidax does not support these tensors' dtypes yet: {', '.join(unknown)}. "
            f"Supported: {', '.join(_SAFETENSORS_DTYPES)}.",
        )

    previous_end, previous_key = 0, None
    for begin, end, key, _, _ in sorted((e for e in entries if e[1] > e[0]), key=lambda e: e[0]):
        if begin < previous_end:
            raise CheckpointError(
                path, f"tensors {_show(previous_key)} and {_show(key)} overlap in the file."
            )
        previous_end, previous_key = end, key

    tensors = {
        key: TensorRef(key, shape, dtype, source, data_start + begin, counter)
        for begin, _, key, shape, dtype in entries
    }
    return tensors, metadata


def _open_safetensors_index(given: str, index_path: str, counter: _ReadCounter) -> Checkpoint:
    """A sharded checkpoint: every tensor of the shards the index names, each key read from the
    shard the index assigns it (a key the index omits is kept if exactly one shard holds it)."""
    try:
        with open(index_path, "rb") as f:
            index = json.loads(f.read())
    except OSError as e:
        raise CheckpointError(index_path, f"the index file cannot be read: {e}.") from None
    except (ValueError, RecursionError) as e:
        raise CheckpointError(index_path, f"the index is not valid JSON: {e}.") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(
            index_path, 'the index has no "weight_map" from names to shard files.'
        )
    index_metadata = index.get("metadata") or {}
    if not isinstance(index_metadata, dict):
        raise CheckpointError(index_path, 'the index\'s "metadata" is not an object.')

    folder = os.path.dirname(index_path)
    shards: dict[str, tuple[_MappedFile, dict[str, TensorRef]]] = {}
    opened: list[_MappedFile] = []
    metadata: dict[str, str] = {}
    try:
        for name in dict.fromkeys(weight_map.values()):
            if os.path.isabs(name) or ".." in re.split(r"[\\/]", name):
                raise CheckpointError(
                    index_path, f"the shard {_show(name)} points outside the index's folder."
                )
            opened.append(_MappedFile(os.path.join(folder, name)))
            refs, shard_metadata = _safetensors_tensors(opened[-1], counter)
            shards[name] = (opened[-1], refs)
            metadata.update(shard_metadata)
        tensors: dict[str, TensorRef] = {}
        for key, name in weight_map.items():
            shard, refs = shards[name]
            if key not in refs:
                raise CheckpointError(
                    shard.path,
                    f"the index {index_path} places tensor {_show(key)} in this shard, but it is "
                    "not there.",
                )
            tensors[key] = refs[key]
        for _, refs in shards.values():
            for key in [k for k in refs if k not in weight_map]:
                if key in tensors:
                    raise CheckpointError(
                        index_path,
                        f"tensor {_show(key)} is in several shards and the index omits it.",
                    )
                tensors[key] = refs[key]
    except BaseException:
        for shard in opened:
            shard.close()
        raise
    metadata.update(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in index_metadata.items()}
    )
    return Checkpoint(
        given, "safetensors", tensors, sources=opened, counter=counter, metadata=metadata
    )


# ------------------------------------------------------------------------------- torch zip archives


class _StorageType(NamedTuple):
    """Stand-in for `torch.<Name>Storage` or `torch.storage.UntypedStorage` (dtype None)."""

    name: str
    dtype: str | None


class _TorchDtype(NamedTuple):
    """Stand-in for a `torch.<dtype>` object."""

    name: str


class _Storage(NamedTuple):
    """One storage: a byte range of the archive, typed (dtype set) or untyped (dtype None)."""

    key: str
    dtype: str | None
    offset: int
    nbytes: int


class _TensorRecord(NamedTuple):
    """A tensor as torch.save described it, checked against its storage; element units."""

    storage: _Storage
    dtype: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


class _Rebuilder(NamedTuple):
    """Stand-in for an allow-listed torch rebuild function: builds inert records, nothing else.

    A NamedTuple, so a pickle's BUILD cannot alter it (or the function it holds) between loads."""

    build: Callable[..., Any]

    def __call__(self, *args):
        return self.build(*args)


class _Malformed(ValueError):
    """A pickle's description of a tensor is inconsistent (the caller adds the file's name)."""


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    """`torch._utils._rebuild_tensor_v2`: a tensor on a typed storage."""
    if type(storage) is not _Storage or storage.dtype is None:
        raise _Malformed("_rebuild_tensor_v2 needs a typed storage")
    _check_tensor_flags(requires_grad, hooks, metadata)
    return _tensor_record(storage, storage.dtype, offset, size, stride)


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
    """`torch._utils._rebuild_tensor_v3`: a tensor of ``dtype`` on an untyped storage."""
    if type(storage) is not _Storage or storage.dtype is not None:
        raise _Malformed("_rebuild_tensor_v3 needs an untyped storage")
    if type(dtype) is not _TorchDtype:
        raise _Malformed("_rebuild_tensor_v3 needs a torch dtype")
    _check_tensor_flags(requires_grad, hooks, metadata)
    return _tensor_record(storage, dtype.name, offset, size, stride)


def _rebuild_parameter(data, requires_grad, hooks):
    """`torch._utils._rebuild_parameter`: an nn.Parameter, read as its tensor."""
    if type(data) is not _TensorRecord:
        raise _Malformed("_rebuild_parameter needs a tensor")
    _check_tensor_flags(requires_grad, hooks, None)
    return data


def _check_tensor_flags(requires_grad, hooks, metadata) -> None:
    if type(requires_grad) is not bool:
        raise _Malformed("requires_grad is not a bool")
    if not isinstance(hooks, dict) or hooks:
        raise _Malformed("a tensor carries backward hooks (torch.save writes an empty OrderedDict)")
    if metadata is not None and (not isinstance(metadata, dict) or any(metadata.values())):
        raise _Malformed(
            f"tensor metadata {_show(metadata)} (conjugate/negative-bit views) is not supported"
        )


def _tensor_record(storage: _Storage, dtype: str, offset, shape, strides) -> _TensorRecord:
    if type(offset) is not int or offset < 0:
        raise _Malformed(f"storage offset {_show(offset)} is not a non-negative int")
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        raise _Malformed(f"size {_show(shape)} is not a tuple of non-negative ints")
    if not (
        type(strides) is tuple
        and len(strides) == len(shape)
        and all(type(n) is int and n >= 0 for n in strides)
    ):
        raise _Malformed(f"stride {_show(strides)} does not match size {_show(shape)}")
    if dtype in _TORCH_DTYPES and 0 not in shape:  # unsupported dtypes are reported by name later
        itemsize = _TORCH_DTYPES[dtype].itemsize
        if math.prod(shape) * itemsize >= _MAX_TENSOR_BYTES:
            raise _Malformed(f"size {_show(shape)} is impossibly large")
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= storage.nbytes // itemsize:
            raise _Malformed(
                f"a tensor of size {_show(shape)}, stride {_show(strides)} and offset {offset} "
                f"reaches element {last}, past the end of storage {storage.key} "
                f"({storage.nbytes // itemsize} {dtype} elements)"
            )
    return _TensorRecord(storage, dtype, offset, shape, strides)


# Everything a torch.save'd state dict's pickle names, and the inert stand-in each resolves to. Any
# other global is refused: these objects are the only callables a pickle can reach.
_ALLOWED_GLOBALS: dict[tuple[str, str], object] = {
    # state dicts (with BUILD setting their `_metadata`) and the empty backward-hook dicts
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _Rebuilder(_rebuild_tensor_v2),  # on typed storages
    ("torch._utils", "_rebuild_tensor_v3"): _Rebuilder(_rebuild_tensor_v3),  # fp8, uint16/32/64
    ("torch._utils", "_rebuild_parameter"): _Rebuilder(_rebuild_parameter),  # nn.Parameter
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", None),  # v3 storages
    **{("torch", name): _StorageType(name, dtype) for name, dtype in _TYPED_STORAGES.items()},
    **{("torch", name): _TorchDtype(name) for name in _V3_DTYPES},  # the dtype argument of v3
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles a torch.save pickle into plain containers and inert records, and nothing else."""

    def __init__(self, data: bytes, path: str, load_storage: Callable[[object], _Storage]):
        super().__init__(io.BytesIO(data))
        self._path = path
        self._load_storage = load_storage

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise CheckpointError(
                self._path,
                f"its pickle (data.pkl) names the Python global {module[:80]}.{name[:80]}, which "
                "is not among those torch.save writes for a state dict. vidax refused the file "
                "without running any of its code; a pickle naming such a global can run any code.",
            ) from None

    def persistent_load(self, pid: object) -> _Storage:
        return self._load_storage(pid)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 3


def _show(value: object) -> str:
    """A short repr for error messages, bounded in depth and length even for hostile objects."""
    return _REPR.repr(value)


# Opcodes that look globals up in copyreg's process-wide extension cache instead of find_class.
_EXTENSION_OPCODES = {"EXT1", "EXT2", "EXT4"}


def _unpickle(path: str, data: bytes, load_storage: Callable[[object], _Storage]) -> object:
    try:
        for opcode, _, _ in pickletools.genops(data):
            if opcode.name in _EXTENSION_OPCODES:
                raise CheckpointError(
                    path,
                    f"its pickle uses the {opcode.name} opcode, which torch.save never writes.",
                )
        return _RestrictedUnpickler(data, path, load_storage).load()
    except CheckpointError:
        raise
    except _Malformed as e:
        raise CheckpointError(
            path, f"its pickle describes a tensor vidax cannot rebuild: {e}."
        ) from None
    except Exception as e:  # any failure of the unpickler on a malformed or hostile stream
        problem = f"{type(e).__name__}: {str(e)[:200]}"
        raise CheckpointError(path, f"its pickle (data.pkl) is malformed: {problem}.") from None


class _Archive:
    """The entries of a torch.save zip archive, located without inflating anything."""

    def __init__(self, source: _MappedFile):
        self.source = source
        path = source.path
        try:
            with zipfile.ZipFile(path) as archive:
                infos = archive.infolist()
        except Exception as e:  # zipfile raises many types on a corrupt directory
            problem = f"{type(e).__name__}: {e}"
            raise CheckpointError(path, f"it is not a readable zip archive: {problem}.") from None
        self.entries = {info.filename: info for info in infos}
        if len(self.entries) != len(infos):
            raise CheckpointError(path, "the zip archive lists some entry names twice.")
        pickles = [name for name in self.entries if re.fullmatch(r"[^/]+/data\.pkl", name)]
        if len(pickles) != 1:
            raise CheckpointError(
                path,
                "a torch.save archive holds exactly one <name>/data.pkl; this zip holds "
                f"{len(pickles)} ({', '.join(pickles[:5]) or 'none'}), so torch.save did not "
                "write it.",
            )
        self.prefix = pickles[0][: -len("/data.pkl")]

    def span(self, name: str) -> tuple[int, int]:
        """(file offset, size) of an entry's stored bytes, found through its local file header."""
        path, info, size = self.source.path, self.entries.get(name), self.source.size
        if info is None:
            raise CheckpointError(path, f"the zip archive has no entry {name!r}.")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise CheckpointError(
                path,
                f"zip entry {name!r} is compressed or encrypted (method {info.compress_type}). "
                "torch.save stores entries uncompressed and vidax memory-maps them, so it does not "
                "inflate them: re-save the file with torch.save.",
            )
        header = self.source.read(info.header_offset, 30) if 0 <= info.header_offset < size else b""
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise CheckpointError(path, f"zip entry {name!r} has no valid local header.")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_length + extra_length
        if info.compress_size != info.file_size or start + info.file_size > size:
            raise CheckpointError(
                path,
                f"zip entry {name!r} claims {info.file_size} bytes at offset {start}, past the end "
                f"of the file ({size} bytes): the file is truncated or corrupt.",
            )
        return start, info.file_size

    def read(self, name: str) -> bytes:
        start, size = self.span(name)
        return self.source.read(start, size)


def _storage_loader(archive: _Archive) -> Callable[[object], _Storage]:
    """persistent_load for torch's ('storage', storage_type, key, location, numel) ids."""
    path, storages = archive.source.path, {}  # key -> _Storage

    def load(pid: object) -> _Storage:
        if type(pid) is not tuple or len(pid) != 5 or pid[0] != "storage":
            raise CheckpointError(
                path, f"the persistent id {_show(pid)} is not a torch storage reference."
            )
        _, storage_type, key, location, numel = pid
        if type(storage_type) is not _StorageType:
            raise CheckpointError(
                path, f"the storage reference {_show(pid)} names no storage class."
            )
        if type(key) is not str or not re.fullmatch(r"[0-9]{1,18}", key):
            raise CheckpointError(path, f"the storage key {_show(key)} is not a decimal number.")
        if type(location) is not str or len(location) > 64:
            raise CheckpointError(path, f"storage {key}: {_show(location)} is not a device name.")
        if type(numel) is not int or numel < 0:
            raise CheckpointError(
                path, f"storage {key}: size {_show(numel)} is not a non-negative int."
            )
        if storage_type.dtype is None:
            itemsize = 1  # untyped storages count bytes
        elif storage_type.dtype in _TORCH_DTYPES:
            itemsize = _TORCH_DTYPES[storage_type.dtype].itemsize
        else:
            itemsize = 0  # an unsupported (complex) storage: its tensors are reported by name later
        nbytes = numel * itemsize
        if key in storages:  # a storage shared by several tensors is referenced once per tensor
            if (storages[key].dtype, storages[key].nbytes) != (storage_type.dtype, nbytes):
                raise CheckpointError(
                    path, f"storage {key} is referenced with two different types or sizes."
                )
            return storages[key]
        start, size = archive.span(f"{archive.prefix}/data/{key}")
        if nbytes > size:
            raise CheckpointError(
                path,
                f"storage {key} should hold {numel} elements ({nbytes} bytes) but its zip entry "
                f"has {size} bytes: the file is truncated or corrupt.",
            )
        storages[key] = _Storage(key, storage_type.dtype, start, nbytes)
        return storages[key]

    return load


def _open_pth(
    given: str, source: _MappedFile, wrapper: str | None, counter: _ReadCounter
) -> Checkpoint:
    path = source.path
    archive = _Archive(source)
    byteorder = f"{archive.prefix}/byteorder"
    if byteorder in archive.entries and archive.read(byteorder) != b"little":
        raise CheckpointError(
            path, "it was saved on a big-endian machine; vidax reads little-endian."
        )
    top = _unpickle(path, archive.read(f"{archive.prefix}/data.pkl"), _storage_loader(archive))
    state = _select_state_dict(path, top, wrapper)

    unsupported: list[str] = []

    def make_ref(key: str, record: _TensorRecord) -> TensorRef | None:
        dtype = _TORCH_DTYPES.get(record.dtype)
        if dtype is None:
            unsupported.append(f"{_show(key)} (torch.{record.dtype})")
            return None
        shape, strides = record.shape, record.strides
        offset = record.storage.offset + record.offset * dtype.itemsize
        if strides == _contiguous_strides(shape) or 0 in shape:
            return TensorRef(key, shape, dtype, source, offset, counter)
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        byte_strides = tuple(s * dtype.itemsize for s in strides)
        return TensorRef(key, shape, dtype, source, offset, counter, byte_strides, extent)

    tensors, extras = {}, {}
    for key, value in state.items():
        if type(key) is not str:
            raise CheckpointError(
                path, f"the state dict has a key {_show(key)} that is not a string."
            )
        if type(value) is _TensorRecord:
            tensors[key] = make_ref(key, value)
            continue
        try:
            extras[key] = _replace_records(value, key, make_ref)
        except _Malformed as e:
            raise CheckpointError(path, f"the state dict's entry {_show(key)} is {e}.") from None
    if unsupported:
        raise CheckpointError(
            path,
            f"vidax does not support these tensors' dtypes yet: {', '.join(unsupported)}. "
            f"Supported: {', '.join(_TORCH_DTYPES)}.",
        )
    return Checkpoint(given, "pth", tensors, sources=[source], counter=counter, extras=extras)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides in elements, as torch computes them (size-1 dims take the next stride)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _replace_records(value: object, name: str, make_ref: Callable, depth: int = 0) -> object:
    """``value`` with each tensor in its lists/tuples/dicts made a TensorRef named by its place."""
    if type(value) is _TensorRecord:
        return make_ref(name, value)
    if type(value) not in (list, tuple, dict, collections.OrderedDict):
        return value
    if depth == _MAX_EXTRAS_DEPTH:  # also stops cycles, which a pickle can build
        raise _Malformed(f"nested more than {_MAX_EXTRAS_DEPTH} levels deep (or cyclic)")

    def inner(item: object, place: str) -> object:
        return _replace_records(item, place, make_ref, depth + 1)

    if isinstance(value, dict):
        return type(value)(
            (k, inner(v, f"{name}.{k}" if type(k) is str else f"{name}.{_show(k)}"))
            for k, v in value.items()
        )
    return type(value)(inner(v, f"{name}[{i}]") for i, v in enumerate(value))


# Keys under which training code nests a model's state dict, in the order "auto" tries them; the EMA
# copies are taken only when no other state dict is present (pass wrapper="ema" to choose them).
_MODEL_KEYS = ("module", "state_dict", "model", "model_state_dict", "net", "network")
_EMA_KEYS = ("ema", "ema_model", "model_ema", "ema_state_dict", "net_ema")


def _holds_tensors(value: object) -> bool:
    return isinstance(value, dict) and any(type(v) is _TensorRecord for v in value.values())


def _select_state_dict(path: str, top: object, wrapper: str | None) -> dict:
    """The dict of tensors that ``wrapper`` designates in the unpickled object.

    "auto": the state dicts reached through known wrapper keys (``_MODEL_KEYS`` then ``_EMA_KEYS``,
    up to three levels deep, e.g. "model" or "model/module"): the non-EMA one if there is exactly
    one, else the only EMA one; several -> an error listing them. With none, the top level itself.
    A key path ("ema", "a/b") selects explicitly; None takes the top level.
    """
    if not isinstance(top, dict):
        raise CheckpointError(
            path, f"the pickled top-level object is a {type(top).__name__}, not a dict."
        )
    if wrapper is None:
        return top
    if wrapper != "auto":
        return _follow_wrapper(path, top, wrapper)

    found: dict[int, tuple[str, ...]] = {}  # id(state dict) -> its key path, so aliases count once

    def search(node: dict, trail: tuple[str, ...]) -> None:
        for key in _MODEL_KEYS + _EMA_KEYS:
            child = node.get(key)
            if _holds_tensors(child):
                found.setdefault(id(child), (*trail, key))
            elif isinstance(child, dict) and len(trail) < 2:
                search(child, (*trail, key))

    search(top, ())
    candidates = list(found.values())
    if not candidates:
        elsewhere = [_show(k) for k, v in top.items() if _holds_tensors(v)]
        if elsewhere and not _holds_tensors(top):
            raise CheckpointError(
                path,
                f"no state dict under a known key ({', '.join(_MODEL_KEYS + _EMA_KEYS)}); tensors "
                f"were found under {', '.join(elsewhere[:10])}. Pass wrapper= naming one.",
            )
        return top
    choices = [c for c in candidates if not set(c) & set(_EMA_KEYS)] or candidates
    if len(choices) > 1:
        names = ", ".join(repr("/".join(c)) for c in candidates)
        raise CheckpointError(
            path, f"it holds several state dicts ({names}); pass wrapper= naming one."
        )
    return _follow_wrapper(path, top, "/".join(choices[0]))


def _follow_wrapper(path: str, top: dict, wrapper: str) -> dict:
    """The dict at key path ``wrapper`` ("a/b") inside ``top``."""
    current, walked = top, []
    for part in wrapper.split("/"):
        where = "/".join(walked) or "the top level"
        if not isinstance(current, dict):
            raise CheckpointError(path, f"wrapper={wrapper!r}: {where} is not a dict.")
        if part not in current:
            keys = ", ".join(_show(k) for k in list(current)[:20])
            raise CheckpointError(
                path, f"wrapper={wrapper!r}: {where} has no key {part!r} (keys: {keys})."
            )
        current = current[part]
        walked.append(part)
    if not isinstance(current, dict):
        raise CheckpointError(
            path, f"wrapper={wrapper!r} leads to a {type(current).__name__}, not a dict."
        )
    return current


# ------------------------------------------------------------------------------------------ writing
#
# ``save_pth`` writes what ``torch.save(state_dict, f)`` writes (torch 2.x, zip format), so that
# machines without torch can produce checkpoints in the authors' own .pth layout:
#
#   archive/data.pkl                 protocol-2 pickle: an OrderedDict of tensors, each
#                                    `torch._utils._rebuild_tensor_v2(storage, offset, size,
#                                    stride, requires_grad, OrderedDict())` (v3 with a trailing
#                                    `torch.<dtype>` for the dtypes torch keeps in untyped
#                                    storages), the storage a persistent id
#                                    ('storage', <storage type>, key, 'cpu', numel)
#   archive/.format_version          b"1"
#   archive/.storage_alignment       b"64"
#   archive/byteorder                b"little"
#   archive/data/<key>               each storage's raw bytes, one entry per tensor
#   archive/version                  b"3\n"
#   archive/.data/serialization_id   40 decimal digits
#
# Entries are stored (not deflated) and each one's data starts on a 64-byte boundary, padded by
# an extra field "FB" + length + "Z"*n in the local header, exactly as torch's
# PyTorchStreamWriter pads them (that is what lets torch.load(mmap=True) and vidax's reader map
# storages in place). "archive" is the record prefix torch.save uses for file objects.

_ARCHIVE = "archive"
_ALIGNMENT = 64
# Entries above this size get zip64 local headers. Python's zipfile switches on its own at
# 1.05 * size > 2 GiB; forcing it from 1 GiB up makes the header length (hence the padding)
# known before the header is written, whatever the exact threshold.
_ZIP64_FROM = 1 << 30
_WRITE_CHUNK = 16 << 20  # bytes per write: keeps the per-entry CRC pass streaming
_PICKLE_BATCH = 1000  # dict items per MARK ... SETITEMS, as pickle batches them

# torch dtype name -> the typed storage class torch.save names for it (rebuilt with v2); the
# dtypes missing here are saved on untyped storages and rebuilt with v3.
_STORAGE_OF = {dtype: storage for storage, dtype in _TYPED_STORAGES.items()}


class _Global(NamedTuple):
    """A Python global named in the pickle (``GLOBAL module\\nname``); never imported here."""

    module: str
    name: str


class _Reduce(NamedTuple):
    """``func(*args)`` at unpickling time (``REDUCE``)."""

    func: _Global
    args: tuple


class _PersistentId(NamedTuple):
    """An object the unpickler's ``persistent_load`` supplies (``BINPERSID``): a storage."""

    pid: tuple


_ORDERED_DICT = _Global("collections", "OrderedDict")


class _PickleWriter:
    """A protocol-2 pickle of strings, ints, bools, tuples, dicts and the records above.

    The opcodes are written here rather than by ``pickle.Pickler`` because the Pickler imports
    every global it writes to check it, and torch's globals must be named without torch.
    Globals and strings are memoized (BINPUT/BINGET), as the Pickler does.
    """

    def __init__(self) -> None:
        self._out = io.BytesIO()
        self._memo: dict[tuple, int] = {}
        self._out.write(pickle.PROTO + b"\x02")

    def getvalue(self) -> bytes:
        return self._out.getvalue() + pickle.STOP

    def save(self, obj: object) -> None:
        write = self._out.write
        if isinstance(obj, bool):
            write(pickle.NEWTRUE if obj else pickle.NEWFALSE)
        elif isinstance(obj, int):
            self._save_int(obj)
        elif isinstance(obj, str):
            if not self._recall(("str", obj)):
                data = obj.encode("utf-8", "surrogatepass")
                write(pickle.BINUNICODE + struct.pack("<I", len(data)) + data)
                self._remember(("str", obj))
        elif isinstance(obj, _Global):
            if not self._recall(obj):
                write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("ascii"))
                self._remember(obj)
        elif isinstance(obj, _Reduce):
            self.save(obj.func)
            self.save(obj.args)
            write(pickle.REDUCE)
        elif isinstance(obj, _PersistentId):
            self.save(obj.pid)
            write(pickle.BINPERSID)
        elif isinstance(obj, tuple):
            if not obj:
                write(pickle.EMPTY_TUPLE)
                return
            if len(obj) > 3:
                write(pickle.MARK)
            for item in obj:
                self.save(item)
            write(
                (pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3)[len(obj) - 1]
                if len(obj) <= 3
                else pickle.TUPLE
            )
        elif isinstance(obj, dict):
            # An OrderedDict pickles as OrderedDict() followed by its items, like its __reduce__.
            if isinstance(obj, collections.OrderedDict):
                self.save(_Reduce(_ORDERED_DICT, ()))
            else:
                write(pickle.EMPTY_DICT)
            items = list(obj.items())
            for start in range(0, len(items), _PICKLE_BATCH):
                write(pickle.MARK)
                for key, value in items[start : start + _PICKLE_BATCH]:
                    self.save(key)
                    self.save(value)
                write(pickle.SETITEMS)
        else:
            raise TypeError(f"internal: cannot pickle a {type(obj).__name__}")

    def _save_int(self, n: int) -> None:
        if 0 <= n < 1 << 8:
            self._out.write(pickle.BININT1 + bytes([n]))
        elif 0 <= n < 1 << 16:
            self._out.write(pickle.BININT2 + struct.pack("<H", n))
        elif -(1 << 31) <= n < 1 << 31:
            self._out.write(pickle.BININT + struct.pack("<i", n))
        else:  # two's complement, little-endian, as pickle.encode_long
            data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
            self._out.write(pickle.LONG1 + bytes([len(data)]) + data)

    def _remember(self, key: tuple) -> None:
        index = self._memo[key] = len(self._memo)
        self._out.write(
            pickle.BINPUT + bytes([index])
            if index < 256
            else pickle.LONG_BINPUT + struct.pack("<I", index)
        )

    def _recall(self, key: tuple) -> bool:
        index = self._memo.get(key)
        if index is not None:
            self._out.write(
                pickle.BINGET + bytes([index])
                if index < 256
                else pickle.LONG_BINGET + struct.pack("<I", index)
            )
        return index is not None


def _tensor_call(array: np.ndarray, dtype: str, storage_key: str) -> _Reduce:
    """The ``_rebuild_tensor_v2``/``v3`` call torch.save pickles for a contiguous tensor."""
    storage = _STORAGE_OF.get(dtype)
    # torch counts a typed storage's size in elements and an untyped one's in bytes
    storage_type, numel = (
        (_Global("torch", storage), array.size)
        if storage
        else (_Global("torch.storage", "UntypedStorage"), array.nbytes)
    )
    pid = _PersistentId(("storage", storage_type, storage_key, "cpu", numel))
    hooks = _Reduce(_ORDERED_DICT, ())  # the (empty) backward hooks
    args = (pid, 0, tuple(array.shape), _contiguous_strides(array.shape), False, hooks)
    if storage:
        return _Reduce(_Global("torch._utils", "_rebuild_tensor_v2"), args)
    return _Reduce(_Global("torch._utils", "_rebuild_tensor_v3"), (*args, _Global("torch", dtype)))


def _writable_array(path: str, key: object, value: object) -> tuple[np.ndarray, str]:
    """``value`` as a little-endian C-contiguous array (copied only if it is not one), and the
    torch name of its dtype; a VidaxError naming the file and key for anything torch.save
    could not have written."""
    if type(key) is not str:
        raise VidaxError(f"{path}: cannot write the state dict key {_show(key)}: keys are strings.")
    array = np.asarray(value, order="C")
    name = array.dtype.name
    if name not in _TORCH_DTYPES:
        raise VidaxError(
            f"{path}: cannot write tensor {key!r}: numpy dtype {array.dtype} has no torch "
            f"counterpart vidax writes (supported: {', '.join(_TORCH_DTYPES)})."
        )
    if array.dtype != _TORCH_DTYPES[name]:  # a big-endian array: torch stores little-endian
        array = array.astype(_TORCH_DTYPES[name])
    return array, name


def save_pth(
    path: str | os.PathLike, tensors: Mapping[str, np.ndarray], *, wrapper: str | None = None
) -> None:
    """Write ``tensors`` as ``torch.save(state_dict, path)`` would, without torch.

    ``tensors``: name -> numpy array (or anything ``np.asarray`` takes) in any dtype vidax reads
    (float64/32/16, bfloat16 and float8 e4m3fn/e5m2 through ``ml_dtypes``, signed and unsigned
    ints, bool), saved in the given order as an ``OrderedDict``, each as a contiguous tensor
    (a non-contiguous array is copied first). Keys whose values are the same array object share
    one storage, as torch.save shares the storage of tied weights. ``wrapper="module"`` nests
    the dict one level down, ``{"module": state_dict}``, as HunyuanVideo's ``.pt`` files do; a
    key path such as ``"model/module"`` nests it deeper, as ``open_checkpoint(wrapper=)`` reads it.

    The file appears atomically: it is written (and fsynced) under a temporary name in the
    target's folder and then renamed over ``path``, so an interrupted write leaves nothing at
    ``path`` (and a previous file there untouched).
    """
    target = os.fspath(path)
    if wrapper is not None and (type(wrapper) is not str or "" in wrapper.split("/")):
        raise VidaxError(f"{target}: wrapper={wrapper!r} is not a key path such as 'module'.")
    state: collections.OrderedDict = collections.OrderedDict()
    storages: list[np.ndarray] = []
    by_id: dict[int, str] = {}  # id(value) -> storage key
    values = []  # keeps every value alive while ids are compared
    for key, value in tensors.items():
        array, dtype = _writable_array(target, key, value)
        values.append(value)
        storage_key = by_id.get(id(value))
        if storage_key is None:
            storage_key = str(len(storages))
            storages.append(array)
            by_id[id(value)] = storage_key
        state[key] = _tensor_call(array, dtype, storage_key)
    top: dict = state
    for part in reversed(wrapper.split("/") if wrapper is not None else []):
        top = {part: top}
    pickler = _PickleWriter()
    pickler.save(top)
    data_pkl = pickler.getvalue()

    folder, name = os.path.split(os.path.abspath(target))
    temporary = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
    # os.open with 0o666 honours the umask, as torch.save's open() does (mkstemp would not)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            _write_archive(file, data_pkl, storages)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def _write_archive(file, data_pkl: bytes, storages: list[np.ndarray]) -> None:
    """The zip archive's records, in the order torch.save writes them."""
    crcs = []
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:

        def add(record: str, data: bytes | np.ndarray) -> None:
            crcs.append(_add_aligned(archive, f"{_ARCHIVE}/{record}", data))

        add("data.pkl", data_pkl)
        add(".format_version", b"1")
        add(".storage_alignment", str(_ALIGNMENT).encode())
        add("byteorder", b"little")
        for key, array in enumerate(storages):
            add(f"data/{key}", array)
        add("version", b"3\n")
        # torch: a random 64-bit number and a 64-bit combination of the records' CRC-32s,
        # 20 digits each; nothing reads it back but torch.load's own bookkeeping.
        combined = 0
        for crc in crcs:
            combined = (combined * 0x100000001B3 ^ crc) % (1 << 64)
        serial = f"{int.from_bytes(os.urandom(8), 'little'):020d}{combined:020d}"
        add(".data/serialization_id", serial.encode())


def _add_aligned(archive: zipfile.ZipFile, name: str, data: bytes | np.ndarray) -> int:
    """Store one entry with its data 64-byte aligned in the file; return its CRC-32."""
    if isinstance(data, np.ndarray):
        data = data.reshape(-1).view(np.uint8)  # the raw bytes, without copying
    view = memoryview(data)
    size = view.nbytes
    zip64 = size > _ZIP64_FROM
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    # local header: 30 fixed bytes, the name, our extra field (4 + padding), zip64's (20)
    start = archive.fp.tell() + 30 + len(name.encode("utf-8")) + 4 + (20 if zip64 else 0)
    padding = -start % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
    with archive.open(info, "w", force_zip64=zip64) as entry:
        if archive.fp.tell() % _ALIGNMENT:
            raise VidaxError(f"internal: zip entry {name} is not {_ALIGNMENT}-byte aligned")
        for begin in range(0, size, _WRITE_CHUNK):
            entry.write(view[begin : begin + _WRITE_CHUNK])
    return info.CRC
