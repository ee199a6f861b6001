"""The live Python interpreter of a `sandbox.Session`: an IPython `InteractiveShell` kept for a
whole agent episode, as MINT's Python tool keeps one (docs/design.md, "Agent evaluation").

Where it runs: pid 1 of the sandbox (in the unsafe mode, the launcher's own process), with the
sandbox's uid, started by `box.Sandbox._start` as `python -I -S -B -c <this text>`; it imports
nothing of easylemur. Unlike the checker and the runner it is not trusted: the cells run in
this very process, so they can read its channel, its memory and everything below. Nothing it
says is a verdict; the host reads it as untrusted bytes (`session.py`).

argv: the job memfd (marshal: cell_timeout, output_chars, the tools' parameters, the library path,
the environment, the working directory), then the channel's two pipes: the one the host
writes (`run` a cell, the `reply` to a tool call) and the one it reads (`ready`, `fail`,
`tool`, `done`). A frame is a 4-byte big-endian length, then that many bytes of JSON (ASCII).

What it does, as MINT's `PythonREPL` does: makes the shell (colors "NoColor", the tool stubs
as its namespace, history in memory, IPYTHONDIR under the working directory), runs a first
cell that replaces `sys.setrecursionlimit` with a function printing "Setting recursion limit
is disabled" (so the episode's first cell is In[2], as in MINT), says `ready`, then for each
cell: sets a SIGALRM handler and a real-time timer of cell_timeout seconds that raises
`TimeoutError("Timed out after N seconds.")` inside the cell, runs it with `run_cell(code,
store_history=True)` under IPython's `capture_output()`, and answers `done` with the captured
stdout (at most output_chars + 1 characters: the host cuts and marks it). A tool stub sends
`tool` and waits for the host's `reply`; a time limit that passes meanwhile raises between
frames, never inside one. The functions a cell's traceback can show (the alarm's handler, the
stubs, the call to the host) carry the file name "<hidden_filepath>", MINT's word for its own
file, with their source registered in `linecache` (sent by the host: this text) so IPython
shows their lines: no path of easylemur's appears.
"""

import json
import linecache
import os
import select
import signal
import sys

from easylemur.eval.sandbox.programs.prelude import (
    keep_only,
    read_job,
)

job_fd, in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
job, _ = read_job(job_fd)  # the token is the pid-1 programs' verdict key: a session gives no verdict
keep_only((in_fd, out_fd))
os.environ.clear()  # the unsafe mode's launcher passed none; bwrap's PATH, HOME and LANG come again in env
os.environ.update(job["env"], HOME=job["workdir"], IPYTHONDIR=os.path.join(job["workdir"], ".ipython"))
os.chdir(job["workdir"])
sys.path += [p for p in job["libpath"].split(":") if p]  # IPython and the session's libraries

HIDDEN = "<hidden_filepath>"
LIMIT = job["output_chars"]
TOOL_ARG_CHARS = job["tool_arg_chars"]
CELL_TIMEOUT = job["cell_timeout"]
TIMED_OUT = "Timed out after %s seconds." % ("%g" % CELL_TIMEOUT)
STATE = {"armed": False, "quiet": False, "pending": False, "cell": "", "call": 0}
received = bytearray()


def send(msg):
    "One frame to the host, written whole (a cell's own writes to this pipe are its own doing)."
    data = json.dumps(msg).encode("ascii")
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(out_fd, data):]


def receive(timeout):
    "The host's next message (a dict), or None when `timeout` seconds (None: no limit) pass first."
    while True:
        if len(received) >= 4:
            size = int.from_bytes(received[:4], "big")
            if len(received) >= 4 + size:
                body = bytes(received[4:4 + size])
                del received[:4 + size]
                return json.loads(body)
        if timeout is not None and not select.select([in_fd], [], [], timeout)[0]:
            return None
        data = os.read(in_fd, 1 << 16)
        if not data:
            os._exit(0)  # the host has gone
        received.extend(data)


