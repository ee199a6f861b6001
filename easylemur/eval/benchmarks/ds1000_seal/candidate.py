"""The program of a DS-1000 sealed program: the test inputs, then the candidate's code.

First this process imports the libraries the test code names (argv: module names the harness
read off `code_context`; an import that fails is left to the test code) and forks: the child
makes the test inputs (`inputs.py`: it runs `code_context`, and removes it and everything it
wrote before it exits) while this process waits, never having read `code_context`; so the
expected answers exist only in the child, and the libraries are imported once for both.

Then, for each test case the inputs step recorded, this driver restores the process state the
official single process would have had (random states, rcParams), execs the code (`exec_context`
with the snippet, without its closing assertions) in the recorded test environment, in one
working directory for all cases, as the official run does; then it evaluates the closing
assertions' leaves and encodes, with the sandbox's wire (`programs/wire.py`, which the judge
decodes with its own classes): `result` (or that there is none), the leaves, the regular files
the code left in the working directory (an "output.png", a saved model) and the open Matplotlib
figures (`figures.py`). A value that is not plain data is a handle: the judge refuses it as the
result. The first exec that raises ends the cases. The values file is the candidate's answer:
anything in this process can rewrite it, and nothing else it does reaches the judge, which
runs after every process of this stage is killed and /tmp emptied (`sandbox.Judge`).
"""

import importlib
import os
import pickle
import random
import sys
import traceback

from easylemur.eval.benchmarks.ds1000_seal import inputs
from easylemur.eval.benchmarks.ds1000_seal.common import CASES, VALUES
from easylemur.eval.benchmarks.ds1000_seal.figures import dump_figures
from easylemur.eval.sandbox.programs.wire import enc

WORK = "ds1000_work"
FILES_BYTES = 8 << 20  # the files of one case, at most (the values file has its own bound)
NO_INPUTS = 6  # exit status: the test inputs could not be made (the test code failed before any snippet ran)


def make_inputs(modules: list) -> None:
    "Imports `modules`, then makes the test inputs in a child (inputs.py) and waits for it."
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            inputs.main()  # ends the child with os._exit(0)
        except BaseException:
            traceback.print_exc()
        os._exit(NO_INPUTS)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0) or not os.path.exists(CASES):
        os._exit(NO_INPUTS)


def restore(state: dict) -> None:
    random.setstate(state["random"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
    if "rc" in state:
        import warnings

        import matplotlib

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            matplotlib.rcParams.update(state["rc"])


def main() -> None:
    make_inputs(sys.argv[1:])
    top = os.getcwd()
    with open(CASES, "rb") as f:
        cases = pickle.load(f)
    os.unlink(CASES)
    os.mkdir(WORK)
    os.chdir(WORK)
    handles: dict = {}

    def other(v):
        # not plain data: a handle, the same for the same object (the judge compares leaves by it)
        return ["h", str(handles.setdefault(id(v), len(handles)))]

    def encoded(value):
        try:
            return enc(value, other)
        except BaseException:
            return ["h", "-1"]

    out = []
    for case in cases:
        restore(case["state"])
        env = pickle.loads(case["env"])
        try:
            exec(compile(case["code"], "<string>", "exec"), env)
        except BaseException as e:
            out.append(["raised", type(e).__name__[:60]])
            break
        leaves = []
        for source in case["leaves"]:
            try:
                leaves.append(["ok", encoded(eval(compile(source, "<string>", "eval"), env))])
            except BaseException as e:
                leaves.append(["raised", type(e).__name__[:60]])
        files, size = [], 0
        for entry in sorted(os.scandir("."), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                with open(entry.name, "rb") as f:
                    data = f.read(FILES_BYTES + 1)
                size += len(data)
                files.append([entry.name, data.hex() if size <= FILES_BYTES else None])
        figures = ["n"]
        if case["figures"] and "matplotlib.pyplot" in sys.modules:
            try:
                figures = ["y", dump_figures().hex()]
            except BaseException:
                figures = ["h", "-1"]
        out.append(["case", encoded(env["result"]) if "result" in env else ["missing"], leaves, files, figures])
    os.chdir(top)
    with open(VALUES, "wb") as f:
        f.write(repr(out).encode("ascii", "backslashreplace"))
    sys.stdout.flush()
    os._exit(0)  # the values are written: what the code left running (threads, atexit) is not waited for


if __name__ == "__main__":
    main()
