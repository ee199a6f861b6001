"""Per-device cost of a compiled step, read from its optimized HLO text (`compiled.as_text()`),
and the roofline estimate `python -m easylemur.aot --cost` prints (docs/design.md, "TPU AOT",
"Step cost estimate").

What XLA's own `cost_analysis()` gets wrong for a scanned model is that it counts a while
loop's body once. Here every computation gets the number of times it runs per step (a while
body: its parent's count x the loop's trip count, read from the HLO), and the collectives and
host transfers are summed with those counts.

Bytes convention (per device, per op, what a ring algorithm moves through each device's links
in each direction; n = devices in the replica group, O = the op's operand bytes on one device):
  all-gather O * (n - 1)   (the gathered result is n * O: the device receives the n - 1 shards)
  reduce-scatter O * (n - 1) / n;   all-reduce 2 * O * (n - 1) / n;   all-to-all O * (n - 1) / n
  collective-permute O;   an all-gather run as an all-reduce of the zero-padded gathered
  buffer (the TPU compiler's choice on slices of 64+ devices described without their
  wraparound links): what that all-reduce moves, 2 * S * (n - 1) / n
  for the gathered size S (twice a ring all-gather).
An async collective (TPU: start, update and done fusions, one chain_id) counts once. On TPU a
reduce-scatter is often an all-reduce whose results are only dynamic-sliced (the
compiler's "all-reduce-scatter" fusion): counted as the reduce-scatter it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

# bits per element of XLA's primitive types (the f8/f4 float formats: the digit after f)
_DTYPE_BITS = {"pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
               "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64,
               "c128": 128, "token": 0}


def dtype_bits(dtype: str) -> int:
    """Bits per element of an XLA element type ('bf16' -> 16, 'f8e4m3fn' -> 8, 's4' -> 4)."""
    if dtype in _DTYPE_BITS:
        return _DTYPE_BITS[dtype]
    m = re.fullmatch(r"f(\d)e\d+m\d+\w*", dtype)
    if m:
        return int(m.group(1))
    raise ValueError(f"unknown XLA element type {dtype!r}")


_ARRAY = re.compile(r"\b(pred|f\d+e\d+m\d+\w*|[suf]\d+|bf16|c64|c128)\[([\d,<=]*)\](\{[^}]*\})?")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%(\S+)\s*=\s*(.*)$")
_COMP = re.compile(r"^(ENTRY\s+)?%(\S+)\s+\(.*->.*\{\s*$")
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
# What the step's bytes are reported under: the kinds above, and all-gathers the TPU compiler
# runs as an all-reduce of the zero-padded gathered buffer (on large open meshes), which
# move what that all-reduce moves, twice a ring all-gather.
KINDS = ("all-gather", "all-gather-as-all-reduce", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
# Host memory is memory space 5 in TPU layouts (`S(5)`): what remat=full_offload writes to.
HOST_SPACE = 5


def array_shapes(shape: str) -> list[tuple[str, tuple[int, ...], int]]:
    """(dtype, dims, memory space) of every array in an HLO shape string (tuples flattened)."""
    out = []
    for m in _ARRAY.finditer(shape):
        dtype = m.group(1)
        dims = tuple(int(d.lstrip("<=")) for d in m.group(2).split(",") if d)  # <=N: a bounded dynamic dim
        space = re.search(r"S\((\d+)\)", m.group(3) or "")
        out.append((dtype, dims, int(space.group(1)) if space else 0))
    return out


def shape_bytes(shape: str) -> float:
    """Logical bytes of an HLO shape (layout tiling padding not counted)."""
    total = 0.0
    for dtype, dims, _ in array_shapes(shape):
        total += dtype_bits(dtype) / 8 * math.prod(dims)
    return total


@dataclass
class Instr:
    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: str
    root: bool = False
    args: str = ""  # the raw text between the opcode's parentheses (a constant's value)


@dataclass
class Computation:
    name: str
    instrs: dict[str, Instr] = field(default_factory=dict)
    root: Optional[Instr] = None


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesis group opening at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _parse_instr(line: str) -> Optional[Instr]:
    m = _INSTR.match(line)
    if not m:
        return None
    rest = m.group(3)
    if rest.startswith("("):
        end = _balanced(rest, 0)
    else:
        end = rest.find(" ")
    shape, rest = rest[:end], rest[end:].lstrip()
    op = re.match(r"([\w\-]+)\(", rest)
    if not op:
        return None
    close = _balanced(rest, op.end() - 1)
    operands = re.findall(r"%([^\s,()]+)", rest[op.end():close - 1])
    args = rest[op.end():close - 1]
    return Instr(m.group(2), shape, op.group(1), operands, rest[close:], bool(m.group(1)), args)


def parse_module(text: str) -> tuple[dict[str, Computation], str]:
    """The computations of an HLO module's text and the name of its entry computation."""
    comps: dict[str, Computation] = {}
    entry, cur = "", None
    for line in text.splitlines():
        if cur is None:
            m = _COMP.match(line)
            if m:
                cur = comps.setdefault(m.group(2), Computation(m.group(2)))
                entry = m.group(2) if m.group(1) else entry
            continue
        if line.strip() == "}":
            _tuple_refs(cur)
            cur = None
            continue
        ins = _parse_instr(line)
        if ins:
            cur.instrs[ins.name] = ins
            if ins.root:
                cur.root = ins
    return comps, entry


