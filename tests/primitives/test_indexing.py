"""gather and scatter_add against element-by-element NumPy loops, and their shape rules."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import ShapedArray
from s2s.emit.pyexpr import Expr, python_rules
from s2s.errors import ShapeError
from s2s.primitives import indexing as I
from s2s_runtime import indexing as rt_indexing
from tests.helpers import check_staged, stage
from tests.primitives.test_structural import SETTINGS, random_array


def gather_oracle(x, indices, axes):
    """Loops over every position of the index arrays and every remaining axis."""
    batch = indices[0].shape
    rest = [a for a in range(x.ndim) if a not in axes]
    out = np.zeros(batch + tuple(x.shape[a] for a in rest), x.dtype)
    for b in itertools.product(*map(range, batch)):
        for r in itertools.product(*[range(x.shape[a]) for a in rest]):
            where = [0] * x.ndim
            for i, a in zip(indices, axes):
                where[a] = min(max(int(i[b]), 0), x.shape[a] - 1)
            for a, k in zip(rest, r):
                where[a] = k
            out[b + r] = x[tuple(where)]
    return out


def scatter_add_oracle(x, updates, indices, axes):
    out = x.copy()
    batch = indices[0].shape
    rest = [a for a in range(x.ndim) if a not in axes]
    for b in itertools.product(*map(range, batch)):
        for r in itertools.product(*[range(x.shape[a]) for a in rest]):
            where = [0] * x.ndim
            for i, a in zip(indices, axes):
                where[a] = min(max(int(i[b]), 0), x.shape[a] - 1)
            for a, k in zip(rest, r):
                where[a] = k
            out[tuple(where)] += updates[b + r]
    return out


@st.composite
def gather_cases(draw, in_range=True, dtypes=(np.float32, np.float64, np.int32, np.bool_)):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    k = draw(st.integers(1, len(shape)))
    axes = tuple(draw(st.permutations(range(len(shape))))[:k])
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    lo, extra = (0, 0) if in_range else (-2, 2)
    indices = [rng.integers(lo, shape[a] + extra, size=batch).astype(index_dtype) for a in axes]
    x = random_array(shape, draw(st.sampled_from(dtypes)), seed)
    return x, indices, axes


@SETTINGS
@given(gather_cases())
def test_gather(case):
    x, indices, axes = case
    check_staged(lambda x, *ix: I.gather.bind(x, *ix, axes=axes),
                 lambda x, *ix: gather_oracle(x, ix, axes), x, *indices)


@SETTINGS
@given(gather_cases(in_range=False))
def test_gather_clamps_out_of_range_indices(case):
    x, indices, axes = case
    np.testing.assert_array_equal(I.gather.bind(x, *indices, axes=axes),
                                  gather_oracle(x, indices, axes))
    np.testing.assert_array_equal(rt_indexing.gather(x, indices, axes),
                                  gather_oracle(x, indices, axes))


@SETTINGS
@given(gather_cases(dtypes=(np.float32, np.float64, np.int32)))
def test_scatter_add(case):
    x, indices, axes = case
    out_shape = gather_oracle(x, indices, axes).shape
    updates = random_array(out_shape, x.dtype, 3)
    check_staged(lambda x, u, *ix: I.scatter_add.bind(x, u, *ix, axes=axes),
                 lambda x, u, *ix: scatter_add_oracle(x, u, ix, axes), x, updates, *indices)


@SETTINGS
@given(gather_cases(in_range=False, dtypes=(np.float64,)))
def test_scatter_add_clamps_like_gather(case):
    x, indices, axes = case
    updates = random_array(gather_oracle(x, indices, axes).shape, x.dtype, 3)
    np.testing.assert_allclose(I.scatter_add.bind(x, updates, *indices, axes=axes),
                               scatter_add_oracle(x, updates, indices, axes))


def test_scatter_add_accumulates_duplicates():
    x = np.zeros(3)
    out = I.scatter_add.bind(x, np.ones(4), np.array([0, 2, 0, 0]), axes=(0,))
    np.testing.assert_array_equal(out, [3.0, 0.0, 1.0])
    np.testing.assert_array_equal(x, np.zeros(3))  # the operand is not modified


def test_scatter_add_is_the_transpose_of_gather():
    """<gather(x), u> == <x, scatter_add(0, u)> for every x and u."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5))
    i, j = rng.integers(0, 5, (2, 6)), rng.integers(0, 4, (2, 6))
    u = rng.standard_normal((2, 6, 3))
    lhs = np.sum(I.gather.bind(x, i, j, axes=(2, 0)) * u)
    rhs = np.sum(x * I.scatter_add.bind(np.zeros_like(x), u, i, j, axes=(2, 0)))
    np.testing.assert_allclose(lhs, rhs)


