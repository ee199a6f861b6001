"""Readers of raw records (docs/design.md, "Sources"): what a source's `path` names (a file,
glob or directory of JSONL or Parquet files, a `datasets.save_to_disk` directory, a hub name,
`tfds:NAME`), and random access to its records.

Readers return `(where, value)` for an index: `where` names the record ("file:line" for JSONL,
"file:row N" for Parquet and HF / TFDS datasets) and `value` is the decoded dict or a
`BadRecord`. Malformed input is never raised here: the pipeline decides (skip and count, or
raise in strict mode). A file that cannot be read at all (missing, corrupt, truncated) is a
`DataError` naming it. A hub dataset has no random access: `open_source` gives its
`hub.StreamSpec`, which the pipeline reads as a stream. JSONL is read in memory independent of
the files' size: `JsonlSource` keeps a line index (8 bytes a line) and decompresses .gz/.zst to
a private temporary file; `iter_jsonl_records` streams one file's records.

A URL (easylemur/storage.py's `is_url`) is read through fsspec (gcsfs for gs://): a glob, a
prefix listed recursively, or one object; JSONL and Parquet are read from there as from local
disk (a JSONL object streamed in REMOTE_BLOCK reads, `_Remote`). Local files never import fsspec.

The source config keys and their defaults are the config schema's (config.SOURCE_DEFAULTS).
"""

from __future__ import annotations

import glob as globlib
import json
import os
import tempfile
import threading
import uuid
import weakref
import zlib
from array import array
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from easylemur.data.records import INVALID_UTF8, MALFORMED_JSON, BadRecord, DataError
from easylemur.storage import Unreachable, is_url, url_fs

STORE_MANIFEST = "manifest.json"  # the file that makes a directory a token store (data/store.py)
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)


# --- path resolution -------------------------------------------------------------------------


def _has_suffix(path: str, suffixes: tuple[str, ...]) -> bool:
    return any(path.endswith(s) for s in suffixes)


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def resolve_files(path: str, suffixes: tuple[str, ...]) -> list[str]:
    """Files named by `path` (a file, a glob, or a directory searched recursively), sorted; for
    a URL the objects (a glob's matches, every object under a prefix, the object), each a URL."""
    if is_url(path):
        what, files = _url_listing(path)
        return [f for f in files if _has_suffix(f, suffixes)] if what == "prefix" else files
    if _is_glob(path):
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
    if is_url(path):
        what = "glob" if _is_glob(path) else _url_listing(path)[0]
        return {"glob": "the pattern matches no object", "prefix": "no data files under this prefix",
                "object": "not a data file"}.get(what, "no such object or prefix")
    if _is_glob(path):
        return "the pattern matches no file"
    return "no data files in this directory" if os.path.isdir(path) else "no such file or directory"


def _kind_of_files(files: list[str], glob: bool) -> str | None:
    """What the files of a directory or prefix (data suffixes only) or of a glob (any match) hold."""
    if any(_has_suffix(f, PARQUET_SUFFIXES) for f in files) and not any(_has_suffix(f, JSONL_SUFFIXES) for f in files):
        return "parquet"
    if any(_has_suffix(f, JSONL_SUFFIXES) for f in files) or (glob and files):
        return "jsonl"
    return None


def detect_kind(path: str) -> str:
    if path.startswith("tfds:"):
        return "tfds"
    if is_url(path):
        return _url_kind(path)
    p = Path(path)
    if p.is_dir() and (p / STORE_MANIFEST).exists():
        return "tokens"
    if p.is_dir() and any((p / n).exists() for n in ("dataset_info.json", "state.json", "dataset_dict.json")):
        return "hf_disk"
    if p.is_file():
        return "parquet" if _has_suffix(path, PARQUET_SUFFIXES) else "jsonl"
    if kind := _kind_of_files(resolve_files(path, JSONL_SUFFIXES + PARQUET_SUFFIXES), _is_glob(path)):
        return kind
    if p.exists() or _is_glob(path):
        raise DataError(f"{path}: {_why_no_files(path)} (expected .jsonl[.gz|.zst] or .parquet files)")
    if "/" in path and not path.startswith((".", "/")) and path.count("/") == 1:
        return "hf_hub"
    raise DataError(f"{path}: no such file or directory (and not a hub dataset name like 'org/name')")


