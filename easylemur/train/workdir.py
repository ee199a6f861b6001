"""A run's workdir before its first step: refused by name when it cannot be one, and left as it
was found when the run fails to start (docs/design.md, "Errors")."""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

import jax

from easylemur.config import ConfigError
from easylemur.storage import is_url


def check_workdir(workdir: Any) -> None:
    """Refuses, by name, a workdir that is a file or lies under one, before anything is created
    (mkdir's own error, `[Errno 17] File exists`, names neither)."""
    if is_url(workdir):
        return
    for p in (workdir, *workdir.parents):
        if p.exists():
            if not p.is_dir():
                where = "is a file" if p == workdir else f"lies under {p}, which is a file"
                raise ConfigError(f"workdir={workdir}: {where}; a workdir is a directory")
            return


class FailedStartCleanup:
    """Removes what a run that fails before its first step created (docs/design.md, "Errors"):
    a failed init.from, a bad data path, must not leave an empty `checkpoints/` (which would
    look like a run), a config.json, or the workdir itself behind. Only paths that did not
    exist when the run began are touched. `remove_files` runs while the run still holds the
    workdir lock (so nothing of another run is touched); `remove_dirs` after the lock is
    released, and only removes empty directories (rmdir). Process 0, local workdirs only."""

    def __init__(self, workdir: Any):
        self.started = False  # set just before the first step: from then on, what the run wrote stays
        self.tb = workdir / "tb"  # holds nothing but this run's event file, when this run made it
        self.files: list = []
        self.dirs: list = []
        if jax.process_index() != 0 or is_url(workdir):
            return
        self.files = [p for p in (workdir / "checkpoints", self.tb, workdir / "config.json", workdir / "metrics.jsonl",
                                  workdir / "events.jsonl") if not p.exists()]
        self.dirs = [p for p in (workdir, *workdir.parents) if not p.exists()]  # deepest first

    def remove_files(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and not self.started:
            for p in self.files:
                with contextlib.suppress(OSError):
                    if p == self.tb and p.is_dir():
                        shutil.rmtree(p)
                    elif p.is_dir():
                        p.rmdir()  # checkpoints/: only when no step was written into it
                    elif p.exists():
                        p.unlink()
        return False  # the error that stopped the start is the one reported

    def remove_dirs(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and not self.started:
            for p in self.dirs:
                with contextlib.suppress(OSError):
                    p.rmdir()
        return False
