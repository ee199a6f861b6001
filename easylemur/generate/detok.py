"""Text of a growing reply, in pieces that never change once given (`IncrementalText`): how
`generate` streams (and how the server may). Decoding every prefix of a reply again costs time
quadratic in its length; this decodes a short window at each step.

The rule (as vLLM's incremental detokenizer): keep two offsets into the ids, `read` (the text up
to it was given out) and `prefix` (a few tokens before it, for context: a sentencepiece or
Metaspace decoder drops the space of the first token it decodes, so a window must not start at
the new token). At each step the window ids[prefix:] is decoded; its text past that of
ids[prefix:read] is new, given out unless it ends in U+FFFD, which is what byte tokens that do not
yet form a whole UTF-8 character decode to: those wait for their next byte, and `finish` gives out
whatever still waits (an invalid sequence stays U+FFFD, as the whole reply decodes it). The
concatenation of the pieces equals `tokenizer.decode(ids)` (tests/test_detok.py checks it on
replies full of byte tokens, for both kinds of tokenizer)."""

from __future__ import annotations

from typing import Any, Iterable

REPLACEMENT = "\ufffd"


class IncrementalText:
    """A reply's text, given out piece by piece as its ids arrive (see the module doc)."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # the window's start: context for the decoder, text already given out
        self.read = 0  # ids before it are given out as text

    def push(self, ids: Iterable[int]) -> str:
        """Adds the next ids; returns the text that can no longer change ("" while it waits)."""
        self.ids.extend(int(i) for i in ids)
        if len(self.ids) == self.read:
            return ""
        before = self.tok.decode(self.ids[self.prefix:self.read]) if self.read > self.prefix else ""
        now = self.tok.decode(self.ids[self.prefix:])
        if len(now) <= len(before) or now.endswith(REPLACEMENT) or not now.startswith(before):
            return ""  # half a character, or nothing new yet: wait for the next ids
        self.prefix, self.read = self.read, len(self.ids)
        return now[len(before):]

    def finish(self) -> str:
        """The text still held back (a reply that ends in half a character)."""
        if len(self.ids) == self.read:
            return ""
        before = self.tok.decode(self.ids[self.prefix:self.read]) if self.read > self.prefix else ""
        now = self.tok.decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return now[len(before):] if now.startswith(before) else now
