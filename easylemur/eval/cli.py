"""`python -m easylemur.eval {humaneval,mbpp}`: pass@k of a checkpoint (or of a samples file),
with every generated program run in the sandbox.

    python -m easylemur.eval humaneval --checkpoint runs/tiny_chat --prompt-format chatml --out eval/he
    python -m easylemur.eval mbpp --data mbpp.jsonl --checkpoint CKPT -k 1,10 --n 20 --out eval/mbpp
    python -m easylemur.eval humaneval --samples samples.jsonl --out eval/he_samples
    python -m easylemur.eval lm-eval --model easylemur --model_args path=CKPT --tasks hellaswag  (harness.py)
    python -m easylemur.eval watch --config CFG --config.eval.tasks=humaneval  (each new checkpoint: watch.py)
    python -m easylemur.eval suite --endpoint URL --suite lemur --limit 20 --out DIR  (the table: suite.py)

Writes DIR/samples.jsonl (`task_id`, `completion`: the code that was checked) and
DIR/results.jsonl (`task_id`, `completion_id`, `passed`, `result`: "passed", "timed out" or
"failed: <reason>", worded by the sandbox's checker, never the program's output); the last
stdout line is {"pass@1": ..., "n": ..., "problems": ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.passk import mean_pass_at_k
from easylemur.eval.sandbox import Sandbox, run_programs
from easylemur.eval.tasks import FORMATS, MBPP, HumanEval, Task, load_humaneval, load_mbpp, read_samples


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise InputError(f"-k {text!r}: expected comma-separated integers such as 1,10") from None
    if not ks or ks[0] < 1:
        raise InputError(f"-k {text!r}: every k must be >= 1")
    return ks


def _out_dir(path: str, force: bool) -> Path:
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out}: directory is not empty; pass --force to overwrite its results")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _task(args) -> Task:
    from easylemur.eval import benchmarks

    if benchmarks.is_agent(args.task):
        raise InputError(f"{args.task} is a multi-turn benchmark: run it with python -m easylemur.eval suite "
                         f"--tasks {args.task} (--checkpoint PATH | --endpoint URL) --out DIR")
    if args.task == "humaneval":
        return HumanEval(load_humaneval(args.data), args.prompt_format)
    if args.task == "mbpp":
        if not args.data:
            raise InputError("mbpp needs --data: a JSONL file in MBPP's format, or an HF dataset name such as mbpp")
        test, fewshot = load_mbpp(args.data)
        return MBPP(test, args.prompt_format, fewshot)
    if not args.data:
        raise InputError(f"{args.task} needs --data: its benchmark's data (docs: Evaluation)")
    return benchmarks.single_turn(args.task, args.data, args.prompt_format)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=None, dynamic_ncols=True)


def _generate(task: Task, args, n: int) -> list[tuple[Any, str]]:
    """(task_id, code) for n samples of every problem, from the checkpoint."""
    from easylemur.generate.api import load
    from easylemur.eval.samples import generate_samples

    model = load(args.checkpoint, dtype=args.dtype, step=args.step, mesh=args.mesh)
    bar = _progress(len(task.problems) * n, "generate")
    samples = generate_samples(task, model, n, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_p=args.top_p, seed=args.seed, progress=bar.update)
    bar.close()
    return samples


def _from_samples(task: Task, path: str) -> list[tuple[Any, str]]:
    known = {str(p.task_id): p for p in task.problems}
    # DS-1000: problems of libraries the sandbox does not have are skipped and counted, not refused
    skipped = {str(p.task_id): why for p, why in getattr(task, "skipped", [])}
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
    task.problems = [p for p in task.problems if str(p.task_id) in present]
    return samples


def lm_eval_main(args: Sequence[str]) -> int:
    """`python -m easylemur.eval lm-eval ARGS...`: lm-evaluation-harness's own CLI with
    `--model easylemur` registered. lm-eval 0.4.x finds models only in its own table or by an
    import that runs `@register_model` (no entry-point group), so this imports
    easylemur.eval.harness first and then hands every argument to lm-eval's `cli_evaluate`."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise InputError("lm-eval: lm-evaluation-harness is not installed; pip install -e '.[harness]'") from None
    import easylemur.eval.harness  # noqa: F401 (registers --model easylemur)
    from lm_eval.__main__ import cli_evaluate

    if list(args) in (["--help"], ["-h"]):
        # the flags of an evaluation (lm-eval's own top-level help lists only its subcommands:
        # run, ls, validate, which `lm-eval ls tasks` etc. still reach)
        args = ["run", "--help"]
    saved = sys.argv
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv itself
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lm-eval"]:
        return lm_eval_main(argv[1:])
    if argv[:1] == ["suite"]:
        from easylemur.eval.suite import main as suite_main

        return suite_main(argv[1:])
    if argv[:1] == ["watch"]:
        from easylemur.eval.watch import main as watch_main

        return watch_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m easylemur.eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("task", metavar="TASK",
                        help="humaneval, mbpp, ds1000, spider, multipl_e:LANG (js, cpp, java, go, rs, sh, pl), or: "
                             "suite: Lemur's evaluation table on a checkpoint or an endpoint (python -m easylemur.eval "
                             "suite --help); lm-eval: every later argument goes to lm-evaluation-harness's CLI with "
                             "--model easylemur registered (python -m easylemur.eval lm-eval --help); watch: eval.tasks on "
                             "each new checkpoint of a run (python -m easylemur.eval watch --help)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="easylemur workdir, checkpoint step dir, or HF dir to generate with")
    src.add_argument("--samples", help="JSONL of {task_id, completion} to check instead of generating")
    parser.add_argument("--data", default=None,
                        help="mbpp: JSONL in MBPP's format, or an HF dataset name; humaneval: another HumanEval.jsonl(.gz); "
                             "ds1000, spider, multipl_e:LANG: their published files")
    parser.add_argument("-k", default="1", help="comma-separated k of pass@k (default 1)")
    parser.add_argument("--n", type=int, default=None, help="samples per problem (default: the largest k)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--prompt-format", choices=FORMATS, default="base")
    parser.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for n=1, else 0.8")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16, help="prompts decoded together")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:1,tensor:-1'")
    parser.add_argument("--workers", type=int, default=0, help="programs run in parallel (default: the core count)")
    parser.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds per program")
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
    args = parser.parse_args(argv)
    from easylemur.eval import benchmarks

    benchmarks.split(args.task)  # an unknown name is refused before anything loads
    ks = _ks(args.k)
    for name in ("limit", "batch_size", "max_new_tokens", "n", "memory_mb"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise InputError(f"--{name.replace('_', '-')} {v}: must be at least 1")
    if args.workers < 0 or args.timeout <= 0:
        raise InputError("--workers must be >= 0 and --timeout > 0")
    n = args.n or max(ks)
    if args.checkpoint and max(ks) > n:
        raise InputError(f"-k {args.k}: pass@{max(ks)} needs --n >= {max(ks)}, got --n {n}")
    if args.temperature is None:
        args.temperature = 0.0 if n == 1 else 0.8
    out = _out_dir(args.out, args.force)
    sandbox = Sandbox(timeout=args.timeout, memory_bytes=args.memory_mb << 20, unsafe_no_sandbox=args.unsafe_no_sandbox)
    sandbox.check()  # refuse before spending time on generation

    task = _task(args)
    if args.samples:
        samples = _from_samples(task, args.samples)  # also keeps only the problems it has samples for
        task.problems = task.problems[: args.limit]
        keep = {str(p.task_id) for p in task.problems}
        samples = [s for s in samples if str(s[0]) in keep]
        if max(ks) > min(sum(str(t) == key for t, _ in samples) for key in keep):
            raise InputError(f"-k {args.k}: pass@{max(ks)} needs at least {max(ks)} samples of every problem "
                             f"in {args.samples}")
    else:
        task.problems = task.problems[: args.limit]
        samples = _generate(task, args, n)
    with open(out / "samples.jsonl", "w") as f:
        for tid, code in samples:
            f.write(json.dumps({"task_id": tid, "completion": code}) + "\n")

    from easylemur.eval.sql import sized_sandbox

    sandbox = sized_sandbox(sandbox, task.problems)  # Spider/BIRD: caps that hold the largest database
    by_id = {str(p.task_id): p for p in task.problems}
    programs = [task.program(by_id[str(tid)], code) for tid, code in samples]
    bar = _progress(len(programs), "execute")
    results = run_programs(programs, sandbox, args.workers, progress=lambda: bar.update(1))
    bar.close()

    counts: dict[str, list[int]] = {str(p.task_id): [0, 0] for p in task.problems}
    seen: dict[str, int] = {}
    with open(out / "results.jsonl", "w") as f:
        for (tid, _), result in zip(samples, results):
            key = str(tid)
            counts[key][0] += 1
            counts[key][1] += result == "passed"
            seen[key] = seen.get(key, -1) + 1
            f.write(json.dumps({"task_id": tid, "completion_id": seen[key], "passed": result == "passed",
                                "result": result}) + "\n")
    scores = mean_pass_at_k([tuple(c) for c in counts.values()], ks)
    sizes = sorted({c[0] for c in counts.values()})
    summary = {**scores, "n": sizes[0] if len(sizes) == 1 else sizes, "problems": len(counts)}
    print(json.dumps(summary), flush=True)
    return 0
