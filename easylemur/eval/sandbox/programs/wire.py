"""The wire format between the sandbox's checker and the candidate's process, shared by both.

What it is: a 4-byte length, then a message of tagged values. The checker's requests are
marshal (the candidate's side may trust them); the candidate's replies are the repr() of lists,
str, int, bool and None, which the checker parses into a syntax tree and rebuilds by hand,
accepting nothing else: no code of the candidate's runs in the checker, and the import cost on
both sides stays near zero (marshal, os and _ast are built in). Plain data keeps its type:
builtins (exact types only), the standard library's containers and numbers (Counter,
OrderedDict, defaultdict, deque, namedtuple classes with nothing of their own, dict views,
array, Fraction, Decimal) and numpy's arrays and scalars of numbers, bytes or text. The checker
rebuilds each with its own class from the parsed fields, so an object of the candidate's with
a forged `__eq__` (a subclass of any of them included) is never one of them.

Where it runs: inside the sandbox, twice: in the trusted checker (`checker.py`, pid 1
of the sandbox) and in the untrusted candidate's process (`candidate.py`, its child, same
uid). Neither imports it (they run as `python -I -S -B -c TEXT`, where nothing of easylemur is
importable): `programs.program_text` puts this file's text in place of the one
`from easylemur.eval.sandbox.programs.wire import (...)` statement of each, so both sides encode and
decode with the same code. On the host it is an ordinary module (the tests import it).

Standard library only (numpy lazily, from the job's libraries already on sys.path), and code
any Python 3.8+ runs: the sandbox's interpreter may be the system's /usr/bin/python3.
"""

import os
import sys
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

MAX_MESSAGE = 8 << 20
# types a value may be (a defaultdict's default_factory, most often), by name
TYPES = {t.__name__: t for t in (int, float, complex, str, bytes, bytearray, bool, list, tuple, dict, set, frozenset,
                                 Counter, OrderedDict, defaultdict, deque)}
# what a namedtuple class (collections' or typing's) holds besides its fields' getters, and what a
# subclass that adds nothing holds: such a class is plain data, any other member makes it an object
PLAIN_KEYS = {"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__", "__firstlineno__",
              "__static_attributes__", "__annotations__", "__orig_bases__", "__annotate__", "__annotate_func__",
              "__annotations_cache__"}
NT_KEYS = (set(vars(namedtuple("_nt", "a"))) - {"a"}) | PLAIN_KEYS
NT_CLASSES = {}
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def send_bytes(fd, data):
    if len(data) > MAX_MESSAGE:
        raise OverflowError("message too large")
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data):]


def recv_bytes(fd):
    n, out = 4, b""
    for part in range(2):
        out = b""
        while len(out) < n:
            chunk = os.read(fd, min(n - len(out), 1 << 20))
            if not chunk:
                raise EOFError
            out += chunk
        if part == 0:
            n = int.from_bytes(out, "big")
            if n > MAX_MESSAGE:
                raise OverflowError("message too large")
    return out


def numpy():
    """numpy, imported on first use from the job's libraries, which each side has put on sys.path after
    the standard library (one BLAS thread: the sandbox's memory is small)."""
    np = sys.modules.get("numpy")
    if np is None:
        for var in THREAD_VARS:
            os.environ.setdefault(var, "1")
        import numpy as np
    return np


def namedtuple_fields(t):
    "(name, fields) of a namedtuple class that adds nothing of its own, else None."
    found = None
    for c in t.__mro__[:-2]:  # up to tuple and object
        keys = set(vars(c))
        if found is None and c.__bases__ == (tuple,) and type(vars(c).get("_fields")) is tuple:
            found = c._fields
            keys -= NT_KEYS | set(found)
        if keys - PLAIN_KEYS:
            return None
    if found is None or t.__mro__[-2] is not tuple or not t.__name__.isidentifier():
        return None
    if not all(type(f) is str for f in found):
        return None
    return t.__name__, list(found)


def enc(v, other):
    t = type(v)
    if v is None:
        return ["n"]
    if t is bool:
        return ["b", v]
    if t is int:
        return ["i", hex(v)]
    if t is float:
        return ["f", v.hex()]
    if t is complex:
        return ["c", v.real.hex(), v.imag.hex()]
    if t is str:
        return ["s", v]
    if t is bytes:
        return ["y", v.hex()]
    if t is bytearray:
        return ["Y", v.hex()]
    if t is range:
        return ["r", hex(v.start), hex(v.stop), hex(v.step)]
    if t is list or t is tuple or t is set or t is frozenset:
        return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[t], [enc(x, other) for x in v]]
    if t is dict or t is Counter or t is OrderedDict:
        return [{dict: "d", Counter: "C", OrderedDict: "O"}[t], [[enc(k, other), enc(x, other)] for k, x in v.items()]]
    if t is defaultdict:
        f = v.default_factory
        f = enc(f, other) if f is None or TYPES.get(getattr(f, "__name__", None)) is f else other(f)
        return ["D", f, [[enc(k, other), enc(x, other)] for k, x in v.items()]]
    if t is deque:
        return ["q", [enc(x, other) for x in v], ["n"] if v.maxlen is None else ["i", hex(v.maxlen)]]
    if t is type({}.keys()):
        return ["dk", [enc(x, other) for x in v]]
    if t is type({}.values()):
        return ["dv", [enc(x, other) for x in v]]
    if t is type({}.items()):
        return ["di", [[enc(k, other), enc(x, other)] for k, x in v]]
    if t is type and TYPES.get(v.__name__) is v:
        return ["T", v.__name__]
    if issubclass(t, tuple):
        nt = namedtuple_fields(t)
        if nt is not None:
            return ["N", nt[0], nt[1], [enc(x, other) for x in v]]
    m = sys.modules.get("numpy")
    if m is not None and t.__module__ == "numpy" and (t is m.ndarray or isinstance(v, m.generic)):
        dt = v.dtype
        if dt.kind in "biufcSU" and not dt.hasobject and dt.fields is None and dt.subdtype is None:
            if t is m.ndarray:
                return ["A", dt.str, [hex(n) for n in v.shape], v.tobytes().hex()]
            return ["a", dt.str, v.tobytes().hex()]
    m = sys.modules.get("fractions")
    if m is not None and t is m.Fraction:
        return ["Q", hex(v.numerator), hex(v.denominator)]
    m = sys.modules.get("decimal")
    if m is not None and t is m.Decimal:
        return ["Dec", str(v)]
    m = sys.modules.get("array")
    if m is not None and t is m.array:
        return ["ar", v.typecode, v.tobytes().hex()]
    return other(v)


