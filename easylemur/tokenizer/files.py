"""The configuration files beside a tokenizer in an HF directory, read as transformers reads
them: `tokenizer_config.json`, and `special_tokens_map.json` where the config has no
`added_tokens_decoder` (transformers 5's "legacy" path: the map's entries then replace the
config's, so a BOS/EOS declared only there counts). One reader for both tokenizer kinds; a
malformed file is a TokenizerError naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from easylemur.errors import InputError


class TokenizerError(InputError):
    """A tokenizer file or configuration that cannot be read as one; the message names it."""


TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(value, dict):
        raise TokenizerError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_tokenizer_config(directory: str | Path) -> dict[str, Any]:
    """A directory's tokenizer configuration as transformers assembles it ({} without files):
    tokenizer_config.json, then, when that has no `added_tokens_decoder`, every entry of
    special_tokens_map.json over it (an AddedToken dict in tokenizer_config.json's spelling, so
    that the configuration can be written as one file)."""
    d = Path(directory)
    cfg_file, map_file = d / TOKENIZER_CONFIG, d / SPECIAL_TOKENS_MAP
    config = _read_json(cfg_file) if cfg_file.is_file() else {}
    if "added_tokens_decoder" not in config and map_file.is_file():
        for key, value in _read_json(map_file).items():
            # as tokenizer_config.json spells an AddedToken (transformers reads the map's as special ones)
            config[key] = {**value, "__type": "AddedToken", "special": True} if isinstance(value, dict) else value
    return config
