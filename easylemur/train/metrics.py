"""Training metrics: the FLOP formula, device peaks, MFU, `due` and the train loop's
`StepLogger`, which writes through tracker/writer.py's MetricsWriter (only process 0 writes)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from easylemur.errors import RunError
from easylemur.model.config import LlamaConfig
from easylemur.tracker.writer import MetricsWriter


def flops_per_token(cfg: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token, MaxText's formula: 6 x (non-embedding matmul params)
    + 6 x d x V for the LM head + causal attention 12 x L x H x hd x T / 2."""
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.hd
    attn_proj = d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
    matmul_params = cfg.num_layers * (attn_proj + 3 * d * f)
    head = d * cfg.vocab_size
    attention = 12 * cfg.num_layers * cfg.num_heads * hd * seq_len / 2
    return 6 * matmul_params + 6 * head + attention


# dense bf16 peak FLOP/s per chip (docs/design.md, "MFU")
_PEAKS = (
    ("v6", 918e12), ("v5p", 459e12), ("v5 lite", 197e12), ("v5e", 197e12), ("v4", 275e12),
    ("h200", 989e12), ("h100", 989e12), ("a100", 312e12),
)


def measure_cpu_peak(n: int = 1024, reps: int = 6, trials: int = 3, dtype: str = "bfloat16") -> float:
    """Measured matmul rate in `dtype` (float32 accumulation) of this host's CPU, in FLOP/s: the
    best of a few trials, since other work on the machine only ever slows a trial down. 1024 is
    not too small: on a 2-core EPYC it measures a higher rate than 2048 (float32 2.15e11 against
    1.9e11, bf16 4.2e11 against 3.8e11), at a fifth of the CPU time (float32: 0.4 s against 1.9 s)."""
    a = jnp.ones((n, n), jnp.dtype(dtype))
    f = jax.jit(lambda x: jax.lax.dot(x, x, preferred_element_type=jnp.float32))
    f(a).block_until_ready()
    best = 0.0
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(reps):
            out = f(a)
        out.block_until_ready()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t))
    return best


def peak_flops(devices: Optional[list] = None, dtype: str = "bfloat16") -> tuple[float, str]:
    """Peak FLOP/s of all `devices` together and how it was found. CPU 'devices' share one
    host, so a CPU run's peak is one measured host rate, whatever the device count, of matmuls
    in the run's compute `dtype` (a CPU without native bf16 computes float32, whose peak is not
    the emulated bf16 one). Accelerators: the dense bf16 peak of the kind."""
    devices = devices or jax.devices()
    kind = devices[0].device_kind.lower()
    if devices[0].platform == "cpu":
        given = os.environ.get("EASYLEMUR_CPU_PEAK_FLOPS", "")
        if given:  # processes sharing a host (a local pod, tests) would measure each other's load
            return float(given), "EASYLEMUR_CPU_PEAK_FLOPS"
        return measure_cpu_peak(dtype=dtype), f"measured CPU {jnp.dtype(dtype).name} matmul"
    for key, peak in _PEAKS:
        if key in kind:
            return peak * len(devices), f"{kind} x{len(devices)}"
    return float("nan"), f"unknown peak for {kind!r}"


def due(step: int, every: int) -> bool:
    """Is it time (log, eval, save) at `step` for something done every `every` steps (0: never)?"""
    return every > 0 and step % every == 0


def non_finite(loss: float, grad_norm: float) -> str:
    """Which of a skipped step's numbers was not finite: a finite loss with a NaN gradient norm
    (an overflow in the backward pass) points somewhere else than a NaN loss."""
    bad = [f"{name} {v}" for name, v in (("loss", loss), ("grad norm", grad_norm)) if not math.isfinite(v)]
    good = [f"{name} {v:.4g}" for name, v in (("loss", loss), ("grad norm", grad_norm)) if math.isfinite(v)]
    return "non-finite " + " and ".join(bad or ["update"]) + (f" ({', '.join(good)})" if good else "")


class TrainingError(RunError):
    """A run that cannot go on (a non-finite loss under train.nan_policy=stop)."""


