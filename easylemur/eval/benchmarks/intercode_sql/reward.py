"""InterCode-SQL's reward (`SqlEnv.get_reward`), restated: how close one executed query's result
is to the gold query's.

Each row is compared as its Python text (`str(row)` of the tuple the driver returns), so rows are
multisets of strings:
- the agent's observation is not a result (an error, or a statement with no result set): 0.0;
- both results empty: 1 (an int, as InterCode returns it);
- else the multiset intersection over the multiset union (per row text: the smaller and the
  larger of the two counts), and when they share rows, that ratio times Kendall's tau-b between
  the order the shared rows take in the agent's result and in the gold's (each row's text its
  rank, compared as strings), rounded to 2 decimals the way numpy rounds; a tau that is
  undefined (one shared row, or all shared rows equal) leaves the ratio as it is, unrounded.
  A reversed order can make the reward negative, as InterCode's can.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

import numpy as np


def _shared_in_order(rows: Sequence[str], shared: Counter) -> list[str]:
    """The rows of `rows` that are shared, in their order, each taken at most its shared count."""
    left, out = Counter(shared), []
    for r in rows:
        if left[r] > 0:
            left[r] -= 1
            out.append(r)
    return out


def kendall_tau_b(a: Sequence[str], b: Sequence[str]) -> float:
    """Kendall's tau-b of two equal-length sequences of comparable values (NaN when undefined), as
    scipy computes it: (concordant - discordant) / sqrt(pairs - ties in a) / sqrt(pairs - ties in b)."""
    n = len(a)
    if n == 0:
        return math.nan
    order = {k: i for i, k in enumerate(sorted(set(a) | set(b)))}
    x = np.array([order[v] for v in a], dtype=np.int64)
    y = np.array([order[v] for v in b], dtype=np.int64)
    pairs = n * (n - 1) // 2
    tie_x = sum(c * (c - 1) // 2 for c in Counter(a).values())
    tie_y = sum(c * (c - 1) // 2 for c in Counter(b).values())
    if tie_x == pairs or tie_y == pairs:
        return math.nan
    s = 0
    for i in range(n - 1):  # sum over pairs i < j of sign(x_i - x_j) * sign(y_i - y_j)
        s += int(np.dot(np.sign(x[i] - x[i + 1:]), np.sign(y[i] - y[i + 1:])))
    tau = np.float64(s) / np.sqrt(pairs - tie_x) / np.sqrt(pairs - tie_y)
    return float(min(1.0, max(-1.0, tau)))


def row_texts(rows: Sequence[Any]) -> list[str]:
    return [str(tuple(r)) if isinstance(r, list) else str(r) for r in rows]


def reward(agent: Any, gold: Any) -> Any:
    """The reward of an observation `agent` (a list of row tuples, or anything else for no result)
    against the gold result `gold` (a list of row tuples)."""
    if not isinstance(agent, list) or not isinstance(gold, list):
        return 0.0
    mine, theirs = Counter(row_texts(agent)), Counter(row_texts(gold))
    if not mine and not theirs:
        return 1
    shared = mine & theirs
    union = mine | theirs
    value: Any = sum(shared.values()) * 1.0 / sum(union.values())
    if shared:
        tau = kendall_tau_b(_shared_in_order(row_texts(agent), shared), _shared_in_order(row_texts(gold), shared))
        if not math.isnan(tau):
            value = float(np.round(np.float64(tau) * value, 2))
    return value
