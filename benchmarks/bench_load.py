"""Loading a DiT checkpoint: ``vidax.load`` (read + translate + place) against the raw read of
the same bytes and against ``torch.load`` + the authors' ``load_state_dict``; time and
anonymous memory, every reader in a fresh process, side by side in one run.

The checkpoint is synthetic: every key and shape of a released Wan DiT (from the packaged
manifest: ``--model 1.3b`` is ``wan2_1/t2v-1.3b__dit``, 825 tensors, 1.42 G parameters;
``--model 5b`` is ``wan2_2/ti2v-5b__dit``, 825 tensors, 5.00 G parameters), random normal
values in ``--dtype`` fp32 or bf16, written once as safetensors and once in the ``torch.save``
zip format (``vidax.translator.io.save_pth``, which ``torch.load`` reads bit-identically), the
same bytes in both. Files already written are reused.

The readers (each ``files -> (what it keeps alive, payload bytes)``):

* ``safetensors-mmap`` -- the raw read: ``safetensors.safe_open(framework="numpy")`` and
  ``get_tensor`` of every key (safetensors maps the file and copies each tensor out), all kept.
* ``vidax-place-stored`` -- the floor of any load to a device: every stored tensor read from
  the map and placed (``jax.device_put``) as it is, untranslated, with ``vidax.load``'s
  placement threads.
* ``vidax-load`` -- ``vidax.load`` itself on the safetensors file, one device: verify 1:1
  against the abstract model, translate (Linear weights ``[out, in] -> [in, out]``, the patch
  Conv3d channels-last) and place.
* ``vidax-load-1thread`` -- the same with ``PLACEMENT_THREADS = 1``.
* ``vidax-load-pth`` -- ``vidax.load`` on the ``torch.save`` file.
* ``vidax-load-fsdp8`` -- ``vidax.load(mesh=make_mesh("fsdp=8"))`` on 8 simulated CPU devices:
  every parameter streamed into its shards (``make_array_from_callback``).
* ``torch-load-state-dict`` -- the authors' way: ``torch.load(mmap=True, weights_only=True)``,
  the authors' ``WanModel`` (``tests/reference/wan22.py``) built on the meta device in the
  file's dtype and given CPU memory (``to_empty``), then ``load_state_dict`` (one copy of
  every tensor into the module's parameters).

Columns: seconds (best and median of ``--repeat`` rounds; a round runs every reader once, so
load from other processes on a shared machine falls on all alike), GB/s of checkpoint bytes
from the best run, the throughput ratio against ``safetensors-mmap`` and against
``torch-load-state-dict`` (> 1: faster), the peak RssAnon above the process's start (sampled
every millisecond from ``/proc/self/status``), the payload (the loaded parameters' own bytes:
on a CPU device they live in anonymous memory too) and the overhead = peak - payload, also
in units of the largest tensor. Memory-mapped file pages (RssFile) are the page cache, not a
cost, and are not counted.

Page cache: ``--cache warm`` (default) reads the reader's file through once before each run;
``--cache cold`` drops the whole page cache first (``echo 3 > /proc/sys/vm/drop_caches``,
root only).

    python benchmarks/bench_load.py --model 1.3b --dtype bf16
    python benchmarks/bench_load.py --model 5b --dtype bf16 --repeat 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import PeakAnonSampler, load_average, machine_line, table  # noqa: E402

#: --model -> (manifest, vidax model type, variant)
MODELS = {
    "1.3b": ("wan2_1/t2v-1.3b__dit", "wan2_1", "t2v-1.3b"),
    "5b": ("wan2_2/ti2v-5b__dit", "wan2_2", "ti2v-5b"),
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
BASELINES = ("safetensors-mmap", "torch-load-state-dict")


class Files(NamedTuple):
    safetensors: str
    pth: str
    model: str  # a MODELS key
    dtype: str  # a DTYPES key


class Reader(NamedTuple):
    load: Callable[[Files], tuple[object, int]]
    file: str  # the Files field it reads: its page cache is warmed (or dropped) before a run
    env: dict[str, str]  # extra environment of its process


# ------------------------------------------------------------------------------------ readers


def safetensors_mmap(files: Files) -> tuple[object, int]:
    from safetensors import safe_open

    with safe_open(files.safetensors, framework="numpy") as f:
        kept = [f.get_tensor(key) for key in f.keys()]
    return kept, sum(a.nbytes for a in kept)


def vidax_place_stored(files: Files) -> tuple[object, int]:
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from vidax.loading import PLACEMENT_THREADS
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(files.safetensors) as ckpt, ThreadPoolExecutor(PLACEMENT_THREADS) as pool:
        kept = list(pool.map(lambda ref: jax.device_put(ref.read()), ckpt.values()))
    jax.block_until_ready(kept)
    return kept, _device_bytes(kept)


def _vidax_load(path: str, files: Files, **kwargs) -> tuple[object, int]:
    import jax
    from flax import nnx

    from vidax.loading import load

    _, model_type, variant = MODELS[files.model]
    model = load(model_type, "dit", path, variant=variant, **kwargs)
    leaves = jax.tree.leaves(nnx.state(model))
    jax.block_until_ready(leaves)
    return model, _device_bytes(leaves)


def _device_bytes(arrays) -> int:
    """Bytes the arrays hold on all devices (replicated shards counted once per device)."""
    return sum(shard.data.nbytes for a in arrays for shard in a.addressable_shards)


def vidax_load(files: Files) -> tuple[object, int]:
    return _vidax_load(files.safetensors, files)


def vidax_load_1thread(files: Files) -> tuple[object, int]:
    from vidax import loading

    loading.PLACEMENT_THREADS = 1
    return _vidax_load(files.safetensors, files)


def vidax_load_pth(files: Files) -> tuple[object, int]:
    return _vidax_load(files.pth, files)


def vidax_load_fsdp8(files: Files) -> tuple[object, int]:
    from vidax.sharding import make_mesh

    return _vidax_load(files.safetensors, files, mesh=make_mesh("fsdp=8"))


def torch_load_state_dict(files: Files) -> tuple[object, int]:
    import torch

    from tests.reference import wan22
    from vidax.loading import config

    _, model_type, variant = MODELS[files.model]
    kwargs = dataclasses.asdict(config(model_type, "dit", variant))
    with torch.device("meta"):
        model = wan22.model_module().WanModel(**kwargs)
    model = model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[files.dtype])
    model = model.to_empty(device="cpu")
    state = torch.load(files.pth, mmap=True, weights_only=True)
    model.load_state_dict(state)
    del state
    return model, sum(t.nbytes for t in model.state_dict().values())


_ONE = {}
_EIGHT = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
READERS: dict[str, Reader] = {
    "safetensors-mmap": Reader(safetensors_mmap, "safetensors", _ONE),
    "vidax-place-stored": Reader(vidax_place_stored, "safetensors", _ONE),
    "vidax-load": Reader(vidax_load, "safetensors", _ONE),
    "vidax-load-1thread": Reader(vidax_load_1thread, "safetensors", _ONE),
    "vidax-load-pth": Reader(vidax_load_pth, "pth", _ONE),
    "vidax-load-fsdp8": Reader(vidax_load_fsdp8, "safetensors", _EIGHT),
    "torch-load-state-dict": Reader(torch_load_state_dict, "pth", _ONE),
}
#: imported before the clock starts, in every child alike
WARM_IMPORTS = ("jax", "flax.nnx", "torch", "safetensors", "vidax.loading", "vidax.sharding",
                "vidax.models.wan2_1.dit", "vidax.translator.mappings.wan2_1",
                "vidax.translator.mappings.wan2_2", "tests.reference.wan22")


def run_child(name: str, files: Files) -> dict:
    """In the subprocess: imports first, then one timed, memory-sampled load."""
    import importlib

    import jax

    for module in WARM_IMPORTS:
        importlib.import_module(module)
    for device in jax.devices():  # the runtime up on every device before the clock
        jax.device_put(np.zeros(8), device).block_until_ready()
    if name == "torch-load-state-dict":
        from tests.reference import wan22

        wan22.model_module()
    with PeakAnonSampler(interval=0.001) as memory:
        base = memory.peak_kib
        start = time.perf_counter()
        kept, payload = READERS[name].load(files)
        seconds = time.perf_counter() - start
    del kept
    return {"seconds": seconds, "peak_anon": (memory.peak_kib - base) * 1024, "payload": payload}


# ------------------------------------------------------------------------------------ the parent


def write_checkpoint(folder: pathlib.Path, model: str, dtype: str) -> tuple[Files, int, int]:
    """The synthetic checkpoint in both formats, written tensor by tensor (never whole in
    memory: the torch.save file is written from the safetensors file's memory map).
    Returns the files, the total bytes and the largest tensor's bytes."""
    from vidax.manifests import get_manifest
    from vidax.translator.converter import as_dtype
    from vidax.translator.io import open_checkpoint, save_pth

    manifest = get_manifest(MODELS[model][0])
    np_dtype = as_dtype(DTYPES[dtype])
    shapes = {key: tuple(spec.shape) for key, spec in manifest.tensors.items()}
    sizes = {key: math.prod(shape) * np_dtype.itemsize for key, shape in shapes.items()}
    stem = folder / f"{manifest.name.replace('/', '-')}-{dtype}"
    files = Files(f"{stem}.safetensors", f"{stem}.pth", model, dtype)
    if not os.path.exists(files.safetensors):
        folder.mkdir(parents=True, exist_ok=True)
        print(f"writing {len(shapes)} tensors ({sum(sizes.values()) / 1e9:.2f} GB) to "
              f"{files.safetensors}", flush=True)
        header, offset = {}, 0
        for key, shape in shapes.items():
            tag = {"float32": "F32", "bfloat16": "BF16"}[DTYPES[dtype]]
            header[key] = {"dtype": tag, "shape": list(shape),
                           "data_offsets": [offset, offset + sizes[key]]}
            offset += sizes[key]
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        rng = np.random.default_rng(0)
        with open(files.safetensors + ".tmp", "wb") as f:
            f.write(len(blob).to_bytes(8, "little") + blob)
            for shape in shapes.values():
                f.write(rng.standard_normal(shape, np.float32).astype(np_dtype).tobytes())
        os.replace(files.safetensors + ".tmp", files.safetensors)
    if not os.path.exists(files.pth):
        print(f"writing {files.pth}", flush=True)
        with open_checkpoint(files.safetensors) as ckpt:
            save_pth(files.pth, {key: ref.read() for key, ref in ckpt.items()})
    return files, sum(sizes.values()), max(sizes.values())


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
    reader = READERS[name]
    prepare_cache(getattr(files, reader.file), cache)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--files", *files],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", **reader.env})
    if done.returncode:
        sys.exit(f"reader {name!r} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(MODELS), default="1.3b")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    parser.add_argument("--dir", type=pathlib.Path, default=REPO / "benchmarks/out/bench_load")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (best and median)")
    parser.add_argument("--cache", choices=("warm", "cold"), default="warm")
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, Files(*args.files))))
        return

    files, total, largest = write_checkpoint(args.dir, args.model, args.dtype)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"\n{MODELS[args.model][0]} shapes, {total / 1e9:.2f} GB of {args.dtype} (largest "
          f"tensor {largest / 2**20:.0f} MiB); {time.strftime('%Y-%m-%d')}, "
          f"{memory_gib:.1f} GiB RAM; {machine_line()}.\nPage cache {args.cache}; "
          f"{args.repeat} rounds; load average {load_average()} at the start.", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in args.readers}
    for round_ in range(args.repeat):
        for name in args.readers:
            runs[name].append(run_in_subprocess(name, files, args.cache))
        print(f"  round {round_ + 1} (s): " + ", ".join(
            f"{name} {runs[name][-1]['seconds']:.2f}" for name in args.readers), flush=True)
    print(f"load average {load_average()} at the end\n")

    best = {name: min(done, key=lambda r: r["seconds"]) for name, done in runs.items()}
    rows = []
    for name, done in runs.items():
        b = best[name]
        overhead = max(r["peak_anon"] - r["payload"] for r in done)
        ratios = [f"{best[base]['seconds'] / b['seconds']:.2f}" if base in best else "-"
                  for base in BASELINES]
        rows.append([name, f"{b['seconds']:.2f}",
                     f"{np.median([r['seconds'] for r in done]):.2f}",
                     f"{total / 1e9 / b['seconds']:.2f}", *ratios,
                     f"{max(r['peak_anon'] for r in done) / 2**20:.0f}",
                     f"{b['payload'] / 2**20:.0f}", f"{overhead / 2**20:.0f}",
                     f"{overhead / largest:.2f}"])
    print(table(["reader", "best s", "median s", "GB/s", *(f"x {b}" for b in BASELINES),
                 "peak RssAnon MiB", "payload MiB", "overhead MiB", "overhead / largest"],
                rows))


if __name__ == "__main__":
    main()
