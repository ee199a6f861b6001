"""The wire format between the sandbox's checker and the candidate's process, shared by both.

What it is: a 4-byte length, then a message of tagged values. The checker's requests are
marshal (the candidate's side may trust them); the candidate's replies are the repr() of lists,
str, int, bool and None, which the checker parses into a syntax tree (`literal`) and rebuilds
by hand, accepting nothing else: no code of the candidate's runs in the checker, and the import
cost on both sides stays near zero (marshal, os and _ast are built in). Plain data keeps its
type: builtins (exact types only), the standard library's containers and numbers (Counter,
OrderedDict, defaultdict, deque, namedtuple classes with nothing of their own, dict views,
array, Fraction, Decimal, datetime's date, time, datetime, timedelta and fixed-offset or
zoneinfo time zones), numpy's arrays and scalars of numbers, bytes, text, datetime64 and
timedelta64 (object arrays too when every element is plain data; masked arrays, matrices and
dtypes), and, for DS-1000's results, pandas' DataFrame, Series and indexes (Index, RangeIndex,
MultiIndex, DatetimeIndex with its freq, ...) with their numpy or extension arrays
(categorical, tz-aware datetimes, string, nullable integer/float/boolean, period, interval) and
scalars (Timestamp, Timedelta, Period, Interval, NaT, NA), scipy.sparse's matrices and arrays,
and torch's CPU tensors, sizes and dtypes. The checker rebuilds each with its own class from
the parsed fields (sparse matrices checked in full, pandas' structures verified by pandas'
constructors), so an object of the candidate's with a forged `__eq__` (a subclass of any of
them included) is never one of them: it is a handle (`other`), and a container that holds
one (an object array, a DataFrame column) is a handle as a whole.

Where it runs: inside the sandbox, twice: in the trusted checker (`checker.py`, pid 1
of the sandbox) and in the untrusted candidate's process (`candidate.py`, its child, same
uid). Neither imports it (they run as `python -I -S -B -c TEXT`, where nothing of easylemur is
importable): `programs.program_text` puts this file's text in place of the one
`from easylemur.eval.sandbox.programs.wire import (...)` statement of each, so both sides encode and
decode with the same code. DS-1000's sealed programs (`eval/benchmarks/ds1000_seal/`) carry
it as a file of their own, for the candidate's driver and the judge. On the host it is an
ordinary module (the tests import it).

Standard library only (numpy, pandas, scipy and torch lazily: the candidate's side encodes
only values of modules already imported, the checker's side imports one from the job's
libraries on sys.path when a value needs it), and code any Python 3.8+ runs: the sandbox's
interpreter may be the system's /usr/bin/python3.
"""

import _ast
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


def library(name):
    "A library a value needs on the checker's side (pandas, scipy.sparse, torch), imported on first use."
    if name not in sys.modules:
        numpy()  # its thread settings first
        __import__(name)
    return sys.modules[name]


def literal(node):
    "The value of a repr() of lists, str, int, bool and None (parsed with _ast.PyCF_ONLY_AST); anything else is refused."
    t = type(node)
    if t is _ast.Expression:
        return literal(node.body)
    if t is _ast.Constant and type(node.value) in (str, int, bool, type(None)):
        return node.value
    if t is _ast.List:
        return [literal(x) for x in node.elts]
    if t is _ast.UnaryOp and type(node.op) is _ast.USub and type(node.operand) is _ast.Constant \
            and type(node.operand.value) is int:
        return -node.operand.value
    raise ValueError("not a plain literal")


