"""`easylemur.load(path)`: the model object users script against."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from easylemur import hf
from easylemur.models.llama import Llama, LlamaConfig


@dataclasses.dataclass
class LoadedModel:
    config: LlamaConfig
    params: Any  # unscanned nested dict of arrays
    tokenizer: Optional[Any] = None
    path: str = ""

    def __post_init__(self):
        if self.config.scan_layers:
            self.config = dataclasses.replace(self.config, scan_layers=False)
        self._forward = jax.jit(
            lambda params, ids, pos, seg: Llama(self.config).apply({"params": params}, ids, pos, seg)
        )

    def logits(self, input_ids, positions=None, segment_ids=None) -> jax.Array:
        """[batch, length] token ids -> [batch, length, vocab] float32 logits."""
        ids = jnp.asarray(np.asarray(input_ids), jnp.int32)
        if ids.ndim == 1:
            ids = ids[None]
        B, T = ids.shape
        pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)) if positions is None else jnp.asarray(positions, jnp.int32)
        seg = jnp.ones((B, T), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)
        return self._forward(self.params, ids, pos, seg)

    def generate(self, *args, **kwargs):
        from easylemur.generate import generate

        return generate(self, *args, **kwargs)


def load(path: str | Path, *, dtype: str | None = None, param_dtype: str = "float32", step: int | None = None) -> LoadedModel:
    """Loads an HF Llama directory, an easylemur checkpoint step dir, or a workdir (newest step).

    `dtype` sets the compute dtype (default: float32); parameters are held in `param_dtype`."""
    path = Path(path)
    overrides = {"param_dtype": param_dtype}
    if dtype:
        overrides["dtype"] = dtype
    if hf.is_hf_dir(path):
        cfg = hf.read_hf_config(path, **overrides)
        params = hf.load_hf_params(path, cfg, dtype=np.dtype(param_dtype) if param_dtype != "bfloat16" else jnp.bfloat16)
        params = jax.tree.map(jnp.asarray, params)
        return LoadedModel(cfg, params, _maybe_tokenizer(path), str(path))
    from easylemur import checkpoint

    cfg, params, tok_path = checkpoint.load_params(path, step=step, **overrides)
    tokenizer = None
    if tok_path is not None:
        from easylemur.tokenizer import Tokenizer

        tokenizer = Tokenizer.load(tok_path)
    return LoadedModel(cfg, params, tokenizer, str(path))


def _maybe_tokenizer(path: Path):
    file = path / "tokenizer.model"
    if not file.is_file():
        return None
    from easylemur.tokenizer import Tokenizer

    return Tokenizer.load(file)
