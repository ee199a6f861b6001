"""Facts about the host a run starts on, read before JAX is imported: which accelerator
device nodes it has, and the malloc setting a CPU run restarts itself with.

Why the restart: XLA:CPU allocates each execution's temporary buffer (2.4 GB for the 58M
train step of bench/train_throughput.py) with posix_memalign on one of its worker threads.
glibc serves a request that large from a fresh mmap and unmaps it on free, so every step the
kernel faults the whole buffer in again, 4 KiB at a time: about 590,000 page faults per step,
about 13% of the step's CPU time on 2 cores. glibc's tunable `glibc.malloc.hugetlb=1` (glibc
2.35+) has malloc advise transparent huge pages for the memory it maps, so where THP is
`madvise` or `always` the same buffer is 2 MiB pages: about 1,600 faults per step and the step
~15% faster, with nothing else changed (memory is still returned at free). glibc reads its
tunables only when a process starts, hence the restart: same pid, same arguments, same
streams. Keeping the buffer instead (`arena_max=1`, `mmap_max=0`, no trimming) removed the
faults entirely, but the heap grew by a whole buffer whenever a step's buffer was requested
before the previous one was freed (3.5 to 7.9 GiB resident within 40 steps), so it is not
used. On accelerator hosts nothing changes. `EASYLEMUR_MALLOC=default` opts out; any
`glibc.malloc.*` tunable the user set already wins.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Mapping, Optional

MALLOC_TUNABLES = ("glibc.malloc.hugetlb=1",)


def tpu_device_nodes() -> bool:
    """Whether this host presents TPU chips (a TPU VM), by its device nodes or environment."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*") or os.environ.get("TPU_WORKER_HOSTNAMES"))


def runs_on_cpu(environ: Mapping[str, str]) -> bool:
    """Whether JAX will compute on this host's CPU: JAX_PLATFORMS says so, or it is unset and
    the host has no TPU or NVIDIA device nodes."""
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not (tpu_device_nodes() or glob.glob("/dev/nvidia[0-9]*"))


def _glibc_version() -> tuple[int, int]:
    """(major, minor) of the C library when it is glibc, else (0, 0)."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else (0, 0)
    except (ValueError, OSError):
        return (0, 0)


def _thp_enabled(path: str = "/sys/kernel/mm/transparent_hugepage/enabled") -> bool:
    """Whether the kernel gives transparent huge pages to memory that asks for them."""
    try:
        with open(path) as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def cpu_malloc_env(environ: Mapping[str, str]) -> Optional[dict]:
    """The environment a CPU run should restart with (this one plus MALLOC_TUNABLES), or None
    where it should not: not Linux with glibc 2.35+ and THP, not on a CPU, opted out, or a
    `glibc.malloc.*` tunable is set already (the user's, or this restart's)."""
    if environ.get("EASYLEMUR_MALLOC", "") == "default" or not sys.platform.startswith("linux"):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in tunables or _glibc_version() < (2, 35) or not _thp_enabled():
        return None
    if not runs_on_cpu(environ):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, [tunables, *MALLOC_TUNABLES]))}


def restart_with_cpu_malloc() -> None:
    """Re-executes this Python process with `cpu_malloc_env` when it applies; returns
    otherwise (also when the exec itself fails: the run goes on with the default malloc).
    Call it first thing in a CLI's `__main__`, before heavy imports and before any thread."""
    env = cpu_malloc_env(os.environ)
    if env is None or not getattr(sys, "orig_argv", None):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:
        return
