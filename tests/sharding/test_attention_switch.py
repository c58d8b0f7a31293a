"""``vidax.nn.attention.attention``: the kernel choice, its override and log, Ulysses sequence
parallelism and the shard_map wrapping of kernels XLA cannot partition. Same bound as the
DiT tests: max |diff| <= 1e-4 x std of the one-device output."""

from __future__ import annotations

import importlib
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax import sharding
from vidax.errors import VidaxError

# The module (vidax.nn re-exports the function under the same name).
attn = importlib.import_module("vidax.nn.attention")

B, L, H, D = 2, 64, 8, 16


@pytest.fixture
def qkv():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((B, L, H, D)).astype(np.float32) for _ in range(3))


@pytest.fixture
def kernels(monkeypatch):
    """The kernel table, restored after the test."""
    monkeypatch.setattr(attn, "_KERNELS", dict(attn._KERNELS))
    monkeypatch.delenv(attn.ENV_VAR, raising=False)
    return attn._KERNELS


def _close(out, ref):
    ref = np.asarray(ref)
    diff = float(np.abs(np.asarray(out) - ref).max())
    assert diff <= 1e-4 * ref.std(), diff


def test_automatic_choice(kernels):
    bf16 = jnp.zeros((1, 4, 2, 128), jnp.bfloat16)
    f32 = jnp.zeros((1, 4, 2, 128), jnp.float32)
    choose = attn.choose_implementation
    assert choose(f32, backend="cpu")[0] == "xla"
    assert choose(bf16, backend="gpu")[0] == "cudnn"
    assert choose(bf16.astype(jnp.float16), backend="gpu")[0] == "cudnn"
    assert choose(f32, backend="gpu") == ("xla", "GPU, float32 inputs (cuDNN flash attention "
                                                 "takes bf16/fp16)")
    assert choose(jnp.zeros((1, 4, 2, 256), jnp.bfloat16), backend="gpu")[0] == "xla"
    assert choose(bf16, has_bias=True, backend="gpu")[0] == "xla"
    assert choose(bf16, backend="tpu")[0] == "xla"
    attn.register_kernel("splash", lambda q, k, v, **kw: q)
    assert choose(bf16, backend="tpu")[0] == "splash"
    assert choose(f32)[0] == "xla"     # this machine: CPU


def test_override_and_errors(kernels, monkeypatch, qkv):
    q, k, v = qkv
    monkeypatch.setenv(attn.ENV_VAR, "bogus")
    with pytest.raises(VidaxError, match="unknown attention implementation 'bogus'"):
        attn.attention(q, k, v)
    monkeypatch.setenv(attn.ENV_VAR, "cudnn")
    with pytest.raises(VidaxError, match="bfloat16 or float16 inputs, got float32"):
        attn.attention(q, k, v)
    monkeypatch.setenv(attn.ENV_VAR, "splash")
    with pytest.raises(VidaxError, match=r"register_kernel\('splash', fn\)"):
        attn.attention(q, k, v)
    # The argument wins over the environment.
    _close(attn.attention(q, k, v, implementation="xla"),
           jax.nn.dot_product_attention(q, k, v))


def test_the_choice_is_logged_once(kernels, qkv, caplog):
    attn._log_once.cache_clear()
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        for _ in range(3):
            attn.attention(*qkv)
    assert [r.getMessage() for r in caplog.records] == [
        f"attention kernel: xla (cpu); override with implementation= or {attn.ENV_VAR}"]


def _compiled(fn, *args):
    return jax.jit(fn).lower(*args).compile().as_text()


