"""LoRA (issue #17): the cost of merging a rank-32 LoRA into a Wan2.1-14B-shaped DiT, and the
per-step time of live adapters against merged weights, side by side in one run.

The DiT: the 14B's width (dim 5120, ffn 13824, 40 heads; every non-block tensor at full size)
at ``--layers`` blocks (default 1), random bfloat16 weights in the authors' layout, written
to a temporary file. The LoRA: rank 32, alpha 32, on every block Linear (self/cross attention
q, k, v, o; ffn.0, ffn.2), the authors' ``diffusion_model.*.lora_down/up`` form (LightX2V's).

Each case runs in a fresh process (imports and the JAX runtime up before the clock; the file's
pages read once before, warm cache):

* ``load`` -- ``vidax.load(..., dtype="bfloat16")``;
* ``load + merge`` -- the same with ``loras=[file]``: the merge's share is the difference;
* ``load + live`` -- ``lora_mode="live"``;

with peak RSS (``ru_maxrss``) of each process, and then, in the same process, the DiT's
forward at ``--tokens`` tokens (bf16 compute, jitted, best of ``--repeat`` after a warm-up).

Usage: ``python benchmarks/lora_merge.py [--layers 1] [--tokens 1560] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config(layers: int):
    import dataclasses

    from vidax.models.wan2_1.dit import WanDiTConfig

    return dataclasses.replace(WanDiTConfig.t2v_14b(), num_layers=layers)


def write_files(folder: Path, layers: int, rank: int = 32) -> tuple[Path, Path]:
    import ml_dtypes
    import numpy as np

    from vidax.demo.common import write_safetensors
    from vidax.manifests import get_manifest

    rng = np.random.default_rng(0)
    keep = lambda k: not k.startswith("blocks.") or int(k.split(".")[1]) < layers  # noqa: E731
    state = {k: (rng.standard_normal(v.shape, np.float32) * 0.02).astype(ml_dtypes.bfloat16)
             for k, v in get_manifest("wan2_1/t2v-14b__dit").tensors.items() if keep(k)}
    dit = folder / "dit.safetensors"
    write_safetensors(dit, state)
    lora = {}
    for key, value in state.items():
        module = key.removesuffix(".weight")
        if key.startswith("blocks.") and value.ndim == 2 and "norm" not in key:
            lora[f"diffusion_model.{module}.lora_down.weight"] = (
                rng.standard_normal((rank, value.shape[1]), np.float32) * 0.01
            ).astype(ml_dtypes.bfloat16)
            lora[f"diffusion_model.{module}.lora_up.weight"] = (
                rng.standard_normal((value.shape[0], rank), np.float32) * 0.01
            ).astype(ml_dtypes.bfloat16)
            lora[f"diffusion_model.{module}.alpha"] = np.asarray(float(rank), np.float32)
    path = folder / "lora.safetensors"
    write_safetensors(path, lora)
    return dit, path


def child(args) -> None:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import vidax

    cfg = _config(args.layers)
    for f in (args.dit, args.lora):
        Path(f).read_bytes()                   # warm the page cache
    loras = {"load": None, "merge": [args.lora], "live": [args.lora]}[args.case]
    mode = "live" if args.case == "live" else "merge"
    start = time.perf_counter()
    model = vidax.load("wan2_1", "dit", args.dit, config=cfg, dtype="bfloat16", loras=loras,
                       lora_mode=mode)
    jax.block_until_ready(nnx.state(model))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    side = int(round((args.tokens / 1) ** 0.5))
    x = jnp.zeros((1, 1, 2 * side, 2 * side, cfg.in_dim), jnp.bfloat16)
    ctx = jnp.zeros((1, cfg.text_len, cfg.text_dim), jnp.bfloat16)
    t = jnp.full((1,), 500.0, jnp.float32)
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, x):
        return nnx.merge(graphdef, state)(x, t, ctx, compute_dtype=jnp.bfloat16)

    jax.block_until_ready(step(state, x))
    times = []
    for _ in range(args.repeat):
        s = time.perf_counter()
        jax.block_until_ready(step(state, x))
        times.append(time.perf_counter() - s)
    print(json.dumps({"case": args.case, "load_s": seconds, "peak_rss_gb": peak / 1e9,
                      "step_s": min(times), "tokens": side * side,
                      "file_gb": os.path.getsize(args.dit) / 1e9,
                      "lora_mb": os.path.getsize(args.lora) / 1e6}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--tokens", type=int, default=1560)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--case"), p.add_argument("--dit"), p.add_argument("--lora")
    args = p.parse_args()
    if args.case:
        return child(args)
    with tempfile.TemporaryDirectory() as tmp:
        dit, lora = write_files(Path(tmp), args.layers)
        rows = []
        for case in ("load", "merge", "live"):
            out = subprocess.run([sys.executable, __file__, "--case", case, "--dit", str(dit),
                                  "--lora", str(lora), "--layers", str(args.layers),
                                  "--tokens", str(args.tokens), "--repeat", str(args.repeat)],
                                 capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
            if out.returncode:
                sys.exit(out.stderr[-3000:])
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]
    print(f"Wan2.1-14B width, {args.layers} block(s): DiT file {base['file_gb']:.2f} GB (bf16), "
          f"LoRA {base['lora_mb']:.1f} MB (rank 32); forward at {base['tokens']} tokens")
    print(f"{'case':<14}{'load s':>9}{'x load':>8}{'peak RSS GB':>13}{'step s':>9}"
          f"{'x merged':>10}")
    merged = rows[1]["step_s"]
    for r in rows:
        print(f"{r['case']:<14}{r['load_s']:>9.2f}{r['load_s'] / base['load_s']:>8.2f}"
              f"{r['peak_rss_gb']:>13.2f}{r['step_s']:>9.3f}{r['step_s'] / merged:>10.2f}")


if __name__ == "__main__":
    main()
