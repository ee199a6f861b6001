"""What the sandbox sees of the host: the one read-only allow-list of system paths
(`VISIBLE_DIRS`, `system_binds`), and the Python packages a program may import
(`lib_binds`, `importable`)."""

from __future__ import annotations

import functools
import os
import re
import sys

from easylemur.errors import InputError
from easylemur.eval.sandbox.jobs import LIB_DIR

# The host's system directories the sandbox binds read-only (symlinks recreated as symlinks): what
# a program can see of the host, beside the interpreter's prefix and the libraries it is given.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def system_binds(python: str) -> list[str]:
    """bwrap's arguments for the read-only allow-list: the system's /usr and its /bin, /sbin,
    /lib* entries, the dynamic linker's cache, and the interpreter's prefix when it lives
    elsewhere."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in SYSTEM_DIRS[1:]:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    if os.path.isfile("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    prefix = os.path.dirname(os.path.dirname(python))  # <prefix>/bin/python3.X
    if prefix and prefix != "/" and not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        args += ["--ro-bind", prefix, prefix]
    return args


def visible(path: str, also: tuple[str, ...] = ()) -> bool:
    """Whether `path` resolves to a file or folder the sandbox binds (a system directory, or one
    of `also`, the extra folders a program is given)."""
    real = os.path.realpath(path)
    return os.path.exists(real) and any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS + tuple(also))


@functools.lru_cache(maxsize=None)
def lib_binds(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(host path, sandbox path) for each importable top-level package or module in `names`
    and the `<name>.libs` folder of vendored shared libraries beside it (numpy.libs, ...).
    An unknown name is an InputError. Cached: finding the distributions takes ~0.2 s, and an
    agent's every Python action or a DS-1000 program asks again."""
    import importlib.metadata
    import importlib.util

    dists = importlib.metadata.packages_distributions()  # import name -> distributions (PIL -> pillow)
    binds = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not (spec.submodule_search_locations or spec.origin):
            raise InputError(f"sandbox library {name!r}: not importable by {sys.executable}; pip install it")
        path = list(spec.submodule_search_locations)[0] if spec.submodule_search_locations else spec.origin
        binds.append((path, f"{LIB_DIR}/{os.path.basename(path)}"))
        site = os.path.dirname(path)
        # vendored shared libraries sit beside the package in a folder named for the import name
        # (numpy.libs) or for the distribution (pillow.libs for PIL, scikit_learn.libs for sklearn)
        extras = {f"{name}.libs", f"{name.replace('_', '')}.libs"}
        extras |= {re.sub(r"[-_.]+", "_", d) + ".libs" for d in dists.get(name, [])}
        extras |= {d.lower() + ".libs" for d in dists.get(name, [])}
        for extra in sorted(extras):
            if os.path.isdir(os.path.join(site, extra)) and all(b[1] != f"{LIB_DIR}/{extra}" for b in binds):
                binds.append((os.path.join(site, extra), f"{LIB_DIR}/{extra}"))
    return tuple(binds)


@functools.lru_cache(maxsize=None)
def importable(names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `names` this interpreter can import (a Job's libraries: one it lacks is left out,
    as the reference environment without it would)."""
    import importlib.util

    def found(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    return tuple(n for n in names if found(n))
