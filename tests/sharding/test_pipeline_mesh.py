"""The Wan2.1 pipeline on a mesh (8 simulated CPU devices): every component's parameters are
where the default partition rules put them, each device holds its share, the compiled
sampling step holds the collectives of its mesh axes, and the sampled latents are what one
device samples; `vidax generate --mesh` runs.

The release is tiny but wide enough to shard under the default rules' 64 KiB threshold
(``vidax.sharding.PartitionRules.min_shard_bytes``), in the authors' layout: the DiT is the
sharding tests' ``small_config`` (dim 256, ffn 1024, 8 heads: 26 of its 69 tensors, 99.0% of
its bytes, are split on each mesh below; the demo's release splits 2) written by the authors'
``WanModel``; UMT5 keeps the tiny release's width 48 (``inspect_folder`` pairs a tiny DiT with
``T5Config.tiny()``'s width) with attention 512 and FFN 1024 wide (15 of its 22 tensors, every
block matrix, are over 64 KiB in float32), written by the authors' ``T5Encoder`` in bfloat16;
the VAE and the tokenizer are the demo's (``vidax.demo.common``). A tiny release's UMT5 config
is not read from the folder, so the test passes the wide one in the ``Release``
(``vidax.pipeline`` is ``inspect_folder`` then ``Pipeline.from_release``, which is what places
the weights).

Bound: float32 "highest", max |mesh - single| <= 1e-4 x std(single): a mesh only reorders
float32 sums (all-reduces, all-to-alls), so the two agree to round-off."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from tests.host_memory import apart
from tests.parity import randomize
from tests.reference import wan22
from tests.sharding.common import (assert_placed, collective_shapes, collectives,
                                   gathered_weight_shapes, parse_collectives, small_config,
                                   write_authors_dit)
from vidax import cli, sharding
from vidax.demo import common as demo_common
from vidax.demo import wan2_1 as demo
from vidax.models.t5.config import T5Config
from vidax.pipelines import base, step_cache
from vidax.pipelines import wan2_1
from vidax.video import read_video

OPTIONS = dict(frames=9, size=(64, 48), steps=3, seed=0)     # 3 x 3 x 4 = 36 latent tokens
DIT = small_config(text_dim=T5Config.tiny().dim)
T5 = dataclasses.replace(T5Config.tiny(), dim_attn=512, dim_ffn=1024, num_heads=8)
#: The rules each component is placed by (test_mesh_and_rules.py checks that
#: ``sharding.rules_for`` gives these for the registered classes).
RULES = {"dit": sharding.WAN_DIT, "text_encoder": sharding.T5_ENCODER, "vae": sharding.DEFAULT}
#: The least share of a component's bytes split over every weight axis of the mesh (fsdp and
#: tp): those take total / (fsdp x tp) of each device. The DiT's time projection, embeddings
#: and head (23% of its bytes) have no tp rule and its biases and norms (1.0%) are under the
#: threshold: measured 99.0% on the meshes without tp, 76.3% with tp. UMT5's token table has no
#: tp rule: 99.9% / 90.8%. The VAE has the FSDP-only default rules and a width of 8 (81% of
#: its bytes split): not held to a share.
MIN_SPLIT = {"dit": 0.7, "text_encoder": 0.85}


def write_wide_release(folder):
    """The wide tiny Wan2.1 T2V release (see the module docstring)."""
    import torch

    write_authors_dit(DIT, folder / "diffusion_pytorch_model.safetensors")
    demo_common.write_json(folder / wan2_1.CONFIG_FILE,
                           {"_class_name": "WanModel", **dataclasses.asdict(DIT)})
    t5 = wan22.t5_module().T5Encoder(
        vocab=T5.vocab_size, dim=T5.dim, dim_attn=T5.dim_attn, dim_ffn=T5.dim_ffn,
        num_heads=T5.num_heads, num_layers=T5.num_layers, num_buckets=T5.num_buckets,
        shared_pos=T5.shared_pos)
    randomize(t5.named_parameters(), 1)
    torch.save({k: v.to(torch.bfloat16) for k, v in t5.state_dict().items()},
               folder / "models_t5_umt5-xxl-enc-bf16.pth")
    vae = demo_common.tiny_layout("wan2_1")["vae"]
    demo_common.write_pth(folder / vae["file"], demo_common.random_tensors(
        vae, np.random.default_rng(2), np.float32))
    demo_common.word_tokenizer(folder / wan2_1.TOKENIZER_DIR, demo.WORDS, demo.SPECIALS)
    return folder


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = write_wide_release(tmp_path_factory.mktemp("wide_wan2_1"))
    found = wan2_1.inspect_folder(folder, variant="tiny")
    assert found.configs["dit"] == DIT
    return dataclasses.replace(found, configs={**found.configs, "text_encoder": T5})


def _pipeline(release, mesh=None):
    return wan2_1.Pipeline.from_release(release, mesh=mesh, precision="fp32")


@pytest.fixture(scope="module")
def single(release):
    return _pipeline(release).sample(demo.PROMPT, **OPTIONS)


class StepRecorder:
    """Stands in for ``base._sampling_step``: compiles the step once (under the pipeline's
    context mesh, as ``denoise`` calls it) and runs that executable for every step, keeping
    its text."""

    def __init__(self, step):
        self.step, self.compiled = step, None

    def __call__(self, *args):
        if self.compiled is None:
            self.compiled = self.step.lower(*args).compile()
        return self.compiled(*args[5:])           # the five static arguments are baked in

    @property
    def text(self) -> str:
        return self.compiled.as_text()


def check_placement(pipe, mesh) -> dict:
    return {key: assert_placed(getattr(pipe, key), mesh, rules, min_split=MIN_SPLIT.get(key))
            for key, rules in RULES.items()}


def check_step_collectives(text: str, dit, mesh) -> Counter:
    """The collectives of the compiled sampling step, each attributed to the mesh axes its
    device groups span.

    sp: the Ulysses all-to-all over ``sp``. tp: the Megatron all-reduce (or reduce-scatter)
    over ``tp`` of a matmul's partial products (``dot_general``; the replicated model has
    all-reduces over tp too, of RMSNorm sums). fsdp, with the [cond, uncond] batch split over
    ``fsdp`` (one sample a rank, as ZeRO-3 runs it): an all-gather whose result is a whole
    (tp-local) DiT weight -- over ``fsdp`` on sp=4,fsdp=2; on fsdp=2,sp=2,tp=2 XLA first moves
    the fsdp blocks onto ``sp`` (collective-permutes over fsdp+sp) and gathers them there, so
    the axes of the gather are not asserted. fsdp with the batch not split over it
    (dp=2,fsdp=4: the pair goes to dp; tp=2,fsdp=4: 4 does not divide 2): every fsdp rank has
    the same samples, and XLA keeps the weights split, all-reducing the partial products of
    the fsdp-split contractions over ``fsdp``."""
    found = collectives(text, mesh)
    matmul = Counter((c.op, c.axes) for c in parse_collectives(text, mesh)
                     if c.source.endswith("dot_general"))
    sizes = dict(mesh.shape)
    print(f"{sharding.format_mesh_spec(sizes)}: the sampling step's collectives by axes "
          f"{dict(sorted(found.items()))}")
    if sizes["sp"] > 1:
        assert found["all-to-all", ("sp",)], found
    if sizes["tp"] > 1:
        assert matmul["all-reduce", ("tp",)] + matmul["reduce-scatter", ("tp",)], found
    if sizes["fsdp"] > 1 and "fsdp" in sharding.batch_axes(mesh, 2):
        gathered = collective_shapes(text, "all-gather")
        weights = gathered_weight_shapes(dit, mesh, RULES["dit"])   # the rules' blocks
        assert gathered & weights, ("no all-gather of a DiT weight", gathered)
    elif sizes["fsdp"] > 1:
        assert matmul["all-reduce", ("fsdp",)] + matmul["reduce-scatter", ("fsdp",)], found
    return found


# sp x fsdp in the fast lane; the other meshes in CI (``-m slow``).
@pytest.mark.parametrize("spec", [pytest.param("dp=2,fsdp=4", marks=pytest.mark.slow),
                                  "sp=4,fsdp=2",
                                  pytest.param("tp=2,fsdp=4", marks=pytest.mark.slow),
                                  pytest.param("fsdp=2,sp=2,tp=2", marks=pytest.mark.slow)])
def test_sampling_on_a_mesh_matches_one_device(release, single, spec, monkeypatch):
    mesh = sharding.make_mesh(spec)
    pipe = _pipeline(release, mesh)
    check_placement(pipe, mesh)
    step = StepRecorder(base._sampling_step)
    monkeypatch.setattr(base, "_sampling_step", step)
    latents = pipe.sample(demo.PROMPT, **OPTIONS)
    check_step_collectives(step.text, pipe.dit, mesh)
    diff = float(np.abs(latents - single).max())
    print(f"{spec}: max abs diff {diff:.3e}, std {single.std():.3f}")
    assert diff <= 1e-4 * single.std()


# The step caches' states and decisions on a mesh: split with the batch over dp / fsdp, the
# decision (a lax.cond on the rows' flags) taken once for the whole mesh.
@pytest.mark.parametrize("spec", ["sp=4,fsdp=2",
                                  pytest.param("dp=2,fsdp=2,tp=2", marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind, settings", [("first-block", {"threshold": 1e9}),
                                            ("taylorseer", {"interval": 2, "warmup_steps": 1})])
def test_step_cache_on_a_mesh_matches_one_device(release, spec, kind, settings):
    cache = step_cache.parse(kind, **settings)
    options = {**OPTIONS, "steps": 5}
    alone = _pipeline(release)
    expected = alone.sample(demo.PROMPT, step_cache=cache, **options)
    pipe = _pipeline(release, sharding.make_mesh(spec))
    latents = pipe.sample(demo.PROMPT, step_cache=cache, **options)
    computed = pipe.sampling_reports[-1].computed
    assert (computed == alone.sampling_reports[-1].computed).all()
    assert computed.any() and not computed.all()
    diff = float(np.abs(latents - expected).max())
    print(f"{spec} {kind}: skipped {pipe.sampling_reports[-1].skipped} of 5, max abs diff "
          f"{diff:.3e}, std {expected.std():.3f}")
    assert diff <= 1e-4 * expected.std()


@apart
def test_block_offload_on_a_mesh_is_the_resident_mesh_run(release):
    """``offload="block"`` on a mesh: the DiT's blocks lie in host memory in the shardings
    the resident load gives them (fsdp / tp splits kept), the rest on the devices, and the
    sampled latents are the resident mesh run's bit for bit."""
    import jax
    from flax import nnx

    from vidax.nn import offload

    mesh = sharding.make_mesh("sp=4,fsdp=2")
    resident = _pipeline(release, mesh)
    expected = resident.sample(demo.PROMPT, **OPTIONS)
    pipe = wan2_1.Pipeline.from_release(release, mesh=mesh, precision="fp32", offload="block")
    placed = dict(nnx.to_flat_state(nnx.state(pipe.dit)))
    split = 0
    for path, var in nnx.to_flat_state(nnx.state(resident.dit)):
        ours, theirs = placed[path].get_value(), var.get_value()
        assert offload.on_host(ours) == (path[0] == "blocks"), path
        assert ours.sharding.with_memory_kind("device").is_equivalent_to(theirs.sharding,
                                                                           ours.ndim), path
        split += not theirs.sharding.is_fully_replicated
    assert split   # the comparison saw split weights
    latents = pipe.sample(demo.PROMPT, **OPTIONS)
    assert np.array_equal(latents, expected), float(np.abs(latents - expected).max())
    assert jax.tree.leaves(pipe._offloaded) and not pipe._resident


