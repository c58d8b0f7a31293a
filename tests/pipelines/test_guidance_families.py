"""The guidance window and CFG-Zero* on every family whose guidance is one [cond, uncond]
pair (besides Wan, tests/pipelines/test_guidance.py): on the family's tiny demo release,

* an empty window runs every step on the prompt alone, which is the run without CFG
  (guidance 1; HunyuanVideo: true CFG 1): the pair's inputs are cut to the prompt's row
  (CogVideoX's pair is [negative, prompt]). Equal within 1e-5 x std, not bit for bit: the
  unguided run encodes the prompt alone, the guided one in a batch of two, and the text
  encoders' float32 sums round differently per batch (measured up to ~1e-7). Negative
  control: the other row (the negative prompt's) is far off;
* the whole window without CFG-Zero* is the plain guided run bit for bit;
* a window over the first half runs those steps on the pair and differs from both;
* CFG-Zero* with its first step zeroed changes the run and stays finite."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import vidax
from vidax.pipelines.base import Guidance

STEPS = 4
#: family -> (the guided run's options, the unguided run's)
FAMILIES = {
    "cogvideox": ({"guidance_scale": 6.0}, {"guidance_scale": 1.0}),
    "cosmos2_5": ({"guidance_scale": 7.0}, {"guidance_scale": 1.0}),
    "cosmos3": ({"guidance_scale": 6.0}, {"guidance_scale": 1.0}),
    "hunyuan_video": ({"true_cfg_scale": 4.0}, {"true_cfg_scale": 1.0}),
    "hunyuan_video1_5": ({"guidance_scale": 6.0}, {"guidance_scale": 1.0}),
}


def _options(demo) -> dict:
    words = dict(zip(demo.GENERATE[::2], demo.GENERATE[1::2]))
    width, height = (int(v) for v in words["--size"].split("x"))
    return {"frames": int(words["--frames"]), "size": (width, height), "steps": STEPS,
            "seed": int(words["--seed"])}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    demo = importlib.import_module(f"vidax.demo.{name}")
    folder = tmp_path_factory.mktemp(f"guidance_{name}") / demo.FOLDER
    demo.write(folder)
    words = dict(zip(demo.GENERATE[::2], demo.GENERATE[1::2]))
    pipe = vidax.pipeline(name, folder, variant=words.get("--variant"), precision="fp32")
    guided, plain = FAMILIES[name]

    def sample(options, **extra):
        latents = pipe.sample(demo.PROMPT, **_options(demo), **options, **extra)
        return latents, pipe.sampling_reports[-1]

    return name, sample, guided, plain, type(pipe)


def test_the_window_cuts_the_pair_to_the_prompt(family, monkeypatch):
    name, sample, guided, plain, cls = family
    unguided, _ = sample(plain)
    empty, report = sample(guided, guidance=Guidance(0.0, 0.0))
    assert report.alone == STEPS
    diff = float(np.abs(empty - unguided).max())
    print(f"{name}: empty window vs unguided: max abs diff {diff:.2e}, std {unguided.std():.3f}")
    assert diff <= 1e-5 * unguided.std(), name
    if cls.PAIRED_INPUTS:   # (Cosmos3 runs its pair as two DiT calls: nothing is cut)
        monkeypatch.setattr(cls, "PROMPT_ROW", 1 - cls.PROMPT_ROW)
        other, _ = sample(guided, guidance=Guidance(0.0, 0.0))
        monkeypatch.undo()
        assert np.abs(other - unguided).max() > 1e-3 * unguided.std(), name
    full, report = sample(guided, guidance=Guidance(0.0, 1.0))
    reference, _ = sample(guided)
    assert report.alone == 0 and np.array_equal(full, reference), name
    half, report = sample(guided, guidance=Guidance(0.0, 0.5))
    assert report.alone == STEPS // 2 and np.isfinite(half).all()
    assert not np.array_equal(half, reference) and not np.array_equal(half, unguided)


def test_cfg_zero_star(family):
    name, sample, guided, _, _ = family
    reference, _ = sample(guided)
    zeroed, report = sample(guided, guidance=Guidance(zero_star=True, zero_init_steps=1))
    assert np.isfinite(zeroed).all() and not np.array_equal(zeroed, reference), name
    assert report.evaluations == STEPS
