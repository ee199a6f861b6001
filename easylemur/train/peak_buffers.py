"""The buffers live at the TPU compiler's peak, with their tile padding (`python -m
easylemur.aot --memory-detail`), read from the reports the compiler writes with xla_dump_to:
the live-range report names the buffers live at the peak instruction, the buffer assignment
gives each its memory space, allocated size and shape with layout."""

from __future__ import annotations

import glob
import math
import os
import re
from typing import Optional

from easylemur.train.hlo_cost import HOST_SPACE, array_shapes, dtype_bits

# A buffer-assignment value's `@n` is its memory space, `S(n)` in its layout: 0 is the device's
# HBM (the space whose "Total bytes" is the compiler's peak), hlo_cost.HOST_SPACE holds host-
# offloaded buffers, the others are on-chip memories (VMEM, SMEM, CMEM) and semaphores.
_VALUE_LINE = re.compile(r"^ value: <\d+ (\S+?)(?: \(phi\))? @(\d+)> \(size=(\d+),offset=\d+\): (.+)$", re.M)


def _tuple_arity(shape: str) -> int:
    """Top-level elements of a tuple shape string '(a, b{...}, (c, d))'."""
    text = re.sub(r"/\*.*?\*/", "", shape.strip())[1:-1]
    if not text.strip():
        return 0
    depth, count = 0, 1
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        count += ch == "," and depth == 0
    return count


