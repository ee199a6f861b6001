"""The one override parser: a config file merged over the defaults (`_merge`), `a.b.c=value`
strings parsed to the type of the key they replace (`apply_override`), and every command line's
`--config.KEY=VALUE` / `--config.KEY VALUE` split off from its own flags (`split_overrides`,
`parse_cli`, `OVERRIDE_HELP`)."""

from __future__ import annotations

import argparse
import ast
from typing import Any, Sequence

from ml_collections import ConfigDict

from easylemur.config.schema import ConfigError


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


OVERRIDE_HELP = ("Override any config key with --config.KEY=VALUE (or --config.KEY VALUE), e.g. --config.train.steps=50; "
                 "--help-config lists every key with its default and meaning (also docs/reference/config.md).")
