"""Records to token arrays: the `Tokenize` grain map and the early check that a source has a
usable record at all (docs/design.md, "Bad records").

A record that cannot be trained on becomes a `BadRecord` value rather than an exception, so
it travels down the pipeline to be counted once (see packing.py) instead of stopping a run;
with data.strict=True it raises at once, naming file and line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grain
import numpy as np

from easylemur.chat.chatml import render_truncated
from easylemur.chat.template import ChatTemplate, ChatTemplateError, TemplateRejected
from easylemur.data.conversations import ChatFormatError, to_messages
from easylemur.data.records import (
    EMPTY,
    INVALID_UTF8,
    MISSING_FIELD,
    NO_TRAINED_TOKENS,
    NOT_A_STRING,
    UNKNOWN_ROLE,
    BadRecord,
    DataError,
)

if TYPE_CHECKING:
    from easylemur.tokenizer.spm import Tokenizer


class Tokenize(grain.transforms.Map):
    """(where, record) -> {"ids": int32[n], "mask": int8[n]} or a BadRecord (or None for a blank
    line). Text documents become BOS + tokens + EOS, all trained but BOS (a tokenizer without a
    BOS: tokens + EOS, all trained but the first token); conversations are
    rendered in ChatML (chat_format "chatml", chat.chatml.render_truncated) or with the tokenizer's own
    chat_template ("model", chat.template.ChatTemplate) and truncated to seq_len. A "model"
    source whose tokenizer has no chat_template fails here, when the pipeline is built."""

    def __init__(self, fmt: str, field: str, tokenizer: Tokenizer, seq_len: int, strict: bool, source_name: str,
                 chat_format: str = "chatml"):
        self.fmt = fmt
        self.chat_format = chat_format
        # compiled once per source; pickles as its text (grain pickles this map)
        try:
            self.template = ChatTemplate(tokenizer, source_name) if fmt == "chat" and chat_format == "model" else None
        except ChatTemplateError as e:
            raise DataError(str(e)) from None
        self.field = field or ("text" if fmt == "text" else "")
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.strict = strict
        self.source_name = source_name

    def _bad(self, kind: str, where: str, detail: str) -> BadRecord:
        bad = BadRecord(kind, where, detail)
        if self.strict:
            raise DataError(f"source '{self.source_name}': bad record at {bad.describe()} (data.strict=True)")
        return bad

    def map(self, item: tuple[str, Any]) -> dict[str, np.ndarray] | BadRecord | None:
        where, rec = item
        if rec is None:
            return None
        if isinstance(rec, BadRecord):
            return self._bad(rec.kind, rec.where, rec.detail)
        if self.fmt == "text":
            return self._text(where, rec)
        return self._chat(where, rec)

    def _not_utf8(self, text: str) -> str | None:
        """JSON escapes can smuggle lone surrogates ("\\ud800") into a str: not encodable."""
        if text.isascii():
            return None
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            return str(e)
        return None

    def _text(self, where: str, rec: dict) -> dict[str, np.ndarray] | BadRecord:
        if self.field not in rec:
            return self._bad(MISSING_FIELD, where, f"no field {self.field!r}")
        text = rec[self.field]
        if not isinstance(text, str):
            return self._bad(NOT_A_STRING, where, f"field {self.field!r} is {type(text).__name__}")
        if not text.strip():
            return self._bad(EMPTY, where, f"field {self.field!r} is empty")
        if (err := self._not_utf8(text)) is not None:
            return self._bad(INVALID_UTF8, where, err)
        tok = self.tokenizer
        enc = tok.encode_array(text)  # int32 straight from sentencepiece: no list of ints
        head = 0 if tok.bos_id is None else 1  # a tokenizer without BOS (Qwen2.5's): tokens + EOS
        n = len(enc) + head + 1
        ids = np.empty(n, np.int32)
        if head:
            ids[0] = tok.bos_id
        ids[head:-1], ids[-1] = enc, tok.eos_id
        mask = np.ones(n, np.int8)
        mask[0] = 0  # BOS, or without one the first token: nothing in its segment predicts it
        return {"ids": ids, "mask": mask}

    def _chat(self, where: str, rec: dict) -> dict[str, np.ndarray] | BadRecord:
        try:
            msgs = to_messages(rec, self.field or None)
        except ChatFormatError as e:
            return self._bad(e.kind, where, str(e).split(": ", 1)[-1])
        for m in msgs:
            if (err := self._not_utf8(m["content"])) is not None:
                return self._bad(INVALID_UTF8, where, err)
        if self.template is None:
            out = render_truncated(msgs, self.tokenizer, self.seq_len)
        else:
            try:
                out = self.template.render_truncated(msgs, self.seq_len)
            except TemplateRejected as e:  # mostly the roles: e.g. "roles must alternate user/assistant"
                return self._bad(UNKNOWN_ROLE, where, str(e))
            except ChatTemplateError as e:  # not prefix-stable: the source, not the record
                raise DataError(str(e)) from None
        if out is None:
            return self._bad(NO_TRAINED_TOKENS, where, f"no assistant token within seq_len={self.seq_len}")
        ids, mask = out
        return {"ids": np.asarray(ids, np.int32), "mask": np.asarray(mask, np.int8)}


def probe_source(records: grain.MapDataset, tokenize: Tokenize, name: str, path: str = "") -> None:
    """Fails early when a source (this process's share of it) has no usable record.

    Without it, a source of nothing but bad records would be found out only when the packer
    gives up after a full pass of consecutive bad records, deep inside the prefetch thread; the
    probe stops at the first usable record, so a healthy source costs next to nothing."""
    kinds: dict[str, int] = {}
    for i in range(len(records)):
        out = tokenize.map(records[i])
        if isinstance(out, dict):
            return
        if isinstance(out, BadRecord):
            kinds[out.kind] = kinds.get(out.kind, 0) + 1
    detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "blank lines only"
    where = f" ({path})" if path else ""
    raise DataError(f"source '{name}'{where} has no usable record ({len(records)} records read: {detail})")
