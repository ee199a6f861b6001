"""Honest Spider predictions and the verdict test-suite-sql-eval gives each (taoyds/test-suite-sql-eval
at e97acc5, `evaluation.py` `evaluate` reading one prediction per line, then `exec_eval.py`
`eval_exec_match` with plug_value off). Each verdict is derived by hand from the reference's rules,
and the function of the reference that decides it is named beside it; nothing here runs the
reference. `tests/test_sql.py` checks easylemur's sandboxed match against them.

The database is small and made here: a `reading` table whose column is named `value` (Spider's
value placeholder), duplicate sites, a NULL value and a NULL note, and a note that reads 'value'."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import NamedTuple

SCHEMA = "CREATE TABLE reading (id INTEGER PRIMARY KEY, site TEXT, value REAL, note TEXT, taken INTEGER);"
ROWS = [(1, "north", 1.5, "ok", 2019), (2, "north", 2.0, "value", 2020), (3, "south", 2.0, None, 2021),
        (4, "east", None, "ok", 2019), (5, "south", 1.5, "ok", 2020)]


def make_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(SCHEMA)
    conn.executemany("INSERT INTO reading VALUES (?, ?, ?, ?, ?)", ROWS)
    conn.commit()
    conn.close()
    return path


class Case(NamedTuple):
    gold: str
    pred: str  # the prediction as its line in the reference's prediction file
    verdict: int  # the reference's (1: execution match)
    why: str  # the reference's function that decides it, and how
    keep_distinct: bool = False  # evaluation.py --keep_distinct
    here: int = -1  # easylemur's verdict where it differs on purpose (-1: the reference's)


NORTH = "SELECT id FROM reading WHERE site = 'north'"

CASES = [
    # --- evaluation.py `evaluate`: p_str = p_str.replace("value", "1"), case-sensitive, anywhere,
    # in the prediction only.
    Case("SELECT avg(value) FROM reading", "SELECT avg(value) FROM reading", 0,
         "evaluate: the prediction runs avg(1) = 1.0; the gold avg(value) = 1.75"),
    Case("SELECT max(value) FROM reading", "SELECT max(Value) FROM reading", 1,
         "evaluate: 'Value' is not 'value' (the replacement is case-sensitive); SQLite's names are not"),
    Case("SELECT count(*) FROM reading WHERE note = 'value'", "SELECT count(*) FROM reading WHERE note = 'value'", 0,
         "evaluate: the literal becomes '1' in the prediction: 0 rows counted against the gold's 1"),
    Case("SELECT count(*) FROM reading WHERE id > 1", "SELECT count(*) FROM reading WHERE id > value", 1,
         "evaluate: Spider's value placeholder becomes 1 (the line's last word: no blank after it)"),
    Case("SELECT id FROM reading WHERE id = 1", "SELECT id FROM reading WHERE id=value", 1,
         "evaluate: replaced with no blank around it too"),
    # --- exec_eval.py `postprocess`: "> =", "< =", "! =" closed up in both queries.
    Case("SELECT id FROM reading WHERE id BETWEEN 2 AND 3", "SELECT id FROM reading WHERE id > = 2 AND id < = 3", 1,
         "postprocess: '> =' and '< =' are closed up"),
    # --- `remove_distinct` (parse.py): every DISTINCT token dropped from both, unless keep_distinct.
    Case("SELECT site FROM reading", "SELECT DISTINCT site FROM reading", 1,
         "remove_distinct: the prediction loses its DISTINCT: 5 rows each"),
    Case("SELECT site FROM reading", "SELECT DISTINCT site FROM reading", 0,
         "keep_distinct: 3 distinct sites against the gold's 5 rows", keep_distinct=True),
    Case("SELECT count(DISTINCT site) FROM reading", "SELECT count(*) FROM reading", 1,
         "remove_distinct: the gold's COUNT(DISTINCT site) runs as count(site) = 5"),
    Case("SELECT count(DISTINCT site) FROM reading", "SELECT count(*) FROM reading", 0,
         "keep_distinct: the gold counts 3 sites", keep_distinct=True),
    # --- eval_exec_match: order_matters = 'order by' in g_str.lower().
    Case("SELECT id FROM reading ORDER BY id DESC", "SELECT id FROM reading ORDER BY id", 0,
         "eval_exec_match: the gold says 'order by': rows compared in order"),
    Case("SELECT id FROM reading ORDER  BY id DESC", "SELECT id FROM reading", 1,
         "eval_exec_match: 'order  by' (two blanks) is not the substring 'order by': rows as a bag"),
    Case("SELECT id FROM reading ORDER BY id DESC", "SELECT id FROM reading ORDER BY id DESC LIMIT 5", 1,
         "result_eq: the same rows in the same order"),
    # --- `result_eq`: column permutations, multisets, Python equality of values.
    Case("SELECT site, taken FROM reading", "SELECT taken, site FROM reading", 1,
         "result_eq: a permutation of the columns makes the bags equal"),
    Case("SELECT site, value FROM reading", "SELECT value, site FROM reading", 0,
         "evaluate: the same, but the prediction's column `value` runs as the constant 1"),
    Case("SELECT site, taken FROM reading ORDER BY id", "SELECT taken, site FROM reading ORDER BY id", 1,
         "result_eq: a permutation of the columns makes the sequences equal"),
    Case("SELECT id, site, note, taken FROM reading", "SELECT taken, note, site, id FROM reading", 1,
         "result_eq: four columns (get_constraint_permutation prunes with 20 sampled rows: same verdict)"),
    Case("SELECT id, taken FROM reading WHERE id < 3",
         "SELECT id, CASE id WHEN 1 THEN 2020 ELSE 2019 END FROM reading WHERE id < 3", 0,
         "result_eq/quick_rej: values swapped between rows are no column permutation"),
    Case("SELECT site FROM reading", "SELECT site FROM reading WHERE site != 'east' UNION ALL SELECT 'north'", 0,
         "result_eq/multiset_eq: the same set of rows with other multiplicities"),
    Case("SELECT value FROM reading WHERE id = 2", "SELECT 2", 1, "result_eq: 2 == 2.0 in Python"),
    Case("SELECT value FROM reading WHERE id = 4", "SELECT NULL", 1, "result_eq: None == None"),
    Case("SELECT value FROM reading WHERE id = 4", "SELECT 0", 0, "result_eq: None != 0"),
    Case("SELECT taken FROM reading WHERE id = 1", "SELECT '2019'", 0, "result_eq: '2019' != 2019"),
    Case("SELECT id FROM reading WHERE id > 10", "SELECT site, note FROM reading WHERE 0", 1,
         "result_eq: two empty results match, whatever their columns"),
    # --- `replace_cur_year` in exec_on_db_, on both queries.
    Case("SELECT count(*) FROM reading WHERE taken = YEAR(CURDATE())", "SELECT count(*) FROM reading WHERE taken = 2020",
         1, "replace_cur_year: YEAR(CURDATE()) runs as 2020"),
    # --- PRAGMAs: the reference runs them as any query (`exec_on_db_`: cursor.execute, fetchall).
    Case("SELECT 'main'", "SELECT name FROM pragma_database_list", 1,
         "exec_on_db_: a read-only pragma table in a SELECT"),
    Case("SELECT 5", "SELECT count(*) FROM pragma_table_info('reading')", 1, "exec_on_db_: the table's five columns"),
    Case("SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('reading')",
         "PRAGMA table_info(reading)", 1, "exec_on_db_: a PRAGMA statement's rows"),
    Case("SELECT 0", "PRAGMA user_version", 1, "exec_on_db_: a setting read"),
    Case("SELECT id FROM reading WHERE 0", "PRAGMA user_version = 7", 1,
         "exec_on_db_: the write runs and returns no rows, matching the empty gold (and the database changes); "
         "easylemur refuses writes", here=0),
    # --- several statements: remove_distinct keeps sqlparse's first statement (sqlparse.parse(s)[0]);
    # with keep_distinct all of them reach cursor.execute, which runs one statement only.
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + "; SELECT id FROM reading", 1,
         "remove_distinct: sqlparse's first statement is kept, the second dropped"),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + "; SELECT id FROM reading", 0,
         "exec_on_db_: sqlite3 'You can only execute one statement at a time'", keep_distinct=True),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + ";", 1, "exec_on_db_: one statement and its ';'",
         keep_distinct=True),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + ";;", 1,
         "remove_distinct: the first statement ends at the first ';'"),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + ";;", 0,
         "exec_on_db_: a second (empty) statement after the first is refused by sqlite3", keep_distinct=True),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + "; -- the north", 1,
         "exec_on_db_: a comment after the ';' is no second statement", keep_distinct=True),
    Case("SELECT id FROM reading WHERE site = 'north'",
         "SELECT id FROM reading WHERE site = 'a;b' OR site = 'north'; SELECT 1", 1,
         "remove_distinct: a ';' in a literal ends nothing"),
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + "; # the north", 0,
         "remove_distinct: sqlparse reads '# ...' as a comment of the first statement; sqlite3 does not, and "
         "refuses it as a second statement"),
    # --- the prediction file's line: evaluate strips it and cuts it at its first tab.
    Case("SELECT id FROM reading WHERE site = 'north'", NORTH + "\tnorth ids", 1,
         "evaluate: l.strip().split('\\t')[0]"),
    # --- transaction statements are statements like any other.
    Case("SELECT id FROM reading WHERE 0", "BEGIN", 1, "exec_on_db_: BEGIN returns no rows, as the gold"),
]
