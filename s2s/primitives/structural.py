"""Structural primitives: they move, copy and pick elements without computing new values.

broadcast_in_dim, reshape, transpose, squeeze, expand_dims, concatenate, pad, slice,
dynamic_slice, dynamic_update_slice and rev (a flip). Their parameters are static Python
ints and tuples; only dynamic_slice and dynamic_update_slice take staged start indices,
and those are clamped into range as XLA clamps them, so a window always fits.

Every result keeps its operand's dtype and weak type. Emission writes the NumPy a person
would write (`x.reshape(2, 3)`, `x.T`, `x[:, 1:3]`, `np.concatenate([a, b], axis=1)`),
and calls `rt.` helpers only where NumPy has no one-liner with the same meaning
(clamped dynamic slices, negative or interior padding).
"""
from __future__ import annotations

import builtins
import functools

import numpy as np
from s2s_runtime import indexing as rt_indexing

from s2s import dtypes
from s2s.core import JaxprEqn, Literal, ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import (ATOM, Expr, call, dtype_text, method, py_value, register, slice_text,
                             subscript, typed_scalar)
from s2s.errors import ShapeError
from s2s.passes import (jvp as _jvp, partial_eval as _pe, simplify as _simplify, transpose as _transpose,
                        vmap as _vmap)
from s2s.passes.tangents import instantiate, is_zero, zeros
from s2s.passes.transpose import is_linear
from s2s.primitives import ops
from s2s.staging import Primitive

# ---------------------------------------------------------------------------------------
# Shared checks


def _check_axes(name: str, dims, ndim: int, what: str = "dimensions") -> tuple[int, ...]:
    dims = tuple(dims)
    for d in dims:
        if not isinstance(d, (int, np.integer)) or not 0 <= d < ndim:
            raise ShapeError(f"{name}: {what} {dims} out of range for an array of rank {ndim}")
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{name}: repeated axis in {what} {dims}")
    return dims


def _check_shape(name: str, shape) -> tuple[int, ...]:
    shape = tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ShapeError(f"{name}: shape {shape} must hold non-negative ints")
    return shape


def _check_start_indices(name: str, operand: ShapedArray, starts) -> None:
    if len(starts) != operand.ndim:
        raise ShapeError(f"{name} needs one start index per dimension of the "
                         f"{operand.ndim}-d operand, got {len(starts)}")
    for s in starts:
        if s.shape != () or not dtypes.is_integer(s.dtype):
            raise ShapeError(f"{name} start indices must be integer scalars, got {s.str_short()}")


def _shape_text(shape) -> str:
    return py_value(tuple(shape))


def _literal_operand_safe(rule):
    """Wraps a unary rule: a literal (a 0-d constant) operand becomes `np.full(shape, v)`.

    Literal text such as `0.0` carries no dtype and has no methods, so `0.0.reshape(1)`
    or `np.broadcast_to(0.0, s)` would be wrong (or float64); the result of any of these
    primitives on a scalar constant is that constant at the output shape and dtype.
    """
    def wrapped(eqn, x, *rest):
        if isinstance(eqn.invars[0], Literal):
            out = eqn.outvars[0].aval
            if out.shape == ():
                return typed_scalar(x, out.dtype)
            return call("np.full", Expr(_shape_text(out.shape)), x,
                        dtype=Expr(dtype_text(out.dtype)))
        return rule(eqn, x, *rest)
    return wrapped


def _index_text(items) -> str:
    """`a, b, c` for a subscript, trailing full slices dropped; `...` if nothing is left."""
    items = list(items)
    while items and items[-1] == ":":
        items.pop()
    if not items:
        return "..."
    return ", ".join(items)


# ---------------------------------------------------------------------------------------
# broadcast_in_dim


def _broadcast_in_dim_abstract(x, *, shape, broadcast_dimensions):
    shape = _check_shape("broadcast_in_dim", shape)
    bd = tuple(broadcast_dimensions)
    if len(bd) != x.ndim:
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions {bd} must name one output "
                         f"dimension for each of the operand's {x.ndim} dimensions")
    _check_axes("broadcast_in_dim", bd, len(shape), "broadcast_dimensions")
    if list(bd) != sorted(bd):
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions {bd} must be increasing")
    for i, d in enumerate(bd):
        if x.shape[i] not in (1, shape[d]):
            raise ShapeError(f"broadcast_in_dim: cannot broadcast operand of shape {x.shape} "
                             f"to {shape}: operand dimension {i} has size {x.shape[i]}, "
                             f"output dimension {d} has size {shape[d]}")
    return ShapedArray(shape, x.dtype, x.weak_type)


def _broadcast_in_dim_impl(x, *, shape, broadcast_dimensions):
    x = np.asarray(x)
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        view[d] = x.shape[i]
    return np.broadcast_to(x.reshape(view), shape)


def _emit_broadcast_in_dim(eqn, x):
    shape, bd = eqn.params["shape"], tuple(eqn.params["broadcast_dimensions"])
    ndim_in = eqn.invars[0].aval.ndim
    if bd != tuple(range(len(shape) - ndim_in, len(shape))):
        # Insert the new axes NumPy style (`x[:, None]`) so that plain broadcasting applies.
        first = bd[0] if bd else len(shape)
        items = [":" if d in bd else "None" for d in range(first, len(shape))]
        x = subscript(x, _index_text(items))
    return call("np.broadcast_to", x, Expr(_shape_text(shape)))


broadcast_in_dim = Primitive("broadcast_in_dim", _broadcast_in_dim_abstract, _broadcast_in_dim_impl)
register(broadcast_in_dim, _literal_operand_safe(_emit_broadcast_in_dim), temp_name="bcast")

