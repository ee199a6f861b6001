"""The low-precision matmul and attention backward passes (custom VJPs) against float32
autodiff of the same functions: equal within bf16 rounding."""

import jax
import jax.numpy as jnp
import numpy as np

from easylemur.models.llama import _attend, attention_mask, low_precision_matmul


def _rel(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.abs(a - b).max() / np.abs(b).max()


def test_low_precision_matmul_gradients():
    kx, kk, kc = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (64, 48)).astype(jnp.bfloat16)
    k = jax.random.normal(kk, (48, 80)).astype(jnp.bfloat16)
    ct = jax.random.normal(kc, (64, 80))
    f_lp = lambda x, k: jnp.sum(low_precision_matmul(x, k, jnp.dtype(jnp.float32)) * ct)
    f_32 = lambda x, k: jnp.sum((x.astype(jnp.float32) @ k.astype(jnp.float32)) * ct)
    np.testing.assert_allclose(f_lp(x, k), f_32(x, k), rtol=1e-5)
    for a, b in zip(jax.grad(f_lp, (0, 1))(x, k), jax.grad(f_32, (0, 1))(x, k)):
        assert a.dtype == jnp.bfloat16
        assert _rel(a, b) < 1e-2


def test_low_precision_attention_gradients():
    B, T, KV, G, hd = 2, 24, 2, 2, 16
    kq, kk, kv, kc = jax.random.split(jax.random.PRNGKey(1), 4)
    q = jax.random.normal(kq, (B, T, KV, G, hd))
    k = jax.random.normal(kk, (B, T, KV, hd))
    v = jax.random.normal(kv, (B, T, KV, hd))
    ct = jax.random.normal(kc, (B, T, KV, G, hd))
    seg = jnp.asarray(np.array([[1] * 14 + [2] * 10, [1] * 24]))
    idx = jnp.arange(T)
    mask = attention_mask(seg, seg, idx, idx)
    lo = lambda *a: jnp.sum(_attend(*[t.astype(jnp.bfloat16) for t in a], mask, jnp.bfloat16).astype(jnp.float32) * ct)
    hi = lambda *a: jnp.sum(_attend(*[t.astype(jnp.bfloat16).astype(jnp.float32) for t in a], mask, jnp.float32) * ct)
    assert _rel(lo(q, k, v), hi(q, k, v)) < 2e-2
    for a, b in zip(jax.grad(lo, (0, 1, 2))(q, k, v), jax.grad(hi, (0, 1, 2))(q, k, v)):
        assert _rel(a, b) < 3e-2
