"""Chat templates read from files: what an HF directory holds (tokenizer_config.json's
`chat_template`, a `chat_template.jinja` beside it, named ones in `additional_chat_templates/`;
which one a model chats with is `choice.py`'s rule), and the file a `--chat-template` flag names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where newer HF checkpoints keep it, beside tokenizer_config.json
CHAT_TEMPLATE_DIR = "additional_chat_templates"  # named templates, one NAME.jinja each (transformers 5)


def token_text(value: Any) -> Optional[str]:
    """A tokenizer configuration's token entry: a string, an AddedToken dict ({"content": ...})
    or null."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def default_template(value: Any) -> Optional[str]:
    """A tokenizer_config.json `chat_template` value as one text: a string as it is, a list of
    named templates (as transformers saves several) its "default" one; None when there is none."""
    if isinstance(value, list):
        value = next((x.get("template") for x in value if isinstance(x, dict) and x.get("name") == "default"), None)
    return value if isinstance(value, str) and value else None


def config_template(directory: str | Path) -> Any:
    """tokenizer_config.json's raw `chat_template` value in `directory` (None without one)."""
    cfg_file = Path(directory) / "tokenizer_config.json"
    if not cfg_file.is_file():
        return None
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # the tokenizer reader names a malformed file; here it only means "no template"
    return cfg.get("chat_template") if isinstance(cfg, dict) else None


def template_files(directory: str | Path) -> dict[str, str]:
    """The template files in `directory`, by name, as transformers collects them:
    chat_template.jinja is "default", additional_chat_templates/NAME.jinja is NAME."""
    d = Path(directory)
    found = {}
    if (d / CHAT_TEMPLATE_FILE).is_file():
        found["default"] = (d / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    if (d / CHAT_TEMPLATE_DIR).is_dir():
        for f in sorted((d / CHAT_TEMPLATE_DIR).glob("*.jinja")):
            found[f.name.removesuffix(".jinja")] = f.read_text(encoding="utf-8")
    return found


def read_template_file(path: str, flag: str = "--chat-template") -> str:
    """A chat template given on the command line: a Jinja file (as vLLM's --chat-template), or a
    tokenizer_config.json whose `chat_template` it is. InputError naming the file otherwise."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{flag} {path}: {'is a directory' if p.is_dir() else 'does not exist'}; give a Jinja file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{flag} {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at byte {e.start})") from None
    if p.suffix == ".json":
        try:
            t = default_template(json.loads(text).get("chat_template"))
        except (json.JSONDecodeError, AttributeError):
            t = None
        if t is None:
            raise InputError(f"{flag} {path}: a JSON file without a chat_template string")
        return t
    if not text.strip():
        raise InputError(f"{flag} {path}: the file is empty")
    return text
