"""NumPy indexing, staged: `x[index]`, np.take, np.take_along_axis, np.compress.

`getitem(x, index)` implements NumPy's indexing rules with the structural and indexing
primitives, choosing the cheapest one for each kind of index:

- static ints and slices (negative steps included) become one `slice`, a `squeeze` of
  the axes the ints picked and a `rev` of the axes read backwards (emitted as `x[2, ::-1]`
  reads: `x[2, :][::-1]`);
- `None` (and `...`) insert axes with one `expand_dims`;
- a staged scalar integer becomes `dynamic_slice` of size 1 and a `squeeze`, its
  negative values wrapped with a `select`;
- integer arrays (static NumPy arrays or staged values) and static boolean masks (turned
  into integer arrays with `np.nonzero` at staging time) become one `gather`, followed by
  a `transpose` when NumPy's rule puts the indexed dimensions in the middle: where the
  advanced indices sit next to each other their dimensions replace them, otherwise they
  come first. A scalar int counts as an advanced index when an array index is present,
  and `None`, `:` or `...` (even an empty one) between advanced indices separate them.

A boolean mask that is itself staged has a data-dependent result shape and is refused
with a hint to use np.where. Static out-of-range indices raise NumPy's message; staged
indices cannot be checked, and are clamped into range as XLA clamps them.
"""
from __future__ import annotations

import builtins
import operator

import numpy as np

from s2s import dtypes
from s2s.errors import ConcretizationError, ShapeError
from s2s.numpy_api._base import aval, convert, has_tracer, implements, normalize_axis, operand
from s2s.numpy_api.math import add, multiply, where
from s2s.numpy_api.shaping import broadcast_to, ravel, stack, static_int, static_ints, transpose
from s2s.primitives import elementwise as ew
from s2s.primitives import indexing as ix
from s2s.primitives import structural as st
from s2s.staging import JaxprBuilder, Tracer

_VALID_INDICES = ("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) "
                  "and integer or boolean arrays are valid indices")

STAGED_MASK_HELP = (
    "the number of selected elements depends on the mask's values, so the result's shape "
    "is unknown while staging. Keep the shape with `np.where(mask, x, 0)` (or a masked "
    "reduction such as `np.sum(np.where(mask, x, 0))`), or pass the mask as a static "
    "NumPy array")

SLICE_HELP = (
    "slice bounds must be known when the function is staged (Python ints, values computed "
    "from shapes). For a fixed-size window at a staged offset use a dynamic slice, e.g. "
    "`s2s.numpy_api.indexing.dynamic_slice(x, (i,), (size,))`")


# ---------------------------------------------------------------------------------------
# Index normalization


def _out_of_bounds(index, axis: int, size: int) -> ShapeError:
    return ShapeError(f"index {index} is out of bounds for axis {axis} with size {size}")


