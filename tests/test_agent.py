"""Multi-turn evaluation with environment feedback, end to end against a scripted
OpenAI-compatible endpoint: each script reacts to what the harness feeds back, so the success
turn of every episode is known in advance and the rates per turn budget must equal it exactly;
and the suite command producing its table from the same endpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mint_fixture import write_mint
from scripted_endpoint import ScriptedEndpoint

from easylemur.eval.agent.actions import clip, parse_reply
from easylemur.eval.agent.episode import run_episodes
from easylemur.eval.agent.tools import python_cells
from easylemur.eval.api import EvalDataError, read_samples
from easylemur.eval.backends.client import Client, EndpointError
from easylemur.eval.benchmarks.humaneval import load_humaneval
from easylemur.eval.sandbox import Sandbox, SlotPool

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=20)
    sb.check()
    return sb


@pytest.fixture(scope="module")
def problems():
    return {p.task_id: p for p in load_humaneval(None)[:5]}


def test_notebook_state_persists_and_output_is_clipped(sandbox):
    slots = SlotPool(1)
    cells = ["x = 41\nprint('setup output is not repeated')", "import numpy as np\ny = int(np.int64(x) + 1)"]
    r = slots.run(sandbox, python_cells(cells + ["print(y)"]))
    assert r.output == "42\n"
    r = slots.run(sandbox, python_cells(["print('a' * 10000)"], observation_chars=1000))
    assert len(clip(r.output, 1000)) < 1100 and "left out" in clip(r.output, 1000)
    r = slots.run(sandbox, python_cells(["open('/etc/passwd').read()"]))
    assert "FileNotFoundError" in r.output  # the host's files are not there


def test_parse_reply():
    langs = ("python", "py", "python3")
    assert parse_reply("<execute>\nprint(1)\n</execute>", langs) == ("execute", "print(1)")
    assert parse_reply("```python\nprint(2)\n```\n<solution>7</solution>", langs) == ("solution", "7")
    assert parse_reply("```sql\nSELECT 1\n```", langs) == ("none", "")
    assert parse_reply("```sql\nSELECT 1\n```", ("sql",)) == ("execute", "SELECT 1\n")
    assert parse_reply("submit", ("sql",)) == ("solution", "")
    assert parse_reply("  \n", langs) == ("give up", "")


def test_client_errors_name_the_endpoint():
    with ScriptedEndpoint(chat=lambda m: "hi") as ep:
        c = Client(ep.url)
        assert c.model == "scripted" and c.chat([{"role": "user", "content": "x"}], max_tokens=4) == "hi"
        with pytest.raises(EndpointError, match=r"HTTP 404: model 'nope' not found"):
            Client(ep.url, model="nope").chat([{"role": "user", "content": "x"}], max_tokens=4)
    with pytest.raises(EndpointError, match="no answer"):
        Client(ep.url, model="m", retries=0).chat([], max_tokens=1)


def _spider(root: Path) -> Path:
    """Spider's published layout (the fixture tests/test_sql.py builds) under root/spider."""
    from test_sql import QUESTIONS, TABLES, _make_db

    d = root / "spider"
    _make_db(d / "database" / "music" / "music.sqlite")
    (d / "dev.json").write_text(json.dumps([{"db_id": db, "question": q, "query": g} for db, q, g in QUESTIONS]))
    (d / "tables.json").write_text(json.dumps(TABLES))
    return d


def sql_script(messages):
    """InterCode-SQL players: one queries, reads the count and submits (turn 2); one proposes a
    wrong query, then runs a broken one, and answers right only after seeing the database's error
    (turn 3); one orders the rows the wrong way twice."""
    q = messages[1]["content"]
    turn = sum(m["role"] == "assistant" for m in messages) + 1
    last = messages[-1]["content"]
    if "How many singers" in q:
        return "```sql\nSELECT count(*) FROM singer\n```" if turn == 1 else ("submit" if "8" in last else "")
    if "from France" in q:
        if turn == 1:
            return "<solution>SELECT name FROM singer WHERE country = 'Spain'</solution>"
        if turn == 2:
            return "<execute>SELECT nam FROM singer</execute>"
        return "<solution>SELECT name FROM singer WHERE country = 'France'</solution>" if "no such column" in last else ""
    return "<solution>SELECT name, age FROM singer ORDER BY age ASC</solution>"


