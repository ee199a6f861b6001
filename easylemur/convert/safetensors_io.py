"""Tensor files, one tensor at a time: safetensors read and written, torch `.bin` read.

Nothing here knows Llama or HF directory layout (that is `convert/hf.py`): these are the files.
Readers: `read_safetensors_header` and `file_tensors` read headers only and hand out
TensorSources, which read one tensor on demand.
Writers take `LazyArray`s (shape + dtype + loader) as well as arrays, so
`write_sharded_safetensors` and convert's orbax save hold one tensor at a time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from pathlib import Path
from typing import Any, Callable, Iterator

import ml_dtypes
import numpy as np

from easylemur.errors import InputError


class TensorFileError(InputError):
    """A safetensors or torch .bin file easylemur cannot read faithfully; the message names the
    file and the tensor."""


_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}


# ----------------------------------------------------------------------------- reading


def read_safetensors_header(path: str | Path) -> tuple[dict, int]:
    """(header dict, byte offset of the data) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise TensorFileError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 2**20:
            raise TensorFileError(f"{path}: not a safetensors file (header of {n} bytes)")
        try:
            header = json.loads(f.read(n))
        except json.JSONDecodeError as e:
            raise TensorFileError(f"{path}: corrupt safetensors header: {e}") from None
    return header, 8 + n


@dataclasses.dataclass
class TensorSource:
    """One tensor of a file: shape and dtype known, data read only by `read()`.

    safetensors data is read with a positioned read into a fresh buffer rather than through a
    long-lived memory map: a map keeps every page it touched resident (and counted in RSS)
    until it is closed, which over a whole 140 GB model is the whole model."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    file: Path
    offset: int = 0  # absolute byte offset in a safetensors file
    tensor: Any = None  # the (memory-mapped) torch tensor of a .bin file

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self) -> np.ndarray:
        if self.tensor is not None:
            return _torch_to_numpy(self.tensor).copy()
        out = np.empty(self.shape, self.dtype)
        buf = memoryview(out.reshape(-1).view(np.uint8))
        with open(self.file, "rb", buffering=0) as f:
            f.seek(self.offset)
            done = 0
            while done < len(buf):
                n = f.readinto(buf[done:])
                if not n:
                    raise TensorFileError(f"{self.file}: truncated; tensor {self.name} ends past the end of the file")
                done += n
        return out


def file_tensors(file: str | Path) -> list[TensorSource]:
    """A TensorSource for every tensor of one .safetensors or torch .bin file, reading the
    header only (a .bin file is memory-mapped, not read); offsets that do not fit the file are
    errors naming the tensor."""
    file = Path(file)
    if file.suffix != ".safetensors":
        # an empty view gives the dtype without reading any data
        return [TensorSource(name, tuple(t.shape), np.dtype(_torch_to_numpy(t.reshape(-1)[:0]).dtype), file, tensor=t)
                for name, t in _torch_state(file).items()]
    header, start = read_safetensors_header(file)
    size = file.stat().st_size
    sources = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info.get("dtype") not in _ST_DTYPES:
            raise TensorFileError(f"{file}: tensor {name} has unsupported dtype {info.get('dtype')}")
        lo, hi = info["data_offsets"]
        src = TensorSource(name, tuple(info["shape"]), np.dtype(_ST_DTYPES[info["dtype"]]), file, start + lo)
        if hi - lo != src.nbytes or start + hi > size:
            raise TensorFileError(f"{file}: tensor {name} has inconsistent offsets {lo}..{hi} (file is {size} bytes)")
        sources.append(src)
    return sources


def _torch_state(file: Path) -> dict:
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # weights_only refuses pickled code: say so, do not fall back
        raise TensorFileError(f"{file}: cannot load safely with torch.load(weights_only=True): {e}") from None
    if not isinstance(state, dict):
        raise TensorFileError(f"{file}: expected a state dict of tensors, found {type(state).__name__}")
    return state


def _torch_to_numpy(t) -> np.ndarray:
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# ----------------------------------------------------------------------------- writing


class LazyArray:
    """Shape and dtype now, data when called: what the streaming writers (safetensors shards,
    the orbax checkpoint of `convert from-hf`) hold instead of arrays, so that at most one
    tensor of the model is in memory at a time."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, load: Callable[[], np.ndarray]):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._load = load

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __call__(self) -> np.ndarray:
        arr = self._load()
        if tuple(arr.shape) != self.shape or np.dtype(arr.dtype) != self.dtype:
            raise ValueError(f"lazy tensor promised {self.shape} {self.dtype}, produced {arr.shape} {arr.dtype}")
        return arr

    def __repr__(self) -> str:
        return f"LazyArray({self.shape}, {self.dtype})"


