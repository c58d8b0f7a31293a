"""Checkpoint reading and translation: vidax against safetensors and torch, time and memory.

Writes a synthetic checkpoint in the Wan2.1 DiT layout -- the real key names and shapes of
``wan2_1/t2v-1.3b__dit`` (from the packaged manifest), random values, ``--dtype`` fp32 or bf16,
all 30 blocks by default (5.68 GB fp32, 2.84 GB bf16) or the first ``--blocks N`` -- once as
safetensors and once with ``torch.save`` (zip), the same tensor bytes in both. Then it runs each
reader in a fresh subprocess and prints a table:

* seconds (best and median of ``--repeat`` rounds, each round running every reader once) to
  turn every tensor into a materialised numpy array (a real copy, so every byte is read), GB/s
  from the best run, and the throughput ratio against the two baselines
  (``safetensors.numpy.load_file``; ``torch.load(mmap=True)`` plus a ``.numpy()`` copy of each
  tensor): > 1 is faster than the baseline; and the least CPU time (user + system, the memory
  sampler's thread excluded) any run took, which other processes on a shared machine disturb
  far less than wall time;
* peak RssAnon and peak RssFile above the child's baseline, sampled from /proc/self/status every
  millisecond by a thread (and once more when the reader returns, while its arrays are still
  alive). RssAnon is private memory (the copies); RssFile counts pages of the memory-mapped file
  that the process has touched, which the kernel can drop at any time: not a cost.

``vidax-translate`` is the loading path without the device: open_checkpoint -> the Wan DiT
mapper's plan -> ``Target.materialize`` for every target (the Flax layout: Linear weights
transposed, the patch-embedding Conv3d channels-last, as views on the map) -> one C-order copy
of each, standing in for the one copy that placement on a device makes; one tensor alive at a
time.

Page cache: ``--cache warm`` (default) reads the reader's file through once before every run;
``--cache cold`` drops the page cache before every run (``sync; echo 3 >
/proc/sys/vm/drop_caches``, needs root; it drops every process's cached pages, not only ours).

A reader is one function ``(files) -> what it keeps alive`` plus the modules it needs and the
file it reads, registered in READERS.

    python benchmarks/bench_read.py --dtype bf16
    python benchmarks/bench_read.py --dtype fp32 --blocks 8 --cache cold --repeat 5
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
MANIFEST = "wan2_1/t2v-1.3b__dit"
BASELINES = ("safetensors-numpy", "torch-mmap")


class Files(NamedTuple):
    safetensors: str
    pth: str


class Reader(NamedTuple):
    load: Callable[[Files], object]  # returns whatever it keeps alive (the materialised arrays)
    modules: tuple[str, ...]  # imported before the clock starts
    file: str  # the Files field it reads: its page cache is warmed (or dropped) before each run
    description: str


# ------------------------------------------------------------------------------------------ readers


def _vidax_all(path: str) -> list[np.ndarray]:
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(path) as ckpt:
        return [np.array(ref.read()) for ref in ckpt.values()]


def vidax_safetensors(files: Files) -> object:
    return _vidax_all(files.safetensors)


def vidax_pth(files: Files) -> object:
    return _vidax_all(files.pth)


def vidax_stream(files: Files) -> object:
    """One tensor at a time, each dropped before the next: how sharded loading uses the reader."""
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(files.safetensors) as ckpt:
        for ref in ckpt.values():
            np.array(ref.read())
    return None


def _vidax_translate(path: str) -> None:
    """Read + translate through the Wan DiT mapper, one target alive at a time, each made
    contiguous as ``vidax.load`` does before placement (``converter.contiguous``: a tiled copy
    of transposed kernels). A view that is already contiguous (biases, norms) is then copied
    with ``np.array`` so its pages are really read, as placement would read them.
    """
    from vidax.translator import converter
    from vidax.translator.io import open_checkpoint
    from vidax.translator.mappings.wan2_1 import DIT

    with open_checkpoint(path) as ckpt:
        plan = DIT.plan(ckpt)
        for target in plan.targets.values():
            view = target.materialize(ckpt)
            out = converter.contiguous(view)
            if out is view:
                np.array(view)


def vidax_translate(files: Files) -> object:
    return _vidax_translate(files.safetensors)


def vidax_translate_pth(files: Files) -> object:
    return _vidax_translate(files.pth)


def safetensors_numpy(files: Files) -> object:
    from safetensors.numpy import load_file

    return load_file(files.safetensors)


def torch_mmap(files: Files) -> object:
    import torch

    state = torch.load(files.pth, mmap=True, weights_only=True)
    # numpy has no bfloat16: bf16 tensors are taken as their int16 bits (same bytes, same copy)
    return [
        (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().copy()
        for t in state.values()
    ]


_IO = ("vidax.translator.io",)
_TRANSLATE = ("vidax.translator.io", "vidax.translator.mappings.wan2_1")
READERS: dict[str, Reader] = {
    "vidax-safetensors": Reader(
        vidax_safetensors, _IO, "safetensors", "open_checkpoint + np.array(ref.read()), all kept"
    ),
    "vidax-pth": Reader(vidax_pth, _IO, "pth", "the same on the torch.save zip"),
    "vidax-stream": Reader(
        vidax_stream, _IO, "safetensors", "safetensors, one tensor alive at a time"
    ),
    "vidax-translate": Reader(
        vidax_translate,
        _TRANSLATE,
        "safetensors",
        "safetensors -> DIT.plan -> materialize -> C-order copy, one alive at a time",
    ),
    "vidax-translate-pth": Reader(
        vidax_translate_pth, _TRANSLATE, "pth", "the same on the torch.save zip"
    ),
    # ml_dtypes registers bfloat16 with numpy, which load_file needs for bf16 files
    "safetensors-numpy": Reader(
        safetensors_numpy, ("ml_dtypes", "safetensors.numpy"), "safetensors", "load_file"
    ),
    "torch-mmap": Reader(
        torch_mmap,
        ("torch",),
        "pth",
        "torch.load(mmap=True, weights_only=True) + .numpy().copy(), all kept",
    ),
}


# ----------------------------------------------------------------------------------- measurement


def _status_kib(*fields: str) -> list[int]:
    values = dict.fromkeys(fields, 0)
    with open("/proc/self/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in values:
                values[name] = int(rest.split()[0])
    return [values[name] for name in fields]


class PeakSampler:
    """Samples this process's RssAnon and RssFile every millisecond in a thread; keeps the peaks."""

    def __init__(self) -> None:
        self.peak_anon, self.peak_file = _status_kib("RssAnon", "RssFile")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        anon, file = _status_kib("RssAnon", "RssFile")
        self.peak_anon, self.peak_file = max(self.peak_anon, anon), max(self.peak_file, file)

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.sample()
        self.cpu_seconds = time.thread_time()  # this thread's own CPU, not the reader's

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def run_child(name: str, files: Files) -> dict:
    """In the subprocess: import the reader's modules, then time it and sample its memory."""
    reader = READERS[name]
    for module in reader.modules:
        importlib.import_module(module)
    base_anon, base_file = _status_kib("RssAnon", "RssFile")
    sampler = PeakSampler()
    start, start_cpu = time.perf_counter(), time.process_time()
    kept = reader.load(files)
    seconds = time.perf_counter() - start
    sampler.stop()  # a last sample while ``kept`` is still alive
    cpu = time.process_time() - start_cpu - sampler.cpu_seconds
    del kept
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_anon_mib": (sampler.peak_anon - base_anon) / 1024,
        "peak_file_mib": (sampler.peak_file - base_file) / 1024,
    }