def logical_bytes(shape: str) -> int:
    """Bytes of an XLA shape string's data without tile padding: the product of its dimensions
    times the element size ('f32[80,64,128,32]{3,2,1,0:T(8,128)}' -> 83886080); a tuple holds
    one 8-byte pointer per element. The same figure the live-range report states per buffer."""
    shape = shape.strip()
    if shape.startswith("("):
        return 8 * _tuple_arity(shape)
    arrays = array_shapes(shape)
    if not arrays:
        raise ValueError(f"not an XLA shape: {shape!r}")
    dtype, dims, _ = arrays[0]
    return -(-math.prod(dims) * dtype_bits(dtype) // 8)


def parse_buffer_assignment(text: str) -> dict[str, tuple[int, int, str]]:
    """HLO value name ('param.50{}', 'conditional{23}', as the live-range report names them)
    -> (memory space, allocated bytes, shape with layout), from the compiler's
    `*after_optimizations-buffer-assignment.txt` ('value: <3813 param.50 @0> (size=N,...): shape',
    '@n' being the value's memory space, `S(n)` in its layout)."""
    values = {}
    for m in _VALUE_LINE.finditer(text):
        name = m.group(1) if "{" in m.group(1) else m.group(1) + "{}"
        values[name] = (int(m.group(2)), int(m.group(3)), m.group(4).strip())
    return values


def parse_peak_live_range(text: str) -> tuple[Optional[int], list[tuple[str, int]]]:
    """(peak instruction, [(value name, bytes)]) from the compiler's
    `*after_optimizations-live-range.txt` section '  Live ranges at 681 (peak):'. Its bytes are
    unpadded (ShapeUtil's byte size of the shape, a tuple 8 per element), and the peak is where
    the buffers of every memory space (host offload included) add up to the most."""
    m = re.search(r"^\s*Live ranges at (\d+) \(peak\):\n((?:[ \t]+\S+?\{[\d,]*\}: \d+ bytes.*\n?)*)", text, re.M)
    if not m:
        return None, []
    live = re.findall(r"^\s+(\S+?\{[\d,]*\}): (\d+) bytes", m.group(2), re.M)
    return int(m.group(1)), [(name, int(size)) for name, size in live]


def _dump_files(dump_dir: str, module: str) -> Optional[str]:
    """The path prefix of the module's after-optimizations dump files that hold both reports
    (where several modules match, the one with the largest "Total bytes", as compiler_peak_bytes)."""
    best, best_total = None, -1
    for path in sorted(glob.glob(f"{dump_dir}/*{module}*after_optimizations-live-range.txt")):
        prefix = path[: -len("-live-range.txt")]
        if not os.path.exists(prefix + "-buffer-assignment.txt"):
            continue
        report = prefix + "-memory-usage-report.txt"
        total = compiler_peak_bytes_of(open(report).read()) if os.path.exists(report) else None
        if (total or 0) > best_total:
            best, best_total = prefix, total or 0
    return best


def compiler_peak_bytes_of(report: str) -> Optional[int]:
    """"Total bytes" of a memory-usage report's first memory space (0, HBM)."""
    m = re.search(r"Total bytes: (\d+)", report)
    return int(m.group(1)) if m else None


def _peak_entries(prefix: str) -> tuple[Optional[int], list[dict]]:
    instruction, live = parse_peak_live_range(open(prefix + "-live-range.txt").read())
    values = parse_buffer_assignment(open(prefix + "-buffer-assignment.txt").read())
    entries = []
    for name, live_range_bytes in live:
        if name not in values:
            raise ValueError(f"{name} is live at the peak but not in the buffer assignment ({prefix})")
        space, allocated, shape = values[name]
        logical = logical_bytes(shape)
        dtype = "tuple" if shape.startswith("(") else shape.split("[", 1)[0]
        entries.append({"name": name, "shape": shape, "dtype": dtype, "memory_space": space,
                        "allocated_bytes": allocated, "logical_bytes": logical, "padding_bytes": allocated - logical,
                        "live_range_bytes": live_range_bytes})
    entries.sort(key=lambda e: (-e["allocated_bytes"], e["name"]))
    return instruction, entries


def peak_buffers(dump_dir: str, module: str = "jit_step", memory_space: int = 0) -> list[dict]:
    """The buffers live at the TPU compiler's peak in device memory (HBM, memory space 0; pass
    `memory_space` for another, e.g. hlo_cost.HOST_SPACE), largest allocation first, read from the
    `xla_dump_to` dump of `module`: the live-range report names them, the buffer assignment
    gives each its memory space, allocated size and shape with layout.

    Each: name (value name with its ShapeIndex, 'fusion.480{0}'), shape (with layout:
    minor-to-major order, tiling, memory space), dtype, memory_space, allocated_bytes,
    logical_bytes (product of the dimensions x element size), padding_bytes = allocated −
    logical, and live_range_bytes (the live-range report's own, unpadded, figure).

    Why padding: the TPU stores an array in tiles, (8, 128) on the two minor dimensions of its
    layout for 32-bit types (bf16 packs two rows: (16, 128)), so a minor dimension of 32 takes
    128 and the array 4x its bytes; which dimension is minor is the layout's choice, so the same
    logical shape can cost 1x in one buffer and 4x in its copy ('f32[80,64,128,32]{2,3,1,0}':
    80 MiB; '{3,2,1,0}': 320 MiB). Raises FileNotFoundError when the dump lacks the reports."""
    prefix = _dump_files(dump_dir, module)
    if prefix is None:
        raise FileNotFoundError(f"no {module} live-range and buffer-assignment reports in {dump_dir}")
    return [e for e in _peak_entries(prefix)[1] if e["memory_space"] == memory_space]


def memory_detail(dump_dir: str, module: str = "jit_step", top: int = 25) -> Optional[dict]:
    """--memory-detail: the `top` largest buffers live at the compiler's peak in HBM
    (`peak_buffers`) and the totals of all of them: live_bytes (allocated), logical_bytes,
    padding_bytes, their count, the compiler's peak ("Total bytes") beside them, and what the
    other memory spaces hold at that instruction (host offload, on-chip memories) by the
    report's names. None when the dump lacks the reports."""
    prefix = _dump_files(dump_dir, module)
    if prefix is None:
        return None
    instruction, entries = _peak_entries(prefix)
    report = open(prefix + "-memory-usage-report.txt").read() if os.path.exists(prefix + "-memory-usage-report.txt") else ""
    names = {int(c): n for n, c in re.findall(r"Memory Space: (\S+) \(color=(\d+)\)", report)}
    hbm = [e for e in entries if e["memory_space"] == 0]
    others = {}
    for e in entries:
        if e["memory_space"] != 0:
            o = others.setdefault(e["memory_space"], {"memory_space": e["memory_space"],
                                                      "report_name": names.get(e["memory_space"]),
                                                      "host": e["memory_space"] == HOST_SPACE,
                                                      "live_bytes": 0, "buffers": 0})
            o["live_bytes"] += e["allocated_bytes"]
            o["buffers"] += 1
    live = sum(e["allocated_bytes"] for e in hbm)
    peak = compiler_peak_bytes_of(report)
    return {"peak_instruction": instruction, "memory_space": 0, "buffers": len(hbm), "live_bytes": live,
            "logical_bytes": sum(e["logical_bytes"] for e in hbm), "padding_bytes": sum(e["padding_bytes"] for e in hbm),
            "compiler_peak_bytes": peak, "live_fraction_of_peak": live / peak if peak else None,
            "other_memory_spaces": sorted(others.values(), key=lambda o: -o["live_bytes"]),
            "top": [{k: v for k, v in e.items() if k != "live_range_bytes"} for e in hbm[:top]]}


def memory_detail_table(detail: Optional[dict], rows: int = 15) -> str:
    """A short human summary of result['peak_buffers'] (stderr)."""
    if detail is None:
        return "buffers at the peak: the compiler wrote no live-range and buffer-assignment reports"
    G = 2**30
    frac = f" ({detail['live_fraction_of_peak']:.1%} of the compiler's peak {detail['compiler_peak_bytes'] / G:.2f} GiB)" \
        if detail["live_fraction_of_peak"] is not None else ""
    others = "; ".join(f"S({o['memory_space']}) {o['report_name']}{' (host offload)' if o['host'] else ''} "
                       f"{o['live_bytes'] / G:.2f} GiB" for o in detail["other_memory_spaces"] if o["live_bytes"] >= 2**20)
    lines = [f"buffers live at the compiler's peak (instruction {detail['peak_instruction']}), HBM: {detail['buffers']} "
             f"buffers, {detail['live_bytes'] / G:.2f} GiB allocated{frac}, of which {detail['padding_bytes'] / 2**20:.1f} MiB "
             f"tile padding" + (f"; also live: {others}" if others else ""),
             f"  {'MiB alloc':>10} {'logical':>9} {'padding':>9}  name  shape"]
    for e in detail["top"][:rows]:
        shape = e["shape"] if len(e["shape"]) <= 70 else e["shape"][:67] + "..."
        lines.append(f"  {e['allocated_bytes'] / 2**20:10.1f} {e['logical_bytes'] / 2**20:9.1f} "
                     f"{e['padding_bytes'] / 2**20:9.1f}  {e['name']}  {shape}")
    return "\n".join(lines)
