"""The measured process of the host-memory test (test_host_memory.py); not a test module.

``python memory_worker.py CHECKPOINT CONFIG_JSON MESH_SPEC DTYPE``: loads the Wan2.1 DiT onto an
8-device mesh (``MESH_SPEC`` ``one-device``: onto the first device, no mesh) while a thread
samples the process's anonymous memory (``RssAnon`` of /proc/self/status; memory-mapped
checkpoint pages are file-backed and not counted) every ~0.2 ms, and prints one JSON line: the
baseline before the load, the peak during it, the value after it, and the bytes of the
parameters now resident on the (host-memory) CPU devices.
"""

import json
import os
import sys
import threading
import time

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"


def rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.samples, self.running = rss_anon(), 0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_anon())
            self.samples += 1
            time.sleep(0.0002)


def main(checkpoint: str, config_json: str, mesh_spec: str, dtype: str) -> None:
    import jax
    import numpy as np

    import vidax
    from vidax import sharding
    from vidax.models.wan2_1.dit import WanDiTConfig
    from vidax.translator.verify import flat_params

    cfg = WanDiTConfig.from_dict(json.loads(config_json))
    mesh = None if mesh_spec == "one-device" else sharding.make_mesh(mesh_spec)
    jax.device_put(np.zeros(8), jax.devices()[0]).block_until_ready()   # runtime up
    sys.setswitchinterval(1e-4)   # let the sampler in between the loader's Python steps
    baseline = rss_anon()
    sampler = Sampler()
    sampler.start()
    model = vidax.load("wan2_1", "dit", checkpoint, config=cfg, mesh=mesh,
                       dtype=None if dtype == "stored" else dtype)
    sampler.running = False
    sampler.join()
    params = flat_params(model)
    resident = sum(shard.data.nbytes for a in params.values() for shard in a.addressable_shards)
    print(json.dumps({"baseline": baseline, "peak": max(sampler.peak, rss_anon()),
                      "after": rss_anon(), "resident": resident,
                      "largest": max(a.nbytes for a in params.values()),
                      "samples": sampler.samples}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
