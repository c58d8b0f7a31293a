"""The memory estimate's activation counts (:mod:`vidax.pipelines.memory`) against what XLA
compiles, on the CPU, at small sizes.

Measured: ``jax.jit(...).lower(...).compile().memory_analysis()`` of one DiT forward (abstract
parameters: nothing is allocated) -- ``temp_size_in_bytes``, the program's scratch, which is
the activations (the weights and the inputs are arguments, the velocity a small output) -- and
of one steady-state Wan2.1 VAE decode chunk (the module's own jitted ``_decode_chunk``, with
the causal caches of a previous chunk): scratch plus outputs (the carried caches and the
decoded frames; the caches it takes are donated, so the outputs reuse them). Estimated: the
family's own ``dit_geometry`` for a request at that size on a tiny release, through
``memory.dit_step(geometry, float32, "cpu")``; ``memory.vae_decode`` of the family's
``vae_geometry`` without the decoded video on the host (``total_frames=0``: the host copies
are not part of a chunk's program).

The DiTs are the registered tiny configs (Wan2.1, CogVideoX 5B's structure, HunyuanVideo
1.0, Cosmos-Predict2.5) at about 1,000 video tokens (13 frames at 256 x 256), where the
attention's logits dominate a tiny width, and one Wan2.1 widened to 256 (4 heads of 64, MLP
1024) at 2,048 tokens, where the CPU's blocked attention kernel runs and the width and MLP
tensors weigh as much as the logits.

Bound: ``measured <= estimate <= BOUND x measured`` with ``BOUND = 3``. The estimate is an
upper bound by construction (``LOGIT_COPIES_XLA = 5`` float32 copies of the ``[B, H, L, L]``
logits, rounded up from peak-RSS measurements; ``VAE_FEATURE_COPIES = 8`` feature maps),
and XLA's compiled programs keep about half of that: measured ratios estimate / measured
(jax 0.10, CPU): DiT 1.75 (Wan2.1), 2.07 (CogVideoX), 2.03 (HunyuanVideo), 1.77 (Cosmos),
1.76 (Wan2.1 widened, blocked kernel); VAE chunk 1.29 (2.30 of the scratch alone). 3x leaves
room for XLA's scheduling to change while still catching a count that is off by a constant
factor. Negative controls: a halved estimate fails the bound (below), a doubled one too
(above).

Known undercounts, each ``xfail(strict=True)`` so it is noticed when fixed:

* Depth, at and above 2,048 tokens (the CPU's blocked kernel, a ``lax.map`` over query
  blocks in every block): the compiled scratch grows by about 2.4 ``[B, L, D]`` float32
  tensors per transformer block (Wan2.1 widened to 512 at 2,304 tokens: 249, 298, 394 MiB
  with 2, 4, 8 blocks; Cosmos-Predict2.5 alike), where the estimate counts one block's
  intermediates whatever the depth: Wan2.1 widened to 512 (4 heads of 128, MLP 2048), 8
  blocks, 2,304 tokens, measured 0.75 of the estimate (the releases have 28 to 60 blocks).
  Below 2,048 tokens (no loop) the growth is about the cross-attention's keys and values
  of the context per block, 2 ``[B, 512, D]``.
* The MLP at and above 2,048 tokens: with a flash-like kernel (no logits; what the GPU
  column of docs/memory.md assumes) XLA's CPU program holds about five ``[B, L, ffn]``
  float32 tensors of the MLP where ``DIT_FFN_COPIES`` counts two: Wan2.1 widened to 1024
  (8 heads of 128, MLP 4096) at 2,304 tokens, measured 0.64 of the logit-free estimate.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from vidax import registry
from vidax.pipelines import memory
from vidax.pipelines.base import Release

attn = importlib.import_module("vidax.nn.attention")
F32 = jnp.float32
S = jax.ShapeDtypeStruct
#: ``measured <= estimate <= BOUND x measured`` (the module docstring).
BOUND = 3.0
#: 13 frames at 256 x 256: 4 latent frames of 32 x 32 (Wan, HunyuanVideo, CogVideoX, Cosmos:
#: 8x space, 4x time), 1,024 video tokens in 2 x 2 patches.
SMALL = ((256, 256), 13)


def within(measured: int, estimate: int) -> bool:
    return measured <= estimate <= BOUND * measured


def _pipeline(family: str, variant: str, task: str, config, defaults):
    """A pipeline over a release holding only the DiT's config (nothing loaded)."""
    module = importlib.import_module(f"vidax.pipelines.{family}")
    layout = {"cogvideox": "diffusers", "cosmos2_5": "diffusers"}.get(family)
    specs = {"dit": registry.get(module.MODEL_TYPE, "dit", layout)}
    release = getattr(module, "Release", Release)(Path("tiny"), task, variant, defaults,
                                                  {"dit": config}, {}, specs)
    return module, module.Pipeline(release, precision="fp32")


