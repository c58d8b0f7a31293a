"""A file per component from anywhere (``--dit FILE``, ``--vae FILE``, ``--text-encoder PATH``,
``--image-encoder FILE``; ``vidax.pipeline(..., dit=, vae=, text_encoder=, image_encoder=)``)
and diffusers folders (``model_index.json``) as ``--checkpoint-dir``; docs/generating.md,
"Components from elsewhere".

The rules, the same for every family:

* An override replaces the weights the release folder would provide for that component; it
  need not exist in the folder. Settings and tokenizers stay the folder's (Wan's DiT
  ``config.json``, CogVideoX's ``text_encoder/config.json``, ...): an override must be the
  component at the release's config.
* A folder (meant for a text encoder) stands for that component's folder in the release:
  its weights are found in it by the release's file names, and where the release keeps the
  component's own settings / tokenizer in that same folder (HunyuanVideo's
  ``text_encoder/``, LTX-Video's ``text_encoder/``), those are read from the given folder
  too (:func:`vidax.pipelines.base.find_files`). Cosmos-Predict2.5's ``--text-encoder DIR``
  is its ``text_encoder_dir`` (the Reason1 weights *and* tokenizer), as before.
* A family declares which of its :class:`~vidax.pipelines.base.Part` keys each option names
  (``COMPONENT_OPTIONS``: option -> key, or -> {selector: key} for several, e.g. Wan2.2's
  ``{"": "dit", "high": "high_noise_model", "low": "low_noise_model"}``: ``--dit FILE`` for
  TI2V-5B, ``--dit high=FILE --dit low=FILE`` for the A14B experts).
* Before any weight is read: a path that does not exist, an option or selector the family or
  release does not have, and a file that is not that component (its names and shapes
  verified 1:1 against the release's config, in any key layout vidax registers for the
  component: a diffusers DiT file for an authors' Wan folder is fine) are each one
  :class:`~vidax.errors.VidaxError` naming the option and the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect as _inspect
import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from vidax.errors import VerificationError, VidaxError

#: The override options, as ``vidax.pipeline`` keywords (the CLI's ``--dit``, ...).
OPTIONS = ("dit", "vae", "text_encoder", "image_encoder")


@dataclass(frozen=True)
class Given:
    """One override: the path as given (absolute) and how the user spelled it."""

    path: Path
    label: str


_ACTIVE: ContextVar[dict | None] = ContextVar("vidax_component_overrides", default=None)


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def declared(module) -> dict[str, dict[str, str]]:
    """option -> {selector: Part key} of a family module (``""``: the plain ``--dit FILE``)."""
    out = {}
    for option, keys in getattr(module, "COMPONENT_OPTIONS", {}).items():
        out[option] = dict(keys) if isinstance(keys, Mapping) else {"": keys}
    return out


def _forms(options: dict[str, dict[str, str]], keys=None) -> str:
    forms = [f"{flag(o)} {s + '=' if s else ''}{'PATH' if o == 'text_encoder' else 'FILE'}"
             for o, sels in options.items() for s, k in sels.items() if keys is None or k in keys]
    return ", ".join(forms) or "none"


def parse_cli(module, option: str, values) -> str | dict | None:
    """The values of a repeated CLI option: one plain path, or ``SELECTOR=PATH`` items (a
    selector the family declares for ``option``) as a dict; None when not given."""
    if not values:
        return None
    selectors = declared(module).get(option, {})
    out: dict[str, str] = {}
    for value in values:
        name, eq, rest = value.partition("=")
        sel, path = (name, rest) if eq and name in selectors and name else ("", value)
        if sel in out:
            raise VidaxError(f"{flag(option)} {sel + '=' if sel else ''}... given twice")
        out[sel] = path
    return out[""] if list(out) == [""] else out


def normalise(module, given: Mapping, family: str) -> dict[str, Given]:
    """Part key -> :class:`Given` from ``{option: path or {selector: path}}`` (None values:
    not given); every path checked to exist, every option and selector to be the family's."""
    options, out = declared(module), {}
    for option, value in given.items():
        if value is None:
            continue
        if option not in options:
            raise VidaxError(f"{flag(option)}: a {family} release takes no {option} from "
                             f"elsewhere; its component options: {_forms(options)}")
        items = value.items() if isinstance(value, Mapping) else [("", value)]
        for sel, path in items:
            label = f"{flag(option)} {sel + '=' if sel else ''}{path}"
            if sel not in options[option]:
                raise VidaxError(f"{label}: {family} has no {option} {sel!r}; its component "
                                 f"options: {_forms(options)}")
            path = Path(path).expanduser()
            if not path.exists():
                raise VidaxError(f"{label}: no such file or folder. Nothing was loaded.")
            if not path.is_dir() and not path.is_file():
                raise VidaxError(f"{label}: not a file or a folder. Nothing was loaded.")
            key = options[option][sel]
            if key in out:
                raise VidaxError(f"{out[key].label} and {label} name the same component")
            out[key] = Given(path.absolute(), label)
    return out