# --- URLs (any fsspec filesystem: gs:// through gcsfs) ----------------------------------------


def _url_fs(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path on it) of a URL (storage.url_fs); an unknown scheme or a missing backend is a DataError."""
    try:
        return url_fs(url)
    except Unreachable as e:
        raise DataError(str(e)) from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _remote_error(url: str, e: BaseException) -> DataError:
    if isinstance(e, DataError):
        return e
    if isinstance(e, FileNotFoundError):
        return DataError(f"{url}: cannot read: no such object")
    return DataError(f"{url}: cannot read: {type(e).__name__}: {_one_line(e)}")


def _remote(url: str, fn: Any) -> Any:
    """fn(), a backend's error (gcsfs raises OSError, HttpError, auth errors) as a DataError naming `url`."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - see above
        raise _remote_error(url, e) from None


def _spell(fs: Any, root_url: str, f: str) -> str:
    """The URL of listed object `f` spelled as the user spelled `root_url` (a prefix of it), else as fsspec does."""
    root = fs._strip_protocol(root_url).rstrip("/") if is_url(root_url) else ""
    if root and (f == root or f.startswith(root + "/")):
        return root_url.rstrip("/") + f[len(root):]
    return fs.unstrip_protocol(f)


def _url_listing(url: str) -> tuple[str, list[str]]:
    """(what `url` names: "glob" | "prefix" | "object" | "none", the URLs of the objects there:
    a glob's matches, every object under a prefix, the object itself), sorted."""
    fs, path = _url_fs(url)
    if _is_glob(url):
        k = min(url.index(c) for c in "*?[" if c in url)
        found = _remote(url, lambda: fs.glob(path, detail=True))
        root = url[: url.rfind("/", 0, k)]
        return "glob", sorted(_spell(fs, root, f) for f, info in found.items() if info.get("type") == "file")
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return "none", []
    except Exception as e:  # noqa: BLE001
        raise _remote_error(url, e) from None
    if info.get("type") == "directory":
        found = _remote(url, lambda: fs.find(path))
        return "prefix", sorted(_spell(fs, url, f) for f in found)
    return "object", [url]


def _url_kind(url: str) -> str:
    """detect_kind of a URL: a token store (`<url>/manifest.json`), else JSONL or Parquet by the objects there."""
    fs, path = _url_fs(url)
    if not _is_glob(url) and _remote(url, lambda: fs.exists(path.rstrip("/") + "/" + STORE_MANIFEST)):
        return "tokens"
    what, files = _url_listing(url)
    if what == "object":
        return "parquet" if _has_suffix(url, PARQUET_SUFFIXES) else "jsonl"
    if what == "prefix":
        names = {f.rsplit("/", 1)[-1] for f in files if f.rsplit("/", 1)[0] == url.rstrip("/")}
        if names & {"dataset_info.json", "state.json", "dataset_dict.json"}:
            raise DataError(f"{url}: a datasets.save_to_disk directory is not read from a bucket; copy it to local disk")
        if any(f.endswith((".ids", ".docs")) for f in files):
            raise DataError(f"{url}: not a finalized token store (no {STORE_MANIFEST}; run `python -m easylemur.data "
                            "finalize` after every tokenize worker has finished)")
        files = [f for f in files if _has_suffix(f, JSONL_SUFFIXES + PARQUET_SUFFIXES)]
    if kind := _kind_of_files(files, what == "glob"):
        return kind
    raise DataError(f"{url}: no token store ({STORE_MANIFEST}) and no .jsonl[.gz|.zst] or .parquet files: "
                    f"{_why_no_files(url)}")