def _compiled_temp(model_cls, config, args, **kwargs) -> int:
    """The scratch bytes of one forward of ``model_cls(config)`` on ``args`` (abstract)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: model_cls(config)))

    def forward(state, *args):
        return nnx.merge(graphdef, state)(*args, **kwargs)

    compiled = jax.jit(forward).lower(state, *args).compile()
    return compiled.memory_analysis().temp_size_in_bytes


# ----------------------------------------------------------------------------- the families
def wan2_1(size, frames, **widths):
    from vidax.models.wan2_1.config import WanDiTConfig
    from vidax.models.wan2_1.dit import WanDiT
    from vidax.pipelines import wan2_1 as family

    cfg = dataclasses.replace(WanDiTConfig.tiny(), **widths)
    module, pipe = _pipeline("wan2_1", "tiny", "t2v", cfg, family.defaults_for("tiny", "t2v"))
    request = module.make_request("t2v", "tiny", "a prompt", size=size, frames=frames)
    g = pipe.dit_geometry(request)
    args = (S((g.batch, *request.latent_shape), F32), S((g.batch,), F32),
            S((g.batch, cfg.text_len, cfg.text_dim), F32))
    return g, _compiled_temp(WanDiT, cfg, args, compute_dtype=F32)


def cogvideox(size, frames, **widths):
    from vidax.models.cogvideox.config import CogVideoXDiTConfig
    from vidax.models.cogvideox.dit import CogVideoXDiT
    from vidax.pipelines import cogvideox as family

    cfg = dataclasses.replace(CogVideoXDiTConfig.tiny("5b"), **widths)
    module, pipe = _pipeline("cogvideox", "5b", "t2v", cfg, family.DEFAULTS["5b"])
    request = module.make_request("t2v", "5b", "a prompt", size=size, frames=frames)
    g = pipe.dit_geometry(request)
    args = (S((g.batch, *request.latent_shape[:3], cfg.in_channels), F32),
            S((g.batch, cfg.max_text_seq_length, cfg.text_embed_dim), F32),
            S((g.batch,), F32))
    return g, _compiled_temp(CogVideoXDiT, cfg, args, compute_dtype=F32)


def hunyuan_video(size, frames, **widths):
    from vidax.models.hunyuan_video.config import HunyuanVideoDiTConfig
    from vidax.models.hunyuan_video.dit import HunyuanVideoDiT
    from vidax.pipelines import hunyuan_video as family

    cfg = dataclasses.replace(HunyuanVideoDiTConfig.tiny(), **widths)
    module, pipe = _pipeline("hunyuan_video", "tiny", "t2v", cfg, family.defaults_for("tiny"))
    request = module.make_request("t2v", "tiny", "a prompt", size=size, frames=frames)
    g = pipe.dit_geometry(request)
    b = g.batch   # the text mask as the pipeline passes it; the embedded guidance
    args = (S((b, *request.latent_shape), F32), S((b,), F32),
            S((b, module.TEXT_LEN, cfg.text_states_dim), F32),
            S((b, module.TEXT_LEN), jnp.int32), S((b, cfg.text_states_dim_2), F32),
            S((b,), F32))
    return g, _compiled_temp(HunyuanVideoDiT, cfg, args, compute_dtype=F32)


def cosmos2_5(size, frames, **widths):
    from vidax.models.cosmos2_5.config import CosmosDiTConfig
    from vidax.models.cosmos2_5.dit import CosmosDiT
    from vidax.pipelines import cosmos2_5 as family

    cfg = dataclasses.replace(CosmosDiTConfig.tiny(), **widths)
    module, pipe = _pipeline("cosmos2_5", "tiny", family.RELEASE_TASK, cfg,
                             family.defaults_for("tiny"))
    request = module.make_request("text2world", "tiny", "a prompt", size=size, frames=frames)
    g = pipe.dit_geometry(request)
    args = (S((g.batch, *request.latent_shape), F32), S((g.batch,), F32),
            S((g.batch, module.TEXT_LEN, cfg.crossattn_proj_in_channels), F32))
    return g, _compiled_temp(CosmosDiT, cfg, args, compute_dtype=F32)


#: id -> (family, size, frames, config changes); the module docstring's cases.
CASES = {
    "wan2_1": (wan2_1, *SMALL, {}),
    "cogvideox": (cogvideox, *SMALL, {}),
    "hunyuan_video": (hunyuan_video, *SMALL, {}),
    "cosmos2_5": (cosmos2_5, *SMALL, {}),
    "wan2_1-wide-blocked": (wan2_1, (256, 256), 29, dict(dim=256, ffn_dim=1024)),
    # its text mask: XLA's kernel with the whole [B, H, L, L] logits on the CPU (the
    # geometry's ``masked``; counted as the blocked kernel's before, 0.36 of the compiled)
    "hunyuan_video-masked-2304": (hunyuan_video, (256, 256), 29, {}),
}
UNDERCOUNTS = {
    "wan2_1-8-blocks-2304": (wan2_1, (384, 384), 13, dict(dim=512, ffn_dim=2048,
                                                          num_layers=8)),
}


@functools.cache
def _measure(name: str):
    """(geometry, compiled scratch bytes, the estimate) of case ``name``."""
    fn, size, frames, widths = {**CASES, **UNDERCOUNTS}[name]
    g, measured = fn(size, frames, **widths)
    return g, measured, memory.dit_step(g, F32, "cpu")


@pytest.mark.parametrize("name", list(CASES))
def test_dit_step_estimate_bounds_the_compiled_program(name):
    g, measured, estimate = _measure(name)
    ratio = estimate.bytes / measured
    assert within(measured, estimate.bytes), (
        f"{name}: {g}: compiled scratch {measured / 2**20:.1f} MiB, estimate "
        f"{estimate.bytes / 2**20:.1f} MiB ({estimate.note}), ratio {ratio:.2f}")


def test_negative_controls_fail_the_bound():
    """The bound rejects an estimate off by a factor of 2 either way (Wan2.1: ratio 1.75)."""
    _, measured, estimate = _measure("wan2_1")
    assert within(measured, estimate.bytes)
    assert not within(measured, estimate.bytes // 2)
    assert not within(measured, 2 * estimate.bytes)


@pytest.mark.parametrize("name", list(UNDERCOUNTS))
@pytest.mark.xfail(strict=True, reason="a known undercount (the module docstring)")
def test_known_undercounts(name):
    g, measured, estimate = _measure(name)
    assert estimate.bytes >= measured, (f"{name}: {estimate.bytes / 2**20:.1f} MiB estimated, "
                                        f"{measured / 2**20:.1f} MiB compiled")


def _flash_like(q, k, v, *, mask=None, bias=None, scale=None):
    """A stand-in for a flash kernel's memory: reads q, k and v, materialises nothing of the
    ``[Lq, Lk]`` logits (its values are not attention's)."""
    return q + (k.mean(axis=1, keepdims=True) * v.mean(axis=1, keepdims=True)).astype(q.dtype)


@pytest.mark.xfail(strict=True, reason="a known undercount: the MLP (the module docstring)")
def test_logit_free_estimate_bounds_a_flash_like_program(monkeypatch):
    """With no logits materialised (the GPU column's cuDNN flash attention), the estimate is
    its width and MLP tensors alone: ``bytes - logits``."""
    monkeypatch.setitem(attn._KERNELS, "flash_like", attn.Kernel(_flash_like, False))
    monkeypatch.setenv(attn.ENV_VAR, "flash_like")
    g, measured = wan2_1((384, 384), 13, dim=1024, ffn_dim=4096, num_heads=8)
    estimate = memory.dit_step(g, F32, "cpu")
    assert estimate.bytes - estimate.logits >= measured, (
        f"{(estimate.bytes - estimate.logits) / 2**20:.1f} MiB estimated without logits, "
        f"{measured / 2**20:.1f} MiB compiled")


# ----------------------------------------------------------------------------- the VAE
def _vae_chunk():
    """(compiled scratch + outputs, the estimate) of one Wan2.1 tiny VAE decode chunk after
    the first (its causal caches carried in) for 13 frames at 256 x 256."""
    from vidax.models.wan2_1 import vae
    from vidax.models.wan2_1.config import WanVAEConfig
    from vidax.pipelines import wan2_1

    cfg = WanVAEConfig.tiny()
    size, frames = SMALL
    request = wan2_1.make_request("t2v", "tiny", "a prompt", size=size, frames=frames)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: vae.WanVAE(cfg)))
    z = S((1, 1, *request.latent_shape[1:3], cfg.z_dim), F32)
    _, cache = jax.eval_shape(lambda s, z: nnx.merge(graphdef, s).decode_chunk(z, None),
                              state, z)
    analysis = vae._decode_chunk.lower(graphdef, state, z, cache).compile().memory_analysis()
    measured = analysis.temp_size_in_bytes + analysis.output_size_in_bytes
    geometry = dataclasses.replace(wan2_1.vae_geometry(cfg, request), total_frames=0)
    return measured, memory.vae_decode(geometry, "cpu")


def test_vae_chunk_estimate_bounds_the_compiled_chunk():
    measured, estimate = _vae_chunk()
    assert within(measured, estimate.bytes), (
        f"compiled {measured / 2**20:.1f} MiB, estimate {estimate.bytes / 2**20:.1f} MiB "
        f"({estimate.note}), ratio {estimate.bytes / measured:.2f}")
    assert not within(measured, estimate.bytes // 2)   # negative control (ratio 1.29)
