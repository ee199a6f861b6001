"""Multi-turn evaluation with environment feedback (the MINT / Lemur setting): M-HumanEval,
M-MBPP, M-GSM8K and an InterCode-SQL-style agent (docs/design.md, "Agent evaluation").

An episode: the model gets the task and the rules; each turn it answers with either an action
(code to run: `<execute>...</execute>`, or a fenced ```python / ```sql block) or a proposed
answer (`<solution>...</solution>`; for SQL also InterCode's bare `submit`, which submits the
last query it ran). An action runs in the sandbox and, with `feedback="exec"`, its output
(stdout and stderr, or the exception, cut to `observation_chars`) comes back as the next user
turn; with `feedback="none"` the model is told only that the code was not run for it. A
proposal is judged by the task's checker; accepted ends the episode a success at that turn;
refused tells the model "Your answer is wrong." (with exec feedback, also the checker's
one-word reason, e.g. "AssertionError") and uses one of `proposals` chances. The episode ends
on success, when the proposals or the `turns` run out, or when the model gives up (an empty
reply). Success rate per turn budget k (1..turns) is the share of episodes solved within k
turns of this one run, as MINT reports it.

Python actions keep their state across turns as a notebook would: each run replays the
earlier cells silently (their output discarded, their errors ignored; a cell that timed out is
not kept), then runs the new one. All of it runs in the sandbox (no host files, no network, capped memory and time).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import queue
import re
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from easylemur.errors import InputError
from easylemur.config import FEEDBACKS
from easylemur.eval.sandbox import PYTHON, Job, Program, ProgramResult, Sandbox
from easylemur.eval.tasks import EvalDataError, Problem

DEFAULT_TURNS = 5  # MINT's budget
DEFAULT_PROPOSALS = 2  # answers a model may propose in one episode, as MINT allows
OBSERVATION_CHARS = 2000  # an observation longer than this keeps its head and tail

SYSTEM = (
    "You are solving a task in an interactive environment. Each turn, think briefly, then either run code "
    "or give your final answer.\n"
    "- To run code, put it in <execute> ... </execute> (or a fenced code block); you will see its output.\n"
    "- To give your final answer, put it in <solution> ... </solution>.\n"
    "{rules}"
)


@dataclasses.dataclass
class Turn:
    index: int  # 1-based
    reply: str
    action: str  # "execute", "solution", "none" (no action found), "give up"
    content: str = ""
    observation: str = ""  # what the next user turn said (empty after the last turn)
    verdict: str = ""  # a proposal's judge's result


@dataclasses.dataclass
class Episode:
    task_id: Any
    turns: list[Turn] = dataclasses.field(default_factory=list)
    solved_at: Optional[int] = None  # the turn whose proposal was accepted
    end: str = ""  # "solved", "wrong answers", "turns exhausted", "gave up", "error: ..."
    messages: list[dict] = dataclasses.field(default_factory=list)

    def record(self) -> dict:
        return {"task_id": self.task_id, "solved_at": self.solved_at, "end": self.end,
                "turns": [dataclasses.asdict(t) for t in self.turns], "messages": self.messages}


# ------------------------------------------------------------------ parsing a reply

_TAG = {name: re.compile(rf"<{name}>(.*?)(?:</{name}>|\Z)", re.S) for name in ("execute", "solution")}
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def fenced(text: str, languages: Sequence[str] = ()) -> Optional[str]:
    """The first fenced block of `text` (of one of `languages`, or unlabelled), or None."""
    for m in _FENCE.finditer(text):
        if not languages or not m.group(1) or m.group(1).lower() in languages:
            return m.group(2)
    return None


def parse_reply(reply: str, languages: Sequence[str]) -> tuple[str, str]:
    """(action, content): a `<solution>` is a proposal even beside code; then `<execute>`, then a
    fenced block of the tool's language; InterCode's bare `submit` is a proposal of ""."""
    if not reply.strip():
        return "give up", ""
    m = _TAG["solution"].search(reply)
    if m:
        return "solution", m.group(1).strip("\n")
    m = _TAG["execute"].search(reply)
    if m:
        return "execute", m.group(1).strip("\n")
    if reply.strip().lower().strip("`") == "submit":
        return "solution", ""
    code = fenced(reply, languages)
    if code is not None:
        return "execute", code
    return "none", ""


def clip(text: str, limit: int = OBSERVATION_CHARS) -> str:
    """`text` cut to `limit` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


# ------------------------------------------------------------------ tasks