def _replicate_everything(model):
    return sharding.PartitionRules(name="replicated", min_shard_bytes=2 ** 62, fsdp=False)


@pytest.mark.parametrize("sabotage", ["rules replicate", "mesh ignored"])
def test_placement_check_fails_when_the_mesh_is_not_used(release, sabotage, monkeypatch):
    """The negative controls: with the loader's rules replaced by ones that replicate every
    parameter, or with the mesh not passed to the loader (every weight on one device), the
    pipeline still loads, and the placement check of each sharded component fails."""
    mesh = sharding.make_mesh("fsdp=2,sp=2,tp=2")
    if sabotage == "rules replicate":
        monkeypatch.setattr(sharding, "rules_for", _replicate_everything)
    else:
        load = base.load_component
        monkeypatch.setattr(base, "load_component",
                            lambda *a, **k: load(*a[:6], None, **k))
    pipe = _pipeline(release, mesh)
    for key in ("dit", "text_encoder"):
        with pytest.raises(AssertionError, match="parameters misplaced"):
            assert_placed(getattr(pipe, key), mesh, RULES[key], min_split=MIN_SPLIT[key])


@pytest.mark.slow
def test_collectives_check_fails_with_replicated_weights(release, monkeypatch):
    """The negative control of the compiled step's check: with every weight replicated (the
    loader's rules replaced), fsdp=2,sp=2,tp=2 still has its Ulysses all-to-all but no weight
    all-gather and no all-reduce of matmul products over tp, and the check fails."""
    mesh = sharding.make_mesh("fsdp=2,sp=2,tp=2")
    monkeypatch.setattr(sharding, "rules_for", _replicate_everything)
    pipe = _pipeline(release, mesh)
    step = StepRecorder(base._sampling_step)
    monkeypatch.setattr(base, "_sampling_step", step)
    pipe.sample(demo.PROMPT, **{**OPTIONS, "steps": 1})
    found = collectives(step.text, mesh)
    assert found["all-to-all", ("sp",)]
    with pytest.raises(AssertionError):
        check_step_collectives(step.text, pipe.dit, mesh)
    matmul = [c for c in parse_collectives(step.text, mesh) if c.axes == ("tp",)
              and c.op in ("all-reduce", "reduce-scatter") and c.source.endswith("dot_general")]
    gathers = (collective_shapes(step.text, "all-gather")
               & gathered_weight_shapes(pipe.dit, mesh, RULES["dit"]))
    assert not matmul and not gathers, (matmul, gathers)


