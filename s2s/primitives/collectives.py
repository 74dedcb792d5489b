"""Collectives over named axes: psum, pmax, pmin, all_gather, axis_index, ppermute,
psum_scatter and all_to_all.

`s2s.vmap(fn, axis_name="batch")` stages `fn` for one example; a collective in it
(`s2s.lax.psum(x, "batch")`) combines that example's `x` with every other example's. So a
collective has no meaning on one example alone: it only runs once the batching pass
(`s2s/passes/vmap.py`) sees every example at once, and its batching rule is where it is
computed (a psum over the batch is a `reduce_sum` over the batch axis). Each primitive
names the axes it runs over with their sizes, as bound where it was staged:

  psum / pmax / pmin[axes]              the sum (max, min) over every example of the
                                        named axes, elementwise; the same for each example
  all_gather[axes, dimension, tiled]    every example's operand, stacked along a new axis
                                        at `dimension` (tiled: concatenated along it)
  axis_index[axes]                      this example's position along the axes (int32)
  ppermute[axes, perm]                  the operand of the example whose (source,
                                        destination) pair names this one, else zeros
  psum_scatter[axes, dimension, tiled]  part i of the psum along `dimension` for example i
                                        (that axis, of the axis size, dropped; tiled: the
                                        i-th of its equal parts)
  all_to_all[axes, split_axis,          `split_axis` cut into one part per example, part j
             concat_axis]               sent to example j, the parts received concatenated
                                        along `concat_axis` (JAX's tiled primitive)

All but axis_index and ppermute also take `groups` (JAX's axis_index_groups, a tuple of
tuples of indices along one axis name, or None): each example combines only with the
examples of its group, positions (all_gather's order, psum_scatter's and all_to_all's parts)
counted within the group.

`axes` is a tuple of (name, size) pairs. Over several names, examples are numbered as
JAX numbers them: the first name is the major one (`axis_index(("i", "j"))` is
i * size_j + j); all_gather stacks in that order, ppermute's perm names examples by it, and
psum_scatter's and all_to_all's parts go to examples in it.

Batching over one of the names computes the collective over that axis and binds it again
over the names left; batching over another (an outer vmap's) name binds it again on the
batched value, its batch axis kept. Nested vmaps thus peel a collective name by name:
psum_scatter and all_to_all reorder their parts so that the batched name's are the major
ones, exchange over it, bind again over the names left and put what arrives back in the
order of all the names; ppermute, whose perm need not split name by name, gathers every
example of the names left and takes each destination's source from them.

Derivatives follow JAX: psum, all_gather, ppermute, psum_scatter and all_to_all are linear;
psum's transpose is a psum of the cotangent, all_gather's is this example's slice of the psum
of the cotangent, ppermute's a ppermute by the inverse perm, psum_scatter's an all_gather,
all_to_all's an all_to_all with its axes swapped. pmax and pmin
have no derivative in JAX; here their tangent is that of the selected example, ties sharing
it evenly, as `reduce_max`'s jvp does (NaN where the extremum is NaN).

Nothing here runs on one example: the NumPy impl and the Python emission of a collective
whose axis was never batched away raise a StagingError that says where it runs. Lowered to
StableHLO inside a pmap (`s2s/pmap.py`), whose module runs once per device as XLA replicas,
a collective over the pmap's axis becomes XLA's cross-replica op: psum/pmax/pmin an
`all_reduce` (pmax/pmin of floats a second one, so that a NaN wins as in NumPy), all_gather an `all_gather` (`groups` their `replica_groups`), axis_index the
`replica_id`, ppermute a `collective_permute`, psum_scatter a `reduce_scatter`, all_to_all an
`all_to_all`; over any other axis it cannot lower and says so.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import pyexpr as _pyexpr, stablehlo as _hlo
from s2s.errors import ShapeError, StagingError
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, instantiate, tangent_aval
from s2s.primitives import ops
from s2s.staging import Primitive


def _names(axes) -> tuple:
    return tuple(name for name, _ in axes)


def axes_size(axes) -> int:
    """How many examples the named `axes` hold together."""
    return math.prod(size for _, size in axes)


def _describe(axes) -> str:
    names = _names(axes)
    return f"axis {names[0]!r}" if len(names) == 1 else f"axes {names!r}"


def _check_axes(name: str, axes) -> None:
    if not isinstance(axes, tuple) or not axes:
        raise ShapeError(f"{name}: axes must be a non-empty tuple of (name, size) pairs, got {axes!r}")
    for pair in axes:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], int)
                and pair[1] >= 0):
            raise ShapeError(f"{name}: each entry of axes is a (name, size) pair, got {pair!r}")
    if len(set(_names(axes))) != len(axes):
        raise ShapeError(f"{name}: an axis name is repeated in {_names(axes)!r}")


def _unbatched_error(name: str, axes, where: str) -> StagingError:
    return StagingError(f"{name} over {_describe(axes)} {where}",
                        f"call it inside s2s.vmap(fn, axis_name={_names(axes)[0]!r}): "
                        "vmap computes it for every example at once")


def _needs_every_example(name: str):
    """The NumPy impl of a collective: one example alone cannot compute it."""
    def impl(*args, axes, **params):
        raise _unbatched_error(name, axes, "needs every example of the mapping, so it only "
                                           "runs batched by the vmap that binds the name")
    return impl


def _not_emitted(name: str, eqn, backend: str):
    """A collective left in a jaxpr no vmap batched over its axis (a hand-built one)."""
    raise _unbatched_error(name, eqn.params["axes"], f"is only {backend} inside the pmap that binds it")


# ---------------------------------------------------------------------------------------
# Declarations


def check_groups(name: str, axes, groups) -> None:
    """`groups` (axis_index_groups, a tuple of tuples of example indices, or None) must
    split the one axis of `axes` into groups of equal size covering it exactly, as in JAX."""
    if groups is None:
        return
    if len(axes) != 1:
        raise StagingError(f"{name} with axis_index_groups over {_describe(axes)}: groups need a "
                           "single axis name", "reduce over one axis name when giving groups")
    size = axes_size(axes)
    members = [i for group in groups for i in group]
    if (not groups or len({len(group) for group in groups}) != 1 or not groups[0]
            or sorted(members) != list(range(size))):
        raise StagingError(f"{name}: axis_index_groups {[list(g) for g in groups]} must cover "
                           f"{_describe(axes)} (size {size}) exactly, in groups of equal size",
                           f"give groups of one size whose members are 0..{size - 1}, each once")


def group_size(axes, groups) -> int:
    """How many examples each example's result combines."""
    return axes_size(axes) if groups is None else len(groups[0])


