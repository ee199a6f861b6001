"""The agent's live Python interpreter (`sandbox.Session`): IPython's shell kept across cells in
the sandbox, observations as MINT shows them, a time limit per cell that the interpreter raises
and the host enforces, tools answered by the host, isolation as a Program's, and a host that
neither hangs nor crashes on whatever the cells write to its channel."""

import ast
import os
import random
import shutil
import socket
import sys
import time
import uuid
import warnings
from pathlib import Path

import pytest
from test_sandbox import _processes_with  # the one /proc scan of the sandbox tests

from easylemur.errors import InputError, RunError
from easylemur.eval.sandbox import HostTool, Sandbox, Session
from easylemur.eval.sandbox.box import UID_BASE
from easylemur.eval.sandbox.session import EXPIRED, NO_OUTPUT, RESTARTED, SESSION_SLOT_BASE, TRUNCATED

# Without bwrap on PATH these tests cannot run; a bwrap that is present but unusable fails them.
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

LIMIT = 2.0  # cell_timeout in these tests
TIMED_OUT = "TimeoutError: Timed out after 2 seconds."
HUNG = TIMED_OUT + "\n" + RESTARTED.format(why="this cell did not stop at its time limit")
DIED = RESTARTED.format(why="it exited or crashed during this cell")
MALFORMED = RESTARTED.format(why="it sent the host a malformed message")
# A cell's way to the host: the write end of the channel, the one write-only descriptor it holds.
FIND_CHANNEL = ("import os, fcntl\nw = None\nfor fd in range(3, 256):\n    try:\n        fl = fcntl.fcntl(fd, fcntl.F_GETFL)\n"
                "    except OSError:\n        continue\n    if fl & os.O_ACCMODE == os.O_WRONLY:\n        w = fd\n")


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox()
    sb.check()
    return sb


def _session(sandbox, **kw) -> Session:
    return Session(sandbox, **{"cell_timeout": LIMIT, "grace": 3.0, **kw})


def test_cells_share_state_and_read_as_mint_shows_them(sandbox):
    """MINT's observation: the captured stdout (IPython's `Out[n]:` and tracebacks included),
    "[Executed Successfully with No Output]" when empty, cut at 2000 characters. As in MINT, the
    session's first cell (the one that disables sys.setrecursionlimit, also leaving `sys`
    imported) is In[1], so the episode's cells count from In[2]."""
    with _session(sandbox) as s:
        assert s.run("x = 41") == NO_OUTPUT == "[Executed Successfully with No Output]"
        assert s.run("x + 1") == "Out[3]: 42\n"
        tb = s.run("def f(n):\n    return 1 / n\nf(0)")
        assert "Traceback (most recent call last)" in tb and "Cell In[4], line 3" in tb and "----> 3 f(0)" in tb
        assert tb.rstrip().endswith("ZeroDivisionError: division by zero"), tb
        assert s.run("print('to stderr', file=sys.stderr)") == NO_OUTPUT  # stdout only, as MINT
        assert s.run("print('x' * 2500)") == "x" * 2000 + TRUNCATED == "x" * 2000 + "...\n[Output Truncated]"
        assert s.run("sys.setrecursionlimit(10 ** 6)") == "Setting recursion limit is disabled\n"
        assert s.run("big = '" + "a" * 1_000_000 + "'\nlen(big) + x") == "Out[8]: 1000041\n"  # a long cell gets through


def test_random_state_persists_across_cells(sandbox):
    with _session(sandbox) as s:
        seeded = [s.run("import random\nrandom.seed(1234)\nprint(repr(random.random()))"),
                  s.run("print(repr(random.random()))"), s.run("print(repr(random.random()))")]
        ref = random.Random(1234)
        assert seeded == [repr(ref.random()) + "\n" for _ in range(3)]  # one generator, never reset
        unseeded = [s.run("import secrets\nr = random.Random(secrets.randbits(64))\nprint(r.random())"),
                    s.run("print(r.random())"), s.run("print(r.random())")]
        assert len(set(unseeded)) == 3, unseeded


def test_a_cell_past_its_time_limit_gets_timeouterror_and_keeps_the_state(sandbox):
    with _session(sandbox) as s:
        s.run("x = 7")
        t = time.monotonic()
        tb = s.run("import time\ntime.sleep(30)")
        assert time.monotonic() - t < LIMIT + 2.5
        assert "Traceback (most recent call last)" in tb and tb.rstrip().endswith(TIMED_OUT), tb
        # the alarm's frame shows no path of the host's or of easylemur's program files
        assert "<hidden_filepath>" in tb and "easylemur" not in tb and str(Path.cwd()) not in tb, tb
        assert s.run("x") == "Out[4]: 7\n"


