"""The sandbox's launcher: a small program that sets a run's limits and then becomes bwrap.

Where it runs: on the host, outside the sandbox, as the harness's user (root in the "uid"
mode, until it drops to the worker slot's uid), in a new session with an empty environment;
never pid 1 of anything. `box.Sandbox._launcher` passes this file's text to
`python -I -S -c` (read once when the sandbox is imported), so it imports nothing of
easylemur and needs only the standard library; the untrusted program never sees it (it has
exec'd bwrap before any of the program runs).

Why a separate program rather than a `preexec_fn`: forking a multithreaded process (JAX's) to
run Python code in the child can deadlock; a fresh interpreter that then execs bwrap cannot.

argv: RLIMIT_CPU seconds, RLIMIT_AS bytes, RLIMIT_FSIZE bytes, RLIMIT_NPROC, the uid to drop
to (-1: stay), the run's memory cgroup's `cgroup.procs` file ("" for none), then the command
to exec (bwrap and its arguments, or the checker itself in the unsafe mode).
"""

import os
import resource
import sys

cpu, mem, fsize, nproc, uid = map(int, sys.argv[1:6])
if sys.argv[6]:
    # into the run's memory cgroup first, while still root (uid mode): every process of the
    # sandbox starts in it, and none can leave it (no /sys inside, no capabilities)
    with open(sys.argv[6], "w") as f:
        f.write(str(os.getpid()))
for res, v in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize),
               (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(res, (v, v))
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
elif os.getuid() != 0:
    # The count is per user: allow the user's running processes plus the program's share.
    mine = 0
    for pid in os.listdir("/proc"):
        try:
            mine += pid.isdigit() and os.stat("/proc/" + pid).st_uid == os.getuid()
        except OSError:
            pass
    nproc += mine
resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
os.execv(sys.argv[7], sys.argv[7:])
