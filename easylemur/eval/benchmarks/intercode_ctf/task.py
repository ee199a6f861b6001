"""InterCode-CTF's tasks: the 100 picoCTF tasks of `data/ctf/ic_ctf.json` (query, flag, source, tags;
some a setup command), in file order, each known by its index there (InterCode's task_id in its
logs) and its `task_id` (the folder of its files, `data/ctf/task_assets/<task_id>/`).

What the sandbox cannot give is found before any episode and the task is skipped with the reason
(`skip_reason`): a task with a setup command (all download its files or a tool: wget, git clone),
one whose query points at a server (a URL, `nc HOST PORT`, a host and port: picoCTF's remote
challenges), and one whose query names a command of a package InterCode's CTF image installs
(its Dockerfile's apt-get line) that the host lacks on the image's PATH."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from easylemur.eval.benchmarks.intercode_bash.task import PACKAGE_COMMANDS, missing_tools
from easylemur.eval.benchmarks.published import json_list
from easylemur.eval.benchmarks.intercode_bash.image import parse_dockerfile
from easylemur.eval.benchmarks.intercode_ctf.files import DOCKERFILE, INTERCODE, TASKS
from easylemur.eval.benchmarks.intercode_ctf.texts import load_texts
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles

# the commands of the packages InterCode's CTF image installs, by package, as a query may name them
# (imagemagick's are English words: "identify the sender" names no tool)
CTF_PACKAGE_COMMANDS = {
    **{k: v for k, v in PACKAGE_COMMANDS.items() if k != "imagemagick"},
    "sleuthkit": ("srch_strings", "mmls", "fls", "icat", "fsstat", "img_stat", "blkls", "tsk_recover"),
    "netcat": ("nc", "netcat"), "unzip": ("unzip", "zipinfo"), "gcc": ("gcc",), "gdb": ("gdb",),
    "poppler-utils": ("pdftotext", "pdfinfo", "pdfimages", "pdftohtml"), "wget": ("wget",),
}
_REMOTE = re.compile(r"https?://|\bnc\s+[\w.-]+\s+\d+|\b[\w-]+\.(?:net|org|com)\b[\s:]+\d{2,5}\b")
_WORD = re.compile(r"[A-Za-z0-9_.+-]+")


@dataclasses.dataclass(frozen=True)
class CtfProblem:
    index: int  # the task's place in ic_ctf.json: InterCode's task_id in its logs
    task_id: int  # ic_ctf.json's task_id: the folder of its files
    query: str
    gold: str  # the flag
    setup: Optional[str] = None
    tags: tuple = ()


def _problems(text: str, where: str) -> list[CtfProblem]:
    out = []
    for i, row in enumerate(json_list(text, where)):
        if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in ("query", "gold")) \
                or not isinstance(row.get("task_id"), int):
            raise PublishedFilesError(f"{where}: task {i} lacks its task_id, query or flag")
        out.append(CtfProblem(i, row["task_id"], row["query"], row["gold"], row.get("setup"), tuple(row.get("tags", ()))))
    return out


class InterCodeCtfTask:
    """InterCode-CTF on one copy of InterCode's files."""

    name = "intercode_ctf"

    def __init__(self, files: RepoFiles):
        self.files = files
        self.texts = load_texts(files)
        self.dockerfile = parse_dockerfile(files.text(DOCKERFILE), files.where(DOCKERFILE))
        self.problems: list[Any] = _problems(files.text(TASKS), files.where(TASKS))
        self.skipped: list = []

    @property
    def dataset(self) -> str:
        return f"./{TASKS}"

    def sized(self, sandbox: Any) -> Any:
        """The sandbox its machines need: files up to 1 GiB (the tasks' disk images and archives)."""
        return dataclasses.replace(sandbox, file_bytes=max(sandbox.file_bytes, 1 << 30))

    def skip_reason(self, p: CtfProblem) -> Optional[str]:
        """Why the sandbox cannot give task `p` what it needs (None: it can)."""
        if p.setup:
            return "its setup downloads over the network, which the sandbox does not have"
        if _REMOTE.search(p.query):
            return "it is played against a remote server, and the sandbox has no network"
        return missing_tools(set(_WORD.findall(p.query)), self.dockerfile.packages, CTF_PACKAGE_COMMANDS)


def build(data: Optional[str], variant: str = "", prompt_format: str = "base") -> Any:
    """The registry's factory: InterCode-CTF from the copy of InterCode's repository at `data`
    (None: the fetch cache; its task files then need to be there already)."""
    return InterCodeCtfTask(RepoFiles.locate(INTERCODE, data))
