"""The program of a RoboCodeGen sealed program: the test inputs, then the candidate's code.

First this process imports numpy and shapely and forks: the child makes the test inputs
(`inputs.py`: it runs the problems cell and removes it before it exits) while this process
waits, never having read the cell; so the references exist only in the child.

Then it builds what the notebook's generated functions run with: `context_vars` (the prompt
cell's `prompt_f_gen_exec` exec'd into a dict, and the cell's lookups over the recorded tables).

- `main` (the program): the completion becomes a function as the notebook's `lmp_fgen_batch`
  makes one: its own `exec_safe(f_src, context_vars, lvars)` (the banned phrases, `exec` and
  `eval` blanked) and `lvars[f_name]`; then the function is called on each test input in order
  (the notebook's `eval_test` calls it so) until one raises. The values file records: whether
  the function was made (or the exception's name), each result or the name of what it raised.
  Results cross as the sandbox's wire encodes them (`programs/wire.py`); what the wire does not
  carry goes beside it: a shapely shape as its WKB (exact shapely classes only), an object numpy
  reads as an array of numbers (a shapely coordinate sequence) as that array, anything else as
  an opaque handle, equal to nothing.
- `prepare` (an agent's action, `agent.tools.python_cells` with it as the first cell): the
  namespace the action's cells then run in.

The values file is the candidate's answer: anything in this process can rewrite it, and nothing
else it does reaches the judge, which runs after every process of this stage is killed and
/tmp emptied (`sandbox.Judge`)."""

import json
import os
import pickle
import sys
import traceback

from easylemur.eval.benchmarks.robocodegen.seal import inputs
from easylemur.eval.benchmarks.robocodegen.seal.common import CODE, CONTEXT, HARNESS, INPUTS, SPEC, VALUES
from easylemur.eval.sandbox.programs.wire import enc

NO_INPUTS = 7  # exit status: the test inputs could not be made
GEOMETRIES = ("Point", "LineString", "LinearRing", "Polygon", "MultiPoint", "MultiLineString", "MultiPolygon",
              "GeometryCollection")


def read(name: str) -> str:
    with open(name) as f:
        return f.read()


def make_inputs(spec: dict) -> dict:
    "The inputs step in a child (inputs.py); its record, once the child is gone."
    import numpy  # noqa: F401 - imported once for both processes
    import shapely.affinity  # noqa: F401
    import shapely.geometry  # noqa: F401

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            inputs.main(spec)  # ends the child with os._exit(0)
        except BaseException:
            traceback.print_exc()
        os._exit(NO_INPUTS)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0) or not os.path.exists(INPUTS):
        os._exit(NO_INPUTS)
    with open(INPUTS, "rb") as f:
        record = pickle.load(f)
    os.unlink(INPUTS)
    return record


def lookup(table: dict):
    return lambda name: table[name]


def context(record: dict) -> dict:
    "context_vars: the notebook's prompt_f_gen_exec, and the problems cell's lookups."
    ctx: dict = {}
    exec(compile(read(CONTEXT), "<context>", "exec"), ctx)
    for key, table in record["lookups"].items():
        ctx[key] = lookup(table)
    return ctx


def encoder():
    "(encode, side): a result as the wire's tree, with shapes and array-likes in `side`."
    import numpy
    import shapely
    import shapely.geometry

    shapes = {getattr(shapely.geometry, n) for n in GEOMETRIES}
    side: list = []

    def refuse(v):
        raise TypeError("not plain data")

    def other(v):
        if type(v) in shapes:
            entry = ["geom", shapely.to_wkb(v, hex=True)]
        else:
            entry = ["opaque"]
            try:
                arr = numpy.asarray(v)
                if type(arr) is numpy.ndarray and arr.dtype.kind in "biufc":
                    entry = ["array", enc(arr, refuse)]
            except BaseException:
                pass
        side.append(entry)
        return ["g", str(len(side) - 1)]

    def encode(v):
        try:
            return enc(v, other)
        except BaseException:
            side.append(["opaque"])
            return ["g", str(len(side) - 1)]

    return encode, side


def tests(spec: dict, ctx: dict) -> list:
    harness: dict = {}
    exec(compile(read(HARNESS), "<harness>", "exec"), harness)
    code = read(CODE)
    os.unlink(CODE)
    lvars: dict = {}
    try:
        harness["exec_safe"](code, ctx, lvars)
        f = lvars[spec["f_name"]]
    except BaseException as e:
        return ["undefined", type(e).__name__[:60]]
    encode, side = encoder()
    results = []
    for args in spec["args"]:
        try:
            value = f(*args)
        except BaseException as e:
            results.append(["raised", type(e).__name__[:60]])
            break
        results.append(["ok", encode(value)])
    return ["defined", results, side]


def prepare() -> dict:
    "An agent's action's first cell: the inputs step, then context_vars, for the cells that follow."
    return context(make_inputs(json.loads(read(SPEC))))


def main() -> None:
    spec = json.loads(read(SPEC))
    record = make_inputs(spec)
    out = tests(dict(spec, args=record["args"]), context(record))
    with open(VALUES, "wb") as f:
        f.write(repr(out).encode("ascii", "backslashreplace"))
    sys.stdout.flush()
    os._exit(0)  # the values are written: what the code left running (threads, atexit) is not waited for


if __name__ == "__main__":
    main()
