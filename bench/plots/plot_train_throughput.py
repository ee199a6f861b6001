"""Train-step tokens/s against model size on this CPU, easylemur (bf16) and transformers (bf16
autocast): bench/train_throughput.py once per size, its JSON lines kept, one PNG.

    python bench/plots/plot_train_throughput.py [--steps 2 --repeats 2] [--out bench/plots]

Sizes: d 256/384/512/768 with 4/6/8/8 layers, heads of 64, ff ~2.75 d, vocab 32000, 8 rows of
512 tokens (d=512 is the 58M shape of the headline figure). Writes train_throughput_cpu.json
(one result per size) and train_throughput_cpu.png beside this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = [(256, 4, 4, 704), (384, 6, 6, 1056), (512, 8, 8, 1408), (768, 8, 12, 2112)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    out = Path(args.out)
    results = []
    for hidden, layers, heads, ff in SIZES:
        cmd = [sys.executable, str(HERE.parent / "train_throughput.py"), "--hidden", str(hidden), "--layers",
               str(layers), "--heads", str(heads), "--kv-heads", str(heads), "--ff", str(ff), "--steps",
               str(args.steps), "--repeats", str(args.repeats)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
        if run.returncode:
            print(run.stderr, file=sys.stderr)
            return run.returncode
        result = json.loads(run.stdout.strip().splitlines()[-1])
        result["shape"] = {"hidden": hidden, "layers": layers, "heads": heads, "ff": ff}
        results.append(result)
        print(json.dumps(result), flush=True)
    (out / "train_throughput_cpu.json").write_text("".join(json.dumps(r) + "\n" for r in results))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = [r["model_params"] / 1e6 for r in results]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(params, [r["easylemur_tokens_per_second"] for r in results], "o-", label="easylemur (JAX, bf16)")
    ax.plot(params, [r["transformers_tokens_per_second"] for r in results], "s--",
            label="transformers (PyTorch, bf16 autocast)")
    for p, r in zip(params, results):
        ax.annotate(f"{r['ratio']:.2f}x", (p, r["easylemur_tokens_per_second"]), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)
    ax.set_xlabel("parameters (millions; vocab 32000)")
    ax.set_ylabel("train tokens / s (8 x 512 per step)")
    ax.set_title(f"Train step on {os.cpu_count()} CPU cores (AdamW, clipping)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "train_throughput_cpu.png", dpi=120)
    print(f"wrote {out / 'train_throughput_cpu.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
