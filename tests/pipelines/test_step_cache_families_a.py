"""Step caching (``step_cache=``, :mod:`vidax.nn.step_cache`) in the HunyuanVideo 1.0,
HunyuanVideo-1.5 and CogVideoX DiTs, on each family's tiny demo release
(``vidax.demo.<family>.write``), float32, a few steps at the demo's tiny size.

Per family, against the run without a cache:

* first-block at threshold 0 computes every step and gives the same latents, bit for bit
  (the blocks' loop through :func:`vidax.nn.step_cache.run_blocks` is the plain loop);
* first-block at a large threshold (tiny random models change a lot from step to step)
  skips steps, and the latents stay finite and differ;
* TaylorSeer (interval 2 after one warm-up step) skips steps;
* TeaCache, where its authors publish a rule (HunyuanVideo 1.0: the first double block's
  modulated image input; CogVideoX: the time embedding), with the published polynomial,
  computes every step at threshold 0 (CogVideoX-2b's polynomial is negative for small
  changes: there, at -inf) and gives the same latents; the first and last steps always
  run. HunyuanVideo-1.5 has no TeaCache rule: asking for one is a clear error.

The published calibrations these families read (``vidax/data/step_cache.json``) are checked
for their shape: each key a family's variant, each entry with its source.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import re  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from vidax import demo  # noqa: E402
from vidax.nn.step_cache import StepCache  # noqa: E402
from vidax.pipelines import family as family_module  # noqa: E402
from vidax.pipelines import step_cache as step_caching  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable"),
              pytest.mark.filterwarnings("ignore:prompt .* tokens were dropped:UserWarning")]

STEPS = 5
#: Per family: the demo release's variant (None: the folder's), the sampling options (the
#: demo's size and frames), and the published TeaCache polynomial its tiny DiT stands in for
#: (None: the authors publish no TeaCache rule for it).
FAMILIES = {
    "hunyuan_video": (None, dict(frames=5, size=(64, 48), guidance_scale=6.0),
                      "hunyuan_video/t2v-720p"),
    "hunyuan_video1_5": ("480p_t2v_distilled", dict(frames=5, size=(80, 48)), None),
    "cogvideox": (None, dict(frames=9, size=(64, 48), guidance_scale=6.0), "cogvideox/2b"),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def fam(request, tmp_path_factory):
    """One pipeline per family on its demo release, with the uncached latents."""
    name = request.param
    variant, options, teacache = FAMILIES[name]
    module = demo.family(name)
    folder = tmp_path_factory.mktemp(name) / module.FOLDER
    module.write(folder)
    pipe = vidax.pipeline(name, folder, variant=variant, precision="fp32")
    options = dict(options, steps=STEPS, seed=module.SEED)
    prompt = module.PROMPT

    def sample(cache=None):
        latents = pipe.sample(prompt, step_cache=cache, **options)
        (report,) = pipe.sampling_reports
        return latents, report

    plain, report = sample()
    assert report.cache is None and np.isfinite(plain).all()
    coefficients = (None if teacache is None
                    else tuple(step_caching.published()["teacache"][teacache]["coefficients"]))
    return SimpleNamespace(name=name, pipe=pipe, sample=sample, plain=plain,
                           coefficients=coefficients)


def _computed(report) -> np.ndarray:
    """``[steps, rows]``: which batch rows of the step's one DiT call ran the blocks."""
    computed = report.computed
    assert computed.shape[:2] == (STEPS, 1), computed.shape
    return computed[:, 0]


def _same(fam, latents) -> None:
    """``latents`` are the uncached run's: bit for bit, but for CogVideoX on XLA's CPU
    backend. There, without a cache, XLA fuses the last block's residual add into the
    output head's LayerNorm reduction (the stream is read by nothing else); a cache keeps
    the stream, so the reduction reads it from memory and sums in another order: the DiT's
    output moves by ~1 ulp (7e-7 abs at this size), while the block stack's output is the
    same bit for bit."""
    if fam.name == "cogvideox":
        np.testing.assert_allclose(latents, fam.plain, rtol=0, atol=2e-5)
    else:
        assert np.array_equal(latents, fam.plain)


def test_first_block_at_threshold_0_is_the_plain_run(fam):
    latents, report = fam.sample(StepCache("first-block", threshold=0.0))
    assert _computed(report).all()
    _same(fam, latents)


def test_first_block_skips_steps(fam):
    latents, report = fam.sample(StepCache("first-block", threshold=10.0))
    computed = _computed(report)
    assert computed[0].all() and not computed.all(), computed
    assert np.isfinite(latents).all() and not np.array_equal(latents, fam.plain)


