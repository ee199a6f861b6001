"""Text-to-SQL: Spider (and BIRD) problems, execution match as Spider's reference evaluator
decides it, run inside the sandbox, and the SQL pieces of an InterCode-SQL-style agent (a query
run read-only whose printed result is the agent's observation).

Execution match is test-suite-sql-eval's (taoyds/test-suite-sql-eval at e97acc5: `evaluation.py`
`evaluate`, `exec_eval.py` `eval_exec_match` with its defaults: no value plugging, DISTINCT
removed), step for step (`exec_queries`, `remove_distinct`, `result_eq`):
- the prediction is its file's line: stripped and cut at its first tab (the file's separator),
  then every "value" in it becomes "1" (evaluation.py's `p_str.replace("value", "1")`: case-
  sensitive, anywhere, in names and literals too, so `avg(value)` becomes `avg(1)`); the gold
  query is stripped;
- both: "> =", "< =", "! =" closed up (`postprocess`); then (`remove_distinct`, unless
  keep_distinct) only sqlparse's first statement of each is kept and its DISTINCT tokens are
  dropped; order matters iff the gold, lower-cased, contains the substring "order by";
  YEAR(CURDATE()) -> 2020 at execution (`replace_cur_year`);
- both run on every file with ".sqlite" in its name in the gold database's folder (Spider's own
  layout: the one database; the test-suite layout: all its variants), gold first, one query per
  `cursor.execute`: several statements left in a query (keep_distinct, or a ';' inside
  parentheses) fail as Python's sqlite3 fails them ("You can only execute one statement at a
  time"; a ';' followed only by blanks and comments is one statement); a predicted query that
  errors is wrong, and it must match on every database;
- `result_eq`: empty and empty match; else the row counts and the column counts must agree,
  the rows with their values sorted (by str(value) + str(type(value))) must agree (as sets, or
  as sequences when order matters), and some permutation of the predicted columns (each must
  draw its values from the gold column it is mapped to) must make the rows equal as multisets
  (as sequences when order matters). Values compare as Python values (1 == 1.0, None == None);
  text is decoded as UTF-8 with undecodable bytes dropped, as the reference's text_factory does.

BIRD scores with its own rule (`bird_result_eq`: the rows as sets, no normalisation).

Every query runs inside the sandbox: `match_program` and `query_program` are `Program`s whose
files are a trusted standard-library script and the database bytes (a fresh copy per run, the
host's file is never visible), opened with `file:...?mode=ro&immutable=1`; the untrusted query
runs under an sqlite3 authorizer (reads, functions, recursive CTEs, and the PRAGMAs that only
read: READ_PRAGMAS with any argument, SETTING_PRAGMAS without one, as statements or as
pragma_NAME tables; no ATTACH, no writes) and a progress handler that stops it at its time
budget: QUERY_SECONDS (60 s, exec_eval.py's TIMEOUT for each `exec_on_db` call, i.e. each
query on each database) unless the task's `query_seconds` (the CLI's --sql-timeout) says
otherwise. The program's wall clock (and the sandbox's, `sized_sandbox`) covers every query's
budget (`match_seconds`).

Where this differs from the reference: a predicted query that writes, attaches or runs a PRAGMA
that is not a read fails here (the reference opens the database read-write, so a DELETE scored
against an empty gold result counted as a match and changed the database); the time budget is
enforced (the reference's asyncio.wait_for wraps a coroutine that never yields, so its 60 s
cannot stop a running sqlite call: there a slower query still scores); the column-permutation
search prunes with every row instead of 20 random ones (the same verdict, deterministically);
sqlparse's lexing and statement splitting are reproduced for what they decide here (DISTINCT
tokens; a ';' outside literals, comments and parentheses ends the first statement, with the
blanks and single-line comments after it; its GO too) without its BEGIN and DECLARE blocks,
which its versions treat differently; a predicted result with more rows than the gold's is
fetched only up to one row past the gold's count (the same verdict); a gold query that fails
makes the program exit with EXIT_GOLD_ERROR (the reference stops with an assertion); an empty
prediction fails (a prediction file cannot hold one: an empty line ends a session there).
Spider's task folds a multi-line prediction onto one line with its comments dropped (`one_line`,
no verdict changes), as the reference's one-prediction-per-line file expects. Results depend on
the SQLite version of the sandbox's interpreter, as the reference's do on its own.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import os
import re
import sqlite3
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from easylemur.errors import InputError
from easylemur.eval.sandbox import PYTHON, Program, ProgramResult, Sandbox, new_marker
from easylemur.eval.api import EvalDataError

SPIDER, BIRD = "spider", "bird"
RULES = (SPIDER, BIRD)
# Each scored query's budget: test-suite-sql-eval's exec_eval.py TIMEOUT, the limit of each
# `exec_on_db` call (one query on one database). Spider's gold queries take milliseconds.
QUERY_SECONDS = 60.0
ACTION_SECONDS = 3.0  # an agent's look at the data (`query_program`): no reference, kept short
# Beyond the queries' budgets, a match program's wall clock allows this for the interpreter's
# start, reading the databases and comparing the results.
START_SECONDS = 10.0
# What the script's exit status means (the runner reports it as ProgramResult.exit_status).
EXIT_MISMATCH, EXIT_PRED_ERROR, EXIT_GOLD_ERROR = 1, 2, 3
# PRAGMAs that only read, allowed with any argument (a table's name, a check's row limit): the
# schema and the file's state. The reference runs every PRAGMA; reads are what a query can mean
# here, since a write would change the database (and is refused, with everything else).
READ_PRAGMAS = ("table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                "foreign_key_list", "foreign_key_check", "database_list", "collation_list", "function_list",
                "module_list", "pragma_list", "compile_options", "integrity_check", "quick_check", "data_version",
                "freelist_count", "page_count")
# Settings whose bare form (`PRAGMA user_version`) reads them; given a value they write, refused.
SETTING_PRAGMAS = ("analysis_limit", "application_id", "auto_vacuum", "automatic_index", "busy_timeout", "cache_size",
                   "cache_spill", "cell_size_check", "checkpoint_fullfsync", "defer_foreign_keys", "encoding",
                   "foreign_keys", "fullfsync", "hard_heap_limit", "ignore_check_constraints", "journal_mode",
                   "journal_size_limit", "legacy_alter_table", "locking_mode", "max_page_count", "mmap_size",
                   "page_size", "query_only", "read_uncommitted", "recursive_triggers", "reverse_unordered_selects",
                   "schema_version", "secure_delete", "soft_heap_limit", "synchronous", "temp_store", "threads",
                   "trusted_schema", "user_version", "wal_autocheckpoint")


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

# SQLite's lexical pieces, enough to tell words from literals and comments: a string literal, a
# quoted name ("x", `x`, [x]), a comment, a word, blank space, any other character.
_TOKEN = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?|--[^\n]*|/\*.*?(?:\*/|\Z)|[\w$#]+|\s+|.""", re.S)
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.I)

