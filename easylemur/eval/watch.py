"""`python -m easylemur.eval watch --config CFG`: the task evals of `eval.tasks`, run on each
new checkpoint of the run's workdir by another host (or after the run), instead of inside it.

    python -m easylemur.eval watch --config configs/lemur_70b_pretrain.py \
        --config.eval.tasks=humaneval,lm_eval:hellaswag [--mesh data:1,fsdp:-1,tensor:1] [--once]

Every committed checkpoint step is evaluated once, oldest first, by the same `TaskEvals` the
train loop uses (one decode model kept, its parameters swapped per step, so nothing compiles
twice); the scores go to WORKDIR/eval_metrics.jsonl and eval_metrics_tb/ (never the run's own
metrics.jsonl, which its writer owns), the completions to WORKDIR/evals_watch/step_N/. A
restarted watcher skips the steps eval_metrics.jsonl already holds. `eval.every_tasks` plays
no part: every checkpoint is evaluated (`checkpoint.every` sets how often there is one).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Optional, Sequence

from easylemur.config import OVERRIDE_HELP, ConfigError, load_config, parse_cli, task_eval_names
from easylemur.errors import InputError, add_debug_flag

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
    from easylemur.eval.task_evals import TaskEvals
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m easylemur.eval watch",
        description="Run the config's eval.tasks on each new checkpoint of its workdir (scores to "
                    f"WORKDIR/{EVAL_METRICS}.jsonl). {OVERRIDE_HELP}")
    parser.add_argument("--config", required=True, help="the run's configs/*.py (its workdir and eval.* keys)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:-1,tensor:1'")
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--poll-seconds", type=float, default=60.0, help="how often to look for new checkpoints")
    parser.add_argument("--once", action="store_true", help="evaluate the checkpoints there now, then exit")
    add_debug_flag(parser)
    args, overrides = parse_cli(parser, argv)
    # every checkpoint is evaluated: eval.every_tasks only needs to pass the run's validation
    cfg = load_config(args.config, ["eval.every_tasks=1", *overrides])
    if not task_eval_names(cfg.eval.tasks):
        raise ConfigError("eval.tasks is empty; name the tasks to run (--config.eval.tasks=humaneval,...)")
    if args.poll_seconds <= 0:
        raise InputError(f"--poll-seconds {args.poll_seconds}: must be > 0")
    return watch(cfg, mesh=args.mesh, dtype=args.dtype, poll_seconds=args.poll_seconds, once=args.once)