# ------------------------------------------------------------------------------------ the parent


def wan_dit_shapes(blocks: int | None) -> dict[str, tuple[int, ...]]:
    """The manifest's keys and shapes: every non-block tensor, and blocks 0..blocks-1."""
    from vidax.manifests import get_manifest

    shapes = {}
    for key, spec in get_manifest(MANIFEST).tensors.items():
        if key.startswith("blocks.") and blocks is not None and int(key.split(".")[1]) >= blocks:
            continue
        shapes[key] = tuple(spec.shape)
    return shapes


def write_checkpoint(folder: pathlib.Path, blocks: int | None, dtype: str) -> tuple[Files, int]:
    """The Wan-DiT-layout checkpoint as safetensors and torch.save zip; reuses files already
    written."""
    import safetensors.torch
    import torch

    shapes = wan_dit_shapes(blocks)
    count = 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("blocks."))
    stem = folder / f"wan2_1-t2v-1.3b-dit-{count}blocks-{dtype}"
    files = Files(f"{stem}.safetensors", f"{stem}.pth")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    total = sum(int(np.prod(shape)) for shape in shapes.values()) * itemsize
    if not (os.path.exists(files.safetensors) and os.path.exists(files.pth)):
        folder.mkdir(parents=True, exist_ok=True)
        print(
            f"writing {len(shapes)} tensors ({count} blocks, {total / 1e9:.2f} GB, {dtype}) "
            f"to {stem}.*",
            flush=True,
        )
        generator = torch.Generator().manual_seed(0)
        state = {
            key: torch.randn(shape, generator=generator).to(torch_dtype)
            for key, shape in shapes.items()
        }
        safetensors.torch.save_file(state, files.safetensors)
        torch.save(state, files.pth)
        del state
    return files, total


