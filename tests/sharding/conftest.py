"""Fixtures of the sharding tests: a small Wan2.1 DiT in the authors' file layout.

The model is ``WanDiTConfig.tiny()`` widened to dim 256 / ffn 1024 / 8 heads (head size 32),
so that every mesh axis of size 8 divides the heads, the kernels dominate the parameter bytes
(the replicated biases and norms stay under 1% of them) and the 64 KiB small-tensor threshold
of the default rules leaves every kernel sharded. Its weights come from the authors'
``WanModel`` (``tests/reference/wan22.py``) with random values in every tensor, saved with
``safetensors.torch.save_file`` from its own ``state_dict()``.

The tests need 8 devices: ``tests/conftest.py`` sets ``--xla_force_host_platform_device_count=8``
before jax is imported.
"""

from __future__ import annotations

import numpy as np
import pytest

import vidax
from tests.sharding.common import dit_inputs, run_dit, small_config, write_authors_dit


@pytest.fixture(scope="session")
def dit_case(tmp_path_factory):
    """(config, authors'-layout file, inputs, single-device output)."""
    cfg = small_config()
    path = write_authors_dit(cfg, tmp_path_factory.mktemp("sharding_dit")
                             / "diffusion_pytorch_model.safetensors")
    inputs = dit_inputs()
    single = vidax.load("wan2_1", "dit", path, config=cfg)
    ref = np.asarray(run_dit(single, **inputs))
    return cfg, path, inputs, ref
