"""``vidax convert``: a component translated once into a Flax-layout cache.

The folder's format (``model.safetensors`` in the Flax layout and the ``vidax_convert.json``
marker, written last), what counts as a vidax cache folder, and the reader that ``vidax.load``
uses to recognise such a folder and skip the mapper, are in ``vidax.translator.io.converted``;
this module writes it, taking the format's names from there. The safetensors file is written
by streaming, one tensor in memory at a time, so a converted 14B DiT needs no more host memory
than its largest tensor; each tensor is checked finite as it is written (NaN or Inf is refused
with its stored key named, as ``vidax.load`` refuses it).

Order: everything a user can get wrong is checked before a weight is read -- the dtype
(``vidax.dtypes``), the component and variant, and ``out``: what is there now, and whether a
folder can be made beside it (the partial folder is created first, so a read-only folder, a
path under a regular file, a name too long or a filesystem like ``/proc`` is one clear error,
with the OS's reason, before translation starts).

Atomicity: everything is written into a hidden sibling folder ``.NAME.partial-XXXXXXXX``,
files fsynced, the marker last, and only then renamed to ``NAME`` in one ``os.rename``. A
folder under the final name therefore always has its marker and complete weights; a kill at
any moment leaves at most hidden siblings, never a folder that loads as complete but is not.

What is replaced and deleted: ``overwrite`` replaces only an empty folder or a complete vidax
cache folder (``converted.survey``: nothing in it but vidax's own files). Anything else -- a
folder with the user's files, a folder without the marker, a regular file, a symbolic link --
is refused before anything is written, and left untouched. Nothing is ever removed with
``rmtree``: a vidax folder is emptied by unlinking vidax's own file names one by one and then
``rmdir``, which fails (and leaves the folder) if anything else has appeared in it meanwhile.
The old folder is renamed aside (``.NAME.old-XXXXXXXX``) before the new one takes its name,
and re-checked under its lock, so a file put into it at the last moment survives.

Liveness, by lock rather than by pid: the process writing a partial folder, or moving an old
one aside, holds an exclusive ``flock`` on the lock file ``converted.LOCK`` inside it for as
long as it works on it. The kernel drops the lock when the process dies, however it dies
(``kill -9`` included), so "its lock is free" means exactly "nobody is working on it"; a
recorded pid/host cannot say that (pids are reused; another host cannot be asked), and a
time-out guesses. ``flock(2)`` on Linux NFS is emulated by byte-range locks, which need the file
open for writing: the lock file is opened read-write. The lock is taken by opening, locking,
and checking that the locked file is still the one at that name (the last holder unlinks it
when done), the usual protocol for a lock file that gets removed.

Clean-up of earlier interrupted runs: each convert to ``out``, before writing, removes the
siblings ``.NAME.partial-*`` and ``.NAME.old-*`` (exactly that pattern, a hex suffix) that are
vidax cache folders (or empty) and whose lock it can take: a killed run's leftovers, never a
folder another convert is writing right now, never one holding anything else. Without
``fcntl`` (Windows) nothing is taken for stale.

Parents: the folders above ``out`` that do not exist are created one by one, and if the
convert fails, exactly those this run created are removed again (``rmdir``, deepest first; one
that something else has written into meanwhile is kept).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import struct
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vidax import registry
from vidax.errors import VerificationError, VidaxError
from vidax.translator import converter
from vidax.translator.io import converted, open_checkpoint
from vidax.translator.io.base import SAFETENSORS_DTYPES
from vidax.translator.io.converted import FORMAT_VERSION, LOCK, MARKER, METADATA, WEIGHTS
from vidax.translator.mapping import Target

try:
    import fcntl
except ImportError:                      # pragma: no cover - Windows: no flock
    fcntl = None

# numpy dtype name -> safetensors tag: the reader's table (io.base), inverted
_ST_DTYPES = {dtype.name: tag for tag, dtype in SAFETENSORS_DTYPES.items()}
#: a folder name longer than this (in bytes) gets a hashed stem in its hidden siblings' names,
#: so ``.NAME.partial-XXXXXXXX`` stays under NAME_MAX (255 on Linux)
_STEM_LIMIT = 200


def convert(model_type: str, component: str, checkpoint, out, *, variant: str | None = None,
            config=None, layout: str | None = None, dtype=None, overwrite: bool = False,
            progress: Callable[[int, int, str], None] | None = None) -> Path:
    """Translate ``checkpoint`` once and write the Flax-layout folder ``out`` (atomically).

    ``dtype``: cast every parameter on the host, any spelling of ``vidax.dtypes`` (``bf16``,
    ``bfloat16``, ``torch.float16``, a numpy dtype, ...; default: the stored dtypes, after any
    per-key cast of the mapper). ``overwrite``: replace ``out`` if it is an empty folder or a
    folder an earlier convert wrote; anything else at ``out`` is refused, with or without it.
    Returns ``out`` (absolute).
    """
    from vidax import loading
    from vidax.translator import verify as _verify

    cast = converter.cast_dtype(dtype)
    if layout is not None:
        registry.get(model_type, component, layout)   # a misspelt name fails at once
    out = _check_out(out, overwrite)
    if layout is None:   # as verify and load detect it
        layout = loading._detect_layout(model_type, component, checkpoint, config)
    spec = registry.get(model_type, component, layout)
    if config is None and variant and variant != "tiny":
        config = spec.make_config(variant)            # a misspelt variant fails at once
    created = _make_parents(out)
    try:
        _clean_stale(out)
        tmp, lock = _new_partial(out)
        try:
            if config is None:
                config = loading.resolve_config(spec, checkpoint, variant=variant)
            with open_checkpoint(checkpoint) as ckpt:
                report, plan, view = loading.verify_tensors(spec, config, ckpt,
                                                            source=str(checkpoint))
                if not report.ok:
                    raise VerificationError(
                        f"{checkpoint} is not a {model_type} {component} checkpoint at this "
                        f"config (nothing was written): " + "; ".join(report.lines(5)[1:]),
                        report)
                paths = sorted(_verify.abstract_params(spec.model_class(), config))
                targets = [plan.targets[p] for p in paths]
                info = {
                    "format_version": FORMAT_VERSION,
                    "model_type": spec.model_type, "component": spec.component,
                    "layout": spec.layout, "variant": variant,
                    **converted.config_record(config),
                    "dtype": None if cast is None else cast.name,
                    "source": [_fingerprint(f) for f in ckpt.files],
                    "verification": report.headline(),
                }
                _write_safetensors(tmp / WEIGHTS, targets, view, cast, progress,
                                   source=str(checkpoint))
            _write_synced(tmp / MARKER, json.dumps(info, indent=1).encode())
            _os(tmp, _fsync_dir, tmp)
            _install(tmp, lock, out, overwrite)
        except BaseException:
            if lock.fd is not None:          # not installed: the partial folder is ours
                _empty_and_remove(tmp, lock)
            raise
    except BaseException:
        _remove_created(created)
        raise
    return out


# ------------------------------------------------------------------------ where it goes
def _check_out(out, overwrite: bool) -> Path:
    """``out`` made absolute, refused (before anything is read or written) if a folder
    cannot go there or what is there may not be replaced."""
    path = Path(os.path.abspath(os.fspath(out)))
    if not path.name:
        raise VidaxError(f"--out {out}: not a folder name; give the folder to write, e.g. "
                         f"./wan_dit_flax")
    ancestor = path.parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise VidaxError(f"cannot write {path}: {ancestor} is "
                         f"{converted.survey(ancestor).what}, not a folder; choose an --out "
                         f"whose parents are folders")
    try:
        name_max = os.pathconf(ancestor, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in path.relative_to(ancestor).parts:
        if len(os.fsencode(part)) > name_max:
            raise VidaxError(f"cannot write {path}: the name {part[:40]}... is "
                             f"{len(os.fsencode(part))} bytes long, and {ancestor} takes at "
                             f"most {name_max}; choose a shorter --out")
    there = converted.survey(path)
    if there.kind == "missing":
        return path
    if there.kind not in _REPLACEABLE:
        raise _not_ours(path, there, overwrite)
    if not overwrite:
        raise VidaxError(f"{path} exists ({there.what}); pass overwrite (--overwrite) to "
                         f"replace it")
    return path


#: what ``overwrite`` replaces at the final name: a partial folder is never there (the rename
#: is the last step), so one without the marker is not known to be vidax's
_REPLACEABLE = ("empty", "complete")


def _not_ours(path: Path, there: converted.Survey, overwrite: bool) -> VidaxError:
    what = there.what
    if there.kind == "partial":
        what = (f"a folder with no {MARKER} (the marker vidax convert writes last, before "
                f"the folder takes its name)")
    only = " (--overwrite replaces only those)" if overwrite else ""
    return VidaxError(f"{path} is {what}, not a folder vidax convert wrote, so it is left "
                      f"untouched{only}; choose another --out, or move it away yourself")


def _stem(name: str) -> str:
    raw = os.fsencode(name)
    return name if len(raw) <= _STEM_LIMIT else "h" + hashlib.sha256(raw).hexdigest()[:32]


def _sibling(out: Path, kind: str) -> Path:
    return out.parent / f".{_stem(out.name)}.{kind}-{uuid.uuid4().hex[:8]}"


def _sibling_pattern(out: Path) -> re.Pattern:
    return re.compile(rf"\.{re.escape(_stem(out.name))}\.(partial|old)-[0-9a-f]{{8}}")


def _make_parents(out: Path) -> list[Path]:
    """Create the missing folders above ``out``; returns those this call created, top
    first. A folder made meanwhile by another process is not counted as ours."""
    missing = []
    parent = out.parent
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = parent.parent
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            try:
                os.mkdir(folder)
            except FileExistsError:
                if not folder.is_dir():
                    raise
                continue
            created.append(folder)
    except OSError as e:
        _remove_created(created)
        raise _os_error(out, e) from None
    return created


def _remove_created(created: list[Path]) -> None:
    for folder in reversed(created):
        try:
            os.rmdir(folder)
        except OSError:                  # something else is in it now: keep it
            return


def _os_error(out: Path, e: OSError) -> VidaxError:
    where = e.filename or out
    reason = e.strerror or str(e)
    if e.errno == errno.ENOENT and os.path.isdir(os.path.dirname(os.fspath(where))):
        reason += " (this filesystem does not let a folder be created there)"
    return VidaxError(f"cannot write the converted folder {out}: {where}: {reason}; choose an "
                      f"--out on a writable filesystem (nothing was read or written)")


def _os(path: Path, fn, *args):
    """``fn(*args)`` with an ``OSError`` (a full disk, an I/O error) turned into a
    ``VidaxError`` naming ``path``."""
    try:
        return fn(*args)
    except OSError as e:
        raise VidaxError(f"writing {path} failed: {e.strerror or e}; nothing was installed "
                         f"at the final name") from None


# ------------------------------------------------------------------------ locks
class _Lock:
    """An exclusive ``flock`` on ``folder/LOCK`` (``fd`` None once released)."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)            # closing drops the lock
            self.fd = None

    __del__ = release


