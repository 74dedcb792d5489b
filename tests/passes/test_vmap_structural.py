"""Batching rules of the structural primitives, held to a loop over examples.

Every rule is checked with the batch at every position of its operand and with operands
(padding values, start indices, updates, concatenated pieces) left unbatched. The rules
that only restate their parameters must stage their one primitive and nothing else: the
batch stays where it is, with no transpose around it.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.core import ShapedArray
from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import ops, structural as S
from tests.passes.batching import check_batching, example_of
from tests.passes.handbuilt import build, names

SETTINGS = settings(max_examples=20, deadline=None)
SIZE = 3   # the batch size


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=3):
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple)


def batched(data, shape, dim, dtype=float):
    """A value whose examples have `shape`, the batch at `dim` (None: one shared value)."""
    full = shape if dim is None else shape[:dim] + (SIZE,) + shape[dim:]
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    return rng.normal(size=full).astype(dtype)


def batch_dim(data, shape, can_be_unbatched=False):
    options = st.integers(0, len(shape))
    return data.draw(st.none() | options if can_be_unbatched else options)


def staged_names(fn, operands, dims) -> list[str]:
    """The primitives of `fn` batched with every batch left where the rules put it."""
    avals = [ShapedArray(np.shape(example_of(x, d, 0)), np.asarray(x).dtype)
             for x, d in zip(operands, dims)]
    return names(batch_jaxpr(build(fn, *avals), list(dims), Axis(SIZE))[0])


def check_in_place(prim, fn, operands, dims):
    """The loop oracle, and the batched jaxpr is `prim` alone (nothing moves the batch)."""
    check_batching(fn, operands, dims)
    assert staged_names(fn, operands, dims) == [prim.name]


@SETTINGS
@given(shape=shapes(), n_new=st.integers(0, 2), data=st.data())
def test_broadcast_in_dim(shape, n_new, data):
    out_ndim = len(shape) + n_new
    bd = tuple(sorted(data.draw(st.permutations(range(out_ndim)))[:len(shape)]))
    out_shape = [data.draw(st.integers(1, 3)) for _ in range(out_ndim)]
    for i, d in enumerate(bd):
        out_shape[d] = shape[i]
    shape = tuple(1 if data.draw(st.booleans()) else n for n in shape)   # stretched axes
    dim = batch_dim(data, shape)
    check_in_place(S.broadcast_in_dim, lambda x: S.broadcast_in_dim.bind(
        x, shape=tuple(out_shape), broadcast_dimensions=bd), [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(), data=st.data())
def test_reshape_moves_the_batch_only_from_the_middle(shape, data):
    size = int(np.prod(shape))
    new_sizes = data.draw(st.sampled_from([(size,), shape[::-1], (1,) + shape, shape + (1,)]))
    dim = batch_dim(data, shape)
    fn = lambda x: S.reshape.bind(x, new_sizes=new_sizes)
    x = batched(data, shape, dim)
    check_batching(fn, [x], [dim])
    at_an_end = dim == 0 or dim == len(shape)
    assert staged_names(fn, [x], [dim]) == (["reshape"] if at_an_end else ["transpose", "reshape"])


@SETTINGS
@given(shape=shapes(), data=st.data())
def test_transpose(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    dim = batch_dim(data, shape)
    check_in_place(S.transpose, lambda x: S.transpose.bind(x, permutation=perm),
                   [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(max_side=2), data=st.data())
def test_squeeze(shape, data):
    ones = [i for i, n in enumerate(shape) if n == 1]
    dims = tuple(sorted(data.draw(st.sets(st.sampled_from(ones)) if ones else st.just(set()))))
    dim = batch_dim(data, shape)
    check_in_place(S.squeeze, lambda x: S.squeeze.bind(x, dimensions=dims),
                   [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(), n_new=st.integers(1, 2), data=st.data())
def test_expand_dims(shape, n_new, data):
    dims = tuple(sorted(data.draw(st.permutations(range(len(shape) + n_new)))[:n_new]))
    dim = batch_dim(data, shape)
    check_in_place(S.expand_dims, lambda x: S.expand_dims.bind(x, dimensions=dims),
                   [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(min_dims=1), data=st.data())
def test_rev(shape, data):
    dims = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1))))
    dim = batch_dim(data, shape)
    check_in_place(S.rev, lambda x: S.rev.bind(x, dimensions=dims),
                   [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(min_dims=1, max_side=5), data=st.data())
def test_slice(shape, data):
    starts, limits, strides = [], [], []
    for n in shape:
        start = data.draw(st.integers(0, n))
        starts.append(start)
        limits.append(data.draw(st.integers(start, n)))
        strides.append(data.draw(st.integers(1, 3)))
    strides = data.draw(st.sampled_from([None, tuple(strides)]))
    dim = batch_dim(data, shape)
    check_in_place(S.slice, lambda x: S.slice.bind(x, start_indices=tuple(starts),
                                                   limit_indices=tuple(limits), strides=strides),
                   [batched(data, shape, dim)], [dim])


@SETTINGS
@given(shape=shapes(min_dims=1), n=st.integers(1, 3), data=st.data())
def test_concatenate_copies_only_unbatched_pieces(shape, n, data):
    dimension = data.draw(st.integers(0, len(shape) - 1))
    pieces, dims = [], []
    for i in range(n):
        piece_shape = shape[:dimension] + (data.draw(st.integers(1, 2)),) + shape[dimension + 1:]
        dims.append(batch_dim(data, piece_shape, can_be_unbatched=i > 0))
        pieces.append(batched(data, piece_shape, dims[-1]))
    fn = lambda *xs: S.concatenate.bind(*xs, dimension=dimension)
    check_batching(fn, pieces, dims)
    staged = staged_names(fn, pieces, dims)
    assert staged.count("broadcast_in_dim") == dims.count(None)
    assert staged.count("transpose") == sum(d not in (None, dims[0]) for d in dims)


@SETTINGS
@given(shape=shapes(max_dims=2, min_side=2), data=st.data())
def test_pad(shape, data):
    config = tuple((data.draw(st.integers(-1, 2)), data.draw(st.integers(-1, 2)),
                    data.draw(st.integers(0, 2))) for _ in shape)
    x_dim = batch_dim(data, shape, can_be_unbatched=True)
    value_dim = data.draw(st.sampled_from([0] if x_dim is None else [0, None]))
    x, value = batched(data, shape, x_dim), batched(data, (), value_dim)
    fn = lambda x, v: S.pad.bind(x, v, padding_config=config)
    check_batching(fn, [x, value], [x_dim, value_dim])
    if value_dim is None:
        assert staged_names(fn, [x, value], [x_dim, value_dim]) == ["pad"]


def test_pad_with_a_batched_value_keeps_an_unbatched_operand_unbatched():
    x, value = np.arange(6.0).reshape(2, 3), np.array([-1.0, -2.0, -3.0])
    fn = lambda x, v: S.pad.bind(x, v, padding_config=((1, 0, 0), (0, 1, 1)))
    check_batching(fn, [x, value], [None, 0])
    check_batching(fn, [x.astype(np.int32), value.astype(np.int32)], [None, 0])
    closed = build(fn, ShapedArray((2, 3), np.dtype(float)), ShapedArray((), np.dtype(float)))
    batched_pad = batch_jaxpr(closed, [None, 0], Axis(3))[0].jaxpr.eqns[0]
    assert batched_pad.invars[0].aval.shape == (2, 3)


def starts_for(data, shape, sizes, dims):
    """Start indices of mixed int dtypes, some out of range so that clamping shows: one per
    example where `dims` says 0, one shared (a 0-d array) where it says None."""
    starts = []
    for n, size, d in zip(shape, sizes, dims):
        values = st.integers(-2, n - size + 2)
        drawn = data.draw(values if d is None else st.lists(values, min_size=SIZE, max_size=SIZE))
        starts.append(np.asarray(drawn, data.draw(st.sampled_from([np.int32, np.int64]))))
    return starts


@SETTINGS
@given(shape=shapes(min_dims=1, max_side=4), data=st.data())
def test_dynamic_slice(shape, data):
    sizes = tuple(data.draw(st.integers(0, n)) for n in shape)
    x_dim = batch_dim(data, shape, can_be_unbatched=True)
    start_dims = [data.draw(st.sampled_from([None, 0])) for _ in shape]
    if x_dim is None and all(d is None for d in start_dims):
        start_dims[0] = 0
    starts = starts_for(data, shape, sizes, start_dims)
    fn = lambda x, *s: S.dynamic_slice.bind(x, *s, slice_sizes=sizes)
    operands, dims = [batched(data, shape, x_dim)] + starts, [x_dim] + start_dims
    check_batching(fn, operands, dims)
    if all(d is None for d in start_dims):
        assert staged_names(fn, operands, dims) == ["dynamic_slice"]


@SETTINGS
@given(shape=shapes(min_dims=1, max_side=4), data=st.data())
def test_dynamic_update_slice(shape, data):
    sizes = tuple(data.draw(st.integers(0, n)) for n in shape)
    x_dim = batch_dim(data, shape, can_be_unbatched=True)
    update_dim = batch_dim(data, sizes, can_be_unbatched=True)
    start_dims = [data.draw(st.sampled_from([None, 0])) for _ in shape]
    if x_dim is None and update_dim is None and all(d is None for d in start_dims):
        start_dims[0] = 0
    starts = starts_for(data, shape, sizes, start_dims)
    operands = [batched(data, shape, x_dim), batched(data, sizes, update_dim)] + starts
    check_batching(lambda x, u, *s: S.dynamic_update_slice.bind(x, u, *s), operands,
                   [x_dim, update_dim] + start_dims)


def test_dynamic_slices_clamp_literal_starts_while_staging():
    """Batched starts on one axis; a literal start (out of range, so clamped) and a window
    as wide as its axis on the others stage no index work of their own."""
    x = np.random.default_rng(0).normal(size=(3, 5, 4, 2))
    starts = np.array([-1, 2, 9])
    big, small = ops.literal(7, np.int64), ops.literal(-3, np.int32)
    read = lambda x, s: S.dynamic_slice.bind(x, s, big, small, slice_sizes=(2, 3, 2))
    check_batching(read, [x, starts], [0, 0])
    assert staged_names(read, [x, starts], [0, 0]).count("clamp") == 1
    # Clamped: the batched start, and the offsets into the update on the first two axes;
    # an update as large as the operand is read everywhere, with nothing to clamp.
    for update_shape, clamps in [((2, 3, 2), 3), ((5, 4, 2), 0)]:
        update = np.random.default_rng(1).normal(size=update_shape)
        write = lambda x, u, s: S.dynamic_update_slice.bind(x, u, s, big, small)
        check_batching(write, [x, update, starts], [0, None, 0])
        assert staged_names(write, [x, update, starts], [0, None, 0]).count("clamp") == clamps
