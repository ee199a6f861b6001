"""Data pipeline throughput against raw sentencepiece encoding of the same text.

    python bench/data_throughput.py [--config configs/tiny_pretrain.py] [--prefetch 0 2] [--seconds 10]

raw: `Tokenizer.encode` over every document of the config's sources, already decoded in memory,
one thread (the reference for ratio_to_raw). raw_array: the same with `Tokenizer.encode_array`
(ids as a numpy buffer, what the pipeline calls), the reference for ratio_to_raw_array. pipeline: `make_pipeline` (read, parse, tokenize, pack, mix, batch; with the given
numbers of prefetch worker processes), steady state after a warm-up, counting non-padding
tokens. Prints one JSON line per setting with tokens/s and the ratio pipeline/raw.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def raw_rate(cfg, tok, seconds: float, array: bool = False) -> float:
    from easylemur.data.sources import open_source, source_dict

    texts = []
    for s in cfg.data.sources.values():
        sd = source_dict(s)
        src = open_source(sd)
        field = sd["field"] or "text"
        for i in range(len(src)):
            _, rec = src[i]
            if isinstance(rec, dict) and isinstance(rec.get(field), str):
                texts.append(rec[field])
    enc = tok.encode_array if array else tok.encode
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for t in texts:
            n += len(enc(t))
    return n / (time.perf_counter() - t0)


def pipeline_rate(cfg, tok, prefetch: int, seconds: float, batch_size: int) -> float:
    from easylemur.data.pipeline import make_pipeline

    cfg.data.prefetch = prefetch
    it = make_pipeline(cfg.data, tok, global_batch_size=batch_size, seed=0)
    warm = time.perf_counter()
    while time.perf_counter() - warm < min(5.0, seconds / 2) or prefetch and time.perf_counter() - warm < 8:
        next(it)  # includes worker start-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        b = next(it)
        n += int((b["segment_ids"] > 0).sum())
    rate = n / (time.perf_counter() - t0)
    it.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/tiny_pretrain.py")
    ap.add_argument("--prefetch", type=int, nargs="*", default=[0, 2])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    from easylemur.config import load_config
    from easylemur.tokenizer import Tokenizer

    cfg = load_config(args.config)
    tok = Tokenizer.load(cfg.data.get("tokenizer") or None)
    raw = raw_rate(cfg, tok, args.seconds)
    print(json.dumps({"what": "raw sentencepiece encode", "tokens_per_s": round(raw)}), flush=True)
    raw_array = raw_rate(cfg, tok, args.seconds, array=True)
    print(json.dumps({"what": "raw sentencepiece encode, numpy ids", "tokens_per_s": round(raw_array)}), flush=True)
    for p in args.prefetch:
        r = pipeline_rate(cfg, tok, p, args.seconds, args.batch_size)
        print(json.dumps({"what": "pipeline", "prefetch": p, "seq_len": cfg.data.seq_len, "cpus": os.cpu_count(),
                          "batch_size": args.batch_size, "tokens_per_s": round(r), "ratio_to_raw": round(r / raw, 3),
                          "ratio_to_raw_array": round(r / raw_array, 3)}), flush=True)


if __name__ == "__main__":
    main()
