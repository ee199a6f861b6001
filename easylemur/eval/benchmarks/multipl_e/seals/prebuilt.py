"""Trusted support code compiled once per machine outside the sandbox and bound read-only into
it: the C++ seal's precompiled header (`cpp.py`), the Rust seal's rlib (`rs.py`). Built by this
process (the compiler and the source are trusted; no candidate code is near), in a folder named
for everything the build depends on, so a new compiler or source makes a new folder and a folder,
once there, never changes. Each compile in the sandbox then reads it instead of redoing it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from easylemur.eval.sandbox import SANDBOX_PATH

# The environment of every build and probe here: the sandbox's (no CPATH, CPLUS_INCLUDE_PATH or
# other variable of this process can make the support differ from what the sandbox would build).
BUILD_ENV = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}


def cache_root() -> Path | None:
    """`$EASYLEMUR_PREBUILT_CACHE`, else ~/.cache/easylemur/prebuilt, else
    /var/tmp/easylemur-prebuilt-<uid>: the first the sandbox can reach (as root each worker slot
    runs bwrap as its own uid, which cannot pass through a 0700 /root), made if missing. A folder
    must be this user's, and is made writable by no one else (another user's could hold code
    that is not ours). None when there is none."""
    env = os.environ.get("EASYLEMUR_PREBUILT_CACHE")
    tries = [Path(os.path.expanduser(env))] if env else [Path.home() / ".cache" / "easylemur" / "prebuilt"]
    tries.append(Path("/var/tmp") / f"easylemur-prebuilt-{os.geteuid()}")
    for root in tries:
        try:
            if not all(os.stat(p).st_mode & 0o001 for p in root.parents if p.exists()):
                continue  # others cannot pass through: not made at all
            root.mkdir(parents=True, exist_ok=True)
            if root.stat().st_uid == os.geteuid() and all(os.stat(p).st_mode & 0o001 for p in root.parents):
                os.chmod(root, 0o755)  # writable by this user alone
                return root
        except OSError:
            continue
    return None


def prebuilt(name: str, key: object, build: Callable[[Path], None]) -> str:
    """The folder `<cache_root()>/<name>-<hash of key>` holding what `build(folder)` wrote there:
    built once, under a lock, in a temporary folder renamed into place when complete (a reader
    never sees half of one), its files readable by all. "" when it cannot be made (no cache
    folder, a failed build): the caller then goes without."""
    root = cache_root()
    if root is None:
        return ""
    final = root / f"{name}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}"
    if final.is_dir():
        return str(final)
    try:
        with open(root / f".{name}.lock", "w") as lock, _locked(lock):
            if final.is_dir():
                return str(final)
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                build(tmp)
                for p in (tmp, *tmp.rglob("*")):
                    os.chmod(p, 0o755 if p.is_dir() else 0o644)
                os.rename(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return str(final)
    except (OSError, subprocess.SubprocessError):  # the seal works without it, slower
        return ""


@contextlib.contextmanager
def _locked(f) -> Iterator[None]:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
