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

A sealed Program (`jobs.Judge`) has a second stage, the tests: once the program's steps are
done, the runner reads its values file (a regular file, bounded, never through a link), kills
every other process in the sandbox (as pid 1: `kill(-1)`, then reaps them all), empties /tmp and
/dev/shm, and runs the judge's steps in a fresh directory holding the judge's files and the
values. The verdict then also needs every judge step to exit 0 and its end marker: the program
ran with no expected value in reach, and nothing of it is left when the comparison runs.

The token is what the harness checks; the end marker is what proves the program ran its
tests to the end (a program that exits early with status 0 never prints it). The marker is
in the program's own source, so a program written to find it there could print it: the
documented limit of judging a single-process program (docs/design.md, "Languages").
"""

import os
import select
import shutil
import signal
import stat
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
limit = max(1024, job["output_bytes"])
shown = b""  # what the program's stage kept, ahead of the judge's


def write_files(directory, files, executable):
    os.chdir(directory)
    for name, data in files:
        path = os.path.join(directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o755 if name in executable else 0o644)


def run(argv, env, marker):
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


def run_stage(steps, env, marker, last_name, step_name):
    """Runs `steps` in order; ends the run with a failure verdict at the first that fails.
    Returns (the last step's kept output, its status)."""
    for i, argv in enumerate(steps):
        code, kept, seen = run(argv, env, marker)
        what = last_name if i == len(steps) - 1 else "%s %d (%s)" % (step_name, i + 1, os.path.basename(argv[0]))
        if code is None:
            verdict("failed cannot start " + what.split(" (")[0], shown + kept)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "signal %d" % -code
            verdict("failed %s was killed by %s" % (what, name), shown + kept, code)
        if code != 0:
            verdict("failed %s exited with status %d" % (what, code), shown + kept, code)
        if i == len(steps) - 1:
            if marker and not seen:
                verdict("failed exited before the tests finished", shown + kept, code)
            return kept, code
    verdict("failed no commands", shown)


def read_values(path, most):
    """The program's values file: bytes of a regular file (b"" when there is none), read without
    following a link or blocking on a fifo, at most `most` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError:
        verdict("failed the values file cannot be read", shown)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            verdict("failed the values file is not a regular file", shown)
        data = b""
        while len(data) <= most:
            chunk = os.read(fd, most + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > most:
        verdict("failed the values exceed %d bytes" % most, shown)
    return data


def end_program():
    """Kills every process of the sandbox but this one and reaps them all (as its pid 1, every
    orphan is this process's child), then empties /tmp and /dev/shm, so nothing the program
    started or wrote is there when the judge runs. In the unsafe mode (no namespace: not pid 1)
    only the working directory is emptied."""
    if os.getpid() == 1:
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
    os.chdir("/")
    try:
        for top in (("/tmp", "/dev/shm") if os.getpid() == 1 else (workdir,)):
            for name in os.listdir(top):
                path = os.path.join(top, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    # folders the program made unreadable or read-only: same uid, so that can be undone
                    os.chmod(path, 0o700)
                    for root, dirs, _ in os.walk(path):
                        for d in dirs:
                            if not os.path.islink(os.path.join(root, d)):
                                os.chmod(os.path.join(root, d), 0o700)
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            if os.listdir(top):
                verdict("failed the program's files cannot be removed", shown)
    except OSError:
        verdict("failed the program's files cannot be removed", shown)


job_env = dict(job["env"])
job_env.setdefault("HOME", workdir)
write_files(workdir, job["files"], job["executable"])
program_marker = ("\n" + job["marker"] + "\n").encode() if job["marker"] else b""
judge = job["judge"]
kept, code = run_stage(job["steps"], job_env, program_marker, "the program", "step")
if judge is None:
    verdict("passed " + token, kept, code)
shown = kept
values = read_values(os.path.join(workdir, judge["values"]), judge["values_bytes"])
end_program()
judge_dir = os.path.join("/tmp" if os.getpid() == 1 else workdir, "judge")
try:
    os.makedirs(os.path.join(judge_dir, "tmp"))
    write_files(judge_dir, list(judge["files"]) + [(judge["values"], values)], ())
except OSError as e:  # e.g. a /tmp cap smaller than the judge's files and the values together
    verdict("failed the judge cannot write its files (%s)" % (e.strerror or type(e).__name__), shown)
judge_env = dict(judge["env"], HOME=judge_dir, TMPDIR=os.path.join(judge_dir, "tmp"))
judge_marker = ("\n" + judge["marker"] + "\n").encode() if judge["marker"] else b""
kept, code = run_stage(judge["steps"], judge_env, judge_marker, "the tests", "judge step")
verdict("passed " + token, shown + b"\n" + kept, code)