@contextlib.contextmanager
def active(overrides: dict[str, Given]):
    """The overrides :func:`path_for` (so :func:`vidax.pipelines.base.find_files`) sees."""
    token = _ACTIVE.set(overrides)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def given(key: str) -> Given | None:
    return (_ACTIVE.get() or {}).get(key)


def path_for(key: str, spec=None) -> Path | None:
    """The override of Part ``key`` (None: none): a file as given; in a folder, the weights
    by ``spec``'s file names (also without their folder part: ``transformer/x`` as ``x``)."""
    g = given(key)
    if g is None or spec is None or g.path.is_file():
        return None if g is None else g.path
    for patterns in (spec.files, [Path(p).name for p in spec.files]):
        for pattern in patterns:
            hits = sorted(g.path.glob(pattern))
            index = [h for h in hits if h.name.endswith(".index.json")]
            if index or len(hits) == 1:
                return (index or hits)[0]
    raise VidaxError(f"{g.label}: the folder holds no {spec.model_type} {spec.component} "
                     f"weights (looked for {', '.join(spec.files)}). Nothing was loaded.")


def folder_for(key: str) -> Path | None:
    """The folder given for Part ``key`` (None: none, or a file)."""
    g = given(key)
    return g.path if g is not None and g.path.is_dir() else None


def matching_spec(spec, path, config, label: str):
    """The registered model reading ``path`` as ``spec``'s component at ``config``: ``spec``
    itself, else another registered key layout of the same component (the first that
    verifies 1:1); else one error naming ``label`` with what the release's layout found."""
    from vidax import loading, registry
    from vidax.translator.io import open_checkpoint

    candidates = [spec] + [s for s in registry.specs() if s.layout != spec.layout and
                           (s.model_type, s.component) == (spec.model_type, spec.component)]
    first = None
    try:
        with open_checkpoint(path) as ckpt:
            for s in candidates:
                try:
                    report, _, _ = loading.verify_tensors(s, config, ckpt, source=str(path))
                except VidaxError as e:      # a layout whose rules refuse these keys
                    first = first or e
                    continue
                if report.ok:
                    return s
                first = first or report
    except VerificationError:
        raise
    except VidaxError as e:                  # not a checkpoint vidax can open
        raise VidaxError(f"{label}: {e}. Nothing was loaded.") from e
    layouts = ", ".join(s.layout for s in candidates)
    detail = "; ".join(first.lines(5)[1:]) if hasattr(first, "lines") else str(first)
    raise VerificationError(
        f"{label}: {path} is not a {spec.model_type} {spec.component} checkpoint at this "
        f"release's config (key layouts tried: {layouts}); nothing was loaded: {detail}",
        first if hasattr(first, "lines") else None)


