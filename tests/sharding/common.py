"""Shared pieces of the sharding tests (see conftest.py): the small Wan2.1 DiT config, its
authors'-layout file, inputs and the jitted forward."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests.parity import randomize
from tests.reference import wan22
from vidax import sharding
from vidax.models.wan2_1.dit import WanDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")

BATCH = 2
LATENT = (3, 8, 12)            # T, H, W: 3 x 4 x 6 = 72 tokens, divisible by 8
TEXT_LEN = 12


def small_config(**changes) -> WanDiTConfig:
    sizes = dict(dim=256, ffn_dim=1024, num_heads=8, text_dim=64)
    return dataclasses.replace(WanDiTConfig.tiny(), **(sizes | changes))


def write_authors_dit(cfg: WanDiTConfig, path, seed: int = 0):
    import safetensors.torch

    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed)
    safetensors.torch.save_file(model.state_dict(), path)
    return path


def dit_inputs(batch: int = BATCH, latent=LATENT, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, *latent, 16)).astype(np.float32),
            "t": np.linspace(937.0, 121.5, batch).astype(np.float32),
            "context": rng.standard_normal((batch, TEXT_LEN, 64)).astype(np.float32)}


@nnx.jit
def run_dit(model, x, t, context):
    return model(x, t, context)


# ----------------------------------------------------------------------------- placement
# Bound when this module is imported: a negative control that monkeypatches
# ``vidax.sharding.param_shardings`` (what the loader calls) leaves what is expected alone.
_param_shardings = sharding.param_shardings

#: The collectives of a compiled (SPMD-partitioned) HLO module, by their HLO op names.
COLLECTIVES = ("all-to-all", "all-gather", "all-reduce", "reduce-scatter", "collective-permute")
_OP = re.compile(r"=\s*(?P<type>.*?)\s(?P<op>" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
_SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_WEIGHT_AXES = ("fsdp", "tp")


def flat_arrays(model_or_state) -> dict[str, jax.Array]:
    """``'blocks.0.ffn.fc1.kernel' -> array`` of a module's parameters, an ``nnx.State`` or a
    ``path -> array`` mapping."""
    if isinstance(model_or_state, nnx.Module):
        model_or_state = nnx.state(model_or_state, nnx.Param)
    if isinstance(model_or_state, nnx.State):
        return {".".join(map(str, path)): leaf.get_value() if hasattr(leaf, "get_value")
                else leaf for path, leaf in nnx.to_flat_state(model_or_state)}
    return dict(model_or_state)


def _axes(spec: P) -> list[str]:
    """The mesh axes a PartitionSpec names, in order."""
    return [a for dim in spec if dim is not None
            for a in (dim if isinstance(dim, tuple) else (dim,))]


def _trim(spec: P) -> P:
    dims = list(spec)
    while dims and dims[-1] is None:
        dims.pop()
    return P(*dims)


def assert_placed(model_or_state, mesh, rules: sharding.PartitionRules, *,
                  min_split: float | None = None) -> dict:
    """Every parameter sits where ``rules`` put it on ``mesh``, and each device holds its share.

    1. Every parameter is a ``jax.Array`` with a ``NamedSharding`` on ``mesh`` whose
       ``PartitionSpec`` is the one ``vidax.sharding.param_shardings(..., mesh, rules)``
       gives for its path, shape and dtype (the rules' own computation, the 64 KiB threshold
       included).
    2. Each device of the mesh holds exactly ``sum(nbytes / (product of the sizes of the
       axes in the parameter's spec))`` bytes of addressable shards (the arrays are really
       split, one block per device); so the parameters split over every weight axis of the
       mesh (``fsdp`` and ``tp``, where larger than 1) take total / (fsdp x tp) of each
       device.
    3. With ``min_split``, on a mesh with a weight axis: those fully split parameters are at
       least ``min_split`` of the model's bytes (a model too small to shard, or rules that
       replicate everything, fail it).

    Returns the figures: ``total`` bytes, ``per_device`` (the most a device holds), ``ideal``
    (total / (fsdp x tp)), ``split`` (how many parameters are split at all), ``count``,
    ``fully_split`` (the fraction of the bytes split over every weight axis).
    """
    arrays = flat_arrays(model_or_state)
    want = _param_shardings({k: jax.ShapeDtypeStruct(a.shape, a.dtype)
                             for k, a in arrays.items()}, mesh, rules)
    wrong = []
    for name, array in arrays.items():
        placed = getattr(array, "sharding", None)
        if not isinstance(placed, NamedSharding) or placed.mesh != mesh:
            wrong.append(f"{name}: {placed!r} is not a NamedSharding on the mesh")
        elif _trim(placed.spec) != want[name].spec:
            wrong.append(f"{name}: {placed.spec}, the rules say {want[name].spec}")
    assert not wrong, (f"{rules.name} on {dict(mesh.shape)}: {len(wrong)} of {len(arrays)} "
                       "parameters misplaced: " + "; ".join(wrong[:6]))

    sizes = dict(mesh.shape)
    weight_axes = {a for a in _WEIGHT_AXES if sizes[a] > 1}
    devices = list(mesh.devices.flat)
    expected = dict.fromkeys(devices, 0)
    actual = dict.fromkeys(devices, 0)
    split = full_bytes = 0
    for name, array in arrays.items():
        axes = _axes(want[name].spec)
        blocks = int(np.prod([sizes[a] for a in axes]))
        split += blocks > 1
        if weight_axes and weight_axes <= set(axes):
            full_bytes += array.nbytes
        for device in devices:
            expected[device] += array.nbytes // blocks
        for shard in array.addressable_shards:
            actual[shard.device] += shard.data.nbytes
    assert actual == expected, (f"{rules.name}: bytes per device {sorted(actual.values())}, "
                                f"the specs say {sorted(expected.values())}")
    total = sum(a.nbytes for a in arrays.values())
    ideal = total / int(np.prod([sizes[a] for a in _WEIGHT_AXES]))
    figures = dict(total=total, ideal=ideal, per_device=max(actual.values()), split=split,
                   count=len(arrays), fully_split=full_bytes / max(total, 1))
    print(f"{rules.name} on {sharding.format_mesh_spec(sizes)}: {split} of {len(arrays)} "
          f"parameters split, {100 * figures['fully_split']:.1f}% of the {total} bytes over "
          f"{'+'.join(sorted(weight_axes)) or 'no weight axis'}; at most "
          f"{figures['per_device']} bytes a device = "
          f"{figures['per_device'] / ideal:.3f} x total/(fsdp x tp)")
    if min_split is not None and weight_axes:
        assert figures["fully_split"] >= min_split, (
            f"{rules.name}: {100 * figures['fully_split']:.1f}% of the bytes are split over "
            f"{'+'.join(sorted(weight_axes))}, under {100 * min_split:.0f}%: the weights are "
            "not split over the mesh")
    return figures


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective of a compiled module: its op, the mesh axes its device groups span
    (sorted by :data:`vidax.sharding.AXES`; ``None`` without a mesh), its result shapes, their
    element types (``f32``, ``pred``, ...) and the jax op it came from (the HLO's ``op_name``
    metadata)."""

    op: str
    axes: tuple[str, ...] | None
    shapes: tuple[tuple[int, ...], ...]
    source: str
    types: tuple[str, ...] = ()


