"""The lax-level op layer that derivative rules are written with.

Rules (jvp, transpose, partial eval) stage equations, and they need other families'
primitives to do so: elementwise's transpose sums (a reduction), structural's transpose of
a broadcast sums, reductions broadcast back. Importing the families from each other would
tie them in a cycle, and writing rules with the NumPy surface (`s2s.numpy_api`) would tie
the layer below to the one above it. So each op here binds one primitive that it looks up
by name in the registry (`staging.PRIMITIVES`) when it is called: this module imports no
family module, and every family (and the NumPy surface above) can import it.

Ops are thin and typed: parameters are explicit (`axes`, `dimension`, `dtype`), nothing is
promoted, nothing is validated beyond what the primitive's abstract eval checks. A few
build a small fixed composition (`trunc`, `eye`, `tril`, `full`) because the NumPy surface
and the rules stage the very same equations for them.

The rule for rules: Python operators on staged values (`t * y`, `1 - y * y`, `-t`, `x >= 0`)
may stay where the operands already share one floating dtype (a Python scalar adopts it),
since NumPy's and lax's semantics agree there. Anything that converts a dtype, makes a
constant of a given dtype, or does what a NumPy function would (`where`, `broadcast_to`,
`tril`) goes through an op here.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray
from s2s.staging import PRIMITIVES, Tracer


def _bind(name: str, *args, **params):
    return PRIMITIVES[name].bind(*args, **params)


def _ints(values) -> tuple[int, ...]:
    """Static sizes or axes as a tuple of Python ints (as the jaxpr's params print them)."""
    return tuple(int(v) for v in values)


def _dtype(x) -> np.dtype:
    """The dtype of an operand: a staged value, a literal or a NumPy value."""
    return x.aval.dtype if isinstance(x, (Tracer, Literal)) else np.asarray(x).dtype


# ---------------------------------------------------------------------------------------
# Constants


def _python_scalar(value, dtype: np.dtype):
    """A Python (or NumPy) scalar as the Python scalar type of `dtype`, range-checked."""
    if isinstance(value, np.generic):
        value = value.item()
    kind = dtype.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        if isinstance(value, int) and not isinstance(value, bool):
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise OverflowError(f"Python integer {value} out of bounds for {dtype}")
        return int(value)
    if kind == "f":
        return float(value)
    return complex(value)


_SCALAR_AVALS: dict = {}   # (dtype as given, weak) -> the aval of a literal of that type


def literal(value, dtype, weak: bool = True) -> Literal:
    """A scalar literal of `dtype`, written inline in the equation that reads it. Weak by
    default: an internal constant then never decides whether a result is weak, and the
    Python emitter writes it bare (`x * 2.0`)."""
    aval = _SCALAR_AVALS.get((dtype, weak))
    if aval is None:   # (avals are never changed: the literals of one type share theirs)
        aval = _SCALAR_AVALS[(dtype, weak)] = ShapedArray((), dtype, weak)
    return Literal(_python_scalar(value, aval.dtype), aval)


def scalar(value, dtype):
    """A strongly typed NumPy scalar of `dtype` (staged as a literal of exactly that type,
    as `pad`'s padding value must be)."""
    return np.asarray(value, dtype)[()]


def full(shape, value, dtype):
    """An array of `shape` and `dtype` with every element `value`: a broadcast literal, so
    no constant is baked into the jaxpr."""
    return broadcast_in_dim(literal(value, dtype, weak=False), shape, ())


def iota(shape, dimension: int, dtype=None):
    """Indices along `dimension` in an array of `shape` (the default int unless `dtype`)."""
    dtype = dtypes.default_int() if dtype is None else np.dtype(dtype)
    return _bind("iota", dtype=dtype, shape=_ints(shape), dimension=dimension)


def index_grid(n: int, m: int, k: int = 0):
    """(row + k, column) index arrays of shape (n, m), as int32 iotas: comparing them picks
    a diagonal (`np.eye`) or a triangle (`np.tri`)."""
    rows = iota((n, m), 0, dtypes.int32)
    cols = iota((n, m), 1, dtypes.int32)
    if k:
        rows = add(rows, literal(k, dtypes.int32))
    return rows, cols


def eye(n: int, m: int | None = None, k: int = 0, dtype=float):
    """Ones where column == row + k (NumPy's `np.eye`), zeros elsewhere."""
    rows, cols = index_grid(n, n if m is None else m, k)
    mask = eq(rows, cols)
    dtype = np.dtype(dtype)
    return mask if dtype == dtypes.bool_ else convert(mask, dtype)


# ---------------------------------------------------------------------------------------
# Elementwise


def _unary(name: str):
    def op(x):
        return _bind(name, x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"The `{name}` primitive."
    return op


def _binary(name: str):
    def op(x, y):
        return _bind(name, x, y)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"The `{name}` primitive (operands broadcast as NumPy's do)."
    return op


exp, sqrt = _unary("exp"), _unary("sqrt")
sin, cos, sinh, cosh = _unary("sin"), _unary("cos"), _unary("sinh"), _unary("cosh")
floor, ceil = _unary("floor"), _unary("ceil")
log, sign, abs_ = _unary("log"), _unary("sign"), _unary("abs")
neg = _unary("neg")
real, imag, conj = _unary("real"), _unary("imag"), _unary("conj")   # of complex operands
complex_from_parts = _binary("complex")   # real + i imag, exactly
add, sub, mul, and_ = _binary("add"), _binary("sub"), _binary("mul"), _binary("and")
eq, ne, lt, le, ge = (_binary(n) for n in ("eq", "ne", "lt", "le", "ge"))
div, minimum = _binary("div"), _binary("min")     # integers: `div` rounds toward zero


def select(pred, on_true, on_false):
    """`on_true` where `pred` holds, else `on_false` (np.where without promotion)."""
    return _bind("select", pred, on_true, on_false)


def clamp(lo, x, hi):
    """`x` clipped into [lo, hi] (np.clip with operands of one dtype)."""
    return _bind("clamp", lo, x, hi)


def convert(x, dtype, weak_type: bool = False):
    """`x` converted to `dtype` (a strong result unless `weak_type`)."""
    return _bind("convert_element_type", x, new_dtype=np.dtype(dtype), weak_type=weak_type)


def trunc(x):
    """Rounds a float toward zero: ceil below zero, floor above."""
    return select(lt(x, literal(0, _dtype(x))), ceil(x), floor(x))


# ---------------------------------------------------------------------------------------
# Shapes


def broadcast_in_dim(x, shape, broadcast_dimensions):
    """`x` broadcast to `shape`; its axis i becomes axis `broadcast_dimensions[i]`."""
    return _bind("broadcast_in_dim", x, shape=_ints(shape),
                 broadcast_dimensions=_ints(broadcast_dimensions))


def broadcast_to(x, shape):
    """`x` broadcast to `shape`, right-aligned as NumPy aligns; `x` itself when it already
    has that shape."""
    shape = _ints(shape)
    if tuple(x.shape) == shape:
        return x
    return broadcast_in_dim(x, shape, range(len(shape) - len(x.shape), len(shape)))


def reshape(x, shape):
    """`x` with the same elements in `shape` (C order); `x` itself when nothing changes."""
    shape = _ints(shape)
    return x if tuple(x.shape) == shape else _bind("reshape", x, new_sizes=shape)


def transpose(x, permutation):
    """`x` with its axes permuted; `x` itself for the identity permutation."""
    permutation = _ints(permutation)
    if permutation == tuple(range(len(permutation))):
        return x
    return _bind("transpose", x, permutation=permutation)


def expand_dims(x, dimensions):
    """`x` with new axes of length 1 at `dimensions` (positions in the result)."""
    return _bind("expand_dims", x, dimensions=tuple(sorted(dimensions)))


def squeeze(x, dimensions):
    """`x` without its length-1 axes `dimensions`."""
    return _bind("squeeze", x, dimensions=tuple(sorted(dimensions)))


def concatenate(xs, dimension: int):
    """The arrays `xs` (of one dtype) joined along `dimension` (non-negative)."""
    return _bind("concatenate", *xs, dimension=dimension)


def pad(x, padding_value, padding_config):
    """`x` padded by `(low, high, interior)` per axis with the scalar `padding_value`."""
    return _bind("pad", x, padding_value, padding_config=tuple(padding_config))


def slice(x, start_indices, limit_indices, strides=None):  # noqa: A001  (lax's name)
    """The static slice `x[start:limit:stride, ...]` (unit strides when None)."""
    strides = (1,) * len(x.shape) if strides is None else _ints(strides)
    return _bind("slice", x, start_indices=_ints(start_indices),
                 limit_indices=_ints(limit_indices), strides=strides)


def slice_in_dim(x, start: int, limit: int, axis: int = 0):
    """`x[start:limit]` along `axis` (0 <= start <= limit); `x` itself when that is all of
    it, as NumPy's basic indexing stages it."""
    shape = tuple(x.shape)
    if (start, limit) == (0, shape[axis]):
        return x
    starts, limits = [0] * len(shape), list(shape)
    starts[axis], limits[axis] = start, limit
    return slice(x, starts, limits)


def index_in_dim(x, index: int, axis: int = 0):
    """`x[index]` along `axis` for a static, non-negative `index`: a one-wide slice with
    that axis squeezed out."""
    shape = tuple(x.shape)
    starts, limits = [0] * len(shape), list(shape)
    starts[axis], limits[axis] = index, index + 1
    return squeeze(slice(x, starts, limits), (axis,))


def dynamic_index(x, index):
    """`x[index]` along axis 0 for a staged scalar `index` in range."""
    return gather(x, index, axes=(0,))


def dynamic_update_index(x, update, index):
    """`x` with `x[index] = update` along axis 0, for a staged scalar `index` (clamped)."""
    zero = literal(0, _dtype(index))
    return _bind("dynamic_update_slice", x, expand_dims(update, (0,)), index, *[zero] * (len(x.shape) - 1))


def triangle(x, k: int, lower: bool):
    """The lower (`col <= row + k`) or upper (`col >= row + k`) triangle of the last two
    axes of `x` (of a 1-d `x` repeated as rows), zeros elsewhere."""
    shape = tuple(x.shape)
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (shape[0], shape[0])
    row = iota((rows, cols), 0)
    if k:
        row = add(row, literal(k, row.dtype))
    col = iota((rows, cols), 1)
    mask = ge(row, col) if lower else le(row, col)
    return select(mask, x, literal(0, _dtype(x)))


def tril(x, k: int = 0):
    return triangle(x, k, lower=True)


def triu(x, k: int = 0):
    return triangle(x, k, lower=False)


# ---------------------------------------------------------------------------------------
# Reductions and indexing


def reduce_sum(x, axes):
    """The sum of `x` over `axes` (dtype preserved)."""
    return _bind("reduce_sum", x, axes=_ints(axes))


def reduce_max(x, axes):
    """The largest element of `x` over `axes`."""
    return _bind("reduce_max", x, axes=_ints(axes))


def reduce_min(x, axes):
    """The smallest element of `x` over `axes`."""
    return _bind("reduce_min", x, axes=_ints(axes))


def reduce_or(x, axes):
    """Whether any element of the boolean `x` over `axes` holds."""
    return _bind("reduce_or", x, axes=_ints(axes))


def reduce_prod(x, axes):
    """The product of `x` over `axes` (dtype preserved)."""
    return _bind("reduce_prod", x, axes=_ints(axes))


def gather(x, *indices, axes):
    """`x[i0, i1, ...]` with integer index arrays of one shape on the distinct `axes`."""
    return _bind("gather", x, *indices, axes=_ints(axes))
