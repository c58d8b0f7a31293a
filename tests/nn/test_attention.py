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


@pytest.mark.parametrize("implementation", ["xla", "blocked"])
def test_grouped_query_attention_shares_each_key_value_head(implementation):
    """4 query heads on 2 key/value heads: query heads 0-1 read key/value head 0 and 2-3
    head 1 (transformers' repeat_kv), computed here by hand, head by head."""
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((2, 9, 4, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((2, 11, 2, 8)), jnp.float32) for _ in range(2))
    mask = jnp.asarray(rng.random((2, 1, 9, 11)) > 0.3).at[..., 0].set(True)
    out = attention(q, k, v, mask=mask if implementation == "xla" else None,
                    implementation=implementation)
    for h in range(4):
        logits = jnp.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, h // 2]) / np.sqrt(8.0)
        if implementation == "xla":
            logits = jnp.where(mask[:, 0], logits, -jnp.inf)
        expected = jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(logits, -1), v[:, :, h // 2])
        np.testing.assert_allclose(out[:, :, h], expected, atol=1e-5)
    # the other pairing (head h reads h % 2, "tiled") must differ
    wrong = jnp.einsum("bqd,bkd->bqk", q[:, :, 1], k[:, :, 1]) / np.sqrt(8.0)
    if implementation == "xla":
        wrong = jnp.where(mask[:, 0], wrong, -jnp.inf)
    wrong = jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(wrong, -1), v[:, :, 1])
    assert not np.allclose(out[:, :, 1], wrong, atol=1e-3)
    with pytest.raises(Exception, match="cannot share"):
        attention(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2))