def _static_index_array(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    """Bounds-checks a static integer index array; returns it non-negative, default int."""
    bad = (array < -size) | (array >= size)
    if np.any(bad):
        raise _out_of_bounds(int(array[bad].flat[0]), axis, size)
    return np.where(array < 0, array + size, array).astype(dtypes.default_int())


def _wrap_negative(index, size: int):
    """`index + size` where a staged index is negative (NumPy's negative indexing)."""
    dt = aval(index).dtype
    if dtypes.is_integer(dt) and np.iinfo(dt).min < 0:
        if np.iinfo(dt).max < size:
            index = convert(index, dtypes.default_int())
            dt = aval(index).dtype
        negative = ew.lt.bind(index, convert(0, dt))
        return ew.select.bind(negative, ew.add.bind(index, convert(size, dt)), index)
    return index


def _index_array(index, axis: int, size: int):
    """An integer index array, non-negative: checked statically, or wrapped when staged."""
    if isinstance(index, Tracer):
        return _wrap_negative(index, size)
    return _static_index_array(np.asarray(index), axis, size)


def _broadcast_indices(arrays):
    shapes = [aval(a).shape for a in arrays]
    try:
        batch = ew.broadcast_shapes(*shapes)
    except ShapeError:
        raise ShapeError("shape mismatch: indexing arrays could not be broadcast together "
                         "with shapes " + " ".join(_shape_str(s) for s in shapes)) from None
    return batch, [a if aval(a).shape == batch else broadcast_to(a, batch) for a in arrays]


def _shape_str(shape) -> str:
    return "(" + ",".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


# ---------------------------------------------------------------------------------------
# Classifying the entries of an index


class _Entry:
    """One entry of the index tuple: kind, value, and its position in the tuple."""

    __slots__ = ("kind", "value", "item")

    def __init__(self, kind: str, value, item: int):
        self.kind = kind      # new, ellipsis, slice, int, dyn, array, mask, bool0
        self.value = value
        self.item = item


def _classify(entry, item: int) -> _Entry:
    if entry is None:
        return _Entry("new", None, item)
    if entry is Ellipsis:
        return _Entry("ellipsis", None, item)
    if isinstance(entry, builtins.slice):
        return _Entry("slice", entry, item)
    if isinstance(entry, (bool, np.bool_)):
        return _Entry("bool0", bool(entry), item)
    if isinstance(entry, (int, np.integer)):
        return _Entry("int", int(entry), item)
    if isinstance(entry, Tracer):
        dt = entry.dtype
        if dtypes.is_bool(dt):
            raise ShapeError(
                f"boolean mask indexing needs a static mask, but this mask is a staged array "
                f"({entry.aval.str_short()})", STAGED_MASK_HELP)
        if not dtypes.is_integer(dt):
            raise ShapeError("arrays used as indices must be of integer (or boolean) type, "
                             f"got {entry.aval.str_short()}")
        return _Entry("dyn" if entry.ndim == 0 else "array", entry, item)
    if isinstance(entry, (list, tuple)):
        if has_tracer(entry):
            return _classify(stack([operand(e) for e in entry]), item)
        try:
            entry = np.asarray(entry)
        except ValueError:
            raise ShapeError(_VALID_INDICES) from None
        if entry.size == 0 and entry.dtype.kind == "f":
            entry = entry.astype(dtypes.default_int())   # `x[[]]`: an empty integer index
    if isinstance(entry, np.ndarray):
        if entry.dtype == np.bool_:
            return _Entry("bool0" if entry.ndim == 0 else "mask",
                          bool(entry) if entry.ndim == 0 else entry, item)
        if not np.issubdtype(entry.dtype, np.integer):
            if entry.dtype == object:
                raise ShapeError(_VALID_INDICES)
            raise ShapeError("arrays used as indices must be of integer (or boolean) type")
        if entry.ndim == 0:
            return _Entry("int", int(entry), item)
        return _Entry("array", entry, item)
    raise ShapeError(_VALID_INDICES + f", got {type(entry).__name__}: {entry!r}")


def _static_bound(value, what: str):
    if value is None:
        return None
    if isinstance(value, Tracer):
        raise ConcretizationError(
            f"a slice {what} must be static, but it is a staged array "
            f"({value.aval.str_short()})", SLICE_HELP)
    try:
        return operator.index(value)
    except TypeError:
        raise ShapeError("slice indices must be integers or None or have an __index__ "
                         f"method, got {value!r}") from None


def _static_slice(s: builtins.slice, size: int):
    """(start, limit, stride, reversed) of an XLA slice equal to `s` on an axis of `size`."""
    start, stop, step = (_static_bound(s.start, "start"), _static_bound(s.stop, "stop"),
                         _static_bound(s.step, "step"))
    if step == 0:
        raise ShapeError("slice step cannot be zero")
    start, stop, step = builtins.slice(start, stop, step).indices(size)
    count = len(range(start, stop, step))
    if step > 0:
        return start, max(stop, start), step, False
    if count == 0:
        return 0, 0, 1, False
    last = start + (count - 1) * step          # the lowest index taken
    return last, start + 1, -step, True


# ---------------------------------------------------------------------------------------
# getitem


def getitem(x, index):
    """`x[index]` with NumPy's semantics (basic and advanced indexing)."""
    x = operand(x)
    shape = aval(x).shape
    entries = [_classify(e, k) for k, e in
               enumerate(index if isinstance(index, tuple) else (index,))]

    # Expand the ellipsis.
    if sum(e.kind == "ellipsis" for e in entries) > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 if e.kind in ("slice", "int", "dyn", "array") else
                   e.value.ndim if e.kind == "mask" else 0 for e in entries)
    if consumed > len(shape):
        raise ShapeError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {consumed} were indexed")
    has_array = any(e.kind in ("array", "mask", "bool0") for e in entries)

    # One spec per axis of `y`, which is x with the new axes (None, scalar booleans) added.
    specs: list[tuple[str, object, int | None]] = []   # (kind, value, item)
    sizes: list[int] = []
    new_axes: list[int] = []
    axis = 0                                           # the next axis of x
    for e in entries:
        if e.kind == "new":
            new_axes.append(len(specs))
            specs.append(("slice", builtins.slice(None), e.item))
            sizes.append(1)
        elif e.kind == "bool0":
            # x[True] adds an axis of length 1 and x[False] one of length 0: a new axis
            # indexed by the integer array [0] or [].
            new_axes.append(len(specs))
            specs.append(("adv", np.zeros(int(e.value), dtypes.default_int()), e.item))
            sizes.append(1)
        elif e.kind == "ellipsis":
            for _ in range(len(shape) - consumed):
                specs.append(("slice", builtins.slice(None), e.item))
                sizes.append(shape[axis])
                axis += 1
        elif e.kind == "mask":
            mask = e.value
            for j, n in enumerate(mask.shape):
                if axis + j >= len(shape) or shape[axis + j] != n:
                    raise ShapeError(
                        f"boolean index did not match indexed array along axis {axis + j}; "
                        f"size of axis is {shape[axis + j]} but size of corresponding "
                        f"boolean axis is {n}")
            for j, positions in enumerate(np.nonzero(mask)):
                specs.append(("adv", positions.astype(dtypes.default_int()), e.item))
                sizes.append(shape[axis + j])
            axis += mask.ndim
        else:
            size = shape[axis]
            if e.kind == "int":
                if not -size <= e.value < size:
                    raise _out_of_bounds(e.value, axis, size)
                specs.append(("int", e.value % size, e.item))
            elif e.kind == "array":
                specs.append(("adv", _index_array(e.value, axis, size), e.item))
            elif e.kind == "dyn":
                if size == 0:
                    raise ShapeError(f"index is out of bounds for axis {axis} with size 0")
                specs.append(("dyn", e.value, e.item))
            else:
                specs.append(("slice", e.value, e.item))
            sizes.append(size)
            axis += 1
    while axis < len(shape):
        specs.append(("slice", builtins.slice(None), None))
        sizes.append(shape[axis])
        axis += 1

    y = st.expand_dims.bind(x, dimensions=tuple(new_axes)) if new_axes else x

    # Static ints and slices: one slice, a squeeze of the ints' axes (so that emitted code
    # reads `x[2, 1:3]`), then one rev for the negative steps.
    starts, limits, strides, reversed_axes = [], [], [], []
    for i, ((kind, value, _), size) in enumerate(zip(specs, sizes)):
        if kind == "slice":
            start, limit, stride, flipped = _static_slice(value, size)
            if flipped:
                reversed_axes.append(i)
        elif kind == "int":
            start, limit, stride = value, value + 1, 1
        else:
            start, limit, stride = 0, size, 1
        starts.append(start)
        limits.append(limit)
        strides.append(stride)
    if starts != [0] * len(sizes) or limits != sizes or strides != [1] * len(sizes):
        y = st.slice.bind(y, start_indices=tuple(starts), limit_indices=tuple(limits),
                          strides=tuple(strides))
    ints = [i for i, (kind, _, _) in enumerate(specs) if kind == "int"]
    if ints:
        y = st.squeeze.bind(y, dimensions=tuple(ints))
    axis_of = {}                                   # spec -> axis of y, for specs still there
    for i, (kind, _, _) in enumerate(specs):
        if kind != "int":
            axis_of[i] = len(axis_of)
    if reversed_axes:
        y = st.rev.bind(y, dimensions=tuple(axis_of[i] for i in reversed_axes))

    # Staged scalar indices: a dynamic slice of size 1 on their axes, squeezed away.
    dynamic = [i for i, (kind, _, _) in enumerate(specs) if kind == "dyn"]
    if dynamic:
        starts_by_axis = {axis_of[i]: _wrap_negative(specs[i][1], sizes[i]) for i in dynamic}
        y_shape = aval(y).shape
        y = st.dynamic_slice.bind(
            y, *[starts_by_axis.get(a, 0) for a in range(len(y_shape))],
            slice_sizes=tuple(1 if a in starts_by_axis else d for a, d in enumerate(y_shape)))
        y = st.squeeze.bind(y, dimensions=tuple(sorted(starts_by_axis)))
    dropped = tuple(ints + dynamic)

    advanced = [i for i, (kind, _, _) in enumerate(specs) if kind == "adv"]
    if not advanced:
        return y

    # Advanced indices: one gather over the kept axes they index.
    kept = [i for i in range(len(specs)) if i not in dropped]   # the axes of y, in order
    batch, indices = _broadcast_indices([specs[i][1] for i in advanced])
    out = ix.gather.bind(y, *indices, axes=tuple(kept.index(i) for i in advanced))

    # NumPy's placement: adjacent advanced indices put their dimensions where they are.
    items = {specs[i][2] for i in advanced}
    if has_array:
        items |= {specs[i][2] for i in dropped}
    if max(items) - min(items) + 1 != len(items):
        return out
    first = min(i for i, (_, _, item) in enumerate(specs) if item in items)
    before = sum(1 for i in kept if i < first and specs[i][0] != "adv")
    if before == 0:
        return out
    nb, rest = len(batch), aval(out).ndim - len(batch)
    perm = (tuple(range(nb, nb + before)) + tuple(range(nb))
            + tuple(range(nb + before, nb + rest)))
    return transpose(out, perm)


