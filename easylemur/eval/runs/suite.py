"""A suite: Lemur's evaluation table (or another) on a checkpoint or any OpenAI-compatible
endpoint, row by row (docs/design.md, "Evaluation suites"); `python -m easylemur.eval suite` is
its command (`eval/cli/suite.py`).

A suite is data (easylemur/eval/runs/suites/NAME.json, or a path): its tasks with their settings,
the tables they form and the paper's reference rows. Every task reaches the model through one
client (`backends/access.py`): `--checkpoint` starts easylemur's own continuously batched server
on a free local port, so a checkpoint and an endpoint are measured by the same code. Kinds:
- `code`: single-turn code benchmarks (HumanEval, MBPP, MultiPL-E per language, DS-1000,
  Spider): the prompt is completed (/v1/completions), cut at the task's stops, and judged in
  the sandbox; pass@1 greedy unless the task sets `n`/`temperature`;
- `agent`: multi-turn episodes with environment feedback (`eval/agent/`) over /v1/chat/completions;
- `lm_eval`: lm-evaluation-harness tasks (MMLU, BBH, GSM8K): `--model easylemur` in process for
  a checkpoint, lm-eval's `local-completions` for an endpoint.
A task whose data cannot be found (no local copy, no network) or whose tools are missing is a
row marked skipped with the reason; the rest of the table is still produced. Writes
OUT/table.md, OUT/table.json and, per task, OUT/<task>/ (samples, results, episodes).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.agent.episode import lost as lost_reason
from easylemur.eval.agent.episode import run_episodes, success_rates
from easylemur.eval.api import Progress, parse_ks, write_jsonl
from easylemur.eval.backends.access import ModelAccess
from easylemur.eval.backends.client import EndpointError, EndpointLost
from easylemur.eval.benchmarks import fetch, registry
from easylemur.eval.runs.scoring import score
from easylemur.eval.runs.table import mean_row
from easylemur.eval.sandbox import Sandbox, SandboxUnavailable, thread_map

SUITES_DIR = Path(__file__).parent / "suites"
KINDS = ("code", "agent", "lm_eval", "mean")  # mean: the average of other rows (MultiPL-E over languages)


# A row that lost more than this share of its samples or episodes to the endpoint (no answer
# after every retry) is marked incomplete in the table; below it the lost ones are counted beside
# the score, which is over the rest.
INCOMPLETE_LOST_FRACTION = 0.05


class Skip(Exception):
    """A task that cannot run here: its row says why."""


def lost_fields(lost: int, total: int) -> dict:
    """A row's account of what the endpoint lost: `lost` of `total` requests' samples or episodes."""
    if not lost:
        return {"lost": 0}
    row: dict[str, Any] = {"lost": lost, "lost_of": total}
    if lost > INCOMPLETE_LOST_FRACTION * total:
        row["incomplete"] = (f"{lost} of {total} lost to endpoint errors (more than "
                             f"{100 * INCOMPLETE_LOST_FRACTION:.0f}%)")
    return row


# ------------------------------------------------------------------ the suite as data

def load_suite(name_or_path: str) -> dict:
    """The suite named NAME (easylemur/eval/runs/suites/NAME.json) or a JSON file, checked."""
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
        try:
            bench = registry.lookup(benchmark_name(spec))[0] if spec.get("benchmark") else None
        except InputError as e:
            raise InputError(f"{path}: task {name!r}: {e}") from None
        kind = registry.AGENT if spec["kind"] == "agent" else registry.SINGLE_TURN
        if bench is None or bench.kind != kind:
            raise InputError(f"{path}: task {name!r}: key 'benchmark' must name a "
                             f"{'multi' if kind == registry.AGENT else 'single'}-turn benchmark "
                             f"({', '.join(registry.labels(kind))})")
    for t, table in enumerate(suite.get("tables", [])):
        for col in table.get("columns", []):
            if col not in tasks:
                raise InputError(f"{path}: tables[{t}] names task {col!r}, which is not in 'tasks'")
    suite["_path"] = str(path)
    return suite


# ------------------------------------------------------------------ benchmarks

def benchmark_name(spec: dict) -> str:
    """The registry's name of a suite row's benchmark: "spider", "multipl_e:js" (its `language`), ..."""
    return spec["benchmark"] + (f":{spec['language']}" if spec.get("language") else "")


def _task_of(name: str, spec: dict, args: Any) -> Any:
    """The task object of a code or agent row, its data found by --data NAME=PATH (the row's
    name or its benchmark's), the row's own `data`, the usual names under --data-dir, or the
    cache, where it is fetched when it is not there yet (`benchmarks/fetch.py`)."""
    bench = benchmark_name(spec)
    keys = (name, bench, spec["benchmark"], *registry.lookup(bench)[0].data)  # MINT's rows: also --data mint=DIR
    explicit = next((args.data_map[k] for k in keys if k in args.data_map), None)
    data = fetch.find_data(bench, explicit or spec.get("data"), args.data_dir, getattr(args, "cache_dir", None))
    task = registry.build(bench, data, spec.get("prompt_format", "base"))
    if getattr(args, "sql_timeout", None) is not None and hasattr(task, "query_seconds"):  # Spider, the SQL agent
        from easylemur.eval.benchmarks.spider.sql import query_budget

        task.query_seconds = query_budget(args.sql_timeout, "--sql-timeout")
    return task


# ------------------------------------------------------------------ running rows

def _progress(name: str, what: str, total: int, unit: str) -> Progress:
    """A row's progress line on stderr (`api.Progress`): "suite: NAME: WHAT done/total UNIT (rate, time)"."""
    return Progress(f"suite: {name}: {what}", total, unit)


def run_code(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any, out: Path) -> dict:
    """Completions of every problem (n each), judged in the sandbox: pass@k."""
    from easylemur.eval.backends.samples import prompt_ids
    from easylemur.generate.engine import truncate_at_stops

    n = int(spec.get("n", 1))
    ks = parse_ks(spec.get("k", "1"), f"task {name!r}: key 'k'")
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
        except EndpointLost as e:  # no answer after every retry: the sample is lost, never judged
            lost.append(f"{p.task_id}: lost: {e}")
            return None
        except EndpointError as e:  # a refusal (e.g. a prompt past the model's context): that sample fails
            refused.append(f"{p.task_id}: refused: {e}")
            return ""
        return task.extract(p, truncate_at_stops(text, stops))

    lost: list[str] = []
    refused: list[str] = []
    with _progress(name, "generated", len(rows), "samples") as progress:
        def counted(row: tuple) -> Optional[str]:
            try:
                return one(row)
            finally:
                progress()

        codes = thread_map(counted, rows, args.concurrency)
    if lost or refused:
        (out / "errors.txt").write_text("\n".join(lost + refused) + "\n")
    answered = [(p.task_id, code) for (p, _), code in zip(rows, codes) if code is not None]
    if not answered:
        raise Skip(f"every one of {len(rows)} requests was lost to endpoint errors (first: {lost[0]})")
    with _progress(name, "judged", len(answered), "samples") as progress:
        judged = score(task, answered, sandbox, [k for k in ks if k <= n], out, workers=args.workers, progress=progress)
    scores = judged.pass_at
    row = {"score": scores["pass@1"] if "pass@1" in scores else next(iter(scores.values())), "metric": "pass@1",
           **scores, "n": len(judged.counts), "samples_per_problem": n, "refused": len(refused),
           **lost_fields(len(lost), len(rows))}
    if task.skipped:  # DS-1000: problems of libraries the sandbox does not have, counted
        row["skipped_problems"] = task.skip_counts()
    return row


def _feedback_client(args: Any) -> Any:
    """The client of --feedback-endpoint: MINT's critic, WebArena's judge (the paper's GPT-4)."""
    from easylemur.eval.backends.access import client_options
    from easylemur.eval.backends.client import Client

    return Client(args.feedback_endpoint, getattr(args, "feedback_model", "") or "",
                  api_key=getattr(args, "feedback_api_key", "") or "", **client_options(args))


def run_mint(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any, out: Path) -> dict:
    """One of MINT's tasks by MINT's protocol (`benchmarks/mint/`): a run per turn budget k = 1..K
    (MINT's maxK_pP runs; `budgets: one-run` reads every k off one K-step run instead), or with
    natural-language feedback from a second model, MINT's feedback run at K. Each run's episodes
    go to OUT/<row>/k=<k>/results.jsonl in MINT's own format."""
    from easylemur.eval.benchmarks.mint.checks import RULES
    from easylemur.eval.benchmarks.mint.protocol import FEEDBACK_MAX_TOKENS, MAX_TOKENS, run_budget, solved_within, \
        success_rate
    from easylemur.eval.benchmarks.mint.wikipedia import wikipedia_tool

    turns = int(getattr(args, "turns", None) or spec.get("turns", 5))
    budgets = str(getattr(args, "budgets", None) or spec.get("budgets", "each"))
    feedback = str(spec.get("feedback", "none"))
    rules = str(getattr(args, "mint_checks", None) or spec.get("checks", "pinned"))
    if budgets not in ("each", "one-run") or feedback not in ("none", "llm") or rules not in RULES:
        raise InputError(f"task {name!r}: budgets must be each or one-run, feedback none or llm, checks "
                         f"{' or '.join(RULES)}")
    task.rules = rules
    max_tokens = int(spec.get("max_tokens", MAX_TOKENS))
    seed = args.seed

    def chat(messages: list, stop: Sequence[str]) -> str:
        return access.client.chat(messages, max_tokens=max_tokens, temperature=0.0, seed=seed, stop=stop)

    critic: Optional[Callable[[list, Sequence[str]], str]] = None
    if feedback == "llm":
        if not getattr(args, "feedback_endpoint", None):
            raise Skip("natural-language feedback needs --feedback-endpoint URL (MINT's critic was gpt-4-0613)")
        fb = _feedback_client(args)
        critic = lambda messages, stop: fb.chat(messages, max_tokens=FEEDBACK_MAX_TOKENS,  # noqa: E731
                                                temperature=0.0, seed=seed, stop=stop)

    tools = {}
    if task.spec.tools:
        tools[task.texts.wikipedia.name] = wikipedia_tool(task.texts.wikipedia, getattr(args, "wikipedia", "online"))
    runs = [turns] if feedback == "llm" or budgets == "one-run" else list(range(1, turns + 1))
    rates: dict[str, float] = {}
    errors = lost = step_limit = 0
    t = time.perf_counter()
    with _progress(name, "played", len(task.problems) * len(runs), "episodes") as progress:
        for k in runs:
            records = run_budget(task, chat, sandbox, k, feedback=critic, tools=tools, concurrency=args.concurrency,
                                 workers=args.workers, progress=progress)
            (out / f"k={k}").mkdir(exist_ok=True)
            write_jsonl(out / f"k={k}" / "results.jsonl", records)
            lost += sum(bool(lost_reason(r)) for r in records)
            errors += sum(r["state"]["terminate_reason"] == "error" and not lost_reason(r) for r in records)
            step_limit += sum(r.get("easylemur", {}).get("won") is False for r in records)
            if budgets == "one-run" and feedback == "none":
                at = solved_within(records)
                rates.update({f"success@{i}": at(i) for i in range(1, turns + 1)})
            else:
                rates[f"success@{k}"] = success_rate(records)
    seconds = time.perf_counter() - t
    return {"score": rates[f"success@{turns}"], "metric": f"success@{turns}", **rates, "n": len(task.problems),
            "feedback": "llm" if critic else "none", "turns": turns,
            "budgets": "one run" if budgets == "one-run" and feedback == "none" else "a run per budget", "checks": rules,
            "errors": errors, **lost_fields(lost, len(task.problems) * len(runs)),
            **({"step_limit_successes": step_limit} if task.plays_games else {}),
            "episodes_per_minute": round(60 * len(task.problems) * len(runs) / max(seconds, 1e-9), 2)}


def run_intercode_sql(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any,
                      out: Path) -> dict:
    """InterCode-SQL by InterCode's protocol (`benchmarks/intercode_sql/`): 10 turns, the handicap,
    the dialogue cut to its last 5 messages, every query scored at once; success is a reward of 1.
    `policy: lemur` (Lemur's fork's hf_chat, as the paper ran Lemur-70B-Chat) or `chat` (InterCode's
    ChatGPTPolicy, as GPT-3.5 was run).
    `engine: mariadb` (InterCode's MySQL, as a private MariaDB server of this run) or `sqlite`
    (Spider's SQLite files in the sandbox: --data spider=DIR or the row's `spider_data`).
    The episodes go to OUT/<row>/ic_sql_multiturn_<turns>_turns.json in InterCode's own format."""
    from easylemur.eval.benchmarks.intercode_sql import server as mariadb
    from easylemur.eval.benchmarks.intercode_sql.engines import MariaDBEngine, SqliteEngine
    from easylemur.eval.benchmarks.intercode_sql.protocol import DIALOGUE_LIMIT, MAX_TOKENS, TURNS, mean_reward, \
        run_budget, success_rate

    engine_name = str(spec.get("engine", "mariadb"))
    if engine_name not in ("mariadb", "sqlite"):
        raise InputError(f"task {name!r}: engine must be mariadb or sqlite")
    turns = int(getattr(args, "turns", None) or spec.get("turns", TURNS))
    limit = int(spec.get("dialogue_limit", DIALOGUE_LIMIT))
    handicap = bool(spec.get("handicap", True))
    policy = str(spec.get("policy", "lemur"))
    if policy not in ("lemur", "chat"):
        raise InputError(f"task {name!r}: policy must be lemur (the fork's hf_chat, Lemur's rows) or chat (GPT-3.5's)")
    seconds = float(spec.get("statement_seconds", 10.0))
    max_tokens = int(spec.get("max_tokens", MAX_TOKENS))

    def chat(messages: list, stop: Sequence[str]) -> str:
        return access.client.chat(messages, max_tokens=max_tokens, temperature=0.0, seed=args.seed, stop=stop)

    def run(engine: Any) -> list:
        with _progress(name, "played", len(task.problems), "episodes") as progress:
            return run_budget(task, chat, engine, turns, dialogue_limit=limit, handicap=handicap, policy=policy,
                              concurrency=args.concurrency, progress=progress)

    t = time.perf_counter()
    if engine_name == "mariadb":
        why = mariadb.available()
        if why:
            raise Skip(why)
        try:
            with mariadb.MariaDB(task.dump(), statement_seconds=seconds) as server:  # stopped and removed at the end
                records = run(MariaDBEngine(server))
        except mariadb.ServerUnavailable as e:  # it could not start or load here
            raise Skip(str(e)) from None
        difference = "MariaDB (InterCode: MySQL 8)"
    else:
        spider = args.data_map.get("spider") or spec.get("spider_data")
        spider = fetch.find_data("spider", spider, args.data_dir, getattr(args, "cache_dir", None))
        records = run(SqliteEngine(spider, sandbox, workers=args.workers or 1, statement_seconds=seconds))
        difference = "SQLite: no SHOW/DESCRIBE, SQLite's types and messages (InterCode: MySQL 8)"
    seconds_run = time.perf_counter() - t
    (out / f"ic_sql_multiturn_{turns}_turns.json").write_text(
        json.dumps({str(r["task_id"]): r for r in records}, indent=2, default=str))
    rate = success_rate(records)
    return {"score": rate, "metric": f"success@{turns}", f"success@{turns}": rate, "mean_max_reward": mean_reward(records),
            "n": len(records), "engine": engine_name, "engine_note": difference, "turns": turns,
            "dialogue_limit": limit, "handicap": handicap, "policy": policy,
            "errors": sum(bool(r.get("easylemur", {}).get("errors")) for r in records),
            **lost_fields(sum(bool(lost_reason(r)) for r in records), len(records)),
            "episodes_per_minute": round(60 * len(records) / max(seconds_run, 1e-9), 2)}


def _runnable(task: Any, none_left: str) -> tuple[list, dict[str, int]]:
    """Keeps in `task.problems` those its `skip_reason` lets run: (them, {reason: count} of the
    rest); a Skip saying `none_left` and the reasons when none is left."""
    skipped: dict[str, int] = {}
    runnable = []
    for p in task.problems:
        why = task.skip_reason(p)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            runnable.append(p)
    if not runnable:
        raise Skip(f"{none_left} ({'; '.join(skipped)})")
    task.problems = runnable
    return runnable, skipped


def run_intercode_shell(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any,
                        out: Path) -> dict:
    """InterCode-Bash and InterCode-CTF by InterCode's protocol (`benchmarks/intercode_bash/`,
    `benchmarks/intercode_ctf/`): each task's machine built from InterCode's Dockerfile (and, for
    Bash, its setup script) into a root of the sandbox, fresh per episode; 10 turns, dialogue limit
    7; Bash: InterCode's reward after every action, CTF: the submitted flag; success is a reward of
    1. Tasks the sandbox cannot run (the network, a tool the host lacks) are skipped and counted. The
    episodes go to OUT/<row>/ in InterCode's own format: ic_bash_multiturn_<turns>_turns_nl2bash_fs_<N>.json
    (one file per file system, as InterCode's runner writes them) or ic_ctf_multiturn_<turns>_turns.json."""

    from easylemur.eval.benchmarks.intercode_bash import protocol as bash
    from easylemur.eval.benchmarks.intercode_bash.image import folder_files
    from easylemur.eval.benchmarks.intercode_bash.task import on_path
    from easylemur.eval.benchmarks.intercode_ctf import protocol as ctf_protocol
    from easylemur.eval.benchmarks.intercode_ctf.files import ASSETS
    from easylemur.eval.benchmarks.intercode_ctf.task import InterCodeCtfTask
    from easylemur.eval.benchmarks.published import PublishedFilesError

    ctf = isinstance(task, InterCodeCtfTask)
    proto: Any = ctf_protocol if ctf else bash
    what = "InterCode-CTF" if ctf else "InterCode-Bash"
    if sandbox.check() == "none":
        raise Skip(f"{what}'s machines need bubblewrap (their file systems are the sandbox's /); "
                   "--unsafe-no-sandbox cannot give them")
    if not on_path("git"):
        raise Skip(f"{what}'s machines are built with git (and Bash's reward reads `git status`): install git "
                   "(apt-get install -y git)")
    if ctf:
        try:
            folder_files(task.files, ASSETS)
        except PublishedFilesError as e:
            raise Skip(f"InterCode-CTF's task files: {e}") from None
    sandbox = task.sized(sandbox)
    turns = int(getattr(args, "turns", None) or spec.get("turns", proto.TURNS))
    limit = int(spec.get("dialogue_limit", proto.DIALOGUE_LIMIT))
    policy = str(spec.get("policy", "lemur"))
    if policy not in ("lemur", "chat"):
        raise InputError(f"task {name!r}: policy must be lemur (the fork's hf_chat, Lemur's rows) or chat (GPT-3.5's)")
    max_tokens = int(spec.get("max_tokens", proto.MAX_TOKENS))
    runnable, skipped = _runnable(task, "every task needs what the sandbox cannot give")

    def model(prompt: Any, stop: Sequence[str]) -> str:
        """A text (CTF's fork: the ChatML text and "Action:") is completed; messages are chatted with."""
        if isinstance(prompt, str):
            return access.client.complete(prompt, max_tokens=max_tokens, temperature=0.0, seed=args.seed, stop=stop)
        return access.client.chat(prompt, max_tokens=max_tokens, temperature=0.0, seed=args.seed, stop=stop)

    t = time.perf_counter()
    with _progress(name, "played", len(runnable), "episodes") as progress:
        records = proto.run_budget(task, model, sandbox, turns, dialogue_limit=limit, policy=policy,
                                   concurrency=args.concurrency, progress=progress)
    seconds_run = time.perf_counter() - t
    logs = {f"ic_ctf_multiturn_{turns}_turns.json": records} if ctf else {
        f"ic_bash_multiturn_{turns}_turns_nl2bash_fs_{fs}.json": [r for r in records if r["easylemur"]["fs"] == fs]
        for fs in sorted({r["easylemur"]["fs"] for r in records})}
    for file_name, part in logs.items():
        (out / file_name).write_text(json.dumps({str(r["task_id"]): r for r in part}, indent=2, default=str))
    rate = proto.success_rate(records)
    return {"score": rate, "metric": f"success@{turns}", f"success@{turns}": rate,
            "mean_max_reward": proto.mean_reward(records), "n": len(records), "turns": turns, "dialogue_limit": limit,
            "policy": policy, "skipped_problems": skipped,
            "errors": sum(bool(r["easylemur"].get("errors") or r["easylemur"].get("blocked")) for r in records),
            **lost_fields(sum(bool(lost_reason(r)) for r in records), len(records)),
            "episodes_per_minute": round(60 * len(records) / max(seconds_run, 1e-9), 2)}


def run_webarena(name: str, spec: dict, task: Any, access: ModelAccess, args: Any, out: Path) -> dict:
    """WebArena by its runner's protocol (`benchmarks/webarena/`) on the user's deployment of its
    sites (--webarena URL_MAP), through Debian's Chromium: up to 30 actions per task, WebArena's
    evaluators on the last page (its LLM judge: --feedback-endpoint); success is a score of 1.
    Tasks that cannot be played or judged here (a site not in the map, a login state not given, an
    LLM-judged task without a judge) are skipped and counted; an episode that ended in an error is
    counted and left out of the rate, as WebArena's run.py leaves it out of its average. The
    episodes go to OUT/<row>/results.jsonl, one record per task."""
    import os

    from easylemur.eval.benchmarks.webarena import protocol
    from easylemur.eval.benchmarks.webarena.task import URL_MAP_ENV, parse_url_map

    value = getattr(args, "webarena", "") or os.environ.get(URL_MAP_ENV, "")
    if not value:
        raise Skip("WebArena is played on your own deployment of its sites (github.com/web-arena-x/webarena, "
                   "environment_docker/): pass --webarena URL_MAP")
    task.url_map = parse_url_map(value, task.site_names)
    from easylemur.eval.benchmarks.webarena.browser import chromium_problem

    why = chromium_problem()
    if why:
        raise Skip(why)
    judge_model = "none"
    if getattr(args, "feedback_endpoint", None):  # WebArena's LLM judge (GPT-4 there): its fuzzy_match tasks
        from easylemur.eval.benchmarks.webarena.judge import load_judge, make_judge

        texts = load_judge(task.files)
        judge = _feedback_client(args)
        judge_model = judge.model or args.feedback_endpoint
        task.judge = make_judge(texts, lambda messages, stop: judge.chat(
            messages, max_tokens=int(texts.settings["max_tokens"]), temperature=float(texts.settings["temperature"]),
            seed=args.seed, stop=stop))
    runnable, skipped = _runnable(task, "no task can be played on this deployment")
    max_tokens = int(spec.get("max_tokens", task.texts.run["max_tokens"]))
    temperature = float(spec.get("temperature", 0.0))
    # WebArena cuts the observation to max_obs_length tokens of the served model's tokenizer: the
    # checkpoint's, or for an endpoint --tokenizer's where it is a local copy; else it is left whole
    truncate, cut = None, "none (an endpoint without a local --tokenizer)"
    tok = access.loaded.tokenizer if access.loaded is not None else None
    if tok is None and getattr(args, "tokenizer", "") and os.path.exists(os.path.expanduser(args.tokenizer)):
        from easylemur.tokenizer import load_tokenizer

        tok = load_tokenizer(os.path.expanduser(args.tokenizer))
    if tok is not None:
        n, cut = int(task.texts.run["max_obs_length"]), "the model's tokenizer"

        def truncate(text: str) -> str:  # the first max_obs_length tokens (no BOS), decoded
            return tok.decode(tok.encode(text)[:n])

    def model(messages: list, stop: Sequence[str]) -> str:
        return access.client.chat(messages, max_tokens=max_tokens, temperature=temperature, seed=args.seed, stop=stop)

    t = time.perf_counter()
    with _progress(name, "played", len(runnable), "tasks") as progress:
        records = protocol.run_tasks(task, model, truncate=truncate, progress=progress)
    seconds_run = time.perf_counter() - t
    write_jsonl(out / "results.jsonl", records)
    errors = sum(bool(r.get("easylemur", {}).get("errors")) for r in records)
    rate = protocol.success_rate(records)
    return {"score": rate, "metric": "success", "success": rate, "n": len(records), "skipped_problems": skipped,
            "errors": errors, "judge": judge_model,
            "observation_cut": cut,
            **lost_fields(sum(bool(lost_reason(r)) for r in records), len(records)),
            "tasks_per_minute": round(60 * len(records) / max(seconds_run, 1e-9), 2)}


def run_agent(name: str, spec: dict, task: Any, access: ModelAccess, sandbox: Sandbox, args: Any, out: Path) -> dict:
    from easylemur.eval.benchmarks.intercode_bash.task import InterCodeBashTask
    from easylemur.eval.benchmarks.intercode_ctf.task import InterCodeCtfTask
    from easylemur.eval.benchmarks.intercode_sql.task import InterCodeSqlTask
    from easylemur.eval.benchmarks.mint.tasks import MintTask

    if isinstance(task, MintTask):
        return run_mint(name, spec, task, access, sandbox, args, out)
    if isinstance(task, InterCodeSqlTask):
        return run_intercode_sql(name, spec, task, access, sandbox, args, out)
    if isinstance(task, (InterCodeBashTask, InterCodeCtfTask)):
        return run_intercode_shell(name, spec, task, access, sandbox, args, out)
    from easylemur.eval.benchmarks.webarena.task import WebArenaTask

    if isinstance(task, WebArenaTask):
        return run_webarena(name, spec, task, access, args, out)
    turns = int(spec.get("turns", 5))
    feedback = str(spec.get("feedback", "exec"))
    max_tokens = int(spec.get("max_tokens", args.max_tokens))
    temperature = float(spec.get("temperature", 0.0))

    def chat(messages: list[dict]) -> str:
        return access.client.chat(messages, max_tokens=max_tokens, temperature=temperature, seed=args.seed)

    t = time.perf_counter()
    with _progress(name, "played", len(task.problems), "episodes") as progress:
        episodes = run_episodes(task, chat, task.sized(sandbox), concurrency=args.concurrency,
                                sandbox_workers=args.workers, turns=turns, feedback=feedback,
                                proposals=int(spec.get("proposals", 2)),
                                observation_chars=int(spec.get("observation_chars", 2000)), progress=progress)
    seconds = time.perf_counter() - t
    write_jsonl(out / "episodes.jsonl", (e.record() for e in episodes))
    rates = success_rates(episodes, turns)
    errors = sum(e.end.startswith("error") for e in episodes)
    return {"score": rates[f"success@{turns}"], "metric": f"success@{turns}", **rates, "n": len(episodes),
            "feedback": feedback, "turns": turns, "errors": errors,
            **lost_fields(sum(e.end.startswith("lost") for e in episodes), len(episodes)),
            "episodes_per_minute": round(60 * len(episodes) / max(seconds, 1e-9), 2)}


def run_lm_eval(name: str, spec: dict, access: ModelAccess, args: Any, out: Path) -> dict:
    try:
        import lm_eval
    except ImportError:
        raise Skip("lm-evaluation-harness is not installed (pip install -e '.[harness]')") from None
    if access.loaded is not None:
        from easylemur.eval.backends.harness import EasylemurLM

        model: Any = EasylemurLM(loaded=access.loaded, batch_size=args.concurrency, max_gen_toks=args.max_tokens)
        model.progress_label = f"suite: {name}: lm-eval"
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
    from easylemur.eval.backends import hub
    from easylemur.eval.backends.lm_eval_tasks import flat_metrics, task_manager

    offline = hub.offline()  # no Hub: a dataset missing from the local cache fails at once, not after retries
    try:
        kw["task_manager"] = task_manager([spec["task"]], args.lm_eval_include or "")  # one index for every row
        result = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[spec["task"]],
                                         limit=args.limit, bootstrap_iters=0, verbosity="ERROR", **kw)
    except Exception as e:  # noqa: BLE001 - a text row that cannot run (no data offline, ...) is skipped, said why
        why = " ".join(str(e).split())[:200]
        if offline and hub.missing_offline(e):
            raise Skip(f"lm-eval {spec['task']}: a dataset it needs is not in the local Hugging Face cache "
                       f"({type(e).__name__}: {why[:120]}) and the Hub cannot be reached ({offline}); "
                       f"{hub.LOCAL_COPY}") from None
        if "okenizer is required" in why:
            why += " (pass --tokenizer HF_DIR: the model's Hugging Face tokenizer, e.g. its to-hf export)"
        raise Skip(f"lm-eval {spec['task']}: {type(e).__name__}: {why}") from None
    metric = spec.get("metric", "acc")
    results = result["results"] if result else {}
    (out / "lm_eval.json").write_text(json.dumps(results, indent=1, default=str))
    flat = flat_metrics(results)
    values = flat.get(spec["task"]) or next(iter(flat.values()), {})
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
            row = runner(name, spec, task, access, sandbox, args, row_dir)
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


