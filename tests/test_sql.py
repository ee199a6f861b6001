"""Spider execution match and the SQL agent's pieces: the loader on Spider's (and BIRD's) real
layout, `result_eq` against hand-checked cases, the sandboxed match agreeing with it and with
test-suite-sql-eval's verdicts on honest queries (`spider_reference_cases.py`), hostile
predicted queries that cannot touch the database, the query time budget (its flag too), and
the observation an agent sees."""

import hashlib
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import spider_reference_cases as reference
from easylemur.errors import InputError
from easylemur.eval.sandbox import PASSED, Sandbox, run_programs
from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.spider.sql import (BIRD, EXIT_GOLD_ERROR, EXIT_PRED_ERROR, QUERY_SECONDS, exec_queries,
                                                 first_statement, load_sql, match_program, match_seconds, observation,
                                                 one_line, query_program, remove_distinct, result_eq, sandbox_bytes,
                                                 sized_sandbox)
from easylemur.eval.benchmarks.spider.task import Spider

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

SCHEMA = """
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER, net_worth REAL);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id), year INTEGER,
                      venue TEXT);
CREATE TABLE song (song_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id), title TEXT, sales INTEGER);
CREATE VIEW young AS SELECT name FROM singer WHERE age < 30;
"""
# Duplicate names and countries, NULL ages, sales and venues.
SINGERS = [(1, "Ann", "France", 25, 1.5), (2, "Bob", "USA", 40, 2.0), (3, "Cid", "France", None, 3.25),
           (4, "Dee", "UK", 31, None), (5, "Eve", "USA", 25, 1.5), (6, "Ann", "Spain", 52, 10.0),
           (7, "Fay", None, 19, 0.5), (8, "Gus", "UK", 40, 2.0)]
CONCERTS = [(i, 1 + i % 7, 2010 + i % 5, [None, "Arena", "Hall", "Park"][i % 4]) for i in range(1, 19)]
SONGS = [(i, 1 + (i * 3) % 8, f"Song {i % 6}", None if i % 5 == 0 else 100 * (i % 4)) for i in range(1, 17)]

QUESTIONS = [
    ("music", "How many singers are there?", "SELECT count(*) FROM singer"),
    ("music", "List the names of singers from France.", "SELECT name FROM singer WHERE country = 'France'"),
    ("music", "Names of singers by age, oldest first.", "SELECT name, age FROM singer ORDER BY age DESC"),
]


def _make_db(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO singer VALUES (?, ?, ?, ?, ?)", SINGERS)
    conn.executemany("INSERT INTO concert VALUES (?, ?, ?, ?)", CONCERTS)
    conn.executemany("INSERT INTO song VALUES (?, ?, ?, ?)", SONGS)
    conn.commit()
    conn.close()


TABLES = [{"db_id": "music", "table_names_original": ["singer", "concert", "song"],
           "column_names_original": [[-1, "*"], [0, "singer_id"], [0, "name"], [0, "country"], [0, "age"], [0, "net_worth"],
                                     [1, "concert_id"], [1, "singer_id"], [1, "year"], [1, "venue"],
                                     [2, "song_id"], [2, "singer_id"], [2, "title"], [2, "sales"]],
           "column_types": ["text", "number", "text", "text", "number", "number", "number", "number", "number", "text",
                            "number", "number", "text", "number"],
           "primary_keys": [1, 6, 10], "foreign_keys": [[7, 1], [11, 1]]}]


@pytest.fixture(scope="module")
def spider_dir(tmp_path_factory) -> Path:
    """Spider's published layout: dev.json, tables.json, database/<db_id>/<db_id>.sqlite."""
    root = tmp_path_factory.mktemp("spider")
    _make_db(root / "database" / "music" / "music.sqlite")
    (root / "database" / "music" / "schema.sql").write_text(SCHEMA)  # Spider ships these; not a database
    (root / "dev.json").write_text(json.dumps([{"db_id": d, "question": q, "query": s, "query_toks": s.split()}
                                               for d, q, s in QUESTIONS]))
    (root / "tables.json").write_text(json.dumps(TABLES))
    return root


@pytest.fixture(scope="module")
def problems(spider_dir):
    return load_sql(spider_dir)


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=6)
    sb.check()
    return sb


