"""Text-to-SQL: Spider (and BIRD) problems, execution match as Spider's reference evaluator
decides it, run inside the sandbox, and the SQL pieces of an InterCode-SQL-style agent (a query
run read-only whose printed result is the agent's observation).

Execution match (test-suite-sql-eval's `exec_eval.py`, `eval_exec_match` with its defaults:
no value plugging, DISTINCT removed):
- both queries are normalised first: surrounding whitespace stripped, " value " -> " 1 " in the
  prediction, "> =", "< =", "! =" closed up, every DISTINCT token dropped (string literals,
  quoted names and comments kept), YEAR(CURDATE()) -> 2020;
- order matters iff the normalised gold, lower-cased, contains the substring "order by";
- both run on every file with ".sqlite" in its name in the gold database's folder (Spider's own
  layout: the one database; the test-suite layout: all its variants); a predicted query that
  errors is wrong, and it must match on every database;
- `result_eq`: empty and empty match; else the row counts and the column counts must agree,
  the rows with their values sorted (by str(value) + str(type(value))) must agree (as sets, or
  as sequences when order matters), and some permutation of the predicted columns (each must
  draw its values from the gold column it is mapped to) must make the rows equal as multisets
  (as sequences when order matters). Values compare as Python values (1 == 1.0); text is decoded
  as UTF-8 with undecodable bytes dropped, as the reference's text_factory does.

BIRD scores with its own rule (`bird_result_eq`: the rows as sets, no normalisation).

Every query runs inside the sandbox: `match_program` and `query_program` are `Program`s whose
files are a trusted standard-library script and the database bytes (a fresh copy per run, the
host's file is never visible), opened with `file:...?mode=ro&immutable=1`; the untrusted query
runs under an sqlite3 authorizer (reads, functions and recursive CTEs; a few read-only PRAGMAs;
no ATTACH, no writes) and a progress handler that stops it at its time budget.

Where this differs from the reference: a predicted query that writes, attaches or runs a PRAGMA
other than the read-only few fails here (the reference opens the database read-write, so a
DELETE scored against an empty gold result counted as a match and changed the database);
every query has a time budget that is enforced (the reference's 60 s asyncio timeout cannot stop
a running sqlite call); the column-permutation search prunes with every row instead of 20
random ones (the same verdict, deterministic); DISTINCT is found by a small tokenizer instead
of sqlparse; a predicted result with more rows than the gold's is fetched only up to one row
past the gold's count (the same verdict); a gold query that fails makes the program exit with
EXIT_GOLD_ERROR (the reference stops with an assertion). Spider's `extract` folds a multi-line
prediction onto one line with its comments dropped, as the reference's one-prediction-per-line
file expects. Results depend on the SQLite version of the sandbox's interpreter, as the
reference's do on its own.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from easylemur.eval.sandbox import PYTHON, Program, ProgramResult, Sandbox, new_marker
from easylemur.eval.api import EvalDataError

SPIDER, BIRD = "spider", "bird"
RULES = (SPIDER, BIRD)
QUERY_SECONDS = 3.0  # per query in the sandbox; Spider's gold queries take milliseconds
# What the script's exit status means (the runner reports it as ProgramResult.exit_status).
EXIT_MISMATCH, EXIT_PRED_ERROR, EXIT_GOLD_ERROR = 1, 2, 3
# Read-only PRAGMAs an agent may use to look at the schema; every other PRAGMA is refused.
READ_PRAGMAS = ("table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                "foreign_key_list", "database_list")


@dataclasses.dataclass(frozen=True)
class SqlProblem:
    task_id: str  # "spider/dev/17", "bird/dev/3"
    question: str
    db_id: str
    db_path: str  # the database the prompt's schema is read from
    gold: str  # the gold query
    schema: str  # the CREATE TABLE statements of the database's sqlite_master, as prompts show them
    evidence: str = ""  # BIRD's external-knowledge hint
    db_paths: tuple = ()  # every database the match runs on (the reference: each ".sqlite" file of db_path's folder)
    rule: str = SPIDER  # "spider": result_eq after normalisation; "bird": the rows as sets


# ----------------------------------------------------------------------------- comparison
# `result_eq` and `bird_result_eq` run on the host (tests) and, as their source text, inside the
# sandbox's script: one implementation. They use only builtins and import inside themselves.


def result_eq(gold_rows: Sequence[Sequence[Any]], pred_rows: Sequence[Sequence[Any]], order_matters: bool) -> bool:
    """Spider's execution-match verdict on two results (test-suite-sql-eval `result_eq`)."""
    from collections import Counter

    gold = [tuple(r) for r in gold_rows]
    pred = [tuple(r) for r in pred_rows]
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    ncols = len(gold[0])
    if len(pred[0]) != ncols:
        return False

    # A necessary condition, cheap: the rows with their values sorted agree (as sets, or as
    # sequences when order matters). The sort key is the reference's, so ties break alike.
    def unordered(row):
        return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))

    gold_un = [unordered(r) for r in gold]
    pred_un = [unordered(r) for r in pred]
    if (gold_un != pred_un) if order_matters else (set(gold_un) != set(pred_un)):
        return False
    # Gold column c may take predicted column j only if every predicted value of j occurs in gold
    # column c: a sound pruning (the reference checks 20 sampled rows; all rows prune at least as
    # much and never drop a permutation that works, so the verdict is the same, deterministically).
    gold_cols = [{r[c] for r in gold} for c in range(ncols)]
    allowed = [[j for j in range(ncols) if all(r[j] in gold_cols[c] for r in pred)] for c in range(ncols)]
    gold_set, gold_count = set(gold), (None if order_matters else Counter(gold))

    def matches(perm):
        permuted = pred if ncols == 1 else [tuple(r[j] for j in perm) for r in pred]
        if order_matters:
            return permuted == gold
        return set(permuted) == gold_set and Counter(permuted) == gold_count

    # Distinct column maps only, identity first (the usual answer); the reference enumerates the
    # product and skips repeats.
    perm, used = [], set()

    def search(c):
        if c == ncols:
            return matches(perm)
        for j in allowed[c]:
            if j not in used:
                perm.append(j)
                used.add(j)
                if search(c + 1):
                    return True
                perm.pop()
                used.discard(j)
        return False

    return search(0)


