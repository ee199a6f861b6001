"""Data pipeline throughput against raw sentencepiece encoding of the same text.

    python bench/data_throughput.py [--config configs/tiny_pretrain.py] [--prefetch 0 2] [--batch-size 16 64]
        [--seconds 10] [--repeats 3]

raw: `Tokenizer.encode` over every document of the config's sources, already decoded in memory,
one thread (the reference for ratio_to_raw). raw_array: the same with `Tokenizer.encode_array`
(ids as a numpy buffer, what the pipeline calls), the reference for ratio_to_raw_array.
pipeline: `make_pipeline` (read, parse, tokenize, pack, mix, batch) with the given
`data.prefetch` values (N batches built ahead in a thread, N tokenizer threads per source; the
batches are the same for every value), steady state after a warm-up, counting non-padding
tokens. Settings are measured round-robin `--repeats` times (so a burst of load elsewhere on the
machine hits all of them alike); each line gives the median and every trial. Prints one JSON
line per setting with tokens/s and the ratio pipeline/raw, and the host's load average, since
thread parallelism needs idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def raw_rate(cfg, tok, seconds: float, array: bool = False) -> float:
    from easylemur.config import source_dict
    from easylemur.data.readers import open_source

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
    with make_pipeline(cfg.data, tok, global_batch_size=batch_size, seed=0) as it:
        warm = time.perf_counter()
        while time.perf_counter() - warm < min(3.0, seconds / 2):
            next(it)  # files read, buffers filled
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            b = next(it)
            n += int((b["segment_ids"] > 0).sum())
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/tiny_pretrain.py")
    ap.add_argument("--prefetch", type=int, nargs="*", default=[0, 2])
    ap.add_argument("--batch-size", type=int, nargs="*", default=[16, 64])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from easylemur.config import load_config
    from easylemur.tokenizer.spm import Tokenizer

    cfg = load_config(args.config)
    tok = Tokenizer.load(cfg.data.get("tokenizer") or None)
    raw = raw_rate(cfg, tok, args.seconds)
    print(json.dumps({"what": "raw sentencepiece encode", "tokens_per_s": round(raw)}), flush=True)
    raw_array = raw_rate(cfg, tok, args.seconds, array=True)
    print(json.dumps({"what": "raw sentencepiece encode, numpy ids", "tokens_per_s": round(raw_array)}), flush=True)
    settings = [(p, b) for b in args.batch_size for p in args.prefetch]
    trials: dict = {s: [] for s in settings}
    for _ in range(args.repeats):
        for p, b in settings:
            trials[(p, b)].append(pipeline_rate(cfg, tok, p, args.seconds, b))
    for (p, b), rates in trials.items():
        r = statistics.median(rates)
        print(json.dumps({"what": "pipeline", "prefetch": p, "seq_len": cfg.data.seq_len, "cpus": os.cpu_count(),
                          "load_avg_1m": round(os.getloadavg()[0], 2), "batch_size": b, "tokens_per_s": round(r),
                          "trials": [round(x) for x in rates], "ratio_to_raw": round(r / raw, 3),
                          "ratio_to_raw_array": round(r / raw_array, 3)}), flush=True)


if __name__ == "__main__":
    main()
