"""Agent-evaluation throughput: M-HumanEval episodes per minute through `eval suite`'s path (the
model behind easylemur's continuously batched server, episodes as concurrent clients, sandbox
work beside decoding), one episode at a time against many at once, in the same run.

    python bench/eval_throughput.py [--checkpoint CKPT] [--episodes 16 --turns 5 --max-tokens 64 --concurrency 1,8,16]

Without --checkpoint it trains a tiny chat model for 2 steps at a learning rate of 1e-9 on the
shipped tokenizer (ChatML): near its random init, its replies are noise, so nearly every turn is
one full reply of --max-tokens and an observation ("No action found"), and the conversation
grows each turn (an episode whose prompt outgrows the 1024-token context ends in an endpoint
error, counted in "ends"); the figure is the harness's and the decoder's rate, not a model's
skill. Prints one JSON line per concurrency and a summary with
the speed-up over one episode at a time. Not a test: timings go here, never into assertions.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parents[1]


def tiny_chat_checkpoint(workdir: Path) -> Path:
    cmd = [sys.executable, "-m", "easylemur.train", "--config", "configs/tiny_chat.py", f"--config.workdir={workdir}",
           "--config.init.from=", "--config.train.steps=2", "--config.checkpoint.every=2", "--config.log.every=1",
           "--config.optimizer.lr=1e-9"]  # near its random init: replies run to --max-tokens, rarely an early end
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return workdir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,8,16")
    args = ap.parse_args()

    import easylemur
    from easylemur.eval.agent.episode import run_episodes
    from easylemur.eval.backends.client import Client
    from easylemur.eval.benchmarks.humaneval import MHumanEval, load_humaneval
    from easylemur.eval.sandbox import Sandbox
    from easylemur.serve.server import Server

    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint or str(tiny_chat_checkpoint(Path(tmp) / "tiny_chat"))
        model = easylemur.load(ckpt)
        server = Server(model, port=0, slots=max(levels))
        server.warmup()
        server.start()
        client = Client(f"http://127.0.0.1:{server.port}/v1")
        sandbox = Sandbox(timeout=20)
        sandbox.check()
        task = MHumanEval(load_humaneval(None)[: args.episodes])

        def chat(messages):
            return client.chat(messages, max_tokens=args.max_tokens, temperature=0.0)

        # a first pass compiles every bucket the measured passes meet
        run_episodes(MHumanEval(task.problems[: max(levels)]), chat, sandbox, concurrency=max(levels), turns=1)
        rates = {}
        for c in levels:
            t = time.perf_counter()
            eps = run_episodes(task, chat, sandbox, concurrency=c, turns=args.turns)
            s = time.perf_counter() - t
            turns = sum(len(e.turns) for e in eps)
            rates[c] = 60 * len(eps) / s
            print(json.dumps({"concurrency": c, "episodes": len(eps), "turns": turns, "seconds": round(s, 2),
                              "episodes_per_min": round(rates[c], 2), "turns_per_s": round(turns / s, 2),
                              "ends": dict(collections.Counter(e.end.split(":")[0] for e in eps))}), flush=True)
        server.shutdown()
    base = rates[levels[0]]
    print(json.dumps({"summary": {f"x{c}_vs_{levels[0]}": round(r / base, 2) for c, r in rates.items()},
                      "cpus": os.cpu_count(), "max_tokens": args.max_tokens, "turns": args.turns}), flush=True)


if __name__ == "__main__":
    main()