class AgentTask:
    """A multi-turn task: its problems, what the model is told, how an action runs and how a
    proposal is judged. `judge` returns a sandbox Job/Program (run there) or a bool (decided
    on the host: a number compared)."""

    name = ""
    languages: tuple[str, ...] = ("python", "py", "python3")
    rules = ""

    def __init__(self, problems: Sequence[Any]):
        self.problems = list(problems)

    def instruction(self, p: Any) -> str:
        raise NotImplementedError

    def action(self, p: Any, cells: list[str], code: str, observation_chars: int) -> Program:
        return python_cells(cells + [code], observation_chars)

    def observe(self, result: ProgramResult, timeout: float) -> str:
        if result.result == "timed out":
            return clip(result.output) + f"\n[timed out after {timeout:g} s]"
        return result.output if result.output.strip() else "[the code ran and printed nothing]"

    def solution(self, p: Any, content: str, cells: list[str]) -> str:
        """The answer to judge from a proposal's text."""
        code = fenced(content, self.languages)
        return (code if code is not None else content).strip("\n")

    def judge(self, p: Any, answer: str) -> Union[Job, Program, bool]:
        raise NotImplementedError


_CELLS = r'''
import contextlib, io, sys, traceback
cells = [open("cell_%d.py" % i, encoding="utf-8").read() for i in range(int(sys.argv[1]))]
ns = {"__name__": "__main__"}
for i, cell in enumerate(cells[:-1]):  # earlier turns: their state, not their output
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(cell, "<turn %d>" % (i + 1), "exec"), ns)
        except BaseException:
            pass
try:
    exec(compile(cells[-1], "<this turn>", "exec"), ns)
except SystemExit:
    pass
except BaseException:
    kind, value, tb = sys.exc_info()
    print("".join(traceback.format_exception(kind, value, tb.tb_next)), end="", file=sys.stderr)
'''


def python_cells(cells: Sequence[str], observation_chars: int = OBSERVATION_CHARS) -> Program:
    """A Program that replays `cells[:-1]` silently and runs the last one, printing its output
    (or its traceback, the harness's own frame left out)."""
    files = [("run_cells.py", _CELLS)] + [(f"cell_{i}.py", c) for i, c in enumerate(cells)]
    return Program(files=tuple(files), steps=((PYTHON, "-B", "run_cells.py", str(len(cells))),),
                   output_bytes=2 * observation_chars, env=(("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1")),
                   libs=_available_libs())


def _available_libs() -> tuple[str, ...]:
    """The libraries an agent's Python may import beyond the standard library, where installed."""
    import importlib.util

    return tuple(n for n in ("numpy", "sympy", "mpmath") if importlib.util.find_spec(n) is not None)


class MHumanEval(AgentTask):
    name = "m_humaneval"
    rules = ("Your solution must be the complete Python function (its signature and body), in <solution>; hidden "
             "tests will check it.")

    def instruction(self, p: Problem) -> str:
        return f"Complete the following Python function.\n\n```python\n{p.text}```"

    def judge(self, p: Problem, answer: str) -> Job:
        # the prompt first (its imports and helpers), then the model's whole function replaces the stub
        return Job(code=f"{p.text}\n{answer}\n", setup=p.text, tests=p.tests, entry_point=p.entry_point)


class MMBPP(AgentTask):
    name = "m_mbpp"
    rules = "Your solution must be the complete Python code, in <solution>; hidden tests will check it."

    def instruction(self, p: Problem) -> str:
        first = p.tests.strip().splitlines()[0] if p.tests.strip() else ""
        return f"{p.text}\nYour code should pass this test:\n{first}"

    def judge(self, p: Problem, answer: str) -> Job:
        return Job(code=f"{p.setup}\n{answer}\n" if p.setup else answer + "\n", setup=p.setup, tests=p.tests)


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


class MGSM8K(AgentTask):
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
    from easylemur.eval.tasks import _read_jsonl

    rows: Any
    if Path(path).exists() or os.sep in str(path) or str(path).endswith((".jsonl", ".gz")):
        rows = _read_jsonl(Path(path))
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


# ------------------------------------------------------------------ running episodes

class SlotPool:
    """Sandbox slots (each its own uid as root) handed to whichever episode runs code next."""

    def __init__(self, n: int):
        self.free: queue.Queue = queue.Queue()
        for i in range(max(1, n)):
            self.free.put(i)

    def run(self, sandbox: Sandbox, job: Union[Job, Program], timeout: Optional[float] = None) -> ProgramResult:
        slot = self.free.get()
        try:
            if isinstance(job, Program):
                return sandbox.run_program(job, slot, timeout=timeout)
            return ProgramResult(sandbox.run(job, slot))
        finally:
            self.free.put(slot)