def bird_result_eq(gold_rows: Sequence[Sequence[Any]], pred_rows: Sequence[Sequence[Any]], order_matters: bool = False) -> bool:
    """BIRD's execution-match verdict: the rows as sets (order, multiplicity and column names ignored)."""
    return {tuple(r) for r in gold_rows} == {tuple(r) for r in pred_rows}


# ----------------------------------------------------------------------------- query text

# SQL's lexical pieces, enough to tell words from literals and comments: a string literal, a
# quoted name ("x", `x`, [x]), a comment, a word, blank space, any other character.
_TOKEN = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?|--[^\n]*|/\*.*?(?:\*/|\Z)|[\w$#]+|\s+|.""", re.S)
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.I)


def _tokens(sql: str) -> list[str]:
    return _TOKEN.findall(sql)


def remove_distinct(sql: str) -> str:
    """The query without its DISTINCT keywords (the reference drops every token that reads
    "distinct", in COUNT(DISTINCT x) too, keeping everything else verbatim)."""
    return "".join(t for t in _tokens(sql) if t.lower() != "distinct")


def exec_queries(gold: str, pred: str, keep_distinct: bool = False) -> tuple[str, str, bool]:
    """(gold, predicted, order_matters) as Spider's reference evaluator runs them."""
    pred = pred.strip().replace(" value ", " 1 ")  # evaluation.py, on each stripped prediction line
    gold = gold.strip()
    out = []
    for q in (gold, pred):
        q = q.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
        if not keep_distinct:
            q = remove_distinct(q)
        out.append(q)
    order_matters = "order by" in out[0].lower()
    return _CUR_YEAR.sub("2020", out[0]), _CUR_YEAR.sub("2020", out[1]), order_matters


def first_statement(sql: str) -> str:
    """The text up to the first ';' outside literals and comments, comments dropped, blank
    space (newlines too) folded to one space: one query on one line, as the reference's
    prediction file holds it."""
    out: list[str] = []
    for t in _tokens(sql):
        if t == ";":
            break
        if t.startswith("--") or t.startswith("/*") or t.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(t)
    return "".join(out).strip()


# ----------------------------------------------------------------------------- sandbox programs

