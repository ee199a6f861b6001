"""The judge of a RoboCodeGen sealed program (`sandbox.Judge`): the notebook's own test, run after
every process of the candidate's stage is gone and /tmp is emptied, in a fresh directory.

It runs the problems cell with the same seed as the inputs step (so the same test inputs,
references and `test_equiv`), defines the notebook's `eval_test` beside it, and calls
`eval_test(problem['f_sol'], f_gen, problem['test_input_args'], problem['test_equiv'])`
unchanged, where `f_gen` hands out the candidate's results in order, rebuilt from the values file
with this process's own classes (the wire's plain data; shapely shapes from their WKB; an array
of numbers behind an object that only converts to it; an opaque handle equal to nothing) or
raises where the candidate's function raised. A pass is `eval_test` returning true, as
`eval_problems` counts a success; an exception out of it is a failure there too.

Exit statuses (`common`): 1 the test said no or raised; UNDEFINED the completion did not make the
function (exec_safe refused or raised, or no function of that name); RAISED the function raised
on a test input; MISSING no values, or fewer results than the test asked for (the candidate's
stage ended early); MALFORMED the values file is not what the driver writes."""

import os
import sys

from easylemur.eval.benchmarks.robocodegen.seal.common import (HARNESS, MALFORMED, MISSING, PROBLEMS, RAISED,
                                                              UNDEFINED, VALUES, WRONG, problem, run_problems)
from easylemur.eval.sandbox.programs.wire import dec, parse


class Raised(Exception):
    "The candidate's function raised on this input: the notebook's eval_test raises there."


class Opaque:
    "A value of the candidate's that is not plain data: equal only to itself."

    __slots__ = ()


class ArrayLike:
    "A value of the candidate's that numpy reads as an array of numbers (a coordinate sequence): only that."

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


def stop(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def rebuild(side: list) -> list:
    "The side values (shapes, array-likes, opaque ones) with this process's classes."
    import shapely

    out = []
    for entry in side:
        if entry[0] == "geom" and type(entry[1]) is str:
            out.append(shapely.from_wkb(bytes.fromhex(entry[1])))
        elif entry[0] == "array":
            out.append(ArrayLike(dec(entry[1], lambda i, tag: stop(MALFORMED))))
        elif entry == ["opaque"]:
            out.append(Opaque())
        else:
            raise ValueError("bad side value")
    return out


def results(text: str) -> list:
    "[(\"ok\", value) | (\"raised\", name), ...] of the values file, or the exit status to stop with."
    if not text:
        stop(MISSING)
    try:
        values = parse(text)
        if values[0] == "undefined":
            stop(UNDEFINED)
        if values[0] != "defined":
            raise ValueError("bad values")
        side = rebuild(values[2])

        def handle(i, tag):
            return side[i] if tag == "g" else Opaque()

        return [(kind, dec(v, handle) if kind == "ok" else str(v)) for kind, v in values[1]]
    except Exception:
        stop(MALFORMED)
    return []


def main() -> None:
    f_name, seed, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(VALUES) as f:
        outs = results(f.read())
    with open(PROBLEMS) as f:
        ns = run_problems(f.read(), seed)
    with open(HARNESS) as f:
        exec(compile(f.read(), "<harness>", "exec"), ns)  # eval_test, beside the cell's names as in the notebook
    p = problem(ns, f_name)
    calls = iter(outs)

    def f_gen(*args, **kwargs):
        kind, value = next(calls, ("missing", None))
        if kind == "missing":
            stop(MISSING)
        if kind == "raised":
            raise Raised(value)
        return value

    try:
        success = ns["eval_test"](p["f_sol"], f_gen, p["test_input_args"], p["test_equiv"])
    except Raised:
        stop(RAISED)
    except Exception:
        stop(WRONG)
    if not success:
        stop(WRONG)
    print("\n" + marker, flush=True)
    stop(0)


if __name__ == "__main__":
    main()