def _tuple_refs(comp: Computation) -> None:
    """Newer XLA prints a tuple element used as an operand as `%x#k` (no get-tuple-element
    instruction): each such reference becomes the get-tuple-element it stands for, named `x#k`,
    so the rest reads both forms alike."""
    for ins in list(comp.instrs.values()):
        for ref in ins.operands:
            base, sep, k = ref.partition("#")
            if sep and k.isdigit() and ref not in comp.instrs and base in comp.instrs:
                shape = _tuple_element(comp.instrs[base].shape, int(k))
                comp.instrs[ref] = Instr(ref, shape, "get-tuple-element", [base], f", index={k}")


def _tuple_element(shape: str, k: int) -> str:
    """The k-th top-level element of a tuple shape string ("" when there is none)."""
    shape = re.sub(r"/\*.*?\*/", "", shape).strip()
    if not shape.startswith("("):
        return ""
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(shape[1:-1], 1):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(shape[start:i].strip())
            start = i + 1
    parts.append(shape[start:-1].strip())
    return parts[k] if k < len(parts) else ""


def _callees(ins: Instr) -> list[str]:
    names = re.findall(r"\b(?:calls|body|to_apply|true_computation|false_computation)=%([^\s,}]+)", ins.attrs)
    branches = re.search(r"branch_computations=\{([^}]*)\}", ins.attrs)
    if branches:
        names += re.findall(r"%([^\s,}]+)", branches.group(1))
    return names


def _const(comp: Computation, name: str) -> Optional[int]:
    """The integer a scalar instruction holds, through copies, bitcasts and converts."""
    for _ in range(8):
        ins = comp.instrs.get(name)
        if ins is None:
            return None
        if ins.opcode == "constant":
            m = re.fullmatch(r"\s*(-?\d+)\s*", ins.args)
            return int(m.group(1)) if m else None
        if ins.opcode in ("copy", "bitcast", "convert") and ins.operands:
            name = ins.operands[0]
            continue
        return None
    return None


def _tuple_index(comp: Computation, name: str) -> Optional[int]:
    """k when `name` is get-tuple-element(parameter, index=k) (through copies)."""
    for _ in range(8):
        ins = comp.instrs.get(name)
        if ins is None:
            return None
        if ins.opcode == "get-tuple-element":
            src = comp.instrs.get(ins.operands[0]) if ins.operands else None
            m = re.search(r"index=(\d+)", ins.attrs)
            return int(m.group(1)) if m and src is not None and src.opcode == "parameter" else None
        if ins.opcode in ("copy", "bitcast", "convert") and ins.operands:
            name = ins.operands[0]
            continue
        return None
    return None


