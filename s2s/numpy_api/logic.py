"""NumPy's logic over whole arrays (isclose, allclose, array_equal) and np.select.

Composed of the elementwise surface in `math.py`, term for term as NumPy writes them, so
dtypes, promotion and NaN/inf handling are NumPy's. `allclose` and `array_equal` return a
staged boolean scalar (NumPy returns a Python bool), so `if np.allclose(x, y):` in a
staged function becomes a cond rather than a concretization error.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError
from s2s.numpy_api._base import (asarray, aval, cast_all, convert, implements,
                                 is_python_scalar, result_dtype)
from s2s.numpy_api.math import (absolute, add, bitwise_and, bitwise_or, equal, isfinite, isnan,
                                less_equal, multiply, subtract, where)
from s2s.primitives import reductions as red



@implements(np.select)
def select(condlist, choicelist, default=0):
    """np.select: the first choice whose condition holds, else `default`; a chain of
    `where`s from the last condition to the first. Choices promote as NumPy's arrays,
    a Python-scalar `default` joins them weakly (`np.select([c], [x32], 0)` is float32)."""
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ShapeError(f"np.select: list of cases must be same length as list of conditions "
                         f"(got {len(condlist)} conditions and {len(choicelist)} choices)",
                         "pass one choice per condition, and the fallback as default=")
    if not condlist:
        raise ShapeError("np.select with an empty condition list is not possible",
                         "pass at least one condition, or use the default value directly")
    conds = [asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        if not dtypes.is_bool(aval(c).dtype):
            raise ShapeError(f"np.select: invalid entry {i} in condlist: should be boolean "
                             f"ndarray, got {aval(c).str_short()}",
                             "compare explicitly to make a mask, e.g. x != 0 or x > 0")
    choices = [asarray(c) for c in choicelist]
    choices = [np.asarray(c) if is_python_scalar(c) else c for c in choices]
    default = asarray(default)
    to, weak = result_dtype(*choices, default)
    *choices, result = cast_all(choices + [default], to, weak)
    for cond, choice in zip(reversed(conds), reversed(choices)):
        result = where(cond, choice, result)
    return result


def _isclose_core(a, b, rtol, atol, equal_nan):
    """NumPy's isclose formula, term for term: |a - b| <= atol + rtol * |b| where b is
    finite, or a == b (equal infinities); NaNs equal only with equal_nan. `b` computes
    in a floating dtype (a Python int `b` becomes a float)."""
    a = asarray(a)
    b = float(b) if isinstance(b, int) and not isinstance(b, bool) else asarray(b)
    if not is_python_scalar(b) and not dtypes.is_inexact(aval(b).dtype):
        b = convert(b, dtypes.default_float())
    close = less_equal(absolute(subtract.operator(a, b)),
                       add.operator(atol, multiply.operator(rtol, absolute(b))))
    result = bitwise_or(bitwise_and(close, isfinite(b)), equal(a, b))
    if equal_nan:
        result = bitwise_or(result, bitwise_and(isnan(a), isnan(b)))
    return result


@implements(np.isclose)
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """np.isclose, elementwise: a staged boolean array."""
    return _isclose_core(a, b, rtol, atol, equal_nan)


def _all(mask):
    """Every element of a boolean operand true: a staged boolean scalar."""
    ndim = len(aval(mask).shape)
    if not ndim:
        return mask
    return red.reduce_and.bind(mask, axes=tuple(range(ndim)))


@implements(np.allclose)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """np.allclose: a staged boolean scalar, so `if np.allclose(x, y):` stages a cond."""
    return _all(_isclose_core(a, b, rtol, atol, equal_nan))


@implements(np.array_equal)
def array_equal(a1, a2, equal_nan=False):
    """np.array_equal: False at staging time when the (static) shapes differ, else a
    staged boolean scalar: every element equal (NaNs equal each other with equal_nan)."""
    a1, a2 = asarray(a1), asarray(a2)
    if aval(a1).shape != aval(a2).shape:
        return False
    same = equal(a1, a2)
    if equal_nan:
        same = bitwise_or(same, bitwise_and(isnan(a1), isnan(a2)))
    return _all(same)