def test_sql_agent_queries_observes_and_submits(sandbox, tmp_path):
    from easylemur.eval.benchmarks.spider import sql, task as spider

    task = spider.SqlAgent(sql.load_sql(_spider(tmp_path)))
    eps = run_episodes(task, sql_script, sandbox, concurrency=3, sandbox_workers=2, turns=5)
    assert [(e.solved_at, e.end) for e in eps] == [(2, "solved"), (3, "solved"), (None, "wrong answers")]
    assert "8" in eps[0].turns[0].observation and eps[0].turns[1].action == "solution"
    assert "no such column: nam" in eps[1].turns[1].observation
    assert eps[2].turns[0].verdict.startswith("failed")
    none = run_episodes(task, sql_script, sandbox, concurrency=3, sandbox_workers=2, turns=5, feedback="none")
    assert [e.solved_at for e in none] == [None, None, None]


def test_a_database_larger_than_the_sandboxs_file_cap_gets_a_sized_sandbox(tmp_path):
    """Spider's and BIRD's databases travel into the sandbox as a file: one larger than the
    sandbox's caps cannot be judged there, the suite's sized copy of the sandbox can."""
    import sqlite3

    from easylemur.eval.benchmarks.spider import sql, task as spider

    d = _spider(tmp_path)
    db = d / "database" / "music" / "music.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE padding (b BLOB)")
    conn.executemany("INSERT INTO padding VALUES (?)", [(os.urandom(1 << 16),) for _ in range(48)])  # 3 MiB
    conn.commit()
    conn.close()
    task = spider.Spider(sql.load_sql(d))
    small = Sandbox(timeout=20, file_bytes=1 << 20, tmp_bytes=2 << 20)
    p = task.problems[0]
    assert small.run_program(task.program(p, p.gold)).result != "passed"
    big = sql.sized_sandbox(small, task.problems)
    assert big.file_bytes > db.stat().st_size and big.tmp_bytes > db.stat().st_size
    assert big.run_program(task.program(p, p.gold)).result == "passed"
    assert sql.sized_sandbox(big, task.problems) is big


