"""Readers of raw records (docs/design.md, "Sources"): what a source's `path` names (a file,
glob or directory of JSONL or Parquet files, a `datasets.save_to_disk` directory, a hub name,
`tfds:NAME`), and random access to its records.

Readers return `(where, value)` for an index: `where` names the record ("file:line" for JSONL,
"file:row N" for Parquet and HF / TFDS datasets) and `value` is the decoded dict or a
`BadRecord`. Malformed input is never raised here: the pipeline decides (skip and count, or
raise in strict mode). A file that cannot be read at all (missing, corrupt, truncated) is a
`DataError` naming it. A hub dataset has no random access: `open_source` gives its
`hub.StreamSpec`, which the pipeline reads as a stream.

The source config keys and their defaults are the config schema's (config.SOURCE_DEFAULTS).
"""

from __future__ import annotations

import glob as globlib
import json
import mmap
import os
import threading
import zlib
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from easylemur.data.records import INVALID_UTF8, MALFORMED_JSON, BadRecord, DataError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


# --- path resolution -------------------------------------------------------------------------


def _has_suffix(path: str, suffixes: tuple[str, ...]) -> bool:
    return any(path.endswith(s) for s in suffixes)


def resolve_files(path: str, suffixes: tuple[str, ...]) -> list[str]:
    """Files named by `path` (a file, a glob, or a directory searched recursively), sorted."""
    if any(c in path for c in "*?["):
        files = [f for f in globlib.glob(path, recursive=True) if os.path.isfile(f)]
    elif os.path.isdir(path):
        files = [
            os.path.join(root, f)
            for root, _, names in os.walk(path)
            for f in names
            if _has_suffix(f, suffixes)
        ]
    elif os.path.isfile(path):
        files = [path]
    else:
        files = []
    return sorted(files)


def _why_no_files(path: str) -> str:
    if any(c in path for c in "*?["):
        return "the pattern matches no file"
    return "no data files in this directory" if os.path.isdir(path) else "no such file or directory"


def detect_kind(path: str) -> str:
    if path.startswith("tfds:"):
        return "tfds"
    p = Path(path)
    if p.is_dir() and any((p / n).exists() for n in ("dataset_info.json", "state.json", "dataset_dict.json")):
        return "hf_disk"
    if p.is_file():
        return "parquet" if _has_suffix(path, PARQUET_SUFFIXES) else "jsonl"
    if resolve_files(path, PARQUET_SUFFIXES) and not resolve_files(path, JSONL_SUFFIXES):
        return "parquet"
    if resolve_files(path, JSONL_SUFFIXES):
        return "jsonl"
    if p.exists() or any(c in path for c in "*?["):
        raise DataError(f"{path}: {_why_no_files(path)} (expected .jsonl[.gz|.zst] or .parquet files)")
    if "/" in path and not path.startswith((".", "/")) and path.count("/") == 1:
        return "hf_hub"
    raise DataError(f"{path}: no such file or directory (and not a hub dataset name like 'org/name')")


# --- JSONL -----------------------------------------------------------------------------------


DECODE_CHUNK = 1 << 16  # compressed bytes fed to a decoder at a time


def _gzip_decoder():
    return zlib.decompressobj(wbits=31)  # one gzip member: header, deflate data, CRC-32 + size


def _zstd_decoder():
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()  # one frame


def _decode_error_types() -> tuple[type[BaseException], ...]:
    import zstandard

    return (zlib.error, zstandard.ZstdError)


def _decompress(path: str, data: Any, new_decoder: Any, fmt: str) -> bytes:
    """Every member (gzip) or frame (zstd) of `data`, decompressed.

    A corrupt or truncated file is a DataError naming the file and the byte offset of the
    compressed stream where the decoder stopped, never a partial result: the decoders stop
    quietly at the end of their input, so without the end-of-stream check a cut file would
    lose everything after the cut and show, at most, one malformed last line."""
    errors = _decode_error_types()
    n, pos, out = len(data), 0, []
    while pos < n:
        if fmt == "gzip":
            # zero bytes between or after members (tape padding): gzip and Python's gzip skip them
            head = data[pos : pos + DECODE_CHUNK]
            if skip := len(head) - len(head.lstrip(b"\0")):
                pos += skip
                continue
        start, dec = pos, new_decoder()
        while not dec.eof:
            if pos >= n:
                raise DataError(
                    f"{path}: truncated {fmt} file: the compressed stream ends at byte offset {n} inside the "
                    f"{fmt} {'member' if fmt == 'gzip' else 'frame'} that starts at byte {start} "
                    f"(a partial copy or an interrupted write; the file needs to be written again)"
                )
            chunk = data[pos : pos + DECODE_CHUNK]
            try:
                out.append(dec.decompress(chunk))
            except errors as e:
                at = _error_offset(data, start, pos, new_decoder, errors)
                raise DataError(f"{path}: corrupt {fmt} data at byte offset {at} of {n}: {e}") from None
            pos += len(chunk) - len(dec.unused_data)
    return b"".join(out)


