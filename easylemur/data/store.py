"""The token store (docs/design.md, "Token store"): documents tokenized once, read by range.

Layout under the store's root (a local directory or any fsspec URL, e.g. gs://B/lemur):

    manifest.json                 written last by `finalize`: what the store holds (below)
    <source>/<unit>.ids           the documents' token ids back to back (uint16 or uint32, little-endian)
    <source>/<unit>.docs          int64[documents + 1]: where each document starts in .ids (0 first)
    <source>/<unit>.mask          chat sources only: uint8 per token, 1 where trained
    <source>/<unit>.json          the unit's commit marker: written after its data files

A unit is one input file (JSONL, Parquet) or one block of rows of a dataset; `build.py`
writes it. Flat binary arrays rather than ArrayRecord or TensorStore: a document is one ranged
read of exactly its bytes from any object store (ArrayRecord's compressed chunks would read a
whole chunk per document; TensorStore's chunked arrays the same), `numpy.fromfile` and any
language read it, and token ids do not compress enough to pay for it (docs/design.md).

Reading (`StoreSource`) keeps only the `.docs` offsets in memory (8 bytes per document) and
fetches each document's ids (and mask) with one ranged read, so a process reads the bytes of
the documents it trains on and nothing else.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import numpy as np

from easylemur import storage
from easylemur.chat.choice import template_sha256
from easylemur.data.files import STORE_MANIFEST
from easylemur.data.records import DataError

STORE_FORMAT = "easylemur-token-store"
STORE_VERSION = 1
OFFSET_DTYPE = np.dtype("<i8")
MASK_DTYPE = np.dtype("u1")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (Llama-2's 32K vocabulary), else uint32 (Llama-3's 128K)."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


class Storage:
    """The token store's files under one root, local or in a bucket (easylemur/storage.py does
    the I/O: pread and rename locally, fsspec/gcsfs for a URL), with the store's one-line
    DataErrors. Bucket objects appear whole or not at all (an upload is committed when it
    completes) and local files are written under a private name and renamed, so a crash never
    leaves a partial file under its final name."""

    def __init__(self, root: str):
        self.root = root.rstrip("/") if storage.is_url(root) else os.path.abspath(root)
        try:
            self.io = storage.at(root)
        except storage.Unreachable as e:
            raise DataError(str(e)) from None

    def path(self, *parts: str) -> str:
        return storage.join(self.root, *parts)

    def check_root(self) -> None:
        """A root that is there but is no directory (a local file) is a one-line DataError."""
        if not self.io.remote and os.path.exists(self.root) and not os.path.isdir(self.root):
            raise DataError(f"{self.root}: is a file, not a directory: a token store is a directory (made if "
                            "missing) or a bucket URL")

    def make_root(self) -> None:
        """Makes a local root directory (a bucket's prefix needs none); a path that cannot be one
        is a one-line DataError naming it."""
        self.check_root()
        try:
            self.io.makedirs(self.root)
        except OSError as e:
            raise DataError(f"{self.root}: cannot make the token store's directory here: {e.strerror or e}") from None

    def exists(self, path: str) -> bool:
        return self.io.exists(path)

    def size(self, path: str) -> int:
        return self.io.size(path)

    def read_bytes(self, path: str) -> bytes:
        try:
            return self.io.read(path)
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read: {e}") from None

    def read_json(self, path: str) -> Any:
        raw = self.read_bytes(path)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise DataError(f"{path}: not valid JSON ({e})") from None

    def write_bytes(self, path: str, data: bytes) -> None:
        """Replaces `path` whole, atomically (storage.write)."""
        self.io.write(path, data)

    def put_file(self, local: str, path: str) -> None:
        """Moves a finished local file to `path` (a rename on local disk, an upload to a bucket)."""
        self.io.put_file(local, path)

    def remove_partial(self, directory: str, unit: str) -> None:
        """Removes the private files a killed writer of `unit` left on local disk (a bucket
        never shows an unfinished upload). Only the unit's own worker calls it."""
        if self.io.remote or not os.path.isdir(directory):
            return
        for name in self.io.listdir(directory):
            if name.startswith(unit + ".") and ".tmp-" in name:
                self.io.remove(os.path.join(directory, name))

    def local_tmp_dir(self, path: str) -> str | None:
        """Where a file bound for `path` is written first: beside it on local disk (so that the
        rename stays in one file system), None (the system temp dir) for a bucket."""
        return self.io.staging_dir(path)


def read_manifest(root: str) -> dict[str, Any]:
    """The store's manifest; a directory without one (never finalized) is a DataError."""
    st = Storage(root)
    path = st.path(STORE_MANIFEST)
    if not st.exists(path):
        raise DataError(f"{root}: not a finalized token store (no {STORE_MANIFEST}; run "
                        f"`python -m easylemur.data finalize` after every tokenize worker has finished)")
    man = st.read_json(path)
    if man.get("format") != STORE_FORMAT or man.get("version") != STORE_VERSION:
        raise DataError(f"{path}: format {man.get('format')!r} version {man.get('version')!r}, expected "
                        f"{STORE_FORMAT!r} version {STORE_VERSION}")
    return man


def pick_source(man: dict[str, Any], root: str, name: str, wanted: str) -> str:
    """The store source a config source reads: `store_source`, else the same name, else the
    store's only source."""
    have = sorted(man["sources"])
    if wanted:
        if wanted not in man["sources"]:
            raise DataError(f"{root}: the token store has no source {wanted!r} (has {', '.join(have)})")
        return wanted
    if name in man["sources"]:
        return name
    if len(have) == 1:
        return have[0]
    raise DataError(f"{root}: the token store has sources {', '.join(have)}, none named {name!r}; set "
                    f"store_source to one of them")


class StoreSource:
    """Random access to one source of a token store: `len()` documents, `[i]` -> (where, doc)
    with doc = {"ids": int32[n], "mask": int8[n]}, exactly what `Tokenize` made of the record.

    In memory: the `.docs` offsets of every unit (8 bytes per document) and their cumulative
    counts; everything else is read per document by range (storage.Ranged: pread of files kept
    open, one ranged GET per read from a bucket), safe from several threads. `bytes_read` counts
    the bytes fetched so far by this object."""

    def __init__(self, root: str, source: str, manifest: dict[str, Any]):
        self.root, self.source = root, source
        self.storage = Storage(root)
        entry = manifest["sources"][source]
        self.format = entry["format"]
        self.dtype = np.dtype(manifest["dtype"])
        self.units = [u["name"] for u in entry["units"] if u["documents"]]
        offsets, counts = [], []
        for u in self.units:
            path = self.storage.path(source, f"{u}.docs")
            raw = self.storage.read_bytes(path)
            off = np.frombuffer(raw, OFFSET_DTYPE)
            if len(off) < 1 or off[0] != 0 or np.any(np.diff(off) < 0):
                raise DataError(f"{path}: not a document index (expected int64 offsets from 0, ascending)")
            offsets.append(off)
            counts.append(len(off) - 1)
        self._offsets = offsets
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self._reads = storage.Ranged(self.storage.root)
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.index_bytes = int(sum(o.nbytes for o in offsets) + self._starts.nbytes)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["storage"] = None  # made again where it is unpickled; _reads opens its files again
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self.storage = Storage(self.root)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _read(self, path: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            data = self._reads.read(path, start, end)
        except OSError as e:
            raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
        if len(data) != end - start:
            raise DataError(f"{path}: truncated: bytes {start}..{end} asked, {len(data)} read")
        with self._lock:
            self.bytes_read += len(data)
        return data

    def locate(self, index: int) -> tuple[str, int]:
        """(unit, document number within it) of document `index`."""
        u = int(np.searchsorted(self._starts, index, side="right") - 1)
        return self.units[u], index - int(self._starts[u])

    def __getitem__(self, index: int) -> tuple[str, dict[str, np.ndarray]]:
        index = int(index)
        u = int(np.searchsorted(self._starts, index, side="right") - 1)
        d = index - int(self._starts[u])
        unit, off = self.units[u], self._offsets[u]
        a, b = int(off[d]), int(off[d + 1])
        raw = self._read(self.storage.path(self.source, f"{unit}.ids"), a * self.dtype.itemsize,
                         b * self.dtype.itemsize)
        ids = np.frombuffer(raw, self.dtype).astype(np.int32)
        if self.format == "chat":
            mask = np.frombuffer(self._read(self.storage.path(self.source, f"{unit}.mask"), a, b), MASK_DTYPE)
            mask = mask.astype(np.int8)
        else:  # text: BOS + text + EOS, every token trained but the BOS (tokenize.Tokenize._text)
            mask = np.ones(b - a, np.int8)
            mask[:1] = 0
        return f"{self.root}/{self.source}/{unit}:doc {d}", {"ids": ids, "mask": mask}

    def close(self) -> None:
        self._reads.close()


def open_store_source(scfg: dict[str, Any], name: str, tokenizer: Any, seq_len: int) -> StoreSource:
    """The StoreSource a config source of kind "tokens" names (checked: `store_entry`)."""
    man, src = store_entry(scfg, name, tokenizer, seq_len)
    return StoreSource(scfg["path"], src, man)


def store_entry(scfg: dict[str, Any], name: str, tokenizer: Any, seq_len: int) -> tuple[dict[str, Any], str]:
    """(manifest, store source) of a config source of kind "tokens", checked against the run:
    the tokenizer (by sha256), the format, and for chat the chat_format (and for "model" the
    template, by sha256) and the seq_len conversations were cut to."""
    root = scfg["path"]
    man = read_manifest(root)
    src = pick_source(man, root, name, scfg["store_source"])
    entry = man["sources"][src]
    want = tokenizer_sha256(tokenizer)
    if man["tokenizer"]["sha256"] != want:
        raise DataError(f"source '{name}': token store {root} was tokenized with tokenizer sha256 "
                        f"{man['tokenizer']['sha256'][:16]}..., this run's tokenizer is {want[:16]}...; "
                        "tokenize again with this tokenizer or train with the store's")
    if entry["format"] != scfg["format"]:
        raise DataError(f"source '{name}': token store {root} source {src!r} holds {entry['format']} documents, "
                        f"the config says format={scfg['format']!r}")
    if entry["format"] == "chat" and entry.get("chat_format", "chatml") != scfg["chat_format"]:
        # a store of one rendering read as the other would train the wrong tokens, silently
        raise DataError(f"source '{name}': token store {root} source {src!r} holds conversations rendered with "
                        f"chat_format={entry.get('chat_format', 'chatml')!r}, the config says "
                        f"chat_format={scfg['chat_format']!r}; tokenize again with it")
    if (entry["format"] == "chat" and scfg["chat_format"] == "model"
            and entry.get("chat_template_sha256") != template_sha256(tokenizer)):
        raise DataError(f"source '{name}': token store {root} source {src!r} was rendered with another chat_template "
                        f"(sha256 {str(entry.get('chat_template_sha256'))[:16]}...) than this run's tokenizer has; "
                        "tokenize again with it")
    if entry["format"] == "chat" and entry["seq_len"] != seq_len:
        raise DataError(f"source '{name}': token store {root} source {src!r} cut conversations to seq_len="
                        f"{entry['seq_len']}, this run has data.seq_len={seq_len}; tokenize again with it")
    return man, src


def tokenizer_sha256(tokenizer: Any) -> str:
    """The sha256 of the tokenizer's model file: what a store and a run must agree on."""
    return tokenizer.sha256
