"""InterCode's machines, built as its Dockerfiles build them, into a root file system of the sandbox
(`sandbox.RootFS`) instead of a Docker image: the nl2bash machines of InterCode-Bash
(`docker/nl2bash.Dockerfile`, `build_image`) and InterCode-CTF's (`docker/ctf.Dockerfile`,
`build_machine` with one task's files).

A Dockerfile is read instruction by instruction: its `ENV` lines set the variables (and the
machine's environment, as an image's ENV does), its `COPY` lines copy the repository's files into
the root (the build context is the repository; `../docker/x` is `docker/x` there; a source ending in
`/.` copies a folder's contents, of which the caller may take some), its `RUN` lines run in the
sandbox as `/bin/sh -c LINE` in the `WORKDIR` (Docker's shell form), each of them required to exit
0, as `docker build` requires. The `apt-get install` and `pip install` lines are not run: their
packages are what the machine is meant to have; the sandbox gives the host's /usr instead, and the
tasks that need a tool of those packages the host lacks are skipped (`task.py`). The nl2bash
Dockerfile builds file system 1 as written (`ENV file_system_version=1`); file system N is built
with N there, as the data's README pairs `nl2bash_fs_N.json` with `setup_nl2b_fs_N.sh`. So an
nl2bash machine is the setup script's file system committed to git at `/` with InterCode's
`.gitignore`, which is what its reward diffs against.

What an Ubuntu image has at `/` beside that and no script makes is made here, empty: `root`
(0700), `home`, `tmp` (1777), `var/tmp`, `mnt`, `opt`, `srv`, `media`, `run`, `boot`, and an
`/etc` that holds only `passwd` and `group` naming root (and nobody), so that owners show as
root, as in the container. Commands run with the image's environment: its ENV variables, Docker's
PATH, HOME=/root, TERM=xterm (the container has a tty), and no LANG (the C locale).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from typing import Callable, Optional

from easylemur.errors import RunError
from easylemur.eval.benchmarks.intercode_bash.files import DOCKERFILE
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles
from easylemur.eval.sandbox import Sandbox
from easylemur.eval.sandbox.rootfs import Command, RootFS

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Docker's default PATH (Ubuntu's image)
HOSTNAME = "intercode"
FS_VARIABLE = "file_system_version"
BUILD_SECONDS = 120.0  # a RUN step's time limit
SKELETON = (("root", 0o700), ("home", 0o755), ("tmp", 0o1777), ("var", 0o755), ("var/tmp", 0o1777), ("mnt", 0o755),
            ("opt", 0o755), ("srv", 0o755), ("media", 0o755), ("run", 0o755), ("boot", 0o755), ("etc", 0o755))
ETC = {"etc/passwd": b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
       "etc/group": b"root:x:0:\nnogroup:x:65534:\n"}
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str  # "RUN", "COPY", "ENV", "WORKDIR"
    args: tuple


@dataclasses.dataclass(frozen=True)
class Dockerfile:
    steps: tuple
    packages: tuple  # what its apt-get install line installs
    pip: tuple = ()  # what its pip install lines install


def _lines(text: str) -> list[str]:
    """The instructions: comments and blank lines dropped, `\\`-continued lines joined."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur.strip():
        out.append(cur)
    return out


def parse_dockerfile(text: str, where: str) -> Dockerfile:
    steps, packages, pip = [], (), ()
    for line in _lines(text):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            continue
        if keyword == "RUN":
            words = rest.split()
            if words and words[0] in ("apt-get", "pip", "pip3") and "install" in words:  # what it installs: not run
                tail = words[words.index("install") + 1:]
                names = tuple(w for w in (tail[:tail.index("&&")] if "&&" in tail else tail) if not w.startswith("-"))
                if words[0] == "apt-get":
                    packages = names
                else:
                    pip += names
                continue
            steps.append(Step("RUN", (rest,)))
        elif keyword == "ENV":
            if "=" in rest.split()[0]:
                for pair in shlex.split(rest):
                    key, _, value = pair.partition("=")
                    steps.append(Step("ENV", (key, value)))
            else:
                key, _, value = rest.partition(" ")
                steps.append(Step("ENV", (key, value.strip())))
        elif keyword == "COPY":
            words = rest.split()
            if len(words) != 2:
                raise PublishedFilesError(f"{where}: COPY {rest!r}: this reader takes one source and one destination")
            steps.append(Step("COPY", tuple(words)))
        elif keyword == "WORKDIR":
            steps.append(Step("WORKDIR", (rest,)))
        else:
            raise PublishedFilesError(f"{where}: {keyword} {rest!r}: an instruction this reader does not run")
    if not packages:
        raise PublishedFilesError(f"{where}: no apt-get install line (the pinned commit has one)")
    return Dockerfile(tuple(steps), packages, pip)


def _substitute(text: str, env: dict) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text)


