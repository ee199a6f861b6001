"""The one loader of model weights: an HF directory or an easylemur checkpoint -> parameters in
a model config's layout, parameter dtype and the training rule table's shardings over a mesh.
train's init.from, `easylemur.load` (generate, eval) all come here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from easylemur.checkpoint import model_meta
from easylemur.convert import hf
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import param_shardings
from easylemur.model.stacking import scan_params, unscan_params
from easylemur.sharding import make_mesh


def put_global(host_tree: Any, shardings: Any) -> Any:
    """Host numpy params (the same on every process) -> global arrays in `shardings`; each
    device gets only its slice (no host tree is copied whole to every device)."""
    return jax.tree.map(
        lambda x, s: jax.make_array_from_callback(x.shape, s, lambda idx: np.asarray(x[idx])), host_tree, shardings
    )


def one_device_mesh() -> Mesh:
    """A mesh of this process's first device, for loading without sharding."""
    return make_mesh("data:1,fsdp:1,tensor:1", devices=jax.local_devices()[:1])


def load_weights(source: "str | Path | model_meta.ModelCheckpoint", cfg: LlamaConfig, mesh: Mesh,
                 step: Optional[int] = None) -> Any:
    """The parameters of `source` in `cfg`'s layout (scan_layers), param dtype and shardings
    over `mesh`; `cfg` has the source's shape (the caller resolved the architecture).

    An easylemur checkpoint is restored straight into shards (no host ever holds the whole
    model) and restacked on device when its stored layout differs. An HF directory is read on
    each host one tensor at a time and put into shards: convert big models with `convert
    from-hf` first."""
    shardings = param_shardings(cfg, mesh)
    if not isinstance(source, model_meta.ModelCheckpoint) and hf.is_hf_dir(source):
        host = hf.load_hf_params(source, cfg, dtype=jnp.dtype(cfg.param_dtype))
        if cfg.scan_layers:
            host = scan_params(host, cfg.num_layers)
        return put_global(host, shardings)
    saved = source if isinstance(source, model_meta.ModelCheckpoint) else model_meta.read_meta(source, step)
    stored = saved.model_config
    layout = dataclasses.replace(cfg, scan_layers=stored.scan_layers, param_dtype=stored.param_dtype)
    _, params, _ = model_meta.load_params(saved, shardings=param_shardings(layout, mesh), param_dtype=cfg.param_dtype)
    if stored.scan_layers != cfg.scan_layers:
        restack = scan_params if cfg.scan_layers else unscan_params
        params = jax.jit(lambda p: restack(p, cfg.num_layers), out_shardings=shardings)(params)
    return params
