"""The one batch layout: what the pipeline yields, the train and eval steps consume, eval pads
with and `aot` compiles for (docs/design.md, "Batch layout").

A batch is a dict of int32 arrays, B rows of T tokens:

  input_ids    [B, T]  token ids; padding positions hold the tokenizer's pad id
  loss_mask    [B, T]  1 where the token is a trained target (predicted from the one before)
  segment_ids  [B, T]  1, 2, ... per packed document within the row; 0 is padding
  positions    [B, T]  position of the token within its document (RoPE restarts per document)
  source       [B]     index of the mixture source the row came from; -1 for an empty row
"""

from __future__ import annotations

from typing import Any

import numpy as np

ROW_KEYS = ("input_ids", "loss_mask", "segment_ids", "positions")  # [B, T] each
KEYS = ROW_KEYS + ("source",)
DTYPE = np.int32


def empty(rows: int, seq_len: int) -> dict[str, np.ndarray]:
    """Rows that train nothing (all padding, source -1): what a process feeds once its share of
    finite data has ended, so that every process still runs the same number of steps."""
    out = {k: np.zeros((rows, seq_len), DTYPE) for k in ROW_KEYS}
    out["source"] = np.full((rows,), -1, DTYPE)
    return out


def shardings(mesh: Any) -> dict[str, Any]:
    """Each key's sharding over `mesh`: rows split over the batch axes, the rest replicated."""
    from easylemur.sharding import batch_sharding

    return {k: batch_sharding(mesh, 1 if k == "source" else 2) for k in KEYS}


def abstract(batch_size: int, seq_len: int, mesh: Any) -> dict[str, Any]:
    """ShapeDtypeStructs of a global batch, with its shardings: what `aot` compiles for."""
    import jax

    sh = shardings(mesh)
    return {
        k: jax.ShapeDtypeStruct((batch_size,) if k == "source" else (batch_size, seq_len), DTYPE, sharding=sh[k])
        for k in KEYS
    }