def trip_count(comps: dict[str, Computation], parent: Computation, loop: Instr) -> Optional[int]:
    """A while loop's trip count: the backend's `known_trip_count` when the HLO carries it,
    else read from the loop itself (i = init; i < N; i += step), which is what this libtpu
    prints (a peeled first iteration makes init 1)."""
    m = re.search(r'"known_trip_count":\{"n":"(\d+)"', loop.attrs)
    if m:
        return int(m.group(1))
    cond = comps.get((re.search(r"condition=%([^\s,]+)", loop.attrs) or [None, ""])[1])
    body = comps.get((re.search(r"body=%([^\s,]+)", loop.attrs) or [None, ""])[1])
    if cond is None or body is None or cond.root is None or cond.root.opcode != "compare":
        return None
    a, b = cond.root.operands[:2]
    direction = (re.search(r"direction=(\w+)", cond.root.attrs) or [None, ""])[1]
    k, limit = _tuple_index(cond, a), _const(cond, b)
    if k is None:  # N > i is i < N
        k, limit = _tuple_index(cond, b), _const(cond, a)
        direction = {"GT": "LT", "GE": "LE", "LT": "GT", "LE": "GE"}.get(direction, direction)
    init_tuple = parent.instrs.get(loop.operands[0]) if loop.operands else None
    if k is None or limit is None or init_tuple is None or init_tuple.opcode != "tuple" or body.root is None:
        return None
    init = _const(parent, init_tuple.operands[k])
    nxt = body.instrs.get(body.root.operands[k]) if body.root.opcode == "tuple" else None
    if init is None or nxt is None or nxt.opcode not in ("add", "subtract"):
        return None
    step = next((_const(body, o) for o in nxt.operands if _const(body, o) is not None), None)
    if not step or _tuple_index(body, nxt.operands[0]) != k:
        return None
    step = step if nxt.opcode == "add" else -step
    if direction in ("LT", "LE") and step > 0:
        return max(0, math.ceil((limit - init + (direction == "LE")) / step))
    if direction in ("GT", "GE") and step < 0:
        return max(0, math.ceil((init - limit + (direction == "GE")) / -step))
    return None


def run_counts(comps: dict[str, Computation], entry: str) -> tuple[dict[str, float], list[dict]]:
    """How many times each computation runs per execution of the entry, and the while loops
    (name, trip count) found. A loop whose count cannot be read counts once (`trips: null`);
    each branch of a conditional counts as if taken (an upper bound; the train step has none)."""
    edges: dict[str, list[tuple[str, float]]] = {}
    loops = []
    for comp in comps.values():
        out = edges.setdefault(comp.name, [])
        for ins in comp.instrs.values():
            if ins.opcode.endswith(("-done", "-update")):
                continue  # an async pair's computation runs once, from its start
            if ins.opcode == "while":
                trips = trip_count(comps, comp, ins)
                loops.append({"while": ins.name, "in": comp.name, "trips": trips})
                body = re.search(r"body=%([^\s,]+)", ins.attrs).group(1)
                out.append((body, trips if trips is not None else 1))
                continue
            out.extend((c, 1) for c in _callees(ins))
    # callers before callees: a depth-first post-order from the entry, reversed
    order, seen = [], set()

    def visit(name: str) -> None:
        stack = [(name, iter(edges.get(name, ())))]
        seen.add(name)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(node)
                stack.pop()
            elif nxt[0] not in seen and nxt[0] in comps:
                seen.add(nxt[0])
                stack.append((nxt[0], iter(edges.get(nxt[0], ()))))

    visit(entry)
    counts = {name: 0.0 for name in comps}
    counts[entry] = 1.0
    for name in reversed(order):
        for callee, times in edges.get(name, ()):
            if callee in counts:
                counts[callee] += counts[name] * times
    return counts, loops


