"""One InterCode-SQL episode as InterCode's multi-turn runner (`experiments/eval_n_turn.py`)
plays it, with either policy the paper's rows were run with, and a run over every task.

`lemur` (Lemur's fork, `--policy hf_chat --model lemur-70b-chat-v1`, the paper's Lemur rows): the
handicap is a system message (without it, the fork's "You are a helpful assistant ..." one), then
one user message: the game_sql template and the question. Each message is sent with a newline at
its end, as the fork's ChatML encoding put one before <|im_end|>; the reply is cut at the fork's
stop sequences (an endpoint is sent the first four) and stripped; a parsed query is kept in the
dialogue as a fenced ```sql block, anything else as parsed. An endpoint error is an empty reply
(the fork's HFChat returns ""), so the turn gets the retry message.

`chat` (InterCode's ChatGPTPolicy, its GPT-3.5 and GPT-4 rows): the template and the handicap are
two system messages, then the question; the reply's newlines become spaces and it is stripped; the
parsed action is the assistant's message; an endpoint error ends the episode ("blocked", reward 0).

Both: a request lost after every retry (`backends.client.EndpointLost`) ends the episode as
lost (`easylemur.lost`): counted in the row and left out of its rates. The reply goes through
the parser (`parser.py`). Not code: the retry message, reward 0.
Code runs on the task's database and is scored at once against the gold query's result
(`reward.py`); a failed query's observation is the engine's message behind InterCode's "Error
executing query: ". The next user message shows the observation (a list of rows cut to its first
50, a text to its first 1000 characters) and the reward. Once the dialogue holds more than
`dialogue_limit` messages past its first two, only the first two and the last `dialogue_limit`
are kept. The episode ends at a reward of 1 or after `turns` turns. Its score is the maximum
reward; it is solved when that is 1.

The record of an episode is InterCode's own log entry ({"environment", "dataset", "task_id",
"query", "turn_history", "summary", "hardness"}), with easylemur's additions under "easylemur".
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from easylemur.eval.agent.episode import answered, in_threads
from easylemur.eval.api.faults import EndpointLost
from easylemur.eval.benchmarks.intercode_sql.parser import parse_action
from easylemur.eval.benchmarks.intercode_sql.reward import reward as score
from easylemur.eval.benchmarks.intercode_sql.task import IcProblem, InterCodeSqlTask

Chat = Callable[[list, Sequence[str]], str]  # (messages, stop words) -> the reply's text
MAX_TOKENS = 512  # InterCode's ChatGPT call (temperature 0) and the fork's HFChat (temperature 0.01): 512 tokens
TURNS = 10  # the Lemur paper's InterCode-SQL run: 10 turns, handicap, dialogue limit 5
DIALOGUE_LIMIT = 5
OBSERVATION_ROWS = 50  # ChatGPTPolicy shows at most this many rows of a result


POLICIES = ("lemur", "chat")


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """The text up to the first stop sequence (an endpoint is sent at most four of them)."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i)
    return text[:cut]


