"""Where a run starts: its tokenizer, model config, parameters, optimizer state, data state and
counters, for each of the three ways a run begins (docs/design.md, "Checkpoint layout"):

- resume: the workdir holds a checkpoint; the tokenizer, the architecture, the parameter dtype
  and the layer layout are the checkpoint's, the compute options the run config's;
- init.from: an HF directory or an easylemur checkpoint gives the architecture, the tokenizer
  and the parameters (restored straight into shards, restacked when the layer layout differs,
  the vocabulary grown on device with train.extend_vocab);
- fresh: the preset (plus model.* keys), random parameters created in their shards.

`resolve_run` is the part that needs no parameters: `aot` uses it to compile the same step.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import jax
from ml_collections import ConfigDict

from easylemur.checkpoint import store, model_meta
from easylemur.convert import hf
from easylemur.config import ConfigError, compute_dtype, model_config
from easylemur.convert.source import read_source, source_tokenizer
from easylemur.errors import brief
from easylemur.convert.weights import load_weights
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import init_params
from easylemur.sharding import all_processes_agree, platform as mesh_platform, sync_processes
from easylemur.train.step import TrainStep, build_train_step
from easylemur.tokenizer import load_tokenizer
from easylemur.tokenizer.spm import Tokenizer
from easylemur.model.vocab import extend_vocab

# LlamaConfig fields that say how to compute, not what the model is: a run config sets them
# even when the architecture comes from init.from or a resumed checkpoint. So a run resumed on
# another machine computes in that machine's dtype (model.dtype=auto: bf16 on one CPU, float32
# on another; docs/design.md, "Compute dtype on CPUs"), said as a changed compute option.
COMPUTE_FIELDS = ("dtype", "param_dtype", "scan_layers", "remat", "attention", "attn_block_size")
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "tie_word_embeddings", "family", "qkv_bias")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What a run computes with, known before any parameter is loaded."""

    tokenizer: Tokenizer
    model_cfg: LlamaConfig  # the step's model (vocabulary already grown when it grows)
    start_cfg: LlamaConfig  # the model the parameters are first made or loaded in
    resume: Optional[model_meta.ModelCheckpoint] = None  # the workdir's checkpoint being resumed
    source: Any = None  # init.from: None, an HF directory (str) or a checkpoint (Saved)
    source_cfg: Optional[LlamaConfig] = None  # init.from's architecture as stored
    compute: str = ""  # "compute <dtype> (<why>)", for the run's start line (config.compute_dtype)


@dataclasses.dataclass
class Run:
    """The run's starting point, as the train loop takes it over."""

    tokenizer: Tokenizer
    model_cfg: LlamaConfig
    train_step: TrainStep
    state: dict  # {"params", "opt_state"}, global arrays in train_step.state_shardings
    start_step: int
    data_state: Optional[dict]  # the data iterator state to resume from, None when fresh
    nan_skips: int
    # the stop ids the model declares (init.from's generation_config.json or checkpoint meta),
    # carried into every checkpoint so that generate and to-hf stop where the source model did
    stop_ids: list[int] = dataclasses.field(default_factory=list)
    # init.from's (or the resumed checkpoint's) chat_format, kept by a run that trains on text
    # only (model_meta.run_chat_format)
    chat_format: Optional[str] = None
    compute: str = ""  # "compute <dtype> (<why>)": the start line says it (RunSpec.compute)


def resolve_model_config(cfg: ConfigDict, tokenizer: Tokenizer, source: Any = None,
                         source_cfg: Optional[LlamaConfig] = None, platform: Optional[str] = None) -> LlamaConfig:
    """The architecture from init.from when set (else the preset), compute options from the
    run config (model.dtype=auto resolved for `platform`, `config.compute_dtype`); explicit
    model.* keys win (e.g. rope_theta, rope_scaling or max_position_embeddings for longer
    context), but a shape key may not contradict the source. From scratch, the vocabulary
    follows the tokenizer unless model.vocab_size is set."""
    run = model_config(cfg, platform)
    if source is None:
        if "vocab_size" not in cfg.model:
            run = dataclasses.replace(run, vocab_size=tokenizer.vocab_size)
        return run
    arch = source_cfg or _source_model_config(source)
    explicit = {k: getattr(run, k) for k in cfg.model if k != "preset"}
    for k in SHAPE_FIELDS:
        if k in explicit and explicit[k] != getattr(arch, k):
            raise ConfigError(
                f"model.{k}={explicit[k]} contradicts init.from={cfg.init['from']} ({k}={getattr(arch, k)}); "
                f"drop the override (vocabulary growth: train.extend_vocab)"
            )
    return dataclasses.replace(arch, **{**{k: getattr(run, k) for k in COMPUTE_FIELDS}, **explicit})


