"""MINT's seven tasks (M-HumanEval, M-MBPP, M-GSM8K, M-MATH, M-TheoremQA, M-MMLU, M-HotpotQA):
each one's problems from MINT's `data/processed/<folder>/test_prompts.json` (MINT's subsets: 45,
91, 48, 100, 49, 76 and 43 problems), its task prompt and reference as MINT's task classes form
them, its in-context examples, its tools (MINT gives its reasoning tasks `wikipedia_search`),
and its solution check (`checks.py`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from easylemur.eval.api.jsonl import read_jsonl
from easylemur.eval.benchmarks.mint.files import MINT
from easylemur.eval.benchmarks.mint.texts import MintTexts, load_texts
from easylemur.eval.benchmarks.mint import checks
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    folder: str  # data/processed/<folder>/, and its results' folder in MINT's outputs
    task_type: str  # MINT's: code_generation or reasoning (its outputs' folder)
    check: str  # checks.judge's kind
    examples: str  # mint/tasks/in_context_examples/<examples>/
    prompt: str  # how MINT's task class forms the prompt: humaneval, mbpp, strip, theoremqa, as_is
    tools: tuple = ()


_WIKI = ("wikipedia_search",)
TASKS: dict[str, TaskSpec] = {  # by MINT's own names (its data folders); the registry names them m_<folder>
    "humaneval": TaskSpec("humaneval", "code_generation", "code", "humaneval", "humaneval"),
    "mbpp": TaskSpec("mbpp", "code_generation", "code", "mbpp", "mbpp"),
    "gsm8k": TaskSpec("gsm8k", "reasoning", "reasoning", "reasoning", "strip", _WIKI),
    "math": TaskSpec("math", "reasoning", "reasoning", "reasoning", "strip", _WIKI),
    "theoremqa": TaskSpec("theoremqa", "reasoning", "theoremqa", "reasoning", "theoremqa", _WIKI),
    "mmlu": TaskSpec("mmlu", "reasoning", "multiple_choice", "reasoning", "as_is", _WIKI),
    "hotpotqa": TaskSpec("hotpotqa", "reasoning", "reasoning", "reasoning", "strip", _WIKI),
}


@dataclasses.dataclass(frozen=True)
class MintProblem:
    task_id: Any  # MINT's `id`
    prompt: str  # what follows "Task:\n"
    reference: Any  # what the check compares with (as MINT's task class keeps it)
    answer_type: str = ""  # TheoremQA's
    options: Optional[dict] = None  # M-MMLU's {letter: text}
    record: Optional[dict] = dataclasses.field(default=None, compare=False, repr=False)  # the file's line


def _problem(spec: TaskSpec, texts: MintTexts, row: dict, where: str) -> MintProblem:
    try:
        prompt, ref = row["prompt"], row["reference"]
        tid = row["id"]
    except KeyError as e:
        raise PublishedFilesError(f"{where}: no key {e.args[0]!r} (expected id, prompt, reference)") from None
    if spec.prompt == "humaneval":
        return MintProblem(tid, texts.humaneval_prefix + prompt, ref, record=row)
    if spec.prompt == "mbpp":
        return MintProblem(tid, prompt.replace('"""', "").strip(), ref, record=row)
    if spec.prompt == "theoremqa":
        return MintProblem(tid, texts.theoremqa_prefix + prompt.strip(), ref, answer_type=row.get("answer_type") or "",
                           record=row)
    if spec.prompt == "as_is":  # multiple choice
        return MintProblem(tid, prompt, str(ref).strip().lower(), options=checks.options(prompt), record=row)
    return MintProblem(tid, prompt.strip(), str(ref).strip().lower(), record=row)


class MintTask:
    """One of MINT's tasks on one copy of its files."""

    plays_games = False  # its episodes play an environment (`environment`), which may count success at a step limit

    def __init__(self, folder: str, files: RepoFiles):
        self.name, self.spec = f"m_{folder}", TASKS[folder]
        self.texts = load_texts(files)
        rel = f"data/processed/{self.spec.folder}/test_prompts.json"
        self.problems = [_problem(self.spec, self.texts, row, where) for where, row in read_jsonl(files.path(rel))]
        self.skipped: list = []
        self.rules = "pinned"  # checks.RULES: MINT's checks at the pinned commit, or as the paper's runs were scored

    def first_message(self, p: MintProblem, max_steps: int, max_proposals: int, feedback: bool) -> str:
        """MINT's one user message: instructions, turn budget, tools, in-context example, task."""
        return self.texts.template.format(
            max_total_steps=max_steps, max_propose_solution=max_proposals,
            tool_desc=self.tool_description(),
            in_context_example=self.texts.example(self.examples_folder(p), feedback),
            task_prompt=self.texts.task_header + p.prompt)

    def examples_folder(self, p: MintProblem) -> str:
        """The folder of `p`'s in-context examples (one per task; ALFWorld's per task type)."""
        return self.spec.examples

    def tool_description(self) -> str:
        return self.texts.tool_description(self.spec.tools)

    def environment(self, p: MintProblem) -> Optional[tuple[MintProblem, Any, dict]]:
        """For a task played in an environment (MINT's ALFWorld): (the problem as the environment
        states it, the environment, its tools); None for a task judged by its answer."""
        return None

    def judge(self, p: MintProblem, solution: str) -> Any:
        return checks.judge(self.spec.check, p, solution, self.rules)

    def record(self, p: MintProblem) -> dict:
        """The task as MINT's results.jsonl writes it."""
        meta = {"options": p.options} if p.options is not None else {}
        return {"task_name": self.spec.examples if self.spec.task_type == "code_generation" else "reasoning",
                "task_id": p.task_id, "prompt": p.prompt, "reference": p.reference, "metadata": meta}


def build(folder: str, data: Optional[str], variant: str = "", prompt_format: str = "base") -> MintTask:
    """The registry's factory (its rows say "...mint.tasks:build:<folder>"): MINT's task `folder`
    from the copy at `data` (None: the fetch cache)."""
    return MintTask(folder, RepoFiles.locate(MINT, data))
