"""Where RoboCodeGen is published: Code as Policies' notebook "Experiment_ Robot Code-Gen
Benchmark.ipynb" in google-research's repository (github.com/google-research/google-research,
`code_as_policies/`), which holds the benchmark whole: the prompts (`prompt_f_gen`,
`prompt_f_gen_flat`, `prompt_f_gen_exec`), the 37 problems with their reference solutions, test
inputs and equivalence tests (the "Problems" cell), and the harness that queries and judges
(`lmp_batch`, `lmp_fgen_batch`, `exec_safe`, `eval_test`, `eval_problems`). No other file of that
repository is read.

The notebook is found, in this order: `--data robocodegen=PATH` (the .ipynb itself, a folder
holding it, or a folder laid out as the repository: `code_as_policies/<notebook>`); under
`--data-dir D` as `D/google-research/` (laid out as the repository) or `D/code_as_policies/`;
else fetched from GitHub's raw files at the pinned commit into a cache
(`$EASYLEMUR_CAP_CACHE`, default `~/.cache/easylemur/google-research/<commit>`;
`$EASYLEMUR_CAP_URL` changes the source), written whole or not at all (`published.RepoFiles`).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Optional

from easylemur.eval.api.task import MissingData
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, Repository

COMMIT = "71896d4b6816983672aa6999e2dc92a3cfe904e4"  # google-research/google-research, with the notebook
FOLDER = "code_as_policies"
NOTEBOOK_NAME = "Experiment_ Robot Code-Gen Benchmark.ipynb"
NOTEBOOK = f"{FOLDER}/{NOTEBOOK_NAME}"


class _Notebook(Repository):
    def how(self) -> str:
        return (f"pass --data robocodegen=PATH: the notebook ({self.url}, {NOTEBOOK} at {self.commit[:12]}) or a "
                f"folder holding it, or --data-dir D with D/{FOLDER}/ holding it")


CAP = _Notebook(name="google-research", github="google-research/google-research", commit=COMMIT,
                dir_name="google-research", markers=(FOLDER,), env="CAP")


class _Quoted(RepoFiles):
    """RepoFiles whose fetch quotes the path: the notebook's name has spaces."""

    def _fetch(self, rel: str, path: Path) -> None:
        super()._fetch(urllib.parse.quote(rel), path)


def notebook_text(data: Optional[str]) -> tuple[str, str]:
    """(the notebook's JSON text, where it was read) from `data` (a file, a folder holding it, a
    folder laid out as the repository) or, for None, the fetch cache."""
    if data is None:
        files = _Quoted.locate(CAP, None)
        return files.text(NOTEBOOK), files.where(NOTEBOOK)
    path = Path(os.path.expanduser(data))
    for candidate in (path, path / NOTEBOOK_NAME, path / NOTEBOOK):
        if candidate.is_file():
            try:
                return candidate.read_text(encoding="utf-8"), str(candidate)
            except (OSError, UnicodeDecodeError) as e:
                raise PublishedFilesError(f"{candidate}: unreadable ({type(e).__name__}: {e})") from None
    raise MissingData(f"{path}: no {NOTEBOOK_NAME!r} there; {CAP.how()}")
