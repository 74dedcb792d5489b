"""Batching rules of gather and scatter_add, held to a loop over examples.

The operand, the updates and each index array are drawn batched at any position or shared
by every example. Unbatched index arrays must leave a batched operand to one gather (its
batch is one more axis they do not touch); batched ones index the operand's batch too.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.primitives import indexing as I
from tests.passes.batching import check_batching
from tests.passes.test_vmap_structural import SIZE, batch_dim, batched, shapes, staged_names

SETTINGS = settings(max_examples=20, deadline=None)


@st.composite
def indexing_cases(draw):
    """An operand shape, the axes indexed, the index arrays' shape, and where the operand
    and each index array are batched (at least one somewhere)."""
    shape = draw(shapes(min_dims=1, max_side=4))
    axes = tuple(draw(st.permutations(range(len(shape))))[:draw(st.integers(1, len(shape)))])
    index_shape = draw(shapes(max_dims=2))
    batched_ones = draw(st.sampled_from(["operand", "indices", "both"]))
    operand_dim = None if batched_ones == "indices" else draw(st.integers(0, len(shape)))
    index_dims = [None] * len(axes)
    if batched_ones != "operand":
        index_dims = [draw(st.none() | st.integers(0, len(index_shape))) for _ in axes]
        index_dims[0] = draw(st.integers(0, len(index_shape)))
    return shape, axes, index_shape, operand_dim, index_dims


def index_arrays(data, shape, axes, index_shape, index_dims):
    """In-range index arrays (emitted code indexes with them as they are), int32 or int64."""
    arrays = []
    for a, d in zip(axes, index_dims):
        full = index_shape if d is None else index_shape[:d] + (SIZE,) + index_shape[d:]
        rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
        dtype = data.draw(st.sampled_from([np.int32, np.int64]))
        arrays.append(rng.integers(0, shape[a], size=full).astype(dtype))
    return arrays


@SETTINGS
@given(case=indexing_cases(), data=st.data())
def test_gather(case, data):
    shape, axes, index_shape, operand_dim, index_dims = case
    operands = [batched(data, shape, operand_dim)] + index_arrays(data, shape, axes, index_shape,
                                                                  index_dims)
    dims = [operand_dim] + index_dims
    fn = lambda x, *i: I.gather.bind(x, *i, axes=axes)
    check_batching(fn, operands, dims)
    if all(d is None for d in index_dims) or (operand_dim is None and len(set(index_dims)) == 1):
        assert staged_names(fn, operands, dims) == ["gather"]


@SETTINGS
@given(case=indexing_cases(), data=st.data())
def test_scatter_add(case, data):
    shape, axes, index_shape, operand_dim, index_dims = case
    rest = tuple(n for a, n in enumerate(shape) if a not in axes)
    updates_shape = index_shape + rest
    updates_dim = batch_dim(data, updates_shape, can_be_unbatched=True)
    dtype = data.draw(st.sampled_from([np.float64, np.int32]))
    operands = ([batched(data, shape, operand_dim, dtype),
                 batched(data, updates_shape, updates_dim, dtype) * 10]
                + index_arrays(data, shape, axes, index_shape, index_dims))
    check_batching(lambda x, u, *i: I.scatter_add.bind(x, u, *i, axes=axes), operands,
                   [operand_dim, updates_dim] + index_dims)


def test_repeated_indices_accumulate_within_each_example_only():
    operand = np.zeros((3, 4))
    index = np.array([[1, 1, 2], [0, 0, 0], [3, 1, 3]])    # example b adds at index[b]
    updates = np.arange(9.0).reshape(3, 3)
    check_batching(lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(0,)),
                   [operand[0], updates, index], [None, 0, 0])


def test_unbatched_indices_leave_the_operands_batch_where_it_is():
    """The operand's batch, at every position, comes out among the remaining axes after
    the index dimensions, in order: one gather and nothing else. scatter_add reads its
    updates from the same place."""
    index = np.array([[2, 0], [1, 1]])
    updates = np.ones((2, 2, 2, 4))           # index shape + the operand's remaining axes
    gather = lambda x, i: I.gather.bind(x, i, axes=(1,))
    scatter = lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(1,))
    for dim in range(4):
        operand = np.random.default_rng(dim).normal(size=(2, 3, 4)[:dim] + (SIZE,) + (2, 3, 4)[dim:])
        check_batching(gather, [operand, index], [dim, None])
        assert staged_names(gather, [operand, index], [dim, None]) == ["gather"]
        check_batching(scatter, [operand, updates, index], [dim, None, None])


def test_an_unbatched_operand_is_copied_where_the_updates_hold_their_batch():
    """The transpose of a batched gather with shared indices (a per-example gradient): the
    zeros are copied per example with the batch where the updates have it, never moving
    the updates."""
    index = np.array([[2, 0], [1, 1]])
    operand = np.zeros((2, 3, 4))
    scatter = lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(1,))
    for dim in range(5):
        example = (2, 2, 2, 4)                # index shape + the operand's remaining axes
        updates = np.random.default_rng(dim).normal(size=example[:dim] + (SIZE,) + example[dim:])
        check_batching(scatter, [operand, updates, index], [None, dim, None])
        staged = staged_names(scatter, [operand, updates, index], [None, dim, None])
        among_index_dims = dim < 2            # those come first in the operand's updates
        assert staged == (["broadcast_in_dim", "transpose", "scatter_add"] if among_index_dims
                          else ["broadcast_in_dim", "scatter_add"])