def replica_groups(attrs: str, num_devices: int) -> Optional[list[list[int]]]:
    """The device-id groups of a collective, in the three forms XLA prints: explicit lists
    ({{0,1},{2,3}}), iota ([2,2]<=[4] or [2,2]<=[2,2]T(1,0)), and mesh axes
    (mesh['a'=2,'b'=2] {'a'}, sub-axes 'a':(1)2, optional device_ids=(...))."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]", attrs)
    if m:
        axes = [(n, int(s)) for n, s in re.findall(r"'([^']+)'=(\d+)", m.group(1))]
        ids = np.arange(math.prod(s for _, s in axes))
        tail = attrs[m.end():]
        if tail.startswith(", device_ids=("):
            start = len(", device_ids=")
            end = _balanced(tail, start)
            ids = _iota_or_list(tail[start + 1:end - 1].strip(), len(ids))
            tail = tail[end:]
            if ids is None:
                return None
        braces = re.match(r"\s*\{([^}]*)\}", tail)
        if braces is None:
            return None
        # XLA's reshape of each axis into its referenced sub-axes 'a':(pre)size, major first:
        # [pre, size, rest] for one, sorted by pre with padding between for several
        dims, grouped = [], []
        refs = re.findall(r"'([^']+)'(?::\((\d+)\)(\d+))?", braces.group(1))
        for name, size in axes:
            if any(n == name and not p for n, p, _ in refs):
                grouped.append(len(dims))
                dims.append(size)
                continue
            prefix = 1
            for p, s in sorted((int(p), int(s)) for n, p, s in refs if n == name and p):
                if p != prefix:
                    dims.append(p // prefix)
                    prefix = p
                grouped.append(len(dims))
                dims.append(s)
                prefix *= s
            if prefix != size:
                dims.append(size // prefix)
        arr = np.asarray(ids).reshape(dims)
        rest = [i for i in range(len(dims)) if i not in grouped]
        arr = arr.transpose(rest + grouped).reshape(-1, math.prod(dims[i] for i in grouped) if grouped else 1)
        return arr.tolist()
    m = re.search(r"replica_groups=(\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)", attrs)
    if m:
        shape = [int(x) for x in re.match(r"\[([\d,]+)\]", m.group(1)).group(1).split(",")]
        ids = _iota_or_list(m.group(1), math.prod(shape))
        return None if ids is None else np.asarray(ids).reshape(shape[0], -1).tolist()
    m = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", attrs)
    if m:
        groups = [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
        return groups if groups and groups[0] else [list(range(num_devices))]
    return None


def _iota_or_list(text: str, n: int) -> Optional[np.ndarray]:
    """Device ids printed as an iota tile assignment ([4,2]<=[8], [4,2]<=[2,4]T(1,0)) or a
    plain list."""
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if m:
        reshape = [int(x) for x in m.group(2).split(",")]
        arr = np.arange(math.prod(reshape)).reshape(reshape)
        if m.group(3):
            arr = arr.transpose([int(x) for x in m.group(3).split(",")])
        return arr.reshape(-1)
    nums = [int(x) for x in re.findall(r"\d+", text)]
    return np.asarray(nums[-n:]) if len(nums) >= n else None


def group_axes(group: list[int], mesh_shape: dict[str, int]) -> str:
    """The mesh axes a replica group spans: those whose coordinate varies among its devices.
    Device id i is the i-th device of `mesh.devices` (jit's device assignment is the mesh's
    devices in order, and the partitioned HLO names devices by that position)."""
    names, sizes = list(mesh_shape), list(mesh_shape.values())
    coords = np.array(np.unravel_index(np.asarray(group), sizes)).T
    varying = [n for i, n in enumerate(names) if len(set(coords[:, i])) > 1]
    return "+".join(varying) if varying else "none"


def _starts_chain(comp: Computation) -> bool:
    """TPU's async collectives: a start, update and done fusion each hold a copy of the
    collective (same chain_id); the start's computation ends in AsyncCollectiveStart."""
    return comp.root is not None and 'custom_call_target="AsyncCollectiveStart"' in comp.root.attrs


