"""vidax's Wan DiT with Wan2.2's per-token timesteps, against the authors' Wan2.2 ``WanModel``.

Oracle (DESIGN.md §6): the authors' ``WanModel`` of the wan22 package
(``tests/reference/wan22.model_module()``) at a tiny TI2V-like config -- 48 channels in and
out, as TI2V-5B -- with random values in every tensor, saved with
``safetensors.torch.save_file`` from its own ``state_dict()`` and loaded through
``vidax.load("wan2_2", "dit", ...)``.

Input: batch 2, a 3 x 4 x 6 token grid, a per-token ``t [B, L]`` as TI2V-5B's image-to-video
makes it -- the first latent frame's tokens at t = 0 (the encoded image, kept clean), the
other tokens at the sample's timestep (937 and 121.5) -- and text of 7 and 12 tokens.
Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Negative control: self-attention q and k of one block swapped in the file must fail it.
Also: a ``[B]`` t and the same t given per token give the same output (the per-token path
is the broadcast path's numbers), and every full-size wan2_2 DiT manifest verifies.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity, edited_copy, randomize, swap
from tests.reference import wan22
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests
from vidax.models.wan2_1.dit import WanDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 8, 12  # latent size; tokens 3 x 4 x 6
TOKENS = FRAMES * (HEIGHT // 2) * (WIDTH // 2)
FIRST_FRAME_TOKENS = (HEIGHT // 2) * (WIDTH // 2)
TEXT_LENS = (7, 12)
TIMESTEPS = (937.0, 121.5)


def tiny_ti2v() -> WanDiTConfig:
    """The tiny DiT at TI2V-5B's channel counts (48 in, 48 out)."""
    return dataclasses.replace(WanDiTConfig.tiny("t2v"), in_dim=48, out_dim=48)


def per_token_t() -> np.ndarray:
    """``[B, L]``: 0 on the first latent frame's tokens, the sample's t elsewhere."""
    t = np.repeat(np.asarray(TIMESTEPS, np.float32)[:, None], TOKENS, axis=1)
    t[:, :FIRST_FRAME_TOKENS] = 0
    return t


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import safetensors.torch
    import torch

    cfg = tiny_ti2v()
    model = wan22.model_module().WanModel(
        **dict(dataclasses.asdict(cfg), model_type="ti2v")).eval()
    randomize(model.named_parameters(), seed=0)
    path = tmp_path_factory.mktemp("wan2_2_dit") / "diffusion_pytorch_model.safetensors"
    safetensors.torch.save_file(model.state_dict(), path)

    rng = np.random.default_rng(1)
    context = np.zeros((BATCH, max(TEXT_LENS), cfg.text_dim), np.float32)
    for i, n in enumerate(TEXT_LENS):
        context[i, :n] = rng.standard_normal((n, cfg.text_dim))
    x = rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, 48)).astype(np.float32)
    t = per_token_t()
    with torch.no_grad():
        out = model([torch.from_numpy(u).permute(3, 0, 1, 2) for u in x],
                    t=torch.from_numpy(t),
                    context=[torch.from_numpy(c[:n]) for c, n in zip(context, TEXT_LENS)],
                    seq_len=TOKENS)
    ref = torch.stack(out).permute(0, 2, 3, 4, 1).numpy()
    return cfg, path, dict(x=x, t=t, context=context), ref


@nnx.jit
def _run(model, x, t, context):
    return model(x, t, context)


def _output(path: Path, cfg, inputs) -> np.ndarray:
    return np.asarray(_run(vidax.load("wan2_2", "dit", path, config=cfg), **inputs))


def test_per_token_timesteps_match_authors(case, record_property):
    cfg, path, inputs, ref = case
    assert_parity("ti2v_per_token_t", _output(path, cfg, inputs), ref, record_property)


def test_negative_control_swapped_q_k(case, tmp_path, record_property):
    cfg, path, inputs, ref = case
    bad = edited_copy(path, tmp_path / "swapped.safetensors",
                      swap(*((f"blocks.1.self_attn.q.{kind}", f"blocks.1.self_attn.k.{kind}")
                             for kind in ("weight", "bias"))))
    assert_fails("ti2v_negative", _output(bad, cfg, inputs), ref, record_property)


def test_negative_control_per_sample_t(case, record_property):
    """The first frame's t = 0 matters: one t for every token must fail the bound."""
    cfg, path, inputs, ref = case
    out = _output(path, cfg, dict(inputs, t=np.asarray(TIMESTEPS, np.float32)))
    assert_fails("ti2v_negative_per_sample_t", out, ref, record_property)


def test_per_token_path_equals_broadcast(case):
    cfg, path, inputs, _ = case
    model = vidax.load("wan2_2", "dit", path, config=cfg)
    t = np.asarray(TIMESTEPS, np.float32)
    a = np.asarray(_run(model, inputs["x"], t, inputs["context"]))
    b = np.asarray(_run(model, inputs["x"], np.repeat(t[:, None], TOKENS, 1), inputs["context"]))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * float(np.abs(a).max()))
    with pytest.raises(VidaxError, match=r"per token \[B, 72\]"):
        model(inputs["x"], np.zeros((BATCH, TOKENS - 1), np.float32), inputs["context"])


# TI2V-5B in the fast lane; the A14B experts in CI (``-m slow``).
@pytest.mark.parametrize("name", [n if n == "wan2_2/ti2v-5b__dit" else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(m.name for m in all_manifests()
                                                  if m.name.startswith("wan2_2/")
                                                  and m.name.endswith("__dit"))])
def test_manifest_verifies(name):
    from vidax.manifests import get_manifest

    report = verify_manifest(get_manifest(name))
    assert report.ok, report.headline()
