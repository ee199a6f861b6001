"""One run per workdir (docs/design.md, "Run safety").

Two trainers on one workdir (a relaunch while the old job still runs, common on pods) would
interleave metrics, overwrite each other's checkpoints and delete the step the other restores.
So a run takes `workdir/run.lock` before it touches anything else: a JSON file created only if
absent (O_EXCL on a local disk; on a bucket a create-if-absent write where the storage client
offers one), naming host, pid, the pid's start time and a `heartbeat` refreshed every
HEARTBEAT_SECONDS by a daemon thread. Only process 0 of a multi-host run takes it.

Who may take a lock over:
- a holder on this machine (same host name, boot and pid namespace) is judged by its process
  alone: while its pid runs and started when the lock says, the lock is NEVER taken over,
  whatever its heartbeat (a run blocked in a long compile or save is still a run); a dead pid,
  or a pid now owned by another process, is taken over at once;
- a holder elsewhere can only be judged by its heartbeat: older than STALE_SECONDS, taken over.

The heartbeat replaces the whole file atomically (os.replace of a private temporary file on a
local disk; one object write on a bucket, conditioned on the object's generation with
google-cloud-storage), never by a rename that refuses an existing destination. A heartbeat
that finds the lock no longer this run's, or cannot refresh it for half of STALE_SECONDS (so
before anyone else could judge it stale), is a failure: said as a warning at once, recorded,
and raised by `check()`, which the train loop calls every step, so the run stops instead of
sharing the workdir.

The file operations themselves (each kind of storage's create-if-absent, refresh, take-over)
are easylemur/storage.py's `owned_file`; this module decides who holds the lock and when.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Optional

from easylemur.errors import InputError, RunError
from easylemur.storage import NoBucket, NotOurs, makedirs, owned_file

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 300.0  # ten missed heartbeats
# shorter intervals, for tests that watch a run's lock live through several staleness periods
STALE_ENV, HEARTBEAT_ENV = "EASYLEMUR_LOCK_STALE_SECONDS", "EASYLEMUR_LOCK_HEARTBEAT_SECONDS"


class WorkdirLocked(InputError):
    """Another live run holds the workdir."""


class LockLost(RunError):
    """This run's workdir lock was taken or could not be kept; the run must stop."""


