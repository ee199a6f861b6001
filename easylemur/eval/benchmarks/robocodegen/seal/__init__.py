"""RoboCodeGen's tests judged outside the candidate's reach: a sealed `sandbox.Program` per
completion, built as DS-1000's is (`ds1000_seal/`). Its stages are modules of this package, run
in the sandbox's interpreter from copies of their text the harness writes into the sandbox
(`files`), beside the sandbox's wire (`programs/wire.py`):

- `inputs.py` (trusted, forked by the driver before anything of the candidate's runs): the
  notebook's problems cell, seeded; records the test inputs and the lookup tables, removes the cell;
- `candidate.py` (the program): the completion made into a function by the notebook's own
  `exec_safe`, called on each input; its results as data (or, for an agent's action, its cells);
- `judge.py` (the Judge, trusted): the problems cell again, the notebook's `eval_test` on those results;
- `common.py`: the files' names, the cell's run, the judge's exit statuses.

In the sandbox the copies keep their package paths (empty `__init__.py` files above them)."""

from __future__ import annotations

import functools
from pathlib import Path

PACKAGE = __name__
_WIRE = "easylemur.eval.sandbox.programs.wire"


@functools.lru_cache(maxsize=None)
def files(modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(relative path, text) of this package's `modules`, the wire, and the empty `__init__.py`
    of each package above them (read once per process)."""
    root = Path(__file__).parents[5]  # the folder holding the easylemur package
    out = {f"{PACKAGE}.{m}": None for m in modules}
    out[_WIRE] = None
    texts = {name.replace(".", "/") + ".py": (root / (name.replace(".", "/") + ".py")).read_text() for name in out}
    for name in (PACKAGE, _WIRE.rsplit(".", 1)[0]):
        parts = name.split(".")
        texts.update({"/".join(parts[:i]) + "/__init__.py": "" for i in range(1, len(parts) + 1)})
    return tuple(sorted(texts.items()))
