"""easylemur checkpoints: an orbax CheckpointManager directory of step folders.

Layout of a workdir's `checkpoints/<step>/` (written atomically by orbax: a step folder
appears under its final name only once every item is complete, so a crash mid-write never
leaves a checkpoint that looks whole):
  params/     the parameter pytree (orbax StandardSave), in the layout meta.model says
              (scan_layers: stacked `layers`, else `layers_{i}`)
  opt_state/  optimizer state (absent in parameter-only checkpoints such as from-hf output)
  meta/       JSON: step, model (LlamaConfig fields), tokenizer (base64 sentencepiece model
              or null), rng, data iterator state, token counters, the run config
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp
from etils import epath

from easylemur.models.llama import LlamaConfig, param_specs

ITEMS = ("params", "opt_state", "meta")


class CheckpointError(ValueError):
    pass


def manager(directory: str | Path, keep: int | None = None, async_save: bool = True) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=async_save,
    )
    return ocp.CheckpointManager(as_path(directory), options=options, item_names=ITEMS)


def as_path(path: str | os.PathLike) -> epath.Path:
    """Local paths made absolute; bucket URLs (gs://...) kept as they are, so every host of a pod
    writes its shards into the same checkpoint."""
    text = os.fspath(path)
    return epath.Path(text) if "://" in text else epath.Path(os.path.abspath(text))


def model_config_to_json(cfg: LlamaConfig) -> dict:
    d = dataclasses.asdict(cfg)
    d["rope_scaling"] = cfg.rope_scaling_dict or None
    return d


def model_config_from_json(d: dict, **overrides) -> LlamaConfig:
    known = {f.name for f in dataclasses.fields(LlamaConfig)}
    return LlamaConfig(**{**{k: v for k, v in d.items() if k in known}, **overrides})


def tokenizer_to_json(path: str | Path | None) -> Optional[str]:
    return None if path is None else base64.b64encode(Path(path).read_bytes()).decode()


def tokenizer_from_json(blob: Optional[str]) -> Optional[Path]:
    """Writes the embedded sentencepiece model to a content-addressed temp file."""
    if not blob:
        return None
    raw = base64.b64decode(blob)
    path = Path(tempfile.gettempdir()) / f"easylemur-tok-{hashlib.sha256(raw).hexdigest()[:16]}.model"
    if not path.exists():
        # a private temp name per writer: several processes on one host may race here
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    return path


def save(mngr: ocp.CheckpointManager, step: int, params: Any, meta: dict, opt_state: Any = None, force: bool = False) -> bool:
    items = {"params": ocp.args.StandardSave(params), "meta": ocp.args.JsonSave(meta)}
    if opt_state is not None:
        items["opt_state"] = ocp.args.StandardSave(opt_state)
    return mngr.save(step, args=ocp.args.Composite(**items), force=force)


def restore_meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def restore(mngr: ocp.CheckpointManager, step: int, abstract_params: Any, abstract_opt_state: Any = None):
    """Restores params (and opt_state when given its abstract tree) into the shardings the
    abstract trees (ShapeDtypeStructs with .sharding) carry."""
    items = {"params": ocp.args.StandardRestore(abstract_params), "meta": ocp.args.JsonRestore()}
    if abstract_opt_state is not None:
        items["opt_state"] = ocp.args.StandardRestore(abstract_opt_state)
    out = mngr.restore(step, args=ocp.args.Composite(**items))
    return out["params"], out.get("opt_state") if abstract_opt_state is not None else None, out["meta"]


def resolve(path: str | Path, step: int | None = None) -> tuple[Path, int]:
    """(checkpoints directory, step) for a workdir, a checkpoints dir or a step dir."""
    path = as_path(path)
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    elif (path / "meta").is_dir() and path.name.isdigit():
        if step is not None and step != int(path.name):
            raise CheckpointError(f"{path} is step {path.name}, but step {step} was asked for")
        return path.parent, int(path.name)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not an HF directory, an easylemur workdir or a checkpoint")
    steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and (p / "meta").is_dir())
    if not steps:
        raise CheckpointError(f"{path}: no complete checkpoint (no step folder with params and meta)")
    if step is None:
        return path, steps[-1]
    if step not in steps:
        raise CheckpointError(f"{path}: no checkpoint for step {step}; steps present: {steps}")
    return path, step


def abstract_params(cfg: LlamaConfig, shardings: Any = None) -> Any:
    shapes, _ = param_specs(cfg)
    if shardings is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device), shapes)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def load_params(path: str | Path, step: int | None = None, shardings: Any = None, **overrides) -> tuple[LlamaConfig, Any, Optional[Path]]:
    """(LlamaConfig, params, tokenizer path) from an easylemur checkpoint.

    Params come back unscanned (layers_{i}) on one device unless `shardings` (for the
    checkpoint's own layout) is given; `overrides` replace LlamaConfig fields of the result
    (dtype, param_dtype, ...)."""
    directory, step = resolve(path, step)
    mngr = manager(directory, async_save=False)
    try:
        meta = restore_meta(mngr, step)
        if "model" not in meta:
            raise CheckpointError(f"{directory / str(step)}: meta has no model config")
        saved_cfg = model_config_from_json(meta["model"])
        pdt = overrides.get("param_dtype", saved_cfg.param_dtype)
        params, _, _ = restore(mngr, step, abstract_params(saved_cfg, shardings))
    finally:
        mngr.close()
    cfg = dataclasses.replace(saved_cfg, **overrides)
    if shardings is None and saved_cfg.scan_layers:
        from easylemur.hf import unscan_params

        params = unscan_params(params, saved_cfg.num_layers)
        cfg = dataclasses.replace(cfg, scan_layers=False)
    if pdt != saved_cfg.param_dtype:
        params = jax.tree.map(lambda x: x.astype(pdt), params)
    return cfg, params, tokenizer_from_json(meta.get("tokenizer"))


def save_params(out: str | Path, cfg: LlamaConfig, params: Any, tokenizer_path: str | Path | None = None, extra_meta: dict | None = None) -> Path:
    """A parameter-only checkpoint (step 0) in a workdir-shaped folder `out`."""
    mngr = manager(as_path(out) / "checkpoints", async_save=False)
    meta = {"step": 0, "model": model_config_to_json(cfg), "tokenizer": tokenizer_to_json(tokenizer_path), **(extra_meta or {})}
    save(mngr, 0, params, meta, force=True)
    mngr.wait_until_finished()
    mngr.close()
    return as_path(out) / "checkpoints" / "0"