@pytest.mark.slow
def test_suite_table_from_a_scripted_endpoint(problems, tmp_path):
    """`python -m easylemur.eval suite --endpoint URL` produces the table: the code row from
    completions, the agent rows from episodes with the rates the scripts were designed for
    (MINT's per budget), and every benchmark without data (or a critic) a skipped row that says why."""
    data = tmp_path / "data"
    data.mkdir()
    _spider(data)
    write_mint(data / "mint")  # MINT's layout, its own problems: "six times seven", "2 plus 2"
    right = {p.text: p.solution for p in problems.values() if p.task_id in ("HumanEval/0", "HumanEval/1")}
    from test_multipl_e import ROWS  # MultiPL-E rows in its published format, with good and wrong completions

    (data / "multipl_e").mkdir()
    for lang in ("js", "cpp"):
        (data / "multipl_e" / f"humaneval-{lang}.jsonl").write_text("".join(json.dumps(r) + "\n" for r, _, _ in ROWS[lang]))
    # JavaScript: the first problem right, the second wrong; C++: both right
    right.update({ROWS["js"][0][0]["prompt"]: ROWS["js"][0][1], ROWS["js"][1][0]["prompt"]: ROWS["js"][1][2]})
    right.update({r["prompt"]: good for r, good, _ in ROWS["cpp"]})

    def complete(prompt):
        if "How many singers" in prompt:  # Spider's base prompt ends in SELECT
            return " count(*) FROM singer;"
        if "from France" in prompt:
            return " name FROM singer WHERE country = 'Spain';"
        return right.get(prompt, "    return None\n")

    def chat(messages):
        if messages[0]["role"] == "system" and "Question:" in messages[1]["content"]:
            return sql_script(messages)
        if "six times seven" in messages[0]["content"]:  # MINT's one message: run, then answer what it saw
            return "<execute> print(6 * 7) </execute>" if len(messages) == 1 else \
                "<solution> " + messages[-1]["content"].split("\n")[1] + " </solution>"
        return "<solution> 4 </solution>"  # "2 plus 2": right at once

    out = tmp_path / "table"
    with ScriptedEndpoint(chat=chat, complete=complete) as ep:
        proc = subprocess.run([sys.executable, "-m", "easylemur.eval", "suite", "--endpoint", ep.url, "--suite", "lemur",
                               "--tasks", "humaneval,m_gsm8k,mbpp,multipl_e:js,multipl_e:cpp,multipl_e,"
                               "spider,sql_agent,m_gsm8k_fb", "--turns", "3", "--wikipedia", "off",
                               "--limit", "5", "--data-dir", str(data), "--out", str(out), "--workers", "2"],
                              capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json.loads((out / "table.json").read_text())
    rows = table["tasks"]
    assert rows["humaneval"]["score"] == pytest.approx(2 / 5) and rows["humaneval"]["n"] == 5
    # MINT's runs per budget: at k = 1 running code uses the only step, so "six times seven" fails there
    assert (rows["m_gsm8k"]["success@1"], rows["m_gsm8k"]["success@2"], rows["m_gsm8k"]["score"]) == (0.5, 1.0, 1.0)
    assert "needs --feedback-endpoint" in rows["m_gsm8k_fb"]["skipped"]
    assert rows["spider"]["score"] == pytest.approx(1 / 3) and rows["spider"]["n"] == 3
    assert rows["sql_agent"]["score"] == pytest.approx(2 / 3) and rows["sql_agent"]["success@2"] == pytest.approx(1 / 3)
    assert "no data" in rows["mbpp"]["skipped"] and "--data mbpp=PATH" in rows["mbpp"]["skipped"]
    assert rows["multipl_e:js"]["score"] == 0.5 and rows["multipl_e:cpp"]["score"] == 1.0
    assert rows["multipl_e"]["score"] == 0.75 and rows["multipl_e"]["partial"].startswith(
        "mean of 2 of 7: multipl_e:js, multipl_e:cpp; without multipl_e:java")
    md = (out / "table.md").read_text()
    assert re.search(r"\| \*\*scripted\*\* \| 40\.0 \| skipped\[\^\d\] \| 33\.3 \| 75\.0 \(partial\)\[\^\d\] \|", md)
    assert "Lemur-70B-Chat (paper) | 61.0" in md and "| M-GSM8K | none | a run per budget | 50.0 | 100.0 | 100.0 |" in md
    k2 = [json.loads(line) for line in (out / "m_gsm8k" / "k=2" / "results.jsonl").read_text().splitlines()]
    assert k2[0]["state"]["history"][2]["content"].startswith("Obs:\n42\n")  # the live interpreter's output


def _mc_suite(tmp_path: Path) -> tuple[Path, Path]:
    """A suite file of one HumanEval row and one local lm-eval multiple-choice row (el_mc)."""
    from test_task_evals import _mc_task

    _mc_task(tmp_path / "tasks")
    suite = tmp_path / "mine.json"
    suite.write_text(json.dumps({"name": "mine", "tables": [{"title": "Mine", "columns": ["el_mc", "humaneval"]}],
                                 "tasks": {"el_mc": {"kind": "lm_eval", "task": "el_mc", "metric": "acc"},
                                           "humaneval": {"kind": "code", "benchmark": "humaneval"}}}))
    return suite, tmp_path / "tasks"


@pytest.mark.slow
def test_a_suite_of_ones_own_and_its_errors(tmp_path):
    """A suite is data: a user's own file runs; an endpoint's loglikelihood row without a
    tokenizer is a skipped row that says what to pass; a malformed suite is one line naming the key."""
    from easylemur.errors import InputError
    from easylemur.eval.cli import suite as suite_cli
    from easylemur.eval.runs import suite as suite_mod

    pytest.importorskip("lm_eval")
    suite, tasks = _mc_suite(tmp_path)
    with ScriptedEndpoint(complete=lambda prompt: "    return None\n") as ep:
        assert suite_cli.main(["--endpoint", ep.url, "--suite", str(suite), "--limit", "2", "--out",
                               str(tmp_path / "out"), "--lm-eval-include", str(tasks), "--workers", "2"]) == 0
    rows = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]
    assert rows["humaneval"]["score"] == 0.0 and rows["humaneval"]["n"] == 2
    assert "pass --tokenizer HF_DIR" in rows["el_mc"]["skipped"]
    for bad, key in (({"tasks": {"x": {"kind": "agent", "benchmark": "humaneval"}}}, "must name a multi-turn"),
                     ({"tasks": {"x": {"kind": "code", "benchmark": "nope"}}}, "benchmark 'nope'"),
                     ({"tasks": {"x": {"kind": "lm_eval"}}}, "key 'task'"),
                     ({"tasks": {"x": {"kind": "code", "benchmark": "mbpp"}}, "tables": [{"columns": ["y"]}]}, "'y'")):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=re.escape(key)):
            suite_mod.load_suite(str(path))