def _elementwise_abstract(name: str, refused_kind: str, help: str):
    """The shape rule of psum/pmax/pmin: each example's result is shaped like its operand."""
    def abstract_eval(x: ShapedArray, *, axes, groups=None):
        _check_axes(name, axes)
        check_groups(name, axes, groups)
        if np.dtype(x.dtype).kind == refused_kind:
            raise ShapeError(f"{name} cannot combine {x.str_short()} values", help)
        return x
    return abstract_eval


def _all_gather_abstract(x: ShapedArray, *, axes, dimension, tiled, groups=None):
    _check_axes("all_gather", axes)
    check_groups("all_gather", axes, groups)
    n = group_size(axes, groups)
    if tiled:
        if not 0 <= dimension < x.ndim:
            raise ShapeError(f"all_gather(tiled=True) along axis {dimension} of {x.str_short()}: "
                             "out of range")
        shape = x.shape[:dimension] + (n * x.shape[dimension],) + x.shape[dimension + 1:]
    else:
        if not 0 <= dimension <= x.ndim:
            raise ShapeError(f"all_gather at axis {dimension} of a result of rank {x.ndim + 1}: "
                             "out of range")
        shape = x.shape[:dimension] + (n,) + x.shape[dimension:]
    return ShapedArray(shape, x.dtype, x.weak_type)


def _axis_index_abstract(*, axes):
    _check_axes("axis_index", axes)
    return ShapedArray((), dtypes.int32)


def check_perm(axes, perm) -> None:
    """`perm`: (source, destination) pairs of example indices over `axes` (the first name
    major, as axis_index numbers them), no source or destination twice."""
    _check_axes("ppermute", axes)
    size = axes_size(axes)
    sources, destinations = [p[0] for p in perm], [p[1] for p in perm]
    if not all(0 <= i < size for i in sources + destinations):
        raise StagingError(f"ppermute: perm {[list(p) for p in perm]} names an example outside "
                           f"{_describe(axes)} (size {size})", f"give indices in 0..{size - 1}")
    if len(set(sources)) != len(sources) or len(set(destinations)) != len(destinations):
        raise StagingError(f"ppermute: perm {[list(p) for p in perm]} repeats a source or a destination",
                           "each example sends to at most one and receives from at most one")


def _ppermute_abstract(x: ShapedArray, *, axes, perm):
    check_perm(axes, perm)
    return x


