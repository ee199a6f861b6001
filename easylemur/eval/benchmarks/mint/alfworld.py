"""MINT's ALFWorld task (`m_alfworld`): 134 household text games played through MINT's ALFWorld
tools, as MINT's `AlfWorldTask`, `AlfworldEnv` and `mint/tools/alfworld.py` run them.

Everything the model is told comes from MINT's files (`MintTask.first_message`): the games are
MINT's copy of ALFWorld's `valid_unseen` split (`data/processed/alfworld/json_2.1.1/`, in the
order of its `gamefile_id.txt`), the task prompt is MINT's "Interact with a household..." line
and the game's first observation, the in-context example is the task type's
(`mint/tasks/in_context_examples/alfworld/<type>/`, the type from MINT's `PREFIXES`), and the
eleven tools (`goto`, `put`, `take_from`, ...) with their signatures, descriptions and the game
command each sends are read from `mint/tools/alfworld.py` (`read_tools`).

A game is played on the host (`Game`, each in a process of its own: `alfworld_game.py`): the
engine is ALFWorld's (the `alfworld` and `textworld` packages: `pip install -e ".[eval]"`),
built as ALFWorld's `AlfredTWEnv.init_env` builds it for an evaluation split (its demangler
without shuffling, the step limit of MINT's `base_config.yaml`: 50 game commands, after which
every command repeats the last observation), one fresh game per episode. The interpreter in the
sandbox holds only stubs: each tool call asks the host to run one command, so a cell cannot reach
the game's files, its PDDL or its win condition. A command's observation drops the "You arrive
at loc N. " prefix, as MINT's `process_ob`.

Success is MINT's: after each action the episode is won once any command so far ended the game
(`done`); a proposed solution is judged by the same test. TextWorld also ends a game at its
step limit, so MINT counts an episode that spends 50 commands as solved; easylemur scores it as
MINT does and records each success the game did not report as won (`easylemur.won`: false),
counted in the row (`step_limit_successes`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError, RunError
from easylemur.eval.api.task import MissingData
from easylemur.eval.benchmarks.mint.files import MINT
from easylemur.eval.benchmarks.mint.tasks import MintProblem, MintTask, TaskSpec
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned, fstrings, scope, strings, yaml_mapping
from easylemur.eval.sandbox import HostTool

GAMES = "data/processed/alfworld"
TASK_FILE = "mint/tasks/alfworld.py"
TOOLS_FILE = "mint/tools/alfworld.py"
SPEC = TaskSpec("alfworld", "decision_making", "alfworld", "alfworld", "alfworld")


@dataclasses.dataclass(frozen=True)
class AlfworldTool:
    """One of MINT's ALFWorld tools: how the model is told of it and the game command it sends."""

    name: str
    signature: str
    description: str
    params: tuple[str, ...]
    command: str  # str.format template over params, e.g. "put {object} in/on {receptacle}"


def _value(node: ast.AST, env: dict, where: str) -> Any:
    """A string expression of MINT's tool file: literals, names bound before, `.format(...)`, `.lstrip()`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        base = _value(node.func.value, env, where)
        if node.func.attr == "format":
            return base.format(**{k.arg: _value(k.value, env, where) for k in node.keywords})
        if node.func.attr in ("lstrip", "strip") and not node.keywords:
            return getattr(base, node.func.attr)()
    raise PublishedFilesError(f"{where}: line {getattr(node, 'lineno', '?')}: not a string expression of the pinned "
                              "commit's form")


def _template(node: ast.JoinedStr, where: str) -> str:
    out = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            out.append(str(v.value).replace("{", "{{").replace("}", "}}"))
        elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.format_spec is None \
                and v.conversion == -1:
            out.append("{" + v.value.id + "}")
        else:
            raise PublishedFilesError(f"{where}: line {node.lineno}: a command f-string of another form")
    return "".join(out)


def _prompt_head(tree: ast.AST, where: str) -> str:
    """The text AlfWorldTask.load_tasks puts before a game's first observation (`prompt = "..." + ob`)."""
    heads = [n.value.left.value for n in ast.walk(scope(tree, "AlfWorldTask.load_tasks", where))
             if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "prompt" for t in n.targets)
             and isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add)
             and isinstance(n.value.left, ast.Constant) and isinstance(n.value.left.value, str)]
    if len(heads) != 1:
        raise PublishedFilesError(f'{where}: AlfWorldTask.load_tasks has {len(heads)} `prompt = "..." + ob` lines, '
                                  "the pinned commit one")
    return heads[0]


