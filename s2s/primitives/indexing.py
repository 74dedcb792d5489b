"""Indexing primitives: gather (integer-array indexing) and its transpose, scatter_add.

`gather(operand, *indices, axes)` is NumPy's `operand[i0, i1, ...]` with the integer
index arrays applied to the distinct operand axes `axes` (in the order given). The index
arrays have one common shape B (the NumPy surface broadcasts them beforehand) and are
non-negative (it normalizes negative indices too). The result has shape
`B + (operand dims not in axes, in order)`: this one layout, whatever the axes, is what
keeps the rules simple; the NumPy surface transposes afterwards where NumPy's own rule
puts the indexed dimensions elsewhere.

`scatter_add(operand, updates, *indices, axes)` returns a copy of `operand` with `updates`
(shaped like gather's result) added at those positions; repeated positions accumulate,
as `np.add.at` does. It is gather's transpose.

`transposed_read(read)` writes through any read of an array: it transposes the linear part
of a jaxpr that reads elements, which is how the NumPy surface stages `x[index] = value`.

Out-of-range indices are clamped into range, as XLA's gather clamps them (scatter_add
clamps the same way so the two stay transposes of each other). Emitted code writes
`x[i, j]` for in-range indices, so an out-of-range index there raises NumPy's IndexError
instead.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from s2s_runtime import indexing as rt_indexing

from s2s import dtypes
from s2s.core import ClosedJaxpr, ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, call, py_value, register, subscript
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.tangents import instantiate, is_zero, zeros
from s2s.passes.transpose import backward_pass, is_linear
from s2s.primitives import ops
from s2s.staging import Primitive, inline_jaxpr


def _check_gather_operands(name: str, operand: ShapedArray, indices, axes) -> tuple:
    axes = tuple(axes)
    if not indices:
        raise ShapeError(f"{name} needs at least one index array")
    if len(indices) != len(axes):
        raise ShapeError(f"{name} needs one axis per index array, got {len(indices)} index "
                         f"arrays and axes {axes}")
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not 0 <= a < operand.ndim:
            raise ShapeError(f"{name}: axes {axes} out of range for an operand of shape "
                             f"{operand.shape}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: repeated axis in axes {axes}")
    batch = indices[0].shape
    for i in indices:
        if not dtypes.is_integer(i.dtype):
            raise ShapeError(f"{name} index arrays must have an integer dtype, got {i.str_short()}")
        if i.shape != batch:
            raise ShapeError(f"{name} index arrays must all have one shape, got "
                             + ", ".join(str(j.shape) for j in indices))
    if int(np.prod(batch, dtype=np.int64)) > 0:
        for a in axes:
            if operand.shape[a] == 0:
                raise ShapeError(f"{name}: cannot index axis {a} of size 0 (operand shape "
                                 f"{operand.shape})")
    rest = tuple(d for i, d in enumerate(operand.shape) if i not in axes)
    return batch + rest


def _gather_abstract(operand, *indices, axes):
    shape = _check_gather_operands("gather", operand, indices, axes)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


def _gather_impl(operand, *indices, axes):
    return rt_indexing.gather(operand, indices, axes)


def _emit_gather(eqn, operand, *indices):
    axes = tuple(eqn.params["axes"])
    by_axis = dict(zip(axes, (i.text for i in indices)))
    batch_ndim = eqn.invars[1].aval.ndim
    if sorted(axes) == list(range(len(axes))) or batch_ndim == 0:
        # Leading axes, or scalar indices (no batch dimensions to place): plain NumPy
        # indexing already yields B + remaining dims.
        items = [by_axis.get(a, ":") for a in range(max(axes) + 1)]
        return subscript(operand, ", ".join(items))
    moved = call("np.moveaxis", operand,
                 Expr(py_value(axes[0] if len(axes) == 1 else axes)),
                 Expr(py_value(0 if len(axes) == 1 else tuple(range(len(axes))))))
    return subscript(moved, ", ".join(i.text for i in indices))


gather = Primitive("gather", _gather_abstract, _gather_impl)
register(gather, _emit_gather)


def _scatter_add_abstract(operand, updates, *indices, axes):
    shape = _check_gather_operands("scatter_add", operand, indices, axes)
    if dtypes.is_bool(operand.dtype):
        raise ShapeError(f"scatter_add needs a numeric operand, got {operand.str_short()}")
    if updates.dtype != operand.dtype:
        raise ShapeError(f"scatter_add needs updates of the operand's dtype, got operand "
                         f"{operand.str_short()} and updates {updates.str_short()}")
    if updates.shape != shape:
        raise ShapeError(f"scatter_add: updates of shape {updates.shape} do not match the "
                         f"indexed shape {shape} (index shape + remaining operand dims)")
    return ShapedArray(operand.shape, operand.dtype, operand.weak_type)


def _scatter_add_impl(operand, updates, *indices, axes):
    return rt_indexing.scatter_add(operand, updates, indices, axes)


def _emit_scatter_add(eqn, operand, updates, *indices):
    texts = [i.text for i in indices]
    index_tuple = f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"
    return call("rt.scatter_add", operand, updates, Expr(index_tuple),
                Expr(py_value(tuple(eqn.params["axes"]))))


scatter_add = Primitive("scatter_add", _scatter_add_abstract, _scatter_add_impl)
register(scatter_add, _emit_scatter_add, temp_name="scatter")

# ---------------------------------------------------------------------------------------
# Derivatives. gather is linear in its operand and scatter_add in (operand, updates)
# jointly; the index arrays are integers and get no tangent or cotangent. They are each
# other's transposes: gather reads positions, scatter_add adds back to them (repeated
# indices accumulate, as the cotangent of an element read twice must).



def _gather_jvp(primals, tangents, *, axes):
    operand, *indices = primals
    out = gather.bind(operand, *indices, axes=axes)
    return out, gather.bind(tangents[0], *indices, axes=axes)


def _scatter_add_jvp(primals, tangents, *, axes):
    operand, updates, *indices = primals
    t_operand, t_updates = tangents[:2]
    out = scatter_add.bind(operand, updates, *indices, axes=axes)
    if is_zero(t_updates):   # nothing added to the operand's tangent
        return out, t_operand
    return out, scatter_add.bind(instantiate(t_operand), t_updates, *indices, axes=axes)


_jvp.register(gather, _gather_jvp)
_jvp.register(scatter_add, _scatter_add_jvp)


def _gather_transpose(ct, operand, *indices, axes):
    zeros_operand = zeros(operand.aval.strip_weak_type())
    return [scatter_add.bind(zeros_operand, ct, *indices, axes=axes)] + [None] * len(indices)


def _scatter_add_transpose(ct, operand, updates, *indices, axes):
    ct_updates = gather.bind(ct, *indices, axes=axes) if is_linear(updates) else None
    return [ct if is_linear(operand) else None, ct_updates] + [None] * len(indices)


_transpose.register(gather, _transpose.skip_zero(_gather_transpose))
_transpose.register(scatter_add, _transpose.skip_zero(_scatter_add_transpose))


def transposed_read(read: ClosedJaxpr) -> Callable:
    """The transpose of reading an array: `read` takes one array and returns elements of it
    (a jaxpr of slices, gathers, reshapes ... that the NumPy surface staged for `x[index]`).

    Its index work (wrapping negative staged indices, say) is staged here, once; the rest
    is linear in the array. Returns `scatter(values)`, which stages the transpose of that
    linear part: `values`, shaped like what `read` returns, added back at the places they
    were read from (places read twice get the sum), in an array of the input's shape.
    That is how `x[index] = value` is written for any index NumPy accepts.
    """
    split = partial_eval_jaxpr(read, [True])
    residuals = inline_jaxpr(split.known, [])
    linear = [False] * split.num_residuals + [True]

    def scatter(values):
        return backward_pass(split.unknown, linear, list(residuals) + [None], [values])[0]
    return scatter

# ---------------------------------------------------------------------------------------
# StableHLO lowering. The k index arrays (common shape B, rank nb) are converted to one
# integer type and stacked into one B + (k,) tensor whose trailing dimension is the index
# vector; `axes` (in the order given) is its start_index_map. Each selected axis is a
# collapsed (size-1) slice dimension and every other operand dimension is a full window,
# so the result (or the updates) is B + the remaining operand dims, in order: the window
# dims are nb, nb + 1, .... XLA's gather clamps starts into range, as the impl does; its
# scatter drops out-of-range updates instead, so scatter_add clamps the indices first.


_HLO_INDEX_DTYPE = np.dtype(np.int64)


def _lower_index_vector(ctx, eqn, indices, first: int, *, clamp: bool):
    """The index arrays as one B + (k,) tensor of int64 (clamped into range if asked)."""
    operand = eqn.invars[0].aval
    axes = tuple(eqn.params["axes"])
    batch = eqn.invars[first].aval.shape
    one_t = _hlo.tensor_type(ShapedArray(batch, _HLO_INDEX_DTYPE))
    column_t = _hlo.tensor_type(ShapedArray(batch + (1,), _HLO_INDEX_DTYPE))
    columns = []
    for v, name, axis in zip(eqn.invars[first:], indices, axes):
        if v.aval.dtype != _HLO_INDEX_DTYPE:
            name = ctx.op(f"stablehlo.convert {name} : ({_hlo.tensor_type(v.aval)}) -> {one_t}",
                          "index")
        if clamp:
            lo = ctx.constant(0, _HLO_INDEX_DTYPE)
            hi = ctx.constant(max(operand.shape[axis] - 1, 0), _HLO_INDEX_DTYPE)
            scalar_t = _hlo.tensor_type(ShapedArray((), _HLO_INDEX_DTYPE))
            name = ctx.op(f"stablehlo.clamp {lo}, {name}, {hi} : ({scalar_t}, {one_t}, "
                          f"{scalar_t}) -> {one_t}", "index")
        columns.append(ctx.op(f"stablehlo.reshape {name} : ({one_t}) -> {column_t}", "index"))
    if len(columns) == 1:
        return columns[0], column_t
    stacked_t = _hlo.tensor_type(ShapedArray(batch + (len(columns),), _HLO_INDEX_DTYPE))
    stacked = ctx.op(f"stablehlo.concatenate {', '.join(columns)}, dim = {len(batch)} : "
                     f"({', '.join([column_t] * len(columns))}) -> {stacked_t}", "indices")
    return stacked, stacked_t


def _dimension_numbers(eqn, first: int):
    operand = eqn.invars[0].aval
    axes = tuple(int(a) for a in eqn.params["axes"])
    nb = eqn.invars[first].aval.ndim
    window = [nb + i for i in range(operand.ndim - len(axes))]
    return axes, nb, window


def _ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def _lower_gather(ctx, eqn, operand, *indices, **_):
    aval = eqn.invars[0].aval
    index, index_t = _lower_index_vector(ctx, eqn, indices, 1, clamp=False)
    axes, nb, window = _dimension_numbers(eqn, 1)
    sizes = [1 if d in axes else n for d, n in enumerate(aval.shape)]
    numbers = (f"#stablehlo.gather<offset_dims = [{_ints(window)}], "
               f"collapsed_slice_dims = [{_ints(sorted(axes))}], "
               f"start_index_map = [{_ints(axes)}], index_vector_dim = {nb}>")
    return [ctx.op(f'"stablehlo.gather"({operand}, {index}) <{{dimension_numbers = {numbers}, '
                   f'indices_are_sorted = false, slice_sizes = array<i64: {_ints(sizes)}>}}> : '
                   f"({_hlo.tensor_type(aval)}, {index_t}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


def _lower_scatter_add(ctx, eqn, operand, updates, *indices, **_):
    aval = eqn.invars[0].aval
    index, index_t = _lower_index_vector(ctx, eqn, indices, 2, clamp=True)
    axes, nb, window = _dimension_numbers(eqn, 2)
    numbers = (f"#stablehlo.scatter<update_window_dims = [{_ints(window)}], "
               f"inserted_window_dims = [{_ints(sorted(axes))}], "
               f"scatter_dims_to_operand_dims = [{_ints(axes)}], index_vector_dim = {nb}>")
    scalar_t = _hlo.tensor_type(ShapedArray((), aval.dtype))
    a, b, s = ctx.fresh("lhs"), ctx.fresh("rhs"), ctx.fresh("sum")
    region = (f"({{\n      ^bb0({a}: {scalar_t}, {b}: {scalar_t}):\n"
              f"        {s} = stablehlo.add {a}, {b} : {scalar_t}\n"
              f"        stablehlo.return {s} : {scalar_t}\n    }})")
    return [ctx.op(f'"stablehlo.scatter"({operand}, {index}, {updates}) '
                   f"<{{indices_are_sorted = false, scatter_dimension_numbers = {numbers}, "
                   f"unique_indices = false}}> {region} : ({_hlo.tensor_type(aval)}, {index_t}, "
                   f"{_hlo.tensor_type(eqn.invars[1].aval)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


_hlo.register(gather, _lower_gather)
_hlo.register(scatter_add, _lower_scatter_add)

# ---------------------------------------------------------------------------------------
# Batching. Unbatched index arrays pick the same positions in every example, so the
# operand's batch axis is one more axis they leave alone. Batched index arrays are put on
# one batch position (an unbatched one is broadcast there: index arrays share one shape)
# and a batched operand's batch axis gets an index of its own, an iota over the batch, so
# that example b reads (or adds to) its own slice of the operand.


def _batched_indexing(operand_dim, indices, index_dims, axes, size):
    """The index arrays and axes that index an operand batched at `operand_dim` (None:
    unbatched), and where the batch lies in the gathered values (scatter_add's updates)."""
    if operand_dim is not None:
        axes = tuple(_vmap.batched_axis(a, operand_dim) for a in axes)
    if all(d is None for d in index_dims):
        rest_before_batch = sum(1 for a in range(operand_dim) if a not in axes)
        return list(indices), tuple(axes), _vmap.ndim(indices[0]) + rest_before_batch
    index_dim = next(d for d in index_dims if d is not None)
    indices = [_vmap.to_dim(i, d, index_dim, size) for i, d in zip(indices, index_dims)]
    if operand_dim is not None:
        indices = [ops.iota(_vmap.shape(indices[0]), index_dim)] + indices
        axes = (operand_dim,) + tuple(axes)
    return indices, tuple(axes), index_dim


def _batch_gather(axis, args, dims, *, axes):
    (operand, *indices), (operand_dim, *index_dims) = args, dims
    indices, axes, out_dim = _batched_indexing(operand_dim, indices, index_dims, axes, axis.size)
    return gather.bind(operand, *indices, axes=axes), out_dim


def _copies_batch_dim(operand, updates_dim, n_index_dims: int, axes) -> int:
    """Where the per-example copies of an unbatched operand hold the batch so that updates
    batched at `updates_dim`, shared index arrays of rank `n_index_dims` and `axes` need not
    move the updates: before the operand's k-th remaining axis when the updates' batch is
    their k-th axis after the index dimensions (at the front when it is among those)."""
    rest = [a for a in range(_vmap.ndim(operand)) if a not in axes]
    k = -1 if updates_dim is None else updates_dim - n_index_dims
    if k < 0:
        return 0
    return rest[k] if k < len(rest) else _vmap.ndim(operand)


def _batch_scatter_add(axis, args, dims, *, axes):
    """The result holds every example's sums, so an unbatched operand is copied per example
    (and unbatched updates too where the index arrays differ between examples)."""
    (operand, updates, *indices), (operand_dim, updates_dim, *index_dims) = args, dims
    out_dim = operand_dim
    if out_dim is None:
        shared_indices = all(d is None for d in index_dims)
        out_dim = (_copies_batch_dim(operand, updates_dim, _vmap.ndim(indices[0]), axes)
                   if shared_indices else 0)
    operand = _vmap.to_dim(operand, operand_dim, out_dim, axis.size)
    indices, axes, updates_at = _batched_indexing(out_dim, indices, index_dims, axes, axis.size)
    updates = _vmap.to_dim(updates, updates_dim, updates_at, axis.size)
    return scatter_add.bind(operand, updates, *indices, axes=axes), out_dim


_vmap.register(gather, _batch_gather)
_vmap.register(scatter_add, _batch_scatter_add)
