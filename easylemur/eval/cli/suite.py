"""`python -m easylemur.eval suite`: Lemur's evaluation table in one command, on a checkpoint or
any OpenAI-compatible endpoint (docs/design.md, "Evaluation suites").

    python -m easylemur.eval suite --endpoint http://127.0.0.1:8000/v1 --suite lemur --limit 20 --out eval/table
    python -m easylemur.eval suite --checkpoint runs/tiny_chat --suite lemur --data-dir ~/evaldata --out eval/t
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.api import one_line_per_record
from easylemur.eval.backends.access import open_model
from easylemur.eval.benchmarks import fetch
from easylemur.eval.runs import suite
from easylemur.eval.runs.suite import load_suite, run_suite, suite_sandbox
from easylemur.eval.runs.table import incomplete, write_tables


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while the rows run: the table is written with the rows that finished,
    marked incomplete, and the command exits 128 + the signal's number (130, 143)."""

    def __init__(self, signum: int):
        self.signal = signal.Signals(signum).name
        self.code = 128 + signum
        super().__init__(self.signal)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread (the first one; a second acts as
    it did before: Ctrl-C's KeyboardInterrupt, SIGTERM's end). Nothing changes off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)

    def interrupt(signum: int, frame: object) -> None:
        restore()
        raise Interrupted(signum)

    for s in previous:
        signal.signal(s, interrupt)
    try:
        yield
    finally:
        restore()