def read_tools(tree: ast.Module, where: str) -> tuple[AlfworldTool, ...]:
    """MINT's ALFWorld tools (`mint/tools/alfworld.py`'s syntax tree) in the order of its
    ALFWORLD_TOOL_CLS (the order the model is told them)."""
    env: dict = {}
    for node in tree.body:  # the module's string templates
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = _value(node.value, env, where)
            except PublishedFilesError:
                pass
    order = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", "") == "ALFWORLD_TOOL_CLS" for t in n.targets)), None)
    if not isinstance(order, ast.List) or not all(isinstance(e, ast.Name) for e in order.elts):
        raise PublishedFilesError(f"{where}: no ALFWORLD_TOOL_CLS list of classes (the pinned commit has one)")
    tools = []
    for cls_name in (e.id for e in order.elts):  # type: ignore[attr-defined]
        cls = scope(tree, cls_name, where)
        fields = dict(env)
        for node in getattr(cls, "body", []):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                fields[node.targets[0].id] = _value(node.value, fields, where)
        call = scope(tree, f"{cls_name}.__call__", where)
        params = tuple(a.arg for a in call.args.args[1:])  # type: ignore[attr-defined]
        commands = fstrings(tree, where, f"{cls_name}.__call__")
        if len(commands) != 1:
            raise PublishedFilesError(f"{where}: {cls_name}.__call__ sends {len(commands)} commands, the pinned commit one")
        command = _template(commands[0], where)
        try:
            command.format(**{p: "" for p in params})
        except (KeyError, IndexError):
            raise PublishedFilesError(f"{where}: {cls_name}'s command names a value that is not a parameter") from None
        tools.append(AlfworldTool(fields["name"], fields["signature"], fields["description"], params, command))
    return tuple(tools)


