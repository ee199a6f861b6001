"""GSM8K as MINT's multi-turn M-GSM8K: grade-school math answered with a number, Python at hand."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Optional, Union

from easylemur.eval.agent.task import AgentTask
from easylemur.eval.api import EvalDataError, read_jsonl


@dataclasses.dataclass(frozen=True)
class MathProblem:
    task_id: Any
    question: str
    answer: str  # the reference, a number as text


_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def as_number(text: str) -> Optional[float]:
    """The last number in `text` (thousands commas and a dollar sign allowed), or None."""
    found = _NUMBER.findall(text.replace("\\boxed", " "))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", "").replace("$", ""))
    except ValueError:
        return None


def numbers_equal(got: Optional[float], want: Optional[float]) -> bool:
    """Equal within 1e-4 relative (GSM8K's answers are integers; MATH-style ones may be decimals)."""
    if got is None or want is None:
        return False
    return abs(got - want) <= 1e-4 * max(1.0, abs(want))


class MGSM8K(AgentTask[MathProblem]):
    name = "m_gsm8k"
    rules = ("You may run Python to compute. Your solution must be the final answer as a number, in <solution>, "
             "e.g. <solution>42</solution>.")

    def instruction(self, p: MathProblem) -> str:
        return p.question

    def solution(self, p: MathProblem, content: str, cells: list[str]) -> str:
        return content.strip()

    def judge(self, p: MathProblem, answer: str) -> bool:
        return numbers_equal(as_number(answer), as_number(p.answer))


def load_gsm8k(path: Union[str, Path]) -> list[MathProblem]:
    """GSM8K's JSONL (`question`, `answer` ending in "#### <number>"), or MINT's processed rows
    (`id`, `prompt`, `reference`); .jsonl or .jsonl.gz; or the HF dataset `path` (e.g.
    "openai/gsm8k", its `main` config's test split) where a network exists."""
    rows: Any
    if Path(path).exists() or os.sep in str(path) or str(path).endswith((".jsonl", ".gz")):
        rows = read_jsonl(Path(path))
    else:
        try:
            import datasets

            ds = datasets.load_dataset(str(path), "main", split="test")
            rows = ((f"{path}:test:{i}", r) for i, r in enumerate(ds))
        except Exception as e:  # noqa: BLE001 - offline, or not a dataset: one line that says what to pass
            raise EvalDataError(f"GSM8K data {path!r}: not a file, and the HF dataset could not be loaded "
                                f"({type(e).__name__}); pass GSM8K's test.jsonl") from None
    out = []
    for where, row in rows:
        if "question" in row and "answer" in row:
            q, a, tid = row["question"], str(row["answer"]).split("####")[-1].strip(), f"gsm8k/{len(out)}"
        elif "prompt" in row and "reference" in row:
            q, a, tid = row["prompt"], str(row["reference"]), row.get("id", f"gsm8k/{len(out)}")
        else:
            raise EvalDataError(f"{where}: expected keys question and answer (GSM8K) or prompt and reference (MINT)")
        if as_number(a) is None:
            raise EvalDataError(f"{where}: the answer {a!r} is not a number")
        out.append(MathProblem(tid, str(q), a))
    if not out:
        raise EvalDataError(f"{path}: no problems")
    return out


def agent(data: Optional[str], variant: str = "", prompt_format: str = "base") -> MGSM8K:
    return MGSM8K(load_gsm8k(data))
