"""Stopping a run on SIGTERM or SIGINT without losing it (docs/design.md, "Run safety").

Kubernetes, SLURM and TPU maintenance events send SIGTERM, then SIGKILL after a grace period.
The first SIGTERM or SIGINT asks the train loop to finish the step it is on, save a checkpoint,
wait for the save to commit, close the data and exit with status 128 + the signal's number
(143 for SIGTERM, 130 for SIGINT); a second one exits at once (the newest complete checkpoint
stays: orbax commits a step only when it is whole).

In a multi-process run the signal handlers are left to JAX: `jax.distributed` installs a
preemption notifier for SIGTERM and orbax's `reached_preemption(step)` makes every host save
the same step, whereas a Python handler on one host alone would stop it out of step with the
others (and replace JAX's). The loop asks both.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Optional

import jax

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """`with StopSignals() as stop:` ... `if stop.requested: save and leave`."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or signal.SIGTERM)

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(f"{name} again: exiting now; the newest complete checkpoint stays", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        print(f"{name}: finishing this step, then saving a checkpoint and exiting ({name} again exits at once)",
              file=sys.stderr, flush=True)

    def __enter__(self) -> StopSignals:
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