def _is_padded_gather(comps: dict[str, Computation], comp: Computation, ins: Instr) -> bool:
    """An all-reduce whose every operand is a dynamic-update-slice (a shard written into a
    zero buffer of the gathered size, fused or not): an all-gather done as an all-reduce."""
    for name in ins.operands:
        op = comp.instrs.get(name)
        while op is not None and op.opcode in ("bitcast", "copy") and op.operands:
            op = comp.instrs.get(op.operands[0])
        if op is not None and op.opcode == "fusion":
            called = comps.get((re.search(r"calls=%([^\s,]+)", op.attrs) or [None, ""])[1])
            op = called.root if called else None
            while op is not None and op.opcode in ("bitcast", "copy") and op.operands:
                op = called.instrs.get(op.operands[0])
        if op is None or op.opcode != "dynamic-update-slice":
            return False
    return bool(ins.operands)


def _is_scatter(comp: Computation, ins: Instr) -> bool:
    """An all-reduce whose every result is only dynamic-sliced: a reduce-scatter (TPU's
    all-reduce-scatter fusion)."""
    users = [u for u in comp.instrs.values() if ins.name in u.operands]
    if not users:
        return False
    for u in users:
        if u.opcode == "get-tuple-element":
            if not all(v.opcode == "dynamic-slice" for v in comp.instrs.values() if u.name in v.operands):
                return False
        elif u.opcode != "dynamic-slice":
            return False
    return True


def _sent_bytes(comps: dict[str, Computation], comp: Computation, ins: Instr,
                mesh_shape: dict[str, int]) -> Optional[tuple[str, float, str]]:
    """(kind, bytes a device sends, mesh axes) of one collective op, by the module docstring's
    convention; None when its replica groups cannot be read."""
    kind = ins.opcode.removesuffix("-start")
    if kind == "all-reduce" and _is_scatter(comp, ins):
        kind = "reduce-scatter"
    elif kind == "all-reduce" and _is_padded_gather(comps, comp, ins):
        kind = "all-gather-as-all-reduce"
    operand = sum(shape_bytes(comp.instrs[o].shape) for o in ins.operands if o in comp.instrs)
    if kind == "collective-permute":
        return kind, operand, "permute"
    groups = replica_groups(ins.attrs, math.prod(mesh_shape.values()))
    if groups is None:
        return None
    n = len(groups[0])
    moved = {"all-gather": operand * (n - 1), "reduce-scatter": operand * (n - 1) / n,
             "all-reduce": 2 * operand * (n - 1) / n, "all-gather-as-all-reduce": 2 * operand * (n - 1) / n,
             "all-to-all": operand * (n - 1) / n}[kind]
    return kind, moved, group_axes(groups[0], mesh_shape) if n > 1 else "none"


def collective_bytes(text: str, mesh_shape: dict[str, int]) -> dict[str, Any]:
    """Per-device bytes of the step's collectives (convention in the module docstring), by kind
    and by the mesh axes they span, ops in loops counted once per iteration."""
    comps, entry = parse_module(text)
    counts, loops = run_counts(comps, entry)
    by_kind = {k: 0.0 for k in KINDS}
    by_axis: dict[str, float] = {}
    ops = {k: 0.0 for k in KINDS}
    unparsed = 0
    for comp in comps.values():
        times = counts.get(comp.name, 0.0)
        if not times:
            continue
        for ins in comp.instrs.values():
            kind = ins.opcode.removesuffix("-start")
            if kind not in COLLECTIVES:
                continue
            if "chain_id=" in ins.attrs and not _starts_chain(comp):
                continue  # the update and done parts of an async collective: counted at its start
            sent = _sent_bytes(comps, comp, ins, mesh_shape)
            if sent is None:
                unparsed += 1
                continue
            kind, moved, axis = sent
            by_kind[kind] += moved * times
            ops[kind] += times
            by_axis[axis] = by_axis.get(axis, 0.0) + moved * times
    return {"bytes_by_kind": by_kind, "bytes_by_axis": by_axis, "ops_by_kind": ops,
            "total_bytes": sum(by_kind.values()), "loops": loops, "unparsed_ops": unparsed}


