"""MINT's files: a copy of its repository (github.com/xingyaoww/mint-bench) laid out as the
repository is, found under `--data-dir D` as `D/mint/`, given as `--data mint=DIR`, or fetched
file by file from the repository at the pinned commit into a cache directory.

Everything a MINT task tells the model is read from here: the problems
(`data/processed/<task>/test_prompts.json`), the instruction template
(`mint/prompt/templates/`), the in-context examples (`mint/tasks/in_context_examples/`), and
the texts MINT's environment, tools and agents write (read out of its Python files by
`source.py`, never run). The fetch goes to `$EASYLEMUR_MINT_URL` (default: GitHub's raw files)
and writes under `$EASYLEMUR_MINT_CACHE` (default `~/.cache/easylemur/mint/<commit>`), each file
written whole or not at all.
"""

from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from easylemur.eval.api.task import MissingData
from easylemur.eval.benchmarks.mint.source import MintFilesError

COMMIT = "3f7f12c10bf763be1e6dbdeb42feb57624121f61"  # MINT's repository as its published results were scored
REPOSITORY = "https://github.com/xingyaoww/mint-bench"
RAW_URL = "https://raw.githubusercontent.com/xingyaoww/mint-bench"
FETCH_TIMEOUT_S = 30.0


def cache_dir() -> Path:
    """Where fetched files go: $EASYLEMUR_MINT_CACHE, else ~/.cache/easylemur/mint/<commit>."""
    env = os.environ.get("EASYLEMUR_MINT_CACHE")
    return Path(os.path.expanduser(env)) if env else Path.home() / ".cache" / "easylemur" / "mint" / COMMIT


class MintFiles:
    """Read access to one copy of MINT's repository: a local directory, or the fetch cache
    (then a file not yet there is fetched from `url` at COMMIT)."""

    def __init__(self, root: Path, url: Optional[str] = None):
        self.root, self.url = Path(root), url

    @classmethod
    def locate(cls, data: Optional[str]) -> "MintFiles":
        """`data`: a directory laid out as MINT's repository; None: the fetch cache."""
        if data is not None:
            root = Path(os.path.expanduser(data))
            if not (root / "data" / "processed").is_dir() or not (root / "mint").is_dir():
                raise MissingData(f"{root}: not a copy of MINT's repository (expected data/processed/ and mint/ in it; "
                                  f"git clone {REPOSITORY} and check out {COMMIT[:12]})")
            return cls(root)
        return cls(cache_dir(), os.environ.get("EASYLEMUR_MINT_URL", RAW_URL).rstrip("/"))

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def text(self, rel: str) -> str:
        """The file `rel` of the repository, as text."""
        path = self.root / rel
        if not path.is_file():
            if self.url is None:
                raise MintFilesError(f"{path}: missing from this copy of MINT's repository ({REPOSITORY} at {COMMIT[:12]})")
            self._fetch(rel, path)
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise MintFilesError(f"{path}: unreadable ({type(e).__name__}: {e})") from None

    def _fetch(self, rel: str, path: Path) -> None:
        url = f"{self.url}/{COMMIT}/{rel}"
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as r:
                body = r.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise MissingData(f"MINT's {rel}: no local copy and fetching {url} failed "
                              f"({getattr(e, 'reason', e)}); pass --data-dir D with D/mint a clone of {REPOSITORY} "
                              f"at {COMMIT[:12]}, or --data mint=DIR") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, path)  # whole or not at all: a cut download never looks fetched
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