# ----------------------------------------------------------------------------- loader


def test_loader_reads_spiders_layout(spider_dir, problems):
    assert [p.task_id for p in problems] == ["spider/dev/0", "spider/dev/1", "spider/dev/2"]
    p = problems[1]
    assert (p.db_id, p.question, p.gold) == QUESTIONS[1]
    assert p.db_path == str(spider_dir / "database" / "music" / "music.sqlite")
    assert p.db_paths == (p.db_path,) and p.rule == "spider"
    # The schema is what sqlite_master holds: the CREATE TABLE statements, in order, no view.
    assert p.schema.startswith("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY")
    assert [line.split(" (")[0] for line in p.schema.split("\n\n")] == ["CREATE TABLE singer", "CREATE TABLE concert",
                                                                         "CREATE TABLE song"]
    assert "VIEW" not in p.schema
    assert load_sql(spider_dir / "dev.json")[2].gold == QUESTIONS[2][2]
    assert sandbox_bytes(problems) == (spider_dir / "database" / "music" / "music.sqlite").stat().st_size


def _copy(spider_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(spider_dir, root)
    return root


def test_loader_errors_name_the_file_and_item(spider_dir, tmp_path):
    root = _copy(spider_dir, tmp_path)
    items = json.loads((root / "dev.json").read_text())
    del items[1]["question"]
    (root / "dev.json").write_text(json.dumps(items))
    with pytest.raises(EvalDataError, match=r"dev\.json: item 1: lacks 'question' \(needs db_id, question, query\)$"):
        load_sql(root)

    items[1]["question"], items[2]["db_id"] = "q", "concert_singer"
    (root / "dev.json").write_text(json.dumps(items))
    with pytest.raises(EvalDataError, match=r"dev\.json: item 2: db_id 'concert_singer' is not in .*tables\.json$"):
        load_sql(root)
    (root / "tables.json").unlink()  # without tables.json only the database is looked for
    with pytest.raises(EvalDataError, match=r"dev\.json: item 2: database .*database/concert_singer/concert_singer\.sqlite "
                                            r"not found$"):
        load_sql(root)

    (root / "dev.json").write_text('[{"db_id": "music",\n "question": "q" "query": "x"}]')
    with pytest.raises(EvalDataError, match=r"dev\.json:2: not JSON \(Expecting ',' delimiter\)$"):
        load_sql(root)
    (root / "tables.json").write_text(json.dumps([{"db_id": "music"}]))
    (root / "dev.json").write_text("[]")
    with pytest.raises(EvalDataError, match=r"tables\.json: item 0: lacks 'table_names_original'"):
        load_sql(root)
    with pytest.raises(EvalDataError, match=r"no dev\.json"):
        load_sql(tmp_path)


def test_loader_reads_birds_layout(tmp_path):
    _make_db(tmp_path / "dev_databases" / "music" / "music.sqlite")
    (tmp_path / "dev.json").write_text(json.dumps([{"question_id": 0, "db_id": "music", "question": "Oldest age?",
                                                    "evidence": "age is in years", "SQL": "SELECT max(age) FROM singer",
                                                    "difficulty": "simple"}]))
    [p] = load_sql(tmp_path)
    assert (p.task_id, p.rule, p.evidence, p.gold) == ("bird/dev/0", BIRD, "age is in years", "SELECT max(age) FROM singer")
    assert "-- Evidence: age is in years" in Spider([p]).prompt(p).text


# ----------------------------------------------------------------------------- result_eq


def test_result_eq_hand_checked_cases():
    gold = [(1, "a"), (2, "b"), (2, "b"), (None, "c")]
    assert result_eq(gold, [("a", 1), ("b", 2), ("b", 2), ("c", None)], False)  # permuted columns
    assert result_eq(gold, list(reversed(gold)), False)  # rows in another order
    assert not result_eq(gold, list(reversed(gold)), True)  # ... unless order matters
    assert result_eq(gold, [("a", 1), ("b", 2), ("b", 2), ("c", None)], True)  # permuted columns, same row order
    assert not result_eq(gold, [(1, "a"), (1, "a"), (2, "b"), (None, "c")], False)  # other multiplicities
    assert not result_eq(gold, [(1, "a"), (2, "b"), (None, "c")], False)  # a duplicate missing (DISTINCT)
    assert not result_eq(gold, [(1, "a", 0), (2, "b", 0), (2, "b", 0), (None, "c", 0)], False)  # an extra column
    assert result_eq([], [], False) and result_eq([], [], True)  # empty vs empty
    assert not result_eq([], [(None,)], False) and not result_eq([(None,)], [], False)
    assert result_eq([(1,)], [(1.0,)], False)  # values compare as Python values
    assert not result_eq([(1,)], [("1",)], False)
    # Each predicted column must draw its values from the gold column it is mapped to: swapping
    # the values between rows is not a column permutation.
    assert not result_eq([(1, 2), (3, 4)], [(1, 4), (3, 2)], False)
    assert not result_eq([(1, 2), (2, 1)], [(1, 1), (2, 2)], False)
    assert result_eq([(1, 1, 2, 3, 4)], [(4, 3, 2, 1, 1)], False)  # five columns: the pruned search


def test_reference_normalisation():
    gold, pred, order = exec_queries("SELECT DISTINCT name FROM singer ORDER BY age", "select distinct(name) from singer")
    assert (gold, pred, order) == ("SELECT  name FROM singer ORDER BY age", "select (name) from singer", True)
    # COUNT(DISTINCT x) loses its DISTINCT too, as in the reference; literals and quoted names keep theirs.
    assert remove_distinct("SELECT count(DISTINCT x), 'distinct', \"Distinct\" FROM t") == \
        "SELECT count( x), 'distinct', \"Distinct\" FROM t"
    # evaluation.py: every "value" of the prediction (only) becomes "1", case-sensitively.
    assert exec_queries("SELECT value FROM t", " SELECT DISTINCT a FROM t WHERE b > = value AND c ! = 'value' "
                        "AND Value = values", keep_distinct=True) == \
        ("SELECT value FROM t", "SELECT DISTINCT a FROM t WHERE b >= 1 AND c != '1' AND Value = 1s", False)
    assert exec_queries("SELECT a FROM t ORDER  BY a", "x")[2] is False  # the reference's substring test
    assert exec_queries("SELECT YEAR(CURDATE()) - age FROM t", "x")[0] == "SELECT 2020- age FROM t"
    # The line is cut at its first tab; sqlparse's first statement is kept, with the blanks and
    # single-line comments after its ';' ("# " starts one for sqlparse), unless keep_distinct.
    assert exec_queries("x", "SELECT a FROM t\tSELECT b")[1] == "SELECT a FROM t"
    assert exec_queries("x", "SELECT a FROM t; SELECT b")[1] == "SELECT a FROM t; "
    assert exec_queries("x", "SELECT a FROM t; SELECT b", keep_distinct=True)[1] == "SELECT a FROM t; SELECT b"
    assert remove_distinct("SELECT (SELECT 1; SELECT 2); SELECT 3") == "SELECT (SELECT 1; SELECT 2); "
    assert remove_distinct("SELECT CASE WHEN a THEN 1 END FROM t;  # c -- d\nSELECT 2") == \
        "SELECT CASE WHEN a THEN 1 END FROM t;  # c -- d\n"
    assert remove_distinct("SELECT 'a;b', \"c;d\", [e;f] /* ; */ FROM t -- ;\n; DISTINCT") == \
        "SELECT 'a;b', \"c;d\", [e;f] /* ; */ FROM t -- ;\n; "
    # sqlparse's tokens: a DISTINCT glued to a placeholder, a number or a word is no DISTINCT token.
    assert remove_distinct("SELECT :distinct, ?distinct, 1distinct, t.distinct, distinct$1, x::distinct") == \
        "SELECT :distinct, ?, 1distinct, t., distinct$1, x::"


def test_extract_and_prompts(problems):
    p = problems[0]
    base, chat = Spider(problems), Spider(problems, "chatml")
    text = base.prompt(p).text
    assert text.startswith("CREATE TABLE singer") and text.endswith("-- Question: How many singers are there?\nSELECT")
    assert base.extract(p, " count(*)\nFROM singer -- all\n WHERE 1") == "SELECT count(*) FROM singer WHERE 1"
    assert chat.prompt(p).assistant_prefix == "```sql\n" and "```sql block" in chat.prompt(p).messages[0]["content"]
    # Every statement is kept for the reference's rules to judge; the agent's actions run the first.
    assert chat.extract(p, "SELECT a FROM t WHERE b = 'x;y';\n DROP TABLE t") == "SELECT a FROM t WHERE b = 'x;y'; DROP TABLE t"
    assert chat.extract(p, "Sure:\n```sql\nSELECT 1;\n```\n```sql\nSELECT 2\n```") == "SELECT 1;"
    assert one_line("SELECT 'a  b'  ,\n\tc /* x */ FROM t -- y\n; SELECT 2") == "SELECT 'a  b' , c FROM t ; SELECT 2"
    assert first_statement("SELECT 'a  b'  ,\n\tc /* x */ FROM t") == "SELECT 'a  b' , c FROM t"
    assert base.stops() == (";", "\n\n", "\n--", "```") and chat.stops() == ("```",)


# ----------------------------------------------------------------------------- in the sandbox

PAIRS = [  # (gold, predicted, expected)
    ("SELECT count(*) FROM singer", "SELECT COUNT(singer_id) FROM singer", True),
    ("SELECT name, age FROM singer WHERE country = 'France'", "SELECT age, name FROM singer WHERE country = 'France'", True),
    ("SELECT name FROM singer", "SELECT DISTINCT name FROM singer", True),  # DISTINCT is dropped from both
    ("SELECT country FROM singer", "SELECT country FROM singer WHERE country IS NOT NULL", False),  # a NULL row lost
    ("SELECT name FROM singer ORDER BY net_worth DESC", "SELECT name FROM singer ORDER BY net_worth ASC", False),
    ("SELECT name FROM singer WHERE age > 100", "SELECT name FROM singer WHERE age > 200", True),  # empty vs empty
    ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id",
     "SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert)", False),  # multiplicities differ
    ("SELECT avg(sales) FROM song", "SELECT sum(sales) * 1.0 / count(sales) FROM song", True),
    ("SELECT name FROM young", "SELECT name FROM singer WHERE age < 30", True),  # a view
    ("SELECT name FROM singer", "SELECT nme FROM singer", False),  # an error
    ("SELECT venue, count(*) FROM concert GROUP BY venue", "SELECT count(*), venue FROM concert GROUP BY venue", True),
    ("SELECT title FROM song ORDER BY title", "SELECT title FROM song ORDER BY title LIMIT 15", False),
]