def parse(text):
    "A reply's (or a values file's) text, ASCII, read back as `literal` reads it."
    return literal(compile(text, "<reply>", "eval", _ast.PyCF_ONLY_AST))


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
    top = t.__module__.split(".")[0]
    if top in LIBRARY_ENCODERS:
        out = LIBRARY_ENCODERS[top](v, t, other)
        if out is not None:
            return out
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
    """A numpy dtype of numbers, bytes, text, datetime64 or timedelta64 from its .str (e.g. '<f8',
    '|b1', '<U5', '<M8[ns]'); nothing else."""
    np = numpy()
    unit = ""
    if 2 < len(s) < 16 and s[1:2] in ("M", "m") and s.endswith("]") and "[" in s:
        s, unit = s.split("[", 1)
        if not (unit[:-1].isascii() and unit[:-1].isalnum() and len(unit) < 8):
            raise ValueError("bad dtype")
    if not (2 < len(s) < 12 and s[0] in "<>|=" and s[1] in "biufcSUMm" and s[2:].isascii() and s[2:].isdigit()):
        raise ValueError("bad dtype")
    dt = np.dtype(s + ("[" + unit if unit else ""))
    if not plain_dtype(dt):
        raise ValueError("bad dtype")
    return dt


def plain_dtype(dt):
    "Whether a numpy dtype holds plain values: numbers, bytes, text, datetime64, timedelta64."
    return dt.kind in "biufcSUMm" and not dt.hasobject and dt.fields is None and dt.subdtype is None


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
    if tag in LIBRARY_DECODERS:
        return LIBRARY_DECODERS[tag](v, handle)
    raise ValueError("bad tag")


# ----------------------------------------------------------------------------- libraries' values
# The encoders run on the candidate's side, on values of modules it has imported (exact types
# only, as above; None: not plain data, the caller hands out a handle). The decoders run on the
# checker's side and rebuild each value with the checker's own classes, checking what a
# constructor would not (sparse indices in full): a malformed value raises, never builds.


class NotPlain(Exception):
    "An element of an all-or-nothing container (an object array) that is not plain data."


def refuse_element(v):
    raise NotPlain()


def plain_or_none(items):
    "The encodings of `items` when every one is plain data, else None."
    try:
        return [enc(x, refuse_element) for x in items]
    except NotPlain:
        return None


def hexes(xs):
    return [hex(int(x)) for x in xs]


def ints(xs):
    out = [int(x, 16) for x in xs]
    if not all(type(x) is str for x in xs):
        raise ValueError("bad integers")
    return out


def name_text(x, most=64, extra="_-+/"):
    "A short name (a time zone key, a frequency) of letters, digits and `extra`, else ValueError."
    if type(x) is not str or not 0 < len(x) <= most or ".." in x or x[0] == "/" \
            or not all(c.isascii() and (c.isalnum() or c in extra) for c in x):
        raise ValueError("bad name")
    return x


def shape_of(v):
    shape = tuple(ints(v))
    if min(shape, default=0) < 0:
        raise ValueError("bad shape")
    count = 1
    for n in shape:
        count *= n
    return shape, count


def enc_numpy(v, t, other):
    np = sys.modules["numpy"]
    if t is np.ndarray or (t.__module__ == "numpy" and isinstance(v, np.generic)):
        dt = v.dtype
        if plain_dtype(dt):
            if t is np.ndarray:
                return ["A", dt.str, hexes(v.shape), v.tobytes().hex()]
            return ["a", dt.str, v.tobytes().hex()]
        if t is np.ndarray and dt.str == "|O":
            items = plain_or_none(list(v.reshape(-1)))
            if items is not None:
                return ["Ao", hexes(v.shape), items]
        return None
    if t is np.matrix:
        inner = enc_numpy(v.view(np.ndarray), np.ndarray, other)
        return None if inner is None else ["Ax", inner]
    if t is np.ma.MaskedArray:
        data = enc_numpy(np.asarray(v.data), np.ndarray, other)
        if data is None:
            return None
        mask = np.ma.getmaskarray(v)
        return ["Am", data, enc(mask, other), enc(v.fill_value, other), v.mask is np.ma.nomask]
    if isinstance(v, np.dtype) and (plain_dtype(v) or v.str == "|O"):
        return ["dt", v.str]
    return None


def dec_object_array(v, handle):
    np = numpy()
    shape, count = shape_of(v[1])
    items = [dec(x, handle) for x in v[2]]
    if len(items) != count:
        raise ValueError("bad array")
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i, x in enumerate(items):
        flat[i] = x  # one slot each: a list element stays a list
    return out


def dec_numpy_array(v, handle):
    a = dec(v, handle)
    if type(a) is not numpy().ndarray:
        raise ValueError("not an array")
    return a


