"""`python -m easylemur.eval NAME`: pass@k of one single-turn benchmark on a checkpoint (or of a
samples file), with every generated program run in the sandbox.

    python -m easylemur.eval humaneval --checkpoint runs/tiny_chat --prompt-format chatml --out eval/he
    python -m easylemur.eval mbpp --data mbpp.jsonl --checkpoint CKPT -k 1,10 --n 20 --out eval/mbpp
    python -m easylemur.eval humaneval --samples samples.jsonl --out eval/he_samples

Writes DIR/samples.jsonl and DIR/results.jsonl (the scoring loop's, `runs/scoring.py`); the
last stdout line is {"pass@1": ..., "n": ..., "problems": ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.api import FORMATS, MissingData, Progress, Task, one_line_per_record, parse_ks, read_samples
from easylemur.eval.backends.samples import DEFAULT_MAX_NEW_TOKENS, generate_samples
from easylemur.eval.benchmarks import fetch, registry
from easylemur.eval.runs.scoring import score
from easylemur.eval.sandbox import Sandbox


def _out_dir(path: str, force: bool) -> Path:
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out}: directory is not empty; pass --force to overwrite its results")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _task(args: Any) -> Task:
    if registry.is_agent(args.task):
        raise InputError(f"{args.task} is a multi-turn benchmark: run it with python -m easylemur.eval suite "
                         f"--tasks {args.task} (--checkpoint PATH | --endpoint URL) --out DIR")
    try:
        data = fetch.find_data(args.task, args.data, args.data_dir, args.cache_dir)
    except MissingData as e:
        if fetch.source(args.task) is not None:  # no local copy and no fetch: where to place one
            raise InputError(f"{args.task}: {e}") from None
        hint = registry.lookup(args.task)[0].data_hint or "its benchmark's data (docs: Evaluation)"
        raise InputError(f"{args.task} needs --data: {hint}") from None
    task = registry.build(args.task, data, args.prompt_format)
    if args.sql_timeout is not None:  # _checked: spider only
        task.query_seconds = args.sql_timeout
    return task


def _generate(task: Task, args: Any, n: int) -> list[tuple[Any, str]]:
    """(task_id, code) for n samples of every problem, from the checkpoint."""
    from easylemur.generate.api import load

    model = load(args.checkpoint, dtype=args.dtype, step=args.step, mesh=args.mesh)
    return generate_samples(task, model, n, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                            temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                            progress=f"{args.task}: generated")


def _from_samples(task: Task, path: str, limit: Optional[int], ks: Sequence[int], k_text: str) -> list[tuple[Any, str]]:
    """The samples of `path` for the task's problems (the task keeps only the first `limit` of the
    problems it has samples for); samples of problems the task skips are counted, not refused."""
    known = {str(p.task_id): p for p in task.problems}
    skipped = {str(p.task_id): why for p, why in task.skipped}
    samples, dropped = [], 0
    for where, tid, completion in read_samples(path):
        p = known.get(str(tid))
        if p is None and str(tid) in skipped:
            dropped += 1
            continue
        if p is None:
            raise InputError(f"{where}: task_id {tid!r} is not a {task.name} problem")
        samples.append((p.task_id, completion))
    if dropped:
        print(f"{dropped} sample(s) of skipped problems not scored ({'; '.join(sorted(set(skipped.values())))})",
              file=sys.stderr)
    if not samples:
        raise InputError(f"{path}: no samples")
    present = {str(t) for t, _ in samples}
    task.problems = [p for p in task.problems if str(p.task_id) in present][:limit]
    keep = {str(p.task_id) for p in task.problems}
    samples = [s for s in samples if str(s[0]) in keep]
    if max(ks) > min(sum(str(t) == key for t, _ in samples) for key in keep):
        raise InputError(f"-k {k_text}: pass@{max(ks)} needs at least {max(ks)} samples of every problem in {path}")
    return samples


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m easylemur.eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", metavar="TASK",
                        help=f"{', '.join(registry.names(registry.SINGLE_TURN))}, or: "
                             "suite: Lemur's evaluation table on a checkpoint or an endpoint (python -m easylemur.eval "
                             "suite --help); fetch: a suite's data, ahead of its run (python -m easylemur.eval fetch "
                             "--help); lm-eval: every later argument goes to lm-evaluation-harness's CLI with "
                             "--model easylemur registered (python -m easylemur.eval lm-eval --help); watch: eval.tasks on "
                             "each new checkpoint of a run (python -m easylemur.eval watch --help)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="easylemur workdir, checkpoint step dir, or HF dir to generate with")
    src.add_argument("--samples", help="JSONL of {task_id, completion} to check instead of generating")
    parser.add_argument("--data", default=None,
                        help="mbpp: JSONL in MBPP's format, or an HF dataset name; humaneval: another HumanEval.jsonl(.gz); "
                             "the others: their published files (default: under --data-dir, else the cache, else "
                             "fetched from where their authors publish them)")
    parser.add_argument("--data-dir", default=None,
                        help="where the benchmark's data lives under its usual name (mbpp.jsonl, ds1000.jsonl.gz, "
                             "spider/, multipl_e/; docs/guides/evaluation.md)")
    parser.add_argument("--cache-dir", default=None,
                        help=f"where fetched data is kept (default: ${fetch.CACHE_ENV}, else ~/.cache/easylemur/eval)")
    parser.add_argument("-k", default="1", help="comma-separated k of pass@k (default 1)")
    parser.add_argument("--n", type=int, default=None, help="samples per problem (default: the largest k)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--prompt-format", choices=FORMATS, default="base")
    parser.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for n=1, else 0.8")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"tokens per completion (default {DEFAULT_MAX_NEW_TOKENS}, or what the model's context "
                             "leaves beside the longest prompt when that is less; a value that does not fit is refused "
                             "before anything is generated)")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts decoded together")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:1,tensor:-1'")
    parser.add_argument("--workers", type=int, default=0, help="programs run in parallel (default: the core count)")
    parser.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds per program")
    parser.add_argument("--sql-timeout", type=float, default=None, metavar="SECONDS",
                        help="spider: each query's time budget (default 60, test-suite-sql-eval's); a program's wall "
                             "clock grows to cover its queries")
    parser.add_argument("--memory-mb", type=int, default=2048,
                        help="memory budget per program: all its processes and its /tmp and /dev/shm (80 MiB) together "
                             "where a memory cgroup can be made (root, or a delegated cgroup v2); else per process: up "
                             "to 64 processes of this address space less 80 MiB each (docs/design.md, Evaluation)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run generated code without bubblewrap (checker process, rlimits and timeouts only: "
                             "a hostile program can read your files and forge a pass)")
    parser.add_argument("--out", required=True, help="directory for samples.jsonl and results.jsonl")
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    add_debug_flag(parser)
    return parser


def _checked(args: argparse.Namespace) -> list[int]:
    """The k list, after every flag is checked (before anything loads)."""
    registry.lookup(args.task)  # an unknown name is refused before anything loads
    ks = parse_ks(args.k)
    for name in ("limit", "batch_size", "max_new_tokens", "n", "memory_mb"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise InputError(f"--{name.replace('_', '-')} {v}: must be at least 1")
    if args.workers < 0 or args.timeout <= 0:
        raise InputError("--workers must be >= 0 and --timeout > 0")
    if args.sql_timeout is not None and not 0 < args.sql_timeout < float("inf"):
        raise InputError(f"--sql-timeout {args.sql_timeout}: expected a positive number of seconds")
    if args.sql_timeout is not None and registry.lookup(args.task)[0].name != "spider":
        raise InputError(f"--sql-timeout {args.sql_timeout:g}: only spider runs SQL, not {args.task}")
    n = args.n or max(ks)
    if args.checkpoint and max(ks) > n:
        raise InputError(f"-k {args.k}: pass@{max(ks)} needs --n >= {max(ks)}, got --n {n}")
    if args.temperature is None:
        args.temperature = 0.0 if n == 1 else 0.8
    args.n = n
    return ks


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    ks = _checked(args)
    out = _out_dir(args.out, args.force)
    one_line_per_record()
    fetch.use_cache_dir(args.cache_dir)
    sandbox = Sandbox(timeout=args.timeout, memory_bytes=args.memory_mb << 20, unsafe_no_sandbox=args.unsafe_no_sandbox)
    sandbox.check()  # refuse before spending time on generation
    task = _task(args)
    if args.samples:
        samples = _from_samples(task, args.samples, args.limit, ks, args.k)
    else:
        task.problems = task.problems[: args.limit]
        samples = _generate(task, args, args.n)
    with Progress(f"{args.task}: judged", len(samples)) as progress:
        scores = score(task, samples, sandbox, ks, out, workers=args.workers, progress=progress)
    print(json.dumps(scores.summary()), flush=True)
    return 0