def test_taylorseer_skips_steps(fam):
    latents, report = fam.sample(StepCache("taylorseer", interval=2, warmup_steps=1))
    computed = _computed(report).all(-1)
    # step 0 warms up, then every second step runs: 1 and 3 are predicted
    assert computed.tolist() == [True, False, True, False, True], computed
    assert np.isfinite(latents).all() and not np.array_equal(latents, fam.plain)


def test_teacache(fam):
    if fam.coefficients is None:   # HunyuanVideo-1.5: no published rule, a clear refusal
        with pytest.raises(ValueError, match="no modulated input"):
            fam.sample(StepCache("teacache", coefficients=(1.0, 0.0)))
        return
    if fam.name == "cogvideox":
        # CogVideoX-2b's polynomial is negative below a relative change of ~0.002 (its
        # constant term is -0.0036), so the authors' rule (skip while the accumulated value
        # is below the threshold) skips small changes even at threshold 0: a threshold of
        # -inf computes every step.
        latents, report = fam.sample(StepCache("teacache", threshold=0.0,
                                               coefficients=fam.coefficients))
        computed = _computed(report).all(-1)
        assert computed[0] and computed[-1] and np.isfinite(latents).all(), computed
        threshold = -np.inf
    else:
        threshold = 0.0
    latents, report = fam.sample(StepCache("teacache", threshold=threshold,
                                           coefficients=fam.coefficients))
    assert _computed(report).all()
    _same(fam, latents)


# ------------------------------------------------------------------ the published table
def _variants(model_type: str) -> tuple[str, ...]:
    return family_module(model_type).VARIANTS


#: The model types whose entries this file added or reads (others are their families' tests').
TABLE_FAMILIES = ("hunyuan_video", "hunyuan_video1_5", "cogvideox", "wan2_1", "wan2_2")


@pytest.mark.parametrize("kind", ["magcache", "teacache"])
def test_published_entries_name_a_variant_and_a_source(kind):
    """Each entry: ``<model_type>/<variant>`` (``@<what>``: a calibration the authors pick by
    size, checkpoint or task, which the variant alone does not name), its source a
    repository at a commit, its data in the shape :func:`step_caching.bind` reads."""
    for key, entry in step_caching.published()[kind].items():
        model_type, variant = key.split("/")
        if model_type not in TABLE_FAMILIES:
            continue
        assert variant.split("@")[0] in _variants(model_type), key
        assert re.match(r"[\w.-]+/[\w.-]+@[0-9a-f]{40} \S", entry["source"]), key
        if kind == "magcache":
            rows = step_caching._ratio_rows(entry["ratios"])
            assert len(rows) in (1, 2) and len({len(r) for r in rows}) == 1, key
            assert rows[0][0] == 1.0, key
            assert {"threshold", "max_skip_steps", "retention_ratio"} <= set(entry), key
        else:
            assert len(entry["coefficients"]) == 5, key
            assert {"threshold", "compute_first", "compute_last"} <= set(entry), key


def test_published_teacache_of_these_families():
    table = step_caching.published()["teacache"]
    for variant in _variants("cogvideox"):
        assert f"cogvideox/{variant}" in table
    assert table["hunyuan_video/t2v-720p"]["threshold"] == 0.15
    assert table["cogvideox/1.5-5b"]["coefficients"][0] == 2.50210439e+02
    assert not any(key.startswith("hunyuan_video1_5/") for key in table)


def _stub(model_type: str, variant: str):
    """What :func:`step_caching.bind` reads of a pipeline: its module, variant and
    ``step_cache_key`` (the base's, no size or task suffix)."""
    stub = type("Stub", (), {"__module__": f"vidax.pipelines.{model_type}"})()
    stub.variant = variant
    stub.step_cache_key = lambda request: step_caching.model_key(stub)
    return stub


@pytest.mark.parametrize("key", ["hunyuan_video/t2v-720p", "cogvideox/1.5-5b",
                                 "cogvideox/5b-i2v"])
def test_bind_takes_the_published_teacache(key):
    entry = step_caching.published()["teacache"][key]
    cache = step_caching.bind(_stub(*key.split("/")), StepCache("teacache"), 50)
    assert cache.coefficients == tuple(entry["coefficients"])
    assert (cache.threshold, cache.compute_first, cache.compute_last) == (
        entry["threshold"], entry["compute_first"], entry["compute_last"])


def test_bind_takes_the_published_magcache_of_hunyuan_video():
    cache = step_caching.bind(_stub("hunyuan_video", "t2v-720p"), StepCache("magcache"), 50)
    assert len(cache.mag_ratios) == 1 and len(cache.mag_ratios[0]) == 50   # no CFG pair
    assert (cache.threshold, cache.max_skip_steps, cache.retention_ratio) == (0.24, 6, 0.2)
    assert cache.ratio_table().shape == (1, 50)
