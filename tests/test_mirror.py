"""The tree mirrors itself (DESIGN.md §2): one ``vidax/models/<name>/`` package per family or
shared encoder, one mapping module, one ``tests/models/<name>/`` folder and one
``docs/models/<name>.md`` guide per package; configs in JAX-free ``config`` modules; a registry
that loads without JAX; no module past 800 lines."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vidax import registry
from vidax.translator import mappings

ROOT = Path(__file__).resolve().parent.parent
VIDAX = ROOT / "vidax"
MAX_LINES = 800
#: Modules a config module may import (besides the standard library): vidax.tiling is the
#: VAEs' shared tile geometry, numpy only (the configs' TileSettings make its SpatialTiles).
CONFIG_IMPORTS = ("vidax.errors", "vidax.models.", "vidax.tiling")


def model_packages() -> set[str]:
    return {p.parent.name for p in (VIDAX / "models").glob("*/__init__.py")}


def mapping_modules() -> set[str]:
    return {p.stem for p in (VIDAX / "translator" / "mappings").glob("*.py")} - {"__init__"}


def _imports(path: Path) -> list[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


# ------------------------------------------------------------------------------ (a) the sets
def test_every_model_package_has_a_mapping_module_tests_and_a_guide():
    models = model_packages()
    assert models, "no packages under vidax/models"
    alternate = set(mappings.ALTERNATE_LAYOUTS)
    assert alternate <= mapping_modules(), "a declared alternate-layout module is missing"
    assert not alternate & models, "an alternate-layout module has a model package of its own"
    sets = {
        "vidax/translator/mappings/<name>.py (less common and the alternate layouts)":
            mapping_modules() - {"common"} - alternate,
        "tests/models/<name>/": {p.name for p in (ROOT / "tests" / "models").iterdir()
                                 if p.is_dir() and p.name != "__pycache__"},
        "docs/models/<name>.md": {p.stem for p in (ROOT / "docs" / "models").glob("*.md")},
    }
    for where, names in sets.items():
        assert names == models, (f"{where} does not mirror vidax/models/: missing "
                                 f"{sorted(models - names)}, extra {sorted(names - models)}")


def test_every_mapping_module_is_imported_by_the_package():
    source = (VIDAX / "translator" / "mappings" / "__init__.py").read_text()
    for name in sorted(mapping_modules() - {"common"}):
        assert f"from vidax.translator.mappings import {name} " in source, (
            f"vidax/translator/mappings/__init__.py does not import {name}: its components "
            "would not be registered")


# ------------------------------------------------------------------------------ (b) the specs
@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: "/".join(s.key))
def test_spec_references_resolve_to_their_homes(spec):
    model_module, _, _ = spec.model.partition(":")
    config_module, _, _ = spec.config.partition(":")
    mapper_module, _, _ = spec.mapper.partition(":")
    assert model_module.startswith("vidax.models."), spec.model
    package = model_module.split(".")[2]
    assert package in model_packages(), spec.model

    cls = spec.model_class()
    assert cls.__module__ == model_module, (
        f"{spec.model}: the class is defined in {cls.__module__}, not where the spec says")
    config = spec.config_class()
    assert config_module.startswith("vidax.models.") and config_module.endswith(".config"), (
        f"{spec.config}: a config lives in a vidax.models.<name>.config module")
    assert config.__module__ == config_module, (
        f"{spec.config}: defined in {config.__module__}, not in its config module")
    for variant in (*spec.variants, "tiny"):
        assert spec.make_config(variant) is not None

    homes = {f"vidax.translator.mappings.{package}"} | {
        f"vidax.translator.mappings.{m}" for m in mappings.ALTERNATE_LAYOUTS}
    assert mapper_module in homes, (
        f"{spec.mapper}: the mapper of a vidax.models.{package} model lives in "
        f"vidax.translator.mappings.{package} (or a declared alternate-layout module)")
    assert spec.get_mapper().name
    if spec.config_from_metadata:
        fn_module = spec.config_from_metadata.partition(":")[0]
        assert fn_module.startswith("vidax.translator.mappings."), spec.config_from_metadata
        registry._resolve(spec.config_from_metadata)


def test_mapping_modules_import_no_model_module():
    for path in sorted((VIDAX / "translator" / "mappings").glob("*.py")):
        for name in _imports(path):
            allowed = (name.startswith(("vidax.translator.mapping", "vidax.registry",
                                        "vidax.errors"))
                       or (name.startswith("vidax.models.") and name.endswith(".config"))
                       or not name.startswith(("vidax", "jax", "flax")))
            assert allowed, f"{path.relative_to(ROOT)} imports {name}"


def test_config_modules_import_no_jax_and_no_model():
    configs = sorted((VIDAX / "models").glob("*/config.py"))
    assert {p.parent.name for p in configs} == model_packages(), "a package has no config.py"
    for path in configs:
        for name in _imports(path):
            assert not name.startswith(("jax", "flax", "vidax.nn")), (
                f"{path.relative_to(ROOT)} imports {name}")
            if name.startswith("vidax"):
                assert name.startswith(CONFIG_IMPORTS) and (
                    not name.startswith("vidax.models.") or name.endswith(".config")), (
                    f"{path.relative_to(ROOT)} imports {name}: a config imports only "
                    "vidax.errors, vidax.tiling and other config modules")


def test_config_dataclasses_live_in_config_modules():
    for path in sorted((VIDAX / "models").rglob("*.py")):
        if path.name == "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list):
                pytest.fail(f"{path.relative_to(ROOT)}: dataclass {node.name} belongs in its "
                            "package's config.py")


# ------------------------------------------------------------------------------ (c) no JAX
_PROBE = """
import importlib, json, sys
import vidax.registry as r
specs = r.specs()
loaded = {}
for s in specs:
    for ref in (s.config, s.mapper):
        importlib.import_module(ref.partition(":")[0])
    s.config_class()
    s.get_mapper()
    for v in (*s.variants, "tiny"):
        s.make_config(v)
from vidax import cli
cli.main(["models"])
print(json.dumps({"specs": len(specs),
                  "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "flax"))}))
"""


def test_registry_mappings_and_configs_load_without_jax():
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["specs"] == len(registry.specs())
    assert result["heavy"] == [], (
        "importing vidax.registry, the mapping and config modules (and `vidax models`) "
        f"imported {result['heavy'][:5]}")


# ------------------------------------------------------------------------------ (d) sizes
def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(VIDAX.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_model_packages_import_nothing_at_package_level():
    for name in sorted(model_packages()):
        mod = importlib.import_module(f"vidax.models.{name}")
        tree = ast.parse(Path(mod.__file__).read_text())
        assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], (
            f"vidax/models/{name}/__init__.py imports: a package's __init__ holds a docstring")