def test_a_cell_that_ignores_the_alarm_is_killed_and_the_session_restarts(sandbox):
    with _session(sandbox, grace=1.0) as s:
        s.run("x = 7")
        t = time.monotonic()
        assert s.run("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass") == HUNG
        assert LIMIT + 1.0 <= time.monotonic() - t < LIMIT + 1.0 + 10
        assert "NameError: name 'x' is not defined" in s.run("x")  # a fresh interpreter: the state is lost
        assert s.run("1 + 1") == "Out[3]: 2\n"


def test_an_interpreter_that_exits_or_crashes_is_restarted(sandbox):
    with _session(sandbox) as s:
        for cell in ("import os\nos._exit(0)", "import ctypes\nctypes.string_at(0)"):  # exit; segfault
            s.run("x = 7")
            assert s.run(cell) == DIED
            assert "NameError" in s.run("x")
        assert s.run("b = bytearray(8 << 30)").rstrip().endswith("MemoryError:")  # beyond the budget: an error
        assert s.run("x = 1\nx") == "Out[4]: 1\n"


def test_tools_are_answered_by_the_host(sandbox):
    asked = []

    def wikipedia_search(query: str) -> str:
        asked.append(query)
        return "Page: " + query

    def broken(query: str) -> str:
        raise ConnectionError("offline")

    with _session(sandbox, tools={"wikipedia_search": wikipedia_search, "broken": broken}) as s:
        assert s.run("r = wikipedia_search('Lemur')\nprint(type(r).__name__, r)") == "str Page: Lemur\n"
        assert asked == ["Lemur"]
        assert s.run("broken('x')").rstrip().endswith("RuntimeError: broken failed: ConnectionError: offline")
        assert s.run("wikipedia_search(3)").rstrip().endswith("TypeError: wikipedia_search() takes a str, not int")
        assert asked == ["Lemur"]
    # a tool of several parameters that formats its arguments into a command (MINT's ALFWorld tools)
    put = HostTool(lambda obj, recep: f"put {obj} in/on {recep}", ("object", "receptacle"), formats=True)
    with _session(sandbox, tools={"put": put, "look": HostTool(lambda: "a room", ())}) as s:
        assert s.run("print(put('mug 1', receptacle=2), look())") == "put mug 1 in/on 2 a room\n"
        assert s.run("put('mug 1')").rstrip().endswith("TypeError: put() missing 1 required positional argument: "
                                                      "'receptacle'")
        assert s.run("look('x')").rstrip().endswith("TypeError: look() takes 0 positional arguments but 1 was given")
    for bad in ({"not a name": wikipedia_search}, {"put": HostTool(put.fn, ("object", "object"))},
                {"put": HostTool(put.fn, ("class", "x"))}):
        with pytest.raises(InputError):
            Session(sandbox, tools=bad)


def test_the_interpreter_sees_no_host_files_environment_or_network(sandbox, monkeypatch):
    secret = f"canary{uuid.uuid4().hex}"
    monkeypatch.setenv("EASYLEMUR_CANARY", secret)
    canary = Path.cwd() / f".easylemur-session-canary-{uuid.uuid4().hex}"
    canary.write_text(secret)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    try:
        with _session(sandbox) as s:
            paths = ("/work", "/home", "/root", str(Path.cwd()), str(Path.home()), str(canary))
            assert s.run(f"import os\nprint([p for p in {paths!r} if os.path.exists(p)])") == "[]\n"
            seen = s.run("import glob\nfound = 'EASYLEMUR_CANARY' in os.environ\nfor p in glob.glob('/proc/[0-9]*/environ'):\n"
                         "    try:\n        found |= b'EASYLEMUR_CANARY' in open(p, 'rb').read()\n    except OSError:\n"
                         "        pass\nprint(found)")
            assert seen == "False\n"
            port = listener.getsockname()[1]
            net = s.run(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                        "    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)")
            assert net.startswith("refused"), net
            with pytest.raises(BlockingIOError):
                listener.accept()  # nobody ever connected
    finally:
        listener.close()
        canary.unlink()


def test_whatever_a_cell_writes_to_the_channel_neither_hangs_nor_crashes_the_host(sandbox):
    import json

    def frame(obj) -> str:
        data = json.dumps(obj).encode()
        return repr(len(data).to_bytes(4, "big") + data)

    with _session(sandbox, grace=1.0) as s:
        for junk, expect in [
            ("b'\\xff\\xff\\xff\\xff' + b'x' * 100", MALFORMED),  # a 4 GiB length
            ("(5).to_bytes(4, 'big') + b'{{{{{'", MALFORMED),  # not JSON
            (frame([1, 2]), MALFORMED),  # not an object
            ("(1 << 20).to_bytes(4, 'big') + b'[' * (1 << 19)", MALFORMED),  # over the host's frame limit
            ("b'\\x00\\x00'", MALFORMED),  # half a length, then the real answer misread
            (f"{frame({'t': 'done', 'id': 'forged', 'out': 'forged'})} * 2000", None),  # another cell's answers
            (frame({"t": "tool", "id": "x", "call": 1, "name": "nope", "arg": "x"}), None),
        ]:
            s.run("x = 7")
            t = time.monotonic()
            obs = s.run(FIND_CHANNEL + f"os.write(w, {junk})\nprint('after')")
            assert time.monotonic() - t < LIMIT + 1.0 + 5
            if expect is None:
                assert obs == "after\n" and s.run("x").endswith(": 7\n"), obs
            else:
                assert obs == expect and "NameError" in s.run("x"), obs
        # a partial frame, then the cell hangs with the alarm ignored: killed at the deadline
        assert s.run(FIND_CHANNEL + "os.write(w, b'\\x00\\x00\\x01')\nimport signal\n"
                     "signal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass") == HUNG
        assert s.run("print('still here')") == "still here\n"


