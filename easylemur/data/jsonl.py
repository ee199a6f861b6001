"""JSONL records (docs/design.md, "Sources"): a file's non-empty lines as `(where, value)`,
`where` "file:line" and `value` the decoded dict or a `BadRecord` (malformed input is never
raised here: the pipeline decides).

Read in memory independent of the files' size: `iter_jsonl_records` streams one file's records
(no temporary file, no index; what the token-store builder reads); `JsonlSource` gives random
access through a line index (8 bytes a line), a .gz/.zst file decompressed once to a private
temporary file. `iter_jsonl_texts` is the text of JSONL files (the tokenizer's training text).

Separate from the byte streams under it (data/streams.py: decompression, remote reads) and
from the other source kinds (data/readers.py: Parquet, HF datasets, `open_source`).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import uuid
import weakref
from array import array
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from easylemur.data.files import JSONL_SUFFIXES, resolve_files
from easylemur.data.records import INVALID_UTF8, MALFORMED_JSON, BadRecord, DataError
from easylemur.data.streams import _chunks, _close, _compression, _open_fd, _pread, _Remote


# --- records, streamed -----------------------------------------------------------------------


def _record(raw: bytes, where: str) -> tuple[str, Any]:
    """(where, value) of one non-empty line: the decoded object, None for a blank line, or a
    BadRecord."""
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


class _Progressed:
    """A file's reads (`_pread`'s fd), telling `progress` where each one ended: the bytes of the
    file read so far (compressed ones for .gz/.zst), the measure of a long file's progress."""

    def __init__(self, path: str, fd: int | _Remote, progress: Callable[[int], None]):
        self.path, self.fd, self.progress = path, fd, progress

    def pread(self, n: int, offset: int) -> bytes:
        b = _pread(self.path, self.fd, n, offset)
        self.progress(offset + len(b))
        return b


def iter_jsonl_records(path: str, progress: Callable[[int], None] | None = None) -> Iterator[tuple[str, Any]]:
    """(where, value) of each non-empty line of ONE JSONL file (plain, .gz or .zst), in order:
    exactly what `JsonlSource([path])[i]` gives, in constant memory (the longest line aside): no
    temporary file, no index. A truncated or corrupt compressed file is a DataError naming it
    and the byte offset, raised when the stream reaches the damage. A URL is streamed the same
    way (`_Remote`: a GET per REMOTE_BLOCK bytes). `progress`, if given, is called with the
    bytes of the file read so far after each read (about a MiB, or 64 KiB compressed)."""
    path = os.fspath(path)
    fd, size = _open_fd(path)
    try:
        lineno, pending = 0, []  # pending: the start of a line that goes on in the next part
        src = fd if progress is None else _Progressed(path, fd, progress)
        for chunk in _chunks(path, src, size, _compression(path)):
            nl = chunk.find(b"\n")
            if nl < 0:
                pending.append(chunk)
                continue
            head = b"".join([*pending, chunk[:nl]]) if pending else chunk[:nl]
            lines = chunk[nl + 1 :].split(b"\n")
            tail = lines.pop()
            for raw in (head, *lines):
                lineno += 1
                if raw:
                    yield _record(raw, f"{path}:{lineno}")
            pending = [tail] if tail else []
        if last := b"".join(pending):
            yield _record(last, f"{path}:{lineno + 1}")
    finally:
        _close(fd)

# --- random access: the line index, JsonlSource ----------------------------------------------


