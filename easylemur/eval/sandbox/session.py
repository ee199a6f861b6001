"""A live Python interpreter in the sandbox for a whole agent episode, as MINT's Python tool is
(docs/design.md, "Agent evaluation"): `Session`.

One `Session` is one IPython `InteractiveShell` (`programs/repl.py`) running as the first
process of its own sandbox, sealed as a Program's is (`box.py`: bwrap, no network, own pid/ipc/
uts namespaces, the read-only allow-list, private capped /tmp and /dev/shm, a memory cgroup
where one can be made, the launcher's rlimits, the program passed as text), with IPython and
its dependencies plus `libs` bound read-only at LIB_DIR. The host talks to it over two pipes
(frames of a 4-byte big-endian length and JSON). Everything read from it is untrusted: a frame
over `_max_frame` bytes, bytes that are not a JSON object, a reply of the wrong shape, an
interpreter that exits or stops answering within the cell's time limit plus `grace` all end
that sandbox; the session then starts a fresh one (the state is lost) and the observation says
so (RESTARTED). Nothing here is a verdict: the observation is what the model sees.

Tools are host functions (trusted: a Wikipedia lookup, or a step of a game the host plays):
each name is bound in the interpreter to a stub with the tool's parameters (`HostTool`; a plain
callable takes one str, `query`) that asks the host over the channel; the host calls
`tools[name](*args)` and the stub returns its str. Host time spent in tools stops the cell's host
clock, up to cell_timeout in a cell (the interpreter's own alarm keeps running, as in MINT).

Uids: as root each sandbox runs as its own uid. A session holds its sandbox for minutes, so it
takes no slot of a `SlotPool`: sessions have their own slots, `SESSION_SLOT_BASE` and up
(uid `UID_BASE + SESSION_SLOT_BASE + n`), one per live session, freed by close(), so no two
live sessions and no Job or Program of the pool share a uid (their RLIMIT_NPROC counts apart).

Sandboxes are started from one long-lived thread of this module: bwrap's --die-with-parent
follows the thread that started it, and a session outlives the thread of the episode that made
it when episodes run in a pool.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import keyword
import os
import secrets
import select
import threading
import time
import weakref
from typing import Callable, Mapping, Optional, Sequence

from easylemur.errors import InputError, RunError
from easylemur.eval.sandbox.binds import importable, lib_binds
from easylemur.eval.sandbox.box import Sandbox, _Box, _lib_path
from easylemur.eval.sandbox.jobs import SANDBOX_PATH
from easylemur.eval.sandbox.programs import REPL

# What IPython 9 imports to start a shell, run cells and print their tracebacks (IPython,
# traitlets, pygments at start; stack_data, executing, asttokens, pure_eval for a traceback),
# and for a cell's `!command` (pexpect, ptyprocess): measured with `python -I -S` and sys.modules.
IPYTHON_LIBS = ("IPython", "traitlets", "pygments", "stack_data", "executing", "asttokens", "pure_eval", "pexpect",
                "ptyprocess")
SESSION_LIBS = ("numpy", "sympy", "mpmath")  # beside the standard library, where installed (as an agent's Program)
SESSION_SLOT_BASE = 100_000  # sessions' slots (uids UID_BASE + 100_000 + n): never a SlotPool's
TOOL_ARG_CHARS = 10_000  # the most characters a tool stub sends to the host (its arguments together)

NO_OUTPUT = "[Executed Successfully with No Output]"
TRUNCATED = "...\n[Output Truncated]"
# The observation when the host had to end the interpreter: the state of earlier cells is gone.
RESTARTED = ("[The Python interpreter was restarted because {why}. All variables, imports and definitions "
             "from earlier cells are lost.]")
EXPIRED = "[The Python session has ended: it reached its time limit of {lifetime:g} seconds. Nothing more can run.]"

_slots_lock = threading.Lock()
_slots_live: set[int] = set()
_spawners: dict[int, concurrent.futures.ThreadPoolExecutor] = {}  # per process id: a forked child makes its own


@dataclasses.dataclass(frozen=True)
class HostTool:
    """A tool of a session: `fn(*args)` runs on the host with one str per parameter and returns a str.
    `formats`: the stub turns each argument into a str as an f-string does (a tool that puts its
    arguments into a command, as MINT's ALFWorld tools do); else an argument that is not a str is
    a TypeError in the interpreter."""

    fn: Callable[..., str]
    params: tuple[str, ...] = ("query",)
    formats: bool = False


def _host_tool(name: object, tool: object) -> HostTool:
    t = tool if isinstance(tool, HostTool) else HostTool(tool) if callable(tool) else None  # type: ignore[arg-type]
    names = (name, *t.params) if t is not None else (name,)
    if t is None or not callable(t.fn) or len(set(t.params)) != len(t.params) or \
            not all(isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n) for n in names):
        raise InputError(f"session tool {name!r}: expected a Python identifier naming a callable (or a HostTool "
                         f"with distinct identifiers as parameters)")
    return t


class _Broken(Exception):
    """The interpreter cannot go on: `why` completes RESTARTED's sentence."""

    def __init__(self, why: str, timed_out: bool = False):
        super().__init__(why)
        self.why, self.timed_out = why, timed_out


class Session:
    """A live Python interpreter (IPython's InteractiveShell) inside the sandbox, one per agent episode.

    `run(code)` runs one cell and returns its observation as MINT shows it: the captured stdout
    (IPython prints `Out[n]: value` for a bare last expression, and tracebacks, there), NO_OUTPUT
    when that is empty, else cut to `output_chars` characters plus TRUNCATED. State persists
    across cells. A cell gets `cell_timeout` seconds, then TimeoutError("Timed out after N
    seconds.") inside the interpreter (SIGALRM), shown as IPython's traceback; the session goes
    on. A cell that does not answer within cell_timeout + `grace` seconds (SIGALRM ignored, a
    loop in C), or an interpreter that exits, crashes, is killed for memory or sends a malformed
    frame, is killed with its sandbox and replaced by a fresh one: the observation is then
    RESTARTED (after "TimeoutError: Timed out after N seconds." for a cell past its limit).
    `lifetime` seconds after it started the session is ended (also while idle) and run()
    returns EXPIRED. `slot`: a session slot (see SESSION_SLOT_BASE); None takes the lowest free
    one. `start_timeout`: how long IPython may take to come up (a RunError past it)."""

    def __init__(self, sandbox: Sandbox, *, tools: Mapping[str, "Callable[[str], str] | HostTool"] = {},
                 cell_timeout: float = 30.0, output_chars: int = 2000, libs: Sequence[str] = SESSION_LIBS,
                 slot: Optional[int] = None, grace: float = 5.0, lifetime: float = 3600.0,
                 start_timeout: float = 60.0):
        if not cell_timeout > 0 or not grace >= 0 or not lifetime > 0 or not start_timeout > 0:
            raise InputError(f"session limits cell_timeout={cell_timeout}, grace={grace}, lifetime={lifetime}, "
                             f"start_timeout={start_timeout}: expected positive seconds (grace >= 0)")
        if int(output_chars) < 1:
            raise InputError(f"output_chars={output_chars}: must be >= 1")
        self.tools = {name: _host_tool(name, tool) for name, tool in tools.items()}
        self.sandbox = sandbox
        self.cell_timeout, self.output_chars, self.grace = float(cell_timeout), int(output_chars), float(grace)
        self.lifetime, self.start_timeout = float(lifetime), float(start_timeout)
        self._mode = sandbox.check()
        self._binds = list(lib_binds(tuple(dict.fromkeys(IPYTHON_LIBS + importable(tuple(libs))))))
        self._state = _State(_take_slot(slot))
        self._finalizer = weakref.finalize(self, self._state.shutdown)
        try:
            with self._state.lock:
                self._state.live = self._start()
        except BaseException:
            self._finalizer()
            raise
        self._state.timer = threading.Timer(self.lifetime, self._state.expire)
        self._state.timer.daemon = True
        self._state.timer.start()

    @property
    def slot(self) -> int:
        """The session slot (uid UID_BASE + slot as root)."""
        return self._state.slot

    def run(self, code: str) -> str:
        """Runs one cell; returns its observation (see the class)."""
        if not isinstance(code, str):
            raise InputError(f"a cell is a str, not {type(code).__name__}")
        state = self._state
        with state.lock:
            if state.closed:
                raise RunError("this Python session is closed")
            if state.expired:
                return EXPIRED.format(lifetime=self.lifetime)
            if state.live is None:  # the last restart failed
                state.live = self._start()
            try:
                out = self._exchange(state.live, secrets.token_hex(8), code)
            except _Broken as e:
                state.live.stop()
                state.live = None
                note = RESTARTED.format(why=e.why)
                if e.timed_out:
                    note = f"TimeoutError: {_timed_out(self.cell_timeout)}\n{note}"
                state.live = self._start()
                return note
        out = out.encode("utf-8", "replace").decode("utf-8")  # lone surrogates a cell printed
        if out == "":
            return NO_OUTPUT
        return out if len(out) <= self.output_chars else out[:self.output_chars] + TRUNCATED

    def close(self) -> None:
        """Ends the interpreter and its sandbox and frees the session's slot; idempotent."""
        self._finalizer()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ inside

    def _start(self) -> "_Live":
        """A fresh interpreter, once it said `ready` (RunError if it does not within start_timeout)."""
        sb, mode = self.sandbox, self._mode
        env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        payload = {"token": "", "source": REPL, "cell_timeout": self.cell_timeout, "output_chars": self.output_chars,
                   "tool_arg_chars": TOOL_ARG_CHARS,
                   "tools": {n: {"params": list(t.params), "formats": t.formats} for n, t in sorted(self.tools.items())},
                   "libpath": _lib_path(self._binds, mode),
                   "env": env}
        to_r, to_w = os.pipe()  # the host writes, the interpreter reads
        from_r, from_w = os.pipe()  # the interpreter writes, the host reads
        try:
            box = _spawner().submit(sb._start, REPL, payload, [to_r, from_w], self._binds,
                                    SESSION_SLOT_BASE + self._state.slot, mode, sb.python,
                                    cpu_seconds=max(30, int(self.lifetime) + 1)).result()
        except BaseException as e:
            for fd in (to_w, from_r):
                os.close(fd)
            if isinstance(e, OSError):
                raise RunError(f"cannot start the Python session's sandbox: {type(e).__name__}: {e}") from e
            raise
        finally:
            os.close(to_r)
            os.close(from_w)
        live = _Live(box, to_w, from_r, _max_frame(self.output_chars))
        try:
            msg = live.receive(time.monotonic() + self.start_timeout)
            if msg.get("t") != "ready":
                why = msg.get("why") if msg.get("t") == "fail" and isinstance(msg.get("why"), str) else "no ready message"
                raise _Broken(_plain(why))
        except _Broken as e:
            live.stop()
            raise RunError(f"the Python session did not start: {e.why} (IPython and its dependencies must be "
                           f"importable by {sb.python}: pip install 'ipython>=8')") from None
        return live

    def _exchange(self, live: "_Live", cell: str, code: str) -> str:
        """The cell's raw stdout, from the interpreter's `done`; answers its tool calls on the way.
        `cell` is a fresh random id: what an earlier cell left in the pipe or forged is skipped."""
        deadline = time.monotonic() + self.cell_timeout + self.grace
        paused = 0.0  # host seconds spent in tools, added to the deadline up to cell_timeout
        live.send({"t": "run", "id": cell, "code": code}, deadline)
        while True:
            msg = live.receive(deadline)
            kind = msg.get("t")
            if msg.get("id") != cell:
                continue  # an earlier cell's, or a message a cell forged: not this cell's answer
            if kind == "done":
                out = msg.get("out")
                if not isinstance(out, str):
                    raise _Broken("it sent the host a malformed message")
                return out
            if kind == "tool" and isinstance(msg.get("call"), int):
                began = time.monotonic()
                ok, text = self._tool(msg.get("name"), msg.get("args"))
                spent = min(time.monotonic() - began, self.cell_timeout - paused)
                paused += spent
                deadline += spent
                live.send({"t": "reply", "call": msg["call"], "ok": ok, "text": text}, deadline)

    def _tool(self, name: object, args: object) -> tuple[bool, str]:
        """(ok, the tool's str answer or why it failed) for a tool request from the interpreter."""
        if not isinstance(name, str) or name not in self.tools:
            return False, f"no tool named {str(name)[:100]!r}"
        tool = self.tools[name]
        if not isinstance(args, list) or len(args) != len(tool.params) or not all(isinstance(a, str) for a in args) \
                or sum(len(a) for a in args) > TOOL_ARG_CHARS:
            return False, f"{name}() takes {len(tool.params)} str of at most {TOOL_ARG_CHARS} characters in all"
        try:
            answer = tool.fn(*(a.encode("utf-8", "replace").decode("utf-8") for a in args))
        except Exception as e:
            return False, f"{name} failed: {type(e).__name__}: {e}"[:1000]
        return True, answer if isinstance(answer, str) else str(answer)


class _State:
    """What a Session's finalizer and lifetime timer share with it (they hold no reference to the Session)."""

    def __init__(self, slot: int):
        self.slot = slot
        self.lock = threading.Lock()
        self.live: Optional[_Live] = None
        self.closed = self.expired = False
        self.timer: Optional[threading.Timer] = None

    def expire(self) -> None:
        with self.lock:
            if not self.closed and self.live is not None:
                self.live.stop()
                self.live = None
            self.expired = True

    def shutdown(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.live is not None:
                self.live.stop()
                self.live = None
            with _slots_lock:
                _slots_live.discard(self.slot)


class _Live:
    """One running interpreter: its sandbox and the host's ends of the channel."""

    def __init__(self, box: _Box, to_fd: int, from_fd: int, max_frame: int):
        self.box, self.to_fd, self.from_fd, self.max_frame = box, to_fd, from_fd, max_frame
        self.buf = bytearray()
        os.set_blocking(to_fd, False)
        os.set_blocking(from_fd, False)

    def send(self, msg: dict, deadline: float) -> None:
        """Writes one frame, waiting for room until `deadline` (_Broken past it or on a closed pipe)."""
        data = json.dumps(msg).encode()
        view = memoryview(len(data).to_bytes(4, "big") + data)
        poll = select.poll()
        poll.register(self.to_fd, select.POLLOUT)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Broken("this cell did not stop at its time limit", timed_out=True)
            if not poll.poll(left * 1000):
                continue
            try:
                view = view[os.write(self.to_fd, view[:1 << 16]):]
            except BlockingIOError:
                continue
            except OSError:
                raise _Broken("it exited or crashed during this cell") from None

    def receive(self, deadline: float) -> dict:
        """The next frame from the interpreter as a dict; _Broken when it is malformed or too long,
        when the interpreter has exited, or at `deadline`. Never reads past the frame's end."""
        poll = select.poll()
        poll.register(self.from_fd, select.POLLIN)
        while True:
            need = 4 - len(self.buf)
            if need <= 0:
                size = int.from_bytes(self.buf[:4], "big")
                if size > self.max_frame:
                    raise _Broken("it sent the host a malformed message")
                need = 4 + size - len(self.buf)
                if need <= 0:
                    body = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    try:
                        msg = json.loads(body)
                    except (ValueError, RecursionError):
                        msg = None
                    if not isinstance(msg, dict):
                        raise _Broken("it sent the host a malformed message")
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Broken("this cell did not stop at its time limit", timed_out=True)
            if not poll.poll(left * 1000):
                continue
            try:
                data = os.read(self.from_fd, min(need, 1 << 16))
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                raise _Broken("it exited or crashed during this cell")
            self.buf += data

    def stop(self) -> None:
        """Kills the sandbox (every process in it), closes the channel, removes the cgroup; idempotent."""
        if self.box is None:
            return
        box, self.box = self.box, None
        box.kill(timed_out=box.proc is not None and box.proc.poll() is None)
        box.release()
        for fd in (self.to_fd, self.from_fd):
            os.close(fd)


def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that starts this process's session sandboxes and lives as long as the process
    (bwrap's --die-with-parent follows the thread that started it, not the process)."""
    with _slots_lock:
        pid = os.getpid()
        if pid not in _spawners:
            _spawners.clear()
            _spawners[pid] = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                                   thread_name_prefix="easylemur-session-start")
        return _spawners[pid]


def _take_slot(slot: Optional[int]) -> int:
    """A session slot for a new session: `slot` if no live session holds it, else (None) the lowest free one."""
    with _slots_lock:
        if slot is None:
            slot = next(n for n in range(len(_slots_live) + 1) if n not in _slots_live)
        elif not 0 <= slot < 1_000_000 or slot in _slots_live:
            raise InputError(f"session slot {slot}: expected 0..999999 and not held by a live session")
        _slots_live.add(slot)
        return slot


def _max_frame(output_chars: int) -> int:
    """The longest frame the host reads from an interpreter: an answer of output_chars + 1
    characters or a tool query of TOOL_ARG_CHARS, each JSON-escaped as ASCII (up to 12 bytes a
    character: a surrogate pair's two \\uXXXX), plus the message around it."""
    return 12 * max(output_chars + 1, TOOL_ARG_CHARS) + 4096


def _timed_out(seconds: float) -> str:
    return f"Timed out after {seconds:g} seconds."


def _plain(text: str) -> str:
    """An interpreter's startup error, bounded to printable ASCII (it came from the sandbox)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:500])
