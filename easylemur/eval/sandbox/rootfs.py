"""A root file system for shell commands: a host directory that is `/` of the sandbox and keeps
what the commands wrote from one run to the next (an agent's machine for a whole episode:
InterCode-Bash's file systems). `RootFS`.

Sealed as a Program is (`box.py`: bwrap, no network, its own pid, ipc and uts namespaces, a new
session, the launcher's rlimits and uid, a memory cgroup per run where one can be made, the
program passed as text), with these differences, which a machine an agent administers needs:
- `/` is the directory, bound writable (it holds the commands' /tmp too, uncapped but for
  RLIMIT_FSIZE per file and `max_bytes` over the whole directory, checked after every run);
  the host's /usr and its /bin, /sbin, /lib* entries and /etc/ld.so.cache are bound read-only
  on top, as everywhere in the sandbox, and /etc/alternatives (Debian's links of awk, which and
  the like to their implementations in /usr), with /proc, a read-only /dev and a capped /dev/shm;
- the commands run in a user namespace as uid 0 and gid 0 (mapped to the slot's uid outside),
  so every file of the directory is root's, as in a container; of root's capabilities they keep
  only CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and CAP_CHOWN, which reach only files
  owned by that mapped uid (root may write its read-only files, as in a container), never the
  read-only binds, the network, mounts or other processes;
- the hostname is the one given.

Each `run` is one sandbox: the pid-1 runner (`programs/shell.py`) runs the commands one after
the other and kills whatever each left running before the next. The directory is the one
thing that lasts. Before each run the host puts back what the sandbox mounts onto (a command
may have replaced /usr or /bin of the directory by something else) and after each it measures
the directory without following a link; `close()` removes it.

Uids: as root each RootFS runs as its own uid for its whole life (`ROOT_SLOT_BASE` and up, one
per live RootFS, so the owner of its files never changes between runs); otherwise as the user.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
import threading
from typing import Optional, Sequence

from easylemur.errors import RunError
from easylemur.eval.sandbox.binds import SYSTEM_DIRS, system_binds
from easylemur.eval.sandbox.box import Sandbox, SandboxUnavailable, _read_verdict, _uid, _wait
from easylemur.eval.sandbox.programs import program_text

SHELL = program_text("shell")
ROOT_SLOT_BASE = 200_000  # uids UID_BASE + 200_000 + n: never a SlotPool's or a Session's
ROOT_CAPS = ("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_CHOWN")
# Debian's links of commands to one of their implementations (/usr/bin/awk -> /etc/alternatives/awk
# -> /usr/bin/mawk): only links into /usr, bound read-only so that a machine has its awk
ALTERNATIVES = "/etc/alternatives"
GRACE_S = 10.0  # the host's wall clock past the commands' own limits

_slots_lock = threading.Lock()
_slots_live: set[int] = set()


@dataclasses.dataclass(frozen=True)
class Command:
    argv: tuple  # looked up on the command's PATH
    cwd: str = "/"
    env: tuple = ()  # ((name, value), ...): the whole environment
    timeout: float = 10.0
    output_bytes: int = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShellResult:
    output: bytes  # stdout and stderr as they came, at most the command's output_bytes
    exit_status: Optional[int]  # None: it did not end by itself (timed out) or did not start
    failure: str = ""  # "", "timed out", "chdir: <why>", "spawn: <why>", or the harness's words
    left_out: int = 0  # bytes of output past output_bytes

    @property
    def timed_out(self) -> bool:
        return self.failure == "timed out"


@dataclasses.dataclass
class _RootBox(Sandbox):
    """The parent sandbox's limits and checked mode, with `root` bound writable at `/`."""

    root: str = ""
    hostname: str = "sandbox"

    def _argv(self, python: str, script: str, fds: Sequence[int], mode: str, info_fd: int,
              binds: Sequence[tuple[str, str]] = ()) -> list[str]:
        caps = [a for c in ROOT_CAPS for a in ("--cap-add", c)]
        alternatives = ["--ro-bind", ALTERNATIVES, ALTERNATIVES] if os.path.isdir(ALTERNATIVES) else []
        return [
            self.bwrap, "--bind", self.root, "/",
            *system_binds(python), *alternatives,
            "--dev", "/dev",
            "--size", str(self.shm_bytes), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",
            "--proc", "/proc",
            "--info-fd", str(info_fd),
            "--unshare-user", "--uid", "0", "--gid", "0",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--hostname", self.hostname,
            "--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL", *caps,
            "--clearenv", "--chdir", "/",
            python, "-I", "-S", "-B", "-c", script, *map(str, fds),
        ]


