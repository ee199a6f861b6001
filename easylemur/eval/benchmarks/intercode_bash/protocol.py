"""One InterCode-Bash episode as InterCode's multi-turn runner (`experiments/eval_n_turn.py`) plays
it with the settings of Lemur's fork's `scripts/expr_nl2bash.sh` (`--env bash --template v2
--dialogue_limit 7 --max_turns 10`, no handicap), and a run over every task.

Policies, as for InterCode-SQL (`intercode_sql/protocol.py`): `lemur` (the fork's `hf_chat` for
lemur-70b-chat-v1: a system message "You are a helpful assistant expert specializing in BASH.", then
one user message, the template and the query; each message sent with a newline at its end; the
reply cut at the fork's stop sequences and stripped; the parsed command kept in the dialogue as a
```bash block; an endpoint error an empty reply) or `chat` (InterCode's ChatGPTPolicy: the template
as the system message, the query as the user's; the reply's newlines become spaces; the parsed
command is the assistant's message; an endpoint error ends the episode "blocked").

Each turn, as the runner's loop: the reply goes through InterCode's bash parser (`parser.py`: it
is always a command; where it raises, the episode ends "blocked" with reward 0); "skip" runs
nothing (observation "skipped"); a command starting with "submit" runs nothing and shows the last
observation again (the query before any command); anything else runs on the agent's machine
(`environment.py`). Then InterCode's reward is computed (the runner's `env.step("submit")` after
every action: so also after "skip"), and the next user message is the observation (cut to 1000
characters, empty shown as "No output") with the reward. Past `dialogue_limit` messages after
the first two, only those two and the last `dialogue_limit` are kept. The episode ends at a
reward of exactly 1, after "skip" in any case, or after `turns` turns; it is solved when its
maximum reward is 1 (InterCode's success rate). An agent machine that grows past its size cap
ends the episode (`easylemur.ended`). A request lost after every retry ends it as lost.

Records are InterCode's log entries (`environment`, `dataset`, `task_id`, `query`,
`turn_history`, `summary`) with easylemur's additions under `easylemur` (the reward's parts per
turn, the gold command's failure, endpoint errors, cut observations)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

from easylemur.eval.agent.episode import in_threads
from easylemur.eval.api.faults import EndpointLost
from easylemur.eval.benchmarks.intercode_bash.environment import BashEnvironment
from easylemur.eval.benchmarks.intercode_bash.image import Image, build_image
from easylemur.eval.benchmarks.intercode_bash.parser import parse_action
from easylemur.eval.benchmarks.intercode_bash.task import BashProblem, InterCodeBashTask
from easylemur.eval.benchmarks.intercode_sql.protocol import POLICIES, cut_at_stops, mean_reward, success_rate
from easylemur.eval.sandbox import Sandbox

Chat = Callable[[list, Sequence[str]], str]  # (messages, stop words) -> the reply's text
MAX_TOKENS = 512  # the fork's HFChat and InterCode's ChatGPT call: 512 new tokens
TURNS = 10  # Lemur's fork, scripts/expr_nl2bash.sh: --max_turns 10 --dialogue_limit 7 --template v2
DIALOGUE_LIMIT = 7

__all__ = ["POLICIES", "Dialogue", "Images", "play", "run_budget", "success_rate", "mean_reward"]


class Dialogue:
    """The policy's side of an InterCode episode (Bash's and CTF's): the messages as the fork's
    HFChatPolicy (`lemur`) or InterCode's ChatGPTPolicy (`chat`) keeps them. `next_user(observe,
    observation)` adds the turn's user message (the template and the query first; then
    `observe(observation cut to the policy's response_limit)`), keeping the first two and the last
    `limit` messages; `ask(model, prompt, turn)` sends the prompt, and returns the reply, or None
    when the episode ends there (a request lost after every retry; InterCode's "blocked" for `chat`);
    the fork's HFChat answered "" for an endpoint error, so `lemur` goes on with ""."""

    def __init__(self, texts: Any, query: str, policy: str, limit: Optional[int]):
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
        self.texts, self.query, self.limit, self.lemur = texts, query, limit, policy == "lemur"
        self.messages: list = [] if self.lemur else [{"role": "system", "content": texts.init_msg}]
        self.stops = texts.hf_stops if self.lemur else ()
        self.cut = texts.response_limit if self.lemur else texts.chat_response_limit
        self.history: dict = {"actions": [], "observations": [], "rewards": [], "valid_action": []}
        self.extra: dict = {"policy": policy}

    def next_user(self, observe: Callable[[Any], str], observation: Any) -> None:
        t = self.texts
        if self.lemur and not self.messages:
            self.messages += [{"role": "system", "content": t.hf_system},
                              {"role": "user", "content": t.init_msg + t.hf_separator + t.query_msg(self.query)}]
        elif not self.lemur and self.messages[-1]["role"] == "system":
            self.messages.append({"role": "user", "content": t.query_msg(self.query)})
        else:
            shown = observation[:self.cut] if isinstance(observation, str) and len(observation) > self.cut else observation
            self.messages.append({"role": "user", "content": observe(shown)})
            if self.limit and len(self.messages) - 2 > self.limit:
                self.messages = self.messages[:2] + self.messages[-self.limit:]

    def ask(self, model: Callable, prompt: Any, turn: int) -> Optional[str]:
        try:
            return model(prompt, self.stops)
        except EndpointLost as e:  # no answer after every retry: the episode is lost, never scored
            self.extra["lost"] = f"turn {turn + 1}: {e}"
            self.end("lost")
            return None
        except Exception as e:  # noqa: BLE001
            self.extra.setdefault("errors", []).append(f"turn {turn + 1}: {type(e).__name__}: {e}")
            if not self.lemur:  # InterCode's "blocked": the episode ends with reward 0
                self.end("blocked")
                return None
            return ""

    def end(self, why: str) -> None:
        self.history["actions"].append(why)
        self.history["rewards"].append(0)

    def log(self, action: str, observation: Any, reward: Any, valid: bool) -> None:
        for key, value in (("actions", action), ("observations", str(observation)), ("rewards", reward),
                           ("valid_action", valid)):
            self.history[key].append(value)

    def over(self, env: Any, action: str, reward: Any, turn: int) -> bool:
        """Whether the episode ends after this turn: the machine past its size cap, a reward of 1,
        or "skip" in any case (the runner's `action.lower() == "skip"`)."""
        if env.too_big():
            self.extra["ended"] = f"turn {turn + 1}: the machine grew past {env.max_bytes >> 20} MiB"
            return True
        return reward == 1 or action.lower() == "skip"

    def record(self, env_name: str, dataset: str, task_id: int, turn: int, turns: int, env: Any) -> dict:
        """InterCode's log entry of the episode."""
        if getattr(env, "cut", False):
            self.extra["output_cut"] = True
        best = max(self.history["rewards"])
        return {"environment": env_name, "dataset": dataset, "task_id": task_id, "query": self.query,
                "turn_history": self.history,
                "summary": {"max_reward": best, "max_reward_idx": self.history["rewards"].index(best),
                            "turns_taken": turn + 1, "turns_max": turns},
                "easylemur": self.extra}


def play(task: InterCodeBashTask, p: BashProblem, chat: Chat, env: BashEnvironment, *, turns: int = TURNS,
         dialogue_limit: Optional[int] = DIALOGUE_LIMIT, policy: str = "lemur") -> dict:
    """One episode on `env` (the task's machines), InterCode's log entry."""
    t = task.texts
    d = Dialogue(t, p.query, policy, dialogue_limit)
    d.extra.update({"fs": p.fs, "reward_parts": []})
    observation: Any = None
    reward: Any = None
    turn = 0
    for turn in range(turns):
        d.next_user(lambda shown: t.obs_msg(shown, reward, p.query), observation)
        # the fork encoded each message as ChatML with a newline before <|im_end|>: sent so, a ChatML
        # chat template renders the fork's text
        reply = d.ask(chat, [{"role": m["role"], "content": m["content"] + ("\n" if d.lemur else "")}
                             for m in d.messages], turn)
        if reply is None:
            break
        reply = cut_at_stops(reply, d.stops).strip() if d.lemur else reply.replace("\n", " ").strip()
        try:
            action = parse_action(reply)
        except ValueError as e:  # the runner catches the parser's ValueError: "blocked"
            d.extra["blocked"] = f"turn {turn + 1}: {e}"
            d.end("blocked")
            break
        d.messages.append({"role": "assistant", "content": t.fenced(action) if d.lemur else action})
        if action == "skip":
            observation, valid = "skipped", True
        elif action.startswith("submit"):
            observation, valid = env.observation, True
        else:
            observation, valid = env.execute(action)
        reward, info = env.reward()
        d.extra["reward_parts"].append(info["reward"])
        d.log(action, observation, reward, valid)
        if d.over(env, action, reward, turn):
            break
    if env.corrupt_gold():
        d.extra["corrupt_gold"] = env.corrupt_gold()
    return d.record(t.env_name, task.dataset(p.fs), p.index, turn, turns, env)


class Images:
    """The file systems of one run, each built once, when a task first needs it (thread-safe)."""

    def __init__(self, task: InterCodeBashTask, sandbox: Sandbox):
        self.task, self.sandbox = task, sandbox
        self._built: dict[int, Image] = {}
        self._lock = threading.Lock()

    def get(self, fs: int) -> Image:
        with self._lock:
            if fs not in self._built:
                self._built[fs] = build_image(self.task.files, fs, self.sandbox)
            return self._built[fs]

    def close(self) -> None:
        with self._lock:
            for image in self._built.values():
                image.close()
            self._built.clear()

    def __enter__(self) -> "Images":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_budget(task: InterCodeBashTask, chat: Chat, sandbox: Sandbox, budget: int = TURNS, *,
               dialogue_limit: Optional[int] = DIALOGUE_LIMIT, policy: str = "lemur", concurrency: int = 8,
               progress: Optional[Callable[[], None]] = None) -> list[dict]:
    """Every task's episode with at most `budget` turns: InterCode's log entries, in task order.
    The caller leaves out the tasks the sandbox cannot run (`task.skip_reason`)."""
    with Images(task, sandbox) as images:
        def one(p: BashProblem) -> dict:
            env = BashEnvironment(images.get(p.fs), task.texts, sandbox, p.query, p.gold)
            try:
                return play(task, p, chat, env, turns=budget, dialogue_limit=dialogue_limit, policy=policy)
            finally:
                env.close()

        return in_threads(one, task.problems, concurrency, progress)
