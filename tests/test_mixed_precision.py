"""The low-precision matmul and attention backward passes (custom VJPs) against float32
autodiff of the same functions: equal within bf16 rounding."""

import jax
import jax.numpy as jnp
import numpy as np

from easylemur.model.attention import _attend, attention_mask
from easylemur.model.llama import low_precision_matmul

import pytest


def _rel(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.slow
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


@pytest.mark.slow
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
    lo = lambda *a: jnp.sum(_attend(*[t.astype(jnp.bfloat16) for t in a], mask).astype(jnp.float32) * ct)
    hi = lambda *a: jnp.sum(_attend(*[t.astype(jnp.bfloat16).astype(jnp.float32) for t in a], mask) * ct)
    assert _rel(lo(q, k, v), hi(q, k, v)) < 2e-2
    for a, b in zip(jax.grad(lo, (0, 1, 2))(q, k, v), jax.grad(hi, (0, 1, 2))(q, k, v)):
        assert _rel(a, b) < 3e-2


def _dot_generals(jaxpr):
    """Every dot_general of a jaxpr, those of its sub-jaxprs (jit, custom_vjp_call, ...) too."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _dot_generals(sub)


@pytest.mark.slow
def test_bf16_model_backward_matmuls_take_bf16_inputs():
    """The custom VJPs are what keeps the backward pass in bf16: plain autodiff of a matmul that
    accumulates in float32 hands its float32 cotangent to the backward matmuls, which then run
    in float32 (the gradient values above would still agree). So: in the program jax.grad
    builds for a bf16-compute model with float32 params, every matmul, forward and backward,
    takes bf16 operands and accumulates in float32."""
    from easylemur.model.config import LlamaConfig
    from easylemur.model.llama import Llama, init_params

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1, num_heads=4,
                      num_kv_heads=2, dtype="bfloat16", param_dtype="float32")
    params = init_params(cfg, jax.random.PRNGKey(0))
    ids = jnp.asarray(np.arange(16).reshape(2, 8) % cfg.vocab_size)

    def loss(p):
        return jnp.mean(Llama(cfg).apply({"params": p}, ids) ** 2)

    forward = list(_dot_generals(jax.make_jaxpr(loss)(params).jaxpr))
    dots = list(_dot_generals(jax.make_jaxpr(jax.grad(loss))(params).jaxpr))
    # 7 projections + lm_head (forward, d_input, d_kernel) and attention (2 forward, 4 backward)
    assert len(forward) == 10 and len(dots) == 30, (len(forward), len(dots))
    bad = [(str(e.invars[0].aval), str(e.invars[1].aval), e.params["preferred_element_type"])
           for e in dots if [v.aval.dtype for v in e.invars] != [jnp.bfloat16] * 2
           or e.params["preferred_element_type"] != jnp.float32]
    assert not bad, f"{len(bad)} of {len(dots)} matmuls of the gradient are not bf16 x bf16 -> f32: {bad}"
