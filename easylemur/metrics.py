"""Training metrics: the FLOP formula, device peaks, MFU, and the writers (metrics.jsonl,
TensorBoard, optional W&B). Only process 0 writes."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp

from easylemur.models.llama import LlamaConfig


def flops_per_token(cfg: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token, MaxText's formula: 6 x (non-embedding matmul params)
    + 6 x d x V for the LM head + causal attention 12 x L x H x hd x T / 2."""
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.hd
    attn_proj = d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
    matmul_params = cfg.num_layers * (attn_proj + 3 * d * f)
    head = d * cfg.vocab_size
    attention = 12 * cfg.num_layers * cfg.num_heads * hd * seq_len / 2
    return 6 * matmul_params + 6 * head + attention


# dense bf16 peak FLOP/s per chip (DESIGN.md §4)
_PEAKS = (
    ("v6", 918e12), ("v5p", 459e12), ("v5 lite", 197e12), ("v5e", 197e12), ("v4", 275e12),
    ("h200", 989e12), ("h100", 989e12), ("a100", 312e12),
)


def measure_cpu_peak(n: int = 2048, reps: int = 3, trials: int = 3) -> float:
    """Measured bf16 matmul rate (float32 accumulation) of this host's CPU, in FLOP/s: the best
    of a few trials, since other work on the machine only ever slows a trial down."""
    a = jnp.ones((n, n), jnp.bfloat16)
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


def peak_flops(devices: Optional[list] = None) -> tuple[float, str]:
    """Peak FLOP/s of all `devices` together and how it was found. CPU 'devices' share one
    host, so a CPU run's peak is one measured host rate, whatever the device count."""
    devices = devices or jax.devices()
    kind = devices[0].device_kind.lower()
    if devices[0].platform == "cpu":
        return measure_cpu_peak(), "measured CPU bf16 matmul"
    for key, peak in _PEAKS:
        if key in kind:
            return peak * len(devices), f"{kind} x{len(devices)}"
    return float("nan"), f"unknown peak for {kind!r}"


class MetricsWriter:
    """Appends one JSON object per logged step to metrics.jsonl and mirrors scalars to
    TensorBoard (and W&B when configured). A no-op on processes other than 0."""

    def __init__(self, workdir: str | Path, wandb_project: str = "", config: Optional[dict] = None, resume_step: int = 0):
        self.active = jax.process_index() == 0
        from easylemur.checkpoint import as_path

        workdir = as_path(workdir)
        self.remote = "://" in str(workdir)
        self.path = workdir / "metrics.jsonl"
        self.lines: list[str] = []
        self.tb = None
        self.wandb = None
        if not self.active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resume_step)
        from tensorboardX import SummaryWriter

        tb_dir = str(workdir / "tb")
        if self.remote:  # tensorboardX writes local files; mirror them to the bucket yourself
            tb_dir = os.path.join(tempfile.gettempdir(), "easylemur-tb", str(workdir).replace("://", "_").replace("/", "_"))
            print(f"TensorBoard events go to {tb_dir} (workdir {workdir} is remote)", flush=True)
        self.tb = SummaryWriter(tb_dir, purge_step=resume_step + 1 if resume_step else None)
        if wandb_project:
            try:
                import wandb
            except ImportError:
                print("log.wandb_project is set but wandb is not installed; logging to W&B is off")
            else:
                self.wandb = wandb.init(project=wandb_project, config=config, resume="allow")

    def _truncate_after(self, step: int) -> None:
        """A resumed run rewrites the steps after its checkpoint: drop the killed run's lines
        for them so metrics.jsonl reads as one uninterrupted run."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the killed run's half-written last line
            if record.get("step", 0) <= step:
                kept.append(line)
        self.lines = kept
        if self.remote:
            self.path.write_text("".join(l + "\n" for l in kept))
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(l + "\n" for l in kept))
        tmp.replace(self.path)

    def write(self, record: dict[str, Any]) -> None:
        if not self.active:
            return
        line = json.dumps(record)
        if self.remote:  # buckets cannot append: rewrite the (small) file
            self.lines.append(line)
            self.path.write_text("".join(l + "\n" for l in self.lines))
        else:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        step = record["step"]
        for k, v in record.items():
            if k != "step" and isinstance(v, (int, float)):
                self.tb.add_scalar(k, v, step)
        self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(record, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
