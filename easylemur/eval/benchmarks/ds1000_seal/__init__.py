"""DS-1000's tests judged outside the candidate's reach: a sealed `sandbox.Program` per sample
(ds1000.py says what crosses and what the official semantics become). Its stages are modules of
this package, run in the sandbox's interpreter from a copy of their text that the harness writes
into the sandbox (`stage_files`), beside the sandbox's wire (`programs/wire.py`), which the
candidate's driver encodes with and the judge decodes with:

- `inputs.py` (the program's first step, trusted): runs `code_context` to record each test
  case's inputs, then removes it and everything it wrote;
- `candidate.py` (the program's second step): the candidate's code, case by case; writes the
  values (`result`, files, figures) as data;
- `judge.py` (the Judge, trusted): the official test program on those values;
- `common.py` (the trusted steps' shared rules), `figures.py` (figures across the seal).

In the sandbox the copies keep their package paths (empty `__init__.py` files above them), so
the modules import each other exactly as they do here, on the host, where the tests import them.
"""

from __future__ import annotations

import functools
from pathlib import Path

HERE = Path(__file__).parent
WIRE = HERE.parent.parent / "sandbox" / "programs" / "wire.py"
PACKAGE = "easylemur.eval.benchmarks.ds1000_seal"


def _path(module: str) -> str:
    return module.replace(".", "/") + ".py"


@functools.lru_cache(maxsize=None)
def stage_files(modules: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(relative path, text) of the package modules `modules` (names in this package), the wire,
    and the empty `__init__.py` of every package above them, for a sealed program's stage (read
    once per process)."""
    texts = {_path(f"{PACKAGE}.{m}"): (HERE / f"{m}.py").read_text() for m in modules}
    texts[_path("easylemur.eval.sandbox.programs.wire")] = WIRE.read_text()
    for module in (PACKAGE, "easylemur.eval.sandbox.programs"):
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            texts.setdefault("/".join(parts[:i]) + "/__init__.py", "")
    return tuple(sorted(texts.items()))
