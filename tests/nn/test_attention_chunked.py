"""The "chunked" attention kernel (queries and keys in blocks, online softmax) and the
attention budget that makes it the automatic choice (``vidax.nn.attention``).

Oracle: ``jax.nn.dot_product_attention``'s XLA lowering (the "xla" kernel) on the same
inputs. Bound: float32 at matmul precision "highest", max |chunked - xla| <= 1e-4 x std of
the xla output (bfloat16: a stated looser bound). Small blocks (``q_block`` / ``k_block``
that do not divide the lengths) so every case runs several query and key blocks with padded
last blocks. Negative controls: a perturbed logit scale and keys padded without being masked
out must exceed the bound.

Memory: the compiled programs' ``memory_analysis().temp_size_in_bytes`` at L = 4096, H = 2,
D = 64 (the xla kernel holds at least the ``[B, H, L, L]`` float32 logits; the chunked kernel
a few ``[B, H, 512, 1024]`` blocks), and memory.attention_logits's estimate of the chunked
kernel against it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity import assert_fails, assert_parity
from tests.sharding.common import parse_collectives
from vidax import sharding
from vidax.errors import VidaxError
from vidax.pipelines import memory

jax.config.update("jax_default_matmul_precision", "highest")
attn = importlib.import_module("vidax.nn.attention")


@functools.partial(jax.jit, static_argnames=("scale", "q_block", "k_block"))
def chunked(q, k, v, mask=None, bias=None, scale=None, **blocks):
    """The kernel, jitted (its scans would otherwise compile op by op)."""
    return attn.chunked_attention(q, k, v, mask=mask, bias=bias, scale=scale, **blocks)


@functools.partial(jax.jit, static_argnames=("scale", "implementation"))
def _entry(q, k, v, mask=None, bias=None, scale=None, implementation=None):
    return attn.attention(q, k, v, mask=mask, bias=bias, scale=scale,
                          implementation=implementation)

BLOCKS = dict(q_block=64, k_block=48)     # neither divides any length below


@pytest.fixture(autouse=True)
def _no_budget(monkeypatch):
    """Every test starts without a budget and without kernel overrides, and leaves none."""
    monkeypatch.delenv(attn.BUDGET_ENV_VAR, raising=False)
    monkeypatch.delenv(attn.ENV_VAR, raising=False)
    monkeypatch.setattr(attn, "_budget", attn._UNSET)
    monkeypatch.setattr(attn, "_KERNELS", dict(attn._KERNELS))


def _arrays(*shapes, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(s), dtype) for s in shapes]


def _qkv(lq, lk, heads=4, kv_heads=None, d=32, b=2, dtype=jnp.float32):
    kv = kv_heads or heads
    return _arrays((b, lq, heads, d), (b, lk, kv, d), (b, lk, kv, d), dtype=dtype)


def _xla(q, k, v, **kw):
    return attn.attention(q, k, v, implementation="xla", **kw)


def _masks(kind, b=2, h=4, lq=150, lk=150):
    """(mask, bias) of one kind, in the shapes the models pass."""
    rng = np.random.default_rng(3)
    if kind == "none":
        return None, None
    if kind == "key_padding":                       # a DiT's text padding [B, 1, 1, Lk]
        keys = np.ones((b, 1, 1, lk), bool)
        keys[0, ..., lk - 37:] = False
        return jnp.asarray(keys), None
    if kind == "causal":                            # a text encoder's [B, 1, L, L]
        causal = np.tril(np.ones((lq, lk), bool))[None, None].repeat(b, 0)
        causal[1, ..., :3] = False                  # left padding of row 1
        causal[1, 0, :3, 3] = True                  # (its first queries see one key)
        return jnp.asarray(causal), None
    if kind == "t5_bias":                           # T5's relative bias [B, H, Lq, Lk]
        bias = jnp.asarray(rng.standard_normal((b, h, lq, lk)) * 3, jnp.float32)
        keys = np.ones((b, 1, 1, lk), bool)
        keys[1, ..., -20:] = False
        return jnp.asarray(keys), bias
    raise ValueError(kind)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("lq,lk,kind", [
    (150, 150, "none"),            # self-attention, lengths not multiples of the blocks
    (200, 77, "none"),             # cross-attention over text-like keys
    (150, 150, "key_padding"),
    (150, 150, "causal"),
    (150, 130, "t5_bias"),
])
def test_chunked_equals_xla(lq, lk, kind):
    q, k, v = _qkv(lq, lk)
    mask, bias = _masks(kind, lq=lq, lk=lk)
    ref = _xla(q, k, v, mask=mask, bias=bias)
    out = chunked(q, k, v, mask=mask, bias=bias, scale=None, **BLOCKS)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert_parity(f"chunked {kind} {lq}x{lk}", out, ref)
    if kind == "t5_bias":   # T5's scale of 1 and the default blocks, through the entry point
        ref1 = _xla(q, k, v, mask=mask, bias=bias, scale=1.0)
        assert_parity("chunked scale 1", _entry(q, k, v, mask, bias, scale=1.0,
                                                implementation="chunked"), ref1)


def test_grouped_query_attention():
    """8 query heads over 2 key/value heads, as the entry point hands them to every kernel
    (repeated), and straight into the kernel (which repeats them itself)."""
    q, k, v = _qkv(130, 100, heads=8, kv_heads=2)
    mask = jnp.asarray(np.random.default_rng(5).random((2, 1, 130, 100)) > 0.3)
    ref = _xla(q, k, v, mask=mask)
    assert_parity("chunked GQA", _entry(q, k, v, mask, implementation="chunked"), ref)
    assert_parity("chunked GQA (kernel)", chunked(q, k, v, mask=mask, **BLOCKS), ref)


def test_bfloat16_inputs():
    """bf16 q/k/v: float32 logits and softmax, bf16 probabilities times values with float32
    accumulation, a bf16 output -- like the xla kernel; they differ by the bf16 roundings
    (of the probabilities, per key block here, per row there; of the output). Stated bounds:
    max |chunked - xla| <= 2 bf16 ulps of the largest output (2^-7 x max |xla|; measured one
    ulp, 3.9e-3 = 2.7e-2 x std), and against float32 attention on the same (bf16-valued)
    inputs the chunked kernel's error is at most 1.25 x the xla kernel's (measured 2.85e-3
    vs 3.14e-3)."""
    q, k, v = _qkv(150, 150, dtype=jnp.bfloat16)
    mask, _ = _masks("key_padding")
    ref = _xla(q, k, v, mask=mask).astype(jnp.float32)
    out = chunked(q, k, v, mask=mask, **BLOCKS)
    assert out.dtype == jnp.bfloat16
    out = out.astype(jnp.float32)
    truth = _xla(*(t.astype(jnp.float32) for t in (q, k, v)), mask=mask)
    diff = float(jnp.abs(out - ref).max())
    errors = [float(jnp.abs(a - truth).max()) for a in (out, ref)]
    print(f"chunked bf16: max|chunked - xla| {diff:.3e} (std {float(ref.std()):.4f}); "
          f"max|. - float32| chunked {errors[0]:.3e}, xla {errors[1]:.3e}")
    assert diff <= 2**-7 * float(jnp.abs(ref).max())
    assert errors[0] <= 1.25 * errors[1]


def test_fully_masked_rows_match_xla():
    """A query whose every key is masked: the xla kernel sets masked logits to -0.7 x the
    float32 maximum (not -inf), so such a row is the mean of the values over all (real) keys;
    the chunked kernel does the same, its padded keys excluded. A row whose additive bias is
    -inf everywhere is NaN in both (0 / 0); -inf on some keys only is exact in both."""
    q, k, v = _qkv(100, 70)
    mask = np.ones((2, 1, 100, 70), bool)
    mask[0] = False                                 # batch row 0: every key masked
    mask[1, 0, 10:20] = False                       # some queries of row 1
    mask = jnp.asarray(mask)
    ref = _xla(q, k, v, mask=mask)
    out = chunked(q, k, v, mask=mask, **BLOCKS)
    assert_parity("chunked fully masked", out, ref)
    np.testing.assert_allclose(out[0], jnp.broadcast_to(v[0].mean(0), out[0].shape),
                               atol=1e-6)
    bias = np.zeros((1, 1, 100, 70), np.float32)
    bias[..., 5, :] = -np.inf                       # all keys of query 5
    bias[..., 6:, 60:] = -np.inf                    # the last key block of the others
    bias[..., 40:, :48] = -np.inf                   # the first key block of some
    ref, out = _xla(q, k, v, bias=bias), chunked(q, k, v, bias=bias, **BLOCKS)
    assert np.isnan(ref[:, 5]).all() and np.isnan(out[:, 5]).all()
    keep = np.r_[0:5, 6:100]
    assert np.isfinite(out[:, keep]).all()
    assert_parity("chunked -inf bias", out[:, keep], ref[:, keep])


def test_negative_controls():
    """The bound sees a 0.5 % error of the logit scale, and keys padded to the blocks without
    being masked out (what the kernel's padded-key mask prevents)."""
    q, k, v = _qkv(150, 130)
    ref = _xla(q, k, v)
    assert_fails("chunked, scale x 1.005", chunked(q, k, v, scale=1.005 / np.sqrt(32),
                                                   **BLOCKS), ref)
    pad = ((0, 0), (0, 144 - 130), (0, 0), (0, 0))   # 130 keys -> 3 blocks of 48
    assert_fails("chunked, padded keys attended", chunked(q, jnp.pad(k, pad), jnp.pad(v, pad),
                                                          **BLOCKS), ref)


def test_bad_mask_shape():
    q, k, v = _qkv(20, 30)
    with pytest.raises(VidaxError, match="does not broadcast"):
        chunked(q, k, v, mask=jnp.ones((2, 1, 1, 29), bool))


# ----------------------------------------------------------------------------- memory
B, L, H, D = 1, 4096, 2, 64


def _temp_bytes(fn, *shapes):
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_compiled_memory():
    """At L = 4096: the xla kernel's temporaries hold at least the [1, 2, 4096, 4096] float32
    logits (128 MiB; measured 256 MiB, two copies), the chunked kernel's under 4 blocks of
    [1, 2, 512, 1024] float32 logits (4 MiB each; measured ~2.25 blocks, 9.0 MiB: the block's
    logits and exponentials, the running output and the stacked output blocks). The memory
    estimate of the chunked kernel (memory.attention_logits under a budget) covers it
    without exceeding 3x."""
    shape = (B, L, H, D)
    logits = B * H * L * L * 4
    block = B * H * attn.CHUNK_QUERY_BLOCK * attn.CHUNK_KEY_BLOCK * 4
    xla = _temp_bytes(lambda q, k, v: _xla(q, k, v), shape, shape, shape)
    chunk = _temp_bytes(lambda q, k, v: chunked(q, k, v), shape, shape, shape)
    print(f"temp bytes at L={L}: xla {xla} ({xla / logits:.2f} x logits), chunked {chunk} "
          f"({chunk / block:.2f} x block logits)")
    assert xla >= logits
    assert chunk < 4 * block
    with attn.budget(0):
        estimate, kernel = memory.attention_logits(B, H, L, L, D, jnp.float32, "cpu")
    assert kernel == "chunked"
    assert chunk <= estimate <= 3 * chunk, (chunk, estimate)
    assert (memory.logits_shape(B, H, L, L, kernel) == "[1, 2, 512, 1024] (chunked)")
    # without a budget the estimate is what it was: the blocked kernel's [1, 2, 512, 4096]
    assert memory.attention_logits(B, H, L, L, D, jnp.float32, "cpu")[1] == "blocked"
    # a DiT step's estimate on a GPU in float32 (xla's [2, 8, 16384, 16384] logits otherwise)
    g = memory.DiTGeometry(batch=2, tokens=16384, dim=512, heads=8, ffn=2048, context=64)
    whole = memory.dit_step(g, jnp.float32, "gpu")
    with attn.budget(2**30):
        chunk_step = memory.dit_step(g, jnp.float32, "gpu")
    assert "xla" in whole.note and "chunked" in chunk_step.note, (whole, chunk_step)
    assert chunk_step.bytes < whole.bytes / 50
    assert "(chunked)" not in chunk_step.largest[0]      # the MLP's hidden layer is larger


# ----------------------------------------------------------------------------- budget
def test_budget_switches_the_automatic_choice(monkeypatch):
    choose = attn.choose_implementation
    f32 = jnp.zeros((1, L, H, D), jnp.float32)
    bf16 = f32.astype(jnp.bfloat16)
    logits = B * H * L * L * 4                                 # xla's, 128 MiB
    blocked = B * H * attn.CPU_QUERY_BLOCK * L * 4            # one query block, 16 MiB
    before = {(backend, x.dtype.name, m): choose(x, has_mask=m, backend=backend)
              for backend in ("cpu", "gpu", "tpu") for x in (f32, bf16) for m in (False, True)}
    assert attn.get_budget() is None
    with attn.budget(logits - 1):
        assert attn.get_budget() == logits - 1
        name, why = choose(f32, backend="gpu")
        assert name == "chunked" and "exceed the attention budget" in why, why
        assert choose(f32, backend="gpu", keys=100)[0] == "xla"          # short keys fit
        assert choose(bf16, has_mask=True, backend="tpu")[0] == "chunked"
        assert choose(f32, has_mask=True, backend="cpu")[0] == "chunked"
        assert choose(f32, backend="cpu")[0] == "blocked"               # 16 MiB fit
        assert choose(bf16, backend="gpu")[0] == "cudnn"                # unaffected
        assert choose(f32, backend="gpu", local_shape=(1, 1, L, L))[0] == "xla"
    with attn.budget(blocked - 1):
        assert choose(f32, backend="cpu")[0] == "chunked"
        attn.register_kernel("splash", lambda q, k, v, **kw: q)
        assert choose(bf16, backend="tpu")[0] == "splash"               # unaffected
        del attn._KERNELS["splash"]
    assert attn.get_budget() is None
    assert before == {(backend, x.dtype.name, m): choose(x, has_mask=m, backend=backend)
                      for backend in ("cpu", "gpu", "tpu") for x in (f32, bf16)
                      for m in (False, True)}
    # the environment variable gives the initial budget; set_budget overrides it
    monkeypatch.setenv(attn.BUDGET_ENV_VAR, "64MiB")
    assert attn.get_budget() == 64 * 2**20
    assert choose(f32, backend="gpu")[0] == "chunked"
    monkeypatch.setenv(attn.BUDGET_ENV_VAR, "1.5 GB")
    assert attn.get_budget() == 1_500_000_000
    attn.set_budget(None)
    assert attn.get_budget() is None and choose(f32, backend="gpu")[0] == "xla"
    monkeypatch.setenv(attn.BUDGET_ENV_VAR, "lots")
    monkeypatch.setattr(attn, "_budget", attn._UNSET)       # nothing set: the variable
    with pytest.raises(VidaxError, match="expected a number of bytes"):
        attn.get_budget()
    for bad in (-1, 1.5, True):
        with pytest.raises(VidaxError, match="number of bytes"):
            attn.set_budget(bad)


def _spy(monkeypatch, **blocks):
    """Record the kernels the entry point calls; the chunked one with small blocks."""
    calls = []

    def wrap(name, fn):
        def kernel(*a, **kw):
            calls.append(name)
            return fn(*a, **kw)
        return kernel

    for name, kernel in list(attn._KERNELS.items()):
        fn = functools.partial(chunked, **blocks) if name == "chunked" and blocks else kernel.fn
        attn._KERNELS[name] = attn.Kernel(wrap(name, fn), kernel.needs_shard_map)
    return calls


def test_budget_in_the_entry_point_is_logged_once(monkeypatch, caplog):
    calls = _spy(monkeypatch)
    q, k, v = _qkv(150, 77, b=1)
    mask, _ = _masks("key_padding", b=1, lk=77)
    ref = _xla(q, k, v, mask=mask)
    with caplog.at_level(logging.INFO, logger="vidax.attention"), attn.budget(10_000):
        for _ in range(2):
            out = attn.attention(q, k, v, mask=mask)
    assert calls == ["xla", "chunked", "chunked"]
    assert_parity("budget entry point", out, ref)
    messages = [r.getMessage() for r in caplog.records if "[1, 4, 150, 77]" in r.getMessage()]
    assert len(messages) == 1 and messages[0].startswith("attention kernel: chunked (cpu; "), \
        messages


@pytest.mark.parametrize("spec", ["sp=8,fsdp=1", "dp=2,fsdp=1,sp=2,tp=2"])
def test_chunked_under_sequence_parallelism(monkeypatch, spec):
    """On an sp mesh the kernel runs on each device's block inside the Ulysses shard_map
    (all-to-alls in the program), the mask/bias sliced per device; the budget is compared with
    that block's logits ([B / dp, H / (tp sp), L, L]), not the global ones."""
    calls = _spy(monkeypatch, **BLOCKS)
    q, k, v = _qkv(128, 128, heads=8)
    mask, bias = _masks("t5_bias", h=8, lq=128, lk=128)
    ref = jax.nn.dot_product_attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    mesh = sharding.make_mesh(spec)
    local = 2 * 1 * 128 * 128 * 4 if spec.startswith("sp=8") else 1 * 2 * 128 * 128 * 4
    with sharding.use_mesh(mesh):
        def traced():    # a new function each time: jit keeps the kernel it traced with
            return jax.jit(lambda q, k, v, m, b: attn.attention(q, k, v, mask=m, bias=b,
                                                                scale=0.3))

        with attn.budget(local):                    # fits: traced only
            jax.eval_shape(traced(), q, k, v, mask, bias)
        assert calls == ["xla"], calls
        calls.clear()
        fn = traced()
        with attn.budget(local - 1):
            assert_parity(f"{spec} chunked", fn(q, k, v, mask, bias), ref)
            found = parse_collectives(fn.lower(q, k, v, mask, bias).compile().as_text())
        assert calls == ["chunked"], calls
        assert any(c.op == "all-to-all" for c in found)


def test_a_model_under_a_budget(monkeypatch):
    """The tiny Wan2.1 DiT (one block; random values in every parameter, ~1/sqrt(fan-in),
    placed into its abstract tree -- faster than its initialisers) under a budget of one
    byte -- every attention chunked, in blocks of 32 queries x 20 keys -- equals its
    unbudgeted forward."""
    from flax import nnx

    from vidax.models.wan2_1.dit import WanDiT, WanDiTConfig

    cfg = dataclasses.replace(WanDiTConfig.tiny(), num_layers=1)
    graph, params = nnx.split(nnx.eval_shape(lambda: WanDiT(cfg, keys=0)))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda p: jnp.asarray(
        rng.standard_normal(p.shape) / np.sqrt(p.shape[0] if p.ndim > 1 else 10), p.dtype),
        params)
    model = nnx.merge(graph, params)
    x, = _arrays((1, 3, 8, 12, 16), seed=1)
    context, = _arrays((1, 12, 32), seed=2)
    t = jnp.asarray([500.0])
    ref = nnx.jit(lambda m, x, t, c: m(x, t, c))(model, x, t, context)
    calls = _spy(monkeypatch, q_block=32, k_block=20)
    with attn.budget(1):
        out = nnx.jit(lambda m, x, t, c: m(x, t, c))(model, x, t, context)
    assert set(calls) == {"chunked"} and len(calls) >= 2, calls
    assert float(jnp.std(ref)) > 0
    assert_parity("Wan2.1 tiny DiT under a budget", out, ref)
