"""`python -m easylemur.eval suite`: Lemur's evaluation table in one command, on a checkpoint or
any OpenAI-compatible endpoint (docs/design.md, "Evaluation suites").

    python -m easylemur.eval suite --endpoint http://127.0.0.1:8000/v1 --suite lemur --limit 20 --out eval/table
    python -m easylemur.eval suite --checkpoint runs/tiny_chat --suite lemur --data-dir ~/evaldata --out eval/t

A suite is data (easylemur/eval/suites/NAME.json, or a path): its tasks with their settings, the
tables they form and the paper's reference rows. Every task reaches the model through one
client (`eval/client.py`): `--checkpoint` starts easylemur's own continuously batched server
on a free local port, so a checkpoint and an endpoint are measured by the same code. Kinds:
- `code`: single-turn code benchmarks (HumanEval, MBPP, MultiPL-E per language, DS-1000,
  Spider): the prompt is completed (/v1/completions), cut at the task's stops, and judged in
  the sandbox; pass@1 greedy unless the task sets `n`/`temperature`;
- `agent`: multi-turn episodes with environment feedback (`eval/agent.py`) over /v1/chat/completions;
- `lm_eval`: lm-evaluation-harness tasks (MMLU, BBH, GSM8K): `--model easylemur` in process for
  a checkpoint, lm-eval's `local-completions` for an endpoint.
A task whose data cannot be found (no local copy, no network) or whose tools are missing is a
row marked skipped with the reason; the rest of the table is still produced. Writes
OUT/table.md, OUT/table.json and, per task, OUT/<task>/ (samples, results, episodes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.eval.client import Client, EndpointError
from easylemur.eval.passk import mean_pass_at_k
from easylemur.eval.sandbox import Sandbox, run_programs
from easylemur.eval.sql import sized_sandbox

SUITES_DIR = Path(__file__).parent / "suites"
KINDS = ("code", "agent", "lm_eval", "mean")  # mean: the average of other rows (MultiPL-E over languages)


class Skip(Exception):
    """A task that cannot run here: its row says why."""


# ------------------------------------------------------------------ the suite as data

def load_suite(name_or_path: str) -> dict:
    """The suite named NAME (easylemur/eval/suites/NAME.json) or a JSON file, checked."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SUITES_DIR / f"{name_or_path}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.json")))
        raise InputError(f"--suite {name_or_path}: no such suite (shipped: {known}; or a path to a .json file)")
    try:
        suite = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a JSON suite ({e})") from None
    tasks = suite.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise InputError(f"{path}: key 'tasks' must be an object of task name -> settings")
    for name, spec in tasks.items():
        if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
            raise InputError(f"{path}: task {name!r}: key 'kind' must be one of {', '.join(KINDS)}")
        if spec["kind"] == "mean":
            if not spec.get("of") or any(o not in tasks for o in spec["of"]):
                raise InputError(f"{path}: task {name!r}: key 'of' must list tasks of the suite")
            continue
        if spec["kind"] == "lm_eval":
            if not isinstance(spec.get("task"), str) or not spec["task"]:
                raise InputError(f"{path}: task {name!r}: key 'task' must name an lm-evaluation-harness task")
            continue
        if spec["kind"] != "lm_eval":
            from easylemur.eval import benchmarks

            try:
                bench = benchmarks.split(benchmark_name(spec)) if spec.get("benchmark") else None
            except InputError as e:
                raise InputError(f"{path}: task {name!r}: {e}") from None
            if bench is None or (bench[0] in benchmarks.AGENT) != (spec["kind"] == "agent"):
                raise InputError(f"{path}: task {name!r}: key 'benchmark' must name a "
                                 f"{'multi' if spec['kind'] == 'agent' else 'single'}-turn benchmark "
                                 f"({', '.join(benchmarks.AGENT if spec['kind'] == 'agent' else benchmarks.SINGLE_TURN)})")
    for t, table in enumerate(suite.get("tables", [])):
        for col in table.get("columns", []):
            if col not in tasks:
                raise InputError(f"{path}: tables[{t}] names task {col!r}, which is not in 'tasks'")
    suite["_path"] = str(path)
    return suite


