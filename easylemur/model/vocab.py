"""Growing a model's vocabulary (e.g. Llama-2's 32000 + the ChatML markers).

New rows of the embedding and new columns of the LM head are the mean of the existing ones
(docs/design.md, "Tokenizer"): a new token then starts as an "average" token, and, because the LM head is
linear, its initial logit is the mean of the old logits, so it neither dominates nor vanishes
from the softmax. Every old row is kept bit for bit, so the logits of old tokens do not change.

`embed_tokens` and `lm_head` sit at the top of the param tree in both the unscanned
(`layers_{i}`) and the scanned (`layers`) layouts, so both work unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from easylemur.model.config import LlamaConfig


def grow_rows(x: Any, new_size: int, axis: int) -> Any:
    """x with `axis` grown to new_size by appending copies of the mean over that axis.

    The mean is taken in float32 and cast back to x's dtype; numpy stays numpy, jax stays jax."""
    old = x.shape[axis]
    if new_size < old:
        raise ValueError(f"new vocabulary size {new_size} is smaller than the current {old}; shrinking is not supported")
    if new_size == old:
        return x
    if isinstance(x, np.ndarray):
        xp = np
    else:
        import jax.numpy as xp  # jax arrays (possibly sharded) stay on device
    mean = xp.mean(x.astype(xp.float32), axis=axis, keepdims=True).astype(x.dtype)
    reps = [1] * x.ndim
    reps[axis] = new_size - old
    return xp.concatenate([x, xp.tile(mean, reps)], axis=axis)


def extend_vocab(params: dict, cfg: LlamaConfig, new_vocab_size: int) -> tuple[dict, LlamaConfig]:
    """(params, cfg) with the vocabulary grown to new_vocab_size; the input tree is not modified.

    Works on numpy or jax leaves, scanned or unscanned trees; a tied model grows only its
    embedding (which is also its head)."""
    if new_vocab_size < cfg.vocab_size:
        raise ValueError(f"new_vocab_size={new_vocab_size} is smaller than vocab_size={cfg.vocab_size}")
    emb = params["embed_tokens"]["embedding"]
    if emb.shape[0] != cfg.vocab_size:
        raise ValueError(f"embed_tokens.embedding has {emb.shape[0]} rows but cfg.vocab_size={cfg.vocab_size}")
    out = dict(params)
    out["embed_tokens"] = {**params["embed_tokens"], "embedding": grow_rows(emb, new_vocab_size, axis=0)}
    if not cfg.tie_word_embeddings:
        head = params["lm_head"]["kernel"]  # [d, V]
        if head.shape[1] != cfg.vocab_size:
            raise ValueError(f"lm_head.kernel has {head.shape[1]} columns but cfg.vocab_size={cfg.vocab_size}")
        out["lm_head"] = {**params["lm_head"], "kernel": grow_rows(head, new_vocab_size, axis=1)}
    return out, dataclasses.replace(cfg, vocab_size=new_vocab_size)
