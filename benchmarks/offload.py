"""A DiT step with its transformer blocks streamed from host memory (``--offload block``,
:func:`vidax.nn.offload.stream`) beside the same step with every weight resident: step time,
peak device memory, and the parameter bytes on the device during the step.

The DiT is Wan2.1-T2V-14B's config (``--blocks`` of its 40 blocks; the transfers only show
against compute at the real width), bf16 weights and compute, batch 1 at ``--frames`` x
``--size`` (default: the release's 81 x 1280x720 on an accelerator), random weights. Each
mode runs in its own process (peak memory is a process's) unless ``--in-process``.

What is measured per mode:

* ``best_s`` / ``median_s``: the jitted DiT call (embeddings + blocks + head), after one
  warm-up call; the offloaded step's **overhead** is ``best_s(block) / best_s(none)``.
* ``peak_bytes``: ``memory_stats()["peak_bytes_in_use"]`` (accelerators; n/a on the CPU).
* XLA's ``memory_analysis()``: ``argument_bytes`` (device arguments: resident weights and
  inputs), ``host_argument_bytes`` (the blocks in host memory), ``temp_bytes``.
* **Parameter bytes on the device during a step** (``block`` rows), two ways, in units of one
  block's bytes: from the peaks, ``S = peak(block) - peak(none) + all blocks' bytes`` (the
  resident run holds every block, the streamed one ``S`` of them at its peak); from XLA,
  ``temp(block) - temp(none)`` (the streamed copies are the offloaded program's temporaries).
  :data:`vidax.nn.offload.AHEAD` + 2 blocks is the design bound (one computing, one arriving,
  one being released).

On a CPU (``JAX_PLATFORMS=cpu``) host and device are one RAM and XLA compiles the transfers
away: the overhead is that of the barriers' scheduling constraints alone, and no peak is
reported. ``benchmarks/device_check.py`` runs this on a lent GPU (its ``offload:*`` items).

Usage:
  python benchmarks/offload.py [--blocks 6] [--frames 81 --size 1280x720] [--repeats 3]
  python benchmarks/offload.py --smoke          # the tiny Wan2.1 DiT, 4 blocks (a CPU check)
  python benchmarks/offload.py --width 1.3b --size 256x256 --frames 9   # the CPU overhead
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("none", "block")


def config(args):
    from vidax.models.wan2_1.config import WanDiTConfig

    base = (WanDiTConfig.tiny() if args.smoke else WanDiTConfig.t2v_1_3b()
            if args.width == "1.3b" else WanDiTConfig.t2v_14b())
    return dataclasses.replace(base, num_layers=args.blocks)


def run_mode(mode: str, args) -> dict:
    """One mode's row (this process)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from benchmarks.common import timed
    from vidax.models.wan2_1.dit import WanDiT
    from vidax.nn import offload

    cfg = config(args)
    width, height = args.size
    grid = ((args.frames - 1) // 4 + 1, height // 8, width // 8)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, *grid, cfg.in_dim)), jnp.float32)
    t = jnp.asarray([500.0], jnp.float32)
    context = jnp.asarray(rng.standard_normal((1, cfg.text_len, cfg.text_dim)), jnp.float32)
    graphdef, state = nnx.split(WanDiT(cfg, keys=0, param_dtype=jnp.bfloat16))
    host = offload.in_blocks(offload.block_lists(nnx.merge(graphdef, state)))
    flat = nnx.to_flat_state(state)
    sizes = {".".join(map(str, p)): v.get_value().nbytes for p, v in flat}
    blocks = sum(n for k, n in sizes.items() if host(k))
    if mode == "block":
        flat = [(p, v.replace(offload.to_host(v.get_value())) if host(".".join(map(str, p)))
                 else v) for p, v in flat]
        state = nnx.from_flat_state(flat)
    state = jax.block_until_ready(state)

    step = jax.jit(lambda s, x, t, c: nnx.merge(graphdef, s)(x, t, c,
                                                              compute_dtype=jnp.bfloat16))
    start = time.perf_counter()
    compiled = step.lower(state, x, t, context).compile()
    row = {"mode": mode, "blocks": args.blocks, "dim": cfg.dim, "tokens": int(np.prod(
        [n // p for n, p in zip(grid, cfg.patch_size)])), "compile_s": time.perf_counter() - start,
        "param_bytes": sum(sizes.values()), "block_bytes": blocks // args.blocks,
        "blocks_bytes": blocks, "platform": jax.devices()[0].platform,
        "device": jax.devices()[0].device_kind}
    mem = compiled.memory_analysis()
    if mem is not None:
        row.update(argument_bytes=int(mem.argument_size_in_bytes),
                   host_argument_bytes=int(mem.host_argument_size_in_bytes),
                   temp_bytes=int(mem.temp_size_in_bytes))
    row["times"] = timed(lambda: compiled(state, x, t, context), jax.block_until_ready,
                         args.repeats, warmup=1)
    row["best_s"], row["median_s"] = min(row["times"]), float(np.median(row["times"]))
    stats = jax.devices()[0].memory_stats() or {}
    row["peak_bytes"] = stats.get("peak_bytes_in_use")
    return row


def compare(rows: dict) -> dict:
    """The offloaded row against the resident one: overhead and the streamed bytes."""
    none, block = rows["none"], rows["block"]
    out = {"overhead": block["best_s"] / none["best_s"]}
    one = block["block_bytes"]
    if none.get("peak_bytes") and block.get("peak_bytes"):
        streamed = block["peak_bytes"] - none["peak_bytes"] + block["blocks_bytes"]
        out.update(streamed_bytes_from_peaks=streamed, blocks_on_device_from_peaks=streamed / one)
    if block.get("host_argument_bytes") and "temp_bytes" in none:   # not on the CPU
        streamed = block["temp_bytes"] - none["temp_bytes"]
        out.update(streamed_bytes_from_xla=streamed, blocks_on_device_from_xla=streamed / one)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=None, help="default 6 (--smoke: 4)")
    p.add_argument("--frames", type=int, default=None, help="default 81 (--smoke: 9)")
    p.add_argument("--size", default=None, help="WIDTHxHEIGHT, default 1280x720 (--smoke: "
                                                "256x256)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="the tiny config, a small clip")
    p.add_argument("--width", choices=("14b", "1.3b"), default="14b",
                   help="the released config whose width the blocks have (default 14b)")
    p.add_argument("--in-process", action="store_true", help="both modes in this process")
    p.add_argument("--mode", choices=MODES, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="write the JSON here")
    args = p.parse_args(argv)
    args.blocks = args.blocks or (4 if args.smoke else 6)
    args.frames = args.frames or (9 if args.smoke else 81)
    size = args.size or ("64x64" if args.smoke else "1280x720")
    args.size = tuple(int(n) for n in size.lower().split("x"))
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.mode:   # a worker: one mode, its row on stdout
        print("ROW " + json.dumps(run_mode(args.mode, args)), flush=True)
        return {}
    rows = {}
    for mode in MODES:
        if args.in_process:
            rows[mode] = run_mode(mode, args)
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--mode", mode,
               "--blocks", str(args.blocks), "--frames", str(args.frames),
               "--size", "x".join(map(str, args.size)), "--repeats", str(args.repeats),
               "--width", args.width]
        cmd += ["--smoke"] if args.smoke else []
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("ROW ")), None)
        if proc.returncode or line is None:
            raise SystemExit(f"{mode}: failed\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        rows[mode] = json.loads(line[4:])
    report = {"rows": rows, **compare(rows)}
    for mode, r in rows.items():
        peak = "n/a" if not r.get("peak_bytes") else f"{r['peak_bytes'] / 2**30:.2f} GiB"
        print(f"{mode:6s} {r['blocks']} blocks of dim {r['dim']}, {r['tokens']} tokens on "
              f"{r['device']}: best {r['best_s'] * 1e3:.1f} ms (median "
              f"{r['median_s'] * 1e3:.1f}), compile {r['compile_s']:.1f} s, peak {peak}, XLA "
              f"temp {r.get('temp_bytes', 0) / 2**20:.1f} MiB, device args "
              f"{r.get('argument_bytes', 0) / 2**20:.1f} MiB, host args "
              f"{r.get('host_argument_bytes', 0) / 2**20:.1f} MiB")
    print(f"offloaded / resident step time: {report['overhead']:.3f}; one block "
          f"{rows['block']['block_bytes'] / 2**20:.1f} MiB")
    for key in ("blocks_on_device_from_peaks", "blocks_on_device_from_xla"):
        if key in report:
            print(f"  {key}: {report[key]:.2f} blocks")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