def _host_verdict(db: Path, gold: str, pred: str) -> bool:
    """The same decision taken on the host, with trusted queries only (this test's own)."""
    g, p, order = exec_queries(gold, pred)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return result_eq(conn.execute(g).fetchall(), conn.execute(p).fetchall(), order)
    except sqlite3.Error:
        return False
    finally:
        conn.close()


@needs_bwrap
def test_match_program_agrees_with_result_eq(problems, sandbox):
    p = problems[0]
    results = run_programs([match_program(p, g, q) for g, q, _ in PAIRS], sandbox, workers=2)
    for (gold, pred, expected), got in zip(PAIRS, results):
        assert _host_verdict(Path(p.db_path), gold, pred) == expected, (gold, pred)
        assert (got == PASSED) == expected, (gold, pred, got)
    # Execution accuracy of a task: known-good predictions score 1.0, known-wrong 0.0.
    task = Spider(problems)
    good = [task.program(q, task.extract(q, " " + q.gold.split(" ", 1)[1])) for q in problems]
    wrong = [task.program(q, task.extract(q, " name FROM singer WHERE 0")) for q in problems]
    verdicts = run_programs(good + wrong, sandbox, workers=2)
    assert [v == PASSED for v in verdicts] == [True] * 3 + [False] * 3


