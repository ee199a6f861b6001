"""The one loss: next-token cross-entropy summed over trained tokens.

Callers divide by the number of trained tokens of the whole global batch (also across
gradient-accumulation micro-batches), so every trained token weighs the same; averaging per
row first would over-weight short answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp


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


def head_loss_sum(hidden: jax.Array, head: jax.Array, batch: dict, z_loss: float = 0.0, chunk: int = 0) -> tuple[jax.Array, jax.Array]:
    """token_loss_sum from the final hidden states [B, T, d] and the LM head kernel [d, V],
    computing the logits `chunk` positions at a time under remat: the [B, T, V] logits (and
    their gradient) never exist whole. The same sums as token_loss_sum(hidden @ head, ...)."""
    B, T, _ = hidden.shape
    # predict position t+1 from t for t < T-1; the last position gets weight 0, so every
    # chunk has the same length
    w = jnp.pad(target_weights(batch), ((0, 0), (0, 1)))
    targets = jnp.pad(batch["input_ids"][:, 1:], ((0, 0), (0, 1)))

    def part(h, t, wt):
        logits = jax.lax.dot_general(h, head.astype(h.dtype), (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return _cross_entropy_sum(logits, t, wt, z_loss)

    if chunk <= 0 or chunk >= T or T % chunk:
        return part(hidden, targets, w), jnp.sum(w)
    n = T // chunk
    split = lambda x: x.reshape(B, n, chunk, *x.shape[2:]).swapaxes(0, 1)
    part = jax.checkpoint(part)
    total = jax.lax.map(lambda a: part(*a), (split(hidden), split(targets), split(w)))
    return jnp.sum(total), jnp.sum(w)
