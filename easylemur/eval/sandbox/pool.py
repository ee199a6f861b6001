"""The sandbox's worker slots (as root, each slot its own uid): one pool, handed to whichever
thread runs a program next, for a batch of programs (`run_programs`) and for agent episodes
(`SlotPool.run`); and `thread_map`, the one way evaluation runs work on threads (programs,
requests, episodes)."""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

from easylemur.eval.sandbox.box import Sandbox
from easylemur.eval.sandbox.jobs import Job, Program, ProgramResult

NOT_RUN = "failed: not run"  # a program a cancelled batch never started
T = TypeVar("T")


def thread_map(fn: Callable[[Any], T], items: Sequence[Any], workers: int) -> list[T]:
    """`fn(item)` for every item, `workers` threads at a time; the results in the items' order.
    When an item raises, the items not started never start (`ThreadPoolExecutor`'s `with` would
    run every one queued first), and the error is raised once those running have ended; on a
    KeyboardInterrupt (Ctrl-C, or a suite's SIGTERM) not even those are waited for, so an
    interrupted suite writes its table at once."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        results = list(pool.map(fn, items))
    except BaseException as e:
        pool.shutdown(wait=not isinstance(e, KeyboardInterrupt), cancel_futures=True)
        raise
    pool.shutdown()
    return results


class SlotPool:
    """`n` sandbox slots, each used by one program at a time."""

    def __init__(self, n: int):
        self.free: queue.Queue = queue.Queue()
        for i in range(max(1, n)):
            self.free.put(i)

    def run(self, sandbox: Sandbox, job: Union[Job, Program, str], timeout: Optional[float] = None) -> ProgramResult:
        """Runs one job (a str is `Job(code=...)`; a Program by its runner) in the next free slot."""
        slot = self.free.get()
        try:
            if isinstance(job, Program):
                return sandbox.run_program(job, slot, timeout=timeout)
            return ProgramResult(sandbox.run(job, slot))
        finally:
            self.free.put(slot)


def run_programs(programs: Sequence[Union[Job, Program, str]], sandbox: Sandbox, workers: int = 0,
                 progress: Optional[Callable[[], None]] = None, cancel: Optional[threading.Event] = None) -> list[str]:
    """Runs jobs `workers` at a time (0: one per core); results in input order. Once `cancel`
    is set, the programs not yet started are not run (NOT_RUN)."""
    sandbox.check()
    workers = workers or os.cpu_count() or 1
    slots = SlotPool(workers)

    def one(job: Union[Job, Program, str]) -> str:
        try:
            if cancel is not None and cancel.is_set():
                return NOT_RUN
            return slots.run(sandbox, job).result
        finally:
            if progress is not None:
                progress()

    return thread_map(one, programs, workers)