@pytest.mark.slow
def test_a_mint_task_runs_in_training(tmp_path):
    """eval.tasks=m_gsm8k: the run's own weights play MINT's episodes at the eval steps (decoded
    in one batch per turn, the live interpreter between turns); success@k is logged."""
    from train_run import run

    wd = tmp_path / "run"
    p = run(wd, ["train.steps=2", "checkpoint.every=2", "eval.tasks=sql_agent", "eval.every_tasks=2",
                 "eval.problems=2", "eval.max_new_tokens=8", "eval.batch_size=2", "eval.turns=2", "init.from=",
                 f"eval.data_dir={tmp_path / 'nothing'}"], config="configs/tiny_chat.py", check=False)
    assert p.returncode == 2 and "eval.tasks has sql_agent: no data" in p.stderr, p.stderr[-2000:]
    write_mint(tmp_path / "data" / "mint")
    p = run(wd, ["train.steps=2", "checkpoint.every=2", "eval.tasks=m_gsm8k", "eval.every_tasks=2",
                 "eval.problems=2", "eval.max_new_tokens=8", "eval.batch_size=2", "eval.turns=2", "init.from=",
                 f"eval.data_dir={tmp_path / 'data'}"], config="configs/tiny_chat.py")
    rows = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/m_gsm8k/success@2" in r]
    assert [r["step"] for r in evals] == [2] and evals[0]["eval/m_gsm8k/problems"] == 2
    assert 0.0 <= evals[0]["eval/m_gsm8k/success@1"] <= evals[0]["eval/m_gsm8k/success@2"] <= 1.0
    assert "eval m_gsm8k at step 2" in p.stdout
    records = [json.loads(line) for line in (wd / "evals" / "step_2" / "m_gsm8k" / "episodes.jsonl").read_text()
               .splitlines()]
    assert [r["task"]["task_id"] for r in records] == ["0", "1"]
    for r in records:  # each episode ran by MINT's protocol: one user message, then steps, then an end
        assert r["state"]["history"][0]["content"].startswith("Fixture instructions. Budget: 2 steps")
        assert r["state"]["finished"] and r["state"]["terminate_reason"]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_checkpoint_runs_the_whole_suite_end_to_end(reference_run, problems, tmp_path):
    """--checkpoint: the model is served by easylemur's own continuously batched server on a
    local port and every row of the lemur suite is produced (a tiny model scores near zero); the
    text rows, whose data lm-eval cannot fetch offline, are skipped rows that say why."""
    data = tmp_path / "data"
    data.mkdir()
    _spider(data)
    write_mint(data / "mint")
    from alfworld_fixture import write_alfworld  # MINT's ALFWorld games, played by ALFWorld's engine

    write_alfworld(data / "mint")
    from test_intercode_sql import write_intercode  # InterCode's layout, its own tasks and dump

    write_intercode(data / "intercode")
    from webarena_fixture import write_repo  # WebArena's files; no deployment given: its row says what to pass

    write_repo(data / "webarena")
    out = tmp_path / "table"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # the reference run is a base model (no chat template): its chat rows chat in ChatML's, given
    from easylemur.chat.chatml import CHAT_TEMPLATE

    (tmp_path / "chatml.jinja").write_text(CHAT_TEMPLATE)
    # Lemur's suite, every row as shipped, except that the rows with their own reply length (MINT's
    # 512 tokens, InterCode's) reply in 8 tokens like the rest (--max-tokens 8): a random tiny model
    # never stops early, and 512 tokens a turn would be most of this test's time
    lemur = json.loads((ROOT / "easylemur" / "eval" / "runs" / "suites" / "lemur.json").read_text())
    for spec in lemur["tasks"].values():
        if spec["kind"] == "agent":
            spec["max_tokens"] = 8
    # and a local lm-eval task, scored by --model easylemur in process: compared below with lm-eval's
    # own score of the checkpoint
    suite, tasks = _mc_suite(tmp_path)
    lemur["tasks"]["el_mc"] = json.loads(suite.read_text())["tasks"]["el_mc"]
    (tmp_path / "lemur.json").write_text(json.dumps(lemur))
    proc = subprocess.run([sys.executable, "-m", "easylemur.eval", "suite", "--checkpoint", str(reference_run),
                           "--suite", str(tmp_path / "lemur.json"), "--limit", "1", "--turns", "2", "--budgets", "one-run",
                           "--wikipedia", "off", "--lm-eval-include", str(tasks),
                           "--data-dir", str(data), "--out", str(out),
                           "--max-tokens", "8", "--workers", "2", "--slots", "4", "--concurrency", "4",
                           "--chat-template", str(tmp_path / "chatml.jinja")],
                          capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "table.json").read_text())["tasks"]
    assert set(rows) == set(lemur["tasks"])
    for name in ("humaneval", "spider", "m_humaneval", "m_gsm8k", "m_alfworld", "sql_agent") + (
            ("intercode_sql",) if shutil.which("mariadbd") or os.path.exists("/usr/sbin/mariadbd") else ()):
        assert "score" in rows[name] and 0.0 <= rows[name]["score"] <= 1.0, rows[name]
    for name in ("mmlu", "bbh", "gsm8k"):  # offline: at once, saying how to place a copy of the dataset
        assert rows[name]["skipped"].startswith("lm-eval") and "place a copy" in rows[name]["skipped"], rows[name]
    assert rows["m_humaneval_fb"]["skipped"].startswith("natural-language feedback needs --feedback-endpoint")
    assert "pass --webarena URL_MAP" in rows["webarena"]["skipped"], rows["webarena"]
    records = (out / "m_gsm8k" / "k=2" / "results.jsonl").read_text().splitlines()
    assert len(records) == 1 and all(json.loads(r)["state"]["finished"] for r in records)
    assert "| **" in (out / "table.md").read_text()
    import lm_eval
    from lm_eval.tasks import TaskManager

    from easylemur.eval.backends.harness import EasylemurLM

    ref = lm_eval.simple_evaluate(model=EasylemurLM(path=str(reference_run), batch_size=8), tasks=["el_mc"], limit=1,
                                  task_manager=TaskManager(include_path=str(tasks), include_defaults=False), bootstrap_iters=0)
    assert rows["el_mc"]["score"] == ref["results"]["el_mc"]["acc,none"] and rows["el_mc"]["n"] == 1


