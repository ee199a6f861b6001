"""THE train loop, for continued pre-training and chat fine-tuning alike.

    python -m easylemur.train --config configs/tiny_pretrain.py [--config.train.steps=50 ...]

The run is wiring (docs/design.md, "Architecture"): config -> mesh -> the run's starting
state (`state.restore_or_init`: fresh, init.from, or resumed from the newest checkpoint in
the workdir) -> data streams -> the jitted step, with its side jobs in small objects: the
`StepLogger` (metrics, MFU, NaN policy, progress), eval batches, checkpoint saves.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import jax
from ml_collections import ConfigDict

from easylemur import checkpoint, sharding
from easylemur.config import OVERRIDE_HELP, ConfigError, cli_config, to_json
from easylemur.data.shards import DataShards, eval_batches
from easylemur.data.sources import DataError
from easylemur.metrics import MetricsWriter, StepLogger, TrainingError, due
from easylemur.state import restore_or_init
from easylemur.step import build_eval_step, mean_eval_loss


def train(cfg: ConfigDict) -> dict:
    """Runs (or resumes) the run `cfg` describes to train.steps; returns the last step, its
    loss and grad norm, and the tokens seen per source."""
    d = cfg.distributed
    sharding.initialize_distributed(d.coordinator_address, d.num_processes, d.process_id)
    if not cfg.workdir:
        raise ConfigError("workdir is empty; set --config.workdir=DIR")
    workdir = checkpoint.as_path(cfg.workdir)
    mesh = sharding.make_mesh(cfg.mesh)
    mngr = checkpoint.manager(workdir / "checkpoints", keep=cfg.checkpoint.keep)
    run = restore_or_init(cfg, mesh, mngr)
    if jax.process_index() == 0:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.json").write_text(to_json(cfg))

    data = DataShards(cfg, run.tokenizer, mesh)
    if run.data_state is not None:
        data.set_state(run.data_state)
    eval_fn = build_eval_step(cfg, run.model_cfg, mesh)
    writer = MetricsWriter(workdir, cfg.log.wandb_project, cfg.to_dict(), resume_step=run.start_step)
    logger = StepLogger(cfg, writer, run.model_cfg, run.train_step.lr_schedule, data.source_names,
                        start_step=run.start_step, nan_skips=run.nan_skips, checkpoint_dir=workdir / "checkpoints")
    if jax.process_index() == 0:
        print(
            f"model {run.model_cfg.num_params() / 1e6:.2f}M params, {jax.device_count()} devices, mesh "
            f"{dict(mesh.shape)}, peak {logger.peak:.3g} FLOP/s ({logger.peak_how}), "
            f"steps {run.start_step}->{cfg.train.steps}", flush=True,
        )

    state, step = run.state, run.start_step
    try:
        while step < cfg.train.steps:
            state, metrics = run.train_step.fn(state, next(data))
            step += 1
            logger.push(step, metrics, data.local_token_counts())
            if due(step, cfg.eval.every):  # these weights, before the next step replaces them
                params = state["params"]
                logger.flush(evaluate=lambda: mean_eval_loss(eval_fn, params, eval_batches(cfg, run.tokenizer, mesh)))
            preempted = mngr.reached_preemption(step)
            last = step == cfg.train.steps
            if due(step, cfg.checkpoint.every) or last or preempted:
                logger.flush()
                checkpoint.save_run(mngr, step, state, run.model_cfg, run.tokenizer.model_path,
                                    data_state=data.get_state(), nan_skips=logger.nan_skips,
                                    config=cfg.to_dict(), force=last or preempted)
            if preempted:
                print(f"preempted: saved step {step}, stopping", flush=True)
                break
        logger.flush()
    finally:
        mngr.wait_until_finished()
        mngr.close()
        writer.close()
        logger.close()
        data.close()
    return {"step": step, **logger.last, "tokens": logger.tokens}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m easylemur.train",
        description="Train (continued pre-training or chat fine-tuning). Resumes from the newest checkpoint in the "
        f"config's workdir. {OVERRIDE_HELP}",
    )
    parser.add_argument("--config", required=True, help="a configs/*.py file defining get_config()")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, cfg = cli_config(_parser(), argv)
    try:
        train(cfg)
    except (ConfigError, DataError, TrainingError, sharding.MeshError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
