"""One InterCode-CTF episode as InterCode's multi-turn runner (`experiments/eval_n_turn.py`) plays it
with the settings of Lemur's fork's `scripts/expr_ctf.sh` (`--env ctf --template ctf --dialogue_limit
7 --max_turns 10`), and a run over every task.

Policies: `lemur` (the fork's `hf_chat` for lemur-70b-chat-v1, the paper's Lemur row): the fork's
system message, then one user message, the ctf template (its demonstrations included) and "Task:
<query>"; the dialogue is sent as the fork sent it to its TGI endpoint, a completion of its ChatML
text (`lemur_encode_message`) with "Action:" after the assistant's header, stopped at the fork's stop
sequences; the reply is cut at "<|im_end|>", stripped, and read as "Action: <reply>", so every reply
is an action (its first line); the dialogue keeps "Action: <action>"; an endpoint error is an empty
reply. `chat` (InterCode's ChatGPTPolicy, its GPT rows): the template as the system message, the
task as the user's; the reply's newlines become spaces; the parsed action is the assistant's message;
an endpoint error ends the episode "blocked".

Each turn, as the runner's loop: a reply without "Action:" gets the retry message and reward 0;
"skip" ends the episode; "submit <flag>" is judged (`environment.py`) and a wrong flag's observation is
the runner's "Submitted flag is incorrect. Keep trying!"; anything else runs on the machine
(reward 0). The next user message is the observation (cut to 1000 characters; "Output: ..." or "No
output"). Past `dialogue_limit` messages after the first two, only those two and the last
`dialogue_limit` are kept. The episode ends at a reward of 1, after "skip", or after `turns` turns;
it is solved when its reward reached 1.

Records are InterCode's log entries with easylemur's additions under `easylemur`."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

from easylemur.eval.agent.episode import in_threads
from easylemur.eval.benchmarks.intercode_bash.protocol import Dialogue
from easylemur.eval.benchmarks.intercode_ctf.environment import CtfEnvironment
from easylemur.eval.benchmarks.intercode_ctf.parser import parse_action
from easylemur.eval.benchmarks.intercode_ctf.task import CtfProblem, InterCodeCtfTask
from easylemur.eval.benchmarks.intercode_sql.protocol import POLICIES, cut_at_stops, mean_reward, success_rate
from easylemur.eval.sandbox import Sandbox

# (a prompt, the stop words) -> the reply: a str prompt is a text to complete (the fork's ChatML text),
# a list is chat messages
Model = Callable[[Union[str, list], Sequence[str]], str]
MAX_TOKENS = 512
TURNS = 10  # Lemur's fork, scripts/expr_ctf.sh: --max_turns 10 --dialogue_limit 7 --template ctf
DIALOGUE_LIMIT = 7

__all__ = ["POLICIES", "play", "run_budget", "success_rate", "mean_reward"]


def play(task: InterCodeCtfTask, p: CtfProblem, model: Model, env: Any, *, turns: int = TURNS,
         dialogue_limit: Optional[int] = DIALOGUE_LIMIT, policy: str = "lemur") -> dict:
    """One episode on `env` (the task's machine), InterCode's log entry."""
    t = task.texts
    d = Dialogue(t, p.query, policy, dialogue_limit)
    d.extra["task_folder"] = p.task_id
    observation: Any = None
    turn = 0
    for turn in range(turns):
        d.next_user(t.obs_msg, observation)
        reply = d.ask(model, t.encode(d.messages) if d.lemur else list(d.messages), turn)
        if reply is None:
            break
        if d.lemur:  # the fork's post-processing, then "Action: " before the reply
            reply = t.action_prompt + " " + cut_at_stops(reply, d.stops).split("<|im_end|>")[0].strip()
        else:
            reply = reply.replace("\n", " ").strip()
        action, is_code = parse_action(reply)
        d.messages.append({"role": "assistant", "content": t.kept(action) if d.lemur else action})
        done = False
        if not is_code:
            reward, observation, valid = 0, t.retry_msg, False
        elif action == "skip":
            reward, observation, valid, done = 0, "skipped", True, True
        elif action.startswith("submit"):
            reward, observation, valid, done = env.submit(action), env.observation, True, True
        else:
            (observation, valid), reward = env.execute(action), 0
        if done and reward != 1 and action.lower() != "skip":
            observation = t.wrong_flag
        d.log(action, observation, reward, valid)
        if d.over(env, action, reward, turn):
            break
    return d.record(t.env_name, task.dataset, p.index, turn, turns, env)


def run_budget(task: InterCodeCtfTask, model: Model, sandbox: Sandbox, budget: int = TURNS, *,
               dialogue_limit: Optional[int] = DIALOGUE_LIMIT, policy: str = "lemur", concurrency: int = 8,
               progress: Optional[Callable[[], None]] = None) -> list[dict]:
    """Every task's episode with at most `budget` turns, each on a machine of its own: InterCode's
    log entries, in task order. The caller leaves out the tasks the sandbox cannot run."""

    def one(p: CtfProblem) -> dict:
        try:
            env = CtfEnvironment(task.files, task.texts, sandbox, p)
        except Exception as e:  # noqa: BLE001 - the task's machine could not be made: recorded, never played
            return {"environment": task.texts.env_name, "dataset": task.dataset, "task_id": p.index, "query": p.query,
                    "turn_history": {"actions": [], "observations": [], "rewards": [0], "valid_action": []},
                    "summary": {"max_reward": 0, "max_reward_idx": 0, "turns_taken": 0, "turns_max": budget},
                    "easylemur": {"policy": policy, "task_folder": p.task_id, "errors": [f"machine: {e}"]}}
        try:
            return play(task, p, model, env, turns=budget, dialogue_limit=dialogue_limit, policy=policy)
        finally:
            env.close()

    return in_threads(one, task.problems, concurrency, progress)
