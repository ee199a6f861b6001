"""InterCode-SQL's tasks: the 1034 questions of Spider's dev set as InterCode's
`data/sql/spider/ic_spider_dev.json` holds them (the question, the gold query in MySQL, the
database, and its tables with their columns for the handicap), in file order, each known by its
index there (InterCode's task_id)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

from easylemur.eval.benchmarks.intercode_sql.files import DUMP, INTERCODE, TASKS
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, json_list
from easylemur.eval.benchmarks.intercode_sql.texts import load_texts


@dataclasses.dataclass(frozen=True)
class IcProblem:
    task_id: int  # the index in ic_spider_dev.json
    query: str  # the question
    gold: str
    db: str
    db_tables: dict = dataclasses.field(compare=False)  # {table: [column, ...]}
    hardness: Optional[str] = None


def _problems(text: str, where: str) -> list[IcProblem]:
    rows = json_list(text, where)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or any(k not in row for k in ("query", "gold", "db", "db_tables")):
            raise PublishedFilesError(f"{where}: task {i} lacks one of query, gold, db, db_tables")
        out.append(IcProblem(i, row["query"], row["gold"], row["db"], dict(row["db_tables"]), row.get("hardness")))
    return out


class InterCodeSqlTask:
    """InterCode-SQL on one copy of InterCode's files."""

    name = "intercode_sql"

    def __init__(self, files: RepoFiles):
        self.files = files
        self.texts = load_texts(files)
        self.problems = _problems(files.text(TASKS), files.where(TASKS))
        self.skipped: list = []

    @property
    def dataset(self) -> str:
        """What InterCode's records name as their dataset (its --data_path)."""
        return f"./{TASKS}"

    def dump(self) -> Path:
        """The MySQL dump of the tasks' databases (fetched when this copy is the cache)."""
        return self.files.path(DUMP)


def build(data: Optional[str], variant: str = "", prompt_format: str = "base") -> Any:
    """The registry's factory: InterCode-SQL from the copy of InterCode's repository at `data`
    (None: the fetch cache)."""
    return InterCodeSqlTask(RepoFiles.locate(INTERCODE, data))
