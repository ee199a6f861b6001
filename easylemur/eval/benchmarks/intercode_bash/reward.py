"""InterCode-Bash's reward (`BashEnv.get_reward` of intercode/envs/bash/bash_env.py), restated:
how close the agent's machine and last output are to those the gold command leaves on a fresh
copy of the same file system. 0.01 plus three parts of at most 0.33, added in this order:

1. file system: `git status --short` of both machines read as InterCode reads it (all of the
   output split on blank space and taken two words at a time as (status, path): a path git quotes
   for a space comes out as two pairs); 0.33 x (1 - erf(changes only one side has)), rounded to 2
   decimals (one difference: 0.05; two or more: 0.0);
2. changed files: of the (path, status) pairs both sides have whose status is A, ?? or C (added,
   untracked, copied: never M), the share whose content matches, times 0.33, rounded to 2 decimals
   (0.33 when there are none). InterCode compares `md5sum PATH` output for a path with a "." and
   `md5deep -r PATH` output for one without; its image has no md5deep, so those two outputs are
   the same error message on both sides and such a path always matches (restated so here);
3. output: the cosine similarity of the TF-IDF vectors (scikit-learn's TfidfVectorizer with its
   defaults, fitted on the two texts) of the agent's last observation and the gold command's
   output, times 0.33, rounded to 2 decimals as numpy rounds; where the vectorizer raises (no
   word of two letters in either text, or no gold output), 1 if the two are equal, else 0.

Rounding is InterCode's: Python's `round` for parts 1 and 2 and for part 3's fallback, numpy's for
part 3's similarity (a numpy float). Success is a reward of exactly 1 (0.01 + 3 x 0.33 == 1.0 in
floating point)."""

from __future__ import annotations

import collections
import math
import re
from typing import Callable, Optional, Sequence

import numpy as np

BASE, WEIGHT = 0.01, 0.33
CHECKED = ("A", "??", "C")  # statuses whose content is compared (InterCode's filter_changes)
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # TfidfVectorizer's default token_pattern


def parse_status(status: str) -> list[tuple[str, str]]:
    """BashEnv.parse_status: (path, status) pairs from `git status --short`'s words, two at a
    time. A lone last word (a quoted path with an odd number of spaces) is left out here;
    InterCode's IndexError there would stop its run."""
    words = status.split()
    return [(words[i + 1], words[i]) for i in range(0, len(words) - 1, 2)]


def hashed_with_md5sum(path: str) -> bool:
    """InterCode hashes a path with "." by `md5sum PATH`, others by `md5deep -r PATH` (absent in its image)."""
    return "." in path


def tfidf_similarity(a: str, b: str) -> float:
    """The cosine similarity scikit-learn's default TfidfVectorizer gives two texts (ValueError
    where it raises: no word in either text)."""
    docs = [collections.Counter(_TOKEN.findall(t.lower())) for t in (a, b)]
    vocab = sorted(set(docs[0]) | set(docs[1]))
    if not vocab:
        raise ValueError("empty vocabulary; perhaps the documents only contain stop words")
    df = np.array([sum(w in d for d in docs) for w in vocab], dtype=np.float64)
    idf = np.log((1 + 2) / (1 + df)) + 1
    rows = []
    for d in docs:
        v = np.array([d.get(w, 0) for w in vocab], dtype=np.float64) * idf
        norm = np.sqrt(np.dot(v, v))
        rows.append(v / norm if norm > 0 else v)
    return np.float64(np.dot(rows[0], rows[1]))  # type: ignore[return-value]


def answer_similarity(agent: Optional[str], gold: Optional[str]):  # noqa: ANN201 - a numpy float or an int, as InterCode's
    try:
        if not isinstance(agent, str) or not isinstance(gold, str):
            raise TypeError("not a text")
        return tfidf_similarity(agent, gold)
    except (ValueError, TypeError):
        return 1 if agent == gold else 0


def reward(agent_status: str, gold_status: str, agent_obs: Optional[str], gold_obs: Optional[str],
           same_content: Callable[[str], bool]) -> tuple[float, dict]:
    """(reward, InterCode's info) from both machines' `git status --short` output, the agent's
    last observation and the gold command's output (None when it could not run), and
    `same_content(path)`: whether a path both changed holds the same content on both."""
    diff_agent, diff_eval = parse_status(agent_status), parse_status(gold_status)
    info: dict = {"reward": {}}
    total = BASE
    info["diff_miss"] = sorted(set(diff_eval) - set(diff_agent))
    info["diff_extra"] = sorted(set(diff_agent) - set(diff_eval))
    p1 = round(WEIGHT * (1 - math.erf(len(info["diff_miss"]) + len(info["diff_extra"]))), 2)
    info["reward"]["file_diff"] = p1
    total += p1
    p2 = WEIGHT
    both = sorted(x for x in set(diff_agent) & set(diff_eval) if x[1] in CHECKED)
    if both:
        same = sum(bool(same_content(path)) for path, _ in both)
        info["diff_same"] = {"files": both, "correct": same, "total": len(both)}
        p2 = round(WEIGHT * (same / len(both)), 2)
    info["reward"]["file_changes"] = p2
    total += p2
    info["agent_obs"], info["eval_obs"] = agent_obs, gold_obs
    sim = answer_similarity(agent_obs, gold_obs)
    info["answer_similarity"] = float(sim)
    p3 = float(np.round(WEIGHT * sim, 2)) if isinstance(sim, np.floating) else round(WEIGHT * sim, 2)
    info["reward"]["answer_similarity"] = p3
    total += p3
    return total, info


def changed_paths(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [p for p, s in pairs if s in CHECKED]