def test_gather_keeps_the_weak_type():
    weak = ShapedArray((3,), np.float32, weak_type=True)
    index = ShapedArray((2,), np.int32)
    assert I.gather.abstract_eval(weak, index, axes=(0,)).weak_type


# ---------------------------------------------------------------------------------------
# Shape errors

f32 = lambda *shape: ShapedArray(shape, np.float32)  # noqa: E731
i32 = lambda *shape: ShapedArray(shape, np.int32)  # noqa: E731


@pytest.mark.parametrize("prim, avals, params, match", [
    (I.gather, [f32(3)], dict(axes=()), "at least one"),
    (I.gather, [f32(3), i32(2)], dict(axes=(0, 1)), "one axis per index"),
    (I.gather, [f32(3), i32(2)], dict(axes=(1,)), "out of range"),
    (I.gather, [f32(3, 3), i32(2), i32(2)], dict(axes=(0, 0)), "repeated"),
    (I.gather, [f32(3), f32(2)], dict(axes=(0,)), "integer dtype"),
    (I.gather, [f32(3, 3), i32(2), i32(3)], dict(axes=(0, 1)), "one shape"),
    (I.gather, [f32(0), i32(2)], dict(axes=(0,)), "size 0"),
    (I.scatter_add, [f32(3), f32(2), i32(2)], dict(axes=(1,)), "out of range"),
    (I.scatter_add, [f32(3, 2), f32(2), i32(2)], dict(axes=(0,)), "do not match"),
    (I.scatter_add, [f32(3), i32(2), i32(2)], dict(axes=(0,)), "dtype"),
    (I.scatter_add, [ShapedArray((3,), bool), ShapedArray((2,), bool), i32(2)], dict(axes=(0,)),
     "numeric"),
])
def test_shape_errors(prim, avals, params, match):
    with pytest.raises(ShapeError, match=match):
        prim.abstract_eval(*avals, **params)


def test_gather_from_an_empty_axis_with_no_indices_is_fine():
    x = np.zeros((0, 2), np.float32)
    check_staged(lambda x, i: I.gather.bind(x, i, axes=(0,)), lambda x, i: x[i], x,
                 np.zeros((0,), np.int64))


# ---------------------------------------------------------------------------------------
# Emitted spelling


@pytest.mark.parametrize("shape, axes, batch, text", [
    ((3, 4), (0,), (2,), "x[i]"),
    ((3, 4), (0, 1), (2,), "x[i, j]"),
    ((3, 4), (1, 0), (2,), "x[j, i]"),
    ((3, 4), (1,), (), "x[:, i]"),
    ((3, 4), (1,), (2,), "np.moveaxis(x, 1, 0)[i]"),
    ((3, 4, 5), (2, 1), (2,), "np.moveaxis(x, (2, 1), (0, 1))[i, j]"),
])
def test_gather_spelling(shape, axes, batch, text):
    indices = [np.zeros(batch, np.int64) for _ in axes]
    closed, _ = stage(lambda x, *ix: I.gather.bind(x, *ix, axes=axes),
                      np.zeros(shape, np.float32), *indices)
    (eqn,) = closed.eqns
    names = [Expr(n) for n in ("i", "j")]
    assert python_rules[I.gather](eqn, Expr("x"), *names[:len(axes)]).text == text


def test_scatter_add_spelling():
    closed, _ = stage(lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(1,)),
                      np.zeros((3, 4)), np.zeros((2, 3)), np.zeros(2, np.int64))
    (eqn,) = closed.eqns
    assert python_rules[I.scatter_add](eqn, Expr("x"), Expr("u"), Expr("i")).text == \
        "rt.scatter_add(x, u, (i,), (1,))"
