"""NumPy's shape-manipulation functions, staged as structural primitives.

reshape, transpose, swapaxes, moveaxis, rollaxis, ravel, squeeze, expand_dims, concatenate,
stack, hstack, vstack (row_stack), dstack, column_stack, append, split, array_split, tile,
repeat, flip, fliplr, flipud, rot90, roll, broadcast_to, broadcast_arrays, broadcast_shapes,
atleast_1d/2d/3d, pad, tril, triu, diag and diagonal.

Every argument that decides a shape (axes, sizes, repeats, shifts, pad widths) must be a
static Python value; the arrays may be staged values, NumPy arrays or Python scalars.
Outside a builder each function runs eagerly on NumPy values (`bind` runs the impls).
Python scalars become arrays of NumPy's default dtype, as `np.asarray` would make them,
so results have the dtypes NumPy gives.
"""
from __future__ import annotations

import builtins
import operator

import numpy as np

from s2s import dtypes
from s2s.errors import ConcretizationError, ShapeError, UnsupportedFunctionError
from s2s.numpy_api._base import (NUMPY_IMPLS, aval, convert, implements, normalize_axes, normalize_axis,
                                 operand, shape_str, stack_operands, with_dtype)
from s2s.primitives import elementwise as ew
from s2s.primitives import indexing as ix
from s2s.primitives import ops
from s2s.primitives import structural as st
from s2s.staging import Tracer

# ---------------------------------------------------------------------------------------
# Helpers


def static_int(value, what: str) -> int:
    """`value` as a Python int; a staged value here is a concretization error."""
    if isinstance(value, Tracer):
        raise ConcretizationError(
            f"{what} must be a static Python int, but it is a staged array "
            f"({value.aval.str_short()}) whose value is only known when the function runs",
            "shapes, axes and sizes must be known when the function is staged: compute them "
            "from `x.shape` or Python ints, or mark the argument static with static_argnums")
    if isinstance(value, (bool, np.bool_)):
        raise ShapeError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ShapeError(f"{what} must be an int, got {value!r}") from None


def static_ints(values, what: str) -> tuple[int, ...]:
    if isinstance(values, (int, np.integer, Tracer)):
        return (static_int(values, what),)
    if isinstance(values, np.ndarray):
        values = values.tolist() if values.ndim else [values.item()]
    return tuple(static_int(v, what) for v in values)


def _shape(x) -> tuple[int, ...]:
    return aval(x).shape


def _ndim(x) -> int:
    return len(aval(x).shape)


# ---------------------------------------------------------------------------------------
# reshape, ravel, transpose, axes


def _resolve_shape(shape, size: int) -> tuple[int, ...]:
    shape = static_ints(shape, "a reshape size")
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1:
        raise ShapeError("can only specify one unknown dimension")
    if any(d < -1 for d in shape):
        raise ShapeError(f"negative dimensions not allowed (shape {shape})")
    if unknown:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape array of size {size} into shape "
                             f"{shape_str(shape)}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ShapeError(f"cannot reshape array of size {size} into shape {shape_str(shape)}")
    return shape


def _check_order(order, fn: str):
    if order not in ("C", "A", "K", None):
        spelled = ("np.reshape(x.T, shape[::-1]).T" if fn == "reshape" else "x.T.ravel()")
        raise UnsupportedFunctionError(
            f"{fn} with order={order!r} is not supported: s2s reads arrays in C order only",
            f"transpose explicitly: {fn}(x, ..., order='F') is `{spelled}`")


@implements(np.shape)
def shape(a) -> tuple[int, ...]:
    """A staged array's shape is static: a tuple of Python ints, as `x.shape` is."""
    return _shape(a)


@implements(np.ndim)
def ndim(a) -> int:
    return _ndim(a)


@implements(np.size)
def size(a, axis=None) -> int:
    shape_ = _shape(a)
    if axis is None:
        return int(np.prod(shape_, dtype=np.int64))
    return shape_[normalize_axis(axis, len(shape_))]