def dcn_transfer_bytes(text: str) -> dict[str, Any]:
    """Per-device bytes a multi-slice step sends to other slices over the data-center network.
    The TPU compiler splits a collective whose group spans slices into its within-slice part
    (an ordinary collective, counted by `collective_bytes`) and host transfers to the megascale
    runtime: `send` ops with is_host_transfer=true, handler xla_megascale_runtime, and the
    collective they serve in _xla_megascale_transfer_type. The buffer each send hands over is
    what the device puts on the network for it (in loops, once per iteration)."""
    comps, entry = parse_module(text)
    counts, _ = run_counts(comps, entry)
    by_kind: dict[str, float] = {}
    ops = 0.0
    for comp in comps.values():
        times = counts.get(comp.name, 0.0)
        for ins in comp.instrs.values() if times else ():
            if ins.opcode != "send" or "xla_megascale_runtime" not in ins.attrs:
                continue
            kind = re.search(r'_xla_megascale_transfer_type="(\w+)"', ins.attrs)
            kind = kind.group(1).lower().replace("_", "-") if kind else "other"
            data = comp.instrs.get(ins.operands[0]) if ins.operands else None
            by_kind[kind] = by_kind.get(kind, 0.0) + (shape_bytes(data.shape) if data else 0.0) * times
            ops += times
    return {"bytes_by_kind": by_kind, "total_bytes": sum(by_kind.values()), "ops": ops}


def host_transfer_bytes(text: str) -> dict[str, float]:
    """Per-device bytes moved between HBM and host memory (S(5)) per step: copies to or from
    host memory and the dynamic-(update-)slices that write or read one layer of a host buffer
    (remat=full_offload's layer inputs)."""
    comps, entry = parse_module(text)
    counts, _ = run_counts(comps, entry)
    to_host = from_host = 0.0
    for comp in comps.values():
        times = counts.get(comp.name, 0.0)
        for ins in comp.instrs.values() if times else ():
            op = ins.opcode.removesuffix("-start")
            if ins.opcode.endswith("-done"):
                continue
            operands = [comp.instrs[o] for o in ins.operands if o in comp.instrs]
            on_host = lambda s: any(space == HOST_SPACE for _, _, space in array_shapes(s))  # noqa: E731
            if op == "copy" and operands:
                src, dst = on_host(operands[0].shape), _result_on_host(ins)
                if dst and not src:
                    to_host += shape_bytes(operands[0].shape) * times
                elif src and not dst:
                    from_host += shape_bytes(operands[0].shape) * times
            elif op == "dynamic-update-slice" and len(operands) > 1 and on_host(operands[0].shape) \
                    and not on_host(operands[1].shape):
                to_host += shape_bytes(operands[1].shape) * times
            elif op == "dynamic-slice" and operands and on_host(operands[0].shape) and not _result_on_host(ins):
                from_host += _slice_bytes(ins) * times
    return {"to_host": to_host, "from_host": from_host}


def _result_on_host(ins: Instr) -> bool:
    """Whether an op's result is in host memory; an async start's result tuple is
    ((operands), result, context): its second element."""
    shapes = array_shapes(ins.shape)
    if ins.opcode.endswith("-start") and ins.shape.startswith("(("):
        inner = ins.shape[1:]
        rest = inner[_balanced(inner, 0):]
        shapes = array_shapes(rest.split(", u32[]")[0])
    return bool(shapes) and shapes[0][2] == HOST_SPACE


def _slice_bytes(ins: Instr) -> float:
    m = re.search(r"dynamic_slice_sizes=\{([\d,]*)\}", ins.attrs)
    src = array_shapes(ins.shape)
    dtype = src[0][0] if src else "f32"
    if m:
        return dtype_bits(dtype) / 8 * math.prod(int(x) for x in m.group(1).split(",") if x)
    return shape_bytes(ins.shape)


