"""Where InterCode-Bash's published files are in InterCode's repository: the same copy as
InterCode-SQL's (Lemur's fork at its pinned commit, `intercode_sql/files.py`: `--data-dir D`
with `D/intercode/`, `--data intercode_bash=DIR`, or fetched file by file into the cache).

What is read from it: the tasks (`data/bash/nl2bash/nl2bash_fs_<N>.json`, N = 1..4: query and gold
command), how each file system is built (`docker/nl2bash.Dockerfile` and the script it copies and
runs, `docker/bash_scripts/setup_nl2b_fs_<N>.sh`, and `docker/docker.gitignore`, which it commits
with the file system), and the texts of its Python files (the v2 template, the fork's hf_chat
policy, the bash environment's words and limits; by syntax tree, never run).
"""

from __future__ import annotations

from easylemur.eval.benchmarks.intercode_sql.files import INTERCODE, POLICIES, PROMPTS, RUNNER, UTILS

__all__ = ["INTERCODE", "POLICIES", "PROMPTS", "RUNNER", "UTILS", "FILE_SYSTEMS", "tasks_file", "DOCKERFILE",
           "BASH_ENV", "IC_UTILS"]

FILE_SYSTEMS = (1, 2, 3, 4)  # nl2bash_fs_<N>.json, each against the file system its setup script builds
DOCKERFILE = "docker/nl2bash.Dockerfile"
BASH_ENV = "intercode/envs/bash/bash_env.py"
IC_UTILS = "intercode/utils/utils.py"  # TIMEOUT_DURATION: an action's time limit


def tasks_file(fs: int) -> str:
    return f"data/bash/nl2bash/nl2bash_fs_{fs}.json"
