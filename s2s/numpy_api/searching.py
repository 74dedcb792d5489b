"""NumPy's searching and binning on staged values: searchsorted, digitize, interp, histogram.

Without data-dependent loops: a search compares each value with every element of the
sorted array and counts (len(a) * v.size comparisons, fine for the lookup tables and bin
edges models use), in NumPy's sort order where NaN comes last. interp is jax's formula,
so its derivatives in x, xp and fp are jax's (with a period too); histogram counts have no
derivative.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.numpy_api import math as np_math
from s2s.numpy_api import shaping as np_shaping
from s2s.numpy_api._base import cast_all, dtype as dtype_of, implements, shape as shape_of
from s2s.numpy_api.creation import linspace
from s2s.numpy_api.indexing import take
from s2s.numpy_api.reductions import argsort, converted, max, min, strong_operand, sum
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.primitives import structural as st
from s2s.staging import Tracer


def _sorts_before(x, y):
    """x < y in NumPy's sort order, where NaN comes after every number."""
    less = np_math.less(x, y)
    if not dtypes.is_inexact(np.result_type(dtype_of(x), dtype_of(y))):
        return less
    nan_last = np_math.logical_and(np_math.isnan(y), np_math.logical_not(np_math.isnan(x)))
    return np_math.logical_or(less, nan_last)


def _sorted_1d(a, fn: str, what: str = "the sorted array"):
    x = strong_operand(a)
    if len(shape_of(x)) != 1:
        raise ShapeError(f"np.{fn}: {what} must be 1-d, got shape {shape_of(x)}",
                         "flatten it (np.ravel), or map over rows with s2s.vmap")
    return x


@implements(np.searchsorted)
def searchsorted(a, v, side="left", sorter=None):
    """np.searchsorted: how many elements of the sorted 1-d `a` come before each `v`
    (side='left': a[j] < v, 'right': a[j] <= v), counted by comparing every pair, so it
    takes len(a) * v.size comparisons and no data-dependent loop."""
    x = _sorted_1d(a, "searchsorted")
    if side not in ("left", "right"):
        raise ShapeError(f"np.searchsorted: side must be 'left' or 'right', got {side!r}")
    if sorter is not None:
        x = take(x, sorter)
    v = strong_operand(v)
    row = np_shaping.expand_dims(v, -1)         # each value against every element of a
    if side == "left":
        before = _sorts_before(x, row)
    else:
        before = np_math.logical_not(_sorts_before(row, x))
    return converted(sum(before, axis=-1), dtypes.canonicalize_dtype(np.intp))


def _static_monotonicity(bins) -> int | None:
    """1 (non-decreasing), -1 (non-increasing), 0 (neither) for static bins; None if staged."""
    if not isinstance(bins, (np.ndarray, np.generic)):
        return None
    steps = np.diff(bins)
    if np.all(steps >= 0):
        return 1
    return -1 if np.all(steps <= 0) else 0


@implements(np.digitize)
def digitize(x, bins, right=False):
    """np.digitize: the bin index of each x, a searchsorted in increasing bins (or from the
    end of decreasing ones). Staged bins choose their direction by bins[0] <= bins[-1]."""
    bins = _sorted_1d(bins, "digitize")
    side = "left" if right else "right"
    mono = _static_monotonicity(bins)
    if mono == 0:
        raise ShapeError("np.digitize: bins must be monotonically increasing or decreasing")
    n = shape_of(bins)[0]
    rising = searchsorted(bins, x, side=side) if mono != -1 else None
    if mono == 1 or n == 0:
        return rising
    reversed_bins = st.rev.bind(bins, dimensions=(0,))
    falling = np_math.subtract(n, searchsorted(reversed_bins, x, side=side))
    if mono == -1:
        return falling
    first, last = ops.index_in_dim(bins, 0, 0), ops.index_in_dim(bins, n - 1, 0)
    return np_math.where(np_math.less_equal(first, last), rising, falling)