def dec_matrix(v, handle):
    a = dec_numpy_array(v[1], handle)
    if a.ndim != 2:
        raise ValueError("bad matrix")
    return numpy().asmatrix(a)


def dec_masked(v, handle):
    np = numpy()
    data, mask = dec_numpy_array(v[1], handle), dec_numpy_array(v[2], handle)
    if mask.dtype != bool or mask.shape != data.shape:
        raise ValueError("bad mask")
    fill = dec(v[3], handle)
    if v[4] is True:
        return np.ma.MaskedArray(data, fill_value=fill)
    return np.ma.MaskedArray(data, mask=mask, fill_value=fill)


def dec_dtype(v, handle):
    return numpy().dtype(object) if v[1] == "|O" else dtype_of(v[1])


def enc_tz(tz):
    "A time zone's encoding: none, UTC, a fixed offset or a zoneinfo key; None for any other."
    dtm = sys.modules["datetime"]
    if tz is None:
        return ["n"]
    if tz is dtm.timezone.utc:
        return ["tz", "utc"]
    if type(tz) is dtm.timezone:
        off = tz.utcoffset(None)
        plain = dtm.timezone(off)
        name = ["n"] if tz.tzname(None) == plain.tzname(None) else ["s", tz.tzname(None)]
        return ["tz", "fx", hexes((off.days, off.seconds, off.microseconds)), name]
    zi = sys.modules.get("zoneinfo")
    if zi is not None and type(tz) is zi.ZoneInfo and type(tz.key) is str:
        return ["tz", "zi", tz.key]
    return None


def dec_tz(v, handle):
    import datetime as dtm
    if v[1] == "utc":
        return dtm.timezone.utc
    if v[1] == "fx":
        days, seconds, micro = ints(v[2])
        off = dtm.timedelta(days, seconds, micro)
        name = dec(v[3], handle)
        return dtm.timezone(off) if name is None else dtm.timezone(off, "".join(name))
    if v[1] == "zi":
        import zoneinfo
        return zoneinfo.ZoneInfo(name_text(v[2]))
    raise ValueError("bad time zone")


def enc_datetime(v, t, other):
    dtm = sys.modules["datetime"]
    if t is dtm.datetime or t is dtm.time:
        tz = enc_tz(v.tzinfo)
        if tz is None:
            return None
        if t is dtm.time:
            return ["Dtm", hexes((v.hour, v.minute, v.second, v.microsecond, v.fold)), tz]
        return ["Dt", hexes((v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold)), tz]
    if t is dtm.date:
        return ["Dd", hexes((v.year, v.month, v.day))]
    if t is dtm.timedelta:
        return ["Dtd", hexes((v.days, v.seconds, v.microseconds))]
    if t is dtm.timezone:
        return enc_tz(v)
    return None


def enc_zone(v, t, other):
    return enc_tz(v)


def dec_datetime(v, handle):
    import datetime as dtm
    tag, parts = v[0], ints(v[1])
    if tag == "Dd":
        return dtm.date(*parts)
    if tag == "Dtd":
        return dtm.timedelta(*parts)
    tz = dec(v[2], handle)
    if tz is not None and not isinstance(tz, dtm.tzinfo):
        raise ValueError("bad time zone")
    if tag == "Dtm":
        return dtm.time(*parts[:4], tzinfo=tz, fold=parts[4])
    return dtm.datetime(*parts[:7], tzinfo=tz, fold=parts[7])


# pandas: a frame is its columns' arrays, its columns and its index; an index its array, name and
# (DatetimeIndex, TimedeltaIndex) freq; an array is a numpy array or one of the extension arrays
# below. Rebuilt column by column with each array's own dtype (pandas 3 would infer "str" from an
# object array of strings).
MASKED = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64", "boolean")