def _error_offset(data: Any, start: int, chunk_start: int, new_decoder: Any, errors: tuple) -> int:
    """The byte where decoding fails inside the chunk that failed at `chunk_start`: the stream
    again from its start, then that chunk one byte at a time (only on the error path)."""
    dec = new_decoder()
    dec.decompress(data[start:chunk_start])  # decoded without error the first time
    for i in range(chunk_start, min(len(data), chunk_start + DECODE_CHUNK)):
        try:
            dec.decompress(data[i : i + 1])
        except errors:
            return i
    return chunk_start


def _read_bytes(path: str) -> bytes | mmap.mmap:
    """The bytes of a JSONL file: decompressed into memory (.gz, .zst, checked end to end) or
    memory-mapped (anything else). An unreadable file is a DataError naming it."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return b""
        with open(path, "rb") as f:
            raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.endswith(".gz"):
        with raw:
            return _decompress(path, raw, _gzip_decoder, "gzip")
    if path.endswith(".zst"):
        with raw:
            return _decompress(path, raw, _zstd_decoder, "zstd")
    return raw


def _line_index(buf: bytes | mmap.mmap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, line numbers) of the non-empty lines of `buf`, found with numpy."""
    n = len(buf)
    if n == 0:
        e = np.zeros(0, np.int64)
        return e, e, e
    nl = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10).astype(np.int64)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [n]])
    keep = ends > starts
    lines = np.arange(1, len(starts) + 1, dtype=np.int64)
    return starts[keep], ends[keep], lines[keep]


class JsonlSource:
    """Random access to the records of JSONL files. Compressed files are decompressed into
    memory once per process (use uncompressed JSONL, Parquet or HF datasets for corpora that do
    not fit); uncompressed files are memory-mapped."""

    def __init__(self, files: list[str]):
        self.files = list(files)
        starts, ends, lines, fidx = [], [], [], []
        self._bufs: dict[int, Any] = {}
        for i, f in enumerate(self.files):
            buf = _read_bytes(f)
            s, e, ln = _line_index(buf)
            starts.append(s), ends.append(e), lines.append(ln)
            fidx.append(np.full(len(s), i, np.int32))
            self._bufs[i] = buf
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        self._starts = cat(starts, np.int64)
        self._ends = cat(ends, np.int64)
        self._lines = cat(lines, np.int64)
        self._file = cat(fidx, np.int32)

    def __getstate__(self):
        # A pickled copy reopens the files itself: mmaps do not pickle and buffers would be copied.
        state = dict(self.__dict__)
        state["_bufs"] = {}
        return state

    def __len__(self) -> int:
        return len(self._starts)

    def _buf(self, i: int):
        buf = self._bufs.get(i)
        if buf is None:
            buf = self._bufs[i] = _read_bytes(self.files[i])
        return buf

    def __getitem__(self, index: int) -> tuple[str, Any]:
        fi = int(self._file[index])
        raw = self._buf(fi)[int(self._starts[index]) : int(self._ends[index])]
        where = f"{self.files[fi]}:{self._lines[index]}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return where, BadRecord(INVALID_UTF8, where, str(e))
        if not line.strip():
            return where, None  # a blank line is not a record
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            return where, BadRecord(MALFORMED_JSON, where, str(e))
        if not isinstance(value, dict):
            return where, BadRecord(MALFORMED_JSON, where, f"expected a JSON object, got {type(value).__name__}")
        return where, value


# --- Parquet ---------------------------------------------------------------------------------


