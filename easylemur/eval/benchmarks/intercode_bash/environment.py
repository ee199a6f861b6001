"""One InterCode-Bash episode's machines, as InterCode's `BashEnv` holds its two containers: the
agent's (a fresh copy of the task's file system, `sandbox.RootFS`, for the whole episode) and the
gold command's (another fresh copy, where the gold command runs once, the first time a reward is
asked; the agent's sandbox never sees it, its command or its output).

An action runs as `BashEnv.exec_action` runs it: the command line is `clean_cmd(action)`
(`/bin/bash -c "ACTION"`) split the way docker-py splits a string command (`shlex.split`: so
double quotes inside the action pair with the wrapper's and vanish, as in InterCode), in the
episode's working directory; an action starting with "cd" becomes `cd <path>` with the path
resolved as `BashEnv.simplify_path` resolves it (from the first "cd " on), run from `/`, and
the working directory follows it when it exits 0. The observation is the output (stdout and
stderr as they came) decoded as UTF-8; past the time limit (TIMEOUT_DURATION, 10 s) it is
InterCode's "Command timed out", and where the command cannot run (unbalanced quotes, output that
is not UTF-8) its "Malformed command"; both count as not executed, as a non-zero exit status does.
Environment variables do not last from one action to the next (each is its own process), the
file system does, and nothing an action leaves running outlives it (InterCode's container kept
such processes).

The reward (`reward.py`) compares `git status --short` of both machines (run as InterCode runs it:
`clean_cmd(GIT_STATUS_SCRIPT)` from `/`), `md5sum PATH` of the files both changed (a command of
its own, not through the shell, as docker-py runs InterCode's hash command), and the agent's last
observation with the gold command's output.
"""

from __future__ import annotations

import shlex
from typing import Any, Optional

from easylemur.eval.benchmarks.intercode_bash.image import HOSTNAME, Image
from easylemur.eval.benchmarks.intercode_bash.reward import CHECKED, hashed_with_md5sum, parse_status, reward
from easylemur.eval.benchmarks.intercode_bash.texts import BashTexts
from easylemur.eval.sandbox import Sandbox
from easylemur.eval.sandbox.rootfs import Command, RootFS, ShellResult

GOLD_SECONDS = 60.0  # the gold command's time limit (InterCode gives it none)
INSPECT_SECONDS = 30.0  # git status and md5sum
OUTPUT_BYTES = 1 << 20  # an observation kept whole up to this (InterCode kept all of it)
_UNSPLIT = b"\0shlex"  # what a command line shlex cannot split "prints" (InterCode's hash command raised there)


def simplify_path(current: str, changed: str) -> str:
    """BashEnv.simplify_path: `changed` resolved against `current` ("..", ".", repeated slashes)."""
    if not changed:
        return current
    if changed[0] == "/":
        current = ""
    path: list[str] = []
    for segment in (current + "/" + changed).split("/"):
        if segment == "..":
            if path:
                path.pop()
        elif segment and segment != ".":
            path.append(segment)
    return "/" + "/".join(path)


class Shell:
    """The agent's machine (`agent`, a RootFS) driven as BashEnv.exec_action drives its container
    (see the module): `observation` is its last observation (`query` before any action, as
    InterCode's reset leaves it), `workdir` its working directory. `command_line(action)` is the
    command line the container is given (BashEnv.clean_cmd; InterCode-CTF's differs); `after()`
    the commands run in the same sandbox after each action, whose results go to `took(results)`."""

    def __init__(self, agent: RootFS, env: tuple, texts: Any, query: str, max_bytes: int):
        self.agent, self.env, self.texts, self.max_bytes = agent, env, texts, int(max_bytes)
        self.observation: str = query
        self.workdir = "/"
        self.cut = False  # an observation past OUTPUT_BYTES was cut

    def command_line(self, action: str) -> str:
        return self.texts.clean_cmd(action)

    def after(self) -> list[Command]:
        return []

    def took(self, results: list[ShellResult]) -> None:
        pass

    def _command(self, argv: list, cwd: str = "/", timeout: Optional[float] = None) -> Command:
        return Command(tuple(argv), cwd=cwd, env=self.env, timeout=float(timeout or self.texts.timeout),
                       output_bytes=OUTPUT_BYTES)

    def execute(self, action: str) -> tuple[str, bool]:
        """Runs one action on the agent's machine: (observation, executed)."""
        is_cd = action.startswith("cd")
        new_path = ""
        try:
            if is_cd:
                new_path = simplify_path(self.workdir, action[action.index("cd ") + 3:].strip())
                action = f"cd {new_path}"
            argv = shlex.split(self.command_line(action))
        except ValueError:  # "cdx" (InterCode's runner stopped there), or quotes shlex cannot pair
            self.observation = self.texts.malformed
            return self.observation, False
        run, *rest = self.agent.run([self._command(argv, "/" if is_cd else self.workdir), *self.after()])
        self.took(rest)
        if run.timed_out:
            self.observation, executed = self.texts.timed_out, False
        elif run.exit_status is None and run.failure.startswith("chdir"):
            self.observation, executed = f"chdir to cwd ({self.workdir!r}) failed: {run.failure[7:]}", False
        else:
            try:
                self.observation, executed = run.output.decode("utf-8"), run.exit_status == 0
            except UnicodeDecodeError:
                self.observation, executed = self.texts.malformed, False
            self.cut = self.cut or run.left_out > 0
        if is_cd and executed:
            self.workdir = new_path
        return self.observation, executed

    def too_big(self) -> bool:
        """Whether the agent's machine grew past max_bytes (the episode then ends)."""
        return self.agent.size() > self.max_bytes