def play(task: InterCodeSqlTask, p: IcProblem, chat: Chat, session: Any, *, turns: int = TURNS,
         dialogue_limit: Optional[int] = DIALOGUE_LIMIT, handicap: bool = True, policy: str = "lemur",
         engine: str = "") -> dict:
    """One episode. `policy`: "lemur", the fork's hf_chat policy as it ran lemur-70b-chat-v1 (the
    paper's Lemur rows), or "chat", InterCode's ChatGPTPolicy (its GPT-3.5/GPT-4 rows)."""
    t = task.texts
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    lemur = policy == "lemur"
    dialogue: list = []
    if not lemur:
        dialogue.append({"role": "system", "content": t.init_msg})
    if handicap:
        dialogue.append({"role": "system", "content": t.handicap(p.db_tables)})
    stops = t.hf_stops if lemur else ()
    history: dict = {"actions": [], "observations": [], "rewards": [], "valid_action": []}
    extra: dict = {"engine": engine, "db": p.db, "policy": policy}
    gold: list = []
    gold_known = False
    observation: Any = None
    reward: Any = None
    turn = 0
    for turn in range(turns):
        if lemur and not dialogue:  # the fork's first turn without the handicap
            dialogue += [{"role": "system", "content": t.hf_system},
                         {"role": "user", "content": t.init_msg + t.hf_separator + t.query_msg(p.query)}]
        elif dialogue and dialogue[-1]["role"] == "system":
            first = (t.init_msg if lemur else "") + t.query_msg(p.query)
            dialogue.append({"role": "user", "content": first})
        else:
            shown = observation
            if isinstance(shown, str) and len(shown) > t.response_limit:
                shown = shown[:t.response_limit]
            elif isinstance(shown, list) and len(shown) > OBSERVATION_ROWS:
                shown = shown[:OBSERVATION_ROWS]
            dialogue.append({"role": "user", "content": t.obs_msg(shown, reward, p.query)})
            if dialogue_limit and len(dialogue) - 2 > dialogue_limit:
                dialogue = dialogue[:2] + dialogue[-dialogue_limit:]
        # The fork encoded each message as ChatML with a newline before <|im_end|>: sent so, a
        # ChatML chat template renders the fork's text
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
        if lemur:
            reply = cut_at_stops(reply, stops).strip()
        else:
            reply = reply.replace("\n", " ").strip()
        action, is_code = parse_action(reply, t.keywords, t.sql_prefix, t.no_action)
        kept = t.fenced(action) if lemur and is_code else action
        dialogue.append({"role": "assistant", "content": kept})
        if not is_code:
            reward, observation, valid = 0, t.retry_msg(), False
        else:
            if action != "skip":
                rows, error = session.execute(action)
                observation, valid = (t.error_msg(error), False) if error is not None else (rows, True)
            else:
                observation, valid = "skipped", True
            if not gold_known:
                gold_rows, gold_error = session.execute(p.gold)
                gold, gold_known = (gold_rows if isinstance(gold_rows, list) else []), True
                if gold_error is not None:
                    extra["corrupt_gold"] = gold_error
            reward = score(observation, gold)
        history["actions"].append(action)
        history["observations"].append(str(observation))
        history["rewards"].append(reward)
        history["valid_action"].append(valid)
        if reward == 1 or action.lower() == "skip":
            break
    if getattr(session, "cut", False):
        extra["rows_cut"] = True
    best = max(history["rewards"])
    record = {"environment": t.env_name, "dataset": task.dataset, "task_id": p.task_id, "query": p.query,
              "turn_history": history,
              "summary": {"max_reward": best, "max_reward_idx": history["rewards"].index(best),
                          "turns_taken": turn + 1, "turns_max": turns}}
    if p.hardness is not None:
        record["hardness"] = p.hardness
    record["easylemur"] = extra
    return record


class _NoDatabase:
    def __init__(self, why: str):
        self.why = why

    def execute(self, sql: str) -> tuple:
        return None, self.why

    def close(self) -> None:
        pass


def run_budget(task: InterCodeSqlTask, chat: Chat, engine: Any, budget: int = TURNS, *,
               dialogue_limit: Optional[int] = DIALOGUE_LIMIT, handicap: bool = True, policy: str = "lemur",
               concurrency: int = 8, progress: Optional[Callable[[], None]] = None) -> list[dict]:
    """Every task's episode with at most `budget` turns: InterCode's log entries, in task order."""

    def one(p: IcProblem) -> dict:
        try:
            session = engine.session(p.db)
        except Exception as e:  # noqa: BLE001 - e.g. a database missing from SQLite's folder: every query fails
            session = _NoDatabase(f"{type(e).__name__}: {e}")
        try:
            return play(task, p, chat, session, turns=budget, dialogue_limit=dialogue_limit, handicap=handicap,
                        policy=policy, engine=engine.name)
        finally:
            session.close()

    return in_threads(one, task.problems, concurrency, progress)


def success_rate(records: Sequence[dict]) -> float:
    """The share of the episodes the endpoint answered whose maximum reward is 1."""
    records = answered(records)
    return sum(r["summary"]["max_reward"] == 1 for r in records) / max(1, len(records))


def mean_reward(records: Sequence[dict]) -> float:
    records = answered(records)
    return sum(float(r["summary"]["max_reward"]) for r in records) / max(1, len(records))
