"""lm-eval's task index, built no larger than the tasks asked for need.

A TaskManager with lm-eval's own tasks reads every YAML the package ships (14,683 tasks in 0.4.13: 5.8 s
on a 2-core host, measured), and `lm_eval.simple_evaluate` builds one per call when it is given
none. Tasks that all come from local YAMLs (`--lm-eval-include`, `eval.lm_eval_include`) need
only those indexed (0.05 s); a name that is not a plain task there (absent, or a group or tag
that may name lm-eval's tasks) gets the whole index. Each index is built once per process and
shared by every row and step that asks (the manager builds fresh Task objects per load)."""

from __future__ import annotations

import functools
from typing import Any, Sequence


@functools.lru_cache(maxsize=None)
def _manager(include: str, defaults: bool) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include or None, include_defaults=defaults)


def _plain_task(manager: Any, name: str) -> bool:
    entry = getattr(manager, "task_index", {}).get(name)
    kind = getattr(getattr(entry, "kind", None), "name", None) or (entry.get("type") if isinstance(entry, dict) else None)
    return kind in ("TASK", "PY_TASK", "task", "python_task")


def task_manager(names: Sequence[str], include: str = "") -> Any:
    """lm-eval's TaskManager for `names`: the local YAMLs of `include` alone when every name is a
    plain task there, else lm-eval's tasks and `include`'s together."""
    if include:
        local = _manager(include, False)
        if all(_plain_task(local, n) for n in names):
            return local
    return _manager(include, True)


def flat_metrics(results: dict) -> dict[str, dict[str, float]]:
    """Per task of lm-eval's `results`, its scores by metric name: "acc,none" (a metric and its
    filter) gives "acc,none" and "acc" (a bare name takes the first filter); stderrs, aliases
    and flags are not scores."""
    out: dict[str, dict[str, float]] = {}
    for task, metrics in results.items():
        values: dict[str, float] = {}
        for key, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and "stderr" not in key:
                values.setdefault(key, v)
                values.setdefault(key.split(",")[0], v)
        out[task] = values
    return out