@implements(np.reshape)
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """np.reshape (one -1 allowed). Only C order."""
    _check_order(order, "reshape")
    if shape is None:
        shape = newshape
    if shape is None:
        raise ShapeError("reshape needs a shape")
    a = operand(a)
    old = _shape(a)
    new = _resolve_shape(shape, aval(a).size)
    if new == old:
        return a
    return st.reshape.bind(a, new_sizes=new)


@implements(np.ravel)
def ravel(a, order="C"):
    _check_order(order, "ravel")
    a = operand(a)
    return reshape(a, (aval(a).size,))


def _transpose_axes(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    axes = static_ints(axes, "an axis")
    if len(axes) != ndim:
        raise ShapeError(f"axes don't match array: got {len(axes)} axes for an array of "
                         f"dimension {ndim}")
    perm = tuple(normalize_axis(ax, ndim) for ax in axes)
    if len(set(perm)) != ndim:
        raise ShapeError(f"repeated axis in transpose: {axes}")
    return perm


def _permute(a, perm):
    if perm == tuple(range(len(perm))):
        return a
    return st.transpose.bind(a, permutation=tuple(perm))


@implements(np.transpose)
def transpose(a, axes=None):
    a = operand(a)
    return _permute(a, _transpose_axes(axes, _ndim(a)))


@implements(np.swapaxes)
def swapaxes(a, axis1, axis2):
    a = operand(a)
    ndim = _ndim(a)
    i = normalize_axis(static_int(axis1, "axis1"), ndim)
    j = normalize_axis(static_int(axis2, "axis2"), ndim)
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return _permute(a, tuple(perm))


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    a = operand(a)
    ndim = _ndim(a)
    source = [normalize_axis(s, ndim, "source") for s in static_ints(source, "source")]
    destination = [normalize_axis(d, ndim, "destination")
                   for d in static_ints(destination, "destination")]
    if len(source) != len(destination):
        raise ShapeError("`source` and `destination` arguments must have the same number "
                         "of elements")
    if len(set(source)) != len(source):
        raise ShapeError(f"repeated axis in `source` argument {tuple(source)}")
    if len(set(destination)) != len(destination):
        raise ShapeError(f"repeated axis in `destination` argument {tuple(destination)}")
    order = [n for n in range(ndim) if n not in source]
    for dest, src in sorted(zip(destination, source)):
        order.insert(dest, src)
    return _permute(a, tuple(order))


@implements(np.rollaxis)
def rollaxis(a, axis, start=0):
    """np.rollaxis: `axis` moved to before position `start` (NumPy keeps it for old code;
    it is a moveaxis whose destination depends on which side of `start` the axis is)."""
    a = operand(a)
    ndim = _ndim(a)
    axis = normalize_axis(static_int(axis, "axis"), ndim)
    start = static_int(start, "start")
    if not -ndim <= start <= ndim:
        raise ShapeError(f"rollaxis: start {start} is out of bounds for an array of dimension "
                         f"{ndim}: it must lie in [{-ndim}, {ndim}]")
    if start < 0:
        start += ndim
    if axis < start:
        start -= 1
    return moveaxis(a, axis, start) if axis != start else a


@implements(np.squeeze)
def squeeze(a, axis=None):
    a = operand(a)
    shape = _shape(a)
    if axis is None:
        dims = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        dims = normalize_axes(static_ints(axis, "axis"), len(shape))
        for d in dims:
            if shape[d] != 1:
                raise ShapeError("cannot select an axis to squeeze out which has size not "
                                 f"equal to one (axis {d} of an array of shape {shape})")
    if not dims:
        return a
    return st.squeeze.bind(a, dimensions=tuple(sorted(dims)))


@implements(np.expand_dims)
def expand_dims(a, axis):
    a = operand(a)
    axes = static_ints(axis, "axis")
    out_ndim = _ndim(a) + len(axes)
    dims = normalize_axes(axes, out_ndim)
    return st.expand_dims.bind(a, dimensions=tuple(sorted(dims)))


# ---------------------------------------------------------------------------------------
# Broadcasting


def _broadcast_error(shape, target):
    return ShapeError(f"cannot broadcast an array of shape {shape_str(shape)} to shape "
                      f"{shape_str(target)}: each dimension must be 1 or match, aligned "
                      "from the right")


def broadcast_in_dim(x, shape, broadcast_dimensions):
    """lax.broadcast_in_dim; returns `x` itself when nothing changes."""
    x = operand(x)
    shape = tuple(shape)
    if _shape(x) == shape and tuple(broadcast_dimensions) == tuple(range(len(shape))):
        return x
    return st.broadcast_in_dim.bind(x, shape=shape,
                                    broadcast_dimensions=tuple(broadcast_dimensions))


@implements(np.broadcast_to)
def broadcast_to(array, shape, subok=False):
    x = operand(array)
    target = static_ints(shape, "a shape entry")
    if any(d < 0 for d in target):
        raise ShapeError(f"all elements of broadcast shape must be non-negative, got {target}")
    old = _shape(x)
    lead = len(target) - len(old)
    if lead < 0 or any(d not in (1, t) for d, t in zip(old, target[lead:])):
        raise _broadcast_error(old, target)
    return broadcast_in_dim(x, target, tuple(range(lead, len(target))))


@implements(np.broadcast_shapes)
def broadcast_shapes(*shapes):
    return ew.broadcast_shapes(*[static_ints(s, "a shape entry") for s in shapes])


@implements(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    args = [operand(a) for a in args]
    target = ew.broadcast_shapes(*[_shape(a) for a in args])
    return tuple(broadcast_to(a, target) for a in args)


def _atleast(nd: int, arys):
    out = []
    for a in arys:
        a = operand(a)
        shape = _shape(a)
        if len(shape) < nd:
            if nd == 3 and len(shape) == 2:
                a = reshape(a, shape + (1,))
            elif nd == 3 and len(shape) == 1:
                a = reshape(a, (1,) + shape + (1,))
            else:
                a = reshape(a, (1,) * (nd - len(shape)) + shape)
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)   # NumPy 2: a tuple for several


@implements(np.atleast_1d)
def atleast_1d(*arys):
    return _atleast(1, arys)


@implements(np.atleast_2d)
def atleast_2d(*arys):
    return _atleast(2, arys)


@implements(np.atleast_3d)
def atleast_3d(*arys):
    return _atleast(3, arys)


# ---------------------------------------------------------------------------------------
# Joining and splitting


def _arrays(arrays, fn: str) -> list:
    if isinstance(arrays, (Tracer, np.ndarray)):
        # NumPy iterates over the first axis of an array passed as the sequence.
        if not _ndim(arrays):
            return [operand(arrays)]
        return [ops.index_in_dim(arrays, i) for i in range(_shape(arrays)[0])]
    arrays = [operand(a) for a in arrays]
    if not arrays:
        raise ShapeError(f"need at least one array to {fn}")
    return arrays


def _joined(arrays, out, fn: str) -> list:
    """The operands of a joining function (`fn` names it in errors), which writes no `out=`."""
    if out is not None:
        raise UnsupportedFunctionError(f"{fn}(..., out=) is not supported",
                                       "use the returned array instead of out=")
    return _arrays(arrays, fn)


def index_concatenation(maker, index):
    """`np.r_[...]` or `np.c_[...]` (`maker`) with staged items, as NumPy builds them: an
    array or number is one piece, a slice `a:b:c` is `np.arange(a, b, c)` (a complex step
    `a:b:nj` is `np.linspace(a, b, n)`); `np.r_` joins the pieces along the first axis,
    `np.c_` along the last, with 1-d pieces as columns and numbers as 1x1."""
    name = "r_" if maker is np.r_ else "c_"
    pieces = []
    for item in index if isinstance(index, tuple) else (index,):
        if isinstance(item, str):
            raise UnsupportedFunctionError(f"np.{name}[{item!r}, ...]: its string directives are not supported",
                                           "join with np.concatenate(..., axis=k) or np.stack instead")
        if isinstance(item, slice):
            start = 0 if item.start is None else item.start
            step = 1 if item.step is None else item.step
            if isinstance(step, complex):
                item = NUMPY_IMPLS[np.linspace](start, item.stop, int(abs(step)))
            else:
                item = NUMPY_IMPLS[np.arange](start, item.stop, step)
        piece = atleast_1d(item)
        if maker is np.c_ and _ndim(piece) == 1:
            piece = reshape(piece, (-1, 1)) if _ndim(item) else reshape(piece, (1, 1))
        pieces.append(piece)
    return concatenate(pieces, axis=0 if maker is np.r_ else -1)


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    arrays = _joined(arrays, out, "concatenate")
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    arrays = with_dtype(arrays, dtype)
    ndim = _ndim(arrays[0])
    if ndim == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(static_int(axis, "axis"), ndim)
    for i, a in enumerate(arrays[1:], 1):
        if _ndim(a) != ndim:
            raise ShapeError(f"all the input arrays must have same number of dimensions, but "
                             f"the array at index 0 has {ndim} dimension(s) and the array at "
                             f"index {i} has {_ndim(a)} dimension(s)")
    if len(arrays) == 1:
        return arrays[0]
    return st.concatenate.bind(*arrays, dimension=axis)


@implements(np.stack)
def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    arrays = _joined(arrays, out, "stack")
    axis = normalize_axis(static_int(axis, "axis"), _ndim(arrays[0]) + 1)
    return stack_operands(arrays, axis, dtype)


@implements(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = atleast_1d(*_arrays(tup, "hstack"))
    arrays = list(arrays) if isinstance(arrays, tuple) else [arrays]
    axis = 0 if _ndim(arrays[0]) == 1 else 1
    return concatenate(arrays, axis=axis, dtype=dtype)


@implements(np.vstack)
def vstack(tup, *, dtype=None, casting="same_kind"):
    arrays = atleast_2d(*_arrays(tup, "vstack"))
    arrays = list(arrays) if isinstance(arrays, tuple) else [arrays]
    return concatenate(arrays, axis=0, dtype=dtype)


if hasattr(np, "row_stack"):     # deprecated in NumPy 2.0; an alias of vstack while it lasts
    implements(np.row_stack)(vstack)


@implements(np.dstack)
def dstack(tup):
    arrays = atleast_3d(*_arrays(tup, "dstack"))
    arrays = list(arrays) if isinstance(arrays, tuple) else [arrays]
    return concatenate(arrays, axis=2)


@implements(np.column_stack)
def column_stack(tup):
    arrays = []
    for a in _arrays(tup, "column_stack"):
        if _ndim(a) < 2:
            a = reshape(a, (-1, 1))
        arrays.append(a)
    return concatenate(arrays, axis=1)


@implements(np.append)
def append(arr, values, axis=None):
    arr, values = operand(arr), operand(values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


def _take_range(a, axis: int, start: int, stop: int):
    """`a[..., start:stop]` on `axis` (Python's slice bounds: clipped, empty when reversed)."""
    start, stop, _ = builtins.slice(start, stop).indices(_shape(a)[axis])
    return ops.slice_in_dim(a, start, builtins.max(start, stop), axis)


def _take(a, axis: int, index: np.ndarray):
    """`a[..., index]` for a constant integer array `index` on `axis`: a gather (which puts
    the indexed axis first) and a transpose moving it back."""
    picked = ix.gather.bind(a, index.astype(dtypes.default_int()), axes=(axis,))
    back = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, _ndim(a)))
    return ops.transpose(picked, back)


@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    ary = operand(ary)
    ndim = _ndim(ary)
    axis = normalize_axis(static_int(axis, "axis"), ndim)
    total = _shape(ary)[axis]
    if isinstance(indices_or_sections, (int, np.integer, Tracer)):
        sections = static_int(indices_or_sections, "the number of sections")
        if sections <= 0:
            raise ShapeError("number sections must be larger than 0.")
        each, extras = divmod(total, sections)
        sizes = [0] + extras * [each + 1] + (sections - extras) * [each]
        points = np.cumsum(sizes).tolist()
    else:
        points = [0] + list(static_ints(indices_or_sections, "a split index")) + [total]
    return [_take_range(ary, axis, start, stop) for start, stop in zip(points[:-1], points[1:])]


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    ary = operand(ary)
    if isinstance(indices_or_sections, (int, np.integer, Tracer)):
        sections = static_int(indices_or_sections, "the number of sections")
        axis_n = normalize_axis(static_int(axis, "axis"), _ndim(ary))
        if sections <= 0 or _shape(ary)[axis_n] % sections:
            raise ShapeError("array split does not result in an equal division")
    return array_split(ary, indices_or_sections, axis)


def _split_along(fn_name: str, min_ndim: int, axis: int):
    def fn(ary, indices_or_sections):
        ary = operand(ary)
        if _ndim(ary) < min_ndim:
            raise ShapeError(f"{fn_name} only works on arrays of {min_ndim} or more dimensions")
        # hsplit splits 1-d arrays along their only axis.
        return split(ary, indices_or_sections, 0 if _ndim(ary) == 1 else axis)
    fn.__name__ = fn_name
    return fn


hsplit = implements(np.hsplit)(_split_along("hsplit", 1, 1))
vsplit = implements(np.vsplit)(_split_along("vsplit", 2, 0))
dsplit = implements(np.dsplit)(_split_along("dsplit", 3, 2))

# ---------------------------------------------------------------------------------------
# Repeating, flipping, rolling


@implements(np.tile)
def tile(A, reps):
    A = operand(A)
    reps = static_ints(reps, "a repetition count")
    if any(r < 0 for r in reps):
        raise ShapeError(f"negative dimensions are not allowed (reps {reps})")
    shape = _shape(A)
    n = max(len(shape), len(reps))
    shape = (1,) * (n - len(shape)) + shape
    reps = (1,) * (n - len(reps)) + reps
    A = reshape(A, shape)
    if all(r == 1 for r in reps):
        return A
    # Broadcast to (r0, d0, r1, d1, ...), leaving out the repeat counts of 1, and merge.
    wide, dims = [], []
    for r, d in zip(reps, shape):
        if r != 1:
            wide.append(r)
        dims.append(len(wide))
        wide.append(d)
    A = broadcast_in_dim(A, tuple(wide), tuple(dims))
    return reshape(A, tuple(r * d for r, d in zip(reps, shape)))


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    a = operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    shape = _shape(a)
    axis = normalize_axis(static_int(axis, "axis"), len(shape))
    if isinstance(repeats, Tracer):
        raise ConcretizationError(
            "np.repeat needs static repeat counts: the result's shape depends on them",
            "pass Python ints or a NumPy array of counts known when the function is staged")
    counts = np.asarray(repeats)
    if not (np.issubdtype(counts.dtype, np.integer) or counts.size == 0):
        raise ShapeError(f"repeats must be integers, got {repeats!r}")
    if counts.size == 0:
        counts = counts.astype(np.int64)
    if np.any(counts < 0):
        raise ShapeError("repeats may not contain negative values.")
    if counts.size == 1:
        r = int(counts.reshape(()))
        wide = shape[:axis + 1] + (r,) + shape[axis + 1:]
        out = broadcast_in_dim(a, wide, tuple(i for i in range(len(wide)) if i != axis + 1))
        return reshape(out, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])
    if counts.ndim != 1 or counts.size != shape[axis]:
        raise ShapeError(f"operands could not be broadcast together with shape "
                         f"({shape[axis]},) ({counts.size},)")
    return _take(a, axis, np.repeat(np.arange(shape[axis]), counts))