# ---------------------------------------------------------------------------------------
# reshape


def _reshape_abstract(x, *, new_sizes):
    new_sizes = _check_shape("reshape", new_sizes)
    size = int(np.prod(new_sizes, dtype=np.int64))
    if size != x.size:
        raise ShapeError(f"cannot reshape array of size {x.size} into shape "
                         f"{_shape_text(new_sizes)}")
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


def _emit_reshape(eqn, x):
    sizes = eqn.params["new_sizes"]
    args = [Expr(str(d)) for d in sizes] if sizes else [Expr("()")]
    return method(x, "reshape", *args)


reshape = Primitive("reshape", _reshape_abstract,
                    lambda x, *, new_sizes: np.reshape(x, new_sizes))
register(reshape, _literal_operand_safe(_emit_reshape))

# ---------------------------------------------------------------------------------------
# transpose


def _transpose_abstract(x, *, permutation):
    perm = tuple(permutation)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"transpose: permutation {perm} is not a permutation of the "
                         f"{x.ndim} axes of an array of shape {x.shape}")
    return ShapedArray(tuple(x.shape[p] for p in perm), x.dtype, x.weak_type)


def _emit_transpose(eqn, x):
    perm = tuple(eqn.params["permutation"])
    if perm == (1, 0):
        return Expr(f"{x.wrap(ATOM)}.T")
    return method(x, "transpose", *[Expr(str(p)) for p in perm])


transpose = Primitive("transpose", _transpose_abstract,
                      lambda x, *, permutation: np.transpose(x, permutation))
register(transpose, _literal_operand_safe(_emit_transpose))

# ---------------------------------------------------------------------------------------
# squeeze, expand_dims


def _squeeze_abstract(x, *, dimensions):
    dims = _check_axes("squeeze", dimensions, x.ndim)
    for d in dims:
        if x.shape[d] != 1:
            raise ShapeError(f"cannot select an axis to squeeze out which has size not equal "
                             f"to one (axis {d} of shape {x.shape})")
    return ShapedArray(tuple(s for i, s in enumerate(x.shape) if i not in dims),
                       x.dtype, x.weak_type)


def _axis_arg(dims):
    dims = tuple(sorted(dims))
    return dims[0] if len(dims) == 1 else dims


def _emit_squeeze(eqn, x):
    dims = eqn.params["dimensions"]
    if isinstance(x, SlicedExpr) and all(d in x.singles for d in dims):
        items = [str(x.singles[axis]) if axis in dims else item
                 for axis, item in enumerate(x.items)]
        return subscript(x.base, _index_text(items))
    return call("np.squeeze", x, axis=_axis_arg(dims))


squeeze = Primitive("squeeze", _squeeze_abstract,
                    lambda x, *, dimensions: np.squeeze(x, axis=tuple(dimensions)))
register(squeeze, _literal_operand_safe(_emit_squeeze))


def _expand_dims_abstract(x, *, dimensions):
    out_ndim = x.ndim + len(dimensions)
    dims = _check_axes("expand_dims", dimensions, out_ndim)
    shape = iter(x.shape)
    return ShapedArray(tuple(1 if i in dims else next(shape) for i in range(out_ndim)),
                       x.dtype, x.weak_type)


def _emit_expand_dims(eqn, x):
    dims = set(eqn.params["dimensions"])
    out_ndim = eqn.outvars[0].aval.ndim
    items = ["None" if i in dims else ":" for i in range(out_ndim)]
    leading = 0
    while leading < len(items) and items[leading] == ":":
        leading += 1
    if leading >= 2 and all(item == "None" for item in items[leading:]):
        # `x[..., None]` rather than `x[:, :, None]` when only new axes are at the end.
        items = ["..."] + items[leading:]
    return subscript(x, _index_text(items))


expand_dims = Primitive("expand_dims", _expand_dims_abstract,
                        lambda x, *, dimensions: np.expand_dims(x, tuple(dimensions)))
register(expand_dims, _literal_operand_safe(_emit_expand_dims), temp_name="expand")

# ---------------------------------------------------------------------------------------
# concatenate