def _source_model_config(source: Any) -> LlamaConfig:
    return hf.read_hf_config(source) if isinstance(source, str) else source.model_config


def resolve_run(cfg: ConfigDict, resume: Optional[model_meta.ModelCheckpoint] = None,
                platform: Optional[str] = None) -> RunSpec:
    """The tokenizer and model config a run uses: a resumed run its checkpoint's (compute
    options from the config, except the stored param dtype and layer layout: the state is
    restored as stored), otherwise init.from's or the preset's. `platform` is the one the step
    is compiled for (`sharding.platform(mesh)`), which model.dtype=auto is resolved for; None
    (no mesh at hand, as `aot` compiling for TPU on a CPU host) resolves it as off a CPU."""
    dtype, why = compute_dtype(cfg, platform)
    compute = f"compute {dtype} ({why})"
    if resume is not None:
        saved = resume.model_config
        check_resumed_architecture(cfg, saved, resume.step)
        run = model_config(cfg, platform)
        kept = ("param_dtype", "scan_layers")
        model_cfg = dataclasses.replace(saved, **{k: getattr(run, k) for k in COMPUTE_FIELDS if k not in kept})
        _check_sliding_window(cfg, model_cfg)
        return RunSpec(load_tokenizer(resume.tokenizer_path()), model_cfg, model_cfg, resume=resume, compute=compute)
    source = read_source(cfg.init["from"])
    tokenizer = source_tokenizer(cfg, source)
    source_cfg = None if source is None else _source_model_config(source)
    start = resolve_model_config(cfg, tokenizer, source, source_cfg, platform)
    model_cfg = start
    if tokenizer.vocab_size > start.vocab_size:
        if not cfg.train.extend_vocab:
            raise ConfigError(
                f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocab_size is "
                f"{start.vocab_size}; set train.extend_vocab=True to grow the embeddings"
            )
        model_cfg = dataclasses.replace(start, vocab_size=tokenizer.vocab_size)
    _check_sliding_window(cfg, model_cfg)
    return RunSpec(tokenizer, model_cfg, start, source=source, source_cfg=source_cfg, compute=compute)


def _check_sliding_window(cfg: ConfigDict, model_cfg: LlamaConfig) -> None:
    """A Mistral window shorter than the rows would change the model: easylemur does not
    implement windowed attention (docs/design.md, "HF layout")."""
    window = model_cfg.sliding_window
    if window is not None and cfg.data.seq_len > window:
        raise ConfigError(f"data.seq_len={cfg.data.seq_len} is longer than the model's sliding_window={window}; "
                          f"easylemur does not implement sliding-window attention: use data.seq_len <= {window}")


