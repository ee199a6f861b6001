"""RoboCodeGen judged in the sandbox: a small notebook in Code as Policies' published format
(tests/robocodegen_fixture.py) is read by its syntax trees (the prompt, query, stops and problems
are the notebook's); each problem's reference (its `f_sol` written as a completion) passes and
wrong completions fail, as the notebook's own `exec_safe` and `eval_test` judge them in the sealed
program; the agent with execution feedback runs code in the generated code's namespace (never
beside the references) and is judged the same way; the lemur suite runs both rows beside the
paper's figure, and without a copy or a network says why."""

import functools
import http.server
import json
import re
import threading

import pytest

from easylemur.eval.agent.episode import run_episode
from easylemur.eval.api import MissingData
from easylemur.eval.benchmarks import registry
from easylemur.eval.benchmarks.published import PublishedFilesError
from easylemur.eval.benchmarks.robocodegen.files import COMMIT
from easylemur.eval.benchmarks.robocodegen.notebook import load_notebook
from easylemur.eval.benchmarks.robocodegen.task import failure_counts, single_turn
from easylemur.eval.sandbox import Sandbox, SlotPool, thread_map
from robocodegen_fixture import NOTEBOOK, PROBLEMS, notebook, write_cap
from scripted_endpoint import ScriptedEndpoint
from test_eval import needs_bwrap

pytest.importorskip("shapely", reason="RoboCodeGen's problems use shapely (pip install shapely)")

NAMES = ["get_top_most_idx", "rotate_pts_around_pts_center_np", "get_points_from_polygon", "make_line", "make_circle",
         "get_name_of_biggest_obj"]
BIGGEST = ("\ndef get_name_of_biggest_obj(obj_names):\n"
           "    return max(obj_names, key=lambda n: Polygon(get_obj_outer_pts_np(n)).area)\n")


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return write_cap(tmp_path_factory.mktemp("google-research"))


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(timeout=30, memory_bytes=2048 << 20)
    box.check()
    return box


def test_the_notebook_is_read_by_its_syntax_trees(cap):
    nb = load_notebook(str(cap))
    assert [p.f_name for p in nb.problems] == NAMES
    assert nb.problems[0].f_sig == "idx = get_top_most_idx(points_np)"
    assert nb.stops == ("# define function:", "# example:") and nb.max_tokens == 512
    assert nb.lookups == (("get_obj_outer_pts_np", "obj_outer_pts_np_map"),)
    assert nb.context.startswith("import numpy as np\n") and "def move_pt_left(pt, dist)" in nb.context
    assert nb.problems[0].solution == "\ndef get_top_most_idx(points_np):\n    return np.argmax(points_np[:, 1])\n"
    # a reference that calls the cell's own functions has them nested (a completion's helpers are not its globals)
    assert "    def get_obj_area(obj_name):" in nb.problems[-1].solution
    task = single_turn(str(cap))
    text = task.prompt(task.problems[0]).text
    assert text.startswith("import numpy as np\nfrom shapely.geometry import *\n")
    assert text.endswith("pts_np = get_obj_outer_pts_np('object0')\n# define function: idx = get_top_most_idx(points_np).")
    assert "translate_pt_np" not in text  # the flat prompt, not the hierarchical one
    assert task.stops() == nb.stops and task.extract(task.problems[0], "\ndef f():\n  pass\n# example: x") == \
        "\ndef f():\n  pass\n"
    chat = single_turn(str(cap), prompt_format="chatml").prompt(task.problems[0])
    assert chat.messages[0]["content"] == f"Complete the following python code.\n\n\n{text}"
    assert chat.assistant_prefix == f"Here is the completed code:\n\n\n{text}"
    # the notebook itself and a folder holding it are copies too
    assert load_notebook(str(cap / "code_as_policies" / NOTEBOOK)).problems == nb.problems
    assert load_notebook(str(cap / "code_as_policies")).problems == nb.problems
    broken = cap.parent / "broken.ipynb"
    broken.write_text(notebook(PROBLEMS.replace("all_problems = ", "every_problem = ")))
    with pytest.raises(PublishedFilesError, match=r"broken\.ipynb: 0 code cells define all_problems"):
        load_notebook(str(broken))
    with pytest.raises(MissingData, match="no 'Experiment_ Robot Code-Gen Benchmark.ipynb' there"):
        load_notebook(str(cap.parent))


