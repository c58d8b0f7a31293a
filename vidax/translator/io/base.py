"""What every checkpoint reader shares: the dtype tables, memory-mapped files (opened only from
regular files), bounded reads of small files and of a zip's directory, the read counter,
:class:`TensorRef` and :class:`Checkpoint`, and two small helpers (bounded reprs for error
messages, torch's contiguous strides)."""

from __future__ import annotations

import math
import mmap
import os
import reprlib
import stat
import struct
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from vidax.errors import CheckpointError, VidaxError

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
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
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


# ------------------------------------------------------------------------------------ mapped files


class _MappedFile:
    """One checkpoint file, memory-mapped read-only for the lifetime of its Checkpoint.

    Headers are read with ``pread``, not through the map, so opening a checkpoint maps none of its
    pages into the process: only tensor reads do.
    """

    def __init__(self, path: str):
        self.path = path
        self._file = os.fdopen(_open_regular_file(path), "rb")
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


_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: str, mode: int) -> CheckpointError:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    link = f" (a symbolic link to {os.path.realpath(path)!r})" if os.path.islink(path) else ""
    why = (
        "a checkpoint file was expected here"
        if stat.S_ISDIR(mode)
        else "reading a pipe, device or socket could block or never end"
    )
    return CheckpointError(
        path,
        f"it is {kind}{link}, not a regular file. vidax reads checkpoints only from regular "
        f"files (and folders of them): {why}.",
    )


def regular_file(path, what: str) -> Path:
    """``path`` (a ``Path``) when it is a regular file, links followed; else a VidaxError naming
    it and what it is. For the small inputs read whole (a config, a tokenizer file, a noise
    array): a named pipe or a device there would block the read or never end."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise VidaxError(f"{path}: no such {what}") from None
    except (OSError, ValueError) as e:
        raise VidaxError(f"{path}: the {what} cannot be read ({e})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
        raise VidaxError(f"{path}: the {what} is {kind}, not a regular file; vidax reads "
                         "inputs only from regular files (a pipe or device could block the "
                         "read or never end)")
    return path


def _open_regular_file(path: str) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (symbolic links are
    followed: the Hugging Face cache links snapshot files to blobs elsewhere).

    Anything else is refused at once with a CheckpointError: opening a named pipe for reading
    blocks until some writer appears, and a device or socket need not ever end. The type is
    checked before opening, and again on the open descriptor, which is opened non-blocking so
    that a path swapped for a pipe in between cannot block either.
    """
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        if os.path.islink(path):
            target = os.path.realpath(path)
            raise CheckpointError(
                path, f"it is a symbolic link to {target!r}, which does not exist."
            ) from None
        raise CheckpointError(path, "the file does not exist.") from None
    except (OSError, ValueError) as e:  # permissions, a NUL byte in the name, ...
        raise CheckpointError(path, f"the file cannot be opened: {e}.") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the two checks
            raise _not_regular(path, mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_small_file(path: str, limit: int, what: str) -> bytes:
    """The whole of a small regular file (a shard index, ...), refused past ``limit`` bytes."""
    with os.fdopen(_open_regular_file(path), "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise CheckpointError(path, f"{what} cannot be read: {e}.") from None
    if len(data) > limit:
        raise CheckpointError(path, f"{what} is larger than the {limit // 1_000_000} MB limit.")
    return data


def _zip_directory_size(source: _MappedFile) -> int:
    """The most bytes of central directory that zipfile could parse: the largest size declared by
    any end record in the file's tail, where zipfile looks for them (or by a zip64 record a
    locator there points to), and at most the file itself."""
    start = max(source.size - (1 << 16) - 22 - 20 - 56, 0)  # a comment, the zip64 records
    tail, sizes = source.read(start, source.size - start), [0]
    at = tail.find(b"PK\x05\x06")
    while 0 <= at <= len(tail) - 16:
        sizes.append(struct.unpack_from("<I", tail, at + 12)[0])
        at = tail.find(b"PK\x05\x06", at + 1)
    at = tail.find(b"PK\x06\x07")
    while 0 <= at <= len(tail) - 16:
        for offset in (start + at - 56, struct.unpack_from("<Q", tail, at + 8)[0]):
            record = source.read(offset, 56) if 0 <= offset < source.size else b""
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                sizes.append(struct.unpack_from("<Q", record, 40)[0])
        at = tail.find(b"PK\x06\x07", at + 1)
    return min(max(sizes), source.size)


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


# ----------------------------------------------------------------------------------------- helpers

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 3


def _show(value: object) -> str:
    """A short repr for error messages, bounded in depth and length even for hostile objects
    (an int too long for ``repr``, an object whose ``repr`` fails: its type's name instead)."""
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<a {type(value).__name__}>"


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides in elements, as torch computes them (size-1 dims take the next stride)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
