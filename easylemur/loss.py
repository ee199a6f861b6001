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


def token_loss_sum(logits: jax.Array, batch: dict, z_loss: float = 0.0) -> tuple[jax.Array, jax.Array]:
    """(sum of per-token losses, number of trained tokens) for logits [B, T, V]."""
    logits = logits[:, :-1].astype(jnp.float32)
    targets = batch["input_ids"][:, 1:]
    w = target_weights(batch)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    per_token = lse - picked
    if z_loss:
        per_token = per_token + z_loss * lse**2
    return jnp.sum(per_token * w), jnp.sum(w)
