"""cholesky, triangular_solve and lu (`s2s/primitives/linalg/factorizations.py`): shape
rules, impls and emission.

NumPy is the oracle: np.linalg.solve on the explicit triangle for triangular_solve,
np.linalg.cholesky, and a textbook scalar getf2 loop for lu.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.core import ShapedArray
from s2s.emit.pyexpr import python_rules
from s2s.emit.python import emit_jaxpr_source
from s2s.errors import ShapeError
from s2s.primitives import linalg as la
from s2s.staging import Primitive
from tests.helpers import assert_same, check_staged, stage

SETTINGS = settings(max_examples=25, deadline=None)


def test_every_linalg_primitive_has_an_emission_rule():
    family = [p for p in vars(la).values() if isinstance(p, Primitive)]
    assert len(family) == 12, "s2s/primitives/linalg/__init__.py names the family's 12 primitives"
    assert [p.name for p in family if p not in python_rules] == []


# ---------------------------------------------------------------------------------------
# Well-conditioned matrices


def spd(rng, batch, n, dtype=np.float64):
    """Symmetric positive definite: A A^T + n I."""
    a = rng.normal(size=(*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


batches = st.sampled_from([(), (2,), (1, 3), (2, 2)])
sizes = st.integers(1, 5)
seeds = st.integers(0, 2**32 - 1)
float_dtypes = st.sampled_from([np.float32, np.float64])


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------
# cholesky


@SETTINGS
@given(batches, sizes, seeds, float_dtypes)
def test_cholesky_matches_numpy(batch, n, seed, dtype):
    a = spd(np.random.default_rng(seed), batch, n, dtype)
    assert la.cholesky.abstract_eval(ShapedArray(a.shape, dtype)) == ShapedArray(a.shape, dtype)
    check_staged(la.cholesky.bind, np.linalg.cholesky, a, **_tol(dtype))


@pytest.mark.parametrize("shape, dtype, message", [
    ((3,), np.float64, "at least 2 dimensions"),
    ((2, 3), np.float64, "square"),
    ((3, 3), np.int64, "float32, float64"),
    ((3, 3), np.float16, "float32, float64"),
])
def test_cholesky_shape_errors(shape, dtype, message):
    with pytest.raises(ShapeError, match=message):
        la.cholesky.abstract_eval(ShapedArray(shape, dtype))


def test_cholesky_emits_numpy():
    closed, _ = stage(la.cholesky.bind, np.eye(3))
    assert "np.linalg.cholesky(" in emit_jaxpr_source(closed, "f")


# ---------------------------------------------------------------------------------------
# triangular_solve

FLAGS = [dict(left_side=l, lower=lo, transpose_a=t, unit_diagonal=u)
         for l in (True, False) for lo in (True, False)
         for t in (True, False) for u in (True, False)]


def triangular_oracle(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    """Solves with np.linalg.solve on the explicit op(triangle of a)."""
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        n = a.shape[-1]
        t = t * (1 - np.eye(n, dtype=a.dtype)) + np.eye(n, dtype=a.dtype)
    if transpose_a:
        t = np.swapaxes(t, -1, -2)
    if left_side:
        return np.linalg.solve(t, b).astype(b.dtype)
    # x t = b  <=>  t^T x^T = b^T
    return np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)),
                       -1, -2).astype(b.dtype)


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(k for k, v in f.items() if v) or "none")
@settings(max_examples=10, deadline=None)
@given(batch=batches, n=sizes, k=st.integers(1, 3), seed=seeds, dtype=float_dtypes)
def test_triangular_solve_all_flags(flags, batch, n, k, seed, dtype):
    rng = np.random.default_rng(seed)
    # Big diagonal, junk in the other triangle: the solve must ignore it.
    a = (rng.normal(size=(*batch, n, n)) + 4 * np.eye(n)).astype(dtype)
    bshape = (*batch, n, k) if flags["left_side"] else (*batch, k, n)
    b = rng.normal(size=bshape).astype(dtype)
    out = la.triangular_solve.abstract_eval(ShapedArray(a.shape, dtype),
                                            ShapedArray(b.shape, dtype), **flags)
    assert out == ShapedArray(b.shape, dtype)
    check_staged(lambda a, b: la.triangular_solve.bind(a, b, **flags),
                 lambda a, b: triangular_oracle(a, b, **flags), a, b, **_tol(dtype))


def test_triangular_solve_ignores_the_other_triangle_and_the_unit_diagonal():
    a = np.array([[2.0, np.nan], [1.0, np.nan]])
    x = la.triangular_solve.bind(a, np.array([[2.0], [3.0]]), left_side=True, lower=True,
                                 transpose_a=False, unit_diagonal=False)
    np.testing.assert_allclose(x, [[1.0], [np.nan]])   # a[1, 1] is on the diagonal
    a = np.array([[np.nan, np.nan], [1.0, np.nan]])
    x = la.triangular_solve.bind(a, np.array([[2.0], [3.0]]), left_side=True, lower=True,
                                 transpose_a=False, unit_diagonal=True)
    np.testing.assert_allclose(x, [[2.0], [1.0]])


FLAGS0 = dict(left_side=True, lower=True, transpose_a=False, unit_diagonal=False)


@pytest.mark.parametrize("ashape, bshape, flags, dtypes_, message", [
    ((3,), (3, 1), FLAGS0, None, "at least 2 dimensions"),
    ((3, 4), (3, 1), FLAGS0, None, "square"),
    ((3, 3), (4, 2), FLAGS0, None, "rows"),
    ((3, 3), (3, 2), dict(FLAGS0, left_side=False), None, "columns"),
    ((2, 3, 3), (3, 3, 1), FLAGS0, None, "batch dimensions"),
    ((3, 3), (3,), FLAGS0, None, "batch dimensions"),
    ((3, 3), (3, 1), FLAGS0, (np.float64, np.float32), "one dtype"),
    ((3, 3), (3, 1), FLAGS0, (np.int32, np.int32), "float32, float64"),
])
def test_triangular_solve_shape_errors(ashape, bshape, flags, dtypes_, message):
    adt, bdt = dtypes_ or (np.float64, np.float64)
    with pytest.raises(ShapeError, match=message):
        la.triangular_solve.abstract_eval(ShapedArray(ashape, adt), ShapedArray(bshape, bdt),
                                          **flags)


def test_triangular_solve_emits_runtime_call_with_flags():
    closed, _ = stage(lambda a, b: la.triangular_solve.bind(a, b, **FLAGS0), np.eye(2),
                      np.ones((2, 1)))
    source = emit_jaxpr_source(closed, "f", arg_names=["a", "b"])
    assert ("rt.triangular_solve(a, b, left_side=True, lower=True, transpose_a=False, "
            "unit_diagonal=False)") in source, source


# ---------------------------------------------------------------------------------------
# lu


def getf2_reference(a):
    """LAPACK's unblocked getf2, one scalar at a time: (lu, pivots, permutation)."""
    a = np.array(a, dtype=a.dtype, copy=True)
    m, n = a.shape
    pivots = np.zeros(min(m, n), dtype=np.int32)
    perm = list(range(m))
    for j in range(min(m, n)):
        p = max(range(j, m), key=lambda i: (abs(a[i, j]), -i))   # first largest
        pivots[j] = p
        a[[j, p]] = a[[p, j]]
        perm[j], perm[p] = perm[p], perm[j]
        if a[j, j] != 0:
            for i in range(j + 1, m):
                a[i, j] /= a[j, j]
        for i in range(j + 1, m):
            for c in range(j + 1, n):
                a[i, c] -= a[i, j] * a[j, c]
    return a, pivots, np.array(perm, dtype=np.int32)