# ---------------------------------------------------------------------------------------
# take, take_along_axis, compress


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    """np.take. Staged indices are clamped whatever the mode ("raise" cannot raise)."""
    if out is not None:
        raise ShapeError("take(..., out=) is not supported; use the returned array")
    a = operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(static_int(axis, "axis"), aval(a).ndim)
    size = aval(a).shape[axis]
    if isinstance(indices, (list, tuple)):
        indices = operand(indices)
    if isinstance(indices, Tracer):
        if dtypes.is_bool(indices.dtype):
            indices = convert(indices, dtypes.default_int())
        dt = indices.dtype
        if mode == "clip":
            indices = ew.clamp.bind(convert(0, dt), indices, convert(max(size - 1, 0), dt))
        elif mode == "wrap":
            rem = ew.rem.bind(indices, convert(size, dt))
            indices = _wrap_negative(rem, size)
    elif mode in ("clip", "wrap"):
        static = np.asarray(indices).astype(dtypes.default_int())
        indices = np.clip(static, 0, size - 1) if mode == "clip" else np.mod(static, size)
        if np.ndim(indices) == 0:
            indices = int(indices)
    elif mode != "raise":
        raise ShapeError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if isinstance(indices, np.ndarray) and indices.dtype == np.bool_:
        indices = indices.astype(dtypes.default_int())
    return getitem(a, (builtins.slice(None),) * axis + (indices,))


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    arr, indices = operand(arr), operand(indices)
    if axis is None:
        if aval(indices).ndim != 1:
            raise ShapeError("when axis=None, `indices` must have a single dimension.")
        arr, axis = ravel(arr), 0
    ndim = aval(arr).ndim
    if aval(indices).ndim != ndim:
        raise ShapeError("`indices` and `arr` must have the same number of dimensions")
    if ndim == 0:
        raise ShapeError("take_along_axis needs arrays of at least one dimension")
    if not dtypes.is_integer(aval(indices).dtype):
        raise ShapeError("`indices` must be an integer array")
    axis = normalize_axis(static_int(axis, "axis"), ndim)
    shape, index_shape = aval(arr).shape, aval(indices).shape
    batch = []
    for d, (n, m) in enumerate(zip(shape, index_shape)):
        if d == axis or n == m or n == 1:
            batch.append(m)
        elif m == 1:
            batch.append(n)
        else:
            raise ShapeError("shape mismatch: indexing arrays could not be broadcast together "
                             f"with shapes {_shape_str(index_shape)} {_shape_str(shape)}")
    batch = tuple(batch)
    indices = broadcast_to(_index_array(indices, axis, shape[axis]), batch)
    # Every other axis is indexed by its own position: an iota of the result's shape.
    index_arrays = [indices if d == axis else
                    ew.iota.bind(dtype=dtypes.default_int(), shape=batch, dimension=d)
                    for d in range(ndim)]
    return ix.gather.bind(arr, *index_arrays, axes=tuple(range(ndim)))


