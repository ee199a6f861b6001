"""Matplotlib figures across the seal: the candidate's open figures pickled in its process, and
unpickled in the judge under an allow-list, so the official `exec_test`'s `plt.gca()` /
`plt.gcf()` inspect the candidate's figure with the judge's own Matplotlib.

Pickle is the format because a figure's state is Matplotlib's own (`Figure.__getstate__` /
`__setstate__`, with every artist, transform and tick in it); what makes it data is the judge's
unpickler, which builds only what the allow-list names, with Python's own (pure-Python)
unpickler and its opcodes checked one by one:

- classes (GLOBAL / STACK_GLOBAL): those defined in the Matplotlib and mpl_toolkits modules of
  `MODULES` (no backend, animation, TeX or file-writing module), a few of numpy's, pandas' and
  the builtins' data classes (`CLASSES`); nothing else resolves, no function;
- enum members come as (class, name) and are looked up by name in an allowed enum class;
- callables come only as persistent ids (`persistent_id` on the candidate's side): a function
  of `FUNCTIONS` (numpy's and pandas' reconstructors, Matplotlib's callbacks), a method of
  `METHODS` bound to an object the pickle built (Figure.delaxes, a transform's own methods,
  MarkerStyle's `_set_*`) or a `functools.partial` of those;
- REDUCE calls only such a callable or an allowed class (numpy.dtype always as a copy, never a
  builtin singleton); NEWOBJ makes only allowed classes; BUILD sets state only on an instance
  of an allowed class (never on a class, a function or a module), and no dunder attribute;
  APPEND / SETITEM / ADDITEMS only on lists, dicts, sets or allowed instances; INST, OBJ and the
  extension registry are refused.

So the judge runs no code of the candidate's and calls nothing the allow-list does not name;
the candidate chooses only the state of objects of Matplotlib's classes (its figure). A figure
holding anything else (a lambda tick formatter, a seaborn object) does not cross: the judge
refuses it, and the sample fails as "not data". Standard library only besides the libraries
themselves (imported by the figure's modules).
"""

import enum
import functools
import importlib
import io
import pickle
import sys
import types

MODULES = ("matplotlib.artist", "matplotlib.axes._axes", "matplotlib.axes._base", "matplotlib.axes._secondary_axes",
           "matplotlib.axis", "matplotlib.backend_bases", "matplotlib.category", "matplotlib.cbook",
           "matplotlib.collections", "matplotlib.colorbar", "matplotlib.colorizer", "matplotlib.colors",
           "matplotlib.container", "matplotlib.contour", "matplotlib.dates", "matplotlib.figure",
           "matplotlib.font_manager", "matplotlib.gridspec", "matplotlib.image", "matplotlib.inset",
           "matplotlib.layout_engine", "matplotlib.legend", "matplotlib.legend_handler", "matplotlib.lines",
           "matplotlib.markers", "matplotlib.patheffects",
           "matplotlib.offsetbox", "matplotlib.patches", "matplotlib.path", "matplotlib.projections.geo",
           "matplotlib.projections.polar", "matplotlib.quiver", "matplotlib.scale", "matplotlib.spines",
           "matplotlib.stackplot", "matplotlib.streamplot", "matplotlib.table", "matplotlib.text",
           "matplotlib.ticker", "matplotlib.transforms", "matplotlib.tri._triangulation", "matplotlib.tri._tricontour",
           "matplotlib.units", "matplotlib._enums", "mpl_toolkits.mplot3d.art3d", "mpl_toolkits.mplot3d.axes3d",
           "mpl_toolkits.mplot3d.axis3d", "pandas.plotting._matplotlib.converter")
CLASSES = {("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"), ("builtins", "range"),
           ("builtins", "bytearray"), ("builtins", "object"), ("collections", "OrderedDict"), ("numpy", "ndarray"),
           ("numpy", "dtype"), ("numpy.ma", "MaskedArray"), ("numpy.ma.core", "MaskedArray"),
           ("pandas", "Index"), ("pandas", "DatetimeIndex"), ("pandas", "PeriodIndex"), ("pandas", "RangeIndex"),
           ("pandas", "Series"), ("pandas", "PeriodDtype"), ("pandas.arrays", "PeriodArray"),
           ("pandas.arrays", "DatetimeArray"), ("pandas.core.internals.managers", "SingleBlockManager"),
           ("pandas._libs.tslibs.offsets", "Day"), ("pandas._libs.tslibs.offsets", "MonthEnd"),
           ("pandas._libs.tslibs.offsets", "Hour"), ("pandas._libs.tslibs.offsets", "YearEnd"),
           ("pandas._libs.tslibs.offsets", "QuarterEnd"), ("pandas._libs.tslibs.offsets", "Week"),
           ("datetime", "timezone"), ("datetime", "timedelta"), ("datetime", "datetime"), ("datetime", "date"),
           ("itertools", "count")}
