"""Readers of raw records (docs/design.md, "Sources"): `open_source` opens one source config
as random access to its records, whatever its `path` names (data/files.py detects the kind):
JSONL files (data/jsonl.py), Parquet files, a `datasets.save_to_disk` directory or data files
through `datasets`, a TFDS dataset.

Readers return `(where, value)` for an index: `where` names the record ("file:line" for JSONL,
"file:row N" for Parquet and HF / TFDS datasets) and `value` is the decoded dict or a
`BadRecord`. Malformed input is never raised here: the pipeline decides (skip and count, or
raise in strict mode). A file that cannot be read at all (missing, corrupt, truncated) is a
`DataError` naming it. A hub dataset has no random access: `open_source` gives its
`hub.StreamSpec`, which the pipeline reads as a stream.

A URL (easylemur/storage.py's `is_url`) is read through fsspec (gcsfs for gs://): JSONL and
Parquet are read from there as from local disk.

The source config keys and their defaults are the config schema's (config.SOURCE_DEFAULTS).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np

from easylemur.data.files import (
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    _has_suffix,
    _url_fs,
    _why_no_files,
    detect_kind,
    resolve_files,
)
from easylemur.data.jsonl import JsonlSource
from easylemur.data.records import INVALID_UTF8, MALFORMED_JSON, BadRecord, DataError
from easylemur.storage import is_url


# --- Parquet ---------------------------------------------------------------------------------


def _parquet_fs(path: str) -> dict[str, Any]:
    """pyarrow's `filesystem` argument for a URL (fsspec's, which pyarrow wraps), none for a local file."""
    return {"filesystem": _url_fs(path)[0]} if is_url(path) else {}


class ParquetSource:
    """Random access to Parquet rows. Each process loads a file's needed columns on first
    access (row groups would be decoded over and over under a global shuffle): memory-mapped
    for a local file, read into memory for a URL."""

    def __init__(self, files: list[str], columns: list[str] | None):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.files = list(files)
        self.columns = columns
        counts = []
        for f in self.files:
            try:
                counts.append(pq.ParquetFile(f, **_parquet_fs(f)).metadata.num_rows)
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
                    f, fs = self.files[fi], _parquet_fs(self.files[fi])
                    schema = pq.read_schema(f, **fs)
                    cols = None if self.columns is None else [c for c in self.columns if c in schema.names]
                    t = self._tables[fi] = pq.read_table(f, columns=cols, memory_map=not fs, **fs)
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