# ------------------------------------------------------------------ benchmarks

def benchmark_name(spec: dict) -> str:
    """The benchmark table's name of a suite row: "spider", "multipl_e:js", ..."""
    return spec["benchmark"] + (f":{spec['language']}" if spec.get("language") else "")


def _task_of(name: str, spec: dict, args: Any) -> Any:
    """The task object of a code or agent row, its data found by --data NAME=PATH (the row's
    name or its benchmark's), the row's own `data`, or the usual names under --data-dir."""
    from easylemur.eval import benchmarks

    bench = benchmark_name(spec)
    explicit = next((args.data_map[k] for k in (name, bench, spec["benchmark"]) if k in args.data_map), None)
    data = benchmarks.find_data(bench, explicit or spec.get("data"), args.data_dir)
    if spec["kind"] == "agent":
        return benchmarks.agent_task(bench, data)
    return benchmarks.single_turn(bench, data, spec.get("prompt_format", "base"))


# ------------------------------------------------------------------ the model

@dataclasses.dataclass
class ModelAccess:
    """The client every task uses, and (for a checkpoint) the loaded model and its server."""

    client: Client
    name: str
    loaded: Any = None
    server: Any = None

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()


def open_model(args: Any) -> ModelAccess:
    if args.endpoint:
        client = Client(args.endpoint, model=args.model or "", api_key=args.api_key or os.environ.get("OPENAI_API_KEY", ""))
        return ModelAccess(client, client.model)
    from easylemur.generate.api import load
    from easylemur.serve.server import Server

    template = None
    if args.chat_template:
        from easylemur.chat.files import read_template_file

        template = read_template_file(args.chat_template)
    loaded = load(args.checkpoint, dtype=args.dtype, step=args.step)
    if template is not None:  # the server's chat and the rows that render locally (prompt_format chatml) alike
        loaded.use_chat_template(template, f"--chat-template {args.chat_template}")
    server = Server(loaded, port=0, slots=args.slots, max_len=args.max_len)
    server.warmup()
    server.start()
    client = Client(f"http://127.0.0.1:{server.port}/v1", model=server.service.name)
    return ModelAccess(client, server.service.name, loaded, server)


# ------------------------------------------------------------------ running rows

def _pool_map(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(fn, items))


def run_code(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any, out: Path) -> dict:
    """Completions of every problem (n each), judged in the sandbox: pass@k."""
    from easylemur.eval.samples import prompt_ids
    from easylemur.generate.engine import truncate_at_stops

    n = int(spec.get("n", 1))
    ks = [int(k) for k in str(spec.get("k", "1")).split(",")]
    temperature = float(spec.get("temperature", 0.0 if n == 1 else 0.8))
    max_tokens = int(spec.get("max_tokens", args.max_tokens))
    stops = tuple(task.stops())
    rows = [(p, i) for p in task.problems for i in range(n)]

    def one(row: tuple) -> str:
        p, i = row
        prompt = task.prompt(p)
        if prompt.messages:  # an open assistant turn: only a local tokenizer can render it
            if access.loaded is None:
                raise Skip("prompt_format chatml needs --checkpoint (an endpoint cannot continue an open assistant turn)")
            body: Any = prompt_ids(task, p, access.loaded)
        else:
            body = prompt.text
        try:
            text = access.client.complete(body, max_tokens=max_tokens, temperature=temperature, seed=args.seed + i,
                                          stop=stops)
        except EndpointError as e:  # e.g. a prompt past the model's context: that sample fails, counted
            errors.append(f"{p.task_id}: {e}")
            return ""
        return task.extract(p, truncate_at_stops(text, stops))

    errors: list[str] = []
    codes = _pool_map(one, rows, args.concurrency)
    if errors:
        (out / "errors.txt").write_text("\n".join(errors) + "\n")
    with open(out / "samples.jsonl", "w") as f:
        for (p, _), code in zip(rows, codes):
            f.write(json.dumps({"task_id": p.task_id, "completion": code}) + "\n")
    programs = [task.program(p, code) for (p, _), code in zip(rows, codes)]
    results = run_programs(programs, sandbox, args.workers)
    counts: dict[str, list[int]] = {}
    with open(out / "results.jsonl", "w") as f:
        for (p, i), result in zip(rows, results):
            c = counts.setdefault(str(p.task_id), [0, 0])
            c[0] += 1
            c[1] += result == "passed"
            f.write(json.dumps({"task_id": p.task_id, "completion_id": i, "passed": result == "passed",
                                "result": result}) + "\n")
    scores = mean_pass_at_k([tuple(c) for c in counts.values()], [k for k in ks if k <= n])
    row = {"score": scores["pass@1"] if "pass@1" in scores else next(iter(scores.values())), "metric": "pass@1",
           **scores, "n": len(counts), "samples_per_problem": n, "endpoint_errors": len(errors)}
    if getattr(task, "skipped", None):  # DS-1000: problems of libraries the sandbox does not have, counted
        row["skipped_problems"] = task.skip_counts()
    return row


