"""Array creation: zeros, ones, full, eye, arange, linspace, array ... on staged values.

Inside a builder these are *always* staged, even when every argument is concrete:
`np.ones((300, 1024, 1024))` is a `broadcast_in_dim` of the literal 1.0, `np.arange` and
`np.eye` are built on `iota`. Baking their values into the jaxpr would put gigabytes into
constants and into the emitted source; a staged op costs one line. Concrete data the
user wrote out (`np.array([[1., 2.], [3., 4.]])`) becomes a constant of the jaxpr.

Outside any builder the NumPy result is returned directly. Dtypes are NumPy's
(`np.arange(5)` is int64, `np.linspace` float64, `np.zeros` float64, `dtype=` honoured),
canonicalized by `s2s.dtypes.canonicalize_dtype`.
"""
from __future__ import annotations

import functools
import math as _pymath
import operator

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.numpy_api._base import (aval, cast_all, has_tracer, implements, is_python_scalar,
                                 normalize_axis)
from s2s.numpy_api.shaping import broadcast_arrays, reshape, stack
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.primitives import structural as st
from s2s.staging import CopiedTracer, Tracer, current_builder


def _staging(*values) -> bool:
    """Whether to stage: a builder is active, or an argument is staged."""
    return current_builder() is not None or any(has_tracer(v) for v in values)