# sqlparse's lexing (its SQL_REGEX rules in its order, IGNORECASE), as the reference's
# remove_distinct reads a query: which text is one token (a DISTINCT is dropped only as a whole
# token; a literal, a quoted name, a comment, a placeholder, a number or a word holds its text)
# and the kinds of token its statement splitter looks at. Its rules of one character that no
# other rule starts with (comparison operators, punctuation) are the last line's.
_SQLPARSE_TOKEN = re.compile(r"""
  (?P<block>(?s:/\*.*?\*/))                                            # paired before the rules
| (?<![\w"$])(?P<tag>\$(?:[_A-ZÀ-Ü]\w*)?\$)(?s:.*?)(?-i:(?P=tag))       # ... and so are these
| (?P<hint>(?:--|\#\ )\+.*?(?:\r\n|\r|\n|$))
| (?P<comment>(?:--|\#\ ).*?(?:\r\n|\r|\n|$))
| (?P<newline>\r\n|\r|\n)
| (?P<space>\s)
| :=|::|`(?:``|[^`])*`|´(?:´´|[^´])*´|\?|%(?:\(\w+\))?s|(?<!\w)[$:?]\w+|\\\w+
| (?:CASE|IN|VALUES|USING|FROM|AS)\b|(?:@|\#\#|\#)[A-ZÀ-Ü]\w+
| (?P<name>[A-ZÀ-Ü]\w*(?=\s*\.(?!\d))|(?<=\.)[A-ZÀ-Ü]\w*|[A-ZÀ-Ü]\w*(?=\())
| -?0x[\dA-F]+|-?\d+(?:\.\d+)?E-?\d+|(?![_A-ZÀ-Ü])-?(?:\d+(?:\.\d*)|\.\d+)(?![_A-ZÀ-Ü])|(?![_A-ZÀ-Ü])-?\d+(?![_A-ZÀ-Ü])
| '(?:''|\\'|[^'])*'|"(?:""|\\"|[^"])*"|(?:""|".*?[^\\]")|(?<![\w\])])\[[^\]\[]+\]
| (?:(?:LEFT\s+|RIGHT\s+|FULL\s+)?(?:INNER\s+|OUTER\s+|STRAIGHT\s+)?|(?:CROSS\s+|NATURAL\s+)?)?JOIN\b
| (?P<end>END(?:\s+IF|\s+LOOP|\s+WHILE|\s+FOR|\s+CASE)?\b)
| IF\s+(?:NOT\s+)?EXISTS\b|NOT\s+NULL\b|(?:ASC|DESC)(?:\s+NULLS\s+(?:FIRST|LAST))?\b|NULLS\s+(?:FIRST|LAST)\b
| UNION\s+ALL\b|CREATE(?:\s+OR\s+REPLACE)?\b|DOUBLE\s+PRECISION\b|GROUP\s+BY\b|ORDER\s+BY\b|PRIMARY\s+KEY\b
| HANDLER\s+FOR\b|(?P<go>GO\s\d+\b)|LATERAL\s+VIEW\s+(?:EXPLODE|INLINE|PARSE_URL_TUPLE|POSEXPLODE|STACK)\b
| (?:AT|WITH')\s+TIME\s+ZONE\s+'[^']+'|(?:NOT\s+)?(?:LIKE|ILIKE|RLIKE)\b|(?:NOT\s+)?REGEXP(?:\s+BINARY)?\b
| (?P<word>\w[$\#\w]*)
| \->>?|\#>>?|@>|<@|\?\|?|\?&|\-|\#\-|[+/@\#%^&|-]+
| (?s:.)
""", re.I | re.X)


