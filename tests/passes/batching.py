"""The oracle for batching rules: a batched jaxpr must compute what a Python loop over the
examples computes.

`check_batching(fn, operands, dims)` stages `fn` (a function of staged values that binds
primitives, as the hand-built jaxprs of these tests do) on one example's operands, batches
it with the batch of operand i at `dims[i]` (None: shared by every example), and compares
the batched jaxpr, run by the NumPy reference interpreter and by its emitted Python, with
the loop that slices every example out and stacks the results. It returns the batched
jaxpr for tests that also assert on its equations.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from s2s.core import ShapedArray, aval_of_value, check_jaxpr, eval_jaxpr
from s2s.emit.python import emit_jaxpr_source, load_source
from s2s.passes.vmap import Axis, batch_jaxpr
from tests.passes.handbuilt import build, names


def example_of(x, dim, b):
    return x if dim is None else np.take(x, b, axis=dim)


def batch_size(operands, dims) -> int:
    sizes = {np.shape(x)[d] for x, d in zip(operands, dims) if d is not None}
    assert len(sizes) == 1, f"operands disagree on the batch size: {sizes}"
    return sizes.pop()


def loop_over_examples(closed, operands, dims, size, out_dims):
    """Each output of `closed` per example, stacked along its `out_dims` entry."""
    per_example = [eval_jaxpr(closed, *[example_of(x, d, b) for x, d in zip(operands, dims)])
                   for b in range(size)]
    return [np.stack([np.asarray(outs[i]) for outs in per_example], axis=out_dim)
            for i, out_dim in enumerate(out_dims)]


def check_batching(fn, operands, dims, out_dims=None, axis_name=None, rtol=1e-10, atol=1e-12):
    """Asserts that batching `fn` over `operands` (batched at `dims`) matches the loop;
    every output is requested at its `out_dims` entry (0 by default)."""
    size = batch_size(operands, dims)
    example_avals = [aval_of_value(np.asarray(example_of(x, d, 0))) for x, d in zip(operands, dims)]
    closed = build(fn, *[ShapedArray(a.shape, a.dtype) for a in example_avals])
    n_out = len(closed.jaxpr.outvars)
    out_dims = [0] * n_out if out_dims is None else list(out_dims)
    batched, got_dims = batch_jaxpr(closed, list(dims), Axis(size, axis_name), out_dims)
    check_jaxpr(batched)
    assert got_dims == out_dims
    expected = loop_over_examples(closed, operands, dims, size, out_dims)
    ran = eval_jaxpr(batched, *operands)
    emitted = load_source(emit_jaxpr_source(batched, "f"), "batched").f(
        *[np.asarray(x) for x in operands])
    emitted = list(emitted) if n_out != 1 else [emitted]
    for want, got, from_python in zip(expected, ran, emitted):
        np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)
        np.testing.assert_allclose(np.asarray(from_python), want, rtol=rtol, atol=atol)
        assert np.asarray(got).dtype == want.dtype
    return batched


# Drawing batched operands for the families' hypothesis tests

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
