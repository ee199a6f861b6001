"""The eval tasks a config may name (`eval.tasks`): benchmarks by their registry's names
(`easylemur/eval/benchmarks/registry.py`, the one table of them), lm-evaluation-harness tasks
(`LM_EVAL`), and the checks of the `eval.*` task keys (`_check_task_evals`)."""

from __future__ import annotations

from ml_collections import ConfigDict

from easylemur.config.schema import ConfigError
from easylemur.errors import InputError

LM_EVAL = "lm_eval:"  # eval.tasks prefix of an lm-evaluation-harness task


def task_eval_names(tasks: str) -> list[str]:
    """eval.tasks as a list of task names (validated by `validate`)."""
    return [t.strip() for t in tasks.split(",") if t.strip()]


def _check_task_evals(e: ConfigDict) -> None:
    if not isinstance(e.tasks, str):
        raise ConfigError(f"config key 'eval.tasks' must be a comma-separated string, got {e.tasks!r}")
    # the registry and the agent engine are standard library only: validating loads no model code
    from easylemur.eval.agent.episode import FEEDBACKS
    from easylemur.eval.api.passk import NotAKList, parse_ks
    from easylemur.eval.benchmarks.registry import lookup

    names = task_eval_names(e.tasks)
    benchmarks = []
    for name in names:
        if name.startswith(LM_EVAL) and name[len(LM_EVAL):]:
            continue
        try:
            benchmarks.append((name, lookup(name)[0]))
        except InputError as err:
            raise ConfigError(f"config key 'eval.tasks': {err}; or {LM_EVAL}NAME for an lm-evaluation-harness task") from None
    if e.feedback not in FEEDBACKS:
        raise ConfigError(f"config key 'eval.feedback' must be one of {', '.join(FEEDBACKS)}, got {e.feedback!r}")
    if e.turns < 1:
        raise ConfigError(f"config key 'eval.turns' must be at least 1, got {e.turns}")
    if e.every_tasks < 0:
        raise ConfigError(f"config key 'eval.every_tasks' must be 0 or more, got {e.every_tasks}")
    if not names:
        return
    if not e.every_tasks:
        raise ConfigError(f"eval.tasks={e.tasks!r} but eval.every_tasks=0; set how often they run")
    for name, bench in benchmarks:
        if not bench.in_training:
            raise ConfigError(f"eval.tasks has {name}: it runs in `python -m easylemur.eval suite --tasks {name}` only, "
                              "not among a training run's evals")
        keys = [f"eval.{k}" for k in (bench.config_key, "data_dir") if k]
        if not (bench.shipped or bench.fetched) and not any(e[k[len("eval."):]] for k in keys):
            raise ConfigError(f"eval.tasks has {name} but {' and '.join(keys)} {'are' if len(keys) > 1 else 'is'} "
                              "empty; give its data")
    if e.lm_eval_limit < 0:
        raise ConfigError(f"config key 'eval.lm_eval_limit' must be 0 (all items) or more, got {e.lm_eval_limit}")
    for key in ("problems", "samples", "max_new_tokens", "batch_size"):
        if e[key] < 1:
            raise ConfigError(f"config key 'eval.{key}' must be at least 1, got {e[key]}")
    try:
        ks = parse_ks(e.k)
    except NotAKList:
        raise ConfigError(f"config key 'eval.k' must be comma-separated integers such as 1,10, got {e.k!r}") from None
    except InputError:
        ks = []  # none, or one below 1
    if not ks or ks[-1] > e.samples:
        raise ConfigError(f"config key 'eval.k' must be integers from 1 to eval.samples={e.samples}, got {e.k!r}")
    if not e.temperature >= 0:
        raise ConfigError(f"config key 'eval.temperature' must be >= 0 (0: greedy), got {e.temperature}")
    for key in ("timeout_s", "program_timeout_s"):
        if not e[key] > 0:
            raise ConfigError(f"config key 'eval.{key}' must be > 0, got {e[key]}")
