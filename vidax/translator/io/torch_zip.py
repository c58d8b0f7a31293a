"""The reader of the zip archives ``torch.save`` writes (``.pth`` / ``.pt``).

``data.pkl`` goes through a restricted unpickler whose only reachable callables are the inert
stand-ins in ``_ALLOWED_GLOBALS`` for what ``torch.save`` writes for a state dict: no code from a
file ever runs and torch is never imported. Reading is bounded in work and memory: the zip's
directory is capped before zipfile parses it, ``_scan_pickle`` checks the whole pickle (opcode and
object counts, memo indices, dict keys) before anything is unpickled, and ``_ExtrasWalk`` visits a
shared object once. Storages are memory-mapped straight out of their zip entries, which
``torch.save`` stores uncompressed (a compressed entry is refused rather than inflated).
``_select_state_dict`` finds the state dict inside a training checkpoint's wrappers.
"""

from __future__ import annotations

import array
import collections
import io
import math
import pickle
import pickletools
import re
import struct
import zipfile
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from vidax.errors import CheckpointError
from vidax.translator.io.base import (
    _TORCH_DTYPES,
    _TYPED_STORAGES,
    _V3_DTYPES,
    Checkpoint,
    TensorRef,
    _contiguous_strides,
    _MappedFile,
    _ReadCounter,
    _show,
    _zip_directory_size,
)

_MAX_TENSOR_BYTES = 2**62  # beyond any real tensor; keeps numpy's index arithmetic in int64
_MAX_NDIM = 64  # numpy's limit (NPY_MAXDIMS)
# The zip's central directory, which zipfile parses whole into ZipInfo objects (~500 bytes and a
# few microseconds each): torch.save writes ~100 bytes a storage, so this admits ~150k storages.
_MAX_ZIP_DIRECTORY = 16 * 2**20
_MAX_EXTRAS_DEPTH = 64  # nesting of the non-tensor entries of a pth state dict


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
    if len(shape) > _MAX_NDIM:
        raise _Malformed(f"a tensor has {len(shape)} dimensions, more than {_MAX_NDIM}")
    if any(n >= _MAX_TENSOR_BYTES for n in (offset, *shape, *strides)):  # before any product
        raise _Malformed(f"size {_show(shape)}, stride or offset is impossibly large")
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


def _ordered_dict(*args) -> collections.OrderedDict:
    """`collections.OrderedDict`, as torch.save's pickles call it: with no arguments (the items
    follow by SETITEMS, whose keys ``_scan_pickle`` has checked)."""
    if args:
        raise TypeError("OrderedDict is called with arguments; torch.save's pickles pass none")
    return collections.OrderedDict()