def restore_or_init(cfg: ConfigDict, mesh: Any, mngr: Any) -> Run:
    """The run's starting point: resumed from `mngr`'s newest checkpoint that restores and
    verifies (bit for bit: params, optimizer state, data position, counters), else a new start.

    A newer step that cannot be read or does not match its recorded checksums is moved aside
    (`checkpoints/<step>.damaged`) with a message saying why, and the step before it is tried
    (docs/design.md, "Checkpoint integrity"). Checkpoints none of which restores are an error,
    never a silent fresh start."""
    skipped = []
    platform = mesh_platform(mesh)  # model.dtype=auto: the mesh's devices', not the host's
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            resume = model_meta.read_step(mngr, step)
        except Exception as e:  # a missing or unreadable meta item: the step is damaged
            resume, error = None, e
        if resume is not None:
            spec = resolve_run(cfg, resume, platform)
            ts = build_train_step(cfg, spec.model_cfg, mesh)
            try:
                params, opt_state = store.restore(mngr, step, ts.state_abstract["params"],
                                                       ts.state_abstract["opt_state"])
                store.verify_restored(resume, {"params": params, "opt_state": opt_state})
                error = None
            except Exception as e:  # truncated or missing files, a checksum that does not match
                error = e
        if not all_processes_agree(error is None):
            reason = brief(error) if error else "another host could not restore it"
            skipped.append(f"step {step}: {reason}")
            if jax.process_index() == 0:
                moved = store.move_aside(mngr, step)
                print(f"checkpoint step {step} is damaged ({reason}); moved it to {moved}", flush=True)
            sync_processes(f"move_aside_{step}")
            mngr.reload()
            continue
        print(f"resumed from {resume.path}" + (f" (newer damaged steps skipped: {len(skipped)})" if skipped else ""),
              flush=True)
        say_changed_settings(cfg, resume, spec.model_cfg)
        return Run(spec.tokenizer, spec.model_cfg, ts, {"params": params, "opt_state": opt_state}, step,
                   resume.meta.get("data_state"), int(resume.meta.get("nan_skips", 0)), resume.stop_ids,
                   resume.chat_format, spec.compute)
    if skipped:
        raise store.CheckpointError(
            f"{mngr.directory}: no checkpoint restores ({'; '.join(skipped)}); the damaged steps were moved "
            "aside: remove them to start over, or restore a copy")
    spec = resolve_run(cfg, None, platform)
    ts = build_train_step(cfg, spec.model_cfg, mesh)
    params = initial_params(cfg, spec, mesh)
    if jax.process_index() == 0:
        print(f"initialized from {_source_words(cfg, spec.source)}", flush=True)
    if spec.model_cfg.vocab_size > spec.start_cfg.vocab_size:
        # grown on device, new rows the mean of the old (docs/design.md, "Tokenizer")
        params, _ = extend_vocab(params, spec.start_cfg, spec.model_cfg.vocab_size)
        params = jax.device_put(params, ts.state_shardings["params"])
        print(f"vocabulary grown from {spec.start_cfg.vocab_size} to {spec.model_cfg.vocab_size} (ChatML tokens)",
              flush=True)
    opt_state = jax.jit(ts.tx.init, out_shardings=ts.state_shardings["opt_state"])(params)
    return Run(spec.tokenizer, spec.model_cfg, ts, {"params": params, "opt_state": opt_state}, 0, None, 0,
               _source_stop_ids(spec.source), _source_chat_format(spec.source), spec.compute)


def _source_words(cfg: ConfigDict, source: Any) -> str:
    """What a fresh run's weights came from, for its start line."""
    if source is None:
        return f"random weights (seed {cfg.seed}, model.preset={cfg.model.preset}): no init.from"
    if isinstance(source, str):
        return f"init.from={cfg.init['from']} (an HF directory)"
    return f"init.from={cfg.init['from']} (checkpoint {source.path})"


def _source_chat_format(source: Any) -> Optional[str]:
    """init.from's chat_format (model_meta.run_chat_format carries it when a run trains on text
    only): an HF directory's per its chat template, a checkpoint's meta (None before the key)."""
    if source is None:
        return None
    if isinstance(source, str):
        return model_meta.hf_dir_chat_format(source)
    return getattr(source, "chat_format", None)


def _source_stop_ids(source: Any) -> list[int]:
    """init.from's declared stop ids: an HF directory's generation_config.json, a checkpoint's meta."""
    if source is None:
        return []
    if isinstance(source, str):
        return hf.declared_eos_ids(source)
    return list(getattr(source, "stop_ids", []))


def check_resumed_architecture(cfg: ConfigDict, saved: LlamaConfig, step: int) -> None:
    """A resumed run keeps its checkpoint's architecture: a config whose model differs (a preset
    or a model.* key other than the compute options) is an error naming every key, never a
    silently ignored override. With init.from the architecture came from the source, so only
    the keys the config sets explicitly are compared."""
    now = model_config(cfg)
    explicit = {k for k in cfg.model if k != "preset"}
    keys = [f.name for f in dataclasses.fields(LlamaConfig) if f.name not in COMPUTE_FIELDS]
    if cfg.init["from"]:
        keys = [k for k in keys if k in explicit]
    elif "vocab_size" not in explicit:
        keys.remove("vocab_size")  # a fresh run's vocabulary follows its tokenizer, stored with the checkpoint
    changed = []
    for k in keys:
        a, b = getattr(saved, k), getattr(now, k)
        if k == "vocab_size" and cfg.train.extend_vocab and b < a:
            continue  # grown at the start (train.extend_vocab): the checkpoint holds the grown vocabulary
        if a != b:
            changed.append(f"model.{k}={b} (checkpoint: {a})")
    if changed:
        raise ConfigError(
            f"resuming step {step} of {cfg.workdir}: the config's model differs from the checkpoint's "
            f"({'; '.join(changed)}); a resumed run keeps its architecture: drop the override, or train it in a new "
            "workdir with init.from set to this checkpoint")


