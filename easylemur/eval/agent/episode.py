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

import dataclasses
import os
from typing import Any, Callable, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.api.faults import EndpointLost
from easylemur.eval.agent.actions import OBSERVATION_CHARS, clip, parse_reply
from easylemur.eval.agent.task import AgentTask
from easylemur.eval.sandbox import Sandbox, SlotPool, thread_map

DEFAULT_TURNS = 5  # MINT's budget
DEFAULT_PROPOSALS = 2  # answers a model may propose in one episode, as MINT allows
FEEDBACKS = ("exec", "none")  # what an episode feeds back: the execution's output, or nothing

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
    end: str = ""  # "solved", "wrong answers", "turns exhausted", "gave up", "error: ...", "lost: ..."
    messages: list[dict] = dataclasses.field(default_factory=list)

    def record(self) -> dict:
        return {"task_id": self.task_id, "solved_at": self.solved_at, "end": self.end,
                "turns": [dataclasses.asdict(t) for t in self.turns], "messages": self.messages}


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
        except EndpointLost as e:  # no answer after every retry: not the model's, never scored
            ep.end = f"lost: {e}"
            return ep
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
            turn.verdict = _judge(task, p, task.solution(p, content, cells), sandbox, slots)
            if turn.verdict == "passed":
                ep.solved_at, ep.end = i, "solved"
                return ep
            left -= 1
            obs = _refusal(turn.verdict, feedback)
            if left <= 0:
                ep.end = "wrong answers"
                return ep
        elif action == "execute":
            obs = _act(task, p, cells, content, sandbox, slots, feedback, observation_chars)
        else:
            obs = "No action found: run code in <execute> ... </execute> or answer in <solution> ... </solution>."
        if i < turns:
            obs += f"\nYou have {turns - i} turn{'s' if turns - i != 1 else ''} left and {left} chance" \
                   f"{'s' if left != 1 else ''} to propose an answer."
            turn.observation = obs
            ep.messages.append({"role": "user", "content": f"Observation:\n{obs}"})
    ep.end = "turns exhausted"
    return ep


def _judge(task: AgentTask, p: Any, answer: str, sandbox: Sandbox, slots: SlotPool) -> str:
    """The verdict on a proposal: the task's checker, decided on the host (a bool) or in the sandbox."""
    verdict = task.judge(p, answer)
    if isinstance(verdict, bool):
        return "passed" if verdict else "failed: wrong answer"
    return slots.run(sandbox, verdict).result


def _refusal(verdict: str, feedback: str) -> str:
    """What the model is told of a refused proposal (with exec feedback, the checker's reason)."""
    obs = "Your answer is wrong."
    if feedback == "exec" and verdict.startswith("failed: ") and verdict != "failed: wrong answer":
        obs += f" The check failed: {verdict[len('failed: '):]}."
    elif feedback == "exec" and verdict == "timed out":
        obs += " The check timed out."
    return obs


def _act(task: AgentTask, p: Any, cells: list[str], code: str, sandbox: Sandbox, slots: SlotPool, feedback: str,
         observation_chars: int) -> str:
    """Runs an action (with exec feedback) and returns its observation; `cells` keeps it for the
    later turns' replay unless it timed out."""
    cells.append(code)
    if feedback != "exec":
        return "[no execution feedback in this setting]"
    result = slots.run(sandbox, task.action(p, cells[:-1], code, observation_chars))
    if result.result == "timed out":
        cells.pop()  # never replayed: every later turn would time out again
    return clip(task.observe(result, sandbox.timeout), observation_chars)


def run_episodes(task: AgentTask, chat: Callable[[list[dict]], str], sandbox: Sandbox, *, concurrency: int = 8,
                 sandbox_workers: int = 0, progress: Optional[Callable[[], None]] = None, **kw: Any) -> list[Episode]:
    """Every problem's episode, `concurrency` at a time: their requests reach the endpoint
    together (a continuously batched server decodes them as one batch, each joining as its
    previous turn's observation is ready) while sandbox work runs beside the decoding."""
    sandbox.check()
    slots = SlotPool(sandbox_workers or os.cpu_count() or 1)
    return in_threads(lambda p: run_episode(task, p, chat, sandbox, slots, **kw), task.problems, concurrency, progress)


def in_threads(play: Callable[[Any], Any], problems: Sequence[Any], concurrency: int,
               progress: Optional[Callable[[], None]] = None) -> list[Any]:
    """`play(p)` for every problem, `concurrency` episodes at a time, in the problems' order;
    `progress()` after each (every agent protocol runs its episodes so: the SQL agent's, MINT's,
    InterCode-SQL's)."""
    def one(p: Any) -> Any:
        try:
            return play(p)
        finally:
            if progress is not None:
                progress()

    return thread_map(one, problems, concurrency)


def success_rates(episodes: Sequence[Episode], turns: int) -> dict[str, float]:
    """{"success@k": share of the episodes the endpoint answered that were solved within k
    turns} for k = 1..turns (a lost episode is no measurement of the model)."""
    episodes = [e for e in episodes if not e.end.startswith("lost")]
    n = max(1, len(episodes))
    return {f"success@{k}": sum(e.solved_at is not None and e.solved_at <= k for e in episodes) / n
            for k in range(1, turns + 1)}


def lost(record: dict) -> str:
    """Why an agent protocol's record (MINT's, InterCode's) was lost to the endpoint ("" if it was
    not): the record's `easylemur.lost`, set when a request got no answer after every retry."""
    return str((record.get("easylemur") or {}).get("lost") or "")


def answered(records: Sequence[dict]) -> list[dict]:
    """The records an agent protocol scores: those not lost to the endpoint."""
    return [r for r in records if not lost(r)]