def file_sizes(files: list[str]) -> list[int]:
    """The byte size of each file or URL (a bucket's asked concurrently where fsspec can)."""
    out: dict[str, int] = {}
    groups: dict[int, tuple[Any, list[tuple[str, str]]]] = {}
    for f in files:
        if is_url(f):
            fs, p = _url_fs(f)
            groups.setdefault(id(fs), (fs, []))[1].append((f, p))
            continue
        try:
            out[f] = os.path.getsize(f)
        except OSError as e:
            raise DataError(f"{f}: cannot read: {e.strerror or e}") from None
    for fs, items in groups.values():
        try:
            sizes = fs.sizes([p for _, p in items])
        except Exception:  # noqa: BLE001 - which one: asked again one by one, for the error naming it
            sizes = [_remote(f, lambda p=p: fs.size(p)) for f, p in items]
        out.update((f, int(n)) for (f, _), n in zip(items, sizes))
    return [out[f] for f in files]


# --- JSONL -----------------------------------------------------------------------------------

READ_CHUNK = 1 << 20  # bytes of an uncompressed file read at a time
DECODE_CHUNK = 1 << 16  # compressed bytes fed to a decoder at a time, at most
OUT_CHUNK = 1 << 20  # decompressed bytes one decoder call returns, about (gzip: max_length; zstd: whole blocks)
ZSTD_MAGIC = 0xFD2FB528
ZSTD_BLOCK_MAX = 1 << 17  # a zstd block decompresses to 128 KiB at most (RFC 8878, Block_Maximum_Size)
_COMPRESSION = {".gz": "gzip", ".zst": "zstd"}
REMOTE_BLOCK = 16 << 20  # bytes one GET of a streamed remote object fetches (its readahead)


def _compression(path: str) -> str | None:
    return _COMPRESSION.get(os.path.splitext(path)[1])


def _new_decoder(fmt: str):
    if fmt == "gzip":
        return zlib.decompressobj(wbits=31)  # one gzip member: header, deflate data, CRC-32 + size
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()  # one frame


def _decode_error_types() -> tuple[type[BaseException], ...]:
    import zstandard

    return (zlib.error, zstandard.ZstdError)


class _Remote:
    """An object at an fsspec URL in the role of a file descriptor (`_pread`, `_close`).

    Streamed (the default): a read that its buffer does not hold fetches REMOTE_BLOCK bytes
    from its offset with one ranged GET (`fs.cat_file`), keeping the buffered bytes from that
    offset on, so reading the object front to back in DECODE_CHUNK pieces (zstd's pieces step
    back to a block boundary) is one GET per REMOTE_BLOCK, not one per piece; a read behind the
    buffer (the error path's second pass) fetches again. `ranged()`: each read is one ranged
    GET of exactly its bytes (random access to records). Safe from several threads; a forked
    copy connects again (fsspec makes a fresh filesystem object per process)."""

    def __init__(self, url: str, size: int | None = None, ranged: bool = False):
        self.url, self.is_ranged = url, ranged
        self.lock = threading.RLock()  # pread holds it while _get connects
        self._pid: int | None = None
        self._buf, self._start = b"", 0
        self.size = int(_remote(url, lambda: self._connect()[0].size(self._path))) if size is None else size

    def _connect(self) -> tuple[Any, str]:
        if self._pid != os.getpid():
            self._fs, self._path = _url_fs(self.url)
            self._pid = os.getpid()
        return self._fs, self._path

    def _get(self, start: int, end: int) -> bytes:
        with self.lock:
            fs, path = self._connect()
        return _remote(self.url, lambda: fs.cat_file(path, start=start, end=end)) if end > start else b""

    def ranged(self) -> _Remote:
        return _Remote(self.url, self.size, ranged=True)

    def pread(self, n: int, offset: int) -> bytes:
        n = min(n, self.size - offset)
        if n <= 0:
            return b""
        if self.is_ranged:
            return self._get(offset, offset + n)
        with self.lock:  # one stream: its reads come in order, the lock only guards the buffer
            buf, at = self._buf, offset - self._start
            if 0 <= at and at + n <= len(buf):
                return buf[at : at + n]
            keep = buf[at:] if 0 <= at < len(buf) else b""
            self._buf = keep + self._get(offset + len(keep), min(self.size, offset + max(n, REMOTE_BLOCK)))
            self._start = offset
            return self._buf[:n]

    def close(self) -> None:
        self._buf = b""


