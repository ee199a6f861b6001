"""Running untrusted generated programs: bubblewrap, resource limits, a wall clock.

Each program runs as `python -I -B /tmp/program.py` inside `bwrap` (docs/design.md, "Decoding
and evaluation"):
- the whole file system read-only, `/tmp` a private size-capped tmpfs (the only writable path,
  gone afterwards), a minimal `/dev` and the sandbox's own `/proc`;
- no network (`--unshare-net`: only a loopback that is down), its own PID, IPC and UTS
  namespaces, a new session, `--die-with-parent`, a cleared environment;
- rlimits: CPU seconds, address space (2 GiB by default), file size, and process count, set by
  a small launcher that then execs bwrap (no `preexec_fn`: forking JAX's multithreaded process
  to run Python in the child can deadlock). RLIMIT_NPROC does not bind root, so as root each
  worker slot runs its program as its own unprivileged uid (`UID_BASE + slot`), which also
  keeps one program's fork storm from starving another's; that uid must be able to run the
  interpreter (else `/usr/bin/python3` is tried, else bwrap runs as root, with a pid namespace
  and the timeout but no process cap). A non-root user's cap is its running processes plus
  `max_processes`;
- a wall-clock timeout; then the whole process group is killed. bwrap's PID namespace ends
  with its first process, so every process a program started, detached or not, is gone.

Without bwrap (or where it cannot create namespaces) `Sandbox.check()` raises an error that
says how to install it, unless `unsafe_no_sandbox` is set: then the program still gets the
rlimits, a new session and the timeout, but sees the host's files and network.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Callable, Optional, Sequence

from easylemur.errors import InputError, RunError

PASSED = "passed"
TIMED_OUT = "timed out"
UID_BASE = 1_500_000  # far above any login or system uid
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap; Fedora: dnf install bubblewrap) "
                "and allow user namespaces, or pass --unsafe-no-sandbox to run generated code unconfined")


class SandboxUnavailable(RunError):
    """bwrap is missing or cannot create its namespaces here."""


@dataclasses.dataclass
class Sandbox:
    timeout: float = 10.0  # wall-clock seconds per program
    memory_bytes: int = 2 << 30  # RLIMIT_AS
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file a program may write (stderr included)
    tmp_bytes: int = 64 << 20  # size of the private /tmp
    max_processes: int = 64  # RLIMIT_NPROC of the program's uid
    python: str = ""  # interpreter inside the sandbox; default: this one, if its uid can run it
    unsafe_no_sandbox: bool = False
    bwrap: str = ""
    _mode: Optional[str] = dataclasses.field(default=None, repr=False)  # "uid", "same" or "none"
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    # ------------------------------------------------------------------ setup

    def check(self) -> str:
        """Finds a way to run programs, once: "uid" (bwrap as a per-slot unprivileged uid),
        "same" (bwrap as the current user) or "none" (unsafe_no_sandbox). Raises
        SandboxUnavailable with the install hint when bwrap cannot be used."""
        with self._lock:
            if self._mode is not None:
                return self._mode
            if self.timeout <= 0:
                raise InputError(f"timeout={self.timeout}: must be > 0 seconds")
            if self.unsafe_no_sandbox:
                self.python = self.python or sys.executable
                warnings.warn("running generated code WITHOUT a sandbox (rlimits and timeouts only): it can read "
                              "and write your files and use the network", stacklevel=2)
                self._mode = "none"
                return self._mode
            self.bwrap = self.bwrap or shutil.which("bwrap") or ""
            if not self.bwrap:
                raise SandboxUnavailable(f"bwrap not found on PATH; {INSTALL_HINT}")
            tried = []
            candidates = [self.python] if self.python else [sys.executable, "/usr/bin/python3"]
            modes = ["uid", "same"] if os.geteuid() == 0 else ["same"]
            for mode in modes:
                for py in candidates:
                    if not py or not os.path.exists(py):
                        continue
                    result = self._run_once("import sys; sys.exit(0)", slot=0, mode=mode, python=py, timeout=30)
                    if result == PASSED:
                        self._mode, self.python = mode, py
                        return mode
                    tried.append(f"{mode}/{py}: {result}")
            raise SandboxUnavailable(f"bwrap cannot run a program here ({'; '.join(tried)}); {INSTALL_HINT}")

    def _argv(self, python: str, program_fd: int, mode: str, info_fd: int) -> list[str]:
        if mode == "none":
            return [python, "-I", "-B", f"/proc/self/fd/{program_fd}"]
        return [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--size", str(self.tmp_bytes), "--tmpfs", "/tmp",
            "--ro-bind-data", str(program_fd), "/tmp/program.py",
            "--info-fd", str(info_fd),
            "--unshare-user-try", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
            "--setenv", "LANG", "C.UTF-8", "--chdir", "/tmp",
            python, "-I", "-B", "/tmp/program.py",
        ]

    def _launcher(self, slot: int, mode: str) -> list[str]:
        """A small Python that sets the rlimits (and, as root, drops to the slot's uid) and then
        execs the sandbox. Not a preexec_fn: forking a multithreaded process (JAX's) to run
        Python code in the child can deadlock."""
        uid = UID_BASE + slot if mode == "uid" else -1
        return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(int(self.timeout) + 1), str(self.memory_bytes),
                str(self.file_bytes), str(self.max_processes), str(uid)]

    # ------------------------------------------------------------------ running

    def run(self, program: str, slot: int = 0) -> str:
        """Runs one program; returns "passed", "timed out" or "failed: <why>"."""
        mode = self.check()
        return self._run_once(program, slot, mode, self.python, self.timeout)

    def _run_once(self, program: str, slot: int, mode: str, python: str, timeout: float) -> str:
        fd = os.memfd_create("program.py", 0)
        info_r, info_w = os.pipe()  # bwrap reports the pid of the sandbox's first process here
        try:
            os.write(fd, program.encode("utf-8", "surrogateescape"))
            os.lseek(fd, 0, os.SEEK_SET)
            with tempfile.TemporaryFile() as err:
                if mode == "uid":  # the sandbox's uid writes its stderr into this file
                    os.fchown(err.fileno(), UID_BASE + slot, UID_BASE + slot)
                argv = self._launcher(slot, mode) + self._argv(python, fd, mode, info_w)
                try:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                            pass_fds=(fd, info_w), start_new_session=True, cwd="/")
                except OSError as e:
                    return f"failed: cannot start: {e}"
                finally:
                    os.close(info_w)
                try:
                    code = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    code = None
                finally:
                    _kill_sandbox(proc, info_r, timed_out=code is None)
                if code is None:
                    return TIMED_OUT
                err.seek(0, os.SEEK_END)
                err.seek(max(0, err.tell() - 8192))
                tail = err.read().decode("utf-8", "replace")
        finally:
            os.close(fd)
            os.close(info_r)
        if code == 0:
            return PASSED
        return "failed: " + _why(code, tail)


_LAUNCHER = """
import os, resource, sys
cpu, mem, fsize, nproc, uid = map(int, sys.argv[1:6])
for res, v in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize),
               (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(res, (v, v))
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
elif os.getuid() != 0:
    # The count is per user: allow the user's running processes plus the program's share.
    mine = 0
    for pid in os.listdir("/proc"):
        try:
            mine += pid.isdigit() and os.stat("/proc/" + pid).st_uid == os.getuid()
        except OSError:
            pass
    nproc += mine
resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
os.execv(sys.argv[6], sys.argv[6:])
"""


def _kill_sandbox(proc: subprocess.Popen, info_fd: int, timed_out: bool) -> None:
    """Kills what is left of a run and returns once it is gone. After a timeout the sandbox's
    first process (pid 1 of its namespace) is killed first; the kernel then kills every process
    of the namespace, and that first process finishes exiting only after all of them have, so
    waiting for it waits for them all. (When bwrap exits by itself it has already waited for
    that process.) Then the launcher's session goes, for the unsafe mode's strays."""
    child = None
    try:
        if not timed_out:
            raise OSError("bwrap has already reaped the sandbox")
        os.set_blocking(info_fd, False)
        child = json.loads(os.read(info_fd, 65536).decode() or "null")["child-pid"]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    if child:
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            child = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10
    while child and time.monotonic() < deadline and _alive(child):
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """False once pid is gone or a zombie (a zombie's namespace is already empty)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|[A-Za-z_][\w.]*)(?::|$)")


def _why(code: int, stderr_tail: str) -> str:
    """The exception's type from the last traceback line, else the signal or exit code."""
    lines = [l for l in stderr_tail.splitlines() if l.strip()]
    if "Traceback (most recent call last)" in stderr_tail and lines:
        m = _EXC_LINE.match(lines[-1])
        if m:
            return m.group(1).rsplit(".", 1)[-1]
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if lines and lines[-1].startswith("bwrap:"):
        return lines[-1]
    return f"exit status {code}"


def run_programs(programs: Sequence[str], sandbox: Sandbox, workers: int = 0,
                 progress: Optional[Callable[[], None]] = None) -> list[str]:
    """Runs programs `workers` at a time (0: one per core); results in input order."""
    sandbox.check()
    workers = workers or os.cpu_count() or 1
    slots = list(range(workers))
    slot_lock = threading.Lock()
    results: list[Optional[str]] = [None] * len(programs)

    def one(i: int) -> None:
        with slot_lock:
            slot = slots.pop()
        try:
            results[i] = sandbox.run(programs[i], slot)
        finally:
            with slot_lock:
                slots.append(slot)
            if progress is not None:
                progress()

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(one, i) for i in range(len(programs))]:
            f.result()
    return [r or "failed: not run" for r in results]
