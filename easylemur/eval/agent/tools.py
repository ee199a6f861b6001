"""The agent's tools: a Python interpreter whose state lasts across turns, as a notebook's
(each run replays the earlier cells silently, their output discarded and their errors ignored,
then runs the new one), all of it in the sandbox."""

from __future__ import annotations

from typing import Sequence

from easylemur.eval.agent.actions import OBSERVATION_CHARS
from easylemur.eval.sandbox import PYTHON, Program, importable

AGENT_LIBS = ("numpy", "sympy", "mpmath")  # what an agent's Python may import beyond the standard library, where installed

_CELLS = r'''
import contextlib, io, sys, traceback
cells = [open("cell_%d.py" % i, encoding="utf-8").read() for i in range(int(sys.argv[1]))]
ns = {"__name__": "__main__"}
for i, cell in enumerate(cells[:-1]):  # earlier turns: their state, not their output
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(cell, "<turn %d>" % (i + 1), "exec"), ns)
        except BaseException:
            pass
try:
    exec(compile(cells[-1], "<this turn>", "exec"), ns)
except SystemExit:
    pass
except BaseException:
    kind, value, tb = sys.exc_info()
    print("".join(traceback.format_exception(kind, value, tb.tb_next)), end="", file=sys.stderr)
'''


def python_cells(cells: Sequence[str], observation_chars: int = OBSERVATION_CHARS) -> Program:
    """A Program that replays `cells[:-1]` silently and runs the last one, printing its output
    (or its traceback, the harness's own frame left out)."""
    files = [("run_cells.py", _CELLS)] + [(f"cell_{i}.py", c) for i, c in enumerate(cells)]
    return Program(files=tuple(files), steps=((PYTHON, "-B", "run_cells.py", str(len(cells))),),
                   output_bytes=2 * observation_chars, env=(("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1")),
                   libs=importable(AGENT_LIBS))