class Game:
    """One ALFWorld game, played in a process of its own (`alfworld_game.py`, which builds it as
    ALFWorld's AlfredTWEnv.init_env builds an evaluation game); `step(command)` is MINT's
    AlfWorldTool.step. One episode's thread plays it."""

    def __init__(self, gamefile: Path, max_steps: int, arrive: tuple[str, str]):
        self.arrive = arrive
        self.done: list[tuple[bool, bool]] = []  # (done, won) after each command
        self.proc = subprocess.Popen([sys.executable, "-m", "easylemur.eval.benchmarks.mint.alfworld_game", str(gamefile),
                                      str(max_steps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=tempfile.TemporaryFile(), text=True, encoding="utf-8")
        first = self._read()["observation"]
        # MINT's task prompt drops the welcome banner: the paragraphs after the first
        self.first_observation = "\n".join(first.split("\n\n")[1:])

    def _read(self) -> dict:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.wait()
            lines: list = []
            if self.proc.stderr is not None:
                self.proc.stderr.seek(0)
                lines = self.proc.stderr.read().decode("utf-8", "replace").strip().splitlines()  # type: ignore
            raise RunError(f"the ALFWorld game's process ended (exit {self.proc.returncode}): "
                           f"{lines[-1] if lines else 'no message'}")
        return json.loads(line)

    def step(self, command: str) -> str:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"command": command}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # _read says why the process ended
        answer = self._read()
        ob = answer["observation"]
        prefix, end = self.arrive
        if ob.startswith(prefix):  # MINT's process_ob: "You arrive at loc 12. On the desk 1, ..." -> "On the desk 1, ..."
            ob = ob[ob.find(end) + len(end):]
        self.done.append((bool(answer["done"]), bool(answer["won"])))
        return ob

    def success(self) -> bool:
        """MINT's check: some command ended the game."""
        return any(d for d, _ in self.done)

    def won(self) -> bool:
        return any(w for _, w in self.done)

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class AlfworldTask(MintTask):
    """MINT's ALFWorld task on one copy of MINT's files (the module's docstring)."""

    plays_games = True

    def __init__(self, files: RepoFiles):
        missing = [m for m in ("textworld", "alfworld") if importlib.util.find_spec(m) is None]
        if missing:
            raise MissingData(f"m_alfworld needs ALFWorld's engine (no {' or '.join(missing)} here): pip install "
                              "alfworld, or pip install -e '.[eval]'")
        self.name, self.spec, self.files = "m_alfworld", SPEC, files
        from easylemur.eval.benchmarks.mint.texts import load_texts
        self.texts = load_texts(files)
        self.rules = "pinned"
        self.skipped: list = []
        tree, where = files.tree(TASK_FILE)
        self.prefixes: dict = assigned(tree, where, "", "PREFIXES")
        self.prompt_head = _prompt_head(tree, where)
        tools_tree, tools_where = files.tree(TOOLS_FILE)
        self.tools = read_tools(tools_tree, tools_where)
        arrive = strings(tools_tree, tools_where, "process_ob")  # the prefix, and where it ends
        if len(arrive) != 2:
            raise PublishedFilesError(f"{tools_where}: process_ob has {len(arrive)} strings, the pinned commit 2")
        self.arrive = (arrive[0], arrive[1])
        config = yaml_mapping(files.text(f"{GAMES}/base_config.yaml"), files.where(f"{GAMES}/base_config.yaml"))
        try:
            method = config["general"]["training_method"]
            self.max_game_steps = int(config[method]["training"]["max_nb_steps_per_episode"])
        except (KeyError, TypeError, ValueError):
            raise PublishedFilesError(f"{files.where(GAMES + '/base_config.yaml')}: no "
                                      "<training_method>.training.max_nb_steps_per_episode") from None
        ids = [line.strip() for line in files.text(f"{GAMES}/gamefile_id.txt").splitlines() if line.strip()]
        self.problems = [self._problem(i) for i in ids]

    def _problem(self, game_id: str) -> MintProblem:
        kind = next((v for k, v in self.prefixes.items() if game_id.startswith(k)), None)
        if kind is None:
            raise PublishedFilesError(f"{self.files.where(GAMES + '/gamefile_id.txt')}: game {game_id!r} is of no task "
                                      f"type of MINT's PREFIXES")
        return MintProblem(game_id, "", None, record={"task_type": kind})

    def examples_folder(self, p: MintProblem) -> str:
        return f"alfworld/{p.record['task_type']}"  # type: ignore[index]

    def tool_description(self) -> str:
        return self.texts.tool_lines([(t.signature, t.description) for t in self.tools])

    def environment(self, p: MintProblem) -> tuple[MintProblem, "Game", dict]:
        """A fresh game for problem `p`: the problem with its prompt and reference, the game, the tools."""
        game_dir = f"{GAMES}/json_2.1.1/valid_unseen/{p.task_id}"
        reference = self.files.text(f"{game_dir}/gt_traj.txt")  # read first: a missing file leaves no game behind
        game = Game(self.files.path(f"{game_dir}/game.tw-pddl"), self.max_game_steps, self.arrive)
        p = dataclasses.replace(p, prompt=(self.prompt_head + game.first_observation).strip(), reference=reference)
        tools = {t.name: HostTool(lambda *args, t=t: game.step(t.command.format(**dict(zip(t.params, args)))),
                                  t.params, formats=True) for t in self.tools}
        return p, game, tools

    def judge(self, p: MintProblem, solution: str) -> Any:
        raise InputError("m_alfworld is judged by its game (Episode), not by a solution's text")

    def record(self, p: MintProblem) -> dict:
        kind = p.record["task_type"]  # type: ignore[index]
        return {"task_name": f"alfworld/{kind}", "task_id": p.task_id, "prompt": p.prompt, "reference": p.reference,
                "metadata": {"task_type": kind}}


def build(data: Optional[str], variant: str = "", prompt_format: str = "base") -> AlfworldTask:
    """The registry's factory: MINT's ALFWorld task from the copy at `data` (None: the fetch cache)."""
    return AlfworldTask(RepoFiles.locate(MINT, data))
