"""The test inputs of a DS-1000 sealed program, made before any of the candidate's code runs, in
a child the candidate's driver forks before it reads anything (`candidate.py`). Trusted (it runs
the dataset's `code_context`), and the only code of the program's stage that sees it.

It runs `code_context`, then the official `test_execution(code)` with `exec_test` answering
True and every candidate `exec` (`common.candidate_exec`) recorded instead of run: the code
(`exec_context` with the snippet, as `test_execution` built it, without its closing assertions:
`common.split`), the test environment (`{"test_input": ...}`, pickled: trusted to untrusted, so
any input crosses, a fitted model included), the leaves of those assertions, and the process
state the candidate's code would have found there in the official single process: numpy's,
`random`'s and torch's random states and Matplotlib's rcParams (as `generate_test_case` left
them: a seed, `seaborn.set`). Expected answers are computed (generate_test_case returns them)
and dropped with this process; `code_context`'s file, this step's files and whatever the test
code wrote (an "ans.png") are removed before it exits, so the candidate's stage finds only its
driver and the inputs.

Random state goes one way: what the candidate's code draws never reaches the judge, whose
`generate_test_case` runs from its own state (a problem whose later test case draws its input
without reseeding after the snippet drew numbers is judged as if the snippet had drawn none).
"""

import os
import pickle
import random
import shutil
import sys

from easylemur.eval.benchmarks.ds1000_seal.common import (CASES, CONTEXT, PROGRAM, SNIPPET, candidate_exec, split,
                                                         own_exec)


def state() -> dict:
    "The process state a candidate exec inherits, of the modules the test code imported."
    out = {"random": random.getstate()}
    if "numpy" in sys.modules:
        out["numpy"] = sys.modules["numpy"].random.get_state()
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].get_rng_state()
    if "matplotlib" in sys.modules:
        out["rc"] = {k: v for k, v in sys.modules["matplotlib"].rcParams.items() if k != "backend"}
    return out


def remove(path: str) -> None:
    "Removes a file or a tree (folders made unreadable included: same uid, so that is undone first)."
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, _ in os.walk(path):
            for d in dirs:
                if not os.path.islink(os.path.join(root, d)):
                    os.chmod(os.path.join(root, d), 0o700)
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def main() -> None:
    top = os.getcwd()  # the program's working directory: /tmp inside the sandbox
    sealed = top == "/tmp"  # /tmp and /dev/shm are the sandbox's own: what is new there is removed
    before = {d: set(os.listdir(d)) for d in ("/tmp", "/dev/shm")} if sealed else {}
    with open(CONTEXT) as f:
        context = f.read()
    with open(SNIPPET) as f:
        snippet = f.read()
    cases = []

    def record(code, env=None, local=None):
        if not candidate_exec(env):
            return own_exec(code, env, local)
        kept, _, leaves = split(code)
        cases.append({"code": kept, "leaves": leaves, "env": pickle.dumps(env, 4), "state": state(),
                      "figures": "matplotlib" in sys.modules})
        env["result"] = None

    os.mkdir("ds1000_inputs")
    os.chdir("ds1000_inputs")
    namespace = {"exec": record}
    exec(compile(context, "<string>", "exec"), namespace)
    namespace["exec_test"] = lambda *args, **kwargs: True
    namespace["test_execution"](snippet)
    os.chdir(top)
    with open(CASES, "wb") as f:
        pickle.dump(cases, f, 4)
    here = os.path.dirname(os.path.abspath(__file__))
    for path in ("ds1000_inputs", CONTEXT, PROGRAM, SNIPPET, os.path.join(here, "inputs.py")):
        remove(path)
    for d, names in before.items():
        for name in set(os.listdir(d)) - names - {CASES}:
            remove(os.path.join(d, name))
    sys.stdout.flush()
    os._exit(0)  # nothing of the test code's (threads, atexit) outlives the inputs
