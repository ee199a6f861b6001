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

__all__ = ["POLICIES", "Images", "play", "run_budget", "success_rate", "mean_reward"]


def play(task: InterCodeBashTask, p: BashProblem, chat: Chat, env: BashEnvironment, *, turns: int = TURNS,
         dialogue_limit: Optional[int] = DIALOGUE_LIMIT, policy: str = "lemur") -> dict:
    """One episode on `env` (the task's machines), InterCode's log entry."""
    t = task.texts
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    lemur = policy == "lemur"
    dialogue: list = [] if lemur else [{"role": "system", "content": t.init_msg}]
    stops = t.hf_stops if lemur else ()
    limit = t.response_limit if lemur else t.chat_response_limit
    history: dict = {"actions": [], "observations": [], "rewards": [], "valid_action": []}
    extra: dict = {"policy": policy, "fs": p.fs, "reward_parts": []}
    observation: Any = None
    reward: Any = None
    turn = 0
    for turn in range(turns):
        if lemur and not dialogue:
            dialogue += [{"role": "system", "content": t.hf_system},
                         {"role": "user", "content": t.init_msg + t.hf_separator + t.query_msg(p.query)}]
        elif not lemur and dialogue[-1]["role"] == "system":
            dialogue.append({"role": "user", "content": t.query_msg(p.query)})
        else:
            shown = observation[:limit] if isinstance(observation, str) and len(observation) > limit else observation
            dialogue.append({"role": "user", "content": t.obs_msg(shown, reward, p.query)})
            if dialogue_limit and len(dialogue) - 2 > dialogue_limit:
                dialogue = dialogue[:2] + dialogue[-dialogue_limit:]
        sent = [{"role": m["role"], "content": m["content"] + ("\n" if lemur else "")} for m in dialogue]
        try:
            reply = chat(sent, stops)
        except EndpointLost as e:  # no answer after every retry: the episode is lost, never scored
            extra["lost"] = f"turn {turn + 1}: {e}"
            history["actions"].append("lost")
            history["rewards"].append(0)
            break
        except Exception as e:  # noqa: BLE001
            extra.setdefault("errors", []).append(f"turn {turn + 1}: {type(e).__name__}: {e}")
            if not lemur:  # InterCode's "blocked": the episode ends with reward 0
                history["actions"].append("blocked")
                history["rewards"].append(0)
                break
            reply = ""  # the fork's HFChat answers "" when the endpoint fails
        reply = cut_at_stops(reply, stops).strip() if lemur else reply.replace("\n", " ").strip()
        try:
            action = parse_action(reply)
        except ValueError as e:  # the runner catches the parser's ValueError: "blocked"
            extra["blocked"] = f"turn {turn + 1}: {e}"
            history["actions"].append("blocked")
            history["rewards"].append(0)
            break
        dialogue.append({"role": "assistant", "content": t.fenced(action) if lemur else action})
        if action == "skip":
            observation, valid = "skipped", True
        elif action.startswith("submit"):
            observation, valid = env.observation, True
        else:
            observation, valid = env.execute(action)
        reward, info = env.reward()
        extra["reward_parts"].append(info["reward"])
        history["actions"].append(action)
        history["observations"].append(str(observation))
        history["rewards"].append(reward)
        history["valid_action"].append(valid)
        if env.too_big():
            extra["ended"] = f"turn {turn + 1}: the machine grew past {env.max_bytes >> 20} MiB"
            break
        if reward == 1 or action.lower() == "skip":
            break
    if env.corrupt_gold():
        extra["corrupt_gold"] = env.corrupt_gold()
    if env.cut:
        extra["output_cut"] = True
    best = max(history["rewards"])
    record = {"environment": t.env_name, "dataset": task.dataset(p.fs), "task_id": p.index, "query": p.query,
              "turn_history": history,
              "summary": {"max_reward": best, "max_reward_idx": history["rewards"].index(best),
                          "turns_taken": turn + 1, "turns_max": turns}}
    record["easylemur"] = extra
    return record


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