@pytest.mark.slow
def test_generate_with_mesh_writes_the_video(tmp_path, monkeypatch):
    """The CLI on the demo's own tiny release (its DiT identifies as the tiny variant): the
    ``--mesh`` reaches the loader (every parameter placed by its rules on dp=2,fsdp=4; the
    demo is too narrow for a share-of-bytes check) and the video is written."""
    folder = tmp_path / "tiny"
    demo.write(folder)
    out = tmp_path / "mesh.mp4"
    loaded = []
    from_release = wan2_1.Pipeline.from_release.__func__
    monkeypatch.setattr(wan2_1.Pipeline, "from_release", classmethod(
        lambda cls, *a, **k: loaded.append(from_release(cls, *a, **k)) or loaded[-1]))
    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(folder), "--prompt",
                   demo.PROMPT, "--frames", "9", "--size", "64x48", "--steps", "2",
                   "--mesh", "dp=2,fsdp=4", "--out", str(out)])
    assert rc == 0
    frames, _ = read_video(out)
    assert frames.shape == (9, 48, 64, 3)
    (pipe,) = loaded
    assert dict(pipe.mesh.shape) == dict(dp=2, fsdp=4, sp=1, tp=1)
    for key, rules in RULES.items():
        assert_placed(getattr(pipe, key), pipe.mesh, rules)
