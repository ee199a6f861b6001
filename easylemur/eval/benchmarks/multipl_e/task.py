"""MultiPL-E: HumanEval and MBPP translated into other languages, single turn, judged by running
each completion with its tests in the sandbox (`languages.py` beside this module says how per language,
and where that differs from MultiPL-E's reference harness).

Data: MultiPL-E's published rows (`name`, `language`, `prompt`, `tests`, `stop_tokens`; also
`doctests`, `original`, `prompt_terminology`, carried along) from a local .jsonl / .jsonl.gz /
.json file (a JSON list of rows), a directory of such files (one per language), or the HF
dataset `nuprl/MultiPL-E` with config `humaneval-<lang>` / `mbpp-<lang>` where a network exists.

Prompt formats:
- `base`: the row's prompt as is (signature and doc comment; the model continues the function);
- `chatml`: as HumanEval's, the user turn "Complete the following {Language} function.\\n\\n\\n
  {prompt}" and an open assistant turn "Here is the completed function:\\n\\n\\n{prompt}" that the
  model continues; "\\n```" is one more stop.
The stops are the rows' `stop_tokens`; the completion is cut at the first one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.api import EvalDataError, Problem, Prompt, Task, read_jsonl
from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, Language, build_program, language, unavailable
from easylemur.eval.sandbox import Program

REQUIRED = ("name", "language", "prompt", "tests", "stop_tokens")
HF_DATASET = "nuprl/MultiPL-E"


@dataclasses.dataclass(frozen=True)
class MultiPLEProblem(Problem):
    """A MultiPL-E row: `task_id` is its `name`, `text` its prompt, `tests` its tests."""

    language: str = ""
    stop_tokens: tuple = ()
    doctests: str = ""
    original: str = ""
    prompt_terminology: str = ""
    where: str = ""  # file:line (or dataset:split:index) it came from, for error messages


def _problem(where: str, row: Any) -> MultiPLEProblem:
    if not isinstance(row, dict):
        raise EvalDataError(f"{where}: expected a JSON object (a MultiPL-E row)")
    for key in REQUIRED:
        if key not in row:
            raise EvalDataError(f"{where}: MultiPL-E row lacks {key!r} (needs {', '.join(REQUIRED)})")
    for key in ("name", "language", "prompt", "tests"):
        if not isinstance(row[key], str):
            raise EvalDataError(f"{where}: MultiPL-E row's {key!r} must be a string, not {type(row[key]).__name__}")
    stops = row["stop_tokens"]
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise EvalDataError(f"{where}: MultiPL-E row's 'stop_tokens' must be a list of non-empty strings")
    return MultiPLEProblem(row["name"], row["prompt"], row["tests"], language=row["language"], stop_tokens=tuple(stops),
                           doctests=str(row.get("doctests") or ""), original=str(row.get("original") or ""),
                           prompt_terminology=str(row.get("prompt_terminology") or ""), where=where)


def _read_json_list(path: Path):
    """(file:line, row) for each element of a JSON list, the line where the element starts."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip(0)
    if text[i:i + 1] != "[":
        raise EvalDataError(f"{path}:{text.count(chr(10), 0, i) + 1}: expected a JSON list of MultiPL-E rows")
    i = skip(i + 1)
    if text[i:i + 1] == "]":
        return
    while True:
        line = text.count("\n", 0, i) + 1
        try:
            row, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise EvalDataError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
        yield f"{path}:{line}", row
        i = skip(i)
        if text[i:i + 1] == ",":
            i = skip(i + 1)
        elif text[i:i + 1] == "]":
            return
        else:
            raise EvalDataError(f"{path}:{text.count(chr(10), 0, i) + 1}: expected ',' or ']' after a row")


def _read_file(path: Path):
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return read_jsonl(path)
    if path.suffix == ".json":
        return _read_json_list(path)
    raise EvalDataError(f"{path}: expected a .jsonl, .jsonl.gz or .json file of MultiPL-E rows")