@dataclass(frozen=True)
class Chip:
    """Per-chip figures (one JAX device on these VMs: v4 and v5p run megacore)."""

    peak_flops: float  # dense bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    ici_bandwidth: float  # bidirectional bytes/s over all of the chip's ICI links
    source: str
    dcn_bandwidth: Optional[float] = None  # bytes/s per chip, each way, to other slices (None: not published)


# docs/design.md, "Step cost estimate", cites each; v4's ICI is derived, not stated per chip
CHIPS = {
    "v4": Chip(275e12, 1200e9, 2 * 1.1e15 / 4096, "cloud.google.com/tpu/docs/v4; ICI = 2 x all-reduce bandwidth per Pod "
               "(1.1 PB/s) / 4096 chips"),
    "v5p": Chip(459e12, 2765e9, 1200e9, "cloud.google.com/tpu/docs/v5p; DCN 50 Gbps per chip", 50e9 / 8),
    "v5e": Chip(197e12, 819e9, 400e9, "cloud.google.com/tpu/docs/v5e; DCN 2 x 100 Gbps NICs per 8-chip host",
                2 * 100e9 / 8 / 8),
    "v6e": Chip(918e12, 1638e9, 800e9, "cloud.google.com/tpu/docs/v6e"),
}


def _callee(comps: dict[str, Computation], ins: Instr) -> Optional[Computation]:
    m = re.search(r"calls=%([^\s,]+)", ins.attrs)
    return comps.get(m.group(1)) if m else None


def _dot_flops(comp: Computation, ins: Instr) -> float:
    """2 x output elements x contracted size of a convolution or dot (TPU writes matmuls as
    0-spatial convolutions, `dim_labels=bf_io->bf`: the lhs's `f` dimension is contracted)."""
    shapes = array_shapes(ins.shape)
    lhs = comp.instrs.get(ins.operands[0]) if ins.operands else None
    if not shapes or lhs is None or not array_shapes(lhs.shape):
        return 0.0
    out, lhs_dims = math.prod(shapes[0][1]), array_shapes(lhs.shape)[0][1]
    if ins.opcode == "dot":
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
        contracted = math.prod(lhs_dims[int(i)] for i in m.group(1).split(",") if i) if m else 1
    else:
        labels = re.search(r"dim_labels=([^_\s,]+)_", ins.attrs)
        if not labels or "f" not in labels.group(1) or len(labels.group(1)) != len(lhs_dims):
            return 0.0
        contracted = lhs_dims[labels.group(1).index("f")]
        groups = re.search(r"feature_group_count=(\d+)", ins.attrs)
        contracted //= int(groups.group(1)) if groups else 1
        window = re.search(r"window=\{size=([\dx]+)", ins.attrs)
        contracted *= math.prod(int(w) for w in window.group(1).split("x")) if window else 1
    return 2.0 * out * contracted


def _instr_flops(comps: dict[str, Computation], comp: Computation, ins: Instr, depth: int = 0) -> float:
    """Matmul FLOPs of an instruction: its own, or those of the computation a fusion calls."""
    if ins.opcode in ("convolution", "dot"):
        return _dot_flops(comp, ins)
    callee = _callee(comps, ins) if ins.opcode == "fusion" and depth < 4 else None
    return sum(_instr_flops(comps, callee, i, depth + 1) for i in callee.instrs.values()) if callee else 0.0


def _chain_key(comps: dict[str, Computation], callee: Computation) -> Optional[str]:
    for i in callee.instrs.values():
        m = re.search(r'chain_id="?(\d+)', i.attrs)
        if m:
            return m.group(1)
    return None


