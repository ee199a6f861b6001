"""The grain pipeline: read -> parse -> tokenize -> pack -> mix -> batch -> (prefetch) -> shard.

This module only assembles the chain; each stage lives in the module named for it:

  readers.py   records of a file or dataset (open_source; JSONL: jsonl.py), bad ones as BadRecord values (records.py)
  hub.py       StreamIterDataset: a streamed hub dataset as a grain source
  tokenize.py  Tokenize: record -> token ids and loss mask (or a BadRecord)
  packing.py   PackIterDataset: documents -> rows of seq_len; collate: rows -> a batch
  mixture.py   MixIterDataset: the sources' rows interleaved by weight
  batch.py     the batch layout every stage after packing agrees on
  iterator.py  DataIterator: the object the train loop holds (counters, state, mesh)

Per source (a grain MapDataset until packing, so shuffling is global and index-based):

    source records --slice(process share)--> shuffle(seed) --> repeat --> map(Tokenize)
      --> to_iter_dataset --> PackIterDataset (rows of seq_len, one source per row)

then `MixIterDataset` interleaves the sources' rows by weight (smooth weighted round-robin:
exact shares, deterministic), `batch` stacks this process's rows (`collate`), and a
`ThreadPrefetchIterDataset` builds the next `data.prefetch` batches in a background thread.
The main process wraps the grain iterator in `DataIterator`, which strips the bad-record notes
carried by the rows, counts them and the tokens per source, and assembles global jax.Arrays
when given a mesh.

`data.prefetch` is a speed knob only: the batches and the saved state are the same for every
value, so a run resumes with another one. Its parallelism never splits the data: the
background thread runs the one chain, and each file source tokenizes with `data.prefetch`
threads that return documents in index order (grain's `ReadOptions`; sentencepiece releases
the GIL while it encodes). Worker processes, as grain's `mp_prefetch` runs them, would each
read a slice of the data, so the batches, and the state's format, would depend on their
number (docs/design.md, "Mixture").

Bad records travel *with the data* (as notes on the next row of their source) rather than
through side channels, so they are counted exactly once, in the main process, and the counts
saved with a checkpoint match the rows consumed.

Iterator state (JSON-able): grain's state of the chain at the last batch consumed (the
prefetch thread's state is its parent's state at that batch, whatever it has built ahead)
plus the counters. A packer's state is always at a row boundary: the parent's state just
before the document that starts the next row, and the number of that document's tokens
already used.
"""

from __future__ import annotations

import functools
import zlib
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import grain

from easylemur.config import source_dict
from easylemur.data.files import detect_kind
from easylemur.data.hub import StreamIterDataset, StreamSpec
from easylemur.data.iterator import DataIterator
from easylemur.data.mixture import MixIterDataset, stage_weights
from easylemur.data.packing import PackIterDataset, collate
from easylemur.data.readers import open_source
from easylemur.data.records import DataError
from easylemur.data.store import open_store_source
from easylemur.data.tokenize import Tokenize, probe_source

if TYPE_CHECKING:
    from easylemur.tokenizer.spm import Tokenizer

# documents a read thread may tokenize ahead of the packer; enough to keep every thread busy
# across documents of very different lengths, a few MB of ids at most
READ_BUFFER_PER_THREAD = 8


