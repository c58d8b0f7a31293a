"""Checkpoint reading: vidax's lazy readers against safetensors and torch, time and memory.

Writes a synthetic DiT-shaped checkpoint of ``--size-gb`` in ``--dtype``, once as safetensors
and once with ``torch.save`` (zip), then runs each reader in a fresh subprocess on a warm page
cache (both files are read through once before every run) and prints a table:

* seconds (best and median of ``--repeat`` runs) and GB/s (from the best) to turn every tensor
  into a materialised numpy array (a real copy, so every byte is read);
* peak RssAnon and peak RssFile above the child's baseline, sampled from /proc/self/status every
  millisecond by a thread (and once more when the reader returns, while its arrays are still alive).
  RssAnon is private memory (the copies); RssFile counts mapped file pages (the kernel can drop
  them).

A reader is one function ``(files) -> what it keeps alive`` plus the modules it needs, registered in
READERS; adding one (e.g. translation through a mapper) is one more function.

    python benchmarks/bench_read.py --size-gb 0.5 --dtype bf16
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


class Files(NamedTuple):
    safetensors: str
    pth: str


class Reader(NamedTuple):
    load: Callable[[Files], object]  # returns whatever it keeps alive (the materialised arrays)
    modules: tuple[str, ...]  # imported before the clock starts
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


READERS: dict[str, Reader] = {
    "vidax-safetensors": Reader(
        vidax_safetensors, ("vidax.translator.io",), "open_checkpoint + np.array(ref.read())"
    ),
    "vidax-pth": Reader(vidax_pth, ("vidax.translator.io",), "the same on the torch.save zip"),
    "vidax-stream": Reader(
        vidax_stream, ("vidax.translator.io",), "safetensors, one tensor alive at a time"
    ),
    # ml_dtypes registers bfloat16 with numpy, which load_file needs for bf16 files
    "safetensors-numpy": Reader(safetensors_numpy, ("ml_dtypes", "safetensors.numpy"), "load_file"),
    "torch-mmap": Reader(
        torch_mmap, ("torch",), "torch.load(mmap=True, weights_only=True) + .numpy().copy()"
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
    start = time.perf_counter()
    kept = reader.load(files)
    seconds = time.perf_counter() - start
    sampler.stop()  # a last sample while ``kept`` is still alive
    del kept
    return {
        "seconds": seconds,
        "peak_anon_mib": (sampler.peak_anon - base_anon) / 1024,
        "peak_file_mib": (sampler.peak_file - base_file) / 1024,
    }


# ------------------------------------------------------------------------------------ the parent


def write_checkpoint(folder: pathlib.Path, size_gb: float, dtype: str) -> tuple[Files, int]:
    """DiT-like blocks (qkv, out, mlp, norm) up to ``size_gb``; reuses files already written."""
    import safetensors.torch
    import torch

    stem = folder / f"synthetic-{size_gb:g}gb-{dtype}"
    files = Files(f"{stem}.safetensors", f"{stem}.pt")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    width = 1536
    block = {
        "qkv.weight": (3 * width, width),
        "qkv.bias": (3 * width,),
        "out.weight": (width, width),
        "mlp.in.weight": (4 * width, width),
        "mlp.out.weight": (width, 4 * width),
        "norm.weight": (width,),
    }
    block_bytes = sum(int(np.prod(shape)) for shape in block.values()) * itemsize
    blocks = max(1, round(size_gb * 1e9 / block_bytes))
    total = blocks * block_bytes
    if not (os.path.exists(files.safetensors) and os.path.exists(files.pth)):
        folder.mkdir(parents=True, exist_ok=True)
        print(f"writing {blocks} blocks ({total / 1e9:.2f} GB, {dtype}) to {stem}.*", flush=True)
        generator = torch.Generator().manual_seed(0)
        state = {
            f"blocks.{i}.{name}": torch.randn(shape, generator=generator).to(torch_dtype)
            for i in range(blocks)
            for name, shape in block.items()
        }
        safetensors.torch.save_file(state, files.safetensors)
        torch.save(state, files.pth)
    return files, total


def warm(files: Files) -> None:
    """Read both files once so that every run starts from a warm page cache."""
    buffer = bytearray(1 << 24)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


ROW = "{:<18} {:>7} {:>8} {:>6} {:>11} {:>11}  {}"


def run_in_subprocess(name: str, files: Files) -> dict:
    """One measured run of reader ``name`` in a fresh interpreter, after warming the page cache."""
    warm(files)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--dir", type=pathlib.Path, default=REPO / "benchmarks/out/bench_read")
    parser.add_argument("--repeat", type=int, default=3, help="runs per reader (best and median)")
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, Files(*args.files))))
        return

    files, total = write_checkpoint(args.dir, args.size_gb, args.dtype)
    print(
        f"\n{total / 1e9:.2f} GB of {args.dtype} tensors, {os.cpu_count()} CPUs. Page cache warm "
        f"(each file read once before every run); each run in a fresh process, {args.repeat} runs "
        "per reader; memory = peak above the process's baseline, sampled from /proc/self/status "
        "every 1 ms; GB/s from the best run.\n"
    )
    print(ROW.format("reader", "best s", "median s", "GB/s", "RssAnon MiB", "RssFile MiB", "what"))
    for name in args.readers:
        results = [run_in_subprocess(name, files) for _ in range(args.repeat)]
        best = min(results, key=lambda r: r["seconds"])
        median = float(np.median([r["seconds"] for r in results]))
        gbps = total / 1e9 / best["seconds"]
        anon, file = best["peak_anon_mib"], best["peak_file_mib"]
        cells = (
            f"{best['seconds']:.2f}",
            f"{median:.2f}",
            f"{gbps:.2f}",
            f"{anon:.0f}",
            f"{file:.0f}",
        )
        print(ROW.format(name, *cells, READERS[name].description))


if __name__ == "__main__":
    main()
