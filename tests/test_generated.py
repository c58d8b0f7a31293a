"""Files generated from the code or from the authors' code are up to date: the tables in
docs/, the packaged manifests, and the tiny demo layouts."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "manifests"


def _check(script: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docs_tables_are_current():
    _check("gen_docs.py")


@pytest.mark.slow     # builds every family's reference at its tiny config (torch, diffusers)
def test_tiny_layouts_are_the_authors():
    """vidax/data/tiny/ records the authors' own key layouts at vidax's tiny configs."""
    _check("make_tiny_layouts.py")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/manifests is not beside the repo")
def test_packaged_manifests_are_current():
    _check("sync_manifests.py")
