"""The layer stack's two layouts: `layers_{i}` subtrees (unscanned) or one `layers` subtree
whose leaves carry a leading [num_layers] axis (scanned, `LlamaConfig.scan_layers`).

Both functions take host numpy trees (stacked with numpy, on the host) and jax trees or
tracers (stacked with jax.numpy, so inside `jit` the restack happens on device, in shards)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def scan_params(params: dict, num_layers: int) -> dict:
    """Unscanned tree (layers_{i}) -> scanned tree (layers, leading [L] axis)."""

    def stack(*xs):
        return np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.stack(xs)

    out = {k: v for k, v in params.items() if not k.startswith("layers_")}
    out["layers"] = jax.tree.map(stack, *[params[f"layers_{i}"] for i in range(num_layers)])
    return out


def unscan_params(params: dict, num_layers: int) -> dict:
    """Scanned tree -> unscanned tree; layer i is a slice of each stacked leaf."""
    out = {k: v for k, v in params.items() if k != "layers"}
    for i in range(num_layers):
        out[f"layers_{i}"] = jax.tree.map(lambda x: x[i], params["layers"])
    return out
