"""Loading LTX-2.x's files: the host memory ``vidax.load`` adds above what it loads, against the
raw placement of the same stored tensors, each reader in a fresh process, side by side.

Two synthetic files with the released names, shapes and dtypes (the packaged manifests),
random values, written once and reused:

* ``audio`` -- LTX-2.5's ``vae/ltx-2.5-audio-vae-bf16.safetensors`` at full shape: the audio VAE
  (``ltx2_5/2.5__audio_vae``, 102 tensors) and the vocoder with its bandwidth extension
  (``ltx2_5/2.5__vocoder``, 1227 tensors) in one file, bfloat16 (shape-null entries none);
* ``dit`` -- LTX-2.5's transformer at full width (4096 video / 2048 audio, every table and
  connector) but ``--blocks`` of its 48 blocks (``ltx2_5/2.5-22b-distilled__dit``'s keys of
  those blocks; bfloat16 bulk, the float32 ``*scale_shift_table*`` tensors as released).

Readers: ``place-stored`` (every stored tensor read from the map and ``jax.device_put`` as it
is: the floor of any load) and ``vidax-load`` (``vidax.load`` of each component the file holds:
verify 1:1, translate, place; the audio file is loaded twice, ``audio_vae`` then ``vocoder``,
both kept). Columns: seconds, peak RssAnon above the start (sampled every millisecond),
the payload (the loaded arrays' bytes) and the overhead = peak - payload, also in units of the
largest tensor. An overhead near zero means no second copy of any weight.

    python benchmarks/bench_load_ltx2.py --model audio
    python benchmarks/bench_load_ltx2.py --model dit --blocks 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import PeakAnonSampler, load_average, machine_line, table  # noqa: E402

#: --model -> (manifests, the components vidax loads from the file)
MODELS = {"audio": (("ltx2_5/2.5__audio_vae", "ltx2_5/2.5__vocoder"), ("audio_vae", "vocoder")),
          "dit": (("ltx2_5/2.5-22b-distilled__dit",), ("dit",))}
TAGS = {"float32": "F32", "bfloat16": "BF16"}


def _shapes(model: str, blocks: int) -> dict[str, tuple[tuple[int, ...], str]]:
    from vidax.manifests import get_manifest

    out = {}
    for name in MODELS[model][0]:
        for key, spec in get_manifest(name).tensors.items():
            found = re.search(r"transformer_blocks\.(\d+)\.", key)
            if model == "dit" and found and int(found.group(1)) >= blocks:
                continue
            dtype = spec.dtype or "bfloat16"
            out[key] = (tuple(spec.shape), dtype)
    return out


def write_file(folder: pathlib.Path, model: str, blocks: int) -> tuple[pathlib.Path, int, int]:
    from vidax.dtypes import parse

    shapes = _shapes(model, blocks)
    path = folder / (f"ltx2.5-{model}" + (f"-{blocks}blocks" if model == "dit" else "")
                     + ".safetensors")
    sizes = {k: math.prod(s) * parse(d).itemsize for k, (s, d) in shapes.items()}
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        header, offset = {}, 0
        for key, (shape, dtype) in shapes.items():
            header[key] = {"dtype": TAGS[dtype], "shape": list(shape),
                           "data_offsets": [offset, offset + sizes[key]]}
            offset += sizes[key]
        if model == "dit":
            from vidax.manifests import get_manifest

            config = dict(get_manifest(MODELS[model][0][0]).config["instantiated_with"],
                          num_layers=blocks)
            header["__metadata__"] = {"config": json.dumps({"transformer": config})}
        else:
            header["__metadata__"] = {"config": json.dumps(_audio_file_config())}
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        rng = np.random.default_rng(0)
        with open(f"{path}.tmp", "wb") as f:
            f.write(len(blob).to_bytes(8, "little") + blob)
            for shape, dtype in shapes.values():
                values = rng.standard_normal(shape, np.float32) * 0.02
                f.write(values.astype(parse(dtype)).tobytes())
        os.replace(f"{path}.tmp", path)
    return path, sum(sizes.values()), max(sizes.values())


def _audio_file_config() -> dict:
    """The 2.5 audio file's metadata config (its ``audio_vae`` and ``vocoder`` sections)."""
    from vidax.manifests import get_manifest

    return get_manifest("ltx2_5/2.5__audio_vae").config["safetensors_metadata"][
        "config_json_example"]


def _bytes(arrays) -> int:
    return sum(s.data.nbytes for a in arrays for s in a.addressable_shards)


def place_stored(path: str, model: str):
    from concurrent.futures import ThreadPoolExecutor

    import jax

    from vidax.loading import PLACEMENT_THREADS
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(path) as ckpt, ThreadPoolExecutor(PLACEMENT_THREADS) as pool:
        kept = list(pool.map(lambda ref: jax.device_put(ref.read()), ckpt.values()))
    jax.block_until_ready(kept)
    return kept, _bytes(kept)


def vidax_load(path: str, model: str):
    import jax
    from flax import nnx

    from vidax.loading import load

    kept = [load("ltx2_5", component, path) for component in MODELS[model][1]]
    leaves = [x for m in kept for x in jax.tree.leaves(nnx.state(m))]
    jax.block_until_ready(leaves)
    return kept, _bytes(leaves)


READERS = {"place-stored": place_stored, "vidax-load": vidax_load}


def run_child(name: str, path: str, model: str) -> dict:
    import jax

    import vidax.loading  # noqa: F401  (imports before the clock)
    import vidax.models.ltx2_5.dit  # noqa: F401
    import vidax.models.ltx2_audio.audio_vae  # noqa: F401
    import vidax.models.ltx2_audio.vocoder  # noqa: F401

    jax.device_put(np.zeros(8)).block_until_ready()
    with PeakAnonSampler(interval=0.001) as memory:
        base = memory.peak_kib
        start = time.perf_counter()
        kept, payload = READERS[name](path, model)
        seconds = time.perf_counter() - start
    del kept
    return {"seconds": seconds, "peak_anon": (memory.peak_kib - base) * 1024, "payload": payload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(MODELS), default="audio")
    parser.add_argument("--blocks", type=int, default=2, help="dit: blocks of the 48 kept")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", type=pathlib.Path, default=REPO / "benchmarks/out/bench_load")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(*args.child)))
        return
    path, total, largest = write_file(args.dir, args.model, args.blocks)
    print(f"\n{path.name}: {total / 1e9:.2f} GB, largest tensor {largest / 2**20:.0f} MiB; "
          f"{time.strftime('%Y-%m-%d')}; {machine_line()}; load average {load_average()}",
          flush=True)
    runs = {name: [] for name in READERS}
    for _ in range(args.repeat):
        for name in READERS:
            done = subprocess.run([sys.executable, __file__, "--child", name, str(path),
                                   args.model], capture_output=True, text=True, check=False,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode:
                sys.exit(f"reader {name} failed:\n{done.stderr}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for name, done in runs.items():
        best = min(done, key=lambda r: r["seconds"])
        overhead = max(r["peak_anon"] - r["payload"] for r in done)
        rows.append([name, f"{best['seconds']:.2f}",
                     f"{max(r['peak_anon'] for r in done) / 2**20:.0f}",
                     f"{best['payload'] / 2**20:.0f}", f"{overhead / 2**20:.0f}",
                     f"{overhead / largest:.2f}"])
    print(table(["reader", "best s", "peak RssAnon MiB", "payload MiB", "overhead MiB",
                 "overhead / largest"], rows))


if __name__ == "__main__":
    main()
