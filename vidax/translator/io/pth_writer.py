"""``save_pth``: the zip archive ``torch.save(state_dict, path)`` writes, written without torch
(used by the demo and the tests; nothing on the load path imports it)."""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from vidax.errors import VidaxError
from vidax.translator.io.base import _TORCH_DTYPES, _TYPED_STORAGES, _contiguous_strides, _show

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
