"""InterCode-CTF (easylemur/eval/benchmarks/intercode_ctf/) on the miniature of InterCode's repository
(tests/intercode_fixture/: its CTF Dockerfile, four rows of ic_ctf.json with their task folders,
solutions included, ctf_env.py whole, excerpts of the template, policies and runner): the texts read
from its files, the skips, the parser against InterCode's ctf_parser's answers; a task's machine
built as the Dockerfile builds it, without the solutions and without the flag checker; known-good
and known-wrong episodes through the fork's policy; the suite's row. Nothing is downloaded."""

from __future__ import annotations

import dataclasses
import json
import shutil
import types

import pytest

from easylemur.eval.benchmarks import registry
from easylemur.eval.benchmarks.intercode_ctf.environment import CtfEnvironment
from easylemur.eval.benchmarks.intercode_ctf.parser import parse_action
from easylemur.eval.benchmarks.intercode_ctf.protocol import play
from easylemur.eval.benchmarks.intercode_ctf.task import build
from easylemur.eval.sandbox import Sandbox
from intercode_copy import write_copy

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                 reason="bubblewrap (bwrap) or git is not installed")
FLAG_5 = "picoCTF{not_too_bad_of_a_problem}"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return build(str(write_copy(tmp_path_factory.mktemp("ic") / "intercode")))


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=10)
    sb.check()
    return sb


def problem(task, task_id):
    return next(p for p in task.problems if p.task_id == task_id)


def test_texts_tasks_and_skips(task):
    t = task.texts
    assert (t.env_name, t.language, t.setting) == ("ic_ctf", "CTF", "Capture the Flag")
    assert t.init_msg.startswith("You are a Capture the Flag (CTF) player") and "formatted as 'picoCTF{...}'" in t.init_msg
    assert t.init_msg.endswith("Action: submit picoCTF{w4rm1ng_Up_w1tH_jAv4_be8d9806f18}\n")  # DEMO_CTF appended
    assert t.query_msg("Q") == "Task: Q" and t.obs_msg("") == "No output" and t.obs_msg("x") == "Output: x"
    assert t.retry_msg.startswith("No CTF code was found in your last response.")
    assert t.wrong_flag == "Submitted flag is incorrect. Keep trying!" and t.cd(5) == "cd /ctf/5"
    assert t.hf_system == "You are a helpful assistant expert specializing in CTF." and t.action_prompt == "Action:"
    assert t.kept("ls") == "Action: ls" and t.raw_prefixes == ("python3 -c", "python -c")
    assert t.encode([{"role": "user", "content": "U"}]) == "<|im_start|>user\nU\n<|im_end|>\n<|im_start|>assistant\nAction:"
    assert t.clean_cmd("echo 'a'") == "/bin/bash -c 'echo '\\''a'\\'''" and t.clean_cmd(" python3 -c 'x'") == " python3 -c 'x'"
    assert [(p.index, p.task_id) for p in task.problems] == [(0, 1), (1, 4), (2, 5), (3, 9)]
    assert "setup downloads" in task.skip_reason(problem(task, 1))  # wget of a disk image
    assert "remote server" in task.skip_reason(problem(task, 9))  # nc mercury.picoctf.net ...
    assert task.skip_reason(problem(task, 4)) is None and task.skip_reason(problem(task, 5)) is None
    assert registry.lookup("intercode_ctf")[0].kind == registry.AGENT


# Each (reply, (action, is_code)) was checked against ctf_parser of Lemur's fork (experiments/utils/utils.py)
PARSES = [
    ("Action: ls -la", ("ls -la", True)),
    ("Action:  cat flag  \nObservation: x", ("cat flag", True)),
    ("ls", ("ls", False)),
    ("I think Action: submit picoCTF{a}", ("submit picoCTF{a}", True)),
    ("Action: ", ("", True)),
    ("\nAction: ls", ("", False)),
    ("Action: echo Action: x", ("echo Action: x", True)),
]


@pytest.mark.parametrize("reply,expected", PARSES)
def test_parser_as_intercodes(reply, expected):
    assert parse_action(reply) == expected


