"""The Wan2.1 DiT on meshes of 8 simulated CPU devices: same output as on one device, every
parameter placed by the rules and each device holding only its share
(``tests.sharding.common.assert_placed``), the collectives the design expects (attributed to
mesh axes by their device groups), clear SP errors; and the negative controls: with the mesh
or the rules ignored by the loader, the placement check fails, and with the weights
replicated the compiled program loses its weight gathers and tp all-reduces.

Bound: float32, matmul precision "highest": max |sharded - single device| <= 1e-4 x std(single
device output) -- the DESIGN.md §6 parity bound. Sharding only reorders float32 sums (partial
products all-reduced over tp/fsdp, the softmax of a head on another device); measured on this
machine: ~1e-6 to 6e-6 x std on every mesh below. A wrong exchange (heads mixed up by the
all-to-all, a kernel split on the wrong axis) is O(1) x std.
"""

from __future__ import annotations

import re
from collections import Counter

import jax
import numpy as np
import pytest
import safetensors.numpy
from jax.sharding import PartitionSpec as P

import vidax
from tests.parity import AbstractModel
from tests.sharding.common import (assert_placed, collective_shapes, dit_inputs,
                                   gathered_weight_shapes, parse_collectives, run_dit,
                                   small_config)
from vidax import sharding
from vidax.errors import VidaxError
from vidax.models.wan2_1.dit import WanDiT
from vidax.translator.verify import flat_params

REL_TOL = 1e-4
#: The least share of the bytes split over every weight axis of the mesh (fsdp and tp): the
#: time projection, the embeddings and the head (23% of the bytes) have no tp rule and the
#: biases and norms (0.6%) are under the threshold: measured 99.4% on fsdp meshes, 76.2% on
#: meshes with tp.
MIN_SPLIT = 0.7

# name -> (mesh spec, devices used)
MESHES = {
    "dp": ("dp=2", 2),
    "fsdp": ("fsdp=8", 8),
    "tp": ("tp=8,fsdp=1", 8),
    "sp": ("sp=8,fsdp=1", 8),
    "dp+fsdp+sp": ("dp=2,fsdp=2,sp=2", 8),
    "fsdp+sp+tp": ("fsdp=2,sp=2,tp=2", 8),
}


def _mesh(name):
    spec, n = MESHES[name]
    return sharding.make_mesh(spec, devices=jax.devices()[:n])


def _run_on(mesh, model, inputs):
    with sharding.use_mesh(mesh):
        return run_dit(model, **{k: sharding.shard_batch(v, mesh) for k, v in inputs.items()})


# The two mixed meshes in the fast lane; each axis alone in CI (``-m slow``).
@pytest.mark.parametrize("name", [n if "+" in n else pytest.param(n, marks=pytest.mark.slow)
                                  for n in MESHES])
def test_sharded_output_equals_single_device(dit_case, name, record_property):
    cfg, path, inputs, ref = dit_case
    mesh = _mesh(name)
    model = vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh)
    out = _run_on(mesh, model, inputs)
    diff = float(np.abs(np.asarray(out) - ref).max())
    std = float(ref.std())
    print(f"{name} ({MESHES[name][0]}): max|diff| {diff:.3e} = {diff / std:.2e} x std, "
          f"bound {REL_TOL:.0e} x std")
    record_property(name, {"max_abs_diff": diff, "rel": diff / std})
    assert diff <= REL_TOL * std

    # The parameters sit where the rules put them.
    params = flat_params(model)
    q, fc2 = params["blocks.0.self_attn.q.kernel"], params["blocks.1.ffn.fc2.kernel"]
    spec = dict(mesh.shape)
    want_q = P(*(["fsdp"] if spec["fsdp"] > 1 else [None]) + (["tp"] if spec["tp"] > 1 else []))
    want_fc2 = (P("tp", "fsdp") if spec["tp"] > 1 and spec["fsdp"] > 1 else
                P("tp") if spec["tp"] > 1 else P("fsdp") if spec["fsdp"] > 1 else P())
    assert (q.sharding.spec, fc2.sharding.spec) == (_trim(want_q), want_fc2)
    # Every parameter: the rules' spec, the mesh, each device's share of the bytes.
    assert_placed(model, mesh, sharding.WAN_DIT, min_split=MIN_SPLIT)