class ParquetSource:
    """Random access to Parquet rows. Each process loads a file's needed columns on first
    access (row groups would be decoded over and over under a global shuffle)."""

    def __init__(self, files: list[str], columns: list[str] | None):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.files = list(files)
        self.columns = columns
        counts = []
        for f in self.files:
            try:
                counts.append(pq.ParquetFile(f).metadata.num_rows)
            except (pa.ArrowException, OSError) as e:  # pyarrow's message does not name the file
                raise DataError(f"{f}: not a readable Parquet file ({type(e).__name__}: {e})") from None
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._tables: dict[int, Any] = {}
        self._load_lock = threading.Lock()  # read threads: each file loaded once, not once per thread

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tables"] = {}
        del state["_load_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._load_lock = threading.Lock()

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def _table(self, fi: int):
        t = self._tables.get(fi)
        if t is not None:
            return t
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._load_lock:
            t = self._tables.get(fi)
            if t is None:
                try:
                    schema = pq.read_schema(self.files[fi])
                    cols = None if self.columns is None else [c for c in self.columns if c in schema.names]
                    t = self._tables[fi] = pq.read_table(self.files[fi], columns=cols, memory_map=True)
                except (pa.ArrowException, OSError) as e:  # a damaged column chunk shows only when decoded
                    raise DataError(f"{self.files[fi]}: not a readable Parquet file ({type(e).__name__}: {e})") from None
        return t

    def __getitem__(self, index: int) -> tuple[str, Any]:
        fi = int(np.searchsorted(self._offsets, index, side="right") - 1)
        row = index - int(self._offsets[fi])
        where = f"{self.files[fi]}:row {row}"
        t = self._table(fi)
        rec = {}
        for name in t.column_names:
            v = t.column(name)[row].as_py()
            if isinstance(v, bytes):
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError as e:
                    return where, BadRecord(INVALID_UTF8, where, f"column {name!r}: {e}")
            rec[name] = v
        return where, rec


# --- Hugging Face datasets (random access) and TFDS ------------------------------------------


class IndexableSource:
    """Any random-access dataset of dicts (a `datasets.Dataset`, a `tfds.data_source`)."""

    def __init__(self, data: Any, label: str, decode_bytes: bool = False):
        self.data = data
        self.label = label
        self.decode_bytes = decode_bytes

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[str, Any]:
        where = f"{self.label}:row {index}"
        rec = self.data[int(index)]
        if not isinstance(rec, dict):
            return where, BadRecord(MALFORMED_JSON, where, f"expected a dict, got {type(rec).__name__}")
        if self.decode_bytes:
            rec = dict(rec)
            for k, v in rec.items():
                if isinstance(v, np.ndarray) and v.dtype == object and v.shape == ():
                    v = v.item()
                if isinstance(v, bytes):
                    try:
                        rec[k] = v.decode("utf-8")
                    except UnicodeDecodeError as e:
                        return where, BadRecord(INVALID_UTF8, where, f"field {k!r}: {e}")
        return where, rec


def _hf_disk(path: str, split: str):
    import datasets

    ds = datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"{path}: split {split!r} not in the saved DatasetDict (has {sorted(ds)})")
        ds = ds[split]
    return ds


def _hf_files(path: str, split: str):
    import datasets

    files = resolve_files(path, JSONL_SUFFIXES + PARQUET_SUFFIXES)
    parquet = [f for f in files if _has_suffix(f, PARQUET_SUFFIXES)]
    jsonl = [f for f in files if f not in parquet]
    builder, files = ("parquet", parquet) if parquet else ("json", jsonl)
    if not files:
        raise DataError(f"{path}: no data files for Hugging Face datasets")
    return datasets.load_dataset(builder, data_files={split: files}, split=split)


def open_source(scfg: Mapping[str, Any]) -> Any:
    """A random-access reader (len + getitem -> (where, record)) for one source config (every
    key set: `config.source_dict`), or a `hub.StreamSpec` for streamed hub datasets (handled
    by the pipeline as an iterable source)."""
    path, kind = scfg["path"], scfg["kind"]
    if kind == "auto":
        kind = detect_kind(path)
    if kind == "jsonl":
        files = resolve_files(path, JSONL_SUFFIXES)
        if not files:
            raise DataError(f"{path}: {_why_no_files(path)} (expected .jsonl, .jsonl.gz or .jsonl.zst files)")
        return JsonlSource(files)
    if kind == "parquet":
        files = resolve_files(path, PARQUET_SUFFIXES)
        if not files:
            raise DataError(f"{path}: {_why_no_files(path)} (expected .parquet files)")
        cols = None
        if scfg["format"] == "text" or scfg["field"]:
            cols = [scfg["field"] or "text"]
        return ParquetSource(files, cols)
    if kind == "hf_disk":
        return IndexableSource(_hf_disk(path, scfg["split"]), path)
    if kind == "hf_files":
        return IndexableSource(_hf_files(path, scfg["split"]), path)
    if kind == "hf_hub":
        from easylemur.data.hub import StreamSpec  # imports grain: only for hub sources

        return StreamSpec(path, scfg["hf_config"], scfg["split"])
    if kind == "tfds":
        try:
            import tensorflow_datasets as tfds  # optional extra: pip install easylemur[tfds]
        except ImportError as e:
            raise DataError(f"{path}: TFDS sources need tensorflow-datasets (pip install 'easylemur[tfds]')") from e
        name = path[len("tfds:"):] if path.startswith("tfds:") else path
        src = tfds.data_source(name, split=scfg["split"], data_dir=scfg["data_dir"] or None)
        return IndexableSource(src, f"tfds:{name}[{scfg['split']}]", decode_bytes=True)
    raise DataError(f"{path}: unknown source kind {kind!r}")


# --- text of JSONL files --------------------------------------------------------------------


def iter_jsonl_texts(path: str | Path, field: str | None) -> Iterator[str]:
    """Every string under `field` (or, with field=None, every string anywhere in the record) of
    the JSONL files at `path`, skipping bad lines: the shipped tokenizer's training text
    (tokenizer/build_tokenizer.py) and the tests' sample corpus."""

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)

    src = JsonlSource(resolve_files(str(path), JSONL_SUFFIXES))
    for i in range(len(src)):
        _, rec = src[i]
        if not isinstance(rec, dict):
            continue
        if field is None:
            skip = ("id", "path", "license", "language", "task", "origin", "source", "topic")
            yield from strings({k: v for k, v in rec.items() if k not in skip})
        elif isinstance(rec.get(field), str):
            yield rec[field]