@needs_bwrap
def test_writing_queries_fail_and_the_database_stays(problems, sandbox):
    p = problems[0]
    before = hashlib.sha256(Path(p.db_path).read_bytes()).hexdigest()
    empty = "SELECT name FROM singer WHERE age > 100"  # a write returns no rows: it would match an empty gold
    hostile = ["DROP TABLE singer", "DELETE FROM singer", "INSERT INTO singer (name) VALUES ('x')",
               "UPDATE singer SET age = 0", "ATTACH DATABASE '/tmp/x.sqlite' AS x",
               f"ATTACH DATABASE '{p.db_path}' AS host", "PRAGMA writable_schema = 1", "CREATE TABLE t (a)",
               "SELECT load_extension('/usr/lib/x.so')", "VACUUM INTO '/tmp/copy.sqlite'",
               # PRAGMAs that write, or that are no read: refused though reading ones pass
               "PRAGMA user_version = 7", "PRAGMA journal_mode = WAL", "PRAGMA writable_schema",
               "SELECT * FROM pragma_writable_schema", "PRAGMA main.optimize"]
    programs = [match_program(p, empty, sql) for sql in hostile]
    programs.append(match_program(p, empty, "PRAGMA writable_schema = 1; DELETE FROM sqlite_master"))
    results = [sandbox.run_program(prog) for prog in programs[:2]]
    assert all(not r.passed and r.exit_status == EXIT_PRED_ERROR for r in results), results
    assert all(r.startswith("failed") for r in run_programs(programs[2:], sandbox, workers=2))
    assert hashlib.sha256(Path(p.db_path).read_bytes()).hexdigest() == before
    assert not Path("/tmp/x.sqlite").exists() and not Path("/tmp/copy.sqlite").exists()


