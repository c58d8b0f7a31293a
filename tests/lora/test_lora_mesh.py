"""LoRAs on a mesh (8 simulated CPU devices, ``tests/conftest.py``): merged weights keep the
placement the partition rules give them, and merged and live models on the mesh give the
single-device merged output (float32 "highest", <= 1e-4 x std)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import vidax
from tests.parity import REL_TOL, assert_parity
from tests.sharding.common import (assert_placed, dit_inputs, run_dit, small_config,
                                   write_authors_dit)
from vidax import sharding

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import safetensors.torch
    import torch

    root = tmp_path_factory.mktemp("lora_mesh")
    cfg = small_config()
    path = write_authors_dit(cfg, root / "diffusion_pytorch_model.safetensors")
    state = safetensors.torch.load_file(path)
    g = torch.Generator().manual_seed(4)
    lora = {}
    for key, value in state.items():
        if key.startswith("blocks.") and value.ndim == 2 and "norm" not in key:
            m = f"diffusion_model.{key.removesuffix('.weight')}"
            lora[f"{m}.lora_A.weight"] = torch.randn(8, value.shape[1], generator=g) * 0.05
            lora[f"{m}.lora_B.weight"] = torch.randn(value.shape[0], 8, generator=g) * 0.05
    lora_path = root / "lora.safetensors"
    safetensors.torch.save_file(lora, lora_path)
    inputs = dit_inputs()
    base = np.asarray(run_dit(vidax.load("wan2_1", "dit", path, config=cfg), **inputs))
    merged = np.asarray(run_dit(vidax.load("wan2_1", "dit", path, config=cfg,
                                           loras=[(lora_path, 0.9)]), **inputs))
    assert np.abs(merged - base).max() > 100 * REL_TOL * merged.std()
    return cfg, path, lora_path, inputs, merged


@pytest.mark.parametrize("mode", ["merge", "live"])
def test_lora_on_a_mesh_equals_one_device(case, mode, record_property):
    cfg, path, lora_path, inputs, merged = case
    mesh = sharding.make_mesh("fsdp=2,tp=2,dp=2")
    model = vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh, loras=[(lora_path, 0.9)],
                       lora_mode=mode)
    if mode == "merge":        # the merged weights where the rules put the stored ones
        assert_placed(model, mesh, sharding.rules_for("vidax.models.wan2_1.dit:WanDiT"))
    with sharding.use_mesh(mesh):
        out = np.asarray(run_dit(model, **inputs))
    assert_parity(f"lora_mesh_{mode}", out, merged, record_property)