# Everything a torch.save'd state dict's pickle names, and the inert stand-in each resolves to. Any
# other global is refused: these objects are the only callables a pickle can reach.
_ALLOWED_GLOBALS: dict[tuple[str, str], object] = {
    # state dicts (with BUILD setting their `_metadata`) and the empty backward-hook dicts
    ("collections", "OrderedDict"): _Rebuilder(_ordered_dict),
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


# ------------------------------------------------------------------- the bounded pickle reader

# What reading one data.pkl may cost, each limit far beyond what torch.save writes: per tensor it
# writes ~30 opcodes, ~110 bytes and ~8 objects (the storage id, size, stride and argument tuples,
# the empty backward-hook OrderedDict, the rebuild calls). A 14B DiT has 1-2k tensors, an LLM shard
# a few thousand, a training checkpoint with EMA and two Adam moments ~4x its model's; the limits
# admit ~150k tensors in one file, while the worst pickle within them costs a few seconds and a few
# hundred MB (each opcode makes at most one object, of at most a few hundred bytes).
_MAX_PICKLE_BYTES = 128 * 2**20
_MAX_PICKLE_OPCODES = 5_000_000
_MAX_PICKLE_OBJECTS = 1_250_000  # containers and calls: tuples, lists, dicts, sets, REDUCE ...
# The state dict's other entries as a tree (a shared object counted at each reference): real ones
# are a few numbers and strings, an optimizer's state a few entries per tensor.
_MAX_EXTRAS_NODES = 5_000_000

# What the scan knows of a value on the pickle's stack: whether it is a safe dict key (str, bytes,
# bool, None, float, an int of at most 7 bytes), else what it is, for the message.
_KEY, _BIG_INT, _TUPLE, _LIST, _DICT, _SET, _FROZENSET, _OBJECT = range(1, 9)
_KINDS = ("", "", "an int of more than 55 bits", "a tuple", "a list", "a dict", "a set",
          "a frozenset", "an object")  # fmt: skip
# How an opcode's argument is laid out (from pickletools' description of each opcode): none, a
# fixed width, a length of that width then the data, a line, two lines.
_NO_ARG, _FIXED, _SIZED, _LINE, _LINES = range(5)
_SIZE_WIDTHS = {
    getattr(pickletools, f"TAKEN_FROM_ARGUMENT{n}"): int(n[0]) for n in "1 4 4U 8U".split()
}
# What each opcode does to the stack, and the action's parameter: for _PUSH the kind pushed; for
# _POP_N (items popped, the kind pushed or None to leave the item below them on top); for
# _POP_MARK (the kind pushed or None; which of the items are keys: 0 none, 1 all, 2 every other
# one; whether the item below the mark is the container they go into).
_PUSH, _INT, _POP_N, _POP_MARK, _SETITEM, _GET, _PUT, _POP, _DUP, _MARK, _STOP, _EXT = range(1, 13)
_SCALARS = "BININT BININT1 BININT2 STRING BINSTRING SHORT_BINSTRING BINBYTES SHORT_BINBYTES "
_SCALARS += "BINBYTES8 UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8 FLOAT BINFLOAT NONE "
_SCALARS += "NEWTRUE NEWFALSE"
_ACTIONS = {
    **dict.fromkeys(_SCALARS.split(), (_PUSH, _KEY)),
    **dict.fromkeys(("INT", "LONG", "LONG1", "LONG4"), (_INT, None)),
    **dict.fromkeys(("GLOBAL", "PERSID", "NEXT_BUFFER", "BYTEARRAY8"), (_PUSH, _OBJECT)),
    **{f"EMPTY_{k.upper()}": (_PUSH, v) for k, v in (("list", _LIST), ("tuple", _TUPLE))},
    **{f"EMPTY_{k.upper()}": (_PUSH, v) for k, v in (("dict", _DICT), ("set", _SET))},
    **{"APPEND": (_POP_N, (1, None)), "BUILD": (_POP_N, (1, None))},
    **{f"TUPLE{n}": (_POP_N, (n, _TUPLE)) for n in (1, 2, 3)},
    **dict.fromkeys(("REDUCE", "STACK_GLOBAL", "NEWOBJ"), (_POP_N, (2, _OBJECT))),
    **{"NEWOBJ_EX": (_POP_N, (3, _OBJECT)), "BINPERSID": (_POP_N, (1, _OBJECT))},
    "READONLY_BUFFER": (_POP_N, (1, _OBJECT)),
    **{"TUPLE": (_POP_MARK, (_TUPLE, 0, False)), "LIST": (_POP_MARK, (_LIST, 0, False))},
    **{"DICT": (_POP_MARK, (_DICT, 2, False)), "FROZENSET": (_POP_MARK, (_FROZENSET, 1, False))},
    **dict.fromkeys(("INST", "OBJ"), (_POP_MARK, (_OBJECT, 0, False))),
    **{"POP_MARK": (_POP_MARK, (None, 0, False)), "APPENDS": (_POP_MARK, (None, 0, True))},
    **{"SETITEMS": (_POP_MARK, (None, 2, True)), "ADDITEMS": (_POP_MARK, (None, 1, True))},
    **{"SETITEM": (_SETITEM, None), "POP": (_POP, None), "DUP": (_DUP, None)},
    **{"MARK": (_MARK, None), "STOP": (_STOP, None)},
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), (_GET, None)),
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"), (_PUT, None)),
    **{"PROTO": (None, None), "FRAME": (None, None)},  # frames: only a length, checked on loading
    # copyreg's process-wide extension registry, looked up without find_class
    **dict.fromkeys(("EXT1", "EXT2", "EXT4"), (_EXT, None)),
}
_OPCODE_TABLE: list[tuple | None] = [None] * 256  # an opcode not in _ACTIONS is refused
for _op in pickletools.opcodes:
    if _op.name in _ACTIONS:
        if _op.arg is None:
            _layout = (_NO_ARG, 0)
        elif _op.arg.n >= 0:
            _layout = (_FIXED, _op.arg.n)
        elif _op.arg.n == pickletools.UP_TO_NEWLINE:
            _layout = (_LINES if _op.arg.name == "stringnl_noescape_pair" else _LINE, 0)
        else:
            _layout = (_SIZED, _SIZE_WIDTHS[_op.arg.n])
        _OPCODE_TABLE[ord(_op.code)] = (_op.name, *_layout, *_ACTIONS[_op.name])


