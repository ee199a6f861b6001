"""THE train loop, for continued pre-training and chat fine-tuning alike.

    python -m easylemur.train --config configs/tiny_pretrain.py [--config.train.steps=50 ...]

The run is wiring (docs/design.md, "Architecture"): config -> mesh -> the run's starting
state (`start.restore_or_init`: fresh, init.from, or resumed from the newest checkpoint in
the workdir) -> data shards -> the jitted step, with its side jobs in small objects: the
`StepLogger` (metrics, MFU, NaN policy, progress), eval batches, checkpoint saves.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import time
from typing import Any, Optional, Sequence

import jax
from etils import epath
from ml_collections import ConfigDict

from easylemur import sharding
from easylemur.train import pod
from easylemur.checkpoint import store, model_meta
from easylemur.checkpoint.paths import as_path
from easylemur.config import OVERRIDE_HELP, ConfigError, cli_config, to_json
from easylemur.data.shards import DataShards, EvalData
from easylemur.data.stats import preflight
from easylemur.data.files import check_sources
from easylemur.errors import add_debug_flag, report
from easylemur.train.goodput import EventLog
from easylemur.train.lock import WorkdirLock
from easylemur.train.profile import StepProfiler
from easylemur.tracker.writer import MetricsWriter, require_wandb
from easylemur.train.metrics import StepLogger, TrainingError, due
from easylemur.train.start import Run, restore_or_init
from easylemur.train.signals import StopSignals
from easylemur.train.workdir import FailedStartCleanup, check_workdir
from easylemur.train.step import build_eval_step, mean_eval_loss
from easylemur.eval.runs.training import make_task_evals


def train(cfg: ConfigDict, guard: Optional[pod.Guard] = None) -> dict:
    """Runs (or resumes) the run `cfg` describes to train.steps; returns the last step, its
    loss and grad norm, the tokens seen per source, and `stopped_by` (the signal that stopped
    it after a save, or None). In a pod, a lost process or a hang ends it (`guard`, a started
    `pod.Guard` of `start_pod(cfg)`; by default this call starts its own)."""
    guard = guard or start_pod(cfg)
    try:
        result = _train(cfg, guard)
    except BaseException as e:
        if jax.process_count() > 1 and _collective_failure(e):
            guard.await_verdict(e)  # a peer gone: the beats name it (exit 75)
        guard.stop()
        raise
    guard.finish()  # JAX's shutdown barrier, watched
    return result


def start_pod(cfg: ConfigDict) -> pod.Guard:
    """`jax.distributed` joined (with several processes) and this process's guard beating: from
    here a long restore is no lost host."""
    pod.initialize(cfg.distributed)
    return pod.Guard(cfg).start()


def _collective_failure(e: BaseException) -> bool:
    """A collective that failed because a peer went away (gloo's connection reset on CPUs)."""
    text = str(e)
    return isinstance(e, jax.errors.JaxRuntimeError) or "Gloo" in text or "Connection reset" in text


@dataclasses.dataclass
class _Loop:
    """What the step loop works with: the run as `restore_or_init` hands it over and the side
    jobs opened for it (each closed by the run's ExitStack)."""

    cfg: ConfigDict
    guard: pod.Guard
    workdir: epath.Path
    lock: Optional[WorkdirLock]
    stop: StopSignals
    events: EventLog
    mngr: Any
    run: Run
    data: DataShards
    eval_fn: Any
    eval_data: Optional[EvalData]
    logger: StepLogger
    task_evals: Any
    profiler: StepProfiler


def _train(cfg: ConfigDict, guard: pod.Guard) -> dict:
    if not cfg.workdir:
        raise ConfigError("workdir is empty; set --config.workdir=DIR")
    workdir = as_path(cfg.workdir)
    check_workdir(workdir)
    check_sources(**{"data.sources": cfg.data.sources, "data.eval_sources": cfg.data.eval_sources})
    require_wandb(cfg.log.wandb_project)  # before anything is created, restored or compiled
    with contextlib.ExitStack() as run_scope:
        start, lock, stop, events = _claim_workdir(workdir, guard, run_scope)
        loop = _open_run(cfg, guard, workdir, run_scope, lock, stop, events)
        start.started = True
        step = _run_steps(loop)
    return {"step": step, **loop.logger.last, "tokens": loop.logger.tokens, "start_step": loop.run.start_step,
            "stopped_by": stop.signum if step < cfg.train.steps else None}


def _claim_workdir(workdir: epath.Path, guard: pod.Guard, run_scope: contextlib.ExitStack
                   ) -> tuple[FailedStartCleanup, Optional[WorkdirLock], StopSignals, EventLog]:
    """The workdir's lock (process 0), the stop signals and the events log taken, in that order,
    each released by `run_scope`; with them what a failed start removes again."""
    # a run that fails to start takes back what it created in the workdir: its files while
    # it still holds the lock, then (pushed first, so run last) the directories it made
    start = FailedStartCleanup(workdir)
    run_scope.push(start.remove_dirs)
    lock = WorkdirLock(workdir) if jax.process_index() == 0 else None
    if lock is not None:  # before anything in the workdir is read or written
        run_scope.enter_context(lock)
        guard.on_exit = lock.release  # a lost host or hang leaves with os._exit: the lock first
    stop = run_scope.enter_context(StopSignals())
    run_scope.push(start.remove_files)  # only once the lock is this run's
    # events.jsonl (docs/design.md, "Goodput"): its end record comes after every later cleanup
    events = EventLog(workdir, active=jax.process_index() == 0)
    events.start()
    run_scope.push(events.exit)
    guard.events = events
    return start, lock, stop, events


def _open_run(cfg: ConfigDict, guard: pod.Guard, workdir: epath.Path, run_scope: contextlib.ExitStack,
              lock: Optional[WorkdirLock], stop: StopSignals, events: EventLog) -> _Loop:
    """The run restored or initialized, its data, evals, metrics writer and step logger opened
    (each closed by `run_scope`), and the start line printed."""
    mesh = sharding.make_mesh(cfg.mesh)
    mngr = store.manager(workdir / "checkpoints", keep=cfg.checkpoint.keep)
    run_scope.callback(mngr.close)
    began = time.time()
    run = restore_or_init(cfg, mesh, mngr)
    events.restored(began, run.start_step, resumed=run.start_step > 0)
    if cfg.data.preflight:  # every record read before step 1 (docs/design.md, "Data stats")
        preflight(cfg, run.tokenizer)
    if jax.process_index() == 0:
        (workdir / "config.json").write_text(to_json(cfg))

    data = DataShards(cfg.data, run.tokenizer, mesh, global_batch_size=cfg.train.batch_size, seed=cfg.seed)
    run_scope.callback(data.close)
    if run.data_state is not None:
        data.set_state(run.data_state)
    eval_fn = build_eval_step(cfg, run.model_cfg, mesh)
    eval_data = EvalData(cfg.data, run.tokenizer, mesh, global_batch_size=cfg.train.batch_size,
                         batches=cfg.eval.batches) if cfg.eval.every else None
    writer = MetricsWriter(workdir, cfg.log.wandb_project, cfg.to_dict(), resume_step=run.start_step)
    run_scope.callback(writer.close)
    logger = StepLogger(cfg, writer, run.model_cfg, data.source_names, start_step=run.start_step,
                        nan_skips=run.nan_skips, events=events)
    run_scope.callback(logger.close)
    task_evals = make_task_evals(cfg, run, mesh, workdir, writer)
    if task_evals is not None:  # closed before the writer: their last results still get written
        run_scope.callback(task_evals.close)
    profiler = StepProfiler(cfg.log, workdir / "tb")
    run_scope.callback(profiler.close)
    if jax.process_index() == 0:
        print(
            f"model {run.model_cfg.num_params() / 1e6:.2f}M params, {jax.device_count()} devices, mesh "
            f"{dict(mesh.shape)}, peak {logger.peak:.3g} FLOP/s ({logger.peak_how}), "
            f"steps {run.start_step}->{cfg.train.steps}, {run.compute}", flush=True,
        )
    return _Loop(cfg=cfg, guard=guard, workdir=workdir, lock=lock, stop=stop, events=events, mngr=mngr, run=run,
                 data=data, eval_fn=eval_fn, eval_data=eval_data, logger=logger, task_evals=task_evals,
                 profiler=profiler)


def _run_steps(loop: _Loop) -> int:
    """Steps from the run's start to train.steps, or to the save a stop signal or preemption
    asked for; returns the last step."""
    cfg, guard, mngr, run = loop.cfg, loop.guard, loop.mngr, loop.run
    state, step = run.state, run.start_step
    loop.events.loop(step)
    guard.loop_started(step)  # the step watchdog from here (the first step compiles)
    try:
        while step < cfg.train.steps:
            batch = _next_batch(loop, step)
            loop.profiler.before(step)
            state, metrics = run.train_step.fn(state, batch)
            step += 1
            loop.profiler.after(step, metrics)
            _log_step(loop, step, metrics)
            _evaluate(loop, state, step)
            if _checkpoint(loop, state, step):
                _stopped(loop, step)
                break
        _end_run(loop, step)
    except TrainingError as e:
        raise TrainingError(f"{e} {store.last_good(mngr)}") from None
    except BaseException as e:
        _settle_saves(loop, e)
        raise
    return step


def _next_batch(loop: _Loop, step: int) -> dict:
    """The batch of step `step` + 1, the guard told what the process waits on."""
    loop.guard.phase("data", step + 1)
    batch = next(loop.data)
    loop.guard.phase("compile" if step == loop.run.start_step else "step", step + 1)
    return batch


def _log_step(loop: _Loop, step: int, metrics: dict) -> None:
    """The step just dispatched handed to the logger (which finishes the one before it)."""
    if loop.lock is not None:
        loop.lock.check()  # a lost workdir lock stops the run before it logs or saves again
    loop.logger.push(step, metrics, loop.data.local_token_counts())
    if step > loop.run.start_step + 1:
        loop.guard.step_done(step - 1)  # push waited for the step before


def _evaluate(loop: _Loop, state: dict, step: int) -> None:
    """The eval loss and the task evals, where due at `step`."""
    cfg, guard, logger, events, task_evals = loop.cfg, loop.guard, loop.logger, loop.events, loop.task_evals
    if due(step, cfg.eval.every):  # these weights, before the next step replaces them
        params = state["params"]
        eval_fn, eval_data = loop.eval_fn, loop.eval_data
        with guard.long("eval"):
            logger.flush(evaluate=events.timed_call(
                "eval", step, lambda: mean_eval_loss(eval_fn, params, eval_data.batches())))
    if task_evals is not None:
        if due(step, cfg.eval.every_tasks):
            logger.flush()
            with logger.side_job(), events.timed("eval", step), guard.long("eval"):  # not step time
                task_evals.run(step, state["params"])
        task_evals.poll()  # the sandbox checks run beside training; log those that ended


def _checkpoint(loop: _Loop, state: dict, step: int) -> bool:
    """Saves `step` where due, at the last step, or when the run is to stop; returns whether it
    is (a stop signal, or a preemption)."""
    cfg, guard, logger, events, mngr, run = loop.cfg, loop.guard, loop.logger, loop.events, loop.mngr, loop.run
    store.check_save_errors(mngr)  # a failed async save stops the run here
    stopping = mngr.reached_preemption(step) or loop.stop.requested
    last = step == cfg.train.steps
    if due(step, cfg.checkpoint.every) or last or stopping:
        logger.flush()
        guard.step_done(step)
        with logger.side_job(), events.timed("save", step), guard.long("save"):  # not step time
            model_meta.save_run(mngr, step, state, run.model_cfg, run.tokenizer.model_path,
                                data_state=loop.data.get_state(), nan_skips=logger.nan_skips,
                                config=cfg.to_dict(), force=last or stopping, stop_ids=run.stop_ids,
                                inherited_chat_format=run.chat_format)
    return stopping


def _stopped(loop: _Loop, step: int) -> None:
    """A stopped run's save committed, and said so."""
    with loop.events.timed("save", step), loop.guard.long("save"):  # until the save commits
        store.check_save_errors(loop.mngr, wait=True)
    print(f"stopped: saved step {step} in {loop.workdir / 'checkpoints'}; run the same command to resume",
          flush=True)


def _end_run(loop: _Loop, step: int) -> None:
    """The last step logged, every save committed, and the run's outcome recorded."""
    loop.logger.flush()
    loop.guard.step_done(step)
    with loop.events.timed("save", step), loop.guard.long("save"):
        store.check_save_errors(loop.mngr, wait=True)
    loop.events.outcome = "done" if step >= loop.cfg.train.steps else "stopped"


def _settle_saves(loop: _Loop, e: BaseException) -> None:
    """For the error `e` in flight: the saves under way finished or failed; a failed save's error
    raised instead of `e` where the disk filled up."""
    if jax.process_count() > 1 and _collective_failure(e):
        loop.guard.await_verdict(e)  # before waiting on saves that need the lost peer
    # The error in flight is the one to report, unless the disk filled up under a save
    # too: then the save's error says more (the checkpoints' directory, and which step
    # is complete), where a log write's OSError named no file. Either way committed
    # saves finish and a failed save's error is retrieved (unretrieved, orbax's write
    # tasks were dumped by asyncio at exit, after the one error line).
    try:
        store.check_save_errors(loop.mngr, wait=True)
    except store.CheckpointSaveError as save_error:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise save_error from e
    except Exception:
        pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m easylemur.train",
        description="Train (continued pre-training or chat fine-tuning). Resumes from the newest checkpoint in the "
        f"config's workdir. {OVERRIDE_HELP}",
    )
    parser.add_argument("--config", required=True, help="a configs/*.py file defining get_config()")
    add_debug_flag(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit status: 0 done, 1 a failed run, 2 bad input (config, data, checkpoint, mesh), 128 +
    the signal's number when SIGTERM/SIGINT stopped the run after saving, 75 a process of the
    pod lost, 76 a hang (docs/design.md, "Lost hosts and hangs")."""
    args, cfg = cli_config(_parser(), argv)
    guard = None
    try:
        guard = start_pod(cfg)
        result = train(cfg, guard)
    except Exception as e:
        if jax.process_count() > 1 and guard is not None:
            # its peers stop at once, naming this process, and none waits in JAX's shutdown barrier
            guard.failed(report(e, argv))
        raise
    if jax.process_index() == 0:
        print(summary(cfg, result), flush=True)
    return 128 + result["stopped_by"] if result["stopped_by"] else 0


def summary(cfg: ConfigDict, result: dict) -> str:
    """The run's closing line: how far it got, its last loss and tokens, and where its checkpoint
    and metrics are (what a user looks for next)."""
    workdir = as_path(cfg.workdir)
    try:
        saved = max((int(p.name) for p in (workdir / "checkpoints").iterdir()
                     if p.name.isdigit() and store.is_complete(p)), default=None)
    except Exception:  # noqa: BLE001 (a summary never fails a finished run: a bucket that does not answer)
        saved = None
    how = (f"stopped by signal {result['stopped_by']} at step {result['step']} of {cfg.train.steps}"
           if result["stopped_by"] else f"done: step {result['step']} of {cfg.train.steps}")
    loss = f"; final loss {result['loss']:.4f}" if isinstance(result.get("loss"), float) else ""
    tokens = sum(result.get("tokens", {}).values())
    where = f"checkpoint {workdir / 'checkpoints' / str(saved)}" if saved is not None else "no checkpoint saved"
    return (f"train: {how} (this launch: steps {result['start_step']}->{result['step']}){loss}; {tokens:,} tokens "
            f"trained; {where}; metrics {workdir / 'metrics.jsonl'} (TensorBoard: tensorboard --logdir {workdir / 'tb'})")
