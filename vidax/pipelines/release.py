"""A release folder as the pipelines read it: the weight files it needs (:class:`Part`), the
folders (:class:`Needed`), finding them (:func:`find_files`), what was found
(:class:`Release`), and each component verified before any weight is read
(:func:`verify_component`). Re-exported by :mod:`vidax.pipelines.base`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vidax import loading, registry
from vidax.errors import VerificationError, VidaxError
from vidax.pipelines import overrides
from vidax.pipelines.inputs import RELEASES, recognise

if TYPE_CHECKING:
    from vidax.pipelines.base import Defaults


@dataclass(frozen=True)
class Part:
    """A weight file a release needs: ``key`` names it in :class:`Release` (``dit``,
    ``high_noise_model``, ...), ``spec`` is the registered model that reads it (its
    ``files``: the file name patterns), found in the folder ``under`` of the release;
    ``role`` says what it is (``"the DiT"``), ``shown`` the name a missing-file line gives
    (default: the last pattern)."""

    key: str
    spec: registry.ComponentSpec
    role: str
    under: str = ""
    shown: str | None = None


@dataclass(frozen=True)
class Needed:
    """A folder a release needs (a tokenizer's): ``key`` names it in :class:`Release`, it
    lies at ``path`` in the release and must hold each of ``holds``."""

    key: str
    path: str
    holds: tuple[str, ...]
    role: str


def open_folder(folder, family: str, variants, variant: str | None,
                hint: str = "as the authors publish it") -> Path:
    """The release folder, checked to exist and not to be another family's release
    (:func:`recognise`), and ``variant`` checked to be one of ``variants`` or ``"tiny"``
    (None: to be identified)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a {family} release folder, "
                         f"{hint})")
    others = recognise(folder)
    if others and family in RELEASES and family not in others:
        model_type = RELEASES[others[0]][0]
        raise VidaxError(f"{folder} is a {others[0]} release, not a {family} one: run "
                         f"vidax generate {model_type} --checkpoint-dir {folder} (in Python: "
                         f"vidax.pipeline({model_type!r}, ...)). Nothing was loaded.")
    if variant is not None and variant not in (*variants, "tiny"):
        raise VidaxError(f"unknown {family} variant {variant!r}; known: {', '.join(variants)} "
                         "(and 'tiny')")
    return folder


def find_files(folder: Path, parts, needed=(), *, what: str, also_missing=()) -> dict:
    """key -> path of each :class:`Part` (by its spec's file patterns; an index file
    wins over its shards) and each :class:`Needed` folder. Raises one error naming the folder
    and every missing file, ``also_missing`` (the family's own lines) last. A part given
    from elsewhere (:mod:`vidax.pipelines.overrides`: ``--dit FILE``, ...) is taken from
    there; a folder given for it also stands for each needed folder at the part's ``under``
    (a text encoder's own settings and tokenizer)."""
    files, missing, moved = {}, [], {}
    for part in parts:
        where = folder / part.under
        if overrides.given(part.key) is not None:
            files[part.key] = overrides.path_for(part.key, part.spec)
            if part.under and overrides.folder_for(part.key) is not None:
                moved[part.under] = overrides.folder_for(part.key)
        elif any(any(where.glob(pattern)) for pattern in part.spec.files):
            files[part.key] = loading.find_files(where, part.spec)
        else:
            name = part.shown or part.spec.files[-1]
            missing.append(f"{Path(part.under) / name if part.under else name} ({part.role})")
    for need in needed:
        files[need.key] = moved.get(need.path, folder / need.path)
        missing += [f"{files[need.key] if need.path in moved else need.path}/{name} "
                    f"({need.role})" for name in need.holds
                    if not (files[need.key] / name).is_file()]
    missing += list(also_missing)
    if missing:
        raise VidaxError(f"{folder} is not a complete {what} folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")
    return files


@dataclass(frozen=True)
class Release:
    """A release folder as :func:`inspect_folder` found it: its task, variant and defaults;
    ``files`` key -> path (weight files and needed folders), ``configs`` key -> config (each
    weight file's, and whatever else the family reads), ``specs`` key -> the registered
    model of each weight file, in loading order."""

    folder: Path
    task: str
    variant: str
    defaults: Defaults
    configs: dict
    files: dict
    specs: dict


def verify_component(spec, path: str | os.PathLike, config) -> None:
    """A component file's names and shapes against its model (``spec``: a
    ``vidax.registry.ComponentSpec``) at ``config``, before any weight of any component is
    read: the error ``vidax.load`` would raise, naming the file."""
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(path) as ckpt:
        report, _, _ = loading.verify_tensors(spec, config, ckpt, source=str(path))
    if not report.ok:
        raise VerificationError(
            f"{path} is not a {spec.model_type} {spec.component} checkpoint ({spec.layout} "
            "layout) at this config (no weights were loaded): "
            + "; ".join(report.lines(5)[1:]), report)
