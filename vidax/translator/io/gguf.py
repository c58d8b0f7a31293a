"""GGUF files -- city96's ComfyUI-GGUF quants of video DiTs -- read lazily.

The header (key/value fields, tensor infos) is parsed by the ``gguf`` package's own
``gguf.GGUFReader`` and quantized blocks are dequantized by ``gguf.quants.dequantize``; vidax
adds no parser or dequantizer of its own, only bounds around them:

* the reader reads the header through a guarded ``_get`` that refuses any read past the end of
  the file (``GGUFReader`` slices its memory map, so a count or length larger than the file
  would otherwise yield empty arrays and loop on them, never advancing) and caps the number of
  header reads, so a hostile or truncated header fails at once instead of hanging or growing;
* every tensor info is checked (a GGML type vidax dequantizes, a row length that is a whole
  number of blocks, its data inside the file) before a ``TensorRef`` is made, and an
  unsupported type is one error naming the file, the tensors and the types.

Conventions taken from city96/ComfyUI-GGUF (``loader.py`` and ``tools/convert.py`` at commit
795e45156ece99afbc3efef911e63fcb46e6a20d, Apache-2.0; rules restated here, no code copied):

* a tensor's PyTorch shape is its GGUF dims reversed (``gguf_sd_loader``:
  ``reversed(tensor.shape)``), unless the KV field ``comfy.gguf.orig_shape.<name>`` gives the
  original shape -- an ARRAY of INT32 since commit c1693d0 (``loader.get_orig_shape``), a
  string "d0, d1, ..." in commit 0aec56e just before it (both 2024-08-25); both are
  honoured. The stored elements are in row-major order of that shape (``convert.py`` reshapes
  with ``data.reshape(n_params // 256, 256)`` before quantizing, so reshaping back is exact);
  the 5-D tensors of Wan/HunyuanVideo are stored whole, in F32, by ``tools/fix_5d_tensors.py``;
* the architecture is the KV field ``general.architecture`` (``GGUFWriter(arch=...)`` in
  ``convert.py``); the names it writes per model are the ``arch`` of its ``Model*`` classes;
  files with no architecture or the names "pig" / "cow" are other tools' files that ComfyUI-GGUF
  loads in a "compatibility mode", telling the model from its keys (``gguf_sd_loader``);
* the types ComfyUI-GGUF dequantizes (``dequant.py`` ``dequantize_functions``, plus the torch
  types F32/F16) are the ones vidax accepts.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import ml_dtypes
import numpy as np

from vidax.errors import CheckpointError
from vidax.translator.io.base import Checkpoint, _MappedFile, _ReadCounter, _show

GGUF_MAGIC = b"GGUF"

#: vidax model_type -> the ``general.architecture`` names city96's tools write for its DiT
#: (``tools/convert.py`` at 795e451: ``ModelWan.arch = "wan"`` -- its keys_detect
#: ``blocks.0.self_attn.norm_q.weight``/``text_embedding.2.weight``/``head.modulation`` match every
#: Wan2.1 and Wan2.2 DiT manifest; ``ModelHyVid.arch = "hyvid"``, whose keys_detect match the
#: HunyuanVideo 1.0 and 1.5 DiT manifests; ``ModelLTXV.arch = "ltxv"``, matching LTX-Video 0.9.8
#: and LTX-2 2.0 (LTX-2.3/2.5 lack ``caption_projection`` and match none of convert.py's
#: classes: a file of theirs from another tool would have to say "ltxv" too);
#: ``CosmosPredict2.arch = "cosmos"``, matching Cosmos-Predict2.5's DiT). The "<type>/<component>"
#: entries are the text-encoder architectures ComfyUI-GGUF loads (``loader.TXT_ARCH_LIST``: UMT5 and
#: T5 files by llama.cpp say "t5" or "t5encoder", Llama ones "llama"). CogVideoX and Cosmos3 have
#: no GGUF architecture there.
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "wan2_1": ("wan",),
    "wan2_2": ("wan",),
    "hunyuan_video": ("hyvid",),
    "hunyuan_video1_5": ("hyvid",),
    "ltx_video": ("ltxv",),
    "ltx2_5": ("ltxv",),
    "cosmos2_5": ("cosmos",),
    "wan2_1/text_encoder": ("t5", "t5encoder"),
    "wan2_2/text_encoder": ("t5", "t5encoder"),
    "t5": ("t5", "t5encoder"),
    "llama": ("llama",),
}

#: Architectures ComfyUI-GGUF reads in compatibility mode (no field: stable-diffusion.cpp; "pig",
#: "cow": other converters), telling the model from the keys: vidax's 1:1 key verification does
#: that before any weight is read, so these pass :func:`check_architecture`.
COMPAT_ARCHITECTURES = ("pig", "cow")

# The stored float types, read as they are (views of the map).
_FLOAT_TYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}
# The block-quantized types ComfyUI-GGUF dequantizes (dequant.py ``dequantize_functions``), all
# of which ``gguf.quants.dequantize`` implements; they read as float32.
QUANT_TYPES = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0",
               "Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS")
SUPPORTED_TYPES = (*_FLOAT_TYPES, *QUANT_TYPES)

# At most this many primitive reads while parsing the header: a DiT's header takes a few
# thousand, a text encoder with a 256k-token vocabulary about a million.
_MAX_HEADER_READS = 1 << 22
# KV arrays longer than this are summarised in ``metadata`` rather than spelled out.
_MAX_LISTED = 4096


class _Bad(Exception):
    """A header read that falls outside the file, or too many of them."""


def _gguf():
    try:
        import gguf
    except ImportError:  # pragma: no cover - a runtime dependency
        raise CheckpointError("gguf", "reading GGUF files needs the `gguf` package "
                              "(pip install 'gguf>=0.19').") from None
    return gguf


def _reader_class():
    """``gguf.GGUFReader`` with the guarded ``_get`` and the tensor-info checks (made once)."""
    global _READER
    if _READER is not None:
        return _READER
    gguf = _gguf()

    class _GuardedReader(gguf.GGUFReader):
        _reads = 0
        _checked: list | None = None

        def _get(self, offset, dtype, count=1, override_order=None):
            self._reads += 1
            if self._reads > _MAX_HEADER_READS:
                raise _Bad(f"the header takes more than {_MAX_HEADER_READS} reads to parse")
            count, size = int(count), len(self.data)
            end = int(offset) + np.dtype(dtype).itemsize * count
            if count < 0 or offset < 0 or end > size:
                raise _Bad(f"the header declares {count} item(s) of {np.dtype(dtype).name} at "
                           f"byte {int(offset)}, past the end of the file ({size} bytes)")
            return super()._get(offset, dtype, count, override_order)

        def _build_tensors(self, start_offs, fields):
            # gguf 0.19 (gguf_reader.py ``_get_tensor_info_field``): each tensor-info field's
            # parts are [name_len, name, n_dims, dims, raw_type, offset].
            self._checked = [_check_info(self, start_offs, f) for f in fields]
            _refuse_unsupported(self, self._checked)
            return super()._build_tensors(start_offs, fields)

    _READER = _GuardedReader
    return _READER


_READER = None


def _check_info(reader, start: int, field) -> tuple[str, int | None, str, int, int]:
    """(name, type id, type name, first byte, byte count) of one tensor info, its data checked
    to lie inside the file; CheckpointError-worthy problems raise ``_Bad``."""
    gguf = _gguf()
    _, name, _, dims, raw_type, offset = field.parts
    name = bytes(name).decode("utf-8", "replace")
    type_id = int(raw_type[0])
    try:
        qtype = gguf.GGMLQuantizationType(type_id)
    except ValueError:
        return name, None, f"unknown type id {type_id}", 0, 0
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    dims = [int(d) for d in dims]
    count = math.prod(dims)
    if dims and dims[0] % block:
        raise _Bad(f"tensor {name!r} ({qtype.name}): its rows of {dims[0]} elements are not a "
                   f"whole number of {block}-element blocks")
    first, nbytes = start + int(offset[0]), count // block * type_size
    if first + nbytes > len(reader.data):
        raise _Bad(f"tensor {name!r} ({qtype.name}, {nbytes} bytes at byte {first}) runs past the "
                   f"end of the file ({len(reader.data)} bytes): the file is truncated")
    return name, type_id, qtype.name, first, nbytes


def _refuse_unsupported(reader, infos) -> None:
    bad = [(name, type_name) for name, _, type_name, _, _ in infos
           if type_name not in SUPPORTED_TYPES]
    if bad:
        types = sorted({t for _, t in bad})
        names = ", ".join(f"{n!r} ({t})" for n, t in bad[:12])
        more = f" and {len(bad) - 12} more" if len(bad) > 12 else ""
        raise CheckpointError(
            reader._vidax_path,
            f"GGUF tensor type(s) {', '.join(types)} are not supported, in {len(bad)} tensor(s): "
            f"{names}{more}. vidax reads {', '.join(SUPPORTED_TYPES)} (the types ComfyUI-GGUF "
            "dequantizes).")


# ------------------------------------------------------------------------------------- opening

def open_gguf(path: str | os.PathLike, counter: _ReadCounter | None = None, *,
              source: _MappedFile | None = None, given: str | None = None) -> Checkpoint:
    """The tensors of a GGUF file as :class:`GGUFTensorRef` objects, nothing read yet.

    ``metadata``: every KV field as a string (strings as they are, numbers and booleans as JSON,
    arrays as JSON lists, those over 4096 items summarised). ``source``: the file already opened
    by ``open_checkpoint`` (it is then owned by the checkpoint); ``given``: the path as the caller
    spelled it, for ``Checkpoint.path``. Raises CheckpointError naming the file for any problem.
    """
    path = os.fspath(path)
    counter = counter if counter is not None else _ReadCounter()
    source = source if source is not None else _MappedFile(path)
    try:
        if source.read(0, 4) != GGUF_MAGIC:
            raise CheckpointError(path, "this is not a GGUF file (it does not start with the "
                                  "magic bytes b'GGUF').")
        reader = _parse(path, source)
        metadata = _metadata(reader)
        tensors = {}
        for tensor, (_, _, type_name, first, nbytes) in zip(reader.tensors, reader._checked):
            stored = tuple(int(d) for d in reversed(tensor.shape.tolist()))
            shape = _orig_shape(path, reader, tensor.name, stored)
            tensors[tensor.name] = GGUFTensorRef(tensor.name, shape, stored, type_name, source,
                                                 first, nbytes, counter)
        del reader
        return Checkpoint(given or path, "gguf", tensors, sources=[source], counter=counter,
                          metadata=metadata)
    except BaseException:
        source.close()
        raise


def _parse(path: str, source: _MappedFile):
    reader_class = _reader_class()
    # GGUFReader maps the file it is given; hand it the descriptor already checked to be a
    # regular file (base._open_regular_file) rather than the path.
    reader = reader_class.__new__(reader_class)
    reader._vidax_path = path
    try:
        reader.__init__(source._file)
    except CheckpointError:
        raise
    except _Bad as e:
        raise CheckpointError(path, f"the GGUF header is corrupt or truncated: {e}.") from None
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, UnicodeDecodeError,
            OSError) as e:
        raise CheckpointError(path, f"the GGUF header cannot be read ({type(e).__name__}: "
                              f"{_show(str(e))}); the file is corrupt or not GGUF.") from None
    if reader.byte_order != "I":
        raise CheckpointError(path, "this GGUF file is big-endian; vidax reads little-endian "
                              "GGUF files only.")
    return reader


def _field_value(field) -> str:
    gguf = _gguf()
    types = field.types
    if types and types[0] == gguf.GGUFValueType.ARRAY:
        if len(field.data) > _MAX_LISTED:
            sub = types[-1].name if len(types) > 1 else "?"
            return f"<array of {len(field.data)} {sub}>"
        values = field.contents()
        return json.dumps(values)
    value = field.contents()
    return value if isinstance(value, str) else json.dumps(value)


def _metadata(reader) -> dict[str, str]:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):        # the reader's own entries: version, counts
            continue
        try:
            out[name] = _field_value(field)
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            raise CheckpointError(reader._vidax_path, f"the GGUF field {name!r} cannot be "
                                  f"decoded ({_show(str(e))}).") from None
    return out


def _orig_shape(path: str, reader, name: str, stored: tuple[int, ...]) -> tuple[int, ...]:
    """``comfy.gguf.orig_shape.<name>`` when the file has it (city96 loader.get_orig_shape),
    checked to hold as many elements as are stored; else the stored (reversed GGUF) shape."""
    gguf = _gguf()
    key = f"comfy.gguf.orig_shape.{name}"
    field = reader.get_field(key)
    if field is None:
        return stored
    try:
        if field.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]:
            shape = tuple(int(v) for v in field.contents())
        elif field.types == [gguf.GGUFValueType.STRING]:  # the form of 0aec56e, before c1693d0
            shape = tuple(int(v) for v in field.contents().split(","))
        else:
            raise ValueError(f"expected an ARRAY of INT32, got {[t.name for t in field.types]}")
    except ValueError as e:
        raise CheckpointError(path, f"the field {key!r} is not a shape: {_show(str(e))}.") from None
    if any(d < 0 for d in shape) or math.prod(shape) != math.prod(stored):
        raise CheckpointError(path, f"the field {key!r} gives shape {shape} to tensor {name!r}, "
                              f"which stores {math.prod(stored)} elements ({stored}).")
    return shape


def check_architecture(ckpt: Checkpoint, model_type: str, component: str | None = None) -> None:
    """Refuse a GGUF file whose ``general.architecture`` is not one city96's tools write for
    ``model_type`` (its DiT, or ``component`` where :data:`ARCHITECTURES` has an entry for
    "<model_type>/<component>"), before any weight is read. Files of other formats pass; so do
    GGUF files in ComfyUI-GGUF's compatibility mode (no architecture, "pig", "cow")."""
    if getattr(ckpt, "format", None) != "gguf":
        return
    found = ckpt.metadata.get("general.architecture")
    if found is None or found in COMPAT_ARCHITECTURES:
        return
    name = f"{model_type}/{component}" if component else model_type
    expected = ARCHITECTURES.get(name) or ARCHITECTURES.get(model_type)
    if expected is None:
        raise CheckpointError(ckpt.path, f"this GGUF file's architecture is {found!r}, and vidax "
                              f"knows no GGUF architecture for {name}.")
    if found not in expected:
        want = " or ".join(repr(e) for e in expected)
        raise CheckpointError(ckpt.path, f"this GGUF file's architecture (general.architecture) "
                              f"is {found!r}, not {want} as a {name} file's would be: it holds "
                              "another model.")


