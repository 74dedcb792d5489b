"""Derivative rules of gather and scatter_add, held to jax's.

gather is linear in its operand and scatter_add in (operand, updates); the integer index
arrays get no tangent. Each is the other's transpose, so a cotangent read by repeated
indices accumulates. Tests write each function with the NumPy surface (integer-array
indexing, np.take, np.take_along_axis) or `prim.bind`, and with jax.numpy, and compare
s2s.jvp / s2s.vjp (`check_derivatives`) and s2s.grad with jax's. Index arrays are
arguments of the function, so they are staged, not constants.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s.autodiff import vjp_parts
from s2s.passes.jvp import jvp_rules
from s2s.passes.transpose import transpose_rules
from s2s.primitives import indexing as ix
from tests.helpers import check_derivatives
from tests.strategies import examples

SETTINGS = examples(6, 15)

LINEAR_PRIMITIVES = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims",
                     "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice",
                     "rev", "gather", "scatter_add", "reduce_sum", "add_any"}


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def ints(low, high, shape, seed=0):
    return np.random.default_rng(seed).integers(low, high, size=shape).astype(np.int64)


def jax_gather(x, indices, axes):
    """gather's layout with jnp: the indexed axes moved to the front, then indexed."""
    return jnp.moveaxis(x, axes, tuple(range(len(axes))))[tuple(indices)]


def jax_scatter_add(x, updates, indices, axes):
    front = tuple(range(len(axes)))
    moved = jnp.moveaxis(x, axes, front).at[tuple(indices)].add(updates)
    return jnp.moveaxis(moved, front, axes)


@st.composite
def gather_cases(draw, repeats=False):
    """An operand, distinct axes (in any order) and in-range index arrays of one shape."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    x = rand(shape, draw(st.integers(0, 2 ** 16)))
    n_axes = draw(st.integers(1, len(shape)))
    axes = tuple(draw(st.permutations(range(len(shape))))[:n_axes])
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4))
    seed = draw(st.integers(0, 2 ** 16))
    # With `repeats`, indices come from a narrow range, so positions are read many times.
    indices = tuple(ints(0, 1 if repeats else shape[a], batch, seed + k)
                    for k, a in enumerate(axes))
    return x, axes, indices


# ---------------------------------------------------------------------------------------
# gather and scatter_add, bound directly


@SETTINGS
@given(gather_cases())
def test_gather(case):
    x, axes, indices = case

    def f(x, *indices):
        return ix.gather.bind(x, *indices, axes=axes)

    check_derivatives(f, lambda x, *indices: jax_gather(x, indices, axes), x, *indices)


@SETTINGS
@given(gather_cases(repeats=True))
def test_gather_with_repeated_indices(case):
    """Every read position is read many times: its cotangent is the sum of all of them."""
    x, axes, indices = case

    def f(x, *indices):
        return ix.gather.bind(x, *indices, axes=axes)

    check_derivatives(f, lambda x, *indices: jax_gather(x, indices, axes), x, *indices)


@SETTINGS
@given(gather_cases(), st.booleans())
def test_scatter_add(case, repeats):
    x, axes, indices = case
    if repeats:
        indices = tuple(np.zeros_like(i) for i in indices)
    updates = rand(np.shape(jax_gather(x, indices, axes)), 7)

    def f(x, updates, *indices):
        return ix.scatter_add.bind(x, updates, *indices, axes=axes)

    def g(x, updates, *indices):
        return jax_scatter_add(x, updates, indices, axes)

    check_derivatives(f, g, x, updates, *indices)


def test_scatter_add_into_a_constant_operand():
    """Only the updates are linear: the operand's tangent is instantiated zeros."""
    def f(updates, i):
        return ix.scatter_add.bind(np.ones((4, 2)), updates * updates, i, axes=(0,))

    def g(updates, i):
        return jnp.ones((4, 2)).at[i].add(updates * updates)

    check_derivatives(f, g, rand((5, 2)), np.array([3, 0, 3, 3, 1]))


def test_scatter_add_of_constant_updates():
    """Only the operand is linear: the tangent passes through unchanged."""
    def f(x, i):
        return ix.scatter_add.bind(x * x, np.ones((3, 2)), i, axes=(0,))

    def g(x, i):
        return (x * x).at[i].add(jnp.ones((3, 2)))

    check_derivatives(f, g, rand((4, 2)), np.array([1, 1, 2]))


def test_gather_and_scatter_add_are_transposes():
    x, u, i = rand((5, 3)), rand((4, 3), 1), np.array([4, 0, 4, 2])
    transposed = s2s.linear_transpose(lambda x: ix.gather.bind(x, i, axes=(0,)), x)
    (ct,) = transposed(u)
    expected = np.zeros((5, 3))
    np.add.at(expected, i, u)
    np.testing.assert_allclose(ct, expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# The NumPy surface: integer-array indexing, take, take_along_axis


@SETTINGS
@given(st.data())
def test_integer_array_indexing(data):
    x = rand(data.draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4)),
             data.draw(st.integers(0, 99)))
    n = x.shape[0]
    i = np.asarray(data.draw(hnp.arrays(np.int64, data.draw(hnp.array_shapes(max_dims=2)),
                                        elements=st.integers(-n, n - 1))))

    def f(x, i):
        return x[i] * 2.0 + x[i, ..., ::-1]

    check_derivatives(f, lambda x, i: x[i] * 2.0 + x[i, ..., ::-1], x, i)


@pytest.mark.parametrize("which", ["middle", "split", "pair", "after_slice", "with_int"])
def test_advanced_index_placements(which):
    x = rand((4, 5, 3))
    i = np.array([[3, 0], [3, 3]])
    j = np.array([1, 2])

    def pick(x, i, j):   # the same text works on NumPy, s2s and jax arrays
        if which == "middle":
            return x[:, j]
        if which == "split":
            return x[i, :, j]
        if which == "pair":
            return x[i, j]
        if which == "after_slice":
            return x[1:, j, ::2]
        return x[2, :, j]

    def f(x, i, j):
        return pick(x, i, j) ** 2

    check_derivatives(f, lambda x, i, j: pick(x, i, j) ** 2, x, i, j)


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_take(axis):
    x, i = rand((3, 4)), np.array([2, 0, 2, 1, 2])

    def f(x, i):
        return np.take(x, i, axis=axis)

    check_derivatives(f, lambda x, i: jnp.take(x, i, axis=axis), x, i)


def test_take_along_axis():
    x = rand((3, 4))
    i = np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])

    def f(x, i):
        return np.take_along_axis(x, i, axis=1)

    check_derivatives(f, lambda x, i: jnp.take_along_axis(x, i, axis=1), x, i)


def test_static_index_array():
    idx = np.array([1, 1, 0, 2, 1])

    def f(x):
        return x[idx] * x[idx]

    check_derivatives(f, lambda x: x[idx] * x[idx], rand((3, 2)))


# ---------------------------------------------------------------------------------------
# grad against jax.grad, and the backward pass is linear


def embed(table, tokens, weights):
    rows = table[tokens]                         # gather, tokens repeat
    scored = np.take_along_axis(rows, np.argsort(rows, axis=1), axis=1)
    return np.sum(np.tanh(rows) * weights[:, None]) + np.sum(scored[:, :1] ** 2)


def jax_embed(table, tokens, weights):
    rows = table[tokens]
    scored = jnp.take_along_axis(rows, jnp.argsort(rows, axis=1), axis=1)
    return jnp.sum(jnp.tanh(rows) * weights[:, None]) + jnp.sum(scored[:, :1] ** 2)


def gather_sum(table, tokens, weights):
    return np.sum(table[tokens] * weights[:, None])


def jax_gather_sum(table, tokens, weights):
    return jnp.sum(table[tokens] * weights[:, None])


EMBED_ARGS = (rand((5, 3)), np.array([4, 1, 4, 4, 0, 1]), rand((6,), 1))


@pytest.mark.parametrize("fns", [(gather_sum, jax_gather_sum), (embed, jax_embed)],
                         ids=["gather_sum", "embed"])
def test_grad_matches_jax(fns):
    fn, jax_fn = fns
    got = s2s.grad(fn, argnums=(0, 2))(*EMBED_ARGS)
    expected = jax.grad(jax_fn, argnums=(0, 2))(*EMBED_ARGS)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def _indexing_only(x, i, j):
    y = ix.scatter_add.bind(x, x[i], i, axes=(0,))
    return np.take(y, j, axis=1)[i]


def test_backward_pass_is_linear():
    args = (rand((4, 3)), np.array([3, 3, 0]), np.array([2, 0]))
    closed = s2s.make_jaxpr(_indexing_only)(*args)
    parts = vjp_parts(closed, [True, False, False], [True])
    used = {eqn.primitive.name for eqn in parts.backward.eqns}
    assert used <= LINEAR_PRIMITIVES, used - LINEAR_PRIMITIVES
    assert {"gather", "scatter_add"} <= used

    def jax_fn(x, i, j):
        y = x.at[i].add(x[i])
        return jnp.take(y, j, axis=1)[i]

    check_derivatives(_indexing_only, jax_fn, *args)


def test_every_indexing_primitive_has_derivative_rules():
    prims = [p for p in vars(ix).values() if isinstance(p, s2s.staging.Primitive)]
    assert {p.name for p in prims} == {"gather", "scatter_add"}
    for p in prims:
        assert p in jvp_rules and p in transpose_rules, p