def source_seed(seed: int, name: str) -> int:
    """The shuffle seed of one source: derived from its name, so that adding, removing or
    reordering other sources leaves this source's document order unchanged."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**32)


def source_rows(
    name: str,
    index: int,
    scfg: Mapping[str, Any],
    tokenizer: Tokenizer,
    *,
    seq_len: int,
    strict: bool,
    seed: int,
    process_index: int,
    process_count: int,
    shuffle: bool,
    repeat: bool,
    read_threads: int = 0,
    reader: Any = None,
) -> tuple[grain.IterDataset, Any]:
    """(one source's packed rows: an IterDataset of row dicts, the source's reader).

    Everything up to packing is per source, so that each source is shuffled, repeated and
    shared between processes on its own, and a row never mixes documents of two sources.
    `read_threads` > 0 tokenizes a file source's documents (reads a token store's) in that many
    threads, handed on in index order: the rows and the state do not depend on it. `reader` is
    the source's reader opened before (by an earlier call for the same source)."""
    try:
        kind = scfg["kind"] if scfg["kind"] != "auto" else detect_kind(scfg["path"])
        if reader is None and kind == "tokens":  # tokenized already: documents as Tokenize made them
            reader = open_store_source(scfg, name, tokenizer, seq_len)
        elif reader is None:
            reader = open_source({**scfg, "kind": kind})
    except DataError as e:  # a token store's checks name the source already
        msg = str(e)
        raise DataError(msg if msg.startswith(f"source '{name}'") else f"source '{name}': {msg}") from None

    def stage(fail_fast: bool) -> Tokenize:  # raises here, early, for a chat_format the tokenizer cannot render
        return Tokenize(scfg["format"], scfg["field"], tokenizer, seq_len, fail_fast, name, scfg["chat_format"])

    tokenize = _doc_of if kind == "tokens" else stage(strict)
    if isinstance(reader, StreamSpec):
        docs = StreamIterDataset(reader, process_index, process_count, source_seed(seed, name) if shuffle else None)
        docs = docs.map(tokenize)
        share = 1 << 30
    else:
        if len(reader) == 0:
            raise DataError(f"source '{name}' ({scfg['path']}) is empty: no records")
        records = grain.MapDataset.source(reader)[process_index::process_count]
        if len(records) == 0:
            raise DataError(
                f"source '{name}' ({scfg['path']}) has {len(reader)} records, none for data shard {process_index} of "
                f"{process_count}; it needs at least {process_count} records"
            )
        if kind != "tokens":  # a store holds usable documents only
            probe_source(records, stage(False), name, scfg["path"])
        share = len(records)
        if shuffle:
            records = records.shuffle(seed=source_seed(seed, name))
        if repeat:
            records = records.repeat(None)
        docs = records.map(tokenize).to_iter_dataset(
            grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=READ_BUFFER_PER_THREAD * read_threads)
        )
    rows = PackIterDataset(docs, seq_len, split=scfg["format"] == "text", source_index=index,
                           source_name=name, max_consecutive_bad=share + 1,
                           first_pass=share if repeat and not isinstance(reader, StreamSpec) else None)
    return rows, reader


def _doc_of(item: tuple[str, Any]) -> Any:
    """A token store's (where, document) -> the document, as `Tokenize` gives it."""
    return item[1]


def make_pipeline(
    data_cfg: Any,
    tokenizer: Tokenizer,
    *,
    global_batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    sources: Any = None,
    shuffle: bool = True,
    repeat: bool = True,
    mesh: Any = None,
    read_threads: int | None = None,
    open_readers: dict[str, Any] | None = None,
) -> DataIterator:
    """The data iterator for this process: `global_batch_size // process_count` rows a batch.

    `data_cfg` is the `data` section (seq_len, strict, prefetch, sources); `sources` replaces
    data_cfg.sources (the train loop passes data.eval_sources with shuffle=False, repeat=False).
    `data.prefetch` = N builds N batches ahead in a background thread and tokenizes each file
    source in N threads (`read_threads` overrides the latter); neither changes the batches.
    `open_readers` (source name -> reader) keeps the sources' readers between calls: the eval
    pipeline, built again for every eval, opens (indexes) each source once."""
    stages = (data_cfg.get("stages") or ()) if sources is None else ()  # eval sources take no stages
    sources = data_cfg.sources if sources is None else sources
    if not sources or not len(sources):
        raise DataError("no data sources configured (data.sources is empty)")
    if global_batch_size % process_count:
        raise DataError(f"global batch size {global_batch_size} does not divide by {process_count} processes")
    seq_len = int(data_cfg.seq_len)
    strict = bool(data_cfg.get("strict", False))
    prefetch = int(data_cfg.get("prefetch", 0))
    read_threads = prefetch if read_threads is None else int(read_threads)
    local_batch = global_batch_size // process_count
    names = list(sources.keys())
    per_source, weights, readers = [], [], []
    for i, name in enumerate(names):
        scfg = source_dict(sources[name])
        rows, reader = source_rows(
            name, i, scfg, tokenizer, seq_len=seq_len, strict=strict, seed=seed,
            process_index=process_index, process_count=process_count, shuffle=shuffle, repeat=repeat,
            read_threads=read_threads, reader=None if open_readers is None else open_readers.get(name),
        )
        if open_readers is not None:
            open_readers[name] = reader
        per_source.append(rows)
        readers.append(reader)
        weights.append(float(scfg["weight"]))
    # one source: no mixer (its stages, validated, can only give it a weight above 0)
    ds = per_source[0] if len(per_source) == 1 else MixIterDataset(
        per_source, weights, stage_weights(stages, names), rows_per_step=local_batch)
    ds = ds.batch(local_batch, batch_fn=functools.partial(collate, batch_size=local_batch, seq_len=seq_len))
    # Always wrapped, also for prefetch 0 (where it runs inline): its state is its parent's at
    # the batch last returned, for any buffer size, so states carry over between values.
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=prefetch)
    return DataIterator(ds, names, mesh, tokenizer.pad_id, readers=readers)


def decode_trained_spans(ids: Sequence[int], loss_mask: Sequence[int], tokenizer: Tokenizer) -> list[str]:
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