def run_agent(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any, out: Path) -> dict:
    from easylemur.eval.agent import run_episodes, success_rates

    turns = int(spec.get("turns", 5))
    feedback = str(spec.get("feedback", "exec"))
    max_tokens = int(spec.get("max_tokens", args.max_tokens))
    temperature = float(spec.get("temperature", 0.0))

    def chat(messages: list[dict]) -> str:
        return access.client.chat(messages, max_tokens=max_tokens, temperature=temperature, seed=args.seed)

    t = time.perf_counter()
    episodes = run_episodes(task, chat, sandbox, concurrency=args.concurrency, sandbox_workers=args.workers,
                            turns=turns, feedback=feedback, proposals=int(spec.get("proposals", 2)),
                            observation_chars=int(spec.get("observation_chars", 2000)))
    seconds = time.perf_counter() - t
    with open(out / "episodes.jsonl", "w") as f:
        for e in episodes:
            f.write(json.dumps(e.record()) + "\n")
    rates = success_rates(episodes, turns)
    errors = sum(e.end.startswith("error") for e in episodes)
    return {"score": rates[f"success@{turns}"], "metric": f"success@{turns}", **rates, "n": len(episodes),
            "feedback": feedback, "turns": turns, "errors": errors,
            "episodes_per_minute": round(60 * len(episodes) / max(seconds, 1e-9), 2)}


