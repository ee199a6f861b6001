"""Where InterCode-CTF's published files are in InterCode's repository: the same copy as
InterCode-SQL's and -Bash's (Lemur's fork at its pinned commit, `intercode_sql/files.py`; `--data
intercode_ctf=DIR`, `D/intercode/`, or the fetch cache).

What is read from it: the tasks (`data/ctf/ic_ctf.json`: the picoCTF query, the flag, its source and
tags, a setup command for some), each task's files (`data/ctf/task_assets/<task_id>/`, the folder the
Dockerfile copies, its `solution/` folders removed as the Dockerfile removes them), how the machine
is built (`docker/ctf.Dockerfile`), and the texts of its Python files (the `ctf` template, the fork's
hf_chat policy, the runner's CTF steps, the CTF environment; by syntax tree, never run). The task
files are a folder of about 200 files, which a file-by-file fetch cannot list: they are read from a
clone (or a cache that holds the folder).
"""

from __future__ import annotations

from easylemur.eval.benchmarks.intercode_sql.files import INTERCODE, POLICIES, PROMPTS, RUNNER, UTILS

__all__ = ["INTERCODE", "POLICIES", "PROMPTS", "RUNNER", "UTILS", "TASKS", "ASSETS", "DOCKERFILE", "CTF_ENV"]

TASKS = "data/ctf/ic_ctf.json"
ASSETS = "data/ctf/task_assets"
DOCKERFILE = "docker/ctf.Dockerfile"
CTF_ENV = "intercode/envs/ctf/ctf_env.py"
