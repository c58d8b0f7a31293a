"""Mesh specs, partition rules and activation shardings (no compilation), and the UMT5
encoder on a mesh: placed by its rules (``tests.sharding.common.assert_placed``, with its
negative controls), same output as on one device."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import vidax
from tests.reference import wan22
from tests.sharding.common import assert_placed
from vidax import sharding
from vidax.errors import VidaxError
from vidax.models.t5.model import T5Config
from vidax.translator.verify import flat_params


@pytest.mark.parametrize("spec,want", [
    (None, dict(dp=1, fsdp=8, sp=1, tp=1)),
    ("", dict(dp=1, fsdp=8, sp=1, tp=1)),
    ("dp=2,fsdp=4,tp=1,sp=1", dict(dp=2, fsdp=4, sp=1, tp=1)),
    ("tp=2", dict(dp=1, fsdp=4, sp=1, tp=2)),            # fsdp takes the rest
    ("dp=2, sp=4", dict(dp=2, fsdp=1, sp=4, tp=1)),
    ("fsdp=2,sp=-1", dict(dp=1, fsdp=2, sp=4, tp=1)),     # -1 takes the rest
    ({"dp": 8, "fsdp": 1}, dict(dp=8, fsdp=1, sp=1, tp=1)),
])
def test_mesh_spec(spec, want):
    assert sharding.parse_mesh_spec(spec, 8) == want


@pytest.mark.parametrize("spec,message", [
    ("dp=3", "does not divide the 8"),
    ("dp=2,fsdp=2", "uses 4 devices"),
    ("pp=2", "unknown axis pp"),
    ("dp2", "is not AXIS=SIZE"),
    ("dp=-1,sp=-1", "one axis may be -1"),
])
def test_bad_mesh_spec(spec, message):
    with pytest.raises(VidaxError, match=message):
        sharding.parse_mesh_spec(spec, 8)


def test_make_mesh_uses_auto_axes_in_a_fixed_order():
    mesh = sharding.make_mesh("tp=2,sp=2,dp=2,fsdp=1")
    assert mesh.axis_names == ("dp", "fsdp", "sp", "tp")
    assert mesh.axis_types == (AxisType.Auto,) * 4
    assert dict(mesh.shape) == dict(dp=2, fsdp=1, sp=2, tp=2)


def _spec(path, shape, mesh_spec, rules=sharding.WAN_DIT, itemsize=4):
    mesh = sharding.make_mesh(mesh_spec)
    return sharding.partition_spec(path, shape, int(np.prod(shape)) * itemsize, rules, mesh)


def test_megatron_rules_and_fsdp_on_the_largest_free_dim():
    q, o = "blocks.3.self_attn.q.kernel", "blocks.3.cross_attn.o.kernel"
    fc1, fc2 = "blocks.0.ffn.fc1.kernel", "blocks.0.ffn.fc2.kernel"
    assert _spec(q, (5120, 5120), "tp=8,fsdp=1")[0] == P(None, "tp")      # column
    assert _spec(o, (5120, 5120), "tp=8,fsdp=1")[0] == P("tp")            # row
    assert _spec(fc1, (5120, 13824), "fsdp=2,tp=4")[0] == P("fsdp", "tp")
    assert _spec(fc2, (13824, 5120), "fsdp=2,tp=4")[0] == P("tp", "fsdp")
    assert _spec(fc1, (5120, 13824), "fsdp=8")[0] == P(None, "fsdp")       # the larger dim
    # Conv kernel [1, 2, 2, 16, 5120]: the channels.
    assert _spec("patch_embedding.kernel", (1, 2, 2, 16, 5120), "fsdp=8")[0] == P(
        None, None, None, None, "fsdp")
    # T5 / UMT5: gate and fc1 column, fc2 row, the position-bias table by heads.
    t5 = sharding.T5_ENCODER
    assert _spec("blocks.1.ffn.gate.kernel", (4096, 10240), "tp=8,fsdp=1", t5)[0] == P(None, "tp")
    assert _spec("blocks.1.attn.o.kernel", (4096, 4096), "tp=8,fsdp=1", t5)[0] == P("tp")
    assert _spec("blocks.1.pos_embedding.embedding.embedding", (32, 64), "tp=8,fsdp=1",
                 dataclasses.replace(t5, min_shard_bytes=0))[0] == P(None, "tp")


def test_rules_follow_the_model_class_whatever_loads_it():
    from vidax import registry
    from vidax.models.wan2_1.dit import WanDiT

    for spec in registry.specs():
        if spec.model.endswith(":WanDiT"):         # wan2_1 / wan2_2, original / diffusers
            assert sharding.rules_for(spec.model) is sharding.WAN_DIT, spec.key
        if spec.model.endswith(":T5Encoder"):      # UMT5 (Wan), T5 v1.1 (transformers layout)
            assert sharding.rules_for(spec.model) is sharding.T5_ENCODER, spec.key
    assert sharding.rules_for(WanDiT) is sharding.WAN_DIT
    assert sharding.rules_for("vidax.models.wan2_1.vae:WanVAE") is sharding.DEFAULT


def test_small_tensors_are_replicated():
    assert _spec("blocks.0.self_attn.q.bias", (5120,), "tp=8,fsdp=1")[0] == P()   # 20 KB
    assert _spec("blocks.0.modulation", (1, 6, 5120), "fsdp=8")[0] == P(None, None, "fsdp")


def test_a_rule_that_does_not_divide_is_replicated_and_logged(caplog):
    """Wan2.1-1.3B's ffn is 8960 wide: tp=8 divides it, 3 does not; 1536 by 3 does."""
    spec, notes = _spec("blocks.0.ffn.fc1.kernel", (1536, 8960), "tp=8,fsdp=1")
    assert spec == P(None, "tp") and not notes
    mesh = jax.make_mesh((1, 2, 1, 3), sharding.AXES, axis_types=(AxisType.Auto,) * 4,
                         devices=jax.devices()[:6])
    abstract = {"blocks.0.ffn.fc1.kernel": jax.ShapeDtypeStruct((1536, 8960), np.float32),
                "blocks.0.ffn.fc2.kernel": jax.ShapeDtypeStruct((8960, 1536), np.float32),
                "odd": jax.ShapeDtypeStruct((4097, 17), np.float32)}
    with caplog.at_level(logging.INFO, logger="vidax.sharding"):
        specs = sharding.param_shardings(abstract, mesh, sharding.WAN_DIT)
    # tp=3 dropped; fsdp then takes the larger dim, 8960
    assert specs["blocks.0.ffn.fc1.kernel"].spec == P(None, "fsdp")
    assert specs["blocks.0.ffn.fc2.kernel"].spec == P("fsdp")
    assert specs["odd"].spec == P()
    levels = {r.getMessage().split(": ", 1)[1]: r.levelname for r in caplog.records}
    assert sorted(levels.values()) == ["INFO", "WARNING", "WARNING"]
    text = caplog.text
    assert "tp=3 does not divide dim 1 (8960) -> replicated on tp (1 parameter)" in text
    assert "tp=3 does not divide dim 0 (8960)" in text
    assert "fsdp=2 divides no free dim of [4097, 17]" in text


