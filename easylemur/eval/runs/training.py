"""Task evals inside a run (`eval.tasks`, every `eval.every_tasks` steps): pass@k of the
current weights on a fixed subset of HumanEval/MBPP and lm-evaluation-harness scores
(`lm_eval:TASK`, at most `eval.lm_eval_limit` items each), logged beside the loss, so the
code/text balance of a mixture is visible as it moves (docs/design.md, "Task evals during
training"). lm-eval tasks are scored in the run by `backends/harness.py`'s model over the same
weights (nothing to sandbox); a failure is reported like a failed check.

Two halves, so that an eval can neither stop nor slow training for long:
- generation runs in the run, between two steps, on the training mesh: the parameters are
  unstacked (a scanned run) into the decode engine's layout on device and decoded by one
  `LoadedModel` kept for the whole run, so each shape bucket compiles once, at the first eval;
- the generated programs are checked in the sandbox by the one scoring loop (`runs/scoring.py`,
  as the CLI and the suite score) on a thread of its own that training never waits for (its
  programs are sandboxed processes: the thread only waits on them): each step polls it; its
  pass@k is written to metrics.jsonl/TensorBoard/W&B at the step it measured. A check that
  fails, or runs past `eval.timeout_s` (then cancelled: its programs not yet started never run),
  is reported on stdout and as `eval/TASK/failed: 1` at its step; training goes on.

A generation that raises is reported the same way. Only process 0 writes and checks; every
process generates (the parameters are sharded over all of them).

The suite's other single-turn benchmarks (`ds1000`, `spider`, `multipl_e:LANG`, data under
`eval.data_dir`) go the same way. Multi-turn ones (MINT's `m_humaneval` ... `m_hotpotqa`,
`sql_agent`) cannot be split so: each turn needs the model, so their episodes run at the eval
step (`backends/local_chat.LocalChat` decodes the waiting turns in one batch, the sandbox runs the actions
between turns) and log `eval/NAME/success@k`; a single-process, chat-tuned run only. MINT's
tasks run by MINT's protocol (`benchmarks/mint/`) with every k read off one run at
`eval.turns` (the suite runs each budget separately, as MINT did).
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import jax
from ml_collections import ConfigDict

from easylemur.config import LM_EVAL, ConfigError, task_eval_names
from easylemur.eval.agent.episode import run_episodes, success_rates
from easylemur.eval.benchmarks.mint.protocol import cut_at_stops, run_budget, solved_within
from easylemur.eval.benchmarks.intercode_bash import protocol as bash_protocol
from easylemur.eval.benchmarks.intercode_bash.task import InterCodeBashTask
from easylemur.eval.benchmarks.intercode_ctf import protocol as ctf_protocol
from easylemur.eval.benchmarks.intercode_ctf.task import InterCodeCtfTask
from easylemur.eval.benchmarks.mint.tasks import MintTask
from easylemur.eval.api import FORMATS, MissingData, parse_ks, write_jsonl
from easylemur.eval.backends.samples import generate_samples
from easylemur.eval.benchmarks import registry
from easylemur.eval.runs.scoring import Scores, score
from easylemur.eval.sandbox import Sandbox
from easylemur.storage import is_url


# how long close() waits at most for a cancelled check's running programs: the longest time limit
# a program carries (MultiPL-E's languages: up to 30 s) plus the sandbox's kill (up to 20 s)
CANCEL_WAIT_S = 60.0


@dataclasses.dataclass
class _Check:
    """One sandboxed check, running on its own thread."""

    step: int
    task: str
    out: Path
    deadline: float
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    thread: Any = None
    scores: Optional[Scores] = None
    error: str = ""


def _data(name: str, e: ConfigDict) -> Optional[str]:
    """A task's data: its registry row's eval.* key (eval.humaneval_data, eval.mbpp_data), else
    its usual name under eval.data_dir."""
    row, _ = registry.lookup(name)
    explicit = (e[row.config_key] if row.config_key else "") or None
    try:
        return registry.find_data(name, explicit, e.data_dir or None)
    except MissingData as err:
        raise ConfigError(f"eval.tasks has {name}: {err} (set eval.data_dir)") from None


def _task(name: str, e: ConfigDict) -> Any:
    """The task object of `name` (single-turn Task or multi-turn AgentTask) on its first eval.problems."""
    if e.prompt_format not in FORMATS:
        raise ConfigError(f"config key 'eval.prompt_format' must be one of {', '.join(FORMATS)}, got {e.prompt_format!r}")
    task = registry.build(name, _data(name, e), e.prompt_format)
    task.problems = task.problems[: e.problems]
    return task


class TaskEvals:
    """The run's task evals: `run(step, params)` on due steps, `poll()` every step, `close()`
    at the end (waits for the checks still running, each up to its deadline). `chat_template`:
    (template or None, why) as `chat.choice.chat_template_for` gives it for these weights; None:
    from the tokenizer alone."""

    def __init__(self, cfg: ConfigDict, model_cfg: Any, tokenizer: Any, mesh: Any, workdir: Any, writer: Any,
                 stop_ids: Any = (), subdir: str = "evals", chat_template: Any = None):
        self.e = cfg.eval
        self.names = task_eval_names(self.e.tasks)
        self.writer = writer
        self.lead = jax.process_index() == 0
        # everything that can fail does so now, not at the first eval hours in: the data, the sandbox
        tasks = {name: _task(name, self.e) for name in self.names if not name.startswith(LM_EVAL)}
        self.agent_tasks = {n: t for n, t in tasks.items() if registry.is_agent(n)}
        self.tasks = {n: t for n, t in tasks.items() if not registry.is_agent(n)}
        self.ks = parse_ks(self.e.k, "eval.k")
        self.lm_tasks = [name[len(LM_EVAL):] for name in self.names if name.startswith(LM_EVAL)]
        if self.agent_tasks and jax.process_count() > 1:
            raise ConfigError(f"eval.tasks has {', '.join(self.agent_tasks)}: multi-turn evals run in a single-process "
                              "run only (their episodes wait on the sandbox between turns); use python -m easylemur.eval "
                              "watch or suite on the checkpoints")
        # chat prompts render with the template the run's checkpoints chat with (chat.choice.chat_template_for)
        from easylemur.chat.choice import chat_template_for
        from easylemur.generate.api import AUTO

        self.chat = chat_template_for(None, tokenizer) if chat_template in (None, AUTO) else chat_template
        chatty = list(self.agent_tasks) + (list(self.tasks) if self.e.prompt_format == "chatml" else [])
        if chatty and self.chat[0] is None:
            raise ConfigError(f"eval.tasks has {', '.join(chatty)}: chat prompts need a chat model, and this run's has no "
                              f"chat template ({self.chat[1]}; chat-tune first, or drop them)")
        self.sandbox = Sandbox(timeout=self.e.program_timeout_s)
        if (self.tasks or self.agent_tasks) and self.lead:
            self.sandbox.check()
        self.task_manager = _task_manager(self.lm_tasks, self.e.lm_eval_include) if self.lm_tasks else None
        self.lm = None  # the lm-eval model over self.model, built at the first eval
        self.model_cfg = dataclasses.replace(model_cfg, scan_layers=False)
        self.scanned = model_cfg.scan_layers
        self.tokenizer, self.mesh, self.stop_ids = tokenizer, mesh, list(stop_ids)
        # the checkers write beside the run when it is on a local disk, else in a local temp dir
        local = not is_url(workdir)
        self.root = Path(str(workdir)) / subdir if local else Path(tempfile.mkdtemp(prefix="easylemur-evals-"))
        self.model = None
        self._unscan = None
        self.checks: list[_Check] = []
        self.cancelled: list[_Check] = []  # past their deadline: their running programs still end by themselves

    @property
    def active(self) -> bool:
        return bool(self.names)

    def _loaded(self, params: Any):
        """The decode model holding these weights (unstacked on device for a scanned run)."""
        from easylemur.generate.api import LoadedModel
        from easylemur.model.stacking import unscan_params

        if self.scanned:
            if self._unscan is None:
                n = self.model_cfg.num_layers
                self._unscan = jax.jit(lambda p: unscan_params(p, n))
            params = self._unscan(params)
        if self.model is None:
            self.model = LoadedModel(self.model_cfg, params, self.tokenizer, "the run's current weights", self.mesh,
                                     self.stop_ids, *self.chat)
        self.model.params = params
        self.model.decoder.params = params  # same shapes and shardings: the compiled programs are reused
        return self.model

    def run(self, step: int, params: Any) -> None:
        """Generates every task's samples from `params` (the weights after `step`) and starts
        their checks; reports (never raises) a generation that fails."""
        model = self._loaded(params)
        try:
            for name, task in self.tasks.items():
                t = time.perf_counter()
                try:
                    samples = generate_samples(task, model, self.e.samples, batch_size=self.e.batch_size,
                                               max_new_tokens=self.e.max_new_tokens, temperature=self.e.temperature,
                                               seed=step)
                except Exception as err:  # noqa: BLE001 - an eval never stops training
                    self._failed(step, name, f"generation failed: {type(err).__name__}: {err}")
                    continue
                if self.lead:
                    self._start_check(step, name, samples)
                    print(f"eval {name} at step {step}: {len(samples)} samples generated in "
                          f"{time.perf_counter() - t:.1f}s; checking them in the sandbox", flush=True)
            for name, task in self.agent_tasks.items():
                self._episodes(step, name, task, model)
            if self.lm_tasks:
                self._lm_eval(step, model)
        finally:
            # the train step donates its state: never hold on to these buffers past this eval
            model.params = model.decoder.params = None

    def _episodes(self, step: int, name: str, task: Any, model: Any) -> None:
        """A multi-turn task's episodes on these weights, now: every episode's turn decodes in
        one batch (LocalChat), the sandbox runs the actions between turns; success@k logged."""
        from easylemur.eval.backends.local_chat import LocalChat

        t = time.perf_counter()
        context = self.model_cfg.max_position_embeddings
        chat = LocalChat(model, max_tokens=self.e.max_new_tokens, temperature=self.e.temperature,
                         batch_size=self.e.batch_size, seed=step, max_prompt_tokens=context - self.e.max_new_tokens)
        out = self.root / f"step_{step}" / name
        try:
            if isinstance(task, MintTask):  # MINT's protocol, every k read off one run at eval.turns
                records = run_budget(task, lambda m, stop: cut_at_stops(chat(m), stop), self.sandbox, self.e.turns,
                                     concurrency=self.e.batch_size)
                at = solved_within(records)
                rates = {f"success@{k}": at(k) for k in range(1, self.e.turns + 1)}
            elif isinstance(task, (InterCodeBashTask, InterCodeCtfTask)):  # InterCode's runner, Lemur's policy
                records, rates = self._intercode(task, chat)
            else:
                episodes = run_episodes(task, chat, task.sized(self.sandbox), concurrency=self.e.batch_size,
                                        turns=self.e.turns, feedback=self.e.feedback)
                records = [ep.record() for ep in episodes]
                rates = success_rates(episodes, self.e.turns)
        except Exception as err:  # noqa: BLE001 - an eval never stops training
            self._failed(step, name, f"episodes failed: {type(err).__name__}: {err}")
            return
        finally:
            chat.close()
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / "episodes.jsonl", records)
        self.writer.write({"step": step, **{f"eval/{name}/{k}": v for k, v in rates.items()},
                           f"eval/{name}/problems": len(records)})
        print(f"eval {name} at step {step} ({time.perf_counter() - t:.1f}s, feedback {self.e.feedback}): "
              + ", ".join(f"{k} {v:.4f}" for k, v in rates.items()), flush=True)

    def _intercode(self, task: Any, chat: Any) -> tuple[list, dict]:
        """InterCode-Bash's or -CTF's episodes at eval.turns turns (the protocol's dialogue limit),
        leaving out the tasks the sandbox cannot run (counted), as the suite's row does."""
        proto: Any = ctf_protocol if isinstance(task, InterCodeCtfTask) else bash_protocol
        runnable = [p for p in task.problems if not task.skip_reason(p)]
        skipped = len(task.problems) - len(runnable)
        task = copy.copy(task)
        task.problems = runnable
        records = proto.run_budget(task, lambda m, stop: cut_at_stops(chat(m), stop), task.sized(self.sandbox), self.e.turns,
                                   dialogue_limit=proto.DIALOGUE_LIMIT, policy="lemur", concurrency=self.e.batch_size)
        rate = proto.success_rate(records)
        return records, {f"success@{self.e.turns}": rate, "mean_max_reward": proto.mean_reward(records),
                         "skipped_problems": skipped}

    def _lm_eval(self, step: int, model: Any) -> None:
        """lm-evaluation-harness's tasks on these weights, in the run (its scoring programs,
        one per length bucket, compile at the first eval); the scores go straight to the log."""
        import lm_eval

        from easylemur.eval.backends.harness import EasylemurLM
        from easylemur.eval.backends.lm_eval_tasks import flat_metrics

        if self.lm is None:
            self.lm = EasylemurLM(loaded=model, batch_size=self.e.batch_size, max_gen_toks=self.e.max_new_tokens)
        t = time.perf_counter()
        try:
            out = lm_eval.simple_evaluate(model=self.lm, tasks=list(self.lm_tasks), task_manager=self.task_manager,
                                          limit=self.e.lm_eval_limit or None, verbosity="ERROR",
                                          bootstrap_iters=0,  # no stderr resampling: scores only
                                          # the run's process-wide RNGs stay as they are
                                          random_seed=None, numpy_random_seed=None, torch_random_seed=None)
        except Exception as err:  # noqa: BLE001 - an eval never stops training
            for name in self.lm_tasks:
                self._failed(step, LM_EVAL + name, f"lm-eval failed: {type(err).__name__}: {err}")
            return
        if not self.lead or out is None:
            return
        record: dict[str, Any] = {"step": step}
        for task, values in flat_metrics(out["results"]).items():
            # by bare metric name ("acc,none" -> acc): the first filter's, as the suite's rows take it
            record.update({f"eval/{task}/{m}": v for m, v in values.items() if "," not in m})
        self.writer.write(record)
        print(f"eval lm-eval {', '.join(self.lm_tasks)} at step {step} ({time.perf_counter() - t:.1f}s): "
              + ", ".join(f"{k[5:]} {v:.4f}" for k, v in record.items() if k != "step"), flush=True)

    def _start_check(self, step: int, name: str, samples: list) -> None:
        """Scores `samples` in the sandbox on a thread of its own (the one scoring loop,
        `runs/scoring.py`); training polls it and never waits for it."""
        out = self.root / f"step_{step}" / name
        out.mkdir(parents=True, exist_ok=True)
        check = _Check(step, name, out, time.monotonic() + self.e.timeout_s)

        def work() -> None:
            try:
                check.scores = score(self.tasks[name], samples, self.sandbox, self.ks, out, cancel=check.cancel)
            except BaseException as err:  # noqa: BLE001 - reported at the next poll; training goes on
                check.error = f"{type(err).__name__}: {err}"

        check.thread = threading.Thread(target=work, name=f"easylemur-eval-{name}-{step}", daemon=True)
        check.thread.start()
        self.checks.append(check)

    def _failed(self, step: int, name: str, why: str) -> None:
        if self.lead:
            print(f"eval {name} at step {step}: {why}; training goes on", flush=True)
            self.writer.write({"step": step, f"eval/{name}/failed": 1})

    def _finish(self, c: _Check) -> None:
        if c.scores is None:
            self._failed(c.step, c.task, f"the sandbox check failed: {c.error}")
            return
        scores = c.scores.summary()
        record = {f"eval/{c.task}/{k}": v for k, v in scores.items() if k.startswith("pass@")}
        self.writer.write({"step": c.step, **record, f"eval/{c.task}/problems": scores.get("problems")})
        print(f"eval {c.task} at step {c.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()
                                                             if k.startswith("pass@")), flush=True)

    def poll(self, wait: bool = False) -> None:
        """Logs the checks that ended; cancels those past their deadline (the programs they have not
        started never run; those running end within their own time limits). `wait`: block until
        every check has ended or been cancelled."""
        while self.checks:
            still = []
            for c in self.checks:
                if not c.thread.is_alive():
                    self._finish(c)
                elif time.monotonic() > c.deadline:
                    c.cancel.set()
                    self.cancelled.append(c)
                    self._failed(c.step, c.task, f"the sandbox check ran past eval.timeout_s={self.e.timeout_s:g}s "
                                                 "and was cancelled")
                else:
                    still.append(c)
            self.checks = still
            if not wait or not still:
                return
            time.sleep(0.2)

    def close(self) -> None:
        """Waits for the checks still running (each up to its deadline), then for the programs the
        cancelled ones had running (each ends within its own time limit, eval.program_timeout_s or
        a language's, and the sandbox's kill)."""
        if self.checks:
            print(f"waiting for {len(self.checks)} task eval check(s) (at most eval.timeout_s each)", flush=True)
        self.poll(wait=True)
        for c in self.cancelled:
            c.thread.join(timeout=max(self.e.program_timeout_s, CANCEL_WAIT_S))


