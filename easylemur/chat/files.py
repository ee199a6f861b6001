"""Chat templates read from files: an HF directory's (tokenizer_config.json's `chat_template`,
the "default" one of a list, else a `chat_template.jinja` beside it, as transformers and vLLM
read it), and the file a `--chat-template` flag names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where newer HF checkpoints keep it, beside tokenizer_config.json


def default_template(value: Any) -> Optional[str]:
    """A tokenizer_config.json `chat_template` value as one text: a string as it is, a list of
    named templates (as transformers saves several) its "default" one; None when there is none."""
    if isinstance(value, list):
        value = next((x.get("template") for x in value if isinstance(x, dict) and x.get("name") == "default"), None)
    return value if isinstance(value, str) and value else None


def hf_dir_chat_template(path: str | Path) -> Optional[str]:
    """An HF directory's chat template text (the "default" one of a list), None without one."""
    d = Path(path)
    cfg_file, jinja = d / "tokenizer_config.json", d / CHAT_TEMPLATE_FILE
    t = None
    if cfg_file.is_file():
        try:
            t = default_template(json.loads(cfg_file.read_text(encoding="utf-8")).get("chat_template"))
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            t = None  # the tokenizer reader names a malformed file; here it only means "no template"
    if t is None and jinja.is_file():
        t = jinja.read_text(encoding="utf-8") or None
    return t


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