def _take_slot() -> int:
    with _slots_lock:
        n = 0
        while n in _slots_live:
            n += 1
        _slots_live.add(n)
        return n


def _mount_points(python: str) -> list[tuple[str, str]]:
    """(path under the root, "dir", "file" or "link") of everything the sandbox mounts or links onto
    the root: a mount point must be a folder (or a file) or be absent; a link must be absent, since
    bwrap makes it and refuses one that exists."""
    out = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            out.append((d, "link"))
        elif os.path.isdir(d):
            out.append((d, "dir"))
    prefix = os.path.dirname(os.path.dirname(python))
    if prefix and prefix != "/" and not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        out.append((prefix, "dir"))
    return out + [("/proc", "dir"), ("/dev", "dir"), ("/etc", "dir"), ("/etc/ld.so.cache", "file"),
                  (ALTERNATIVES, "dir")]


def _remove(path: str) -> None:
    """Removes a file, link or tree the sandbox wrote, without following a link; folders a
    command made unreadable or read-only are opened up first (the same owner can)."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return

    def opened(fn, p, exc):  # noqa: ANN001 - shutil's onerror
        parent = os.path.dirname(p)
        os.chmod(parent, 0o700)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, 0o700)
        fn(p)

    os.chmod(path, 0o700)
    shutil.rmtree(path, onerror=opened)


class RootFS:
    """A directory that is `/` for shell commands in the sandbox (see the module).

    `RootFS(sandbox, template)` copies `template` (a directory: its links kept as links, modes
    and times kept) into a fresh directory under `parent` (default: /dev/shm where writable, a
    tmpfs whose pages count against each run's memory cgroup, else the temporary directory);
    None starts from an empty root. `run(commands)` runs them in one sandbox and returns their
    results; `size()` is the directory's size in bytes (blocks, links not followed);
    `close()` removes it and frees its slot."""

    def __init__(self, sandbox: Sandbox, template: Optional[str] = None, *, parent: Optional[str] = None,
                 hostname: str = "sandbox", max_bytes: int = 256 << 20):
        mode = sandbox.check()
        if mode == "none":
            raise SandboxUnavailable("a root file system needs bubblewrap (its commands see the directory as /); "
                                     "--unsafe-no-sandbox cannot give one")
        self.sandbox, self.max_bytes = sandbox, int(max_bytes)
        self._slot = _take_slot()
        self._uid = _uid(ROOT_SLOT_BASE + self._slot, mode)
        fields = {f.name: getattr(sandbox, f.name) for f in dataclasses.fields(Sandbox) if f.name != "_lock"}
        self.path = ""
        try:
            parent = parent or ("/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else tempfile.gettempdir())
            self.path = tempfile.mkdtemp(prefix="easylemur-root-", dir=parent)
            os.chmod(self.path, 0o755)
            if template is not None:
                shutil.copytree(template, self.path, symlinks=True, dirs_exist_ok=True)
                shutil.copystat(template, self.path)
            self._box = _RootBox(**fields, root=self.path, hostname=hostname)
            # the runner needs the standard library only: the system's interpreter, whose prefix /usr
            # is bound anyway, so no other folder of the host becomes a mount point in the root
            self._python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sandbox.python
            self._own()
        except BaseException:
            self.close()
            raise

    def _own(self) -> None:
        """Every file of the directory owned by this RootFS's uid (as root)."""
        if self._uid < 0:
            return
        for top, dirs, files in os.walk(self.path):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), self._uid, self._uid)
        os.lchown(self.path, self._uid, self._uid)

    def write(self, rel: str, data: bytes, mode: int = 0o644) -> None:
        """Writes the new file `rel` (a path under the root; its folders made as needed) from the
        host, owned as the root's files are. Only where no untrusted command has run yet (building a
        machine from its published setup): no component may be a link, and the file must be new."""
        path = self._folders(rel, last=False)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        if self._uid >= 0:
            os.lchown(path, self._uid, self._uid)

    def mkdir(self, rel: str, mode: int = 0o755) -> None:
        """Makes the folder `rel` (and its parents) under the root from the host, as `write` does."""
        os.chmod(self._folders(rel, last=True), mode)

    def _folders(self, rel: str, last: bool) -> str:
        """The host path of `rel` under the root, its folders made (the last part too with `last`)."""
        parts = [p for p in rel.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"{rel!r}: expected a path under the root")
        here = self.path
        for i, part in enumerate(parts):
            here = os.path.join(here, part)
            if i == len(parts) - 1 and not last:
                break
            if not os.path.lexists(here):
                os.mkdir(here, 0o755)
                if self._uid >= 0:
                    os.lchown(here, self._uid, self._uid)
            elif os.path.islink(here) or not os.path.isdir(here):
                raise ValueError(f"{rel!r}: {here} is not a folder")
        return here

    def _restore_mount_points(self) -> None:
        for path, what in _mount_points(self._python):
            here = os.path.join(self.path, path.lstrip("/"))
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                continue  # bwrap makes it
            fine = stat.S_ISDIR(st.st_mode) if what == "dir" else stat.S_ISREG(st.st_mode) if what == "file" else False
            if not fine:
                _remove(here)

    def size(self) -> int:
        total = 0
        for top, dirs, files in os.walk(self.path):
            for name in dirs + files:
                try:
                    total += os.lstat(os.path.join(top, name)).st_blocks * 512
                except OSError:
                    pass
        return total

    def run(self, commands: Sequence[Command], umask: int = 0o022) -> list[ShellResult]:
        """Runs `commands` one after the other in one sandbox over the directory; a result each.
        A run that yields no trusted result (the sandbox could not start, or was killed past
        the commands' limits) gives every command a result with that failure."""
        if not self.path:
            raise RunError("this root file system is closed")
        self._restore_mount_points()
        box = self._box
        token = secrets.token_hex(16)
        jobs = [{"argv": [str(a) for a in c.argv], "cwd": c.cwd, "env": dict(c.env), "timeout": float(c.timeout),
                 "output_bytes": int(c.output_bytes)} for c in commands]
        wall = sum(c.timeout for c in commands) + GRACE_S
        out_fd = os.memfd_create("output", 0)
        result_r, result_w = os.pipe()
        started = None
        try:
            if self._uid >= 0:
                os.fchown(out_fd, self._uid, self._uid)
            try:
                started = box._start(SHELL, {"commands": jobs, "umask": umask, "token": token}, [result_w, out_fd],
                                     (), ROOT_SLOT_BASE + self._slot, box._mode, self._python,
                                     cpu_seconds=int(wall) + 1)
            except OSError as e:
                return [ShellResult(b"", None, f"cannot start the sandbox ({type(e).__name__}: {e})")] * len(commands)
            finally:
                os.close(result_w)
            try:
                code = _wait(started.proc, wall)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                started.kill(timed_out=code is None)
            verdict = _read_verdict(result_r) if code is not None else ""
            if not secrets.compare_digest(verdict, f"passed {token}"):
                why = "the sandbox's time ran out" if code is None else f"no result from the sandbox (exit {code})"
                return [ShellResult(b"", None, why)] * len(commands)
            os.lseek(out_fd, 0, os.SEEK_SET)
            with os.fdopen(os.dup(out_fd), "rb") as f:
                raw = f.read()
            return [ShellResult(bytes(o), s, str(w), int(n)) for o, s, w, n in marshal.loads(raw)]
        finally:
            os.close(result_r)
            os.close(out_fd)
            if started is not None:
                started.release()

    def close(self) -> None:
        """Removes the directory and frees the slot; idempotent."""
        path, self.path = self.path, ""
        if path and os.path.lexists(path):
            _remove(path)
        slot, self._slot = getattr(self, "_slot", None), None
        if slot is not None:
            with _slots_lock:
                _slots_live.discard(slot)

    def __enter__(self) -> "RootFS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass
