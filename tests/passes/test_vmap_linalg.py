"""Batching rules of dot_general and the factorizations and solves, held to a loop over
examples with the batch at every position and with shared (unbatched) operands; and the
shape of what they stage: a shared weight is read as it is, and a per-example weight
gradient emits as a readable NumPy outer product and runs through StableHLO."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.emit.python import emit_jaxpr_source
from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import linalg as la
from tests.passes.batching import check_batching
from tests.passes.handbuilt import arr, build, names
from tests.primitives.linalg.test_contraction import dot_problems

SETTINGS = settings(max_examples=20, deadline=None)
BATCH = 3


def stacked(make, shape, dim, rng):
    """BATCH examples of `make(shape, rng)` stacked at `dim`, or one when `dim` is None."""
    if dim is None:
        return make(shape, rng)
    return np.stack([make(shape, rng) for _ in range(BATCH)], axis=dim)


def integers(shape, rng):
    return rng.integers(-3, 4, size=shape).astype(np.float64)


def well_conditioned(shape, rng):
    """Far from singular, and no ties for LU's pivots to break: noise plus a big diagonal."""
    return rng.standard_normal(shape) + 2 * shape[-1] * np.eye(shape[-1])


def spd(shape, rng):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def batch_positions(data, shapes):
    """A batch position (or None) for operands of the per-example `shapes`, at least one
    of them batched."""
    dims = [data.draw(st.one_of(st.none(), st.integers(0, len(s)))) for s in shapes]
    if all(d is None for d in dims):
        i = data.draw(st.integers(0, len(shapes) - 1))
        dims[i] = data.draw(st.integers(0, len(shapes[i])))
    return dims


# ---------------------------------------------------------------------------------------
# dot_general


@SETTINGS
@given(problem=dot_problems(), data=st.data())
def test_dot_general_batches_either_or_both_operands_anywhere(problem, data):
    lhs, rhs, dn = problem
    dims = batch_positions(data, [lhs.shape, rhs.shape])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    operands = [stacked(integers, x.shape, d, rng) for x, d in zip((lhs, rhs), dims)]
    check_batching(lambda a, b: la.dot_general.bind(a, b, dimension_numbers=dn,
                                                    preferred_element_type=None),
                   operands, dims, rtol=0, atol=0)


def test_dot_general_keeps_preferred_element_type():
    rng = np.random.default_rng(0)
    x, w = integers((BATCH, 4), rng).astype(np.float32), integers((4, 2), rng).astype(np.float32)
    check_batching(lambda a, b: la.dot_general.bind(a, b, dimension_numbers=(((0,), (0,)), ((), ())),
                                                    preferred_element_type=np.dtype(np.float64)),
                   [x, w], [0, None])


def _matmul(a, b):
    return la.dot_general.bind(a, b, dimension_numbers=(((a.ndim - 1,), (0,)), ((), ())),
                               preferred_element_type=None)


def test_a_batch_of_inputs_times_a_shared_weight_is_one_matrix_product():
    """x @ W per example: the batch becomes a row dimension of x, W is read as it is,
    and the result's batch falls where x's free dims put it (no transpose)."""
    closed = build(_matmul, arr(4), arr(4, 2))
    batched, dims = batch_jaxpr(closed, [0, None], Axis(5), None)
    assert names(batched) == ["dot_general"] and dims == [0]
    assert batched.jaxpr.invars[1].aval.shape == (4, 2)
    assert "return x @ x_1" in emit_jaxpr_source(batched, "f")
    # Batched as the columns of a matrix argument: the batch falls at output axis 1.
    closed = build(_matmul, arr(3, 4), arr(4, 2))
    batched, dims = batch_jaxpr(closed, [None, 2], Axis(5), None)
    assert names(batched) == ["dot_general"] and dims == [2]