def _scatter_shape(name: str, x: ShapedArray, n: int, dimension: int, tiled: bool) -> tuple:
    """`x`'s shape with axis `dimension` split over `n` examples: its n-th part (tiled) or
    dropped (that axis of size n), as psum_scatter and all_to_all see it."""
    if not 0 <= dimension < x.ndim:
        raise ShapeError(f"{name} along axis {dimension} of {x.str_short()}: out of range")
    size = x.shape[dimension]
    if (size % n if tiled else size != n) if n else True:
        raise ShapeError(f"{name} along axis {dimension} of {x.str_short()}: its size {size} must "
                         + (f"be a multiple of the axis size {n}" if tiled else f"equal the axis size {n}"),
                         "split an axis that has one part per example")
    rest = (size // n,) if tiled else ()
    return x.shape[:dimension] + rest + x.shape[dimension + 1:]


def _psum_scatter_abstract(x: ShapedArray, *, axes, dimension, tiled, groups=None):
    _check_axes("psum_scatter", axes)
    check_groups("psum_scatter", axes, groups)
    shape = _scatter_shape("psum_scatter", x, group_size(axes, groups), dimension, tiled)
    if np.dtype(x.dtype).kind == "b":
        raise ShapeError(f"psum_scatter cannot sum {x.str_short()} values",
                         "convert booleans to an integer dtype first")
    return ShapedArray(shape, x.dtype, x.weak_type)


def _all_to_all_abstract(x: ShapedArray, *, axes, split_axis, concat_axis, groups=None):
    """Tiled, as JAX's primitive: axis `split_axis` cut into one part per example (of the
    group), the parts received concatenated along `concat_axis` (s2s.lax.all_to_all adds
    and drops axes)."""
    _check_axes("all_to_all", axes)
    check_groups("all_to_all", axes, groups)
    n = group_size(axes, groups)
    shape = list(_scatter_shape("all_to_all", x, n, split_axis, True))
    if not 0 <= concat_axis < x.ndim:
        raise ShapeError(f"all_to_all concatenating along axis {concat_axis} of {x.str_short()}: out of range")
    shape[concat_axis] *= n
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _declare(name: str, abstract_eval) -> Primitive:
    prim = Primitive(name, abstract_eval, _needs_every_example(name))
    _pyexpr.register(prim, lambda eqn, *operands: _not_emitted(name, eqn, "emitted as Python"))
    return prim


psum = _declare("psum", _elementwise_abstract("psum", "b", "convert booleans to an integer dtype first"))
_UNORDERED = "complex numbers have no order here: compare their real parts or magnitudes"
pmax = _declare("pmax", _elementwise_abstract("pmax", "c", _UNORDERED))
pmin = _declare("pmin", _elementwise_abstract("pmin", "c", _UNORDERED))
all_gather = _declare("all_gather", _all_gather_abstract)
axis_index = _declare("axis_index", _axis_index_abstract)
ppermute = _declare("ppermute", _ppermute_abstract)
psum_scatter = _declare("psum_scatter", _psum_scatter_abstract)
all_to_all = _declare("all_to_all", _all_to_all_abstract)
COLLECTIVES = (psum, pmax, pmin, all_gather, axis_index, ppermute, psum_scatter, all_to_all)

# ---------------------------------------------------------------------------------------
# Derivatives


def _extremum_jvp(prim: Primitive):
    """pmax/pmin: the tangent of the example holding the extremum; examples that tie share
    it evenly (`psum(t * at) / psum(at)`), like `reduce_max`'s tangent in JAX.

    Where the extremum is NaN (some example holds one) no example equals it, and `at` is
    NaN, so the derivative is NaN like the value on every backend. Left to 0 / 0 it would
    not be: the transpose, `psum(ct / psum(at)) * at`, is inf * 0 in NumPy but 0 on XLA,
    which rewrites a product with a converted mask into a select."""
    def rule(primals, tangents, *, axes, groups=None):
        (x,), (t,) = primals, tangents
        y = prim.bind(x, axes=axes, groups=groups)
        if not dtypes.is_differentiable(y.dtype):
            return y, Zero(tangent_aval(y.aval))
        t = instantiate(t)
        at = ops.select(ops.ne(y, y), ops.scalar(np.nan, t.dtype), ops.convert(ops.eq(x, y), t.dtype))
        return y, psum.bind(t * at, axes=axes, groups=groups) / psum.bind(at, axes=axes, groups=groups)
    return rule


_jvp.deflinear(psum)
_jvp.deflinear(all_gather)
_jvp.deflinear(ppermute)
_jvp.deflinear(psum_scatter)
_jvp.deflinear(all_to_all)
_jvp.register(pmax, _extremum_jvp(pmax))
_jvp.register(pmin, _extremum_jvp(pmin))
_jvp.defzero(axis_index)


def _split_gathered(x, dimension: int, n: int):
    """A tiled all_gather's result with its axis `dimension` split into (n, the rest)."""
    shape = tuple(x.shape)
    return ops.reshape(x, shape[:dimension] + (n, shape[dimension] // n) + shape[dimension + 1:])


def _psum_transpose(ct, x, *, axes, groups=None):
    """Every example's result read every example's operand (of its group): the cotangents
    add up."""
    return [psum.bind(ct, axes=axes, groups=groups)]


def _membership(size: int, groups):
    """Each example's group number and position in its group (int32 arrays)."""
    number, position = np.empty(size, np.int32), np.empty(size, np.int32)
    for j, group in enumerate(groups):
        number[list(group)] = j
        position[list(group)] = np.arange(len(group), dtype=np.int32)
    return number, position


def _position_in_group(axes, groups):
    """This example's position in its group (its axis_index when there are no groups)."""
    index = axis_index.bind(axes=axes)
    if groups is None:
        return index
    return ops.gather(_membership(axes_size(axes), groups)[1], index, axes=(0,))


def _all_gather_transpose(ct, x, *, axes, dimension, tiled, groups=None):
    """This example's operand went to its position in its group in every result of the
    group: its cotangent is that slice of the cotangents summed over the group."""
    summed = psum.bind(ct, axes=axes, groups=groups)
    if tiled:
        summed = _split_gathered(summed, dimension, group_size(axes, groups))
    return [ops.gather(summed, _position_in_group(axes, groups), axes=(dimension,))]


def _ppermute_transpose(ct, x, *, axes, perm):
    """Each destination's cotangent goes back to its source (the others received nothing)."""
    return [ppermute.bind(ct, axes=axes, perm=tuple((dst, src) for src, dst in perm))]


def _psum_scatter_transpose(ct, x, *, axes, dimension, tiled, groups=None):
    """Every example's operand reached every example's part: the parts' cotangents gathered."""
    return [all_gather.bind(ct, axes=axes, dimension=dimension, tiled=tiled, groups=groups)]


def _all_to_all_transpose(ct, x, *, axes, split_axis, concat_axis, groups=None):
    """The parts sent back where they came from: all_to_all with the axes swapped."""
    return [all_to_all.bind(ct, axes=axes, split_axis=concat_axis, concat_axis=split_axis, groups=groups)]


_transpose.register(psum, _transpose.skip_zero(_psum_transpose))
_transpose.register(all_gather, _transpose.skip_zero(_all_gather_transpose))
_transpose.register(ppermute, _transpose.skip_zero(_ppermute_transpose))
_transpose.register(psum_scatter, _transpose.skip_zero(_psum_scatter_transpose))
_transpose.register(all_to_all, _transpose.skip_zero(_all_to_all_transpose))

# ---------------------------------------------------------------------------------------
# Batching: where the collectives are computed. `axes` splits around the mapped axis into
# the names before it and after it (the first name being major), each bound again over
# what is left.


def _times(x, n: int):
    """`x` * n in `x`'s own dtype (`x` staged, a literal or a constant)."""
    dtype = x.aval.dtype if hasattr(x, "aval") else np.asarray(x).dtype
    return ops.mul(x, ops.literal(n, dtype))


def _around(axes, name):
    """(axes before `name`, axes after it), or None when `name` is not among `axes`."""
    names = _names(axes)
    if name not in names:
        return None
    k = names.index(name)
    return axes[:k], axes[k + 1:]


def _grouped(x, d: int, size: int, groups):
    """`x`, batched at `d` over the `size` examples of the axis, as (group, member, ...) in
    the order of `groups`; and each example's group number and position in it (to gather
    the groups' results back to their examples along axis 0)."""
    x = _vmap.move_axis(x, d, 0)
    order = np.array([i for group in groups for i in group], np.int32)
    x = ops.reshape(ops.gather(x, order, axes=(0,)), (len(groups), len(groups[0])) + tuple(x.shape)[1:])
    return (x,) + _membership(size, groups)


def _reducing_rule(prim: Primitive, reduce_batch, reduce_copies):
    """psum/pmax/pmin: over the mapped axis, the batch reduced (`reduce_copies(x, size)`
    for an unbatched operand, every example holding the same value); the result is the same
    for every example, so it is unbatched. With axis_index_groups (over this one axis),
    each group is reduced and its result gathered back to its members (batched at 0)."""
    def rule(axis, args, dims, *, axes, groups=None):
        (x,), (d,) = args, dims
        split = _around(axes, axis.name)
        if split is None:
            return prim.bind(x, axes=axes, groups=groups), d
        if d is None:
            y = reduce_copies(x, group_size(((axis.name, axis.size),), groups))
        elif groups is None:
            y = reduce_batch(x, (d,))
        else:
            grouped, number, _ = _grouped(x, d, axis.size, groups)
            return ops.gather(reduce_batch(grouped, (1,)), number, axes=(0,)), 0
        rest = split[0] + split[1]   # empty when there are groups
        return (prim.bind(y, axes=rest) if rest else y), None
    return rule


def _gather_elsewhere(x, d, axes, dimension: int, tiled: bool, groups=None):
    """all_gather over axes this vmap does not map, on `x` batched at `d`: the new (or
    tiled) axis placed so that each example sees it at `dimension`. (result, its batch dim)"""
    def bind(dim):
        return all_gather.bind(x, axes=axes, dimension=dim, tiled=tiled, groups=groups)
    if d is None:
        return bind(dimension), None
    if tiled:
        return bind(_vmap.batched_axis(dimension, d)), d
    if d <= dimension:
        return bind(dimension + 1), d
    return bind(dimension), d + 1


def _merge_pair(x, dimension: int):
    """`x` with its axes `dimension` and `dimension + 1` merged into one (the first major)."""
    shape = tuple(x.shape)
    return ops.reshape(x, shape[:dimension] + (shape[dimension] * shape[dimension + 1],)
                       + shape[dimension + 2:])


def _all_gather_rule(axis, args, dims, *, axes, dimension, tiled, groups=None):
    """Over the mapped axis the batch becomes the gathered axis: gathered over the names
    after it (a new axis at `dimension`), then the batch moved in front of that axis and
    merged with it, then gathered over the names before it (tiled), then tiled if asked.
    With axis_index_groups (over this one axis), each example gets its group's members."""
    (x,), (d,) = args, dims
    split = _around(axes, axis.name)
    if split is None:
        return _gather_elsewhere(x, d, axes, dimension, tiled, groups)
    if groups is not None and d is not None:
        grouped, number, _ = _grouped(x, d, axis.size, groups)   # (group, member, ...)
        y = _vmap.move_axis(ops.gather(grouped, number, axes=(0,)), 1, dimension + 1)
        return (_merge_pair(y, dimension + 1) if tiled else y), 0
    if groups is not None:   # every member holds the same value
        y = _vmap.to_dim(x, None, dimension, len(groups[0]))
        return (_merge_pair(y, dimension) if tiled else y), None
    before, after = split
    if after:
        y, d = _gather_elsewhere(x, d, after, dimension, False)
        y = _merge_pair(_vmap.to_dim(y, d, dimension, axis.size), dimension)
    else:
        y = _vmap.to_dim(x, d, dimension, axis.size)
    if before:
        y = all_gather.bind(y, axes=before, dimension=dimension, tiled=True)
    return (_merge_pair(y, dimension) if tiled else y), None


def _axis_index_rule(axis, args, dims, *, axes):
    """Over the mapped axis: an iota over the batch (batched at 0), combined with the
    indices along the other names (before it major, after it minor)."""
    split = _around(axes, axis.name)
    if split is None:
        return axis_index.bind(axes=axes), None
    before, after = split
    index = ops.iota((axis.size,), 0, dtypes.int32)
    if after:
        index = ops.add(_times(index, axes_size(after)), axis_index.bind(axes=after))
    if before:
        index = ops.add(index, _times(axis_index.bind(axes=before), axis.size * axes_size(after)))
    return index, 0


def _ppermute_rule(axis, args, dims, *, axes, perm):
    """Over the mapped axis: the batch gathered from each destination's source, zeros where
    no example sends (batched at 0). Over more names than the mapped one, the sources may
    lie at other coordinates of the names left: every example of those is gathered first
    (the batch kept as an axis), and each destination (whose index over every name the
    names left know) takes its source's row and batch entry."""
    (x,), (d,) = args, dims
    split = _around(axes, axis.name)
    if split is None:
        return ppermute.bind(x, axes=axes, perm=perm), d
    x = _vmap.to_front(x, d, axis.size)
    source = np.zeros(axes_size(axes), np.int32)
    received = np.zeros(axes_size(axes), bool)
    for src, dst in perm:
        source[dst], received[dst] = src, True
    before, after = split
    if before or after:
        gathered = all_gather.bind(x, axes=before + after, dimension=0, tiled=False)  # (rest, batch, ...)
        destination, _ = _axis_index_rule(axis, (), (), axes=axes)
        src_before, src_here, src_after = np.unravel_index(source, (axes_size(before), axis.size, axes_size(after)))
        rest_row = (src_before * axes_size(after) + src_after).astype(np.int32)
        y = ops.gather(gathered, ops.gather(rest_row, destination, axes=(0,)),
                       ops.gather(src_here.astype(np.int32), destination, axes=(0,)), axes=(0, 1))
        received_here = ops.gather(received, destination, axes=(0,))
    else:
        y, received_here = ops.gather(x, source, axes=(0,)), received
    if received.all():
        return y, 0
    shape = tuple(y.shape)
    mask = ops.broadcast_in_dim(received_here, shape, (0,))
    return ops.select(mask, y, ops.full(shape, 0, y.aval.dtype)), 0


def _reordered(x, dimension: int, blocks: tuple, order: tuple):
    """`x` with its axis `dimension` read as `blocks` (sizes, the first major) and laid out
    again in `order` of them: parts numbered over several names put with the batched name's
    major, and received parts put back in the order of all the names."""
    moved = [k for k in order if blocks[k] != 1]
    if moved == sorted(moved):   # only blocks of size 1 move: the layout is the same
        return x
    shape = tuple(x.shape)
    split = ops.reshape(x, shape[:dimension] + tuple(blocks) + shape[dimension + 1:])
    perm = (tuple(range(dimension)) + tuple(dimension + k for k in order)
            + tuple(range(dimension + len(blocks), len(shape) + len(blocks) - 1)))
    return ops.reshape(ops.transpose(split, perm), shape)


def _parts_here_major(x, dimension: int, before, here: int, after):
    """`x`'s axis `dimension` of parts for every example of (before, here, after) (the
    first major), reordered so that this name's parts are the major ones."""
    size_before = axes_size(before)
    blocks = (size_before, here, tuple(x.shape)[dimension] // (size_before * here))
    return _reordered(x, dimension, blocks, (1, 0, 2))


def _psum_scatter_rule(axis, args, dims, *, axes, dimension, tiled, groups=None):
    """Over the mapped axis: the batch summed, its axis `dimension` then being the batch
    (tiled: split into (examples, part)). Over more names, the parts reordered first so that
    the batch's are major, and what is left of each example's part scattered over the other
    names. With groups: each group summed, its axis `dimension` split into the members'
    parts, each example gathering its group's part at its position (batched at 0)."""
    (x,), (d,) = args, dims
    split = _around(axes, axis.name)
    if split is None:
        dim = dimension if d is None else _vmap.batched_axis(dimension, d)
        out_d = d if d is None or d <= dimension or tiled else d - 1
        return psum_scatter.bind(x, axes=axes, dimension=dim, tiled=tiled, groups=groups), out_d
    if groups is not None:
        grouped, number, position = _grouped(_vmap.to_front(x, d, axis.size), 0, axis.size, groups)
        sums = ops.reduce_sum(grouped, (1,))                                  # (group, ...)
        if tiled:
            sums = _split_gathered(sums, dimension + 1, len(groups[0]))
        parts = _vmap.move_axis(sums, dimension + 1, 1)                       # (group, part, ...)
        return ops.gather(parts, number, position, axes=(0, 1)), 0
    before, after = split
    y = _times(x, axis.size) if d is None else ops.reduce_sum(x, (d,))
    if before or after:
        y = _split_gathered(_parts_here_major(y, dimension, before, axis.size, after), dimension, axis.size)
        return psum_scatter.bind(y, axes=before + after, dimension=dimension + 1, tiled=tiled), dimension
    return (_split_gathered(y, dimension, axis.size) if tiled else y), dimension


def _all_to_all_rule(axis, args, dims, *, axes, split_axis, concat_axis, groups=None):
    """Over the mapped axis: (source, ...) with axis `split_axis` split into (destination,
    part); the destination moved to the front as the batch, the source in front of axis
    `concat_axis` and merged with it. Over more names, the parts reordered first so that the
    batch's are major, then what each destination got exchanged over the other names, and
    the sources received put back in the order of all the names. With groups: (group,
    source, ...) split the same way, each example gathering its group's parts for its
    position as destination."""
    (x,), (d,) = args, dims
    split = _around(axes, axis.name)
    if split is None:
        if d is None:
            return all_to_all.bind(x, axes=axes, split_axis=split_axis, concat_axis=concat_axis,
                                   groups=groups), None
        return all_to_all.bind(x, axes=axes, split_axis=_vmap.batched_axis(split_axis, d),
                               concat_axis=_vmap.batched_axis(concat_axis, d), groups=groups), d
    before, after = split
    y = _vmap.to_front(x, d, axis.size)
    if groups is None:
        y = _parts_here_major(y, split_axis + 1, before, axis.size, after)
        y = _split_gathered(y, split_axis + 1, axis.size)
        y = _vmap.move_axis(y, split_axis + 1, 0)         # (destination, source, ...)
    else:
        y, number, position = _grouped(y, 0, axis.size, groups)            # (group, source, ...)
        y = _split_gathered(y, split_axis + 2, len(groups[0]))
        y = _vmap.move_axis(y, split_axis + 2, 1)         # (group, destination, source, ...)
        y = ops.gather(y, number, position, axes=(0, 1))  # (example, source, ...)
    y = _vmap.move_axis(y, 1, concat_axis + 1)            # the source before concat_axis
    y = _merge_pair(y, concat_axis + 1)
    if not (before or after):
        return y, 0
    rest, concat = axes_size(before + after), concat_axis + 1
    if split_axis == concat_axis:   # (source here, destinations left, part): those major to be sent
        y = _reordered(y, concat, (axis.size, rest, tuple(y.shape)[concat] // (axis.size * rest)), (1, 0, 2))
    y = all_to_all.bind(y, axes=before + after, split_axis=split_axis + 1, concat_axis=concat)
    # received: (sources before, sources after, source here, ...), put back in that order
    blocks = (axes_size(before), axes_size(after), axis.size)
    return _reordered(y, concat, blocks + (tuple(y.shape)[concat] // math.prod(blocks),), (0, 2, 1, 3)), 0


_vmap.register(psum, _reducing_rule(psum, ops.reduce_sum, _times), reads_axis=True)
_vmap.register(pmax, _reducing_rule(pmax, ops.reduce_max, lambda x, size: x), reads_axis=True)
_vmap.register(pmin, _reducing_rule(pmin, ops.reduce_min, lambda x, size: x), reads_axis=True)
_vmap.register(all_gather, _all_gather_rule, reads_axis=True)
_vmap.register(axis_index, _axis_index_rule, reads_axis=True)
_vmap.register(ppermute, _ppermute_rule, reads_axis=True)
_vmap.register(psum_scatter, _psum_scatter_rule, reads_axis=True)
_vmap.register(all_to_all, _all_to_all_rule, reads_axis=True)

# ---------------------------------------------------------------------------------------
# StableHLO lowering: inside a pmap, where the module runs once per replica. The named
# axes of the pmaps around a collective (`ctx.replica_axes`, outermost first) lay the
# module's `ctx.replicas` replicas out as a mesh, (their sizes..., the replicas left over),
# row-major: the outer axis is the major one, and the replicas left over (a module sized
# for a bigger pmap elsewhere in it) are the minor-most, each of them computing what the
# first does. A collective over some of the names combines the replicas that share every
# other coordinate, numbered over its names as `axis_index` numbers them (the first major).
# One top-level pmap spans every replica, so its groups are one group of all of them.


def _mesh(ctx) -> list[int]:
    sizes = [size for _, size in ctx.replica_axes]
    return sizes + [ctx.replicas // math.prod(sizes)]


def _mesh_positions(ctx, name: str, axes) -> list[int]:
    """Where each of `axes` lies in the replica mesh; an error if a pmap around does not
    bind it (with that size)."""
    bound = dict(ctx.replica_axes)
    if not all(axis_name in bound and bound[axis_name] == size for axis_name, size in axes):
        raise _unbatched_error(name, axes, "is only lowered inside the pmap (or batched by the vmap) "
                                           "that binds it")
    return [_names(ctx.replica_axes).index(axis_name) for axis_name in _names(axes)]


def _replicas_along(ctx, name: str, axes, indices_per_row):
    """For each combination of the mesh coordinates that `axes` do not span, and each row
    of `indices_per_row` (indices over `axes`, the first name major), that row's replica
    ids: the replica groups (or the permutation pairs) of a collective over `axes`."""
    positions = _mesh_positions(ctx, name, axes)
    mesh = _mesh(ctx)
    others = [k for k in range(len(mesh)) if k not in positions]
    sizes = [size for _, size in axes]
    rows = []
    for fixed in itertools.product(*[range(mesh[k]) for k in others]):
        for indices in indices_per_row:
            row = []
            for index in indices:
                coordinates = [0] * len(mesh)
                for k, c in zip(others, fixed):
                    coordinates[k] = c
                for k, c in zip(positions, np.unravel_index(index, sizes)):
                    coordinates[k] = int(c)
                row.append(int(np.ravel_multi_index(coordinates, mesh)))
            rows.append(row)
    return rows


def replica_groups(ctx, name: str, axes, groups=None) -> str:
    """The `replica_groups` attribute of a collective over `axes` with axis_index_groups
    `groups` (None: one group spanning the axes)."""
    rows = _replicas_along(ctx, name, axes, groups or (tuple(range(axes_size(axes))),))
    text = ", ".join("[" + ", ".join(map(str, row)) + "]" for row in rows)
    return f"replica_groups = dense<[{text}]> : tensor<{len(rows)}x{len(rows[0])}xi64>"


def _replica_groups(ctx, name: str, eqn) -> str:
    return replica_groups(ctx, name, eqn.params["axes"], eqn.params.get("groups"))


def _reducing_op(ctx, op: str, x, combine: str, attributes: str, aval, typ: str, hint: str) -> str:
    """`op` (all_reduce, reduce_scatter) of `x` with a `combine` region; its result's name."""
    scalar = _hlo.tensor_type(ShapedArray((), aval.dtype))
    a, b, c = ctx.fresh("a"), ctx.fresh("b"), ctx.fresh("c")
    out = ctx.fresh(hint)
    ctx.lines += [f'{out} = "stablehlo.{op}"({x}) ({{',
                  f"  ^bb0({a}: {scalar}, {b}: {scalar}):",
                  f"    {c} = stablehlo.{combine} {a}, {b} : {scalar}",
                  f"    stablehlo.return {c} : {scalar}",
                  f"}}) {{{attributes}}} : ({_hlo.tensor_type(aval)}) -> {typ}{ctx.location}"]
    return out


def _all_reduce_rule(name: str, combine: str, nan_wins: bool = False):
    """psum/pmax/pmin: one all_reduce. With `nan_wins` (pmax, pmin) a float result is NaN
    wherever a replica of the group holds a NaN, as NumPy's max and vmap's reduce_max give:
    XLA:CPU's all_reduce skips NaNs (pmax over [1, nan, 2, 0.5] was 2), and refuses a
    combining region that would propagate them itself ("Unsupported reduction
    computation"), so a second all_reduce, an `or` of each replica's NaN flags, says where."""
    def rule(ctx, eqn, x):
        groups = _replica_groups(ctx, name, eqn)
        aval, typ, hint = eqn.invars[0].aval, _hlo.out_type(eqn), _hlo.hint(eqn) or name
        if not (nan_wins and dtypes.is_inexact(aval.dtype)):
            return [_reducing_op(ctx, "all_reduce", x, combine, groups, aval, typ, hint)]
        extremum = _reducing_op(ctx, "all_reduce", x, combine, groups, aval, typ, f"{name}_skipping_nan")
        flags = ShapedArray(aval.shape, dtypes.bool_)
        flag_type = _hlo.tensor_type(flags)
        is_nan = ctx.op(f"stablehlo.compare NE, {x}, {x}, FLOAT : ({typ}, {typ}) -> {flag_type}", "is_nan")
        any_nan = _reducing_op(ctx, "all_reduce", is_nan, "or", groups, flags, flag_type, "any_nan")
        nan = ctx.constant(np.nan, aval.dtype, aval.shape)
        return [ctx.op(f"stablehlo.select {any_nan}, {nan}, {extremum} : {flag_type}, {typ}", hint)]
    return rule


def _psum_scatter_lowering(ctx, eqn, x, *, axes, dimension, tiled, groups=None):
    replica_groups = _replica_groups(ctx, "psum_scatter", eqn)
    aval = eqn.invars[0].aval
    part = ShapedArray(aval.shape[:dimension] + (aval.shape[dimension] // group_size(axes, groups),)
                       + aval.shape[dimension + 1:], aval.dtype)
    out = _reducing_op(ctx, "reduce_scatter", x, "add", f"scatter_dimension = {dimension} : i64, {replica_groups}",
                       aval, _hlo.tensor_type(part), _hlo.hint(eqn) or "scattered")
    if tiled:
        return [out]
    return [ctx.op(f"stablehlo.reshape {out} : ({_hlo.tensor_type(part)}) -> {_hlo.out_type(eqn)}")]


def _ppermute_lowering(ctx, eqn, x, *, axes, perm):
    aval = eqn.invars[0].aval
    pairs = _replicas_along(ctx, "ppermute", axes, perm)   # also checks a pmap binds the axis
    if not pairs:   # nobody sends: zeros everywhere
        return [ctx.constant(0, aval.dtype, aval.shape)]
    text = ", ".join(f"[{src}, {dst}]" for src, dst in pairs)
    return [ctx.op(f'"stablehlo.collective_permute"({x}) {{source_target_pairs = dense<[{text}]> : '
                   f"tensor<{len(pairs)}x2xi64>}} : ({_hlo.tensor_type(aval)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn) or "permuted")]


def _all_to_all_lowering(ctx, eqn, x, *, axes, split_axis, concat_axis, groups=None):
    replica_groups = _replica_groups(ctx, "all_to_all", eqn)
    return [ctx.op(f'"stablehlo.all_to_all"({x}) {{split_dimension = {split_axis} : i64, '
                   f"concat_dimension = {concat_axis} : i64, split_count = {group_size(axes, groups)} : i64, "
                   f"{replica_groups}}} : "
                   f"({_hlo.tensor_type(eqn.invars[0].aval)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn) or "exchanged")]


def gather_across_replicas(ctx, x: str, aval, axes, dimension: int, tiled: bool = False, groups=None,
                           hint: str | None = None) -> str:
    """`x` (of `aval`) of every replica along `axes`, stacked at `dimension` (tiled:
    concatenated along it): an all_gather, also what a pmap's results leave it by."""
    attribute = replica_groups(ctx, "all_gather", axes, groups)
    if not tiled:   # a new axis of size 1 at `dimension`, gathered along
        kept = ShapedArray(aval.shape[:dimension] + (1,) + aval.shape[dimension:], aval.dtype)
        x = ctx.op(f"stablehlo.reshape {x} : ({_hlo.tensor_type(aval)}) -> {_hlo.tensor_type(kept)}")
        aval = kept
    shape = list(aval.shape)
    shape[dimension] *= group_size(axes, groups)
    return ctx.op(f'"stablehlo.all_gather"({x}) {{all_gather_dim = {dimension} : i64, {attribute}}} : '
                  f"({_hlo.tensor_type(aval)}) -> {_hlo.tensor_type(ShapedArray(tuple(shape), aval.dtype))}",
                  hint or "gathered")


def axis_index_in_replicas(ctx, axes, hint: str | None = None) -> str:
    """This replica's index along `axes` (int32, the first name major): its replica id
    when one axis spans every replica, else its coordinates in the mesh combined."""
    positions = _mesh_positions(ctx, "axis_index", axes)
    replica = ctx.op("stablehlo.replica_id : tensor<ui32>", "replica")
    whole = len(axes) == len(ctx.replica_axes) == 1 and axes_size(axes) == ctx.replicas
    index = ctx.op(f"stablehlo.convert {replica} : (tensor<ui32>) -> tensor<i32>",
                   (hint or "index") if whole else None)
    if whole:
        return index
    mesh, i32 = _mesh(ctx), "tensor<i32>"
    combined = None
    for n, (k, (_, size)) in enumerate(zip(positions, axes)):
        name = (hint or "index") if n == len(axes) - 1 else None
        stride = ctx.constant(math.prod(mesh[k + 1:]), dtypes.int32)
        quotient = ctx.op(f"stablehlo.divide {index}, {stride} : {i32}")
        bound = ctx.constant(size, dtypes.int32)
        coordinate = ctx.op(f"stablehlo.remainder {quotient}, {bound} : {i32}", None if n else name)
        if n:
            scaled = ctx.op(f"stablehlo.multiply {combined}, {bound} : {i32}")
            coordinate = ctx.op(f"stablehlo.add {scaled}, {coordinate} : {i32}", name)
        combined = coordinate
    return combined


def _all_gather_lowering(ctx, eqn, x, *, axes, dimension, tiled, groups=None):
    return [gather_across_replicas(ctx, x, eqn.invars[0].aval, axes, dimension, tiled, groups, _hlo.hint(eqn))]


_hlo.register(psum, _all_reduce_rule("psum", "add"))
_hlo.register(pmax, _all_reduce_rule("pmax", "maximum", nan_wins=True))
_hlo.register(pmin, _all_reduce_rule("pmin", "minimum", nan_wins=True))
_hlo.register(all_gather, lambda ctx, eqn, x: _all_gather_lowering(ctx, eqn, x, **eqn.params))
_hlo.register(axis_index, lambda ctx, eqn: [axis_index_in_replicas(ctx, eqn.params["axes"], _hlo.hint(eqn))])
_hlo.register(ppermute, lambda ctx, eqn, x: _ppermute_lowering(ctx, eqn, x, **eqn.params))
_hlo.register(psum_scatter, lambda ctx, eqn, x: _psum_scatter_lowering(ctx, eqn, x, **eqn.params))
_hlo.register(all_to_all, lambda ctx, eqn, x: _all_to_all_lowering(ctx, eqn, x, **eqn.params))
