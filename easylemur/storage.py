"""Where files live: a local path or a bucket URL (docs/design.md, "Storage").

The one place that decides which backend a path is on (`is_url`: the path has "://") and the
one implementation of what workdirs, token stores, run files (metrics.jsonl, events.jsonl, the
workdir lock) and data inputs need done to them:

    exists, isdir, size, read, read_range, write (atomic), create (if absent), listdir, remove,
    makedirs, put_file; `at(path)` gives the backend itself (`Local` or `Remote`)
    Ranged       many ranged reads of files under one root, from several threads
    LineFile     a file written a line at a time (appended locally, rewritten on a bucket)
    owned_file   the workdir lock's file: create-if-absent, refresh and remove while it is
                 still the owner's, take over a judged copy once

Local paths: plain os calls (pread; a write goes to a private temporary file, fsynced, then
renamed into place; create-if-absent is O_EXCL). URLs: fsspec (gcsfs for gs://): an upload is
committed whole, so a reader sees the old object or the new one, never a part; a bucket has no
directories to make (and gcsfs's makedirs would create a missing bucket, so `makedirs` does
nothing there). Create-if-absent on gs:// is one request conditioned on the object's
generation (google-cloud-storage, `if_generation_match=0`); on any other URL, or without that
client, it is a check then a write, which two writers at the same moment can both pass.

Orbax and tensorstore do their own I/O (etils epath, tensorstore's kvstores): they get the
path from `checkpoint/paths.as_path`, which asks `is_url` too. Imports nothing of easylemur but
`errors`, so every layer may use it; fsspec and google-cloud-storage are imported for a URL only.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional, Union

from easylemur.errors import InputError


def is_url(path: Any) -> bool:
    """Whether `path` (a str, pathlib or epath path) is a URL (gs://B/P, any fsspec URL) rather than a local path."""
    return "://" in str(path)


def join(root: str, *parts: str) -> str:
    """`parts` under `root`: joined with "/" for a URL, os.path.join for a local path."""
    return "/".join([root.rstrip("/"), *parts]) if is_url(root) else os.path.join(root, *parts)


class Unreachable(InputError):
    """A URL that no installed fsspec backend opens (an unknown scheme; gs:// without gcsfs)."""


class NoBucket(InputError):
    """A gs:// write found no bucket (it does not exist, or these credentials cannot see it)."""

    def __init__(self, bucket: str):
        self.bucket = bucket
        super().__init__(f"bucket gs://{bucket} does not exist (or these credentials cannot see it)")


def url_fs(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path on it) of a URL; one that cannot be opened is `Unreachable`, one line."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except Exception as e:  # noqa: BLE001 - ImportError (no gcsfs), ValueError (unknown scheme), a backend's own
        raise Unreachable(f"{url}: cannot open this URL ({_one_line(e)}); for gs:// install gcsfs "
                          "(pip install 'easylemur[gcs]')") from None


# ---------------------------------------------------------------- the two backends


class Local:
    """Local (or NFS-like) disk: os calls. Every method takes a full path."""

    remote = False

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) (fewer where the file ends before `end`)."""
        if end <= start:
            return b""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            return os.pread(fd, end - start, start)
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes) -> None:
        """Replaces `path` atomically (a private file beside it, fsynced, renamed over it); makes
        its directory when missing."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            _unlink_quietly(tmp)

    def create(self, path: str, data: bytes) -> bool:
        """Writes `path` only if nothing is there (O_EXCL); False when something is."""
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    def put_file(self, local: str, path: str) -> None:
        """Moves a finished local file to `path` (a rename: keep `local` on the same file system,
        `staging_dir`)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        os.replace(local, path)

    def staging_dir(self, path: str) -> Optional[str]:
        """Where a file bound for `path` is written first: beside it (made if missing), so that
        `put_file` is a rename within one file system."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return os.path.dirname(path)

    def listdir(self, path: str) -> list[str]:
        """The names directly in directory `path`, sorted."""
        return sorted(os.listdir(path))

    def remove(self, path: str) -> None:
        os.unlink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)


