"""The one loss: next-token cross-entropy summed over trained tokens.

Callers divide by the number of trained tokens of the whole global batch (also across
gradient-accumulation micro-batches), so every trained token weighs the same; averaging per
row first would over-weight short answers."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from easylemur.ops.matmul import transpose_by_matmul
from easylemur.sharding import ACCELERATED, constrain, gathered_rules, logical_to_spec, platform


def target_weights(batch: dict) -> jax.Array:
    """[B, T-1] weights for predicting input_ids[:, 1:] from positions [:, :-1]: the target's
    loss_mask, and never across a document boundary inside a packed row."""
    seg = batch["segment_ids"]
    same_doc = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    return batch["loss_mask"][:, 1:].astype(jnp.float32) * same_doc


def _cross_entropy_sum(logits: jax.Array, targets: jax.Array, w: jax.Array, z_loss: float) -> jax.Array:
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    per_token = lse - picked
    if z_loss:
        per_token = per_token + z_loss * lse**2
    return jnp.sum(per_token * w)


def token_loss_sum(logits: jax.Array, batch: dict, z_loss: float = 0.0) -> tuple[jax.Array, jax.Array]:
    """(sum of per-token losses, number of trained tokens) for logits [B, T, V]."""
    w = target_weights(batch)
    return _cross_entropy_sum(logits[:, :-1], batch["input_ids"][:, 1:], w, z_loss), jnp.sum(w)


# On a CPU `loss_chunk=0` leaves the chunk to head_loss_sum: whole rows while the float32
# logits of the batch stay under this many bytes, else the longest chunk of positions that
# divides T and keeps them under it. On the 2-core CPU (58M model, 8 x 512 tokens, vocab 32000,
# 512 MB of logits whole) chunks of 32-64 positions made the step fastest of 16-128; buffers
# that large are fresh pages from the OS every step (docs/design.md, "Performance"). On
# accelerators 0 stays whole rows.
AUTO_CHUNK_BYTES = 32 * 2**20


def auto_chunk(B: int, T: int, V: int, budget: int = AUTO_CHUNK_BYTES) -> int:
    """The loss chunk (positions) `loss_chunk=0` uses for B rows of T tokens and vocab V: 0
    (whole rows) when B x T x V float32 logits fit `budget`, else the longest divisor of T
    whose chunk fits it (at least 1)."""
    if B * T * V * 4 <= budget:
        return 0
    best = 1
    for c in range(1, T + 1):
        if T % c == 0 and B * c * V * 4 <= budget:
            best = c
    return best


def head_loss_sum(hidden: jax.Array, head: jax.Array, batch: dict, z_loss: float = 0.0, chunk: int = 0,
                  mesh=None) -> tuple[jax.Array, jax.Array]:
    """token_loss_sum from the final hidden states [B, T, d] and the LM head kernel [d, V],
    the logits `chunk` positions at a time (0: whole rows; `auto_chunk` on a CPU), so the
    [B, T, V] logits (and their gradient) need never exist whole. The same sums as
    token_loss_sum(hidden @ head, ...).

    Differentiated, it is one fused pass per chunk (`_fused_head_ce`): the logits' gradient
    (softmax - one-hot) x weight is known as soon as the softmax is, so each chunk's
    gradients with respect to hidden and head are made right there and the backward only
    scales them; nothing is recomputed and no [B, T, V] array is kept. `mesh`: the head
    gradient's accumulator is kept sharded like the head."""
    B, T, _ = hidden.shape
    # predict position t+1 from t for t < T-1; the last position gets weight 0, so every
    # chunk has the same length
    w = jnp.pad(target_weights(batch), ((0, 0), (0, 1)))
    targets = jnp.pad(batch["input_ids"][:, 1:], ((0, 0), (0, 1)))
    if chunk <= 0 and platform(mesh) == "cpu":
        chunk = auto_chunk(B, T, head.shape[1])
    if chunk <= 0 or chunk >= T or T % chunk:
        chunk = T
    return _fused_head_ce(hidden, head.astype(hidden.dtype), targets, w, float(z_loss), chunk, mesh), jnp.sum(w)


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
    """[B, T, ...] -> [T / chunk, B, chunk, ...]"""
    B, T = x.shape[:2]
    return x.reshape(B, T // chunk, chunk, *x.shape[2:]).swapaxes(0, 1)


def _chunk_logits(h: jax.Array, head: jax.Array) -> jax.Array:
    return jax.lax.dot_general(h, head, (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _fused_head_ce(hidden, head, targets, w, z_loss, chunk, mesh):
    """Sum over positions of w x (cross-entropy + z_loss x lse²) of softmax(hidden @ head)."""

    def part(a):
        h, t, wt = a
        return _cross_entropy_sum(_chunk_logits(h, head), t, wt, z_loss)

    parts = jax.lax.map(part, (_chunks(hidden, chunk), _chunks(targets, chunk), _chunks(w, chunk)))
    return jnp.sum(parts)


def _chunk_loss_and_grads(h, head, t, wt, z_loss, dt):
    """One chunk's (loss sum, gradient wrt h, gradient wrt its logits in `dt`) for h [B, c, d]."""
    logits = _chunk_logits(h, head)
    m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits - m)
    s = jnp.sum(e, axis=-1, keepdims=True)
    lse = (m + jnp.log(s))[..., 0]
    picked = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
    per_token = lse - picked
    if z_loss:
        per_token = per_token + z_loss * lse**2
    loss = jnp.sum(per_token * wt)
    # d loss / d logits = w x (softmax x (1 + 2 z lse) - one-hot(target))
    scale = (wt * (1.0 + 2.0 * z_loss * lse))[..., None] / s
    onehot = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2) == t[..., None]
    g = (e * scale - jnp.where(onehot, wt[..., None], 0.0)).astype(dt)
    dh = jax.lax.dot_general(g, head, (((2,), (1,)), ((), ())), preferred_element_type=jnp.float32).astype(dt)
    return loss, dh, g


def batch_shards(B: int, mesh) -> int:
    """How many ways the `batch` rule splits B rows on `mesh` (1 without one)."""
    if mesh is None:
        return 1
    axes = logical_to_spec(("batch",), (B,), mesh)
    axes = axes[0] if len(axes) else None
    axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return math.prod(mesh.shape[a] for a in axes)


def _fused_fwd(hidden, head, targets, w, z_loss, chunk, mesh):
    dt = hidden.dtype
    B, T, d = hidden.shape
    V = head.shape[1]
    cpu = platform(mesh) == "cpu"
    accelerated = platform(mesh) in ACCELERATED
    # The head's weight gradient is written in the compute dtype on TPU/GPU, as every other
    # projection's (`low_precision_matmul`): it is reduced over the batch axes in that dtype,
    # which halves those bytes on the wire.
    dw_dtype = dt if accelerated else jnp.float32
    # With rows split P ways and more than one chunk, each device sums its own rows' head
    # gradient over the chunks, P partial sums side by side ([P, d, V], one per device), and
    # the batch reduction runs once after the last chunk: constraining each chunk's sum to the
    # head's sharding reduce-scattered it once per chunk (Llama-2-70B at fsdp 256, 4 chunks:
    # 4 x 1.04 GB on the wire where one does). The partial sums are in dw_dtype, as each
    # chunk's reduced sum was: float32 ones were a [d, V] float32 array per device during the
    # loss (Llama-3.1-70B, vocab 128256: 3.9 GiB; its peak rose 8.73 -> 10.34 GiB). The head
    # is gathered over fsdp once, before the chunks, rather than in each (4 x 0.52 GB).
    P = batch_shards(B, mesh)
    defer = P > 1 and T // chunk > 1
    if mesh is not None and mesh.shape.get("fsdp", 1) > 1:
        head = constrain(head, ("embed", "vocab"), mesh, gathered_rules())

    def body(dhead, a):
        h, t, wt = a  # [B, c, d], [B, c], [B, c]
        loss, dh, g = _chunk_loss_and_grads(h, head, t, wt, z_loss, dt)
        h2, g2 = h.reshape(-1, h.shape[-1]), g.reshape(-1, V)
        if cpu and dt != jnp.float32:
            dw = jax.lax.dot(transpose_by_matmul(h2), g2, preferred_element_type=jnp.float32)
        else:
            dw = jax.lax.dot_general(h2, g2, (((0,), (0,)), ((), ())), preferred_element_type=dw_dtype)
        dhead = constrain(dhead + dw.astype(jnp.float32), ("embed", "vocab"), mesh)
        return dhead, (loss, dh)

    def deferred_body(acc, a):
        h, t, wt = a
        loss, dh, g = _chunk_loss_and_grads(h, head, t, wt, z_loss, dt)
        # [P, rows, d] x [P, rows, V] -> [P, d, V]: a batched matmul over P, no communication
        hp, gp = h.reshape(P, -1, d), g.reshape(P, -1, V)
        hp, gp = constrain(hp, ("batch", None, None), mesh), constrain(gp, ("batch", None, "act_vocab"), mesh)
        dw = jax.lax.dot_general(hp, gp, (((1,), (1,)), ((0,), (0,))), preferred_element_type=dw_dtype)
        return constrain(acc + dw, ("batch", None, "vocab"), mesh), (loss, dh)

    xs = (_chunks(hidden, chunk), _chunks(targets, chunk), _chunks(w, chunk))
    if defer:
        init = constrain(jnp.zeros((P, d, V), dw_dtype), ("batch", None, "vocab"), mesh)
        acc, (losses, dh) = jax.lax.scan(deferred_body, init, xs)
        dhead = constrain(jnp.sum(acc, axis=0), ("embed", "vocab"), mesh)
        # the reduction before the layers' backward starts (dh is its input): left to itself the
        # TPU compiler reduced it last, holding the [P, d, V] partials through the whole backward
        # (Llama-2-70B at fsdp 256, float32 partials: 1.05 GB more at the peak)
        dhead, dh = jax.lax.optimization_barrier((dhead, dh))
    else:
        init = constrain(jnp.zeros(head.shape, jnp.float32), ("embed", "vocab"), mesh)
        dhead, (losses, dh) = jax.lax.scan(body, init, xs)
    dh = dh.swapaxes(0, 1).reshape(B, T, -1)
    return jnp.sum(losses), (dh, dhead.astype(head.dtype))


def _fused_bwd(z_loss, chunk, mesh, res, ct):
    dh, dhead = res
    return (dh * ct).astype(dh.dtype), (dhead * ct).astype(dhead.dtype), None, None


_fused_head_ce.defvjp(_fused_fwd, _fused_bwd)
