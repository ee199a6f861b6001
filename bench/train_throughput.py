"""Train-step throughput: easylemur's jitted train step against the same model trained with
transformers' LlamaForCausalLM in PyTorch (AdamW, global-norm clipping, same shapes, same
batch), on this machine's CPU.

    python bench/train_throughput.py [--only easylemur|transformers] [--hidden 512 --layers 8 --heads 8
        --kv-heads 8 --ff 1408 --vocab 32000 --batch 8 --seq 512 --steps 3 --repeats 3]
        [--dtype auto|float32|bfloat16] [--torch-dtype best|float32|bfloat16]

Defaults: the ~58M-parameter shape (d=512, 8 layers, 8 heads, ff 1408, vocab 32000), 8 rows of
512 tokens, easylemur computing in the dtype `python -m easylemur.train` picks for
model.dtype=auto on this CPU (bf16 where it has AVX-512 BF16 or AMX, else float32;
easylemur/host.py, said in the first line; float32 master weights either way) against PyTorch at
its best on this machine: both float32 and bf16 autocast (float32 master weights too) are timed,
and the ratio is against the faster, named in the JSON (`transformers_dtype`; --torch-dtype
times one). Every timed round is a fresh process of one side, as a
user's run would be, the sides alternating, --repeats rounds of --steps steps each, after two
warm-up steps (easylemur's compilation is not timed; its later rounds load the step from this
run's compilation cache). One process per side for the whole run would not be fair on this VM:
memory the idle side holds made the other side's page faults several times slower (transformers
fell from ~1,600 to ~450 tokens/s beside an idle easylemur worker that kept its heap), and in
one process the two frameworks' allocators disturb each other. easylemur's worker restarts
itself with the malloc setting `python -m easylemur.train` uses on a CPU (easylemur/host.py);
transformers runs with PyTorch's defaults. Each round line gives the side's page faults per
step, the figure to look at when a side's tokens/s moves between runs. Each figure is the best
round, since other work on a shared machine only ever slows a round down. The 1-minute load
average is printed with every round. `matmul_ceiling_gflops` is this CPU's matmul rate in
easylemur's compute dtype (2048^3, float32 accumulation, through XLA) measured in the same run,
after the rounds; each
side's GFLOP/s uses the same FLOPs per token (easylemur.train.metrics.flops_per_token, MaxText's
formula). The last line is one JSON object. Not a test: timings go here, never into assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from typing import Callable, Optional, Sequence

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from easylemur.errors import InputError, RunError, add_debug_flag, run_cli  # noqa: E402


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["easylemur", "transformers"], help="time one side alone (no ratio)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=1408, help="MLP width (intermediate_size)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3, help="steps per timed round")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds per side, alternating")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="easylemur compute dtype; auto: model.dtype=auto's pick on this CPU (bfloat16 where it has "
                    "native bf16, else float32)")
    ap.add_argument("--torch-dtype", default="best", choices=["best", "float32", "bfloat16"],
                    help="PyTorch compute: bfloat16 autocast (float32 master weights, like easylemur), float32, or "
                    "best: both timed, the ratio against the faster")
    ap.add_argument("--attention", default="auto", help="easylemur's model.attention")
    ap.add_argument("--loss-chunk", type=int, default=0, help="easylemur's train.loss_chunk (0: automatic)")
    ap.add_argument("--worker", choices=["easylemur", "transformers"], help=argparse.SUPPRESS)
    add_debug_flag(ap)
    args = ap.parse_args(argv)
    for name in ("hidden", "layers", "heads", "kv_heads", "ff", "vocab", "seq", "batch", "steps", "repeats"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')}={getattr(args, name)} must be at least 1")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        raise InputError(f"--hidden={args.hidden}, --heads={args.heads}, --kv-heads={args.kv_heads}: heads must "
                         "divide hidden and kv heads must divide heads")
    return args


def easylemur_dtype(asked: str) -> tuple[str, str]:
    """(dtype, why) easylemur computes in: --dtype, or for auto what `python -m easylemur.train`
    picks for model.dtype=auto on this CPU (easylemur/host.py)."""
    if asked != "auto":
        return asked, "--dtype"
    from easylemur import host

    try:
        return host.compute_dtype("cpu", host.cpu_flags(), os.environ)
    except ValueError as e:
        raise InputError(str(e)) from None


def torch_dtypes(asked: str) -> list[str]:
    """The PyTorch compute dtypes to time: --torch-dtype, or both for best."""
    return ["float32", "bfloat16"] if asked == "best" else [asked]


def torch_label(dtype: str) -> str:
    return "bfloat16 autocast" if dtype == "bfloat16" else dtype


def matmul_ceiling(dtype: str) -> float:
    """This CPU's matmul rate in `dtype` (float32 accumulation, through XLA), in FLOP/s: what
    easylemur.train.metrics.measure_cpu_peak measures, in that dtype."""
    from easylemur.train.metrics import measure_cpu_peak

    return measure_cpu_peak(dtype=dtype)


def model_config(args: argparse.Namespace):
    """The easylemur LlamaConfig of the benchmarked shape."""
    import dataclasses

    from easylemur.model.config import PRESETS

    return dataclasses.replace(
        PRESETS["tiny"], vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ff,
        num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.kv_heads, dtype=easylemur_dtype(args.dtype)[0],
        max_position_embeddings=max(args.seq, 1024), attention=args.attention,
    )


def easylemur_step(args: argparse.Namespace) -> Callable[[], None]:
    """One train step of easylemur, blocking, compiled and warmed up."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from easylemur.config import default_config
    from easylemur.model.llama import init_params
    from easylemur.train.optim import make_optimizer
    from easylemur.train.step import make_train_step

    cfg = model_config(args)
    B, T = args.batch, args.seq
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    tx, _ = make_optimizer(default_config().optimizer, 1000)
    params = init_params(cfg, jax.random.PRNGKey(0))
    box = {"state": {"params": params, "opt_state": tx.init(params)}}
    batch = {"input_ids": jnp.asarray(ids), "loss_mask": jnp.ones((B, T), jnp.int32),
             "segment_ids": jnp.ones((B, T), jnp.int32),
             "positions": jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)),
             "source": jnp.zeros((B,), jnp.int32)}
    fn = jax.jit(make_train_step(cfg, None, tx, 1, 0.0, args.loss_chunk), donate_argnums=(0,))

    def step() -> None:
        box["state"], metrics = fn(box["state"], batch)
        jax.block_until_ready(metrics["loss"])

    step()
    return step