def apply(release, overrides: dict[str, Given], family: str, module):
    """``release`` (whose files already hold the overrides) with each overridden component's
    model picked and verified (:func:`matching_spec`); an override of a component this
    release does not have is an error listing the ones it takes."""
    if not overrides:
        return release
    specs = dict(release.specs)
    for key, g in overrides.items():
        if key not in specs:
            what = f"{family} {release.variant} ({release.task})"
            raise VidaxError(f"{g.label}: a {what} release has no such component; it takes "
                             f"{_forms(declared(module), specs)}. Nothing was loaded.")
        if Path(release.files[key]) not in (g.path, path_for(key, specs[key])):
            raise VidaxError(f"{g.label}: this {family} release takes its {key} as "
                             f"{'a folder' if g.path.is_file() else 'a file'} (see "
                             "docs/generating.md). Nothing was loaded.")
        specs[key] = matching_spec(specs[key], release.files[key], release.configs[key],
                                   g.label)
    return dataclasses.replace(release, specs=specs)


def inspect(module, folder, *, variant=None, components: Mapping | None = None,
            model_type: str | None = None, **folder_options):
    """``module.inspect_folder(folder, variant, **folder_options)`` with the component
    overrides ``components`` (``{option: path or {selector: path}}``) applied; a diffusers
    folder is read by :func:`diffusers_reader`'s reader where the family has one."""
    family = model_type or getattr(module, "MODEL_TYPE", None) or str(
        getattr(module, "__name__", "?")).rsplit(".", 1)[-1]
    components = dict(components or {})
    reader = diffusers_reader(family, Path(folder))
    te = components.get("text_encoder")
    takes_dir = "text_encoder_dir" in _inspect.signature(module.inspect_folder).parameters
    if takes_dir and isinstance(te, (str, Path)) and Path(te).is_dir():
        folder_options["text_encoder_dir"] = components.pop("text_encoder")
    overrides = normalise(module, components, family)
    root = Path(folder).absolute()
    for g in overrides.values():
        if g.path == root or g.path in root.parents:
            raise VidaxError(f"{g.label}: that is the release folder (--checkpoint-dir) "
                             "itself; give the component's own file or folder")
    with active(overrides):
        try:
            release = (reader(module, Path(folder), variant) if reader else
                       module.inspect_folder(folder, variant=variant, **folder_options))
        except VidaxError as e:   # the family's own error about a given file: name the option
            named = [g.label for g in overrides.values()
                     if str(g.path) in str(e) and g.label not in str(e)]
            if not named:
                raise
            raise VidaxError(f"{named[0]}: {e}") from e
        return apply(release, overrides, family, module)


# ----------------------------------------------------------------------------- diffusers
#: diffusers pipeline class name prefixes (model_index.json's ``_class_name``) -> the vidax
#: families that run them (longest prefix first).
DIFFUSERS_FAMILIES = (("Cosmos2_5", ("cosmos2_5",)), ("Cosmos3", ("cosmos3",)),
                      ("CogVideoX", ("cogvideox",)), ("HunyuanVideo15", ("hunyuan_video1_5",)),
                      ("HunyuanVideo", ("hunyuan_video",)), ("LTX2", ("ltx2_5",)),
                      ("LTX", ("ltx_video",)), ("Wan", ("wan2_1", "wan2_2")))
