"""One MINT episode, as MINT's environment (`mint/envs/general_env.py`) plays it, and a run of
every problem at one turn budget.

The model gets one user message (`MintTask.first_message`) and answers with the stop words of
MINT's agent (`\nObservation:`, `\nExpert feedback:`, `\nTask:`, `\n---`, `\nHuman:`; an endpoint
is sent the first four and every one is also cut on this side). Each reply, trailing space
stripped, is one step, kept in the dialogue as "Assistant:\n" + reply:
- with `<solution>` in it, a proposal: the closed `<solution>...</solution>` blocks, each
  stripped, joined by newlines, go to the task's check; none is an invalid answer (MINT's
  message as the observation); a check that fails says "Your answer is wrong.";
- else an action: the closed `<execute>...</execute>` blocks run as one cell in the episode's
  live interpreter (`sandbox.Session`, MINT's IPython shell; tools bound in it); none is an
  invalid action, counted, and MINT's message is the observation.
An empty reply is an invalid action too (and, as MINT does, not kept in the dialogue). After
each step the episode ends when the task is solved, the proposals reach `max_proposals`, or
proposals + actions + invalid actions reach `max_steps`; else the next user message is MINT's
observation: the output or verdict, the steps and proposals left (and the last-step line), and,
with a feedback model, its feedback. An endpoint's refusal (e.g. a dialogue past the model's
context) ends the episode unsolved, as MINT's error action does; a request lost after every
retry (`backends.client.EndpointLost`, the model's or the critic's) ends it as lost: recorded
(`easylemur.lost`), counted in the row, and left out of the success rates.

The record of an episode is MINT's own `results.jsonl` line ({"state": ..., "task": ...}).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable, Optional, Sequence

from easylemur.eval.agent.episode import answered, in_threads
from easylemur.eval.api.faults import EndpointLost
from easylemur.eval.benchmarks.mint.tasks import MintProblem, MintTask
from easylemur.eval.sandbox import Sandbox, Session, SlotPool

Chat = Callable[[list, Sequence[str]], str]  # (messages, stop words) -> the reply's text
MAX_TOKENS = 512  # MINT's agent's max_tokens
# What a cell may import beyond the standard library: the scientific packages of MINT's own
# environment (its requirements.txt: scipy, pandas, networkx, sympy, ...) with what they import,
# those installed here (a model's `from scipy.stats import binom` works as it did in MINT's runs)
MINT_LIBS = ("numpy", "sympy", "mpmath", "scipy", "pandas", "dateutil", "pytz", "tzdata", "six", "networkx")
FEEDBACK_MAX_TOKENS = 1024  # MINT's feedback agent's


def proposals_for(budget: int) -> int:
    """MINT's proposal budget at each turn budget: one at k = 1, two above (its maxK_pP configs)."""
    return 1 if budget <= 1 else 2


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """The text up to the first stop word (what an endpoint that took every stop word would return)."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i)
    return text[:cut]


def blocks(tag: str, reply: str) -> str:
    """The closed <tag>...</tag> blocks of a reply, each stripped, joined by newlines (MINT's parse)."""
    return "\n".join(b.strip() for b in re.findall(f"<{tag}>(.*?)</{tag}>", "\n" + reply + "\n", re.DOTALL))


@dataclasses.dataclass
class MintState:
    """MINT's `State`, as its results.jsonl records it."""

    history: list = dataclasses.field(default_factory=list)
    finished: bool = False
    success: bool = False
    latest_output: dict = dataclasses.field(default_factory=dict)
    agent_action_count: dict = dataclasses.field(
        default_factory=lambda: {"propose_solution": 0, "use_tool": 0, "invalid_action": 0})
    token_counter: dict = dataclasses.field(default_factory=dict)
    terminate_reason: Optional[str] = None
    error: Optional[str] = None


class Episode:
    """One episode of `task` on problem `p` at a budget of `max_steps` steps and `max_proposals`
    proposals, as MINT's GeneralEnv plays it (the module's docstring); `play(chat)` runs it."""

    def __init__(self, task: MintTask, p: MintProblem, *, max_steps: int, max_proposals: int, sandbox: Sandbox,
                 slots: SlotPool, feedback: Optional[Chat] = None, tools: Optional[dict] = None,
                 cell_timeout: float = 30.0):
        self.task, self.p, self.texts = task, p, task.texts
        self.max_steps, self.max_proposals = max_steps, max_proposals
        self.sandbox, self.slots, self.feedback, self.tools = sandbox, slots, feedback, tools or {}
        self.cell_timeout = cell_timeout
        self.state = MintState()
        self.lost = ""  # why the endpoint (the model's or the critic's) gave no answer after every retry
        self.session: Optional[Session] = None  # the episode's live interpreter, started at its first action
        self.env: Any = None  # the game the tools play (MINT's ALFWorld): it says whether the task is done
        played = task.environment(p)
        if played is not None:
            self.p, self.env, env_tools = played
            self.tools = {**self.tools, **env_tools}
        first = task.first_message(self.p, max_steps, max_proposals, feedback is not None)
        self.state.history = [{"role": "user", "content": first}]
        self.state.latest_output = {"content": first}

    # ------------------------------------------------------------------ the loop

    def play(self, chat: Chat) -> MintState:
        try:
            while not self.state.finished and not self.lost:
                try:
                    reply = cut_at_stops(chat(list(self.state.history), self.texts.stop_words),
                                         self.texts.stop_words).rstrip()
                except EndpointLost as e:  # no answer after every retry: the episode is lost, not scored
                    self.lost = str(e)
                    break
                except Exception as e:  # noqa: BLE001 - MINT's error action: the episode ends unsolved
                    self._step("", error=f"{type(e).__name__}: {e}")
                    continue
                self._step(reply)
        finally:
            if self.session is not None:
                self.session.close()
            if self.env is not None:
                self.env.close()
        return self.state

    def _step(self, reply: str, error: str = "") -> None:
        st = self.state
        if reply:
            st.history.append({"role": "assistant", "content":
                               (reply if reply.lstrip().startswith("Assistant:") else "Assistant:\n" + reply) + "\n"})
        observation: Optional[str]
        if error:
            observation = f"An error occurred. {error}"
            st.finished, st.success, st.error, st.terminate_reason = True, False, error, "error"
        elif "<solution>" not in reply:
            observation = self._act(reply)
        else:
            observation = self._propose(reply)
        self._check_limits()
        counts = st.agent_action_count
        left = (self.max_steps - sum(counts.values()), self.max_proposals - counts["propose_solution"])
        feedback = ""
        if not st.finished and self.feedback is not None:
            feedback = self._feedback(self._observation(observation, left, ""))
        if not st.finished:
            content = self._observation(observation, left, feedback)
            st.history.append({"role": "user", "content": content})
            st.latest_output = {"observation": observation, "feedback": feedback,
                                "feedback_type": "feedback_wo_gt" if self.feedback is not None else "no_feedback",
                                "success": st.success, "content": content}

    def _act(self, reply: str) -> str:
        code = blocks("execute", reply)
        if not code:
            self.state.agent_action_count["invalid_action"] += 1
            return self.texts.invalid_input
        if self.session is None:
            self.session = Session(self.sandbox, tools=self.tools, cell_timeout=self.cell_timeout, libs=MINT_LIBS)
        out = self.session.run(code).strip()
        self.state.agent_action_count["use_tool"] += 1
        if self.env is not None and self.env.success():  # MINT's AlfworldEnv: a tool call can end the task
            self.state.finished, self.state.success, self.state.terminate_reason = True, True, "task_success"
        return out

    def _propose(self, reply: str) -> Optional[str]:
        st = self.state
        st.agent_action_count["propose_solution"] += 1
        answer = blocks("solution", reply)
        if not answer:
            return self.texts.invalid_input
        try:
            verdict = self.env.success() if self.env is not None else self.task.judge(self.p, answer)
        except Exception as e:  # noqa: BLE001 - MINT shows a check's exception as the observation
            return f"{type(e).__name__}: {e}"
        if not isinstance(verdict, bool):
            verdict = self.slots.run(self.sandbox, verdict).passed
        if verdict:
            st.finished, st.success, st.terminate_reason = True, True, "task_success"
        return None

    def _check_limits(self) -> None:
        st = self.state
        if st.finished:
            return
        if st.agent_action_count["propose_solution"] >= self.max_proposals:
            st.finished, st.success, st.terminate_reason = True, False, "max_propose_steps"
        elif sum(st.agent_action_count.values()) >= self.max_steps:
            st.finished, st.success, st.terminate_reason = True, False, "max_steps"

    def _observation(self, observation: Optional[str], left: tuple, feedback: str) -> str:
        """MINT's StepOutput.to_str."""
        t = self.texts
        out = t.observation
        if observation is not None:
            out += observation + "\n"
        elif not self.state.success:
            out += t.wrong_answer
        out += t.turns_left.format(*left)
        if left[0] <= 1:
            out += t.last_step
        if feedback:
            out += t.feedback_header + feedback + "\n"
        return out

    # ------------------------------------------------------------------ natural-language feedback

    def _feedback(self, observation: str) -> str:
        """The feedback model's reply to MINT's feedback prompt (no ground truth, textual); "" on an error."""
        t = self.texts
        history = self.state.history
        trajectory = "---\n".join(history[0]["content"].split("---\n")[2:]) + "\n"
        trajectory += "\n".join(m["content"] for m in history[1:])
        trajectory += "\n" + observation
        trajectory = trajectory[trajectory.find("Task:"):]
        example = t.example(self.task.examples_folder(self.p), True)
        prompt = t.feedback_template.format(in_context_example=example[example.find("Task:"):], trajectory=trajectory,
                                            correct_solution=t.no_ground_truth, tool_desc=self.task.tool_description())
        try:
            assert self.feedback is not None
            return cut_at_stops(self.feedback([{"role": "user", "content": prompt}], t.feedback_stop_words),
                                t.feedback_stop_words)
        except EndpointLost as e:  # the critic gave no answer after every retry: the episode is lost
            self.lost = f"feedback: {e}"
            return ""
        except Exception:  # noqa: BLE001 - MINT's feedback agent turns an error into no feedback
            return ""


def run_budget(task: MintTask, chat: Chat, sandbox: Sandbox, budget: int, *, feedback: Optional[Chat] = None,
               tools: Optional[dict] = None, concurrency: int = 8, workers: int = 0, cell_timeout: float = 30.0,
               progress: Optional[Callable[[], None]] = None) -> list[dict]:
    """Every problem's episode at turn budget `budget`: MINT's results.jsonl records, in problem order."""
    sandbox.check()
    slots = SlotPool(workers or os.cpu_count() or 1)

    def one(p: MintProblem) -> dict:
        ep = Episode(task, p, max_steps=budget, max_proposals=proposals_for(budget), sandbox=sandbox, slots=slots,
                     feedback=feedback, tools=tools, cell_timeout=cell_timeout)
        record = {"state": dataclasses.asdict(ep.play(chat)), "task": task.record(ep.p)}
        if ep.lost:
            record["easylemur"] = {"lost": ep.lost}
        if ep.env is not None and ep.state.success and not ep.env.won():  # MINT's success at the game's step limit
            record.setdefault("easylemur", {})["won"] = False
        return record

    return in_threads(one, task.problems, concurrency, progress)


def success_rate(records: Sequence[dict]) -> float:
    """The share solved among the episodes the endpoint answered (`agent.episode.answered`)."""
    records = answered(records)
    return sum(bool(r["state"]["success"]) for r in records) / max(1, len(records))


def solved_within(records: Sequence[dict]) -> Callable[[int], float]:
    """From one K-step run: the share solved within k steps (the steps its dialogue took), for
    the single-run reading of success@k."""
    records = answered(records)

    def at(k: int) -> float:
        n = 0
        for r in records:
            st = r["state"]
            if st["success"] and sum(st["agent_action_count"].values()) <= k:
                n += 1
        return n / max(1, len(records))
    return at