def _replicating_rules(model):
    return sharding.PartitionRules(name="replicated", min_shard_bytes=2 ** 62, fsdp=False)


@pytest.mark.parametrize("sabotage", ["rules replicate", "mesh ignored"])
def test_placement_check_fails_when_the_mesh_is_not_used(dit_case, sabotage, monkeypatch):
    """The negative controls of ``assert_placed``: the loader given rules that replicate
    every parameter (``sharding.rules_for`` patched), or not given the mesh."""
    cfg, path, _, _ = dit_case
    mesh = _mesh("fsdp+sp+tp")
    if sabotage == "rules replicate":
        monkeypatch.setattr(sharding, "rules_for", _replicating_rules)
        model = vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh)
    else:
        model = vidax.load("wan2_1", "dit", path, config=cfg)
    with pytest.raises(AssertionError, match="parameters misplaced"):
        assert_placed(model, mesh, sharding.WAN_DIT, min_split=MIN_SPLIT)


def _trim(spec: P) -> P:
    dims = list(spec)
    while dims and dims[-1] is None:
        dims.pop()
    return P(*dims)


def test_fsdp_each_device_holds_an_eighth(dit_case, record_property):
    cfg, path, _, _ = dit_case
    mesh = _mesh("fsdp")
    params = flat_params(vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh))
    total = sum(a.nbytes for a in params.values())
    replicated = sum(a.nbytes for a in params.values() if a.sharding.is_fully_replicated)
    per_device = sharding.bytes_per_device(params)
    bound = (total - replicated) / 8 + replicated
    print(f"fsdp=8: {total} parameter bytes, {replicated} replicated "
          f"({100 * replicated / total:.3f}%); per device {sorted(set(per_device.values()))} "
          f"<= {bound:.0f} = 1/8 of the sharded bytes + the replicated ones")
    record_property("fsdp_bytes", {"total": total, "replicated": replicated,
                                   "per_device_max": max(per_device.values())})
    assert len(per_device) == 8
    assert max(per_device.values()) <= bound
    assert replicated < 0.01 * total
    assert_placed(params, mesh, sharding.WAN_DIT, min_split=0.99)


def _compile(mesh, model, batch):
    inputs = {k: sharding.shard_batch(v, mesh) for k, v in dit_inputs(batch).items()}
    with sharding.use_mesh(mesh):
        return run_dit.lower(model, **inputs).compile().as_text()


def _matmul_collectives(hlo: str, mesh) -> Counter:
    """``(op, axes)`` of the collectives that come from a matmul (``dot_general``)."""
    return Counter((c.op, c.axes) for c in parse_collectives(hlo, mesh)
                   if c.source.endswith("dot_general"))


def _check_collectives(name, hlo, mesh, model):
    """sp: the Ulysses all-to-all over ``sp``. fsdp (a batch of 8, one sample per device, as
    ZeRO-3 runs it): an all-gather over ``fsdp`` whose result is a whole weight. (With a
    batch of 2 on fsdp=8, XLA rightly prefers all-reducing the small activations over
    gathering the larger weights.) The weights' shapes are the rules' blocks, so a model
    loaded replicated is checked against the same ones. tp: the Megatron all-reduce (or
    reduce-scatter) over ``tp`` of the row-split matmuls' partial products."""
    if name == "sp":
        found = [c for c in parse_collectives(hlo, mesh) if c.op == "all-to-all"]
        assert any(c.axes == ("sp",) for c in found), found
    elif name == "fsdp":
        weights = gathered_weight_shapes(model, mesh, sharding.WAN_DIT)
        gathered = collective_shapes(hlo, "all-gather", mesh, ("fsdp",))
        assert gathered & weights, (gathered, weights)
    else:
        found = _matmul_collectives(hlo, mesh)
        assert found["all-reduce", ("tp",)] + found["reduce-scatter", ("tp",)], found


# name -> the batch it is compiled with
COLLECTIVE_CASES = {"sp": 2, "fsdp": 8, "tp": 2}


