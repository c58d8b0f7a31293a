"""docs/memory.md's tables (scripts/memory_table.py): up to date, and sane.

Regenerating every release takes about half a minute here (most of it building the abstract
trees of some forty networks), so the fast test regenerates three releases' rows -- Wan2.1
T2V-1.3B and T2V-14B, CogVideoX-2B -- and finds each generated line, headers included, in
the document, and every release's name in each table; ``--check`` over everything is the
slow test. The sanity checks read the same estimates: Wan2.1-14B's DiT held at 4 bytes a
parameter (the Wan DiT keeps float32 weights under ``bf16``) exactly, ``--quantize fp8``
about a quarter of that and CogVideoX-2B's bfloat16 DiT about half, ``--offload block``'s DiT
phase below ``model``'s (which holds the whole DiT), and the peaks ordered so.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ("Wan2.1 T2V-1.3B", "Wan2.1 T2V-14B", "CogVideoX-2B")


def _script():
    spec = importlib.util.spec_from_file_location("memory_table",
                                                  ROOT / "scripts" / "memory_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    mt = _script()
    rows = [row for row in mt.ROWS if row.label in SAMPLE]
    found = {r.row.label: r for r in mt.results(rows)}
    return mt, found


def _block(mt) -> str:
    doc = mt.DOC.read_text(encoding="utf-8")
    assert mt.BEGIN in doc and mt.END in doc, f"{mt.DOC}: the markers are missing"
    return doc.split(mt.BEGIN, 1)[1].split(mt.END, 1)[0]


def test_sampled_rows_are_up_to_date(table):
    mt, found = table
    block = _block(mt)
    lines = set(block.splitlines())
    stale = [line for line in mt.markdown(list(found.values())).splitlines()
             if line not in lines]
    assert not stale, ("docs/memory.md is stale (python scripts/memory_table.py --write); "
                       "not in it: " + "\n".join(stale))
    firsts = [ln[2:].split(" | ")[0] for ln in block.splitlines() if ln.startswith("| ")]
    for row in mt.ROWS:   # every release in each of the three tables
        names = (row.label, f"{row.label} — {row.note}")
        assert sum(first in names for first in firsts) == 3, row.label


def test_numbers_are_sane(table):
    """Wan2.1-14B: the DiT's bytes, the quantized ones, the phases under offload."""
    from vidax.translator.verify import abstract_params

    _, found = table
    wan = found["Wan2.1 T2V-14B"]
    spec, config = wan.release.specs["dit"], wan.release.configs["dit"]
    count = sum(math.prod(a.shape) for a in abstract_params(spec.model_class(),
                                                            config).values())
    plain, fp8 = wan.estimates[("none", None)], wan.estimates[("none", "fp8")]
    assert plain.dtypes["dit"] == "float32"
    assert plain.weights["dit"] == 4 * count
    assert 0.24 < fp8.weights["dit"] / plain.weights["dit"] < 0.27   # 1 byte + scales
    assert fp8.weights["vae"] == plain.weights["vae"]                 # the DiT's only
    model, block = wan.estimates[("model", None)], wan.estimates[("block", None)]
    assert model.on_device["DiT step"] == plain.weights["dit"]        # all of it
    assert 0 < block.on_device["DiT step"] < model.on_device["DiT step"] / 4
    assert block.peak < model.peak < plain.peak
    cog = found["CogVideoX-2B"]
    plain, fp8 = cog.estimates[("none", None)], cog.estimates[("none", "fp8")]
    assert plain.dtypes["dit"] == "bfloat16"
    assert 0.45 < fp8.weights["dit"] / plain.weights["dit"] < 0.55


def test_check_says_when_the_document_is_stale(tmp_path, monkeypatch, table):
    """``--check`` passes on what ``--write`` writes and fails once a number in the table is
    changed (the releases: the sampled ones, so that the document is the script's own)."""
    mt, found = table
    monkeypatch.setattr(mt, "results", lambda rows=mt.ROWS: list(found.values()))
    fresh = mt.render(mt.DOC.read_text(encoding="utf-8"), mt.markdown(list(found.values())))
    path = tmp_path / "memory.md"
    monkeypatch.setattr(mt, "DOC", path)
    path.write_text(fresh, encoding="utf-8")
    assert mt.main(["--check"]) == 0
    row = next(ln for ln in fresh.splitlines() if ln.startswith("| Wan2.1 T2V-14B | ")
               and "+)" in ln)
    path.write_text(fresh.replace(row, re.sub(r"\d+\.\d", "0.0", row, count=1)),
                    encoding="utf-8")
    assert mt.main(["--check"]) == 1
    assert mt.main(["--write"]) == 0 and path.read_text(encoding="utf-8") == fresh


@pytest.mark.slow
def test_check_passes():
    """``scripts/memory_table.py --check``: every release regenerated."""
    assert _script().main(["--check"]) == 0
