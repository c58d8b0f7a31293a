"""Ulysses sequence parallelism with masks and biases (``vidax.nn.attention``).

What is checked, on the 8 simulated CPU devices of tests/conftest.py:

* the output equals one device's (float32, "highest", max |diff| <= 1e-4 x std);
* the compiled program is Ulysses: it contains ``all-to-all`` ops, and **no all-gather of the
  full sequence**: no all-gather with a floating-point result whose dimension 1 (the token
  axis of a ``[B, L, H, D]`` / ``[B, L, C]`` activation) is a full attention length ``L`` or
  ``L`` rounded up to a multiple of ``sp`` (XLA's partitioner pads an uneven split). The
  all-gathers left are of boolean masks (replicated beside q/k/v, a few hundred bytes here)
  and, in the DiTs, of the unpatchified output (its dimension 1 is frames, not tokens).

The negative control turns the Ulysses path off (``VIDAX_SEQUENCE_PARALLEL=0``): the same
programs then have no all-to-all and the check fails.

``keys_sequence_parallel=True`` (keys longer than the queries, both sequence-split: Cosmos3's
video attention, LTX-2's video->audio attention) is checked the same way, with the call
without the flag as the negative control (its program gathers the keys whole).

The DiTs (HunyuanVideo 1.0 / 1.5) and Reason1 / Gemma / Cosmos3 / LTX-Video are checked the
same way in test_family_models.py on their ``sp`` meshes; here: the attention function for
each kind of mask and the text encoders that have no mesh test there (T5 with its bias,
LLaMA-3, CLIP's text tower), with 8 heads so ``sp=8`` divides them.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import assert_fails
from tests.sharding.common import parse_collectives
from vidax import sharding
from vidax.errors import VidaxError
from vidax.models.clip.config import CLIPTextConfig
from vidax.models.clip.model import CLIPTextModel
from vidax.models.llama.config import LlamaConfig
from vidax.models.llama.model import LlamaModel
from vidax.models.reason1.model import Reason1Config, Reason1TextModel
from vidax.models.t5.config import T5Config
from vidax.models.t5.model import T5Encoder

jax.config.update("jax_default_matmul_precision", "highest")
attn = importlib.import_module("vidax.nn.attention")
REL_TOL = 1e-4
B, L, H, D = 2, 64, 8, 16
_FLOAT = ("f16", "bf16", "f32", "f64")


def collectives(hlo: str) -> tuple[int, list[tuple[str, tuple[int, ...]]]]:
    """(the number of all-to-all ops, the (dtype, shape) of every all-gather's result), read
    by tests/sharding/common.parse_collectives."""
    found = parse_collectives(hlo)
    gathers = [(t, shape) for c in found if c.op == "all-gather"
               for t, shape in zip(c.types, c.shapes)]
    return sum(c.op == "all-to-all" for c in found), gathers


def assert_ulysses(hlo: str, lengths, sp: int, known=()) -> None:
    """All-to-alls present; no floating-point all-gather over a full attention length.
    ``known``: shapes of all-gathers a caller names as a known gap (with its reason)."""
    a2a, gathers = collectives(hlo)
    full = {n for length in lengths for n in (length, -(-length // sp) * sp)}
    sequence = [g for g in gathers if g[0] in _FLOAT and len(g[1]) >= 2 and g[1][1] in full
                and g[1] not in known]
    assert a2a > 0, f"no all-to-all in the program (all-gathers: {gathers})"
    assert not sequence, f"all-gathers of the full sequence: {sequence}"


def _close(out, ref):
    ref = np.asarray(ref)
    diff = float(np.abs(np.asarray(out) - ref).max())
    assert diff <= REL_TOL * ref.std(), (diff, ref.std())


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((B, L, H, D)).astype(np.float32) for _ in range(3))


def _logits(kind: str):
    """(mask, bias) of one kind, in the shapes the models pass."""
    rng = np.random.default_rng(1)
    keys = np.ones((B, L), bool)
    keys[1, 40:] = False                                   # right padding
    keys[0, :5] = False                                    # left padding
    causal = np.tril(np.ones((L, L), bool))
    return {
        "key_padding": (keys[:, None, None, :], None),     # the DiTs' [B, 1, 1, Lk]
        "causal": (causal, None),                          # Cosmos3's prompt: [L, L]
        "causal_padding": (causal[None, None] & keys[:, None, None, :], None),  # LLMs
        "per_head": (rng.random((B, H, L, L)) > 0.3, None),
        "t5_bias": (keys[:, None, None, :],                # T5: relative bias [1, H, L, L]
                    rng.standard_normal((1, H, L, L)).astype(np.float32)),
    }[kind]


KINDS = ("key_padding", "causal", "causal_padding", "per_head", "t5_bias")


@pytest.mark.parametrize("spec", ["sp=8,fsdp=1", "dp=2,fsdp=1,sp=2,tp=2"])
@pytest.mark.parametrize("kind", KINDS)
def test_masked_attention_is_ulysses(qkv, kind, spec):
    """On dp x sp x tp the head group of a device is its tp block then its sp share of it:
    a per-head mask or bias sliced in another order would give wrong rows."""
    q, k, v = qkv
    mask, bias = _logits(kind)
    ref = jax.nn.dot_product_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    fn = jax.jit(lambda q, k, v, m, b: attn.attention(q, k, v, mask=m, bias=b, scale=0.3,
                                                      implementation="xla"))
    mesh = sharding.make_mesh(spec)
    with sharding.use_mesh(mesh):
        _close(fn(q, k, v, mask, bias), ref)
        assert_ulysses(fn.lower(q, k, v, mask, bias).compile().as_text(), [L],
                       dict(mesh.shape)["sp"])


def test_masked_cross_attention_splits_queries_only(qkv):
    """Keys of another length: each device its own queries over every key; a ``[B, 1, Lq,
    Lk]`` mask is split with the queries, no exchange."""
    q, k, v = qkv
    kc, vc = k[:, :24], v[:, :24]
    mask = np.random.default_rng(2).random((B, 1, L, 24)) > 0.2
    fn = jax.jit(lambda q, k, v, m: attn.attention(q, k, v, mask=m))
    with sharding.use_mesh(sharding.make_mesh("sp=8,fsdp=1")):
        _close(fn(q, kc, vc, mask), jax.nn.dot_product_attention(q, kc, vc, mask=mask))
        a2a, gathers = collectives(fn.lower(q, kc, vc, mask).compile().as_text())
    assert a2a == 0 and not [g for g in gathers if g[0] in _FLOAT], gathers


LK = 96      # keys longer than the queries (Cosmos3's [prompt, video], LTX-2's audio over video)


def _split_keys_case(spec):
    """q [B, L, H, D] and k, v [B, LK, H, D] placed as the DiTs' activations are (tokens over
    ``sp``, heads over ``tp``), and a key-padding mask padded on both sides."""
    mesh = sharding.make_mesh(spec)
    rng = np.random.default_rng(4)
    placed = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
        sharding.batch_axes(mesh, B) or None, "sp", "tp" if dict(mesh.shape)["tp"] > 1 else None))
    q, k, v = (jax.device_put(rng.standard_normal((B, n, H, D)).astype(np.float32), placed)
               for n in (L, LK, LK))
    keys = np.ones((B, LK), bool)
    keys[0, :7], keys[1, 70:] = False, False
    return mesh, q, k, v, keys[:, None, None, :]


@pytest.mark.parametrize("spec", ["sp=8,fsdp=1", "dp=2,fsdp=1,sp=2,tp=2"])
def test_keys_sequence_parallel_is_ulysses(spec):
    """``keys_sequence_parallel=True``: q and the longer k/v each all-to-all to head-split
    blocks, no device gathers the keys; the output (a key-padding mask whose columns must
    stay with their keys) is one device's. Negative control: the same call without the flag
    is cross-attention and its program all-gathers the keys ``[.., LK, ..]`` whole."""
    mesh, q, k, v, mask = _split_keys_case(spec)
    sp = dict(mesh.shape)["sp"]
    ref = jax.nn.dot_product_attention(*(np.asarray(t) for t in (q, k, v)), mask=mask)
    hlo = {}
    for flag in (True, False):
        fn = jax.jit(lambda q, k, v, m, flag=flag: attn.attention(
            q, k, v, mask=m, implementation="xla", keys_sequence_parallel=flag))
        with sharding.use_mesh(mesh):
            _close(fn(q, k, v, mask), ref)
            hlo[flag] = fn.lower(q, k, v, mask).compile().as_text()
    assert_ulysses(hlo[True], [L, LK], sp)
    a2a, gathers = collectives(hlo[True])
    assert a2a >= 4, a2a                      # q, k, v in and the output back
    with pytest.raises(AssertionError, match="no all-to-all|all-gathers of the full sequence"):
        assert_ulysses(hlo[False], [L, LK], sp)
    assert [g for g in collectives(hlo[False])[1] if g[0] == "f32" and g[1][1] == LK]


def test_keys_sequence_parallel_needs_the_keys_to_divide(caplog):
    """90 keys on sp=8: with ``sequence_parallel=True`` an error naming the keys' count, else
    cross-attention (the keys gathered) with a logged warning, and still the right output."""
    attn._warn_once.cache_clear()
    mesh, q, k, v, mask = _split_keys_case("sp=8,fsdp=1")
    k, v, mask = k[:, :90], v[:, :90], mask[..., :90]
    with sharding.use_mesh(mesh):
        with pytest.raises(VidaxError, match="keys.*token count 90 is not divisible by sp=8"):
            attn.attention(q, k, v, mask=mask, keys_sequence_parallel=True,
                           sequence_parallel=True)
        with caplog.at_level("WARNING", logger="vidax.attention"):
            out = jax.jit(lambda q, k, v, m: attn.attention(
                q, k, v, mask=m, keys_sequence_parallel=True))(q, k, v, mask)
    assert "falls back to cross-attention" in caplog.text
    _close(out, jax.nn.dot_product_attention(*(np.asarray(t) for t in (q, k, v)), mask=mask))


def test_a_shard_map_kernel_gets_its_head_group_of_the_mask(qkv, monkeypatch):
    """A kernel XLA cannot partition (the TPU splash hook) is handed each device's block of
    the mask: every query and key, ``H / (tp sp)`` heads."""
    monkeypatch.setattr(attn, "_KERNELS", dict(attn._KERNELS))
    seen = []

    def kernel(q, k, v, *, mask, bias, scale):
        seen.append((q.shape, mask.shape))
        return jax.nn.dot_product_attention(q, k, v, mask=mask, bias=bias, scale=scale)

    attn.register_kernel("splash", kernel, needs_shard_map=True)
    q, k, v = qkv
    mask, _ = _logits("per_head")
    fn = jax.jit(lambda q, k, v, m: attn.attention(q, k, v, mask=m, implementation="splash"))
    with sharding.use_mesh(sharding.make_mesh("dp=2,fsdp=1,sp=2,tp=2")):
        _close(fn(q, k, v, mask), jax.nn.dot_product_attention(q, k, v, mask=mask))
    assert seen == [((B // 2, L, H // 4, D), (B // 2, H // 4, L, L))]


def test_negative_control_without_ulysses(qkv, monkeypatch):
    """VIDAX_SEQUENCE_PARALLEL=0: the masked attention is XLA's again -- the output is
    still right, the all-to-all check fails; and a mask sliced to the wrong head group (the
    tp and sp axes swapped in its spec) gives a wrong output."""
    q, k, v = qkv
    mask, _ = _logits("per_head")
    fn = jax.jit(lambda q, k, v, m: attn.attention(q, k, v, mask=m))
    mesh = sharding.make_mesh("sp=8,fsdp=1")
    monkeypatch.setenv(attn.SP_ENV_VAR, "0")
    with sharding.use_mesh(mesh):
        hlo = fn.lower(q, k, v, mask).compile().as_text()
    with pytest.raises(AssertionError, match="no all-to-all"):
        assert_ulysses(hlo, [L], 8)
    monkeypatch.delenv(attn.SP_ENV_VAR)

    real = attn._logit_spec

    def swapped(t, q_shape, batch, head_group, query_axis):
        return real(t, q_shape, batch, head_group[::-1], query_axis)

    monkeypatch.setattr(attn, "_logit_spec", swapped)
    ref = jax.nn.dot_product_attention(q, k, v, mask=mask)
    bad = jax.jit(lambda q, k, v, m: attn.attention(q, k, v, mask=m))
    with sharding.use_mesh(sharding.make_mesh("dp=2,fsdp=1,sp=2,tp=2")):
        assert_fails("swapped head group", bad(q, k, v, mask), ref)


# ------------------------------------------------------------------- text encoders
def _t5():
    cfg = dataclasses.replace(T5Config.tiny(), num_heads=8)
    return T5Encoder(cfg, keys=11), cfg.vocab_size


def _llama():
    cfg = dataclasses.replace(LlamaConfig.tiny(), num_attention_heads=8, num_key_value_heads=4,
                              head_dim=8)
    return LlamaModel(cfg, keys=12), cfg.vocab_size


def _clip():
    cfg = dataclasses.replace(CLIPTextConfig.tiny(), num_heads=8)
    return CLIPTextModel(cfg, keys=13), cfg.vocab_size


def _reason1():
    cfg = dataclasses.replace(Reason1Config.tiny(), hidden_size=128, num_attention_heads=8,
                              num_key_value_heads=8)
    return Reason1TextModel(cfg, keys=6), cfg.vocab_size


def _forward(model, ids, mask):
    """Every output as the model returns it (no reshape that would gather them)."""
    return model(ids, mask)


_run = nnx.jit(_forward)


def _encoder_case(build):
    model, vocab = build()
    rng = np.random.default_rng(3)
    ids = rng.integers(1, vocab, (B, 16)).astype(np.int32)
    mask = np.ones((B, 16), np.int32)
    mask[1, 11:] = 0                                     # a padded prompt
    return model, ids, mask


def _sp8(model, ids, mask, run=_run):
    mesh = sharding.make_mesh("sp=8,fsdp=1")
    with sharding.use_mesh(mesh):
        args = [sharding.shard_batch(a, mesh) for a in (ids, mask)]
        out = [np.asarray(o) for o in jax.tree.leaves(run(model, *args))]
        return out, run.lower(model, *args).compile().as_text()


@pytest.mark.slow       # 6-10 s each (three compiles of a model)
@pytest.mark.parametrize("build", [_t5, _llama, _clip], ids=["t5", "llama3", "clip_text"])
def test_text_encoders_with_masks_are_ulysses(build):
    model, ids, mask = _encoder_case(build)
    refs = jax.tree.leaves(_run(model, ids, mask))
    outs, hlo = _sp8(model, ids, mask)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        _close(out, ref)
    assert_ulysses(hlo, [16], 8)


@pytest.mark.slow       # ~6 s
def test_negative_control_a_text_encoder_without_ulysses(monkeypatch):
    model, ids, mask = _encoder_case(_reason1)
    assert_ulysses(_sp8(model, ids, mask)[1], [16], 8)
    monkeypatch.setenv(attn.SP_ENV_VAR, "0")     # read when traced: a fresh jit
    hlo = _sp8(model, ids, mask, nnx.jit(lambda *a: _forward(*a)))[1]
    with pytest.raises(AssertionError, match="no all-to-all"):
        assert_ulysses(hlo, [16], 8)