def run_lm_eval(name: str, spec: dict, access: ModelAccess, args: Any, out: Path) -> dict:
    try:
        import lm_eval
    except ImportError:
        raise Skip("lm-evaluation-harness is not installed (pip install -e '.[harness]')") from None
    if access.loaded is not None:
        from easylemur.eval.harness import EasylemurLM

        model: Any = EasylemurLM(loaded=access.loaded, batch_size=args.concurrency, max_gen_toks=args.max_tokens)
    else:
        model = "local-completions"
    model_args = None
    if access.loaded is None:
        # an endpoint: text in, text out, unless --tokenizer gives lm-eval the model's HF tokenizer,
        # which loglikelihood tasks (MMLU) need to split context from continuation; it then sends token ids
        model_args = {"base_url": access.client.base + "/completions", "model": access.client.model,
                      "num_concurrent": args.concurrency, "max_gen_toks": args.max_tokens,
                      **({"tokenizer": args.tokenizer, "tokenizer_backend": "huggingface", "tokenized_requests": True}
                         if args.tokenizer else {"tokenizer_backend": "none", "tokenized_requests": False})}
    kw: dict[str, Any] = {}
    if spec.get("num_fewshot") is not None:
        kw["num_fewshot"] = int(spec["num_fewshot"])
    from easylemur.eval.lm_eval_tasks import task_manager

    try:
        kw["task_manager"] = task_manager([spec["task"]], args.lm_eval_include or "")  # one index for every row
        result = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[spec["task"]],
                                         limit=args.limit, bootstrap_iters=0, verbosity="ERROR", **kw)
    except Exception as e:  # noqa: BLE001 - a text row that cannot run (no data offline, ...) is skipped, said why
        why = " ".join(str(e).split())[:200]
        if "okenizer is required" in why:
            why += " (pass --tokenizer HF_DIR: the model's Hugging Face tokenizer, e.g. its to-hf export)"
        raise Skip(f"lm-eval {spec['task']}: {type(e).__name__}: {why}") from None
    metric = spec.get("metric", "acc")
    results = result["results"] if result else {}
    (out / "lm_eval.json").write_text(json.dumps(results, indent=1, default=str))
    top = results.get(spec["task"]) or next(iter(results.values()), {})
    values: dict[str, float] = {}
    for key, v in top.items():  # "acc,none": a metric and its filter; a bare metric name takes the first filter
        if isinstance(v, (int, float)) and not isinstance(v, bool) and "stderr" not in key:
            values.setdefault(key, v)
            values.setdefault(key.split(",")[0], v)
    if metric not in values:
        raise Skip(f"lm-eval {spec['task']}: no metric {metric!r} in its results ({', '.join(values) or 'none'})")
    n = sum(len(v) for v in (result.get("samples") or {}).values()) if result else 0
    return {"score": float(values[metric]), "metric": metric, "n": n or None}


def run_row(name: str, spec: dict, access: ModelAccess, sandbox: Optional[Sandbox], args: Any, out: Path) -> dict:
    """One task's row: its scores, or {"skipped": reason}."""
    row_dir = out / name
    row_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    try:
        if spec["kind"] == "lm_eval":
            row = run_lm_eval(name, spec, access, args, row_dir)
        else:
            if sandbox is None:
                raise Skip("no sandbox here (bubblewrap missing; pass --unsafe-no-sandbox to run code unconfined)")
            if spec["kind"] == "agent" and access.server is not None and access.server.service.renderer is None:
                raise Skip(access.server.service.chat_error)  # a base model: its chat is a 400 (no chat template)
            task = _task_of(name, spec, args)
            task.problems = task.problems[: args.limit] if args.limit else task.problems
            if not task.problems:
                raise Skip("no problems")
            runner = run_code if spec["kind"] == "code" else run_agent
            row = runner(name, spec, task, access, sized_sandbox(sandbox, task.problems), args, row_dir)
    except Skip as e:
        row = {"skipped": str(e)}
    except InputError as e:  # bad or missing data: the row says so, the table goes on
        row = {"skipped": str(e)}
    except Exception as e:  # noqa: BLE001 - one row's failure is reported in its row; the command then exits 1
        row = {"skipped": f"error: {type(e).__name__}: {e}", "error": True}
    row["seconds"] = round(time.perf_counter() - t, 1)
    print(f"suite: {name}: " + (f"skipped ({row['skipped']})" if "skipped" in row else
                                f"{row['metric']} {row['score']:.4f} over {row.get('n')}"), file=sys.stderr, flush=True)
    return row


def mean_row(spec: dict, rows: dict[str, dict]) -> dict:
    """The average of the rows `spec["of"]` names that ran (a partial one says which it lacks)."""
    parts = [rows[o] for o in spec["of"] if o in rows]
    scored = [r["score"] for r in parts if "skipped" not in r]
    if not scored:
        return {"skipped": "none of " + ", ".join(spec["of"]) + " ran"}
    missing = [o for o in spec["of"] if o not in rows or "skipped" in rows[o]]
    row = {"score": sum(scored) / len(scored), "metric": "mean", "n": sum(r.get("n") or 0 for r in parts
                                                                           if "skipped" not in r)}
    if missing:
        row["partial"] = "without " + ", ".join(missing)
    return row