def enc_values(arr, other):
    "A Series', an Index's or a column's array (`.array`): a numpy array, or an extension array pandas rebuilds."
    np, pd = sys.modules["numpy"], sys.modules["pandas"]
    t = type(arr)
    if t is pd.arrays.NumpyExtensionArray or isinstance(arr.dtype, np.dtype):  # naive datetimes, timedeltas too
        return enc(np.asarray(arr), other)
    if t is pd.Categorical:
        return ["pCat", enc_index(arr.categories, other), enc(np.asarray(arr.codes), other), arr.ordered is True]
    if t is pd.arrays.DatetimeArray:
        tz = enc_tz(arr.tz)
        if tz is None:
            return other(arr)
        return ["pTz", enc(np.asarray(arr.tz_convert("UTC").tz_localize(None)), other), tz]
    if t in (pd.arrays.StringArray, pd.arrays.ArrowStringArray):
        na = "NA" if arr.dtype.na_value is pd.NA else "nan"
        items = [None if missing else x for x, missing in zip(arr.to_numpy(dtype=object), arr.isna())]
        return ["pStr", arr.dtype.storage, na, [enc(x, other) for x in items]]
    if t in (pd.arrays.IntegerArray, pd.arrays.FloatingArray, pd.arrays.BooleanArray):
        data = arr.to_numpy(dtype=arr.dtype.numpy_dtype, na_value=arr.dtype.numpy_dtype.type(0))
        return ["pMask", enc(data, other), enc(np.asarray(arr.isna()), other)]
    if t is pd.arrays.PeriodArray:
        return ["pPer", enc(np.asarray(arr.asi8), other), arr.freqstr]
    if t is pd.arrays.IntervalArray:
        return ["pIv", enc_values(arr.left.array, other), enc_values(arr.right.array, other), arr.closed]
    return other(arr)


def dec_values(v, handle):
    np, pd = numpy(), library("pandas")
    out = dec(v, handle)
    if type(out) is np.ndarray or isinstance(out, pd.api.extensions.ExtensionArray):
        if out.ndim != 1:
            raise ValueError("bad array")
        return out
    raise ValueError("not an array")


def dec_pandas_array(v, handle):
    np, pd = numpy(), library("pandas")
    tag = v[0]
    if tag == "pCat":
        categories, codes = dec_index(v[1], handle), dec_values(v[2], handle)
        return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered=v[3] is True))
    if tag == "pTz":
        utc = dec_values(v[1], handle)
        if type(utc) is not np.ndarray or utc.dtype.kind != "M":
            raise ValueError("bad datetimes")
        return pd.array(utc).tz_localize("UTC").tz_convert(dec(v[2], handle))
    if tag == "pStr":
        if v[1] not in ("python", "pyarrow") or v[2] not in ("NA", "nan"):
            raise ValueError("bad string array")
        items = [dec(x, handle) for x in v[3]]
        if not all(x is None or type(x) is str for x in items):
            raise ValueError("bad string array")
        return pd.array(items, dtype=pd.StringDtype(v[1], na_value=pd.NA if v[2] == "NA" else np.nan))
    if tag == "pMask":
        data, mask = dec_values(v[1], handle), dec_values(v[2], handle)
        if type(data) is not np.ndarray or type(mask) is not np.ndarray or mask.dtype != bool:
            raise ValueError("bad masked array")
        kind = {"i": pd.arrays.IntegerArray, "u": pd.arrays.IntegerArray, "f": pd.arrays.FloatingArray,
                "b": pd.arrays.BooleanArray}[data.dtype.kind]
        return kind(data, mask)
    if tag == "pPer":
        ordinals = dec_values(v[1], handle)
        if type(ordinals) is not np.ndarray or ordinals.dtype != np.int64:
            raise ValueError("bad periods")
        return pd.arrays.PeriodArray(ordinals, dtype=pd.PeriodDtype(name_text(v[2], 24)))
    if tag == "pIv":
        if v[3] not in ("left", "right", "both", "neither"):
            raise ValueError("bad intervals")
        return pd.arrays.IntervalArray.from_arrays(dec_values(v[1], handle), dec_values(v[2], handle), closed=v[3])
    raise ValueError("bad tag")