class StepLogger:
    """The train loop's side job of watching steps: it reads each step's metrics one step
    late (so the host never waits for the device before dispatching the next step), keeps the
    timing window for tokens/s and MFU, counts non-finite steps (or stops the run on one),
    writes a record every `log.every` steps, on the last step and on eval steps, and drives
    the progress bar. Every process runs it (the token counts are summed across processes);
    only process 0 writes.

    Timing (docs/design.md, "MFU"): a step ends when its metrics arrive; tokens/s covers the
    wall time from the end of the window's first step to the end of its last, whole steps
    only, less the host's side jobs in between while no step ran (eval, checkpoint saves:
    `side_job()`), so frequent logging and saves in the window do not skew it."""

    def __init__(self, cfg: Any, writer: MetricsWriter, model_cfg: LlamaConfig, source_names: Sequence[str], *,
                 start_step: int, nan_skips: int, events: Any = None):
        """`events`: the run's `goodput.EventLog` (told each step's end), or None."""
        self.cfg, self.writer = cfg, writer
        self.events = events
        self.names = list(source_names)
        self.tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
        self.flops_per_token = flops_per_token(model_cfg, cfg.data.seq_len)
        self.peak, self.peak_how = peak_flops(dtype=model_cfg.dtype)
        self.nan_skips = nan_skips
        self.pending: Optional[tuple] = None  # (step, device metrics, token counts after it)
        self.window_t: Optional[float] = None  # when the window's first step ended
        self.window_steps = 0  # steps ended since window_t
        self.side_seconds = 0.0  # side jobs run since window_t
        self.last: dict = {}
        self.tokens: dict = {}
        self.progress = _progress(start_step, cfg.train.steps, jax.process_index() == 0)

    def push(self, step: int, metrics: dict, local_tokens: np.ndarray) -> None:
        """Takes the step just dispatched (its metrics still on device, and this process's
        per-source token counts after its batch); finishes the step before it, which the
        device has run up to now: its end is the time its metrics arrive."""
        self._finish()
        self.pending = (step, metrics, local_tokens)

    def flush(self, evaluate: Optional[Callable[[], float]] = None) -> None:
        """Finishes the pending step now (waiting for it); `evaluate` gives the eval loss of
        these weights for its record. Call before anything that must see the step's effects:
        eval, a checkpoint, the end of the run. No step runs after it until the next push, so
        the host's time from the step's end to here (eval, writing) is a side job."""
        ended = self._finish(evaluate)
        if ended is not None:
            self.side_seconds += time.perf_counter() - ended

    @contextlib.contextmanager
    def side_job(self) -> Iterator[None]:
        """Times work the loop does between steps with none running (a checkpoint save), so
        that it is not counted as step time."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.side_seconds += time.perf_counter() - t

    def _finish(self, evaluate: Optional[Callable[[], float]] = None) -> Optional[float]:
        """Waits for the pending step, counts it, writes its record when due; returns when the
        step ended (None when nothing was pending)."""
        if self.pending is None:
            return None
        step, m, local_tokens = self.pending
        self.pending = None
        m = jax.device_get(m)
        ended = time.perf_counter()
        if not bool(m["finite"]):
            if self.cfg.train.nan_policy == "stop":
                raise TrainingError(
                    f"step {step}: {non_finite(float(m['loss']), float(m['grad_norm']))}; stopping "
                    "(train.nan_policy=stop). The step was not applied."
                )
            self.nan_skips += 1
            print(f"step {step}: {non_finite(float(m['loss']), float(m['grad_norm']))}, step skipped "
                  f"({self.nan_skips} so far)", flush=True)
        first = self.window_t is None
        if first:  # the first step includes compilation: time from its end
            self.window_t, self.side_seconds = ended, 0.0
        else:
            self.window_steps += 1
        self.last = {"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"])}
        logged = due(step, self.cfg.log.every) or step == self.cfg.train.steps or evaluate is not None
        if self.events is not None:
            self.events.step_ended(step, first=first, logged=logged)
        if logged:
            self._write(step, m, ended, local_tokens, evaluate)
        self.progress.update(1)
        return ended

    def _write(self, step: int, m: dict, ended: float, local_tokens: np.ndarray,
               evaluate: Optional[Callable[[], float]]) -> None:
        from easylemur.sharding import process_sum

        dt = ended - self.window_t - self.side_seconds
        tps = self.tokens_per_step * self.window_steps / dt if self.window_steps and dt > 0 else float("nan")
        mfu = tps * self.flops_per_token / self.peak if math.isfinite(tps) else float("nan")
        # the next window starts where this step ended: the step after it is already running
        self.window_t, self.window_steps, self.side_seconds = ended, 0, 0.0
        self.tokens = dict(zip(self.names, (int(c) for c in process_sum(local_tokens))))
        record = {
            "step": step, "loss": self.last["loss"], "learning_rate": float(m["learning_rate"]),
            "grad_norm": self.last["grad_norm"], "trained_tokens": int(m["trained_tokens"]),
            "tokens_per_second": tps, "mfu": mfu, "nan_skips": self.nan_skips,
            **{f"tokens/{n}": self.tokens[n] for n in self.names},
        }
        if evaluate is not None:
            record["eval_loss"] = evaluate()
        self.writer.write(record)
        self.progress.set_postfix_str(f"loss {self.last['loss']:.4f} tok/s {tps:,.0f} mfu {mfu:.1%}", refresh=False)

    def close(self) -> None:
        self.progress.close()


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, *a: Any, **k: Any) -> None:
        pass

    def close(self) -> None:
        pass


class _Progress:
    """The train bar, drawn from the first step on: the start lines printed after the logger is
    made (the model line) come before it, never onto it."""

    def __init__(self, start: int, total: int):
        self.start, self.total, self.bar = start, total, None

    def _bar(self) -> Any:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=self.start, desc="train", dynamic_ncols=True, mininterval=1.0,
                            file=sys.stdout)
        return self.bar

    def update(self, n: int) -> None:
        self._bar().update(n)

    def set_postfix_str(self, *a: Any, **k: Any) -> None:
        self._bar().set_postfix_str(*a, **k)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _progress(start: int, total: int, active: bool) -> Any:
    return _Progress(start, total) if active else _NoProgress()