class BashEnvironment(Shell):
    """The agent's machine and the gold command's, for one task (see the module)."""

    def __init__(self, image: Image, texts: BashTexts, sandbox: Sandbox, query: str, gold: str, *,
                 gold_seconds: float = GOLD_SECONDS, max_bytes: int = 256 << 20):
        super().__init__(RootFS(sandbox, image.template.path, hostname=HOSTNAME, max_bytes=max_bytes), image.env,
                         texts, query, max_bytes)
        self.image, self.sandbox, self.gold = image, sandbox, gold
        self.gold_seconds = float(gold_seconds)
        self._status: Optional[str] = None  # the agent's git status since its last action
        self._gold: Optional[dict] = None
        self._gold_hashes: dict[str, bytes] = {}

    def _status_command(self) -> Command:
        return self._command(shlex.split(self.texts.clean_cmd(self.texts.status_script)), timeout=INSPECT_SECONDS)

    def after(self) -> list[Command]:
        return [self._status_command()]  # the git status, taken in the same sandbox after the action

    def took(self, results: list[ShellResult]) -> None:
        self._status = self._text(results[0])

    @staticmethod
    def _text(result: ShellResult) -> str:
        return result.output.decode("utf-8", "replace")

    def gold_result(self) -> dict:
        """The gold command run once on its own fresh copy: {"observation": its output (None where
        it could not run: InterCode's corrupt gold), "status": git status, "root": the machine}."""
        if self._gold is None:
            root = RootFS(self.sandbox, self.image.template.path, hostname=HOSTNAME, max_bytes=self.max_bytes)
            out: dict = {"root": root, "observation": None, "corrupt": True}
            try:
                argv = shlex.split(self.texts.clean_cmd(self.gold))
            except ValueError:
                out["status"] = self._text(root.run([self._status_command()])[0])
            else:
                run, status = root.run([self._command(argv, timeout=self.gold_seconds), self._status_command()])
                out["status"] = self._text(status)
                if run.failure == "":  # it ran and ended by itself (its exit status does not matter)
                    try:
                        out["observation"], out["corrupt"] = run.output.decode("utf-8"), False
                    except UnicodeDecodeError:
                        pass
                out["failure"] = run.failure
            self._gold = out
        return self._gold

    def corrupt_gold(self) -> str:
        """Why the gold command gave no output to compare ("" when it did, or has not run yet)."""
        if self._gold is None or not self._gold["corrupt"]:
            return ""
        return self._gold.get("failure") or "its command line cannot be split, or its output is not UTF-8"

    def _hashes(self, root: RootFS, paths: list[str]) -> dict[str, bytes]:
        """`md5sum PATH` output per path, each a command of its own from `/` (as docker-py runs it)."""
        commands, order = [], []
        out = {}
        for p in paths:
            try:
                commands.append(self._command(shlex.split(f"md5sum {p}"), timeout=INSPECT_SECONDS))
                order.append(p)
            except ValueError:
                out[p] = _UNSPLIT
        for p, r in zip(order, root.run(commands) if commands else []):
            out[p] = r.output if r.exit_status is not None or not r.failure else b"\0" + r.failure.encode()
        return out

    def reward(self) -> tuple[float, dict]:
        """InterCode's reward of the agent's machine and last observation now (`reward.py`)."""
        gold = self.gold_result()
        if self._status is None:
            self._status = self._text(self.agent.run([self._status_command()])[0])
        both = sorted({p for p, s in set(parse_status(self._status)) & set(parse_status(gold["status"]))
                       if s in CHECKED and hashed_with_md5sum(p)})
        missing = [p for p in both if p not in self._gold_hashes]
        if missing:
            self._gold_hashes.update(self._hashes(gold["root"], missing))
        mine = self._hashes(self.agent, both) if both else {}
        return reward(self._status, gold["status"], self.observation, gold["observation"],
                      lambda path: not hashed_with_md5sum(path) or mine[path] == self._gold_hashes[path])

    def close(self) -> None:
        self.agent.close()
        if self._gold is not None:
            self._gold["root"].close()