def test_per_example_weight_gradients_emit_as_an_outer_product_and_lower():
    """The gradient of a linear layer for every example: a batched outer product of the
    inputs and the output cotangents, emitted with broadcasting, and the same through
    StableHLO."""
    def loss(W, x, y):
        return np.sum((np.tanh(x @ W) - y) ** 2)

    rng = np.random.default_rng(0)
    W, xs, ys = rng.standard_normal((3, 2)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    per_example = s2s.vmap(s2s.grad(loss), in_axes=(None, 0, 0))
    source = s2s.emit_python(per_example, W, xs, ys)
    assert "x[..., None] * " in source and "einsum" not in source
    expected = np.stack([s2s.grad(loss)(W, x, y) for x, y in zip(xs, ys)])
    np.testing.assert_allclose(per_example(W, xs, ys), expected, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(s2s.jit(per_example)(W, xs, ys)), expected, rtol=1e-12)


def test_products_with_batch_dimensions_lower_to_stablehlo():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(np.asarray(s2s.jit(lambda x, y: np.einsum("bij,bjk->bik", x, y))(a, b)),
                               a @ b, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(s2s.jit(lambda x, y: x @ y)(a, b)), a @ b, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Factorizations and solves


@st.composite
def matrix_shape(draw, n=None):
    """Per-example leading dims (0 or 1 of them) and a square size."""
    lead = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    return lead, draw(st.integers(1, 3)) if n is None else n


@SETTINGS
@given(prim=st.sampled_from([la.cholesky, la.lu, la.det, la.slogdet]), data=st.data())
def test_matrix_functions_batch_with_the_batch_anywhere(prim, data):
    lead, n = data.draw(matrix_shape())
    shape = lead + (n, n)
    if prim is la.lu:   # LU takes rectangular matrices too
        shape = lead + (n, data.draw(st.integers(1, 3)))
    dim = data.draw(st.integers(0, len(shape)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    make = spd if prim is la.cholesky else (integers if prim is la.lu else well_conditioned)
    x = stacked(make, shape, dim, rng)
    n_out = 3 if prim is la.lu else 2 if prim is la.slogdet else 1
    check_batching(lambda a: prim.bind(a), [x], [dim], out_dims=[0] * n_out)


@SETTINGS
@given(left_side=st.booleans(), lower=st.booleans(), transpose_a=st.booleans(),
       unit_diagonal=st.booleans(), data=st.data())
def test_triangular_solve_batches_either_or_both_operands_anywhere(
        left_side, lower, transpose_a, unit_diagonal, data):
    lead, n = data.draw(matrix_shape())
    k = data.draw(st.integers(1, 3))
    a_shape, b_shape = lead + (n, n), lead + ((n, k) if left_side else (k, n))
    dims = batch_positions(data, [a_shape, b_shape])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a, b = stacked(well_conditioned, a_shape, dims[0], rng), stacked(integers, b_shape, dims[1], rng)
    flags = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                 unit_diagonal=unit_diagonal)
    check_batching(lambda x, y: la.triangular_solve.bind(x, y, **flags), [a, b], dims, rtol=1e-9)


@SETTINGS
@given(data=st.data())
def test_solve_batches_either_or_both_operands_anywhere(data):
    lead, n = data.draw(matrix_shape())
    a_shape, b_shape = lead + (n, n), lead + (n, data.draw(st.integers(1, 3)))
    dims = batch_positions(data, [a_shape, b_shape])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a, b = stacked(well_conditioned, a_shape, dims[0], rng), stacked(integers, b_shape, dims[1], rng)
    check_batching(lambda x, y: la.solve.bind(x, y), [a, b], dims, rtol=1e-9)


def test_a_shared_matrix_solves_every_example_at_once():
    """solve(A, b) with A shared: one solve of b's examples folded into its columns,
    never A copied per example."""
    closed = build(lambda a, b: la.solve.bind(a, b), arr(3, 3), arr(3, 2))
    batched, dims = batch_jaxpr(closed, [None, 0], Axis(4), None)
    assert dims == [1]
    assert "broadcast_in_dim" not in names(batched) and names(batched).count("solve") == 1
    solve_eqn = next(e for e in batched.jaxpr.eqns if e.primitive is la.solve)
    assert [v.aval.shape for v in solve_eqn.invars] == [(3, 3), (3, 8)]


def test_a_batch_among_the_leading_dims_stays_there():
    closed = build(lambda a: la.det.bind(a), arr(2, 3, 3))
    batched, dims = batch_jaxpr(closed, [1], Axis(4), None)
    assert names(batched) == ["det"] and dims == [1]
