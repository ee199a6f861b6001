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

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 300.0  # ten missed heartbeats
# shorter intervals, for tests that watch a run's lock live through several staleness periods
STALE_ENV, HEARTBEAT_ENV = "EASYLEMUR_LOCK_STALE_SECONDS", "EASYLEMUR_LOCK_HEARTBEAT_SECONDS"
BEAT_PREFIX = "run.lock.beat-"  # a heartbeat's temporary file on a local disk, then run.lock


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
        self.store = _store(self.path, self.token)
        self.failure: Optional[str] = None  # why the lock was lost, set by the heartbeat thread
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---------------------------------------------------------------- taking and releasing

    def acquire(self) -> None:
        # a bucket has no directories to make; and gcsfs's makedirs would create a bucket that
        # does not exist (a typo, in the default project and location): there the lock's own
        # write says the bucket is missing instead
        if "://" not in str(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self.store.create(self._data()):
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
                except _NotOurs as e:
                    self._fail(f"it is no longer this run's ({e}); another run may be using the workdir")
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


# ---------------------------------------------------------------- where the lock lives


class _NotOurs(Exception):
    """The lock file now names another run, or is gone."""


class _LocalStore:
    """A lock file on a local (or NFS-like) disk: O_EXCL create, os.replace refresh."""

    def __init__(self, path: Any, token: str):
        self.path = os.fspath(path)
        self.dir = os.path.dirname(self.path)
        self.token = token

    def create(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    def read(self) -> Optional[tuple[bytes, Any]]:
        """The file's bytes and mtime (what a half-written or damaged file is judged by)."""
        try:
            with open(self.path, "rb") as f:
                return f.read(), os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None

    def refresh(self, data: bytes) -> None:
        # a private name, written whole, then swapped in: a reader never sees half a record.
        # The check that the lock is still ours comes last, right before the swap: a run that
        # took the lock over in between would be overwritten (and then stop at its own next
        # heartbeat: of the two, one goes on); POSIX has no compare-and-swap for files.
        tmp = os.path.join(self.dir, BEAT_PREFIX + self.token)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            seen = self.read()
            if seen is None or _parse(*seen).get("token") != self.token:
                raise _NotOurs(f"now {_parse(*seen) if seen else 'removed'}")
            os.replace(tmp, self.path)
        finally:
            _unlink_quietly(tmp)

    def take_over(self, seen: tuple[bytes, Any]) -> bool:
        """Moves the stale file to a private name first: of two runs that both saw it stale,
        only one rename succeeds. If what was moved is not what was judged (a third run took
        it over meanwhile), it is put back."""
        aside = os.path.join(self.dir, f"run.lock.stale-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # someone else took it over first
        try:
            try:
                with open(aside, "rb") as f:
                    moved = f.read()
            except FileNotFoundError:
                return False  # cleaned away by a run that took the lock meanwhile
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
        if seen is not None and _parse(*seen).get("token") == self.token:
            os.unlink(self.path)

    def clean_leftovers(self) -> None:
        """Heartbeat files of runs killed mid-heartbeat (or of easylemur versions that left them):
        with the lock ours, no other run may write the lock any more."""
        for name in os.listdir(self.dir):
            if name.startswith(BEAT_PREFIX) and not name.endswith(self.token):
                _unlink_quietly(os.path.join(self.dir, name))


class _GcsStore:
    """gs:// with google-cloud-storage: every write is conditioned on the object's generation,
    so create-if-absent, refresh-if-still-ours and take-over-once are each one atomic request."""

    def __init__(self, path: Any, token: str):
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, name = str(path)[len("gs://"):].partition("/")
        self.blob = storage.Client().bucket(bucket).blob(name)
        self.bucket_obj = self.blob.bucket
        self.path, self.name, self.token, self.errors = path, name, token, exceptions
        self.generation: Optional[int] = None  # of the object this run last wrote

    def create(self, data: bytes) -> bool:
        try:
            self.blob.upload_from_string(data, if_generation_match=0)
        except self.errors.PreconditionFailed:
            return False
        except self.errors.NotFound:  # an object write finds no bucket: the only 404 an upload has
            raise InputError(f"workdir {self.path.parent}: bucket gs://{self.bucket_obj.name} does not exist (or these "
                             "credentials cannot see it); create it first, a run never creates buckets") from None
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
            raise _NotOurs("it was replaced or removed") from None
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
        pass  # nothing is ever written beside the lock


class _ObjectStore:
    """Any other epath/fsspec storage (s3://, gs:// without google-cloud-storage): an object
    write replaces the object whole, so a refresh is one write; but create-if-absent and
    refresh-if-ours are check-then-write, which two runs at the same moment can both pass
    (said once, as a warning)."""

    def __init__(self, path: Any, token: str):
        self.path, self.token = path, token
        print(f"warning: {path}: no atomic create-if-absent for this storage here (install google-cloud-storage for "
              "gs://); two runs starting at the same moment could both take the lock", flush=True)

    def create(self, data: bytes) -> bool:
        if self.path.exists():
            return False
        self.path.write_bytes(data)
        return True

    def read(self) -> Optional[tuple[bytes, Any]]:
        try:
            return self.path.read_bytes(), None
        except FileNotFoundError:
            return None

    def refresh(self, data: bytes) -> None:
        seen = self.read()
        if seen is None or _parse(*seen).get("token") != self.token:
            raise _NotOurs(f"now {_parse(*seen) if seen else 'removed'}")
        self.path.write_bytes(data)

    def take_over(self, seen: tuple[bytes, Any]) -> bool:
        now = self.read()
        if now is None or now[0] != seen[0]:
            return False
        self.path.unlink()
        return True

    def remove(self) -> None:
        seen = self.read()
        if seen is not None and _parse(*seen).get("token") == self.token:
            self.path.unlink()

    def clean_leftovers(self) -> None:
        pass


def _store(path: Any, token: str) -> _LocalStore | _GcsStore | _ObjectStore:
    text = str(path)
    if "://" not in text:
        return _LocalStore(path, token)
    if text.startswith("gs://"):
        try:
            return _GcsStore(path, token)
        except ImportError:
            pass
    return _ObjectStore(path, token)


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


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


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