@implements(np.compress)
def compress(condition, a, axis=None, out=None):
    """np.compress with a static condition (a staged one has a data-dependent shape)."""
    if isinstance(condition, Tracer):
        raise ShapeError("np.compress needs a static condition, but this one is staged "
                         f"({condition.aval.str_short()})", STAGED_MASK_HELP)
    condition = np.asarray(condition, dtype=bool)
    if condition.ndim != 1:
        raise ShapeError("condition must be a 1-d array")
    a = operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(static_int(axis, "axis"), aval(a).ndim)
    positions = np.nonzero(condition)[0]
    return take(a, positions.astype(dtypes.default_int()), axis=axis)


# ---------------------------------------------------------------------------------------
# Dynamic slices (lax-style; the NumPy surface has no spelling for them)


def dynamic_slice(x, start_indices, slice_sizes):
    """`x[i:i+n, j:j+m]` with staged starts clamped so the window fits (XLA's rule)."""
    x = operand(x)
    starts = list(start_indices)
    if len(starts) != aval(x).ndim:
        raise ShapeError(f"dynamic_slice needs one start index per dimension of a "
                         f"{aval(x).ndim}-d array, got {len(starts)}")
    sizes = tuple(static_int(s, "a slice size") for s in slice_sizes)
    return st.dynamic_slice.bind(x, *starts, slice_sizes=sizes)