def test_compiled_collectives(dit_case):
    cfg, path, _, _ = dit_case
    for name, batch in COLLECTIVE_CASES.items():
        mesh = _mesh(name)
        model = vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh)
        hlo = _compile(mesh, model, batch)
        print(f"{name}: {Counter((c.op, c.axes) for c in parse_collectives(hlo, mesh))}")
        _check_collectives(name, hlo, mesh, model)


@pytest.mark.slow
def test_compiled_collectives_fail_with_replicated_weights(dit_case, monkeypatch):
    """The negative control of the fsdp and tp checks: the same programs with every weight
    replicated have no weight gather and no tp all-reduce of matmul products. (The sp
    all-to-all is the attention's own shard_map, there whatever the weights.)"""
    cfg, path, _, _ = dit_case
    monkeypatch.setattr(sharding, "rules_for", _replicating_rules)
    for name in ("fsdp", "tp"):
        mesh = _mesh(name)
        model = vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh)
        hlo = _compile(mesh, model, COLLECTIVE_CASES[name])
        with pytest.raises(AssertionError):
            _check_collectives(name, hlo, mesh, model)


def test_loaded_sharded_arrays_equal_the_file(dit_case):
    cfg, path, _, _ = dit_case
    mesh = sharding.make_mesh("dp=2,fsdp=2,tp=2")
    params = flat_params(vidax.load("wan2_1", "dit", path, config=cfg, mesh=mesh))
    stored = safetensors.numpy.load_file(path)
    expected = {
        "blocks.0.self_attn.q.kernel": stored["blocks.0.self_attn.q.weight"].T,
        "blocks.1.cross_attn.o.kernel": stored["blocks.1.cross_attn.o.weight"].T,
        "blocks.1.ffn.fc1.kernel": stored["blocks.1.ffn.0.weight"].T,
        "blocks.1.ffn.fc2.kernel": stored["blocks.1.ffn.2.weight"].T,
        "blocks.0.self_attn.norm_q.scale": stored["blocks.0.self_attn.norm_q.weight"],
        "patch_embedding.kernel": stored["patch_embedding.weight"].transpose(2, 3, 4, 1, 0),
        "time_projection.fc.kernel": stored["time_projection.1.weight"].T,
        "blocks.0.modulation": stored["blocks.0.modulation"],
    }
    for name, want in expected.items():
        array = params[name]
        np.testing.assert_array_equal(np.asarray(array), want, err_msg=name)
        for shard in array.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index],
                                          err_msg=f"{name} on {shard.device}")
    single = flat_params(vidax.load("wan2_1", "dit", path, config=cfg))
    assert all(np.array_equal(np.asarray(single[k]), np.asarray(params[k])) for k in single)


def _trace_on(mesh, model, inputs):
    """The forward of an :class:`AbstractModel` traced on the mesh: the SP checks run while
    tracing, so the error tests need no weights and compile nothing."""
    with sharding.use_mesh(mesh):
        return model(**{k: sharding.shard_batch(v, mesh) for k, v in inputs.items()})


def test_sequence_parallel_rejects_heads_that_do_not_divide():
    """Wan2.1-1.3B has 12 heads: sp=8 cannot split them (here at dim 192, head size 16)."""
    model = AbstractModel(lambda: WanDiT(small_config(dim=192, num_heads=12)))
    mesh = _mesh("sp")
    try:
        _trace_on(mesh, model, dit_inputs())
    except VidaxError as e:
        message = str(e)
    else:
        raise AssertionError("no VidaxError")
    print(message)
    assert re.search(r"head count 12 is not divisible by sp=8 .*1, 2, 3, 4, 6, 12", message)
    assert "token count" not in message


def test_sequence_parallel_rejects_tokens_that_do_not_divide():
    model = AbstractModel(lambda: WanDiT(small_config()))
    mesh = sharding.make_mesh("sp=4,fsdp=2")
    try:
        _trace_on(mesh, model, dit_inputs(latent=(3, 4, 6)))     # 3 x 2 x 3 = 18 tokens
    except VidaxError as e:
        message = str(e)
    else:
        raise AssertionError("no VidaxError")
    print(message)
    assert "token count 18 is not divisible by sp=4" in message
    assert "head count" not in message