def _tokens(sql: str) -> list[str]:
    return _TOKEN.findall(sql)


def _first_statement_tokens(sql: str) -> list[str]:
    """The tokens of sqlparse's first statement of `sql` (`sqlparse.parse(sql)[0]`, what the
    reference's remove_distinct keeps): up to the first ';' at a nesting level <= 0 ('(' opens
    a level, ')' and END close one) or the keyword GO, then the blanks and single-line comments
    that follow on that line. Its BEGIN and DECLARE blocks are left out: its versions differ on
    them, and a SQLite query has none."""
    out: list[str] = []
    level, ended = 0, False
    for m in _SQLPARSE_TOKEN.finditer(sql):
        kind, text = m.lastgroup, m.group()
        if ended:
            if kind not in ("space", "comment"):
                break
        elif kind is None and text == ";":
            ended = level <= 0
        elif kind is None and text == "(":
            level += 1
        elif (kind is None and text == ")") or (kind == "end" and text.upper() == "END"):
            level -= 1
        elif (kind == "word" and text == "GO") or (kind == "go" and text.split()[0] == "GO"):
            ended = True  # sqlparse's batch separator, upper-case only
        out.append(text)
    return out


def remove_distinct(sql: str) -> str:
    """The reference's remove_distinct: sqlparse's first statement of `sql` without the tokens
    that read "distinct" (in COUNT(DISTINCT x) too), everything else verbatim. Whatever follows
    that statement (a second query) is dropped, as there."""
    return "".join(t for t in _first_statement_tokens(sql) if t.lower() != "distinct")


def exec_queries(gold: str, pred: str, keep_distinct: bool = False) -> tuple[str, str, bool]:
    """(gold, predicted, order_matters) as test-suite-sql-eval runs them, from the gold query and
    the prediction as a line of its prediction file (see the module's docstring)."""
    # evaluation.py: each line stripped and split at its tabs, the prediction's first field,
    # every "value" of it made "1" (to run queries written with Spider's value placeholder).
    pred = pred.strip().split("\t")[0].replace("value", "1")
    gold = gold.strip()
    out = []
    for q in (gold, pred):
        q = q.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")  # exec_eval.py postprocess
        if not keep_distinct:
            q = remove_distinct(q)
        out.append(q)
    order_matters = "order by" in out[0].lower()
    # exec_on_db_ replaces the current year in each query just before it runs.
    return _CUR_YEAR.sub("2020", out[0]), _CUR_YEAR.sub("2020", out[1]), order_matters