# The trusted script of match_program and query_program: standard library only, run with -I -S.
# job.json carries the queries and settings; the comparison functions' source is prepended.
_SCRIPT = r'''
import json, sqlite3, sys, time

job = json.load(open("job.json"))
READ_PRAGMAS = set(job["read_pragmas"])
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def authorize(action, arg1, arg2, db, source):
    # The untrusted query may only read: no writes, no ATTACH, no PRAGMA but a few read-only ones.
    if action in ALLOWED:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def connect(name):
    conn = sqlite3.connect("file:%s?mode=ro&immutable=1" % name, uri=True)
    conn.text_factory = lambda b: b.decode(errors="ignore")  # the reference's: undecodable bytes dropped
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def run(conn, sql, untrusted, keep, count_rest):
    """(column names, rows kept, rows seen) of one query: all rows when keep is None, else at
    most `keep` (the rest counted when count_rest). Raises sqlite3.Error, with "interrupted"
    past the time budget."""
    deadline = time.monotonic() + job["query_seconds"]
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    conn.set_authorizer(authorize if untrusted else None)
    cur = conn.cursor()
    cur.execute(sql)
    names = [d[0] for d in cur.description or ()]
    if keep is None:
        rows = cur.fetchall()
        return names, rows, len(rows)
    rows = cur.fetchmany(keep) if keep else []
    total = len(rows)
    while count_rest:
        more = cur.fetchmany(1000)
        if not more:
            break
        total += len(more)
    return names, rows, total


def fail(status, text):
    print(text)
    sys.exit(status)


def one_line(e):
    text = " ".join(str(e).split())[:300] or type(e).__name__
    return text + (" (past its %g s budget)" % job["query_seconds"] if text == "interrupted" else "")


if job["mode"] == "match":
    compare = result_eq if job["rule"] == "spider" else bird_result_eq
    for name in job["dbs"]:
        conn = connect(name)
        try:
            _, gold, _ = run(conn, job["gold"], False, None, False)
        except Exception as e:
            fail(3, "gold query failed on %s: %s" % (name, one_line(e)))
        try:
            # Under Spider's rule a result with more rows than the gold's is wrong whatever they
            # hold (the reference finds it wrong too, or the query failing): fetch one more row
            # than the gold has and stop, so a runaway result costs neither memory nor time.
            # BIRD's sets may match with more rows.
            keep = len(gold) + 1 if job["rule"] == "spider" else None
            _, pred, _ = run(conn, job["pred"], True, keep, False)
        except Exception as e:
            fail(2, "predicted query failed on %s: %s" % (name, one_line(e)))
        if not compare(gold, pred, job["order_matters"]):
            seen = "%d" % len(pred) if len(pred) <= len(gold) else "more than %d" % len(gold)
            fail(1, "results differ on %s: gold %d rows, predicted %s rows" % (name, len(gold), seen))
        conn.close()
    print("results match")
    print(job["marker"])
else:
    conn = connect(job["dbs"][0])
    try:
        names, rows, total = run(conn, job["sql"], True, job["max_rows"], True)
    except Exception as e:
        fail(1, "Error: " + one_line(e))
    width = job["max_chars"]

    def cell(v):
        if v is None:
            return "NULL"
        if isinstance(v, bytes):
            return "<blob of %d bytes>" % len(v)
        text = (v if isinstance(v, str) else repr(v)).replace("\n", "\\n")
        return text if len(text) <= width else text[:width] + "..."

    lines = [" | ".join(cell(n) for n in names)] if names else []
    lines += [" | ".join(cell(v) for v in row) for row in rows]
    if total > len(rows):
        lines.append("... %d more rows" % (total - len(rows)))
    if not rows:
        lines.append("(no rows)")
    print("\n".join(lines))
'''


@functools.lru_cache(maxsize=16)
def _db_bytes(path: str, mtime_ns: int, size: int) -> bytes:
    # Programs built for many problems share one bytes object per database file.
    return Path(path).read_bytes()


def _read_db(path: str) -> bytes:
    try:
        st = os.stat(path)
    except OSError:
        raise EvalDataError(f"{path}: database file not found") from None
    return _db_bytes(path, st.st_mtime_ns, st.st_size)


DbSource = Union["SqlProblem", bytes, str, Path]


def _db_files(db: DbSource) -> list[tuple[str, bytes]]:
    """(name inside the sandbox, bytes) of each database the queries run on."""
    if isinstance(db, SqlProblem):
        paths = list(db.db_paths) or [db.db_path]
    elif isinstance(db, (bytes, bytearray)):
        return [("db/0.sqlite", bytes(db))]
    else:
        paths = [str(db)]
    return [(f"db/{i}.sqlite", _read_db(p)) for i, p in enumerate(paths)]


