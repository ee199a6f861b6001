"""The task evals of `eval.tasks`, run on each new checkpoint of the run's workdir by another host
(or after the run), instead of inside it; `python -m easylemur.eval watch` is its command
(`eval/cli/watch.py`).

Every committed checkpoint step is evaluated once, oldest first, by the same `TaskEvals` the
train loop uses (one decode model kept, its parameters swapped per step, so nothing compiles
twice); the scores go to WORKDIR/eval_metrics.jsonl and eval_metrics_tb/ (never the run's own
metrics.jsonl, which its writer owns), the completions to WORKDIR/evals_watch/step_N/. A
restarted watcher skips the steps eval_metrics.jsonl already holds. `eval.every_tasks` plays
no part: every checkpoint is evaluated (`checkpoint.every` sets how often there is one).
"""

from __future__ import annotations

import json
import time
from typing import Optional

from easylemur.errors import InputError

EVAL_METRICS = "eval_metrics"


def committed_steps(workdir) -> list[int]:
    """The steps of the workdir's checkpoints whose saves finished, oldest first."""
    from easylemur.checkpoint.store import is_complete

    ckpts = workdir / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit() and is_complete(p))


def evaluated_steps(workdir) -> set[int]:
    """The steps eval_metrics.jsonl already has scores or failures for."""
    path = workdir / f"{EVAL_METRICS}.jsonl"
    if not path.exists():
        return set()
    steps = set()
    for line in path.read_text().splitlines():
        try:
            steps.add(int(json.loads(line)["step"]))
        except (ValueError, KeyError, TypeError):
            continue  # a half-written last line
    return steps


def watch(cfg, *, mesh: Optional[str] = None, dtype: Optional[str] = None, poll_seconds: float = 60.0,
          once: bool = False) -> int:
    """Evaluates each new committed step of cfg.workdir; with `once`, those there now, then
    returns when their checks have ended."""
    from easylemur.checkpoint.paths import as_path
    from easylemur.eval.runs.training import TaskEvals
    from easylemur.generate.api import load
    from easylemur.tracker.writer import MetricsWriter

    workdir = as_path(cfg.workdir)
    if not (workdir / "checkpoints").is_dir() and once:
        raise InputError(f"workdir {workdir}: no checkpoints/ to evaluate")
    writer = MetricsWriter(workdir, cfg.log.wandb_project, cfg.to_dict(), resume_step=None, name=EVAL_METRICS)
    evals, done = None, evaluated_steps(workdir)
    try:
        while True:
            for step in (s for s in committed_steps(workdir) if s not in done):
                model = load(str(workdir), step=step, dtype=dtype, mesh=mesh)
                if evals is None:
                    evals = TaskEvals(cfg, model.config, model.tokenizer, model.mesh, workdir, writer,
                                      model.declared_stop_ids, subdir="evals_watch",
                                      chat_template=(model.chat_template, model.chat_template_why))
                print(f"watch: step {step}", flush=True)
                evals.run(step, model.params)
                done.add(step)
                evals.poll()
            if once:
                break
            if evals is not None:
                evals.poll()
            time.sleep(poll_seconds)
    finally:
        if evals is not None:
            evals.close()
        writer.close()
    return 0