@needs_bwrap
def test_runaway_query_stops_at_its_budget(problems, sandbox):
    p = problems[0]
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    start = time.monotonic()
    r = sandbox.run_program(match_program(p, "SELECT 1", endless, query_seconds=1.0))
    assert time.monotonic() - start < sandbox.timeout
    assert r.exit_status == EXIT_PRED_ERROR and "interrupted (past its 1 s budget)" in r.output, r
    # A huge result under Spider's rule is cut at one row more than the gold's: it fails fast.
    r = sandbox.run_program(match_program(p, "SELECT 1", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                                                         "SELECT x FROM c"))
    assert r.exit_status == 1 and "predicted more than 1 rows" in r.output, r
    # A gold query that fails is a data problem, told apart from a wrong prediction.
    assert sandbox.run_program(match_program(p, "SELECT nope FROM singer", "SELECT 1")).exit_status == EXIT_GOLD_ERROR
    # An empty prediction fails (SQLite would run it and return no rows: a match for an empty gold).
    r = sandbox.run_program(match_program(p, "SELECT name FROM singer WHERE age > 100", " \t "))
    assert r.exit_status == EXIT_PRED_ERROR and "empty" in r.output, r


def _slow_correct_count(seconds: float) -> tuple[str, float]:
    """("how many singers?" answered correctly after counting N numbers, its time on this host),
    N scaled so that it takes about `seconds` here."""
    def timed(n: int) -> tuple[str, float]:
        query = (f"SELECT count(*) FROM singer WHERE (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                 f"WHERE x < {n}) SELECT count(*) FROM c) > 0")
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE singer (singer_id)")
        conn.execute("INSERT INTO singer VALUES (1)")
        start = time.monotonic()
        conn.execute(query).fetchall()
        return query, time.monotonic() - start

    n = 100_000
    _, took = timed(n)
    return timed(max(n, int(n * seconds / max(took, 1e-3))))