def test_ulysses_self_attention_and_local_cross_attention(kernels, qkv):
    q, k, v = qkv
    ref = jax.nn.dot_product_attention(q, k, v)
    mesh = sharding.make_mesh("sp=8,fsdp=1")
    with sharding.use_mesh(mesh):
        _close(jax.jit(attn.attention)(q, k, v), ref)
        assert "all-to-all" in _compiled(attn.attention, q, k, v)
        # Cross-attention (keys of another length): queries stay split, no exchange.
        kc, vc = k[:, :24], v[:, :24]
        _close(jax.jit(attn.attention)(q, kc, vc), jax.nn.dot_product_attention(q, kc, vc))
        assert "all-to-all" not in _compiled(attn.attention, q, kc, vc)
        # A mask rides beside q/k/v (tests/sharding/test_masked_sp.py covers the kinds).
        mask = np.tril(np.ones((L, L), bool))[None, None]
        masked = lambda q, k, v: attn.attention(q, k, v, mask=mask)  # noqa: E731
        _close(jax.jit(masked)(q, k, v), jax.nn.dot_product_attention(q, k, v, mask=mask))
        assert "all-to-all" in _compiled(masked, q, k, v)


def test_what_sequence_parallelism_cannot_split(kernels, qkv, caplog):
    """12 heads on sp=8 (Wan2.1-1.3B's case): an error where the model requires the split,
    else XLA's own partitioning with a warning; likewise a token count that does not divide."""
    rng = np.random.default_rng(1)
    q12, k12, v12 = (rng.standard_normal((B, L, 12, D)).astype(np.float32) for _ in range(3))
    mesh = sharding.make_mesh("sp=8,fsdp=1")
    strict = jax.jit(lambda q, k, v: attn.attention(q, k, v, sequence_parallel=True))
    with sharding.use_mesh(mesh):
        with pytest.raises(VidaxError, match=r"self-attention: the head count 12 is not "
                                             r"divisible by sp=8 \(sp must divide 12: one of "
                                             r"1, 2, 3, 4, 6, 12\)\. vidax does not pad"):
            strict(q12, k12, v12)
        q, k, v = (t[:, :60] for t in qkv)
        with pytest.raises(VidaxError, match="the token count 60 is not divisible by sp=8") as e:
            strict(q, k, v)
        assert "head count" not in str(e.value)

        attn._warn_once.cache_clear()
        with caplog.at_level(logging.WARNING, logger="vidax.attention"):
            loose = jax.jit(attn.attention)
            _close(loose(q12, k12, v12), jax.nn.dot_product_attention(q12, k12, v12))
        assert "head count 12 is not divisible by sp=8" in caplog.text
        assert "left to XLA's partitioner" in caplog.text
        assert "all-to-all" not in _compiled(attn.attention, q12, k12, v12)
        off = lambda q, k, v: attn.attention(q, k, v, sequence_parallel=False)  # noqa: E731
        assert "all-to-all" not in _compiled(off, *qkv)


def test_a_kernel_xla_cannot_partition_sees_one_device_block(kernels, qkv):
    """A registered Pallas-like kernel (``needs_shard_map``) is run inside shard_map: on
    dp=2 x sp=2 x tp=2 it sees [B/2, L, H/(sp*tp), D] blocks (after the Ulysses exchange)."""
    seen = []

    def kernel(q, k, v, *, mask, bias, scale):
        seen.append(q.shape)
        return jax.nn.dot_product_attention(q, k, v, scale=scale)

    attn.register_kernel("splash", kernel, needs_shard_map=True)
    q, k, v = qkv
    mesh = sharding.make_mesh("dp=2,fsdp=1,sp=2,tp=2")
    with sharding.use_mesh(mesh):
        out = jax.jit(lambda q, k, v: attn.attention(q, k, v, implementation="splash"))(q, k, v)
    _close(out, jax.nn.dot_product_attention(q, k, v))
    assert seen == [(B // 2, L, H // 4, D)]
    seen.clear()
    mesh = sharding.make_mesh("dp=2,fsdp=1,tp=4")
    with sharding.use_mesh(mesh):
        jax.jit(lambda q, k, v: attn.attention(q, k, v, implementation="splash"))(q, k, v)
    assert seen == [(B // 2, L, H // 4, D)]