def _open_fd(path: str) -> tuple[int | _Remote, int]:
    """(fd, size) of a file to read (a URL: a `_Remote` in place of the fd); a file that cannot
    be opened is a DataError naming it."""
    if is_url(path):
        r = _Remote(path)
        return r, r.size
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return fd, os.fstat(fd).st_size
    except OSError as e:
        os.close(fd)
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None


def _close(fd: int | _Remote) -> None:
    if isinstance(fd, int):
        os.close(fd)
    else:
        fd.close()


def _pread(path: str, fd: int | _Remote, n: int, offset: int) -> bytes:
    """`n` bytes at `offset` (fewer at the end of the file); thread-safe: no shared file position."""
    if not isinstance(fd, int):
        return fd.pread(n, offset)
    try:
        b = os.pread(fd, n, offset)
        if len(b) == n or not b:
            return b
        parts, got = [b], len(b)  # a short read: the end of the file, or a read over 2 GiB
        while got < n and (b := os.pread(fd, n - got, offset + got)):
            parts.append(b)
            got += len(b)
        return b"".join(parts)
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None


class _ZstdCuts:
    """Where to cut one zstd frame's compressed bytes so that a decoder call returns about
    OUT_CHUNK bytes at most: zstandard's decompressobj has no max_length, and a run of RLE or
    repeat blocks decompresses thousands of times over. It walks the frame's headers (RFC 8878:
    frame header, 3-byte block headers, checksum) and cuts at block boundaries; it only sizes
    what is fed, the decoder checks the data (a header it cannot read ends the walk: the decoder
    raises on it)."""

    def __init__(self, start: int):
        self.at, self.state, self.checksum = start, "frame", False

    def cut(self, pos: int, window: bytes) -> int:
        """The end (absolute offset, in (pos, pos + len(window)]) of the next piece to feed;
        `window` holds the compressed bytes from `pos`, which the last cut ended at."""
        wend, out = pos + len(window), 0
        while True:
            at, rel = self.at, self.at - pos
            if rel < 0:  # only after a header misread: the decoder decides
                self.state = "unknown"
            if self.state == "done":  # the frame ends at `at`
                return at if at > pos else wend
            if self.state == "unknown" or at >= wend:
                return wend
            need = {"frame": 5, "block": 3, "checksum": 4}[self.state]
            if rel + need > len(window):
                return at if at > pos else wend
            if self.state == "frame":
                magic = int.from_bytes(window[rel : rel + 4], "little")
                if magic == ZSTD_MAGIC:
                    fhd = window[rel + 4]
                    single, fcs_flag = (fhd >> 5) & 1, fhd >> 6
                    self.checksum = bool(fhd & 4)
                    fcs = single if fcs_flag == 0 else (2, 4, 8)[fcs_flag - 1]
                    self.at, self.state = at + 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3] + fcs, "block"
                elif magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: magic, size, data
                    if rel + 8 > len(window):
                        return at if at > pos else wend
                    self.at, self.state = at + 8 + int.from_bytes(window[rel + 4 : rel + 8], "little"), "done"
                else:
                    self.state = "unknown"
            elif self.state == "block":
                h = int.from_bytes(window[rel : rel + 3], "little")
                last, btype, bsize = h & 1, (h >> 1) & 3, h >> 3
                if btype == 3:  # reserved
                    self.state = "unknown"
                    continue
                out += ZSTD_BLOCK_MAX if btype == 2 else bsize  # compressed | raw, RLE
                self.at = at + 3 + (1 if btype == 1 else bsize)
                if last:
                    self.state = "checksum" if self.checksum else "done"
            else:
                self.at, self.state = at + 4, "done"
            if out >= OUT_CHUNK:
                return min(self.at, wend)


