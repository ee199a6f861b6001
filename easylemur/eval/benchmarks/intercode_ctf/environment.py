"""One InterCode-CTF episode's machine, as InterCode's `CTFEnv` holds its container: the image that
`docker/ctf.Dockerfile` builds (`intercode_bash/image.py`: Ubuntu-like skeleton, the task files
copied to /ctf/, their `solution/` folders removed by the Dockerfile's own `find ... rm`, committed to
git at `/`), here with the one task's folder, built fresh for the episode into a root file system
of the sandbox. The runner's `preprocess_ctf` then runs `cd /ctf/<task_id>` as the first action.

Actions run as CTFEnv runs them, which is BashEnv.exec_action (`intercode_bash/environment.py`,
`Shell`) with CTFEnv's own command line: `python3 -c ...` / `python -c ...` handed over as they
are, anything else as `/bin/bash -c '<action>'` with its single quotes escaped, split by shlex as
docker-py splits it. A "submit <flag>" is judged as CTFEnv.get_reward judges it: the second word of
the action, compared with the task's flag case-insensitively, reward 1 or 0 (a bare "submit" has no
second word: InterCode's IndexError would stop its run; here it is a wrong flag). The flag never
enters the sandbox: it is compared on the host."""

from __future__ import annotations

from easylemur.errors import RunError
from easylemur.eval.benchmarks.intercode_bash.environment import Shell
from easylemur.eval.benchmarks.intercode_bash.image import build_machine
from easylemur.eval.benchmarks.intercode_ctf.files import DOCKERFILE
from easylemur.eval.benchmarks.intercode_ctf.task import CtfProblem
from easylemur.eval.benchmarks.intercode_ctf.texts import CtfTexts
from easylemur.eval.benchmarks.published import RepoFiles
from easylemur.eval.sandbox import Sandbox

MAX_BYTES = 2 << 30  # a machine's size cap: some tasks' files are disk images of a few hundred MiB


class CtfEnvironment(Shell):
    """The task's machine, in its folder (see the module)."""

    def __init__(self, files: RepoFiles, texts: CtfTexts, sandbox: Sandbox, p: CtfProblem, *,
                 max_bytes: int = MAX_BYTES):
        folder = str(p.task_id)
        self.image = build_machine(files, DOCKERFILE, sandbox, {}, include=lambda rel: rel.split("/", 1)[0] == folder,
                                   max_bytes=max_bytes)
        super().__init__(self.image.template, self.image.env, texts, p.query, max_bytes)
        self.gold = p.gold
        try:
            out, ok = self.execute(texts.cd(p.task_id))
        except BaseException:
            self.close()
            raise
        if not ok:
            self.close()
            raise RunError(f"InterCode-CTF task {p.task_id}: {texts.cd(p.task_id)!r} failed ({out.strip()[:200]})")

    def command_line(self, action: str) -> str:
        return self.texts.clean_cmd(action)

    def submit(self, action: str) -> int:
        """CTFEnv.get_reward: 1 when the action's second word is the flag (any case), else 0."""
        words = action.split(" ")
        return 1 if len(words) > 1 and words[1].lower() == self.gold.lower() else 0

    def close(self) -> None:
        self.image.close()
