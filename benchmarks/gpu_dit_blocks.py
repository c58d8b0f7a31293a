"""Wan2.1 DiT blocks at full width on a GPU: vidax (JAX, bf16, cuDNN attention) and the
authors' ``WanAttentionBlock`` (PyTorch, autocast bf16, SDPA) -- time per block, the time
scaled to full depth, achieved TFLOP/s and MFU.

One prepared script for a lent GPU (an H100/H200; the image there has jax[cuda], flax and
torch; nothing can be installed), designed to finish in under 6 minutes:

* Models: Wan2.1-T2V-1.3B (dim 1536, 12 heads, ffn 8960, 30 blocks) and -14B (dim 5120,
  40 heads, ffn 13824, 40 blocks), ``--blocks`` of each (default 2) at full width.
* Tokens: 480p / 81 frames = latent 21 x 60 x 104 -> 21 x 30 x 52 = 32,760 video tokens;
  512 text tokens (already through the text embedding). Batch 1.
* Precision: what the authors run -- float32 weights, bfloat16 compute (vidax
  ``compute_dtype=bfloat16``; the authors' module under ``torch.autocast("cuda",
  bfloat16)``, with their own float32 islands); ``--param-dtype bfloat16`` stores the
  weights in bf16 on both sides instead (the PyTorch side then needs CUDA's autocast: on a
  CPU smoke run it fails, and says so).
* Attention: vidax's automatic choice (cuDNN flash attention for bf16 on GPU; logged) or
  ``--attention xla|cudnn``; the authors' ``flash_attention`` (flash-attn, not installed
  there) is replaced by ``torch.nn.functional.scaled_dot_product_attention`` with their
  bf16 casts, which picks its flash kernel on Hopper.
* Placement first: ``jax.device_put`` of a transposed bf16 view of the 14B FFN weight (how
  ``vidax.load`` places a Linear kernel without a host-side transpose) must equal the
  contiguous copy; its GB/s is printed beside the plain transfer's.
* Timing: the blocks alone (x already patch-embedded, e0 and the text context given),
  jitted as one function; warm, best and median of ``--repeats``; per block = time /
  blocks; full depth = per block x the model's block count (the embeddings and head are a
  fraction of one block and not counted).
* FLOPs per block (multiply-adds x 2): self-attention q/k/v/o ``8 L d^2``, cross-attention
  q/o ``4 L d^2`` and k/v ``4 Lt d^2``, FFN ``4 L d f``, attention ``4 L^2 d`` (q k^T and
  p v) plus ``4 L Lt d`` for cross-attention. MFU = achieved / the dense bf16 peak of the
  device (table ``PEAK_BF16_TFLOPS`` in ``benchmarks/common.py``).

The authors' block is loaded from their source files ``model.py`` / ``attention.py`` (the
installed ``wan`` package, else ``--wan-src``: carry ``.venv/lib/python3.11/site-packages/
wan/modules`` to the device) with ``diffusers`` stubbed out (the block uses none of it).

Usage:
  python3 benchmarks/gpu_dit_blocks.py [--models 1.3b,14b] [--blocks 2] [--repeats 5]
      [--attention cudnn] [--param-dtype float32] [--no-torch] [--out results.json]
  python3 benchmarks/gpu_dit_blocks.py --smoke   # tiny sizes on CPU: checks the script runs
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib.util
import json
import math
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# JAX would otherwise take 75% of the GPU up front, starving the PyTorch side in this process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.common import check_strided_placement, peak_tflops, timed  # noqa: E402
from vidax.models.wan2_1.dit import WanAttentionBlock, WanDiTConfig  # noqa: E402
from vidax.nn.layers import KeyGen  # noqa: E402
from vidax.nn.rope import axial_rope  # noqa: E402

FULL = {"1.3b": WanDiTConfig.t2v_1_3b(), "14b": WanDiTConfig.t2v_14b()}


def block_flops(d: int, f: int, L: int, Lt: int) -> float:
    linears = 8 * L * d * d + 4 * L * d * d + 4 * Lt * d * d + 4 * L * d * f
    return linears + 4 * L * L * d + 4 * L * Lt * d


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes on CPU")
    p.add_argument("--models", default="1.3b,14b")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--grid", default="21,60,104", help="latent frames,height,width")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--attention", default=None, help="xla | cudnn (default: vidax's choice)")
    p.add_argument("--param-dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--wan-src", default=None, help="folder holding the authors' model.py")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args()


# ----------------------------------------------------------------------------- vidax
def run_vidax(cfg: WanDiTConfig, blocks: int, grid, args, text_len: int) -> dict:
    cd = jnp.bfloat16
    pdt = jnp.dtype(args.param_dtype)
    keys = KeyGen(0)
    stack = nnx.List([WanAttentionBlock(cfg, keys=keys, param_dtype=pdt)
                      for _ in range(blocks)])
    L = math.prod(grid)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, L, cfg.dim), np.float32))
    e0 = jnp.asarray(0.1 * rng.standard_normal((1, 1, 6, cfg.dim), np.float32))
    ctx = jnp.asarray(rng.standard_normal((1, text_len, cfg.dim), np.float32))
    rope = axial_rope(grid, cfg.rope_axis_dims)

    @nnx.jit
    def forward(stack, x, e0, ctx):
        for block in stack:
            x = block(x, e0, ctx, None, rope, cd)
        return x

    start = time.perf_counter()
    jax.block_until_ready(forward(stack, x, e0, ctx))
    compile_s = time.perf_counter() - start
    times = timed(lambda: forward(stack, x, e0, ctx), jax.block_until_ready, args.repeats)
    return {"compile_s": compile_s, "times": times}


# ----------------------------------------------------------------------------- the authors
def _sdpa_flash_attention(q, k, v, q_lens=None, k_lens=None, dropout_p=0.0, softmax_scale=None,
                          q_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
                          dtype=None, version=None):
    """The authors' ``flash_attention`` for the unpadded batch-1 case through torch SDPA:
    q/k/v cast to bf16 as theirs does (on CUDA; a CPU smoke keeps float32), output in q's
    dtype. Every key is real here (``k_lens`` = the full length), so there is no mask."""
    import torch
    import torch.nn.functional as F
    assert not causal and tuple(window_size) == (-1, -1) and not dropout_p
    out_dtype = q.dtype
    half = (torch.bfloat16, torch.float16)
    if q.is_cuda:
        want = dtype or torch.bfloat16
        q, k, v = (t if t.dtype in half else t.to(want) for t in (q, k, v))
    if q_scale is not None:
        q = q * q_scale
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         scale=softmax_scale)
    return out.transpose(1, 2).to(out_dtype)


def authors_model_module(wan_src: str | None) -> types.ModuleType:
    """The authors' ``wan/modules/model.py`` as a module, with ``diffusers`` stubbed while it
    imports (``WanModel`` subclasses its mixins; the blocks never touch them)."""
    if wan_src is None:
        spec = importlib.util.find_spec("wan")
        candidates = ([Path(p) / "modules" for p in spec.submodule_search_locations]
                      if spec and spec.submodule_search_locations else [])
        candidates.append(ROOT / ".venv/lib/python3.11/site-packages/wan/modules")
        wan_src = next((str(c) for c in candidates if (c / "model.py").is_file()), None)
        if wan_src is None:
            raise FileNotFoundError("the authors' wan/modules/model.py: pass --wan-src")
    pkg = types.ModuleType("_wan_authors")
    pkg.__path__ = [wan_src]
    stubs = {"diffusers": types.ModuleType("diffusers"),
             "diffusers.configuration_utils": types.ModuleType("diffusers.configuration_utils"),
             "diffusers.models": types.ModuleType("diffusers.models"),
             "diffusers.models.modeling_utils": types.ModuleType("diffusers.models.modeling_utils")}
    import torch
    stubs["diffusers.configuration_utils"].ConfigMixin = object
    stubs["diffusers.configuration_utils"].register_to_config = lambda fn: fn
    stubs["diffusers.models.modeling_utils"].ModelMixin = torch.nn.Module
    saved = {k: sys.modules.get(k) for k in (*stubs, "_wan_authors")}
    sys.modules.update(stubs)
    sys.modules["_wan_authors"] = pkg
    try:
        for name in ("attention", "model"):
            spec = importlib.util.spec_from_file_location(f"_wan_authors.{name}",
                                                          Path(wan_src) / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if k.startswith("diffusers"):
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
    module.flash_attention = _sdpa_flash_attention
    return module


def run_torch(cfg: WanDiTConfig, blocks: int, grid, args, text_len: int, wan) -> dict:
    import torch
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    pdt = getattr(torch, args.param_dtype)
    stack = torch.nn.ModuleList([
        wan.WanAttentionBlock(cfg.dim, cfg.ffn_dim, cfg.num_heads, cfg.window_size,
                              cfg.qk_norm, cfg.cross_attn_norm, cfg.eps)
        for _ in range(blocks)]).to(dev, pdt).eval()
    d = cfg.head_dim
    freqs = torch.cat([wan.rope_params(1024, d - 4 * (d // 6)),
                       wan.rope_params(1024, 2 * (d // 6)),
                       wan.rope_params(1024, 2 * (d // 6))], dim=1).to(dev)
    L = math.prod(grid)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, L, cfg.dim, generator=gen).to(dev)
    e0 = (0.1 * torch.randn(1, 1, 6, cfg.dim, generator=gen)).to(dev)
    ctx = torch.randn(1, text_len, cfg.dim, generator=gen).to(dev)
    seq_lens = torch.tensor([L], dtype=torch.long, device=dev)
    grid_sizes = torch.tensor([grid], dtype=torch.long, device=dev)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda"
                else contextlib.nullcontext())

    def forward():
        with torch.inference_mode(), autocast:
            h = x
            for block in stack:
                h = block(h, e0, seq_lens, grid_sizes, freqs, ctx, None)
            return h

    sync = (lambda _: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda _: None)
    return {"times": timed(forward, sync, args.repeats)}


def _torch_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


# ----------------------------------------------------------------------------- main
def main():
    args = parse_args()
    if args.attention:
        os.environ["VIDAX_ATTENTION"] = args.attention
    text_len = 512
    if args.smoke:
        configs = {"tiny": dataclasses.replace(WanDiTConfig.tiny(), dim=128, ffn_dim=256,
                                               num_heads=2)}
        grid, text_len, args.repeats = (2, 4, 6), 16, 2
    else:
        configs = {m: FULL[m] for m in args.models.split(",")}
        f, h, w = (int(v) for v in args.grid.split(","))
        grid = (f, h // 2, w // 2)
    L = math.prod(grid)
    device = jax.devices()[0]
    name = getattr(device, "device_kind", str(device))
    peak = peak_tflops(name) if device.platform == "gpu" else None
    print(f"# Wan2.1 DiT blocks -- {time.strftime('%Y-%m-%d %H:%M')}; device {name} "
          f"({device.platform}), bf16 peak {peak or '?'} TFLOP/s; jax {jax.__version__}")
    print(f"tokens {L} (grid {grid}), text {text_len}, blocks {args.blocks}, params "
          f"{args.param_dtype}, compute bfloat16, attention "
          f"{os.environ.get('VIDAX_ATTENTION', 'auto')}", flush=True)
    import logging
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("vidax.attention").setLevel(logging.INFO)

    # the 14B FFN weight, [ffn, dim]; a small one on the CPU smoke run
    placement = check_strided_placement((256, 128) if args.smoke else (13824, 5120),
                                        args.repeats)

    wan = None
    if not args.no_torch:
        try:
            wan = authors_model_module(args.wan_src)
        except Exception as err:  # torch or the authors' source missing there: JAX only
            print(f"PyTorch side skipped: {type(err).__name__}: {err}")

    results = []
    for key, full in configs.items():
        cfg = dataclasses.replace(full, num_layers=args.blocks)
        flops = block_flops(cfg.dim, cfg.ffn_dim, L, text_len)
        sides = [("vidax (JAX)", run_vidax, ())]
        if wan is not None:
            sides.append(("authors (PyTorch)", run_torch, (wan,)))
        for side, run, extra in sides:
            try:
                r = run(cfg, args.blocks, grid, args, text_len, *extra)
            except Exception as err:
                print(f"{key} {side}: FAILED {type(err).__name__}: {err}", flush=True)
                continue
            per_block = min(r["times"]) / args.blocks
            tflops = flops / per_block / 1e12
            row = {"model": key, "side": side, "tokens": L, "blocks_timed": args.blocks,
                   "per_block_ms": per_block * 1e3,
                   "median_per_block_ms": float(np.median(r["times"])) / args.blocks * 1e3,
                   "full_depth_s": per_block * full.num_layers,
                   "full_depth_blocks": full.num_layers,
                   "tflop_per_block": flops / 1e12, "tflops": tflops,
                   "mfu": tflops / peak if peak else None,
                   "compile_s": r.get("compile_s")}
            results.append(row)
            mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
            print(f"{key:5s} {side:18s} {row['per_block_ms']:9.2f} ms/block (median "
                  f"{row['median_per_block_ms']:.2f})  x{full.num_layers} = "
                  f"{row['full_depth_s']:.3f} s/step  {tflops:7.1f} TFLOP/s  MFU {mfu}"
                  + (f"  (compile {row['compile_s']:.1f} s)" if row["compile_s"] else ""),
                  flush=True)
        gc.collect()   # each side's weights and activations go before the next model's
        jax.clear_caches()
        if wan is not None and _torch_cuda():
            import torch
            torch.cuda.empty_cache()

    print("\n| model | side | ms/block (best) | full depth s/step | TFLOP/block | TFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"| {r['model']} | {r['side']} | {r['per_block_ms']:.2f} | "
              f"{r['full_depth_s']:.3f} ({r['full_depth_blocks']} blocks) | "
              f"{r['tflop_per_block']:.2f} | {r['tflops']:.1f} | {mfu} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "peak_bf16_tflops": peak,
                                              "jax": jax.__version__, "results": results,
                                              "strided_placement": placement}, indent=1))


if __name__ == "__main__":
    main()
