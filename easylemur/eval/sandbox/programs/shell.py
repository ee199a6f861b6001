"""The shell runner of a root file system (`rootfs.RootFS`): pid 1 of a sandbox whose `/` is a
writable host directory, standard library only (`rootfs.py` passes this file's text to `python
-I -S -B -c`, so it imports nothing of easylemur and is no file a command could change).

It reads the job from a memfd (the commands, the umask, the harness's token), makes itself
non-dumpable, closes every descriptor but the verdict pipe and the output memfd, then runs the
commands one after the other. Each runs in a fresh process (its argv looked up on its own PATH,
its own environment, its working directory, /dev/null as stdin) with stdout and stderr on one
pipe, read until every process holding the pipe has closed it or the command's time limit is
past; the first `output_bytes` bytes are kept. After each command every other process of the
sandbox is killed and reaped (as pid 1: `kill(-1)`), so nothing one command started runs on
into the next. Each command's result is (output bytes, exit status or None, what went wrong:
"" / "timed out" / "chdir: <why>" / "spawn: <why>", bytes left out); the list goes to the output
memfd (marshal) and the verdict pipe gets "passed <token>" once it is written: a result without
this run's token is no result.
"""

import marshal
import os
import select
import signal
import sys
import time

from easylemur.eval.sandbox.programs.prelude import (
    keep_only,
    read_job,
    undumpable,
)

job_fd, result_fd, output_fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGINT, signal.SIG_IGN)  # pid 1 of its namespace: no signal from a command reaches it


def finish(text, results=()):
    try:
        os.write(output_fd, marshal.dumps(list(results), 4))
    except OSError:
        pass
    os.write(result_fd, text.encode("ascii", "replace")[:4000])
    os.close(result_fd)
    os._exit(0)


def kill_all():
    """Every process of the sandbox but this one killed and reaped (as pid 1 every orphan is a
    child of this process); outside a namespace of its own (never here) nothing."""
    if os.getpid() != 1:
        return
    for _ in range(2):  # a second pass for anything forked while the first was sent
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue


def run(command):
    """(output, exit status or None, what went wrong, bytes left out) of one command."""
    try:
        os.chdir(command["cwd"])
    except OSError as e:
        return b"", None, "chdir: " + (e.strerror or type(e).__name__), 0
    argv, limit = command["argv"], command["output_bytes"]
    r, w = os.pipe()
    try:
        child = os.posix_spawnp(argv[0], argv, command["env"],
                                file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                              (os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_DUP2, w, 2),
                                              (os.POSIX_SPAWN_CLOSE, w), (os.POSIX_SPAWN_CLOSE, r)],
                                setsigdef=(signal.SIGINT, signal.SIGPIPE))
    except OSError as e:
        os.close(r)
        os.close(w)
        return b"", None, "spawn: " + (e.strerror or type(e).__name__), 0
    os.close(w)
    deadline = time.monotonic() + command["timeout"]
    kept, total, status, why = b"", 0, None, ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            why = "timed out"
            break
        if not select.select([r], [], [], min(left, 0.5))[0]:
            continue
        data = os.read(r, 1 << 16)
        if not data:
            break
        total += len(data)
        if len(kept) < limit:
            kept += data[:limit - len(kept)]
    os.close(r)
    if not why:
        while status is None:  # the pipe is closed; the command itself may still run (it closed its output)
            pid, st = os.waitpid(child, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(st)
            elif time.monotonic() > deadline:
                why = "timed out"
                break
            else:
                time.sleep(0.01)
    kill_all()
    return kept, (None if why else status), why, total - len(kept)


if not undumpable():
    finish("failed harness cannot make the shell runner non dumpable")
job, token = read_job(job_fd)
keep_only((result_fd, output_fd))
os.umask(job["umask"])
finish("passed " + token, [run(c) for c in job["commands"]])