def test_batch_placement():
    mesh = sharding.make_mesh("dp=2,fsdp=4")
    assert sharding.batch_axes(mesh, 8) == ("dp", "fsdp")
    assert sharding.batch_axes(mesh, 4) == ("fsdp",)
    assert sharding.batch_axes(mesh, 2) == ("dp",)
    assert sharding.batch_axes(mesh, 1) == ()
    x = sharding.shard_batch(np.zeros((2, 5, 3), np.float32), mesh)
    assert x.sharding.spec == P("dp")
    # Inside a jitted step: the CFG pair built from one latent, split over dp.
    pair = jax.jit(lambda x: sharding.constrain_batch(jnp.concatenate([x, x])))
    one = np.ones((1, 5, 3), np.float32)
    with sharding.use_mesh(mesh):
        assert pair(one).sharding.spec == P("dp")
    assert pair(one).sharding.is_fully_replicated          # no context mesh: unchanged


def test_t5_encoder_tensor_parallel_equals_one_device(tmp_path):
    """The UMT5 encoder (authors' .pth layout) with every rule applied (threshold 0, so the
    tiny tensors split too): tp=4 over its 4 heads, fsdp=2. Same bound as the DiT."""
    import torch

    cfg = T5Config.tiny()
    authors = wan22.t5_module().T5Encoder(
        vocab=cfg.vocab_size, dim=cfg.dim, dim_attn=cfg.dim_attn, dim_ffn=cfg.dim_ffn,
        num_heads=cfg.num_heads, num_layers=cfg.num_layers, num_buckets=cfg.num_buckets,
        shared_pos=cfg.shared_pos)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in authors.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if "norm" in name else
                    noise if name.endswith("embedding.weight") else noise / p.shape[1] ** 0.5)
    path = tmp_path / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(authors.state_dict(), path)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (2, 16)).astype(np.int32)
    mask = np.ones((2, 16), np.int32)
    mask[1, 9:] = 0

    run = nnx.jit(lambda m, i, k: m(i, k))
    ref = np.asarray(run(vidax.load("wan2_1", "text_encoder", path, config=cfg), ids, mask))
    mesh = sharding.make_mesh("fsdp=2,tp=4")
    rules = dataclasses.replace(sharding.T5_ENCODER, min_shard_bytes=0)
    model = vidax.load("wan2_1", "text_encoder", path, config=cfg, mesh=mesh, rules=rules)
    params = flat_params(model)
    assert params["blocks.0.attn.q.kernel"].sharding.spec == P("fsdp", "tp")
    assert params["blocks.0.ffn.fc2.kernel"].sharding.spec == P("tp", "fsdp")
    # Every parameter where the rules put it; the token table (1024 x 48, 48% of this tiny
    # encoder's bytes) and the norms have no tp rule (fsdp only): 51.5% of the bytes are split
    # over fsdp x tp.
    assert_placed(model, mesh, rules, min_split=0.5)
    # The negative controls: the model loaded with the default 64 KiB threshold (this tiny
    # encoder then splits only its token table), or on one device, fails the same check.
    for control in (vidax.load("wan2_1", "text_encoder", path, config=cfg, mesh=mesh),
                    vidax.load("wan2_1", "text_encoder", path, config=cfg)):
        with pytest.raises(AssertionError, match="parameters misplaced"):
            assert_placed(control, mesh, rules, min_split=0.5)
    with sharding.use_mesh(mesh):
        out = np.asarray(run(model, sharding.shard_batch(ids, mesh),
                             sharding.shard_batch(mask, mesh)))
    diff = float(np.abs(out - ref).max())
    print(f"T5 fsdp=2,tp=4: max|diff| {diff:.3e} = {diff / ref.std():.2e} x std")
    assert diff <= 1e-4 * ref.std()


