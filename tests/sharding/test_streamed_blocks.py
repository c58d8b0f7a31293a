"""Streamed sharded placement (``vidax.loading.place``) through every step a mapper can plan.

Each device's block is read from the memory map on its own and pushed back through the
target's steps (layout permutation, split offset, merge parts, dequantize scale, reshape
fallback, host cast). Every target below is placed under several shardings of a 2 x 4 mesh and
must equal ``Target.materialize`` (the whole-tensor path) bit for bit; the bytes read must be
the target's stored bytes once, not once per device.
"""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vidax.loading import place
from vidax.translator.io import open_checkpoint
from vidax.translator.mapping import Dequantize, Mapper, Merge, Split, Transform

MAPPER = Mapper(
    name="test.streamed",
    rules=(
        Split(r"fused\.qkv\.(weight|bias)", (r"attn.q.\1", r"attn.k.\1", r"attn.v.\1")),
        Merge(r"parts\.(?P<part>x|y)\.weight", r"merged.weight", ("x", "y")),
        Transform(r"\.gamma$", leaf="scale", reshape=lambda shape: (shape[0],)),
        Dequantize(r"q8\.weight", r"q8.scale", dtype="float32"),
    ),
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    rng = np.random.default_rng(0)
    f32 = np.float32
    tensors = {
        "fused.qkv.weight": rng.standard_normal((24, 16)).astype(f32),   # -> 3 x kernel [16, 8]
        "fused.qkv.bias": rng.standard_normal(24).astype(f32),
        "parts.x.weight": rng.standard_normal((6, 16)).astype(f32),      # merged: kernel [16, 16]
        "parts.y.weight": rng.standard_normal((10, 16)).astype(f32),
        "norm.gamma": rng.standard_normal((16, 1, 1, 1)).astype(f32),    # reshaped to [16]
        "conv.weight": rng.standard_normal((8, 4, 2, 4, 4)).astype(f32),  # -> [2, 4, 4, 4, 8]
        "q8.weight": rng.standard_normal((16, 8)).astype(ml_dtypes.float8_e4m3fn),
        "q8.scale": rng.uniform(0.5, 2, 16).astype(f32),
        "bf.weight": rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16),
        "table": rng.standard_normal((8, 4, 16)).astype(f32),           # layout none
    }
    path = tmp_path_factory.mktemp("streamed") / "blocks.safetensors"
    safetensors.numpy.save_file(tensors, path)
    return path


SPECS = [P(), P("x"), P(None, "y"), P("y", "x"), P(("x", "y"))]


def _fits(spec: P, shape, mesh) -> bool:
    for dim, axes in enumerate(spec):
        if axes is None:
            continue
        if dim >= len(shape):
            return False
        n = np.prod([mesh.shape[a] for a in (axes if isinstance(axes, tuple) else (axes,))])
        if shape[dim] % n:
            return False
    return True


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_every_block_equals_the_whole_tensor_path(stored, dtype):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with open_checkpoint(stored) as ckpt:
        plan = MAPPER.plan(ckpt)
        assert set(plan.targets) == {
            "attn.q.kernel", "attn.k.kernel", "attn.v.kernel", "attn.q.bias", "attn.k.bias",
            "attn.v.bias", "merged.kernel", "norm.scale", "conv.kernel", "q8.kernel",
            "bf.kernel", "table"}
        checked = 0
        for path, target in plan.targets.items():
            want = target.materialize(ckpt, dtype=dtype)
            stored_bytes = sum(ckpt[s.key].read_slice(s.index(len(ckpt[s.key].shape)))
                               .nbytes if s.axis is not None else ckpt[s.key].nbytes
                               for s in target.sources)
            for spec in SPECS:
                if not _fits(spec, target.shape, mesh):
                    continue
                before = ckpt.bytes_read
                array = place(target, ckpt, NamedSharding(mesh, spec), dtype=dtype)
                read = ckpt.bytes_read - before
                assert array.dtype == want.dtype, (path, spec)
                np.testing.assert_array_equal(np.asarray(array), want, err_msg=f"{path} {spec}")
                for shard in array.addressable_shards:
                    np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])
                if target.reshape is None and not target.scaled:
                    # Each distinct block read once: the stored bytes, whatever the replication.
                    assert read == stored_bytes, (path, spec, read, stored_bytes)
                checked += 1
        assert checked >= 30
