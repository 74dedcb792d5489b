"""Dtypes and type promotion.

s2s follows NumPy 2's promotion rules (NEP 50) because users write NumPy and expect
NumPy's result types: NumPy arrays and NumPy scalars are strongly typed, Python scalars
are *weak* and take the dtype of the array they meet (`x32 * 2.0` stays float32).
A staged value remembers whether it is weak (`ShapedArray.weak_type`) so promotion
gives the same answer NumPy would have given on the concrete values.

float64 stays float64 by default. With `s2s.config.update('enable_x64', False)`
dtypes are canonicalized the way JAX does it (64-bit → 32-bit).
"""
from __future__ import annotations

import numpy as np

from s2s import config

# float0 is the tangent type of integer and boolean values: a dtype that carries no data.
# NumPy has no zero-width dtype, so (like JAX) it is a void dtype of width zero.
float0 = np.dtype([("float0", np.void, 0)])

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
float16, float32, float64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

_SHORT_NAMES = {
    "bool": bool_, "i8": int8, "i16": int16, "i32": int32, "i64": int64,
    "u8": uint8, "u16": uint16, "u32": uint32, "u64": uint64,
    "f16": float16, "f32": float32, "f64": float64, "c64": complex64, "c128": complex128,
}
_SHORT_OF = {dt: name for name, dt in _SHORT_NAMES.items()}

_X64_TO_X32 = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}


_SUPPORTED = frozenset([*_SHORT_NAMES.values(), float0])


def is_supported(dtype) -> bool:
    """Whether s2s stages values of `dtype` (in either byte order): the dtypes XLA and the
    emitted NumPy agree on, and float0. Not object, bfloat16, longdouble, datetime, string or structured."""
    return isinstance(dtype, np.dtype) and (dtype in _SUPPORTED or dtype.newbyteorder("=") in _SUPPORTED)


def short_name(dtype) -> str:
    """The jaxpr printer's name for a dtype: f32, i64, bool, float0."""
    dtype = np.dtype(dtype)
    if dtype == float0:
        return "float0"
    return _SHORT_OF.get(dtype, dtype.name)


def from_short_name(name: str) -> np.dtype:
    """Parses `f32`, `float32`, `i64`, `bool` ... into a NumPy dtype."""
    if name in _SHORT_NAMES:
        return _SHORT_NAMES[name]
    return np.dtype(name)


def canonicalize_dtype(dtype) -> np.dtype:
    """The dtype a value of `dtype` has inside s2s under the current config (in the
    machine's byte order: a byte-swapped input is converted where it enters)."""
    try:   # staging asks for the same few dtypes over and over (remembered per x64 setting)
        return _canonical[dtype, config.values.enable_x64]
    except (KeyError, TypeError):   # (TypeError: an unhashable spelling of a dtype)
        pass
    canonical = _canonicalized(dtype)
    try:
        _canonical[dtype, config.values.enable_x64] = canonical
    except TypeError:
        pass
    return canonical


_canonical: dict = {}


def _canonicalized(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        dtype = dtype.newbyteorder("=")
    if dtype == float0:
        return dtype
    if not config.values.enable_x64:
        return _X64_TO_X32.get(dtype, dtype)
    return dtype


def is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


_INEXACT: dict = {}   # dtype -> is_inexact(dtype) (asked for every tangent a pass makes)


def is_inexact(dtype) -> bool:
    if not isinstance(dtype, np.dtype):   # (a type, a name: asked rarely)
        return bool(np.issubdtype(np.dtype(dtype), np.inexact))
    answer = _INEXACT.get(dtype)
    if answer is None:
        answer = _INEXACT[dtype] = bool(np.issubdtype(dtype, np.inexact))
    return answer


def is_complex(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.complexfloating)


def is_integer(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.integer)


def is_bool(dtype) -> bool:
    return np.dtype(dtype) == bool_


def is_differentiable(dtype) -> bool:
    """Whether values of this dtype get real tangents (otherwise float0)."""
    return is_inexact(dtype)


# A Python scalar of the right kind stands in for a weak-typed operand, so that
# np.result_type applies NEP 50's weak-scalar rules for us.
_WEAK_STANDIN = {"b": True, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def result_type(*operands) -> tuple[np.dtype, bool]:
    """Promotes `(dtype, weak_type)` pairs the way NumPy promotes the values they describe.

    Returns the result dtype and whether the result is weak (only when every operand is).
    """
    if not operands:
        raise ValueError("result_type needs at least one operand")
    key = (operands, config.values.enable_x64)
    try:   # (remembered: staging promotes the same few pairs over and over)
        return _promoted[key]
    except (KeyError, TypeError):
        pass
    result = _promote(operands)
    try:
        _promoted[key] = result
    except TypeError:
        pass
    return result


_promoted: dict = {}


def _promote(operands) -> tuple[np.dtype, bool]:
    standins = []
    for dtype, weak in operands:
        dtype = np.dtype(dtype)
        standins.append(_WEAK_STANDIN[dtype.kind] if weak else dtype)
    all_weak = all(weak for _, weak in operands)
    if all_weak:
        # Python scalars among themselves: bool < int < float < complex, default widths.
        dtype = np.result_type(*[np.dtype(type(s)) if not isinstance(s, bool) else bool_
                                 for s in standins])
    else:
        dtype = np.result_type(*standins)
    return canonicalize_dtype(dtype), all_weak


def dtype_of_python_scalar(value) -> np.dtype:
    """The dtype NumPy gives a Python scalar on its own (bool, int64, float64, complex128)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return canonicalize_dtype(int64)
    if isinstance(value, float):
        return canonicalize_dtype(float64)
    if isinstance(value, complex):
        return canonicalize_dtype(complex128)
    raise TypeError(f"not a Python scalar: {value!r}")


def default_float() -> np.dtype:
    return canonicalize_dtype(float64)


def default_int() -> np.dtype:
    return canonicalize_dtype(int64)