# ------------------------------------------------------------------ the table

def _cell(v: Any) -> str:
    """A score of this run (a fraction) in %."""
    return "—" if v is None else f"{100 * v:.1f}"


def _ref(v: Any) -> str:
    """A reference figure (the paper's, already in %)."""
    return "—" if v is None else f"{v:.1f}" if round(v, 1) == v else f"{v:.2f}"


def render_tables(suite: dict, rows: dict[str, dict], model: str) -> tuple[str, dict]:
    """table.md and table.json: per table of the suite, this model's row (scores in %, skipped
    rows marked), the paper's reference rows beside, and per-column sample counts."""
    tasks = suite["tasks"]
    refs = suite.get("reference", {})
    md = [f"# {suite.get('title', suite.get('name', 'suite'))}: {model}", ""]
    out: dict[str, Any] = {"suite": suite.get("name"), "model": model, "tasks": rows, "tables": []}
    notes = []
    for table in suite.get("tables", [{"title": "Results", "columns": list(tasks)}]):
        cols = [c for c in table["columns"] if c in rows]
        if not cols:
            continue
        titles = [tasks[c].get("title", c) for c in cols]
        avg = table.get("average", False)
        head = ["Model"] + titles + (["Avg"] if avg else [])
        md += [f"## {table['title']}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        mine = []
        for c in cols:
            r = rows[c]
            if "skipped" in r:
                notes.append(f"{tasks[c].get('title', c)}: skipped: {r['skipped']}")
                mine.append(f"skipped[^{len(notes)}]")
            else:
                mine.append(_cell(r["score"]))
        scored = [rows[c]["score"] for c in cols if "score" in rows[c]]
        my_avg = (_cell(sum(scored) / len(scored)) + ("" if len(scored) == len(cols) else " (partial)")) if scored else "—"
        md.append("| " + " | ".join([f"**{model}**"] + mine + ([my_avg] if avg else [])) + " |")
        ref_rows = {}
        for ref_name, ref in refs.items():
            if ref_name.startswith("_"):
                continue
            vals = [ref.get(c) for c in cols]
            if all(v is None for v in vals):
                continue
            # the paper's average is over the whole table: shown only beside the whole table
            ref_avg = ref.get("avg") if avg and cols == table["columns"] else None
            md.append("| " + " | ".join([ref_name + " (paper)"] + [_ref(v) for v in vals]
                                        + ([_ref(ref_avg)] if avg else [])) + " |")
            ref_rows[ref_name] = dict(zip(cols, vals))
        md.append("| samples | " + " | ".join(str(rows[c].get("n") or "—") if "skipped" not in rows[c] else "0"
                                             for c in cols) + (" | |" if avg else " |"))
        md.append("")
        out["tables"].append({"title": table["title"], "columns": cols, "model": {c: rows[c].get("score") for c in cols},
                              "reference": ref_rows})
    turn_rows = [c for c in rows if "success@1" in rows[c]]
    if turn_rows:
        k = max(rows[c]["turns"] for c in turn_rows)
        md += ["## Success rate per turn budget (one run; solved within k turns)", "",
               "| Task | feedback | " + " | ".join(f"k={i}" for i in range(1, k + 1)) + " |", "|" + "---|" * (k + 2)]
        for c in turn_rows:
            md.append(f"| {tasks[c].get('title', c)} | {rows[c]['feedback']} | "
                      + " | ".join(_cell(rows[c].get(f"success@{i}")) for i in range(1, k + 1)) + " |")
        md.append("")
    if notes:
        md += [f"[^{i}]: {note}" for i, note in enumerate(notes, 1)] + [""]
    source = refs.get("_source")
    if source:
        md += [f"Reference rows: {source}", ""]
    return "\n".join(md), out


# ------------------------------------------------------------------ CLI

def _data_map(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--data {item!r}: expected NAME=PATH, e.g. mbpp=~/data/mbpp.jsonl")
        out[name] = os.path.expanduser(path)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m easylemur.eval suite", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="easylemur workdir, checkpoint step dir or HF dir (served on a local port)")
    src.add_argument("--endpoint", help="an OpenAI-compatible base URL ending in /v1 (easylemur serve, vLLM, an API)")
    parser.add_argument("--suite", default="lemur", help="a shipped suite name (lemur) or a suite .json file")
    parser.add_argument("--tasks", default="", help="comma-separated subset of the suite's tasks (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems (items) of each task")
    parser.add_argument("--out", required=True, help="directory for table.md, table.json and each task's files")
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out")
    parser.add_argument("--data-dir", default=None,
                        help="where benchmarks' data live under their usual names (mbpp.jsonl, spider/, multipl_e/, "
                             "ds1000.jsonl, gsm8k.jsonl, HumanEval.jsonl.gz)")
    parser.add_argument("--data", action="append", default=[], metavar="NAME=PATH",
                        help="one task's (or benchmark's) data, e.g. --data spider=~/spider (repeatable)")
    parser.add_argument("--model", default="", help="model id sent to --endpoint (default: the first of /v1/models)")
    parser.add_argument("--tokenizer", default="",
                        help="--endpoint: the model's HF tokenizer (a dir or hub name) for lm-eval's loglikelihood rows")
    parser.add_argument("--lm-eval-include", default="", help="a directory of lm-eval task YAMLs (local tasks and data)")
    parser.add_argument("--api-key", default="", help="bearer token for --endpoint (default: $OPENAI_API_KEY)")
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
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    for flag in ("limit", "concurrency", "max_tokens", "slots", "memory_mb"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise InputError(f"--{flag.replace('_', '-')} {v}: must be at least 1")
    args.data_map = _data_map(args.data)
    if args.chat_template and not args.checkpoint:
        raise InputError("--chat-template FILE: only with --checkpoint (an endpoint renders its own chat)")

    suite = load_suite(args.suite)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] or list(suite["tasks"])
    for n in names:
        if n not in suite["tasks"]:
            raise InputError(f"--tasks {n!r}: not a task of suite {suite.get('name')} ({', '.join(suite['tasks'])})")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not args.force)):
        raise InputError(f"--out {out}: exists and is not an empty directory; pass --force to write into it")
    out.mkdir(parents=True, exist_ok=True)

    sandbox: Optional[Sandbox] = Sandbox(timeout=args.timeout, memory_bytes=args.memory_mb << 20,
                                         unsafe_no_sandbox=args.unsafe_no_sandbox)
    if any(suite["tasks"][n]["kind"] != "lm_eval" for n in names):
        from easylemur.eval.sandbox import SandboxUnavailable

        try:
            sandbox.check()
        except SandboxUnavailable as e:
            print(f"suite: {e}; the code and agent rows are skipped", file=sys.stderr)
            sandbox = None
    access = open_model(args)
    try:
        rows = {n: run_row(n, suite["tasks"][n], access, sandbox, args, out) for n in names
                if suite["tasks"][n]["kind"] != "mean"}
    finally:
        access.close()
    for n in names:
        spec = suite["tasks"][n]
        if spec["kind"] == "mean":
            rows[n] = mean_row(spec, rows)
    md, table = render_tables(suite, rows, access.name)
    (out / "table.md").write_text(md)
    (out / "table.json").write_text(json.dumps(table, indent=1))
    print(md)
    print(json.dumps({n: (r.get("score") if "skipped" not in r else "skipped") for n, r in rows.items()}), flush=True)
    failed = [n for n, r in rows.items() if r.get("error")]
    if failed:
        print(f"suite: {', '.join(failed)} failed (see their rows)", file=sys.stderr)
    return 1 if failed else 0
