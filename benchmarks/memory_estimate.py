"""The memory estimate (:mod:`vidax.pipelines.memory`) against what a generation really takes
on the CPU: each size runs ``vidax generate``'s path (inspect, request, estimate, load,
sample, decode) on a demo's tiny release in a fresh process and reports its peak RSS.

A process's peak RSS also holds the Python/JAX runtime and XLA's compiled programs (a few
hundred MiB that the estimate does not count), so the comparison that matters is the growth
from the smallest size: ``measured - measured(smallest)`` against ``estimate -
estimate(smallest)``; the estimate is meant as an upper-ish bound of that growth. The peak
after sampling alone (before the decode) is reported too, against the DiT step's estimate.

    python benchmarks/memory_estimate.py [--families wan2_1 cogvideox] [--steps 2]

Measured 2026-12-01 on the 2-core CPU machine (jax 0.10.2, fp32, 2 steps; MiB; growth from
the 9-frame 64x48 run, whose peak RSS is ~450 MiB of runtime and tiny weights):

    family     frames size     growth measured  estimated  ratio | sampling: measured  DiT est.
    wan2_1       17   256x256        182.3        301.2    1.65  |               266.5       307.1
    wan2_1       17   512x512        573.4        702.7    1.23  |               170.7       349.6
    cogvideox     9   256x256        648.4        707.2    1.09  |                58.2        61.0
    cogvideox     9   512x512       2523.2       2933.0    1.16  |                92.3       108.4

The VAE decode dominates at these sizes for tiny models; XLA's materialised attention
(Wan 256x256: 1,280 tokens, under the blocked kernel's 2,048) sets the sampling peak there.
Before calibration (4 VAE feature copies, logits and probabilities only) the ratios were
0.50-0.93: the constants in :mod:`vidax.pipelines.memory` were raised to these measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: (frames, WxH) per family: the demo's size, then two that make activations visible.
SIZES = {"wan2_1": [(9, "64x48"), (17, "256x256"), (17, "512x512")],
         "cogvideox": [(9, "64x48"), (9, "256x256"), (9, "512x512")],
         "cosmos2_5": [(9, "64x48"), (17, "256x256"), (17, "512x512")]}

CHILD = r"""
import json, resource, sys
from vidax import demo, pipelines
model_type, folder, frames, size, steps = sys.argv[1:6]
mod = pipelines.family(model_type)
release = mod.inspect_folder(folder)
request = mod.make_request(release.task, release.variant, "a cat", frames=int(frames),
                           size=size, steps=int(steps))
estimate = mod.Pipeline.check_memory(release, request, precision="fp32")
pipe = mod.Pipeline.from_release(release, precision="fp32")
latents = pipe.sample(request=request, memory_check=False)
sampled = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
frames_out = pipe.decode(latents)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_rss": peak, "sampled_rss": sampled, "estimate": estimate.peak,
                  "weights": estimate.weight_bytes,
                  "phases": {k: p.bytes for k, p in estimate.phases.items()},
                  "largest": {k: p.largest for k, p in estimate.phases.items()},
                  "shape": list(frames_out.shape)}))
"""


def mib(n: float) -> str:
    return f"{n / 2**20:8.1f}"


def measure(model_type: str, steps: int, root: Path) -> list[dict]:
    from vidax import demo

    folder = root / model_type
    demo.family(model_type).write(folder)
    rows = []
    for frames, size in SIZES[model_type]:
        out = subprocess.run([sys.executable, "-c", CHILD, model_type, str(folder), str(frames),
                              size, str(steps)], capture_output=True, text=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"}, check=False)
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"frames": frames, "size": size, **row})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["wan2_1", "cogvideox"])
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in args.families:
            rows = measure(model_type, args.steps, Path(tmp))
            if not rows:
                continue
            base = rows[0]
            print(f"{model_type} (fp32, {args.steps} steps; MiB)")
            print("  frames size      peak RSS  estimate | growth: measured  estimated  ratio")
            for r in rows:
                grown, est = r["peak_rss"] - base["peak_rss"], r["estimate"] - base["estimate"]
                ratio = f"{est / grown:6.2f}" if grown > 2**20 else "     -"
                print(f"  {r['frames']:6d} {r['size']:9s} {mib(r['peak_rss'])} "
                      f"{mib(r['estimate'])} |         {mib(grown)}   {mib(est)} {ratio}")
                dit = r["phases"].get("DiT step", 0) - base["phases"].get("DiT step", 0)
                sampled = r["sampled_rss"] - base["sampled_rss"]
                print(f"      sampling alone: peak RSS {mib(r['sampled_rss']).strip()}, growth "
                      f"{mib(sampled).strip()} measured vs {mib(dit).strip()} estimated "
                      f"(the DiT step)")
                print("      " + "; ".join(f"{k} {mib(v).strip()} (largest {r['largest'][k][0]})"
                                           for k, v in r["phases"].items()))


if __name__ == "__main__":
    main()
