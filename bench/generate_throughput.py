"""Decode throughput: easylemur's compiled decode loop against transformers' `generate` on the
same random Llama (about 58M parameters: d=512, 8 layers, 8 heads, ff 1408, vocab 32000), the
same prompts, greedy, a fixed number of new tokens, at batch 1 and 16, on this machine.

    python bench/generate_throughput.py [--new-tokens 256 --prompt-len 32 --batches 1,16 --repeats 2]
                                        [--full-cache] [--no-transformers]

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
    ap.add_argument("--no-transformers", action="store_true",
                    help="time easylemur only (transformers' figures print as nan): with --full-cache on a loaded machine")
    ap.add_argument("--full-cache", action="store_true",
                    help="also time easylemur with one loop over the whole cache (Decoder(grow_cache=False)), "
                         "alternating with the default, and print both")
    add_model_args(ap, hidden=512, layers=8, heads=8, ff=1408, vocab=32000)
    args = ap.parse_args()

    import numpy as np
    import torch

    hf, ours, params = random_llama(args)  # float32 compute on both sides
    if args.full_cache:
        from easylemur.generate.engine import Decoder

        decoder = Decoder(ours.config, ours.params, grow_cache=False)

        class _Full:
            def generate(self, prompts, max_new_tokens):
                return decoder.generate(prompts, max_new_tokens=max_new_tokens, stop_ids=[])

        full = _Full()

    rng = np.random.default_rng(0)
    N = args.new_tokens
    rows = []
    for B in [int(b) for b in args.batches.split(",")]:
        prompts = rng.integers(3, args.vocab, (B, args.prompt_len)).tolist()

        t = time.perf_counter()
        first = ours.generate(prompts, max_new_tokens=N, stop_ids=[])
        compile_s = time.perf_counter() - t
        assert all(len(r) == N for r in first)
        full_s = None
        if args.full_cache:  # the same decode with one loop over the whole cache, timed in turn with the default
            assert full.generate(prompts, max_new_tokens=N) == first
            times = [(_timed(lambda: ours.generate(prompts, max_new_tokens=N, stop_ids=[])),
                      _timed(lambda: full.generate(prompts, max_new_tokens=N))) for _ in range(args.repeats)]
            ours_s, full_s = min(t[0] for t in times), min(t[1] for t in times)
        else:
            ours_s = min(_timed(lambda: ours.generate(prompts, max_new_tokens=N, stop_ids=[]))
                         for _ in range(args.repeats))

        if args.no_transformers:
            hf_s, same = float("nan"), -1
        else:
            ids = torch.tensor(prompts)
            with torch.no_grad():
                hf_out = hf.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)  # warm-up
                hf_s = min(_timed(lambda: hf.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False,
                                                      pad_token_id=0)) for _ in range(args.repeats))
            same = sum(a == b for a, b in zip(first, hf_out[:, args.prompt_len:].tolist()))
        rows.append({"batch": B, "new_tokens": N, "easylemur_tok_s": B * N / ours_s, "transformers_tok_s": B * N / hf_s,
                     "speedup": hf_s / ours_s, "easylemur_first_call_s": compile_s, "rows_identical": same})
        if full_s is not None:
            rows[-1]["easylemur_full_cache_tok_s"] = B * N / full_s

    print(f"model: {params / 1e6:.1f}M params (d={args.hidden}, {args.layers} layers, {args.heads} heads, "
          f"ff {args.ff}, vocab {args.vocab}), prompt {args.prompt_len} tokens, greedy, {N} new tokens, "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} cores")
    print(f"{'batch':>5} {'easylemur tok/s':>16} {'transformers tok/s':>19} {'speedup':>8} "
          f"{'first call s':>13} {'same rows':>10}")
    for r in rows:
        print(f"{r['batch']:>5} {r['easylemur_tok_s']:>16.1f} {r['transformers_tok_s']:>19.1f} {r['speedup']:>7.2f}x "
              f"{r['easylemur_first_call_s']:>13.1f} {r['rows_identical']:>5}/{r['batch']}")
        if "easylemur_full_cache_tok_s" in r:
            print(f"      one loop over the whole cache: {r['easylemur_full_cache_tok_s']:.1f} tok/s "
                  f"(growing cache: {r['easylemur_tok_s'] / r['easylemur_full_cache_tok_s']:.2f}x that)")
    print(json.dumps({"params": params, "results": rows}))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