def _pieces(path: str, fd: int, fmt: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes): the compressed bytes from `start` (a member's or frame's first byte) to
    `end`, in pieces of DECODE_CHUNK at most (zstd: cut at block boundaries, _ZstdCuts)."""
    cuts = _ZstdCuts(start) if fmt == "zstd" else None
    pos = start
    while pos < end:
        window = _pread(path, fd, min(DECODE_CHUNK, end - pos), pos)
        if not window:
            return  # the file shrank while read: the caller reports it truncated
        if cuts is not None:
            window = window[: cuts.cut(pos, window) - pos]
        yield pos, window
        pos += len(window)


def _feed(dec: Any, fmt: str, data: bytes) -> Iterator[bytes]:
    """What `dec` decodes of `data`, in parts of about OUT_CHUNK bytes at most."""
    if fmt == "zstd":
        if out := dec.decompress(data):  # bounded by the block-boundary cuts (_ZstdCuts)
            yield out
        return
    while True:
        out = dec.decompress(data, OUT_CHUNK)
        if out:
            yield out
        if dec.eof:
            return
        data = dec.unconsumed_tail
        if not data and len(out) < OUT_CHUNK:  # input used up and no output held back
            return


def _decompressed(path: str, fd: int, size: int, fmt: str) -> Iterator[bytes]:
    """Every member (gzip) or frame (zstd) of the compressed file, decompressed, streamed in
    parts of about OUT_CHUNK bytes.

    A corrupt or truncated file is a DataError naming the file and the byte offset of the
    compressed stream where the decoder stopped, raised when the stream reaches the damage: the
    decoders stop quietly at the end of their input, so without the end-of-stream check a cut
    file would lose everything after the cut and show, at most, one malformed last line."""
    errors = _decode_error_types()
    pos = 0
    while pos < size:
        if fmt == "gzip":
            # zero bytes between or after members (tape padding): gzip and Python's gzip skip them
            head = _pread(path, fd, DECODE_CHUNK, pos)
            if skip := len(head) - len(head.lstrip(b"\0")):
                pos += skip
                continue
        start, dec = pos, _new_decoder(fmt)
        for at, piece in _pieces(path, fd, fmt, start, size):
            saved = dec.copy() if fmt == "gzip" else None  # zlib state at `at`: the error path's start
            try:
                yield from _feed(dec, fmt, piece)
            except errors as e:
                where = _error_offset(path, fd, fmt, start, at, piece, saved, errors)
                raise DataError(f"{path}: corrupt {fmt} data at byte offset {where} of {size}: {e}") from None
            if dec.eof:
                pos = at + len(piece) - len(dec.unused_data)
                break
        else:
            raise DataError(
                f"{path}: truncated {fmt} file: the compressed stream ends at byte offset {size} inside the "
                f"{fmt} {'member' if fmt == 'gzip' else 'frame'} that starts at byte {start} "
                f"(a partial copy or an interrupted write; the file needs to be written again)"
            )


def _error_offset(path: str, fd: int, fmt: str, start: int, at: int, piece: bytes, saved: Any,
                  errors: tuple) -> int:
    """The byte where decoding fails inside `piece` (at offset `at`), which failed whole: from a
    decoder at `at` (gzip: the saved copy; zstd, which cannot copy one: the member decoded again
    from `start`), that piece one byte at a time. Only on the error path."""
    dec = saved
    if dec is None:
        dec = _new_decoder(fmt)
        for _, p in _pieces(path, fd, fmt, start, at):  # decoded without error the first time
            for _ in _feed(dec, fmt, p):
                pass
    for i in range(len(piece)):
        try:
            for _ in _feed(dec, fmt, piece[i : i + 1]):
                pass
        except errors:
            return at + i
    return at


def _chunks(path: str, fd: int, size: int, fmt: str | None) -> Iterator[bytes]:
    """The bytes of a JSONL file, decompressed (.gz, .zst, checked end to end), streamed in
    parts of about a MiB."""
    if fmt is not None:
        yield from _decompressed(path, fd, size, fmt)
        return
    pos = 0
    while pos < size and (b := _pread(path, fd, min(READ_CHUNK, size - pos), pos)):
        yield b
        pos += len(b)


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
