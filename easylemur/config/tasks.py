"""The eval tasks a config may name (`eval.tasks`): the benchmark names (`SINGLE_TURN`, `AGENT`,
`split_benchmark`), lm-evaluation-harness tasks (`LM_EVAL`), what a multi-turn episode feeds
back (`FEEDBACKS`), and the checks of the `eval.*` task keys (`_check_task_evals`)."""

from __future__ import annotations

from ml_collections import ConfigDict

from easylemur.config.schema import ConfigError
from easylemur.errors import InputError


LM_EVAL = "lm_eval:"  # eval.tasks prefix of an lm-evaluation-harness task
# The benchmark names eval.tasks, `python -m easylemur.eval NAME` and the suites accept (their data
# and task objects: eval/benchmarks.py). multipl_e takes a language: multipl_e:js, multipl_e:cpp, ...
SINGLE_TURN = ("humaneval", "mbpp", "ds1000", "spider", "multipl_e")
AGENT = ("m_humaneval", "m_mbpp", "m_gsm8k", "sql_agent")
FEEDBACKS = ("exec", "none")  # what a multi-turn episode feeds back: the execution's output, or nothing


def split_benchmark(name: str) -> tuple[str, str]:
    """("multipl_e", "js") for "multipl_e:js"; (name, "") otherwise; an unknown name is an InputError."""
    bench, _, lang = name.partition(":")
    if bench not in SINGLE_TURN + AGENT or (bench == "multipl_e") != bool(lang):
        raise InputError(f"benchmark {name!r}: expected one of {', '.join(n for n in SINGLE_TURN + AGENT if n != 'multipl_e')}"
                         ", or multipl_e:LANG (js, cpp, java, go, rs, sh, pl)")
    return bench, lang


def task_eval_names(tasks: str) -> list[str]:
    """eval.tasks as a list of task names (validated by `validate`)."""
    return [t.strip() for t in tasks.split(",") if t.strip()]


def _check_task_evals(e: ConfigDict) -> None:
    if not isinstance(e.tasks, str):
        raise ConfigError(f"config key 'eval.tasks' must be a comma-separated string, got {e.tasks!r}")
    names = task_eval_names(e.tasks)
    for name in names:
        if name.startswith(LM_EVAL) and name[len(LM_EVAL):]:
            continue
        try:
            split_benchmark(name)
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
    for name in ("mbpp", "m_mbpp"):
        if name in names and not e.mbpp_data:
            raise ConfigError(f"eval.tasks has {name} but eval.mbpp_data is empty; give MBPP's JSONL")
    if e.lm_eval_limit < 0:
        raise ConfigError(f"config key 'eval.lm_eval_limit' must be 0 (all items) or more, got {e.lm_eval_limit}")
    for key in ("problems", "samples", "max_new_tokens", "batch_size"):
        if e[key] < 1:
            raise ConfigError(f"config key 'eval.{key}' must be at least 1, got {e[key]}")
    try:
        ks = sorted({int(k) for k in str(e.k).split(",") if k.strip()})
    except ValueError:
        raise ConfigError(f"config key 'eval.k' must be comma-separated integers such as 1,10, got {e.k!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > e.samples:
        raise ConfigError(f"config key 'eval.k' must be integers from 1 to eval.samples={e.samples}, got {e.k!r}")
    if not e.temperature >= 0:
        raise ConfigError(f"config key 'eval.temperature' must be >= 0 (0: greedy), got {e.temperature}")
    for key in ("timeout_s", "program_timeout_s"):
        if not e[key] > 0:
            raise ConfigError(f"config key 'eval.{key}' must be > 0, got {e[key]}")
