"""An InterCode-SQL-style agent task: the model queries a real SQLite database (a fresh read-only
copy in the sandbox per query), sees the result rows, and submits a query; success is Spider's
execution match of the submitted query against the gold one (`eval/sql.py`)."""

from __future__ import annotations

from typing import Any, Union

from easylemur.eval import sql
from easylemur.eval.agent import AgentTask, fenced
from easylemur.eval.sandbox import Program, ProgramResult


def load(path: str) -> list[sql.SqlProblem]:
    """Spider's (or BIRD's) layout, as the single-turn Spider task reads it."""
    return sql.load_sql(path)


class SqlAgent(AgentTask):
    name = "sql_agent"
    languages = ("sql", "sqlite")
    rules = ("You can query the SQLite database: put one query in <execute> ... </execute> (or a ```sql block) and "
             "you will see its result rows. Give your final query in <solution> ... </solution>, or reply `submit` "
             "to submit the last query you ran; it is right when its result equals the expected one.")

    def instruction(self, p: sql.SqlProblem) -> str:
        evidence = f"\nEvidence: {p.evidence}" if p.evidence else ""
        return f"The database's schema:\n\n{p.schema}\n\nQuestion: {p.question}{evidence}"

    def action(self, p: sql.SqlProblem, cells: list[str], code: str, observation_chars: int) -> Program:
        return sql.query_program(p, sql.first_statement(code))

    def observe(self, result: ProgramResult, timeout: float) -> str:
        return sql.observation(result)

    def solution(self, p: Any, content: str, cells: list[str]) -> str:
        if not content.strip():  # `submit`: the last query the model ran
            return sql.first_statement(cells[-1]) if cells else ""
        code = fenced(content, self.languages)
        return sql.first_statement(code if code is not None else content)

    def judge(self, p: sql.SqlProblem, answer: str) -> Union[Program, bool]:
        if not answer.strip():
            return False
        return sql.match_program(p, p.gold, answer)
