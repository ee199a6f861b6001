"""Building a token store (docs/design.md, "Token store"): `tokenize` workers, then `finalize`.

The work is split into units, planned the same way by every worker from the config alone: one
unit per input file of a JSONL or Parquet source, one per block of ROWS_PER_UNIT rows of a
dataset, one for a hub stream. Worker I of N takes its share (longest-first onto the least
loaded worker, by input size), so the same command runs as N processes on one host, on every
host of a pod, or as a SLURM array, with no coordinator and no shared state but the store.

A unit's data files are written first and its commit marker (`<unit>.json`) last; locally each
file goes under a private name and is renamed, in a bucket each object appears only when its
upload completes. A unit is done when its marker is there and agrees with the inputs (path,
size and a stamp of the content's version: a local file's mtime, a bucket object's generation
or etag) and the build settings: rerunning a worker redoes exactly its missing or stale units,
and every byte written is a function of the inputs, so a store built with crashes and reruns
equals one built without.
`finalize` checks every planned unit and writes `manifest.json`, the store's only entry point.

Each record goes through the training pipeline's own stages: the readers (bad records counted
and named as in training) and `Tokenize`, so a document's ids are the on-the-fly path's ids.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import sys
import tempfile
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from easylemur.config import source_dict
from easylemur.data.files import JSONL_SUFFIXES, PARQUET_SUFFIXES, _remote, _url_fs, detect_kind, resolve_files
from easylemur.data.jsonl import iter_jsonl_records
from easylemur.data.readers import ParquetSource, open_source
from easylemur.chat.choice import template_sha256
from easylemur.data.decontam import document_text
from easylemur.data.records import SHOW_FIRST_BAD, BadRecord, DataError
from easylemur.data.store import (
    MASK_DTYPE,
    OFFSET_DTYPE,
    STORE_FORMAT,
    STORE_MANIFEST,
    STORE_VERSION,
    Storage,
    token_dtype,
)
from easylemur.data.tokenize import Tokenize
from easylemur.storage import is_url

if TYPE_CHECKING:
    from easylemur.tokenizer.spm import Tokenizer

ROWS_PER_UNIT = 1 << 20  # rows of a dataset (HF on disk, TFDS) per unit
WRITE_BUFFER = 1 << 22  # token bytes gathered before a write
PROGRESS_EVERY = 10.0  # seconds between two progress lines of a unit (none for a unit done sooner)
# the keys of an fsspec object's info that change whenever its content does, best first:
# GCS's generation, an etag (GCS, S3, HTTP), a content hash, else a modification time
OBJECT_STAMP_KEYS = ("generation", "etag", "ETag", "md5Hash", "crc32c", "mtime", "LastModified", "last_modified",
                     "updated", "created")


@dataclass(frozen=True)
class Unit:
    """One piece of work: `path` is the input file, or the dataset with `rows` [start, end)."""

    source: str
    index: int
    kind: str  # jsonl | parquet | rows | stream
    path: str
    size: int  # bytes of the file, rows of a block (what the longest-first assignment weighs)
    rows: tuple[int, int] | None = None
    # the input's version (input_stamps): a unit whose input has another one now is stale, even
    # at the same size; None where there is none to read (tfds, a hub stream)
    stamp: str | None = None

    @property
    def name(self) -> str:
        return f"{self.index:05d}"

    @property
    def label(self) -> str:
        return f"{self.source}/{self.name}"

    def input(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "size": self.size}
        if self.rows is not None:
            out["rows"] = list(self.rows)
        return out


TPU_METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"


def auto_shard(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(worker, workers) where the platform says: a SLURM job array's task, else a TPU VM
    worker (its number and the pod's worker count, from the VM's metadata server)."""
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        first = int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        return int(environ["SLURM_ARRAY_TASK_ID"]) - first, int(environ["SLURM_ARRAY_TASK_COUNT"])
    import urllib.request

    def meta(key: str) -> str:
        req = urllib.request.Request(TPU_METADATA + key, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read().decode()

    try:
        worker = int(environ.get("TPU_WORKER_ID") or meta("agent-worker-number"))
        workers = len(meta("worker-network-endpoints").split(","))
    except (OSError, ValueError) as e:
        raise DataError(f"--shard auto: not a SLURM array task (no SLURM_ARRAY_TASK_ID/COUNT) and no TPU VM "
                        f"metadata ({type(e).__name__}: {e}); give --shard I/N") from None
    return worker, workers


def _object_stamp(info: Mapping[str, Any]) -> str | None:
    for key in OBJECT_STAMP_KEYS:
        if info.get(key) not in (None, ""):
            return f"{key} {info[key]}"
    return None


def input_stamps(files: list[str]) -> list[tuple[int, str | None]]:
    """(size, stamp) of each file or URL. The stamp changes when the content does, at the same
    size too, and costs no read of the data: a local file's mtime (nanoseconds), a bucket
    object's generation (GCS) or etag, from its metadata (asked concurrently)."""
    out: dict[str, tuple[int, str | None]] = {}
    remote: dict[int, tuple[Any, list[tuple[str, str]]]] = {}
    for f in files:
        if is_url(f):
            fs, p = _url_fs(f)
            remote.setdefault(id(fs), (fs, []))[1].append((f, p))
            continue
        try:
            st = os.stat(f)
        except OSError as e:
            raise DataError(f"{f}: cannot read: {e.strerror or e}") from None
        out[f] = (st.st_size, f"mtime_ns {st.st_mtime_ns}")
    for fs, items in remote.values():
        with ThreadPoolExecutor(min(32, len(items))) as pool:
            infos = list(pool.map(lambda fp, fs=fs: _remote(fp[0], lambda: fs.info(fp[1])), items))
        out.update((f, (int(info["size"]), _object_stamp(info))) for (f, _), info in zip(items, infos))
    return [out[f] for f in files]


def _dataset_stamp(path: str) -> str | None:
    """A dataset directory's version: a digest of its files' names, sizes and mtimes."""
    if is_url(path) or not os.path.isdir(path):
        return None
    d = hashlib.sha256()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for n in sorted(names):
            st = os.stat(os.path.join(root, n))
            d.update(f"{os.path.relpath(os.path.join(root, n), path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return f"files sha256 {d.hexdigest()[:32]}"


def plan_units(sources: Mapping[str, Any]) -> list[Unit]:
    """Every unit of `sources` (name -> source config), in a fixed order. A file source's
    files may be local or URLs (a bucket's objects, `files.resolve_files`): a unit's input is
    the file's URL or absolute path (a relative path in the config names the same files from
    anywhere), its size and its stamp (`input_stamps`)."""
    units: list[Unit] = []
    for name, scfg in sources.items():
        scfg = source_dict(scfg)
        kind = scfg["kind"] if scfg["kind"] != "auto" else detect_kind(scfg["path"])
        if kind == "tokens":
            raise DataError(f"source '{name}': {scfg['path']} is a token store already; tokenize the raw data")
        if kind in ("jsonl", "parquet"):
            files = resolve_files(scfg["path"], JSONL_SUFFIXES if kind == "jsonl" else PARQUET_SUFFIXES)
            if not files:
                open_source({**scfg, "kind": kind})  # the pipeline's own message for this path
            files = [f if is_url(f) else os.path.abspath(f) for f in files]
            units += [Unit(name, i, kind, f, n, stamp=st) for i, (f, (n, st)) in enumerate(zip(files, input_stamps(files)))]
            continue
        try:
            reader = open_source({**scfg, "kind": kind})
        except DataError as e:
            raise DataError(f"source '{name}': {e}") from None
        if not hasattr(reader, "__len__"):  # a hub stream: read in order by one worker
            units.append(Unit(name, 0, "stream", scfg["path"], 1))
            continue
        n = len(reader)
        stamp = _dataset_stamp(scfg["path"])
        for i, a in enumerate(range(0, n, ROWS_PER_UNIT)):
            b = min(n, a + ROWS_PER_UNIT)
            units.append(Unit(name, i, "rows", scfg["path"], b - a, (a, b), stamp))
    return units


def assign(units: Sequence[Unit], worker: int, workers: int) -> list[Unit]:
    """Worker `worker` of `workers`'s units: largest first, each onto the least loaded worker
    (ties to the lowest number), so that every worker computes the same split."""
    heap = [(0, k) for k in range(workers)]  # (load, worker): a heap, so 100K files x 10K workers stay quick
    mine = []
    for u in sorted(units, key=lambda u: (-u.size, u.source, u.index)):
        load, w = heapq.heappop(heap)
        heapq.heappush(heap, (load + max(1, u.size), w))
        if w == worker:
            mine.append(u)
    return sorted(mine, key=lambda u: (u.source, u.index))


def _records(unit: Unit, scfg: Mapping[str, Any], progress: Callable[[int], None]) -> Iterator[tuple[str, Any]]:
    """The unit's records in order, as the training readers give them; `progress` is told how
    much of `unit.size` is read (bytes of a file, compressed ones for .gz/.zst; rows of a block)."""
    if unit.kind == "jsonl":
        yield from iter_jsonl_records(unit.path, progress=progress)
    elif unit.kind == "parquet":
        cols = [scfg["field"] or "text"] if scfg["format"] == "text" or scfg["field"] else None
        reader = ParquetSource([unit.path], cols)
        n = len(reader)
        for i in range(n):
            if i % 1024 == 0:
                progress(unit.size * i // n)
            yield reader[i]
    elif unit.kind == "rows":
        reader = open_source(scfg)
        a, b = unit.rows
        for i in range(a, b):
            if (i - a) % 1024 == 0:
                progress(i - a)
            yield reader[i]
    else:
        spec = open_source(scfg)
        for i, rec in enumerate(spec.open(0, 1, None)):
            yield f"{spec.name}:record {i}", rec


class _Progress:
    """A unit's progress lines: every PROGRESS_EVERY seconds, the share of its input read, the
    rate and the time left (nothing for a unit done sooner, so small units stay quiet)."""

    def __init__(self, label: str, unit: Unit, log: Callable[[str], None]):
        self.label, self.total, self.log = label, unit.size, log
        self.what = "rows" if unit.kind == "rows" else "MB"
        self.scale = 1 if unit.kind == "rows" else 1e6
        self.start = self.last = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY or self.total <= 0:
            return
        self.last = now
        done = min(done, self.total)
        rate = done / max(now - self.start, 1e-9)
        left = f", about {(self.total - done) / rate:.0f} s left" if rate > 0 else ""
        num = (lambda x: f"{x / self.scale:.1f}") if self.what == "MB" else (lambda x: str(x))
        self.log(f"{self.label}: {done / self.total:.0%} ({num(done)} of {num(self.total)} {self.what} read, "
                 f"{num(rate)} {self.what}/s{left})")


class _Out:
    """One of a unit's data files: written under a private name, hashed as it goes."""

    def __init__(self, storage: Storage, path: str):
        self.storage, self.path = storage, path
        where = storage.local_tmp_dir(path)
        if where is None:  # bound for a bucket: a private temporary file (mkstemp: 0600) until uploaded
            fd, self.tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-")
        else:
            # beside the final file, made as open() makes a file (0666 less the umask), so that the
            # renamed file is as readable as the markers and the manifest (a store shared by a group)
            self.tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(6).hex()}"
            fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        self.f = os.fdopen(fd, "wb")
        self.sha = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.bytes += len(data)

    def commit(self) -> dict[str, Any]:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        self.storage.put_file(self.tmp, self.path)
        return {"bytes": self.bytes, "sha256": self.sha.hexdigest()}

    def discard(self) -> None:
        if not self.f.closed:
            self.f.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


def build_settings(scfg: Mapping[str, Any], tokenizer: Tokenizer, seq_len: int, against: Any) -> dict[str, Any]:
    """What a unit's contents depend on besides its input: a marker that differs is stale."""
    out = {"format": scfg["format"], "field": scfg["field"], "tokenizer_sha256": tokenizer.sha256,
           "dtype": token_dtype(tokenizer.vocab_size).str,
           "decontaminated": None if against is None else against.fingerprint}
    if scfg["format"] == "chat":
        out["seq_len"] = seq_len
        # a conversation's ids and mask depend on how it was rendered: ChatML, or the tokenizer's
        # own template (whose text tokenizer_sha256, of tokenizer.json, does not cover)
        out["chat_format"] = scfg["chat_format"]
        if scfg["chat_format"] == "model":
            out["chat_template_sha256"] = template_sha256(tokenizer)
    return out


def _settings_of(marker: Mapping[str, Any]) -> dict[str, Any]:
    """A marker's settings; one written before chat_format existed rendered ChatML."""
    settings = dict(marker.get("settings") or {})
    if settings.get("format") == "chat":
        settings.setdefault("chat_format", "chatml")
    return settings


def tokenize_unit(unit: Unit, scfg: Mapping[str, Any], tokenizer: Tokenizer, seq_len: int, strict: bool,
                  storage: Storage, against: Any = None, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Tokenizes one unit into the store and returns its commit marker (also written);
    `progress` (optional) is told how much of `unit.size` has been read, as it goes."""
    tokenize = Tokenize(scfg["format"], scfg["field"], tokenizer, seq_len, strict, unit.source,
                        scfg["chat_format"])
    dtype = token_dtype(tokenizer.vocab_size)
    chat = scfg["format"] == "chat"
    outs = {"ids": _Out(storage, storage.path(unit.source, f"{unit.name}.ids"))}
    if chat:
        outs["mask"] = _Out(storage, storage.path(unit.source, f"{unit.name}.mask"))
    offsets = array("q", [0])
    bad: dict[str, int] = {}
    bad_first: list[str] = []
    dropped: list[dict[str, Any]] = []
    ids_buf: list[np.ndarray] = []
    mask_buf: list[np.ndarray] = []
    buffered = blank = trained = chat_rows = fill = 0

    def flush() -> None:
        nonlocal buffered
        if ids_buf:
            outs["ids"].write(np.concatenate(ids_buf).astype(dtype).tobytes())
            if chat:
                outs["mask"].write(np.concatenate(mask_buf).astype(MASK_DTYPE).tobytes())
        ids_buf.clear(), mask_buf.clear()
        buffered = 0

    try:
        for where, rec in _records(unit, scfg, progress or (lambda done: None)):
            if against is not None and (text := document_text(rec, scfg)) is not None:
                hits = against.matches(text)
                if hits:
                    dropped.append({"where": where, "matches": hits})
                    continue
            out = tokenize.map((where, rec))
            if out is None:
                blank += 1
                continue
            if isinstance(out, BadRecord):
                bad[out.kind] = bad.get(out.kind, 0) + 1
                if len(bad_first) < SHOW_FIRST_BAD:
                    bad_first.append(out.describe())
                    print(f"easylemur.data: skipped bad record of source '{unit.source}' at {out.describe()}",
                          file=sys.stderr)
                continue
            ids = out["ids"]
            n = len(ids)
            offsets.append(offsets[-1] + n)
            ids_buf.append(ids)
            trained += int(out["mask"].sum())
            if chat:
                mask_buf.append(out["mask"])
                if fill + n > seq_len or fill == 0:  # data stats' rule: a conversation never splits
                    chat_rows += 1
                    fill = 0
                fill += n
            buffered += n * dtype.itemsize
            if buffered >= WRITE_BUFFER:
                flush()
        flush()
        docs = _Out(storage, storage.path(unit.source, f"{unit.name}.docs"))
        outs["docs"] = docs
        docs.write(np.frombuffer(offsets, np.int64).astype(OFFSET_DTYPE).tobytes())
        files = {k: o.commit() for k, o in outs.items()}
    except BaseException:
        for o in outs.values():
            o.discard()
        raise
    marker = {"source": unit.source, "unit": unit.name, "input": unit.input(), "stamp": unit.stamp,
              "settings": build_settings(scfg, tokenizer, seq_len, against),
              "documents": len(offsets) - 1, "tokens": int(offsets[-1]), "trained_tokens": trained,
              "chat_rows": chat_rows, "blank": blank, "bad": dict(sorted(bad.items())), "bad_first": bad_first,
              "dropped": dropped, "files": files}
    storage.write_bytes(storage.path(unit.source, f"{unit.name}.json"), _dumps(marker))
    return marker


def _dumps(obj: Any) -> bytes:
    import json

    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def _same_file(recorded: Any, path: str) -> bool:
    """Whether a marker's input path names the file `path` does: equal, or both local and the
    same file resolved (a marker of an older easylemur may hold the relative path a config gave)."""
    if recorded == path:
        return True
    if not isinstance(recorded, str) or is_url(recorded) or is_url(path):
        return False
    return os.path.realpath(recorded) == os.path.realpath(path)


def _marker_problem(storage: Storage, unit: Unit, settings: dict[str, Any],
                    keep_decontamination: bool = False) -> tuple[dict | None, str | None]:
    """(marker, None) for a unit that is done and agrees with its input and the settings;
    (None, why) otherwise ("missing" when it was never committed). `keep_decontamination`
    (no --drop-contaminated given): the unit's own decontamination setting is taken as current,
    so that a command without the flag neither undoes nor refuses a decontaminated store."""
    path = storage.path(unit.source, f"{unit.name}.json")
    if not storage.exists(path):
        return None, "missing"
    marker = storage.read_json(path)
    recorded = marker.get("input", {}).get("path")
    if not _same_file(recorded, unit.path):
        # another corpus under the same source name: redoing the unit would destroy it
        raise DataError(f"{path}: unit {unit.label} of this store was made from {recorded}, "
                        f"not {unit.path}; tokenize this corpus into another --out (or another source name)")
    if {**marker.get("input", {}), "path": unit.path} != unit.input():
        return None, f"made from {marker.get('input')}, the input now is {unit.input()}"
    if marker.get("stamp") != unit.stamp:
        if "stamp" not in marker:
            return None, "made by an older easylemur, which did not record the input's version (its mtime or generation)"
        return None, f"{unit.path} changed since the unit was made (its {marker['stamp']} then, {unit.stamp} now)"
    if keep_decontamination:
        settings = {**settings, "decontaminated": _settings_of(marker).get("decontaminated")}
    if _settings_of(marker) != settings:
        diff = sorted(k for k in settings if _settings_of(marker).get(k) != settings[k])
        return None, f"built with other settings ({', '.join(diff)})"
    for key, meta in marker["files"].items():
        f = storage.path(unit.source, f"{unit.name}.{key}")
        if not storage.exists(f):
            return None, f"{unit.name}.{key} is missing"
        if storage.size(f) != meta["bytes"]:
            return None, f"{unit.name}.{key} has {storage.size(f)} bytes, the marker says {meta['bytes']}"
    return marker, None


def tokenize(sources: Mapping[str, Any], tokenizer: Tokenizer, out: str, *, seq_len: int, strict: bool,
             worker: int = 0, workers: int = 1, against: Any = None, log=None) -> dict[str, int]:
    """Worker `worker` of `workers`: tokenizes its units of `sources` that are not done yet.
    Returns counts {"units", "done_before", "tokenized", "documents", "tokens"}."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    storage = Storage(out)
    storage.make_root()
    units = plan_units(sources)
    mine = assign(units, worker, workers)
    counts = {"units": len(mine), "done_before": 0, "tokenized": 0, "documents": 0, "tokens": 0}
    for k, unit in enumerate(mine):
        scfg = source_dict(sources[unit.source])
        head = f"easylemur.data tokenize [{worker}/{workers}] {k + 1}/{len(mine)} {unit.label}"
        marker, _ = _marker_problem(storage, unit, build_settings(scfg, tokenizer, seq_len, against),
                                    keep_decontamination=against is None)
        if marker is None:
            storage.remove_partial(storage.path(unit.source), unit.name)  # of a worker killed mid-unit
            marker = tokenize_unit(unit, scfg, tokenizer, seq_len, strict, storage, against,
                                   progress=_Progress(head, unit, log))
            counts["tokenized"] += 1
            state = "tokenized"
        else:
            counts["done_before"] += 1
            state = "already done"
        counts["documents"] += marker["documents"]
        counts["tokens"] += marker["tokens"]
        extra = f", {len(marker['dropped'])} dropped" if marker["dropped"] else ""
        log(f"{head} ({unit.path}): {state}, "
            f"{marker['documents']} documents, {marker['tokens']} tokens, {sum(marker['bad'].values())} bad{extra}")
    return counts


def finalize(sources: Mapping[str, Any], tokenizer: Tokenizer, out: str, *, seq_len: int,
             against: Any = None) -> dict[str, Any]:
    """Checks that every planned unit of `sources` is done and agrees with the inputs, then
    writes the manifest (merged with the sources an earlier finalize recorded) and returns it.
    A missing or stale unit is a DataError naming every one. Without `against`, each source
    keeps the decontamination its units were made with (they must agree)."""
    storage = Storage(out)
    storage.check_root()
    units = plan_units(sources)
    problems: list[str] = []
    entries: dict[str, dict[str, Any]] = {}
    decontaminated: dict[str, dict[Any, int]] = {}  # source -> {fingerprint or None: units}
    for unit in units:
        scfg = source_dict(sources[unit.source])
        settings = build_settings(scfg, tokenizer, seq_len, against)
        marker, why = _marker_problem(storage, unit, settings, keep_decontamination=against is None)
        if marker is None:
            problems.append(f"{unit.label} ({unit.path}): {why}")
            continue
        settings["decontaminated"] = _settings_of(marker).get("decontaminated")
        seen = decontaminated.setdefault(unit.source, {})
        seen[settings["decontaminated"]] = seen.get(settings["decontaminated"], 0) + 1
        e = entries.setdefault(unit.source, {
            **{k: v for k, v in settings.items() if k not in ("tokenizer_sha256", "dtype")},
            "path": scfg["path"], "units": [], "documents": 0, "tokens": 0, "trained_tokens": 0,
            "chat_rows": 0, "blank": 0, "bad": {}, "bad_first": [], "dropped": []})
        e["units"].append({"name": unit.name, "input": unit.input(), "documents": marker["documents"],
                           "tokens": marker["tokens"], "files": marker["files"]})
        for k in ("documents", "tokens", "trained_tokens", "chat_rows", "blank"):
            e[k] += marker[k]
        for kind, n in marker["bad"].items():
            e["bad"][kind] = e["bad"].get(kind, 0) + n
        e["bad_first"] = (e["bad_first"] + marker["bad_first"])[:SHOW_FIRST_BAD]
        e["dropped"] += marker["dropped"]
    for name, seen in decontaminated.items():
        if len(seen) > 1:  # some units made with --drop-contaminated, some without (or against others)
            kinds = ", ".join(f"{n} {'not decontaminated' if fp is None else f'against {fp[:16]}...'}"
                              for fp, n in sorted(seen.items(), key=lambda x: (x[0] is not None, str(x[0]))))
            problems.append(f"source '{name}': its units disagree on decontamination ({kinds}); run tokenize "
                            "with the same --drop-contaminated for all of them")
    if problems:
        raise DataError(f"token store {out}: {len(problems)} of {len(units)} units not done or stale: "
                        + "; ".join(problems[:20]) + (" ..." if len(problems) > 20 else "")
                        + "; run tokenize again (it redoes only those)")
    manifest_path = storage.path(STORE_MANIFEST)
    man: dict[str, Any] = {"format": STORE_FORMAT, "version": STORE_VERSION,
                           "tokenizer": {"sha256": tokenizer.sha256, "vocab_size": tokenizer.vocab_size,
                                         "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id},
                           "dtype": token_dtype(tokenizer.vocab_size).str, "sources": {}}
    if storage.exists(manifest_path):
        old = storage.read_json(manifest_path)
        if old.get("tokenizer", {}).get("sha256") != tokenizer.sha256:
            raise DataError(f"{manifest_path}: finalized with tokenizer sha256 {old['tokenizer']['sha256'][:16]}..., "
                            f"this one is {tokenizer.sha256[:16]}...; one store holds one tokenizer's ids")
        man["sources"].update({k: v for k, v in old.get("sources", {}).items() if k not in entries})
    for name in sources:
        if name not in entries:
            raise DataError(f"token store {out}: source '{name}' has no units (no input)")
    man["sources"].update(entries)
    man["sources"] = dict(sorted(man["sources"].items()))
    storage.write_bytes(manifest_path, _dumps(man))
    return man


def load_job(config: str, overrides: list[str], names: list[str], eval_sources: bool, against: str,
             tokenizer: str | None):
    """(config, tokenizer, the sources to store, the benchmarks to drop or None) of a
    `tokenize` or `finalize` command line; `tokenizer` is the path the command resolved from the
    run's config (convert.source.tokenizer_path: the run's own, strictly, since a store of the
    wrong ids is worse than no store), None for the shipped one."""
    from easylemur.config import load_config
    from easylemur.tokenizer import load_tokenizer

    cfg = load_config(config, overrides)
    section = cfg.data.eval_sources if eval_sources else cfg.data.sources
    key = "data.eval_sources" if eval_sources else "data.sources"
    for n in names:
        if n not in section:
            raise DataError(f"--source {n}: {key} has no source {n!r} (has {', '.join(section.keys()) or 'none'})")
    sources = {n: section[n] for n in (names or list(section.keys()))}
    if not sources:
        raise DataError(f"{key} is empty: nothing to tokenize")
    bench = None
    if against:
        from easylemur.data.decontam import Benchmarks

        bench = Benchmarks.load(against)
    return cfg, load_tokenizer(tokenizer), sources, bench


def run_worker(job: tuple) -> dict:
    """One worker of `tokenize` (a function of a module, not of __main__: spawn pickles it by name)."""
    config, overrides, names, eval_sources, against, tokenizer, out, worker, workers = job
    cfg, tok, sources, bench = load_job(config, overrides, names, eval_sources, against, tokenizer)
    return tokenize(sources, tok, out, seq_len=int(cfg.data.seq_len), strict=bool(cfg.data.strict),
                    worker=worker, workers=workers, against=bench)
