"""The programs that run around and inside the sandbox, each a module of the standard library
only (linted like the rest), read once here and passed to `python -I -S -c` as text, never as a
file a candidate could write:

- `launcher.py`: on the host, a run's rlimits, cgroup and uid, then exec bwrap;
- `checker.py`: a Job's trusted checker, pid 1 of the sandbox: the tests and the verdict;
- `candidate.py`: a Job's candidate process, the checker's child: runs the code, answers calls;
- `runner.py`: a Program's trusted runner, pid 1 of the sandbox;
- `repl.py`: a Session's IPython interpreter, pid 1 of its sandbox, untrusted (the cells run in
  it): not standard library only, it imports IPython from the session's bound libraries;
- `wire.py`: the checker's and the candidate's wire format, and `prelude.py`: what both pid-1
  programs do before anything else (non-dumpable, the job read from its memfd, every other
  descriptor closed). Neither is run alone: `program_text` puts a shared module's text in place
  of a program's `from easylemur.eval.sandbox.programs.<module> import (...)` statement, since
  nothing of easylemur is importable where these programs run (`-I -S`; inside the sandbox, not
  even bound).
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
SHARED = ("wire", "prelude")  # modules whose text goes into the programs that import them
_SHARED_IMPORT = re.compile(r"^from easylemur\.eval\.sandbox\.programs\.(\w+) import \([^)]*\)\n", re.M)


def program_text(name: str) -> str:
    """The text of program `name` as its interpreter gets it (by `-c`): the file as it is, except
    that each `from easylemur.eval.sandbox.programs.<shared> import (...)` statement is replaced by
    that shared module's own text (each at most once)."""
    text = (HERE / f"{name}.py").read_text()
    found = _SHARED_IMPORT.findall(text)
    for module in found:
        if module not in SHARED or found.count(module) > 1:
            raise RuntimeError(f"{name}.py: imports {module} (only {', '.join(SHARED)}, each once)")
    text = _SHARED_IMPORT.sub(lambda m: (HERE / f"{m.group(1)}.py").read_text(), text)
    if re.search(r"^\s*(from|import)\s+easylemur\b", text, re.M):
        raise RuntimeError(f"{name}.py imports easylemur, which its interpreter cannot (-I -S)")
    return text


# Read once: the host's launcher, and inside the sandbox a Job's checker (pid 1) and its
# candidate's process, a Program's runner (pid 1) and a Session's interpreter (pid 1).
LAUNCHER = program_text("launcher")
CHECKER = program_text("checker")
CANDIDATE = program_text("candidate")
RUNNER = program_text("runner")
REPL = program_text("repl")
