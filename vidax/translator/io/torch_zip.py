"""The reader of the zip archives ``torch.save`` writes (``.pth`` / ``.pt``).

``data.pkl`` goes through a restricted unpickler whose only reachable callables are the inert
stand-ins in ``_ALLOWED_GLOBALS`` for what ``torch.save`` writes for a state dict: no code from a
file ever runs and torch is never imported. Storages are memory-mapped straight out of their zip
entries, which ``torch.save`` stores uncompressed (a compressed entry is refused rather than
inflated). ``_select_state_dict`` finds the state dict inside a training checkpoint's wrappers.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import pickletools
import re
import struct
import zipfile
from collections.abc import Callable
from typing import Any, NamedTuple

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
)

_MAX_TENSOR_BYTES = 2**62  # beyond any real tensor; keeps numpy's index arithmetic in int64
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
