"""Decode throughput: easylemur's compiled decode loop against transformers' `generate` on the
same random Llama (about 58M parameters: d=512, 8 layers, 8 heads, ff 1408, vocab 32000), the
same prompts, greedy, a fixed number of new tokens, at batch 1 and 16, on this machine.

    python bench/generate_throughput.py [--new-tokens 256 --prompt-len 32 --batches 1,16 --repeats 2]

Both decode exactly --new-tokens tokens per row (no early stop). easylemur's figure excludes
its one-off compilation (timed separately); each figure is the best of --repeats runs,
prefill included. Prints a table, then one JSON line. Not a test: timings go here, never into
assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from random_llama import add_model_args, random_llama  # noqa: E402 (bench/, run as a script)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--repeats", type=int, default=2)
    add_model_args(ap, hidden=512, layers=8, heads=8, ff=1408, vocab=32000)
    args = ap.parse_args()

    import numpy as np
    import torch

    hf, ours, params = random_llama(args)  # float32 compute on both sides

    rng = np.random.default_rng(0)
    N = args.new_tokens
    rows = []
    for B in [int(b) for b in args.batches.split(",")]:
        prompts = rng.integers(3, args.vocab, (B, args.prompt_len)).tolist()

        t = time.perf_counter()
        first = ours.generate(prompts, max_new_tokens=N, stop_ids=[])
        compile_s = time.perf_counter() - t
        ours_s = min(_timed(lambda: ours.generate(prompts, max_new_tokens=N, stop_ids=[])) for _ in range(args.repeats))
        assert all(len(r) == N for r in first)

        ids = torch.tensor(prompts)
        with torch.no_grad():
            hf_out = hf.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)  # warm-up
            hf_s = min(_timed(lambda: hf.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False,
                                                  pad_token_id=0)) for _ in range(args.repeats))
        same = sum(a == b for a, b in zip(first, hf_out[:, args.prompt_len:].tolist()))
        rows.append({"batch": B, "new_tokens": N, "easylemur_tok_s": B * N / ours_s, "transformers_tok_s": B * N / hf_s,
                     "speedup": hf_s / ours_s, "easylemur_first_call_s": compile_s, "rows_identical": same})

    print(f"model: {params / 1e6:.1f}M params (d={args.hidden}, {args.layers} layers, {args.heads} heads, "
          f"ff {args.ff}, vocab {args.vocab}), prompt {args.prompt_len} tokens, greedy, {N} new tokens, "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} cores")
    print(f"{'batch':>5} {'easylemur tok/s':>16} {'transformers tok/s':>19} {'speedup':>8} "
          f"{'first call s':>13} {'same rows':>10}")
    for r in rows:
        print(f"{r['batch']:>5} {r['easylemur_tok_s']:>16.1f} {r['transformers_tok_s']:>19.1f} {r['speedup']:>7.2f}x "
              f"{r['easylemur_first_call_s']:>13.1f} {r['rows_identical']:>5}/{r['batch']}")
    print(json.dumps({"params": params, "results": rows}))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