def prepare_cache(path: str, cache: str) -> None:
    """warm: read the file through once; cold: write back and drop the whole page cache."""
    if cache == "cold":
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            sys.exit(f"--cache cold needs root to write /proc/sys/vm/drop_caches: {e}")
        return
    buffer = bytearray(1 << 24)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def run_in_subprocess(name: str, files: Files, cache: str) -> dict:
    """One measured run of reader ``name`` in a fresh interpreter."""
    prepare_cache(getattr(files, READERS[name].file), cache)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--files", *files],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    if done.returncode:
        sys.exit(f"reader {name!r} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def versions() -> str:
    import jax
    import safetensors
    import torch

    return (
        f"numpy {np.__version__}, torch {torch.__version__}, safetensors "
        f"{safetensors.__version__}, jax {jax.__version__}, Python {sys.version.split()[0]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument(
        "--blocks", type=int, default=None, help="the first N of the 30 blocks (default: all)"
    )
    parser.add_argument("--dir", type=pathlib.Path, default=REPO / "benchmarks/out/bench_read")
    parser.add_argument("--repeat", type=int, default=3, help="runs per reader (best and median)")
    parser.add_argument("--cache", choices=("warm", "cold"), default="warm")
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, Files(*args.files))))
        return

    files, total = write_checkpoint(args.dir, args.blocks, args.dtype)
    cache = {
        "warm": "warm (the reader's file read through once before every run)",
        "cold": "cold (sync + echo 3 > /proc/sys/vm/drop_caches before every run)",
    }[args.cache]
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(
        f"\n{MANIFEST} layout, {total / 1e9:.2f} GB of {args.dtype} tensors; "
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, {memory_gib:.1f} GiB RAM, load "
        f"average {os.getloadavg()[0]:.2f} at start; "
        f"{versions()}.\nPage cache {cache}; each run in a fresh process, {args.repeat} rounds of "
        "every reader; memory = peak above the process's baseline, sampled from /proc/self/status "
        "every 1 ms; GB/s from the best run; xNAME = this reader's throughput / NAME's; CPU s = "
        "the least user + system time of any run.\n"
    )
    # Rounds: each runs every reader once, so a burst of load from other processes on a shared
    # machine falls on all readers alike rather than on one reader's every run.
    runs: dict[str, list[dict]] = {name: [] for name in args.readers}
    for round_ in range(args.repeat):
        for name in args.readers:
            runs[name].append(run_in_subprocess(name, files, args.cache))
        seconds = ", ".join(f"{name} {runs[name][-1]['seconds']:.2f}" for name in args.readers)
        print(f"  round {round_ + 1} (s): {seconds}", flush=True)
    results = {
        name: (
            min(done, key=lambda r: r["seconds"]),
            float(np.median([r["seconds"] for r in done])),
            min(r["cpu_seconds"] for r in done),
        )
        for name, done in runs.items()
    }

    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    header = ["reader", "best s", "median s", "CPU s", "GB/s", *(f"x{b}" for b in BASELINES)]
    header += ["RssAnon MiB", "RssFile MiB", "what"]
    print("\n| " + " | ".join(header) + " |")
    print(
        "|"
        + "|".join("---" if i in (0, len(header) - 1) else "---:" for i in range(len(header)))
        + "|"
    )
    for name, (best, median, cpu) in results.items():
        ratios = [
            f"{results[b][0]['seconds'] / best['seconds']:.2f}" if b in results else "-"
            for b in BASELINES
        ]
        cells = [
            name,
            f"{best['seconds']:.2f}",
            f"{median:.2f}",
            f"{cpu:.2f}",
            f"{total / 1e9 / best['seconds']:.2f}",
            *ratios,
            f"{best['peak_anon_mib']:.0f}",
            f"{best['peak_file_mib']:.0f}",
            READERS[name].description,
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
