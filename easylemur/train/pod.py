"""Lost hosts and hangs: the pod's start-up and its guard (docs/design.md, "Lost hosts and hangs").

JAX's multi-controller model turns one missing process into every other process blocking in a
collective, and its own answer (the coordination service's heartbeat) aborts every process
with a C++ stack trace and no word of which process was lost. So:

- `initialize(cfg.distributed)`: `jax.distributed.initialize` with bounded timeouts (the
  connection, the shutdown barrier, and JAX's heartbeat as a backstop a little longer than
  ours).
- `Guard`: one daemon thread per process. With several processes it beats through the
  coordination service's key-value store (`easylemur/live/<p>` = `count step phase`, every
  `heartbeat_timeout_seconds / 10` s at most 1 s) and reads every peer's beat back. A peer whose
  beat has not changed for `heartbeat_timeout_seconds`, or that said it exited with an error,
  is lost; so is the coordinator (process 0) when the store has not answered for that long. A
  peer that exited with bad input (2) while this process still sets up is given that long to
  reach the same refusal itself: one config, so the pod usually ends with 2 everywhere.
  Every process then prints one line naming the lost process, the cause and its own step, and
  exits `EXIT_LOST_HOST` (75) with `os._exit`: never JAX's shutdown barrier, which would wait
  for the dead. In every run (one process too) it is also the step watchdog: no step finished
  for max(`watchdog.step_factor` x the median step time, `watchdog.floor_seconds`) outside a
  long phase (compile, save, eval; the watch starts at the train loop) dumps every thread's
  stack (faulthandler) to stderr and events.jsonl and exits `EXIT_HANG` (76), naming the
  processes that are behind or in a data read when the beats say so.

`EASYLEMUR_FAULT=KIND@PROCESS:STEP` injects a fault for the tests (tests/test_pod_faults.py):
`hang_data` blocks that process's data read for step STEP forever; `kill_save` SIGKILLs it
right after the save of step STEP began.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator, Optional

import jax

from easylemur.errors import EXIT_BAD_INPUT, EXIT_HANG, EXIT_LOST_HOST
from easylemur.train import native_log

LONG_PHASES = ("setup", "compile", "save", "eval", "done")  # the step watchdog waits through these
_KEY = "easylemur/live/"


def _on_tpu_vm() -> bool:
    from easylemur.host import tpu_device_nodes

    if os.environ.get("JAX_PLATFORMS", "") not in ("", "tpu"):
        return False
    return tpu_device_nodes()


def jax_heartbeat_seconds(heartbeat: float, forced: float = 0) -> int:
    """JAX's own heartbeat timeout T, the backstop after ours (it aborts every process unnamed),
    set so that ours always comes first (docs/design.md, "Lost hosts and hangs"). JAX beats every
    T/2 and declares a process dead T after its last beat, so it can react as early as T/2 after
    a fault (the probe with T = 45: beats every 22.5 s, aborts 22.5-45 s after). Ours names the
    lost process at most `heartbeat` + two beat intervals (each at most 1 s) after it: T/2 =
    `heartbeat` + 10 leaves 8 s to spare at every setting. `forced` (the config's
    `jax_heartbeat_timeout_seconds`), when not 0, is used instead."""
    return math.ceil(forced) if forced > 0 else 2 * math.ceil(heartbeat) + 20


def initialize(d: Any) -> None:
    """Multi-host start-up (docs/design.md, "Multi-host"), from the config's `distributed`
    section. Explicit arguments for GPU/CPU clusters; on TPU VMs (several workers) jax finds
    the coordinator itself. Single-process runs do nothing."""
    timeouts = dict(initialization_timeout=int(d.initialization_timeout_seconds),
                    heartbeat_timeout_seconds=jax_heartbeat_seconds(d.heartbeat_timeout_seconds,
                                                                      d.get("jax_heartbeat_timeout_seconds", 0)),
                    shutdown_timeout_seconds=int(d.shutdown_timeout_seconds))
    if d.coordinator_address:
        # Must run before any backend starts; gloo only affects the CPU backend's collectives.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=d.coordinator_address,
            num_processes=d.num_processes or None,
            process_id=None if d.process_id < 0 else d.process_id,
            **timeouts,
        )
    elif _on_tpu_vm():
        # jax finds the pod's coordinator, process count and index from the TPU VM metadata;
        # on a single-host TPU VM this is one process and costs nothing.
        jax.distributed.initialize(**timeouts)


def _client() -> Any:
    from jax._src import distributed

    return distributed.global_state.client


def _bounded(fn: Callable[[], Any], timeout: float = 2.0) -> None:
    """Runs `fn` off this thread for `timeout` seconds at most: on the way out a process must
    not wait on what may never answer (a lock the main thread holds, an RPC to a dead
    coordinator, a bucket)."""
    def call() -> None:
        with contextlib.suppress(Exception):
            fn()
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout)


def _flush_std() -> None:
    _bounded(lambda: [f.flush() for f in (sys.stdout, sys.stderr)], 1.0)


class Guard:
    """`guard = Guard(cfg, events).start()`; the loop tells it `phase(...)`, `long(...)` and
    `step_done(step)`; `finish()` at a clean end, `failed(code)` before an error exit."""

    def __init__(self, cfg: Any, events: Any = None, on_exit: Optional[Callable[[], None]] = None):
        self.heartbeat = float(cfg.distributed.heartbeat_timeout_seconds)
        self.jax_heartbeat = jax_heartbeat_seconds(self.heartbeat, cfg.distributed.get("jax_heartbeat_timeout_seconds", 0))
        self.factor = float(cfg.watchdog.step_factor)
        self.floor = float(cfg.watchdog.floor_seconds)
        self.events = events
        self.on_exit = on_exit  # run before exiting on a fault (releasing the workdir lock)
        self.pid, self.count = jax.process_index(), jax.process_count()
        self.interval = min(1.0, max(0.1, self.heartbeat / 10))
        self.step = 0  # the newest step this process finished
        self.at = 0  # the step it works on
        self.phase_name = "setup"
        self.progress = time.monotonic()  # the last step's end, or the end of the last long phase
        self.durations: deque = deque(maxlen=100)
        self.last_done: Optional[float] = None
        self.armed = False  # the watchdog: from the train loop's start
        self.exiting = threading.Lock()
        self._stop = threading.Event()
        self._beats = 0
        self._said: Optional[str] = None  # the last word written (done, exit ...): no beat after it
        self._last_ok = time.monotonic()  # the coordination service's last answer
        self._last_error = ""
        self._peers: dict[int, tuple[str, float]] = {}  # process -> (its beat, when it last changed)
        self._threads: list[threading.Thread] = []
        self._fault = _fault_from_env()
        self._aborted = False  # JAX's agent aborted this process
        self.native: Optional[str] = None  # where JAX's native log goes on the way down (several processes)

    # ---------------------------------------------------------------- what the loop tells it

    def start(self) -> Guard:
        now = time.monotonic()
        self._last_ok = now
        self._peers = {p: ("", now) for p in range(self.count) if p != self.pid}
        targets = [self._watch] + ([self._beat] if self.count > 1 else [])
        if self.count > 1:
            self.native = native_log.divert(self.pid)
            self._catch_agent_abort()
        for target in targets:
            t = threading.Thread(target=target, name=f"easylemur-pod-{target.__name__[1:]}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def phase(self, name: str, at: Optional[int] = None) -> None:
        """This process is now in phase `name` of step `at` (data, compile, step; or a long one)."""
        if self.phase_name in LONG_PHASES and name not in LONG_PHASES:
            self.progress = time.monotonic()  # the watch starts over after a long phase
            self.last_done = None  # and the step time across it is no step time
        self.phase_name = name
        if at is not None:
            self.at = at
        if name == "data" and self._fault == ("hang_data", self.pid, self.at):
            print(f"EASYLEMUR_FAULT: process {self.pid} blocks its data read for step {self.at} forever",
                  file=sys.stderr, flush=True)
            threading.Event().wait()

    @contextlib.contextmanager
    def long(self, name: str) -> Iterator[None]:
        """A phase the watchdog waits through (save, eval)."""
        before = self.phase_name
        self.phase(name)
        try:
            if name == "save" and self._fault == ("kill_save", self.pid, self.at):
                yield
                print(f"EASYLEMUR_FAULT: process {self.pid} SIGKILLs itself during the save of step {self.at}",
                      file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                yield
        finally:
            self.phase(before)

    def loop_started(self, step: int) -> None:
        self.step = self.at = step
        self.armed = self.floor > 0
        self.phase("compile")  # until the first step's end

    def step_done(self, step: int) -> None:
        """Step `step` ended here (its metrics arrived); told again after a save: ignored."""
        if step <= self.step and self.last_done is not None:
            return
        now = time.monotonic()
        if self.last_done is not None and self.phase_name != "compile":
            self.durations.append(now - self.last_done)
        self.last_done = now
        self.step = step
        self.phase("step")
        self.progress = now

    def median_step(self) -> float:
        """The median of the measurable step times (a step under 1 ms is too short to time)."""
        timed = [d for d in self.durations if d >= 1e-3]
        return statistics.median(timed) if timed else 0.0

    def limit(self) -> float:
        return max(self.factor * self.median_step(), self.floor)

    def finish(self) -> None:
        """A clean end: peers stop watching this process; the watch keeps going through JAX's
        shutdown barrier (a peer lost there still ends this process), then stops."""
        self.armed = False
        self.phase_name = "done"
        if self.count > 1:
            self._say("done")
            from jax._src import distributed

            distributed.shutdown()
        self.stop()

    def failed(self, code: int) -> None:
        """This process leaves with an error (exit `code`): its peers stop at once, naming it,
        instead of waiting in a collective; then exits without JAX's shutdown barrier."""
        self.armed = False
        if self.count > 1:
            self._say(f"exit {code} - -")
            _flush_std()
            if self.pid == 0:
                self._outlive_peers()
            os._exit(code)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)

    def await_verdict(self, error: BaseException) -> None:
        """The main thread's collective failed (a peer's connection reset): the beats say which
        process was lost within the heartbeat timeout; if they have not by then, this exits
        anyway, naming the error."""
        from easylemur.errors import brief

        began = time.monotonic()
        while time.monotonic() < began + self.heartbeat + 3 * self.interval:
            time.sleep(self.interval)
        self.lost("a peer", f"a collective failed ({brief(error)}), and no process was named within "
                  f"{self.heartbeat:g} s", time.monotonic() - began)

    def _catch_agent_abort(self) -> None:
        """JAX's coordination agent aborts its process (LOG(FATAL): SIGABRT, a C++ stack trace)
        as soon as its coordination service is gone, which is before any heartbeat timeout when
        the coordinator's process dies. A C-level SIGABRT handler (a ctypes callback: the
        aborting thread takes the GIL) turns that into this module's line and exit code. Our own
        beats end a worker's loss earlier than JAX's heartbeat (`jax_heartbeat_seconds`), so the
        abort usually means the coordinator; where JAX came first (a setting a user forced), the
        task JAX's own message found unhealthy is named (read back from the diverted native log,
        `native_log.jax_verdict`), and the detection time is its silence here."""
        import ctypes

        handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int)

        def on_abort(signum: int) -> None:
            if self.phase_name == "done":  # every step and save of this process is done
                os.write(2, b"warning: JAX's coordination agent failed in the shutdown, after training ended\n")
                os._exit(0)
            now = time.monotonic()
            # JAX sent its error to every process's agent: none can write to the store any more,
            # so the coordinator has no word to wait for (it waited for stale beats: 30 s)
            self._aborted = True
            self._check_peers(now, stale=False)  # a verdict a peer wrote already is the one to say
            where = f"; JAX's message and C++ trace: {self.native}" if self.native else ""
            unhealthy, gone = native_log.jax_verdict(self.native) if self.native else (None, False)
            silent = {p: now - t for p, (v, t) in self._peers.items() if v != "done" and not v.startswith("exit ")}
            named = [p for p in unhealthy or [] if p != self.pid and p in self._peers]
            if unhealthy and self.pid in unhealthy:
                self.lost(None, f"JAX's coordination service found this process unhealthy (no heartbeat from it: it "
                          f"was stalled){where}", now - self._last_ok)
            if named and not gone:
                p = named[0]
                self.lost(p, f"JAX's coordination service found it unhealthy: no heartbeat to JAX for "
                          f"{self.jax_heartbeat} s{where}", silent.get(p, 0.0))
            if self.pid == 0:
                # its own service aborted it, without naming a task: the beats name the likeliest
                stalest = max(silent, key=silent.get) if silent else None
                if stalest is not None and silent[stalest] > 3 * self.interval:
                    self.lost(stalest, f"JAX's coordination service declared a process lost; process {stalest}'s "
                              f"beat is the stalest here: none for {silent[stalest]:.0f} s{where}", silent[stalest])
                self.lost("a peer", f"JAX's coordination service declared a process lost{where}")
            self.lost(0, f"the coordinator: JAX's agent lost the coordination service{where}",
                      silent.get(0, now - self._last_ok))

        self._abort_handler = handler_type(on_abort)  # kept: the C side holds only the pointer
        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, handler_type]
        libc.signal(signal.SIGABRT, self._abort_handler)

    # ---------------------------------------------------------------- the beats

    def _value(self) -> str:
        return f"{self._beats} {self.at} {self.phase_name}"

    def _say(self, value: str) -> None:
        """This process's last word to its peers (done, or exit ...): the beats stop first, so
        that none writes over it."""
        self._said = value
        _bounded(lambda: _client().key_value_set(f"{_KEY}{self.pid}", value, True))

    def _beat(self) -> None:
        client = _client()
        while not self._stop.is_set():
            self._beats += 1
            try:
                if self._said is None:
                    client.key_value_set(f"{_KEY}{self.pid}", self._value(), True)
                    if self._said is not None:  # said while this beat was on its way: said again after it
                        client.key_value_set(f"{_KEY}{self.pid}", self._said, True)
                self._read_peers(client)
                self._last_ok = time.monotonic()
            except Exception as e:  # noqa: BLE001 (the coordinator's death is what this watches for)
                self._last_error = " ".join(str(e).split())[:200]
            self._stop.wait(self.interval)

    def _read_peers(self, client: Any) -> None:
        """Every peer's latest word from the key-value store, with when it changed."""
        now = time.monotonic()
        for key, value in client.key_value_dir_get(_KEY):
            p = int(key.rsplit("/", 1)[1])
            if p != self.pid and p in self._peers and self._peers[p][0] != value:
                self._peers[p] = (value, now)

    # ---------------------------------------------------------------- the watch

    def _watch(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.interval / 2):
            now = time.monotonic()
            if now - last > self.heartbeat:  # this process itself did not run (SIGSTOP, a paused VM)
                self.lost(None, f"this process was stalled for {now - last:.0f} s (SIGSTOP, swapping or a paused VM) "
                          "and the pod has gone on without it", now - last)
            last = now
            if self.count > 1:
                self._check_peers(now)
            if self.armed and self.phase_name not in LONG_PHASES and now - self.progress > self.limit():
                if self._peer_in_long_phase(now):
                    self.progress = now  # this process waits in a collective for a peer's compile or save
                elif not self._peer_going_silent(now):  # a silent peer's verdict (lost, named) comes first
                    self.hang(now - self.progress)

    def _check_peers(self, now: float, stale: bool = True) -> None:
        """Leaves when a peer said it exited, or (`stale`) went silent for the heartbeat timeout."""
        exits = {p: value.split(" ", 3)[1:] for p, (value, _) in self._peers.items() if value.startswith("exit ")}
        for p, (code, lost, cause) in sorted(exits.items(), key=lambda x: x[1][0] not in (str(EXIT_LOST_HOST), str(EXIT_HANG))):
            if code == str(EXIT_LOST_HOST):  # a peer saw the loss first: the same verdict, said here too
                silent = self._peers.get(int(lost)) if lost.isdigit() else None  # how long it has been silent here
                self.lost(int(lost) if lost.isdigit() else "a peer", f"{cause}; seen first by process {p}",
                          now - (silent or self._peers[p])[1])
            if code == str(EXIT_HANG):
                self._leave(EXIT_HANG, "hang", f"hang, seen first by process {p}: {cause}; process {self.pid} (stacks "
                            f"above) is in step {self.at} {self.phase_name}; exit {EXIT_HANG}", stacks=True,
                            verdict=f"{lost} {cause}", detect_seconds=round(now - self.progress, 1))
            if code == str(EXIT_BAD_INPUT) and self.phase_name == "setup" and now - self._peers[p][1] <= self.heartbeat:
                # every process reads one config: while still setting up, this one is likely to reach the
                # same refusal (exit 2, which a babysitter does not relaunch) in a moment; the coordinator
                # outlives its peers for longer than this wait
                continue
            self.lost(p, f"it exited with status {code}; its log says why", now - self._peers[p][1])
        if not stale:
            return
        for p, (value, changed) in sorted(self._peers.items()):
            # a worker's beat is read through the coordinator's store: while the store does not
            # answer (a stopped coordinator), every beat stands still, and only the silence seen
            # before that is the worker's own (under load, a worker whose beat had lagged was named
            # instead of the coordinator)
            seen = now if p == 0 else min(now, self._last_ok)
            if value != "done" and seen - changed > self.heartbeat:
                seen = f"; its last beat: step {value.split()[1]} {value.split()[2]}" if value.count(" ") == 2 else ""
                who = "the coordinator, " if p == 0 else ""
                self.lost(p, f"{who}no heartbeat for {now - changed:.0f} s: killed, stalled or unreachable{seen}",
                          now - changed)
        if self.pid != 0 and now - self._last_ok > self.heartbeat:
            self.lost(0, f"the coordinator has not answered for {now - self._last_ok:.0f} s: killed, stalled or "
                      f"unreachable ({self._last_error or 'no answer'})", now - self._last_ok)

    def _peer_going_silent(self, now: float) -> bool:
        """Whether a peer's beat has stopped changing (for more than three beat intervals): within
        the heartbeat timeout it is named lost, or it beats again; either way that verdict, not a
        local hang, is the pod's (one order of verdicts)."""
        return self.count > 1 and any(value != "done" and not value.startswith("exit ") and
                                      now - changed > 3 * self.interval for value, changed in self._peers.values())

    def _peer_in_long_phase(self, now: float) -> bool:
        """Whether a live peer's beat says it is compiling, saving or evaluating (each process
        compiles and saves at its own pace; the others wait for it in the next collective)."""
        return any(v.count(" ") == 2 and v.rsplit(" ", 1)[1] in LONG_PHASES and now - t <= self.heartbeat
                   for v, t in self._peers.values())

    def _behind(self) -> str:
        """Which processes the beats say hold the pod up: those in a data read, else those whose
        step is behind the others'."""
        me = f"{self.at} {self.phase_name}"
        seen = {self.pid: me}
        for p, (value, _) in self._peers.items():
            if value.count(" ") == 2:
                seen[p] = value.split(" ", 1)[1]
        if len(seen) < 2:
            return ""
        reading = sorted(p for p, v in seen.items() if v.endswith(" data"))
        steps = {p: int(v.split()[0]) for p, v in seen.items()}
        low = min(steps.values())
        behind = sorted(p for p, s in steps.items() if s == low) if low < max(steps.values()) else []
        names = reading or behind
        if not names or len(names) == len(seen):
            return "; every process is in " + ", ".join(f"step {v}" for v in sorted(set(seen.values())))
        what = "in a data read" if reading else f"behind, in step {low}"
        return f"; process{'es' if len(names) > 1 else ''} {', '.join(map(str, names))} {what}"

    # ---------------------------------------------------------------- leaving

    def lost(self, process: Any, cause: str, detect_seconds: float = 0.0) -> None:
        """`process`: the lost one's number, a description ("a peer"), or None (this process
        itself fell behind the pod)."""
        who = f"process {process} of {self.count}" if isinstance(process, int) else process
        head = "lost the pod" if process is None else f"lost {who}"
        lost = process if isinstance(process, int) else "-"
        # this process itself stalled past the timeout: every peer has given up on it already (no
        # beat or answer from it for that long), so even the coordinator has no one to outlive
        self._leave(EXIT_LOST_HOST, "lost", f"{head} ({cause}); process {self.pid} stops in step {self.at}, exit "
                    f"{EXIT_LOST_HOST}; run the same command to resume from the newest checkpoint", process=process,
                    verdict=f"{lost} {cause}", detect_seconds=round(detect_seconds, 1), outlive=process is not None)

    def hang(self, seconds: float) -> None:
        median = self.median_step()
        line = (f"hang: no step finished for {seconds:.0f} s (limit max({self.factor:g} x median step {median:.2f} s, "
                f"floor {self.floor:g} s)); process {self.pid} is in step {self.at} {self.phase_name}"
                f"{self._behind()}; every thread's stack is above; exit {EXIT_HANG}")
        self._leave(EXIT_HANG, "hang", line, stacks=True, detect_seconds=round(seconds, 1),
                    verdict=f"- no step finished for {seconds:.0f} s{self._behind()}")

    def _leave(self, code: int, status: str, line: str, stacks: bool = False, verdict: str = "- -",
               outlive: bool = True, **fields: Any) -> None:
        """Says `line`, records it, tells the peers (`exit CODE LOST CAUSE`) and exits `code`
        (the coordinator after its peers, unless `outlive` is false)."""
        if not self.exiting.acquire(blocking=False):
            threading.Event().wait()  # another thread is leaving already
        self.armed = False
        text = ""
        if stacks:
            with tempfile.TemporaryFile() as f:
                faulthandler.dump_traceback(file=f, all_threads=True)
                f.seek(0)
                text = f.read().decode(errors="replace")
            os.write(2, text.encode())
        # process 0 draws the progress bar: its line ends first
        os.write(2, f"{chr(10) if self.pid == 0 else ''}error: {line}\n".encode())
        process = fields.pop("process", None)
        fields = {**fields, **({"process": process} if isinstance(process, int) else {}),
                  **({"stacks": text} if text else {})}
        if self.events is not None:
            events = self.events
            # a lost coordinator wrote nothing of its end: process 1 records the launch's fault and end
            takes_over = process == 0 and self.pid == 1

            def record() -> None:
                if (takes_over and not events.take_over()) or events.ended():
                    return
                events.write("fault", time.time(), step=self.step, at=self.at, cause=status, phase=self.phase_name, message=line,
                             **fields)
                events.write("end", time.time(), step=events.step, status=status)
            _bounded(record, 10.0)
        if self.count > 1:
            self._say(f"exit {code} {verdict}")
        if self.on_exit is not None:
            _bounded(self.on_exit, 10.0)
        _flush_std()
        if self.pid == 0 and self.count > 1 and outlive and not self._aborted:
            self._outlive_peers(process)
        os._exit(code)

    def _outlive_peers(self, lost: Any = None) -> None:
        """The coordinator leaves last: its service going away aborts every other process's
        JAX agent, so it waits until each live peer (not `lost`, the one named) said it exits too
        (a second or two; at most the heartbeat timeout + 5 s)."""
        deadline = time.monotonic() + self.heartbeat + 5
        while time.monotonic() < deadline:
            # read here: the beat thread may be stopped already (an error on the way out)
            _bounded(lambda: self._read_peers(_client()), 1.0)
            now = time.monotonic()  # a peer silent for the heartbeat timeout is gone already
            if all(v.startswith("exit ") or v == "done" or now - t > self.heartbeat
                   for p, (v, t) in self._peers.items() if p != lost):
                time.sleep(self.interval)  # their os._exit, after their last word
                return
            time.sleep(self.interval / 4)


def _fault_from_env() -> Optional[tuple[str, int, int]]:
    spec = os.environ.get("EASYLEMUR_FAULT", "")
    if not spec:
        return None
    kind, _, where = spec.partition("@")
    process, _, step = where.partition(":")
    return kind, int(process), int(step)
