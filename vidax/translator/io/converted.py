"""The folders ``vidax convert`` writes (a component already in the Flax layout): their format,
and the reader that recognises and opens them. The writer is ``vidax.convert``; it takes the
format's names from here, so the format is defined once.

A converted folder holds two files:

* ``model.safetensors`` (``WEIGHTS``): every parameter under its Flax path
  (``blocks.0.self_attn.q.kernel``), already in the Flax layout and the chosen dtype; its
  ``__metadata__`` says ``{"vidax": "flax-layout"}`` (``METADATA``).
* ``vidax_convert.json`` (``MARKER``, written last): format version (``FORMAT_VERSION``),
  model_type, component, layout, variant, the config (``dataclasses.asdict``, and its class's
  name: ``config_record``; read back field by field, ``stored_config``), the dtype, and the
  size and SHA-256 of every source file.

(and, for an instant after the rename or if the writer was killed then, its empty lock file
``LOCK``, which readers ignore.)

``vidax.load(model_type, component, FOLDER)`` recognises the folder (``is_converted``) and skips
the mapper: the tensors are matched 1:1 against the model's abstract tree by path
(``identity_plan``; still verified, still placed block by block from the memory map).

What counts as a vidax cache folder (``survey``), the one thing ``vidax convert --overwrite``
may replace and the only thing it ever deletes: a real folder (not a symbolic link) whose
entries are all regular files among the names vidax writes there -- ``WEIGHTS``, ``MARKER``
and the writer's lock file ``LOCK`` (see ``vidax.convert``). It is *complete* when it holds the
marker (a JSON object with a ``format_version``), *partial* when it holds no marker (a folder
still being written, or left by a killed convert; only ever under a hidden ``.NAME.partial-*``
or ``.NAME.old-*`` name). Anything else -- a file of another name, a subfolder, a link, a
``vidax_convert.json`` that is not a marker -- makes the folder the user's.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import stat
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING

from vidax.errors import VidaxError
from vidax.translator.io.base import Checkpoint, _read_small_file
from vidax.translator.io.dispatch import open_checkpoint
from vidax.translator.mapping import Plan, Source, Target

if TYPE_CHECKING:
    from vidax import registry

MARKER = "vidax_convert.json"
#: The most bytes of a marker read (one is a few kB: the config and the sources' digests).
MARKER_LIMIT = 16 * 2**20
WEIGHTS = "model.safetensors"
#: held (``flock``) by the process writing, moving or removing a folder; see ``vidax.convert``
LOCK = ".vidax_convert.lock"
#: every name vidax writes inside a converted folder
FILES = (WEIGHTS, MARKER, LOCK)
FORMAT_VERSION = 1
METADATA = {"vidax": "flax-layout"}
#: a marker is a few kilobytes; a bigger file of that name is not one
_MARKER_LIMIT = 1 << 20


@dataclasses.dataclass(frozen=True)
class Survey:
    """What a path holds, seen without following a link at it.

    ``kind``: ``missing``; ``empty`` (a folder with nothing in it); ``complete`` or
    ``partial`` (a vidax cache folder, with or without its marker); ``foreign`` (anything
    else: the user's). ``what``: the same in words, for a message."""

    kind: str
    what: str

    @property
    def is_cache(self) -> bool:
        """Whether the folder holds nothing but vidax's own files (or nothing at all)."""
        return self.kind in ("empty", "complete", "partial")


def survey(path) -> Survey:
    """What ``path`` holds (see the module docstring for what a vidax cache folder is)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Survey("missing", "nothing")
    except OSError as e:  # what cannot be looked at is not known to be ours
        return Survey("foreign", f"a path vidax cannot look at ({e.strerror or e})")
    if stat.S_ISLNK(st.st_mode):
        try:
            to = os.readlink(path)
        except OSError:
            to = "?"
        return Survey("foreign", f"a symbolic link (to {to})")
    if not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a special file"
        return Survey("foreign", f"{kind} of {st.st_size} bytes")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        return Survey("foreign", f"a folder vidax cannot list ({e.strerror or e})")
    if not names:
        return Survey("empty", "an empty folder")
    others = []
    for name in names:
        try:
            regular = name in FILES and stat.S_ISREG(os.lstat(path / name).st_mode)
        except FileNotFoundError:  # removed while we looked: not there
            continue
        except OSError:
            regular = False
        if not regular:
            others.append(name + ("/" if (path / name).is_dir() else ""))
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        return Survey(
            "foreign",
            f"a folder holding {len(others)} entr"
            f"{'y' if len(others) == 1 else 'ies'} vidax does not write "
            f"({shown})",
        )
    if MARKER not in names:
        return Survey("partial", "a partial vidax cache folder (no marker)")
    if not _is_marker(path / MARKER):
        return Survey("foreign", f"a folder whose {MARKER} is not a vidax convert marker")
    return Survey("complete", "a vidax cache folder")


def _is_marker(path: Path) -> bool:
    try:
        if path.stat().st_size > _MARKER_LIMIT:
            return False
        info = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and "format_version" in info


def is_converted(path) -> bool:
    """Whether ``path`` is a folder written (completely) by ``vidax convert``."""
    try:
        return Path(path).is_dir() and (Path(path) / MARKER).is_file()
    except (TypeError, OSError):
        return False


def is_converted_checkpoint(ckpt: Checkpoint) -> bool:
    """Whether an open checkpoint holds Flax-layout tensors written by ``vidax convert``."""
    return ckpt.format == "safetensors" and ckpt.metadata.get("vidax") == METADATA["vidax"]


def read_info(path) -> dict:
    """The marker of a converted folder, checked."""
    marker = Path(path) / MARKER
    try:   # a regular file, and small: what convert writes is a few kB
        info = json.loads(_read_small_file(str(marker), MARKER_LIMIT, "the marker"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{marker}: not a readable vidax convert marker ({e})") from None
    if not isinstance(info, dict) or info.get("format_version") != FORMAT_VERSION:
        raise VidaxError(
            f"{marker}: unknown converted-folder format "
            f"{info.get('format_version') if isinstance(info, dict) else info!r} "
            f"(this vidax writes version {FORMAT_VERSION}); convert again"
        )
    return info


def open_converted(path, spec: registry.ComponentSpec, config=None):
    """``(config, Checkpoint)`` of a converted folder for ``spec``. ``config``, when given,
    must be the config it was converted at."""
    info = read_info(path)
    # The source's key layout (authors' or diffusers') no longer matters: the tensors are
    # under the model's own paths.
    have = (info.get("model_type"), info.get("component"))
    if have != spec.key[:2]:
        raise VidaxError(
            f"{path} was converted from a {' '.join(map(str, have))} checkpoint "
            f"({info.get('layout')} layout), not {' '.join(spec.key[:2])}"
        )
    stored = stored_config(path, spec, info)
    if config is not None and config != stored:
        raise VidaxError(
            f"{path} was converted at config {stored}, not the requested "
            f"{config}; convert again at that config"
        )
    ckpt = open_checkpoint(Path(path) / WEIGHTS)
    if not is_converted_checkpoint(ckpt):
        ckpt.close()
        raise VidaxError(
            f"{Path(path) / WEIGHTS} is not a vidax Flax-layout file "
            f"(its metadata lacks vidax=flax-layout)"
        )
    return stored, ckpt


def config_record(config) -> dict:
    """What the marker stores of a config: its fields (``dataclasses.asdict``) and the name
    of its class, which :func:`stored_config` checks on reading."""
    kind = type(config)
    return {
        "config": dataclasses.asdict(config),
        "config_class": f"{kind.__module__}.{kind.__qualname__}",
    }


def stored_config(path, spec: registry.ComponentSpec, info: dict):
    """The config a converted folder was written at, rebuilt field by field from the marker
    (tuples, ``X | None`` and nested dataclasses restored from their JSON form by the
    fields' annotations), so it equals the one converted. Not through the family's
    ``from_dict``, which reads the authors' config keys, not the dataclass's fields. The class
    is the one the component's configs have (the class named in the marker must be it;
    nothing named in a marker is imported)."""
    kind = type(spec.make_config("tiny"))
    named = info.get("config_class")
    if named is not None and named != f"{kind.__module__}.{kind.__qualname__}":
        raise VidaxError(
            f"{Path(path) / MARKER}: written for a config of class {named}, "
            f"and this vidax's {spec.model_type} {spec.component} config is "
            f"{kind.__qualname__}; convert again"
        )
    try:
        return _from_fields(kind, info.get("config"))
    except (TypeError, ValueError) as e:
        raise VidaxError(
            f"{Path(path) / MARKER}: its config does not fit this vidax's "
            f"{kind.__qualname__} ({e}); convert again"
        ) from None


def _from_fields(kind: type, data):
    if not isinstance(data, dict):
        raise ValueError(f"{kind.__qualname__} is stored as {type(data).__name__}")
    hints = typing.get_type_hints(kind)
    fields = {f.name for f in dataclasses.fields(kind) if f.init}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown fields {', '.join(unknown)}")
    return kind(**{name: _field(hints[name], value) for name, value in data.items()})


def _field(hint, value):
    """A JSON value back as the annotation says (a list as a tuple, a dict as a dataclass)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _from_fields(hint, value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arm in (a for a in args if a is not type(None)):
            try:
                return _field(arm, value)
            except (TypeError, ValueError):
                continue
        raise ValueError(f"{value!r} is none of {hint}")
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_field(args[0], v) for v in value)
        if args and len(args) != len(value):
            raise ValueError(f"{value!r} does not have the {len(args)} entries of {hint}")
        return tuple(_field(a, v) for a, v in zip(args, value)) if args else tuple(value)
    if origin is list and isinstance(value, list):
        return [_field(args[0], v) for v in value] if args else value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def identity_plan(ckpt: Checkpoint) -> Plan:
    """The plan of a converted file: every tensor is the parameter of its own name."""
    plan = Plan()
    for key, ref in ckpt.items():
        plan.targets[key] = Target(
            key, (Source(key),), None, None, "none", None, tuple(ref.shape), str(ref.dtype)
        )
        plan.consumed.add(key)
    return plan