def dynamic_update_slice(x, update, start_indices):
    """A copy of `x` with `update` written at the (clamped) staged starts."""
    x, update = operand(x), operand(update)
    update = convert(update, aval(x).dtype, aval(x).weak_type)
    return st.dynamic_update_slice.bind(x, update, *list(start_indices))


# ---------------------------------------------------------------------------------------
# setitem: `x[index] = value`, functionally


def setitem(x, index, value):
    """A copy of `x` with `x[index] = value` done as NumPy would (value broadcast to the
    indexed shape and cast to x's dtype).

    Windows picked by ints, unit-step slices and staged scalar indices are written with one
    `dynamic_update_slice`. Every other index is written through the transpose of reading
    it: the cotangent of `x[index]` carries `value` to the places it reads (strided and
    reversed slices, integer arrays, masks), and its transpose of ones marks them. NumPy
    leaves the result of writing one place twice (repeated array indices) unspecified; here
    such a place gets the mean of the values written to it.
    """
    x = operand(x)
    x_aval = aval(x)
    if isinstance(index, Tracer) and dtypes.is_bool(index.dtype) and np.ndim(value) == 0:
        return _masked_store(x, index, value)       # `x[x < 0] = 0`: shape-preserving
    entries = index if isinstance(index, tuple) else (index,)
    window = _window(entries, x_aval.shape)
    if window is not None:
        starts, sizes, kept = window
        target_shape = tuple(sizes[a] for a in kept)
        update = broadcast_to(convert(operand(value), x_aval.dtype, x_aval.weak_type), target_shape)
        update = st.reshape.bind(update, new_sizes=tuple(sizes)) \
            if tuple(sizes) != target_shape else update
        return st.dynamic_update_slice.bind(x, update, *starts)
    return _setitem_by_transpose(x, index, value)


def _masked_store(x, mask, value):
    """`x[mask] = scalar` for a staged boolean mask over x's leading axes: np.where."""
    shape = aval(x).shape
    if mask.shape != shape[:mask.ndim]:
        raise ShapeError(f"boolean index of shape {mask.shape} does not match the indexed array "
                         f"of shape {shape}")
    mask = st.reshape.bind(mask, new_sizes=tuple(mask.shape) + (1,) * (len(shape) - mask.ndim))
    value = convert(operand(value), aval(x).dtype, aval(x).weak_type)
    return where(mask, value, x)


def _window(entries, shape):
    """(starts, window sizes, axes kept in `x[index]`) when `index` picks one rectangular
    window with ints, unit-step slices and staged scalars; else None."""
    if any(e is Ellipsis for e in entries):
        at = entries.index(Ellipsis)
        fill = len(shape) - (len(entries) - 1)
        entries = entries[:at] + (builtins.slice(None),) * fill + entries[at + 1:]
    if len(entries) > len(shape):
        return None
    entries = tuple(entries) + (builtins.slice(None),) * (len(shape) - len(entries))
    starts, sizes, kept = [], [], []
    for axis, (entry, size) in enumerate(zip(entries, shape)):
        if isinstance(entry, builtins.slice):
            if isinstance(entry.start, Tracer) or isinstance(entry.stop, Tracer) or entry.step not in (None, 1):
                return None
            start, stop, _ = entry.indices(size)
            starts.append(start)
            sizes.append(max(stop - start, 0))
            kept.append(axis)
        elif isinstance(entry, (int, np.integer)) and not isinstance(entry, (bool, np.bool_)):
            if not -size <= entry < size:
                raise _out_of_bounds(entry, axis, size)
            starts.append(int(entry) % size)
            sizes.append(1)
        elif isinstance(entry, Tracer) and entry.ndim == 0 and dtypes.is_integer(entry.dtype):
            starts.append(_wrap_negative(entry, size))
            sizes.append(1)
        else:
            return None
    return starts, sizes, kept


