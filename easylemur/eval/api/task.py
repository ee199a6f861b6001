"""The contract every single-turn benchmark implements: its problems, the prompt of each in a
prompt format, the stops, the code extracted from a completion, and the sandbox job that judges
it (docs/design.md, "Decoding and evaluation"). Multi-turn benchmarks implement the agent's
contract (`eval/agent/task.py`) over the same problems."""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, Sequence, TypeVar, Union

from easylemur.errors import InputError
from easylemur.eval.sandbox import Job, Program, Sandbox

FORMATS = ("base", "chatml")


class EvalDataError(InputError):
    """A benchmark's data is malformed: the message names the file and line (or key)."""


class MissingData(InputError):
    """A benchmark's data is not here: the suite marks its row skipped with this message."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """A code problem of HumanEval's or MBPP's shape (other benchmarks bring their own)."""

    task_id: Any  # "HumanEval/0", or MBPP's int
    text: str  # HumanEval: the prompt (signature + docstring); MBPP: the task description
    tests: str  # HumanEval: its `check` function; MBPP: the assert lines
    entry_point: str = ""
    setup: str = ""  # MBPP test_setup_code
    solution: str = ""  # HumanEval canonical_solution (a continuation of the prompt); MBPP code


@dataclasses.dataclass(frozen=True)
class Prompt:
    """What to feed the model: `text` for base models, or `messages` + an open assistant turn
    starting with `assistant_prefix` for chat models."""

    text: str = ""
    messages: tuple = ()
    assistant_prefix: str = ""


P = TypeVar("P")  # a benchmark's problem type: it has a `task_id`


class Task(Generic[P]):
    """A single-turn benchmark over problems of type P. `skipped` holds the problems the sandbox
    cannot judge here, with the reason (counted in the results, never scored)."""

    name = ""

    def __init__(self, problems: Sequence[P], prompt_format: str = "base"):
        if prompt_format not in FORMATS:
            raise InputError(f"--prompt-format {prompt_format!r}: expected one of {', '.join(FORMATS)}")
        self.problems: list[P] = list(problems)
        self.prompt_format = prompt_format
        self.skipped: list[tuple[P, str]] = []

    def prompt(self, p: P) -> Prompt:
        raise NotImplementedError

    def stops(self) -> tuple[str, ...]:
        raise NotImplementedError

    def extract(self, p: P, completion: str) -> str:
        """The code to check, from the model's raw completion (already cut at the stops)."""
        raise NotImplementedError

    def program(self, p: P, code: str) -> Union[Job, Program]:
        """The sandbox job: `code` is the untrusted part; the dataset's tests are trusted."""
        raise NotImplementedError

    def sized(self, sandbox: Sandbox) -> Sandbox:
        """The sandbox these problems' programs need: `sandbox`, or a copy with larger caps."""
        return sandbox

    def skip_counts(self) -> dict[str, int]:
        """How many problems were skipped, per reason."""
        counts: dict[str, int] = {}
        for _, why in self.skipped:
            counts[why] = counts.get(why, 0) + 1
        return counts