def _shape_dtype(arr) -> tuple[tuple, Any]:
    if callable(arr) and hasattr(arr, "shape"):
        return tuple(arr.shape), arr.dtype
    if callable(arr):
        raise TypeError("a lazy tensor must carry .shape and .dtype")
    return tuple(arr.shape), arr.dtype


def _nbytes(arr) -> int:
    shape, dtype = _shape_dtype(arr)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def write_safetensors(path: str | Path, tensors: Iterator[tuple[str, np.ndarray]] | list, metadata: dict | None = None) -> None:
    """Writes tensors one at a time (the list of names and shapes must be known up front, so
    pass a list of (name, array-or-LazyArray)); memory use is one tensor at a time. The file
    appears under its name only once complete."""
    items = list(tensors)
    header: dict[str, Any] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, arr in items:
        shape, dtype = _shape_dtype(arr)
        nbytes = _nbytes(arr)
        header[name] = {"dtype": _ST_NAMES[np.dtype(dtype)], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = Path(str(path) + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, arr in items:
                a = np.ascontiguousarray(arr() if callable(arr) else arr)
                if tuple(a.shape) != tuple(header[name]["shape"]) or _ST_NAMES[np.dtype(a.dtype)] != header[name]["dtype"]:
                    raise ValueError(f"{name}: promised {header[name]['shape']} {header[name]['dtype']}, got {a.shape} {a.dtype}")
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
                del a
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def parse_size(text: str | int) -> int:
    """'5GB' -> 5e9 bytes, as transformers' max_shard_size reads it (KB/MB/GB powers of 10,
    KiB/MiB/GiB powers of 2, a bare number is bytes)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r} is not a number of bytes like 5GB, 500MB, 2GiB or 1000000")
    unit = (m.group(2) or "B").upper()
    mult = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
            "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    n = int(float(m.group(1)) * mult)
    if n <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return n


def plan_shards(items: list[tuple[str, Any]], max_shard_bytes: int) -> list[list[tuple[str, Any]]]:
    """Consecutive groups of at most max_shard_bytes (a bigger tensor gets a shard alone)."""
    shards: list[list] = [[]]
    size = 0
    for name, arr in items:
        n = _nbytes(arr)
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, arr))
        size += n
    return shards


def write_sharded_safetensors(out_dir: str | Path, items: list[tuple[str, Any]], max_shard_bytes: int) -> dict:
    """model-0000k-of-0000n.safetensors + model.safetensors.index.json, one tensor in memory at
    a time; returns the index. Shards are renamed into place only once complete; on an error
    the shards already written are removed, so a failed export leaves no half model."""
    out_dir = Path(out_dir)
    shards = plan_shards(items, max_shard_bytes)
    n = len(shards)
    weight_map: dict[str, str] = {}
    total = 0
    written: list[Path] = []
    try:
        for k, shard in enumerate(shards, 1):
            fname = f"model-{k:05d}-of-{n:05d}.safetensors"
            write_safetensors(out_dir / fname, shard)
            written.append(out_dir / fname)
            for name, arr in shard:
                weight_map[name] = fname
                total += _nbytes(arr)
    except BaseException:
        for f in written:
            f.unlink(missing_ok=True)
        raise
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index
