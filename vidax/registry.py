"""The model registry: ``model_type`` -> configs, model class, mapper, file layouts.

One ``ComponentSpec`` per (model_type, component, layout). Classes and mappers are named
as ``"module:attribute"`` strings and imported on first use, so ``vidax models`` and
``vidax inspect`` stay quick and a family's code loads only when it is used.

The alias table resolves the names the manifests (and users) use for one architecture
shipped under several families -- the Wan2.1 VAE is also Cosmos-Predict2.5's
``tokenizer.pth``, each Wan2.2 A14B expert is the Wan2.1 14B DiT -- to the one spec that
implements it. A ``*_diffusers`` component name is a layout, not a component.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass

from vidax.errors import RegistryError


def _resolve(ref: str):
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class ComponentSpec:
    model_type: str
    component: str
    layout: str
    model: str                     # "module:Class" -- the nnx.Module
    config: str                    # "module:ConfigClass" -- frozen dataclass
    mapper: str                    # "module:MAPPER" -- a vidax.translator.mapping.Mapper
    variants: dict[str, str]       # variant -> config classmethod name
    prefix: str = ""               # the component's key prefix inside a multi-component file
    files: tuple[str, ...] = ()    # file names (globs) of this component in a release folder
    description: str = ""
    # "module:function" reading the config from a file's safetensors ``__metadata__``
    # (``fn(metadata: dict[str, str], source: str) -> config | None``; None: not there), for
    # families whose files embed their hyperparameters (LTX single files)
    config_from_metadata: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model_type, self.component, self.layout)

    def model_class(self) -> type:
        return _resolve(self.model)

    def config_class(self) -> type:
        return _resolve(self.config)

    def get_mapper(self):
        return _resolve(self.mapper)

    def config_from_file_metadata(self, metadata: dict[str, str], source: str):
        """The config a checkpoint's embedded metadata declares, or None (no hook, or the
        file carries none)."""
        if self.config_from_metadata is None:
            return None
        return _resolve(self.config_from_metadata)(metadata, source)

    def make_config(self, variant: str | None = None, overrides: dict | None = None):
        """The config of a released variant (or ``tiny``), or one built from a manifest's /
        config.json's ``config`` dict via the config class's ``from_dict``."""
        cls = self.config_class()
        if overrides is not None:
            return cls.from_dict(overrides)
        if variant is None:
            raise RegistryError(f"{self.model_type} {self.component}: name a variant "
                                f"({', '.join(self.variants)})")
        if variant == "tiny":
            return cls.tiny()
        if variant.startswith("demo"):   # the tiny release `vidax demo` writes
            from vidax.demo.layouts import demo_config

            return cls.from_dict(demo_config(self.key, variant))
        if variant not in self.variants:
            raise RegistryError(
                f"{self.model_type} {self.component} has no variant {variant!r}"
                f"{did_you_mean(variant, [*self.variants, 'tiny'])}; its variants: "
                f"{', '.join(self.variants)} (and 'tiny')")
        return getattr(cls, self.variants[variant])()


@dataclass(frozen=True)
class Alias:
    """(family, variant, component, layout) as a manifest or user names it -> what implements it."""

    model_type: str
    variant: str
    component: str
    layout: str


_SPECS: dict[tuple[str, str, str], ComponentSpec] = {}
_ALIASES: dict[tuple[str, str, str, str], Alias] = {}


def register(spec: ComponentSpec) -> ComponentSpec:
    if spec.key in _SPECS:
        raise RegistryError(f"{spec.key} registered twice")
    _SPECS[spec.key] = spec
    return spec


def alias(family: str, variant: str, component: str, layout: str, target: Alias) -> None:
    _ALIASES[(family, variant, component, layout)] = target


def specs() -> list[ComponentSpec]:
    _load_builtin()
    return list(_SPECS.values())


def aliases() -> dict[tuple[str, str, str, str], Alias]:
    _load_builtin()
    return dict(_ALIASES)


def split_component(component: str, layout: str | None) -> tuple[str, str]:
    """``vae_diffusers`` -> (``vae``, ``diffusers``); a plain name keeps ``layout``."""
    for suffix in ("_diffusers",):
        if component.endswith(suffix):
            return component[: -len(suffix)], suffix[1:]
    return component, layout or "original"


def get(model_type: str, component: str, layout: str | None = None) -> ComponentSpec:
    """The spec of (model_type, component, layout); a name that is not registered is a
    ``RegistryError`` naming the closest registered ones."""
    _load_builtin()
    component, layout = split_component(component, layout)
    spec = _SPECS.get((model_type, component, layout))
    if spec is None:
        raise RegistryError(_not_registered(model_type, component, layout))
    return spec


def resolve(family: str, variant: str, component: str,
            layout: str | None = None) -> tuple[ComponentSpec, str]:
    """The spec and variant that implement a (family, variant, component, layout)."""
    _load_builtin()
    component, layout = split_component(component, layout)
    a = _ALIASES.get((family, variant, component, layout))
    if a is not None:
        return get(a.model_type, a.component, a.layout), a.variant
    if (family, component, layout) not in _SPECS:
        raise RegistryError(_not_registered(family, component, layout, variant, aliases=True))
    return get(family, component, layout), variant


# ------------------------------------------------------------------------------ suggestions
def _normalise(name: str) -> str:
    """``Wan2.1`` / ``wan2-1`` / ``wan21`` -> ``wan21``: case and the separators ``_ . -``
    (and spaces) do not tell names apart."""
    return "".join(ch for ch in str(name).lower() if ch not in "_.- ")


def suggest(name: str, choices, n: int = 3) -> list[str]:
    """The names of ``choices`` a misspelt ``name`` most likely meant: those equal to it up to
    case and separators (so ``wan21``, ``wan2.1`` and ``Wan2_1`` find ``wan2_1`` alone), else
    :func:`difflib.get_close_matches` over the normalised spellings."""
    by_key: dict[str, list[str]] = {}
    for choice in dict.fromkeys(choices):
        by_key.setdefault(_normalise(choice), []).append(choice)
    key = _normalise(name)
    if key in by_key:
        return by_key[key][:n]
    found = []
    for close in difflib.get_close_matches(key, list(by_key), n=n, cutoff=0.6):
        found += by_key[close]
    return found[:n]


def did_you_mean(name: str, choices) -> str:
    """`` (did you mean 'wan2_1'?)`` for an error message, or ``""`` when nothing is close."""
    close = suggest(name, choices)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _not_registered(model_type: str, component: str, layout: str, variant: str | None = None,
                    *, aliases: bool = False) -> str:
    """Why (model_type, component, layout[, variant]) names nothing: the first of the three
    that is unknown, what it may have meant, and the names it could have been (not a dump
    of the registry). With ``aliases`` (:func:`resolve`), the alias table's names count."""
    entries = [(s.model_type, s.component, s.layout, None) for s in _SPECS.values()]
    if aliases:
        entries += [(f, c, lay, v) for f, v, c, lay in _ALIASES]
    types = sorted({e[0] for e in entries})
    if model_type not in types:
        return (f"no model registered for model_type {model_type!r}"
                f"{did_you_mean(model_type, types)}; the model types: {', '.join(types)} "
                "(vidax models lists their components, layouts and variants)")
    own = [e for e in entries if e[0] == model_type]
    layouts: dict[str, list[str]] = {}
    for _, c, lay, _ in own:
        layouts.setdefault(c, [])
        if lay not in layouts[c]:
            layouts[c].append(lay)
    if component not in layouts:
        spelled = list(layouts) + [f"{c}_{lay}" for c, lays in layouts.items() for lay in lays
                                   if lay == "diffusers"]
        listed = "; ".join(f"{c} ({', '.join(lays)})" for c, lays in layouts.items())
        return (f"{model_type} has no component {component!r}{did_you_mean(component, spelled)}"
                f"; its components (layouts): {listed}")
    if layout not in layouts[component]:
        return (f"{model_type} {component} has no layout {layout!r}"
                f"{did_you_mean(layout, layouts[component])}; its layouts: "
                f"{', '.join(layouts[component])}")
    # Only through the alias table, and for other variants than this one.
    variants = [v for f, c, lay, v in own if (c, lay) == (component, layout) and v]
    return (f"{model_type} {component} ({layout}) is known only for the variants "
            f"{', '.join(variants)} (aliases of a component registered under another model "
            f"type), not {variant!r}{did_you_mean(variant, variants)}")


_LOADED = False


def _load_builtin() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        importlib.import_module("vidax.translator.mappings")
