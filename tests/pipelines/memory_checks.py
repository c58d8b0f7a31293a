"""The memory check every family's pipeline test runs on its tiny release
(:meth:`vidax.pipelines.base.PipelineBase.check_memory`): the test size fits, with every
weight file and both phases estimated; 1001 frames at 8192x8192 is refused with the numbers,
and neither reads a weight."""

from __future__ import annotations

import pytest

from vidax import loading
from vidax.errors import MemoryEstimateError


def check_before_loading(module, folder, make, monkeypatch) -> None:
    """``make(release, size, frames)``: the family's request (None: the test's own size)."""
    monkeypatch.setattr(loading, "load_with_report",
                        lambda *a, **k: pytest.fail("a weight was read"))
    release = module.inspect_folder(folder)
    small = module.Pipeline.check_memory(release, make(release, None, None))
    assert small.fits and set(small.phases) == {"DiT step", "VAE decode"}, small.summary()
    assert set(small.weights) <= set(release.specs) and all(small.weights.values())
    with pytest.raises(MemoryEstimateError) as e:
        module.Pipeline.check_memory(release, make(release, (8192, 8192), 1001))
    message = " ".join(str(e.value).split())
    for needle in ("1001 frames at 8192x8192: an estimated", "DiT step", "VAE decode",
                   "available (", "--skip-memory-check", "Nothing was loaded."):
        assert needle in message, message