_LIMITS = (
    ". vidax bounds what reading a pickle may cost; torch.save writes ~30 opcodes and ~8 objects "
    "a tensor, so real checkpoints stay far below the limits"
)


class _Refused(ValueError):
    """What the pre-scan of a pickle found; the caller adds the file's name."""


def _scan_pickle(data: bytes) -> tuple[int, int]:
    """Check, before any of it is unpickled, that ``data`` costs bounded work and memory; return
    its counts of opcodes and objects.

    One pass over the opcodes that tracks, for each stack and memo entry, only what kind of value
    it holds, as the C unpickler's stack machine would (CPython's Modules/_pickle.c: marks kept
    apart, nothing below the topmost mark reachable). It refuses (``_Refused``) a stream that is
    truncated or malformed, longer than the opcode and object limits, whose memo indices are not
    the small ones a pickler writes (the C unpickler sizes its memo array by the largest index), or
    that hashes anything but a str, bytes, bool, None, float or small int as a dict key or set
    element: a tuple's hash walks all it holds (shared references make that exponential), and ints
    chosen to share a hash make each insertion compare with all the others.
    """
    size, pos, ops, objects = len(data), 0, 0, 0
    stack, memo, memo_len = bytearray(), bytearray(), 0
    marks, fence = array.array("q"), 0  # the stack's height at each open MARK; the topmost

    def fail(problem: str, malformed: bool = True, why: str = "") -> NoReturn:
        where = f"{problem} (opcode {ops:,} at byte {pos:,}){why}"
        raise _Refused(f"is malformed: {where}" if malformed else where)

    def check_keys(kinds: bytearray, name: str) -> None:
        if kinds.count(_KEY) != len(kinds):
            kind = next(k for k in kinds if k != _KEY)
            fail(
                f"uses {_KINDS[kind]} as a dict key or set element, in {name}",
                malformed=False,
                why=". torch.save keys state dicts by strings; vidax refuses other keys, since "
                "hashing them can take unbounded time (a tuple of shared references, ints "
                "chosen to collide)",
            )

    while True:
        if pos >= size:
            fail("the stream ends before its STOP opcode")
        entry = _OPCODE_TABLE[data[pos]]
        if entry is None:
            fail(f"unknown opcode byte {data[pos]:#04x}")
        name, arg, width, action, param = entry
        ops += 1
        if ops > _MAX_PICKLE_OPCODES:
            fail(f"runs more than the {_MAX_PICKLE_OPCODES:,} opcodes vidax allows", False, _LIMITS)
        start = pos + 1
        if arg == _NO_ARG:
            end = start
        elif arg == _FIXED:
            end = start + width
        elif arg == _SIZED:
            end = start + width + int.from_bytes(data[start : start + width], "little")
        else:
            end = data.find(b"\n", start)
            if arg == _LINES and end >= 0:
                end = data.find(b"\n", end + 1)
            if end < 0:
                fail(f"{name}'s line has no end")
            end += 1
        if end > size:
            fail(f"{name}'s argument runs past the end of the stream")
        height = len(stack)
        if action == _PUSH:
            stack.append(param)
            objects += param != _KEY
        elif action == _GET or action == _PUT:
            if arg == _LINE:
                text = data[start : end - 1]
                if len(text) > 18 or not text.strip().isdigit():
                    fail(f"{name} {text[:20]!r} is not a memo index")
                index = int(text)
            else:  # MEMOIZE takes the next free index
                index = int.from_bytes(data[start:end], "little") if arg == _FIXED else memo_len
            if action == _GET:
                if index >= len(memo) or not memo[index]:
                    fail(f"{name} {index} reads an empty memo entry")
                stack.append(memo[index])
            else:
                if height <= fence:
                    fail(f"{name} finds no item to store")
                if index > ops:
                    fail(f"{name} stores at memo index {index:,}, past the {ops:,} opcodes so far")
                if index >= len(memo):
                    memo.extend(bytes(index + 1 - len(memo)))
                memo_len += not memo[index]
                memo[index] = stack[-1]
        elif action == _POP_N:
            count, kind = param
            if height - count - (kind is None) < fence:
                fail(f"{name} finds too few items on the stack")
            del stack[height - count :]
            if kind is not None:
                stack.append(kind)
                objects += 1
        elif action == _POP_MARK:
            kind, keys, into = param
            if not marks:
                fail(f"{name} finds no MARK")
            mark = marks.pop()
            fence = marks[-1] if marks else 0
            if into and mark - 1 < (0 if name == "ADDITEMS" else fence):
                fail(f"{name} finds nothing to add its items to")
            if keys == 2:
                if (height - mark) % 2:
                    fail(f"{name} has an odd number of items")
                check_keys(stack[mark::2], name)
            elif keys == 1:
                check_keys(stack[mark:], name)
            if name == "OBJ" and height == mark:
                fail("OBJ finds no class")
            del stack[mark:]
            if kind is not None:
                stack.append(kind)
                objects += 1
        elif action == _INT:  # text: at most 18 digits; LONG1/LONG4: at most 7 bytes
            digits = end - start - 1 if arg == _LINE else end - start - width
            stack.append(_KEY if digits <= (18 if arg == _LINE else 7) else _BIG_INT)
        elif action == _SETITEM:
            if height - 3 < fence:
                fail("SETITEM finds too few items on the stack")
            check_keys(stack[-2:-1], name)
            del stack[-2:]
        elif action == _MARK:
            marks.append(height)
            fence = height
        elif action == _POP:
            if marks and marks[-1] == height:  # POP of a MARK, as the C unpickler does it
                marks.pop()
                fence = marks[-1] if marks else 0
            elif height <= fence:
                fail("POP finds nothing to pop")
            else:
                stack.pop()
        elif action == _DUP:
            if height <= fence:
                fail("DUP finds nothing to copy")
            stack.append(stack[-1])
        elif action == _STOP:
            if height <= fence:
                fail("STOP finds no object to return")
            return ops, objects
        elif action == _EXT:
            raise _Refused(f"uses the {name} opcode, which torch.save never writes")
        if objects > _MAX_PICKLE_OBJECTS:
            fail(
                f"makes more than the {_MAX_PICKLE_OBJECTS:,} objects vidax allows", False, _LIMITS
            )
        pos = end


