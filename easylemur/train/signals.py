"""Stopping a run on SIGTERM or SIGINT without losing it (docs/design.md, "Run safety").

Kubernetes, SLURM and TPU maintenance events send SIGTERM, then SIGKILL after a grace period.
The first SIGTERM or SIGINT asks the train loop to finish the step it is on, save a checkpoint,
wait for the save to commit, close the data and exit with status 128 + the signal's number
(143 for SIGTERM, 130 for SIGINT); a second one exits at once (the newest complete checkpoint
stays: orbax commits a step only when it is whole).

The signals are counted off the main thread: Python runs a signal's handler only in the main
thread, between bytecodes, and a signal that arrives again before its handler ran is one
handler call; while the main thread waits in XLA for a step, two signals would be one and the
second lost. So the C-level handler writes one byte per delivered signal to a pipe
(`signal.set_wakeup_fd`) and a daemon thread reads them: the first asks for the stop, the
second exits (os._exit: no Python cleanup, which could itself wait on the step).

In a multi-process run the signal handlers are left to JAX: `jax.distributed` installs a
preemption notifier for SIGTERM and orbax's `reached_preemption(step)` makes every host save
the same step, whereas a Python handler on one host alone would stop it out of step with the
others (and replace JAX's). The loop asks both. A process of the pod that dies, stalls or
hangs instead is `train/pod.py`'s (docs/design.md, "Lost hosts and hangs"): exit 75 or 76 on
every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Optional

import jax

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_QUIT = b"\0"  # written by __exit__ to end the reader thread; no signal has number 0


class StopSignals:
    """`with StopSignals() as stop:` ... `if stop.requested: save and leave`."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: dict = {}
        self._previous_wakeup_fd = -1
        self._pipe: Optional[tuple[int, int]] = None
        self._reader: Optional[threading.Thread] = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        """The Python-level handler: the reader thread has counted this delivery already (a
        Python handler must be set for the C-level one to write the wakeup byte)."""

    def _read(self, fd: int) -> None:
        delivered = 0
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return  # the write end closed
            for signum in data:
                if signum == _QUIT[0]:
                    return
                if signum not in SIGNALS:
                    continue  # another signal with a Python handler writes its byte too
                delivered += 1
                name = signal.Signals(signum).name
                if delivered > 1:
                    # os.write, not print: no Python-level lock (another thread may hold stderr's)
                    os.write(2, f"{name} again: exiting now; the newest complete checkpoint stays\n".encode())
                    os._exit(128 + signum)
                self.signum = signum
                print(f"{name}: finishing this step, then saving a checkpoint and exiting ({name} again exits at "
                      "once)", file=sys.stderr, flush=True)

    def __enter__(self) -> StopSignals:
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(w, False)  # the C handler must never block (set_wakeup_fd requires it)
            self._pipe = (r, w)
            self._reader = threading.Thread(target=self._read, args=(r,), name="easylemur-stop-signals", daemon=True)
            self._reader.start()
            self._previous_wakeup_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
            global _active
            _active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
        if self._pipe is None:
            return
        r, w = self._pipe
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        global _active
        _active = None
        try:
            os.write(w, _QUIT)
        except BlockingIOError:
            pass  # a full pipe: the reader is behind, and exits on the closed pipe below
        os.close(w)
        if self._reader is not None:
            self._reader.join(timeout=5)
        os.close(r)
        self._pipe, self._reader = None, None


_active: Optional[StopSignals] = None


def _forget_in_child() -> None:
    """A process forked from a run (without exec) would otherwise write its own signals into
    the run's pipe: one Ctrl-C to the process group would count as two."""
    if _active is not None and _active._pipe is not None:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
            for s, handler in _active._previous.items():  # not the run's do-nothing handler
                signal.signal(s, handler)
            for fd in _active._pipe:
                os.close(fd)


os.register_at_fork(after_in_child=_forget_in_child)
