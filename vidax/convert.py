"""``vidax convert``: a component translated once into a Flax-layout cache.

A converted folder holds two files:

* ``model.safetensors``: every parameter under its Flax path (``blocks.0.self_attn.q.kernel``),
  already in the Flax layout and the chosen dtype; its ``__metadata__`` says
  ``{"vidax": "flax-layout"}``.
* ``vidax_convert.json`` (the marker, written last): format version, model_type, component,
  layout, variant, the config (``dataclasses.asdict``), the dtype, and the size and SHA-256
  of every source file.

``vidax.load(model_type, component, FOLDER)`` recognises the folder and skips the mapper: the
tensors are matched 1:1 against the model's abstract tree by path (still verified, still
placed block by block from the memory map). The safetensors file is written by streaming,
one tensor in memory at a time, so a converted 14B DiT needs no more host memory than its
largest tensor.

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
from vidax.translator.io import Checkpoint, open_checkpoint
from vidax.translator.mapping import Plan, Source, Target

MARKER = "vidax_convert.json"
WEIGHTS = "model.safetensors"
FORMAT_VERSION = 1
_METADATA = {"vidax": "flax-layout"}

# numpy dtype name -> safetensors dtype tag
_ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}


def is_converted(path) -> bool:
    """Whether ``path`` is a folder written (completely) by ``vidax convert``."""
    try:
        return Path(path).is_dir() and (Path(path) / MARKER).is_file()
    except (TypeError, OSError):
        return False


def is_converted_checkpoint(ckpt: Checkpoint) -> bool:
    """Whether an open checkpoint holds Flax-layout tensors written by ``vidax convert``."""
    return ckpt.format == "safetensors" and ckpt.metadata.get("vidax") == _METADATA["vidax"]


def read_info(path) -> dict:
    """The marker of a converted folder, checked."""
    marker = Path(path) / MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError) as e:
        raise VidaxError(f"{marker}: not a readable vidax convert marker ({e})") from None
    if not isinstance(info, dict) or info.get("format_version") != FORMAT_VERSION:
        raise VidaxError(f"{marker}: unknown converted-folder format "
                         f"{info.get('format_version') if isinstance(info, dict) else info!r} "
                         f"(this vidax writes version {FORMAT_VERSION}); convert again")
    return info


def open_converted(path, spec: registry.ComponentSpec, config=None):
    """``(config, Checkpoint)`` of a converted folder for ``spec``. ``config``, when given,
    must be the config it was converted at."""
    info = read_info(path)
    # The source's key layout (authors' or diffusers') no longer matters: the tensors are
    # under the model's own paths.
    have = (info.get("model_type"), info.get("component"))
    if have != spec.key[:2]:
        raise VidaxError(f"{path} was converted from a {' '.join(map(str, have))} checkpoint "
                         f"({info.get('layout')} layout), not {' '.join(spec.key[:2])}")
    stored = spec.make_config(overrides=info["config"])
    if config is not None and config != stored:
        raise VidaxError(f"{path} was converted at config {stored}, not the requested "
                         f"{config}; convert again at that config")
    ckpt = open_checkpoint(Path(path) / WEIGHTS)
    if not is_converted_checkpoint(ckpt):
        ckpt.close()
        raise VidaxError(f"{Path(path) / WEIGHTS} is not a vidax Flax-layout file "
                         f"(its metadata lacks vidax=flax-layout)")
    return stored, ckpt


def identity_plan(ckpt: Checkpoint) -> Plan:
    """The plan of a converted file: every tensor is the parameter of its own name."""
    plan = Plan()
    for key, ref in ckpt.items():
        plan.targets[key] = Target(key, (Source(key),), None, None, "none", None,
                                   tuple(ref.shape), str(ref.dtype))
        plan.consumed.add(key)
    return plan


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
    header: dict[str, object] = {"__metadata__": dict(_METADATA)}
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