def _unpickle(path: str, data: bytes, load_storage: Callable[[object], _Storage]) -> object:
    try:
        _scan_pickle(data)
    except _Refused as e:
        raise CheckpointError(path, f"its pickle (data.pkl) {e}.") from None
    try:
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
        directory = _zip_directory_size(source)
        if directory > _MAX_ZIP_DIRECTORY:
            raise CheckpointError(
                path,
                f"its zip directory holds up to {directory:,} bytes, more than the "
                f"{_MAX_ZIP_DIRECTORY // 2**20} MiB vidax reads (torch.save writes ~100 bytes a "
                "storage).",
            )
        try:
            # the descriptor already checked to be a regular file, not the path once more
            with zipfile.ZipFile(source._file) as archive:
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
    pickle_name = f"{archive.prefix}/data.pkl"
    if archive.span(pickle_name)[1] > _MAX_PICKLE_BYTES:  # checked before anything is read
        raise CheckpointError(
            path,
            f"its pickle (data.pkl) has {archive.span(pickle_name)[1]:,} bytes, more than the "
            f"{_MAX_PICKLE_BYTES // 2**20} MiB vidax reads (torch.save writes ~150 a tensor).",
        )
    top = _unpickle(path, archive.read(pickle_name), _storage_loader(archive))
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

    tensors, extras, walk = {}, {}, _ExtrasWalk(make_ref)
    for key, value in state.items():
        if type(key) is not str:
            raise CheckpointError(
                path, f"the state dict has a key {_show(key)} that is not a string."
            )
        if type(value) is _TensorRecord:
            tensors[key] = make_ref(key, value)
            continue
        try:
            extras[key] = walk.rebuild(value, key)
        except _Malformed as e:
            raise CheckpointError(path, f"the state dict's entry {_show(key)} is {e}.") from None
    if unsupported:
        shown = ", ".join(unsupported[:20])
        more = f" and {len(unsupported) - 20:,} more" if len(unsupported) > 20 else ""
        raise CheckpointError(
            path,
            f"vidax does not support these tensors' dtypes yet: {shown}{more}. "
            f"Supported: {', '.join(_TORCH_DTYPES)}.",
        )
    return Checkpoint(given, "pth", tensors, sources=[source], counter=counter, extras=extras)