def enc_index(ix, other):
    pd = sys.modules["pandas"]
    t = type(ix)
    if t is pd.RangeIndex:
        return ["pR", hex(ix.start), hex(ix.stop), hex(ix.step), enc(ix.name, other)]
    if t is pd.MultiIndex:
        return ["pM", [enc_index(level, other) for level in ix.levels],
                [enc(sys.modules["numpy"].asarray(c), other) for c in ix.codes], [enc(n, other) for n in ix.names]]
    if t in (pd.Index, pd.DatetimeIndex, pd.TimedeltaIndex, pd.PeriodIndex, pd.CategoricalIndex, pd.IntervalIndex):
        freq = ix.freqstr if t in (pd.DatetimeIndex, pd.TimedeltaIndex) and ix.freq is not None else None
        return ["pI", enc_values(ix.array, other), enc(ix.name, other), enc(freq, other)]
    return other(ix)


def dec_index(v, handle):
    np, pd = numpy(), library("pandas")
    if v[0] == "pR":
        start, stop, step = ints(v[1:4])
        return pd.RangeIndex(start, stop, step, name=dec(v[4], handle))
    if v[0] == "pM":
        levels = [dec_index(x, handle) for x in v[1]]
        codes = [dec_values(x, handle) for x in v[2]]
        names = [dec(x, handle) for x in v[3]]
        return pd.MultiIndex(levels=levels, codes=codes, names=names, verify_integrity=True)
    if v[0] != "pI":
        raise ValueError("not an index")
    values, name, freq = dec_values(v[1], handle), dec(v[2], handle), dec(v[3], handle)
    if freq is not None:
        kind = {"M": pd.DatetimeIndex, "m": pd.TimedeltaIndex}[values.dtype.kind]
        return kind(values, freq=name_text(freq, 24), name=name)
    if type(values) is np.ndarray:
        return pd.Index(values, dtype=values.dtype, name=name)
    return pd.Index(values, name=name)


def series_of(values):
    "A Series of one rebuilt array with its own dtype (and a RangeIndex), for a frame's column."
    np, pd = numpy(), library("pandas")
    return pd.Series(values, dtype=values.dtype if type(values) is np.ndarray else None, copy=False)


def enc_pandas(v, t, other):
    pd = sys.modules["pandas"]
    try:  # a frame, series or index is plain data as a whole or a handle as a whole
        if t is pd.DataFrame:
            return ["pF", [enc_values(v.iloc[:, j].array, refuse_element) for j in range(v.shape[1])],
                    enc_index(v.columns, refuse_element), enc_index(v.index, refuse_element)]
        if t is pd.Series:
            return ["pS", enc_values(v.array, refuse_element), enc_index(v.index, refuse_element),
                    enc(v.name, refuse_element)]
        if t in (pd.Index, pd.RangeIndex, pd.MultiIndex, pd.DatetimeIndex, pd.TimedeltaIndex, pd.PeriodIndex,
                 pd.CategoricalIndex, pd.IntervalIndex):
            return enc_index(v, refuse_element)
    except NotPlain:
        return other(v)
    if v is pd.NaT:
        return ["pNaT"]
    if v is pd.NA:
        return ["pNA"]
    if t is pd.Timestamp:
        tz = enc_tz(v.tz)
        return None if tz is None else ["pTs", enc(v.to_datetime64(), other), tz]
    if t is pd.Timedelta:
        return ["pTd", enc(v.to_timedelta64(), other)]
    if t is pd.Period:
        return ["pP", hex(v.ordinal), v.freqstr]
    if t is pd.Interval:
        return ["pIvS", enc(v.left, other), enc(v.right, other), v.closed]
    if t is pd.CategoricalDtype:
        cats = ["n"] if v.categories is None else enc_index(v.categories, other)
        return ["pCD", cats, enc(v.ordered, other)]
    if t is pd.DatetimeTZDtype:
        tz = enc_tz(v.tz)
        return None if tz is None else ["pTzD", v.unit, tz]
    if t is pd.StringDtype:
        return ["pSD", v.storage, "NA" if v.na_value is pd.NA else "nan"]
    if t in (pd.PeriodDtype, pd.IntervalDtype) or t in [getattr(pd, m[:1].upper() + m[1:] + "Dtype") for m in MASKED]:
        return ["pD", str(v)]
    return None


