"""Spider (text-to-SQL scored by execution match; BIRD's rule for BIRD data), single-turn, and an
InterCode-SQL-style agent over the same problems: the model queries a real SQLite database (a
fresh read-only copy in the sandbox per query), sees the result rows, and submits a query;
success is the execution match of the submitted query against the gold one. The SQL engine,
the data and the sandbox programs are `sql.py` beside this module. Scoring is test-suite-sql-eval's
(`sql.py`'s docstring), each query within `query_seconds` (its 60 s by default; the CLI's
--sql-timeout)."""

from __future__ import annotations

import re
from typing import Optional, Sequence, Union

from easylemur.eval.agent.actions import fenced
from easylemur.eval.agent.task import AgentTask
from easylemur.eval.api import Prompt, Task
from easylemur.eval.benchmarks.spider import sql
from easylemur.eval.sandbox import Program, ProgramResult, Sandbox


class Spider(Task[sql.SqlProblem]):
    """Single-turn text-to-SQL scored by execution match (Spider's rule; BIRD's for BIRD data).

    Prompt formats:
    - `base`: the schema's CREATE TABLE statements, then "-- Using valid SQLite, answer the
      following question for the tables provided above.\\n-- Question: {question}\\nSELECT"
      (Rajkumar et al. 2022's format): ending in SELECT commits a base model to a query at once,
      with no prose or fence to get past; `extract` puts the SELECT back.
    - `chatml`: the user asks for one SQLite query in a ```sql block; the assistant turn is
      opened with "```sql\\n" and ends at the closing fence.
    """

    name = "spider"

    def __init__(self, problems: Sequence[sql.SqlProblem], prompt_format: str = "base",
                 query_seconds: float = sql.QUERY_SECONDS):
        super().__init__(problems, prompt_format)
        self.query_seconds = sql.query_budget(query_seconds)  # each scored query's budget

    def prompt(self, p: sql.SqlProblem) -> Prompt:
        hint = f"-- Evidence: {p.evidence}\n" if p.evidence else ""
        if self.prompt_format == "base":
            return Prompt(text=f"{p.schema}\n\n-- Using valid SQLite, answer the following question for the tables "
                               f"provided above.\n{hint}-- Question: {p.question}\nSELECT")
        evidence = f"Evidence: {p.evidence}\n" if p.evidence else ""
        user = (f"Here is an SQLite database schema:\n\n{p.schema}\n\n{evidence}Question: {p.question}\n\n"
                "Write one SQLite query that answers the question. Reply with the query in a ```sql block.")
        return Prompt(messages=({"role": "user", "content": user},), assistant_prefix="```sql\n")

    def stops(self) -> tuple[str, ...]:
        if self.prompt_format == "base":
            return (";", "\n\n", "\n--", "```")
        return ("```",)

    def extract(self, p: sql.SqlProblem, completion: str) -> str:
        # Every statement is kept: the reference decides what a second one does (sql.py).
        block = re.search(r"```(?:sql|sqlite)?[ \t]*\n(.*?)(?:```|\Z)", completion, re.S | re.I)
        if block:
            return sql.one_line(block.group(1))
        query = sql.one_line(completion)
        return f"SELECT {query}" if self.prompt_format == "base" else query

    def program(self, p: sql.SqlProblem, code: str) -> Program:
        # A samples file's code may span lines: the reference reads one prediction per line.
        return sql.match_program(p, p.gold, sql.one_line(code), query_seconds=self.query_seconds)

    def sized(self, sandbox: Sandbox) -> Sandbox:
        return sql.sized_sandbox(sandbox, self.problems, self.query_seconds)


class SqlAgent(AgentTask[sql.SqlProblem]):
    name = "sql_agent"
    languages = ("sql", "sqlite")
    rules = ("You can query the SQLite database: put one query in <execute> ... </execute> (or a ```sql block) and "
             "you will see its result rows. Give your final query in <solution> ... </solution>, or reply `submit` "
             "to submit the last query you ran; it is right when its result equals the expected one.")
    query_seconds = sql.QUERY_SECONDS  # the judged query's budget (an action's is sql.ACTION_SECONDS)

    def instruction(self, p: sql.SqlProblem) -> str:
        evidence = f"\nEvidence: {p.evidence}" if p.evidence else ""
        return f"The database's schema:\n\n{p.schema}\n\nQuestion: {p.question}{evidence}"

    def action(self, p: sql.SqlProblem, cells: list[str], code: str, observation_chars: int) -> Program:
        return sql.query_program(p, sql.first_statement(code))

    def observe(self, result: ProgramResult, timeout: float) -> str:
        return sql.observation(result)

    def solution(self, p: sql.SqlProblem, content: str, cells: list[str]) -> str:
        if not content.strip():  # `submit`: the last query the model ran
            return sql.first_statement(cells[-1]) if cells else ""
        code = fenced(content, self.languages)
        return sql.one_line(code if code is not None else content)  # judged as Spider's task judges it

    def judge(self, p: sql.SqlProblem, answer: str) -> Union[Program, bool]:
        if not answer.strip():
            return False
        return sql.match_program(p, p.gold, answer, query_seconds=self.query_seconds)

    def sized(self, sandbox: Sandbox) -> Sandbox:
        return sql.sized_sandbox(sandbox, self.problems, self.query_seconds)


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> Spider:
    return Spider(sql.load_sql(_data(data, "spider")), prompt_format)


def agent(data: Optional[str], variant: str = "", prompt_format: str = "base") -> SqlAgent:
    """Spider's (or BIRD's) layout, as the single-turn Spider task reads it."""
    return SqlAgent(sql.load_sql(_data(data, "sql_agent")))


def _data(data: Optional[str], name: str) -> str:
    if not data:
        raise sql.EvalDataError(f"{name} needs its data: Spider's (or BIRD's) folder")
    return data
