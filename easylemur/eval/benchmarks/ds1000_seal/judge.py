"""The judge of a DS-1000 sealed program (`sandbox.Judge`): the official test program, run after
every process of the candidate's stage is gone and /tmp is emptied, in a fresh directory.

It execs the official program (`code_context`, `code = <snippet>`, `test_execution(code)`,
`test_string(code)` when defined: ds1000.official_program) with empty globals but one name:
`exec`, bound to `Sealed.exec` (an exec of the test program's own runs as the builtin would,
`common.own_exec`). Each candidate exec of `test_execution` (`common.candidate_exec`)
takes the next case of the values file instead of running code: the files the candidate's code
left are written into this directory (never over a file the test code wrote itself, such as
"ans.png"), its figures are rebuilt into pyplot (`figures.py`), the assertions that close
`exec_context` are evaluated here on the leaves' values (`common.split`), and the environment's
`result` is the candidate's value rebuilt with this process's own classes (the sandbox's wire).
Then the official `exec_test(result, ans)`, `generate_test_case`'s expected answers and every
other line of the test program run as they are, in this process: nothing of the candidate's
(a patched np.testing, a rewritten frame, a swapped `__code__`) exists here.

Exit statuses besides the program's own (0 and the marker: passed; 1: a test failed or raised):
MISSING (3): fewer cases than the test execs (the candidate's stage ended early: os._exit,
a crash); NOT_DATA (4): a value the tests read is not plain data (a result of a class the wire
does not rebuild, a figure the allow-list refuses, files over the bound); MALFORMED (5): the
values file is not what the driver writes. These end the process at once (os._exit), so no
`except:` of the test code turns them into anything else.
"""

import ast
import os
import sys

from easylemur.eval.benchmarks.ds1000_seal.common import COMPARE, PROGRAM, VALUES, candidate_exec, split, own_exec
from easylemur.eval.sandbox.programs.wire import dec, parse

MISSING, NOT_DATA, MALFORMED = 3, 4, 5


class CandidateRaised(Exception):
    "The candidate's exec (or a leaf of a closing assertion) raised: the official exec would have."


class Opaque:
    "A value of the candidate's that is not plain data, as a closing assertion's leaf: equal only to itself."

    __slots__ = ("index",)


def stop(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def strict(i: int, tag: str) -> None:
    stop(NOT_DATA)


class Sealed:
    "The candidate's cases, handed out one per candidate exec of the test program (`exec`)."

    def __init__(self, cases: list):
        self.cases = cases
        self.next = 0
        self.written: set = set()  # the files this judge wrote for the candidate (the test code's own win)
        self.figures: list = []
        self.opaque: dict = {}

    def opaque_value(self, i, tag):
        return self.opaque.setdefault(i, Opaque())

    def decode(self, v, handle):
        try:
            return dec(v, handle)
        except Exception:
            stop(MALFORMED)

    def exec(self, code, env=None, local=None):
        if not candidate_exec(env):
            return own_exec(code, env, local)
        if self.next >= len(self.cases):
            stop(MISSING)
        case = self.cases[self.next]
        self.next += 1
        if type(case) is not list or not case:
            stop(MALFORMED)
        if case[0] == "raised":
            raise CandidateRaised("the candidate's code raised")
        if case[0] != "case" or len(case) != 5 or type(case[2]) is not list or type(case[3]) is not list:
            stop(MALFORMED)
        _, result, leaves, files, figures = case
        self.write_files(files)
        self.restore_figures(figures)
        _, trees, sources = split(code)
        if len(leaves) != len(sources):
            stop(MALFORMED)
        values = [self.leaf(x) for x in leaves]
        for t in trees:
            if not evaluate(t, values):
                raise AssertionError("an assertion of exec_context failed")
        if result != ["missing"]:
            env["result"] = self.decode(result, strict)

    def leaf(self, x):
        if type(x) is not list or len(x) != 2 or x[0] not in ("ok", "raised"):
            stop(MALFORMED)
        return CandidateRaised if x[0] == "raised" else self.decode(x[1], self.opaque_value)

    def write_files(self, files) -> None:
        present = set()
        for item in files:
            if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                stop(MALFORMED)
            name, data = item
            if data is None:
                stop(NOT_DATA)  # over the bound
            if name in (".", "..") or "/" in name or "\0" in name or type(data) is not str:
                stop(MALFORMED)
            present.add(name)
            if os.path.lexists(name) and name not in self.written:
                continue  # the test code's own file (the expected figure): never the candidate's
            try:
                content = bytes.fromhex(data)
            except ValueError:
                stop(MALFORMED)
            if os.path.lexists(name):
                os.unlink(name)
            with open(name, "xb") as f:
                f.write(content)
            self.written.add(name)
        for name in self.written - present:  # a file the candidate's code removed in a later case
            if os.path.lexists(name):
                os.unlink(name)
        self.written &= present

    def restore_figures(self, figures) -> None:
        """The candidate's open figures in place of the previous case's (its process kept those and
        sent them again); none sent: it had none open (pyplot not imported), as an empty plot."""
        if figures == ["n"] and not self.figures:
            return
        if figures != ["n"] and (type(figures) is not list or len(figures) != 2 or figures[0] != "y"
                                 or type(figures[1]) is not str):
            stop(NOT_DATA if figures == ["h", "-1"] else MALFORMED)
        import matplotlib.pyplot as plt

        from easylemur.eval.benchmarks.ds1000_seal.figures import load_figures

        for f in self.figures:
            plt.close(f)
        self.figures = []
        if figures == ["n"]:
            return
        try:
            data = bytes.fromhex(figures[1])
        except ValueError:
            stop(MALFORMED)
        try:
            self.figures = load_figures(data)
        except Exception:
            stop(NOT_DATA)


def evaluate(tree: list, values: list) -> object:
    "A closing assertion's test (common.tree), with Python's semantics: short-circuits, chained comparisons."
    kind = tree[0]
    if kind == "leaf":
        v = values[tree[1]]
        if v is CandidateRaised:
            raise CandidateRaised("a closing assertion of exec_context raised in the candidate's code")
        return v
    if kind == "const":
        return ast.literal_eval(tree[1])
    if kind == "not":
        return not evaluate(tree[1], values)
    if kind in ("and", "or"):
        out = None
        for sub in tree[1]:
            out = evaluate(sub, values)
            if (not out) if kind == "and" else out:
                return out
        return out
    operands, ops = tree[1], tree[2]
    left = evaluate(operands[0], values)
    for op, sub in zip(ops, operands[1:]):
        right = evaluate(sub, values)
        if not COMPARE[op](left, right):
            return False
        left = right
    return True


def main() -> None:
    marker = sys.argv[1]
    with open(PROGRAM) as f:
        program = f.read()
    with open(VALUES, "rb") as f:
        raw = f.read()
    if not raw:
        stop(MISSING)  # the candidate's stage wrote nothing: it ended before its driver did
    try:
        cases = parse(raw.decode("ascii"))
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        stop(MALFORMED)
    if type(cases) is not list:
        stop(MALFORMED)
    os.mkdir("run")
    os.chdir("run")
    sealed = Sealed(cases)
    exec(compile(program, "<string>", "exec"), {"exec": sealed.exec})
    sys.stdout.write("\n" + marker + "\n")
    stop(0)


if __name__ == "__main__":
    main()