def dtype_of(s):
    "A numpy dtype of numbers, bytes or text from its .str (e.g. '<f8', '|b1', '<U5'); nothing else."
    np = numpy()
    if not (2 < len(s) < 12 and s[0] in "<>|=" and s[1] in "biufcSU" and s[2:].isascii() and s[2:].isdigit()):
        raise ValueError("bad dtype")
    dt = np.dtype(s)
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.kind not in "biufcSU":
        raise ValueError("bad dtype")
    return dt


def dec(v, handle):
    tag = v[0]
    if tag == "n":
        return None
    if tag == "b":
        return v[1] is True
    if tag == "i":
        return int(v[1], 16)
    if tag == "f":
        return float.fromhex(v[1])
    if tag == "c":
        return complex(float.fromhex(v[1]), float.fromhex(v[2]))
    if tag == "s":
        return "".join(v[1])
    if tag == "y":
        return bytes.fromhex(v[1])
    if tag == "Y":
        return bytearray.fromhex(v[1])
    if tag == "r":
        return range(int(v[1], 16), int(v[2], 16), int(v[3], 16))
    if tag in ("l", "t", "S", "F"):
        items = [dec(x, handle) for x in v[1]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag in ("d", "C", "O", "D", "di"):
        pairs = [(dec(k, handle), dec(x, handle)) for k, x in v[-1]]
        if tag == "D":
            out = defaultdict(dec(v[1], handle))  # None, a type of TYPES or a handle: the candidate's callable
        else:
            out = {"d": dict, "C": Counter, "O": OrderedDict, "di": dict}[tag]()
        if tag == "C":
            dict.update(out, pairs)  # not Counter.update: that adds up the counts of a key sent twice
        else:
            out.update(pairs)  # OrderedDict's own: dict.update would leave its order behind
        return out.items() if tag == "di" else out
    if tag == "q":
        return deque([dec(x, handle) for x in v[1]], dec(v[2], handle))
    if tag == "dk":
        return dict.fromkeys([dec(x, handle) for x in v[1]]).keys()
    if tag == "dv":
        return dict(enumerate(dec(x, handle) for x in v[1])).values()
    if tag == "T":
        return TYPES[v[1]]
    if tag == "N":
        key = (v[1], tuple(v[2]))
        if key not in NT_CLASSES:
            if not all(type(x) is str for x in key[1]) or not key[0].isidentifier():
                raise ValueError("bad namedtuple")
            # rename=True: a field name namedtuple refuses becomes _<index>, as namedtuple(rename=True)
            # named it on the candidate's side
            NT_CLASSES[key] = namedtuple(v[1], list(v[2]), rename=True)
        return NT_CLASSES[key]._make([dec(x, handle) for x in v[3]])
    if tag == "A":
        np, dt = numpy(), dtype_of(v[1])
        shape = tuple(int(n, 16) for n in v[2])
        data = bytes.fromhex(v[3])
        count = 1
        for n in shape:
            count *= n
        if min(shape, default=0) < 0 or count * dt.itemsize != len(data):
            raise ValueError("bad array")
        if count == 0 or dt.itemsize == 0:
            return np.zeros(shape, dt)
        return np.frombuffer(data, dt).reshape(shape).copy()  # a copy: writable, as the candidate's was
    if tag == "a":
        dt, data = dtype_of(v[1]), bytes.fromhex(v[2])
        if len(data) != dt.itemsize:
            raise ValueError("bad scalar")
        return numpy().frombuffer(data, dt)[0] if data else dt.type()
    if tag == "Q":
        from fractions import Fraction
        return Fraction(int(v[1], 16), int(v[2], 16))
    if tag == "Dec":
        from decimal import Decimal
        return Decimal(v[1])
    if tag == "ar":
        from array import array
        out = array(v[1])
        out.frombytes(bytes.fromhex(v[2]))
        return out
    if tag in ("h", "g"):
        return handle(int(v[1]), tag)
    raise ValueError("bad tag")
