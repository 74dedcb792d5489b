"""Batching rules of the reductions, arg-reductions, scans and sort, held to a loop over
examples with the batch at every position and, for sort, with some operands unbatched."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import reductions as red
from tests.passes.batching import check_batching
from tests.passes.handbuilt import arr, build, names

SETTINGS = settings(max_examples=20, deadline=None)
BATCH = 3


@st.composite
def batched_operand(draw, min_rank=0, kind="float"):
    """(per-example shape, batch position, a batched value of that kind): small integers,
    so that max/min and sort meet ties and products stay exact."""
    rank = draw(st.integers(min_rank, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    dim = draw(st.integers(0, rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = rng.integers(-2, 3, size=shape[:dim] + (BATCH,) + shape[dim:])
    if kind == "bool":
        values = values > 0
    elif kind == "float":
        values = values.astype(np.float64)
    return shape, dim, values


@SETTINGS
@given(name=st.sampled_from(sorted(red.REDUCTIONS)), data=st.data())
def test_every_reduction_batches_over_any_axes_with_the_batch_anywhere(name, data):
    prim = red.REDUCTIONS[name]
    kind = "bool" if name in ("reduce_and", "reduce_or") else data.draw(
        st.sampled_from(["float", "int"]))
    shape, dim, x = data.draw(batched_operand(kind=kind))
    axes = tuple(data.draw(st.permutations(range(len(shape))))[:data.draw(
        st.integers(0, len(shape)))])
    check_batching(lambda v: prim.bind(v, axes=axes), [x], [dim])


@SETTINGS
@given(prim=st.sampled_from([red.argmax, red.argmin]), data=st.data())
def test_argmax_and_argmin_batch_with_the_batch_anywhere(prim, data):
    shape, dim, x = data.draw(batched_operand(min_rank=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    index_dtype = data.draw(st.sampled_from([np.dtype(np.int32), np.dtype(np.int64)]))
    check_batching(lambda v: prim.bind(v, axis=axis, index_dtype=index_dtype), [x], [dim])


@SETTINGS
@given(name=st.sampled_from(sorted(red.CUMULATIVE)), reverse=st.booleans(), data=st.data())
def test_every_scan_batches_with_the_batch_anywhere(name, reverse, data):
    prim = red.CUMULATIVE[name]
    shape, dim, x = data.draw(batched_operand(min_rank=1, kind=data.draw(
        st.sampled_from(["float", "int"]))))
    axis = data.draw(st.integers(0, len(shape) - 1))
    check_batching(lambda v: prim.bind(v, axis=axis, reverse=reverse), [x], [dim])


@SETTINGS
@given(data=st.data())
def test_sort_batches_several_operands_some_unbatched(data):
    """Keys with ties, so the later keys and stability decide; each operand batched at its
    own position, or not at all (but at least one batched)."""
    shape, _, _ = data.draw(batched_operand(min_rank=1))
    n = data.draw(st.integers(1, 3))
    num_keys = data.draw(st.integers(1, n))
    dims = [data.draw(st.one_of(st.none(), st.integers(0, len(shape)))) for _ in range(n)]
    if all(d is None for d in dims):
        dims[data.draw(st.integers(0, n - 1))] = 0
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    operands = [rng.integers(-2, 3, size=shape if d is None else shape[:d] + (BATCH,) + shape[d:])
                .astype(np.float64) for d in dims]
    dimension = data.draw(st.integers(0, len(shape) - 1))
    check_batching(lambda *xs: red.sort.bind(*xs, dimension=dimension, num_keys=num_keys),
                   operands, dims, out_dims=[0] * n)


def test_a_reduction_chain_keeps_the_batch_where_it_falls():
    """Summing axis 0 of an example batched at axis 1 leaves the batch at axis 0, and the
    scan and argmax after it read it there: no transpose anywhere."""
    closed = build(lambda x: red.argmax.bind(
        red.cumsum.bind(red.reduce_sum.bind(x, axes=(0,)), axis=0, reverse=False),
        axis=0, index_dtype=np.dtype(np.int32)), arr(2, 4))
    batched, dims = batch_jaxpr(closed, [1], Axis(5), None)
    assert dims == [0]
    assert "transpose" not in names(batched)
    params = [e.params for e in batched.jaxpr.eqns]
    assert params[0]["axes"] == (0,) and params[1]["axis"] == 1 and params[2]["axis"] == 1


def test_sort_copies_an_unbatched_operand_only_because_it_is_permuted():
    closed = build(lambda k, v: red.sort.bind(k, v, dimension=0, num_keys=1), arr(4), arr(4))
    batched, dims = batch_jaxpr(closed, [0, None], Axis(3), None)
    assert dims == [0, 0]
    assert names(batched) == ["broadcast_in_dim", "sort"]
