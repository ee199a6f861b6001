"""One WebArena episode as WebArena's `run.py` plays it with its defaults and the CoT prompt
(`p_cot_id_actree_2s`), and a run over the tasks.

Each step, as run.py's loop: first its early stops (the step limit, 30 actions; 3 unparsable
replies in a row; the same action 3 times in a row, or for a `type`, the same typing 3 times in
the episode), which end the episode with a stop action whose answer is "Early stop: <why>".
Otherwise the model is asked (WebArena's OpenAI chat format: the intro as the system message,
each example as two system messages named example_user and example_assistant, then the template
filled with the observation cut to `max_obs_length` tokens, the page's URL with the deployment's
address replaced by the site's real-world one, the intent and the previous action's description);
its reply (after the prompt's force_prefix) is read between the first two action splitters
(```), the real-world URLs in it mapped back to the deployment, and parsed as an id-based action;
a reply that does not parse is a no-op action (max_retry 1). A stop action ends the episode;
anything else runs in the browser. The score is WebArena's evaluators' on the episode's last
action and last page (`evaluators.py`); success is a score of 1. A request lost after every retry
(`EndpointLost`) ends the task as lost (`easylemur.lost`), and an episode that raised (the
browser, the site, a judge's reply without a verdict) ends in an error (`easylemur.errors`): both
are counted in the row and left out of its rate, as run.py leaves an errored task out of its
average.

Differences: the reply is sampled at the suite's temperature (default 0: greedy; WebArena's
default 1.0 with top_p 0.9), with WebArena's max_tokens (384); the observation is cut by the
model's tokenizer where the suite has it (a checkpoint's, or an endpoint's local `--tokenizer`)
and left whole otherwise (WebArena always cuts by the served model's tokenizer); tasks run one at
a time, as run.py runs them (they change the sites' state)."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Optional, Sequence

from easylemur.eval.agent.episode import answered
from easylemur.eval.api.faults import EndpointLost
from easylemur.eval.benchmarks.webarena.evaluators import GOTO_WAIT, evaluate
from easylemur.eval.benchmarks.webarena.helpers import HelperError
from easylemur.eval.benchmarks.webarena.judge import JudgeError
from easylemur.eval.benchmarks.webarena.task import WebArenaProblem, WebArenaTask
from easylemur.eval.benchmarks.webarena.texts import WebArenaTexts

Model = Callable[[list, Sequence[str]], str]  # (chat messages, stop words) -> the reply


def equivalent(a: dict, b: dict) -> bool:
    """run.py's is_equivalent for the id-based actions."""
    kind = a["action_type"]
    if kind != b["action_type"]:
        return False
    if kind == "SCROLL":
        return ("up" if "up" in a["direction"] else "down") == ("up" if "up" in b["direction"] else "down")
    if kind == "KEY_PRESS":
        return a["key_comb"] == b["key_comb"]
    if kind in ("CLICK", "HOVER", "TYPE"):
        return bool(a.get("element_id")) and bool(b.get("element_id")) and a["element_id"] == b["element_id"]
    if kind == "PAGE_FOCUS":
        return a["page_number"] == b["page_number"]
    if kind == "GOTO_URL":
        return a["url"] == b["url"]
    if kind == "STOP":
        return a["answer"] == b["answer"]
    return True  # NONE, NEW_TAB, GO_BACK, GO_FORWARD, PAGE_CLOSE


def early_stop(actions: list[dict], run: dict) -> str:
    """run.py's early_stop: why the episode ends before asking the model ("" to go on)."""
    if len(actions) >= run["max_steps"]:
        return f"Reach max steps {run['max_steps']}"
    k = run["parsing_failure_th"]
    if len(actions[-k:]) >= k and all(a["action_type"] == "NONE" for a in actions[-k:]):
        return f"Failed to parse actions for {k} times"
    if not actions:
        return ""
    k, last = run["repeating_action_failure_th"], actions[-1]
    if last["action_type"] != "TYPE":
        if len(actions[-k:]) >= k and all(equivalent(a, last) for a in actions[-k:]):
            return f"Same action for {k} times"
    elif sum(equivalent(a, last) for a in actions) >= k:
        return f"Same typing action for {k} times"
    return ""


class Urls:
    """The prompt shows each site by its real-world URL (env_config's URL_MAPPINGS), and the
    model's actions are mapped back to the deployment (PromptConstructor.map_url_to_*)."""

    def __init__(self, texts: WebArenaTexts, deployment: dict):
        self.pairs = [(deployment[v], real) for v, real in texts.sites.items() if v in deployment]

    def to_real(self, url: str) -> str:
        for local, real in self.pairs:
            if local in url:
                url = url.replace(local, real)
        return url

    def to_local(self, text: str) -> str:
        for local, real in self.pairs:
            if real in text:
                text = text.replace(real, local)
            if real.replace("http", "https") in text:
                text = text.replace(real.replace("http", "https"), local)
        return text


def messages(texts: WebArenaTexts, observation: str, url: str, intent: str, previous_action: str) -> list[dict]:
    """WebArena's chat-mode prompt (PromptConstructor.get_lm_api_input, OpenAI chat)."""
    out = [{"role": "system", "content": texts.intro}]
    for x, y in texts.examples:
        out += [{"role": "system", "name": "example_user", "content": x},
                {"role": "system", "name": "example_assistant", "content": y}]
    current = texts.template.format(objective=intent, url=url, observation=observation, previous_action=previous_action)
    return out + [{"role": "user", "content": current}]


