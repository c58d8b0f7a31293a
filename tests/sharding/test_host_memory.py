"""Host memory of streamed sharded loading.

A ~308 MB float32 Wan2.1 DiT checkpoint (authors' key layout; dim 1024, ffn 4096, 4 blocks;
the largest tensor, ``time_projection.1.weight``, is 25.2 MB) is loaded onto 8 CPU devices
in a fresh subprocess (memory_worker.py) that samples its anonymous memory (RssAnon: the
memory-mapped checkpoint's pages are file-backed and not counted) throughout the load.

The CPU devices live in host memory, so the parameters' own bytes stay anonymous after the
load; the *overhead* is what the load needs beyond them:
``peak - baseline - resident parameter bytes``, on one device and on 8, in the stored dtype
and cast to bfloat16 on the host.

Bounds, in units of the largest stored tensor: 1.2 in the stored dtype (issue #4's target):
blocks are strided views of the map that the transfer copies, so no host copy is made at all
(measured 0.22-0.32: the allocator's and runtime's own churn). 2.5 with a cast: the cast
copy of the one parameter holding the host-copy slot (half the fp32 tensor, in bf16) plus
what glibc keeps of freed copies: its malloc raises its mmap threshold after a large free and
then serves such sizes from arenas that it does not give back at once (measured 1.0-1.9 on
this machine when run alone, once just above 2 under the full suite's load; 0.73 on one
device with ``MALLOC_MMAP_THRESHOLD_=1048576``). Reading whole
files instead would cost the checkpoint's size (12x).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.reference import wan22
from tests.sharding.common import small_config

WORKER = Path(__file__).with_name("memory_worker.py")
ROOT = Path(__file__).resolve().parents[2]
#: x the largest stored tensor: (with a cast, in the stored dtype)
OVERHEAD_BOUND = {True: 1.2, False: 2.5}


def _write_random_safetensors(shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    """float32 random tensors, written one at a time (the test process never holds the file)."""
    header, offset = {}, 0
    for key, shape in shapes.items():
        size = int(np.prod(shape)) * 4
        header[key] = {"dtype": "F32", "shape": list(shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for shape in shapes.values():
            f.write((0.02 * rng.standard_normal(shape, dtype=np.float32)).tobytes())


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
    import torch

    cfg = small_config(dim=1024, ffn_dim=4096, num_heads=8, text_dim=1024, num_layers=4)
    with torch.device("meta"):     # the authors' key set and shapes, no memory
        shapes = {k: tuple(v.shape) for k, v in
                  wan22.model_module().WanModel(**dataclasses.asdict(cfg)).state_dict().items()}
    path = tmp_path_factory.mktemp("memory") / "diffusion_pytorch_model.safetensors"
    _write_random_safetensors(shapes, path)
    largest = max(int(np.prod(s)) * 4 for s in shapes.values())
    return cfg, path, largest


# One device as stored, and a mesh with a cast, in the fast lane; the other two in CI.
@pytest.mark.parametrize("mesh,dtype", [("one-device", "stored"),
                                        pytest.param("fsdp=8", "stored", marks=pytest.mark.slow),
                                        pytest.param("one-device", "bfloat16",
                                                     marks=pytest.mark.slow),
                                        ("fsdp=4,tp=2", "bfloat16")])
def test_streamed_loading_overhead_is_a_small_multiple_of_the_largest_tensor(
        big_checkpoint, mesh, dtype, record_property):
    cfg, path, largest = big_checkpoint
    result = subprocess.run(
        [sys.executable, str(WORKER), str(path), json.dumps(dataclasses.asdict(cfg)), mesh, dtype],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    m = json.loads(result.stdout.strip().splitlines()[-1])
    overhead = m["peak"] - m["baseline"] - m["resident"]
    mb = 1e6
    print(f"{mesh} {dtype}: checkpoint {path.stat().st_size / mb:.0f} MB, largest tensor "
          f"{largest / mb:.1f} MB; RssAnon baseline {m['baseline'] / mb:.0f} MB, peak "
          f"{m['peak'] / mb:.0f} MB, after {m['after'] / mb:.0f} MB; parameters resident "
          f"{m['resident'] / mb:.0f} MB; overhead {overhead / mb:.1f} MB = "
          f"{overhead / largest:.2f} x the largest tensor ({m['samples']} samples)")
    record_property(f"memory_{mesh}_{dtype}", dict(m, overhead=overhead, largest_stored=largest))
    assert m["samples"] > 100
    assert overhead <= OVERHEAD_BOUND[dtype == "stored"] * largest
