"""The test inputs of a RoboCodeGen sealed program, made before any of the candidate's code runs,
in a child the candidate's driver forks before it reads anything (`candidate.py`). Trusted (it
runs the notebook's problems cell), and the only code of the program's stage that sees it.

It runs the cell (numpy seeded: `common.run_problems`) and records, pickled: the problem's
`test_input_args` (trusted to untrusted, so any input crosses: arrays, shapely shapes, names)
and the tables the cell's `context_vars` lookups read (`get_obj_outer_pts_np`'s points per
object). The references (`f_sol`) and the tests (`test_equiv`) stay in this process, which
removes the cell's file before it exits: the candidate's stage finds only its driver, the
context and the inputs."""

import os
import pickle
import sys

from easylemur.eval.benchmarks.robocodegen.seal.common import INPUTS, PROBLEMS, problem, run_problems


def main(spec: dict) -> None:
    with open(PROBLEMS) as f:
        source = f.read()
    ns = run_problems(source, spec["seed"])
    record = {"lookups": {key: ns[table] for key, table in spec["lookups"]}}
    if spec.get("f_name"):
        record["args"] = list(problem(ns, spec["f_name"])["test_input_args"])
    with open(INPUTS, "wb") as f:
        pickle.dump(record, f, 4)
    os.unlink(PROBLEMS)
    sys.stdout.flush()
    os._exit(0)  # nothing of the cell's (threads, atexit) outlives the inputs