def test_sessions_hold_their_own_slots_and_uids(sandbox):
    a, b = _session(sandbox), _session(sandbox)
    try:
        assert a.slot != b.slot
        with pytest.raises(InputError):
            Session(sandbox, slot=a.slot)
        if sandbox.check() == "uid":  # as root: a uid per live session, apart from every SlotPool slot's
            uids = {int(x.run("import os\nprint(os.getuid())")) for x in (a, b)}
            assert uids == {UID_BASE + SESSION_SLOT_BASE + a.slot, UID_BASE + SESSION_SLOT_BASE + b.slot}
        freed = a.slot
        a.close()
        with Session(sandbox, slot=freed) as c:
            assert c.run("1") == "Out[2]: 1\n"
    finally:
        a.close()
        b.close()


def test_close_ends_every_process_and_is_idempotent(sandbox):
    marker = f"93.{uuid.uuid4().int % 10**8}"
    s = _session(sandbox)
    assert s.run(f"import subprocess\np = subprocess.Popen(['sleep', '{marker}'])") == NO_OUTPUT
    deadline = time.monotonic() + 5
    while not _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.02)  # the host's /proc can list the child a moment after the cell saw it started
    assert _processes_with(marker)
    s.close()
    assert _processes_with(marker) == []
    s.close()
    with pytest.raises(RunError):
        s.run("1")


def test_the_sessions_processes_are_held_to_the_memory_budget_together(sandbox):
    """Where a memory cgroup can be made, every process of the session (the interpreter and what
    its cells start) is in the session's own cgroup, limited to the sandbox's memory_bytes; else
    each process has RLIMIT_AS, as a Program's."""
    marker = f"94.{uuid.uuid4().int % 10**8}"
    with _session(sandbox) as s:
        limit = s.run(f"import resource, subprocess\np = subprocess.Popen(['sleep', '{marker}'])\n"
                      "print(resource.getrlimit(resource.RLIMIT_AS)[0])")
        assert int(limit) == sandbox.address_space_bytes()
        if not sandbox.memory_scope().startswith("cgroup"):
            return
        deadline = time.monotonic() + 5
        while not _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        cgroup = s._state.live.box.cgroup  # the session's own, made for its sandbox
        name = os.path.basename(cgroup)
        assert name.startswith(f"easylemur-{os.getpid()}-{SESSION_SLOT_BASE + s.slot}-")
        assert _processes_with(marker)
        for pid in _processes_with(marker):
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            assert any(line.endswith("/" + name) for line in lines), lines
        files = ("memory.max", "memory.limit_in_bytes")
        assert [int(Path(cgroup, f).read_text()) for f in files if Path(cgroup, f).exists()] == [sandbox.memory_bytes]
    assert not os.path.exists(cgroup)  # removed with the sandbox


def test_the_session_ends_at_its_lifetime(sandbox):
    with _session(sandbox, lifetime=0.5) as s:
        assert s.run("1") == "Out[2]: 1\n"
        time.sleep(0.7)
        assert s.run("1") == EXPIRED.format(lifetime=0.5)


def test_the_unsafe_mode_runs_sessions_too():
    sb = Sandbox(unsafe_no_sandbox=True)
    with pytest.warns(UserWarning, match="WITHOUT a sandbox"):
        sb.check()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _session(sb) as s:  # the same process model without bwrap: no namespace ends it, the host does
            s.run("x = 41")
            assert s.run("x + 1") == "Out[3]: 42\n"
            assert s.run("import os\nos._exit(3)") == DIED
            assert "NameError" in s.run("x")


def test_the_repl_is_passed_as_text_and_imports_only_ipython_beside_the_standard_library():
    from easylemur.eval.sandbox import programs

    source = (programs.HERE / "repl.py").read_text()
    assert ast.get_docstring(ast.parse(source))
    assert (programs.HERE / "prelude.py").read_text() in programs.REPL
    imported = set()
    for node in ast.walk(ast.parse(programs.REPL)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"IPython", "traitlets"}, imported
