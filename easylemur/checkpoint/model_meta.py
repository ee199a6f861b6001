"""The model's checkpoint schema on top of the generic store: what a step's `meta` item holds
for an easylemur model, and loading and saving its parameters.

Layout of a workdir's `checkpoints/<step>/`:
  params/     the parameter pytree (orbax StandardSave), in the layout meta.model says
              (scan_layers: stacked `layers`, else `layers_{i}`)
  opt_state/  optimizer state (absent in parameter-only checkpoints such as from-hf output)
  meta/       JSON (written by `make_meta` alone, read by `read_meta`/`read_step`): step,
              model (LlamaConfig fields), tokenizer (base64 sentencepiece model or tokenizer.json,
              or null) and its sha256, tokenizer_config (a tokenizer.json's configuration, or an
              HF directory's beside its tokenizer.model), tokenizer_twin (base64, the tokenizer.json
              beside such a tokenizer.model) and its sha256,
              checksums (a fingerprint per array, added by `store.save`); a run's also rng,
              data_state (every data shard's iterator state, its per-source token counters
              included), nan_skips and the run config; from-hf's: source and stop_ids (every id
              decoding stops on, convert.hf.stop_ids; older checkpoints lack it); both:
              chat_format ("chatml" | "model" | null = not chat-tuned; what to-hf's chat
              template and <|im_end|> stop follow; older checkpoints lack it)
(docs/design.md, "Checkpoint layout").
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import functools
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

from easylemur.chat.choice import hf_dir_chat_template
from easylemur.chat.formats import CHAT_FORMATS
from easylemur.checkpoint.paths import as_path
from easylemur.checkpoint.store import CheckpointError, Saved, manager, read_saved, restore_items, restore_meta, save
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import param_specs
from easylemur.model.stacking import unscan_params
from easylemur.tokenizer.files import read_tokenizer_config
from easylemur.tokenizer.spm import SPM_FILE, TWIN_FILE

def model_config_to_json(cfg: LlamaConfig) -> dict:
    d = dataclasses.asdict(cfg)
    d["rope_scaling"] = cfg.rope_scaling_dict or None
    return d


def model_config_from_json(d: dict, **overrides) -> LlamaConfig:
    known = {f.name for f in dataclasses.fields(LlamaConfig)}
    return LlamaConfig(**{**{k: v for k, v in d.items() if k in known}, **overrides})


def tokenizer_to_json(path: str | Path | None) -> Optional[str]:
    return None if path is None else base64.b64encode(Path(path).read_bytes()).decode()


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@functools.lru_cache(maxsize=None)
def _private_dir() -> Path:
    """A directory of this process's own (mkdtemp: mode 0700, an unpredictable name), removed at
    exit. Nothing easylemur reads back comes from a shared, predictable temp path: a file planted
    there by someone else is never used."""
    d = Path(tempfile.mkdtemp(prefix="easylemur-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def tokenizer_config_of(path: str | Path | None) -> Optional[dict]:
    """The configuration embedded beside a tokenizer (BOS/EOS, chat template, `legacy`; with
    special_tokens_map.json's entries, as transformers reads them): a tokenizer.json's ({} when it
    has none), an HF directory's tokenizer.model's when it has one; None otherwise (a
    sentencepiece model holds its own)."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix == ".json":
        return read_tokenizer_config(p.parent)
    if p.name == SPM_FILE:
        return read_tokenizer_config(p.parent) or None
    return None


def twin_of(path: str | Path | None) -> Optional[Path]:
    """The tokenizer.json beside an HF directory's tokenizer.model (`spm.Tokenizer.twin`: what
    transformers encodes with there), embedded with it so that the checkpoint chats as the
    directory did; None without one."""
    if path is None or Path(path).name != SPM_FILE:
        return None
    twin = Path(path).parent / TWIN_FILE
    return twin if twin.is_file() else None


def _embedded_file(blob: str, sha256: Optional[str], where: str, what: str) -> tuple[bytes, str]:
    """An embedded file's bytes and sha256, checked against the one its checkpoint recorded."""
    raw = base64.b64decode(blob)
    digest = _sha256(raw)
    if sha256 and digest != sha256:
        raise CheckpointError(f"{where}: the embedded {what} has sha256 {digest}, but the checkpoint recorded "
                              f"{sha256}; the checkpoint's meta is damaged")
    return raw, digest


def tokenizer_from_json(blob: Optional[str], sha256: Optional[str] = None, where: str = "checkpoint",
                        config: Optional[dict] = None, twin: Optional[str] = None,
                        twin_sha256: Optional[str] = None) -> Optional[Path]:
    """The embedded tokenizer as a file in this process's private directory, checked against the
    sha256 its checkpoint recorded (a mismatch is an error naming both hashes): a sentencepiece
    `.model` alone, or, with `config` (an HF tokenizer's, or a directory's beside its
    tokenizer.model) or a `twin` (the tokenizer.json beside a tokenizer.model), an HF directory of
    its own holding them as the source directory did."""
    if not blob:
        return None
    raw, digest = _embedded_file(blob, sha256, where, "tokenizer")
    hf = raw.lstrip()[:1] == b"{"  # a tokenizer.json; a sentencepiece model is a protobuf
    if config is None and twin is None:
        path = _private_dir() / f"tokenizer-{digest}.model"
        if not path.exists():  # written once per process; only this process can write here
            with open(path, "xb") as f:
                f.write(raw)
        return path
    cfg = json.dumps(config or {}, indent=2, ensure_ascii=False)
    twin_raw, twin_digest = _embedded_file(twin, twin_sha256, where, "tokenizer.json") if twin else (None, "")
    d = _private_dir() / f"tokenizer-{digest}-{_sha256((cfg + twin_digest).encode())[:16]}"
    if not d.exists():  # written once per process; only this process can write here
        d.mkdir()
        if config is not None:
            (d / "tokenizer_config.json").write_text(cfg)
        if twin_raw is not None:
            (d / TWIN_FILE).write_bytes(twin_raw)
        (d / (TWIN_FILE if hf else SPM_FILE)).write_bytes(raw)
    return d / (TWIN_FILE if hf else SPM_FILE)


def make_meta(step: int, model_cfg: LlamaConfig, tokenizer_path: str | Path | None, **extra: Any) -> dict:
    """The one writer of a checkpoint's `meta` item: step, model config, embedded tokenizer (with
    the configuration and tokenizer.json beside an HF directory's tokenizer.model), plus what the
    caller adds (a run: rng, data_state, nan_skips, config; from-hf: source)."""
    blob = tokenizer_to_json(tokenizer_path)
    hf_config = tokenizer_config_of(tokenizer_path)
    twin = twin_of(tokenizer_path)
    twin_blob = tokenizer_to_json(twin)
    return {"step": step, "model": model_config_to_json(model_cfg), "tokenizer": blob,
            "tokenizer_sha256": _sha256(base64.b64decode(blob)) if blob else None,
            **({"tokenizer_config": hf_config} if hf_config is not None else {}),
            **({"tokenizer_twin": twin_blob, "tokenizer_twin_sha256": _sha256(twin.read_bytes())} if twin else {}),
            **extra}


def hf_dir_chat_format(path: str | Path) -> Optional[str]:
    """The chat_format a checkpoint of an HF directory records: "model" when its tokenizer has a
    chat template of its own (tokenizer_config.json's `chat_template`, or chat_template.jinja),
    else None (not chat-tuned, as far as anything in the directory says)."""
    return "model" if hf_dir_chat_template(path) else None


def run_chat_format(config: dict, inherited: Optional[str] = None) -> Optional[str]:
    """The chat_format a training run's checkpoints record: the `chat_format` of its chat sources
    (data.sources.*.format == "chat"; "chatml" when they mix both, since ChatML's markers are then
    trained) when it trains on any, else `inherited` (init.from's, or the resumed checkpoint's):
    continued pre-training of a chat model on text keeps it a chat model in its source's format."""
    sources = (config.get("data") or {}).get("sources") or {}
    formats = {s.get("chat_format", "chatml") for s in sources.values() if isinstance(s, dict) and s.get("format") == "chat"}
    if not formats:
        return inherited
    return "chatml" if "chatml" in formats else formats.pop()


def save_run(mngr: ocp.CheckpointManager, step: int, state: dict, model_cfg: LlamaConfig, tokenizer_path: str | Path,
             *, data_state: dict, nan_skips: int, config: dict, force: bool = False,
             stop_ids: list[int] | None = None, inherited_chat_format: Optional[str] = None) -> bool:
    """A training checkpoint: params, optimizer state, and the meta a resume needs (and the
    stop ids init.from declared, when it declared any; chat_format per `run_chat_format`)."""
    extra = {"stop_ids": [int(i) for i in stop_ids]} if stop_ids else {}
    meta = make_meta(step, model_cfg, tokenizer_path, rng={"seed": config.get("seed", 0)}, data_state=data_state,
                     nan_skips=nan_skips, config=config, chat_format=run_chat_format(config, inherited_chat_format),
                     **extra)
    return save(mngr, step, state["params"], meta, state["opt_state"], force=force)


@dataclasses.dataclass(frozen=True)
class ModelCheckpoint(Saved):
    """A step of an easylemur model: its meta read as the model's config and tokenizer."""

    @property
    def model_config(self) -> LlamaConfig:
        return model_config_from_json(self.meta["model"])

    @property
    def stop_ids(self) -> list[int]:
        """The stop ids the checkpoint declares (from-hf: generation_config.json's eos_token_id
        and the tokenizer's); [] in checkpoints written before the key existed."""
        return [int(i) for i in self.meta.get("stop_ids") or []]

    @property
    def chat_format(self) -> Optional[str]:
        """Whether and how the model was chat-tuned: "chatml", "model" or None (not chat-tuned,
        or a checkpoint from before the key: `has_chat_format` tells them apart)."""
        fmt = self.meta.get("chat_format")
        return fmt if fmt in CHAT_FORMATS else None

    @property
    def has_chat_format(self) -> bool:
        return "chat_format" in self.meta

    def tokenizer_path(self) -> Optional[Path]:
        """The embedded tokenizer as a file (a sentencepiece model, or a tokenizer.json with its
        tokenizer_config.json beside it), or None when the checkpoint has none."""
        return tokenizer_from_json(self.meta.get("tokenizer"), self.meta.get("tokenizer_sha256"), str(self.path),
                                   self.meta.get("tokenizer_config"), self.meta.get("tokenizer_twin"),
                                   self.meta.get("tokenizer_twin_sha256"))


def _model_checkpoint(saved: Saved) -> ModelCheckpoint:
    if "model" not in saved.meta:
        raise CheckpointError(f"{saved.path}: meta has no model config; not an easylemur model checkpoint")
    return ModelCheckpoint(saved.directory, saved.step, saved.meta, saved.step_dir)


def read_meta(path: str | Path, step: int | None = None) -> ModelCheckpoint:
    """The newest model checkpoint of a workdir (or `step`), a checkpoints dir or a step dir
    (under any name); a checkpoint without a model config is an error naming it."""
    return _model_checkpoint(read_saved(path, step))


def read_step(mngr: ocp.CheckpointManager, step: int) -> ModelCheckpoint:
    """One step of a manager's directory as a model checkpoint."""
    return _model_checkpoint(Saved(as_path(mngr.directory), step, restore_meta(mngr, step)))


def abstract_params(cfg: LlamaConfig, shardings: Any = None) -> Any:
    shapes, _ = param_specs(cfg)
    if shardings is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device), shapes)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def load_params(src: "ModelCheckpoint | str | Path", step: int | None = None, shardings: Any = None,
                **overrides) -> tuple[LlamaConfig, Any, Optional[Path]]:
    """(LlamaConfig, params, tokenizer path) from an easylemur checkpoint (a path, or a `Saved`
    already read).

    Params come back unscanned (layers_{i}) on one device unless `shardings` (for the
    checkpoint's own layout) is given; `overrides` replace LlamaConfig fields of the result
    (dtype, param_dtype, ...)."""
    saved = src if isinstance(src, ModelCheckpoint) else read_meta(src, step)
    saved_cfg = saved.model_config
    pdt = overrides.get("param_dtype", saved_cfg.param_dtype)
    restore_args = ocp.args.Composite(params=ocp.args.StandardRestore(abstract_params(saved_cfg, shardings)))
    params = restore_items(saved, restore_args)["params"]
    cfg = dataclasses.replace(saved_cfg, **overrides)
    if shardings is None and saved_cfg.scan_layers:
        params = unscan_params(params, saved_cfg.num_layers)
        cfg = dataclasses.replace(cfg, scan_layers=False)
    if pdt != saved_cfg.param_dtype:
        params = jax.tree.map(lambda x: x.astype(pdt), params)
    return cfg, params, saved.tokenizer_path()


def save_params(out: str | Path, cfg: LlamaConfig, params: Any, tokenizer_path: str | Path | None = None,
                extra_meta: dict | None = None) -> Path:
    """A parameter-only checkpoint (step 0) in a workdir-shaped folder `out`."""
    mngr = manager(as_path(out) / "checkpoints", async_save=False)
    save(mngr, 0, params, make_meta(0, cfg, tokenizer_path, **(extra_meta or {})), force=True)
    mngr.wait_until_finished()
    mngr.close()
    return as_path(out) / "checkpoints" / "0"
