"""Multi-host loading: two CPU processes joined with ``jax.distributed`` on 127.0.0.1, 4
devices each, one global ``fsdp=8`` mesh. ``jax.make_array_from_callback`` asks each process
only for the blocks of its own devices, so each reads exactly half of the sharded bytes plus
the replicated (small) tensors -- counted by the Checkpoint's ``bytes_read`` -- and the blocks of
both together are the arrays one process loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from math import prod
from pathlib import Path

import jax
import numpy as np

import vidax
from vidax import sharding
from vidax.models.wan2_1.dit import WanDiT
from vidax.translator.verify import abstract_params, flat_params

WORKER = Path(__file__).with_name("multihost_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_read_only_their_own_blocks(dit_case, tmp_path):
    cfg, path, _, _ = dit_case
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outs = [tmp_path / f"process{i}.npz" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(i), str(port), str(path),
                               json.dumps(dataclasses.asdict(cfg)), str(outs[i])],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=150)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]

    # What the rules shard and replicate on this mesh (the same on 8 local devices).
    abstract = abstract_params(WanDiT, cfg)
    specs = sharding.param_shardings(abstract, sharding.make_mesh("fsdp=8"),
                                     sharding.rules_for(WanDiT))
    nbytes = {k: prod(v.shape) * np.dtype(v.dtype).itemsize for k, v in abstract.items()}
    total = sum(nbytes.values())
    replicated = sum(nbytes[k] for k, s in specs.items() if s.is_fully_replicated)
    expected_read = (total - replicated) // 2 + replicated

    single = {k: np.asarray(v) for k, v in flat_params(
        vidax.load("wan2_1", "dit", path, config=cfg)).items()}
    assembled = {k: np.full(v.shape, np.nan, v.dtype) for k, v in single.items()}
    for i, out in enumerate(outs):
        with np.load(out) as data:
            read = int(data["__bytes_read__"])
            assert (int(data["__devices__"]), int(data["__global_devices__"])) == (4, 8)
            print(f"process {i}: read {read} of {total} checkpoint bytes "
                  f"({100 * read / total:.1f}%; expected (sharded / 2) + replicated = "
                  f"{expected_read})")
            assert read == expected_read
            for key in data.files:
                if key.startswith("__"):
                    continue
                name, bounds = key.split("|")
                index = tuple(slice(a, b) for a, b in json.loads(bounds))
                assembled[name][index] = data[key]
    for name, want in single.items():
        np.testing.assert_array_equal(assembled[name], want, err_msg=name)
    assert jax.device_count() == 8   # this process: untouched by the workers
