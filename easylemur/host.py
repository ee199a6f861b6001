"""Facts about the host a run starts on, read before JAX is imported: which accelerator
device nodes it has, the malloc setting a CPU run restarts itself with, and whether its CPU
computes bf16 natively (what `model.dtype=auto` picks on a CPU; docs/design.md, "Compute dtype
on CPUs").

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
from typing import Iterable, Mapping, Optional

MALLOC_TUNABLES = ("glibc.malloc.hugetlb=1",)


def tpu_device_nodes() -> bool:
    """Whether this host presents TPU chips (a TPU VM), by its device nodes or environment."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*") or os.environ.get("TPU_WORKER_HOSTNAMES"))


def runs_on_cpu(environ: Mapping[str, str]) -> bool:
    """Whether JAX will compute on this host's CPU: JAX_PLATFORMS says so, or it is unset and
    the host has no TPU, NVIDIA or AMD (ROCm's /dev/kfd) device nodes."""
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not (tpu_device_nodes() or glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


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


# CPU flags (as Linux's /proc/cpuinfo spells them) of instructions that compute on bf16 rather
# than convert it: x86's AMX tiles and AVX-512 BF16 (dot products of bf16 pairs), which XLA:CPU's
# bf16 matmuls use (docs/design.md, "Performance"); aarch64's FEAT_BF16 (`bf16`: BFDOT, BFMMLA;
# Graviton3, Neoverse V1/N2), the same kind of instruction, though not measured here. SVE alone
# is no such instruction (A64FX has SVE and no bf16), nor is AVX-512 without its BF16 part.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
# the environment's say over what model.dtype=auto computes in on a CPU (float32 or bfloat16)
CPU_DTYPE_ENV = "EASYLEMUR_CPU_DTYPE"
CPU_DTYPES = ("float32", "bfloat16")


def cpu_flags(path: str = "/proc/cpuinfo") -> Optional[frozenset]:
    """This CPU's feature flags as Linux lists them (x86 `flags`, arm `Features`; the first
    processor's, all cores of a host being alike), or None where they are unknown: no
    /proc/cpuinfo (macOS, Windows) or no such line in it."""
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return None


def compute_dtype(platform: Optional[str], flags: Optional[Iterable[str]] = None,
                  environ: Optional[Mapping[str, str]] = None) -> tuple[str, str]:
    """(dtype, why) that `model.dtype=auto` computes in, a pure function of the platform the
    program is compiled for (`sharding.platform(mesh)`), the CPU's `flags` (`cpu_flags()`) and
    the environment.

    - Not a CPU (TPU, GPU; None: no mesh at hand, as for `aot`, which compiles TPU programs on
      a CPU host): bfloat16, whatever the host's CPU does.
    - A CPU: `EASYLEMUR_CPU_DTYPE` (float32 or bfloat16) when set; else bfloat16 where the CPU
      has a NATIVE_BF16_FLAGS instruction, float32 where it has none (there XLA:CPU's bf16 is
      conversions around float32 arithmetic: slower than float32 and less exact).
    - A CPU whose flags are unknown (macOS, Windows): float32, which no CPU emulates; a CPU
      that has bf16 then only runs slower than it could (model.dtype=bfloat16 forces bf16)."""
    if platform != "cpu":
        return "bfloat16", f"model.dtype=auto on {platform}" if platform else "model.dtype=auto, not a CPU program"
    forced = (environ or {}).get(CPU_DTYPE_ENV, "")
    if forced:
        if forced not in CPU_DTYPES:
            raise ValueError(f"{CPU_DTYPE_ENV}={forced!r} must be one of {', '.join(CPU_DTYPES)}")
        return forced, f"{CPU_DTYPE_ENV}={forced}"
    if flags is None:
        return "float32", "CPU features unknown; set model.dtype=bfloat16 to force bf16"
    native = native_bf16(flags)
    if native:
        return "bfloat16", f"CPU has {native}"
    return "float32", "CPU has no native bf16; set model.dtype=bfloat16 to force it"


def native_bf16(flags: Iterable[str]) -> Optional[str]:
    """The first of NATIVE_BF16_FLAGS among a CPU's `flags`, or None."""
    flags = set(flags)
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)
