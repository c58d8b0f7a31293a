"""Files generated from the code or from the authors' code are up to date: the tables in
docs/, the packaged manifests, and the tiny demo layouts."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _check(script: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docs_tables_are_current():
    _check("gen_docs.py")


def test_derived_comfyui_manifests_are_current():
    """vidax/data/manifests/comfyui/ is what scripts/derive_comfyui_manifests.py derives."""
    _check("derive_comfyui_manifests.py")


@pytest.mark.slow     # builds every family's reference at its tiny config (torch, diffusers)
def test_tiny_layouts_are_the_authors():
    """vidax/data/tiny/ records the authors' own key layouts at vidax's tiny configs."""
    _check("make_tiny_layouts.py")


def test_every_demo_has_a_tiny_layout_builder():
    """The staleness check above regenerates every layout in vidax/data/tiny/: each file has
    a builder in make_tiny_layouts.LAYOUTS, each demo family its layout (a demo that runs another's
release, vidax.demo.layouts.SHARED_LAYOUTS, that one; importing the script
    costs nothing: the builders import torch when they run)."""
    import importlib.util

    from vidax import demo

    spec = importlib.util.spec_from_file_location("make_tiny_layouts",
                                                  ROOT / "scripts" / "make_tiny_layouts.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    recorded = {p.stem for p in (ROOT / "vidax" / "data" / "tiny").glob("*.json")}
    assert recorded == set(script.LAYOUTS)
    from vidax.demo.layouts import SHARED_LAYOUTS

    present = {SHARED_LAYOUTS.get(m, m) for m, module in demo.DEMOS.items()
               if importlib.util.find_spec(module)}
    assert present <= recorded


def test_packaged_manifests_are_current(shared_manifests):
    """Against ``../shared/manifests`` (tests/conftest.py's ``shared_manifests``: absent, this
    fails unless VIDAX_NO_SHARED=1)."""
    _check("sync_manifests.py")
