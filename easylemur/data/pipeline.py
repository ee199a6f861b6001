"""The grain pipeline: read -> parse -> tokenize -> pack -> mix -> batch -> (prefetch) -> shard.

Per source (a grain MapDataset until packing, so shuffling is global and index-based):

    source records --slice(process share)--> shuffle(seed) --> repeat --> map(Tokenize)
      --> to_iter_dataset --> Packer (rows of seq_len, one source per row)

then `Mixer` interleaves the sources' rows by weight (smooth weighted round-robin: exact
shares, deterministic), `batch` stacks this process's rows, and `mp_prefetch` runs the whole
chain in `data.prefetch` worker processes (each on a slice of every source). The main process
wraps the grain iterator in `DataIterator`, which strips the bad-record notes carried by the
rows, counts them and the tokens per source, and assembles global jax.Arrays when given a mesh.

Bad records travel *with the data* (as notes on the next row of their source) rather than
through side channels, so they are counted exactly once whether rows are built in this process
or in prefetch workers, and the counts saved with a checkpoint match the rows consumed.

Iterator state (JSON-able): grain's state of the whole chain (per worker under prefetch) plus
the counters. A packer's state is always at a row boundary: the parent's state just before the
document that starts the next row, and the number of that document's tokens already used.
"""

from __future__ import annotations

import functools
import sys
import zlib
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from easylemur.data import chat as chatlib
from easylemur.data.sources import (
    EMPTY,
    INVALID_UTF8,
    MISSING_FIELD,
    NO_TRAINED_TOKENS,
    NOT_A_STRING,
    BadRecord,
    DataError,
    StreamSpec,
    open_source,
    source_dict,
)

SHOW_FIRST_BAD = 5  # per source: file:line printed to stderr for the first few bad records


# --- tokenize: one record -> token arrays (or a BadRecord) -----------------------------------


class Tokenize(grain.transforms.Map):
    """(where, record) -> {"ids": int32[n], "mask": int8[n]} or a BadRecord (or None for a blank
    line). Text documents become BOS + tokens + EOS, all trained but BOS; conversations are
    rendered in ChatML and truncated to seq_len (see chat.render_truncated)."""

    def __init__(self, fmt: str, field: str, tokenizer, seq_len: int, strict: bool, source_name: str):
        self.fmt = fmt
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
        n = len(enc) + 2
        ids = np.empty(n, np.int32)
        ids[0], ids[1:-1], ids[-1] = tok.bos_id, enc, tok.eos_id
        mask = np.ones(n, np.int8)
        mask[0] = 0
        return {"ids": ids, "mask": mask}

    def _chat(self, where: str, rec: dict) -> dict[str, np.ndarray] | BadRecord:
        try:
            msgs = chatlib.to_messages(rec, self.field or None)
        except chatlib.ChatFormatError as e:
            return self._bad(e.kind, where, str(e).split(": ", 1)[-1])
        for m in msgs:
            if (err := self._not_utf8(m["content"])) is not None:
                return self._bad(INVALID_UTF8, where, err)
        out = chatlib.render_truncated(msgs, self.tokenizer, self.seq_len)
        if out is None:
            return self._bad(NO_TRAINED_TOKENS, where, f"no assistant token within seq_len={self.seq_len}")
        ids, mask = out
        return {"ids": np.asarray(ids, np.int32), "mask": np.asarray(mask, np.int8)}


# --- pack: token arrays -> rows of seq_len ---------------------------------------------------




class PackIterDataset(grain.IterDataset):
    """Packs one source's documents into rows of `seq_len`.

    split=True (text): concatenate then split, rows are full; a document that does not fit
    continues in the next row as a new segment (positions restart at 0).
    split=False (chat): a conversation (already <= seq_len) is never split; the row is padded
    when the next one does not fit."""

    def __init__(self, parent: grain.IterDataset, seq_len: int, split: bool, source_index: int,
                 source_name: str, max_consecutive_bad: int):
        super().__init__(parent)
        self.seq_len = seq_len
        self.split = split
        self.source_index = source_index
        self.source_name = source_name
        self.max_consecutive_bad = max_consecutive_bad

    def __iter__(self) -> "PackIterator":
        return PackIterator(self._parent.__iter__(), self)


class PackIterator(grain.DatasetIterator):
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
        # one buffer for the row's four arrays (the batch copies them out)
        buf = np.zeros((4, T), np.int32)
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
        return {"input_ids": ids, "loss_mask": mask, "segment_ids": seg, "positions": pos,
                "source": np.int32(self.cfg.source_index if fill else -1), "_bad": notes}

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