def load_multipl_e(source: str | Path, config: Optional[str] = None, language_name: Optional[str] = None
                   ) -> list[MultiPLEProblem]:
    """MultiPL-E problems from a file, a directory of files (one per language; all of them, or
    those of `language_name`), or the HF dataset `source` (e.g. "nuprl/MultiPL-E") with `config`
    (e.g. "humaneval-cpp"). `language_name` keeps only the rows of that language."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz", ".json")))
        if not files:
            raise EvalDataError(f"{path}: no .jsonl or .json file of MultiPL-E rows in this directory")
        rows = [r for f in files for r in _read_file(f)]
    elif path.is_file():
        rows = list(_read_file(path))
    else:
        if not config:
            raise EvalDataError(f"MultiPL-E data {str(source)!r}: no such file or directory; pass a .jsonl/.json file, "
                                f"a directory of them, or the dataset {HF_DATASET!r} with a config such as humaneval-cpp")
        try:
            import datasets

            ds = datasets.load_dataset(str(source), config, split="test")
            rows = [(f"{source}:{config}:test:{i}", r) for i, r in enumerate(ds)]
        except Exception as e:
            raise EvalDataError(f"MultiPL-E data {str(source)!r} config {config!r}: not a local file, and the HF dataset "
                                f"could not be loaded ({type(e).__name__}: {' '.join(str(e).split())[:160]}); pass a local "
                                f"copy instead: a .jsonl/.json file of its rows or a directory of them") from None
    problems = [_problem(where, row) for where, row in rows]
    if language_name is not None:
        problems = [p for p in problems if p.language == language_name]
    if not problems:
        only = f" in language {language_name!r}" if language_name else ""
        raise EvalDataError(f"MultiPL-E data {source}: no problems{only}")
    return problems


class MultiPLE(Task[MultiPLEProblem]):
    """MultiPL-E problems of one or more languages (each row names its own)."""

    name = "multipl-e"

    def __init__(self, problems: Sequence[MultiPLEProblem], prompt_format: str = "base"):
        super().__init__(problems, prompt_format)
        self.languages: dict[str, Language] = {}
        for p in self.problems:
            if not isinstance(p, MultiPLEProblem):
                raise InputError(f"MultiPL-E: problem {p.task_id!r} is not a MultiPL-E row (load it with load_multipl_e)")
            if p.language not in self.languages:
                self.languages[p.language] = language(p.language)
        if len(self.languages) == 1:
            self.name = f"multipl-e-{next(iter(self.languages))}"
        # Each Program carries its language's wall clock (compiling counts); this is the slowest,
        # for a caller that sizes one Sandbox for them all.
        self.timeout = max((lang.timeout for lang in self.languages.values()), default=15.0)

    def check_toolchains(self) -> None:
        """InputError naming what to install when a language's toolchain is missing here."""
        for lang in self.languages.values():
            why = unavailable(lang)
            if why:
                raise InputError(f"MultiPL-E {lang.name}: {why}")

    def prompt(self, p: MultiPLEProblem) -> Prompt:
        if self.prompt_format == "base":
            return Prompt(text=p.text)
        title = self.languages[p.language].title
        return Prompt(messages=({"role": "user", "content": f"Complete the following {title} function.\n\n\n{p.text}"},),
                      assistant_prefix=f"Here is the completed function:\n\n\n{p.text}")

    def _chat_stops(self) -> tuple[str, ...]:
        return ("\n```",) if self.prompt_format == "chatml" else ()

    def stops(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for p in self.problems:
            seen.update(dict.fromkeys(p.stop_tokens))
        return tuple(seen) + self._chat_stops()

    def extract(self, p: MultiPLEProblem, completion: str) -> str:
        # The model's text up to the first of this row's stops (MultiPL-E's own cut): what
        # continues the prompt. A task mixing languages has every language's stops in stops().
        cut = len(completion)
        for s in (*p.stop_tokens, *self._chat_stops()):
            i = completion.find(s)
            if i >= 0:
                cut = min(cut, i)
        return completion[:cut]

    def program(self, p: MultiPLEProblem, code: str) -> Program:
        """prompt + completion + "\\n" + tests, with the end marker (languages.py), as a Program."""
        lang = self.languages[p.language]
        return build_program(lang, p.text, code, p.tests, where=p.where or str(p.task_id))


VARIANTS = tuple(LANGUAGES)  # multipl_e:LANG, one per language judged here


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> MultiPLE:
    if not data:
        raise EvalDataError(f"multipl_e:{variant} needs its data: MultiPL-E's rows (a .jsonl/.json file or a directory)")
    return MultiPLE(load_multipl_e(data, language_name=variant), prompt_format)