def extract_action(texts: WebArenaTexts, reply: str) -> Optional[str]:
    """The text between the first two action splitters (None: there is none)."""
    s = re.escape(texts.action_splitter)
    m = re.search(rf"{s}((.|\n)*?){s}", reply)
    return m.group(1).strip() if m else None


def play(task: WebArenaTask, p: WebArenaProblem, model: Model, *, truncate: Optional[Callable[[str], str]] = None,
         browser: Any = None, wait: float = GOTO_WAIT) -> dict:
    """One episode on `browser` (an open `browser.Browser`, reset for the task; None: one of its
    own): its record (the actions, the replies, the final URL, the score)."""
    from easylemur.eval.benchmarks.webarena.browser import ActionParsingError, Browser, action_description, \
        none_action, parse_action, stop_action

    if browser is None:
        with Browser(viewport=(task.texts.run["viewport_width"], task.texts.run["viewport_height"])) as own:
            return play(task, p, model, truncate=truncate, browser=own, wait=wait)
    t, config = task.texts, task.configured(p)
    urls = Urls(t, task.deployment())
    began = time.monotonic()
    actions: list[dict] = []
    history = ["None"]
    steps: list[dict] = []
    record: dict[str, Any] = {"task_id": p.task_id, "intent": p.intent, "sites": p.sites}
    obs = browser.reset(config["start_url"], storage_state=config.get("storage_state") or None,
                        geolocation=config.get("geolocation"))
    while True:
        why = early_stop(actions, t.run)
        if why:
            action, reply = stop_action(f"Early stop: {why}"), ""
        else:
            text = truncate(obs["text"]) if truncate else obs["text"]
            reply = t.force_prefix + model(messages(t, text, urls.to_real(obs["url"]), p.intent, history[-1]), ())
            found = extract_action(t, reply)
            try:
                if found is None:
                    raise ActionParsingError(f'Cannot find the answer phrase "{t.answer_phrase}"')
                action = parse_action(urls.to_local(found))
            except ActionParsingError:
                action = none_action()
            action["raw_prediction"] = reply
        actions.append(action)
        history.append(action_description(action, obs["nodes"]))
        steps.append({"url": obs["url"], "reply": reply, "action": history[-1]})
        if action["action_type"] == "STOP":
            break
        result = browser.step(action)
        obs = result["observation"]
        if result.get("fail_error"):
            steps[-1]["fail_error"] = result["fail_error"]
    record["final_url"] = browser.page.url
    extra: dict[str, Any] = {}
    try:
        record["score"] = evaluate(config, actions[-1].get("answer", ""), browser.page, wait, task.judge,
                                   task.helpers())
    except (JudgeError, HelperError) as e:  # WebArena's assertions: the task ends in an error, outside the average
        record["score"], extra["errors"] = 0.0, [f"evaluator: {e}"]
    record.update(answer=actions[-1].get("answer", ""), steps=steps,
                  easylemur={"seconds": round(time.monotonic() - began, 1), "actions": len(actions), **extra})
    return record


def run_tasks(task: WebArenaTask, model: Model, *, truncate: Optional[Callable[[str], str]] = None,
              progress: Optional[Callable[[], None]] = None) -> list[dict]:
    """Every task of `task.problems` in order, one at a time, on one Chromium (each task in a fresh
    context, as WebArena's reset gives it); an episode that fails (the browser, the site) is
    recorded with its error (outside the rate: `scored`), and the next one gets a new Chromium."""
    from easylemur.eval.benchmarks.webarena.browser import Browser

    out: list[dict] = []
    browser = None
    try:
        for p in task.problems:
            try:
                if browser is None:
                    browser = Browser(viewport=(task.texts.run["viewport_width"], task.texts.run["viewport_height"]))
                out.append(play(task, p, model, truncate=truncate, browser=browser))
            except EndpointLost as e:  # no answer after every retry: no measurement of the model
                out.append({"task_id": p.task_id, "intent": p.intent, "sites": p.sites, "score": 0.0,
                            "easylemur": {"lost": str(e)}})
            except Exception as e:  # noqa: BLE001 - one task's failure is its record, the run goes on
                out.append({"task_id": p.task_id, "intent": p.intent, "sites": p.sites, "score": 0.0,
                            "easylemur": {"errors": [f"{type(e).__name__}: {e}"]}})
                if browser is not None:
                    browser.close()
                    browser = None
            if progress:
                progress()
    finally:
        if browser is not None:
            browser.close()
    return out


def scored(records: Sequence[dict]) -> list[dict]:
    """The episodes WebArena's average is over: those that ended without an error (run.py leaves a
    task whose episode raised out of its scores) and that the endpoint answered."""
    return [r for r in answered(records) if not r.get("easylemur", {}).get("errors")]


def success_rate(records: Sequence[dict]) -> float:
    """The share of the scored episodes (`scored`) whose score is 1."""
    kept = scored(records)
    return sum(r["score"] == 1 for r in kept) / max(len(kept), 1)
