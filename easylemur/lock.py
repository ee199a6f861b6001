"""One run per workdir (docs/design.md, "Run safety").

Two trainers on one workdir (a relaunch while the old job still runs, common on pods) would
interleave metrics, overwrite each other's checkpoints and delete the step the other restores.
So a run takes `workdir/run.lock` before it touches anything else: a JSON file created only if
absent (O_EXCL on a local disk; on a bucket a create-if-absent write where the storage client
offers one), naming host, pid and start time, its `heartbeat` refreshed every HEARTBEAT_SECONDS
by a daemon thread. Only process 0 of a multi-host run takes it.

A lock whose holder is gone is taken over, with a message: its pid is dead on this same host,
or its heartbeat is older than STALE_SECONDS (a holder on another host, or a reused pid, can
only be judged by its heartbeat). Taking over renames the stale file to a private name first:
of two runs that both saw it stale, only one rename succeeds, and the other then finds the
winner's fresh lock.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Optional

from easylemur.errors import InputError

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 300.0  # ten missed heartbeats


class WorkdirLocked(InputError):
    """Another live run holds the workdir."""


class WorkdirLock:
    """`with WorkdirLock(workdir): ...` holds the workdir for the run; `log` gets the take-over
    message. The lock is removed on exit only if it is still this run's."""

    def __init__(self, workdir: Any, log: Callable[[str], None] = print, stale_seconds: float = STALE_SECONDS,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS):
        from easylemur.checkpoint import as_path

        self.path = as_path(workdir) / "run.lock"
        self.remote = "://" in str(self.path)
        self.log, self.stale_seconds, self.heartbeat_seconds = log, stale_seconds, heartbeat_seconds
        self.token = uuid.uuid4().hex
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
                       "heartbeat": time.time(), "token": self.token}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---------------------------------------------------------------- taking and releasing

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self._create():
                self._thread = threading.Thread(target=self._beat, name="easylemur-lock-heartbeat", daemon=True)
                self._thread.start()
                return
            holder = self._read()
            if holder is None:  # removed or half-written between our attempts: look again
                time.sleep(0.2)
                continue
            why = self._stale(holder)
            if why is None:
                raise WorkdirLocked(
                    f"{self.path.parent} is in use by another run (host {holder.get('host')}, pid {holder.get('pid')}, "
                    f"started {_when(holder.get('started'))}, heartbeat {_age(holder.get('heartbeat'))} ago); stop it "
                    f"first, or use another workdir. A lock older than {self.stale_seconds:.0f} s without a heartbeat "
                    f"is taken over by itself")
            if self._move_aside():
                self.log(f"taking over {self.path}: its holder (host {holder.get('host')}, pid {holder.get('pid')}) "
                         f"{why}")
        raise WorkdirLocked(f"{self.path}: could not take the workdir lock (another run is taking it at the same time)")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder = self._read()
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink()

    def __enter__(self) -> WorkdirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # ---------------------------------------------------------------- the file

    def _create(self) -> bool:
        data = json.dumps(self.record).encode()
        if self.remote:
            return _create_remote(self.path, data)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _read(self) -> Optional[dict]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            # a holder between create and write; or a damaged file, judged by its age
            try:
                mtime = os.stat(self.path).st_mtime if not self.remote else time.time()
            except FileNotFoundError:
                return None
            return {"host": "?", "pid": None, "heartbeat": mtime, "started": mtime}

    def _stale(self, holder: dict) -> Optional[str]:
        """Why the holder is gone, or None while it may be alive."""
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            if not _pid_alive(holder["pid"]):
                return "is no longer running"
        age = time.time() - float(holder.get("heartbeat") or 0)
        if age > self.stale_seconds:
            return f"has not refreshed it for {age:.0f} s"
        return None

    def _move_aside(self) -> bool:
        aside = self.path.parent / f"run.lock.stale-{self.token}"
        try:
            self.path.rename(aside)
        except (FileNotFoundError, OSError):
            return False  # someone else took it over first
        aside.unlink()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            holder = self._read()
            if holder is None or holder.get("token") != self.token:
                self.log(f"warning: {self.path} no longer holds this run's lock (now {holder}); another run may "
                         "be using the workdir")
                return
            self.record["heartbeat"] = time.time()
            tmp = self.path.parent / f"run.lock.beat-{self.token}"
            tmp.write_text(json.dumps(self.record))
            tmp.rename(self.path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create_remote(path: Any, data: bytes) -> bool:
    """Create-if-absent on a bucket: google-cloud-storage's generation precondition (0: the
    object must not exist) when it is installed; otherwise check-then-write, which two runs
    starting in the same second can both pass (said once, as a warning)."""
    text = str(path)
    if text.startswith("gs://"):
        try:
            from google.api_core.exceptions import PreconditionFailed
            from google.cloud import storage
        except ImportError:
            pass
        else:
            bucket, _, name = text[len("gs://"):].partition("/")
            try:
                storage.Client().bucket(bucket).blob(name).upload_from_string(data, if_generation_match=0)
            except PreconditionFailed:
                return False
            return True
    print(f"warning: {path}: no atomic create-if-absent for this storage here (install google-cloud-storage for "
          "gs://); two runs starting at the same moment could both take the lock", flush=True)
    if path.exists():
        return False
    path.write_bytes(data)
    return True


def _age(t: Any) -> str:
    try:
        return f"{time.time() - float(t):.0f} s"
    except (TypeError, ValueError):
        return "unknown"


def _when(t: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError):
        return "at an unknown time"
