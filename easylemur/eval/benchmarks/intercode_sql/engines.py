"""Where an episode's queries run: InterCode's engine (`MariaDBEngine`, a private server, the
read-only account) or, faster, Spider's own SQLite files (`SqliteEngine`, each query a program in
the sandbox, read-only). A session is one episode's connection to its task's database; its
`execute(sql)` returns (rows, None) with rows a list of tuples (or None for a statement without
a result set), or (None, message) for an error, as InterCode's `exec_action` distinguishes them.

A result is kept up to `MAX_ROWS` rows (InterCode fetched them all); past that the rest is
dropped and the session notes it (`cut`).

SQLite differs from MySQL in what runs and what it returns: there is no SHOW TABLES / DESCRIBE
(the handicap gives the tables and columns), its error messages are SQLite's, its types are
dynamic (an average is a float, never a Decimal; text compares case-sensitively), and a MySQL-only
function or syntax fails; the reward compares the rows' Python text, so a value of another type
(1.5 vs Decimal('1.5')) is another row.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Optional

from easylemur.eval.benchmarks.intercode_sql.server import MariaDB
from easylemur.eval.benchmarks.spider.sql import READ_PRAGMAS
from easylemur.eval.sandbox import PYTHON, Program, Sandbox, SlotPool

MAX_ROWS = 100_000
WATCHDOG_GRACE_S = 5.0  # past max_statement_time, the harness kills the statement itself


class MariaDBSession:
    def __init__(self, server: MariaDB, database: str):
        self.server, self.database = server, database
        self.conn: Any = None
        self.cut = False

    def execute(self, sql: str) -> tuple[Optional[list], Optional[str]]:
        if self.conn is None:
            try:
                self.conn = self.server.connect(self.database)
            except Exception as e:  # noqa: BLE001 - e.g. the server went away: the query fails, the run goes on
                return None, getattr(e, "msg", None) or str(e)
        conn = self.conn
        timer = threading.Timer(self.server.statement_seconds + WATCHDOG_GRACE_S, self.server.kill_query,
                                (conn.connection_id,))
        timer.daemon = True
        timer.start()
        cur = None
        try:
            cur = conn.cursor()
            cur.execute(sql)
            if cur.description is None:
                return None, None
            rows = cur.fetchmany(MAX_ROWS + 1)
            if len(rows) > MAX_ROWS:
                self.cut = True
                self._drop(kill=True)  # the unread rest goes with the connection
                return [tuple(r) for r in rows[:MAX_ROWS]], None
            return [tuple(r) for r in rows], None
        except Exception as e:  # noqa: BLE001 - every failure is the agent's observation
            msg = getattr(e, "msg", None) or str(e)
            if getattr(e, "errno", None) in (None, 2006, 2013, 2055) or not conn.is_connected():
                self._drop()
            return None, msg
        finally:
            timer.cancel()
            if self.conn is not None and cur is not None:
                try:
                    cur.close()
                except Exception:  # noqa: BLE001
                    self._drop(kill=True)

    def _drop(self, kill: bool = False) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                if kill:  # a statement may still be sending rows
                    self.server.kill_query(conn.connection_id)
                conn.close()
            except Exception:  # noqa: BLE001 - a connection with unread rows may refuse a clean close
                pass

    def close(self) -> None:
        self._drop()


class MariaDBEngine:
    """InterCode's engine: a MySQL-compatible server (here MariaDB) with the dump loaded."""

    name = "mariadb"

    def __init__(self, server: MariaDB):
        self.server = server

    def session(self, database: str) -> MariaDBSession:
        return MariaDBSession(self.server, database)


# The trusted script of a SQLite query: standard library only, run with -I -S in the sandbox.
_SCRIPT = r'''
import json, sqlite3, sys, time

job = json.load(open("job.json"))
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
PRAGMAS = set(job["read_pragmas"])


def authorize(action, arg1, arg2, db, source):
    if action in ALLOWED or (action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in PRAGMAS):
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def value(v):
    return [v.hex()] if isinstance(v, bytes) else v  # a list marks a blob


conn = sqlite3.connect("file:db.sqlite?mode=ro&immutable=1", uri=True)
conn.text_factory = lambda b: b.decode(errors="ignore")
conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
deadline = time.monotonic() + job["seconds"]
conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
conn.set_authorizer(authorize)
try:
    cur = conn.execute(job["sql"])
    if cur.description is None:
        out = {"rows": None}
    else:
        rows = cur.fetchmany(job["max_rows"] + 1)
        out = {"rows": [[value(v) for v in r] for r in rows]}
except Exception as e:
    text = " ".join(str(e).split())[:300] or type(e).__name__
    out = {"error": text + (" (past its %g s budget)" % job["seconds"] if text == "interrupted" else "")}
print(job["marker"] + json.dumps(out))
'''
_MARKER = "@@easylemur-intercode-result@@"


class SqliteSession:
    def __init__(self, engine: "SqliteEngine", database: str):
        self.engine, self.database, self.cut = engine, database, False
        path = engine.spider / "database" / database / f"{database}.sqlite"
        try:
            self.db_bytes = path.read_bytes()
        except OSError as e:
            raise FileNotFoundError(f"{path}: Spider's SQLite database for {database!r} is not readable ({e})") from None

    def execute(self, sql: str) -> tuple[Optional[list], Optional[str]]:
        job = {"sql": sql, "seconds": self.engine.statement_seconds, "max_rows": MAX_ROWS, "marker": _MARKER,
               "read_pragmas": list(READ_PRAGMAS)}
        program = Program(files=(("q.py", _SCRIPT), ("job.json", json.dumps(job)), ("db.sqlite", self.db_bytes)),
                          steps=((PYTHON, "-I", "-S", "-B", "q.py"),), output_bytes=64 << 20)
        result = self.engine.slots.run(self.engine.sandbox, program)
        text = result.output
        at = text.rfind(_MARKER)
        if at < 0:
            return None, ("the query ran past the sandbox's time limit" if result.result == "timed out"
                          else f"the query could not run ({result.result})")
        try:
            out = json.loads(text[at + len(_MARKER):].strip().splitlines()[0])
        except (ValueError, IndexError):  # the output was cut (a result past the sandbox's output size)
            return None, "the query's result was too large to read back"
        if "error" in out:
            return None, out["error"]
        if out["rows"] is None:
            return None, None
        rows = [tuple(bytes.fromhex(v[0]) if isinstance(v, list) else v for v in r) for r in out["rows"]]
        if len(rows) > MAX_ROWS:
            self.cut, rows = True, rows[:MAX_ROWS]
        return rows, None

    def close(self) -> None:
        pass


class SqliteEngine:
    """Spider's SQLite databases (`<spider>/database/<db>/<db>.sqlite`), each query run read-only
    in the sandbox with a time budget."""

    name = "sqlite"

    def __init__(self, spider: str | Path, sandbox: Sandbox, workers: int = 1, statement_seconds: float = 10.0):
        self.spider, self.sandbox, self.statement_seconds = Path(spider), sandbox, float(statement_seconds)
        self.slots = SlotPool(max(1, workers))

    def session(self, database: str) -> SqliteSession:
        return SqliteSession(self, database)
