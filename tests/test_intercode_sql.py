"""InterCode-SQL (easylemur/eval/benchmarks/intercode_sql/): a miniature of InterCode's repository
written here (its own tiny MySQL dump, four tasks, templates with InterCode's placeholders), the
reward and parser against values checked on InterCode's own code, the protocol's turn budget and
dialogue limit, the private MariaDB server (read-only, time-limited, removed afterwards) and the
SQLite mode in the sandbox. Nothing is downloaded."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest

from easylemur.eval.benchmarks.intercode_sql import server as mariadb
from easylemur.eval.benchmarks.intercode_sql.engines import MariaDBEngine, SqliteEngine
from easylemur.eval.benchmarks.intercode_sql.files import INTERCODE
from easylemur.eval.benchmarks.published import RepoFiles
from easylemur.eval.benchmarks.intercode_sql.parser import parse_action
from easylemur.eval.benchmarks.intercode_sql.protocol import play, run_budget, success_rate
from easylemur.eval.benchmarks.intercode_sql.reward import reward
from easylemur.eval.benchmarks.intercode_sql.task import build
from easylemur.eval.benchmarks import registry

NO_SERVER = mariadb.available()
needs_server = pytest.mark.skipif(bool(NO_SERVER), reason=NO_SERVER or "")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

# ----------------------------------------------------------------------------- the miniature

PROMPTS = '''
class PromptTemplate():
    def __init__(self, language, setting):
        self.language = language.upper()
        self.setting = setting

    def get_retry_msg(self):
        return f"""No {self.language} found; answer in a {self.language} block."""


class TemplateV2(PromptTemplate):
    def get_query_msg(self, query):
        self.query = query
        return f"""Q: \\"{query}\\"."""

    def get_obs_msg(self, observation, reward):
        if isinstance(observation, str) and observation == "" or isinstance(observation, list) and len(observation) == 0:
            observation = "Nothing"
        return f"""{self.setting} said: {observation}