def _program(files: list[tuple[str, bytes]], job: dict, marker: str = "", output_bytes: int = 4096) -> Program:
    source = inspect.getsource(result_eq) + "\n\n" + inspect.getsource(bird_result_eq)
    script = "from __future__ import annotations\n\n" + source + _SCRIPT
    job = {**job, "dbs": [name for name, _ in files], "read_pragmas": list(READ_PRAGMAS)}
    return Program(files=(("check.py", script), ("job.json", json.dumps(job)), *files),
                   steps=((PYTHON, "-I", "-S", "-B", "check.py"),), end_marker=marker, output_bytes=output_bytes)


def match_program(db: DbSource, gold: str, pred: str, *, rule: Optional[str] = None, keep_distinct: bool = False,
                  query_seconds: float = QUERY_SECONDS) -> Program:
    """The sandbox program that passes iff `pred` matches `gold` on the database(s) of `db` (a
    SqlProblem: its db_paths; a path; the bytes of one sqlite file). The rule is the problem's
    (default Spider's). Exit status: 0 match, 1 results differ, 2 the prediction failed (its
    error or the time budget), 3 the gold query failed (a data problem)."""
    rule = rule or (db.rule if isinstance(db, SqlProblem) else SPIDER)
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    if rule == SPIDER:
        gold, pred, order_matters = exec_queries(gold, pred, keep_distinct)
    else:
        order_matters = False
    marker = new_marker()
    job = {"mode": "match", "rule": rule, "gold": gold, "pred": pred, "order_matters": order_matters,
           "query_seconds": float(query_seconds), "marker": marker}
    return _program(_db_files(db), job, marker)


def query_program(db: DbSource, sql: str, max_rows: int = 20, max_chars: int = 100,
                  query_seconds: float = QUERY_SECONDS) -> Program:
    """The sandbox program that runs one untrusted query read-only and prints what an agent
    sees: the column names, up to `max_rows` rows (values cut at `max_chars`), "... N more
    rows", or "Error: <sqlite's message>" (then it exits 1)."""
    job = {"mode": "query", "sql": sql, "max_rows": int(max_rows), "max_chars": int(max_chars),
           "query_seconds": float(query_seconds)}
    files = _db_files(db)[:1]
    return _program(files, job, output_bytes=max(4096, (max_rows + 2) * (max_chars + 8) * 8))


def sandbox_bytes(problems: Sequence[SqlProblem]) -> int:
    """The largest total size of one problem's databases: the sandbox's `file_bytes` (the
    largest file a run may write) and `tmp_bytes` (its /tmp) must exceed it, with room for the
    script and sqlite's temporary files."""
    sizes = {p: os.path.getsize(p) for q in problems for p in (q.db_paths or (q.db_path,))}
    return max((sum(sizes[p] for p in (q.db_paths or (q.db_path,))) for q in problems), default=0)


def sized_sandbox(sandbox: Sandbox, problems: Sequence[Any]) -> Sandbox:
    """`sandbox`, or a copy whose largest-file and /tmp caps (and memory budget) hold the largest
    database of `problems` (SQL ones; others are ignored): each run copies it into the sandbox."""
    problems = [p for p in problems if isinstance(p, SqlProblem)]
    if not problems:
        return sandbox
    need = sandbox_bytes(problems) + (8 << 20)  # the database, the script, sqlite's own temporary files
    if need <= min(sandbox.file_bytes, sandbox.tmp_bytes):
        return sandbox
    file_bytes, tmp_bytes = max(sandbox.file_bytes, need), max(sandbox.tmp_bytes, need)
    memory = max(sandbox.memory_bytes, tmp_bytes + sandbox.shm_bytes + (1 << 30))
    return dataclasses.replace(sandbox, file_bytes=file_bytes, tmp_bytes=tmp_bytes, memory_bytes=memory)


def observation(result: ProgramResult) -> str:
    """The agent's observation from a query_program's result."""
    if result.result == "timed out":
        return "Error: the query ran past the sandbox's time limit"
    text = result.output.strip()
    if result.exit_status is None and not text:
        return f"Error: the query could not run ({result.result})"
    return text


# ----------------------------------------------------------------------------- data


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise EvalDataError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise EvalDataError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise EvalDataError(f"{path}: not UTF-8 text") from None


