"""RoboCodeGen (Code as Policies' robot code-generation benchmark: 37 functions against numpy,
shapely and a perception API, each judged by the notebook's own test), single-turn as the
notebook runs it, and with execution feedback through the agent engine (`eval/agent/`).

Single-turn (`robocodegen`, pass@1): the notebook's flat code generation (`lmp_fgen_batch` with
`recurse=False`) with its flat prompt: the completion prompt is `prompt_f_gen_flat`, a newline and
`# define function: {f_sig}.`; the completion is cut at the notebook's stop tokens
(`# define function:`, `# example:`) and judged as it is, unstripped (the batch path does not
strip it). With `chatml` the same prompt is the user's turn ("Complete the following python
code.") and the assistant's turn, opened with it, is continued, as Lemur's HumanEval chat prompt.

With execution feedback (`robocodegen_agent`): the episode of the agent engine (`eval/agent/`,
its turns, proposals and feedback): the model is shown the same prompt and query, may run code
in <execute> (a Python whose namespace is the generated code's: the notebook's context and
lookups, never its references) and proposes the function in <solution>, which is judged as a
completion is. Lemur's harness for this setting is not published (docs/design.md, RoboCodeGen).

Judging: a sealed sandbox Program per completion (`seal/`): the notebook's problems cell makes the
test inputs (numpy seeded with `seed`, the same in every stage) before the candidate's code runs
and is gone when it does; the notebook's `exec_safe` makes the function; its results cross as data
to the judge, which runs the notebook's `eval_test` with the problem's reference and `test_equiv`."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence

from easylemur.eval.agent.task import AgentTask
from easylemur.eval.agent.tools import python_cells
from easylemur.eval.api import MissingData, Prompt, Task
from easylemur.eval.benchmarks.robocodegen import seal
from easylemur.eval.benchmarks.robocodegen.notebook import CapNotebook, RcgProblem, load_notebook
from easylemur.eval.benchmarks.robocodegen.seal.common import (CODE, CONTEXT, HARNESS, MALFORMED, MISSING,
                                                              PROBLEMS, RAISED, SPEC, UNDEFINED)
from easylemur.eval.sandbox import PYTHON, Judge, Program, ProgramResult, importable, new_marker

LIBS = ("numpy", "shapely")  # what the notebook's problems and the generated code use (its pip install: numpy, shapely)
SEED = 0  # numpy's seed before the problems cell draws its test inputs (the notebook draws them unseeded)
ENV = (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
       ("PYTHONDONTWRITEBYTECODE", "1"))
# the judge's exit statuses, as its failures read in the results ("failed: the tests exited with status N")
REASONS = {f"failed: the tests exited with status {s}": why for s, why in (
    (1, "wrong result (the notebook's test said no, or raised)"), (UNDEFINED, "no function made (exec_safe)"),
    (RAISED, "the function raised on a test input"), (MISSING, "the candidate's stage ended early"),
    (MALFORMED, "malformed values"))}
PREPARE = f"from {seal.PACKAGE}.candidate import prepare\nglobals().update(prepare())\n"
CHAT_USER = "Complete the following python code.\n\n\n{prompt}"
CHAT_PREFIX = "Here is the completed code:\n\n\n{prompt}"


def sealed_program(nb: CapNotebook, p: RcgProblem, code: str, seed: int = SEED) -> Program:
    """The sandbox program that judges completion `code` of `p` (seal/'s docstring)."""
    marker = new_marker()
    spec = json.dumps({"f_name": p.f_name, "seed": seed, "lookups": nb.lookups})
    judge = Judge(files=seal.files(("judge", "common")) + ((PROBLEMS, nb.problems_source), (HARNESS, nb.judge_harness)),
                  steps=((PYTHON, "-B", "-m", f"{seal.PACKAGE}.judge", p.f_name, str(seed), marker),),
                  end_marker=marker, env=ENV)
    return Program(files=_stage(nb, spec) + ((CODE, code),),
                   steps=((PYTHON, "-B", "-m", f"{seal.PACKAGE}.candidate"),), env=ENV,
                   libs=importable(LIBS), judge=judge)


def action_program(nb: CapNotebook, cells: Sequence[str], observation_chars: int, seed: int = SEED) -> Program:
    """An agent's action: the agent's Python tool (`python_cells`) whose first, silent cell makes
    the generated code's namespace (`seal/candidate.py`'s `prepare`) for `cells`."""
    spec = json.dumps({"f_name": "", "seed": seed, "lookups": nb.lookups})
    tool = python_cells([PREPARE, *cells], observation_chars)
    return dataclasses.replace(tool, files=tool.files + _stage(nb, spec), libs=importable(LIBS))


def _stage(nb: CapNotebook, spec: str) -> tuple:
    return seal.files(("inputs", "common", "candidate")) + (
        (PROBLEMS, nb.problems_source), (CONTEXT, nb.context), (HARNESS, nb.candidate_harness), (SPEC, spec))


def failure_counts(results: Sequence[str]) -> dict[str, int]:
    """How many results failed for each reason of `REASONS` (the rest under their own wording)."""
    counts: dict[str, int] = {}
    for r in results:
        if r != "passed":
            counts[REASONS.get(r, r)] = counts.get(REASONS.get(r, r), 0) + 1
    return counts


class RoboCodeGen(Task[RcgProblem]):
    name = "robocodegen"

    def __init__(self, notebook: CapNotebook, prompt_format: str = "base", seed: int = SEED):
        super().__init__(notebook.problems, prompt_format)
        self.notebook, self.seed = notebook, seed

    def text(self, p: RcgProblem) -> str:
        """The notebook's completion prompt of `p`: the flat prompt, then its query."""
        return self.notebook.prompt(self.notebook.prompt_flat, self.notebook.query(p.f_sig))

    def prompt(self, p: RcgProblem) -> Prompt:
        text = self.text(p)
        if self.prompt_format == "base":
            return Prompt(text=text)
        return Prompt(messages=({"role": "user", "content": CHAT_USER.format(prompt=text)},),
                      assistant_prefix=CHAT_PREFIX.format(prompt=text))

    def stops(self) -> tuple[str, ...]:
        return self.notebook.stops + (("\n```",) if self.prompt_format == "chatml" else ())

    def extract(self, p: RcgProblem, completion: str) -> str:
        for stop in self.stops():  # again: a samples file's completion may not be cut yet
            completion = completion.split(stop)[0]
        return completion

    def program(self, p: RcgProblem, code: str) -> Program:
        return sealed_program(self.notebook, p, code, self.seed)


class RoboCodeGenAgent(AgentTask[RcgProblem]):
    name = "robocodegen_agent"
    rules = ("Write the function the last comment of the code asks for. In <execute> you can run Python whose names "
             "are those the function will have: the code's functions, numpy as np and shapely's geometry and "
             "affinity names (and get_obj_outer_pts_np where the code imports it). Give the function's "
             "definition in <solution> ... </solution>: it is then run on the benchmark's test inputs and compared "
             "with the reference. Its code may not contain the words `import` or `__`.")

    def __init__(self, notebook: CapNotebook, seed: int = SEED):
        super().__init__(notebook.problems)
        self.notebook, self.seed = notebook, seed

    def instruction(self, p: RcgProblem) -> str:
        text = self.notebook.prompt(self.notebook.prompt_flat, self.notebook.query(p.f_sig))
        return f"```python\n{text}\n```"

    def action(self, p: RcgProblem, cells: list[str], code: str, observation_chars: int) -> Program:
        return action_program(self.notebook, cells + [code], observation_chars, self.seed)

    def observe(self, result: ProgramResult, timeout: float) -> str:
        if result.result.startswith("failed: the program exited with status"):  # the inputs could not be made
            return f"[the code could not be run: {result.result}]"
        return super().observe(result, timeout)

    def judge(self, p: RcgProblem, answer: str) -> Program:
        return sealed_program(self.notebook, p, answer, self.seed)


def _notebook(data: Optional[str]) -> CapNotebook:
    missing = [n for n in LIBS if n not in importable(LIBS)]
    if missing:
        raise MissingData(f"RoboCodeGen's problems and tests need {' and '.join(missing)} (Code as Policies' notebook "
                          f"installs them): pip install {' '.join(missing)}")
    return load_notebook(data)


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> RoboCodeGen:
    return RoboCodeGen(_notebook(data), prompt_format)


def agent(data: Optional[str], variant: str = "", prompt_format: str = "base") -> RoboCodeGenAgent:
    return RoboCodeGenAgent(_notebook(data))