@implements(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp, piecewise linear through (xp, fp), in float64 as NumPy computes it:
    the segment `i` that searchsorted(xp, x, side='right') picks, fp[i-1] + slope * (x -
    xp[i-1]); fp[0] / fp[-1] (or `left` / `right`) outside. Differentiable in x, xp and fp
    (at a knot, x's derivative is the right segment's slope, as jax's interp). With
    `period`, NumPy's periodic form: x and xp taken modulo the period, xp sorted (fp
    with it) and each end's point repeated one period beyond the other end."""
    xp, fp = _sorted_1d(xp, "interp", "xp"), _sorted_1d(fp, "interp", "fp")
    if dtypes.is_complex(dtype_of(fp)):
        raise UnsupportedFunctionError("np.interp of complex fp is not supported yet",
                                       "interpolate the real and imaginary parts separately")
    n = shape_of(xp)[0]
    if shape_of(fp)[0] != n:
        raise ShapeError(f"np.interp: fp and xp are not of the same length ({shape_of(fp)[0]} "
                         f"and {n})")
    if n == 0:
        raise ShapeError("np.interp: array of sample points is empty")
    f64 = dtypes.canonicalize_dtype(np.float64)
    x, xp, fp = (converted(strong_operand(v), f64) for v in (x, xp, fp))
    if period is not None:
        x, xp, fp = _periodic_samples(x, xp, fp, period)
        n, left, right = n + 2, None, None
    lo_fp, hi_fp = ops.index_in_dim(fp, 0, 0), ops.index_in_dim(fp, n - 1, 0)
    if n == 1:
        f = np_shaping.broadcast_to(lo_fp, shape_of(x))
    else:
        i = np_math.clip(searchsorted(xp, x, side="right"), 1, n - 1)
        j = np_math.subtract(i, 1)
        x0, x1, f0, f1 = take(xp, j), take(xp, i), take(fp, j), take(fp, i)
        dx = np_math.subtract(x1, x0)
        flat = np_math.less_equal(np_math.absolute(dx), float(np.spacing(np.finfo(f64).eps)))
        slope = np_math.divide(np_math.subtract(f1, f0), np_math.where(flat, 1.0, dx))
        along = np_math.multiply(slope, np_math.subtract(x, x0))
        f = np_math.where(flat, f0, np_math.add(f0, along))
    first, last = ops.index_in_dim(xp, 0, 0), ops.index_in_dim(xp, n - 1, 0)
    f = np_math.where(np_math.less(x, first), lo_fp if left is None else left, f)
    return np_math.where(np_math.greater(x, last), hi_fp if right is None else right, f)


def _periodic_samples(x, xp, fp, period):
    """np.interp's periodic normalization: x and xp modulo |period|, the samples in xp's
    order, and the last and first points repeated a period before and after."""
    if not isinstance(period, Tracer) and period == 0:
        raise ShapeError("np.interp: period must be a non-zero value")
    period = np_math.absolute(period)
    x, xp = np_math.remainder(x, period), np_math.remainder(xp, period)
    order = argsort(xp)
    xp, fp = take(xp, order), take(fp, order)
    n = shape_of(xp)[0]
    xp = np_shaping.concatenate([np_math.subtract(xp[n - 1:], period), xp,
                                 np_math.add(xp[:1], period)])
    return x, xp, np_shaping.concatenate([fp[n - 1:], fp, fp[:1]])


def _uniform_edges(lo, hi, n: int, dt):
    """np.linspace(lo, hi, n + 1)'s values to the bit, as NumPy's histogram makes its edges:
    `i * step` is rounded on its own before `+ lo` (the select keeps XLA from fusing the
    two into one FMA, whose single rounding moves edges by an ulp and values on an edge into
    the neighbouring bin); the last edge is `hi` itself."""
    if not isinstance(lo, float):
        lo, hi = cast_all([lo, hi], dt, False)
        step = np_math.divide(np_math.subtract(hi, lo), float(n))
        i = ew.iota.bind(dtype=dt, shape=(n + 1,), dimension=0)
        offsets = np_math.multiply(i, step)
        offsets = np_math.where(np_math.isnan(offsets), 0.0, offsets)
        edges = np_math.add(offsets, lo)
        return np_math.where(np.arange(n + 1) == n, hi, edges)
    return linspace(lo, hi, n + 1, dtype=dt)


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):
    """np.histogram with a static number of equal bins or static edges: the count (or
    summed weights) of the flattened `a` in each [edge_i, edge_i+1), the last bin closed.
    Without `range` the edges span a's staged min and max. No derivative (counts)."""
    x = np_shaping.ravel(strong_operand(a))
    if dtypes.is_complex(dtype_of(x)):
        raise UnsupportedFunctionError("np.histogram of complex arrays is not supported")
    if isinstance(bins, str):
        raise UnsupportedFunctionError(
            f"np.histogram(bins={bins!r}) picks the number of bins from the data, so the "
            "result has no static shape", "pass a number of bins or the bin edges")
    if np.ndim(bins) == 0:
        n = np_shaping.static_int(bins, "np.histogram's bins")
        if n < 1:
            raise ShapeError(f"np.histogram: bins must be positive, got {n}")
        # NumPy's edge dtype: a's float dtype (float64 for integers).
        f = dtype_of(x) if dtypes.is_inexact(dtype_of(x)) else dtypes.default_float()
        if range is None:
            lo, hi = converted(min(x), f), converted(max(x), f)
            same = np_math.equal(lo, hi)     # NumPy widens an empty range by 0.5 each side
            lo = np_math.where(same, np_math.subtract(lo, 0.5), lo)
            hi = np_math.where(same, np_math.add(hi, 0.5), hi)
        else:
            lo, hi = (float(v) for v in range)
            if lo > hi:
                raise ShapeError("np.histogram: max must be larger than min in range parameter")
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
        edges = _uniform_edges(lo, hi, n, f)
    else:
        edges = strong_operand(bins)
        if isinstance(edges, np.ndarray) and np.any(np.diff(edges) < 0):
            raise ShapeError("np.histogram: bins must increase monotonically, when an array")
        n = shape_of(edges)[0] - 1
    column = np_shaping.expand_dims(x, -1)
    lower = ops.slice_in_dim(edges, 0, n, 0)
    upper = ops.slice_in_dim(edges, 1, n + 1, 0)
    last = np.arange(n) == n - 1
    inside = np_math.logical_and(
        np_math.greater_equal(column, lower),
        np_math.where(last, np_math.less_equal(column, upper), np_math.less(column, upper)))
    if weights is None:
        hist = sum(inside, axis=0)
    else:
        w = np_shaping.ravel(strong_operand(weights))
        hist = sum(np_math.where(inside, np_shaping.expand_dims(w, -1), 0), axis=0)
    if density:
        widths = np_math.subtract(upper, lower)
        hist = np_math.divide(np_math.divide(hist, widths), sum(hist))
    return hist, edges