@needs_bwrap
def test_sql_timeout_flag_sets_the_query_budget(spider_dir, tmp_path):
    """A correct query slower than --sql-timeout fails, and passes with a budget above its time;
    the default budget is test-suite-sql-eval's 60 s, and the sandbox's wall clock covers it."""
    from easylemur.eval.cli.benchmark import main

    query, took = _slow_correct_count(0.4)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "spider/dev/0", "completion": query}) + "\n")
    verdicts = []
    for budget in (took / 4, max(5.0, 10 * took)):
        out = tmp_path / f"out{budget:g}"
        # --timeout below the query's time: the program's wall clock grows to cover its budget.
        assert main(["spider", "--data", str(spider_dir), "--samples", str(samples), "--sql-timeout", f"{budget:g}",
                     "--timeout", f"{took / 2:g}", "--workers", "1", "--out", str(out)]) == 0
        verdicts.append(json.loads((out / "results.jsonl").read_text())["result"])
    # exit status 2: the prediction failed (here: its budget), not the sandbox's clock
    assert verdicts[0].endswith("status 2") and verdicts[1] == PASSED, (took, verdicts)

    problems = load_sql(spider_dir)
    assert QUERY_SECONDS == 60 and Spider(problems).query_seconds == 60
    assert match_program(problems[0], "SELECT 1", "SELECT 1").timeout == match_seconds(1, 60) == 130
    assert sized_sandbox(Sandbox(timeout=2), problems, 5).timeout == match_seconds(1, 5) == 20
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(InputError, match=rf"^--sql-timeout {bad}(\.0)?: expected a positive number of seconds$"):
            main(["spider", "--samples", str(samples), "--sql-timeout", bad, "--out", str(tmp_path / "x")])
    with pytest.raises(InputError, match=r"^--sql-timeout 5: only spider runs SQL, not mbpp$"):
        main(["mbpp", "--samples", str(samples), "--sql-timeout", "5", "--out", str(tmp_path / "x")])
    with pytest.raises(InputError, match=r"^query_seconds 0: expected a positive number of seconds$"):
        Spider(problems, query_seconds=0)


# ----------------------------------------------------------------------------- test-suite-sql-eval's verdicts


@pytest.fixture(scope="module")
def meter_db(tmp_path_factory) -> Path:
    return reference.make_db(tmp_path_factory.mktemp("meter") / "meter" / "meter.sqlite")


@needs_bwrap
def test_verdicts_are_test_suite_sql_evals(meter_db, sandbox):
    """Honest predictions (a `value` column, PRAGMA reads, several statements, DISTINCT, ORDER BY,
    NULLs and numbers) get test-suite-sql-eval's verdict; `spider_reference_cases.py` says which
    of its rules decides each. The one difference on purpose: a write is refused here."""
    before = hashlib.sha256(meter_db.read_bytes()).hexdigest()
    cases = reference.CASES
    results = run_programs([match_program(meter_db, c.gold, c.pred, keep_distinct=c.keep_distinct) for c in cases],
                           sandbox, workers=2)
    got = [int(r == PASSED) for r in results]
    want = [c.verdict if c.here < 0 else c.here for c in cases]
    assert got == want, [(c.pred, c.keep_distinct, c.why, r) for c, g, w, r in zip(cases, got, want, results) if g != w]
    assert hashlib.sha256(meter_db.read_bytes()).hexdigest() == before


@needs_bwrap
def test_query_program_observation(problems, sandbox):
    p = problems[0]
    queries = ["SELECT name, age, net_worth FROM singer ORDER BY singer_id", "SELECT nme FROM singer",
               "SELECT name FROM singer WHERE age > 100", "PRAGMA table_info(concert)", "DROP TABLE singer",
               "SELECT 'two\nlines', x'00ff', NULL"]
    obs = [observation(sandbox.run_program(query_program(p, q, max_rows=3))) for q in queries]
    assert obs[0] == "name | age | net_worth\nAnn | 25 | 1.5\nBob | 40 | 2.0\nCid | NULL | 3.25\n... 5 more rows"
    assert obs[1] == "Error: no such column: nme"
    assert obs[2] == "name\n(no rows)"
    assert obs[3].splitlines()[:3] == ["cid | name | type | notnull | dflt_value | pk", "0 | concert_id | INTEGER | 0 | NULL | 1",
                                       "1 | singer_id | INTEGER | 0 | NULL | 0"]
    assert obs[4] == "Error: not authorized"
    assert obs[5].splitlines() == ["'two\\nlines' | x'00ff' | NULL", "two\\nlines | <blob of 2 bytes> | NULL"]
    r = sandbox.run_program(query_program(p, "SELECT * FROM song"))
    assert r.passed and len(observation(r).splitlines()) == 1 + 16