class Remote:
    """Objects behind a URL, through fsspec (gcsfs for gs://); `fs` is the filesystem, for what
    fsspec offers beyond these (glob, find, info, pyarrow's filesystem). Every method takes the
    full URL."""

    remote = True

    def __init__(self, url: str):
        self.fs, _ = url_fs(url)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def isdir(self, path: str) -> bool:
        return self.fs.isdir(path)

    def size(self, path: str) -> int:
        return int(self.fs.size(path))

    def read(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end): one ranged GET."""
        return self.fs.cat_file(path, start=start, end=end) if end > start else b""

    def write(self, path: str, data: bytes) -> None:
        """One upload: the object appears whole or not at all."""
        self.fs.pipe_file(path, data)

    def create(self, path: str, data: bytes) -> bool:
        """Writes `path` only if no object is there; False when one is. On gs:// with
        google-cloud-storage one conditional request (`NoBucket` where the bucket is missing);
        otherwise a check then a write, which two writers at once can both pass."""
        if path.startswith("gs://") and (gcs := _gcs(path)) is not None:
            blob, errors = gcs
            try:
                blob.upload_from_string(data, if_generation_match=0)
            except errors.PreconditionFailed:
                return False
            except errors.NotFound:  # an object write finds no bucket: the only 404 an upload has
                raise NoBucket(blob.bucket.name) from None
            self.fs.invalidate_cache(path)  # written beside fsspec: its listings of the prefix are stale
            return True
        if self.fs.exists(path):
            return False
        self.fs.pipe_file(path, data)
        return True

    def put_file(self, local: str, path: str) -> None:
        """Uploads a finished local file to `path` and removes the local one."""
        self.fs.put_file(local, path)
        os.unlink(local)

    def staging_dir(self, path: str) -> Optional[str]:
        """None: a file bound for a bucket is written in the system's temp dir, then uploaded."""
        return None

    def listdir(self, path: str) -> list[str]:
        """The names directly under prefix `path` (objects and sub-prefixes), sorted."""
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))

    def remove(self, path: str) -> None:
        self.fs.rm_file(path)

    def makedirs(self, path: str) -> None:
        """Nothing: a bucket has no directories (and gcsfs's makedirs would create a missing
        bucket, in the default project and location; a write says the bucket is missing instead)."""


LOCAL = Local()
Backend = Union[Local, Remote]


def at(path: Any) -> Backend:
    """The backend `path` is on: `Remote` for a URL (an unknown scheme is `Unreachable`), else `Local`."""
    return Remote(str(path)) if is_url(path) else LOCAL


# one-call forms of the backends' operations, for a path of any kind
def exists(path: Any) -> bool:
    return at(path).exists(str(path))


def isdir(path: Any) -> bool:
    return at(path).isdir(str(path))


def size(path: Any) -> int:
    return at(path).size(str(path))


def read(path: Any) -> bytes:
    """The whole file; FileNotFoundError where there is none."""
    return at(path).read(str(path))


def read_range(path: Any, start: int, end: int) -> bytes:
    return at(path).read_range(str(path), start, end)


def write(path: Any, data: bytes) -> None:
    """Replaces `path` whole, atomically: a reader sees the old content or the new."""
    at(path).write(str(path), data)


def create(path: Any, data: bytes) -> bool:
    """Writes `path` only if nothing is there; False when something is (`Local.create`, `Remote.create`)."""
    return at(path).create(str(path), data)


def put_file(local: str, path: Any) -> None:
    at(path).put_file(local, str(path))


def listdir(path: Any) -> list[str]:
    return at(path).listdir(str(path))


def remove(path: Any) -> None:
    at(path).remove(str(path))


def makedirs(path: Any) -> None:
    """A local directory and its parents (there already: fine); nothing on a bucket."""
    at(path).makedirs(str(path))


# ---------------------------------------------------------------- readers and writers over the backends