def _fold(sql: str, cut: bool) -> str:
    out: list[str] = []
    for t in _tokens(sql):
        if t == ";" and cut:
            break
        if t.startswith("--") or t.startswith("/*") or t.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(t)
    return "".join(out).strip()


def one_line(sql: str) -> str:
    """The query on one line, as the reference's prediction file holds it: comments dropped and
    blank space (newlines too) folded to one space outside literals and quoted names, which keep
    theirs. SQLite reads a comment as blank space, so no result changes; every statement stays."""
    return _fold(sql, cut=False)


def first_statement(sql: str) -> str:
    """`one_line` of the text up to the first ';' outside literals and comments: what an agent's
    action runs (the agent sees the first statement's rows; scoring follows the reference)."""
    return _fold(sql, cut=True)


def match_seconds(n_dbs: int, query_seconds: float = QUERY_SECONDS) -> float:
    """A match program's wall clock: the gold and the predicted query on each of `n_dbs`
    databases, each within its budget, plus START_SECONDS."""
    return 2 * max(1, n_dbs) * float(query_seconds) + START_SECONDS


# ----------------------------------------------------------------------------- sandbox programs

# The trusted script of match_program and query_program: standard library only, run with -I -S.
# job.json carries the queries and settings; the comparison functions' source is prepended.
_SCRIPT = r'''
import json, re, sqlite3, sys, time

job = json.load(open("job.json"))
READ_PRAGMAS = set(job["read_pragmas"])
SETTING_PRAGMAS = set(job["setting_pragmas"])
# Reads, and BEGIN/COMMIT/SAVEPOINT (the reference runs them; on a read-only file they change nothing).
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
           sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT}


def authorize(action, arg1, arg2, db, source):
    # The untrusted query may only read: no writes, no ATTACH, no PRAGMA that is not a read.
    if action in ALLOWED:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in READ_PRAGMAS or (arg2 is None and name in SETTING_PRAGMAS):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_pragma_tables(conn, sql):
    # SQLite makes a pragma_NAME table on its first use in a connection, and while it does it asks
    # the authorizer about writes to sqlite_master that never happen: make the ones the query
    # names (those of readable PRAGMAs) before the authorizer is on, so that it refuses every write.
    for name in {n.lower() for n in re.findall(r"pragma_(\w+)", sql, re.I)}:
        if name in READ_PRAGMAS or name in SETTING_PRAGMAS:
            try:
                conn.execute("SELECT * FROM pragma_%s WHERE 0" % name).fetchall()
            except sqlite3.Error:
                pass


def connect(name):
    conn = sqlite3.connect("file:%s?mode=ro&immutable=1" % name, uri=True)
    conn.text_factory = lambda b: b.decode(errors="ignore")  # the reference's: undecodable bytes dropped
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def run(conn, sql, untrusted, keep, count_rest):
    """(column names, rows kept, rows seen) of one query: all rows when keep is None, else at
    most `keep` (the rest counted when count_rest). Raises sqlite3.Error, with "interrupted"
    past the time budget."""
    if untrusted:
        open_pragma_tables(conn, sql)
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
    if not job["pred"].strip():
        fail(2, "the predicted query is empty")
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


def _program(files: list[tuple[str, bytes]], job: dict, marker: str = "", output_bytes: int = 4096,
             timeout: float = 0.0) -> Program:
    source = inspect.getsource(result_eq) + "\n\n" + inspect.getsource(bird_result_eq)
    script = "from __future__ import annotations\n\n" + source + _SCRIPT
    job = {**job, "dbs": [name for name, _ in files], "read_pragmas": list(READ_PRAGMAS),
           "setting_pragmas": list(SETTING_PRAGMAS)}
    return Program(files=(("check.py", script), ("job.json", json.dumps(job)), *files),
                   steps=((PYTHON, "-I", "-S", "-B", "check.py"),), end_marker=marker, output_bytes=output_bytes,
                   timeout=timeout)


def query_budget(seconds: Any, what: str = "query_seconds") -> float:
    """`seconds` as a query's time budget; anything but a positive finite number is an InputError
    naming `what` and the value."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not (0 < value < math.inf):
        raise InputError(f"{what} {seconds!r}: expected a positive number of seconds")
    return value


def match_program(db: DbSource, gold: str, pred: str, *, rule: Optional[str] = None, keep_distinct: bool = False,
                  query_seconds: float = QUERY_SECONDS) -> Program:
    """The sandbox program that passes iff `pred` matches `gold` on the database(s) of `db` (a
    SqlProblem: its db_paths; a path; the bytes of one sqlite file). The rule is the problem's
    (default Spider's). Each query's time budget is `query_seconds` (the reference's 60 s by
    default); the program's wall clock is `match_seconds` of them. Exit status: 0 match, 1
    results differ, 2 the prediction failed (its error or the time budget), 3 the gold query
    failed (a data problem)."""
    query_seconds = query_budget(query_seconds)
    rule = rule or (db.rule if isinstance(db, SqlProblem) else SPIDER)
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    if rule == SPIDER:
        gold, pred, order_matters = exec_queries(gold, pred, keep_distinct)
    else:
        order_matters = False
    marker = new_marker()
    job = {"mode": "match", "rule": rule, "gold": gold, "pred": pred, "order_matters": order_matters,
           "query_seconds": query_seconds, "marker": marker}
    files = _db_files(db)
    return _program(files, job, marker, timeout=match_seconds(len(files), query_seconds))


def query_program(db: DbSource, sql: str, max_rows: int = 20, max_chars: int = 100,
                  query_seconds: float = ACTION_SECONDS) -> Program:
    """The sandbox program that runs one untrusted query read-only and prints what an agent
    sees: the column names, up to `max_rows` rows (values cut at `max_chars`), "... N more
    rows", or "Error: <sqlite's message>" (then it exits 1)."""
    job = {"mode": "query", "sql": sql, "max_rows": int(max_rows), "max_chars": int(max_chars),
           "query_seconds": query_budget(query_seconds)}
    files = _db_files(db)[:1]
    return _program(files, job, output_bytes=max(4096, (max_rows + 2) * (max_chars + 8) * 8))


def sandbox_bytes(problems: Sequence[SqlProblem]) -> int:
    """The largest total size of one problem's databases: the sandbox's `file_bytes` (the
    largest file a run may write) and `tmp_bytes` (its /tmp) must exceed it, with room for the
    script and sqlite's temporary files."""
    sizes = {p: os.path.getsize(p) for q in problems for p in (q.db_paths or (q.db_path,))}
    return max((sum(sizes[p] for p in (q.db_paths or (q.db_path,))) for q in problems), default=0)


def sized_sandbox(sandbox: Sandbox, problems: Sequence[Any], query_seconds: float = QUERY_SECONDS) -> Sandbox:
    """`sandbox`, or a copy whose largest-file and /tmp caps (and memory budget) hold the largest
    database of `problems` (SQL ones; others are ignored): each run copies it into the sandbox;
    and whose timeout covers the longest match program at `query_seconds` a query (the timeout
    is also the sandbox's CPU limit, which a program's own wall clock does not raise)."""
    problems = [p for p in problems if isinstance(p, SqlProblem)]
    if not problems:
        return sandbox
    seconds = max(match_seconds(len(p.db_paths or (p.db_path,)), query_budget(query_seconds)) for p in problems)
    need = sandbox_bytes(problems) + (8 << 20)  # the database, the script, sqlite's own temporary files
    if need <= min(sandbox.file_bytes, sandbox.tmp_bytes) and seconds <= sandbox.timeout:
        return sandbox
    file_bytes, tmp_bytes = max(sandbox.file_bytes, need), max(sandbox.tmp_bytes, need)
    memory = max(sandbox.memory_bytes, tmp_bytes + sandbox.shm_bytes + (1 << 30))
    return dataclasses.replace(sandbox, file_bytes=file_bytes, tmp_bytes=tmp_bytes, memory_bytes=memory,
                               timeout=max(sandbox.timeout, seconds))


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
