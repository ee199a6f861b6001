"""A sealed Program (`sandbox.Judge`): the program writes values, the trusted judge runs after
every process of the program is gone and /tmp is emptied, and only the values cross. The
programs here are Python (the sandbox's interpreter), so the tests need no toolchain."""

import shutil

import pytest

from easylemur.eval.sandbox import PASSED, PYTHON, Judge, Program, Sandbox, new_marker

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

# The judge: the values must be the line "42"; it prints its marker last.
JUDGE = """import sys
values = open("values").read()
assert values == "42\\n", repr(values)
print("\\n" + sys.argv[1])
"""


def sealed(program: str, judge: str = JUDGE) -> Program:
    marker = new_marker()
    return Program(files=(("prog.py", program),), steps=((PYTHON, "-B", "prog.py"),), timeout=10.0,
                   judge=Judge(files=(("judge.py", judge),), steps=((PYTHON, "-B", "judge.py", marker),),
                               end_marker=marker))


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=10.0)
    sb.check()
    return sb


def test_the_values_reach_the_judge_and_decide(sandbox):
    assert sandbox.run_program(sealed("open('values', 'w').write('42\\n')")).result == PASSED
    wrong = sandbox.run_program(sealed("open('values', 'w').write('41\\n')"))
    assert wrong.result == "failed: the tests exited with status 1"
    assert sandbox.run_program(sealed("pass")).result == "failed: the tests exited with status 1"  # no values
    crash = sandbox.run_program(sealed("open('values', 'w').write('42\\n'); raise SystemExit(3)"))
    assert crash.result == "failed: the program exited with status 3"


CHEATS = {
    # a process left running rewrites the judge's files and values once they appear (the program's
    # own values file is the program's answer: the judge's copy is what it must not touch)
    "a daemon rewrites the judge": """import os, time
open("values", "w").write("41\\n")
if os.fork() == 0:
    os.setsid()
    for _ in range(2000):
        try:
            open("/tmp/judge/values", "w").write("42\\n")
            open("/tmp/judge/judge.py", "w").write("import sys; print(chr(10) + sys.argv[1])")
        except OSError:
            pass
        time.sleep(0.005)
    os._exit(0)
""",
    # files planted ahead of the judge: its directory, a sitecustomize, a values file that is a link
    "planted files": """import os
os.makedirs("/tmp/judge", exist_ok=True)
open("/tmp/judge/judge.py", "w").write("import sys; print(chr(10) + sys.argv[1])")
open("/tmp/judge/values", "w").write("42\\n")
open("/tmp/sitecustomize.py", "w").write("import os; os._exit(0)")
open("/dev/shm/values", "w").write("42\\n")
os.chmod("/tmp/judge", 0o500)
open("/tmp/answer", "w").write("42\\n")
os.symlink("/tmp/answer", "values")
""",
    "a fifo as values": "import os\nos.mkfifo('values')\n",
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_nothing_the_program_leaves_reaches_the_judge(sandbox, name):
    result = sandbox.run_program(sealed(CHEATS[name])).result
    assert result != PASSED and result.startswith("failed: "), (name, result)


def test_the_judge_sees_no_file_the_program_made():
    judge = """import os, sys
left = sorted(os.listdir("/tmp")) + sorted(os.listdir("/dev/shm")) + sorted(os.listdir("."))
assert left == ["judge", "judge.py", "tmp", "values"], left
assert open("values").read() == "42\\n"
print("\\n" + sys.argv[1])
"""
    program = ("import os\nos.makedirs('/tmp/a/b')\nopen('/tmp/a/b/c', 'w').write('x')\nos.chmod('/tmp/a/b', 0)\n"
               "os.chmod('/tmp/a', 0o500)\nopen('/dev/shm/x', 'w').write('y')\nopen('values', 'w').write('42\\n')\n")
    sb = Sandbox(timeout=10.0)
    assert sb.run_program(sealed(program, judge)).result == PASSED