def dec_pandas(v, handle):
    np, pd = numpy(), library("pandas")
    tag = v[0]
    if tag == "pF":
        columns, index = dec_index(v[2], handle), dec_index(v[3], handle)
        cols = [dec_values(x, handle) for x in v[1]]
        if len(cols) != len(columns) or any(len(c) != len(index) for c in cols):
            raise ValueError("bad frame")
        if not cols:
            return pd.DataFrame(index=index, columns=columns)
        out = pd.DataFrame(dict(enumerate(series_of(c) for c in cols)))
        out.index, out.columns = index, columns
        return out
    if tag == "pS":
        values, index = dec_values(v[1], handle), dec_index(v[2], handle)
        if len(values) != len(index):
            raise ValueError("bad series")
        out = series_of(values)
        out.index = index
        out.name = dec(v[3], handle)
        return out
    if tag in ("pI", "pR", "pM"):
        return dec_index(v, handle)
    if tag == "pNaT":
        return pd.NaT
    if tag == "pNA":
        return pd.NA
    if tag == "pTs":
        when = dec(v[1], handle)
        if type(when) is not np.datetime64:
            raise ValueError("bad timestamp")
        tz = dec(v[2], handle)
        out = pd.Timestamp(when)
        return out if tz is None else out.tz_localize("UTC").tz_convert(tz)
    if tag == "pTd":
        span = dec(v[1], handle)
        if type(span) is not np.timedelta64:
            raise ValueError("bad timedelta")
        return pd.Timedelta(span)
    if tag == "pP":
        return pd.Period(ordinal=int(v[1], 16), freq=name_text(v[2], 24))
    if tag == "pIvS":
        if v[3] not in ("left", "right", "both", "neither"):
            raise ValueError("bad interval")
        return pd.Interval(dec(v[1], handle), dec(v[2], handle), closed=v[3])
    if tag == "pCD":
        cats = None if v[1] == ["n"] else dec_index(v[1], handle)
        return pd.CategoricalDtype(cats, ordered=dec(v[2], handle))
    if tag == "pTzD":
        return pd.DatetimeTZDtype(name_text(v[1], 4), dec(v[2], handle))
    if tag == "pSD":
        if v[1] not in ("python", "pyarrow") or v[2] not in ("NA", "nan"):
            raise ValueError("bad string dtype")
        return pd.StringDtype(v[1], na_value=pd.NA if v[2] == "NA" else np.nan)
    if tag == "pD":
        text = v[1]
        if text not in MASKED and not (name_text(text, 40, "[]_-, ") and text.split("[")[0] in ("period", "interval")):
            raise ValueError("bad dtype")
        out = pd.api.types.pandas_dtype(text)
        if str(out) != text:
            raise ValueError("bad dtype")
        return out
    return dec_pandas_array(v, handle)


# scipy.sparse: the classes by name (matrix and array kinds); csr, csc and bsr as their three
# arrays, the others through coo (row, col, data), rebuilt as their own format.
SPARSE = ("csr", "csc", "coo", "bsr", "lil", "dok", "dia")
SPARSE_CLASSES = tuple(f + kind for f in SPARSE for kind in ("_matrix", "_array"))


def enc_scipy(v, t, other):
    sp = sys.modules.get("scipy.sparse")
    name = t.__name__
    if sp is None or name not in SPARSE_CLASSES or getattr(sp, name, None) is not t or len(v.shape) != 2:
        return None
    if v.format in ("csr", "csc", "bsr"):
        parts = [enc(v.data, other), enc(v.indices, other), enc(v.indptr, other)]
    else:
        c = v.tocoo()
        parts = [enc(c.data, other), enc(c.row, other), enc(c.col, other)]
    return ["sp", name, hexes(v.shape), parts]


