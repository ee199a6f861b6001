"""What a conversion refuses (`ConvertError`), and the parameter dtypes it stores: their names
and the cast that refuses a value float16 cannot hold."""

from __future__ import annotations

import numpy as np

from easylemur.errors import InputError


class ConvertError(InputError):
    """A conversion that cannot be done faithfully; the message names the bad value."""


def _np_dtype(name: str) -> np.dtype:
    import ml_dtypes

    table = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
    if name not in table:
        raise ConvertError(f"dtype {name!r} is not one of {', '.join(table)}")
    return table[name]


def _dtype_name(dt: np.dtype) -> str:
    return {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[np.dtype(dt).name]


def cast(name: str, x: np.ndarray, dtype: np.dtype, flag: str = "--dtype") -> np.ndarray:
    """x in dtype; refuses a float16 cast that would turn a value into inf (the message
    suggests `flag`, the option that chose float16)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype == np.float16 and x.size:
        lo, hi = float(x.min()), float(x.max())  # min/max make no copy, unlike abs()
        limit = float(np.finfo(np.float16).max)
        if hi > limit or lo < -limit:
            worst = hi if abs(hi) >= abs(lo) else lo
            raise ConvertError(
                f"tensor {name} holds {worst:.6g}, beyond float16's range (±{limit:g}); "
                f"use {flag} bfloat16 or {flag} float32"
            )
    return x.astype(dtype)
