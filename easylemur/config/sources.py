"""Data sources' configs (`data.sources.<name>`, `data.eval_sources.<name>`): one source as a dict
with the schema's defaults filled in (`source_dict`), and the checks of each source's keys and
values (`validate_sources`)."""

from __future__ import annotations

from typing import Any, Mapping

from easylemur.chat.formats import CHAT_FORMATS
from easylemur.config.schema import FORMATS, KINDS, SOURCE_DEFAULTS, ConfigError


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