def dec_scipy(v, handle):
    sp = library("scipy.sparse")
    name = v[1]
    if name not in SPARSE_CLASSES:
        raise ValueError("bad sparse class")
    cls = getattr(sp, name)
    shape, _ = shape_of(v[2])
    data, first, second = [dec_numpy_array(x, handle) for x in v[3]]
    if len(shape) != 2 or first.dtype.kind not in "iu" or second.dtype.kind not in "iu" or first.ndim != 1 \
            or second.ndim != 1:
        raise ValueError("bad sparse matrix")
    fmt = name.split("_")[0]
    if fmt in ("csr", "csc", "bsr"):
        out = cls((data, first, second), shape=shape)
        out.check_format(full_check=True)  # every index in bounds, before anything reads them
        return out
    if data.ndim != 1 or not len(data) == len(first) == len(second):
        raise ValueError("bad sparse matrix")
    if len(data) and (first.min() < 0 or second.min() < 0 or first.max() >= shape[0] or second.max() >= shape[1]):
        raise ValueError("bad sparse matrix")
    coo = getattr(sp, "coo" + name[3:])((data, (first, second)), shape=shape)
    return coo if fmt == "coo" else cls(coo)


# torch: CPU tensors of plain dtypes (strided, not quantized) as raw bytes, with requires_grad;
# Parameter as such; torch.Size and torch dtypes. bfloat16 crosses as the int16 of its bits.
TORCH_DTYPES = {"bool": "|b1", "uint8": "|u1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
                "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
                "bfloat16": "<i2"}


def enc_torch(v, t, other):
    torch = sys.modules["torch"]
    if t is torch.Size:
        return ["tSz", hexes(v)]
    if t is torch.dtype:
        name = str(v).split(".")[-1]
        return ["tDt", name] if name in TORCH_DTYPES else None
    if t is not torch.Tensor and t is not torch.nn.Parameter:
        return None
    name = str(v.dtype).split(".")[-1]
    if name not in TORCH_DTYPES or v.layout is not torch.strided or v.device.type != "cpu" or v.is_quantized \
            or sys.byteorder != "little":
        return None
    x = v.detach().resolve_conj().resolve_neg().contiguous()
    raw = (x.view(torch.int16) if name == "bfloat16" else x).numpy().tobytes()
    return ["tT", name, hexes(v.shape), raw.hex(), v.requires_grad is True, t is torch.nn.Parameter]


def dec_torch(v, handle):
    np, torch = numpy(), library("torch")
    if v[0] == "tSz":
        return torch.Size(ints(v[1]))
    if v[1] not in TORCH_DTYPES:
        raise ValueError("bad torch dtype")
    if v[0] == "tDt":
        return getattr(torch, v[1])
    shape, count = shape_of(v[2])
    dt = np.dtype(TORCH_DTYPES[v[1]])
    data = bytes.fromhex(v[3])
    if count * dt.itemsize != len(data) or sys.byteorder != "little":
        raise ValueError("bad tensor")
    out = torch.from_numpy(np.frombuffer(data, dt).reshape(shape).copy()) if count else \
        torch.from_numpy(np.zeros(shape, dt))
    if v[1] == "bfloat16":
        out = out.view(torch.bfloat16)
    if v[5] is True:
        return torch.nn.Parameter(out, requires_grad=v[4] is True)
    if v[4] is True:
        out.requires_grad_(True)
    return out


LIBRARY_ENCODERS = {"numpy": enc_numpy, "datetime": enc_datetime, "zoneinfo": enc_zone, "pandas": enc_pandas,
                    "scipy": enc_scipy, "torch": enc_torch}
LIBRARY_DECODERS = {"Ao": dec_object_array, "Ax": dec_matrix, "Am": dec_masked, "dt": dec_dtype, "tz": dec_tz,
                    "Dt": dec_datetime, "Dd": dec_datetime, "Dtm": dec_datetime, "Dtd": dec_datetime,
                    "sp": dec_scipy, "tT": dec_torch, "tSz": dec_torch, "tDt": dec_torch}
LIBRARY_DECODERS.update((tag, dec_pandas) for tag in ("pF", "pS", "pI", "pR", "pM", "pNaT", "pNA", "pTs", "pTd", "pP",
                                                       "pIvS", "pCD", "pTzD", "pSD", "pD", "pCat", "pTz", "pStr",
                                                       "pMask", "pPer", "pIv"))
