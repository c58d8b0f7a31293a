"""A loaded model's first and second call from Python: eager (NNX runs op by op) against
``vidax.compiled(model)`` (one XLA program per input signature), each in a fresh process so
the first call pays its tracing and compilation, then the second call alone; and the
compiled output's largest difference from the eager one.

Models: the demo's tiny Wan2.1 DiT (``vidax/data/tiny/wan2_1.json``, random weights, its
``config.json``), on latents ``[1, 3, 8, 8, 16]`` with 7 text tokens; and the demo's tiny
Wan2.1 VAE decoding latents ``[1, 3, 8, 8, 16]`` to 9 frames of 64 x 64. The VAE's
``decode`` is a host loop over chunks, each one jitted already (``vidax.models.wan2_1.vae``),
so ``vidax.compiled`` refuses it; its rows are ``decode`` as shipped and, for scale, the
same decode with jit disabled (``jax.disable_jit``: truly eager).

    python benchmarks/compiled_call.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import load_average, machine_line, table  # noqa: E402

OUT = REPO / "benchmarks" / "out" / "compiled_call"
MODES = ("dit-eager", "dit-compiled", "vae-decode", "vae-no-jit")


def write_files(folder: pathlib.Path) -> None:
    from vidax.demo.common import random_tensors, tiny_layout, write_pth, write_safetensors

    layout = tiny_layout("wan2_1")
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "diffusion_pytorch_model.safetensors").exists():
        rng = np.random.default_rng(0)
        write_safetensors(folder / "diffusion_pytorch_model.safetensors",
                          random_tensors(layout["dit"], rng, np.float32))
        (folder / "config.json").write_text(json.dumps(layout["dit"]["config"]))
        write_pth(folder / "Wan2.1_VAE.pth", random_tensors(layout["vae"], rng, np.float32))


def run_child(mode: str, folder: str) -> dict:
    import jax

    import vidax

    rng = np.random.default_rng(1)
    if mode.startswith("dit"):
        model = vidax.load("wan2_1", "dit", f"{folder}/diffusion_pytorch_model.safetensors")
        args = (rng.standard_normal((1, 3, 8, 8, 16)).astype(np.float32),
                np.array([500.0], np.float32), rng.standard_normal((1, 7, 48)).astype(np.float32))
        call = vidax.compiled(model) if mode == "dit-compiled" else model
        reference = model
    else:
        model = vidax.load("wan2_1", "vae", f"{folder}/Wan2.1_VAE.pth")
        args = (rng.standard_normal((1, 3, 8, 8, 16)).astype(np.float32),)
        call = reference = model.decode
    jax.device_put(np.zeros(8)).block_until_ready()
    times, out = [], None
    for _ in range(2):
        start = time.perf_counter()
        if mode == "vae-no-jit":
            with jax.disable_jit():
                out = np.asarray(call(*args))
        else:
            out = np.asarray(call(*args))
        times.append(time.perf_counter() - start)
    diff = 0.0
    if mode == "dit-compiled":
        diff = float(np.abs(out - np.asarray(reference(*args))).max())
    return {"first": times[0], "second": times[1], "diff": diff, "shape": list(out.shape)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--repeat", type=int, default=2, help="rounds (fresh processes)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(*args.child)))
        return
    print(machine_line())
    before = load_average()
    write_files(OUT)
    results: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for mode in args.modes:
            env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
            proc = subprocess.run([sys.executable, __file__, "--child", mode, str(OUT)],
                                  capture_output=True, text=True, env=env, check=True)
            results.setdefault(mode, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = []
    for mode, runs in results.items():
        rows.append([mode, "x".join(map(str, runs[0]["shape"])),
                     f"{statistics.median(r['first'] for r in runs):.2f}",
                     f"{statistics.median(r['second'] for r in runs) * 1e3:.1f}",
                     f"{max(r['diff'] for r in runs):.1e}" if mode == "dit-compiled" else "-"])
    print(table(["call", "output", "1st call s", "2nd call ms", "max |compiled - eager|"],
                rows))
    print(f"medians of {args.repeat} fresh processes; load average {before} -> {load_average()}")


if __name__ == "__main__":
    main()
