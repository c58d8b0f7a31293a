"""One process of the two-process loading test (test_multihost.py); not a test module.

``python multihost_worker.py PROCESS_ID PORT CHECKPOINT CONFIG_JSON OUT_NPZ``: joins the other
process on 127.0.0.1:PORT with ``jax.distributed``, loads the Wan2.1 DiT onto the global
``fsdp=8`` mesh (4 CPU devices per process), and writes every block its devices hold, with the
checkpoint bytes it read, to OUT_NPZ.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import numpy as np  # noqa: E402


def main(process_id: int, port: int, checkpoint: str, config_json: str, out: str) -> None:
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import vidax
    from vidax import sharding
    from vidax.models.wan2_1.dit import WanDiTConfig
    from vidax.translator.io import open_checkpoint
    from vidax.translator.verify import flat_params

    cfg = WanDiTConfig.from_dict(json.loads(config_json))
    mesh = sharding.make_mesh("fsdp=8")
    with open_checkpoint(checkpoint) as ckpt:
        model = vidax.load("wan2_1", "dit", ckpt, config=cfg, mesh=mesh)
        bytes_read = ckpt.bytes_read
    blocks = {}
    for name, array in flat_params(model).items():
        for shard in array.addressable_shards:
            bounds = [s.indices(n)[:2] for s, n in zip(shard.index, array.shape)]
            key = f"{name}|{json.dumps(bounds)}"
            blocks[key] = np.asarray(shard.data)
    np.savez(out, __bytes_read__=np.int64(bytes_read),
             __devices__=np.int64(len(jax.local_devices())),
             __global_devices__=np.int64(len(jax.devices())), **blocks)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
