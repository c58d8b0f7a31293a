"""Wan2.1 VAE decode on this CPU: vidax (JAX, chunked, jitted per chunk) vs the authors'
``WanVAE_.decode`` (PyTorch, its own chunking): time and peak memory, each side in a fresh
subprocess.

What runs:

* The released Wan2.1 VAE (``WanVAEConfig.wan2_1()``: dim 96, z_dim 16, 127M parameters) at
  full width. Its weights: the authors' module with its own init, saved once with
  ``torch.save(state_dict())`` as ``Wan2.1_VAE.pth``; vidax reads that file through
  ``vidax.load`` (torch-free), the torch side through ``torch.load(mmap=True)`` +
  ``load_state_dict``. Both decode the same random normalised latents
  ``[1, 5, S/8, S/8, 16]`` (a 17-frame video of ``S x S``; ``--size``, default 128) and the
  outputs are compared.
* Time: the first call of each side (for vidax that includes trace + compile of its two
  chunk programs -- the first latent frame and the later ones; the trace, lowering and XLA
  compile seconds are reported separately, from ``jax.monitoring``'s duration events); then
  warm calls, best and median of ``--repeats``. Load from other processes on a shared
  machine is printed (load average): it slows both sides.
* Memory, per subprocess (``/proc/self/status``): ``VmHWM``, the kernel's peak resident
  set (whole life of the process: interpreter, libraries, weights, decode), and the peak of
  ``RssAnon`` (anonymous memory only, so no memory-mapped file pages), sampled every 10 ms
  during the decodes, with its value just before the first decode (weights loaded) so the
  decode's own working memory is the difference.

Run: ``.venv/bin/python benchmarks/bench_vae.py [--size 128 --repeats 3]``; ~2.5 minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import (PeakAnonSampler, load_average, machine_line,  # noqa: E402
                               proc_status_kib, table)

LATENT_FRAMES = 5  # 17 video frames


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=128, help="video height = width (multiple of 8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--side", choices=("jax", "torch"), help=argparse.SUPPRESS)
    p.add_argument("--weights", help=argparse.SUPPRESS)
    p.add_argument("--latents", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    return p.parse_args()


# ----------------------------------------------------------------------------- one side
def _measure(decode, repeats: int) -> dict:
    """First call, warm calls and memory of ``decode()`` (returns a numpy video)."""
    anon_before = proc_status_kib("RssAnon")
    with PeakAnonSampler() as sampler:
        start = time.perf_counter()
        video = decode()
        first = time.perf_counter() - start
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            decode()
            times.append(time.perf_counter() - start)
    return {"first_s": first, "times": times, "anon_before_kib": anon_before,
            "peak_anon_kib": sampler.peak_kib, "vm_hwm_kib": proc_status_kib("VmHWM"),
            "video": video}


# The decoder's most expensive conv kind: a 3x3x3 causal conv of its last (96-channel,
# full-resolution) stage over one 4-frame chunk, given here pre-padded (2 cached frames in
# front, 1 pixel around), timed alone in the same process after the decodes.
def conv_shape(size: int) -> tuple[int, ...]:
    return (1, 4 + 2, size + 2, size + 2, 96)


def _best_of(fn, repeats: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def side_jax(args) -> dict:
    import jax

    import vidax
    from vidax.models.wan2_1.vae import WanVAEConfig

    import jax.monitoring

    model = vidax.load("wan2_1", "vae", args.weights, config=WanVAEConfig.wan2_1())
    z = np.load(args.latents)
    # JAX reports how long tracing, lowering and XLA compilation took, per program.
    compile_s = {}
    events = {"/jax/core/compile/jaxpr_trace_duration": "trace",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
              "/jax/core/compile/backend_compile_duration": "compile"}

    def listener(event, seconds, **_):
        if event in events:
            compile_s[events[event]] = compile_s.get(events[event], 0.0) + seconds

    jax.monitoring.register_event_duration_secs_listener(listener)
    result = _measure(lambda: model.decode(z, clamp=False), args.repeats)
    result["compile_s"] = dict(compile_s)

    rng = np.random.default_rng(0)
    x = jax.numpy.asarray(rng.standard_normal(conv_shape(args.size)), np.float32)
    w = jax.numpy.asarray(0.02 * rng.standard_normal((3, 3, 3, 96, 96)), np.float32)
    conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
        x, w, (1, 1, 1), "VALID", dimension_numbers=("NDHWC", "DHWIO", "NDHWC")))
    result["conv_s"] = _best_of(lambda: jax.block_until_ready(conv(x, w)))
    return result


def side_torch(args) -> dict:
    import torch

    from tests.reference import wan22

    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(os.cpu_count())
    # The config comes as JSON: importing vidax would load jax into the torch process.
    cfg = types.SimpleNamespace(**json.loads(Path(args.config).read_text()))
    ref = authors_vae(wan22, cfg)
    ref.load_state_dict(torch.load(args.weights, mmap=True, weights_only=True))
    z = torch.from_numpy(np.load(args.latents)).permute(0, 4, 1, 2, 3)
    scale = [torch.tensor(cfg.latents_mean), 1.0 / torch.tensor(cfg.latents_std)]

    def decode():
        with torch.inference_mode():
            return ref.decode(z, scale).permute(0, 2, 3, 4, 1).numpy()

    result = _measure(decode, args.repeats)
    rng = np.random.default_rng(0)
    shape = conv_shape(args.size)
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).permute(0, 4, 1, 2, 3)
    x = x.contiguous()
    w = torch.from_numpy((0.02 * rng.standard_normal((96, 96, 3, 3, 3))).astype(np.float32))
    with torch.inference_mode():
        result["conv_s"] = _best_of(lambda: torch.nn.functional.conv3d(x, w))
    return result


def authors_vae(wan22, cfg):
    return wan22.vae2_1_module().WanVAE_(
        dim=cfg.dim, z_dim=cfg.z_dim, dim_mult=list(cfg.dim_mult),
        num_res_blocks=cfg.num_res_blocks, attn_scales=[],
        temperal_downsample=list(cfg.temporal_downsample), dropout=0.0).eval()


# ----------------------------------------------------------------------------- orchestration
def main():
    args = parse_args()
    if args.side:
        result = (side_jax if args.side == "jax" else side_torch)(args)
        np.save(args.output, result.pop("video"))
        print(json.dumps(result))
        return

    import torch

    from tests.reference import wan22
    from vidax.models.wan2_1.vae import WanVAEConfig

    warnings.filterwarnings("ignore", category=FutureWarning)
    s = args.size // 8
    print(f"# Wan2.1 VAE decode, CPU, float32 -- {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"machine: {machine_line()}")
    print(f"latents [1, {LATENT_FRAMES}, {s}, {s}, 16] -> video 17 x {args.size} x {args.size}; "
          f"repeats {args.repeats}; each side in a fresh subprocess\n")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        cfg = WanVAEConfig.wan2_1()
        (tmp / "cfg.json").write_text(json.dumps(dataclasses.asdict(cfg)))
        ref = authors_vae(wan22, cfg)
        torch.save(ref.state_dict(), tmp / "Wan2.1_VAE.pth")
        del ref
        np.save(tmp / "z.npy", np.random.default_rng(0).standard_normal(
            (1, LATENT_FRAMES, s, s, 16)).astype(np.float32))
        print(f"load average (1/5/15 min) before: {load_average()}")
        results, videos = {}, {}
        for side in ("torch", "jax"):
            cmd = [sys.executable, __file__, "--side", side, "--repeats", str(args.repeats),
                   "--weights", str(tmp / "Wan2.1_VAE.pth"), "--latents", str(tmp / "z.npy"),
                   "--output", str(tmp / f"{side}.npy"), "--config", str(tmp / "cfg.json")]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode:
                sys.exit(f"{side} side failed:\n{proc.stderr[-3000:]}")
            results[side] = json.loads(proc.stdout.strip().splitlines()[-1])
            videos[side] = np.load(tmp / f"{side}.npy")
    print(f"load average after: {load_average()}")
    vj, vt = videos["jax"], videos["torch"]
    print(f"check: video {vj.shape}; max|jax - torch| / std(torch) = "
          f"{np.abs(vj - vt).max() / vt.std():.2e}\n")

    mib = lambda kib: f"{kib / 1024:.0f}"  # noqa: E731
    rows = []
    for side, label in (("torch", "authors' WanVAE_.decode (PyTorch)"),
                        ("jax", "vidax WanVAE.decode (JAX)")):
        r = results[side]
        rows.append([label, f"{r['first_s']:.1f}", f"{min(r['times']):.1f}",
                     f"{np.median(r['times']):.1f}", mib(r["anon_before_kib"]),
                     mib(r["peak_anon_kib"]), mib(r["peak_anon_kib"] - r["anon_before_kib"]),
                     mib(r["vm_hwm_kib"])])
    print(table(["decode", "first call s", "warm best s", "warm median s",
                 "RssAnon before MiB", "peak RssAnon MiB", "decode's anon MiB",
                 "peak RSS (VmHWM) MiB"], rows))
    rt, rj = results["torch"], results["jax"]
    c = rj["compile_s"]
    print(f"\nJAX speed vs PyTorch (warm best): {min(rt['times']) / min(rj['times']):.2f}x; "
          f"its primitive, conv3d 96->96 k3 over a 4 x {args.size} x {args.size} chunk "
          f"(best of 3, each in its side's process): PyTorch {rt['conv_s'] * 1e3:.0f} ms, JAX "
          f"{rj['conv_s'] * 1e3:.0f} ms, JAX speed vs PyTorch {rt['conv_s'] / rj['conv_s']:.2f}x")
    print(f"vidax first call {rj['first_s']:.1f} s, of which trace {c.get('trace', 0):.1f} s + "
          f"lower {c.get('lower', 0):.1f} s + XLA compile {c.get('compile', 0):.1f} s (all "
          f"programs it compiled: the two chunk programs and small helpers; jax.monitoring)")


if __name__ == "__main__":
    main()
