"""Shared pieces of the sharding tests (see conftest.py): the small Wan2.1 DiT config, its
authors'-layout file, inputs and the jitted forward."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from tests.parity import randomize
from tests.reference import wan22
from vidax.models.wan2_1.dit import WanDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")

BATCH = 2
LATENT = (3, 8, 12)            # T, H, W: 3 x 4 x 6 = 72 tokens, divisible by 8
TEXT_LEN = 12


def small_config(**changes) -> WanDiTConfig:
    sizes = dict(dim=256, ffn_dim=1024, num_heads=8, text_dim=64)
    return dataclasses.replace(WanDiTConfig.tiny(), **(sizes | changes))


def write_authors_dit(cfg: WanDiTConfig, path, seed: int = 0):
    import safetensors.torch

    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed)
    safetensors.torch.save_file(model.state_dict(), path)
    return path


def dit_inputs(batch: int = BATCH, latent=LATENT, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, *latent, 16)).astype(np.float32),
            "t": np.linspace(937.0, 121.5, batch).astype(np.float32),
            "context": rng.standard_normal((batch, TEXT_LEN, 64)).astype(np.float32)}


@nnx.jit
def run_dit(model, x, t, context):
    return model(x, t, context)
