"""benchmarks/device_check.py, the prepared accelerator check, on a CPU: its ``--smoke`` run
(every family's tiny DiT, the Wan VAEs' decode chunk, the authors' Wan block, the placement
check) writes a JSON row per item with positive times and finite FLOPs and the markdown table;
and the full-size clips it would time are each release's default size."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.py"


def _module():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("benchmarks.device_check")


def _smoke(out: Path, *options: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out), *options],
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (out / "device_check.md").is_file()
    return json.loads((out / "device_check.json").read_text())


def _check_timed(report: dict, items: list[str]) -> dict:
    rows = {r["item"]: r for r in report["rows"]}
    assert sorted(rows) == sorted(items), (sorted(rows), report["skipped"])
    for item in items:
        row = rows[item]
        assert "error" not in row, (item, row["error"])
        if item == "placement":
            assert row["equal"] is True
            continue
        assert row["times"] and min(row["times"]) > 0, item
        if item.startswith(("dit:", "vae:")):
            assert math.isfinite(row["flops"]) and row["flops"] > 0, item
            assert math.isfinite(row["flops_compiled"]) and row["compile_s"] > 0, item
            assert row["per_block_ms" if item.startswith("dit:") else "per_video_s"] > 0, item
            assert any("attention kernel" in line for line in row["attention"]), item
    return rows


@pytest.mark.slow
def test_smoke_runs_every_family(tmp_path):
    module = _module()
    report = _smoke(tmp_path)
    items = (["placement", "torch:wan2_1"] + [f"dit:{f}" for f in module.FAMILIES]
             + [f"vae:{v}" for v in module.VAES] + ["offload:none", "offload:block"])
    rows = _check_timed(report, items)
    # the Wan2.1 blocks streamed from host memory: the same call, host memory on the CPU
    assert rows["offload:block"]["blocks_bytes"] > 0 and rows["offload:none"]["tokens"] > 0
    # XLA's count of the Wan2.1 DiT covers at least its blocks' matmuls and attentions
    wan = rows["dit:wan2_1"]
    cfg = module.FAMILIES["wan2_1"].tiny()
    from benchmarks.gpu_dit_blocks import block_flops

    blocks = wan["blocks_timed"] * block_flops(cfg.dim, cfg.ffn_dim, wan["tokens"], cfg.text_len)
    assert wan["flops"] >= blocks
    markdown = (tmp_path / "device_check.md").read_text()
    for family in module.FAMILIES:
        assert f"| {family} |" in markdown
    assert "Weight offload" in markdown and "| block |" in markdown


def test_smoke_isolates_items(tmp_path):
    """The fast lane's share: two items, each in its own worker process (as on the device)."""
    report = _smoke(tmp_path, "--families", "cogvideox", "--vaes", "", "--no-torch",
                    "--per-process", "1")
    rows = _check_timed(report, ["placement", "dit:cogvideox"])
    assert rows["dit:cogvideox"]["tokens"] > 0 and report["per_process"] == 1
    assert "| cogvideox | 1.5-5b |" in (tmp_path / "device_check.md").read_text()


def test_full_size_clips_are_the_releases_defaults():
    """(frames, height, width), the latent grid and the video tokens each family is timed at:
    the release's default clip (a variant name the pipeline does not know would silently give
    its tiny defaults)."""
    module = _module()
    expected = {
        "wan2_1": ((81, 720, 1280), (21, 90, 160), 75600),
        "wan2_2": ((121, 704, 1280), (31, 44, 80), 27280),
        "cosmos2_5": ((93, 704, 1280), (24, 88, 160), 84480),
        "cosmos3": ((189, 720, 1280), (48, 46, 80), 44160),      # 45 latent rows padded to 46
        "ltx_video": ((121, 704, 1216), (16, 22, 38), 13376),
        "ltx2_5": ((121, 1024, 1536), (16, 32, 48), 24576),
        "hunyuan_video": ((129, 720, 1280), (33, 90, 160), 118800),
        "hunyuan_video1_5": ((121, 720, 1280), (31, 45, 80), 111600),
        "cogvideox": ((81, 768, 1360), (22, 96, 170), 44880),    # 21 latent frames padded to 22
    }
    assert set(expected) == set(module.FAMILIES)
    for name, (clip, grid, tokens) in expected.items():
        family = module.FAMILIES[name]
        cfg = family.config()
        video = module.release_video(family, cfg, smoke=False)
        assert (video.frames, video.height, video.width) == clip, name
        assert video.grid == grid, name
        assert math.prod(n // p for n, p in zip(video.grid, family.patch(cfg))) == tokens, name
