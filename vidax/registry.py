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
        if variant not in self.variants:
            raise RegistryError(
                f"{self.model_type} {self.component} has no variant {variant!r}; "
                f"known: {', '.join(self.variants)} (and 'tiny')")
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
    _load_builtin()
    component, layout = split_component(component, layout)
    spec = _SPECS.get((model_type, component, layout))
    if spec is None:
        known = sorted({f"{s.model_type} {s.component} ({s.layout})" for s in _SPECS.values()})
        raise RegistryError(
            f"no model registered for model_type {model_type!r}, component {component!r}, "
            f"layout {layout!r}; registered: {'; '.join(known)}")
    return spec


def resolve(family: str, variant: str, component: str,
            layout: str | None = None) -> tuple[ComponentSpec, str]:
    """The spec and variant that implement a (family, variant, component, layout)."""
    _load_builtin()
    component, layout = split_component(component, layout)
    a = _ALIASES.get((family, variant, component, layout))
    if a is not None:
        return get(a.model_type, a.component, a.layout), a.variant
    return get(family, component, layout), variant


_LOADED = False


def _load_builtin() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        importlib.import_module("vidax.translator.mappings")