def test_a_jsonl_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path):
    """The one JSONL reader of the eval data (samples, MBPP, HumanEval): a byte that is not
    UTF-8 is an error naming the file, the line and the byte, not an internal error."""
    bad = tmp_path / "samples.jsonl"
    bad.write_bytes(b'{"task_id": "HumanEval/0", "completion": "ok"}\n{"task_id": "HumanEval/1", "completion": "\xff"}\n')
    p = subprocess.run([sys.executable, "-m", "easylemur.eval", "humaneval", "--samples", str(bad), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == \
        f"error: {bad}:2: not UTF-8 (byte 0xff at column 43)", p.stderr
    with pytest.raises(EvalDataError, match=r"HumanEval.jsonl:1: not UTF-8"):
        (tmp_path / "HumanEval.jsonl").write_bytes(b'{"task_id": "\xfe"}\n')
        load_humaneval(tmp_path / "HumanEval.jsonl")
    with pytest.raises(EvalDataError, match=r"is a directory; expected a JSONL file"):
        read_samples(tmp_path)  # --samples DIR: named as a directory, not "no such file"


def test_libraries_reach_the_program_in_the_unsafe_mode_too():
    """Without bubblewrap (--unsafe-no-sandbox) nothing is bound: a Program's libraries are read
    where they are installed, so DS-1000 and the agents' numpy work there as in the sandbox."""
    with pytest.warns(UserWarning, match="WITHOUT a sandbox"):
        unsafe = Sandbox(timeout=20, unsafe_no_sandbox=True)
        unsafe.check()
    r = unsafe.run_program(python_cells(["import numpy as np\nprint(int(np.arange(4).sum()))"]))
    assert (r.result, r.output) == ("passed", "6\n")


def test_a_process_left_behind_does_not_hold_the_verdict(sandbox):
    """A step that exits while a process it started (a pool worker, a daemon) still holds its
    stdout is judged when it exits, not when the leftover does (or the timeout)."""
    import time

    from easylemur.eval.sandbox import PYTHON, Program, new_marker

    marker = new_marker()
    code = (f"import os, sys, time\nprint('\\n{marker}', flush=True)\n"
            "if os.fork() == 0:\n    time.sleep(60)\n")
    t = time.monotonic()
    r = sandbox.run_program(Program(files=(("a.py", code),), steps=((PYTHON, "a.py"),), end_marker=marker))
    assert r.result == "passed" and time.monotonic() - t < 10, r
