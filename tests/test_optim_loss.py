"""The loss averages over trained tokens (not rows); weight decay skips norms."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from easylemur.config import default_config
from easylemur.ops.loss import head_loss_sum, target_weights, token_loss_sum
from easylemur.model.config import PRESETS
from easylemur.model.llama import init_params
from easylemur.train.optim import decay_mask, make_optimizer, schedule

import pytest


def _batch(mask, seg):
    mask, seg = np.array(mask), np.array(seg)
    ids = np.arange(mask.size).reshape(mask.shape) % 7
    return {"input_ids": jnp.asarray(ids), "loss_mask": jnp.asarray(mask), "segment_ids": jnp.asarray(seg)}


def test_loss_is_mean_over_tokens_not_rows():
    # row 0 trains 1 token, row 1 trains 3: each token weighs 1/4, not each row 1/2
    b = _batch([[0, 1, 0, 0], [0, 1, 1, 1]], [[1, 1, 1, 1], [1, 1, 1, 1]])
    logits = np.zeros((2, 4, 7), np.float32)  # every prediction uniform over 7 ids: loss log 7 = 1.94591
    logits[0, 0, 1] = 2.0  # but row 0's one target (id 1, from position 0): loss log(e^2 + 6) - 2 = 0.594438
    s, n = token_loss_sum(jnp.asarray(logits), b)
    assert n == 4
    np.testing.assert_allclose(s / n, 1.6080420, rtol=1e-6)  # (0.594438 + 3 x 1.945910) / 4; per row: 1.270174


def test_no_target_across_documents_or_padding():
    b = _batch([[0, 1, 1, 0, 1, 0]], [[1, 1, 1, 2, 2, 0]])
    w = np.asarray(target_weights(b))[0]
    # targets are positions 1..5: [1 (seg1), 1 (seg1), BOS of seg2 -> 0, 1 (seg2), pad -> 0]
    assert w.tolist() == [1, 1, 0, 1, 0]


@pytest.mark.slow
def test_decay_mask_skips_norms():
    cfg = dataclasses.replace(PRESETS["tiny"], num_layers=1)
    params = jax.device_get(init_params(cfg, jax.random.PRNGKey(0)))
    m = decay_mask(params)
    assert m["layers_0"]["input_layernorm"]["scale"] is False
    assert m["norm"]["scale"] is False
    assert m["layers_0"]["mlp"]["up_proj"]["kernel"] is True
    assert m["embed_tokens"]["embedding"] is True
    assert decay_mask(params, decay_embeddings=False)["embed_tokens"]["embedding"] is False
    # a step with zero gradient: only decayed leaves move
    opt = default_config().optimizer
    opt.update({"lr": 0.1, "warmup_steps": 0, "schedule": "constant", "weight_decay": 0.5})
    tx, _ = make_optimizer(opt, 10)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zeros, tx.init(params), params)
    assert float(jnp.abs(updates["norm"]["scale"]).max()) == 0.0
    assert float(jnp.abs(updates["layers_0"]["mlp"]["up_proj"]["kernel"]).max()) > 0.0


def test_schedule_warmup_and_decay():
    opt = default_config().optimizer
    opt.update({"lr": 1.0, "warmup_steps": 10, "end_lr": 0.1, "schedule": "cosine"})
    s = schedule(opt, 110)
    assert float(s(0)) == 0.0 and abs(float(s(10)) - 1.0) < 1e-6
    assert abs(float(s(110)) - 0.1) < 1e-6
    opt.schedule = "linear"
    s = schedule(opt, 110)
    assert abs(float(s(60)) - 0.55) < 1e-6


@pytest.mark.slow
def test_chunked_head_loss_equals_full_logits():
    from easylemur.model.llama import Llama

    cfg = dataclasses.replace(PRESETS["tiny"], num_layers=1, vocab_size=301)
    params = init_params(cfg, jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    b = {"input_ids": jnp.asarray(rng.integers(0, 301, (2, 32))),
         "loss_mask": jnp.asarray(rng.integers(0, 2, (2, 32))),
         "segment_ids": jnp.asarray(np.array([[1] * 20 + [2] * 12, [1] * 30 + [0] * 2]))}
    model = Llama(cfg)
    logits = model.apply({"params": params}, b["input_ids"])
    hidden, _ = model.apply({"params": params}, b["input_ids"], return_hidden=True)
    ref_s, ref_n = token_loss_sum(logits, b)
    for chunk in (0, 8):
        s, n = head_loss_sum(hidden, params["lm_head"]["kernel"], b, chunk=chunk)
        assert n == ref_n
        np.testing.assert_allclose(s, ref_s, rtol=1e-6)


def test_first_step_learns_and_last_step_uses_end_lr():
    from easylemur.config import default_config

    opt = default_config().optimizer
    opt.update({"lr": 1.0, "warmup_steps": 2, "end_lr": 0.1, "schedule": "linear", "weight_decay": 0.0, "clip_norm": 0.0})
    tx, sched = make_optimizer(opt, 5)
    p = {"w": jnp.zeros(())}
    state = tx.init(p)
    lrs = []
    for _ in range(5):  # adam's first update is -lr * sign(g): read the rate off the update
        u, state = tx.update({"w": jnp.ones(())}, state, p)
        lrs.append(-float(u["w"]))
    np.testing.assert_allclose(lrs, [float(sched(s)) for s in range(1, 6)], rtol=1e-4)
    assert lrs[0] > 0 and abs(lrs[-1] - 0.1) < 1e-4


@pytest.mark.parametrize("spec", ["data:2,fsdp:2,tensor:2", "data:1,fsdp:8,tensor:1"])
def test_chunked_head_on_a_mesh_reduces_its_gradient_once(spec):
    """Rows split over data x fsdp and the head's logits in chunks: the gradients equal the whole
    logits' on one device, and the head is gathered and its gradient reduced once per step,
    not once per chunk (the bytes on the wire of 4 chunks are those of 2)."""
    from easylemur import sharding
    from easylemur.train.hlo_cost import collective_bytes

    mesh = sharding.make_mesh(spec)
    B, T, d, V = 8, 32, 16, 64
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    head = jnp.asarray(rng.normal(size=(d, V)) / 4, jnp.float32)
    b = {"input_ids": jnp.asarray(rng.integers(0, V, (B, T))), "loss_mask": jnp.asarray(rng.integers(0, 2, (B, T))),
         "segment_ids": jnp.asarray(np.repeat([[1] * 20 + [2] * 12], B, 0))}

    def whole(h, w):
        return token_loss_sum(jnp.einsum("btd,dv->btv", h, w), b)[0]

    ref = jax.grad(whole, argnums=(0, 1))(hidden, head)
    placed = (jax.device_put(hidden, sharding.named_sharding(("batch", None, None), hidden.shape, mesh)),
              jax.device_put(head, sharding.named_sharding(("embed", "vocab"), head.shape, mesh)),
              jax.device_put(b, sharding.batch_sharding(mesh)))
    wire = {}
    for chunk in (8, 16):
        grad = jax.jit(jax.grad(lambda h, w, bb: head_loss_sum(h, w, bb, chunk=chunk, mesh=mesh)[0], argnums=(0, 1)))
        for got, want in zip(grad(*placed), ref):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-5 * np.abs(want).max())
        text = grad.lower(*placed).compile().as_text()
        wire[chunk] = collective_bytes(text, dict(mesh.shape))["bytes_by_kind"]
    assert wire[8] == wire[16], wire
