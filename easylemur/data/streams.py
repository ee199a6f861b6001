"""The bytes of one file, local or at a URL, as reads at offsets (`_open_fd`, `_pread`: no
shared file position, so any number of threads) and as a stream (`_chunks`), decompressed
(.gz, .zst) in parts of about a MiB whatever the ratio: every gzip member or zstd frame checked
to its end marker, a truncated or corrupt one a `DataError` naming the file and the byte offset
of the compressed stream where the decoder stopped.

A URL is a `_Remote` in place of the file descriptor: streamed in REMOTE_BLOCK reads, or one
ranged GET a read (`_Remote.ranged`). Local files never import fsspec.

Separate from the JSONL records (data/jsonl.py): nothing here knows lines or JSON, only files,
offsets and bytes.
"""

from __future__ import annotations

import os
import threading
import zlib
from typing import Any, Iterator

from easylemur.data.files import _remote, _url_fs
from easylemur.data.records import DataError
from easylemur.storage import is_url

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
