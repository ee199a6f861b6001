"""What both of the sandbox's pid-1 programs (a Job's checker, a Program's runner) do before
anything of the job runs: make themselves non-dumpable, read the job from its memfd, and close
every descriptor but the ones they keep. Not a program of its own: `programs.program_text` puts
this text in place of the `from easylemur.eval.sandbox.programs.prelude import (...)` statement
of each. Standard library only, and code any Python 3.8+ runs.
"""

import marshal
import os


def undumpable():
    # PR_SET_DUMPABLE 0, checked with PR_GET_DUMPABLE: the same-uid program can neither ptrace
    # this process nor read its /proc/<pid>/{mem,environ,fd}. False where it cannot be made so.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0 and libc.prctl(3, 0, 0, 0, 0) == 0
    except Exception:
        return False


def read_job(fd):
    "The job (marshal) from the memfd `fd`, which is closed; the harness's token popped: (job, token)."
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    job = marshal.loads(b"".join(chunks))
    return job, job.pop("token")


def keep_only(fds):
    "Closes every descriptor above 2 except `fds`, which no child inherits."
    for fd in os.listdir("/proc/self/fd"):
        if int(fd) > 2 and int(fd) not in fds:
            try:
                os.close(int(fd))
            except OSError:
                pass
    for fd in fds:
        os.set_inheritable(fd, False)