def _ints(text: str | None) -> list[int]:
    return [int(n) for n in text.split(",") if n] if text else []


def _iota(dims: list[int], perm: list[int]) -> np.ndarray:
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    return ids.transpose(perm) if perm else ids


def _device_groups(line: str) -> list[list[int]] | None:
    """The device groups of one collective's HLO line, as indices into the device
    assignment (``mesh.devices.flat``), from any of the three ways XLA writes them:
    ``replica_groups={{0,1},{2,3}}``, the iota form ``replica_groups=[4,2]<=[2,4]T(1,0)``,
    and the mesh form ``replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}`` (with an
    optional ``device_ids=([dims]T(perm))``); a ``collective-permute``'s
    ``source_target_pairs`` count as groups of two."""
    if m := re.search(r"replica_groups=\{((?:\{[0-9,]*\},?)*)\}", line):
        return [_ints(g) for g in re.findall(r"\{([0-9,]*)\}", m[1])]
    if m := re.search(r"replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", line):
        return _iota(_ints(m[2]), _ints(m[3])).reshape(_ints(m[1])).tolist()
    if m := re.search(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\(\[([0-9,]+)\]"
                      r"(?:T\(([0-9,]+)\))?\))? \{([^}]*)\}", line):
        named = re.findall(r"'([^']+)'=([0-9]+)", m[1])
        names, sizes = [a for a, _ in named], [int(n) for _, n in named]
        ids = (_iota(_ints(m[2]), _ints(m[3])) if m[2] else np.arange(int(np.prod(sizes))))
        ids = ids.reshape(sizes)
        vary = [names.index(a) for a in re.findall(r"'([^']+)'", m[4])]
        keep = [d for d in range(len(names)) if d not in vary]
        return ids.transpose(keep + vary).reshape(
            -1, int(np.prod([sizes[d] for d in vary]))).tolist()
    if m := re.search(r"source_target_pairs=\{((?:\{[0-9,]*\},?)*)\}", line):
        return [_ints(g) for g in re.findall(r"\{([0-9,]*)\}", m[1])]
    return None


def parse_collectives(compiled_text: str, mesh=None) -> list[Collective]:
    """Every collective of a compiled module's text (``jit(f).lower(...).compile()
    .as_text()``; an async ``-start`` counts once, its ``-done`` not). With the ``mesh`` it was
    compiled for, each one's ``axes``: the mesh axes along which the devices of a group
    differ (an all-to-all of Ulysses attention spans ``("sp",)``, an FSDP weight gather
    ``("fsdp",)``, a Megatron all-reduce ``("tp",)``)."""
    out = []
    shape = tuple(mesh.devices.shape) if mesh is not None else None
    for line in compiled_text.splitlines():
        if not (m := _OP.search(line)):
            continue
        axes = None
        if mesh is not None:
            groups = _device_groups(line)
            assert groups is not None, f"cannot read the device groups of: {line[:300]}"
            groups = groups or [list(range(mesh.devices.size))]      # {}: every device
            spanned = set()
            for group in groups:
                coords = np.array([np.unravel_index(i, shape) for i in group])
                spanned |= {d for d in range(len(shape)) if len(set(coords[:, d])) > 1}
            axes = tuple(mesh.axis_names[d] for d in sorted(spanned))
        source = re.search(r'op_name="([^"]*)"', line)
        results = _SHAPE.findall(m["type"])
        out.append(Collective(m["op"], axes, tuple(tuple(_ints(dims)) for _, dims in results),
                              source[1] if source else "", tuple(t for t, _ in results)))
    return out


def collectives(compiled_text: str, mesh=None) -> Counter:
    """How many of each collective (:data:`COLLECTIVES`) a compiled module's text has: keyed
    by op name, or with ``mesh`` by ``(op, axes)`` (see :func:`parse_collectives`), e.g.
    ``collectives(text, mesh)[("all-to-all", ("sp",))]``."""
    return Counter(c.op if mesh is None else (c.op, c.axes)
                   for c in parse_collectives(compiled_text, mesh))


def collective_shapes(compiled_text: str, op: str, mesh=None,
                      axes: tuple[str, ...] | None = None) -> set[tuple[int, ...]]:
    """The result shapes of every ``op`` in a compiled module's text (a combined collective's
    tuple gives each of its shapes); with ``mesh`` and ``axes``, of those spanning exactly
    those axes."""
    return {s for c in parse_collectives(compiled_text, mesh)
            if c.op == op and (axes is None or c.axes == tuple(axes)) for s in c.shapes}


def gathered_weight_shapes(model_or_state, mesh=None,
                           rules: sharding.PartitionRules | None = None) -> set[tuple[int, ...]]:
    """The shapes an FSDP all-gather of each fsdp-split parameter gives: its block with the
    ``fsdp`` split undone and every other split (``tp``) kept. The splits are the arrays' own,
    or with ``mesh`` and ``rules`` the ones the rules give (what a replicated model's program
    is checked against in a negative control)."""
    arrays = flat_arrays(model_or_state)
    if rules is not None:
        specs = {k: v.spec for k, v in _param_shardings(
            {k: jax.ShapeDtypeStruct(a.shape, a.dtype) for k, a in arrays.items()},
            mesh, rules).items()}
    else:
        specs = {k: a.sharding.spec for k, a in arrays.items()}
        mesh = next(iter(arrays.values())).sharding.mesh
    sizes = dict(mesh.shape)
    out = set()
    for name, array in arrays.items():
        spec = specs[name]
        if "fsdp" not in _axes(spec) or sizes["fsdp"] == 1:
            continue
        shape = list(array.shape)
        for d, dim in enumerate(spec):
            for a in (() if dim is None else dim if isinstance(dim, tuple) else (dim,)):
                if a != "fsdp":
                    shape[d] //= sizes[a]
        out.add(tuple(shape))
    return out