def collective_overlap(text: str, mesh_shape: dict[str, int], chip: Chip) -> dict[str, Any]:
    """How much of the step's collective time its compiled schedule can hide behind matmuls.

    A synchronous collective hides nothing. An async one (TPU: a start fusion, then a done
    fusion later in the schedule, one chain_id) runs beside whatever the schedule puts between
    the two: it is counted hidden up to the matmul time of those instructions (their FLOPs at
    the chip's peak), the rest exposed. Splash attention's kernels are custom calls whose
    FLOPs are not read, so the hidden part is a lower bound there. Loops are weighted by
    their trip counts, as in `collective_bytes`."""
    comps, entry = parse_module(text)
    counts, _ = run_counts(comps, entry)
    link = chip.ici_bandwidth / 2
    total_s = async_s = hidden_s = 0.0
    for comp in comps.values():
        times = counts.get(comp.name, 0.0)
        if not times:
            continue
        open_chains: dict[Optional[str], list[float]] = {}  # chain -> [collective s, matmul s since start]
        for ins in comp.instrs.values():
            callee = _callee(comps, ins) if ins.opcode == "fusion" else None
            root = callee.root.attrs if callee is not None and callee.root is not None else ""
            if 'custom_call_target="AsyncCollectiveStart"' in root:
                moved = 0.0
                for c in callee.instrs.values():
                    sent = _sent_bytes(comps, callee, c, mesh_shape) if c.opcode.removesuffix("-start") in COLLECTIVES \
                        else None
                    moved += sent[1] if sent else 0.0
                open_chains[_chain_key(comps, callee)] = [moved / link, 0.0]
                continue
            if 'custom_call_target="AsyncCollectiveDone"' in root:
                key = _chain_key(comps, callee)
                chain = open_chains.pop(key if key in open_chains else next(iter(open_chains), None), None)
                if chain:
                    async_s += chain[0] * times
                    hidden_s += min(chain[0], chain[1]) * times
                continue
            if callee is not None and 'custom_call_target="AsyncCollective' in root:
                continue  # an update step of a chain
            if ins.opcode.removesuffix("-start") in COLLECTIVES and "chain_id=" not in ins.attrs:
                sent = _sent_bytes(comps, comp, ins, mesh_shape)
                total_s += (sent[1] / link if sent else 0.0) * times
                continue
            flops = _instr_flops(comps, comp, ins)
            for chain in open_chains.values():
                chain[1] += flops / chip.peak_flops
    total_s += async_s
    return {"ici_s": total_s, "async_ici_s": async_s, "hidden_ici_s": hidden_s, "exposed_ici_s": total_s - hidden_s,
            "hidden_fraction": hidden_s / total_s if total_s else 0.0}


def roofline(flops: float, hbm_bytes: float, ici_bytes: float, chip: Chip, tokens_per_step: float,
             train_tokens: float = 90e9, dcn_bytes: float = 0.0) -> dict[str, Any]:
    """Lower-bound step time per device: each resource alone at its peak, no overlap modelled
    (the bound is the largest), the MFU that bound allows, and days to train `train_tokens`.
    ICI time counts a device's sent bytes against half the chip's bidirectional bandwidth (its
    links busy both ways: the bytes sent and as many received). `dcn_bytes`, what a device
    sends to other slices, at the chip's DCN bandwidth; without a published figure for the chip
    no DCN time is estimated."""
    times = {"compute_s": flops / chip.peak_flops, "hbm_s": hbm_bytes / chip.hbm_bandwidth,
             "ici_s": ici_bytes / (chip.ici_bandwidth / 2)}
    if dcn_bytes and chip.dcn_bandwidth:
        times["dcn_s"] = dcn_bytes / chip.dcn_bandwidth
    bound = max(times.values())
    steps = train_tokens / tokens_per_step
    # the other end: no communication hidden behind compute (HBM traffic is the kernels' own)
    serial = times["compute_s"] + times["ici_s"] + times.get("dcn_s", 0.0)
    return {**times, "step_s_bound": bound, "bound_by": max(times, key=times.get).removesuffix("_s"),
            "mfu_bound": times["compute_s"] / bound if bound else None, "train_tokens": train_tokens,
            "days_for_train_tokens": steps * bound / 86400, "step_s_no_overlap": serial,
            "mfu_no_overlap": times["compute_s"] / serial if serial else None}