FUNCTIONS = {("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
             ("numpy._core.numeric", "_frombuffer"), ("numpy.core.multiarray", "_reconstruct"),
             ("numpy.core.multiarray", "scalar"), ("numpy.ma.core", "_mareconstruct"),
             ("matplotlib.cbook", "_exception_printer"), ("matplotlib.backend_bases", "_key_handler"),
             ("matplotlib.backend_bases", "_mouse_handler"), ("matplotlib.colorbar", "_remove_cbar_axes"),
             ("matplotlib.figure", "_stale_figure_callback"), ("matplotlib.artist", "_stale_axes_callback"),
             ("pandas.core.indexes.base", "_new_Index"), ("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"),
             ("pandas._libs.internals", "_unpickle_block"), ("pandas.plotting._matplotlib.timeseries", "_format_coord"),
             ("pandas.plotting._matplotlib.converter", "_daily_finder"),
             ("pandas.plotting._matplotlib.converter", "_monthly_finder"),
             ("pandas.plotting._matplotlib.converter", "_quarterly_finder"),
             ("pandas.plotting._matplotlib.converter", "_annual_finder"),
             ("matplotlib.axis", "Axis._format_with_dict")}
METHODS = {"delaxes", "pick", "_remove_legend", "_remove_suplabel", "_unit_change_handler", "_cbar_cla", "_get_view", "_set_view",
           "_set_view_from_bbox", "drag_pan", "_findoffset", "_button_press", "_button_release", "_on_move",
           "get_affine", "get_matrix", "inverted", "transform", "transform_affine", "transform_non_affine",
           "transform_path", "transform_path_affine", "transform_path_non_affine"}

CONTAINER_METHODS = {"remove", "append", "discard"}


class Pickler(pickle.Pickler):
    "The candidate's side: callables go as persistent ids, which the judge resolves by its allow-list."

    def persistent_id(self, obj):
        t = type(obj)
        if isinstance(obj, enum.Enum):  # by name: some Pythons reduce a member to getattr(class, name)
            return ("e", t, obj.name)
        if t is types.MethodType:
            return ("m", obj.__self__, obj.__func__.__name__)
        if t is types.BuiltinFunctionType and obj.__self__ is not None and type(obj.__self__) is not types.ModuleType:
            return ("m", obj.__self__, obj.__name__)
        if t is types.FunctionType or t is types.BuiltinFunctionType:
            return ("f", getattr(obj, "__module__", None), obj.__qualname__)
        if t is functools.partial:
            return ("p", obj.func, obj.args, obj.keywords)
        return None


def dump_figures() -> bytes:
    "Every open pyplot figure, the current one last (as pyplot orders them)."
    from matplotlib import _pylab_helpers

    buf = io.BytesIO()
    Pickler(buf, 4).dump([m.canvas.figure for m in _pylab_helpers.Gcf.get_all_fig_managers()])
    return buf.getvalue()


class Refused(pickle.UnpicklingError):
    "Something the allow-list does not name."


def allowed_class(cls) -> bool:
    return isinstance(cls, type) and (cls.__module__ in MODULES or (cls.__module__, cls.__qualname__) in CLASSES)


def allowed_instance(obj) -> bool:
    "An instance of an allowed class (a numpy dtype: its class is numpy.dtypes' own subclass), not a class."
    np = sys.modules.get("numpy")
    return not isinstance(obj, type) and (allowed_class(type(obj)) or (
        np is not None and isinstance(obj, np.dtype) and type(obj).__module__ == "numpy.dtypes"))


def resolve(module: str, name: str) -> object:
    if (name.startswith("__") or ".__" in name) and (module, name) not in FUNCTIONS:
        raise Refused("name %s" % name)
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class Unpickler(pickle._Unpickler):
    "The judge's side: the pure-Python unpickler with its calls and state changes checked."

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.callables: dict = {}  # id -> the callables persistent_load made (kept alive, so ids stay theirs)

    def find_class(self, module, name):
        if type(module) is not str or type(name) is not str:
            raise Refused("class")
        np = sys.modules.get("numpy")
        if module == "numpy" and np is not None and name.isidentifier() and isinstance(getattr(np, name, None), np.ufunc):
            out = getattr(np, name)  # a ufunc by name (numpy.log in a log scale): arithmetic only
            self.callables[id(out)] = out
            return out
        if (module, name) in FUNCTIONS:  # a compiled function pickled by name (pandas' date finders)
            out = resolve(module, name)
            self.callables[id(out)] = out
            return out
        if not (module in MODULES or (module, name) in CLASSES):
            raise Refused("class %s.%s" % (module, name))
        cls = resolve(module, name)
        if not allowed_class(cls):
            raise Refused("class %s.%s" % (module, name))
        return cls

    def persistent_load(self, pid):
        if type(pid) is not tuple or len(pid) not in (3, 4) or type(pid[2]) not in (str, tuple):
            raise Refused("persistent id")
        kind, obj, name = pid[0], pid[1], pid[2]
        if kind == "e" and len(pid) == 3 and allowed_class(obj) and issubclass(obj, enum.Enum) and type(name) is str:
            return obj[name]  # a member, by name
        if kind == "f" and len(pid) == 3 and (obj, name) in FUNCTIONS:
            out = resolve(obj, name)
        elif kind == "m" and len(pid) == 3 and allowed_class(type(obj)) and type(name) is str \
                and (name in METHODS or (type(obj).__name__ == "MarkerStyle" and name.startswith("_set_"))) \
                and isinstance(getattr(type(obj), name, None), types.FunctionType):
            out = types.MethodType(getattr(type(obj), name), obj)  # the class's own method, whatever the instance holds
        elif kind == "m" and len(pid) == 3 and type(obj) in (list, dict, set) and name in CONTAINER_METHODS:
            out = getattr(obj, name)  # an artist's _remove_method: its list's own remove
        elif kind == "p" and len(pid) == 4 and id(obj) in self.callables and type(name) is tuple \
                and type(pid[3]) is dict:
            out = functools.partial(obj, *name, **pid[3])
        else:
            raise Refused("callable %s %s %s" % (pid[0], type(obj).__name__, name if type(name) is str else "..."))
        self.callables[id(out)] = out
        return out

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        if type(args) is not tuple or not (id(func) in self.callables or allowed_class(func)):
            raise Refused("call of %r" % type(func))
        np = sys.modules.get("numpy")
        if np is not None and func is np.dtype and args:
            args = (args[0], len(args) > 1 and args[1] is True, True)  # a copy: never a builtin dtype's singleton
        self.stack[-1] = func(*args)

    def load_newobj(self):
        if not allowed_class(self.stack[-2]):
            raise Refused("new %r" % (self.stack[-2],))
        super().load_newobj()

    def load_newobj_ex(self):
        if not allowed_class(self.stack[-3]):
            raise Refused("new %r" % (self.stack[-3],))
        super().load_newobj_ex()

    def load_build(self):
        state, inst = self.stack[-1], self.stack[-2]
        if not allowed_instance(inst):
            raise Refused("state of %r" % type(inst))
        if type(state) is tuple and len(state) == 2 and type(state[1]) is dict \
                and any(type(k) is not str or k.startswith("__") for k in state[1]):
            raise Refused("slot state")
        super().load_build()

    def items_target(self, kind):
        "The object an APPEND, SETITEM or ADDITEMS fills: a list, dict or set, or an instance of an allowed class."
        obj = self.stack[-1]
        if type(obj) is not kind and not allowed_instance(obj):
            raise Refused("items of %r" % type(obj))
        return obj

    def load_append(self):
        value = self.stack.pop()
        self.items_target(list).append(value)

    def load_appends(self):
        items = self.pop_mark()
        obj = self.items_target(list)
        if hasattr(obj, "extend"):
            obj.extend(items)
        else:
            for x in items:
                obj.append(x)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self.items_target(dict)[key] = value

    def load_setitems(self):
        items = self.pop_mark()
        obj = self.items_target(dict)
        for i in range(0, len(items), 2):
            obj[items[i]] = items[i + 1]

    def load_additems(self):
        items = self.pop_mark()
        obj = self.items_target(set)
        for x in items:
            obj.add(x)

    def refuse(self):
        raise Refused("opcode")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.APPEND[0]] = load_append
    dispatch[pickle.APPENDS[0]] = load_appends
    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.ADDITEMS[0]] = load_additems
    for op in (pickle.INST, pickle.OBJ, pickle.EXT1, pickle.EXT2, pickle.EXT4, pickle.PERSID):
        dispatch[op[0]] = refuse


def load_figures(data: bytes) -> list:
    """The candidate's figures, rebuilt by the judge under the allow-list (registered with pyplot
    as Figure.__setstate__ does: the last is the current figure); Refused when the pickle names
    anything else."""
    figures = Unpickler(data).load()
    if type(figures) is not list or not all(type(f).__name__ == "Figure" and allowed_class(type(f)) for f in figures):
        raise Refused("not a list of figures")
    return figures