def transformers_step(args: argparse.Namespace) -> Callable[[], None]:
    """One train step of transformers' Llama of the same shape in PyTorch, warmed up."""
    import numpy as np
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    from easylemur.config import default_config

    opt = default_config().optimizer
    torch.manual_seed(0)
    hf = LlamaForCausalLM(HFConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ff,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(args.seq, 1024),
    ))
    hf.train()
    optim = torch.optim.AdamW(hf.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2), eps=opt.eps,
                              weight_decay=opt.weight_decay)
    ids = np.random.default_rng(0).integers(0, args.vocab, (args.batch, args.seq))
    tids = torch.as_tensor(ids, dtype=torch.long)

    def step() -> None:
        optim.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.torch_dtype == "bfloat16"):
            loss = hf(input_ids=tids, labels=tids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), opt.clip_norm)
        optim.step()

    step()
    return step


def timed(step: Callable[[], None], steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t


def worker(args: argparse.Namespace) -> int:
    """One timed round of one side, in its own process: build the step, warm it up, time
    --steps steps, write the seconds they took as the last line of stdout."""
    if args.worker == "easylemur":  # as `python -m easylemur.train` does on a CPU
        from easylemur.host import restart_with_cpu_malloc

        restart_with_cpu_malloc()
    step = easylemur_step(args) if args.worker == "easylemur" else transformers_step(args)
    step()  # a second warm-up step: the first leaves the heap laid out differently
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds = timed(step, args.steps)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(seconds, faults / args.steps)
    return 0


def run_round(name: str, argv: list[str], env: dict) -> tuple[float, float]:
    """(seconds, page faults per step) of --steps steps of `name` ("easylemur", or
    "transformers" with its --torch-dtype in `argv`) in a fresh worker process."""
    import subprocess

    run = subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--worker", name], env=env,
                         stdout=subprocess.PIPE, text=True)
    lines = run.stdout.strip().splitlines()
    if run.returncode or not lines:
        raise RunError(f"the {name} worker exited with status {run.returncode} (its error is above)")
    seconds, faults = lines[-1].split()
    return float(seconds), float(faults)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    dtype, why = easylemur_dtype(args.dtype)
    cfg = model_config(args)
    # each side with its own arguments: easylemur's dtype resolved once here, one PyTorch dtype per worker
    sides = {}
    if args.only != "transformers":
        sides["easylemur"] = ("easylemur", [*argv, "--dtype", dtype])
        print(f"easylemur: compute {dtype} ({why})", flush=True)
    if args.only != "easylemur":
        for tdt in torch_dtypes(args.torch_dtype):
            sides[f"torch {tdt}"] = ("transformers", [*argv, "--torch-dtype", tdt])
    tokens = args.batch * args.seq * args.steps
    best = {name: 0.0 for name in sides}
    with tempfile.TemporaryDirectory(prefix="easylemur-bench-") as cache:
        # easylemur's rounds after the first load its compiled step from this run's own cache
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache)
        for r in range(args.repeats):
            for name, (worker_name, worker_argv) in sides.items():
                seconds, faults = run_round(worker_name, worker_argv, env)
                best[name] = max(best[name], tokens / seconds)
                print(f"round {r + 1} {name:14s} {tokens / seconds:8.1f} tokens/s  {faults:9.0f} page faults/step  "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    from easylemur.train.metrics import flops_per_token

    ceiling = matmul_ceiling(dtype)
    flops = flops_per_token(cfg, args.seq)
    result = {"model_params": cfg.num_params(), "batch": [args.batch, args.seq]}
    figures = {}
    if "easylemur" in best:
        result["easylemur_dtype"] = dtype
        result["easylemur_dtype_why"] = why
        result["easylemur_tokens_per_second"] = figures["easylemur"] = round(best["easylemur"], 1)
    by_dtype = {tdt: best[f"torch {tdt}"] for tdt in torch_dtypes(args.torch_dtype) if f"torch {tdt}" in best}
    if by_dtype:
        top = max(by_dtype, key=by_dtype.get)  # PyTorch's best dtype on this machine
        result["transformers_dtype"] = torch_label(top)
        result["transformers_tokens_per_second"] = figures["transformers"] = round(by_dtype[top], 1)
        result["transformers_by_dtype"] = {torch_label(t): round(v, 1) for t, v in by_dtype.items()}
    if len(figures) == 2:
        result["ratio"] = round(best["easylemur"] / by_dtype[top], 3)
        result["ratio_by_torch_dtype"] = {torch_label(t): round(best["easylemur"] / v, 3) for t, v in by_dtype.items()}
    result["matmul_ceiling_dtype"] = dtype
    result["matmul_ceiling_gflops"] = round(ceiling / 1e9, 1)
    for name, tps in figures.items():
        result[f"{name}_gflops"] = round(tps * flops / 1e9, 1)
        result[f"{name}_fraction_of_ceiling"] = round(tps * flops / ceiling, 4)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    result["cpus"] = os.cpu_count()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
