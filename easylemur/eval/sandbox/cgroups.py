"""A memory cgroup per sandboxed run, where this process can make one: found once (`cgroup_parent`),
made per run (`cgroup_create`), removed with whatever is left in it (`cgroup_remove`)."""

from __future__ import annotations

import os
import signal
import time
from typing import Optional


def cgroup_parent() -> Optional[tuple[int, str]]:
    """(version, directory) under which this process can make a memory cgroup per run: cgroup v2
    where a writable cgroup of its own or an ancestor's already gives the memory controller to
    its children (a delegated subtree, or root's), else the v1 memory hierarchy where writable
    (root); None where neither (an unprivileged user without delegation, a container with
    /sys/fs/cgroup read-only). Nothing of the host's cgroup settings is changed."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            own = f.read().splitlines()
    except OSError:
        return None
    where: dict[int, tuple[str, str]] = {}  # version -> (mount point, the hierarchy's path mounted there)
    for line in mounts:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3:
            if r[0] == "cgroup2":
                where.setdefault(2, (f[4], f[3]))
            elif r[0] == "cgroup" and "memory" in r[2].split(","):
                where.setdefault(1, (f[4], f[3]))
    paths = {}
    for line in own:
        hid, ctrl, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and ctrl == "":
            paths[2] = path
        elif "memory" in ctrl.split(","):
            paths[1] = path
    for version in (2, 1):
        if version not in where or version not in paths:
            continue
        point, root = where[version]
        rel = paths[version]
        if root != "/" and (rel == root or rel.startswith(root + "/")):
            rel = rel[len(root):]
        d = os.path.normpath(os.path.join(point, rel.lstrip("/")))
        if not (d == point or d.startswith(point + "/")):
            d = point
        while True:
            if os.access(d, os.W_OK):
                try:
                    if version == 2:
                        with open(os.path.join(d, "cgroup.subtree_control")) as f:
                            if "memory" not in f.read().split():
                                raise OSError("memory is not delegated here")
                    cgroup_remove(cgroup_create(version, d, f"easylemur-{os.getpid()}-probe", 1 << 30))
                    return version, d
                except OSError:
                    pass
            if d == point:
                break
            d = os.path.dirname(d)
    return None


def cgroup_create(version: int, parent: str, name: str, limit: int) -> str:
    """A new memory cgroup under `parent` that holds its processes to `limit` bytes (no swap)."""
    path = os.path.join(parent, name)
    os.mkdir(path)
    try:
        files = (("memory.max", limit), ("memory.swap.max", 0)) if version == 2 else (
            ("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit))
        for i, (file, value) in enumerate(files):
            try:
                with open(os.path.join(path, file), "w") as f:
                    f.write(str(value))
            except OSError:
                if i == 0:
                    raise
                # no swap accounting here: nothing to cap beyond the memory itself
    except OSError:
        os.rmdir(path)
        raise
    return path


def cgroup_remove(path: str) -> None:
    """Removes a run's cgroup. A sandbox's processes are gone with its namespace; the unsafe
    mode's (a `setsid` child left running) are killed first."""
    deadline = time.monotonic() + 5
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
        try:
            if os.path.exists(os.path.join(path, "cgroup.kill")):
                with open(os.path.join(path, "cgroup.kill"), "w") as f:
                    f.write("1")
            else:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
        except OSError:
            pass
        time.sleep(0.01)
