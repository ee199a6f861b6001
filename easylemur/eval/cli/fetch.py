"""`python -m easylemur.eval fetch`: a suite's data fetched ahead of its run, from where each
benchmark's authors publish it, into the cache the suite then reads (`benchmarks/fetch.py`).

    python -m easylemur.eval fetch --suite lemur
    python -m easylemur.eval fetch --suite lemur --tasks mbpp,spider --cache-dir /data/evalcache

One line per data: where it is (`--data-dir`, already in the cache, or fetched now), or why it
could not be fetched and where to place a copy. Exit 1 when any could not be.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.api import MissingData, one_line_per_record
from easylemur.eval.benchmarks import fetch, registry
from easylemur.eval.runs.suite import benchmark_name, load_suite


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m easylemur.eval fetch", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--suite", default="lemur", help="a shipped suite name (lemur) or a suite .json file")
    parser.add_argument("--tasks", default="", help="comma-separated subset of the suite's tasks (default: all)")
    parser.add_argument("--data-dir", default=None, help="local copies under their usual names: not fetched again")
    parser.add_argument("--cache-dir", default=None,
                        help=f"where to fetch to (default: ${fetch.CACHE_ENV}, else ~/.cache/easylemur/eval)")
    add_debug_flag(parser)
    return parser


def _one(bench: str, explicit: Optional[str], data_dir: Optional[str], cache_dir: Optional[str]) -> str:
    """Where `bench`'s data is now, fetched first when it was nowhere (MissingData when it cannot be)."""
    src = fetch.source(bench)
    row, _ = registry.lookup(bench)
    if src is not None:
        cached = (fetch.cache_root(cache_dir) / src.name).exists()
        t = time.monotonic()
        path = fetch.find_data(bench, explicit, data_dir, cache_dir)
        if path != str(fetch.cache_root(cache_dir) / src.name):
            return f"{path} (local)"
        return f"{path} ({'in the cache' if cached else f'fetched in {time.monotonic() - t:.0f} s'})"
    path = registry.find_data(bench, explicit, data_dir)
    if path is not None or row.shipped:
        return f"{path} (local)" if path is not None else "shipped with its package"
    if row.fetched:  # the authors' repository, file by file: the files its task reads, and InterCode's dump
        task = registry.build(bench, None)
        if callable(getattr(task, "dump", None)):
            task.dump()
        files = getattr(task, "files", None) or getattr(getattr(task, "texts", None), "files", None)
        return f"{files.root} (its repository's files)" if files is not None else "fetched"
    raise MissingData("no source to fetch from: " + (row.data_hint or "see docs/guides/evaluation.md"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    spec = load_suite(args.suite)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] or list(spec["tasks"])
    for n in names:
        if n not in spec["tasks"]:
            raise InputError(f"--tasks {n!r}: not a task of suite {spec.get('name')} ({', '.join(spec['tasks'])})")
    one_line_per_record()
    fetch.use_cache_dir(args.cache_dir)
    done: dict[tuple, str] = {}  # (benchmark's data, explicit path) -> the line said for it
    failed = 0
    for name in names:
        task = spec["tasks"][name]
        if task["kind"] == "mean":
            continue
        if task["kind"] == "lm_eval":
            print(f"fetch: {name}: lm-eval's task {task['task']}: lm-eval fetches its dataset into the Hugging Face "
                  "cache on its first run", flush=True)
            continue
        bench = benchmark_name(task)
        src = fetch.source(bench)
        key = (src.name if src is not None else bench, task.get("data"))  # spider's for spider and sql_agent
        if key in done:
            print(f"fetch: {name}: {done[key]}", flush=True)
            continue
        try:
            done[key] = _one(bench, task.get("data"), args.data_dir, args.cache_dir)
        except InputError as e:  # MissingData, or a copy the authors' files do not match
            done[key] = f"not fetched: {e}"
            failed += 1
        except Exception as e:  # noqa: BLE001 - one benchmark's failure (a module that cannot load) is its line
            done[key] = f"not fetched: {type(e).__name__}: {e}"
            failed += 1
        print(f"fetch: {name}: {done[key]}", flush=True)
    if failed:
        print(f"fetch: {failed} not fetched (see above)", file=sys.stderr)
    return 1 if failed else 0
