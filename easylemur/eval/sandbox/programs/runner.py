"""The trusted runner of a `sandbox.Program`: pid 1 of the sandbox, with the sandbox's uid (the
program's own), standard library only (`box.py` passes this file's text to `python -I -S -B
-c`, so it imports nothing of easylemur and is no file the program could change). A separate
program so that the verdict comes from a process the program's commands cannot reach.

It reads the job from a memfd (the files to write, the commands, the end marker and the
harness's token), makes itself non-dumpable, closes every descriptor but the verdict pipe and
the output memfd, writes the files into its working directory, then runs the commands one by
one (each in a fresh process with the sandbox's environment), draining their combined stdout
and stderr. A command that exits non-zero ends the run. The verdict line it writes is
"passed <token>" when every command exited 0 and, if the job has an end marker, the last
command printed it as a line of its own; else "failed <reason>". The output it kept (the head
and the tail, at most `output_bytes` in all) goes to the output memfd, followed by the last
command's exit status; the harness reads it after the sandbox is gone.

The token is what the harness checks; the end marker is what proves the program ran its
tests to the end (a program that exits early with status 0 never prints it). The marker is
in the program's own source, so a program written to find it there could print it: the
documented limit of judging a single-process program (docs/design.md, "Languages").
"""

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
signal.signal(signal.SIGINT, signal.SIG_IGN)  # pid 1 of its namespace: no signal from the program reaches it
child = None
GRACE_S = 0.5  # how long output is still read after a step ended, from what it left running


def verdict(text, kept=b"", status=-1):
    if child is not None:  # the unsafe mode has no namespace to end it
        try:
            os.kill(child, 9)
        except OSError:
            pass
    try:
        os.write(output_fd, kept + b"\n" + str(status).encode())
    except OSError:
        pass
    os.write(result_fd, text.encode("ascii", "replace")[:4000])
    os.close(result_fd)
    os._exit(0)


if not undumpable():
    verdict("failed harness cannot make the runner non dumpable")
job, token = read_job(job_fd)
keep_only((result_fd, output_fd))

workdir = job["workdir"]
os.chdir(workdir)
for name, data in job["files"]:
    path = os.path.join(workdir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o755 if name in job["executable"] else 0o644)

limit = max(1024, job["output_bytes"])
marker = ("\n" + job["marker"] + "\n").encode() if job["marker"] else b""
env = dict(job["env"])
env.setdefault("HOME", workdir)


def run(argv):
    """(exit status or -signal, the output kept, marker seen) of one command."""
    global child
    r, w = os.pipe()
    try:
        child = os.posix_spawnp(argv[0], argv, env,
                                file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                              (os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_DUP2, w, 2),
                                              (os.POSIX_SPAWN_CLOSE, w), (os.POSIX_SPAWN_CLOSE, r)],
                                setsigdef=(signal.SIGINT,))
    except OSError as e:
        os.close(r)
        os.close(w)
        return None, ("cannot start %s: %s" % (argv[0], e.strerror)).encode(), False
    os.close(w)
    head, tail, seen, window, total = b"", b"", False, b"\n", 0
    status, ended = None, 0.0
    while True:
        if not select.select([r], [], [], 0.05)[0]:
            # A process the step left behind (a pool worker, a daemon) may hold the pipe open long
            # after the step ended: its output is read for a short grace, never waited for.
            if status is None:
                pid, st = os.waitpid(child, os.WNOHANG)
                if pid:
                    status, ended = st, time.monotonic()
            elif time.monotonic() - ended > GRACE_S:
                break
            continue
        data = os.read(r, 1 << 16)
        if not data:
            break
        total += len(data)
        if marker and not seen:  # the marker may straddle two reads
            both = window + data
            seen = marker in both
            window = both[-(len(marker) - 1):]
        if len(head) < limit // 2:
            take = limit // 2 - len(head)
            head, data = head + data[:take], data[take:]
        tail = (tail + data)[-(limit - limit // 2):]
    os.close(r)
    if status is None:
        _, status = os.waitpid(child, 0)
    child = None
    kept = head + (b"\n[... %d bytes left out ...]\n" % (total - limit) if total > limit else b"") + tail
    return os.waitstatus_to_exitcode(status), kept, seen


steps = job["steps"]
for i, argv in enumerate(steps):
    code, kept, seen = run(argv)
    what = "the program" if i == len(steps) - 1 else "step %d (%s)" % (i + 1, os.path.basename(argv[0]))
    if code is None:
        verdict("failed cannot start " + what.split(" (")[0], kept)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal %d" % -code
        verdict("failed %s was killed by %s" % (what, name), kept, code)
    if code != 0:
        verdict("failed %s exited with status %d" % (what, code), kept, code)
    if i == len(steps) - 1:
        if marker and not seen:
            verdict("failed exited before the tests finished", kept, code)
        verdict("passed " + token, kept, code)
verdict("failed no commands", b"")
