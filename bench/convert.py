"""Converter benchmark: a ~1 GB random bf16 Llama both ways, against `cp` of the same files.

    python bench/convert.py [--workdir /tmp/easylemur-bench-convert] [--size-gb 1.0] [--keep]

Prints one JSON line per measurement and a final summary line. Memory is the peak RSS (VmHWM) of
the converting process beyond its RSS right after its imports (python + jax + orbax +
tensorstore + easylemur: the bare runtime), as a fraction of the model's size on disk; the
goal is <= 0.5. Each conversion runs in a fresh process so its peak is its own. Timings are
with a warm page cache (the files were just written), and so is `cp`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, os, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, orbax.checkpoint, tensorstore, numpy  # the bare runtime the converter needs
jax.devices()
from easylemur.convert import cli as convert  # noqa: F401
from easylemur.checkpoint import model_meta, store  # noqa: F401
from easylemur.convert import hf
from easylemur.tokenizer import spm as tokenizer
import gc; gc.collect()

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

# ru_maxrss would still hold the import-time peak (jax start-up), which can hide the
# conversion's own; writing 5 to clear_refs resets VmHWM to the current RSS (Linux).
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status("VmRSS")
t = time.perf_counter()
rc = convert.main(sys.argv[1:])
wall = time.perf_counter() - t
peak = status("VmHWM")
print("RESULT " + json.dumps({"rc": rc, "wall_s": wall, "base_rss": base, "peak_rss": peak}))
"""


def make_random_hf(out: Path, size_gb: float) -> dict:
    """A random bf16 Llama in two safetensors shards + index, written tensor by tensor."""
    import ml_dtypes
    import numpy as np

    from easylemur.convert import hf
    from easylemur.model.config import LlamaConfig
    from easylemur.convert.safetensors_io import LazyArray, write_sharded_safetensors

    d, f, V = 2048, 5504, 32000
    per_layer = 4 * d * d + 3 * d * f + 2 * d
    layers = max(1, round((size_gb * 1e9 / 2 - 2 * V * d) / per_layer))
    cfg = LlamaConfig(vocab_size=V, hidden_size=d, intermediate_size=f, num_layers=layers, num_heads=16,
                      num_kv_heads=16, max_position_embeddings=4096)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)

    def rand(shape):
        return lambda: (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    items = [(m.hf_name, LazyArray(m.hf_shape, ml_dtypes.bfloat16, rand(m.hf_shape))) for m in hf.tensor_maps(cfg)]
    total = sum(math.prod(m.hf_shape) * 2 for m in hf.tensor_maps(cfg))
    write_sharded_safetensors(out, items, max_shard_bytes=total // 2 + 1)
    (out / "config.json").write_text(json.dumps(hf.config_to_hf(cfg)))
    return {"layers": layers, "params": cfg.num_params(), "bytes": total}


def run_child(args: list[str]) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    if p.returncode or not lines:
        raise SystemExit(f"child failed ({p.returncode}): {args}\n{p.stderr[-3000:]}")
    r = json.loads(lines[-1][len("RESULT "):])
    if r["rc"]:
        raise SystemExit(f"convert failed: {args}\n{p.stderr[-3000:]}")
    return r


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/easylemur-bench-convert"))
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--keep", action="store_true", help="keep the files afterwards")
    args = ap.parse_args()
    w = args.workdir
    shutil.rmtree(w, ignore_errors=True)
    src, ck, exp, cpdir = w / "hf", w / "ckpt", w / "export", w / "cp"
    info = make_random_hf(src, args.size_gb)
    size = info["bytes"]
    print(json.dumps({"model": info}), flush=True)

    t = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(cpdir)], check=True)
    cp_s = time.perf_counter() - t

    a = run_child(["from-hf", "--hf", str(src), "--out", str(ck)])
    b = run_child(["to-hf", "--checkpoint", str(ck), "--out", str(exp), "--dtype", "bfloat16", "--max-shard-size", "400MB"])
    rows = []
    for name, r in (("from-hf", a), ("to-hf", b)):
        extra = r["peak_rss"] - r["base_rss"]
        rows.append({"direction": name, "wall_s": round(r["wall_s"], 2), "cp_s": round(cp_s, 2),
                     "vs_cp": round(r["wall_s"] / cp_s, 2), "base_rss_mb": round(r["base_rss"] / 2**20),
                     "peak_rss_mb": round(r["peak_rss"] / 2**20), "extra_rss_mb": round(extra / 2**20),
                     "extra_rss_over_model": round(extra / size, 3)})
        print(json.dumps(rows[-1]), flush=True)

    # the round trip is exact (bf16 in, bf16 stored, bf16 out)
    import numpy as np

    from easylemur.convert import hf

    x = hf.index_hf_tensors(src)
    y = hf.index_hf_tensors(exp)
    exact = x.keys() == y.keys() and all(np.array_equal(x[k].read().view(np.uint16), y[k].read().view(np.uint16)) for k in x)
    summary = {"model_gb": round(size / 1e9, 3), "checkpoint_gb": round(du(ck) / 1e9, 3), "round_trip_bitwise": exact,
               "cp_s": round(cp_s, 2),
               **{f"{r['direction']}_{k}": r[k] for r in rows for k in ("wall_s", "vs_cp", "extra_rss_over_model")},
               "goal_extra_rss_over_model": 0.5}
    print(json.dumps({"summary": summary}), flush=True)
    if not args.keep:
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