_CONTAINERS = {list, tuple, dict, collections.OrderedDict}
_TOO_MANY = (
    f"too large: the entries besides the tensors hold more than {_MAX_EXTRAS_NODES:,} values "
    "once each shared reference is counted where it appears (a pickle can describe 10**30 of "
    "them in a few hundred bytes)"
)


class _ExtrasWalk:
    """The state dict's other entries, each tensor in their lists/tuples/dicts made a TensorRef
    named by its place.

    What a pickle builds is a graph, not a tree: one object can be referenced from many places, so
    a few hundred bytes describe a tree of 10**30 nodes (lists of lists, each referencing the one
    before many times). Each container is walked once, however often it is referenced (a copy is
    made only of one holding tensors, and a shared one stays shared); its size as a tree is added
    up at each reference: past ``_MAX_EXTRAS_NODES`` in all, nesting past ``_MAX_EXTRAS_DEPTH``,
    or a container inside itself -> ``_Malformed``.
    """

    def __init__(self, make_ref: Callable):
        self.make_ref = make_ref
        self.done: dict[int, tuple[object, int]] = {}  # id -> (result, nodes as a tree)
        self.inside: set[int] = set()  # ids of the containers being walked
        self.nodes = 0

    def rebuild(self, value: object, name: str) -> object:
        if type(value) is _TensorRecord:
            result, nodes = self.make_ref(name, value), 1
        elif type(value) in _CONTAINERS:
            result, nodes = self._walk(value, name, 0)
        else:
            result, nodes = value, 1
        self.nodes += nodes
        if self.nodes > _MAX_EXTRAS_NODES:
            raise _Malformed(_TOO_MANY)
        return result

    @staticmethod
    def _name(place: tuple | str) -> str:
        parts = []
        while type(place) is tuple:  # (the parent's place, key or index, whether an index)
            place, key, index = place
            parts.append(f"[{key}]" if index else f".{key if type(key) is str else _show(key)}")
        return place + "".join(reversed(parts))

    def _walk(self, value: Any, place: tuple | str, depth: int) -> tuple[object, int]:
        key, done, make_ref, containers = id(value), self.done, self.make_ref, _CONTAINERS
        if key in done:
            return done[key]
        if key in self.inside:
            raise _Malformed("a container that contains itself")
        if depth == _MAX_EXTRAS_DEPTH:
            raise _Malformed(f"nested more than {_MAX_EXTRAS_DEPTH} levels deep")
        self.inside.add(key)
        nodes, changes, index = 1 + len(value), [], type(value) in (list, tuple)
        for k, v in enumerate(value) if index else value.items():
            kind = type(v)
            if kind is _TensorRecord:
                changes.append((k, make_ref(self._name((place, k, index)), v)))
            elif kind in containers:
                result, n = (
                    done[id(v)] if id(v) in done else self._walk(v, (place, k, index), depth + 1)
                )
                if result is not v:
                    changes.append((k, result))
                nodes += n - 1
        if nodes > _MAX_EXTRAS_NODES:
            raise _Malformed(_TOO_MANY)
        self.inside.discard(key)
        result = value
        if changes:
            result = type(value)(value) if not index else list(value)
            for k, v in changes:
                result[k] = v
            result = tuple(result) if type(value) is tuple else result
        done[key] = result, nodes
        return result, nodes


# Keys under which training code nests a model's state dict, in the order "auto" tries them; the EMA
# copies are taken only when no other state dict is present (pass wrapper="ema" to choose them).
_MODEL_KEYS = ("module", "state_dict", "model", "model_state_dict", "net", "network")
_EMA_KEYS = ("ema", "ema_model", "model_ema", "ema_state_dict", "net_ema")


def _tensor_dict_test() -> Callable[[object], bool]:
    """A test "is this a dict holding tensors", run once per dict however often it is asked."""
    known: dict[int, bool] = {}

    def holds_tensors(value: object) -> bool:
        if not isinstance(value, dict):
            return False
        if id(value) not in known:
            known[id(value)] = any(type(v) is _TensorRecord for v in value.values())
        return known[id(value)]

    return holds_tensors


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
    _holds_tensors = _tensor_dict_test()  # values shared by many keys are looked at once

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
        elsewhere = [_show(k) for k, v in top.items() if _holds_tensors(v)][:10]
        if elsewhere and not _holds_tensors(top):
            raise CheckpointError(
                path,
                f"no state dict under a known key ({', '.join(_MODEL_KEYS + _EMA_KEYS)}); tensors "
                f"were found under {', '.join(elsewhere)}. Pass wrapper= naming one.",
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
