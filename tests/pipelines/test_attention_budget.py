"""The memory plan's attention budget (``Estimate.attention_budget``): where the DiT step's
full attention logits would not fit what is available but the rest of the step does, the
estimate picks the largest budget that leaves room (:func:`vidax.nn.attention.set_budget`),
the step is re-estimated with the attention in query and key chunks, and the sampling step
runs under that budget (its own jitted function, traced under it).

On the Wan2.1 demo release at 256x256, 17 frames (1,280 tokens), float32, for a GPU
stand-in whose memory is the VAE decode's estimate: XLA's attention (GPU float32) would hold
~0.3 GiB of logits, more than the decode; under the budget the step fits, and the latents
are the unbudgeted run's within 1e-4 x std (another summation order: the chunked kernel's
running softmax)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails  # noqa: E402
from vidax import demo  # noqa: E402
from vidax.errors import MemoryEstimateError  # noqa: E402
from vidax.pipelines import memory  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")]
OPTIONS = dict(steps=2, seed=1, size=(256, 256), frames=17)


def test_a_budget_makes_the_step_fit_and_samples_the_same(tmp_path, monkeypatch,
                                                           record_property):
    module = demo.family("wan2_1")
    module.write(tmp_path / module.FOLDER)
    pipe = vidax.pipeline("wan2_1", tmp_path / module.FOLDER, precision="fp32")
    request = pipe.resolve(pipe.request(module.PROMPT, **OPTIONS))
    unlimited = memory.estimate(pipe, request, weights=False, device=(2**40, "", "gpu"))
    dit, vae = unlimited.phases["DiT step"], unlimited.phases["VAE decode"]
    assert dit.logits > dit.bytes / 2 and dit.bytes > vae.bytes   # the logits make the peak
    assert unlimited.attention_budget is None

    plain = pipe.sample(module.PROMPT, **OPTIONS)
    assert pipe.attention_budget is None
    monkeypatch.setattr(memory, "device_available",
                        lambda mesh=None: (vae.bytes, "a stand-in GPU", "gpu"))
    planned = memory.estimate(pipe, request, weights=False)
    assert planned.fits and planned.attention_budget is not None
    assert "chunked attention within an attention budget" in planned.phases["DiT step"].note
    assert planned.phases["DiT step"].logits < dit.logits / 4
    budgeted = pipe.sample(module.PROMPT, **OPTIONS)
    assert pipe.attention_budget == planned.attention_budget
    diff = float(np.abs(budgeted - plain).max())
    record_property("max_abs_diff", diff)
    assert 0 < diff <= 1e-4 * plain.std(), diff   # 0 would mean the kernel never changed
    assert_fails("budgeted attention, another seed", pipe.sample(
        module.PROMPT, **{**OPTIONS, "seed": 2}), plain, record_property)

    # no room even for the chunked step: refused, nothing sampled
    monkeypatch.setattr(memory, "device_available",
                        lambda mesh=None: (dit.bytes - dit.logits, "a stand-in GPU", "gpu"))
    with pytest.raises(MemoryEstimateError, match="Nothing was sampled"):
        pipe.sample(module.PROMPT, **OPTIONS)
