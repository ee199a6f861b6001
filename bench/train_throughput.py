"""Train-step throughput: easylemur's jitted step against the same model trained with
transformers' LlamaForCausalLM in PyTorch (AdamW, same shapes, same batch), on this machine.

    python bench/train_throughput.py [--hidden 256 --layers 4 --seq 256 --batch 8 --steps 10]

Prints tokens/s for both, the ratio easylemur / PyTorch, and easylemur's MFU against the
measured CPU bf16 matmul peak. Not a test: timings go here, never into assertions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="easylemur compute dtype")
    ap.add_argument("--torch-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="PyTorch compute: float32, or bfloat16 autocast (float32 master weights, like easylemur)")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    from easylemur.config import default_config
    from easylemur.metrics import flops_per_token, measure_cpu_peak
    from easylemur.models.llama import PRESETS, init_params
    from easylemur.optim import make_optimizer
    from easylemur.step import make_train_step

    cfg = dataclasses.replace(
        PRESETS["tiny"], vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 32 * 32,
        num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.kv_heads, dtype=args.dtype,
    )
    B, T = args.batch, args.seq
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    tokens = B * T

    # -- easylemur
    opt = default_config().optimizer
    tx, _ = make_optimizer(opt, 1000)
    params = init_params(cfg, jax.random.PRNGKey(0))
    state = {"params": params, "opt_state": tx.init(params)}
    batch = {"input_ids": jnp.asarray(ids), "loss_mask": jnp.ones((B, T), jnp.int32),
             "segment_ids": jnp.ones((B, T), jnp.int32),
             "positions": jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)), "source": jnp.zeros((B,), jnp.int32)}
    step = jax.jit(make_train_step(cfg, None, tx, 1, 0.0), donate_argnums=(0,))
    state, m = step(state, batch)
    jax.block_until_ready(m["loss"])
    t = time.perf_counter()
    for _ in range(args.steps):
        state, m = step(state, batch)
    jax.block_until_ready(m["loss"])
    ours = tokens * args.steps / (time.perf_counter() - t)

    # -- transformers + PyTorch: float32 (its CPU training default) or bf16 autocast
    torch.manual_seed(0)
    hf = LlamaForCausalLM(HFConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=max(T, 512),
    ))
    hf.train()
    optim = torch.optim.AdamW(hf.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2), eps=opt.eps, weight_decay=opt.weight_decay)
    tids = torch.as_tensor(ids, dtype=torch.long)

    def torch_step():
        optim.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.torch_dtype == "bfloat16"):
            loss = hf(input_ids=tids, labels=tids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), opt.clip_norm)
        optim.step()

    torch_step()
    t = time.perf_counter()
    for _ in range(args.steps):
        torch_step()
    theirs = tokens * args.steps / (time.perf_counter() - t)

    peak = measure_cpu_peak()
    result = {
        "model_params": cfg.num_params(), "batch": [B, T], "easylemur_dtype": args.dtype, "torch_dtype": args.torch_dtype,
        "easylemur_tokens_per_s": round(ours), "pytorch_tokens_per_s": round(theirs),
        "ratio_easylemur_over_pytorch": round(ours / theirs, 3),
        "easylemur_mfu": round(ours * flops_per_token(cfg, T) / peak, 4), "cpu_peak_flops": float(f"{peak:.3g}"),
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