def suite_sandbox(suite: dict, names: Sequence[str], args: Any) -> Optional[Sandbox]:
    """The sandbox of the code and agent rows among `names`, checked before the model loads; None
    (the rows then say why they are skipped) where none can run here."""
    sandbox = Sandbox(timeout=args.timeout, memory_bytes=args.memory_mb << 20, unsafe_no_sandbox=args.unsafe_no_sandbox)
    if any(suite["tasks"][n]["kind"] != "lm_eval" for n in names):
        try:
            sandbox.check()
        except SandboxUnavailable as e:
            print(f"suite: {e}; the code and agent rows are skipped", file=sys.stderr)
            return None
    return sandbox


def with_means(suite: dict, names: Sequence[str], rows: dict[str, dict], finished: bool = True) -> dict[str, dict]:
    """`rows` and, after them, the averaged rows of `names` over them; before the suite has
    `finished`, only the means that have a part to average (a partial one says which it lacks)."""
    out = dict(rows)
    for n in names:
        spec = suite["tasks"][n]
        if spec["kind"] == "mean" and (finished or any(o in rows for o in spec["of"])):
            out[n] = mean_row(spec, rows)
    return out


def run_suite(suite: dict, names: Sequence[str], access: ModelAccess, sandbox: Optional[Sandbox], args: Any,
              out: Path, on_row: Optional[Callable[[dict[str, dict]], None]] = None) -> dict[str, dict]:
    """Every row of `names`, each in OUT/<row>/, then the averaged rows over them. `on_row(rows)`
    after each row with the rows finished so far (and the means over them): the table is
    rewritten as rows finish, so an interrupted suite still has its finished rows."""
    rows: dict[str, dict] = {}
    for n in names:
        if suite["tasks"][n]["kind"] != "mean":
            rows[n] = run_row(n, suite["tasks"][n], access, sandbox, args, out)
            if on_row is not None:
                on_row(with_means(suite, names, rows, finished=False))
    return with_means(suite, names, rows)
