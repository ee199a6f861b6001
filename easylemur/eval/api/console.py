"""What the evaluation prints on stderr besides its results: how far a task's work has gone
(`Progress`), and each log record once (`one_line_per_record`).

`Progress` is the one progress display of every benchmark runner (the single-benchmark
command's generation and judging, the suite's requests, judging and episodes, lm-eval's requests
to a model in this process):

    with Progress("suite: humaneval: judged", 164, "samples") as progress:
        run_programs(programs, sandbox, progress=progress)   # progress() after each

A line says what is done of how many, the rate and the time:
`suite: humaneval: judged 41/164 samples (3.2/s, 13 s, ~38 s left)`. On a terminal it is one
line rewritten in place (at most 10 times a second); otherwise (a log file, a pipe) a plain line
at the start, each time another tenth is done or 30 s have passed, and at the end. `update` may
be called from any thread.

Log records: two handlers printed the same record. huggingface_hub and datasets give their own
library loggers a stderr handler and leave them propagating, and the first absl log call of a
process (orbax's, when a checkpoint loads) runs `logging.basicConfig()`, a stderr handler on the
root logger; so every Hub warning (each of its retries offline) came twice, once plain and once
as `WARNING:huggingface_hub...`. `one_line_per_record()`, which the commands call first, gives
the root logger its handler before anything else can (basicConfig then adds none), with a filter
that leaves a record to the library handler that printed it already. lm-eval's own handler
(`lm_eval.utils.setup_logging`) does not propagate, so its records are printed by it alone.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Optional, TextIO

EVERY_FRACTION = 0.1  # a plain line each time another tenth is done ...
EVERY_SECONDS = 30.0  # ... or this long after the last one
REDRAW_SECONDS = 0.1  # a terminal's line is rewritten at most this often


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _rate(per_second: float) -> str:
    if per_second >= 10:
        return f"{per_second:.0f}/s"
    if per_second >= 1:
        return f"{per_second:.1f}/s"
    return f"{60 * per_second:.1f}/min"


class Progress:
    """`done` of `total` items (`unit`: samples, episodes, requests) of the work `label` names.
    Call it (or `update(k)`) as items finish; `close()` (or leaving the `with`) ends the display.
    `stream` defaults to the current sys.stderr; `tty` to whether it is a terminal."""

    def __init__(self, label: str, total: int, unit: str = "samples", *, stream: Optional[TextIO] = None,
                 tty: Optional[bool] = None, clock=time.monotonic):
        self.label, self.total, self.unit = label, int(total), unit
        self._stream, self._clock = stream, clock
        self.tty = self._is_tty() if tty is None else tty
        self.done = 0
        self._lock = threading.Lock()
        self._start = self._last = clock()
        self._shown = -1  # the count the last plain line showed
        self._width = 0  # the length of the line a terminal shows now
        self._closed = False
        if self.total > 0:
            self._show(self._start, force=True)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _is_tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or odd stream
            return False

    def line(self, now: Optional[float] = None) -> str:
        """The display's text for the current count."""
        elapsed = (self._clock() if now is None else now) - self._start
        text = f"{self.label} {self.done}/{self.total} {self.unit}"
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            left = (self.total - self.done) / rate
            text += f" ({_rate(rate)}, {_duration(elapsed)}" + (f", ~{_duration(left)} left)" if left >= 1 else ")")
        return text

    def __call__(self) -> None:
        self.update(1)

    def update(self, k: int = 1) -> None:
        with self._lock:
            if self._closed or self.total <= 0:
                return
            self.done += k
            self._show(self._clock())

    def _show(self, now: float, force: bool = False, end: bool = False) -> None:
        if self.tty:
            if not (force or end or now - self._last >= REDRAW_SECONDS):
                return
            text = self.line(now)
            self._write("\r" + text + " " * max(0, self._width - len(text)) + ("\n" if end else ""))
            self._width = len(text)
        else:
            step = max(1, int(self.total * EVERY_FRACTION))
            due = force or end or self.done // step > max(self._shown, 0) // step or now - self._last >= EVERY_SECONDS
            if not due or (end and self._shown == self.done):
                return
            self._write(self.line(now) + "\n")
            self._shown = self.done
        self._last = now

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr gone (a closed pipe): the work goes on without a display
            pass

    def close(self) -> None:
        """The last line: the final count (a terminal's line ends)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.total > 0:
                self._show(self._clock(), end=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------ log records

FORMAT = "%(levelname)s:%(name)s:%(message)s"  # logging's (and absl's basicConfig's) own


class PrintedOnce(logging.Filter):
    """Passes a record only when no logger between its own and the root (whose handler this
    filters) has a handler that printed it already."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger = logging.getLogger(record.name)
        root = logging.getLogger()
        while logger is not None and logger is not root:
            if any(record.levelno >= h.level for h in logger.handlers):
                return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


def one_line_per_record() -> None:
    """Every log record on stderr once (module doc). Idempotent; the root logger's level stays
    (WARNING by default). A root logger that has handlers already (a test's capture, the
    embedding program's) gets none added; its stderr handler, if any, gets the filter."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    for handler in root.handlers:  # ours, or a basicConfig handler on stderr added before this ran
        on_stderr = type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.__stderr__)
        if on_stderr and not any(isinstance(f, PrintedOnce) for f in handler.filters):
            handler.addFilter(PrintedOnce())