def _concatenate_abstract(*xs, dimension):
    if not xs:
        raise ShapeError("need at least one array to concatenate")
    first = xs[0]
    if first.ndim == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    if not isinstance(dimension, (int, np.integer)) or not 0 <= dimension < first.ndim:
        raise ShapeError(f"concatenate: dimension {dimension} out of range for arrays of "
                         f"rank {first.ndim}")
    for i, x in enumerate(xs[1:], 1):
        if x.dtype != first.dtype:
            raise ShapeError("concatenate needs operands of one dtype, got "
                             + ", ".join(a.str_short() for a in xs))
        if x.ndim != first.ndim:
            raise ShapeError(f"all the input arrays must have same number of dimensions, but "
                             f"the array at index 0 has {first.ndim} dimension(s) and the "
                             f"array at index {i} has {x.ndim} dimension(s)")
        for d in range(first.ndim):
            if d != dimension and x.shape[d] != first.shape[d]:
                raise ShapeError(
                    f"all the input array dimensions except for the concatenation axis must "
                    f"match exactly, but along dimension {d}, the array at index 0 has size "
                    f"{first.shape[d]} and the array at index {i} has size {x.shape[d]}")
    shape = list(first.shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return ShapedArray(shape, first.dtype, all(x.weak_type for x in xs))


def _emit_concatenate(eqn, *xs):
    arrays = Expr("[" + ", ".join(x.text for x in xs) + "]")
    dim = eqn.params["dimension"]
    return call("np.concatenate", arrays, axis=dim) if dim else call("np.concatenate", arrays)


concatenate = Primitive("concatenate", _concatenate_abstract,
                        lambda *xs, dimension: np.concatenate(xs, axis=dimension))
register(concatenate, _emit_concatenate)

# ---------------------------------------------------------------------------------------
# pad


def _pad_abstract(x, padding_value, *, padding_config):
    config = tuple(tuple(c) for c in padding_config)
    if padding_value.shape != () or padding_value.dtype != x.dtype:
        raise ShapeError(f"pad needs a scalar padding value of the operand's dtype "
                         f"{x.str_short()}, got {padding_value.str_short()}")
    if len(config) != x.ndim or any(len(c) != 3 for c in config):
        raise ShapeError(f"pad needs one (low, high, interior) triple per dimension of the "
                         f"{x.ndim}-d operand, got {config}")
    shape = []
    for d, (lo, hi, interior) in zip(x.shape, config):
        if interior < 0:
            raise ShapeError(f"pad: interior padding must be non-negative, got {config}")
        size = lo + hi + d + max(d - 1, 0) * interior
        if size < 0:
            raise ShapeError(f"pad: padding {config} of shape {x.shape} leaves a negative size")
        shape.append(size)
    return ShapedArray(shape, x.dtype, x.weak_type)


def _pad_impl(x, padding_value, *, padding_config):
    return rt_indexing.pad(x, padding_value, padding_config)


def _emit_pad(eqn, x, value):
    config = tuple(eqn.params["padding_config"])
    if any(interior for _, _, interior in config):
        return call("rt.pad", x, value, Expr(py_value(config)))
    if all(lo <= 0 and hi <= 0 for lo, hi, _ in config):     # pure cropping: a slice
        items = [slice_text(-lo, hi if hi else None) for lo, hi, _ in config]
        return subscript(x, _index_text(items))
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        return call("rt.pad", x, value, Expr(py_value(config)))
    pairs = tuple((lo, hi) for lo, hi, _ in config)
    width = pairs                       # np.pad's pad_width: per axis, one pair, or one int
    if len(set(pairs)) == 1:
        width = pairs[0] if pairs[0][0] != pairs[0][1] else pairs[0][0]
    literal = eqn.invars[1]
    if isinstance(literal, Literal) and literal.value == 0:
        return call("np.pad", x, Expr(py_value(width)))
    return call("np.pad", x, Expr(py_value(width)), constant_values=value)


pad = Primitive("pad", _pad_abstract, _pad_impl)
register(pad, _literal_operand_safe(_emit_pad))

# ---------------------------------------------------------------------------------------
# slice


def _slice_params(x, start_indices, limit_indices, strides):
    strides = (1,) * x.ndim if strides is None else tuple(strides)
    starts, limits = tuple(start_indices), tuple(limit_indices)
    if not len(starts) == len(limits) == len(strides) == x.ndim:
        raise ShapeError(f"slice needs start, limit and stride for each of the {x.ndim} "
                         f"dimensions, got {starts}, {limits}, {strides}")
    return starts, limits, strides


def _slice_abstract(x, *, start_indices, limit_indices, strides=None):
    starts, limits, strides = _slice_params(x, start_indices, limit_indices, strides)
    shape = []
    for d, start, limit, stride in zip(x.shape, starts, limits, strides):
        if stride < 1:
            raise ShapeError(f"slice strides must be positive, got {strides}")
        if not 0 <= start <= limit <= d:
            raise ShapeError(f"slice [{starts}, {limits}) out of range for shape {x.shape}")
        shape.append((limit - start + stride - 1) // stride)
    return ShapedArray(shape, x.dtype, x.weak_type)


def _slice_impl(x, *, start_indices, limit_indices, strides=None):
    x = np.asarray(x)
    strides = (1,) * x.ndim if strides is None else strides
    return x[tuple(builtins.slice(s, l, st)
                   for s, l, st in zip(start_indices, limit_indices, strides))]


class SlicedExpr(Expr):
    """`x[1:2, :, 3:5]`, remembering its parts: a squeeze of the axes that hold one element
    turns it into `x[1, :, 3:5]`, the way a person indexes with an int."""

    __slots__ = ("base", "items", "singles")

    def __init__(self, base: Expr, items: list[str], singles: dict[int, int]):
        super().__init__(subscript(base, _index_text(items)).text)
        self.base = base
        self.items = items        # one per axis of the operand
        self.singles = singles    # axis -> start, for axes sliced to one element, stride 1


def _emit_slice(eqn, x):
    shape = eqn.invars[0].aval.shape
    p = eqn.params
    strides = p.get("strides") or (1,) * len(shape)
    items, singles = [], {}
    bounds = zip(shape, p["start_indices"], p["limit_indices"], strides)
    for axis, (d, s, l, st) in enumerate(bounds):
        items.append(slice_text(s, None if l == d else l, st))
        if l - s == 1:
            singles[axis] = s
    return SlicedExpr(x, items, singles)


slice = Primitive("slice", _slice_abstract, _slice_impl)
register(slice, _literal_operand_safe(_emit_slice))

# ---------------------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice


def _dynamic_slice_abstract(x, *starts, slice_sizes):
    _check_start_indices("dynamic_slice", x, starts)
    sizes = _check_shape("dynamic_slice", slice_sizes)
    if len(sizes) != x.ndim or any(s > d for s, d in zip(sizes, x.shape)):
        raise ShapeError(f"dynamic_slice: slice sizes {sizes} do not fit in shape {x.shape}")
    return ShapedArray(sizes, x.dtype, x.weak_type)


def _emit_dynamic_slice(eqn, x, *starts):
    return call("rt.dynamic_slice", x, Expr(_tuple_text(starts)),
                Expr(_shape_text(eqn.params["slice_sizes"])))


def _tuple_text(exprs) -> str:
    texts = [e.text for e in exprs]
    return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"


dynamic_slice = Primitive(
    "dynamic_slice", _dynamic_slice_abstract,
    lambda x, *starts, slice_sizes: rt_indexing.dynamic_slice(x, starts, slice_sizes))
register(dynamic_slice, _emit_dynamic_slice, temp_name="slice")


def _dynamic_update_slice_abstract(x, update, *starts):
    _check_start_indices("dynamic_update_slice", x, starts)
    if update.dtype != x.dtype:
        raise ShapeError(f"dynamic_update_slice needs an update of the operand's dtype, got "
                         f"operand {x.str_short()} and update {update.str_short()}")
    if update.ndim != x.ndim or any(u > d for u, d in zip(update.shape, x.shape)):
        raise ShapeError(f"dynamic_update_slice: update of shape {update.shape} does not fit "
                         f"in operand of shape {x.shape}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _emit_dynamic_update_slice(eqn, x, update, *starts):
    return call("rt.dynamic_update_slice", x, update, Expr(_tuple_text(starts)))


dynamic_update_slice = Primitive(
    "dynamic_update_slice", _dynamic_update_slice_abstract,
    lambda x, update, *starts: rt_indexing.dynamic_update_slice(x, update, starts))
register(dynamic_update_slice, _emit_dynamic_update_slice, temp_name="update")

# ---------------------------------------------------------------------------------------
# rev


def _rev_abstract(x, *, dimensions):
    _check_axes("rev", dimensions, x.ndim)
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _emit_rev(eqn, x):
    dims = tuple(sorted(eqn.params["dimensions"]))
    if not dims:
        return x
    if dims == (0,):
        return subscript(x, "::-1")
    return call("np.flip", x, axis=_axis_arg(dims))


rev = Primitive("rev", _rev_abstract,
                lambda x, *, dimensions: np.flip(x, axis=tuple(dimensions)))
register(rev, _literal_operand_safe(_emit_rev))

# NumPy returns views for these (basic slicing, reshape, transpose, ...): a write through
# the result changes the operand too, which the front end's in-place checks must know.
NUMPY_VIEWS = frozenset({slice, squeeze, reshape, transpose, expand_dims, rev})

# ---------------------------------------------------------------------------------------
# Derivatives. Every primitive here is linear in its array operands (not in the start
# indices of the dynamic slices; pad jointly in operand and padding value), so each
# tangent is the same primitive applied to the tangents, and each transpose moves the
# cotangent back to where the operand's elements came from: a broadcast sums, a slice
# pads with zeros, a pad slices, a concatenate splits.

def _concatenate_jvp(primals, tangents, *, dimension):
    out = concatenate.bind(*primals, dimension=dimension)
    return out, concatenate.bind(*[instantiate(t) for t in tangents], dimension=dimension)


def _pad_jvp(primals, tangents, *, padding_config):
    (x, padding_value), (t, t_value) = primals, tangents
    out = pad.bind(x, padding_value, padding_config=padding_config)
    t_value = ops.scalar(0, out.dtype) if is_zero(t_value) else t_value
    return out, pad.bind(instantiate(t), t_value, padding_config=padding_config)


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    x, *starts = primals
    out = dynamic_slice.bind(x, *starts, slice_sizes=slice_sizes)
    return out, dynamic_slice.bind(tangents[0], *starts, slice_sizes=slice_sizes)


def _dynamic_update_slice_jvp(primals, tangents):
    x, update, *starts = primals
    t_x, t_update = tangents[:2]
    out = dynamic_update_slice.bind(x, update, *starts)
    return out, dynamic_update_slice.bind(instantiate(t_x), instantiate(t_update), *starts)


for _prim in (broadcast_in_dim, reshape, transpose, squeeze, expand_dims, slice, rev):
    _jvp.deflinear(_prim)
for _prim, _rule in [(concatenate, _concatenate_jvp), (pad, _pad_jvp),
                     (dynamic_slice, _dynamic_slice_jvp),
                     (dynamic_update_slice, _dynamic_update_slice_jvp)]:
    _jvp.register(_prim, _rule)

# ---------------------------------------------------------------------------------------
# Transposes. `ct` is the output cotangent; a linear operand is a LinearInput marker, the
# others (start indices, a constant padding value) are values and get no cotangent.


def _broadcast_in_dim_transpose(ct, x, *, shape, broadcast_dimensions):
    """Sums over the new dimensions and over the size-1 dimensions that were stretched."""
    stretched = [d for i, d in enumerate(broadcast_dimensions)
                 if x.aval.shape[i] == 1 and shape[d] != 1]
    new = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    axes = tuple(sorted(new + stretched))
    summed = ops.reduce_sum(ct, axes) if axes else ct
    if tuple(summed.shape) != x.aval.shape:
        summed = reshape.bind(summed, new_sizes=x.aval.shape)
    return [summed]


def _reshape_transpose(ct, x, *, new_sizes):
    return [reshape.bind(ct, new_sizes=x.aval.shape)]


def _transpose_transpose(ct, x, *, permutation):
    inverse = tuple(int(p) for p in np.argsort(permutation))
    return [transpose.bind(ct, permutation=inverse)]


def _squeeze_transpose(ct, x, *, dimensions):
    return [expand_dims.bind(ct, dimensions=tuple(sorted(dimensions)))]


def _expand_dims_transpose(ct, x, *, dimensions):
    return [squeeze.bind(ct, dimensions=tuple(sorted(dimensions)))]


def _concatenate_transpose(ct, *xs, dimension):
    """Each linear operand gets its own stretch of the cotangent along `dimension`."""
    cts, offset = [], 0
    for x in xs:
        size = x.aval.shape[dimension]
        if is_linear(x):
            starts = [0] * ct.ndim
            limits = list(ct.shape)
            starts[dimension], limits[dimension] = offset, offset + size
            cts.append(slice.bind(ct, start_indices=tuple(starts), limit_indices=tuple(limits),
                                  strides=None))
        else:
            cts.append(None)
        offset += size
    return cts


def _pad_transpose(ct, x, padding_value, *, padding_config):
    """The operand's cotangent is read back where its elements were placed: undo the edge
    padding (a negative edge cropped, so it pads with zeros) and take every
    (interior + 1)-th element. The padding value was copied to every other position: its
    cotangent is the sum of the cotangent there, the total less the operand's part."""
    unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
    ct_x = ct
    if any(lo or hi for lo, hi, _ in unpad):
        ct_x = pad.bind(ct_x, ops.scalar(0, ct.dtype), padding_config=unpad)
    if any(interior for _, _, interior in padding_config):
        ct_x = slice.bind(ct_x, start_indices=(0,) * ct.ndim, limit_indices=tuple(ct_x.shape),
                          strides=tuple(interior + 1 for _, _, interior in padding_config))
    ct_value = None
    if is_linear(padding_value):
        every = tuple(range(ct.ndim))
        ct_value = ops.reduce_sum(ct, every) - ops.reduce_sum(ct_x, every)
    return [ct_x if is_linear(x) else None, ct_value]


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides=None):
    """Zeros around (and, for strides, between) the sliced elements: a pad."""
    strides = (1,) * ct.ndim if strides is None else tuple(strides)
    config = []
    for d, n, start, stride in zip(x.aval.shape, ct.shape, start_indices, strides):
        end = start + (n - 1) * stride + 1 if n else start   # one past the last element read
        config.append((start, d - end, stride - 1 if n else 0))
    return [pad.bind(ct, ops.scalar(0, ct.dtype), padding_config=tuple(config))]


def _dynamic_slice_transpose(ct, x, *starts, slice_sizes):
    zeros_x = zeros(x.aval.strip_weak_type())
    return [dynamic_update_slice.bind(zeros_x, ct, *starts)] + [None] * len(starts)


def _dynamic_update_slice_transpose(ct, x, update, *starts):
    """The operand's cotangent is ct with the overwritten window zeroed; the update's is
    that window (both clamp the starts alike, so they agree on where it lies)."""
    ct_x = ct_update = None
    if is_linear(x):
        ct_x = dynamic_update_slice.bind(ct, zeros(update.aval.strip_weak_type()), *starts)
    if is_linear(update):
        ct_update = dynamic_slice.bind(ct, *starts, slice_sizes=update.aval.shape)
    return [ct_x, ct_update] + [None] * len(starts)


def _rev_transpose(ct, x, *, dimensions):
    return [rev.bind(ct, dimensions=dimensions)]


for _prim, _rule in [(broadcast_in_dim, _broadcast_in_dim_transpose),
                     (reshape, _reshape_transpose), (transpose, _transpose_transpose),
                     (squeeze, _squeeze_transpose), (expand_dims, _expand_dims_transpose),
                     (concatenate, _concatenate_transpose), (pad, _pad_transpose),
                     (slice, _slice_transpose), (dynamic_slice, _dynamic_slice_transpose),
                     (dynamic_update_slice, _dynamic_update_slice_transpose),
                     (rev, _rev_transpose)]:
    _transpose.register(_prim, _transpose.skip_zero(_rule))

# ---------------------------------------------------------------------------------------
# StableHLO lowering. None of these broadcast their operands; a scalar literal operand
# arrives as a 0-d constant, which every rule below accepts like any other operand.



def _in_type(eqn, i: int = 0) -> str:
    return _hlo.tensor_type(eqn.invars[i].aval)


def _ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def _lower_broadcast_in_dim(ctx, eqn, x, **_):
    dims = _ints(eqn.params["broadcast_dimensions"])
    return [ctx.op(f"stablehlo.broadcast_in_dim {x}, dims = [{dims}] : "
                   f"({_in_type(eqn)}) -> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_reshape(ctx, eqn, x, **_):
    """reshape, squeeze and expand_dims: all the same row-major relabelling."""
    if eqn.invars[0].aval.shape == eqn.outvars[0].aval.shape:
        return [x]
    return [ctx.op(f"stablehlo.reshape {x} : ({_in_type(eqn)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


def _lower_transpose(ctx, eqn, x, **_):
    perm = _ints(eqn.params["permutation"])
    return [ctx.op(f"stablehlo.transpose {x}, dims = [{perm}] : "
                   f"({_in_type(eqn)}) -> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_concatenate(ctx, eqn, *xs, **_):
    if len(xs) == 1:
        return [xs[0]]
    types = ", ".join(_in_type(eqn, i) for i in range(len(xs)))
    return [ctx.op(f"stablehlo.concatenate {', '.join(xs)}, dim = {int(eqn.params['dimension'])} : "
                   f"({types}) -> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_pad(ctx, eqn, x, value, **_):
    config = [tuple(c) for c in eqn.params["padding_config"]]
    low, high, interior = (_ints(c[k] for c in config) for k in range(3))
    value_type = _hlo.tensor_type(ShapedArray((), eqn.invars[0].aval.dtype))
    return [ctx.op(f"stablehlo.pad {x}, {value}, low = [{low}], high = [{high}], "
                   f"interior = [{interior}] : ({_in_type(eqn)}, {value_type}) -> "
                   f"{_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_slice(ctx, eqn, x, **_):
    p = eqn.params
    ndim = eqn.invars[0].aval.ndim
    strides = p.get("strides") or (1,) * ndim
    ranges = ", ".join(f"{int(s)}:{int(l)}" if st == 1 else f"{int(s)}:{int(l)}:{int(st)}"
                       for s, l, st in zip(p["start_indices"], p["limit_indices"], strides))
    return [ctx.op(f"stablehlo.slice {x} [{ranges}] : ({_in_type(eqn)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


_HLO_INDEX_DTYPE = np.dtype(np.int64)


def _lower_starts(ctx, eqn, starts, first: int):
    """The start index operands converted to one integer type (XLA clamps them itself,
    into [0, dim - size], as the impl does). Returns (names, their scalar type)."""
    t = _hlo.tensor_type(ShapedArray((), _HLO_INDEX_DTYPE))
    names = []
    for v, name in zip(eqn.invars[first:], starts):
        if v.aval.dtype != _HLO_INDEX_DTYPE:
            name = ctx.op(f"stablehlo.convert {name} : ({_hlo.tensor_type(v.aval)}) -> {t}", "start")
        names.append(name)
    return names, t


def _lower_dynamic_slice(ctx, eqn, x, *starts, **_):
    names, t = _lower_starts(ctx, eqn, starts, 1)
    sizes = _ints(eqn.params["slice_sizes"])
    operands = ", ".join([x] + names)
    types = ", ".join([_in_type(eqn)] + [t] * len(names))
    return [ctx.op(f"stablehlo.dynamic_slice {operands}, sizes = [{sizes}] : ({types}) -> "
                   f"{_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_dynamic_update_slice(ctx, eqn, x, update, *starts, **_):
    names, t = _lower_starts(ctx, eqn, starts, 2)
    operands = ", ".join([x, update] + names)
    types = ", ".join([_in_type(eqn), _in_type(eqn, 1)] + [t] * len(names))
    return [ctx.op(f"stablehlo.dynamic_update_slice {operands} : ({types}) -> "
                   f"{_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_rev(ctx, eqn, x, **_):
    dims = tuple(sorted(eqn.params["dimensions"]))
    if not dims:
        return [x]
    return [ctx.op(f"stablehlo.reverse {x}, dims = [{_ints(dims)}] : {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


for _prim, _rule in [(broadcast_in_dim, _lower_broadcast_in_dim), (reshape, _lower_reshape),
                     (squeeze, _lower_reshape), (expand_dims, _lower_reshape),
                     (transpose, _lower_transpose), (concatenate, _lower_concatenate),
                     (pad, _lower_pad), (slice, _lower_slice),
                     (dynamic_slice, _lower_dynamic_slice),
                     (dynamic_update_slice, _lower_dynamic_update_slice), (rev, _lower_rev)]:
    _hlo.register(_prim, _rule)

# ---------------------------------------------------------------------------------------
# Simplification: a broadcast (or expand_dims) of a broadcast is one broadcast_in_dim of
# the source. Transposed reductions produce chains like broadcast -> expand_dims ->
# broadcast; folding them keeps emitted gradients to one `np.broadcast_to`. A reshape
# that undoes a reshape is dropped, and a transpose of a transpose is one (or none).


def _fold_broadcast(eqn, producer):
    inner = producer(eqn.invars[0])
    if inner is not None and inner.primitive is squeeze and eqn.primitive is broadcast_in_dim:
        return _broadcast_unsqueezed(eqn, inner)
    if inner is None or inner.primitive is not broadcast_in_dim:
        return None
    out_shape = eqn.outvars[0].aval.shape
    if eqn.primitive is broadcast_in_dim:
        outer = eqn.params["broadcast_dimensions"]
    else:   # expand_dims: input dim i lands on the i-th output dim that was not inserted
        inserted = {d % len(out_shape) for d in eqn.params["dimensions"]}
        outer = tuple(d for d in range(len(out_shape)) if d not in inserted)
    params = {"shape": tuple(out_shape),
              "broadcast_dimensions": tuple(outer[d] for d in inner.params["broadcast_dimensions"])}
    return JaxprEqn(broadcast_in_dim, [inner.invars[0]], eqn.outvars, params, eqn.source_info)


def _broadcast_unsqueezed(eqn, squeezed):
    """A broadcast of `squeeze(y)` as one broadcast of `y`: its length-1 axes broadcast
    too, each to an output axis between those of its neighbours (batching a keepdims
    reduction writes `np.broadcast_to(np.squeeze(d, axis=1)[:, None], (128, 10))`, which
    is `np.broadcast_to(d, (128, 10))`). None when no such axis is free."""
    source = squeezed.invars[0]
    removed = set(squeezed.params["dimensions"])
    kept = iter(eqn.params["broadcast_dimensions"])
    out_ndim = len(eqn.params["shape"])
    targets, previous = [], -1
    for axis in range(source.aval.ndim):
        if axis not in removed:
            previous = next(kept)
            targets.append(previous)
            continue
        following = [d for d in eqn.params["broadcast_dimensions"] if d > previous]
        bound = following[0] if following else out_ndim
        if previous + 1 >= bound:
            return None
        previous += 1
        targets.append(previous)
    return JaxprEqn(broadcast_in_dim, [source], eqn.outvars,
                    {"shape": tuple(eqn.params["shape"]), "broadcast_dimensions": tuple(targets)},
                    eqn.source_info)


def _undo_reshape(eqn, producer):
    """A reshape (or squeeze, or expand_dims) of a reshape back to the shape it started
    from is that start: batching a `keepdims` reduction leaves `sum.reshape(128, 1)` then
    a squeeze of that axis, which reads better as the sum itself. All three keep C order,
    so the elements are where they were."""
    inner = producer(eqn.invars[0])
    if inner is None or inner.primitive not in (reshape, squeeze, expand_dims):
        return None
    source, out = inner.invars[0], eqn.outvars[0].aval
    return source if (source.aval.shape, source.aval.dtype) == (out.shape, out.dtype) else None


def _compose_transposes(eqn, producer):
    """A transpose of a transpose is one transpose, or none when they cancel: a loop's
    backward step reads a recomputed `X.T` through the transpose of a dot, which would
    otherwise be written `X.T.T @ g`."""
    inner = producer(eqn.invars[0])
    if inner is None or inner.primitive is not transpose:
        return None
    outer, first = eqn.params["permutation"], inner.params["permutation"]
    composed = tuple(first[p] for p in outer)
    source = inner.invars[0]
    if composed == tuple(range(len(composed))):
        return source
    return JaxprEqn(transpose, [source], eqn.outvars, {"permutation": composed}, eqn.source_info)


_simplify.register(transpose, _compose_transposes)
# Views in NumPy, folded by XLA into what reads them: loops recompute them, never save them.
for _prim in (transpose, broadcast_in_dim, reshape, expand_dims, squeeze):
    _pe.defcheap(_prim)
_simplify.register(broadcast_in_dim, _fold_broadcast)
_simplify.register(expand_dims, lambda eqn, producer: _fold_broadcast(eqn, producer)
                   or _undo_reshape(eqn, producer))
_simplify.register(reshape, _undo_reshape)
_simplify.register(squeeze, _undo_reshape)
_simplify.register_repeating(broadcast_in_dim)

# ---------------------------------------------------------------------------------------
# Batching. The batch axis stays where it is: each rule restates its parameters for an
# operand with one more axis (a slice takes all of it, a transpose leaves it in place).
# Only reshape needs the batch at one end, and only concatenate and dynamic_update_slice
# copy an unbatched operand per example, since their operands must all have one rank.
# A dynamic slice whose start indices are batched reads (or writes) a different window
# in each example: it becomes a gather of the window's elements, with XLA's clamping.


def _batch_broadcast_in_dim(axis, args, dims, *, shape, broadcast_dimensions):
    (x,), (d,) = args, dims
    # Just after where the operand's previous axis goes: broadcast_dimensions stay increasing.
    out_dim = broadcast_dimensions[d - 1] + 1 if d else 0
    moved = _vmap.insert_at((b + (b >= out_dim) for b in broadcast_dimensions), d, out_dim)
    return broadcast_in_dim.bind(x, shape=_vmap.insert_at(shape, out_dim, axis.size),
                                 broadcast_dimensions=moved), out_dim


def _batch_reshape(axis, args, dims, *, new_sizes):
    """Row-major order keeps each example's elements together only with the batch at
    either end; a batch in the middle is moved to the front first."""
    (x,), (d,) = args, dims
    if d and d == _vmap.ndim(x) - 1:
        return reshape.bind(x, new_sizes=tuple(new_sizes) + (axis.size,)), len(new_sizes)
    x = _vmap.move_axis(x, d, 0)
    return reshape.bind(x, new_sizes=(axis.size,) + tuple(new_sizes)), 0


def _batch_transpose(axis, args, dims, *, permutation):
    (x,), (d,) = args, dims
    return transpose.bind(x, permutation=_vmap.insert_at((p + (p >= d) for p in permutation), d, d)), d


def _batch_squeeze(axis, args, dims, *, dimensions):
    (x,), (d,) = args, dims
    out = squeeze.bind(x, dimensions=tuple(_vmap.batched_axis(a, d) for a in dimensions))
    return out, d - sum(a < d for a in dimensions)


def _batch_expand_dims(axis, args, dims, *, dimensions):
    (x,), (d,) = args, dims
    out_ndim = _vmap.ndim(x) - 1 + len(dimensions)
    kept = [i for i in range(out_ndim) if i not in dimensions]   # where x's axes land
    out_dim = kept[d - 1] + 1 if d else 0
    return expand_dims.bind(x, dimensions=tuple(a + (a >= out_dim) for a in dimensions)), out_dim


def _batch_concatenate(axis, args, dims, *, dimension):
    out_dim = next(d for d in dims if d is not None)
    xs = [_vmap.to_dim(x, d, out_dim, axis.size) for x, d in zip(args, dims)]
    return concatenate.bind(*xs, dimension=_vmap.batched_axis(dimension, out_dim)), out_dim


def _batch_pad(axis, args, dims, *, padding_config):
    """A batched padding value (each example pads with its own) is written over a padding
    of zeros, where a mask of the padding (the same in every example) says."""
    (x, value), (d, value_dim) = args, dims
    config = tuple(tuple(c) for c in padding_config)
    batched_config = config if d is None else _vmap.insert_at(config, d, (0, 0, 0))
    if value_dim is None:
        return pad.bind(x, value, padding_config=batched_config), d
    padded = pad.bind(x, ops.scalar(0, _vmap.aval_of(x).dtype), padding_config=batched_config)
    example = _vmap.example_shape(x, d)
    is_x = pad.bind(ops.full(example, True, dtypes.bool_), ops.scalar(False, dtypes.bool_),
                    padding_config=config)
    out_dim, rank = d or 0, len(example)
    aligned = [_vmap.align_for_broadcast(v, vd, out_dim, rank)
               for v, vd in [(is_x, None), (padded, d), (value, value_dim)]]
    return ops.select(*aligned), out_dim


def _batch_slice(axis, args, dims, *, start_indices, limit_indices, strides=None):
    (x,), (d,) = args, dims
    strides = None if strides is None else _vmap.insert_at(strides, d, 1)
    return slice.bind(x, start_indices=_vmap.insert_at(start_indices, d, 0),
                      limit_indices=_vmap.insert_at(limit_indices, d, axis.size), strides=strides), d


def _batch_rev(axis, args, dims, *, dimensions):
    (x,), (d,) = args, dims
    return rev.bind(x, dimensions=tuple(_vmap.batched_axis(a, d) for a in dimensions)), d


def _window_start(start, dim, highest: int, shape):
    """A start index clamped into [0, highest] as XLA clamps it: a Python int where that is
    known while staging (a literal start, a window as wide as its axis), else a default
    int (wide enough to add a window's offsets to), batched along axis 0 of `shape`."""
    if highest == 0 or isinstance(start, Literal):
        return min(max(int(start.value), 0), highest) if highest else 0
    index = dtypes.default_int()
    if _vmap.aval_of(start).dtype != index:
        start = ops.convert(start, index)
    start = ops.clamp(ops.literal(0, index), start, ops.literal(highest, index))
    return start if dim is None else ops.broadcast_in_dim(start, shape, (0,))


def _shifted(positions, start, op):
    """`op(positions, start)` (`op`: ops.add or ops.sub) for a window's start; nothing
    staged for a start of 0."""
    if isinstance(start, int):
        if not start:
            return positions
        start = ops.literal(start, dtypes.default_int())
    return op(positions, start)


def _read_per_example(x, dim, indices):
    """Example b's `x[i0, i1, ...]`: a gather of index arrays with the batch at axis 0,
    one per axis of an example of `x`; a batched `x` has its batch axis read at b."""
    axes = tuple(range(len(indices)))
    if dim is not None:
        indices = [ops.iota(_vmap.shape(indices[0]), 0)] + list(indices)
        axes = (dim,) + tuple(_vmap.batched_axis(a, dim) for a in axes)
    return ops.gather(x, *indices, axes=axes)


def _batch_dynamic_slice(axis, args, dims, *, slice_sizes):
    (x, *starts), (d, *start_dims) = args, dims
    if all(sd is None for sd in start_dims):
        zero = ops.literal(0, dtypes.default_int())
        return dynamic_slice.bind(x, *_vmap.insert_at(starts, d, zero),
                                  slice_sizes=_vmap.insert_at(slice_sizes, d, axis.size)), d
    example = _vmap.example_shape(x, d)
    window = (axis.size,) + tuple(slice_sizes)
    indices = [_shifted(ops.iota(window, k + 1), _window_start(s, sd, n - size, window), ops.add)
               for k, (s, sd, n, size) in enumerate(zip(starts, start_dims, example, slice_sizes))]
    return _read_per_example(x, d, indices), 0


def _batch_dynamic_update_slice(axis, args, dims):
    """With batched starts every element of the result reads the update where it falls in
    its example's window, and the operand elsewhere."""
    (x, update, *starts), (x_dim, update_dim, *start_dims) = args, dims
    if all(sd is None for sd in start_dims):
        out_dim = update_dim if x_dim is None else x_dim
        x = _vmap.to_dim(x, x_dim, out_dim, axis.size)
        update = _vmap.to_dim(update, update_dim, out_dim, axis.size)
        zero = ops.literal(0, dtypes.default_int())
        return dynamic_update_slice.bind(x, update, *_vmap.insert_at(starts, out_dim, zero)), out_dim
    sizes = _vmap.example_shape(update, update_dim)
    if 0 in sizes:       # an empty window writes nothing
        return x, x_dim
    example = _vmap.example_shape(x, x_dim)
    out_shape = (axis.size,) + example
    conditions, offsets = [], []
    for k, (s, sd, n, size) in enumerate(zip(starts, start_dims, example, sizes)):
        offset = _shifted(ops.iota(out_shape, k + 1),
                          _window_start(s, sd, n - size, out_shape), ops.sub)
        if size == n:          # the window spans the axis: every offset lies in it
            offsets.append(offset)
            continue
        zero, last = (ops.literal(i, dtypes.default_int()) for i in (0, size - 1))
        conditions += [ops.ge(offset, zero), ops.le(offset, last)]
        offsets.append(ops.clamp(zero, offset, last))
    written = _read_per_example(update, update_dim, offsets)
    if not conditions:         # the update covers the operand
        return written, 0
    x = x if x_dim is None else _vmap.move_axis(x, x_dim, 0)   # else it broadcasts as it is
    return ops.select(functools.reduce(ops.and_, conditions), written, x), 0


for _prim, _rule in [(broadcast_in_dim, _batch_broadcast_in_dim), (reshape, _batch_reshape),
                     (transpose, _batch_transpose), (squeeze, _batch_squeeze),
                     (expand_dims, _batch_expand_dims), (concatenate, _batch_concatenate),
                     (pad, _batch_pad), (slice, _batch_slice), (rev, _batch_rev),
                     (dynamic_slice, _batch_dynamic_slice),
                     (dynamic_update_slice, _batch_dynamic_update_slice)]:
    _vmap.register(_prim, _rule)
