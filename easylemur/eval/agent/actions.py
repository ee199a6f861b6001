"""An agent's reply read as an action: code to run (`<execute>`, or a fenced block of the
tool's language), a proposed answer (`<solution>`, or InterCode's bare `submit`), giving up (an
empty reply), or none; and an observation clipped to its head and tail."""

from __future__ import annotations

import re
from typing import Optional, Sequence

OBSERVATION_CHARS = 2000  # an observation longer than this keeps its head and tail

_TAG = {name: re.compile(rf"<{name}>(.*?)(?:</{name}>|\Z)", re.S) for name in ("execute", "solution")}
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def fenced(text: str, languages: Sequence[str] = ()) -> Optional[str]:
    """The first fenced block of `text` (of one of `languages`, or unlabelled), or None."""
    for m in _FENCE.finditer(text):
        if not languages or not m.group(1) or m.group(1).lower() in languages:
            return m.group(2)
    return None


def parse_reply(reply: str, languages: Sequence[str]) -> tuple[str, str]:
    """(action, content): a `<solution>` is a proposal even beside code; then `<execute>`, then a
    fenced block of the tool's language; InterCode's bare `submit` is a proposal of ""."""
    if not reply.strip():
        return "give up", ""
    m = _TAG["solution"].search(reply)
    if m:
        return "solution", m.group(1).strip("\n")
    m = _TAG["execute"].search(reply)
    if m:
        return "execute", m.group(1).strip("\n")
    if reply.strip().lower().strip("`") == "submit":
        return "solution", ""
    code = fenced(reply, languages)
    if code is not None:
        return "execute", code
    return "none", ""


def clip(text: str, limit: int = OBSERVATION_CHARS) -> str:
    """`text` cut to `limit` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"
