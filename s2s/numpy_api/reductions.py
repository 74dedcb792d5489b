"""NumPy's reductions, cumulative reductions and differences, sorting and statistics on
staged values.

Each function takes NumPy's arguments (`axis=` None, an int, a tuple, negative;
`keepdims=`; `dtype=` where NumPy has it) and returns NumPy's result dtype exactly:
`np.sum` of int32 or bool is int64, `np.mean` of an int is float64, of float16 is float16
(summed in float32, as NumPy does). The widening is an explicit `convert_element_type`
before the dtype-preserving primitive of `s2s/primitives/reductions.py`; `keepdims` is an
`expand_dims` afterwards. Everything works staged (on Tracers inside a JaxprBuilder) and
eagerly (on NumPy arrays and Python scalars, which count as arrays, as in NumPy).

What differs from NumPy, on purpose:
  - `out=` is not supported (s2s functions return new arrays).
  - `argsort` and `sort` are always stable (NumPy's default quicksort may order ties
    differently; `kind=` is accepted and ignored). NaNs sort last, as in NumPy.
  - `average` with weights does not raise ZeroDivisionError when the weights sum to zero
    (that needs the values); the result is inf/nan instead.
  - `var`/`std` of complex arrays are real (the mean of |x - mean|², as NumPy's).
  - `median` takes NaN semantics from NumPy (a NaN anywhere in the slice gives NaN) but not
    its RuntimeWarnings.
  - `where=` is supported by sum, prod, max, min, all, any, mean, nansum and nanmean,
    not by var/std/median/average.
"""
from __future__ import annotations

import builtins
import functools
import math

import numpy as np

from s2s import dtypes
from s2s.core import Literal
from s2s.errors import ShapeError, StagingError, UnsupportedFunctionError
from s2s.numpy_api import math as np_math
from s2s.numpy_api import shaping as np_shaping
from s2s.numpy_api._base import (aval, asarray, convert, dtype as dtype_of, implements,
                                 is_python_scalar, normalize_axes, normalize_axis,
                                 shape as shape_of)
from s2s.primitives import complex_parts as cx
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.primitives import reductions as red
from s2s.primitives import structural as st

__all__ = ["all", "amax", "amin", "any", "argmax", "argmin", "argsort", "average",
           "count_nonzero", "cumprod", "cumsum", "diff", "gradient", "max", "mean", "median", "min",
           "nanmean", "nansum", "partition", "prod", "ptp", "sort", "std", "sum", "unwrap", "var"]

# ---------------------------------------------------------------------------------------
# Helpers


def strong_operand(a):
    """`a` as an array operand: Python scalars and lists become (strong) NumPy values."""
    x = asarray(a)
    if is_python_scalar(x):
        x = np.asarray(x, dtype=dtypes.dtype_of_python_scalar(x))[()]
    if isinstance(x, (np.ndarray, np.generic)):
        canonical = dtypes.canonicalize_dtype(x.dtype)
        if canonical != x.dtype:
            x = x.astype(canonical)
    return x


def _no_out(out, name: str) -> None:
    if out is not None:
        raise StagingError(f"np.{name}(..., out=...) is not supported",
                           f"assign the result instead: `result = np.{name}(...)`")


