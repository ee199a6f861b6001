"""InterCode-Bash's tasks: the 200 NL2Bash queries of `data/bash/nl2bash/nl2bash_fs_<N>.json` (60,
53, 60 and 27), each a query and a gold command against file system N, in file order, each known by
its file and index there (InterCode's task_id within that file's run).

What the sandbox cannot give is found before any episode and the task is skipped with the reason
(`skip_reasons`): a gold command that uses the network (curl, wget, dig, nslookup, ping, host, nc,
ssh, telnet, ftp: the sandbox has none), or a command of a package InterCode's image installs
(its Dockerfile's apt-get line) that this host lacks on the image's PATH (tree, cal, cpio, ...:
`scripts/setup_eval.sh` installs them). A gold command's words are read as words (letters,
digits, `_.+-`), so a command named inside a string counts as used."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Optional

from easylemur.eval.benchmarks.intercode_bash.files import DOCKERFILE, FILE_SYSTEMS, INTERCODE, tasks_file
from easylemur.eval.benchmarks.intercode_bash.image import FS_VARIABLE, PATH, parse_dockerfile, plan
from easylemur.eval.benchmarks.intercode_bash.texts import load_texts
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, json_list

NETWORK = ("curl", "wget", "dig", "nslookup", "ping", "host", "nc", "ssh", "telnet", "ftp")
# The commands of the packages InterCode's nl2bash image installs (Ubuntu's), by package
PACKAGE_COMMANDS = {
    "psmisc": ("pstree", "killall", "fuser", "peekfd", "prtstat"),
    "bsdmainutils": ("cal", "ncal", "column", "hexdump", "colrm", "colcrt", "look", "ul", "calendar"),
    "imagemagick": ("convert", "identify", "mogrify", "montage", "composite"),
    "dnsutils": ("dig", "nslookup", "nsupdate"),
    "git": ("git",), "tree": ("tree",), "net-tools": ("ifconfig", "netstat", "route", "arp"),
    "iputils-ping": ("ping",), "curl": ("curl",), "cpio": ("cpio",), "jq": ("jq",), "cron": ("crontab",),
    "python3": ("python3",), "bash": ("bash",),
}
_WORD = re.compile(r"[A-Za-z0-9_.+-]+")


@dataclasses.dataclass(frozen=True)
class BashProblem:
    task_id: str  # "fs<N>/<index>"
    fs: int  # the file system (nl2bash_fs_<N>.json)
    index: int  # the task's index in its file: InterCode's task_id
    query: str
    gold: str


def _problems(text: str, where: str, fs: int) -> list[BashProblem]:
    out = []
    for i, row in enumerate(json_list(text, where)):
        if not isinstance(row, dict) or not isinstance(row.get("query"), str) or "gold" not in row:
            raise PublishedFilesError(f"{where}: task {i} lacks its query or gold command")
        gold = row["gold"] if isinstance(row["gold"], str) else ";".join(row["gold"])  # BashEnv joins a list
        out.append(BashProblem(f"fs{fs}/{i}", fs, i, row["query"], gold))
    return out


def on_path(command: str) -> bool:
    """Whether the machine's PATH (the host's directories, bound into the sandbox) has `command`."""
    return any(os.access(os.path.join(d, command), os.X_OK) for d in PATH.split(":"))


def missing_tools(words: set, packages: tuple, table: dict) -> Optional[str]:
    """Why a task whose text has `words` cannot run here: the commands among them of the image's
    `packages` (their commands by `table`) the host lacks; None when there are none."""
    missing = [(c, pkg) for pkg in packages for c in table.get(pkg, ()) if c in words and not on_path(c)]
    if not missing:
        return None
    return "needs " + ", ".join(f"{c} (package {pkg})" for c, pkg in missing) + \
        ", which InterCode's image installs and this host lacks (scripts/setup_eval.sh installs it)"


class InterCodeBashTask:
    """InterCode-Bash on one copy of InterCode's files."""

    name = "intercode_bash"

    def __init__(self, files: RepoFiles, file_systems: Optional[tuple] = None):
        self.files = files
        self.texts = load_texts(files)
        self.dockerfile = parse_dockerfile(files.text(DOCKERFILE), files.where(DOCKERFILE))
        self.problems: list[Any] = []
        for fs in file_systems or FILE_SYSTEMS:
            self.problems += _problems(files.text(tasks_file(fs)), files.where(tasks_file(fs)), fs)
            for step in plan(self.dockerfile, {FS_VARIABLE: str(fs)})[0]:
                if step[0] == "COPY":  # what its build copies, fetched now when this copy is the cache
                    files.path(step[1])
        self.skipped: list = []

    def dataset(self, fs: int) -> str:
        """What InterCode's records name as their dataset (its --data_path)."""
        return f"./{tasks_file(fs)}"

    def sized(self, sandbox: Any) -> Any:
        """The sandbox its machines need: the one given."""
        return sandbox

    def skip_reason(self, p: BashProblem) -> Optional[str]:
        """Why the sandbox cannot give task `p` what it needs (None: it can)."""
        words = set(_WORD.findall(p.gold))
        net = [w for w in NETWORK if w in words]
        if net:
            return f"needs the network ({', '.join(net)}), which the sandbox does not have"
        return missing_tools(words, self.dockerfile.packages, PACKAGE_COMMANDS)


def build(data: Optional[str], variant: str = "", prompt_format: str = "base") -> Any:
    """The registry's factory: InterCode-Bash from the copy of InterCode's repository at `data`
    (None: the fetch cache)."""
    return InterCodeBashTask(RepoFiles.locate(INTERCODE, data))
