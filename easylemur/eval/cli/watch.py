"""`python -m easylemur.eval watch --config CFG`: the task evals of `eval.tasks`, run on each
new checkpoint of the run's workdir by another host (or after the run), instead of inside it
(`eval/runs/watch.py`).

    python -m easylemur.eval watch --config configs/lemur_70b_pretrain.py \
        --config.eval.tasks=humaneval,lm_eval:hellaswag [--mesh data:1,fsdp:-1,tensor:1] [--once]
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from easylemur.config import OVERRIDE_HELP, ConfigError, load_config, parse_cli, task_eval_names
from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.api import one_line_per_record
from easylemur.eval.runs.watch import EVAL_METRICS, watch


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
    one_line_per_record()
    return watch(cfg, mesh=args.mesh, dtype=args.dtype, poll_seconds=args.poll_seconds, once=args.once)
