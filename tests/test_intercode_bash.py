"""InterCode-Bash (easylemur/eval/benchmarks/intercode_bash/) and the root file systems it runs on
(easylemur/eval/sandbox/rootfs.py), on a miniature of InterCode's repository (tests/intercode_fixture/:
its nl2bash Dockerfile, .gitignore and two setup scripts, eight task rows, bash_env.py whole,
excerpts of the rest): the texts read from its files, the skips, the parser against InterCode's bash_parser's
answers, the TF-IDF similarity against scikit-learn's; file system 1 built by its setup script;
known-good and known-wrong trajectories scored by easylemur and by InterCode's own BashEnv (its
file, run on containers that are easylemur's machines); an agent that cannot reach the gold
command, its output or the checker; the protocol's turns and dialogue; the suite's row. Nothing
is downloaded."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import shlex
import shutil
import signal
import sys
import types
from pathlib import Path

import pytest

from easylemur.eval.benchmarks import registry
from easylemur.eval.benchmarks.intercode_bash import task as task_module
from easylemur.eval.benchmarks.intercode_bash.environment import BashEnvironment, simplify_path
from easylemur.eval.benchmarks.intercode_bash.image import HOSTNAME
from easylemur.eval.benchmarks.intercode_bash.parser import parse_action
from easylemur.eval.benchmarks.intercode_bash.protocol import Images, play
from easylemur.eval.benchmarks.intercode_bash.reward import parse_status, reward, tfidf_similarity
from easylemur.eval.benchmarks.intercode_bash.files import INTERCODE
from easylemur.eval.benchmarks.intercode_bash.task import InterCodeBashTask
from easylemur.eval.benchmarks.published import RepoFiles
from easylemur.eval.sandbox import Sandbox
from easylemur.eval.sandbox.rootfs import Command, RootFS
from intercode_copy import write_copy

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                 reason="bubblewrap (bwrap) or git is not installed")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = write_copy(tmp_path_factory.mktemp("ic") / "intercode")
    return InterCodeBashTask(RepoFiles.locate(INTERCODE, str(root)), file_systems=(1, 4))  # the miniature's two


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=10)
    sb.check()
    return sb


@pytest.fixture(scope="module")
def images(task, sandbox):
    with Images(task, sandbox) as built:
        yield built


def problem(task, task_id):
    return next(p for p in task.problems if p.task_id == task_id)


# ----------------------------------------------------------------------------- files, texts, tasks


def test_texts_tasks_and_skips(task, monkeypatch):
    t = task.texts
    assert t.setting == "Bourne Shell" and t.language == "BASH" and t.env_name == "ic_bash" and t.shell == "/bin/bash"
    assert t.init_msg.startswith("## TASK DESCRIPTION\nYou are a BASH code generator") and "```BASH\n" in t.init_msg
    assert "Try ```sql\nSHOW TABLES```" in t.init_msg  # InterCode's v2 template says so to Bash too
    assert t.query_msg("Q?") == 'Query: "Q?".\nDo not generate any output or reward.\n'
    assert t.obs_msg("", 0.67, "Q?").startswith('Bourne Shell Output: No output\nReward: 0.67\nHere is the query again: "Q?"')
    assert t.hf_system == "You are a helpful assistant expert specializing in BASH." and t.hf_separator == "\n"
    assert t.hf_stops == ("<|im_start|>", "<|im_end|>", "Observation:", "Task:", "Output:")
    assert t.fenced("ls") == "```bash\nls\n```" and t.clean_cmd(" ls -l ") == '/bin/bash -c "ls -l"'
    assert (t.status_script, t.timed_out, t.malformed, t.timeout) == ("git status --short;", "Command timed out",
                                                                      "Malformed command", 10)
    assert t.response_limit == t.chat_response_limit == 1000
    assert "tree" in task.dockerfile.packages and "bsdmainutils" in task.dockerfile.packages
    assert [p.task_id for p in task.problems] == ["fs1/0", "fs1/1", "fs1/2", "fs1/3", "fs4/0", "fs4/1", "fs4/2", "fs4/3"]
    assert task.dataset(4) == "./data/bash/nl2bash/nl2bash_fs_4.json"
    assert "network (dig)" in task.skip_reason(problem(task, "fs4/0"))  # dig -x 127.0.0.1
    monkeypatch.setattr(task_module, "on_path", lambda c: c != "cal")
    assert task.skip_reason(problem(task, "fs4/3")).startswith("needs cal (package bsdmainutils)")
    assert task.skip_reason(problem(task, "fs1/0")) is None
    row, _ = registry.lookup("intercode_bash")
    assert row.kind == registry.AGENT and row.in_training and row.fetched


def test_fetched_file_by_file_into_the_cache(task, tmp_path, monkeypatch):
    """Without a copy, every file the tasks and the machines' builds read is fetched at the pinned commit."""
    import functools
    import http.server
    import threading

    from easylemur.eval.benchmarks.intercode_sql.files import COMMIT

    shutil.copytree(task.files.root, tmp_path / "site" / COMMIT)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("EASYLEMUR_INTERCODE_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
        monkeypatch.setenv("EASYLEMUR_INTERCODE_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(task_module, "FILE_SYSTEMS", (1, 4))  # the miniature's two
        fetched = registry.build("intercode_bash", None)
        assert len(fetched.problems) == 8 and fetched.texts.setting == "Bourne Shell"
        for rel in ("docker/bash_scripts/setup_nl2b_fs_1.sh", "docker/bash_scripts/setup_nl2b_fs_4.sh",
                    "docker/docker.gitignore", "intercode/envs/bash/bash_env.py"):
            assert (tmp_path / "cache" / rel).is_file(), rel
    finally:
        httpd.shutdown()
        httpd.server_close()


# Each (reply, command) was checked against bash_parser of Lemur's fork of InterCode
# (experiments/utils/utils.py); None: it raises ValueError there (the runner's "blocked").
PARSES = [
    ("```bash\nls -l /testbed\n```", "ls -l /testbed"),
    ("```BASH\nFind /Testbed -Name '*.TXT'\n```", "find /testbed -name '*.txt'"),  # fenced: lower-cased
    ("bash: ls -la", "ls -la"),
    ("BASH: echo Hi", "echo Hi"),
    ("The command: ls /", " ls /"),
    ("Command: ls /", None),
    ("ls /testbed", "ls /testbed"),
    ("```shell\nls\n```", "ell ls"),
    ("```sh\necho   a\n\tb\n```", "echo a b"),
    ("", ""),
    ("submit", "submit"),
    ("Here:\n```bash\nwc -l file\n```", "wc -l file"),
    ("command: first command: second", " first command: second"),
]


@pytest.mark.parametrize("reply,expected", PARSES)
def test_parser_as_intercodes(reply, expected):
    if expected is None:
        with pytest.raises(ValueError):
            parse_action(reply)
    else:
        assert parse_action(reply) == expected


def test_reward_function():
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    for a, b in [("hello world\n", "hello world\n"), ("2\n", "4\n"), ("a.txt b.txt\nc", "b.txt a.txt a.txt"),
                 ("/testbed/dir1/abc.txt", "Hello, World! /testbed/dir1"), ("x y z", "ab cd")]:
        try:
            m = sklearn_text.TfidfVectorizer().fit_transform([a, b])
            want = (m * m.T).toarray()[0][1]
        except ValueError:
            want = None
        if want is None:
            with pytest.raises(ValueError):
                tfidf_similarity(a, b)
        else:
            assert abs(tfidf_similarity(a, b) - want) < 1e-12, (a, b)
    # git status read as InterCode reads it: words two at a time (a quoted path with a space splits)
    assert parse_status(" M a.txt\n?? dir/\n") == [("a.txt", "M"), ("dir/", "??")]
    assert parse_status('?? "a b.txt"\n') == [('"a', "??")]  # InterCode would stop at the lone last word
    same = lambda path: True  # noqa: E731
    assert reward("", "", "4\n", "4\n", same)[0] == 1.0
    assert reward("?? x.txt\n", "", "4\n", "4\n", same)[0] == 0.72  # one extra change: erf(1)
    assert reward("?? x.txt\n?? y\n", "", "", "", same)[0] == 0.67  # two: 0.0; no words in either output: equal, 1
    r, info = reward("?? x.txt\n?? d/\n", "?? x.txt\n?? d/\n", "a", None, lambda path: path != "x.txt")
    assert r == 0.01 + 0.33 + 0.17 + 0 and info["diff_same"]["correct"] == 1  # d/ has no ".": md5deep, same
    assert simplify_path("/home/intercode", "../another_dir/..") == "/home" and simplify_path("/a", "///") == "/"


# ----------------------------------------------------------------------------- the machines


@needs_bwrap
def test_machine_built_from_the_setup_script(task, sandbox, images):
    image = images.get(1)
    env = BashEnvironment(image, dataclasses.replace(task.texts, timeout=2), sandbox, "Q", "true")
    try:
        out, ok = env.execute("git status --short; git ls-files | grep -v '^lib' | head -3; "  # lib64: the host's link
                              "stat -c '%U %a' /testbed/hello.c /root; echo $script $HOME $(hostname)")
        assert ok and out == (".gitignore\nindex.html\nsetup_nl2b_fs_1.sh\nroot 644\nroot 700\n"
                              "setup_nl2b_fs_1.sh /root intercode\n")
        assert env.execute("export A=1; cd /testbed; echo $A")[0] == "1\n"
        assert env.execute("echo $A; pwd")[0] == "\n/\n"  # neither variables nor `cd ... ;` last
        assert env.execute("cd testbed/dir1")[1] and env.workdir == "/testbed/dir1"
        assert env.execute("cd ../dir2 && pwd") == ("/testbed/dir2\n", True) and env.workdir == "/testbed/dir2 && pwd"
        assert env.execute("ls")[0].startswith("chdir to cwd ('/testbed/dir2 && pwd') failed")  # as InterCode's workdir
        assert env.execute("cd /")[1] and env.workdir == "/"
        assert env.execute('echo "unclosed')[0] == "Malformed command"  # shlex cannot split it, as docker-py
        assert env.execute('grep "Hello" /testbed/dir1/textfile1.txt') == ("Hello, World!\n", True)
        assert env.execute("printf '\\377'") == ("Malformed command", False)  # not UTF-8
        assert env.execute("sleep 30") == ("Command timed out", False)
        assert env.execute("(sleep 30 >/dev/null 2>&1 &); echo started") == ("started\n", True)
        assert env.execute("ps -e -o comm= | grep -c sleep; echo $$")[0] == "0\n2\n"  # nothing lived on
        assert env.execute("false") == ("", False)
    finally:
        env.close()
    assert not Path(env.agent.path or "/nonexistent").exists()


def _intercode_bash_env(root: Path):
    """InterCode's BashEnv from the miniature's bash_env.py, its imports of docker and of the rest
    of InterCode stood in for (the class itself is run as written)."""
    ic_env = types.ModuleType("intercode.envs.ic_env")
    ic_env.IntercodeEnv = type("IntercodeEnv", (), {})
    for name in ("AGENT_OBS", "EVAL_OBS", "CORRUPT_GOLD", "ACTION_EXEC", "REWARD"):
        setattr(ic_env, name, {"ACTION_EXEC": "action_executed"}.get(name, name.lower()))
    utils = types.ModuleType("intercode.utils")
    utils.signal, utils.get_container = signal, None  # the excerpt's `timeout` (SIGALRM), as InterCode's utils has it
    exec(compile((root / "intercode/utils/utils.py").read_text(), "utils.py", "exec"), utils.__dict__)
    ns: dict = {"__name__": "bash_env"}
    modules = {"intercode": types.ModuleType("intercode"), "intercode.envs": types.ModuleType("intercode.envs"),
               "intercode.envs.ic_env": ic_env, "intercode.utils": utils}
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    try:
        exec(compile((root / "intercode/envs/bash/bash_env.py").read_text(), "bash_env.py", "exec"), ns)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return ns["BashEnv"]


ExecResult = collections.namedtuple("ExecResult", "exit_code,output")  # docker-py's exec_run answer


class Container:
    """A container as InterCode's BashEnv uses one, that is one of easylemur's machines: exec_run
    splits a string as docker-py does and runs it there. The eval container's `git reset --hard`
    gives it a fresh copy: the image as built, what InterCode's first reward sees."""

    def __init__(self, sandbox, image, fresh: bool):
        self.sandbox, self.image, self.fresh = sandbox, image, fresh
        self.root = RootFS(sandbox, image.template.path, hostname=HOSTNAME)

    def exec_run(self, cmd, workdir=None):
        if self.fresh and "git reset --hard" in cmd:
            self.root.close()
            self.root = RootFS(self.sandbox, self.image.template.path, hostname=HOSTNAME)
            return ExecResult(0, b"")
        argv = shlex.split(cmd)
        r = self.root.run([Command(tuple(argv), cwd=workdir or "/", env=self.image.env, timeout=30)])[0]
        if r.failure.startswith("spawn"):  # what Docker answers for a missing program (md5deep)
            return ExecResult(126, b'OCI runtime exec failed: exec failed: unable to start container process: exec: '
                                   b'"%s": executable file not found in $PATH: unknown\r\n' % argv[0].encode())
        return ExecResult(r.exit_status, r.output)


# (task, actions) whose rewards InterCode's own get_reward and easylemur's must give alike, with
# easylemur's rewards after each action (a known-good trajectory ends at 1, a known-wrong one never does)
TRAJECTORIES = [
    ("fs1/0", ["find /testbed/dir2/subdir2 -type f -print0 | sort -z | xargs -r0 md5sum | md5sum"], [1.0]),
    ("fs1/0", ["md5sum /testbed/dir2/subdir2/*", "touch /testbed/x.txt"], [0.67, 0.39]),  # other output; a change
    ("fs1/2", ["cd /testbed", "touch dir1/abc.txt"], [0.72, 1.0]),  # created where the gold does: same content
    ("fs1/2", ["echo x > /testbed/dir1/abc.txt"], [0.67]),  # the same file, other content
    ("fs1/3", ["ls /testbed/dir3/subdir1/subsubdir1/tmp", "rm /testbed/dir3/subdir1/subsubdir1/tmp/tmp.txt"],
     [0.39, 1.0]),  # the gold deletes by age: the copies keep the setup script's modification times
    # git lists no empty folder: the gold's `mkdir -p` changes nothing InterCode sees, so any command
    # without output and without a file changed scores 1 (InterCode's reward, as it is)
    ("fs4/1", ["echo made", "true"], [0.67, 1.0]),
]


@needs_bwrap
def test_trajectories_score_as_intercodes_reward(task, sandbox, images, tmp_path):
    pytest.importorskip("sklearn")
    BashEnv = _intercode_bash_env(Path(task.files.root))
    for task_id, actions, expected in TRAJECTORIES:
        p = problem(task, task_id)
        image = images.get(p.fs)
        ours = BashEnvironment(image, task.texts, sandbox, p.query, p.gold)
        theirs = BashEnv.__new__(BashEnv)
        theirs.image_name, theirs.ctr_name_eval, theirs.container_name = "intercode-nl2bash", "eval", "agent"
        theirs.container, theirs.container_eval = Container(sandbox, image, False), Container(sandbox, image, True)
        theirs.logger, theirs.info, theirs.workdir = logging.getLogger("intercode-test"), {}, "/"
        theirs.observation, theirs.gold = p.query, p.gold
        got = []
        try:
            for action in actions:
                ours.execute(action)
                mine, info = ours.reward()
                theirs.exec_action(action)
                their, their_info = theirs.get_reward()
                assert (mine, info["reward"]) == (their, their_info["reward"]), (task_id, action)
                assert ours.observation == theirs.observation and ours.workdir == theirs.workdir
                got.append(mine)
        finally:
            ours.close()
            theirs.container.root.close()
            theirs.container_eval.root.close()
        assert got == expected, (task_id, got)


@needs_bwrap
def test_agent_cannot_reach_the_gold_or_the_checker(task, sandbox, images):
    p = problem(task, "fs1/2")  # the gold touches /testbed/dir1/abc.txt
    env = BashEnvironment(images.get(p.fs), task.texts, sandbox, p.query, p.gold)
    try:
        assert env.reward()[0] < 1  # the gold has run, on its own machine
        gold_root = env.gold_result()["root"].path
        looks = env.execute(f"ls /testbed/dir1; ls {gold_root} {task.files.root} 2>&1; "
                            "grep -rl -e abc.txt -e nl2bash / --exclude-dir=proc --exclude-dir=usr --exclude-dir=sys "
                            "--exclude-dir=dev 2>/dev/null; ls /proc | grep -c '^[0-9]'; cat /proc/1/environ; "
                            "cat /proc/net/dev | tail -n +3 | cut -d: -f1")[0]
        lines = looks.splitlines()
        assert "abc.txt" not in lines[:8] and "No such file or directory" in looks  # neither machine nor repository
        assert not any("nl2bash_fs" in line or "abc.txt" in line for line in lines)  # no task file, no gold command
        assert "Permission denied" in looks and lines[-1].strip() == "lo"  # pid 1 (the runner) is sealed; no network
        assert int([line for line in lines if line.isdigit()][-1]) <= 5  # only its own processes
    finally:
        env.close()


# ----------------------------------------------------------------------------- the protocol


class FakeMachine:
    """A machine for the protocol alone: each command's output is its text reversed; `goal` scores 1."""

    def __init__(self, query, goal):
        self.observation, self.goal, self.ran, self.max_bytes, self.cut = query, goal, [], 1 << 20, False

    def execute(self, action):
        self.ran.append(action)
        self.observation = action[::-1]
        return self.observation, True

    def reward(self):
        done = self.ran and self.ran[-1] == self.goal
        return (1.0 if done else 0.39), {"reward": {"answer_similarity": 0.33 if done else 0.0}}

    def too_big(self):
        return False

    def corrupt_gold(self):
        return ""


class Scripted:
    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, messages, stop):
        self.seen.append((messages, tuple(stop)))
        return self.replies[min(len(self.seen), len(self.replies)) - 1]


def test_protocol_as_the_fork_ran_lemur(task):
    p = problem(task, "fs1/0")
    t = task.texts
    chat = Scripted(["```bash\nls /testbed\n```<|im_end|>junk", "submit", "Sure:\n```bash\necho A\n```"])
    machine = FakeMachine(p.query, "never")
    rec = play(task, p, chat, machine, turns=10, dialogue_limit=7)
    assert rec["summary"]["turns_taken"] == 10 and rec["summary"]["max_reward"] == 0.39
    first, stops = chat.seen[0]
    assert stops == t.hf_stops and [m["role"] for m in first] == ["system", "user"]
    assert first[0]["content"] == t.hf_system + "\n" and first[1]["content"] == t.init_msg + "\n" + t.query_msg(p.query) + "\n"
    second = chat.seen[1][0]
    assert second[2] == {"role": "assistant", "content": "```bash\nls /testbed\n```\n"}
    assert second[3]["content"] == t.obs_msg("debtset/ sl", 0.39, p.query) + "\n"
    assert [len(m) for m, _ in chat.seen] == [2, 4, 6, 8, 9, 9, 9, 9, 9, 9]  # the first two and the last seven
    h = rec["turn_history"]
    assert h["actions"][:3] == ["ls /testbed", "submit", "echo a"]  # a fenced command is lower-cased
    assert h["observations"][1] == "debtset/ sl" and machine.ran[:2] == ["ls /testbed", "echo a"]  # submit: shown again
    assert rec["environment"] == "ic_bash" and rec["dataset"] == "./data/bash/nl2bash/nl2bash_fs_1.json"
    assert rec["task_id"] == 0 and len(rec["easylemur"]["reward_parts"]) == 10
    # a reward of 1 ends it; so does "skip" (after its reward); the parser's ValueError blocks it
    rec = play(task, p, Scripted(["ls", "```bash\nfind\n```"]), FakeMachine(p.query, "find"))
    assert rec["summary"] == {"max_reward": 1.0, "max_reward_idx": 1, "turns_taken": 2, "turns_max": 10}
    rec = play(task, p, Scripted(["skip"]), FakeMachine(p.query, "x"))
    assert rec["turn_history"]["observations"] == ["skipped"] and rec["turn_history"]["rewards"] == [0.39]
    rec = play(task, p, Scripted(["ls", "Command: ls"]), FakeMachine(p.query, "x"))
    assert rec["turn_history"]["actions"] == ["ls", "blocked"] and "blocked" in rec["easylemur"]

    def broken(messages, stop):
        raise RuntimeError("422")
    rec = play(task, p, broken, FakeMachine(p.query, "x"), turns=2)
    assert rec["turn_history"]["actions"] == ["", ""] and len(rec["easylemur"]["errors"]) == 2  # the fork's ""
    rec = play(task, p, broken, FakeMachine(p.query, "x"), policy="chat")
    assert rec["turn_history"]["actions"] == ["blocked"]  # InterCode's ChatGPTPolicy
    chat = Scripted(["```bash\nls\n```"])
    play(task, p, chat, FakeMachine(p.query, "x"), turns=3, policy="chat")
    assert [m["role"] for m in chat.seen[0][0]] == ["system", "user"] and chat.seen[0][0][0]["content"] == t.init_msg
    assert chat.seen[1][0][2] == {"role": "assistant", "content": "ls"}


@needs_bwrap
def test_the_suite_row(task, sandbox, tmp_path, monkeypatch):
    """The lemur suite's row through suite.run_row: InterCode's log files, the score, the skipped tasks."""
    from easylemur.eval.runs import suite

    golds = {p.query: p.gold for p in task.problems}
    monkeypatch.setattr(task_module, "on_path", lambda c: c not in ("cal", "ncal"))  # a host without cal
    monkeypatch.setattr(task_module, "FILE_SYSTEMS", (1, 4))  # the miniature's two

    class Client:
        def chat(self, messages, *, max_tokens, temperature=0.0, seed=0, stop=()):
            query = next(q for q in golds if f'"{q}"' in messages[1]["content"])
            return "```bash\n" + golds[query] + "\n```" if "PHP" not in query else "ls"

    spec = suite.load_suite("lemur")["tasks"]["intercode_bash"]
    args = types.SimpleNamespace(data_map={"intercode_bash": str(task.files.root)}, data_dir=None, limit=0, seed=0,
                                 concurrency=2, workers=1, turns=2)
    row = suite.run_row("intercode_bash", spec, types.SimpleNamespace(client=Client(), server=None), sandbox, args,
                        tmp_path)
    assert row["n"] == 6 and row["score"] == 5 / 6 and row["metric"] == "success@2" and row["policy"] == "lemur"
    assert sum(row["skipped_problems"].values()) == 2 and any("network (dig)" in k for k in row["skipped_problems"])
    log = json.loads((tmp_path / "intercode_bash" / "ic_bash_multiturn_2_turns_nl2bash_fs_1.json").read_text())
    assert sorted(log) == ["0", "1", "2", "3"] and log["1"]["turn_history"]["actions"] == ["ls", "ls"]
    assert log["0"]["summary"]["max_reward"] == 1.0 and log["0"]["environment"] == "ic_bash"
    assert (tmp_path / "intercode_bash" / "ic_bash_multiturn_2_turns_nl2bash_fs_4.json").is_file()


@needs_bwrap
def test_a_training_run_plays_it_as_the_suite_does(task, sandbox, monkeypatch):
    """eval.tasks=intercode_bash: training's eval (runs/training.py) plays InterCode's runner with
    Lemur's policy at eval.turns, leaving out and counting what the sandbox cannot run."""
    from easylemur.config import load_config
    from easylemur.eval.runs.training import TaskEvals

    load_config("configs/tiny_chat.py", ["eval.tasks=intercode_bash", "eval.every_tasks=2"])  # accepted in training
    golds = {p.query: p.gold for p in task.problems}
    monkeypatch.setattr(task_module, "on_path", lambda c: c not in ("cal", "ncal"))

    def chat(messages):  # the run's model: right for every task but the PHP one
        query = next(q for q in golds if f'"{q}"' in messages[1]["content"])
        return "```bash\n" + golds[query] + "\n```" if "PHP" not in query else "ls"

    evals = types.SimpleNamespace(sandbox=sandbox, e=types.SimpleNamespace(turns=2, batch_size=2))
    records, rates = TaskEvals._intercode(evals, task, chat)
    assert len(records) == 6 and rates["success@2"] == 5 / 6 and rates["skipped_problems"] == 2
    assert len(task.problems) == 8  # the task itself is left whole for the next eval