def _rev(a, axes):
    axes = tuple(sorted(set(axes)))
    if not axes:
        return a
    return st.rev.bind(a, dimensions=axes)


@implements(np.flip)
def flip(m, axis=None):
    m = operand(m)
    ndim = _ndim(m)
    axes = normalize_axes(static_ints(axis, "axis") if axis is not None else None, ndim)
    return _rev(m, axes)


def _flip_along(m, axis: int):
    """`m` reversed along `axis`, which it must have (NumPy's message otherwise)."""
    m = operand(m)
    if _ndim(m) <= axis:
        raise ShapeError(f"Input must be >= {axis + 1}-d.")
    return _rev(m, (axis,))


@implements(np.fliplr)
def fliplr(m):
    return _flip_along(m, 1)


@implements(np.flipud)
def flipud(m):
    return _flip_along(m, 0)


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    m = operand(m)
    ndim = _ndim(m)
    axes = static_ints(axes, "an axis")
    if len(axes) != 2:
        raise ShapeError("len(axes) must be 2.")
    a0, a1 = (normalize_axis(ax, ndim) for ax in axes)
    if a0 == a1:
        raise ShapeError("Axes must be different.")
    k = static_int(k, "k") % 4
    if k == 0:
        return m
    if k == 2:
        return _rev(m, (a0, a1))
    perm = list(range(ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return _permute(_rev(m, (a1,)), tuple(perm))
    return _rev(_permute(m, tuple(perm)), (a1,))


@implements(np.roll)
def roll(a, shift, axis=None):
    a = operand(a)
    if axis is None:
        shape = _shape(a)
        return reshape(roll(ravel(a), shift, 0), shape)
    ndim = _ndim(a)
    shifts = static_ints(shift, "shift")
    axes = static_ints(axis, "axis")
    try:
        pairs = np.broadcast(np.asarray(shifts), np.asarray(axes))
    except ValueError:
        raise ShapeError("'shift' and 'axis' should be scalars or 1D sequences") from None
    total = {}
    for s, ax in pairs:
        ax = normalize_axis(int(ax), ndim)
        total[ax] = total.get(ax, 0) + int(s)
    shape = _shape(a)
    for ax, s in sorted(total.items()):
        n = shape[ax]
        if n == 0 or s % n == 0:
            continue
        s %= n
        head = _take_range(a, ax, n - s, None)
        tail = _take_range(a, ax, None, n - s)
        a = st.concatenate.bind(head, tail, dimension=ax)
    return a


# ---------------------------------------------------------------------------------------
# pad


def _pad_pairs(pad_width, ndim: int) -> list[tuple[int, int]]:
    if isinstance(pad_width, Tracer):
        static_int(pad_width, "pad_width")
    widths = np.asarray(pad_width)
    if widths.size and not np.issubdtype(widths.dtype, np.integer):
        raise ShapeError(f"`pad_width` must be of integral type, got {pad_width!r}")
    try:
        widths = np.broadcast_to(widths.astype(np.int64), (ndim, 2))
    except ValueError:
        raise ShapeError(f"pad_width {pad_width!r} does not fit an array of dimension "
                         f"{ndim}: give an int, a (before, after) pair, or one pair per "
                         "axis") from None
    if np.any(widths < 0):
        raise ShapeError("index can't contain negative values")
    return [(int(lo), int(hi)) for lo, hi in widths]


_INDEX_MODES = ("edge", "wrap", "reflect", "symmetric")


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad in modes constant, edge, wrap, reflect and symmetric."""
    array = operand(array)
    shape, dt = _shape(array), aval(array).dtype
    pairs = _pad_pairs(pad_width, len(shape))
    if mode == "constant":
        extra = set(kwargs) - {"constant_values"}
        if extra:
            raise ShapeError(f"unsupported keyword arguments for mode 'constant': {sorted(extra)}")
        values = kwargs.get("constant_values", 0)
        if isinstance(values, Tracer) or np.ndim(values) == 0:
            if isinstance(values, Tracer) and values.ndim:
                raise UnsupportedFunctionError(
                    "np.pad with staged per-axis constant_values is not supported",
                    "pass a scalar constant value, or pad one axis at a time")
            value = convert(values if isinstance(values, Tracer) else _scalar(values), dt)
            if all(p == (0, 0) for p in pairs):
                return array
            return st.pad.bind(array, value,
                               padding_config=tuple((lo, hi, 0) for lo, hi in pairs))
        values = np.broadcast_to(np.asarray(values), (len(shape), 2))
        for ax, ((lo, hi), (v_lo, v_hi)) in enumerate(zip(pairs, values)):
            for side, (width, v) in enumerate(((lo, v_lo), (hi, v_hi))):
                if width:
                    config = [(0, 0, 0)] * len(shape)
                    config[ax] = (width, 0, 0) if side == 0 else (0, width, 0)
                    array = st.pad.bind(array, convert(_scalar(v), dt),
                                        padding_config=tuple(config))
        return array
    if mode in _INDEX_MODES:
        if kwargs.get("reflect_type", "even") != "even":
            raise UnsupportedFunctionError(
                f"np.pad mode={mode!r} with reflect_type='odd' is not supported",
                "use the default reflect_type='even'")
        extra = set(kwargs) - {"reflect_type"}
        if extra:
            raise ShapeError(f"unsupported keyword arguments for mode {mode!r}: {sorted(extra)}")
        for ax, (lo, hi) in enumerate(pairs):
            if not lo and not hi:
                continue
            # These modes only pick elements: NumPy's own np.pad on an arange says which.
            try:
                index = np.pad(np.arange(shape[ax]), (lo, hi), mode=mode)
            except ValueError as e:
                raise ShapeError(f"{e} (axis {ax})") from None
            array = _take(array, ax, index)
        return array
    raise UnsupportedFunctionError(
        f"np.pad mode={mode!r} is not supported",
        "supported modes: 'constant', 'edge', 'wrap', 'reflect', 'symmetric'")


def _scalar(v):
    """A static padding value as a NumPy scalar, so it converts like NumPy casts it."""
    v = np.asarray(v)
    return v[()] if v.ndim == 0 else v


# ---------------------------------------------------------------------------------------
# Triangles and diagonals


def _offset(x, k: int):
    """`x + k` for a staged integer array; `x` itself for k == 0."""
    if k == 0:
        return x
    return ew.add.bind(x, convert(k, aval(x).dtype))


def _triangle(m, k, keep_lower: bool):
    m = operand(m)
    shape = _shape(m)
    if len(shape) == 0:
        raise ShapeError(f"{'tril' if keep_lower else 'triu'} needs an array of at least "
                         "one dimension, got a scalar")
    return ops.triangle(m, static_int(k, "k"), keep_lower)


@implements(np.tril)
def tril(m, k=0):
    """The lower triangle (`j <= i + k`), by comparing row and column iotas."""
    return _triangle(m, k, keep_lower=True)


@implements(np.triu)
def triu(m, k=0):
    """The upper triangle (`j >= i + k`), by comparing row and column iotas."""
    return _triangle(m, k, keep_lower=False)


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    a = operand(a)
    shape = _shape(a)
    if len(shape) < 2:
        raise ShapeError("diag requires an array of at least two dimensions")
    offset = static_int(offset, "offset")
    ax1 = normalize_axis(axis1, len(shape), "axis1")
    ax2 = normalize_axis(axis2, len(shape), "axis2")
    if ax1 == ax2:
        raise ShapeError("axis1 and axis2 cannot be the same")
    n1, n2 = shape[ax1], shape[ax2]
    length = max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))
    rows = _offset(ops.iota((length,), 0), max(-offset, 0))
    cols = _offset(ops.iota((length,), 0), max(offset, 0))
    out = ix.gather.bind(a, rows, cols, axes=(ax1, ax2))    # (length,) + remaining dims
    return moveaxis(out, 0, -1)


@implements(np.diag)
def diag(v, k=0):
    v = operand(v)
    shape = _shape(v)
    k = static_int(k, "k")
    if len(shape) == 2:
        return diagonal(v, k)
    if len(shape) != 1:
        raise ShapeError("Input must be 1- or 2-d.")
    n = shape[0] + abs(k)
    # Put v along the columns of an n-by-n array (shifted by k), keep the k-th diagonal.
    line = v if k == 0 else st.pad.bind(v, ops.literal(0, aval(v).dtype),
                                        padding_config=((max(k, 0), max(-k, 0), 0),))
    square = broadcast_in_dim(line, (n, n), (1,))
    on_diagonal = ew.eq.bind(_offset(ops.iota((n, n), 0), k), ops.iota((n, n), 1))
    return ew.select.bind(on_diagonal, square, ops.literal(0, aval(v).dtype))
