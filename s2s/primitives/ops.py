"""The lax-level op layer that derivative rules are written with.

Rules (jvp, transpose, partial eval) stage equations, and they need other families'
primitives to do so: elementwise's transpose sums (a reduction), structural's transpose of
a broadcast sums, reductions broadcast back. Importing the families from each other would
tie them in a cycle, and writing rules with the NumPy surface (`s2s.numpy_api`) would tie
the layer below to the one above it. So each op here binds one primitive that it looks up
by name in the registry when it is called, by the one mechanism of `s2s.passes.lax_ops`
(`@binds("name")`, `bind(op, ...)`, `primitive(op)`), whose ops it offers too: this module
imports no family module, and every family (and the NumPy surface above) can import it.
A family reaches another family's primitive only here: `ops.argmax(...)` stages it,
`ops.primitive(ops.pad)` recognizes or writes an equation of it.

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
from s2s.passes.lax_ops import (add_any, bind, binds, broadcast_in_dim, expand_dims, primitive,  # noqa: F401
                                reduce_sum, reshape, transpose)
from s2s.passes.lax_ops import ints as _ints
from s2s.staging import Tracer


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


@binds("iota")
def iota(shape, dimension: int, dtype=None):
    """Indices along `dimension` in an array of `shape` (the default int unless `dtype`)."""
    dtype = dtypes.default_int() if dtype is None else np.dtype(dtype)
    return bind(iota, dtype=dtype, shape=_ints(shape), dimension=dimension)


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
    @binds(name)
    def op(x):
        return bind(op, x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"The `{name}` primitive."
    return op


def _binary(name: str):
    @binds(name)
    def op(x, y):
        return bind(op, x, y)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"The `{name}` primitive (operands broadcast as NumPy's do)."
    return op


exp, sqrt = _unary("exp"), _unary("sqrt")
sin, cos, sinh, cosh = _unary("sin"), _unary("cos"), _unary("sinh"), _unary("cosh")
floor, ceil = _unary("floor"), _unary("ceil")
log, sign, abs_ = _unary("log"), _unary("sign"), _unary("abs")
neg, not_ = _unary("neg"), _unary("not")
expm1, log1p, lgamma, digamma = _unary("expm1"), _unary("log1p"), _unary("lgamma"), _unary("digamma")
erf, erfc = _unary("erf"), _unary("erfc")
real, imag, conj = _unary("real"), _unary("imag"), _unary("conj")   # of complex operands
complex_from_parts = _binary("complex")   # real + i imag, exactly
add, sub, mul, and_ = _binary("add"), _binary("sub"), _binary("mul"), _binary("and")
eq, ne, lt, le, gt, ge = (_binary(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
div, minimum = _binary("div"), _binary("min")     # integers: `div` rounds toward zero
pow_ = _binary("pow")


@binds("generator_state")
def generator_state(source, words: int):
    """The state of the NumPy generator `source` (a `core.HostObject`), as `words` 64-bit
    words (`random.state_words`)."""
    return bind(generator_state, source=source, words=words)


@binds("generator_swap")
def generator_swap(state, source, words: int):
    """Gives the generator `source` the state `state` (of `generator_state`); returns the
    state it had."""
    return bind(generator_swap, state, source=source, words=words)


@binds("select")
def select(pred, on_true, on_false):
    """`on_true` where `pred` holds, else `on_false` (np.where without promotion)."""
    return bind(select, pred, on_true, on_false)


@binds("clamp")
def clamp(lo, x, hi):
    """`x` clipped into [lo, hi] (np.clip with operands of one dtype)."""
    return bind(clamp, lo, x, hi)


@binds("convert_element_type")
def convert(x, dtype, weak_type: bool = False):
    """`x` converted to `dtype` (a strong result unless `weak_type`)."""
    return bind(convert, x, new_dtype=np.dtype(dtype), weak_type=weak_type)


def trunc(x):
    """Rounds a float toward zero: ceil below zero, floor above."""
    return select(lt(x, literal(0, _dtype(x))), ceil(x), floor(x))


# ---------------------------------------------------------------------------------------
# Shapes


def broadcast_to(x, shape):
    """`x` broadcast to `shape`, right-aligned as NumPy aligns; `x` itself when it already
    has that shape."""
    shape = _ints(shape)
    if tuple(x.shape) == shape:
        return x
    return broadcast_in_dim(x, shape, range(len(shape) - len(x.shape), len(shape)))


@binds("squeeze")
def squeeze(x, dimensions):
    """`x` without its length-1 axes `dimensions`."""
    return bind(squeeze, x, dimensions=tuple(sorted(dimensions)))


@binds("concatenate")
def concatenate(xs, dimension: int):
    """The arrays `xs` (of one dtype) joined along `dimension` (non-negative)."""
    return bind(concatenate, *xs, dimension=dimension)


@binds("pad")
def pad(x, padding_value, padding_config):
    """`x` padded by `(low, high, interior)` per axis with the scalar `padding_value`."""
    return bind(pad, x, padding_value, padding_config=tuple(padding_config))


@binds("slice")
def slice(x, start_indices, limit_indices, strides=None):  # noqa: A001  (lax's name)
    """The static slice `x[start:limit:stride, ...]` (unit strides when None)."""
    strides = (1,) * len(x.shape) if strides is None else _ints(strides)
    return bind(slice, x, start_indices=_ints(start_indices),
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


@binds("dynamic_slice")
def dynamic_slice(x, start_indices, slice_sizes):
    """The block of `x` of `slice_sizes` from the staged `start_indices` (clamped in)."""
    return bind(dynamic_slice, x, *start_indices, slice_sizes=_ints(slice_sizes))


@binds("dynamic_update_slice")
def dynamic_update_slice(x, update, start_indices):
    """`x` with the block at the staged `start_indices` (clamped in) set to `update`."""
    return bind(dynamic_update_slice, x, update, *start_indices)


def dynamic_update_index(x, update, index):
    """`x` with `x[index] = update` along axis 0, for a staged scalar `index` (clamped)."""
    zero = literal(0, _dtype(index))
    return dynamic_update_slice(x, expand_dims(update, (0,)), [index] + [zero] * (len(x.shape) - 1))


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


@binds("reduce_max")
def reduce_max(x, axes):
    """The largest element of `x` over `axes`."""
    return bind(reduce_max, x, axes=_ints(axes))


@binds("reduce_min")
def reduce_min(x, axes):
    """The smallest element of `x` over `axes`."""
    return bind(reduce_min, x, axes=_ints(axes))


@binds("reduce_or")
def reduce_or(x, axes):
    """Whether any element of the boolean `x` over `axes` holds."""
    return bind(reduce_or, x, axes=_ints(axes))


@binds("reduce_prod")
def reduce_prod(x, axes):
    """The product of `x` over `axes` (dtype preserved)."""
    return bind(reduce_prod, x, axes=_ints(axes))


@binds("gather")
def gather(x, *indices, axes):
    """`x[i0, i1, ...]` with integer index arrays of one shape on the distinct `axes`."""
    return bind(gather, x, *indices, axes=_ints(axes))


@binds("argmax")
def argmax(x, axis: int, index_dtype):
    """The index of the first largest element of `x` along `axis`, as `index_dtype`."""
    return bind(argmax, x, axis=axis, index_dtype=np.dtype(index_dtype))


# ---------------------------------------------------------------------------------------
# Control flow (bodies are closed jaxprs, staged by the caller)


@binds("cond")
def cond(index, *operands, branches):
    """The results of `branches[index]` on `operands` (a boolean `index` picks 0 or 1)."""
    return bind(cond, index, *operands, branches=tuple(branches))


@binds("while_loop")
def while_loop(*carry, cond_jaxpr, body_jaxpr):
    """The carry after `body_jaxpr` ran while `cond_jaxpr` held (no bound on the steps),
    bodies reading no constants."""
    return bind(while_loop, *carry, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                cond_nconsts=0, body_nconsts=0, max_iters=None)