def run_episode(task: AgentTask, p: Any, chat: Callable[[list[dict]], str], sandbox: Sandbox, slots: SlotPool, *,
                turns: int = DEFAULT_TURNS, feedback: str = "exec", proposals: int = DEFAULT_PROPOSALS,
                observation_chars: int = OBSERVATION_CHARS) -> Episode:
    """One episode of `task` on problem `p`; `chat(messages)` is the model's reply."""
    if feedback not in FEEDBACKS:
        raise InputError(f"feedback {feedback!r}: expected one of {', '.join(FEEDBACKS)}")
    ep = Episode(p.task_id)
    rules = task.rules + (f"\nYou have {turns} turns and may propose an answer {proposals} times."
                          + ("" if feedback == "exec" else " In this setting code you run is not executed for you."))
    ep.messages = [{"role": "system", "content": SYSTEM.format(rules=rules)},
                   {"role": "user", "content": task.instruction(p)}]
    cells: list[str] = []
    left = proposals
    for i in range(1, turns + 1):
        try:
            reply = chat(ep.messages)
        except Exception as e:  # noqa: BLE001 - one episode's failure is recorded, the run goes on
            ep.end = f"error: {type(e).__name__}: {e}"
            return ep
        ep.messages.append({"role": "assistant", "content": reply})
        action, content = parse_reply(reply, task.languages)
        turn = Turn(i, reply, action, content)
        ep.turns.append(turn)
        if action == "give up":
            ep.end = "gave up"
            return ep
        if action == "solution":
            answer = task.solution(p, content, cells)
            verdict = task.judge(p, answer)
            if isinstance(verdict, bool):
                turn.verdict = "passed" if verdict else "failed: wrong answer"
            else:
                turn.verdict = slots.run(sandbox, verdict).result
            if turn.verdict == "passed":
                ep.solved_at, ep.end = i, "solved"
                return ep
            left -= 1
            obs = "Your answer is wrong."
            if feedback == "exec" and turn.verdict.startswith("failed: ") and turn.verdict != "failed: wrong answer":
                obs += f" The check failed: {turn.verdict[len('failed: '):]}."
            elif feedback == "exec" and turn.verdict == "timed out":
                obs += " The check timed out."
            if left <= 0:
                ep.end = "wrong answers"
                return ep
        elif action == "execute":
            cells.append(content)
            if feedback == "exec":
                result = slots.run(sandbox, task.action(p, cells[:-1], content, observation_chars))
                obs = clip(task.observe(result, sandbox.timeout), observation_chars)
                if result.result == "timed out":
                    cells.pop()  # never replayed: every later turn would time out again
            else:
                obs = "[no execution feedback in this setting]"
        else:
            obs = "No action found: run code in <execute> ... </execute> or answer in <solution> ... </solution>."
        if i < turns:
            obs += f"\nYou have {turns - i} turn{'s' if turns - i != 1 else ''} left and {left} chance" \
                   f"{'s' if left != 1 else ''} to propose an answer."
            turn.observation = obs
            ep.messages.append({"role": "user", "content": f"Observation:\n{obs}"})
    ep.end = "turns exhausted"
    return ep


def run_episodes(task: AgentTask, chat: Callable[[list[dict]], str], sandbox: Sandbox, *, concurrency: int = 8,
                 sandbox_workers: int = 0, progress: Optional[Callable[[], None]] = None, **kw: Any) -> list[Episode]:
    """Every problem's episode, `concurrency` at a time: their requests reach the endpoint
    together (a continuously batched server decodes them as one batch, each joining as its
    previous turn's observation is ready) while sandbox work runs beside the decoding."""
    sandbox.check()
    slots = SlotPool(sandbox_workers or os.cpu_count() or 1)

    def one(p: Any) -> Episode:
        try:
            return run_episode(task, p, chat, sandbox, slots, **kw)
        finally:
            if progress is not None:
                progress()

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, task.problems))


def success_rates(episodes: Sequence[Episode], turns: int) -> dict[str, float]:
    """{"success@k": share of episodes solved within k turns} for k = 1..turns."""
    n = max(1, len(episodes))
    return {f"success@{k}": sum(e.solved_at is not None and e.solved_at <= k for e in episodes) / n
            for k in range(1, turns + 1)}
