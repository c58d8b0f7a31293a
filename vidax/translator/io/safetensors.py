"""The safetensors reader: one file's header parsed and every entry validated, the data
memory-mapped; a sharded ``*.safetensors.index.json`` as the union of its shards."""

from __future__ import annotations

import collections
import json
import math
import os
import re
import struct
from typing import Any

from vidax.errors import CheckpointError
from vidax.translator.io.base import (
    SAFETENSORS_DTYPES,
    Checkpoint,
    TensorRef,
    _MappedFile,
    _read_small_file,
    _ReadCounter,
    _show,
)

_MAX_SAFETENSORS_HEADER = 100_000_000  # bytes: the limit of the safetensors library itself
# An index names each tensor once (~100 bytes a key): the largest released ones, of MoE models
# with ~100k tensors, are ~10 MB. Read whole and parsed, so it is capped like a header.
_MAX_INDEX_BYTES = 100_000_000
# Values in either JSON (bounded from above by its commas, "[" and "{"), which json.loads turns
# into objects of ~60 bytes each: 100 MB of '"ab",' would take 1.5 GB. An entry of a header is ~9
# values (its dict, three fields, the shape's dims, two offsets), a key of an index 2: this admits
# ~400k tensors, while the worst JSON within it costs ~250 MB.
_MAX_JSON_VALUES = 4_000_000


def _parse_json(path: str, raw: bytes, what: str, **options) -> Any:
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{") + 1
    if values > _MAX_JSON_VALUES:
        raise CheckpointError(
            path,
            f"{what} holds up to {values:,} JSON values, more than the {_MAX_JSON_VALUES:,} "
            "vidax parses (a tensor takes ~9).",
        )
    try:
        return json.loads(raw, **options)
    except (ValueError, RecursionError) as e:  # JSON and UTF-8 decoding errors are ValueErrors
        raise CheckpointError(path, f"{what} is not valid JSON: {e}.") from None


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
    raw = source.read(8, length)
    header = _parse_json(path, raw, "the header", object_pairs_hook=_no_duplicate_keys)
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
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            unknown.append(f"{_show(key)} ({dtype if isinstance(dtype, str) else _show(dtype)})")
            continue
        expected = math.prod(shape) * SAFETENSORS_DTYPES[dtype].itemsize
        if offsets[1] - offsets[0] != expected:
            raise CheckpointError(
                path,
                f"{where} data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, but shape "
                f"{shape} of {dtype} needs {expected}.",
            )
        entries.append((offsets[0], offsets[1], key, tuple(shape), SAFETENSORS_DTYPES[dtype]))
    if unknown:
        more = f" and {len(unknown) - 20:,} more" if len(unknown) > 20 else ""
        raise CheckpointError(
            path,
            f"vidax does not support these tensors' dtypes yet: {', '.join(unknown[:20])}{more}. "
            f"Supported: {', '.join(SAFETENSORS_DTYPES)}.",
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
    raw = _read_small_file(index_path, _MAX_INDEX_BYTES, "the index file")
    index = _parse_json(index_path, raw, "the index")
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
            try:
                opened.append(_MappedFile(os.path.join(folder, name)))
            except CheckpointError as e:
                problem = f"{e.problem} The index {index_path} names this shard."
                raise CheckpointError(e.path, problem) from None
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