def _setitem_by_transpose(x, index, value):
    x_aval = aval(x).strip_weak_type()
    with JaxprBuilder() as builder:
        read = builder.build([getitem(builder.new_arg(x_aval), index)])
    scatter = ix.transposed_read(read)
    picked = read.out_avals[0]
    scattered = scatter(broadcast_to(convert(operand(value), x_aval.dtype, False), picked.shape))
    written = scatter(broadcast_to(np.ones((), x_aval.dtype), picked.shape))
    touched = written != 0
    mean = scattered / where(touched, written, 1) if dtypes.is_inexact(x_aval.dtype) else scattered
    return where(touched, mean.astype(x_aval.dtype) if aval(mean).dtype != x_aval.dtype else mean, x)


# ---------------------------------------------------------------------------------------
# Flat indices and coordinates: unravel_index, ravel_multi_index


def _index_operand(indices, fn: str):
    """Integer indices as a default-int operand (NumPy's intp); other dtypes are refused."""
    idx = operand(indices)
    if not dtypes.is_integer(aval(idx).dtype):
        raise ShapeError(f"np.{fn}: only int indices permitted, got {aval(idx).str_short()}",
                         "convert them first, e.g. i.astype(int)")
    return convert(idx, dtypes.default_int())


def _clamped(index, size: int):
    """A staged index held in [0, size): what s2s does where NumPy would raise on an index
    out of range (staged values cannot raise), as staged indexing clamps."""
    dt = aval(index).dtype
    return ew.clamp.bind(convert(0, dt), index, convert(max(size - 1, 0), dt))


def _dims_and_order(dims, order, fn: str) -> tuple[int, ...]:
    dims = static_ints(dims, "a dimension")
    if order not in ("C", "F"):
        raise ShapeError(f"np.{fn}: only 'C' or 'F' order is permitted, got {order!r}")
    if any(d <= 0 for d in dims):
        raise ShapeError(f"np.{fn}: dimensions must be positive, got {dims}")
    return dims


@implements(np.unravel_index)
def unravel_index(indices, shape, order="C"):
    """np.unravel_index for a static `shape`: the coordinates of flat `indices`, by
    remainders and quotients from the fastest-varying dimension. Negative staged indices
    count from the end and ones out of range are clamped (NumPy raises; staged values
    cannot)."""
    dims = _dims_and_order(shape, order, "unravel_index")
    size = int(np.prod(dims, dtype=np.int64))
    idx = _index_operand(indices, "unravel_index")
    if not isinstance(idx, Tracer):
        return np.unravel_index(idx, dims, order)
    idx = _clamped(_wrap_negative(idx, size), size)
    coords = [None] * len(dims)
    for axis in (reversed(range(len(dims))) if order == "C" else range(len(dims))):
        d = convert(dims[axis], aval(idx).dtype)
        coords[axis] = ew.rem.bind(idx, d)
        idx = ew.div.bind(idx, d)
    return tuple(coords)


_INDEX_MODES = ("raise", "wrap", "clip")


@implements(np.ravel_multi_index)
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """np.ravel_multi_index for static `dims`: sum of index * stride. mode='wrap' wraps,
    'clip' clips; staged indices under 'raise' are clamped (they cannot raise)."""
    dims = _dims_and_order(dims, order, "ravel_multi_index")
    multi_index = list(multi_index)
    if len(multi_index) != len(dims):
        raise ShapeError(f"np.ravel_multi_index: multi_index has {len(multi_index)} index "
                         f"arrays for {len(dims)} dimensions",
                         "pass one index array per dimension")
    modes = [mode] * len(dims) if isinstance(mode, str) else list(mode)
    if len(modes) != len(dims) or any(m not in _INDEX_MODES for m in modes):
        raise ShapeError(f"np.ravel_multi_index: mode {mode!r} is not valid",
                         "use 'raise', 'wrap' or 'clip' (or one of them per dimension)")
    strides = [int(np.prod(dims[i + 1:] if order == "C" else dims[:i], dtype=np.int64))
               for i in range(len(dims))]
    total = None
    for index, d, m, stride in zip(multi_index, dims, modes, strides):
        index = _index_operand(index, "ravel_multi_index")
        if m == "wrap":
            index = _wrap_negative(ew.rem.bind(index, convert(d, aval(index).dtype)), d)
        elif isinstance(index, Tracer) or m == "clip":
            index = _clamped(index, d)
        elif np.any((np.asarray(index) < 0) | (np.asarray(index) >= d)):
            raise ShapeError("np.ravel_multi_index: invalid entry in coordinates array")
        term = multiply(index, stride) if stride != 1 else index
        total = term if total is None else add(total, term)
    return total