class Scripted:
    """A model that answers from a list (the last repeated) and keeps what it was sent."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, prompt, stop):
        self.seen.append((prompt, tuple(stop)))
        return self.replies[min(len(self.seen), len(self.replies)) - 1]


@needs_bwrap
def test_machine_and_episodes(task, sandbox):
    t = task.texts
    p = problem(task, 5)
    env = CtfEnvironment(task.files, t, sandbox, p)
    try:
        assert env.workdir == "/ctf/5" and env.observation == ""  # preprocess_ctf's cd ran
        looks, ok = env.execute("ls -A; ls /ctf; find / -name solution -not -path '/proc/*' 2>/dev/null; "
                                "grep -rl -e not_too_bad -e ic_ctf / --exclude-dir=proc --exclude-dir=usr "
                                "--exclude-dir=sys --exclude-dir=dev 2>/dev/null; git -C / ls-files | grep -v '^lib'")
        # the task's own files; no solution, no task file, no flag anywhere (it is compared on the host)
        assert ok and looks.splitlines() == ["rot13.py", "5", ".gitignore", "ctf/5/rot13.py"]
        assert env.execute("python3 -c \"print('a' 'b')\"") == ("ab\n", True)  # handed over as it is
        assert env.execute("echo 'it''s'; cd ..; pwd") == ("its\n/ctf\n", True) and env.workdir == "/ctf/5"
    finally:
        env.close()
    # the fork's policy: the ChatML text with "Action:" after the assistant's header; a wrong flag, then the right one
    model = Scripted([" cat rot13.py | head -2<|im_end|>", " submit picoCTF{wrong}", f" submit {FLAG_5}\nmore"])
    env = CtfEnvironment(task.files, t, sandbox, p)
    try:
        rec = play(task, p, model, env)
    finally:
        env.close()
    first, stops = model.seen[0]
    assert stops == t.hf_stops and first == t.encode([{"role": "system", "content": t.hf_system},
                                                      {"role": "user", "content": t.init_msg + "\n" + t.query_msg(p.query)}])
    h = rec["turn_history"]
    assert h["actions"] == ["cat rot13.py | head -2", "submit picoCTF{wrong}", f"submit {FLAG_5}"]
    assert h["rewards"] == [0, 0, 1] and h["observations"][1] == t.wrong_flag
    assert h["observations"][0] == "# initial encrypted text\nflag = input()\n"
    assert model.seen[1][0].endswith("<|im_start|>assistant\nAction: cat rot13.py | head -2\n<|im_end|>\n"
                                     "<|im_start|>user\nOutput: # initial encrypted text\nflag = input()\n\n<|im_end|>\n"
                                     "<|im_start|>assistant\nAction:")
    assert rec["summary"] == {"max_reward": 1, "max_reward_idx": 2, "turns_taken": 3, "turns_max": 10}
    assert rec["environment"] == "ic_ctf" and rec["task_id"] == 2 and rec["dataset"] == "./data/ctf/ic_ctf.json"
    # InterCode's chat policy: a reply without "Action:" gets the retry message; "skip" ends it
    p4 = problem(task, 4)
    chat = Scripted(["the flag is in a file", "Action: skip"])
    env = CtfEnvironment(task.files, t, sandbox, p4)
    try:
        rec = play(task, p4, chat, env, policy="chat")
    finally:
        env.close()
    assert rec["turn_history"]["observations"] == [t.retry_msg, "skipped"] and rec["summary"]["max_reward"] == 0
    assert [m["role"] for m in chat.seen[0][0]] == ["system", "user"] and chat.seen[1][0][2]["content"] == "the flag is in a file"


@needs_bwrap
def test_the_suite_row(task, sandbox, tmp_path):
    """The lemur suite's row through suite.run_row: InterCode's log file, the score, the skipped tasks."""
    from easylemur.eval.runs import suite

    golds = {p.query: p.gold for p in task.problems}

    class Client:
        def complete(self, prompt, *, max_tokens, temperature=0.0, seed=0, stop=()):
            query = next(q for q in golds if f"Task: {q}" in prompt)
            return "cat flag" if "Output:" not in prompt else f" submit {golds[query] if 'clear' in query else 'no'}"

    spec = suite.load_suite("lemur")["tasks"]["intercode_ctf"]
    args = types.SimpleNamespace(data_map={"intercode_ctf": str(task.files.root)}, data_dir=None, limit=0, seed=0,
                                 concurrency=2, workers=1, turns=3)
    row = suite.run_row("intercode_ctf", spec, types.SimpleNamespace(client=Client(), server=None),
                        dataclasses.replace(sandbox), args, tmp_path)
    assert row["n"] == 2 and row["score"] == 0.5 and row["metric"] == "success@3"
    assert sorted(row["skipped_problems"].values()) == [1, 1]
    log = json.loads((tmp_path / "intercode_ctf" / "ic_ctf_multiturn_3_turns.json").read_text())
    assert sorted(log) == ["1", "2"] and log["1"]["summary"]["max_reward"] == 1 and log["2"]["summary"]["turns_taken"] == 3