# --- mix: rows of several sources, by weight -------------------------------------------------


class MixIterDataset(grain.IterDataset):
    """Smooth weighted round-robin over the parents: after n rows, source i has given
    round(n * w_i / sum(w)) rows (within one). An exhausted source (repeat=False) leaves the
    mix and the others go on; grain's own mix stops at the first exhausted source."""

    def __init__(self, parents: Sequence[grain.IterDataset], weights: Sequence[float]):
        super().__init__(list(parents))
        self.weights = [float(w) for w in weights]

    def __iter__(self) -> "MixIterator":
        return MixIterator([p.__iter__() for p in self._parents], self.weights)


class MixIterator(grain.DatasetIterator):
    def __init__(self, parents: Sequence[grain.DatasetIterator], weights: Sequence[float]):
        super().__init__(list(parents))
        self.weights = list(weights)
        self.credit = [0.0] * len(parents)
        self.active = [True] * len(parents)
        self._live = None

    def __next__(self):
        weights, active, credit = self.weights, self.active, self.credit
        while True:
            if self._live is None:  # the sources still in the mix, and their total weight
                live = [i for i, a in enumerate(active) if a]
                self._live = (live, sum(weights[i] for i in live))
            live, total = self._live
            if not live:
                raise StopIteration
            best = live[0]
            for i in live:
                credit[i] += weights[i]
                if credit[i] > credit[best]:
                    best = i
            credit[best] -= total
            try:
                return next(self._parents[best])
            except StopIteration:
                active[best] = False
                self._live = None

    def get_state(self) -> dict[str, Any]:
        return {"parents": [p.get_state() for p in self._parents], "credit": list(self.credit),
                "active": list(self.active)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if len(state["parents"]) != len(self._parents):
            raise DataError(f"iterator state has {len(state['parents'])} sources, the pipeline has {len(self._parents)}")
        for p, s in zip(self._parents, state["parents"]):
            p.set_state(s)
        self.credit = [float(c) for c in state["credit"]]
        self.active = [bool(a) for a in state["active"]]
        self._live = None


# --- batch -----------------------------------------------------------------------------------

ROW_KEYS = ("input_ids", "loss_mask", "segment_ids", "positions")


def collate(rows: Sequence[Mapping[str, Any]], batch_size: int, seq_len: int) -> dict[str, Any]:
    """Stacks rows; a short final batch (repeat=False) is filled with empty rows (segment 0,
    mask 0) so every batch has the same shape; `source` of an empty row is -1."""
    arrays = np.zeros((len(ROW_KEYS), batch_size, seq_len), np.int32)
    source = np.full((batch_size,), -1, np.int32)
    notes = []
    for i, r in enumerate(rows):
        for j, k in enumerate(ROW_KEYS):
            arrays[j, i] = r[k]
        source[i] = r["source"]
        if r["_bad"]:
            notes.extend(r["_bad"])
    out = dict(zip(ROW_KEYS, arrays))
    out["source"] = source
    out["_bad"] = notes
    return out


# --- the iterator the train loop holds -------------------------------------------------------


class DataIterator:
    """Batches for this process; `get_state`/`set_state` for checkpoints; bad-record counts."""

    def __init__(self, ds: grain.IterDataset, source_names: list[str], tokenizer, mesh, pad_id: int):
        self._ds = ds
        self._it = ds.__iter__()
        self.source_names = source_names
        self.tokenizer = tokenizer
        self.mesh = mesh
        self.pad_id = pad_id
        self._bad = {n: {} for n in source_names}
        self._tokens = {n: 0 for n in source_names}
        self._shown = {n: 0 for n in source_names}
        self._finished = False

    def __iter__(self) -> "DataIterator":
        return self

    def __next__(self) -> dict[str, Any]:
        try:
            batch = next(self._it)
        except StopIteration:
            if not self._finished:
                self._finished = True
                self.print_report()
            raise
        notes = batch.pop("_bad")
        for src_index, kind, where, detail in notes:
            self._count_bad(self.source_names[src_index], kind, where, detail)
        src = batch["source"]
        seg = batch["segment_ids"]
        counts = np.bincount(src[src >= 0], weights=(seg[src >= 0] > 0).sum(axis=1), minlength=len(self.source_names))
        for i, n in enumerate(self.source_names):
            self._tokens[n] += int(counts[i])
        batch["input_ids"] = np.where(seg > 0, batch["input_ids"], np.int32(self.pad_id)).astype(np.int32)
        if self.mesh is not None:
            from easylemur.sharding import host_local_to_global

            return host_local_to_global(batch, self.mesh)
        return batch

    def _count_bad(self, name: str, kind: str, where: str, detail: str) -> None:
        per = self._bad.setdefault(name, {})
        per[kind] = per.get(kind, 0) + 1
        if self._shown.get(name, 0) < SHOW_FIRST_BAD:
            self._shown[name] = self._shown.get(name, 0) + 1
            msg = f"easylemur.data: skipped bad record of source '{name}' at {where}: {kind}"
            print(msg + (f" ({detail})" if detail else ""), file=sys.stderr)
            if self._shown[name] == SHOW_FIRST_BAD:
                print(f"easylemur.data: further bad records of '{name}' are counted, not shown", file=sys.stderr)

    def bad_records(self) -> dict[str, dict[str, int]]:
        """{source name: {bad-record kind: count}} over the batches consumed so far."""
        return {n: dict(v) for n, v in self._bad.items()}

    def token_counts(self) -> dict[str, int]:
        """{source name: non-padding tokens} over the batches consumed so far."""
        return dict(self._tokens)

    def report(self) -> str:
        parts = []
        for n, kinds in self._bad.items():
            total = sum(kinds.values())
            if total:
                parts.append(f"'{n}': {total} (" + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
        return "easylemur.data: bad records skipped: " + ("; ".join(parts) if parts else "none")

    def print_report(self) -> None:
        print(self.report(), file=sys.stderr)

    def get_state(self) -> dict[str, Any]:
        return {"version": 1, "grain": self._it.get_state(), "bad": self.bad_records(),
                "tokens": self.token_counts(), "shown": dict(self._shown), "sources": list(self.source_names)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != 1:
            raise DataError(f"unknown data iterator state version {state.get('version')!r}")
        if list(state["sources"]) != self.source_names:
            raise DataError(f"iterator state is for sources {state['sources']}, the pipeline reads {self.source_names}")
        self._it.set_state(state["grain"])
        self._bad = {n: dict(state["bad"].get(n, {})) for n in self.source_names}
        self._tokens = {n: int(state["tokens"].get(n, 0)) for n in self.source_names}
        self._shown = {n: int(state["shown"].get(n, 0)) for n in self.source_names}
        self._finished = False

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "DataIterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- assembly --------------------------------------------------------------------------------


def source_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**32)


def probe_source(records: grain.MapDataset, tokenize: Tokenize, name: str) -> None:
    """Fails early when a source (this process's share of it) has no usable record."""
    kinds: dict[str, int] = {}
    for i in range(len(records)):
        out = tokenize.map(records[i])
        if isinstance(out, dict):
            return
        if isinstance(out, BadRecord):
            kinds[out.kind] = kinds.get(out.kind, 0) + 1
    detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "no records"
    raise DataError(f"source '{name}' has no usable record ({len(records)} records read: {detail})")


def source_rows(
    name: str,
    index: int,
    scfg: Mapping[str, Any],
    tokenizer,
    *,
    seq_len: int,
    strict: bool,
    seed: int,
    process_index: int,
    process_count: int,
    shuffle: bool,
    repeat: bool,
    read_threads: int = 0,
) -> grain.IterDataset:
    """One source's packed rows (an IterDataset of row dicts)."""
    reader = open_source(scfg)
    tokenize = Tokenize(scfg["format"], scfg["field"], tokenizer, seq_len, strict, name)
    if isinstance(reader, StreamSpec):
        docs = StreamIterDataset(reader, process_index, process_count, source_seed(seed, name) if shuffle else None)
        docs = docs.map(tokenize)
        share = 1 << 30
    else:
        records = grain.MapDataset.source(reader)[process_index::process_count]
        if len(records) == 0:
            raise DataError(f"source '{name}' ({scfg['path']}) has no records for process {process_index} of {process_count}")
        probe_source(records, Tokenize(scfg["format"], scfg["field"], tokenizer, seq_len, False, name), name)
        share = len(records)
        if shuffle:
            records = records.shuffle(seed=source_seed(seed, name))
        if repeat:
            records = records.repeat(None)
        docs = records.map(tokenize).to_iter_dataset(
            grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=max(1, 4 * read_threads))
        )
    rows = PackIterDataset(docs, seq_len, split=scfg["format"] == "text", source_index=index,
                           source_name=name, max_consecutive_bad=share + 1)
    return rows


class StreamIterDataset(grain.IterDataset):
    """A streamed HF hub dataset as a grain source: sharded by process (split_dataset_by_node)
    and by prefetch worker (set_slice); its state is the number of records consumed."""

    def __init__(self, spec: StreamSpec, shard_index: int, shard_count: int, seed: int | None):
        super().__init__()
        self.spec = spec
        self.shard_index, self.shard_count, self.seed = shard_index, shard_count, seed

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        # worker w of W reads shard (process * W + w) of (processes * W)
        w, W = sl.start or 0, sl.step or 1
        self.shard_index, self.shard_count = self.shard_index * W + w, self.shard_count * W

    def __iter__(self) -> "StreamIterator":
        return StreamIterator(self)


class StreamIterator(grain.DatasetIterator):
    def __init__(self, ds: StreamIterDataset):
        super().__init__()
        self.ds = ds
        self.count = 0
        self._it = None

    def _open(self):
        self._it = iter(self.ds.spec.open(self.ds.shard_index, self.ds.shard_count, self.ds.seed))

    def __next__(self):
        if self._it is None:
            self._open()
        rec = next(self._it)
        where = f"{self.ds.spec.name}:record {self.count}"
        self.count += 1
        return where, rec

    def get_state(self) -> dict[str, int]:
        return {"count": self.count}

    def set_state(self, state: Mapping[str, int]) -> None:
        # Streams cannot seek: reopen and skip (exact, but costs a re-read of the prefix).
        self._open()
        for _ in range(int(state["count"])):
            next(self._it)
        self.count = int(state["count"])


def _identity(x):
    return x


def _ensure_absl_flags() -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def make_pipeline(
    data_cfg: Any,
    tokenizer,
    *,
    global_batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    sources: Any = None,
    shuffle: bool = True,
    repeat: bool = True,
    mesh: Any = None,
    read_threads: int = 0,
) -> DataIterator:
    """The data iterator for this process: `global_batch_size // process_count` rows a batch.

    `data_cfg` is the `data` section (seq_len, strict, prefetch, sources); `sources` replaces
    data_cfg.sources (the train loop passes data.eval_sources with shuffle=False, repeat=False)."""
    sources = data_cfg.sources if sources is None else sources
    if not sources or not len(sources):
        raise DataError("no data sources configured (data.sources is empty)")
    if global_batch_size % process_count:
        raise DataError(f"global batch size {global_batch_size} does not divide by {process_count} processes")
    seq_len = int(data_cfg.seq_len)
    strict = bool(data_cfg.get("strict", False))
    prefetch = int(data_cfg.get("prefetch", 0))
    local_batch = global_batch_size // process_count
    names = list(sources.keys())
    per_source, weights = [], []
    for i, name in enumerate(names):
        scfg = source_dict(sources[name])
        rows = source_rows(
            name, i, scfg, tokenizer, seq_len=seq_len, strict=strict, seed=seed,
            process_index=process_index, process_count=process_count, shuffle=shuffle, repeat=repeat,
            read_threads=read_threads,
        )
        per_source.append(rows)
        weights.append(float(scfg["weight"]))
    ds = per_source[0] if len(per_source) == 1 else MixIterDataset(per_source, weights)
    ds = ds.batch(local_batch, batch_fn=functools.partial(collate, batch_size=local_batch, seq_len=seq_len))
    if prefetch > 0:
        _ensure_absl_flags()
        # A plain map hides the batch from grain's shared-memory output path: small batches
        # pickle cheaply, and shared-memory blocks still buffered at exit are reported as leaks.
        ds = ds.map(_identity)
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=prefetch, per_worker_buffer_size=8))
    return DataIterator(ds, names, tokenizer, mesh, tokenizer.pad_id)


def decode_trained_spans(ids: Sequence[int], loss_mask: Sequence[int], tokenizer) -> list[str]:
    """The text of each run of trained tokens (special tokens written out), for previews."""
    spans, cur = [], []
    for t, m in zip(ids, loss_mask):
        if m:
            cur.append(int(t))
        elif cur:
            spans.append(tokenizer.decode(cur))
            cur = []
    if cur:
        spans.append(tokenizer.decode(cur))
    return spans
