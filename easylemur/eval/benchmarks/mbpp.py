"""MBPP (its test split, task ids 11-510), single-turn: problems, prompts per format, stops, code
extraction, and the job that checks a completion (docs/design.md, "Decoding and evaluation").
MINT's multi-turn M-MBPP is `mint/` (MINT's own 91-problem subset and protocol).

Prompt formats:
- `base`: MBPP's 3-shot prompt (task ids 2, 3, 4) "You are an expert Python programmer, and here
  is your task: {text} Your code should pass these tests:\\n\\n{tests}\\n[BEGIN]\\n{code}\\n[DONE]",
  ending in "[BEGIN]\\n".
- `chatml` (Lemur-Chat): the code is asked for between [PYTHON] and [/PYTHON] and the reply is
  opened with "[PYTHON]\\n".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from easylemur.eval.api import EvalDataError, MissingData, Problem, Prompt, Task, read_jsonl
from easylemur.eval.sandbox import Job

MBPP_TEST_IDS = range(11, 511)
MBPP_FEWSHOT_IDS = (2, 3, 4)


def _mbpp_block(p: Problem) -> str:
    return (f"You are an expert Python programmer, and here is your task: {p.text} "
            f"Your code should pass these tests:\n\n{p.tests}\n")


class MBPP(Task[Problem]):
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


def load_mbpp(source: str | Path) -> tuple[list[Problem], list[Problem]]:
    """(test problems: task ids 11-510, few-shot problems 2-4) from a JSONL file in MBPP's
    format (`task_id`, `text`, `code`, `test_list`, optional `test_setup_code`), or from the
    HF dataset `source` (e.g. "mbpp") where a network exists."""
    path = Path(source)
    if path.is_file():
        rows = list(read_jsonl(path))
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


def _data(data: Optional[str], name: str) -> str:
    if not data:
        raise MissingData(f"{name} needs its data: MBPP's JSONL in its published format, or an HF dataset name such as "
                          f"mbpp (pass --data {name}=PATH)")
    return data


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> MBPP:
    test, fewshot = load_mbpp(_data(data, "mbpp"))
    return MBPP(test, prompt_format, fewshot)
