"""Train-step MFU on one NVIDIA GPU (written for an H200): a ~1B and a Llama-2-7B-shape model,
bf16 compute with float32 master weights, attention=cudnn against attention=blockwise.

    python bench/gpu_mfu.py [--models 1b,7b] [--attention cudnn,blockwise] [--steps 10]
                            [--layers-7b 32] [--dry-run]

Each (model, attention) pair: the jitted train step (scanned layers, remat, the fused LM head
a chunk of positions at a time) is compiled, warmed up once, then --steps steps are timed.
MFU = tokens/s x training FLOPs per token (easylemur.train.metrics.flops_per_token, MaxText's
formula) / the GPU's dense bf16 peak (easylemur.train.metrics.peak_flops: 989 TFLOP/s for H100 and
H200). A 7B that does not fit (float32 params + Adam moments + gradients are 16 bytes per
parameter: 108 GB at 32 layers) is retried with half its layers, down to 8, and the row says
how many it ran. --dry-run prints the configurations and exits (any machine). Without a GPU
it refuses with one line (exit 1). The last line is one JSON object with the date and device.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import sys
import time
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# JAX takes 75% of the GPU's memory up front by default; a 7B's state alone is 108 GB.
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")

from easylemur.errors import InputError, RunError, add_debug_flag, run_cli  # noqa: E402

MODELS = ("1b", "7b")
ATTENTION = ("cudnn", "blockwise", "dense", "flash", "auto")


def model_configs(layers_7b: int = 32) -> dict:
    """name -> (LlamaConfig, batch rows, row length): the shapes this benchmark trains."""
    from easylemur.model.config import PRESETS, LlamaConfig

    common = dict(dtype="bfloat16", param_dtype="float32", scan_layers=True, remat="full")
    return {
        # TinyLlama-1.1B's shape: d 2048, 22 layers, 32 heads over 4 kv heads, ff 5632
        "1b": (LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_layers=22, num_heads=32,
                           num_kv_heads=4, max_position_embeddings=4096, **common), 8, 2048),
        "7b": (dataclasses.replace(PRESETS["llama2_7b"], num_layers=layers_7b, **common), 4, 4096),
    }


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="1b,7b", help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--attention", default="cudnn,blockwise", help=f"comma-separated, of {', '.join(ATTENTION)}")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers-7b", type=int, default=32, help="layers of the 7B shape to try first")
    ap.add_argument("--loss-chunk", type=int, default=1024, help="train.loss_chunk (positions)")
    ap.add_argument("--dry-run", action="store_true", help="print the configurations and exit")
    add_debug_flag(ap)
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.attention = [a for a in args.attention.split(",") if a]
    for m in args.models:
        if m not in MODELS:
            raise InputError(f"--models: {m!r} is not one of {', '.join(MODELS)}")
    for a in args.attention:
        if a not in ATTENTION:
            raise InputError(f"--attention: {a!r} is not one of {', '.join(ATTENTION)}")
    if args.steps < 1 or args.layers_7b < 1:
        raise InputError(f"--steps={args.steps} and --layers-7b={args.layers_7b} must be at least 1")
    return args


def run_one(cfg, batch: int, seq: int, steps: int, loss_chunk: int) -> dict:
    """Compile, warm up and time cfg's train step on the first device; tokens/s and MFU."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from easylemur.config import default_config
    from easylemur.train.metrics import flops_per_token, peak_flops
    from easylemur.model.llama import init_params
    from easylemur.train.optim import make_optimizer
    from easylemur.train.step import make_train_step

    tx, _ = make_optimizer(default_config().optimizer, 1000)
    params = init_params(cfg, jax.random.PRNGKey(0))
    state = {"params": params, "opt_state": tx.init(params)}
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq)).astype(np.int32)
    data = {"input_ids": jnp.asarray(ids), "loss_mask": jnp.ones((batch, seq), jnp.int32),
            "segment_ids": jnp.ones((batch, seq), jnp.int32),
            "positions": jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq)),
            "source": jnp.zeros((batch,), jnp.int32)}
    fn = jax.jit(make_train_step(cfg, None, tx, 1, 0.0, loss_chunk), donate_argnums=(0,))
    t = time.perf_counter()
    state, m = fn(state, data)
    jax.block_until_ready(m["loss"])
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(steps):
        state, m = fn(state, data)
    jax.block_until_ready(m["loss"])
    tps = batch * seq * steps / (time.perf_counter() - t)
    peak, _ = peak_flops(jax.devices()[:1])
    del state
    return {"tokens_per_second": round(tps, 1), "mfu": round(tps * flops_per_token(cfg, seq) / peak, 4),
            "first_step_s": round(compile_s, 1), "loss": float(m["loss"])}


def _out_of_memory(e: Exception) -> bool:
    return "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    configs = model_configs(args.layers_7b)
    for name in args.models:
        cfg, batch, seq = configs[name]
        print(f"{name}: {cfg.num_params() / 1e9:.2f}B params, d={cfg.hidden_size}, {cfg.num_layers} layers, "
              f"{cfg.num_heads} heads / {cfg.num_kv_heads} kv, ff {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
              f"batch {batch} x {seq}, {cfg.dtype} compute, remat={cfg.remat}", flush=True)
    if args.dry_run:
        return 0
    import jax

    devices = jax.devices()
    if devices[0].platform != "gpu":
        raise RunError(f"bench/gpu_mfu.py needs an NVIDIA GPU, and JAX sees {devices[0].platform} devices "
                       f"({devices[0].device_kind}); run it where `python -c 'import jax; print(jax.devices())'` "
                       "lists a CUDA device (JAX with CUDA: pip install 'jax[cuda12]')")
    rows = []
    for name in args.models:
        cfg, batch, seq = configs[name]
        for impl in args.attention:
            layers = cfg.num_layers
            while True:
                run_cfg = dataclasses.replace(cfg, attention=impl, num_layers=layers)
                try:
                    row = run_one(run_cfg, batch, seq, args.steps, args.loss_chunk)
                    break
                except Exception as e:  # noqa: BLE001 - out of memory is retried smaller, the rest re-raised
                    if not _out_of_memory(e) or layers <= 8:
                        raise
                    print(f"{name} {impl}: out of memory with {layers} layers; trying {layers // 2}", flush=True)
                    layers //= 2
                gc.collect()
            row = {"model": name, "attention": impl, "layers": layers, "params": run_cfg.num_params(),
                   "batch": [batch, seq], **row}
            rows.append(row)
            print(f"{name:3s} {impl:9s} {layers:2d} layers  {row['tokens_per_second']:10.1f} tokens/s  "
                  f"MFU {100 * row['mfu']:5.1f}%  (first step {row['first_step_s']} s)", flush=True)
    print(json.dumps({"date": datetime.date.today().isoformat(), "device": devices[0].device_kind,
                      "jax": jax.__version__, "steps": args.steps, "loss_chunk": args.loss_chunk, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
