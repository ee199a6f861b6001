"""pass@k with the unbiased estimator of the Codex paper."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from easylemur.errors import InputError


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of a problem's n samples, c of them correct,
    drawn without replacement include a correct one."""
    if not 0 <= c <= n:
        raise InputError(f"pass@k: {c} correct of {n} samples is impossible")
    if k > n:
        raise InputError(f"pass@{k} needs at least {k} samples per problem, but a problem has {n}")
    if k < 1:
        raise InputError(f"pass@{k}: k must be >= 1")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Iterable[tuple[int, int]], ks: Sequence[int]) -> dict[str, float]:
    """{"pass@k": mean over problems} from per-problem (samples, correct)."""
    counts = list(counts)
    if not counts:
        raise InputError("pass@k of no problems")
    return {f"pass@{k}": sum(pass_at_k(n, c, k) for n, c in counts) / len(counts) for k in ks}


class NotAKList(InputError):
    """A k list that is not comma-separated integers."""


def parse_ks(text: str, what: str = "-k") -> list[int]:
    """The k of pass@k from "1,10" (sorted, each once); NotAKList when it is not integers, an
    InputError naming `what` when one is below 1 or there is none."""
    try:
        ks = sorted({int(k) for k in str(text).split(",") if k.strip()})
    except ValueError:
        raise NotAKList(f"{what} {text!r}: expected comma-separated integers such as 1,10") from None
    if not ks or ks[0] < 1:
        raise InputError(f"{what} {text!r}: every k must be >= 1")
    return ks
