"""The one config schema: defaults for every key (per-source keys included), loading of
configs/*.py, the one command-line override parser, validation.

A config file defines `get_config()` returning an `ml_collections.ConfigDict`; it only needs to
set the keys it changes: `load_config` merges it over `default_config()`, and a key that the
schema does not have is an error that names it. Overrides are `a.b.c=value` strings (on every
command line `--config.a.b.c=value` or `--config.a.b.c value`, split off by `parse_cli`),
parsed to the type of the key they replace.

- `schema.py`: `default_config()` (every key, its default and its comment), one source's keys
  (`SOURCE_DEFAULTS`, `FORMATS`, `KINDS`), `ConfigError`; imports nothing of the others;
- `overrides.py`: the one override parser (`apply_override`, the merge of a file over the
  defaults) and the command-line split (`split_overrides`, `parse_cli`, `OVERRIDE_HELP`);
- `sources.py`: data sources' defaults filled in and checked (`source_dict`, `validate_sources`);
- `tasks.py`: the eval task names (`LM_EVAL`, `task_eval_names`; benchmarks by the eval
  registry's names) and the checks of `eval.*`;
- `stages.py`: the mixture's stages (`data.stages`) checked;
- `model.py`: the model section resolved (`model_config`, `compute_dtype`);
- `load.py`: `load_config`, `validate`, `cli_config`, `to_json`.

This file is the package's door: code imports these names from `easylemur.config`. The package
imports only `errors`, `chat.formats` and `model.config` (`LlamaConfig` and the presets, plain
data) when loaded; `compute_dtype` imports `host` when called. None of it imports JAX or Flax:
loading and checking a config does not load the model's code (tests/test_config_imports.py).
"""

from easylemur.config.load import cli_config, load_config, to_json, validate
from easylemur.config.model import compute_dtype, model_config
from easylemur.config.overrides import OVERRIDE_HELP, apply_override, parse_cli, split_overrides
from easylemur.config.schema import FORMATS, KINDS, SOURCE_DEFAULTS, ConfigError, default_config
from easylemur.config.sources import source_dict, validate_sources
from easylemur.config.tasks import LM_EVAL, task_eval_names

__all__ = [
    "FORMATS", "KINDS", "LM_EVAL", "OVERRIDE_HELP", "SOURCE_DEFAULTS",
    "ConfigError", "apply_override", "cli_config", "compute_dtype", "default_config", "load_config",
    "model_config", "parse_cli", "source_dict", "split_overrides", "task_eval_names",
    "to_json", "validate", "validate_sources",
]
