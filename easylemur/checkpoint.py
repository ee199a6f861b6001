"""easylemur checkpoints: an orbax CheckpointManager directory of step folders.

Layout of a workdir's `checkpoints/<step>/` (written atomically by orbax: a step folder
appears under its final name only once every item is complete, so a crash mid-write never
leaves a checkpoint that looks whole):
  params/     the parameter pytree (orbax StandardSave), in the layout meta.model says
              (scan_layers: stacked `layers`, else `layers_{i}`)
  opt_state/  optimizer state (absent in parameter-only checkpoints such as from-hf output)
  meta/       JSON (written by `make_meta` alone, read by `read_meta`/`read_latest`): step,
              model (LlamaConfig fields), tokenizer (base64 sentencepiece model or null); a
              run's also rng, data_state (every data stream's iterator state, its per-source
              token counters included), nan_skips and the run config; from-hf's: source
(docs/design.md, "Checkpoint layout").
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

from easylemur.errors import InputError
from easylemur.models.llama import LlamaConfig, param_specs
from easylemur.models.stacking import unscan_params

ITEMS = ("params", "opt_state", "meta")


class CheckpointError(InputError):
    pass


def manager(directory: str | Path, keep: int | None = None, async_save: bool = True) -> ocp.CheckpointManager:
    # orbax reads max_to_keep=0 as "keep none": every save would delete itself. 0 here (like
    # None) keeps every checkpoint.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep or None, create=True, enable_async_checkpointing=async_save,
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


def make_meta(step: int, model_cfg: LlamaConfig, tokenizer_path: str | Path | None, **extra: Any) -> dict:
    """The one writer of a checkpoint's `meta` item: step, model config, embedded tokenizer,
    plus what the caller adds (a run: rng, data_state, nan_skips, config; from-hf: source)."""
    return {"step": step, "model": model_config_to_json(model_cfg), "tokenizer": tokenizer_to_json(tokenizer_path), **extra}


def save(mngr: ocp.CheckpointManager, step: int, params: Any, meta: dict, opt_state: Any = None, force: bool = False) -> bool:
    items = {"params": ocp.args.StandardSave(params), "meta": ocp.args.JsonSave(meta)}
    if opt_state is not None:
        items["opt_state"] = ocp.args.StandardSave(opt_state)
    return mngr.save(step, args=ocp.args.Composite(**items), force=force)


def save_run(mngr: ocp.CheckpointManager, step: int, state: dict, model_cfg: LlamaConfig, tokenizer_path: str | Path,
             *, data_state: dict, nan_skips: int, config: dict, force: bool = False) -> bool:
    """A training checkpoint: params, optimizer state, and the meta a resume needs."""
    meta = make_meta(step, model_cfg, tokenizer_path, rng={"seed": config.get("seed", 0)}, data_state=data_state,
                     nan_skips=nan_skips, config=config)
    return save(mngr, step, state["params"], meta, state["opt_state"], force=force)


def restore_meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def restore(mngr: ocp.CheckpointManager, step: int, abstract_params: Any, abstract_opt_state: Any = None) -> tuple[Any, Any]:
    """(params, opt_state or None) restored into the shardings the abstract trees
    (ShapeDtypeStructs with .sharding) carry; the meta is `read_meta`'s job."""
    items = {"params": ocp.args.StandardRestore(abstract_params)}
    if abstract_opt_state is not None:
        items["opt_state"] = ocp.args.StandardRestore(abstract_opt_state)
    out = mngr.restore(step, args=ocp.args.Composite(**items))
    return out["params"], out.get("opt_state") if abstract_opt_state is not None else None


@dataclasses.dataclass(frozen=True)
class Saved:
    """One checkpoint step and its meta, read once: what `read_meta` returns."""

    directory: epath.Path  # the checkpoints/ directory
    step: int
    meta: dict

    @property
    def path(self) -> epath.Path:
        return self.directory / str(self.step)

    @property
    def model_config(self) -> LlamaConfig:
        return model_config_from_json(self.meta["model"])

    def tokenizer_path(self) -> Optional[Path]:
        """The embedded sentencepiece model as a file, or None when the checkpoint has none."""
        return tokenizer_from_json(self.meta.get("tokenizer"))


def read_latest(mngr: ocp.CheckpointManager) -> Optional[Saved]:
    """The newest complete checkpoint of a manager's directory and its meta, or None."""
    step = mngr.latest_step()
    if step is None:
        return None
    return Saved(as_path(mngr.directory), step, restore_meta(mngr, step))


def read_meta(path: str | Path, step: int | None = None) -> Saved:
    """The meta of a workdir's newest checkpoint (or `step`), a checkpoints dir or a step dir;
    a checkpoint without a model config is an error naming it."""
    directory, step = resolve(path, step)
    mngr = manager(directory, async_save=False)
    try:
        meta = restore_meta(mngr, step)
    finally:
        mngr.close()
    if "model" not in meta:
        raise CheckpointError(f"{directory / str(step)}: meta has no model config")
    return Saved(directory, step, meta)


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


def load_params(src: "Saved | str | Path", step: int | None = None, shardings: Any = None,
                **overrides) -> tuple[LlamaConfig, Any, Optional[Path]]:
    """(LlamaConfig, params, tokenizer path) from an easylemur checkpoint (a path, or a `Saved`
    already read).

    Params come back unscanned (layers_{i}) on one device unless `shardings` (for the
    checkpoint's own layout) is given; `overrides` replace LlamaConfig fields of the result
    (dtype, param_dtype, ...)."""
    saved = src if isinstance(src, Saved) else read_meta(src, step)
    saved_cfg = saved.model_config
    pdt = overrides.get("param_dtype", saved_cfg.param_dtype)
    mngr = manager(saved.directory, async_save=False)
    try:
        params, _ = restore(mngr, saved.step, abstract_params(saved_cfg, shardings))
    finally:
        mngr.close()
    cfg = dataclasses.replace(saved_cfg, **overrides)
    if shardings is None and saved_cfg.scan_layers:
        params = unscan_params(params, saved_cfg.num_layers)
        cfg = dataclasses.replace(cfg, scan_layers=False)
    if pdt != saved_cfg.param_dtype:
        params = jax.tree.map(lambda x: x.astype(pdt), params)
    return cfg, params, saved.tokenizer_path()


def save_params(out: str | Path, cfg: LlamaConfig, params: Any, tokenizer_path: str | Path | None = None, extra_meta: dict | None = None) -> Path:
    """A parameter-only checkpoint (step 0) in a workdir-shaped folder `out`."""
    mngr = manager(as_path(out) / "checkpoints", async_save=False)
    save(mngr, 0, params, make_meta(0, cfg, tokenizer_path, **(extra_meta or {})), force=True)
    mngr.wait_until_finished()
    mngr.close()
    return as_path(out) / "checkpoints" / "0"
