"""WebArena's evaluators (`evaluation_harness/evaluators.py` at the pinned commit), restated: a
task's score is the product of its `eval_types`' scores, in their order, each 0.0 or 1.0.

- string_match, on the answer of the episode's last action (a stop's answer; "" otherwise),
  cleaned (stripped, one pair of enclosing quotes removed, lower-cased):
  `exact_match`: equal to the cleaned reference; `must_include`: each reference is in it, and
  when the list has one reference of one character, that character must be one of the answer's
  words (NLTK's word_tokenize); `fuzzy_match`: each reference judged by the LLM judge
  (`judge.py`; WebArena's: GPT-4), and a reference "N/A" met by the answer "N/A" itself or, failing
  that, by the judge comparing the answer with the task's string_note (ua_match);
- url_match ("GOLD in PRED"): the page's final URL, its trailing "/" removed, holds one of the
  references' host+path, and every query key of the references has one of their values in its
  query;
- program_html: per target, the page is taken to the target's URL ("last": where the episode
  ended; `func:`: the URL a helper gives, helpers.py; each `goto` is followed by WebArena's 3 s
  wait), the locator is evaluated there (empty: the page's HTML; `document.` / `[...document.`:
  that JavaScript, after the target's prep_actions, "" when it throws; `func:`: a helper's value)
  and HTML-unescaped, then compared by `exact_match` or by
  `must_include` where each required content may list alternatives joined by " |OR| ".

Difference: word_tokenize needs NLTK's `punkt_tab` data, which is fetched, not installed. Where
it is missing, sentences are split at a ".", "!" or "?" followed by space (punkt also knows
abbreviations) and each is tokenized as NLTK's Treebank tokenizer does; this matters only for a
one-character reference next to a sentence's end."""

from __future__ import annotations

import collections
import html
import re
import time
import urllib.parse
from typing import Any, Callable, Optional

GOTO_WAIT = 3.0  # HTMLContentEvaluator's time.sleep(3) after page.goto
Judge = Callable[[str, str, str, str], float]  # (kind "fuzzy" | "ua", pred, reference, question) -> score (judge.py)


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if answer.startswith("'") and answer.endswith("'"):
        answer = answer[1:-1]
    elif answer.startswith('"') and answer.endswith('"'):
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def words(text: str) -> list[str]:
    """NLTK's word_tokenize (see the module's note where punkt_tab is missing)."""
    from nltk.tokenize import word_tokenize

    try:
        return word_tokenize(text)
    except LookupError:
        return [w for s in re.split(r"(?<=[.!?])\s+", text) for w in word_tokenize(s, preserve_line=True)]


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(ref) == 1 and len(words(ref)) == 1:
        return float(ref in words(pred))
    return float(ref in pred)


def string_score(config: dict, answer: str, judge: Optional[Judge] = None) -> float:
    pred = clean_answer(answer)
    score = 1.0
    for approach, value in config["eval"]["reference_answers"].items():
        if approach == "exact_match":
            score *= exact_match(value, pred)
        elif approach == "must_include":
            for ref in value:
                score *= must_include(ref, pred, tokenize=len(value) == 1)
        elif approach == "fuzzy_match":
            if judge is None:
                raise ValueError(f"task {config['task_id']}: fuzzy_match needs the LLM judge")
            if value == "N/A":  # an unachievable task: "N/A" itself, else the judge compares the reasons
                score *= exact_match(value, pred)
                if score != 1:
                    score = judge("ua", pred, config["eval"]["string_note"], config["intent"])
            else:
                for ref in value:
                    score *= judge("fuzzy", pred, ref, config["intent"])
        else:
            raise ValueError(f"task {config['task_id']}: unknown reference_answers kind {approach!r}")
    return score


def _split_url(url: str) -> tuple[str, dict]:
    parsed = urllib.parse.urlparse(url)
    return parsed.netloc + parsed.path, urllib.parse.parse_qs(parsed.query)


def url_score(config: dict, page_url: str) -> float:
    rule = config["eval"].get("url_note", "GOLD in PRED")
    if rule != "GOLD in PRED":
        raise ValueError(f"task {config['task_id']}: unknown url_note {rule!r}")
    refs = [str(u).rstrip("/") for u in config["eval"]["reference_url"].split(" |OR| ")]
    ref_paths, ref_queries = [], collections.defaultdict(set)
    for url in refs:
        path, query = _split_url(url)
        ref_paths.append(path)
        for k, v in query.items():
            ref_queries[k].update(v)
    # WebArena compares each reference's host+path with the prediction's as a substring of it
    pred_path, pred_query = _split_url(str(page_url).rstrip("/"))
    score = float(any(path in pred_path for path in ref_paths))
    for k, values in ref_queries.items():
        score *= float(any(v in pred_query.get(k, []) for v in values))
    return score


def html_score(config: dict, page: Any, wait: float = GOTO_WAIT, helpers: Optional[dict] = None) -> float:
    from easylemur.eval.benchmarks.webarena.helpers import call

    score = 1.0
    for target in config["eval"]["program_html"]:
        url, locator = target["url"], target["locator"]
        if url.startswith("func"):
            url = call(url.split("func:")[1].replace("__last_url__", page.url), page, helpers or {})
        if url != "last":
            page.goto(url)
            time.sleep(wait)
        if not locator.strip():
            selected = page.content()
        elif locator.startswith(("document.", "[...document.")):
            for prep in target.get("prep_actions", []):
                try:
                    page.evaluate(f"() => {prep}")
                except Exception:  # noqa: BLE001 - WebArena ignores a failing preparation
                    break
            try:
                selected = str(page.evaluate(f"() => {locator}")) or ""
            except Exception:  # noqa: BLE001 - WebArena: the page is wrong, the selection empty
                selected = ""
        elif locator.startswith("func:"):
            selected = call(locator.split("func:")[1], page, helpers or {})
        else:
            raise ValueError(f"task {config['task_id']}: unknown locator {locator[:40]!r}")
        selected = html.unescape(selected)
        required = target["required_contents"]
        if "exact_match" in required:
            score *= exact_match(required["exact_match"], selected)
        elif "must_include" in required:
            for content in required["must_include"]:
                score *= float(any(must_include(c, selected) for c in content.split(" |OR| ")))
        else:
            raise ValueError(f"task {config['task_id']}: unknown required_contents {sorted(required)}")
    return score


def evaluate(config: dict, answer: str, page: Any, wait: float = GOTO_WAIT, judge: Optional[Judge] = None,
             helpers: Optional[dict] = None) -> float:
    """The task's score: the product of its eval_types' scores, in their order (WebArena's
    EvaluatorComb); `answer` is the last action's answer, `page` the episode's last page, `judge`
    WebArena's LLM judge for fuzzy_match references (judge.py), `helpers` the functions a `func:`
    target calls (helpers.py)."""
    score = 1.0
    for kind in config["eval"]["eval_types"]:
        if kind == "string_match":
            score *= string_score(config, answer, judge)
        elif kind == "url_match":
            score *= url_score(config, page.url)
        elif kind == "program_html":
            score *= html_score(config, page, wait, helpers)
        else:
            raise ValueError(f"task {config['task_id']}: eval_type {kind} is not supported")
    return score
