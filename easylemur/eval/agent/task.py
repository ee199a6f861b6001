"""The contract of a multi-turn benchmark (the MINT / Lemur setting): its problems, what the
model is told, how an action runs in the sandbox and reads back, and how a proposal is judged."""

from __future__ import annotations

from typing import Generic, Sequence, Union

from easylemur.eval.agent.actions import clip, fenced
from easylemur.eval.agent.tools import python_cells
from easylemur.eval.api.task import P
from easylemur.eval.sandbox import Job, Program, ProgramResult, Sandbox


class AgentTask(Generic[P]):
    """A multi-turn task: its problems, what the model is told, how an action runs and how a
    proposal is judged. `judge` returns a sandbox Job/Program (run there) or a bool (decided
    on the host: a number compared)."""

    name = ""
    languages: tuple[str, ...] = ("python", "py", "python3")
    rules = ""

    def __init__(self, problems: Sequence[P]):
        self.problems: list[P] = list(problems)

    def instruction(self, p: P) -> str:
        raise NotImplementedError

    def action(self, p: P, cells: list[str], code: str, observation_chars: int) -> Program:
        return python_cells(cells + [code], observation_chars)

    def observe(self, result: ProgramResult, timeout: float) -> str:
        if result.result == "timed out":
            return clip(result.output) + f"\n[timed out after {timeout:g} s]"
        return result.output if result.output.strip() else "[the code ran and printed nothing]"

    def solution(self, p: P, content: str, cells: list[str]) -> str:
        """The answer to judge from a proposal's text."""
        code = fenced(content, self.languages)
        return (code if code is not None else content).strip("\n")

    def judge(self, p: P, answer: str) -> Union[Job, Program, bool]:
        raise NotImplementedError

    def sized(self, sandbox: Sandbox) -> Sandbox:
        """The sandbox these problems' actions and checks need: `sandbox`, or a copy with larger caps."""
        return sandbox
