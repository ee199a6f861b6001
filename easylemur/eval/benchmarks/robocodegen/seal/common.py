"""What RoboCodeGen's sealed stages share: the files' names, the problems cell run as the
notebook runs it, and the exit statuses of the judge. Standard library (numpy imported where the
cell runs); it runs in the sandbox's interpreter, as a file of the sealed program."""

PROBLEMS = "rcg_problems.py"  # the notebook's problems cell: in the inputs step and the judge, never beside the candidate
CONTEXT = "rcg_context.py"  # the code the notebook execs into context_vars (prompt_f_gen_exec)
HARNESS = "rcg_harness.py"  # the notebook's merge_dicts and exec_safe (candidate), eval_test (judge)
SPEC = "rcg_spec.json"  # {"f_name", "seed", "lookups"}
CODE = "rcg_code.py"  # the completion
INPUTS = "rcg_inputs.pickle"  # what the inputs step hands the candidate's driver
VALUES = "values"  # what the candidate's driver hands the judge (sandbox.Judge's file)

# the judge's exit statuses besides 0 (passed, with the marker) and 1 (the notebook's test said no, or raised)
WRONG, UNDEFINED, RAISED, MISSING, MALFORMED = 1, 3, 4, 5, 6


def run_problems(source: str, seed: int) -> dict:
    """The namespace of the problems cell, run as the notebook runs it (after the prompt cell
    made `context_vars`, which it adds to), numpy's global generator seeded first: the test
    inputs it draws are the same in every stage that runs it."""
    import contextlib
    import io

    import numpy

    numpy.random.seed(seed)
    ns: dict = {"context_vars": {}}
    with contextlib.redirect_stdout(io.StringIO()):  # its "n problems: 37" is no output of the candidate's
        exec(compile(source, "<problems>", "exec"), ns)
    return ns


def problem(ns: dict, f_name: str) -> dict:
    """The problem dict of `f_name` in the cell's all_problems."""
    for p in ns["all_problems"]:
        if p["f_name"] == f_name:
            return p
    raise KeyError(f_name)
