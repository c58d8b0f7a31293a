"""``vidax generate --step-cache``: a missing published calibration and bad settings refused
before a weight is read (exit != 0, one paragraph, no file written), MagCache calibrated on one
run (``--step-cache-calibrate``) and reused on the next (``--step-cache-set mag_ratios=FILE``),
and the line every generate prints about the DiT evaluations it made and skipped."""

from __future__ import annotations

import json

import pytest

from vidax import cli
from vidax.demo import wan2_1 as demo

STEPS = 6


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("step_cache_cli") / demo.FOLDER
    demo.write(folder)
    return folder


def _generate(release, out, *extra):
    return cli.main(["generate", "wan2_1", "--checkpoint-dir", str(release), "--prompt",
                     demo.PROMPT, "--frames", "9", "--size", "64x48", "--steps", str(STEPS),
                     "--precision", "fp32", "--out", str(out), *extra])


@pytest.mark.parametrize("extra, says", [
    (["--step-cache", "magcache"], "no published magnitude ratios for wan2_1/tiny"),
    (["--step-cache", "teacache"], "publish no rescaling polynomial for wan2_1/tiny"),
    (["--step-cache", "first-block", "--step-cache-set", "bogus=1"], "unknown step-cache"),
    (["--step-cache", "first-block", "--step-cache-set", "threshold"], "give KEY=VALUE"),
    (["--step-cache-threshold", "0.1"], "given without a cache kind"),
    (["--step-cache", "first-block", "--step-cache-calibrate", "r.json"], "pass --step-cache "
                                                                         "magcache"),
    (["--guidance-window", "0:1.5"], "0 <= start <= stop <= 1"),
    (["--step-cache", "taylorseer", "--step-cache-set", "interval=0"], "interval must be a "
                                                                        "whole number >= 1"),
    (["--step-cache", "taylorseer", "--step-cache-set", "order=1.5"], "order must be a whole"),
    (["--guidance-window", "half"], "give START:STOP"),
])
def test_refused_before_loading(release, tmp_path, capsys, extra, says):
    out = tmp_path / "out.mp4"
    assert _generate(release, out, *extra) != 0
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert says in text and "loading" not in text
    assert not out.exists()


def test_calibrate_then_reuse(release, tmp_path, capsys):
    ratios = tmp_path / "ratios.json"
    assert _generate(release, tmp_path / "a.mp4", "--step-cache", "magcache",
                     "--step-cache-calibrate", str(ratios)) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"DiT evaluations: {STEPS} made, 0 skipped by magcache calibration" in text
    written = json.loads(ratios.read_text())
    rows = written["mag_ratios"]
    assert len(rows) == 2 and all(len(r) == STEPS and r[0] == 1.0 for r in rows)
    assert all(r > 0 and r != 1.0 for row in rows for r in row[1:])
    assert _generate(release, tmp_path / "b.mp4", "--step-cache", "magcache",
                     "--step-cache-set", f"mag_ratios={ratios}", "--step-cache-set",
                     "retention_ratio=0", "--step-cache-threshold", "10") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "skipped by magcache (threshold 10, at most 3 in a row)" in text
    assert f"DiT evaluations: {STEPS} made" not in text
    assert (tmp_path / "b.mp4").stat().st_size > 0


def test_every_generate_says_what_the_dit_did(release, tmp_path, capsys):
    assert _generate(release, tmp_path / "c.mp4") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"DiT evaluations: {STEPS} made, 0 skipped; sampling" in text and "s/step" in text


def test_the_memory_estimate_counts_the_cache_state(release):
    import dataclasses

    import vidax
    from vidax.pipelines import step_cache

    pipe = vidax.pipeline("wan2_1", release)
    request = pipe.request(demo.PROMPT, frames=9, size=(64, 48), steps=STEPS)
    plain = pipe.estimate_memory(request, weights=False).phases["DiT step"].bytes
    geometry = pipe.dit_geometry(request)
    for kind, copies in (("first-block", 2), ("magcache", 1), ("taylorseer", 2)):
        cached = dataclasses.replace(request, step_cache=step_cache.parse(kind))
        phase = pipe.estimate_memory(cached, weights=False).phases["DiT step"]
        assert phase.bytes - plain == copies * 2 * geometry.tokens * geometry.dim * 4
        assert f"{kind} state" in phase.note


@pytest.mark.parametrize("family, variant, task, size, image, key", [
    ("wan2_1", "i2v-14b", "i2v", (832, 480), None, "wan2_1/i2v-14b@480p"),
    ("wan2_1", "i2v-14b", "i2v", (1280, 720), None, "wan2_1/i2v-14b@720p"),
    ("wan2_1", "t2v-14b", "t2v", (1280, 720), None, "wan2_1/t2v-14b"),
    ("wan2_2", "i2v-a14b", "i2v", (1280, 720), None, "wan2_2/i2v-a14b"),
    ("wan2_2", "ti2v-5b", "ti2v", (1280, 704), None, "wan2_2/ti2v-5b@t2v"),
    ("wan2_2", "ti2v-5b", "ti2v", (1280, 704), "an image", "wan2_2/ti2v-5b@i2v"),
    ("hunyuan_video", "t2v-720p", "t2v", (960, 544), None, "hunyuan_video/t2v-720p@544p"),
    ("hunyuan_video", "t2v-720p", "t2v", (1280, 720), None, "hunyuan_video/t2v-720p"),
])
def test_the_calibration_follows_the_authors_size_and_task(family, variant, task, size, image,
                                                           key):
    """MagCache's authors calibrate per checkpoint (Wan2.1 i2v 480p / 720p), height
    (HunyuanVideo) and task (Wan2.2 TI2V with or without its image): the key and the
    published ratios and settings a run gets."""
    import types

    from vidax import pipelines
    from vidax.nn.step_cache import StepCache
    from vidax.pipelines import step_cache

    cls = pipelines.family(family).Pipeline
    pipe = cls.__new__(cls)
    pipe.variant, pipe.task = variant, task
    request = types.SimpleNamespace(size=size, image=image)
    assert pipe.step_cache_key(request) == key
    table = step_cache.published()["magcache"][key]
    bound = step_cache.bind(pipe, StepCache("magcache"), len(table["ratios"][0]), request)
    assert bound.mag_ratios == tuple(tuple(r) for r in table["ratios"])
    assert (bound.threshold, bound.max_skip_steps) == (table["threshold"],
                                                        table["max_skip_steps"])
