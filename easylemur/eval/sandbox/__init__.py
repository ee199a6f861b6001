"""The sandbox: untrusted code run and judged under bubblewrap, on the standard library and
`easylemur.errors` alone; it knows no benchmark. `box.py` is the `Sandbox` (and says how it is
sealed), `jobs.py` what it runs (`Job`, `Program`) and answers, `binds.py` what it sees of the
host, `cgroups.py` its memory cgroups, `pool.py` its worker slots, `session.py` a live Python
interpreter for an agent episode (`Session`), `programs/` the programs that run around and
inside it. This file is the floor's door: the rest of easylemur imports these
names from `easylemur.eval.sandbox`."""

from easylemur.eval.sandbox.binds import importable, lib_binds, visible
from easylemur.eval.sandbox.box import Sandbox, SandboxUnavailable
from easylemur.eval.sandbox.jobs import (JOB_LIBS, LIB_DIR, PASSED, PYTHON, SANDBOX_PATH, TIMED_OUT, Job, Judge,
                                         Program, ProgramResult, new_marker)
from easylemur.eval.sandbox.pool import NOT_RUN, SlotPool, run_programs, thread_map
from easylemur.eval.sandbox.session import HostTool, Session

__all__ = ["JOB_LIBS", "LIB_DIR", "NOT_RUN", "PASSED", "PYTHON", "SANDBOX_PATH", "TIMED_OUT", "Job", "Judge", "Program",
           "HostTool", "ProgramResult", "Sandbox", "SandboxUnavailable", "Session", "SlotPool", "importable", "lib_binds",
           "new_marker", "run_programs", "thread_map", "visible"]
