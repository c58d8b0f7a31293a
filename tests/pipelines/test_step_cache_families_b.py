"""Step caching (``step_cache=``, :mod:`vidax.nn.step_cache`) in the LTX-Video, LTX-2,
Cosmos-Predict2.5 and Cosmos3 DiTs, on each family's tiny demo release
(``vidax.demo.<family>.write``), float32, a few steps at the demo's tiny size.

Per family, against the run without a cache (every sampling loop's report checked: a
generation may run several):

* first-block at threshold 0 computes every step and gives the same latents (the blocks'
  loop through :func:`vidax.nn.step_cache.run_blocks` is the plain loop; :func:`_same` says
  where XLA's CPU code generation moves them by an ulp);
* first-block at a large threshold (tiny random models change a lot from step to step)
  skips steps, and the latents stay finite and differ;
* TaylorSeer (interval 2 after one warm-up step) skips steps;
* TeaCache: LTX-Video gives the authors' modulated input (TeaCache4LTX-Video: the first
  block's ``norm1`` output, times ``1 + scale_msa``, plus ``shift_msa``), one row per batch
  row: at threshold 0 every step is computed and the latents are the plain run's, at a large
  threshold it skips. Its authors calibrated LTX-Video 0.9.1 only, none of vidax's 0.9.8
  releases, so no polynomial is published for them and the test passes theirs explicitly.
  LTX-2 and Cosmos-Predict2.5 / Cosmos3 have no TeaCache rule (TeaCache4Cosmos is for
  Cosmos-1): asking for one is a clear error.

LTX-Video runs CFG + STG on every step here (three batch rows, a skipped block reaching its
index). Its guidance lists can change the batch between steps (1, 3 or 2 rows): the shared
loop then starts fresh cache states (``LayoutChanged``), so each change recomputes once and
caching resumes within the stretch of one batch. LTX-2 runs one stage (its video and audio
tokens are the carry); its skipping tests and its two-stage run (two sampling loops, each
starting fresh states) are in the slow lane.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from vidax import demo  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.nn.step_cache import StepCache  # noqa: E402
from vidax.pipelines import ltx_video as ltx  # noqa: E402
from vidax.pipelines import step_cache as step_caching  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable"),
              pytest.mark.filterwarnings("ignore:prompt .* tokens were dropped:UserWarning")]

STEPS = 3
#: LTX-Video's pass: CFG and STG (block 1 skipped in the perturbed row) on every step, so
#: every step runs the same three rows [negative, prompt, perturbed]; five steps, as the
#: batch-change test runs (the cache policy, compiled into the step, holds the step count).
LTX_STG = ltx.PassSettings(num_inference_steps=5, guidance_scale=3.0, stg_scale=1.0,
                           rescaling_scale=1.0, skip_block_list=(1,), cfg_star_rescale=False)
#: The sampling options of each family (the demo's frames and size).
FAMILIES = {
    "ltx_video": dict(frames=9, size=(64, 32), settings=LTX_STG),
    # the distilled release's fixed sigma list (8 steps), one stage
    "ltx2_5": dict(frames=9, size=(64, 32), stages=1),
    "cosmos2_5": dict(frames=9, size=(64, 48), steps=STEPS, guidance_scale=7.0),
    "cosmos3": dict(frames=9, size=(64, 32), steps=STEPS, guidance_scale=6.0),
}
#: ali-vilab/TeaCache@7c10efc4702c6b619f47805f7abe4a7a08085aa0
#: TeaCache4LTX-Video/teacache_ltx.py line 72: the rescaling polynomial (highest power first)
#: the authors fitted on LTX-Video 0.9.1 (line 181), not on a vidax release.
LTX_091_TEACACHE = (2.14700694e+01, -1.28016453e+01, 2.31279151e+00, 7.92487521e-01,
                    9.69274326e-03)


def _pipeline(name: str, tmp_path_factory):
    module = demo.family(name)
    folder = tmp_path_factory.mktemp(name) / module.FOLDER
    module.write(folder)
    return module, vidax.pipeline(name, folder, precision="fp32")


@pytest.fixture(scope="module")
def fam(request, tmp_path_factory):
    """One pipeline per family on its demo release, with the uncached latents."""
    name = request.param
    module, pipe = _pipeline(name, tmp_path_factory)
    options = dict(FAMILIES[name], seed=module.SEED)

    def sample(cache=None, **changes):
        latents = pipe.sample(module.PROMPT, step_cache=cache, **{**options, **changes})
        return _flat(latents), list(pipe.sampling_reports)

    plain, reports = sample()
    assert reports and all(r.cache is None for r in reports) and np.isfinite(plain).all()
    return SimpleNamespace(name=name, pipe=pipe, sample=sample, plain=plain)


#: Each test on every family; LTX-2's skipping ones in the slow lane (its step compiles for
#: ~5 s a cache kind on two CPU cores).
EVERY_FAMILY = pytest.mark.parametrize("fam", list(FAMILIES), indirect=True)
LTX2_SLOW = pytest.mark.parametrize("fam", [
    pytest.param(name, marks=pytest.mark.slow) if name == "ltx2_5" else name
    for name in FAMILIES], indirect=True)


def _flat(latents) -> np.ndarray:
    """The final latents as one vector (LTX-2's video and audio together)."""
    parts = latents if isinstance(latents, tuple) else (latents,)
    return np.concatenate([np.asarray(p, np.float32).ravel() for p in parts])


def _steps(reports) -> list[np.ndarray]:
    """Per sampling loop, ``[steps]``: whether every call and row of the step ran the
    blocks."""
    return [r.computed.all((1, 2)) for r in reports]


def _same(fam, latents) -> None:
    """``latents`` are the uncached run's: bit for bit, but for LTX-Video and LTX-2 on XLA's
    CPU backend. There the same HLO arithmetic compiles to other machine code when the
    blocks sit in the cache's ``lax.cond`` (without it XLA fuses consecutive blocks'
    elementwise chains and norm reductions into loop fusions that recompute the previous
    block's output; the branch materialises it): the latents move by a few ulps (measured:
    LTX-Video 4.2e-6 abs after five steps, LTX-2 7e-7), and with
    ``--xla_backend_optimization_level=0`` (no LLVM optimisation) they are equal bit for
    bit."""
    if fam.name in ("ltx_video", "ltx2_5"):
        np.testing.assert_allclose(latents, fam.plain, rtol=0, atol=2e-5)
    else:
        assert np.array_equal(latents, fam.plain)


@EVERY_FAMILY
def test_first_block_at_threshold_0_is_the_plain_run(fam):
    latents, reports = fam.sample(StepCache("first-block", threshold=0.0))
    assert all(r.computed.all() for r in reports)
    _same(fam, latents)


@LTX2_SLOW
def test_first_block_skips_steps(fam):
    latents, reports = fam.sample(StepCache("first-block", threshold=10.0))
    for computed in _steps(reports):
        assert computed[0] and not computed.all(), computed
    assert np.isfinite(latents).all() and not np.array_equal(latents, fam.plain)


@LTX2_SLOW
def test_taylorseer_skips_steps(fam):
    latents, reports = fam.sample(step_caching.parse("taylorseer", interval=2,
                                                     warmup_steps=1))
    for computed in _steps(reports):
        # step 0 warms up, then every second step runs: 1, 3, ... are predicted
        assert computed.tolist() == [i % 2 == 0 for i in range(len(computed))], computed
    assert np.isfinite(latents).all() and not np.array_equal(latents, fam.plain)


@EVERY_FAMILY
def test_teacache(fam):
    if fam.name != "ltx_video":   # no published rule: a clear refusal
        with pytest.raises(ValueError, match="no modulated input"):
            fam.sample(StepCache("teacache", coefficients=(1.0, 0.0)))
        return
    latents, reports = fam.sample(StepCache("teacache", threshold=0.0,
                                            coefficients=LTX_091_TEACACHE))
    assert all(r.computed.all() for r in reports)
    _same(fam, latents)
    latents, reports = fam.sample(StepCache("teacache", threshold=10.0,
                                            coefficients=LTX_091_TEACACHE))
    for computed in _steps(reports):   # the first and the last step always run
        assert computed[0] and computed[-1] and not computed.all(), computed
    assert np.isfinite(latents).all() and not np.array_equal(latents, fam.plain)


@EVERY_FAMILY
def test_teacache_without_a_published_polynomial_is_refused(fam):
    """No family here has one (LTX-Video's authors calibrated 0.9.1, not a 0.9.8 release)."""
    with pytest.raises(VidaxError, match="publish no rescaling polynomial"):
        step_caching.bind(fam.pipe, StepCache("teacache"), STEPS)
    table = step_caching.published()["teacache"]
    assert not any(key.startswith(f"{fam.name}/") for key in table)


# ------------------------------------------------------------------ LTX-Video's batch changes
@pytest.mark.parametrize("fam", ["ltx_video"], indirect=True)
def test_ltx_video_batch_changes_restart_the_cache(fam):
    """The guidance lists run 1, 3, 3, 3, then 2 rows: each change of the batch starts fresh
    states (those steps compute every row), the steps between keep caching."""
    settings = ltx.PassSettings(
        num_inference_steps=None, timesteps=(1.0, 0.95, 0.92, 0.9, 0.5),
        guidance_timesteps=(1.0, 0.9, 0.6), guidance_scale=(1.0, 3.0, 1.0),
        stg_scale=(0.0, 1.0, 1.0), rescaling_scale=1.0, skip_block_list=(1,),
        cfg_star_rescale=False)
    latents, reports = fam.sample(StepCache("first-block", threshold=10.0), settings=settings)
    (report,) = reports
    # per step [calls, rows], the narrower steps padded with whether their call ran
    assert report.computed[:, 0].tolist() == [[True] * 3, [True] * 3, [False] * 3,
                                              [False] * 3, [True] * 3]
    assert (report.evaluations, report.skipped) == (3, 2)
    assert "DiT evaluations: 3 made, 2 skipped by first-block" in report.summary()
    assert np.isfinite(latents).all()


@pytest.mark.slow
def test_ltx2_two_stages_cache_each_loop(tmp_path_factory):
    """The distilled release's two stages (half size, the upsampler, full size) are two
    sampling loops: each starts fresh states (its first step computes) and skips."""
    module, pipe = _pipeline("ltx2_5", tmp_path_factory)
    latents = pipe.sample(module.PROMPT, frames=9, size=(128, 64), seed=module.SEED,
                          stages=2, step_cache=StepCache("first-block", threshold=10.0))
    assert len(pipe.sampling_reports) == 2
    for computed in _steps(pipe.sampling_reports):
        assert computed[0] and not computed.all(), computed
    assert np.isfinite(_flat(latents)).all()
