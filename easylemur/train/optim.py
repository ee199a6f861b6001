"""The optimizer from config: AdamW, warm-up + decay schedule, global-norm clipping, and a
weight-decay mask that leaves norm scales alone."""

from __future__ import annotations

from typing import Any

import jax
import optax
from ml_collections import ConfigDict


def schedule(opt: ConfigDict, total_steps: int) -> optax.Schedule:
    warmup = int(opt.warmup_steps)
    decay_steps = max(total_steps - warmup, 1)
    ramp = optax.linear_schedule(0.0, opt.lr, max(warmup, 1))
    if opt.schedule == "cosine":
        # optax's cosine schedule decays to alpha * lr
        tail = optax.cosine_decay_schedule(opt.lr, decay_steps, alpha=opt.end_lr / opt.lr if opt.lr else 0.0)
    elif opt.schedule == "linear":
        tail = optax.linear_schedule(opt.lr, opt.end_lr, decay_steps)
    else:
        tail = optax.constant_schedule(opt.lr)
    if warmup == 0:
        return tail
    return optax.join_schedules([ramp, tail], [warmup])


def decay_mask(params: Any, decay_embeddings: bool = True) -> Any:
    """True where weight decay applies: matrices, optionally not the embedding/LM head; never
    norm scales (1-D, or stacked 2-D under scan: identified by name, not rank) nor biases (Qwen2's q/k/v)."""

    def decide(path, _):
        names = [getattr(k, "key", getattr(k, "name", "")) for k in path]
        if any(str(n).endswith("norm") or str(n) == "norm" for n in names) or names[-1] == "bias":
            return False
        if not decay_embeddings and any(n in ("embed_tokens", "lm_head") for n in names):
            return False
        return True

    return jax.tree_util.tree_map_with_path(decide, params)


def make_optimizer(opt: ConfigDict, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optimizer, schedule): the n-th applied update (1-based) uses schedule(n), so the first
    step already learns and the last one uses end_lr. optax counts updates from 0, hence the
    shift. A skipped (non-finite) step applies nothing and does not advance the count, so after
    k skips step s uses schedule(s - k): `applied_lr` reads the rate from the state itself."""
    lr = schedule(opt, total_steps)
    by_count = lambda count: lr(count + 1)
    parts = []
    if opt.clip_norm and opt.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(opt.clip_norm))
    parts.append(
        optax.adamw(
            by_count, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay,
            mask=lambda p: decay_mask(p, opt.decay_embeddings),
        )
    )
    return optax.chain(*parts), lr


def applied_lr(opt_state: Any, lr: optax.Schedule) -> jax.Array:
    """The learning rate the next update of `opt_state` applies: schedule(count + 1), with the
    count of updates actually applied (the schedule's own counter in the optimizer state)."""
    counts = [x.count for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))
              if isinstance(x, optax.ScaleByScheduleState)]
    if len(counts) != 1:
        raise ValueError(f"expected one schedule counter in the optimizer state, found {len(counts)}")
    return lr(counts[0] + 1)