@needs_bwrap
def test_references_pass_and_wrong_completions_fail_in_the_sandbox(cap, sandbox):
    task = single_turn(str(cap))
    ps = {p.f_name: p for p in task.problems}
    wrong = [  # (problem, completion, result)
        ("get_top_most_idx", "\ndef get_top_most_idx(points_np):\n    return np.argmin(points_np[:, 1])\n", 1),
        ("make_circle", "\ndef make_circle(radius, center):\n    return Point(center).buffer(2 * radius)\n", 1),
        ("get_top_most_idx", "\nimport numpy as np\ndef get_top_most_idx(points_np):\n    return 0\n", 3),  # banned
        ("make_line", "\ndef make_a_line(start_pt_np, end_pt_np):\n    return 0\n", 3),  # not the function asked for
        # the notebook execs a completion with its own names as locals: a helper beside the function is not in scope
        ("get_top_most_idx", "\ndef top(p):\n    return np.argmax(p[:, 1])\n\ndef get_top_most_idx(points_np):\n"
                             "    return top(points_np)\n", 4),
        ("get_top_most_idx", "\ndef get_top_most_idx(points_np):\n    return open('rcg_problems.py').read()\n", 4),
        ("get_name_of_biggest_obj", "\ndef get_name_of_biggest_obj(obj_names):\n    return obj_names[-1]\n", 1),
    ]
    right = [(n, ps[n].solution, 0) for n in NAMES] + [  # and other honest ones
        ("get_points_from_polygon", "\ndef get_points_from_polygon(polygon):\n    return polygon.exterior.coords\n", 0),
        ("get_name_of_biggest_obj", BIGGEST, 0)]
    cases = right + wrong
    slots = SlotPool(2)
    results = thread_map(lambda c: slots.run(sandbox, task.program(ps[c[0]], c[1])).result, cases, 2)
    expected = ["passed" if s == 0 else f"failed: the tests exited with status {s}" for _, _, s in cases]
    assert results == expected, [(c[0], r) for c, r in zip(cases, results)]
    assert failure_counts(results) == {"wrong result (the notebook's test said no, or raised)": 3,
                                       "no function made (exec_safe)": 2, "the function raised on a test input": 2}


@needs_bwrap
def test_the_agent_runs_code_beside_the_context_never_the_references(cap, sandbox):
    task = registry.build("robocodegen_agent", str(cap))
    p = task.problems[-1]
    replies = iter([
        "<execute>\nprint(get_obj_outer_pts_np('block0').shape, get_total([1, 2]))\nprint(open('rcg_problems.py'))\n"
        "</execute>",
        "<solution>\ndef get_name_of_biggest_obj(obj_names):\n    return obj_names[-1]\n</solution>",
        f"<solution>{BIGGEST}</solution>"])
    ep = run_episode(task, p, lambda messages: next(replies), sandbox, SlotPool(2), turns=4)
    assert ep.solved_at == 3 and ep.end == "solved", ep.record()
    assert "# define function: obj_name = get_name_of_biggest_obj(obj_names)." in ep.messages[1]["content"]
    first = ep.turns[0].observation
    assert "(5, 2) 3\n" in first and "FileNotFoundError" in first and "n problems" not in first, first
    assert ep.turns[1].observation.startswith("Your answer is wrong.")


@needs_bwrap
def test_the_lemur_suite_runs_both_rows_beside_the_papers_figure(cap, tmp_path):
    from easylemur.eval.cli import suite as suite_cli

    def complete(prompt):  # the reference of the problem asked
        name = re.search(r"# define function: \S+ = (\w+)\(", prompt.splitlines()[-1]).group(1)
        return next(p.solution for p in load_notebook(str(cap)).problems if p.f_name == name)

    def chat(messages):
        return "<solution>\ndef get_top_most_idx(points_np):\n    return 0\n</solution>"

    with ScriptedEndpoint(chat=chat, complete=complete) as ep:
        assert suite_cli.main(["--endpoint", ep.url, "--suite", "lemur", "--tasks", "robocodegen,robocodegen_agent",
                               "--data", f"google-research={cap}", "--limit", "2",
                               "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    rows = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]
    assert rows["robocodegen"]["score"] == 1.0 and rows["robocodegen"]["n"] == 2
    assert rows["robocodegen_agent"]["score"] == 0.0 and rows["robocodegen_agent"]["n"] == 2
    assert ep.requests[0]["stop"] == ["# define function:", "# example:"] and ep.requests[0]["max_tokens"] == 512
    table = (tmp_path / "out" / "table.md").read_text()
    assert "RoboCodeGen" in table and "75.68" in table and "83.78" in table


def test_fetched_into_the_cache_and_without_network_the_row_says_why(cap, tmp_path, monkeypatch):
    from easylemur.eval.cli import suite as suite_cli

    site = tmp_path / "site" / COMMIT
    write_cap(site)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path / "site"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("EASYLEMUR_CAP_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("EASYLEMUR_CAP_CACHE", str(tmp_path / "cache"))
    try:
        task = registry.build("robocodegen", registry.find_data("robocodegen", None, None))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [p.f_name for p in task.problems] == NAMES
    assert (tmp_path / "cache" / "code_as_policies" / NOTEBOOK).is_file()
    assert [p.f_name for p in registry.build("robocodegen", None).problems] == NAMES  # the cache answers
    monkeypatch.setenv("EASYLEMUR_CAP_CACHE", str(tmp_path / "empty"))
    with ScriptedEndpoint(complete=lambda prompt: "") as ep:
        assert suite_cli.main(["--endpoint", ep.url, "--suite", "lemur", "--tasks", "robocodegen",
                               "--out", str(tmp_path / "out")]) == 0
    row = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]["robocodegen"]
    assert re.fullmatch(r"google-research's code_as_policies/Experiment_%20Robot%20Code-Gen%20Benchmark\.ipynb: no local "
                        r"copy and fetching http://127\.0\.0\.1:\d+/" + COMMIT + r"/code_as_policies/Experiment_%20Robot"
                        r"%20Code-Gen%20Benchmark\.ipynb failed \(.*\); pass --data robocodegen=PATH: the notebook "
                        r"\(https://github\.com/google-research/google-research, code_as_policies/Experiment_ Robot "
                        r"Code-Gen Benchmark\.ipynb at 71896d4b6816\) or a folder holding it, or --data-dir D with "
                        r"D/code_as_policies/ holding it", row["skipped"]), row