class WorkdirLock:
    """`with WorkdirLock(workdir) as lock: ... lock.check() ...` holds the workdir for the run;
    `log` gets the take-over message and heartbeat warnings. The lock is removed on exit only if
    it is still this run's."""

    def __init__(self, workdir: Any, log: Callable[[str], None] = print, stale_seconds: Optional[float] = None,
                 heartbeat_seconds: Optional[float] = None):
        from easylemur.checkpoint.paths import as_path

        self.path = as_path(workdir) / "run.lock"
        self.log = log
        self.stale_seconds = _seconds(stale_seconds, STALE_ENV, STALE_SECONDS)
        self.heartbeat_seconds = _seconds(heartbeat_seconds, HEARTBEAT_ENV, HEARTBEAT_SECONDS)
        self.token = uuid.uuid4().hex
        self.record = {"host": socket.gethostname(), **_machine(), "pid": os.getpid(),
                       "pid_start": _pid_start(os.getpid()), "started": time.time(), "heartbeat": time.time(),
                       "token": self.token}
        # the file itself (create-if-absent, refresh and remove while ours, take over once), on
        # whatever storage the workdir is: easylemur/storage.py
        self.store = owned_file(self.path, self.token,
                                lambda data, version: _parse(data, version).get("token") == self.token)
        self.failure: Optional[str] = None  # why the lock was lost, set by the heartbeat thread
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---------------------------------------------------------------- taking and releasing

    def acquire(self) -> None:
        # a bucket has no directories to make (storage.makedirs does nothing there): the lock's
        # own write says a missing bucket is missing, instead of gcsfs creating it
        makedirs(self.path.parent)
        for _ in range(3):
            try:
                created = self.store.create(self._data())
            except NoBucket as e:
                raise InputError(f"workdir {self.path.parent}: {e}; create it first, a run never creates buckets") from None
            if created:
                self.store.clean_leftovers()
                self._thread = threading.Thread(target=self._beat, name="easylemur-lock-heartbeat", daemon=True)
                self._thread.start()
                return
            seen = self.store.read()
            if seen is None:  # removed between our attempts: look again
                time.sleep(0.2)
                continue
            holder = _parse(seen[0], seen[1])
            why = self._stale(holder)
            if why is None:
                raise WorkdirLocked(
                    f"{self.path.parent} is in use by another run (host {holder.get('host')}, pid {holder.get('pid')}, "
                    f"started {_when(holder.get('started'))}, heartbeat {_age(holder.get('heartbeat'))} ago); stop it "
                    f"first, or use another workdir. {self._takeover_rule(holder)}")
            if self.store.take_over(seen):
                self.log(f"taking over {self.path}: its holder (host {holder.get('host')}, pid {holder.get('pid')}) "
                         f"{why}")
        raise WorkdirLocked(f"{self.path}: could not take the workdir lock (another run is taking it at the same time)")

    def check(self) -> None:
        """Raises LockLost (one line: the lock's path and the cause) once the heartbeat has
        failed; the train loop calls it every step."""
        if self.failure is None and self._thread is not None and not self._thread.is_alive() \
                and not self._stop.is_set():
            self.failure = "its heartbeat thread ended"
        if self.failure is not None:
            raise LockLost(f"lost the workdir lock {self.path}: {self.failure}; stopping so that two runs never share "
                           f"{self.path.parent}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # the stop wakes it at once; only a refresh under way is waited for, so that it
            # cannot write the lock back after it is removed
            self._thread.join(timeout=10)
        try:
            self.store.remove()  # only if it is still this run's
        except OSError as e:  # the run's own error, if one is in flight, is the one to report
            self.log(f"warning: could not remove {self.path} ({e}); the next run takes it over when this pid is "
                     "gone")

    def __enter__(self) -> WorkdirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # ---------------------------------------------------------------- judging a holder

    def _stale(self, holder: dict) -> Optional[str]:
        """Why the holder is gone, or None while it may be alive."""
        pid = holder.get("pid")
        if self._same_machine(holder) and isinstance(pid, int):
            if not _pid_alive(pid):
                return "is no longer running"
            recorded, now = holder.get("pid_start"), _pid_start(pid)
            if recorded is not None and now is not None and recorded != now:
                return f"is no longer running (pid {pid} now belongs to a process started later)"
            return None  # its process runs: never taken over, however old its heartbeat
        age = time.time() - float(holder.get("heartbeat") or 0)
        if age > self.stale_seconds:
            return f"has not refreshed it for {age:.0f} s"
        return None

    def _same_machine(self, holder: dict) -> bool:
        """Whether the holder's pid can be looked up here: the same host name, and (when the lock
        records them) the same boot and pid namespace: a container sharing the host's name but
        not its processes, or a rebooted host, cannot see the holder's pid."""
        if holder.get("host") != self.record["host"]:
            return False
        return all(holder.get(k) in (None, self.record[k]) for k in ("boot_id", "pid_ns"))

    def _takeover_rule(self, holder: dict) -> str:
        if self._same_machine(holder) and isinstance(holder.get("pid"), int):
            return "Its process runs on this machine, so the lock is kept however old its heartbeat"
        return f"A lock whose heartbeat is older than {self.stale_seconds:.0f} s is taken over by itself"

    # ---------------------------------------------------------------- the heartbeat

    def _data(self) -> bytes:
        return json.dumps(self.record).encode()

    def _beat(self) -> None:
        last_ok = time.time()
        try:
            while not self._stop.wait(self.heartbeat_seconds):
                self.record["heartbeat"] = time.time()
                try:
                    self.store.refresh(self._data())
                except NotOurs as e:
                    now = f"now {_parse(*e.seen)}" if e.seen is not None else str(e)
                    self._fail(f"it is no longer this run's ({now}); another run may be using the workdir")
                    return
                except Exception as e:  # noqa: BLE001 (a full disk, a read-only mount, a bucket's error)
                    if time.time() - last_ok > self.stale_seconds / 2:
                        self._fail(f"its heartbeat could not be written for {time.time() - last_ok:.0f} s "
                                   f"({type(e).__name__}: {e})")
                        return
                    self.log(f"warning: could not refresh {self.path} ({type(e).__name__}: {e}); trying again in "
                             f"{self.heartbeat_seconds:.0f} s")
                    continue
                last_ok = time.time()
        except BaseException as e:  # a bug here must stop the run too, not end the heartbeat quietly
            self._fail(f"its heartbeat thread failed ({type(e).__name__}: {e})")

    def _fail(self, why: str) -> None:
        self.failure = why
        self.log(f"warning: workdir lock {self.path}: {why}; the run stops at its next step")


# ---------------------------------------------------------------- helpers


def _parse(data: bytes, mtime: Any) -> dict:
    """The holder's record; a half-written or damaged file is judged by its age alone."""
    try:
        record = json.loads(data)
        if isinstance(record, dict):
            return record
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    t = mtime if isinstance(mtime, float) else time.time()
    return {"host": "?", "pid": None, "heartbeat": t, "started": t}


def _seconds(given: Optional[float], env: str, default: float) -> float:
    if given is not None:
        return float(given)
    text = os.environ.get(env, "")
    try:
        value = float(text) if text else default
    except ValueError:
        raise InputError(f"{env}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise InputError(f"{env}={text!r} must be a positive number of seconds")
    return value


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_start(pid: int) -> Optional[int]:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22): with the
    pid, it names one process, so a pid reused after the holder died is not mistaken for it.
    None where /proc is not there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # the command name (field 2) is in parentheses and may hold spaces: count after it
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _machine() -> dict:
    """What makes a pid meaningful beyond the host name: this boot, this pid namespace."""
    out: dict = {}
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            out["boot_id"] = f.read().strip()
    except OSError:
        pass
    try:
        out["pid_ns"] = os.readlink("/proc/self/ns/pid")
    except OSError:
        pass
    return out


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
