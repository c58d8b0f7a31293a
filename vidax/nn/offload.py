"""Weights kept in host memory and streamed onto the device a block ahead of their use.

A parameter placed in host memory (JAX's ``pinned_host`` memory kind, :func:`to_host`) keeps
its sharding; its abstract value says where it lies (``float32<host>[...]``), so model code
traced over it knows, at trace time, what must be fetched: an XLA op cannot read operands
in host memory, and a ``jax.device_put(x, jax.memory.Space.Device)`` inside the jitted
program is the transfer (an async copy XLA schedules like any op).

Three uses:

* :func:`stream` -- the block loop of every DiT (:func:`vidax.nn.step_cache.run_blocks`
  calls it when a block's weights lie in host memory): block ``i + ahead``'s weights are
  copied in while block ``i`` computes. Each copy is tied to the carry entering block ``i``
  by an ``optimization_barrier``, so XLA cannot start it earlier: at most ``ahead + 1``
  blocks' weights are on the device at once (the one computing and those arriving), plus
  one whose buffers are being released, whatever order the scheduler would prefer.
  Without host-resident weights nothing changes: the plain loop runs.
* :func:`fetch` -- one module (or tuple of modules and arrays) to the device inside a trace,
  for model code that reads a block's weights outside the loop (LTX-Video's TeaCache signal
  reads its first block's modulation; Cosmos3's prompt pass runs its layers once).
* :func:`to_host` / :func:`to_device` -- eager placement of a module's or a state's arrays
  into host or device memory, their shardings kept (the pipelines' ``--offload model``:
  a component copied in for its phase, its device copy dropped after).

The values are never changed: a streamed step computes what the resident one does, op for
op (tests/pipelines/test_offload_families.py: equal bit for bit on every family's DiT).
JAX's CPU backend has host memory kinds too, so placement and results are tested here; its
compiled programs have no transfers (host and device are one RAM), so the transfers and the
device peak are measured on an accelerator (``benchmarks/device_check.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from flax import nnx

HOST = jax.memory.Space.Host
DEVICE = jax.memory.Space.Device
#: Blocks whose weights are copied in ahead of the one computing (:func:`stream`).
AHEAD = 1


def on_host(x) -> bool:
    """Whether the array (concrete or traced) lies in host memory."""
    try:
        return jax.typeof(x).memory_space == HOST
    except (TypeError, AttributeError):
        return False


def held_on_host(x) -> bool:
    """Whether any array of ``x`` (a module, a tuple of modules and arrays, a pytree) lies
    in host memory."""
    return any(on_host(leaf) for leaf in _flatten(x)[0])


def block_lists(model: nnx.Module) -> tuple[str, ...]:
    """The names of ``model``'s top-level lists of modules: a DiT's transformer blocks, the
    weights ``--offload block`` keeps in host memory (what :func:`stream` copies in)."""
    return tuple(name for name, value in vars(model).items()
                 if isinstance(value, (nnx.List, list)) and len(value) > 1
                 and all(isinstance(m, nnx.Module) for m in value))


def in_blocks(lists: Sequence[str]) -> Callable[[str], bool]:
    """``name -> bool``: whether a parameter's Flax path (``blocks.3.ffn.0.kernel``) lies in
    one of ``lists``."""
    lists = frozenset(lists)
    return lambda name: name.split(".", 1)[0] in lists


def to_host(tree):
    """``tree``'s arrays copied into host memory (shardings kept); a module's as a new
    module, the given one untouched."""
    return _map(lambda a: jax.device_put(a, HOST), tree)


def to_device(tree):
    """``tree``'s arrays in device memory (shardings kept); what is there already stays."""
    return _map(lambda a: jax.device_put(a, DEVICE) if on_host(a) else a, tree)


def fetch(x):
    """``x`` (a module, a tuple of modules and arrays, an array) with every host-resident
    array copied to the device: inside a trace the transfer, outside it an eager copy."""
    leaves, rebuild = _flatten(x)
    if not any(on_host(a) for a in leaves):
        return x
    return rebuild([jax.device_put(a, DEVICE) if on_host(a) else a for a in leaves])


def stream(calls: Sequence[tuple[object, Callable]], carry, *, ahead: int = AHEAD):
    """``carry`` through ``call(block, carry)`` for each ``(block, call)`` (the loop of
    :func:`vidax.nn.step_cache.run_blocks`), each block's host-resident weights copied in
    ``ahead`` blocks before its turn (the module docstring)."""
    n = len(calls)
    arriving = {i: fetch(calls[i][0]) for i in range(min(ahead, n))}
    for i in range(n):
        later = i + ahead
        if later < n:  # its copy may start once this block's input exists
            leaves, rebuild = _flatten(calls[later][0])
            held = [j for j, a in enumerate(leaves) if on_host(a)]
            tied, carry = jax.lax.optimization_barrier(([leaves[j] for j in held], carry))
            for j, a in zip(held, tied):
                leaves[j] = jax.device_put(a, DEVICE)
            arriving[later] = rebuild(leaves)
        carry = calls[i][1](arriving.pop(i), carry)
    return carry


def run(blocks: Sequence, carry, call: Callable):
    """``carry`` through ``call(block, carry)`` for each of ``blocks``: :func:`stream` where
    a block's weights lie in host memory, else the plain loop (a block loop outside a
    sampling step's cache, e.g. Cosmos3's prompt pass)."""
    calls = [(block, call) for block in blocks]
    if any(held_on_host(block) for block in blocks):
        return stream(calls, carry)
    for block in blocks:
        carry = call(block, carry)
    return carry


# ------------------------------------------------------------------------------- helpers
def _flatten(x) -> tuple[list, Callable]:
    """``(arrays, rebuild)`` of ``x``: a module by its state (``nnx.split``), a tuple or list
    element by element, an array as itself, anything else (a block's index) as a constant."""
    if isinstance(x, nnx.Module):
        graphdef, state = nnx.split(x)
        leaves, treedef = jax.tree.flatten(state)
        return leaves, lambda new: nnx.merge(graphdef, jax.tree.unflatten(treedef, new))
    if isinstance(x, (tuple, list)):
        parts = [_flatten(e) for e in x]
        sizes = [len(p[0]) for p in parts]

        def rebuild(new):
            out, at = [], 0
            for (_, again), size in zip(parts, sizes):
                out.append(again(new[at:at + size]))
                at += size
            return type(x)(out)

        return [a for p in parts for a in p[0]], rebuild
    if isinstance(x, jax.Array):
        return [x], lambda new: new[0]
    return [], lambda new: x


def _map(fn, tree):
    leaves, rebuild = _flatten(tree) if isinstance(tree, (nnx.Module, tuple, list)) else (
        None, None)
    if leaves is not None:
        return rebuild([fn(a) for a in leaves])
    return jax.tree.map(fn, tree)