def _shape_arg(shape) -> tuple[int, ...]:
    """A static shape from an int or a sequence of ints (staged sizes raise)."""
    if isinstance(shape, (int, np.integer, Tracer)):
        shape = (shape,)
    shape = tuple(operator.index(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative dimensions are not allowed (shape {shape})")
    return shape


def _dtype_arg(dtype, default=None) -> np.dtype:
    return dtypes.canonicalize_dtype(default if dtype is None else dtype)


def _broadcast(x, shape: tuple[int, ...]):
    """`x` (a literal, staged or concrete value) broadcast to `shape`, right-aligned."""
    x_ndim = aval(x).ndim
    if x_ndim > len(shape):
        raise ShapeError(f"could not broadcast an array of shape {aval(x).shape} to {shape}")
    dims = tuple(range(len(shape) - x_ndim, len(shape)))
    if isinstance(x, Tracer) and x.shape == shape:
        return x
    return st.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims)


def _filled(shape, value, dt: np.dtype):
    """A staged array of `shape` and dtype `dt`, every element `value` (strongly typed)."""
    (v,) = cast_all([value], dt, False)
    return _broadcast(v, shape)


# ---------------------------------------------------------------------------------------
# zeros, ones, full, empty and their _like forms


def _filled_new(numpy_new, shape, dtype, value):
    """`numpy_new(shape, dtype)` outside staging; staged, every element `value`."""
    shape, dt = _shape_arg(shape), _dtype_arg(dtype, float)
    if not _staging():
        return numpy_new(shape, dt)
    return _filled(shape, value, dt)


@implements(np.zeros)
def zeros(shape, dtype=None, order="C", *, device=None, like=None):
    return _filled_new(np.zeros, shape, dtype, 0)


@implements(np.ones)
def ones(shape, dtype=None, order="C", *, device=None, like=None):
    return _filled_new(np.ones, shape, dtype, 1)


@implements(np.empty)
def empty(shape, dtype=None, order="C", *, device=None, like=None):
    """Staged as zeros: an uninitialized array has no value to reproduce."""
    return _filled_new(np.empty, shape, dtype, 0)


def _fill_dtype(fill_value) -> np.dtype:
    """The dtype NumPy's np.full gives `fill_value` (np.array(fill_value).dtype)."""
    if is_python_scalar(fill_value):
        return dtypes.dtype_of_python_scalar(fill_value)
    return aval(_operand(fill_value)).dtype


def _operand(x):
    """Lists holding staged values are stacked; other lists become NumPy arrays."""
    if isinstance(x, (list, tuple)):
        return _stack_leaves(x) if has_tracer(x) else np.asarray(x)
    return x


@implements(np.full)
def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    shape = _shape_arg(shape)
    dt = _dtype_arg(dtype) if dtype is not None else _fill_dtype(fill_value)
    if not _staging(fill_value):
        return np.full(shape, fill_value, dt)
    return _filled(shape, _operand(fill_value), dt)


def _like(a, dtype, shape):
    """The dtype and shape of a `*_like` result: `a`'s, unless given."""
    a_aval = aval(_operand(a))
    dt = a_aval.dtype if dtype is None else _dtype_arg(dtype)
    shape = a_aval.shape if shape is None else _shape_arg(shape)
    return dt, shape


def _filled_like(numpy_like, a, value, dtype, shape):
    """`numpy_like(a)` for NumPy values; staged, an array like `a` with every element `value`."""
    dt, shape = _like(a, dtype, shape)
    if not _staging(a):
        return numpy_like(shape, dt)
    return _filled(shape, value, dt)


@implements(np.zeros_like)
def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return _filled_like(np.zeros, a, 0, dtype, shape)


@implements(np.ones_like)
def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return _filled_like(np.ones, a, 1, dtype, shape)


@implements(np.empty_like)
def empty_like(prototype, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """Staged as zeros_like."""
    return _filled_like(np.empty, prototype, 0, dtype, shape)


@implements(np.full_like)
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    dt, shape = _like(a, dtype, shape)
    if not _staging(a, fill_value):
        return np.full(shape, fill_value, dt)
    return _filled(shape, _operand(fill_value), dt)


# ---------------------------------------------------------------------------------------
# eye, identity, tri: comparisons of two iotas


def _bool_to(mask, dt):
    if dt == dtypes.bool_:
        return mask
    return ew.convert_element_type.bind(mask, new_dtype=dt, weak_type=False)


def _matrix_args(N, M, k, dtype) -> tuple[int, int, int, np.dtype]:
    """np.eye's and np.tri's arguments: N rows, M columns (N if None), diagonal k, dtype."""
    n = operator.index(N)
    return n, n if M is None else operator.index(M), operator.index(k), _dtype_arg(dtype, float)


@implements(np.eye)
def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    """Ones where col == row + k: iota, iota, eq, convert."""
    n, m, k, dt = _matrix_args(N, M, k, dtype)
    if not _staging():
        return np.eye(n, m, k, dtype=dt)
    return ops.eye(n, m, k, dt)


@implements(np.identity)
def identity(n, dtype=None, *, like=None):
    return eye(n, dtype=dtype)


@implements(np.tri)
def tri(N, M=None, k=0, dtype=float, *, like=None):
    """Ones where col <= row + k."""
    n, m, k, dt = _matrix_args(N, M, k, dtype)
    if not _staging():
        return np.tri(n, m, k, dtype=dt)
    rows, cols = ops.index_grid(n, m, k)
    return _bool_to(ew.ge.bind(rows, cols), dt)


# ---------------------------------------------------------------------------------------
# arange, linspace


def _concrete_scalar(name: str, what: str, value):
    if has_tracer(value):
        raise UnsupportedFunctionError(
            f"np.{name}'s {what} is a staged value, but the length of the result (its shape) "
            f"must be known when the function is staged",
            f"use concrete Python numbers for np.{name}'s bounds; for staged bounds, build "
            f"the values from a fixed-length range, e.g. start + step * np.arange(n)")
    return value


@implements(np.arange)
def arange(start=None, stop=None, step=None, dtype=None, *, device=None, like=None):
    """`first + delta * iota`, with NumPy's length, dtype, first value and delta."""
    if start is None and stop is None:
        raise TypeError("arange() requires stop to be specified.")
    if stop is None:
        start, stop = 0, start
    if start is None:
        start = 0
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        _concrete_scalar("arange", what, v)
    if step is None:
        step = 1
    if dtype is None:
        # NumPy: the dtypes of start, stop and step, promoted with intp.
        found = [np.asarray(v).dtype for v in (start, stop, step)]
        dt = dtypes.canonicalize_dtype(functools.reduce(np.promote_types, found, np.dtype(np.intp)))
    else:
        dt = _dtype_arg(dtype)
    if not _staging():
        return np.arange(start, stop, step, dtype=dt)
    if step == 0:
        raise ZeroDivisionError("arange: step must not be zero")
    span = stop - start
    quotient = span / step
    if quotient == 0 and span != 0:   # NumPy: an underflowed quotient (5e-324 / 2.0) is one
        length = 1 if _pymath.copysign(1.0, quotient) > 0 else 0   # element, or none if negative
    else:
        length = max(0, _pymath.ceil(quotient))
    # NumPy writes start and start + step into the buffer, then fills start + i * delta.
    first, second = np.array([start, start + step]).astype(dt)
    delta = second - first
    out = ew.iota.bind(dtype=dt, shape=(length,), dimension=0)
    if length > 1 and delta != 1:
        out = ew.mul.bind(out, ops.literal(delta, dt))
    if first != 0:
        out = ew.add.bind(out, ops.literal(first, dt))
    return out



def _is_concrete_scalar(x) -> bool:
    return is_python_scalar(x) or isinstance(x, np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0)


@implements(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """`start + iota * step`, with the last sample set to exactly `stop` as NumPy does."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    if not _staging(start, stop):
        return np.linspace(start, stop, num, endpoint, retstep, dtype, axis)
    div = num - 1 if endpoint else num
    start, stop = _operand(start), _operand(stop)
    # NumPy computes in result_type(start, stop, 0.0): floats stay, integers become float64.
    dt, _ = dtypes.result_type((aval(start).dtype, aval(start).weak_type),
                               (aval(stop).dtype, aval(stop).weak_type), (dtypes.float64, True))
    out_dt = dt if dtype is None else _dtype_arg(dtype)

    if _is_concrete_scalar(start) and _is_concrete_scalar(stop):
        first, last = np.asarray(start, dt)[()], np.asarray(stop, dt)[()]
        delta = last - first
        step = delta / div if div > 0 else np.asarray(np.nan, dt)[()]
        t = ew.iota.bind(dtype=dt, shape=(num,), dimension=0)
        y = ew.mul.bind(t, ops.literal(step if div > 0 else delta, dt)) if num > 1 else t
        y = ew.add.bind(y, ops.literal(first, dt)) if first != 0 else y
        if endpoint and num > 1:
            computed = np.asarray(np.asarray(num - 1, dt) * (step if div > 0 else delta) + first, dt)
            if computed != last:
                y = ew.select.bind(ew.eq.bind(t, ops.literal(num - 1, dt)), ops.literal(last, dt), y)
        return _linspace_finish(y, out_dt, retstep, step)

    start_op, stop_op = cast_all([start, stop], dt, False)
    s = ew.broadcast_shapes(aval(start_op).shape, aval(stop_op).shape)
    delta = ew.sub.bind(stop_op, start_op)
    step = ew.div.bind(delta, ops.literal(div, dt)) if div > 0 else None
    t = ew.iota.bind(dtype=dt, shape=(num,) + (1,) * len(s), dimension=0)
    y = ew.add.bind(ew.mul.bind(t, step if step is not None else delta), start_op)
    if endpoint and num > 1:
        y = ew.select.bind(ew.eq.bind(t, ops.literal(num - 1, dt)), stop_op, y)
    if y.shape != (num,) + s:
        y = _broadcast(y, (num,) + s)
    axis = normalize_axis(axis, 1 + len(s))
    if axis != 0:
        perm = list(range(1, 1 + len(s)))
        perm.insert(axis, 0)
        y = st.transpose.bind(y, permutation=tuple(perm))
    if step is None:
        step = np.asarray(np.nan, dt)[()]
    return _linspace_finish(y, out_dt, retstep, step)


def _linspace_finish(y, out_dt, retstep, step):
    if dtypes.is_integer(out_dt) and not dtypes.is_integer(aval(y).dtype):
        y = ew.floor.bind(y)
    if out_dt != aval(y).dtype:
        y = ew.convert_element_type.bind(y, new_dtype=out_dt, weak_type=False)
    return (y, step) if retstep else y


# ---------------------------------------------------------------------------------------
# array, asarray, copy


def _stack_leaves(obj):
    """A nested list holding staged values, stacked: other leaves are strong NumPy values
    (np.array types each Python scalar on its own: 1.0 is float64)."""
    if isinstance(obj, (list, tuple)):
        return stack([_stack_leaves(e) for e in obj])
    if isinstance(obj, Tracer):
        return obj
    value = np.asarray(obj)
    return value.astype(dtypes.canonicalize_dtype(value.dtype), copy=False)


def _staged_constant(value: np.ndarray):
    """A concrete array as a staged value of the current builder: a literal conversion for
    0-d values, a constant of the jaxpr otherwise."""
    value = np.asarray(value)
    value = value.astype(dtypes.canonicalize_dtype(value.dtype), copy=False)
    builder = current_builder()
    if value.ndim == 0:
        literal = Literal(value[()], ShapedArray((), value.dtype))
        return ew.convert_element_type.bind(literal, new_dtype=value.dtype, weak_type=False)
    return Tracer(builder, builder.atom(value))


def _finish_array(x, dtype, ndmin):
    if dtype is not None:
        dt = _dtype_arg(dtype)
        if aval(x).dtype != dt or aval(x).weak_type:
            x = ew.convert_element_type.bind(x, new_dtype=dt, weak_type=False)
    ndim = aval(x).ndim
    if ndmin > ndim:
        x = st.reshape.bind(x, new_sizes=(1,) * (ndmin - ndim) + aval(x).shape)
    return x


@implements(np.array)
def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    """Staged values (also inside nested lists, which are stacked) keep their dtype unless
    `dtype=` is given; concrete data becomes a constant of the jaxpr."""
    if has_tracer(object):
        if isinstance(object, Tracer) and object.weak_type and dtype is None:
            dtype = object.dtype     # np.array(python_float) is strongly typed
        result = _finish_array(_stack_leaves(object), dtype, ndmin)
        return copy_of(result) if copy and result is object else result
    dt = None if dtype is None else _dtype_arg(dtype)
    value = np.array(object, dtype=dt, ndmin=ndmin)
    value = value.astype(dtypes.canonicalize_dtype(value.dtype), copy=False)
    if not _staging():
        return value
    return _staged_constant(value)


@implements(np.asarray)
def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    return array(a, dtype=dtype, copy=bool(copy))


for _name in ("asanyarray", "ascontiguousarray"):
    if hasattr(np, _name):
        implements(getattr(np, _name))(lambda a, dtype=None, *args, **kwargs: array(a, dtype=dtype, copy=False))


@implements(np.copy)
def copy(a, order="K", subok=False):
    return copy_of(a) if isinstance(a, Tracer) else array(a)


def copy_of(a: Tracer) -> CopiedTracer:
    """Staged values are immutable, so a copy is the same variable (see CopiedTracer)."""
    return CopiedTracer(a.builder, a.variable)


# ---------------------------------------------------------------------------------------
# Coordinate grids


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """np.meshgrid: each (flattened) input along its own axis of the grid, the first two
    swapped for indexing='xy'; broadcast to the full grid unless sparse. A tuple, as
    NumPy 2 returns."""
    if indexing not in ("xy", "ij"):
        raise ShapeError(f"np.meshgrid: indexing={indexing!r} is not valid",
                         "use indexing='xy' (Cartesian, the default) or 'ij' (matrix)")
    ndim = len(xi)
    axes = list(range(ndim))
    if indexing == "xy" and ndim > 1:
        axes[0], axes[1] = 1, 0
    output = [reshape(x, (1,) * axis + (-1,) + (1,) * (ndim - axis - 1))
              for x, axis in zip(xi, axes)]
    if not sparse:
        output = broadcast_arrays(*output)
    return tuple(output)