class _LineIndex:
    """The line index of one file, built from its bytes part by part: the start of each
    non-empty line (int64), then the end of the last one + 1; for each zero-length line before
    the last non-empty one, the number of non-empty lines before it (int64; an empty array for
    files without such lines, the common case). A line's end and number follow
    (JsonlSource._span): 8 bytes a line."""

    def __init__(self):
        self.starts, self.empties = array("q"), array("q")
        self.line_start = self.count = self.size = 0
        self.last_end = -1  # where the last non-empty line so far ends

    def add(self, chunk: bytes) -> None:
        nl = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10).astype(np.int64)
        if len(nl):
            nl += self.size
            ls = np.empty_like(nl)
            ls[0], ls[1:] = self.line_start, nl[:-1] + 1
            full = nl > ls
            self.starts.frombytes(ls[full].tobytes())
            if not full.all():
                before = np.cumsum(full) - full  # non-empty lines before each line of the part
                self.empties.frombytes((self.count + before[~full]).tobytes())
            if (n := int(full.sum())) > 0:
                self.count += n
                self.last_end = int(nl[np.flatnonzero(full)[-1]])
            self.line_start = int(nl[-1]) + 1
        self.size += len(chunk)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts + one sentinel, empties), the last line taken."""
        if self.size > self.line_start:  # the last line has no newline
            self.starts.append(self.line_start)
            self.count += 1
            self.last_end = self.size
        while self.empties and self.empties[-1] == self.count:
            self.empties.pop()  # zero-length lines after the last record number no record
        self.starts.append(self.last_end + 1)  # the sentinel: as if a newline followed the last record
        as_np = lambda a: np.frombuffer(a, np.int64) if len(a) else np.zeros(0, np.int64)  # noqa: E731
        return as_np(self.starts), as_np(self.empties)


class _Fd:
    """An open file descriptor (or `_Remote`), closed when the last reference to it goes."""

    def __init__(self, fd: int | _Remote):
        self.fd = fd

    def __del__(self):
        try:
            _close(self.fd)
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass


def _private_tempfile() -> _Fd:
    """An empty read-write file (mode 0600) that no path names: made in a fresh private
    directory (mkdtemp: 0700, random name) under TMPDIR, unlinked at once, the directory removed;
    its blocks go when its descriptor is closed."""
    d = tempfile.mkdtemp(prefix="easylemur-jsonl-")
    try:
        try:
            fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except (AttributeError, OSError):  # no O_TMPFILE (not Linux, or the filesystem lacks it)
            name = os.path.join(d, "data")
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            os.unlink(name)
    finally:
        os.rmdir(d)
    return _Fd(fd)


class _OpenFiles:
    """One process's open files of a JsonlSource, shared by its pickled copies in that process
    (`_OPEN`): per file (its descriptor, the offset of its bytes there); compressed files
    decompressed back to back into one private temporary file."""

    def __init__(self, n: int):
        self.files: list[tuple[_Fd, int] | None] = [None] * n
        self.tmp: _Fd | None = None
        self.tmp_size = 0
        self.lock = threading.Lock()  # read threads: each file opened once, not once per thread

    def load(self, path: str, fi: int, index: _LineIndex | None, size: int | None) -> None:
        """Opens file `fi` (compressed: decompressed into the temporary file), feeding its bytes
        to `index` if given; with `size` (its length when indexed), checks it did not change."""
        fmt = _compression(path)
        fd, raw_size = _open_fd(path)
        src = _Fd(fd)  # closed when dropped, also on an error below
        got = raw_size
        if fmt is not None or index is not None:
            if fmt is not None and self.tmp is None:
                try:
                    self.tmp = _private_tempfile()
                except OSError as e:
                    raise DataError(f"{path}: cannot make a temporary file under {tempfile.gettempdir()} for its "
                                    f"decompressed copy: {e.strerror or e} (set TMPDIR to a writable directory)") from None
            got = 0
            for chunk in _chunks(path, fd, raw_size, fmt):
                if index is not None:
                    index.add(chunk)
                if fmt is not None:
                    self._write(path, chunk, self.tmp_size + got)
                got += len(chunk)
        if size is not None and got != size:
            raise DataError(f"{path}: changed since it was indexed ({size} bytes of JSONL then, {got} now)")
        if fmt is None:
            self.files[fi] = (src if isinstance(fd, int) else _Fd(fd.ranged()), 0)  # a URL: a ranged GET a record
        else:
            self.files[fi] = (self.tmp, self.tmp_size)
            self.tmp_size += got

    def _write(self, path: str, chunk: bytes, at: int) -> None:
        view = memoryview(chunk)
        try:
            while view:
                n = os.pwrite(self.tmp.fd, view, at)
                view, at = view[n:], at + n
        except OSError as e:
            raise DataError(
                f"{path}: cannot write its decompressed copy to a temporary file under {tempfile.gettempdir()}: "
                f"{e.strerror or e} (compressed JSONL is decompressed to disk for random access; "
                f"set TMPDIR to a directory with room)"
            ) from None


_OPEN: weakref.WeakValueDictionary[str, _OpenFiles] = weakref.WeakValueDictionary()


class JsonlSource:
    """Random access to the records of JSONL files (plain, .gz, .zst) in memory independent of
    the files' size, the line index aside (8 bytes a non-empty line, 8 a zero-length one).

    Compressed files are decompressed once, streaming (every gzip member or zstd frame, checked
    end to end), into one private temporary file under TMPDIR while the index is built; records
    are then read with `os.pread` from it, or from the file itself when uncompressed, from any
    number of threads. The temporary file needs disk room for the decompressed data (a tmpfs
    TMPDIR holds it in memory) and goes with the source. A pickled copy keeps the index and
    shares this process's open files (a forked one inherits them); in another process it opens
    each file on first access, decompressing it again.

    URLs work too: a compressed object is streamed once into the temporary file like a local
    one (so it downloads the whole object); an uncompressed one is indexed by streaming it and
    its records are then read by one ranged GET each: fine for eval sets and small sources,
    while a big corpus in a bucket is tokenized into a token store first (`python -m
    easylemur.data tokenize`, which streams each object once)."""

    def __init__(self, files: list[str]):
        self.files = list(files)
        self._token = uuid.uuid4().hex
        self._open = _OPEN[self._token] = _OpenFiles(len(self.files))
        self._starts: list[np.ndarray] = []
        self._empties: list[np.ndarray] = []
        self._sizes: list[int] = []
        counts = [0]
        for fi, f in enumerate(self.files):
            index = _LineIndex()
            self._open.load(f, fi, index, None)
            starts, empties = index.finish()
            self._starts.append(starts)
            self._empties.append(empties)
            self._sizes.append(index.size)
            counts.append(len(starts) - 1)
        self._offsets = np.cumsum(counts, dtype=np.int64)
        self._len = int(self._offsets[-1])

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_open"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        op = _OPEN.get(self._token)
        if op is None:  # another process: files opened on first access
            op = _OPEN.setdefault(self._token, _OpenFiles(len(self.files)))
        self._open = op

    def __len__(self) -> int:
        return self._len

    def _file(self, fi: int) -> tuple[_Fd, int]:
        f = self._open.files[fi]
        if f is None:
            with self._open.lock:
                if (f := self._open.files[fi]) is None:
                    self._open.load(self.files[fi], fi, None, self._sizes[fi])
                    f = self._open.files[fi]
        return f

    def _span(self, fi: int, k: int) -> tuple[int, int, int]:
        """(start, end, line number) of record `k` of file `fi`: the line ends before the next
        one's start, less its newline and those of the zero-length lines between them."""
        starts, empties = self._starts[fi], self._empties[fi]
        start, nxt = int(starts[k]), int(starts[k + 1])
        if not len(empties):
            return start, nxt - 1, k + 1
        before = int(np.searchsorted(empties, k, "right"))  # zero-length lines before this line
        between = int(np.searchsorted(empties, k + 1, "right")) - before  # ... and after it
        return start, nxt - 1 - between, k + 1 + before

    def __getitem__(self, index: int) -> tuple[str, Any]:
        i = int(index)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record {index} out of range: the source has {self._len}")
        fi = 0 if len(self.files) == 1 else int(np.searchsorted(self._offsets, i, "right")) - 1
        start, end, line = self._span(fi, i - int(self._offsets[fi]))
        fd, base = self._file(fi)
        path = self.files[fi]
        raw = _pread(path, fd.fd, end - start, base + start)
        if len(raw) != end - start:
            raise DataError(f"{path}: changed since it was indexed (line {line} is cut short)")
        return _record(raw, f"{path}:{line}")


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

    for f in resolve_files(str(path), JSONL_SUFFIXES):
        for _, rec in iter_jsonl_records(f):
            if not isinstance(rec, dict):
                continue
            if field is None:
                skip = ("id", "path", "license", "language", "task", "origin", "source", "topic")
                yield from strings({k: v for k, v in rec.items() if k not in skip})
            elif isinstance(rec.get(field), str):
                yield rec[field]
