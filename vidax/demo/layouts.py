"""The tiny releases ``vidax demo`` writes, as manifests: one per model component of every
layout in ``vidax/data/tiny/`` (recorded from the authors' classes by
``scripts/make_tiny_layouts.py``), so :func:`vidax.manifests.identify` recognises a demo's file
and ``vidax verify`` / ``vidax convert`` / ``vidax.load`` without a variant find its config.

Each is variant ``demo`` of the family whose registered model implements the component
(``wan2_1/demo__dit``), ``demo-<name>`` where that is another family's (LTX-Video's T5 is
``t5/demo-ltx_video__encoder``, Wan2.2's UMT5 ``wan2_1/demo-wan2_2__text_encoder``); the
registry's ``make_config`` builds those variants from :func:`demo_config`. Shapes only: the
demo writes each file in its release's dtype, and any dtype matches.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from types import MappingProxyType

from vidax.errors import RegistryError
from vidax.manifests import Manifest, TensorSpec

DEMO_VARIANT = "demo"
_TINY_DIR = "data/tiny"
#: Demos that run another demo's release (another task of the same files): name -> layout.
SHARED_LAYOUTS = {"hunyuan_video1_5-i2v": "hunyuan_video1_5"}


@functools.cache
def _demo_layouts() -> tuple[tuple[str, dict], ...]:
    root = resources.files("vidax").joinpath(_TINY_DIR)
    if not root.is_dir():
        return ()
    return tuple((item.name[:-len(".json")], json.loads(item.read_text()))
                 for item in sorted(root.iterdir(), key=lambda p: p.name)
                 if item.name.endswith(".json"))


def _tail_matches(file: str, pattern: str) -> bool:
    """Whether the last components of ``file`` match the glob ``pattern`` component by component
    (``x/transformers/mp_rank_00_model_states.pt`` matches ``transformers/mp_rank_*.pt``)."""
    import fnmatch

    parts, pats = file.split("/"), pattern.split("/")
    return len(parts) >= len(pats) and all(
        fnmatch.fnmatchcase(p, q) for p, q in zip(parts[-len(pats):], pats))


@functools.cache
def demo_spec(name: str, component: str) -> tuple[str, str, str] | None:
    """(model_type, component, layout) of the registered model that implements component
    ``component`` of the demo ``name``: the layout entry's ``spec`` where it names one, else
    the family's own spec or its alias (Wan2.2's UMT5 is ``wan2_1`` ``text_encoder``) whose
    file names match the entry's file. None when the entry is no model (a scheduler)."""
    from vidax import registry

    name = SHARED_LAYOUTS.get(name, name)
    entry = dict(_demo_layouts()).get(name, {}).get(component)
    if entry is None or not entry.get("tensors"):
        return None
    if entry.get("spec"):
        return tuple(entry["spec"])
    keys = {s.key for s in registry.specs() if (s.model_type, s.component) == (name, component)}
    keys |= {(a.model_type, a.component, a.layout) for (family, _, c, _), a
             in registry.aliases().items() if (family, c) == (name, component)}
    found = sorted(k for k in keys if any(_tail_matches(entry["file"], pattern)
                                          for pattern in registry.get(*k).files))
    return found[0] if len(found) == 1 else None


@functools.cache
def demo_manifests() -> tuple[Manifest, ...]:
    """A manifest per model component of every tiny demo layout (``vidax/data/tiny/``):
    ``<family>/demo__<component>`` (``demo-<name>`` where the demo is another family's), its
    shapes (any dtype: the demo picks the release's), its config as the layout records it."""
    found = []
    for name, layout in _demo_layouts():
        for component, entry in sorted(layout.items()):
            key = demo_spec(name, component)
            if key is None:
                continue
            family, comp, lay = key
            variant = DEMO_VARIANT if family == name else f"{DEMO_VARIANT}-{name}"
            tensors = {k: TensorSpec(tuple(v), None) for k, v in entry["tensors"].items()}
            found.append(Manifest(
                family=family, variant=variant, component=comp, layout=lay,
                container="pth" if entry["file"].endswith((".pth", ".pt")) else "safetensors",
                wrapper=entry.get("wrapper"), config=entry.get("config", {}),
                tensors=MappingProxyType(tensors),
                num_params=sum(math.prod(t.shape) for t in tensors.values()),
                num_tensors=len(tensors), name=f"{family}/{variant}__{comp}",
                released_as=f"vidax demo {name}: {entry['file']} of its tiny random-weight "
                            f"release (vidax/{_TINY_DIR}/{name}.json)",
                prefix=entry.get("prefix")))
    return tuple(found)


def demo_config(key: tuple[str, str, str], variant: str) -> dict:
    """The config dict of a demo manifest: the registered (model_type, component, layout)
    ``key`` at ``variant`` (``demo`` or ``demo-<name>``)."""
    for m in demo_manifests():
        if (m.family, m.component, m.layout, m.variant) == (*key, variant):
            return m.config
    known = sorted({m.variant for m in demo_manifests()
                    if (m.family, m.component, m.layout) == tuple(key)})
    raise RegistryError(f"{' '.join(key[:2])} ({key[2]} layout) has no demo variant "
                        f"{variant!r}" + (f"; its demo variants: {', '.join(known)}" if known
                                          else "; no vidax demo writes it"))


def tiny_config(spec, tensors):
    """What ``--variant tiny`` means for a demo's file: the config of the demo layout whose
    keys and shapes ``tensors`` (key -> anything with ``.shape``; a whole multi-component file
    is fine) hold exactly for ``spec`` (a registry ``ComponentSpec``), or None when the file is
    no demo's (then ``tiny`` is the component's own ``tiny()`` config, as before)."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    for m in demo_manifests():
        if (m.family, m.component, m.layout) != spec.key:
            continue
        mine = {k: s for k, s in shapes.items() if not m.prefix or k.startswith(m.prefix)}
        if mine == {k: t.shape for k, t in m.tensors.items()}:
            return spec.make_config(m.variant)
    return None
