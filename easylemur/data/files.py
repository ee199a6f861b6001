"""What a source's `path` names (docs/design.md, "Sources"), without reading a record: its kind
(`detect_kind`: a token store, a `datasets.save_to_disk` directory, a file, glob or directory of
JSONL or Parquet files, a hub name, `tfds:NAME`), the files it resolves to (`resolve_files`) and
their sizes (`file_sizes`).

A URL (easylemur/storage.py's `is_url`) is listed through fsspec (gcsfs for gs://): a glob, a
prefix listed recursively, or one object, each named by its URL; a backend's error is a
`DataError` naming the URL (`_remote`). Local paths never import fsspec.

Separate from the readers (data/readers.py, data/jsonl.py): the token-store builder, the
pre-flight scan and the store's layout ask these questions of a path too, and open nothing.
"""

from __future__ import annotations

import glob as globlib
import os
from pathlib import Path
from typing import Any

from easylemur.data.records import DataError
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
    if looks_like_hub_name(path):
        return "hf_hub"
    raise DataError(f"{path}: no such file or directory (and not a hub dataset name like 'org/name')")


def check_sources(**groups: Any) -> None:
    """Each source of `groups` (key prefix -> sources: `data.sources=...`) found before a run
    takes its workdir, restores or compiles anything: a path on this machine or that looks local
    exists, and a Hub dataset answers (`hub.check_reachable`); else a DataError naming the key.
    URLs and TFDS are opened later."""
    for prefix, sources in groups.items():
        for name, scfg in (sources or {}).items():
            path, kind, key = scfg["path"], scfg.get("kind", "auto"), f"{prefix}.{name}.path"
            if is_url(path) or path.startswith("tfds:") or kind not in ("auto", "hf_hub"):
                continue
            try:
                kind = detect_kind(path) if kind == "auto" else kind
            except DataError as e:
                raise DataError(f"{key}: {e}") from None
            if kind == "hf_hub":
                from easylemur.data.hub import check_reachable  # imports grain: only for hub sources

                check_reachable(path, key)


LOCAL_LOOKING_SUFFIXES = (*JSONL_SUFFIXES, *PARQUET_SUFFIXES, ".gz", ".zst", ".txt", ".csv", ".arrow", ".tar")


def looks_like_hub_name(path: str) -> bool:
    """Whether a path that is not on this machine is to be read as a Hub dataset `org/name`. A
    name that looks local is not: it starts with `.`, `/` or `~`, has a data file's extension,
    or its first part is a directory here (`data/nope` beside `data/`); a typo there is one
    line, not a minute of Hub retries."""
    if path.count("/") != 1 or path.startswith((".", "/", "~")):
        return False
    org = path.split("/")[0]
    return not (_has_suffix(path.lower(), LOCAL_LOOKING_SUFFIXES) or Path(org).is_dir())


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
