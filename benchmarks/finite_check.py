"""The cost of ``vidax.load``'s non-finite check (issue #11): load with the check against load
without it, each in a fresh process (so the check's compilations are counted), twice per
process (the second load finds them cached, as a pipeline loading a second model of the
same shapes does).

The check as shipped (``host``): in each placement thread, the NaN/Inf count of the data
about to be placed -- the stored tensor in the memory map (its exponent bits tested in
blocks of 1 Mi elements, ``vidax.translator.verify.count_nonfinite``), or the host copy a
cast made -- before the transfer, so the pages the test faults in are placed from the page
cache. No compilation.

Variants timed (``--variants``):

* ``off`` -- ``vidax.load`` with the count patched out (the floor);
* ``host`` -- ``vidax.load`` as shipped;
* ``device`` -- the alternative: the count patched out of the load, then one jitted
  ``sum(~isfinite(x))`` per placed array (compiled per distinct shape and dtype), the counts
  read back in one transfer;
* ``fused`` -- the other alternative: one jitted program over all placed arrays at once,
  returning a count per array.

The checkpoints are synthetic Wan2.1 DiTs in the authors' layout, random normal values:

* ``tiny`` -- the demo's tiny DiT (``vidax/data/tiny/wan2_1.json``, 69 tensors, float32);
* ``mid`` -- the released T2V-1.3B's keys and shapes with its first 3 of 30 blocks
  (``wan2_1/t2v-1.3b__dit`` manifest; 159 tensors, bf16, about 300 MiB).

    python benchmarks/finite_check.py                  # both models, every variant
    python benchmarks/finite_check.py --models mid --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
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

OUT = REPO / "benchmarks" / "out" / "finite_check"
MID_BLOCKS = 3
VARIANTS = ("off", "host", "device", "fused")


# ------------------------------------------------------------------------------ checkpoints
def write_tiny(folder: pathlib.Path) -> pathlib.Path:
    from vidax.demo.common import random_tensors, tiny_layout, write_safetensors

    layout = tiny_layout("wan2_1")["dit"]
    path = folder / "tiny" / "diffusion_pytorch_model.safetensors"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_safetensors(path, random_tensors(layout, np.random.default_rng(0), np.float32))
        (path.parent / "config.json").write_text(json.dumps(layout["config"]))
    return path


def write_mid(folder: pathlib.Path) -> pathlib.Path:
    """The 1.3B's non-block tensors and blocks 0..MID_BLOCKS-1, bf16, written tensor by
    tensor; its config.json is the 1.3B's with ``num_layers`` = MID_BLOCKS."""
    import ml_dtypes

    from vidax.loading import config
    from vidax.manifests import get_manifest

    path = folder / "mid" / "diffusion_pytorch_model.safetensors"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest = get_manifest("wan2_1/t2v-1.3b__dit")
    keep = {k: tuple(t.shape) for k, t in manifest.tensors.items()
            if not k.startswith("blocks.") or int(k.split(".")[1]) < MID_BLOCKS}
    header, offset = {}, 0
    for key, shape in keep.items():
        size = math.prod(shape) * 2
        header[key] = {"dtype": "BF16", "shape": list(shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(0)
    with open(str(path) + ".tmp", "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for shape in keep.values():
            f.write(rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16).tobytes())
    os.replace(str(path) + ".tmp", path)
    cfg = dataclasses.replace(config("wan2_1", "dit", "t2v-1.3b"), num_layers=MID_BLOCKS)
    (path.parent / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
    return path


# -------------------------------------------------------------------------------- the child
def run_child(variant: str, path: str) -> dict:
    """Two timed loads in this process; the file read through once before each."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax import loading
    from vidax.translator import verify

    jax.device_put(np.zeros(8)).block_until_ready()
    if variant != "host":
        verify.count_nonfinite = lambda array: 0

    @jax.jit
    def one(x):
        return jnp.sum(~jnp.isfinite(x), dtype=jnp.int32)

    @jax.jit
    def fused(leaves):
        return [jnp.sum(~jnp.isfinite(x), dtype=jnp.int32) for x in leaves]

    times = []
    for _ in range(2):
        with open(path, "rb") as f:        # warm page cache alike for every variant
            while f.read(1 << 24):
                pass
        start = time.perf_counter()
        model = loading.load("wan2_1", "dit", path)
        leaves = jax.tree.leaves(nnx.state(model))
        jax.block_until_ready(leaves)
        if variant == "device":
            assert not any(int(n) for n in jax.device_get([one(x) for x in leaves]))
        elif variant == "fused":
            assert not any(int(n) for n in jax.device_get(fused(leaves)))
        times.append(time.perf_counter() - start)
        bytes_ = sum(x.nbytes for x in leaves)
        del model, leaves
    return {"first": times[0], "second": times[1], "bytes": bytes_}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "mid"], choices=["tiny", "mid"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (fresh processes)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(*args.child)))
        return
    print(machine_line())
    load_before = load_average()
    results: dict[tuple[str, str], list[dict]] = {}
    for model in args.models:
        path = (write_tiny if model == "tiny" else write_mid)(OUT)
        for _ in range(args.repeat):
            for variant in args.variants:       # interleaved: machine load falls on all
                env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
                proc = subprocess.run([sys.executable, __file__, "--child", variant, str(path)],
                                      capture_output=True, text=True, env=env, check=True)
                results.setdefault((model, variant), []).append(
                    json.loads(proc.stdout.strip().splitlines()[-1]))
    def ratio(off, key, value):
        return f"{value / statistics.median(r[key] for r in off):.2f}" if off else "-"

    rows = []
    for (model, variant), runs in results.items():
        first = statistics.median(r["first"] for r in runs)
        second = statistics.median(r["second"] for r in runs)
        off = results.get((model, "off"))
        rows.append([model, f"{runs[0]['bytes'] / 2**20:.1f} MiB", variant,
                     f"{first:.3f}", ratio(off, "first", first), f"{second:.3f}",
                     ratio(off, "second", second)])
    print(table(["model", "params", "check", "1st load s", "x off", "2nd load s", "x off"],
                rows))
    print(f"medians of {args.repeat} fresh processes; load average {load_before} -> "
          f"{load_average()}")


if __name__ == "__main__":
    main()