@pytest.mark.parametrize("spec", ["fsdp=2,sp=2,tp=2", "dp=2,fsdp=4"])
def test_collectives_are_attributed_to_their_mesh_axes(spec):
    """``tests.sharding.common.parse_collectives`` (what every mesh test reads compiled
    programs with) names the axes each collective spans, from every form XLA writes device
    groups in: a sum over an array split on ``axes`` (all-reduce) and the array gathered
    whole (all-gather), partitioned by XLA (the iota ``[G,S]<=[dims]T(perm)`` and mesh
    ``mesh[...]`` forms, with and without ``device_ids``), and ``psum`` in a ``shard_map``
    (explicit ``{{...}}`` groups). Every axis subset and order of the mesh."""
    import itertools

    from tests.sharding.common import collectives, parse_collectives

    mesh = sharding.make_mesh(spec)
    live = [a for a in mesh.axis_names if dict(mesh.shape)[a] > 1]
    for axes in [p for r in (1, 2) for p in itertools.permutations(live, r)]:
        rest = tuple(a for a in live if a not in axes) or None
        x = jax.device_put(jnp.ones((16, 16, 4)), NamedSharding(mesh, P(axes, rest)))
        texts = [jax.jit(f, out_shardings=NamedSharding(mesh, out)).lower(x).compile().as_text()
                 for f, out in ((lambda x: x.sum(0), P(rest)), (lambda x: 2 * x, P(None, rest)))]
        texts.append(jax.jit(jax.shard_map(lambda x, a=axes: jax.lax.psum(x, a), mesh=mesh,
                                           in_specs=P(axes, rest), out_specs=P(None, rest)))
                     .lower(x).compile().as_text())
        want = tuple(a for a in mesh.axis_names if a in axes)
        found = Counter((c.op, c.axes) for t in texts for c in parse_collectives(t, mesh))
        assert found[("all-reduce", want)] >= 2 and found[("all-gather", want)] >= 1, (axes, found)
        assert set(found) <= {("all-reduce", want), ("all-gather", want)}, (axes, found)
        assert sum(collectives(t)["all-reduce"] for t in texts) == found[("all-reduce", want)]