def signal_handler(signum, frame):
    if not STATE["armed"]:
        return
    if STATE["quiet"]:  # between the frames of a tool call: host_call raises it
        STATE["pending"] = True
        return
    raise TimeoutError(TIMED_OUT)


def host_call(name, args):
    "Asks the host to run its tool `name` on the str arguments `args`: (ok, answer)."
    STATE["call"] += 1
    call = STATE["call"]
    reply = None
    STATE["quiet"] = True
    try:
        send({"t": "tool", "id": STATE["cell"], "call": call, "name": name, "args": args})
        while reply is None and not STATE["pending"]:
            msg = receive(0.05)
            if isinstance(msg, dict) and msg.get("t") == "reply" and msg.get("call") == call:
                reply = msg
    finally:
        STATE["quiet"] = False
    if reply is None or STATE["pending"]:
        STATE["pending"] = False
        raise TimeoutError(TIMED_OUT)
    return bool(reply.get("ok")), str(reply.get("text"))


def call_tool(name, formats, *values):
    "Every tool stub's body: its arguments as str (made so as an f-string does where the tool formats them), the host's answer."
    args = []
    for value in values:
        if formats:
            value = format(value)
        elif not isinstance(value, str):
            raise TypeError("%s() takes a str, not %s" % (name, type(value).__name__))
        args.append(value)
    if sum(len(a) for a in args) > TOOL_ARG_CHARS:
        raise ValueError("%s(): the arguments are longer than %d characters" % (name, TOOL_ARG_CHARS))
    ok, answer = host_call(name, args)
    if not ok:
        raise RuntimeError(answer)
    return answer


def tool_stubs(tools, source):
    """The tools as plain Python functions of their parameters (a wrong call is Python's own
    TypeError at the call site, as calling the tool itself gives), compiled after the lines of
    `source` in the hidden file: returns them and the file's text."""
    base = source if source.endswith("\n") else source + "\n"
    text = "".join("def %s(%s):\n    return call_tool(%r, %r%s)\n" % (
        name, ", ".join(spec["params"]), name, bool(spec["formats"]), "".join(", " + p for p in spec["params"]))
        for name, spec in tools.items())
    namespace = {"call_tool": call_tool}
    exec(compile("\n" * base.count("\n") + text, HIDDEN, "exec"), namespace)
    return {name: namespace[name] for name in tools}, base + text


for f in (signal_handler, host_call, receive, send, call_tool):
    f.__code__ = f.__code__.replace(co_filename=HIDDEN)
stubs, hidden = tool_stubs(job["tools"], job["source"])
linecache.cache[HIDDEN] = (len(hidden), None, hidden.splitlines(True), HIDDEN)  # no mtime: never checked against a file

try:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # no history.sqlite, even in the private /tmp
    shell = InteractiveShell.instance(config=config, colors="NoColor",
                                      user_ns=stubs)
except BaseException as e:
    send({"t": "fail", "why": ("%s: %s" % (type(e).__name__, e))[:500]})
    os._exit(1)


def run_cell(code):
    "The cell's captured stdout, run as MINT runs it: under the time limit, in history."
    signal.signal(signal.SIGALRM, signal_handler)  # again each cell: a cell may have replaced it
    STATE["pending"] = False
    with capture_output() as captured:
        try:
            STATE["armed"] = True
            signal.setitimer(signal.ITIMER_REAL, CELL_TIMEOUT)
            shell.run_cell(code, store_history=True)
        except BaseException:
            pass  # the limit passing just as the cell ended, or something escaping IPython itself
        finally:
            STATE["armed"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    return captured.stdout


run_cell("import sys\nsys.setrecursionlimit = lambda *args, **kwargs: print('Setting recursion limit is disabled')")
send({"t": "ready"})
while True:
    msg = receive(None)
    if not (isinstance(msg, dict) and msg.get("t") == "run"):
        continue  # a tool's reply that came after its call timed out
    STATE["cell"] = msg["id"]
    out = run_cell(msg["code"])
    send({"t": "done", "id": msg["id"], "out": out[:LIMIT + 1]})
