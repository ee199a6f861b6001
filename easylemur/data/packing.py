"""Documents to rows: `PackIterDataset` packs one source's token arrays into rows of seq_len
(docs/design.md, "Packing"), and `collate` stacks rows into the batch layout of batch.py.

A row holds documents of one source only, each its own segment (segment_ids 1, 2, ...;
positions restart at 0), so attention never crosses documents and the row's source is known.
The bad records met while filling a row ride on it as notes (`_bad`), so they are counted
exactly once, when the row is consumed (not when the prefetch thread builds it), and the
counts saved with a checkpoint match the rows consumed.

A packer's state is always at a row boundary: the parent's state just before the document
that starts the next row, and the number of that document's tokens already used.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import grain
import numpy as np

from easylemur.data import batch as batch_layout
from easylemur.data.records import BadRecord, DataError


class PackIterDataset(grain.IterDataset):
    """Packs one source's documents into rows of `seq_len`.

    split=True (text): concatenate then split, rows are full; a document that does not fit
    continues in the next row as a new segment (positions restart at 0).
    split=False (chat): a conversation (already <= seq_len) is never split; the row is padded
    when the next one does not fit."""

    def __init__(self, parent: grain.IterDataset, seq_len: int, split: bool, source_index: int,
                 source_name: str, max_consecutive_bad: int, first_pass: int | None = None):
        super().__init__(parent)
        self.seq_len = seq_len
        self.split = split
        self.source_index = source_index
        self.source_name = source_name
        self.max_consecutive_bad = max_consecutive_bad
        # records in one pass of a repeated source: a bad record met past them (a later epoch)
        # was noted in the first pass already, so that each is counted and shown once
        self.first_pass = first_pass

    def __iter__(self) -> PackIterator:
        return PackIterator(self._parent.__iter__(), self)


class PackIterator(grain.DatasetIterator):
    """The packing loop of a `PackIterDataset`. It keeps the partly used document between rows
    and reports its state as (parent state before that document, tokens used), because grain
    can only restore a parent at a document boundary, not in the middle of one."""

    def __init__(self, parent: grain.DatasetIterator, cfg: PackIterDataset):
        super().__init__(parent)
        self.cfg = cfg
        self._pending = None  # (doc, tokens used, parent state before the doc)
        self._done = False
        self._arange = np.arange(cfg.seq_len, dtype=np.int32)

    def _next_doc(self, notes: list):
        """(parent state before the doc, doc) of the next usable document, noting bad ones."""
        bad_run = 0
        parent = self._parent
        while True:
            state = parent.get_state()
            elem = next(parent)  # StopIteration propagates
            if elem is None:
                continue
            if isinstance(elem, BadRecord):
                at = state.get("next_index") if isinstance(state, Mapping) else None
                if self.cfg.first_pass is None or not isinstance(at, int) or at < self.cfg.first_pass:
                    notes.append((self.cfg.source_index, elem.kind, elem.where, elem.detail))
                bad_run += 1
                if bad_run > self.cfg.max_consecutive_bad:
                    raise DataError(
                        f"source '{self.cfg.source_name}': no usable record in {bad_run} consecutive records "
                        f"(last: {elem.describe()})"
                    )
                continue
            return state, elem

    def __next__(self) -> dict[str, Any]:
        if self._done:
            raise StopIteration
        T = self.cfg.seq_len
        split = self.cfg.split
        # one buffer for the row's arrays, in batch.ROW_KEYS order (the batch copies them out)
        buf = np.zeros((len(batch_layout.ROW_KEYS), T), batch_layout.DTYPE)
        ids, mask, seg, pos = buf
        notes: list = []
        fill, s = 0, 0
        while fill < T:
            if self._pending is None:
                try:
                    state, doc = self._next_doc(notes)
                except StopIteration:
                    self._done = True
                    break
                self._pending = (doc, 0, state)
            doc, used, state = self._pending
            d_ids = doc["ids"]
            n_doc = len(d_ids)
            n = n_doc - used
            take = min(n, T - fill)
            if take < n and not split:
                if fill == 0:  # cannot happen: conversations are truncated to seq_len
                    raise AssertionError("conversation longer than seq_len")
                break
            s += 1
            end = fill + take
            ids[fill:end] = d_ids[used : used + take]
            mask[fill:end] = doc["mask"][used : used + take]
            mask[fill] = 0  # a segment's first token is never predicted inside the row
            seg[fill:end] = s
            pos[fill:end] = self._arange[:take]
            fill = end
            self._pending = None if used + take == n_doc else (doc, used + take, state)
        if fill == 0 and not notes:
            raise StopIteration
        # (an empty row carrying only notes, at the very end of the data: source -1, all padding)
        row: dict[str, Any] = dict(zip(batch_layout.ROW_KEYS, buf))
        row["source"] = np.int32(self.cfg.source_index if fill else -1)
        row["_bad"] = notes
        return row

    def get_state(self) -> dict[str, Any]:
        if self._pending is not None:
            _, used, state = self._pending
            return {"parent": state, "used": used, "done": self._done}
        return {"parent": self._parent.get_state(), "used": 0, "done": self._done}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._done = state["done"]
        self._pending = None
        if state["used"]:
            notes: list = []
            st, doc = self._next_doc(notes)
            self._pending = (doc, state["used"], st)


def collate(rows: Sequence[Mapping[str, Any]], batch_size: int, seq_len: int) -> dict[str, Any]:
    """Stacks rows into one batch (with the rows' bad-record notes under `_bad`).

    A short final batch (repeat=False) is filled with `batch.empty` rows (segment 0, mask 0,
    source -1) so that every batch has the same shape and the step compiles once."""
    out: dict[str, Any] = batch_layout.empty(batch_size, seq_len)
    source = out["source"]
    notes = []
    for i, r in enumerate(rows):
        for k in batch_layout.ROW_KEYS:
            out[k][i] = r[k]
        source[i] = r["source"]
        if r["_bad"]:
            notes.extend(r["_bad"])
    out["_bad"] = notes
    return out
