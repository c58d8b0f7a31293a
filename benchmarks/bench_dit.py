"""Wan2.1 DiT forward on this CPU: vidax (JAX) vs the authors' ``WanModel`` (PyTorch), judged
against the primitives it is made of, all measured in the same run (DESIGN.md §10).

What runs:

* The Wan2.1-T2V-1.3B width (dim 1536, 12 heads of 128, ffn 8960, text_dim 4096, text_len
  512) at reduced depth (``--blocks``, default 2), batch 1, float32, on a latent grid
  ``--frames x --height x --width`` (default 3 x 60 x 104: a 480x832 frame area, 9 video
  frames -> 3 x 30 x 52 = 4,680 tokens; 480p/81 frames is 21 x 30 x 52 = 32,760 tokens,
  ~50x the attention work, too much for 2 cores).
* Same weights: the authors' module (``tests/reference/wan22.py``) with its own random init
  is saved with ``safetensors.torch.save_file(state_dict())`` and vidax loads that file with
  ``vidax.load`` (so the check ``max|jax - torch|`` below compares the same model).
* Same inputs: one random latent, t = 500, a full-length (512-token) random text context.
* Timing: warm calls, best and median of ``--repeats``; JAX jitted (``nnx.jit``), torch under
  ``torch.inference_mode()`` with ``torch.set_num_threads(os.cpu_count())`` (XLA's CPU
  client uses one intra-op thread per core too).
* Primitives, at the model's shapes, each alone and jitted (JAX) / eager (torch): the
  Linears (self-attn q/k/v/o and cross-attn q/o on the video tokens, cross-attn k/v on the
  512 text tokens, FFN up/down, the text embedding), self-attention
  (``jax.nn.dot_product_attention``, what ``vidax.nn.attention`` runs on CPU; torch SDPA),
  cross-attention (4,680 queries x 512 keys), the patch conv. The **floor** is the sum of
  each side's primitive times weighted by how often one forward runs them; ``model / floor``
  is the overhead of everything else (norms, RoPE, modulation, GELU, layout changes).
* Pieces (JAX): one whole block, its self-attention module, cross-attention module and FFN,
  each jitted alone, beside the floor of the primitives inside it: says where any overhead
  sits. Plus two attention variants (plain einsum/softmax in [B, H, L, D]; the same with the
  queries in blocks) as candidates for a CPU attention path, and the whole model once more
  with the blocked variant registered as a ``vidax.nn.attention`` kernel (its public
  ``register_kernel`` hook; no model code changes) -- checked against PyTorch like the first.

Run: ``.venv/bin/python benchmarks/bench_dit.py [--blocks 2 --frames 3 --height 60 --width 104
--repeats 5]``; about 5 minutes on 2 cores at the defaults. All measurements run in
interleaved rounds (``benchmarks.common.time_interleaved``) so load from other processes on a
shared machine touches each alike; the load average is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vidax  # noqa: E402
from benchmarks.common import load_average, machine_line, table, time_interleaved  # noqa: E402
from tests.reference import wan22  # noqa: E402
from vidax.models.wan2_1.dit import WanDiTConfig  # noqa: E402
from vidax.nn.attention import ENV_VAR, register_kernel  # noqa: E402
from vidax.nn.rope import axial_rope  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--frames", type=int, default=3, help="latent frames")
    p.add_argument("--height", type=int, default=60, help="latent height (even)")
    p.add_argument("--width", type=int, default=104, help="latent width (even)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-pieces", action="store_true", help="skip the per-piece JAX timings")
    return p.parse_args()


def blocked_attention(q, k, v, block: int):
    """Softmax attention with the queries in blocks of ``block`` (a CPU candidate: each
    block's [H, block, Lk] logits stay cache-sized instead of one [H, L, L] tensor)."""
    b, lq, h, d = q.shape
    qt = jnp.swapaxes(q, 1, 2) * (d ** -0.5)                       # [B, H, Lq, D]
    kt, vt = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
    qb = qt.reshape(b, h, lq // block, block, d).transpose(2, 0, 1, 3, 4)

    def one(qi):
        p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", qi, kt), axis=-1)
        return jnp.einsum("bhqk,bhkd->bhqd", p, vt)

    out = jax.lax.map(one, qb)                                      # [nb, B, H, block, D]
    return out.transpose(1, 0, 3, 2, 4).reshape(b, lq, h, d)


def einsum_attention(q, k, v):
    """Plain ``softmax(q k^T / sqrt(d)) v`` with einsums (no blocking)."""
    p = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def blocked_kernel(q, k, v, *, mask, bias, scale):
    """``blocked_attention`` as a ``vidax.nn.attention`` kernel (no mask, bias or scale: the
    Wan DiT passes none)."""
    assert mask is None and bias is None and scale is None
    return blocked_attention(q, k, v, query_block(q.shape[1]))


def query_block(length: int, target: int = 512) -> int:
    """The divisor of ``length`` nearest ``target``."""
    return min((d for d in range(1, length + 1) if length % d == 0), key=lambda d: abs(d - target))


def randomize(module: torch.nn.Module, seed: int = 0) -> None:
    """Random values in every tensor (the authors' init zeroes the head, which would make the
    output check below vacuous), scaled so activations stay O(1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("modulation"):
                p.copy_(0.5 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / p[0].numel() ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 0.1 else f"{seconds * 1e3:.0f}"


def main():
    args = parse_args()
    # The authors' torch.amp.autocast("cuda") blocks warn on a CPU build; they are inactive.
    warnings.filterwarnings("ignore", message="CUDA is not available")
    torch.set_num_threads(os.cpu_count())
    cfg = dataclasses.replace(WanDiTConfig.t2v_1_3b(), num_layers=args.blocks)
    d, heads, hd, ffn, tl = cfg.dim, cfg.num_heads, cfg.head_dim, cfg.ffn_dim, cfg.text_len
    grid = (args.frames, args.height // 2, args.width // 2)
    L = int(np.prod(grid))
    rng = np.random.default_rng(0)
    f32 = np.float32
    print(f"# Wan2.1 DiT forward, CPU, float32 -- {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"machine: {machine_line()}; torch threads {torch.get_num_threads()}")
    print(f"config: dim {d}, {heads} heads x {hd}, ffn {ffn}, {args.blocks} blocks; latent "
          f"{args.frames}x{args.height}x{args.width} -> {L} tokens; text {tl} tokens; "
          f"repeats {args.repeats}\n")

    # ------------------------------------------------------------------ the same model twice
    ref = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(ref)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "diffusion_pytorch_model.safetensors"
        safetensors.torch.save_file(ref.state_dict(), path)
        model = vidax.load("wan2_1", "dit", path, config=cfg)

    x = rng.standard_normal((1, args.frames, args.height, args.width, cfg.in_dim)).astype(f32)
    t = np.array([500.0], f32)
    context = rng.standard_normal((1, tl, cfg.text_dim)).astype(f32)

    fwd = nnx.jit(lambda m, x, t, c: m(x, t, c))
    xj, tj, cj = map(jnp.asarray, (x, t, context))
    start = time.perf_counter()
    out_jax = np.asarray(jax.block_until_ready(fwd(model, xj, tj, cj)))
    compile_s = time.perf_counter() - start

    x_t = [torch.from_numpy(x[0]).permute(3, 0, 1, 2)]
    t_t = torch.from_numpy(t)[:, None].expand(1, L)
    c_t = [torch.from_numpy(context[0])]

    def torch_fwd():
        with torch.inference_mode():
            return ref(x_t, t=t_t, context=c_t, seq_len=L)

    out_torch = torch_fwd()[0].permute(1, 2, 3, 0).numpy()[None]
    diff = float(np.abs(out_jax - out_torch).max() / out_torch.std())
    print(f"check: max|jax - torch| / std(torch) = {diff:.2e} (same weights and inputs); "
          f"JAX first call (trace + compile + run) {compile_s:.1f} s\n")

    # The candidate CPU fix, in the model: the blocked kernel registered through
    # vidax.nn.attention's public hook and selected while this second program is traced.
    register_kernel("blocked", blocked_kernel, needs_shard_map=False)
    fwd_blocked = nnx.jit(lambda m, x, t, c: m(x, t, c))
    os.environ[ENV_VAR] = "blocked"
    try:
        out_blocked = np.asarray(jax.block_until_ready(fwd_blocked(model, xj, tj, cj)))
    finally:
        del os.environ[ENV_VAR]
    diff_b = float(np.abs(out_blocked - out_torch).max() / out_torch.std())
    print(f"check (blocked attention kernel): max|jax - torch| / std(torch) = {diff_b:.2e}\n")
    if max(diff, diff_b) > 1e-4:
        sys.exit("the two sides disagree: the timings below would not compare the same model")

    # Every measurement below is collected first and then timed in interleaved rounds.
    fns = {"model jax": lambda: jax.block_until_ready(fwd(model, xj, tj, cj)),
           "model jax blocked": lambda: jax.block_until_ready(fwd_blocked(model, xj, tj, cj)),
           "model torch": torch_fwd}

    # ------------------------------------------------------------------ primitives
    def arr(*shape):
        return rng.standard_normal(shape).astype(f32) * 0.1

    lin = lambda x, w, b: x @ w + b  # noqa: E731
    prims = {}  # name -> (count per forward, jax fn, jax args, torch fn, torch args)

    def linear(name, m, k, n, count):
        xs, w, b = arr(m, k), arr(k, n), arr(n)
        prims[name] = (count, jax.jit(lin), (xs, w, b), F.linear,
                       (torch.from_numpy(xs), torch.from_numpy(np.ascontiguousarray(w.T)),
                        torch.from_numpy(b)))

    nb = args.blocks
    linear(f"linear {L}x{d}x{d} (self q,k,v,o; cross q,o)", L, d, d, 6 * nb)
    linear(f"linear {tl}x{d}x{d} (cross k,v)", tl, d, d, 2 * nb)
    linear(f"linear {L}x{d}x{ffn} (ffn up)", L, d, ffn, nb)
    linear(f"linear {L}x{ffn}x{d} (ffn down)", L, ffn, d, nb)
    linear(f"linear {tl}x{cfg.text_dim}x{d} (text emb fc1)", tl, cfg.text_dim, d, 1)
    linear(f"linear {tl}x{d}x{d} (text emb fc2)", tl, d, d, 1)
    q, kv = arr(1, L, heads, hd), arr(1, L, heads, hd)
    kc = arr(1, tl, heads, hd)
    sdpa_t = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    to_bhld = lambda a: torch.from_numpy(a).transpose(1, 2).contiguous()  # noqa: E731
    dpa = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"))
    prims[f"self-attention {heads}x{hd}, {L} tokens"] = (
        nb, dpa, (q, kv, kv), sdpa_t, (to_bhld(q), to_bhld(kv), to_bhld(kv)))
    prims[f"cross-attention {L} q x {tl} k"] = (
        nb, dpa, (q, kc, kc), sdpa_t, (to_bhld(q), to_bhld(kc), to_bhld(kc)))
    px = arr(1, args.frames, args.height, args.width, cfg.in_dim)
    pw, pb = arr(1, 2, 2, cfg.in_dim, d), arr(d)
    conv = jax.jit(lambda x, w, b: jax.lax.conv_general_dilated(
        x, w, (1, 2, 2), "VALID", dimension_numbers=("NDHWC", "DHWIO", "NDHWC")) + b)
    prims[f"patch conv3d {cfg.in_dim}->{d}, k=s=(1,2,2)"] = (
        1, conv, (px, pw, pb), lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 2)),
        (torch.from_numpy(px).permute(0, 4, 1, 2, 3).contiguous(),
         torch.from_numpy(np.ascontiguousarray(pw.transpose(4, 3, 0, 1, 2))), torch.from_numpy(pb)))

    for name, (_count, fj, aj, ft, at) in prims.items():
        aj = tuple(jnp.asarray(a) for a in aj)
        fns[f"{name} jax"] = lambda fj=fj, aj=aj: jax.block_until_ready(fj(*aj))
        fns[f"{name} torch"] = lambda ft=ft, at=at: torch_call(ft, at)

    # ------------------------------------------------------------------ where the time goes
    block = model.blocks[0]
    xs = jnp.asarray(arr(1, L, d) * 10)
    e0 = jnp.asarray(arr(1, 1, 6, d))
    ctx = jnp.asarray(arr(1, tl, d) * 10)
    rope = axial_rope(grid, cfg.rope_axis_dims)
    qa, ka = jnp.asarray(q), jnp.asarray(kv)
    bq = query_block(L)
    pieces = {
        "whole block": (nnx.jit(lambda b, x, e, c: b(x, e, c, None, rope)),
                        (block, xs, e0, ctx)),
        "self_attn (q,k,v,o + RMSNorm + RoPE + attention)":
            (nnx.jit(lambda m, x: m(x, rope)), (block.self_attn, xs)),
        "cross_attn (q,o on video; k,v on text; attention)":
            (nnx.jit(lambda m, x, c: m(x, c)), (block.cross_attn, xs, ctx)),
        "ffn (up, GELU-tanh, down)": (nnx.jit(lambda m, x: m(x)), (block.ffn, xs)),
        "attention: plain einsum + softmax, [B,H,L,D]": (jax.jit(einsum_attention), (qa, ka, ka)),
        f"attention: queries in blocks of {bq}":
            (jax.jit(lambda q, k, v: blocked_attention(q, k, v, bq)), (qa, ka, ka)),
    }
    if not args.no_pieces:
        for name, (fn, fargs) in pieces.items():
            fns[name] = lambda fn=fn, fargs=fargs: jax.block_until_ready(fn(*fargs))

    print(f"load average (1/5/15 min) before timing: {load_average()}", flush=True)
    timings = time_interleaved(fns, repeats=args.repeats)
    print(f"load average after: {load_average()}\n")
    model_jax, model_torch = timings["model jax"], timings["model torch"]
    model_jb = timings["model jax blocked"]

    rows, floor_j, floor_t, pt = [], 0.0, 0.0, {}
    for name, (count, *_unused) in prims.items():
        tj_, tt_ = timings[f"{name} jax"], timings[f"{name} torch"]
        pt[name] = tj_.best
        floor_j += count * tj_.best
        floor_t += count * tt_.best
        rows.append([name, count, ms(tt_.best), ms(tj_.best), f"{tt_.best / tj_.best:.2f}x",
                     ms(count * tj_.best)])
    rows.append(["**floor** (sum, weighted by count)", "", ms(floor_t), ms(floor_j),
                 f"{floor_t / floor_j:.2f}x", ms(floor_j)])
    print(f"## Primitives (best of {args.repeats}, ms)\n")
    print(table(["primitive", "per fwd", "PyTorch", "JAX", "JAX speed vs PyTorch",
                 "JAX x count"], rows))

    print(f"\n## Model ({args.blocks} blocks, {L} tokens)\n")
    mrows = [
        ["authors' WanModel (PyTorch)", f"{model_torch.best * 1e3:.0f}",
         f"{model_torch.median * 1e3:.0f}", f"{floor_t * 1e3:.0f}",
         f"{model_torch.best / floor_t:.2f}x", ""],
        ["vidax WanDiT (JAX, jit)", f"{model_jax.best * 1e3:.0f}", f"{model_jax.median * 1e3:.0f}",
         f"{floor_j * 1e3:.0f}", f"{model_jax.best / floor_j:.2f}x",
         f"{model_torch.best / model_jax.best:.2f}x"],
        ["vidax WanDiT, blocked attention kernel", f"{model_jb.best * 1e3:.0f}",
         f"{model_jb.median * 1e3:.0f}", f"{floor_j * 1e3:.0f} (dot_product_attention)",
         f"{model_jb.best / floor_j:.2f}x", f"{model_torch.best / model_jb.best:.2f}x"],
    ]
    print(table(["forward", "best ms", "median ms", "own primitives' floor ms",
                 "model / floor", "JAX speed vs PyTorch"], mrows))
    print(f"\nprimitives' floor ratio (JAX speed vs PyTorch): {floor_t / floor_j:.2f}x; "
          f"model ratio: {model_torch.best / model_jax.best:.2f}x")

    if args.no_pieces:
        return
    names = list(prims)
    sq, skv, sup, sdown, sattn, scross = (pt[names[i]] for i in (0, 1, 2, 3, 6, 7))
    floors = [6 * sq + 2 * skv + sup + sdown + sattn + scross, 4 * sq + sattn,
              2 * sq + 2 * skv + scross, sup + sdown, sattn, sattn]
    prows = []
    for i, (name, floor) in enumerate(zip(pieces, floors)):
        tm = timings[name]
        floor_txt = ms(floor) if i < 4 else f"{ms(floor)} (dot_product_attention)"
        prows.append([name, ms(tm.best), floor_txt, f"{tm.best / floor:.2f}x"])
    print(f"\n## Where the JAX time goes (one block, {L} tokens; best of {args.repeats}, ms)\n")
    print(table(["piece (jitted alone)", "JAX ms", "its primitives' floor ms", "piece / floor"],
                prows))


def torch_call(fn, args):
    with torch.inference_mode():
        return fn(*args)


if __name__ == "__main__":
    main()
