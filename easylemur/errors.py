"""The two kinds of error a user meets, and how every command reports them (docs/design.md,
"Errors").

- `InputError`: bad input (a config key, a data file, a checkpoint or HF directory, a flag
  value). The message names the file, line, key or value and what was expected. Exit 2.
- `RunError`: a run that could not go on (a non-finite loss, a checkpoint save that failed).
  The message says what happened and what state is safe. Exit 1.

A multi-process training run adds two codes of its own (docs/design.md, "Lost hosts and hangs"):
75 (`EXIT_LOST_HOST`) when another process of the pod was lost and 76 (`EXIT_HANG`) when no step
finished within the step watchdog's limit; a babysitter relaunches both.

Every CLI's `main` goes through `run_cli`, which prints one line `error: ...` to stderr and
returns the exit code; the traceback only with `--debug` or `EASYLEMUR_DEBUG=1`. Anything else
that escapes is a bug in easylemur: it is reported in one line too, naming its type, with a hint
to rerun with --debug.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
import traceback
from typing import Callable, Optional, Sequence

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2
EXIT_LOST_HOST, EXIT_HANG = 75, 76  # train: a process of the pod lost; no step within the watchdog's limit


class InputError(ValueError):
    """Bad input; the message names what is wrong and what was expected (exit 2)."""


class RunError(RuntimeError):
    """A run that cannot go on; the message says why and what state is safe (exit 1)."""


def debug_enabled(argv: Optional[Sequence[str]] = None) -> bool:
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get("EASYLEMUR_DEBUG", "") not in ("", "0")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """Every command's `--debug` (read by `run_cli`; listed here so --help shows it)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (or set EASYLEMUR_DEBUG=1)")


def run_cli(main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]] = None) -> int:
    """Runs a command's `main(argv)` and turns its errors into one line and an exit code."""
    if not debug_enabled(argv):
        quiet_background_errors()
    try:
        return main(argv)
    except KeyboardInterrupt:
        if debug_enabled(argv):
            raise
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        return report(e, argv)


def report(e: BaseException, argv: Optional[Sequence[str]] = None) -> int:
    """Prints the error's one line (its traceback first with --debug); returns its exit code."""
    if debug_enabled(argv):
        traceback.print_exception(e)
    print(f"error: {one_line(e)}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT if isinstance(e, InputError) else EXIT_FAILED


def brief(e: BaseException, limit: int = 240) -> str:
    """A cause inside a larger message: the error's type and the start of its text, one line."""
    text = " ".join(str(e).split())
    text = text if len(text) <= limit else text[:limit] + "..."
    return text if isinstance(e, (InputError, RunError)) else f"{type(e).__name__}: {text}"


def one_line(e: BaseException) -> str:
    """The error as one line: ours and the OS's as they are (they name the file or key), any
    other as a bug in easylemur, with its type."""
    text = " ".join(str(e).split())
    if isinstance(e, (InputError, RunError, OSError)):
        return text
    if isinstance(e, ModuleNotFoundError) and e.name and not e.name.startswith("easylemur"):
        # the usual cause: a bare `python` that is not the environment's
        return (f"this Python ({sys.executable}) has no module {e.name!r}: enter the environment the setup made "
                "(source .venv/bin/activate) or install easylemur into this one (pip install -e .)")
    return f"internal error ({type(e).__name__}: {text[:500]}); rerun with --debug for the traceback"


class _DropOrbaxThreadTracebacks(logging.Filter):
    """Drops the errors orbax logs with a traceback from its background threads (a write that
    failed: `_SignalingThread.run() raised an exception`, `Failed to run N Handler Commit
    operations`, `Save Finalize thread failed`). Each is raised again in the thread that waits
    for the save, where the command reports it in one line; logged as well, one disk-full save
    printed hundreds of lines of the same traceback before that line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from_orbax = f"{os.sep}orbax{os.sep}" in (record.pathname or "")
        return not (from_orbax and record.levelno >= logging.ERROR and record.exc_info)


def _drop_closed_loop_callbacks(hook: Callable) -> Callable:
    """sys.unraisablehook, minus `RuntimeError: Event loop is closed`: when one write of an
    orbax save fails, orbax closes that save's event loop while tensorstore still completes
    the other writes, and each completion, finding the loop closed, is reported as unraisable
    (a traceback apiece). The failure itself is raised and reported once."""

    def unraisable(u) -> None:
        if isinstance(u.exc_value, RuntimeError) and str(u.exc_value) == "Event loop is closed":
            return
        hook(u)

    unraisable.easylemur_quiet = True
    return unraisable


def quiet_background_errors() -> None:
    """Keeps what library threads print about an error the command reports anyway off stderr,
    so that stderr holds the one line (`--debug` keeps all of it). Idempotent."""
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _DropOrbaxThreadTracebacks) for f in absl.filters):
        absl.addFilter(_DropOrbaxThreadTracebacks())
    if not getattr(sys.unraisablehook, "easylemur_quiet", False):
        sys.unraisablehook = _drop_closed_loop_callbacks(sys.unraisablehook)
    # A save cut by an error (a full disk) can leave orbax's write coroutines never scheduled; when
    # the interpreter collects them at exit, each prints "coroutine '...write_fragment' was never
    # awaited" (seen under load, by timing). The failed save is already the command's one line.
    warnings.filterwarnings("ignore", message=r"coroutine '[^']*' was never awaited", category=RuntimeWarning)