def batched_reference(a):
    batch = a.shape[:-2]
    flat = a.reshape(-1, *a.shape[-2:])
    outs = [getf2_reference(x) for x in flat]
    return [np.stack([o[i] for o in outs]).reshape(*batch, *outs[0][i].shape) if outs else None
            for i in range(3)]


def unpack(lu_, m, n):
    k = min(m, n)
    lower = np.tril(lu_[..., :, :k], -1) + np.eye(m, k)
    upper = np.triu(lu_[..., :k, :])
    return lower, upper


@SETTINGS
@given(batches, sizes, sizes, seeds, float_dtypes)
def test_lu_reconstructs_and_matches_getf2(batch, m, n, seed, dtype):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(*batch, m, n)).astype(dtype)
    avals = la.lu.abstract_eval(ShapedArray(a.shape, dtype))
    k = min(m, n)
    assert avals == [ShapedArray(a.shape, dtype), ShapedArray((*batch, k), np.int32),
                     ShapedArray((*batch, m), np.int32)]
    lu_, pivots, perm = la.lu.impl(a)
    lower, upper = unpack(lu_, m, n)
    permuted = np.take_along_axis(a, perm[..., :, None].astype(np.intp), axis=-2)
    np.testing.assert_allclose(lower @ upper, permuted, **_tol(dtype))
    # pivots and permutation describe the same row order.
    order = np.broadcast_to(np.arange(m), (*batch, m)).copy().reshape(-1, m)
    for row, piv in zip(order, pivots.reshape(-1, k)):
        for j, p in enumerate(piv):
            row[[j, p]] = row[[p, j]]
    np.testing.assert_array_equal(order.reshape(*batch, m), perm)
    check_staged(la.lu.bind, batched_reference, a, **_tol(dtype))


def test_lu_pivots_like_lapack_on_a_known_matrix():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]])
    lu_, pivots, perm = la.lu.bind(a)
    np.testing.assert_array_equal(pivots, [2, 2, 2])
    np.testing.assert_array_equal(perm, [2, 0, 1])
    assert pivots.dtype == np.int32 and perm.dtype == np.int32
    np.testing.assert_allclose(lu_, [[7.0, 8.0, 10.0], [1 / 7, 2 - 8 / 7, 3 - 10 / 7],
                                     [4 / 7, 0.5, 6 - 40 / 7 - 0.5 * (3 - 10 / 7)]])


def test_lu_of_a_singular_matrix_leaves_the_zero_column_unscaled():
    a = np.array([[0.0, 1.0], [0.0, 2.0]])
    lu_, pivots, perm = la.lu.bind(a)
    np.testing.assert_array_equal(pivots, [0, 1])
    np.testing.assert_array_equal(lu_, [[0.0, 1.0], [0.0, 2.0]])
    assert_same(lu_, getf2_reference(a)[0])


def test_lu_emits_a_tuple_assignment():
    closed, _ = stage(lambda a: la.lu.bind(a), np.eye(3))
    source = emit_jaxpr_source(closed, "f")
    assert "= rt.lu(" in source and "," in source.split("= rt.lu(")[0].splitlines()[-1]


@pytest.mark.parametrize("shape, dtype, message", [
    ((3,), np.float64, "at least 2 dimensions"),
    ((3, 3), np.int32, "float32, float64"),
])
def test_lu_shape_errors(shape, dtype, message):
    with pytest.raises(ShapeError, match=message):
        la.lu.abstract_eval(ShapedArray(shape, dtype))