@dataclasses.dataclass
class Image:
    """One machine as a Dockerfile builds it: `template` is its root (InterCode-Bash's is never run in
    after the build: each episode copies it); `env` the environment of its commands; `workdir` its
    WORKDIR; `packages` and `pip` what its Dockerfile installs."""

    fs: int
    template: RootFS
    env: tuple
    packages: tuple
    workdir: str = "/"
    pip: tuple = ()

    def close(self) -> None:
        self.template.close()


def _run_steps(root: RootFS, runs: list, where: str) -> None:
    if not runs:
        return
    results = root.run([Command(("/bin/sh", "-c", line), cwd=workdir, env=tuple(env.items()), timeout=BUILD_SECONDS)
                        for line, workdir, env in runs])
    for (line, _, _), r in zip(runs, results):
        if r.exit_status != 0:
            tail = r.output.decode("utf-8", "replace")[-600:]
            raise RunError(f"building InterCode's machine from {where}: RUN {line!r} "
                           f"{'exited with status %s' % r.exit_status if r.exit_status is not None else r.failure}"
                           f": {tail}")
    runs.clear()


def plan(docker: Dockerfile, variables: dict) -> tuple[list, dict, str]:
    """The Dockerfile's steps with its variables put in (an ENV line of a name in `variables` takes
    that value instead): ("RUN", line, workdir, environment) and ("COPY", repository path, path
    under the root, whether the source is a folder whose contents are copied); the image's ENV; its
    last WORKDIR."""
    env = {"PATH": PATH, "HOME": "/root"}
    image_env: dict = {}
    workdir, steps = "/", []
    for step in docker.steps:
        if step.kind == "ENV":
            key, value = step.args
            value = variables[key] if key in variables else _substitute(value, env)
            env[key] = image_env[key] = value
        elif step.kind == "WORKDIR":
            workdir = posixpath.join(workdir, _substitute(step.args[0], env))
        elif step.kind == "RUN":
            steps.append(("RUN", step.args[0], workdir, dict(env)))
        else:
            given = _substitute(step.args[0], env)
            src = posixpath.normpath("/" + given).lstrip("/")
            folder = given.endswith("/.") or given.endswith("/")  # a folder's contents (`COPY dir/. /dest/`)
            dest = _substitute(step.args[1], env)
            if dest.endswith("/") and not folder:
                dest = posixpath.join(dest, posixpath.basename(src))
            steps.append(("COPY", src, posixpath.join(workdir, dest), folder))
    return steps, image_env, workdir


def folder_files(files: RepoFiles, src: str) -> list[str]:
    """The files under the repository folder `src` (paths relative to it), from a copy that has
    it: a file-by-file fetch cannot list a folder."""
    top = files.root / src
    if not top.is_dir():
        raise PublishedFilesError(f"{top}: this copy of InterCode's repository lacks the folder (files fetched one by "
                                  f"one cannot list it): {files.repo.how()}")
    return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())


def build_machine(files: RepoFiles, dockerfile: str, sandbox: Sandbox, variables: dict, *, fs: int = 0,
                  include: Optional[Callable[[str], bool]] = None, parent: Optional[str] = None,
                  max_bytes: int = 256 << 20) -> Image:
    """A machine as the Dockerfile `dockerfile` of the repository builds it (see the module); of a
    folder a COPY line copies, the files `include` takes (paths relative to the folder)."""
    where = files.where(dockerfile)
    docker = parse_dockerfile(files.text(dockerfile), where)
    steps, image_env, workdir = plan(docker, variables)
    root = RootFS(sandbox, None, parent=parent, hostname=HOSTNAME, max_bytes=max_bytes)
    try:
        for rel, mode in SKELETON:
            root.mkdir(rel, mode)
        for rel, data in ETC.items():
            root.write(rel, data)
        runs: list = []
        for step in steps:
            if step[0] == "RUN":
                runs.append(step[1:])
                continue
            _run_steps(root, runs, where)
            _, src, dest, folder = step
            # the repository's files are 0644 (git's 100644), as COPY keeps them
            if folder:
                for rel in folder_files(files, src):
                    if include is None or include(rel):
                        root.write(posixpath.join(dest, rel), files.path(posixpath.join(src, rel)).read_bytes(), 0o644)
            else:
                root.write(dest, files.path(src).read_bytes(), 0o644)
        _run_steps(root, runs, where)
    except BaseException:
        root.close()
        raise
    env = {"PATH": PATH, "HOSTNAME": HOSTNAME, "TERM": "xterm", **image_env, "HOME": "/root"}
    return Image(fs, root, tuple(env.items()), docker.packages, workdir, docker.pip)


def build_image(files: RepoFiles, fs: int, sandbox: Sandbox, parent: Optional[str] = None) -> Image:
    """File system `fs` as InterCode's nl2bash Dockerfile and its setup script build it (see the module)."""
    return build_machine(files, DOCKERFILE, sandbox, {FS_VARIABLE: str(fs)}, fs=fs, parent=parent)