def _static_bool(value, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise StagingError(f"{what} must be a static Python bool, got {value!r}")
    return bool(value)


def _dtype_arg(dtype) -> np.dtype | None:
    return None if dtype is None else dtypes.canonicalize_dtype(np.dtype(dtype))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    """Normalized, sorted axes. NumPy accepts axis 0 (or -1) of a 0-d array: nothing."""
    if isinstance(axis, list):
        axis = tuple(axis)
    axes = tuple(sorted(normalize_axes(axis, ndim)))
    return axes if ndim else ()


def converted(x, dt: np.dtype):
    """`x` converted to `dt`, or `x` itself when it already has that dtype."""
    return x if dtype_of(x) == dt else convert(x, dt)


def _lit(value, dt: np.dtype) -> Literal:
    """A weak scalar of dtype `dt`: it adopts its partner's dtype, as `x / 2.0` does."""
    return convert(value, dt, weak_type=True)


def _reshape(x, new_shape):
    new_shape = tuple(int(d) for d in new_shape)
    if shape_of(x) == new_shape:
        return x
    return st.reshape.bind(x, new_sizes=new_shape)


def _flatten(x):
    return _reshape(x, (aval(x).size,))


def _broadcast_to(x, new_shape):
    new_shape = tuple(new_shape)
    old = shape_of(x)
    if old == new_shape:
        return x
    lead = len(new_shape) - len(old)
    if lead < 0 or builtins.any(d not in (1, n) for d, n in zip(old, new_shape[lead:])):
        raise ShapeError(f"cannot broadcast an array of shape {old} to shape {new_shape}")
    return st.broadcast_in_dim.bind(
        x, shape=new_shape, broadcast_dimensions=tuple(range(lead, len(new_shape))))


def _expand(out, axes):
    """`out` with new length-1 axes at positions `axes` of the result (`s[:, None]`)."""
    if not axes:
        return out
    return st.expand_dims.bind(out, dimensions=tuple(sorted(axes)))


def _finish(out, in_shape, axes, keepdims: bool):
    """Applies `keepdims`: the reduced axes come back with length 1."""
    if _static_bool(keepdims, "keepdims"):
        return _expand(out, axes)
    return out


def _count(in_shape, axes) -> int:
    return math.prod(in_shape[a] for a in axes)


@functools.lru_cache(maxsize=None)
def _numpy_default_dtype(np_name: str, dt: np.dtype) -> np.dtype:
    """The result dtype NumPy gives `np.<np_name>` of an array of `dt` (int32 sums to int64)."""
    result = getattr(np, np_name)(np.zeros((1,), dt))
    return dtypes.canonicalize_dtype(np.asarray(result).dtype)


def _where_mask(x, where, fill):
    """`x` where `where` holds and `fill` elsewhere (the reduction's identity)."""
    if where is True:
        return x
    where = strong_operand(where)
    if dtype_of(where) != dtypes.bool_:
        where = convert(where, dtypes.bool_)
    return _broadcast_to(ew.select.bind(where, x, _lit(fill, dtype_of(x))), shape_of(x))


def _is_nan(x):
    return ew.ne.bind(x, x)


# ---------------------------------------------------------------------------------------
# sum, prod


def _sum_like(name, prim, bool_prim, combine, bool_combine, identity, a, axis, dtype,
              out, keepdims, initial, where):
    _no_out(out, name)
    x = strong_operand(a)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    acc = _dtype_arg(dtype) or _numpy_default_dtype(name, dtype_of(x))
    x = converted(x, acc)
    is_bool = acc == dtypes.bool_
    x = _where_mask(x, where, bool(identity) if is_bool else identity)
    result = (bool_prim if is_bool else prim).bind(x, axes=axes)
    if initial is not None:
        result = (bool_combine if is_bool else combine).bind(result, converted(strong_operand(initial), acc))
    return _finish(result, in_shape, axes, keepdims)


@implements(np.sum)
def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """np.sum: bool and narrow ints widen to the default int; `dtype=bool` is a logical or."""
    return _sum_like("sum", red.reduce_sum, red.reduce_or, ew.add, ew.or_, 0, a, axis,
                     dtype, out, keepdims, initial, where)


@implements(np.prod)
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """np.prod: widens like np.sum; `dtype=bool` is a logical and."""
    return _sum_like("prod", red.reduce_prod, red.reduce_and, ew.mul, ew.and_, 1, a, axis,
                     dtype, out, keepdims, initial, where)


# ---------------------------------------------------------------------------------------
# max, min, ptp


def _max_like(name, prim, combine, bool_combine, a, axis, out, keepdims, initial, where):
    _no_out(out, name)
    x = strong_operand(a)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    dt = dtype_of(x)
    combine = bool_combine if dt == dtypes.bool_ else combine
    if where is not True:
        if initial is None:
            raise StagingError(f"np.{name}(..., where=...) needs initial= (NumPy's rule: "
                               f"the reduction has no identity)")
        x = _where_mask(x, where, initial)
    if initial is not None and builtins.any(in_shape[a] == 0 for a in axes):
        # An empty reduction with an initial value is the initial value.
        result = _broadcast_to(converted(strong_operand(initial), dt),
                               tuple(d for i, d in enumerate(in_shape) if i not in axes))
    else:
        result = prim.bind(x, axes=axes)
        if initial is not None:
            result = combine.bind(result, converted(strong_operand(initial), dt))
    return _finish(result, in_shape, axes, keepdims)


@implements(np.max, np.amax)
def max(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    """np.max: NaNs propagate; reducing a zero-length axis needs `initial=`."""
    return _max_like("max", red.reduce_max, ew.max, ew.or_, a, axis, out, keepdims,
                     initial, where)


@implements(np.min, np.amin)
def min(a, axis=None, out=None, keepdims=False, initial=None, where=True):
    """np.min: NaNs propagate; reducing a zero-length axis needs `initial=`."""
    return _max_like("min", red.reduce_min, ew.min, ew.and_, a, axis, out, keepdims,
                     initial, where)


amax, amin = max, min


@implements(np.ptp)
def ptp(a, axis=None, out=None, keepdims=False):
    """np.ptp: max - min in the input dtype (integers wrap around, as in NumPy)."""
    x = strong_operand(a)
    if dtype_of(x) == dtypes.bool_:
        raise ShapeError("np.ptp of a boolean array is not supported (NumPy has no boolean "
                         "subtract); convert it to an integer dtype first")
    hi = max(x, axis, out, keepdims)
    lo = min(x, axis, None, keepdims)
    return ew.sub.bind(hi, lo)


# ---------------------------------------------------------------------------------------
# all, any, count_nonzero


def _as_bool(x):
    return x if dtype_of(x) == dtypes.bool_ else convert(x, dtypes.bool_)


def _logical_reduction(name: str, prim, identity: bool, doc: str):
    """np.all / np.any: `prim` over the elements' truth values; masked-out elements (`where=`)
    count as `identity`."""
    def reduction(a, axis=None, out=None, keepdims=False, *, where=True):
        _no_out(out, name)
        x = _as_bool(strong_operand(a))
        axes = _axes(axis, aval(x).ndim)
        result = prim.bind(_where_mask(x, where, identity), axes=axes)
        return _finish(result, shape_of(x), axes, keepdims)
    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = doc
    return implements(getattr(np, name))(reduction)


all = _logical_reduction("all", red.reduce_and, True,
                         "np.all: every element nonzero (NaN counts as true).")
any = _logical_reduction("any", red.reduce_or, False,
                         "np.any: some element nonzero (NaN counts as true).")


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    """np.count_nonzero: an intp count of the nonzero elements."""
    x = _as_bool(strong_operand(a))
    axes = _axes(axis, aval(x).ndim)
    index = dtypes.canonicalize_dtype(np.intp)
    return _finish(red.reduce_sum.bind(convert(x, index), axes=axes), shape_of(x), axes,
                   keepdims)


# ---------------------------------------------------------------------------------------
# mean, var, std, average


def _mean_dtypes(dt: np.dtype, dtype) -> tuple[np.dtype, np.dtype]:
    """(accumulation dtype, result dtype) of np.mean, as NumPy's _methods._mean picks them."""
    requested = _dtype_arg(dtype)
    if requested is not None:
        return requested, requested
    if dtypes.is_integer(dt) or dtypes.is_bool(dt):
        return dtypes.default_float(), dtypes.default_float()
    if dt == dtypes.float16:
        return dtypes.float32, dtypes.float16
    return dt, dt


def _divide(total, count, acc: np.dtype):
    """`total / count` in `acc`; an integer `acc` divides in floats and truncates, as NumPy."""
    if dtypes.is_inexact(acc):
        divisor = _lit(count, acc) if not _is_staged_or_array(count) else converted(count, acc)
        return ew.div.bind(total, divisor)
    f = dtypes.default_float()
    divisor = _lit(count, f) if not _is_staged_or_array(count) else converted(count, f)
    return convert(ew.div.bind(convert(total, f), divisor), acc)


def _is_staged_or_array(value) -> bool:
    return not isinstance(value, (int, float, np.integer, np.floating))


@implements(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """np.mean: ints and bools average in float64; float16 sums in float32."""
    _no_out(out, "mean")
    x = strong_operand(a)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    acc, result_dtype = _mean_dtypes(dtype_of(x), dtype)
    if acc == dtypes.bool_:
        raise StagingError("np.mean(..., dtype=bool) is not supported")
    x = converted(x, acc)
    if where is True:
        count = _count(in_shape, axes)
    else:
        count = red.reduce_sum.bind(_where_mask(_ones_like(x), where, 0), axes=axes)
        x = _where_mask(x, where, 0)
    total = red.reduce_sum.bind(x, axes=axes)
    result = converted(_divide(total, count, acc), result_dtype)
    return _finish(result, in_shape, axes, keepdims)


def _ones_like(x):
    """An array of ones shaped and typed like `x` (a staged broadcast of a scalar)."""
    one = np.ones((), dtype_of(x))[()]
    return _broadcast_to(one, shape_of(x)) if shape_of(x) else one


def _var(name, a, axis, dtype, out, ddof, keepdims, where, mean_arg, correction):
    _no_out(out, name)
    if where is not True:
        raise StagingError(f"np.{name}(..., where=...) is not supported")
    if mean_arg is not None:
        raise StagingError(f"np.{name}(..., mean=...) is not supported")
    if correction is not None:
        if ddof != 0:
            raise StagingError(f"np.{name}: ddof and correction cannot both be given")
        ddof = correction
    x = strong_operand(a)
    dt = dtype_of(x)
    is_complex = dtypes.is_complex(dt)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    requested = _dtype_arg(dtype)
    acc = requested or (dtypes.default_float() if not dtypes.is_inexact(dt) else dt)
    if not dtypes.is_inexact(acc) or dtypes.is_complex(acc) != is_complex:
        raise ShapeError(f"np.{name}(..., dtype={acc.name}) is not supported: the variance of "
                         f"a {'complex' if is_complex else 'real'} array needs a "
                         f"{'complex' if is_complex else 'real floating'} dtype")
    n = _count(in_shape, axes)
    # As NumPy's _methods._var: the mean (kept dims) in `acc`, deviations in the promoted
    # dtype of input and mean, their squares (|dev|², a real number, for complex values)
    # summed in `acc` (its real part's dtype for complex), divided by n - ddof.
    m = _expand(_divide(red.reduce_sum.bind(converted(x, acc), axes=axes), n, acc), axes)
    dev_dtype = dtypes.canonicalize_dtype(np.result_type(dt, acc))
    dev = ew.sub.bind(converted(x, dev_dtype), converted(m, dev_dtype))
    if is_complex:
        squares, acc = cx.real.bind(ew.mul.bind(dev, cx.conj.bind(dev))), cx.part_dtype(acc)
    else:
        squares = ew.mul.bind(dev, dev)
    sq = red.reduce_sum.bind(converted(squares, acc), axes=axes)
    result = _divide(sq, builtins.max(n - ddof, 0), acc)
    return _finish(result, in_shape, axes, keepdims), n


@implements(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """np.var: mean squared deviation, divided by n - ddof; ints give float64."""
    return _var("var", a, axis, dtype, out, ddof, keepdims, where, mean, correction)[0]


@implements(np.std)
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """np.std: the square root of np.var. Over one value (n == 1) the deviation is exactly
    0 (nan for an infinite value), so the variance is its own square root: returned as it
    is, its derivative is 0 where the constant 0 has one, where sqrt'(0) * 0 would be nan."""
    variance, n = _var("std", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    return variance if n == 1 else ew.sqrt.bind(variance)


@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """np.average: the mean, or sum(a * w) / sum(w) along `axis` with weights."""
    x = strong_operand(a)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    returned = _static_bool(returned, "returned")
    if weights is None:
        avg = mean(x, axis, keepdims=keepdims)
        if not returned:
            return avg
        # NumPy's scale: how many values each mean averages, shaped like the mean.
        avg_aval = aval(avg)
        scale = aval(x).size / avg_aval.size if avg_aval.size else np.nan
        return avg, _broadcast_to(np.asarray(scale, dtype=avg_aval.dtype)[()], avg_aval.shape)
    w = strong_operand(weights)
    dt, wdt = dtype_of(x), dtype_of(w)
    if dtypes.is_integer(dt) or dtypes.is_bool(dt):
        result_dtype = np.result_type(dt, wdt, np.float64)
    else:
        result_dtype = np.result_type(dt, wdt)
    result_dtype = dtypes.canonicalize_dtype(result_dtype)
    w_shape = shape_of(w)
    if w_shape != in_shape:
        if axis is None:
            raise ShapeError("np.average: axis must be specified when the shapes of a and "
                             "weights differ")
        user_axes = normalize_axes(tuple(axis) if isinstance(axis, list) else axis,
                                   len(in_shape))
        if w_shape != tuple(in_shape[ax] for ax in user_axes):
            raise ShapeError("np.average: shape of weights must be consistent with the shape "
                             "of a along the specified axis")
        if list(user_axes) != sorted(user_axes):
            w = _transpose(w, tuple(int(i) for i in np.argsort(user_axes)))
        # Weights along `axis` only: give them length-1 axes elsewhere, then broadcast.
        w = _reshape(w, tuple(d if i in axes else 1 for i, d in enumerate(in_shape)))
    w_full = _broadcast_to(converted(w, result_dtype), in_shape)
    scale = sum(w_full, axes, keepdims=keepdims)
    total = sum(ew.mul.bind(converted(x, result_dtype), w_full), axes, keepdims=keepdims)
    avg = ew.div.bind(total, scale)
    return (avg, scale) if returned else avg


def _transpose(x, permutation):
    return st.transpose.bind(x, permutation=tuple(permutation))


# ---------------------------------------------------------------------------------------
# nansum, nanmean


@implements(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """np.nansum: NaNs count as zero."""
    x = strong_operand(a)
    if dtypes.is_inexact(dtype_of(x)):
        x = ew.select.bind(_is_nan(x), _lit(0, dtype_of(x)), x)
    return sum(x, axis, dtype, out, keepdims, initial, where)


@implements(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """np.nanmean: the mean of the non-NaN elements (NaN where there are none)."""
    x = strong_operand(a)
    if not dtypes.is_inexact(dtype_of(x)):
        return mean(x, axis, dtype, out, keepdims, where=where)
    _no_out(out, "nanmean")
    nan = _is_nan(x)
    if where is not True:   # left out: NaNs, and whatever `where` excludes
        nan = _broadcast_to(ew.select.bind(_as_bool(strong_operand(where)), nan,
                                           _lit(True, dtypes.bool_)), shape_of(x))
    index = dtypes.canonicalize_dtype(np.intp)
    count = sum(ew.not_.bind(_broadcast_to(nan, shape_of(x))), axis, index, keepdims=keepdims)
    total = sum(ew.select.bind(nan, _lit(0, dtype_of(x)), x), axis, dtype, keepdims=keepdims)
    acc = dtype_of(total)
    return _divide(total, count, acc)


# ---------------------------------------------------------------------------------------
# argmax, argmin


def _arg(name, prim, a, axis, out, keepdims):
    _no_out(out, name)
    x = strong_operand(a)
    in_shape = shape_of(x)
    index = dtypes.canonicalize_dtype(np.intp)
    keepdims = _static_bool(keepdims, "keepdims")
    if axis is None or not in_shape:
        if axis is not None:
            normalize_axis(axis, 0)
        result = prim.bind(_flatten(x), axis=0, index_dtype=index)
        return _expand(result, tuple(range(len(in_shape)))) if keepdims else result
    ax = normalize_axis(axis, len(in_shape))
    result = prim.bind(x, axis=ax, index_dtype=index)
    return _finish(result, in_shape, (ax,), keepdims)


@implements(np.argmax)
def argmax(a, axis=None, out=None, *, keepdims=False):
    """np.argmax: the first maximal index (the first NaN, if any); axis=None flattens."""
    return _arg("argmax", red.argmax, a, axis, out, keepdims)


@implements(np.argmin)
def argmin(a, axis=None, out=None, *, keepdims=False):
    """np.argmin: the first minimal index (the first NaN, if any); axis=None flattens."""
    return _arg("argmin", red.argmin, a, axis, out, keepdims)


# ---------------------------------------------------------------------------------------
# cumsum, cumprod


def _cumulative(name, prim, bool_prim, a, axis, dtype, out):
    _no_out(out, name)
    x = strong_operand(a)
    if axis is None or not shape_of(x):
        if axis is not None:
            normalize_axis(axis, 0)
        x, ax = _flatten(x), 0
    else:
        ax = normalize_axis(axis, aval(x).ndim)
    acc = _dtype_arg(dtype) or _numpy_default_dtype(name, dtype_of(x))
    x = converted(x, acc)
    return (bool_prim if acc == dtypes.bool_ else prim).bind(x, axis=ax, reverse=False)


@implements(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):
    """np.cumsum: widens like np.sum; axis=None scans the flattened array."""
    return _cumulative("cumsum", red.cumsum, red.cummax, a, axis, dtype, out)


@implements(np.cumprod)
def cumprod(a, axis=None, dtype=None, out=None):
    """np.cumprod: widens like np.prod; axis=None scans the flattened array."""
    return _cumulative("cumprod", red.cumprod, red.cummin, a, axis, dtype, out)


_NO_VALUE = object()


def _edge(values, x, ax: int):
    """A `prepend=`/`append=` operand of np.diff: a scalar becomes one slice along `ax`."""
    v = strong_operand(values)
    if not shape_of(v):
        shape = list(shape_of(x))
        shape[ax] = 1
        v = np_shaping.broadcast_to(v, tuple(shape))
    return v


@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=_NO_VALUE, append=_NO_VALUE):
    """np.diff: `n` times `x[1:] - x[:-1]` along `axis` (`!=` for booleans, as NumPy),
    after joining `prepend` and `append` on; the inverse of cumsum."""
    x = strong_operand(a)
    n = np_shaping.static_int(n, "np.diff's n")
    if n < 0:
        raise ShapeError(f"np.diff: order must be non-negative but got {n}",
                         "pass n >= 0 (n=0 returns the input)")
    if n == 0:
        return x
    if not shape_of(x):
        raise ShapeError("np.diff needs an array of at least one dimension, got a scalar",
                         "use np.atleast_1d(x), or reshape the value into an array")
    ax = normalize_axis(axis, aval(x).ndim)
    parts = [x]
    if prepend is not _NO_VALUE:
        parts.insert(0, _edge(prepend, x, ax))
    if append is not _NO_VALUE:
        parts.append(_edge(append, x, ax))
    if len(parts) > 1:
        x = np_shaping.concatenate(parts, axis=ax)
    step = np_math.not_equal if dtypes.is_bool(dtype_of(x)) else np_math.subtract
    for _ in range(n):
        size = shape_of(x)[ax]
        x = step(ops.slice_in_dim(x, builtins.min(1, size), size, ax),
                 ops.slice_in_dim(x, 0, builtins.max(size - 1, 0), ax))
    return x


def _float_operand(a, name: str):
    """A real array operand in a floating dtype (integers become float64, as NumPy's
    gradient and unwrap compute them)."""
    x = strong_operand(a)
    if dtypes.is_complex(dtype_of(x)):
        raise UnsupportedFunctionError(f"np.{name} of complex arrays is not supported yet")
    if not dtypes.is_inexact(dtype_of(x)):
        x = converted(x, dtypes.canonicalize_dtype(np.float64))
    return x


def _along(x, ax: int, start: int, stop: int):
    """x[..., start:stop] on axis `ax`, with Python's bounds (negative counts from the end)."""
    start, stop, _ = builtins.slice(start, stop).indices(shape_of(x)[ax])
    return ops.slice_in_dim(x, start, stop, ax)


def _spacings(varargs, n_axes: int) -> list:
    """np.gradient's sample distances: none (1), one scalar for all axes, or one per axis,
    each a scalar or the coordinates of the samples along it (a 1-d array)."""
    if not varargs:
        return [1.0] * n_axes
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return list(varargs) * n_axes
    if len(varargs) != n_axes:
        raise ShapeError(f"np.gradient: got {len(varargs)} spacings for {n_axes} axes",
                         "pass one spacing, or one per axis")
    if builtins.any(np.ndim(h) > 1 for h in varargs):
        raise ShapeError("np.gradient: distances must be either scalars or 1d",
                         "pass a scalar spacing or the 1-d coordinates of each axis")
    return list(varargs)


def _along_axis(coefficients, ax: int, nd: int):
    """A 1-d array of per-sample weights shaped to broadcast along axis `ax` of nd axes."""
    return np_shaping.reshape(coefficients, [-1 if k == ax else 1 for k in range(nd)])


def _weighted_sum(x, ax: int, terms):
    """sum of weight * x[start:stop] along `ax`, for (weight, start, stop) in `terms`."""
    total = None
    for weight, start, stop in terms:
        term = np_math.multiply(weight, _along(x, ax, start, stop))
        total = term if total is None else np_math.add(total, term)
    return total


def _coordinate_gradient(x, ax: int, coordinates, edge_order: int):
    """np.gradient along `ax` at samples with the given coordinates, NumPy's formulas for
    uneven spacing: second-order accurate differences inside (weights from each sample's
    two neighbouring distances), one-sided of first or second order at the ends."""
    nd, n = len(shape_of(x)), shape_of(x)[ax]
    coordinates = strong_operand(coordinates)
    if shape_of(coordinates) != (n,):
        raise ShapeError(f"np.gradient: when 1d, distances must match the length of the "
                         f"corresponding dimension ({shape_of(coordinates)} for an axis of {n})",
                         "pass one coordinate per sample")
    dx = diff(coordinates)
    if not dtypes.is_inexact(dtype_of(dx)):
        dx = converted(dx, dtypes.canonicalize_dtype(np.float64))
    inner_1, inner_2 = (_along_axis(_along(dx, 0, a, b), ax, nd) for a, b in ((0, -1), (1, None)))
    add, mul, div, neg = np_math.add, np_math.multiply, np_math.divide, np_math.negative
    inner_sum = add(inner_1, inner_2)
    inside = _weighted_sum(x, ax, (
        (neg(div(inner_2, mul(inner_1, inner_sum))), 0, -2),
        (div(np_math.subtract(inner_2, inner_1), mul(inner_1, inner_2)), 1, -1),
        (div(inner_1, mul(inner_2, inner_sum)), 2, None)))
    if edge_order == 1:
        first = div(np_math.subtract(_along(x, ax, 1, 2), _along(x, ax, 0, 1)), ops.index_in_dim(dx, 0, 0))
        last = div(np_math.subtract(_along(x, ax, -1, None), _along(x, ax, -2, -1)),
                   ops.index_in_dim(dx, n - 2, 0))
    else:
        d1, d2, e1, e2 = (ops.index_in_dim(dx, k, 0) for k in (0, 1, n - 3, n - 2))
        first = _weighted_sum(x, ax, (
            (neg(div(add(mul(2.0, d1), d2), mul(d1, add(d1, d2)))), 0, 1),
            (div(add(d1, d2), mul(d1, d2)), 1, 2),
            (neg(div(d1, mul(d2, add(d1, d2)))), 2, 3)))
        last = _weighted_sum(x, ax, (
            (div(e2, mul(e1, add(e1, e2))), -3, -2),
            (neg(div(add(e2, e1), mul(e1, e2))), -2, -1),
            (div(add(mul(2.0, e2), e1), mul(e2, add(e1, e2))), -1, None)))
    return np_shaping.concatenate([first, inside, last], axis=ax)


# Finite-difference stencils as (weight, start, stop) of slices along the axis, over h.
_CENTRAL = ((-0.5, 0, -2), (0.5, 2, None))
_EDGE_STENCILS = {
    1: (((-1.0, 0, 1), (1.0, 1, 2)), ((-1.0, -2, -1), (1.0, -1, None))),
    2: (((-1.5, 0, 1), (2.0, 1, 2), (-0.5, 2, 3)),
        ((0.5, -3, -2), (-2.0, -2, -1), (1.5, -1, None))),
}


def _stencil(x, ax: int, terms, h):
    total = None
    for weight, start, stop in terms:
        term = np_math.multiply(_along(x, ax, start, stop), weight)
        total = term if total is None else np_math.add(total, term)
    return np_math.divide(total, h)


@implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient with a scalar spacing or sample coordinates per axis: central differences
    inside, one-sided differences of first or second order (`edge_order`) at the ends. One array for one
    axis, else a tuple, as NumPy 2; the result keeps f's float dtype."""
    x = _float_operand(f, "gradient")
    nd = len(shape_of(x))
    axes = normalize_axes(axis, nd)
    if edge_order not in (1, 2):
        raise ShapeError(f"np.gradient: edge_order must be 1 or 2, got {edge_order!r}")
    out = []
    for ax, h in zip(axes, _spacings(varargs, len(axes))):
        if shape_of(x)[ax] < edge_order + 1:
            raise ShapeError(f"np.gradient: axis {ax} has {shape_of(x)[ax]} samples; "
                             f"edge_order={edge_order} needs at least {edge_order + 1}")
        if np.ndim(h):
            joined = _coordinate_gradient(x, ax, h, edge_order)
        else:
            first, last = _EDGE_STENCILS[edge_order]
            parts = [_stencil(x, ax, terms, h) for terms in (first, _CENTRAL, last)]
            joined = np_shaping.concatenate(parts, axis=ax)
        out.append(converted(joined, dtype_of(x)))
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.unwrap)
def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """np.unwrap: each jump between neighbours larger than `discont` replaced by its
    complement modulo `period`; NumPy's formula, a piecewise-constant correction summed
    with cumsum (so the derivative is the identity, as jax's)."""
    x = _float_operand(p, "unwrap")
    nd = len(shape_of(x))
    if not nd:
        raise ShapeError("np.unwrap needs an array of at least one dimension, got a scalar")
    ax = normalize_axis(axis, nd)
    if shape_of(x)[ax] < 2:
        return x
    half = period / 2
    discont = half if discont is None else discont
    dd = diff(x, axis=ax)
    ddmod = np_math.subtract(np_math.remainder(np_math.add(dd, half), period), half)
    on_edge = np_math.logical_and(np_math.equal(ddmod, -half), np_math.greater(dd, 0))
    ddmod = np_math.where(on_edge, half, ddmod)
    correction = np_math.subtract(ddmod, dd)
    correction = np_math.where(np_math.less(np_math.absolute(dd), discont), 0.0, correction)
    rest = np_math.add(_along(x, ax, 1, None), cumsum(correction, axis=ax))
    return converted(np_shaping.concatenate([_along(x, ax, 0, 1), rest], axis=ax), dtype_of(x))


# ---------------------------------------------------------------------------------------
# sort, argsort, median


def _sort_operand(a, axis, order, name):
    if order is not None:
        raise StagingError(f"np.{name}(..., order=...) is not supported (no structured dtypes)")
    x = strong_operand(a)
    if axis is None:
        return _flatten(x), 0
    if not shape_of(x) and name == "argsort":   # NumPy gives argsort(0-d) == [0]
        if axis != -1:
            normalize_axis(axis, 0)
        return _flatten(x), 0
    return x, normalize_axis(axis, aval(x).ndim)


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort along `axis` (None: the flattened array); NaNs last."""
    x, ax = _sort_operand(a, axis, order, "sort")
    if not shape_of(x):
        raise ShapeError(f"np.sort: axis {axis} is out of bounds for an array of dimension 0")
    (result,) = red.sort.bind(x, dimension=ax, num_keys=1)
    return result


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.argsort, always stable: sorts (a, iota) by a and keeps the permuted iota."""
    x, ax = _sort_operand(a, axis, order, "argsort")
    index = dtypes.canonicalize_dtype(np.intp)
    iota = ew.iota.bind(dtype=index, shape=shape_of(x), dimension=ax)
    _, order_ = red.sort.bind(x, iota, dimension=ax, num_keys=1)
    return order_


@implements(np.partition)
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition as a full sort along `axis`: a valid partition for every kth (each kth
    element in its sorted place, smaller ones before, larger after). NumPy leaves the order
    inside each side unspecified, and s2s's is the sorted one."""
    x, ax = _sort_operand(a, axis, order, "partition")
    if not shape_of(x):
        raise ShapeError("np.partition needs an array of at least one dimension")
    n = shape_of(x)[ax]
    for k in np.atleast_1d(np.asarray(kth)).tolist():
        if not isinstance(k, int) or not -n <= k < n:
            raise ShapeError(f"np.partition: kth {k!r} is out of bounds for an axis of size {n}",
                             "pass static ints in [-n, n) for an axis of length n")
    return sort(x, axis=ax)


@implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.median: the middle of the sorted values (the mean of the middle two for an even
    count), a NaN if the slice has one; ints give float64, as np.mean."""
    _no_out(out, "median")
    x = strong_operand(a)
    in_shape = shape_of(x)
    axes = _axes(axis, len(in_shape))
    if len(in_shape) and axis is None:
        work, ax = _flatten(x), 0
    elif not in_shape:
        work, ax = _reshape(x, (1,)), 0
    elif not axes:   # axis=(): each element is its own slice
        work, ax = _expand(x, (len(in_shape),)), len(in_shape)
    elif len(axes) == 1:
        work, ax = x, axes[0]
    else:
        work, ax = _merge_axes(x, axes)
    n = shape_of(work)[ax]
    acc, result_dtype = _mean_dtypes(dtype_of(x), None)
    (ordered,) = red.sort.bind(work, dimension=ax, num_keys=1)

    def element(i):   # `ordered[:, i]`: the i-th smallest of each slice
        starts = tuple(i if d == ax else 0 for d in range(len(shape_of(work))))
        limits = tuple(i + 1 if d == ax else size for d, size in enumerate(shape_of(work)))
        picked = st.slice.bind(ordered, start_indices=starts, limit_indices=limits)
        return converted(st.squeeze.bind(picked, dimensions=(ax,)), acc)

    if n == 0:   # NumPy: the mean of an empty slice, 0 / 0
        result = _divide(red.reduce_sum.bind(converted(ordered, acc), axes=(ax,)), 0, acc)
    elif n % 2:
        result = element(n // 2)
    else:        # NumPy's mean of the middle two: their sum over 2
        result = _divide(ew.add.bind(element(n // 2 - 1), element(n // 2)), 2, acc)
    if n and dtypes.is_inexact(dtype_of(x)):
        # NaNs sort last: the slice has one exactly when its largest element is one.
        largest = element(n - 1)
        result = ew.select.bind(_is_nan(largest), _lit(float("nan"), acc), result)
    # The reduced axis leaves the others in their order (merging keeps them in order too).
    return _finish(converted(result, result_dtype), in_shape, axes, keepdims)


def _merge_axes(x, axes):
    """`x` with `axes` brought together into one axis; returns (array, that axis)."""
    in_shape = shape_of(x)
    if list(axes) != list(range(axes[0], axes[0] + len(axes))):
        rest = [i for i in range(len(in_shape)) if i not in axes]
        x = _transpose(x, tuple(rest) + tuple(axes))
        in_shape = shape_of(x)
        axes = tuple(range(len(rest), len(in_shape)))
    lo, hi = axes[0], axes[-1] + 1
    merged = in_shape[:lo] + (math.prod(in_shape[lo:hi]),) + in_shape[hi:]
    return _reshape(x, merged), lo
