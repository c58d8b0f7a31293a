"""``vidax convert``: a component translated once into a Flax-layout cache.

The folder's format (``model.safetensors`` in the Flax layout and the ``vidax_convert.json``
marker, written last) and its reader, which ``vidax.load`` uses to recognise such a folder and
skip the mapper, are in ``vidax.translator.io.converted``; this module writes it, taking the
format's names from there. The safetensors file is written by streaming, one tensor in
memory at a time, so a converted 14B DiT needs no more host memory than its largest tensor.

Atomicity: everything is written into a hidden sibling folder ``.NAME.partial-XXXX``, files
fsynced, the marker last, and only then renamed to ``NAME`` in one ``os.replace``. An
interrupted convert leaves at most a ``.partial`` folder, which has no marker under the
final name and is never taken for a cache; a failed convert removes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import struct
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vidax import registry
from vidax.errors import VerificationError, VidaxError
from vidax.translator import converter
from vidax.translator.io import open_checkpoint
from vidax.translator.io.base import SAFETENSORS_DTYPES
from vidax.translator.io.converted import FORMAT_VERSION, MARKER, METADATA, WEIGHTS
from vidax.translator.mapping import Target

# numpy dtype name -> safetensors tag: the reader's table (io.base), inverted
_ST_DTYPES = {dtype.name: tag for tag, dtype in SAFETENSORS_DTYPES.items()}


def convert(model_type: str, component: str, checkpoint, out, *, variant: str | None = None,
            config=None, layout: str | None = None, dtype=None, overwrite: bool = False,
            progress: Callable[[int, int, str], None] | None = None) -> Path:
    """Translate ``checkpoint`` once and write the Flax-layout folder ``out`` (atomically).

    ``dtype``: cast every parameter on the host (default: the stored dtypes, after any
    per-key cast of the mapper). Returns ``out``.
    """
    from vidax import loading
    from vidax.translator import verify as _verify

    out = Path(out)
    if out.exists() and not overwrite:
        raise VidaxError(f"{out} exists; pass overwrite (--overwrite) to replace it")
    spec = registry.get(model_type, component, layout)
    if config is None:
        config = spec.make_config(variant) if variant else loading._detect_config(spec,
                                                                                  checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open_checkpoint(checkpoint) as ckpt:
        report, plan, view = loading.verify_tensors(spec, config, ckpt, source=str(checkpoint))
        if not report.ok:
            raise VerificationError(
                f"{checkpoint} is not a {model_type} {component} checkpoint at this config "
                f"(nothing was written): " + "; ".join(report.lines(5)[1:]), report)
        paths = sorted(_verify.abstract_params(spec.model_class(), config))
        targets = [plan.targets[p] for p in paths]
        cast = None if dtype is None else converter.as_dtype(dtype)
        info = {
            "format_version": FORMAT_VERSION,
            "model_type": spec.model_type, "component": spec.component, "layout": spec.layout,
            "variant": variant, "config": dataclasses.asdict(config),
            "dtype": None if cast is None else cast.name,
            "source": [_fingerprint(f) for f in ckpt.files],
            "verification": report.headline(),
        }
        tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _write_safetensors(tmp / WEIGHTS, targets, view, cast, progress)
            _write_synced(tmp / MARKER, json.dumps(info, indent=1).encode())
            _fsync_dir(tmp)
            _install(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out


def _install(tmp: Path, out: Path) -> None:
    """Put the finished folder at ``out``: one rename (an old ``out`` is moved aside
    first, then removed)."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
    os.replace(tmp, out)
    _fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_safetensors(path: Path, targets: list[Target], tensors, cast,
                       progress) -> None:
    """A safetensors file written one tensor at a time: the header (offsets from the
    shapes) first, then each parameter materialised, written, and dropped."""
    header: dict[str, object] = {"__metadata__": dict(METADATA)}
    offset = 0
    dtypes = []
    for t in targets:
        dt = cast if cast is not None else converter.as_dtype(t.cast or t.dtype)
        tag = _ST_DTYPES.get(dt.name)
        if tag is None:
            raise VidaxError(f"cannot write {t.path} as {dt.name} to safetensors")
        size = int(np.prod(t.shape, dtype=np.int64)) * dt.itemsize
        header[t.path] = {"dtype": tag, "shape": list(t.shape),
                          "data_offsets": [offset, offset + size]}
        offset += size
        dtypes.append(dt)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for i, (t, dt) in enumerate(zip(targets, dtypes), 1):
            array = converter.contiguous(np.asarray(t.materialize(tensors, dtype=dt)))
            f.write(array.reshape(-1).view(np.uint8))
            del array
            if progress is not None:
                progress(i, len(targets), t.path)
        f.flush()
        os.fsync(f.fileno())


def _fingerprint(path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return {"file": os.path.basename(path), "size": os.path.getsize(path),
            "sha256": digest.hexdigest()}


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