def read_schema(db_path: str | Path) -> str:
    """The database's CREATE TABLE statements from its sqlite_master (the host reads the
    dataset's own file, read-only), one per table in creation order."""
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
        try:
            rows = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                                "AND name NOT LIKE 'sqlite_%' ORDER BY rowid").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise EvalDataError(f"{db_path}: not a readable sqlite database ({e})") from None
    return "\n\n".join(r[0].strip() + ";" for r in rows)


_TABLE_KEYS = ("db_id", "table_names_original", "column_names_original", "column_types", "primary_keys", "foreign_keys")


def _read_tables(path: Path) -> dict[str, dict]:
    data = _read_json(path)
    if not isinstance(data, list):
        raise EvalDataError(f"{path}: expected a JSON list of database schemas")
    out = {}
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise EvalDataError(f"{path}: item {i}: expected a JSON object")
        for key in _TABLE_KEYS:
            if key not in entry:
                raise EvalDataError(f"{path}: item {i}: lacks {key!r} (a schema needs {', '.join(_TABLE_KEYS)})")
        out[entry["db_id"]] = entry
    return out


def load_sql(source: str | Path, split: str = "dev", tables: Optional[str | Path] = None,
             db_dir: Optional[str | Path] = None) -> list[SqlProblem]:
    """Spider or BIRD problems from a local copy in the published layout.

    `source`: a directory holding `<split>.json` (Spider: dev.json, train_spider.json; BIRD:
    dev.json), or such a JSON file. Spider's databases are `database/<db_id>/<db_id>.sqlite`
    and its schemas `tables.json`; BIRD's (recognised by `<split>_databases/` or a "SQL" key)
    `<split>_databases/<db_id>/<db_id>.sqlite` and `<split>_tables.json`. `tables` and
    `db_dir` override where those are. tables.json, when present, must list every db_id."""
    source = Path(source)
    if source.is_dir():
        root = source
        names = [f"{split}.json"] + (["train_spider.json"] if split == "train" else [])
        found = [root / n for n in names if (root / n).is_file()]
        if not found:
            raise EvalDataError(f"{source}: no {' or '.join(names)} (Spider's or BIRD's layout)")
        path = found[0]
    else:
        path, root = source, source.parent
    items = _read_json(path)
    if not isinstance(items, list):
        raise EvalDataError(f"{path}: expected a JSON list of questions")
    stem = path.stem
    bird_dbs = root / f"{stem}_databases"
    is_bird = bird_dbs.is_dir() or (bool(items) and isinstance(items[0], dict) and "SQL" in items[0] and "query" not in items[0])
    rule = BIRD if is_bird else SPIDER
    dbs = Path(db_dir) if db_dir else (bird_dbs if is_bird else root / "database")
    tables_path = Path(tables) if tables else root / (f"{stem}_tables.json" if is_bird else "tables.json")
    schemas = _read_tables(tables_path) if (tables or tables_path.is_file()) else None
    query_key = "SQL" if is_bird else "query"
    schema_text: dict[str, str] = {}
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise EvalDataError(f"{path}: item {i}: expected a JSON object")
        for key in ("db_id", "question", query_key):
            if not isinstance(item.get(key), str):
                what = "lacks" if key not in item else "has a non-string"
                raise EvalDataError(f"{path}: item {i}: {what} {key!r} (needs db_id, question, {query_key})")
        db_id = item["db_id"]
        if schemas is not None and db_id not in schemas:
            raise EvalDataError(f"{path}: item {i}: db_id {db_id!r} is not in {tables_path}")
        db_path = dbs / db_id / f"{db_id}.sqlite"
        if not db_path.is_file():
            raise EvalDataError(f"{path}: item {i}: database {db_path} not found")
        if db_id not in schema_text:
            schema_text[db_id] = read_schema(db_path)
        # The reference runs on every file with ".sqlite" in its name beside the database.
        variants = tuple(sorted(str(p) for p in db_path.parent.iterdir() if ".sqlite" in p.name and p.is_file()))
        out.append(SqlProblem(task_id=f"{rule}/{stem}/{i}", question=item["question"], db_id=db_id,
                              db_path=str(db_path), gold=item[query_key], schema=schema_text[db_id],
                              evidence=str(item.get("evidence") or ""), db_paths=variants, rule=rule))
    return out
