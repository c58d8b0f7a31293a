"""Weights in host memory (:mod:`vidax.nn.offload`) on JAX's CPU backend, which has the
``pinned_host`` memory kind: placement keeps shardings, a traced program sees where each
weight lies, and a block loop over host-resident blocks (:func:`offload.stream`) computes
what the resident loop does, bit for bit, with each block's copy tied to the carry by an
optimization barrier (the bound on how many blocks are on the device at once).

The CPU's compiled programs show no transfer (host and device are one RAM): the transfers
and the device peak are measured on an accelerator (benchmarks/device_check.py)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax.nn import offload
from vidax.nn.layers import KeyGen, Linear
from vidax.nn.step_cache import StepCache, active, run_blocks
from vidax.sharding import make_mesh

from tests import host_memory
from tests.host_memory import apart, run_apart


class _Block(nnx.Module):
    def __init__(self, dim: int, keys: KeyGen):
        self.fc1 = Linear(dim, 2 * dim, keys=keys)
        self.fc2 = Linear(2 * dim, dim, keys=keys)

    def __call__(self, x):
        return x + self.fc2(jax.nn.gelu(self.fc1(x)))


class _Net(nnx.Module):
    """A DiT-like stack: an embedding outside the blocks, the blocks through run_blocks."""

    def __init__(self, dim: int = 16, depth: int = 5, seed: int = 0):
        keys = KeyGen(seed)
        self.proj_in = Linear(dim, dim, keys=keys)
        self.blocks = nnx.List([_Block(dim, keys) for _ in range(depth)])

    def __call__(self, x):
        h = self.proj_in(x)
        return run_blocks(h, (self.blocks, lambda block, h: block(h)))


def _blocks_on_host(net: _Net) -> _Net:
    graphdef, state = nnx.split(net)
    host = offload.in_blocks(offload.block_lists(net))
    flat = [(path, var.replace(offload.to_host(var.get_value())) if host(
        ".".join(map(str, path))) else var) for path, var in nnx.to_flat_state(state)]
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


@jax.jit
def _forward(graphdef_state, x):
    return nnx.merge(*graphdef_state)(x)


def _run(net, x, cache=None):
    with active(cache, None, jnp.int32(0)):
        return _forward(nnx.split(net), x)


@apart
def test_block_lists_and_placement():
    net = _Net()
    assert offload.block_lists(net) == ("blocks",)
    moved = _blocks_on_host(net)
    assert offload.held_on_host(moved.blocks[3]) and not offload.held_on_host(moved.proj_in)
    assert offload.held_on_host(moved) and not offload.held_on_host(net)
    back = offload.to_device(moved.blocks[3])
    assert not offload.held_on_host(back)
    assert np.array_equal(back.fc1.kernel[...], net.blocks[3].fc1.kernel[...])
    same = net.blocks[0]
    assert offload.fetch(same) is same   # nothing in host memory: untouched


@apart
def test_streamed_blocks_compute_the_resident_loop_bit_for_bit():
    net = _Net()
    x = jax.random.normal(jax.random.key(1), (2, 7, 16))
    plain = _run(net, x)
    streamed = _run(_blocks_on_host(net), x)
    assert np.array_equal(np.asarray(plain), np.asarray(streamed))
    # a step cache's branches stream too (first-block: block 0, then the rest under cond)
    cache = StepCache("first-block", threshold=0.0).for_steps(4)
    assert np.array_equal(np.asarray(_run(net, x, cache)),
                          np.asarray(_run(_blocks_on_host(net), x, cache)))
    # negative control: another network's weights streamed give other numbers
    assert not np.allclose(np.asarray(plain), np.asarray(_run(_blocks_on_host(_Net(seed=1)), x)))


@apart
def test_each_copy_is_tied_to_the_carry():
    """``ahead`` blocks are copied before the loop; each later one waits on the carry that
    enters the block before it: one optimization barrier per later block."""
    net = _blocks_on_host(_Net(depth=5))
    x = jnp.ones((1, 3, 16))
    text = jax.jit(lambda s, x: nnx.merge(*s)(x)).lower(nnx.split(net), x).as_text()
    assert text.count("optimization_barrier") == 5 - offload.AHEAD
    resident = jax.jit(lambda s, x: nnx.merge(*s)(x)).lower(nnx.split(_Net()), x).as_text()
    assert "optimization_barrier" not in resident


@apart
def test_a_host_weight_outside_the_loop_is_refused_by_jax():
    """What :func:`offload.fetch` is for: an op on a host-resident weight does not compile."""
    net = _blocks_on_host(_Net())
    with pytest.raises(ValueError, match="memory_space"):
        jax.jit(lambda s, x: nnx.merge(*s).blocks[0](x))(nnx.split(net), jnp.ones((1, 16)))
    out = jax.jit(lambda s, x: offload.fetch(nnx.merge(*s).blocks[0])(x))(
        nnx.split(net), jnp.ones((1, 16)))
    assert out.shape == (1, 16)


@apart
def test_shardings_are_kept_on_a_mesh():
    mesh = make_mesh("fsdp=2", devices=jax.devices()[:2])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("fsdp", None))
    w = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), sharding)
    host = offload.to_host(w)
    assert offload.on_host(host) and host.sharding.memory_kind == "pinned_host"
    assert host.sharding.with_memory_kind("device").is_equivalent_to(sharding, 2)
    back = offload.to_device(host)
    assert not offload.on_host(back) and back.sharding.is_equivalent_to(sharding, 2)
    assert np.array_equal(np.asarray(back), np.asarray(w))


@pytest.mark.skipif(os.environ.get(host_memory.ENV) == "1", reason="the process it starts")
def test_host_memory_tests_run_in_their_own_process():
    """The host-memory tests of the whole suite (tests/host_memory.py), in one process."""
    out = run_apart()
    assert " passed" in out and " failed" not in out, out