Reward: {reward}
Again: \\"{self.query}\\""""


class TemplateSQLGame(TemplateV2):
    def get_init_msg(self):
        return f"""Play {self.language} on a {self.setting}."""
'''

UTILS = '''
import re
SQL_KEYWORDS = ["SHOW", "SELECT", "DESCRIBE", "DESC"]

def sql_parser(action):
    if action.startswith(f"SQL: "):
        return action, True
    if action.strip() == "":
        return "NOTHING HERE", False
    return action, False

def handicap_sql(record):
    handicap = "TABLES:\\n"
    for name, columns in record["db_tables"].items():
        handicap += f'* {name}: {str(columns)}\\n'
    return handicap
'''

RUNNER = 'SETTING_MAP = {"sql": "Toy Database", "bash": "Shell"}\n'
POLICIES = '''
class ChatGPTPolicy:
    def __init__(self, language, setting, template, dialogue_limit=None, model="m", response_limit=40):
        pass


class HFChatPolicy:
    def __init__(self, language, setting, template, dialogue_limit=None, model="m", response_limit=40):
        if model in ["other"]:
            self.stop_sequences = ["[X]"]
        elif model in ["lemur-70b-chat-v1"]:
            self.stop_sequences = ["<|im_start|>", "<|im_end|>", "Halt:", "Task:", "Output:"]

    def prepare_dialogue(self, query, observation, reward):
        if len(self.dialogue) == 0:
            self.dialogue += [{"role": "system", "content": f"Be an {self.language} expert."}]
            self.dialogue += [{"role": "user", "content": self.template.get_init_msg() + "\\n" + query}]

    def forward(self, query, observation, reward, available_actions):
        self.dialogue.append({"role": "assistant", "content": f"```{self.language.lower()}\\n{action}\\n```"})
'''
SQL_ENV = '''
class SqlEnv:
    name = "ic_sql"

    def exec_action(self, action):
        try:
            pass
        except Exception as err:
            self.observation = f"Failed: {err.msg}"
'''
DUMP = """-- a miniature in MySQL's dump syntax
CREATE USER 'admin'@'%' IDENTIFIED BY 'admin';
GRANT ALL PRIVILEGES ON *.* TO 'admin'@'%';
CREATE DATABASE IF NOT EXISTS `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci */;
USE `shop`;
/*!40101 SET NAMES utf8 */;
DROP TABLE IF EXISTS `item`;
CREATE TABLE `item` (
  `Item_ID` int NOT NULL AUTO_INCREMENT,
  `Name` text COLLATE utf8mb4_general_ci,
  `Price` decimal(6,2) DEFAULT NULL,
  PRIMARY KEY (`Item_ID`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
LOCK TABLES `item` WRITE;
INSERT INTO `item` VALUES (1,'pen',1.50),(2,'ink',3.00),(3,'pad',2.25),(4,'cap',1.50);
UNLOCK TABLES;
"""
TASKS = [
    {"db": "shop", "query": "Names of items by price, cheapest first?", "hardness": "easy",
     "gold": "SELECT Name FROM item ORDER BY Price, Item_ID", "db_tables": {"item": ["Item_ID", "Name", "Price"]}},
    {"db": "shop", "query": "How many items?", "gold": "SELECT count(*) FROM item",
     "db_tables": {"item": ["Item_ID", "Name", "Price"]}},
    {"db": "shop", "query": "Items priced 1.50?", "gold": "SELECT Name FROM ITEM WHERE Price = 1.5",
     "db_tables": {"item": ["Item_ID", "Name", "Price"]}},
    {"db": "shop", "query": "Items over 100?", "gold": "SELECT Name FROM item WHERE Price > 100",
     "db_tables": {"item": ["Item_ID", "Name", "Price"]}},
]


def write_intercode(root: Path) -> Path:
    files = {"experiments/utils/prompts.py": PROMPTS, "experiments/utils/utils.py": UTILS,
             "experiments/eval_n_turn.py": RUNNER, "experiments/policies.py": POLICIES,
             "intercode/envs/sql/sql_env.py": SQL_ENV, "data/sql/spider/ic_spider_dbs.sql": DUMP,
             "data/sql/spider/ic_spider_dev.json": json.dumps(TASKS)}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return build(str(write_intercode(tmp_path_factory.mktemp("ic") / "intercode")))


class Scripted:
    """A chat that answers from a list (the last answer repeated) and keeps what it was sent."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, messages, stop):
        self.seen.append(messages)
        return self.replies[min(len(self.seen), len(self.replies)) - 1]


class Rows:
    """A session whose queries return fixed rows: the gold's and anything else's."""

    name = "fake"

    def __init__(self, gold_rows, other_rows):
        self.gold_rows, self.other_rows, self.ran = gold_rows, other_rows, []

    def execute(self, sql):
        self.ran.append(sql)
        return (self.gold_rows if sql.startswith("SELECT Name FROM item ORDER") else self.other_rows), None


def test_fetched_file_by_file_into_the_cache(tmp_path, monkeypatch):
    import functools
    import http.server
    import threading

    from easylemur.eval.benchmarks.intercode_sql.files import COMMIT

    write_intercode(tmp_path / "site" / COMMIT)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("EASYLEMUR_INTERCODE_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
        monkeypatch.setenv("EASYLEMUR_INTERCODE_CACHE", str(tmp_path / "cache"))
        fetched = build(None)
        assert len(fetched.problems) == 4 and fetched.texts.setting == "Toy Database"
        assert fetched.dump().read_text() == DUMP and (tmp_path / "cache" / "data/sql/spider/ic_spider_dbs.sql").is_file()
    finally:
        httpd.shutdown()
        httpd.server_close()


# ----------------------------------------------------------------------------- texts, parser, reward


def test_texts_come_from_the_files(task):
    t = task.texts
    assert t.init_msg == "Play SQL on a Toy Database." and t.setting == "Toy Database"
    assert t.query_msg("Q1?") == 'Q: "Q1?".'
    assert t.obs_msg([], 0.5, "Q1?") == 'Toy Database said: Nothing\nReward: 0.5\nAgain: "Q1?"'
    assert t.obs_msg([("pen",)], 1, "Q1?").startswith("Toy Database said: [('pen',)]\n")
    assert t.retry_msg() == "No SQL found; answer in a SQL block."
    assert t.error_msg("bad") == "Failed: bad" and t.env_name == "ic_sql" and t.response_limit == 40
    assert t.keywords == ("SHOW", "SELECT", "DESCRIBE", "DESC") and t.sql_prefix == "SQL: "
    # Lemur's fork: its hf_chat policy as run for lemur-70b-chat-v1, and its parser's empty-block word
    assert t.hf_system == "Be an SQL expert." and t.hf_separator == "\n" and t.no_action == "NOTHING HERE"
    assert t.hf_stops == ("<|im_start|>", "<|im_end|>", "Halt:", "Task:", "Output:")
    assert t.fenced("SELECT 1") == "```sql\nSELECT 1\n```"
    # the handicap: handicap_sql's header, then a line per table with its columns
    assert t.handicap(TASKS[0]["db_tables"]) == "TABLES:\n* item: ['Item_ID', 'Name', 'Price']\n"
    assert registry.lookup("intercode_sql")[0].kind == registry.AGENT and [p.task_id for p in task.problems] == [0, 1, 2, 3]


# Each (reply, expected) was checked against the sql_parser of Lemur's fork of InterCode
# (experiments/utils/utils.py; InterCode's own agrees on all but the empty block).
PARSES = [
    ("```sql\nSELECT name FROM t;\n```", ("SELECT name FROM t", True)),
    ("SELECT a FROM b; DROP TABLE b", ("SELECT a FROM b", True)),
    ("SQL: SELECT 1", ("S", True)),  # InterCode indexes one character after the prefix
    ("I think SHOW TABLES; now", ("SHOW TABLES", True)),
    ("```\nDROP TABLE t\n```", ("DROP TABLE t", False)),
    ("hello", ("hello", False)),
    ("```mysql\nSELECT 1```", ("mysql SELECT 1", False)),
    ("```sql\nselect *\nfrom t```", ("select * from t", True)),
    ("a\\_b SELECT x\\_y", ("SELECT x_y", True)),
    ("text DESCRIBE t", ("DESCRIBE t", True)),
    ("select lower", ("select lower", False)),
    ("```sql ; ```", ("NO ACTION", False)),  # Lemur's fork's parser (InterCode's raised here)
]


@pytest.mark.parametrize("reply,expected", PARSES)
def test_parser_as_intercodes(reply, expected):
    assert parse_action(reply, ("SHOW", "SELECT", "DESCRIBE", "DESC"), "SQL: ", "NO ACTION") == expected


# Each (agent rows, gold rows, reward) was checked against InterCode's own SqlEnv.get_reward
# (intercode/envs/sql/sql_env.py, run with scipy's kendalltau) on the same rows.
REWARDS = [
    ([(1, "a"), (2, "b")], [(1, "a"), (2, "b")], 1.0),
    ([(3,), (2,), (1,)], [(1,), (2,), (3,)], -1.0),  # the order reversed: tau = -1
    ([(1,), (2,), (3,)], [(1,), (2,)], 0.67),  # IoU 2/3, same order
    ([("x",)], [("x",)], 1.0),  # one shared row: tau undefined, the IoU as is
    (None, [(1,)], 0.0),  # a statement without a result set
    ("Error executing query: bad", [(1,)], 0.0),
    ([], [], 1),  # both empty: the int 1
    ([], [(1,)], 0.0),
    ([(1,), (1,), (2,)], [(1,), (2,), (2,)], 0.5),  # multisets: 2 shared of 4
    ([("a",), ("c",), ("b",), ("d",)], [("a",), ("b",), ("c",), ("d",)], 0.67),  # one swap: tau 2/3
    ([(1,)], [(1.0,)], 0.0),  # rows compare as their text: 1 is not 1.0
    ([(9,), (10,)], [(10,), (9,)], -1.0),
    ([(Decimal("1.50"),)], [(Decimal("1.50"),)], 1.0),
    ([("a",), ("a",), ("b",)], [("a",), ("b",), ("a",)], -0.5),  # ties
    ([(1,), (5,), (6,)], [(1,), (2,), (3,)], 0.2),
]


@pytest.mark.parametrize("agent,gold,expected", REWARDS)
def test_reward_as_intercodes(agent, gold, expected):
    got = reward(agent, gold)
    assert got == expected and type(got) is type(expected)


# ----------------------------------------------------------------------------- the protocol


def test_dialogue_limit_and_turn_budget(task):
    p = task.problems[0]
    chat = Scripted(["```sql\nSELECT Name FROM item\n```"])  # never right: ten turns
    rec = play(task, p, chat, Rows([("pen",), ("cap",)], [("ink",)] * 60), turns=10, dialogue_limit=5, policy="chat")
    assert rec["summary"] == {"max_reward": 0.0, "max_reward_idx": 0, "turns_taken": 10, "turns_max": 10}
    assert len(chat.seen) == 10 and rec["turn_history"]["rewards"] == [0.0] * 10
    assert [m["role"] for m in chat.seen[0]] == ["system", "system", "user"]
    assert chat.seen[0][1]["content"] == task.texts.handicap(p.db_tables)
    assert [len(m) for m in chat.seen] == [3, 5, 7, 7, 7, 7, 7, 7, 7, 7]  # the first two and the last five
    for msgs in chat.seen[3:]:
        assert [m["role"] for m in msgs] == ["system", "system", "user", "assistant", "user", "assistant", "user"]
        assert msgs[0]["content"] == task.texts.init_msg and not any(m["content"] == 'Q: "%s".' % p.query for m in msgs)
    # the observation shown: at most 50 rows; the assistant's message is the parsed action
    assert chat.seen[1][-1]["content"].count("('ink',)") == 50 and chat.seen[1][-2]["content"] == "SELECT Name FROM item"
    assert rec["turn_history"]["observations"][0].count("('ink',)") == 60  # the record keeps it whole
    # no handicap: the template and the question are the first two
    chat = Scripted(["```sql\nSELECT Name FROM item\n```"])
    play(task, p, chat, Rows([], []), turns=2, handicap=False, policy="chat")
    assert [m["role"] for m in chat.seen[0]] == ["system", "user"]


def test_ends_at_reward_one_and_retries_non_code(task):
    p = task.problems[0]
    chat = Scripted(["Let me think.", "```sql\nSELECT Name FROM item\n```",
                     "```sql\nSELECT Name FROM item ORDER BY Price, Item_ID\n```", "never asked"])
    rec = play(task, p, chat, Rows([("pen",), ("cap",)], [("pen",)]), turns=10, policy="chat")
    h = rec["turn_history"]
    assert h["rewards"] == [0, 0.5, 1.0] and h["valid_action"] == [False, True, True] and len(chat.seen) == 3
    assert h["observations"][0] == task.texts.retry_msg() and rec["summary"]["turns_taken"] == 3
    assert rec["summary"]["max_reward"] == 1.0 and rec["summary"]["max_reward_idx"] == 2
    # the retry message and its reward 0 are what the model sees next, the query again
    assert chat.seen[1][-1]["content"] == f'Toy Database said: {task.texts.retry_msg()[:40]}\nReward: 0\nAgain: "{p.query}"'
    # an endpoint error: InterCode's "blocked"
    def broken(messages, stop):
        raise RuntimeError("context too long")
    rec = play(task, p, broken, Rows([], []), policy="chat")
    assert rec["turn_history"]["actions"] == ["blocked"] and rec["summary"]["max_reward"] == 0


def test_lemur_policy_as_the_fork_ran_it(task):
    p = task.problems[0]
    t = task.texts
    chat = Scripted(["Sure.\n```sql\nSELECT Name\nFROM item;\n```\nHalt: done", "no code here"])
    rec = play(task, p, chat, Rows([("pen",), ("cap",)], [("ink",)]), turns=10, dialogue_limit=5)
    assert rec["summary"]["turns_taken"] == 10 and rec["easylemur"]["policy"] == "lemur"
    first = chat.seen[0]  # the handicap as system, then the template and the question as one user message
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[0]["content"] == t.handicap(p.db_tables) + "\n"  # sent with the fork's newline before <|im_end|>
    assert first[1]["content"] == t.init_msg + t.query_msg(p.query) + "\n"
    second = chat.seen[1]  # the parsed query kept as a fenced block, then the observation
    assert second[2] == {"role": "assistant", "content": "```sql\nSELECT Name FROM item\n```\n"}
    assert second[3]["content"] == t.obs_msg([("ink",)], 0.0, p.query) + "\n"
    assert chat.seen[2][4]["content"] == "no code here\n"  # not code: kept as parsed
    assert [len(m) for m in chat.seen] == [2, 4, 6, 7, 7, 7, 7, 7, 7, 7]
    assert all(m[1]["content"].startswith(t.init_msg) for m in chat.seen)  # the question stays (the first two kept)
    # without the handicap: the fork's own system message, the template and question split by its separator
    chat = Scripted(["```sql\nSELECT Name FROM item ORDER BY Price, Item_ID\n```"])
    rec = play(task, p, chat, Rows([("pen",), ("cap",)], []), handicap=False)
    assert chat.seen[0] == [{"role": "system", "content": t.hf_system + "\n"},
                            {"role": "user", "content": t.init_msg + "\n" + t.query_msg(p.query) + "\n"}]
    assert rec["summary"]["max_reward"] == 1.0 and rec["summary"]["turns_taken"] == 1
    # stop sequences sent (an endpoint takes four) and cut here; an endpoint error is an empty reply

    def broken(messages, stop):
        assert tuple(stop) == t.hf_stops
        raise RuntimeError("422")
    rec = play(task, p, broken, Rows([], []), turns=2)
    assert rec["turn_history"]["actions"] == ["", ""] and rec["turn_history"]["rewards"] == [0, 0]
    assert len(rec["easylemur"]["errors"]) == 2


# ----------------------------------------------------------------------------- MariaDB


@needs_server
def test_mariadb_episodes_and_refusals(task):
    with mariadb.MariaDB(task.dump(), statement_seconds=1.0) as server:
        where = Path(server.dir)
        assert server.databases == ["shop"] and oct(where.stat().st_mode & 0o777) == "0o700"
        engine = MariaDBEngine(server)
        good = {p.query: p.gold for p in task.problems}

        def chat(messages, stop):  # right for 0 and 3 (both empty); 1 off by one; 2: two shared rows, reversed
            q = re.search(r'(?:Q: |Again: )"(.*)"', messages[-1]["content"]).group(1)
            if "How many" in q:
                return "SELECT count(*) + 1 FROM item"
            if "1.50" in q:
                return "```sql\nSELECT Name FROM item WHERE Price < 3 ORDER BY Item_ID DESC\n```"
            return "```sql\n" + good[q] + "\n```"

        records = run_budget(task, chat, engine, 10, concurrency=2)
        assert [r["summary"]["max_reward"] for r in records] == [1.0, 0.0, -0.67, 1]
        assert [r["summary"]["turns_taken"] for r in records] == [1, 10, 10, 1] and success_rate(records) == 0.5
        assert records[0]["turn_history"]["observations"][0] == "[('pen',), ('cap',), ('pad',), ('ink',)]"
        assert records[1]["turn_history"]["observations"][0] == "[(5,)]" and records[0]["hardness"] == "easy"
        assert records[0]["environment"] == "ic_sql" and records[0]["easylemur"]["engine"] == "mariadb"

        s = engine.session("shop")
        rows, err = s.execute("SELECT Price FROM item WHERE Item_ID = 1")
        assert rows == [(Decimal("1.50"),)] and err is None
        # the read-only account: no host files, no writes, no other database, and a time limit
        assert s.execute("SELECT LOAD_FILE('/etc/passwd')") == ([(None,)], None)
        for sql in ("CREATE TABLE t2 (a int)", "INSERT INTO item VALUES (9, 'x', 1)", "DROP TABLE item",
                    "SELECT 1 INTO OUTFILE '/tmp/easylemur-ic-out.txt'", "SELECT * FROM mysql.user"):
            rows, err = s.execute(sql)
            assert rows is None and err and ("denied" in err or "Access" in err), (sql, err)
        assert not os.path.exists("/tmp/easylemur-ic-out.txt")
        t = time.monotonic()
        rows, err = s.execute("SELECT SLEEP(100)")
        assert time.monotonic() - t < 5 and "max_statement_time" in err
        assert s.execute("SELECT count(*) FROM item") == ([(4,)], None)  # the session goes on
        s.close()
        # a result past MAX_ROWS is cut there, the rest dropped with the connection
        import easylemur.eval.benchmarks.intercode_sql.engines as engines

        s, keep = engine.session("shop"), engines.MAX_ROWS
        engines.MAX_ROWS = 2
        try:
            assert s.execute("SELECT Item_ID FROM item ORDER BY Item_ID") == ([(1,), (2,)], None) and s.cut
        finally:
            engines.MAX_ROWS = keep
        assert s.execute("SELECT count(*) FROM item") == ([(4,)], None)
        s.close()
        # a malicious trajectory through the protocol: refused or cut off, never written
        chat2 = Scripted(["```sql\nSELECT SLEEP(100)\n```", "CREATE TABLE x (a int)", "SELECT LOAD_FILE('/etc/passwd')"])
        rec = play(task, task.problems[0], chat2, engine.session("shop"), turns=3)
        obs = rec["turn_history"]["observations"]
        assert "max_statement_time" in obs[0] and obs[1] == task.texts.retry_msg() and obs[2] == "[(None,)]"
        root = server.root()
        cur = root.cursor()
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'shop'")
        assert [r[0] for r in cur.fetchall()] == ["item"]
        cur.execute("SELECT count(*) FROM shop.item")
        assert cur.fetchall() == [(4,)]
        root.close()
    assert not where.exists()  # the server's directory is gone


@needs_server
def test_mariadb_stops_on_interrupt(task):
    where = None
    with pytest.raises(KeyboardInterrupt):
        with mariadb.MariaDB(task.dump(), statement_seconds=1.0) as server:
            where, proc = Path(server.dir), server.proc
            raise KeyboardInterrupt
    assert not where.exists() and proc.poll() is not None


# ----------------------------------------------------------------------------- SQLite


@needs_bwrap
def test_sqlite_mode(task, tmp_path):
    from easylemur.eval.sandbox import Sandbox

    db = tmp_path / "spider" / "database" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE item (Item_ID integer primary key, Name text, Price real)")
    conn.executemany("INSERT INTO item VALUES (?, ?, ?)", [(1, "pen", 1.5), (2, "ink", 3.0), (3, "pad", 2.25), (4, "cap", 1.5)])
    conn.commit()
    conn.close()
    sandbox = Sandbox(timeout=10)
    sandbox.check()
    engine = SqliteEngine(tmp_path / "spider", sandbox, workers=2, statement_seconds=1.0)
    s = engine.session("shop")
    assert s.execute("SELECT Name FROM item ORDER BY Price, Item_ID") == ([("pen",), ("cap",), ("pad",), ("ink",)], None)
    rows, err = s.execute("DELETE FROM item")
    assert rows is None and "not authorized" in err
    rows, err = s.execute("SHOW TABLES")  # MySQL's; SQLite has none
    assert rows is None and "syntax error" in err
    rows, err = s.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
    assert rows is None and "budget" in err
    chat = Scripted(["```sql\nSELECT Name FROM item ORDER BY Price, Item_ID\n```"])
    rec = run_budget(task, chat, engine, 10, concurrency=1)[0]
    assert rec["summary"]["max_reward"] == 1.0 and rec["easylemur"]["engine"] == "sqlite"
    assert RepoFiles.locate(INTERCODE, str(task.files.root)).root == task.files.root


@needs_server
def test_the_suite_row(task, tmp_path, monkeypatch):
    """The lemur suite's row through suite.run_row: InterCode's log file, the score, the skip reason."""
    import types

    from easylemur.eval.runs import suite
    from easylemur.eval.sandbox import Sandbox

    gold = {p.query: p.gold for p in task.problems}

    class Client:
        def chat(self, messages, *, max_tokens, temperature=0.0, seed=0, stop=()):
            q = re.search(r'(?:Q: |Again: )"(.*)"', messages[-1]["content"]).group(1)
            return "```sql\n" + gold[q] + "\n```" if "How many" not in q else "SHOW TABLES"

    spec = suite.load_suite("lemur")["tasks"]["intercode_sql"]
    args = types.SimpleNamespace(data_map={"intercode_sql": str(task.files.root)}, data_dir=None, limit=0, seed=0,
                                 concurrency=2, workers=1, turns=3)
    access = types.SimpleNamespace(client=Client(), server=None)
    row = suite.run_row("intercode_sql", spec, access, Sandbox(), args, tmp_path)
    assert row["score"] == 0.75 and row["n"] == 4 and row["metric"] == "success@3" and row["policy"] == "lemur"
    log = json.loads((tmp_path / "intercode_sql" / "ic_sql_multiturn_3_turns.json").read_text())
    assert sorted(log) == ["0", "1", "2", "3"] and log["1"]["turn_history"]["actions"] == ["SHOW TABLES"] * 3
    assert log["1"]["turn_history"]["observations"][0] == "[('item',)]"
    row = suite.run_row("intercode_sql", {**spec, "engine": "sqlite"}, access, Sandbox(), args, tmp_path)
    assert "skipped" in row and "spider" in row["skipped"]  # no Spider folder given
    monkeypatch.setattr(mariadb, "_which", lambda name: None)  # no MariaDB here: one line saying how to install it
    row = suite.run_row("intercode_sql", spec, access, Sandbox(), args, tmp_path)
    assert row["skipped"].startswith("no MariaDB server here") and "apt-get install -y mariadb-server" in row["skipped"]