#: The families whose own ``inspect_folder`` reads a diffusers folder (the Wan families' is
#: :mod:`vidax.pipelines.wan_diffusers`, used where every component has its layout).
READS_DIFFUSERS = ("cogvideox", "cosmos2_5", "cosmos3")
#: Per family without it: model_index.json's component -> the registered (model_type,
#: component) that would read it, for the error naming those without a diffusers layout.
DIFFUSERS_PARTS = {
    "wan2_1": {"transformer": ("wan2_1", "dit"), "vae": ("wan2_1", "vae"),
               "text_encoder": ("wan2_1", "text_encoder"),
               "image_encoder": ("wan2_1", "image_encoder")},
    "wan2_2": {"transformer": ("wan2_2", "dit"), "transformer_2": ("wan2_2", "dit"),
               "vae": ("wan2_2", "vae"), "text_encoder": ("wan2_1", "text_encoder"),
               "image_encoder": ("wan2_1", "image_encoder")},
    "ltx_video": {"transformer": ("ltx_video", "dit"), "vae": ("ltx_video", "vae"),
                  "text_encoder": ("t5", "encoder")},
    "ltx2_5": {"transformer": ("ltx2_5", "dit"), "vae": ("ltx2_5", "vae"),
               "audio_vae": ("ltx2_5", "audio_vae"), "vocoder": ("ltx2_5", "vocoder"),
               "text_encoder": ("gemma", "text_encoder"), "connectors": ("ltx2_5",
                                                                         "text_projection")},
    "hunyuan_video": {"transformer": ("hunyuan_video", "dit"), "vae": ("hunyuan_video", "vae"),
                      "text_encoder": ("llama", "text_encoder"),
                      "text_encoder_2": ("clip", "text_encoder")},
    "hunyuan_video1_5": {"transformer": ("hunyuan_video1_5", "dit"),
                         "vae": ("hunyuan_video1_5", "vae"),
                         "text_encoder": ("reason1", "text_encoder"),
                         "text_encoder_2": ("t5", "encoder"),
                         "image_encoder": ("siglip", "vision_encoder")},
}
#: The key layouts that read a diffusers folder's component (transformers' for its encoders).
DIFFUSERS_LAYOUTS = ("diffusers", "transformers")


def diffusers_class(folder: Path) -> str | None:
    """model_index.json's ``_class_name`` (None: no model_index.json)."""
    index = folder / "model_index.json"
    if not index.is_file():
        return None
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{index}: not a readable JSON file ({e})") from e
    return str(data.get("_class_name", "?")) if isinstance(data, dict) else "?"


def diffusers_reader(family: str, folder: Path):
    """For a diffusers folder (``model_index.json``) and ``family``: None where the family's
    own ``inspect_folder`` reads it (or it is no diffusers folder); the Wan families' reader
    (:func:`vidax.pipelines.wan_diffusers.inspect_folder`) where vidax has the diffusers
    layout of each component it holds; else one error naming the family that runs its
    ``_class_name``, or the components vidax has no diffusers layout of."""
    name = diffusers_class(folder) if folder.is_dir() else None
    if name is None or family in READS_DIFFUSERS:
        return None
    families = next((f for prefix, f in DIFFUSERS_FAMILIES if name.startswith(prefix)), ())
    index = folder / "model_index.json"
    if family not in families:
        run = (f"vidax generate {families[0]} --checkpoint-dir {folder}" if families
               else "none of vidax's pipelines runs it")
        raise VidaxError(f"{folder} is a diffusers {name} folder ({index}), not a {family} "
                         f"release: {run}. Nothing was loaded.")
    from vidax import registry

    data = json.loads(index.read_text(encoding="utf-8"))
    parts = DIFFUSERS_PARTS.get(family, {})
    present = [c for c in parts if isinstance(data.get(c), list) and data[c][0]]
    layouts = {(s.model_type, s.component) for s in registry.specs()
               if s.layout in DIFFUSERS_LAYOUTS}
    lacking = [f"{c}/ ({data[c][1]})" for c in present if parts[c] not in layouts]
    have = [f"{c}/" for c in present if parts[c] in layouts]
    from vidax.pipelines import wan_diffusers

    if not lacking and family in wan_diffusers.FAMILIES:
        return wan_diffusers.inspect_folder
    raise VidaxError(
        f"{folder} is a diffusers {name} folder ({index}); the {family} pipeline reads the "
        "authors' release folder, not diffusers' layout"
        + (f": vidax has no diffusers layout of {', '.join(lacking)}" if lacking else "")
        + (f" (it has those of {', '.join(have)})" if have else "")
        + ". Use the authors' release folder (components from elsewhere: --dit, --vae, "
        "--text-encoder, --image-encoder). Nothing was loaded.")
