"""InterCode's SQL action parser (`sql_parser` of experiments/utils/utils.py), restated: from a
reply, the query to run and whether it counts as code.

- "\\_" becomes "_" first;
- a reply with no ``` fence: one that starts with the "SQL: " prefix yields the one character
  after the prefix (InterCode indexes the text there instead of slicing it); else, at the first
  of the keywords (SHOW, SELECT, DESCRIBE, DESC, in that order) that occurs anywhere in it (case
  sensitive), the text from there up to the first ";";
- otherwise the first fenced block (a ```sql/```SQL fence preferred, then any fence), its blank
  space folded to single spaces and cut at the first ";", is code when its first word, upper-cased,
  is a keyword; no block is no code (the reply itself is kept as the action).
An empty block is no code: Lemur's fork answers "NO ACTION" (read from its parser); InterCode's
own parser raised there.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

_SQL_FENCE = re.compile(r"```(?:sql|SQL)?([\S\s]+?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```([\S\s]+?)```", re.DOTALL)


def _before_semicolon(text: str) -> str:
    return text.split(";", 1)[0]


def parse_action(reply: str, keywords: Sequence[str], prefix: str, empty: Optional[str] = None) -> tuple[str, bool]:
    """(action, is_code). `empty`: what an empty fenced block yields (Lemur's fork: "NO ACTION";
    None: the empty text)."""
    text = reply.replace("\\_", "_")
    if "```" not in text:
        if text.startswith(prefix):
            return _before_semicolon(text[len(prefix)] if len(text) > len(prefix) else ""), True
        for word in keywords:
            if word in text:
                return _before_semicolon(text[text.index(word):]), True
    found = _SQL_FENCE.findall(text) + _ANY_FENCE.findall(text)
    if not found:
        return text, False
    action = _before_semicolon(" ".join(found[0].split()))
    words = action.split()
    if not words:
        return (action if empty is None else empty), False
    return action, bool(words) and words[0].upper() in keywords
