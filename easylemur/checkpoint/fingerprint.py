"""Per-array checksums of checkpoints (docs/design.md, "Checkpoint integrity").

A fingerprint is two 32-bit sums over an array's raw words (its bits read as unsigned integers
of its own width): the plain sum and the sum weighted by each word's 1-based row-major index,
both modulo 2**32. Any single flipped bit changes the plain sum; moved or swapped blocks change
the weighted one. Integer sums do not depend on the order of addition, so the figure is the same
whichever way an array is sharded and whichever device or host computes it:

- `tree_fingerprints`: on device, at save time and right after a restore (one jitted pass over
  the state; no data leaves the devices but two words per array);
- `array_fingerprint`: numpy, for `python -m easylemur.checkpoint verify`, which streams a
  checkpoint array by array from disk without a model-sized host.

It is a guard against damage (truncation, bit rot, a half-copied bucket), not against an
attacker who can rewrite both the data and the meta.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}


def leaf_name(path: tuple) -> str:
    """A pytree path as orbax names the leaf on disk, joined by '/': dict keys, sequence
    indices and attribute names (e.g. '1/0/mu/embed_tokens/embedding')."""
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _fingerprint(x: jax.Array) -> jax.Array:
    if x.dtype == jnp.bool_:
        w = x.astype(jnp.uint32)
    else:
        w = jax.lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize]).astype(jnp.uint32)
    # the flat row-major index built from iotas: a reshape(-1) of a sharded array would move data
    idx = jnp.ones(w.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(w.ndim)):
        idx = idx + jax.lax.broadcasted_iota(jnp.uint32, w.shape, axis) * jnp.uint32(stride % 2**32)
        stride *= w.shape[axis]
    return jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * idx, dtype=jnp.uint32)])


_tree_fingerprints = jax.jit(lambda tree: jax.tree.map(_fingerprint, tree))


def tree_fingerprints(tree: Any) -> dict[str, str]:
    """{leaf name: fingerprint} of a pytree of (possibly sharded, global) jax arrays."""
    sums = jax.device_get(_tree_fingerprints(tree))
    return {leaf_name(path): _hex(v) for path, v in jax.tree_util.tree_flatten_with_path(sums)[0]}


def array_fingerprint(a: np.ndarray) -> str:
    """The fingerprint of a host array, equal to `tree_fingerprints`' for the same values."""
    a = np.ascontiguousarray(a)
    w = (a.astype(np.uint32) if a.dtype == np.bool_ else a.view(f"u{a.dtype.itemsize}").astype(np.uint32)).reshape(-1)
    idx = ((np.arange(w.size, dtype=np.uint64) + 1) & 0xFFFFFFFF).astype(np.uint32)
    return _hex(np.array([np.sum(w, dtype=np.uint32), np.sum(w * idx, dtype=np.uint32)]))


def _hex(v: Any) -> str:
    a, b = (int(x) for x in np.asarray(v).reshape(-1))
    return f"{a:08x}{b:08x}"
