"""A whole config loaded and checked: a configs/*.py file run (`_config_of_file`), merged over the
defaults with the overrides applied (`load_config`), every value checked across the sections
(`validate`); a command's config from its command line (`cli_config`); the config as JSON
(`to_json`)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import traceback
from pathlib import Path
from typing import Any, Iterable, Sequence

from ml_collections import ConfigDict

from easylemur.config.model import model_config
from easylemur.config.overrides import _OPEN_KEYS, _merge, apply_override, parse_cli
from easylemur.config.schema import ConfigError, default_config
from easylemur.config.sources import _check_source_values, _fill_source_defaults
from easylemur.config.stages import _checked_stages
from easylemur.config.tasks import _check_task_evals


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
    if cfg.distributed.jax_heartbeat_timeout_seconds < 0:
        raise ConfigError("config key 'distributed.jax_heartbeat_timeout_seconds' must be 0 (2 x heartbeat + 20 s) "
                          f"or more, got {cfg.distributed.jax_heartbeat_timeout_seconds}")
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


def cli_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, ConfigDict]:
    """`parse_cli`, then the config file its --config names with the overrides applied; a bad
    config ends the command with status 2 and a one-line error naming the key."""
    import sys

    if not any(a.option_strings == ["--help-config"] for a in parser._actions):
        parser.add_argument("--help-config", action="store_true",
                            help="print every config key with its default and what it does, and exit")
    if "--help-config" in (sys.argv[1:] if argv is None else argv):
        from easylemur.config.reference import help_text

        print(help_text())
        raise SystemExit(0)
    args, overrides = parse_cli(parser, argv)
    try:
        return args, load_config(args.config, overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def to_json(cfg: ConfigDict) -> str:
    return json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str)
