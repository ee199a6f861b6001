"""A benchmark is one module and one registry row: a toy benchmark written to a temporary
module, with one row added to the registry and no other file touched, runs through
`python -m easylemur.eval NAME`, `eval suite` (a single-turn row and a multi-turn row) and a
training config's `eval.tasks`; and the registry is the one list of benchmark names."""

import json
import re
import sys
from pathlib import Path

import pytest

from easylemur.config import load_config
from easylemur.eval.benchmarks import registry
from scripted_endpoint import ScriptedEndpoint
from test_eval import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]

# The toy's module: problems "say N" in a JSONL of {"task_id", "n"}; a completion passes when it
# defines answer() returning N (checked in the sandbox), and the agent's proposal when it is N.
TOY = '''
"""A toy benchmark: answer() must return the problem's number."""
import dataclasses

from easylemur.eval.agent.task import AgentTask
from easylemur.eval.api import EvalDataError, Prompt, Task, read_jsonl
from easylemur.eval.sandbox import Job
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Say:
    task_id: str
    n: int


def load(data):
    rows = [Say(row["task_id"], int(row["n"])) for _, row in read_jsonl(Path(data))]
    if not rows:
        raise EvalDataError(f"{data}: no problems")
    return rows


class Toy(Task[Say]):
    name = "toy"

    def prompt(self, p):
        return Prompt(text=f"def answer():  # returns {p.n}\\n")

    def stops(self):
        return ("\\ndef",)

    def extract(self, p, completion):
        return completion

    def program(self, p, code):
        return Job(code=f"def answer():\\n{code}", tests=f"assert answer() == {p.n}")


class MToy(AgentTask[Say]):
    name = "m_toy"
    rules = "Put the number in <solution>."

    def instruction(self, p):
        return f"Say {p.n}."

    def solution(self, p, content, cells):
        return content.strip()

    def judge(self, p, answer):
        return answer == str(p.n)


def single_turn(data, variant="", prompt_format="base"):
    return Toy(load(data), prompt_format)


def agent(data, variant="", prompt_format="base"):
    return MToy(load(data))
'''


def toy_files(d: Path) -> Path:
    """The toy's module and data in `d`; returns the data file."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "toy_bench.py").write_text(TOY)
    data = d / "toy.jsonl"
    data.write_text("".join(json.dumps({"task_id": f"toy/{i}", "n": n}) + "\n" for i, n in enumerate((3, 5))))
    return data


def toy_rows(module: str = "toy_bench") -> dict:
    return {"toy": registry.Benchmark("toy", registry.SINGLE_TURN, f"{module}:single_turn", ("toy.jsonl",)),
            "m_toy": registry.Benchmark("m_toy", registry.AGENT, f"{module}:agent", ("toy.jsonl",))}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy's data file, with its module importable and its rows in the registry (undone after)."""
    data = toy_files(tmp_path / "toy")
    monkeypatch.syspath_prepend(str(tmp_path / "toy"))
    for name, row in toy_rows().items():
        monkeypatch.setitem(registry.BENCHMARKS, name, row)
    yield data
    sys.modules.pop("toy_bench", None)


@needs_bwrap
def test_a_toy_benchmark_runs_through_the_eval_cli(toy, tmp_path, capsys):
    from easylemur.eval.cli import main

    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "toy/0", "completion": "    return 3\n"}) + "\n"
                       + json.dumps({"task_id": "toy/1", "completion": "    return 4\n"}) + "\n")
    assert main(["toy", "--samples", str(samples), "--data", str(toy), "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"pass@1": 0.5, "n": 1, "problems": 2}
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["result"] for r in results] == ["passed", "failed: AssertionError"]


@needs_bwrap
def test_a_toy_benchmark_runs_through_the_suite_single_and_multi_turn(toy, tmp_path):
    from easylemur.eval.cli import suite as suite_cli

    suite = tmp_path / "toy_suite.json"
    suite.write_text(json.dumps({"name": "toys", "tables": [{"title": "Toys", "columns": ["toy", "m_toy"]}],
                                 "tasks": {"toy": {"kind": "code", "benchmark": "toy"},
                                           "m_toy": {"kind": "agent", "benchmark": "m_toy", "turns": 2}}}))

    def complete(prompt):
        n = re.search(r"returns (\d+)", prompt).group(1)
        return f"    return {n}\n"

    def chat(messages):  # the first turn says a wrong number, the second the right one
        n = re.search(r"Say (\d+)", messages[1]["content"]).group(1)
        return "<solution>0</solution>" if len(messages) == 2 else f"<solution>{n}</solution>"

    with ScriptedEndpoint(chat=chat, complete=complete) as ep:
        assert suite_cli.main(["--endpoint", ep.url, "--suite", str(suite), "--data-dir", str(toy.parent),
                               "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    rows = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]
    assert rows["toy"]["score"] == 1.0 and rows["toy"]["n"] == 2
    assert rows["m_toy"]["success@1"] == 0.0 and rows["m_toy"]["score"] == 1.0


def test_a_toy_benchmark_is_a_training_eval_task(toy):
    from easylemur.eval.runs.training import _task

    overrides = ["eval.tasks=toy,m_toy", "eval.every_tasks=2", f"eval.data_dir={toy.parent}"]
    cfg = load_config("configs/tiny_pretrain.py", overrides)
    assert [p.n for p in _task("toy", cfg.eval).problems] == [3, 5]
    assert _task("m_toy", cfg.eval).instruction(_task("m_toy", cfg.eval).problems[1]) == "Say 5."


def test_the_registry_is_the_one_list_of_benchmark_names(tmp_path):
    """Every name the registry knows builds its task kind's object from its own module, and no
    module of easylemur names the benchmarks in a list of its own."""
    from mint_fixture import write_mint

    from easylemur.eval.api import Task
    from easylemur.eval.benchmarks.mint.tasks import MintTask

    names = registry.names()
    assert "humaneval" in names and "multipl_e:js" in names and "sql_agent" in names
    task = registry.build("humaneval", None)
    assert isinstance(task, Task) and not registry.is_agent("humaneval") and len(task.problems) == 164
    mint = tmp_path / "mint"
    write_mint(mint)
    task = registry.build("m_humaneval", str(mint))  # MINT's rows: one factory, its task bound by the row
    assert isinstance(task, MintTask) and registry.is_agent("m_humaneval") and task.spec.folder == "humaneval"
    pkg = ROOT / "easylemur"
    listing = re.compile(r"""["']m_humaneval["'][^\n]*["']m_mbpp["']""")  # two names in one literal list
    found = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if listing.search(p.read_text())]
    assert found == [], found
    with pytest.raises(Exception, match=r"benchmark 'nope': expected one of humaneval, .*multipl_e:LANG \(js"):
        registry.lookup("nope")