def _data_map(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--data {item!r}: expected NAME=PATH, e.g. mbpp=~/data/mbpp.jsonl")
        out[name] = os.path.expanduser(path)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m easylemur.eval suite", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1] + "\n\n" + suite.__doc__.split("\n\n", 1)[1])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="easylemur workdir, checkpoint step dir or HF dir (served on a local port)")
    src.add_argument("--endpoint", help="an OpenAI-compatible base URL ending in /v1 (easylemur serve, vLLM, an API)")
    parser.add_argument("--suite", default="lemur", help="a shipped suite name (lemur) or a suite .json file")
    parser.add_argument("--tasks", default="", help="comma-separated subset of the suite's tasks (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems (items) of each task")
    parser.add_argument("--out", required=True, help="directory for table.md, table.json and each task's files")
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out")
    parser.add_argument("--data-dir", default=None,
                        help="where the code and agent rows' data live under their usual names: mbpp.jsonl, "
                             "ds1000.jsonl.gz, spider/, multipl_e/, mint/, intercode/, HumanEval.jsonl.gz (each "
                             "benchmark's published files, docs/guides/evaluation.md; lm-eval rows read Hugging Face's "
                             "cache instead); what is not there comes from the cache, else is fetched into it")
    parser.add_argument("--data", action="append", default=[], metavar="NAME=PATH",
                        help="one task's (or benchmark's) data, e.g. --data spider=~/spider (repeatable)")
    parser.add_argument("--cache-dir", default=None,
                        help="where data without a local copy is fetched to and found again (default: "
                             f"${fetch.CACHE_ENV}, else ~/.cache/easylemur/eval; python -m easylemur.eval fetch fills it)")
    parser.add_argument("--model", default="", help="model id sent to --endpoint (default: the first of /v1/models)")
    parser.add_argument("--tokenizer", default="",
                        help="--endpoint: the model's HF tokenizer (a dir or hub name) for lm-eval's loglikelihood rows; "
                             "a local one also cuts WebArena's observations as WebArena does")
    parser.add_argument("--lm-eval-include", default="", help="a directory of lm-eval task YAMLs (local tasks and data)")
    parser.add_argument("--api-key", default="", help="bearer token for --endpoint (default: $OPENAI_API_KEY)")
    parser.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="seconds one request to the model may take before it is tried again (a hung endpoint)")
    parser.add_argument("--retries", type=int, default=5,
                        help="tries after the first for a request that got a 5xx, 429, a dropped connection, a timeout "
                             "or a malformed body; then the sample or episode is counted lost, never scored")
    parser.add_argument("--sql-timeout", type=float, default=None, metavar="SECONDS",
                        help="Spider and the SQL agent: each query's time budget (default 60, test-suite-sql-eval's)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (episodes, prompts)")
    parser.add_argument("--workers", type=int, default=0, help="sandboxed programs at once (default: the core count)")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per reply unless a task sets max_tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0, help="wall-clock seconds per sandboxed program")
    parser.add_argument("--memory-mb", type=int, default=2048, help="memory budget per sandboxed program")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run generated code without bubblewrap (rlimits and timeouts only)")
    parser.add_argument("--slots", type=int, default=8, help="--checkpoint: the server's decode slots")
    parser.add_argument("--max-len", type=int, default=None, help="--checkpoint: the server's cache length per slot")
    parser.add_argument("--step", type=int, default=None, help="--checkpoint: its step (default: newest)")
    parser.add_argument("--dtype", default=None, help="--checkpoint: compute dtype (default float32)")
    parser.add_argument("--chat-template", metavar="FILE", default=None,
                        help="--checkpoint: chat in this Jinja template instead of the model's own (a base model has "
                             "none, and its chat rows are skipped without one)")
    mint = parser.add_argument_group("MINT's agent rows (m_humaneval, ..., m_hotpotqa and their _fb rows)")
    mint.add_argument("--turns", type=int, default=None,
                      help="the largest turn budget K (default: the row's, 5); every budget k = 1..K is its own run, "
                           "as MINT ran them")
    mint.add_argument("--budgets", choices=("each", "one-run"), default=None,
                      help="each (default): a run per budget k, MINT's method; one-run: read every k off one K-turn "
                           "run (faster; labelled so in the table)")
    mint.add_argument("--feedback-endpoint", default="",
                      help="the critic of the _fb rows: an OpenAI-compatible base URL (the paper: GPT-4); without it "
                           "those rows are skipped. Also WebArena's LLM judge of its fuzzy_match tasks (WebArena: GPT-4)")
    mint.add_argument("--feedback-model", default="", help="model id sent to --feedback-endpoint (default: its first)")
    mint.add_argument("--feedback-api-key", default="", help="bearer token for --feedback-endpoint")
    mint.add_argument("--mint-checks", choices=("pinned", "paper"), default=None,
                      help="pinned (default): MINT's answer checks at its pinned commit; paper: as they were when the "
                           "transcripts the Lemur paper quotes were scored (before MINT fixed negative references and "
                           "TheoremQA's option letters), to set a figure beside the paper's")
    mint.add_argument("--wikipedia", default="online", metavar="online|off|FILE",
                      help="MINT's wikipedia_search tool: the live Wikipedia API (default), off (its no-result text), "
                           "or a JSONL file of {title, summary} pages searched offline")
    web = parser.add_argument_group("WebArena (webarena)")
    web.add_argument("--webarena", default="", metavar="URL_MAP",
                     help="your deployment of WebArena's sites: a JSON file (or site=URL,...) of shopping, shopping_admin, "
                          "reddit, gitlab, wikipedia, map, homepage -> base URL, and auth -> the folder of login states "
                          "WebArena's browser_env/auto_login.py writes (default: $EASYLEMUR_WEBARENA); without it the row "
                          "is skipped")
    add_debug_flag(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    for flag in ("limit", "concurrency", "max_tokens", "slots", "memory_mb", "turns"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise InputError(f"--{flag.replace('_', '-')} {v}: must be at least 1")
    args.data_map = _data_map(args.data)
    if args.chat_template and not args.checkpoint:
        raise InputError("--chat-template FILE: only with --checkpoint (an endpoint renders its own chat)")

    spec = load_suite(args.suite)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] or list(spec["tasks"])
    for n in names:
        if n not in spec["tasks"]:
            raise InputError(f"--tasks {n!r}: not a task of suite {spec.get('name')} ({', '.join(spec['tasks'])})")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not args.force)):
        raise InputError(f"--out {out}: exists and is not an empty directory; pass --force to write into it")
    out.mkdir(parents=True, exist_ok=True)

    one_line_per_record()
    fetch.use_cache_dir(args.cache_dir)
    sandbox = suite_sandbox(spec, names, args)  # refused or skipped before the model loads
    access = open_model(args)
    scored = [n for n in names if spec["tasks"][n]["kind"] != "mean"]
    finished: dict[str, dict] = {}

    def row_done(rows: dict[str, dict]) -> None:  # the table, rewritten as each row finishes
        finished.clear()
        finished.update(rows)
        write_tables(out, spec, rows, access.name, incomplete(rows, scored, "running"))

    try:
        with _signals_interrupt():
            try:
                rows = run_suite(spec, names, access, sandbox, args, out, on_row=row_done)
            except Interrupted as e:
                lacking = incomplete(finished, scored, f"interrupted by {e.signal}")
                write_tables(out, spec, finished, access.name, lacking)
                print(f"suite: {lacking}; {out / 'table.md'} holds the finished rows, marked incomplete",
                      file=sys.stderr, flush=True)
                sys.stdout.flush()
                # the requests and sandboxed programs still in flight are abandoned, not waited for
                # (the sandboxes end with this process; the server too)
                os._exit(e.code)
    finally:
        access.close()
    md = write_tables(out, spec, rows, access.name)
    print(md)
    print(json.dumps({n: (r.get("score") if "skipped" not in r else "skipped") for n, r in rows.items()}), flush=True)
    failed = [n for n, r in rows.items() if r.get("error")]
    if failed:
        print(f"suite: {', '.join(failed)} failed (see their rows)", file=sys.stderr)
    return 1 if failed else 0
