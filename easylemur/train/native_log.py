"""JAX's native log on a pod's way down (docs/design.md, "Lost hosts and hangs").

When JAX's coordination agent gives up it writes its verdict as C++ log lines (`E1206 ...
coordination_service_agent.cc:289] ...`, then `F1206 ... client.h:80] Terminating process ...`)
and a stack trace of some 40 lines straight to file descriptor 2, then aborts. The only line a
user needs is easylemur's own ("lost process 2 of 4 ..."), and JAX's text is where the lost
process is named when its heartbeat fired first. So, in a process of a pod, `divert` routes
descriptor 2 through a small filter process (this file run as a script: it must outlive an
`os._exit` and a SIGABRT of its parent, and a thread of the aborting process could not be
trusted to run). The filter passes everything through, unchanged and unbuffered (progress bars
included), except:

- an `F` line (fatal: the process is going down) and, after it, everything but easylemur's own
  `error: ` / `warning: ` lines and empty ones (the fatal message's continuation, the stack trace);
- an `E` or `W` line from the coordination service, its agent or the preemption notices they
  carry, and the lines that follow it within half a second (the message's continuation lines:
  "2", "The tasks have crashed. ...").

Those go to a private file (mkstemp, 0600) whose name the abort handler's line gives; the file
is removed at the end when nothing was diverted. `jax_verdict(path)` reads what JAX said there:
which tasks it found unhealthy, or that the coordination service is gone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

_PREFIX = re.compile(rb"([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ([^\]]+)\] ")
_OURS = (b"error: ", b"warning: ")
_HOLD = 64  # the bytes of a line's start that decide where it goes
_CONTINUATION_SECONDS = 0.5
# the sources of the E and W lines a pod process writes on its way down: the coordination service and
# its agent, and the preemption notices they carry ("Failed to retrieve preemption notice ...")
_WAY_DOWN = (b"coordination", b"preemption_sync")


def divert(pid: int) -> str:
    """Routes this process's descriptor 2 through the filter; returns the file that receives
    JAX's fatal messages and traces. Descriptor 1 is left alone."""
    fd, path = tempfile.mkstemp(prefix=f"easylemur-jax-p{pid}-", suffix=".log")
    os.close(fd)
    r, w = os.pipe()
    console = os.dup(2)
    sys.stderr.flush()
    # its own session: a Ctrl-C or SIGTERM to the job's process group must not end the filter
    # before its parent has said why it stops; it ends when every writer of the pipe is gone
    subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), path], stdin=r, stdout=console,
                     stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
    os.dup2(w, 2)
    for x in (r, w, console):
        os.close(x)
    return path


def jax_verdict(path: str, wait: float = 1.0) -> tuple[Optional[list[int]], bool]:
    """(the tasks JAX's heartbeat found unhealthy, or None; whether it said the coordination
    service is gone), from the diverted file, waiting up to `wait` seconds for the filter to
    have written JAX's fatal message."""
    deadline = time.monotonic() + wait
    text = b""
    while True:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError:
            text = b""
        if b"Check failure stack trace" in text or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    m = re.search(rb"unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+?)\s*(?:The tasks|\n\n|$)", text)
    tasks = [int(x) for x in re.findall(rb"\d+", m.group(1))] if m else None
    gone = b"Failed to send RPC to coordination service" in text or b"leader task was preempted" in text
    return tasks, gone


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:  # the console is gone: nothing to pass on to
            return
        data = data[n:]


class _Filter:
    def __init__(self, path: str):
        self.path = path
        self.file: Optional[int] = None
        self.fatal = False
        self.continued_until = 0.0  # a diverted E line's continuation lines go with it until then
        self.line = b""  # the start of the current line, held until it is decided
        self.to: Optional[str] = None  # where the rest of the current line goes: "pass", "divert"

    def _divert(self, data: bytes) -> None:
        if self.file is None:
            self.file = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        _write_all(self.file, data)

    def _decide(self, head: bytes, complete: bool) -> Optional[str]:
        m = _PREFIX.match(head)
        if m:
            severity, source = m.group(1), m.group(2)
            if severity == b"F":
                self.fatal = True
                return "divert"
            if self.fatal or (severity in (b"E", b"W") and any(w in source for w in _WAY_DOWN)):
                self.continued_until = time.monotonic() + _CONTINUATION_SECONDS
                return "divert"
            self.continued_until = 0.0
            return "pass"
        if not complete and len(head) < _HOLD and head[:1] in b"IWEF" and (len(head) < 2 or head[1:2].isdigit()):
            return None  # may yet be a log line
        if not (self.fatal or time.monotonic() < self.continued_until):
            return "pass"
        if head == b"\n" or any(head.startswith(o) for o in _OURS):
            self.continued_until = 0.0
            return "pass"
        if not complete and any(o.startswith(head) for o in _OURS):
            return None
        return "divert"

    def _emit(self, data: bytes) -> None:
        if self.to == "divert":
            self._divert(data)
        else:
            _write_all(1, data)

    def feed(self, chunk: bytes) -> None:
        while chunk:
            if self.to is None:
                nl = chunk.find(b"\n")
                take = chunk if nl < 0 else chunk[:nl + 1]
                self.line += take
                chunk = chunk[len(take):]
                self.to = self._decide(self.line, complete=nl >= 0)
                if self.to is None:
                    continue
                data, self.line = self.line, b""
                self._emit(data)
                if data.endswith(b"\n"):
                    self.to = None
                continue
            nl = chunk.find(b"\n")
            data = chunk if nl < 0 else chunk[:nl + 1]
            chunk = chunk[len(data):]
            self._emit(data)
            if nl >= 0:
                self.to = None

    def close(self) -> None:
        if self.line:
            self.to = self.to or "pass"
            self._emit(self.line)
        if self.file is not None:
            os.close(self.file)
        elif os.path.exists(self.path) and os.path.getsize(self.path) == 0:
            os.unlink(self.path)


def main(path: str) -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    f = _Filter(path)
    while True:
        try:
            chunk = os.read(0, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        f.feed(chunk)
    f.close()


if __name__ == "__main__":
    main(sys.argv[1])