# What decides the order of the data: a resumed run that changes one of these continues, but
# its batches are not the ones the original run would have seen.
DATA_ORDER_KEYS = ("seed", "train.batch_size", "data.seq_len", "data.shards", "data.sources", "data.stages")
# What the optimizer applies from the resumed step on: a change takes effect (the schedule is
# evaluated at the optimizer's own count), and is said.
OPTIMIZER_KEYS = ("optimizer", "train.steps", "train.grad_accum", "train.z_loss")


def say_changed_settings(cfg: ConfigDict, resume: model_meta.ModelCheckpoint, model_cfg: LlamaConfig) -> None:
    """One line per kind of setting that differs from the checkpoint's run: data order (the
    batches differ from the original run's from here on), optimizer and schedule (applied),
    compute options (applied; param_dtype and scan_layers stay the checkpoint's)."""
    if jax.process_index() != 0:
        return
    saved, now = resume.meta.get("config"), cfg.to_dict()
    if saved:
        before, after = sorted((saved.get("data") or {}).get("sources") or {}), sorted(now["data"]["sources"] or {})
        if before and before != after:
            # the data iterator's state is per source: this is another run, not a resume of that one
            raise ConfigError(
                f"workdir {cfg.workdir} holds a run over data sources {before} (step {resume.step}); this config reads "
                f"{after}. A new run needs its own workdir (--config.workdir=NEW); add --config.init.from="
                f"{cfg.workdir} to start from that run's weights")
        data = _changes(saved, now, DATA_ORDER_KEYS)
        if data:
            print(f"warning: resuming step {resume.step} with changed data settings ({data}): the data order "
                  "differs from the original run's from here on", flush=True)
        opt = _changes(saved, now, OPTIMIZER_KEYS)
        if opt:
            print(f"resuming step {resume.step} with changed optimizer settings ({opt}): applied from step "
                  f"{resume.step + 1} on", flush=True)
    stored, asked = resume.model_config, model_config(cfg)
    compute = [f"model.{k} {getattr(stored, k)} -> {getattr(model_cfg, k)}" for k in COMPUTE_FIELDS
               if getattr(stored, k) != getattr(model_cfg, k)]
    kept = [f"model.{k}={getattr(asked, k)}" for k in ("param_dtype", "scan_layers")
            if getattr(asked, k) != getattr(stored, k) and k in cfg.model]
    if compute:
        print(f"resuming step {resume.step} with changed compute options ({'; '.join(compute)}): applied", flush=True)
    if kept:
        print(f"resuming step {resume.step}: {', '.join(kept)} ignored: the state is restored as stored "
              f"(param_dtype {stored.param_dtype}, scan_layers {stored.scan_layers})", flush=True)


def _changes(saved: dict, now: dict, keys: tuple) -> str:
    """'key old -> new; ...' for the leaves under `keys` that differ between two run configs."""
    out = []
    for key in keys:
        a, b = _get(saved, key), _get(now, key)
        if key == "data.stages" and a is None and not b:
            continue  # a run saved before stages existed had none
        if isinstance(a, dict) and isinstance(b, dict) and key == "data.sources":
            out += [f"{key}.{name}.{k} {json.dumps((a.get(name) or {}).get(k), default=str)} -> "
                    f"{json.dumps((b.get(name) or {}).get(k), default=str)}"
                    for name in sorted(set(a) | set(b))
                    for k in sorted(set(a.get(name) or {}) | set(b.get(name) or {}))
                    if (a.get(name) or {}).get(k) != (b.get(name) or {}).get(k)]
        elif isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k} {json.dumps(a.get(k), default=str)} -> {json.dumps(b.get(k), default=str)}"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key} {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}")
    return "; ".join(out)


def _get(d: dict, dotted: str) -> Any:
    for k in dotted.split("."):
        d = d.get(k) if isinstance(d, dict) else None
    return d


def initial_params(cfg: ConfigDict, spec: RunSpec, mesh: Any) -> Any:
    """Random (sharded) params, or init.from's params in `spec.start_cfg`'s layout and shards
    (`convert.weights.load_weights`)."""
    start = spec.start_cfg
    if spec.source is None:
        return init_params(start, jax.random.PRNGKey(cfg.seed), mesh)
    return load_weights(spec.source, start, mesh)