def check_wrapper(path: str, wrapper: str | None) -> None:
    """A GGUF file is one flat set of tensors: a pth ``wrapper`` cannot select in it."""
    if wrapper not in ("auto", None):
        raise CheckpointError(path, f"wrapper={wrapper!r} selects a state dict inside a .pth "
                              "file, but this is a GGUF file, one flat set of tensors; pass "
                              "wrapper='auto' or None.")


# ---------------------------------------------------------------------------------- tensor refs

class GGUFTensorRef:
    """One GGUF tensor, not read yet.

    ``shape`` is PyTorch's order; ``dtype`` what reading gives (float32 for a quantized type, the
    stored dtype for F32/F16/BF16); ``quant`` the GGML type name of a quantized tensor, else None;
    ``ggml_type`` the type name always; ``nbytes`` the stored bytes; ``stored_shape`` the rows as
    stored (reversed GGUF dims). ``read``/``read_slice``/``read_view`` as ``base.TensorRef``'s,
    returning the dequantized values (read-only): float tensors as views of the memory map,
    quantized ones dequantized by ``gguf.quants.dequantize`` -- a slice only over the rows (and
    the blocks of a row) it needs. The read counter counts stored bytes touched, so reading every
    tensor once counts the sum of their ``nbytes``.
    """

    __slots__ = ("key", "shape", "dtype", "path", "nbytes", "quant", "ggml_type",
                 "stored_shape", "_source", "_offset", "_counter")

    def __init__(self, key: str, shape: tuple[int, ...], stored_shape: tuple[int, ...],
                 ggml_type: str, source: _MappedFile, offset: int, nbytes: int,
                 counter: _ReadCounter):
        self.key = key
        self.shape = shape
        self.stored_shape = stored_shape
        self.ggml_type = ggml_type
        self.quant = None if ggml_type in _FLOAT_TYPES else ggml_type
        self.dtype = _FLOAT_TYPES.get(ggml_type, np.dtype("<f4"))
        self.path = source.path
        self.nbytes = nbytes
        self._source = source
        self._offset = offset
        self._counter = counter

    def __repr__(self) -> str:
        return (f"GGUFTensorRef({self.key!r}, {self.shape}, {self.ggml_type}, "
                f"{self.path!r})")

    # ---- raw bytes
    def _raw(self) -> np.ndarray:
        """Float types: the stored values in ``stored_shape``; quantized: the rows' bytes,
        shape ``(*stored_shape[:-1], row_bytes)``. Views of the map, nothing touched."""
        buffer = self._source.buffer()
        if self.quant is None:
            count = math.prod(self.stored_shape)
            return np.frombuffer(buffer, self.dtype, count, self._offset).reshape(self.stored_shape)
        rows = self.stored_shape[:-1] if self.stored_shape else ()
        row_bytes = self.nbytes // max(math.prod(rows), 1) if self.nbytes else 0
        return np.frombuffer(buffer, np.uint8, self.nbytes, self._offset).reshape(
            (*rows, row_bytes))

    def _dequantize(self, raw: np.ndarray) -> np.ndarray:
        gguf = _gguf()
        qtype = gguf.GGMLQuantizationType[self.quant]
        out = gguf.quants.dequantize(np.ascontiguousarray(raw), qtype)
        self._counter.add(raw.nbytes)
        return out

    def _empty(self) -> np.ndarray:
        """A stand-in of ``shape`` that allocates nothing, to index when nothing is read."""
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)

    # ---- whole / slices
    def read(self) -> np.ndarray:
        """The whole tensor, dequantized, in ``shape``."""
        return self._select((), "read", copy=True)

    def read_slice(self, index: Any) -> np.ndarray:
        """``tensor[index]`` (ints, slices, ``...``), contiguous and read-only."""
        return self._select(index, "read_slice", copy=True)

    def read_view(self, index: Any = ()) -> np.ndarray:
        """``tensor[index]``: a float tensor's as a read-only (possibly strided) view of the map,
        never a copy; a quantized tensor's dequantized, read-only."""
        return self._select(index, "read_view", copy=False)

    @staticmethod
    def _select_types(index: tuple, method: str) -> None:
        for item in index:
            if isinstance(item, (bool, np.bool_)) or not (
                item is Ellipsis or isinstance(item, (slice, int, np.integer))
            ):
                raise TypeError(f"{method} takes ints, slices and ..., not {type(item).__name__}")

    def _select(self, index: Any, method: str, copy: bool) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        self._select_types(index, method)
        if self.nbytes == 0 or math.prod(self.shape) == 0:
            empty = np.array(self._empty()[index])
            empty.flags.writeable = False
            return empty
        if self.quant is None:
            view = self._raw().reshape(self.shape)[index]
            if copy and not view.flags.c_contiguous:
                view = np.ascontiguousarray(view)
                view.flags.writeable = False
            self._counter.add(view.nbytes)
            return view
        out = self._dequantized(index)
        out = np.ascontiguousarray(out)
        out.flags.writeable = False
        return out

    def _dequantized(self, index: tuple) -> np.ndarray:
        """Dequantize only the rows ``index`` selects (and, for a unit-step slice or an int on
        the last axis, only the blocks it spans) when the logical shape is the stored one."""
        full = self._normalise(index)
        if self.shape != self.stored_shape or full is None or not self.shape:
            values = self._dequantize(self._raw()).reshape(self.shape)
            return values[index]
        gguf = _gguf()
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[self.quant]]
        lead, last = full[:-1], full[-1]
        raw = self._raw()[(*lead, slice(None))]
        if raw.size == 0:
            return self._empty()[index]
        n = self.shape[-1]
        if isinstance(last, int) or last.step in (None, 1):
            start, stop = (last, last + 1) if isinstance(last, int) else last.indices(n)[:2]
            if stop <= start:
                return self._empty()[index]
            b0, b1 = start // block, -(-stop // block)
            values = self._dequantize(raw[..., b0 * type_size:b1 * type_size])
            shift = b0 * block
            last = last - shift if isinstance(last, int) else slice(start - shift, stop - shift)
            return values[..., last]
        return self._dequantize(raw)[..., last]

    def _normalise(self, index: tuple) -> tuple | None:
        """``index`` spelled out to one int-or-slice per axis (ints made non-negative and
        checked), or None when it cannot be (leave it to numpy)."""
        if sum(item is Ellipsis for item in index) > 1:
            return None
        if Ellipsis in index:
            at = index.index(Ellipsis)
            fill = len(self.shape) - (len(index) - 1)
            if fill < 0:
                return None
            index = index[:at] + (slice(None),) * fill + index[at + 1:]
        if len(index) > len(self.shape):
            return None
        index = index + (slice(None),) * (len(self.shape) - len(index))
        out = []
        for item, n in zip(index, self.shape):
            if isinstance(item, slice):
                out.append(item)
                continue
            item = int(item)
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for axis of size {n} "
                                 f"({self.key!r}, shape {self.shape})")
            out.append(item % n)
        return tuple(out)

    # ---- Q8_0 blocks
    def q8_0_blocks(self, index: Any = ()) -> tuple[np.ndarray, np.ndarray]:
        """A Q8_0 tensor as (``qs``: int8 of ``shape``, ``d``: float16 of
        ``[*shape[:-1], shape[-1] // 32]``), ``value = qs * d`` blockwise along the last axis.
        ``index`` (ints, slices, ``...``) selects from ``qs``'s axes, the last one in whole
        blocks only (a unit-step slice whose bounds are multiples of 32); ``d`` follows it.
        ``d`` is a strided view of the map; ``qs`` one copy (each block's two scale bytes sit
        between its 32 values in the file). Both read-only; stored bytes touched are counted."""
        if self.quant != "Q8_0":
            raise ValueError(f"{self.key!r} is {self.ggml_type}, not Q8_0")
        if not self.shape or self.shape[-1] % 32:
            raise ValueError(f"{self.key!r}: shape {self.shape} does not run in 32-element blocks "
                             "along its last axis")
        index = index if isinstance(index, tuple) else (index,)
        self._select_types(index, "q8_0_blocks")
        full = self._normalise(index)
        if full is None:
            raise IndexError(f"q8_0_blocks: index {index!r} does not fit shape {self.shape}")
        lead, last = full[:-1], full[-1]
        n = self.shape[-1]
        start, stop, step = (slice(0, 0) if isinstance(last, int) else last).indices(n)
        stop = max(stop, start)
        if isinstance(last, int) or step != 1 or start % 32 or stop % 32:
            raise IndexError(f"q8_0_blocks({self.key!r}): the last axis takes whole 32-element "
                             "blocks (a unit-step slice with bounds multiples of 32), not "
                             f"{last!r}")
        # The stored bytes are 34-byte blocks in row-major order of ``shape`` (also when the
        # file reshaped the tensor: orig_shape), so one view gives every block.
        blocks = self._raw().reshape(-1, 34).reshape((*self.shape[:-1], n // 32, 34))
        blocks = blocks[(*lead, slice(start // 32, stop // 32), slice(None))]
        d = blocks[..., :2].view(np.float16)[..., 0]
        qs = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)
        qs = qs.reshape((*qs.shape[:-2], qs.shape[-2] * 32))
        for a in (d, qs):
            if a.flags.writeable:
                a.flags.writeable = False
        self._counter.add(blocks.size)
        return qs, d