class Ranged:
    """Ranged reads of the files under `root`, safe from several threads: a local file is opened
    once and read with pread; a bucket object takes one ranged GET per read. A copy sent to
    another process (pickled) opens its files again."""

    def __init__(self, root: Any):
        self.root = str(root)
        self.io = at(self.root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def read(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of `path` (fewer where it ends first); OSError where it cannot be read."""
        if end <= start:
            return b""
        if self.io.remote:
            return self.io.read_range(path, start, end)
        fd = self._fds.get(path)
        if fd is None:
            with self._lock:
                fd = self._fds.get(path)
                if fd is None:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return os.pread(fd, end - start, start)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"])


class LineFile:
    """A text file written a line at a time (metrics.jsonl, events.jsonl). On local disk each
    line is appended, and a half line that a killed writer left at the end is ended first, so the
    next line starts on its own. An object in a bucket cannot be appended to: it is rewritten
    whole from the lines held in memory, which start as `lines()` (the caller's reading of what
    the file holds now; asked for a bucket only)."""

    def __init__(self, path: Any, lines: Callable[[], list[str]]):
        self.path = str(path)
        self.io = at(self.path)
        self.lines: list[str] = lines() if self.io.remote else []
        if not self.io.remote and os.path.exists(self.path):
            with open(self.path, "rb+") as f:
                f.seek(0, os.SEEK_END)
                if f.tell():
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        f.write(b"\n")

    def append(self, line: str) -> None:
        if self.io.remote:
            self.lines.append(line)
            self.io.write(self.path, "".join(l + "\n" for l in self.lines).encode())
        else:
            with open(self.path, "a") as f:
                f.write(line + "\n")


# ---------------------------------------------------------------- a file one writer owns (the workdir lock)


class NotOurs(Exception):
    """An owned file now holds another owner's record (`seen`: its (bytes, version)), or is gone
    (`seen` None); the message says which, where `seen` cannot."""

    def __init__(self, seen: Optional[tuple[bytes, Any]], why: str = ""):
        super().__init__(why)
        self.seen = seen


def owned_file(path: Any, token: str, ours: Callable[[bytes, Any], bool]) -> Union[_LocalOwned, _GcsOwned, _ObjectOwned]:
    """The file at `path` (train/lock.py's run.lock) as one owner at a time holds it:
    `create(data)` if absent; `read()` -> (bytes, version) or None (the version: the file's mtime
    locally, the object's generation on gs://, None elsewhere); `refresh(data)`, replacing it
    whole while it is still `token`'s (`ours(bytes, version)`), else NotOurs; `take_over(seen)`,
    removing it if it is still what was read and judged, True for one taker only; `remove()` if
    still ours; `clean_leftovers()`. Local disk: O_EXCL, os.replace of a private file, a rename
    aside to take over. gs:// with google-cloud-storage: each of these is one request conditioned
    on the object's generation. Any other URL: check, then write (said once, as a warning)."""
    text = str(path)
    if not is_url(text):
        return _LocalOwned(text, token, ours)
    if text.startswith("gs://"):
        gcs = _gcs(text)
        if gcs is not None:
            return _GcsOwned(text, gcs)
    return _ObjectOwned(text, token, ours)


class _LocalOwned:
    """On a local (or NFS-like) disk: O_EXCL create, os.replace refresh. Its private files sit
    beside it: NAME.beat-TOKEN (a refresh being written), NAME.stale-TOKEN (a take-over)."""

    def __init__(self, path: str, token: str, ours: Callable[[bytes, Any], bool]):
        self.path, self.token, self.ours = path, token, ours
        self.dir, self.name = os.path.split(path)
        self.beat_prefix = self.name + ".beat-"

    def create(self, data: bytes) -> bool:
        return LOCAL.create(self.path, data)

    def read(self) -> Optional[tuple[bytes, Any]]:
        """The file's bytes and mtime (what a half-written or damaged file is judged by)."""
        try:
            with open(self.path, "rb") as f:
                return f.read(), os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None

    def refresh(self, data: bytes) -> None:
        # a private name, written whole, then swapped in: a reader never sees half a record.
        # The check that the file is still ours comes last, right before the swap: an owner that
        # took it over in between would be overwritten (and then notice at its own next refresh:
        # of the two, one goes on); POSIX has no compare-and-swap for files.
        tmp = os.path.join(self.dir, self.beat_prefix + self.token)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            seen = self.read()
            if seen is None or not self.ours(*seen):
                raise NotOurs(seen, "now removed")
            os.replace(tmp, self.path)
        finally:
            _unlink_quietly(tmp)

    def take_over(self, seen: tuple[bytes, Any]) -> bool:
        """Moves the judged file to a private name first: of two takers that both judged it,
        only one rename succeeds. If what was moved is not what was judged (a third one took it
        over meanwhile), it is put back."""
        aside = os.path.join(self.dir, f"{self.name}.stale-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # someone else took it over first
        try:
            try:
                with open(aside, "rb") as f:
                    moved = f.read()
            except FileNotFoundError:
                return False  # cleaned away by an owner that took it meanwhile
            if moved != seen[0]:
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
                return False
            return True
        finally:
            _unlink_quietly(aside)

    def remove(self) -> None:
        seen = self.read()
        if seen is not None and self.ours(*seen):
            os.unlink(self.path)

    def clean_leftovers(self) -> None:
        """Refresh files of owners killed mid-refresh: with the file ours, no one else may write it."""
        for name in LOCAL.listdir(self.dir):
            if name.startswith(self.beat_prefix) and not name.endswith(self.token):
                _unlink_quietly(os.path.join(self.dir, name))


class _GcsOwned:
    """gs:// with google-cloud-storage: every write is conditioned on the object's generation,
    so create-if-absent, refresh-if-still-ours and take-over-once are each one atomic request."""

    def __init__(self, path: str, gcs: tuple[Any, Any]):
        self.blob, self.errors = gcs
        self.bucket_obj = self.blob.bucket
        self.path, self.name = path, self.blob.name
        self.generation: Optional[int] = None  # of the object this owner last wrote

    def create(self, data: bytes) -> bool:
        try:
            self.blob.upload_from_string(data, if_generation_match=0)
        except self.errors.PreconditionFailed:
            return False
        except self.errors.NotFound:  # an object write finds no bucket: the only 404 an upload has
            raise NoBucket(self.bucket_obj.name) from None
        self.generation = self.blob.generation
        return True

    def read(self) -> Optional[tuple[bytes, Any]]:
        blob = self.bucket_obj.get_blob(self.name)
        if blob is None:
            return None
        try:
            return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
        except (self.errors.NotFound, self.errors.PreconditionFailed):
            return None  # replaced or removed just now: look again

    def refresh(self, data: bytes) -> None:
        try:
            self.blob.upload_from_string(data, if_generation_match=self.generation)
        except self.errors.PreconditionFailed:
            raise NotOurs(None, "it was replaced or removed") from None
        self.generation = self.blob.generation

    def take_over(self, seen: tuple[bytes, Any]) -> bool:
        try:
            self.bucket_obj.blob(self.name).delete(if_generation_match=seen[1])
        except (self.errors.NotFound, self.errors.PreconditionFailed):
            return False
        return True

    def remove(self) -> None:
        try:
            self.blob.delete(if_generation_match=self.generation)
        except (self.errors.NotFound, self.errors.PreconditionFailed):
            pass  # not ours any more

    def clean_leftovers(self) -> None:
        pass  # nothing is ever written beside it


class _ObjectOwned:
    """Any other URL (s3://, gs:// without google-cloud-storage), through fsspec: an object write
    replaces the object whole, so a refresh is one write; but create-if-absent and
    refresh-if-ours are check-then-write, which two owners at the same moment can both pass
    (said once, as a warning)."""

    def __init__(self, path: str, token: str, ours: Callable[[bytes, Any], bool]):
        self.path, self.token, self.ours = path, token, ours
        self.io = Remote(path)
        print(f"warning: {path}: no atomic create-if-absent for this storage here (install google-cloud-storage for "
              "gs://); two runs starting at the same moment could both take the lock", flush=True)

    def create(self, data: bytes) -> bool:
        if self.io.exists(self.path):
            return False
        self.io.write(self.path, data)
        return True

    def read(self) -> Optional[tuple[bytes, Any]]:
        try:
            return self.io.read(self.path), None
        except FileNotFoundError:
            return None

    def refresh(self, data: bytes) -> None:
        seen = self.read()
        if seen is None or not self.ours(*seen):
            raise NotOurs(seen, "now removed")
        self.io.write(self.path, data)

    def take_over(self, seen: tuple[bytes, Any]) -> bool:
        now = self.read()
        if now is None or now[0] != seen[0]:
            return False
        self.io.remove(self.path)
        return True

    def remove(self) -> None:
        seen = self.read()
        if seen is not None and self.ours(*seen):
            self.io.remove(self.path)

    def clean_leftovers(self) -> None:
        pass


# ---------------------------------------------------------------- helpers


def _gcs(url: str) -> Optional[tuple[Any, Any]]:
    """(google-cloud-storage blob of a gs:// URL, google.api_core.exceptions), or None where that
    client is not installed."""
    try:
        from google.api_core import exceptions
        from google.cloud import storage as gcs
    except ImportError:
        return None
    bucket, _, name = url[len("gs://"):].partition("/")
    return gcs.Client().bucket(bucket).blob(name), exceptions


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