def _task_manager(names: list[str], include: str) -> Any:
    """lm-eval's TaskManager with `include` (local task YAMLs); every name must resolve now."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise ConfigError(f"eval.tasks has {LM_EVAL}{names[0]} but lm-evaluation-harness is not installed; "
                          "pip install -e '.[harness]'") from None
    from easylemur.eval.backends.lm_eval_tasks import task_manager

    tm = task_manager(names, include)
    known = set(tm.all_tasks)
    for name in names:
        if name not in known:
            where = f" or in eval.lm_eval_include={include}" if include else " (local YAMLs: eval.lm_eval_include)"
            raise ConfigError(f"config key 'eval.tasks': {LM_EVAL}{name} is not an lm-eval task{where}")
    return tm


def make_task_evals(cfg: ConfigDict, run: Any, mesh: Any, workdir: Any, writer: Any) -> Optional[TaskEvals]:
    """The run's TaskEvals, None when eval.tasks is empty."""
    if not task_eval_names(cfg.eval.tasks):
        return None
    from easylemur.checkpoint.model_meta import run_chat_format
    from easylemur.chat.choice import chat_template_for

    # the chat_format this run's checkpoints record, so the evals chat as the checkpoints will
    chat = chat_template_for(None, run.tokenizer, run_chat_format(cfg.to_dict(), run.chat_format))
    return TaskEvals(cfg, run.model_cfg, run.tokenizer, mesh, workdir, writer, run.stop_ids, chat_template=chat)