def _take_lock(folder: Path) -> _Lock | None:
    """The lock of ``folder`` (its lock file created if missing), or None if another
    process holds it or the folder went away."""
    name = folder / LOCK
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if fcntl is None:                   # pragma: no cover - no flock: a lock file only
        return _Lock(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # the last holder unlinks the file when done: the lock must be on the file there now
        mine, there = os.fstat(fd), os.stat(name, follow_symlinks=False)
        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return _Lock(fd)


def _empty_and_remove(folder: Path, lock: _Lock) -> bool:
    """Remove a vidax folder whose lock we hold: its own files by name (the marker first,
    so it never looks complete without its weights), then the folder, which ``rmdir`` keeps
    if anything else is in it. The lock is released. Returns whether the folder is gone."""
    try:
        if not converted.survey(folder).is_cache:
            return False
        for name in (MARKER, WEIGHTS, LOCK):
            try:
                os.unlink(folder / name)
            except FileNotFoundError:
                pass
        os.rmdir(folder)
        return True
    except OSError:
        return False
    finally:
        lock.release()


def _clean_stale(out: Path) -> None:
    """Remove the hidden siblings of ``out`` that earlier, interrupted converts left."""
    if fcntl is None:                   # pragma: no cover - liveness cannot be told
        return
    pattern = _sibling_pattern(out)
    try:
        names = os.listdir(out.parent)
    except OSError as e:
        raise _os_error(out, e) from None
    for name in names:
        if not pattern.fullmatch(name):
            continue
        folder = out.parent / name
        if not converted.survey(folder).is_cache:
            continue
        try:
            lock = _take_lock(folder)
        except OSError:                  # a lock file that cannot be opened: leave it be
            continue
        if lock is not None:
            _empty_and_remove(folder, lock)


def _new_partial(out: Path) -> tuple[Path, _Lock]:
    """A new hidden partial folder beside ``out``, locked: the first thing written, so a
    place no folder can go is found before any weight is read."""
    for _ in range(8):
        tmp = _sibling(out, "partial")
        try:
            os.mkdir(tmp)
        except FileExistsError:
            continue
        except OSError as e:
            raise _os_error(out, e) from None
        try:
            lock = _take_lock(tmp)
        except OSError as e:
            os.rmdir(tmp)
            raise _os_error(out, e) from None
        if lock is not None:
            return tmp, lock
        # a concurrent clean-up took it for stale in the instant before we locked it
    raise VidaxError(f"could not create a partial folder beside {out}: another process keeps "
                     f"removing them")


# ------------------------------------------------------------------------ install
def _install(tmp: Path, lock: _Lock, out: Path, overwrite: bool) -> None:
    """Put the finished folder at ``out`` with one rename. An old vidax folder at ``out``
    is locked, checked again, renamed aside, and emptied once the new one is in place."""
    old = old_lock = None
    there = converted.survey(out)
    if there.kind != "missing":
        if not overwrite or there.kind not in _REPLACEABLE:
            raise VidaxError(f"{out} changed while converting: it is now {there.what}; it "
                             f"is left untouched and nothing was installed")
        try:
            old_lock = _take_lock(out)
        except OSError as e:
            raise VidaxError(f"could not lock the old {out} to replace it: {e.strerror}; it "
                             f"is left untouched") from None
        if old_lock is None:
            raise VidaxError(f"another vidax convert is writing {out} right now; it is left "
                             f"untouched and nothing was installed")
        there = converted.survey(out)                # again, under the lock
        if there.kind not in _REPLACEABLE and os.listdir(out) != [LOCK]:   # (was empty)
            _release_unlinking(out, old_lock)
            raise VidaxError(f"{out} changed while converting: it is now {there.what}; it "
                             f"is left untouched and nothing was installed")
        old = _sibling(out, "old")
        try:
            os.rename(out, old)
        except OSError as e:
            _release_unlinking(out, old_lock)
            raise VidaxError(f"could not move the old {out} aside: {e.strerror}") from None
    try:
        os.rename(tmp, out)          # a folder that appeared at out meanwhile makes this fail
    except BaseException as e:
        if old is not None:          # the old folder goes back (if out is still free)
            try:
                os.rename(old, out)
            except OSError:
                pass
            _release_unlinking(out if not os.path.lexists(old) else old, old_lock)
        if isinstance(e, OSError):
            raise VidaxError(f"could not put the converted folder at {out}: {e.strerror}; "
                             f"nothing was replaced") from None
        raise
    _release_unlinking(out, lock)            # the new folder: its lock file goes
    try:
        _fsync_dir(out.parent)
    except OSError:
        pass
    if old is not None and not _empty_and_remove(old, old_lock):
        warnings.warn(f"the previous {out.name} was moved to {old} and holds something vidax "
                      f"did not write, so it was kept; look at it and remove it yourself",
                      stacklevel=3)


def _release_unlinking(folder: Path, lock: _Lock) -> None:
    """Release a lock, removing its lock file first (while still held)."""
    try:
        os.unlink(folder / LOCK)
    except OSError:
        pass
    lock.release()


# ------------------------------------------------------------------------ the file
def _write_safetensors(path: Path, targets: list[Target], tensors, cast,
                       progress, *, source: str = "the checkpoint") -> None:
    """A safetensors file written one tensor at a time: the header (offsets from the
    shapes) first, then each parameter materialised, checked finite (the load's weight
    policy, ``vidax.translator.verify``: a NaN or Inf is refused with its stored key named),
    written, and dropped."""
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
    _check_space(path, 8 + len(blob) + offset)
    with _os(path, open, path, "wb") as f:
        _os(path, f.write, struct.pack("<Q", len(blob)))
        _os(path, f.write, blob)
        for i, (t, dt) in enumerate(zip(targets, dtypes), 1):
            with np.errstate(over="ignore", invalid="ignore"):   # told by the check below
                array = converter.contiguous(np.asarray(t.materialize(tensors, dtype=dt)))
            _check_finite(array, t, tensors, cast, source)     # the bytes about to be written
            _os(path, f.write, array.reshape(-1).view(np.uint8))
            del array
            if progress is not None:
                progress(i, len(targets), t.path)
        _os(path, f.flush)
        _os(path, os.fsync, f.fileno())


def _check_finite(array: np.ndarray, target: Target, tensors, cast, source: str) -> None:
    from vidax.translator import verify as _verify

    bad = _verify.count_nonfinite(array)
    if not bad:
        return
    keys = ", ".join(dict.fromkeys(s.key for s in target.sources)) or target.path
    # made by the cast (an fp16 overflow), or stored so? The stored values tell.
    made = cast is not None and not _verify.count_nonfinite(target.materialize(tensors))
    raise _verify.nonfinite_error(source, {keys: (bad, int(array.size))}, total=None,
                                  cast=cast.name if made else None)


def _check_space(path: Path, size: int) -> None:
    """Refuse, before writing, a file the filesystem has no room for."""
    try:
        st = os.statvfs(path.parent)
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if free < size:
        raise VidaxError(f"{path.parent.parent} has {free / 2**30:.2f} GiB free, and the "
                         f"converted weights need {size / 2**30:.2f} GiB; free some space or "
                         f"choose another --out (nothing was written)")


def _fingerprint(path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return {"file": os.path.basename(path), "size": os.path.getsize(path),
            "sha256": digest.hexdigest()}


def _write_synced(path: Path, data: bytes) -> None:
    with _os(path, open, path, "wb") as f:
        _os(path, f.write, data)
        _os(path, f.flush)
        _os(path, os.fsync, f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
