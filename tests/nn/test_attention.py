"""The CPU blocked attention kernel equals XLA's attention, and is what the automatic
choice takes on CPU for long unmasked attention only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.nn.attention import CPU_BLOCKED_MIN_QUERIES, attention, choose_implementation

jax.config.update("jax_default_matmul_precision", "highest")


def _qkv(lq, lk, dtype, seed=0):
    rng = np.random.default_rng(seed)
    shape = lambda n: (2, n, 4, 32)  # noqa: E731
    return [jnp.asarray(rng.standard_normal(shape(n)), dtype) for n in (lq, lk, lk)]


@pytest.mark.parametrize("lq,lk", [(2500, 300), (1024, 1024), (7, 9)])
def test_blocked_equals_xla(lq, lk):
    q, k, v = _qkv(lq, lk, jnp.float32)
    ref = attention(q, k, v, implementation="xla")
    out = attention(q, k, v, implementation="blocked")
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, atol=1e-5 * float(jnp.std(ref)))
    scaled = attention(q, k, v, implementation="blocked", scale=1.0)
    np.testing.assert_allclose(scaled, attention(q, k, v, implementation="xla", scale=1.0),
                               atol=1e-5)


def test_blocked_bf16_close_to_xla():
    q, k, v = _qkv(2100, 200, jnp.bfloat16)
    ref = attention(q, k, v, implementation="xla").astype(jnp.float32)
    out = attention(q, k, v, implementation="blocked")
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=2e-2)


def test_automatic_choice_on_cpu():
    long_q = jnp.zeros((1, CPU_BLOCKED_MIN_QUERIES, 2, 16))
    short_q = jnp.zeros((1, 257, 2, 16))
    assert choose_implementation(long_q, backend="cpu")[0] == "blocked"
    assert choose_implementation(long_q, has_mask=True, backend="cpu")[0] == "xla"
    assert choose_implementation(long_q, has_bias=True, backend="cpu")[0] == "xla"
    assert choose_implementation(short_q, backend="cpu")[0] == "xla"
    assert choose_implementation(long_q.astype(jnp.bfloat16), backend="gpu")[0] == "cudnn"
