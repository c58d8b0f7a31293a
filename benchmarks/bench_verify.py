"""Verification speed: ``vidax.loading.verify_manifest`` on every packaged release manifest.

For each manifest whose (family, variant, component, layout) the registry resolves, a fresh
subprocess imports ``vidax.loading`` (jax, flax: timed apart, the "import s" column), loads the
manifest, then times

* cold: the first ``verify_manifest`` call -- importing the model's module, building its abstract
  tree with ``nnx.eval_shape`` at the release config, planning the manifest's names and shapes
  through the mapper and matching the two;
* warm: the best of ``--warm`` further calls in the same process, where the abstract tree comes
  from ``vidax.translator.verify``'s per-(model, config) cache: planning and matching only.

Manifests the registry cannot resolve yet (families not implemented) are listed as skipped with
the registry's reason. Issue 2's target: a 14B manifest verifies (cold) in under 10 s.

    python benchmarks/bench_verify.py
    python benchmarks/bench_verify.py --only wan2_1/t2v-14b__dit wan2_2/t2v-a14b__dit
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_child(name: str, warm: int) -> dict:
    """In the subprocess: import, then verify ``name`` once cold and ``warm`` times warm."""
    start = time.perf_counter()
    from vidax.loading import verify_manifest
    from vidax.manifests import get_manifest

    imported = time.perf_counter()
    manifest = get_manifest(name)
    start_cold = time.perf_counter()
    report = verify_manifest(manifest)
    cold = time.perf_counter() - start_cold
    warm_times = []
    for _ in range(warm):
        start_warm = time.perf_counter()
        verify_manifest(manifest)
        warm_times.append(time.perf_counter() - start_warm)
    return {
        "import": imported - start,
        "cold": cold,
        "warm": min(warm_times) if warm_times else None,
        "tensors": report.num_tensors,
        "params": report.num_params,
        "ok": report.ok,
        "headline": report.headline(),
    }


def resolvable() -> tuple[list[str], dict[str, list[str]]]:
    """The manifests the registry resolves, and the others grouped by the registry's reason."""
    from vidax import manifests, registry
    from vidax.errors import RegistryError

    names, skipped = [], {}
    for m in manifests.all_manifests():
        try:
            registry.resolve(m.family, m.variant, m.component, m.layout)
        except RegistryError as e:
            reason = str(e).split(";")[0]  # drop the list of what is registered
            skipped.setdefault(reason, []).append(m.name)
            continue
        names.append(m.name)
    return names, skipped


def measure(name: str, warm: int) -> dict:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--warm", str(warm)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def versions() -> str:
    import flax
    import jax
    import numpy as np

    return (
        f"jax {jax.__version__}, flax {flax.__version__}, numpy {np.__version__}, "
        f"Python {sys.version.split()[0]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=3, help="warm calls per manifest (best)")
    parser.add_argument("--only", nargs="+", help="these manifests only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.warm)))
        return

    names, skipped = resolvable()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            sys.exit(f"not resolvable (or not a packaged manifest): {', '.join(unknown)}")
        names = args.only
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, {memory_gib:.1f} GiB RAM, load "
        f"average {os.getloadavg()[0]:.2f} at start; {versions()}.\n"
        f"{len(names)} manifests resolvable, {sum(map(len, skipped.values()))} skipped. Each in a "
        f"fresh process; cold = first verify_manifest call (abstract tree built), warm = best of "
        f"{args.warm} further calls (tree cached); imports (jax, flax, vidax.loading) timed "
        "apart.\n"
    )
    print("| manifest | tensors | params | import s | cold s | warm s | result |")
    print("|---|---:|---:|---:|---:|---:|---|")
    slowest = (0.0, "")
    for name in names:
        r = measure(name, args.warm)
        if "error" in r:
            print(f"| {name} | | | | | | error: {r['error']} |", flush=True)
            continue
        slowest = max(slowest, (r["cold"], name))
        result = "ok" if r["ok"] else f"MISMATCH ({r['headline']})"
        warm = f"{r['warm']:.3f}" if r["warm"] is not None else "-"
        cells = [
            name,
            str(r["tensors"]),
            f"{r['params']:,}",
            f"{r['import']:.2f}",
            f"{r['cold']:.2f}",
            warm,
            result,
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(
        f"\nload average {os.getloadavg()[0]:.2f} at the end; slowest cold: {slowest[1]} "
        f"{slowest[0]:.2f} s"
    )
    if skipped:
        print("\nskipped (the registry cannot resolve them yet):")
        for reason, group in skipped.items():
            print(f"- {reason}: {', '.join(group)}")


if __name__ == "__main__":
    main()
