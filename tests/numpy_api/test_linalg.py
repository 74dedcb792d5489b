"""The NumPy surface of products and np.linalg, held to NumPy: values, shapes and dtypes.

Each case runs staged (jaxpr, eval_jaxpr and the emitted module via check_staged) and
eagerly on NumPy arrays.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypothesis.extra.numpy as hnp

import s2s
from s2s.errors import S2SError, ShapeError, UnsupportedFunctionError
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api import linalg as L
from s2s.staging import JaxprBuilder
from tests.helpers import assert_same, check_numpy_and_jax, check_staged
from tests.strategies import examples

SETTINGS = settings(max_examples=25, deadline=None)


def rand(shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed + 7 * len(shape) + int(np.prod(shape)))
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def check_both(s2s_fn, numpy_fn, *args, rtol=1e-6, atol=1e-6):
    """Staged (every backend) and eager, against NumPy."""
    closed = check_staged(s2s_fn, numpy_fn, *args, rtol=rtol, atol=atol)
    expected, got = numpy_fn(*args), s2s_fn(*args)
    if isinstance(expected, tuple):
        for g, e in zip(got, expected, strict=True):
            assert_same(g, e, rtol, atol, "eager: ")
    else:
        assert_same(got, expected, rtol, atol, "eager: ")
    return closed


def _tol(*arrays):
    single = all(np.asarray(a).dtype in (np.float32, np.int8, np.int16, np.bool_)
                 for a in arrays)
    return dict(rtol=2e-4, atol=2e-4) if single else dict(rtol=1e-9, atol=1e-9)


def test_registered():
    for fn in (np.dot, np.matmul, np.vdot, np.inner, np.outer, np.tensordot, np.einsum,
               np.trace, np.kron, np.linalg.cholesky, np.linalg.solve, np.linalg.inv,
               np.linalg.det, np.linalg.slogdet, np.linalg.norm, np.linalg.multi_dot,
               np.linalg.matmul, np.linalg.tensordot, np.linalg.outer):
        assert fn in NUMPY_IMPLS, fn


# ---------------------------------------------------------------------------------------
# matmul

MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3,)),
    ((3,), (5, 3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)),
    ((1, 2, 3), (4, 3, 5)), ((6, 1, 2, 3), (5, 3, 4)), ((2, 1, 2, 3), (1, 4, 3, 2)),
    ((0, 2, 3), (3, 4)), ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_shapes(sa, sb):
    a, b = rand(sa), rand(sb, seed=1)
    check_both(L.matmul, np.matmul, a, b)


@pytest.mark.parametrize("da, db", [(np.float32, np.float32), (np.int32, np.float32),
                                    (np.int32, np.int64), (np.bool_, np.bool_),
                                    (np.float32, np.float64), (np.int8, np.int8)])
def test_matmul_dtypes(da, db):
    a, b = rand((2, 3), da), rand((3, 4), db, seed=1)
    check_both(L.matmul, np.matmul, a, b, **_tol(a, b))


def test_matmul_emits_the_operator():
    from tests.helpers import stage
    from s2s.emit.python import emit_jaxpr_source
    closed, _ = stage(L.matmul, rand((2, 3)), rand((3, 4)))
    assert "a @ b" in emit_jaxpr_source(closed, "f", arg_names=["a", "b"])


@pytest.mark.parametrize("sa, sb, message", [
    ((), (3,), "scalar"), ((3,), (), "scalar"), ((2, 3), (4, 5), "do not align"),
    ((3,), (4,), "do not align"), ((2, 2, 3), (3, 3, 4), "broadcast"),
])
def test_matmul_errors(sa, sb, message):
    with pytest.raises(ShapeError, match=message):
        L.matmul(rand(sa), rand(sb))


# ---------------------------------------------------------------------------------------
# dot, vdot, inner, outer, tensordot, kron, multi_dot

DOT_SHAPES = [((), ()), ((), (3,)), ((2, 3), ()), ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
              ((2, 3), (3, 4)), ((2, 5, 3), (3,)), ((2, 5, 3), (4, 3, 6)), ((3,), (2, 3, 4))]


@pytest.mark.parametrize("sa, sb", DOT_SHAPES)
def test_dot(sa, sb):
    check_both(L.dot, np.dot, rand(sa), rand(sb, seed=1))


def test_dot_with_python_scalars_types_them_strongly():
    x32 = rand((2, 3), np.float32)
    for fn, np_fn in ((L.dot, np.dot), (L.inner, np.inner), (L.outer, np.outer),
                      (L.kron, np.kron)):
        assert_same(fn(x32, 2.0), np_fn(x32, 2.0))
        assert_same(fn(3, x32), np_fn(3, x32))
        check_staged(lambda x: fn(x, 2.0), lambda x: np_fn(x, 2.0), x32)
    assert_same(L.tensordot(x32, 2.0, 0), np.tensordot(x32, 2.0, 0))
    assert_same(L.einsum("ij,->ij", x32, 2.0), np.einsum("ij,->ij", x32, 2.0))


def test_dot_errors():
    with pytest.raises(ShapeError, match="not aligned"):
        L.dot(rand((2, 3)), rand((4, 5)))


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((2, 3), (6,)), ((2, 3), (3, 2))])
def test_vdot(sa, sb):
    check_both(L.vdot, np.vdot, rand(sa), rand(sb, seed=1))
    check_both(L.vdot, np.vdot, rand(sa, np.int32), rand(sb, np.int32, seed=1))


def test_vdot_errors():
    with pytest.raises(ShapeError, match="elements"):
        L.vdot(rand((3,)), rand((4,)))


@pytest.mark.parametrize("sa, sb", [((), (3,)), ((3,), (3,)), ((2, 3), (3,)), ((2, 3), (4, 3)),
                                    ((2, 4, 3), (5, 3))])
def test_inner(sa, sb):
    check_both(L.inner, np.inner, rand(sa), rand(sb, seed=1))


def test_inner_errors():
    with pytest.raises(ShapeError, match="last dimension"):
        L.inner(rand((2, 3)), rand((3, 2)))


@pytest.mark.parametrize("sa, sb", [((3,), (4,)), ((2, 3), (4,)), ((), (3,)), ((2, 2), (3, 1))])
def test_outer(sa, sb):
    check_both(L.outer, np.outer, rand(sa), rand(sb, seed=1))


@pytest.mark.parametrize("sa, sb, axes", [
    ((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 4), 1), ((2, 3), (4, 5), 0), ((3, 4), (3, 4), 2),
    ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])), ((2, 3, 4), (5, 2), ([0], [1])),
    ((2, 3, 4), (4, 2), (0, 1)), ((2, 3, 4), (3, 4, 2), ((-2, -1), (0, 1))),
    ((2, 3), (3, 2), ([0, 1], [1, 0])),
])
def test_tensordot(sa, sb, axes):
    check_both(lambda a, b: L.tensordot(a, b, axes), lambda a, b: np.tensordot(a, b, axes),
               rand(sa), rand(sb, seed=1))


@pytest.mark.parametrize("sa, sb, axes, message", [
    ((2, 3), (4, 5), 1, "shape-mismatch"), ((2, 3), (3,), 3, "cannot contract"),
    ((2, 3), (3, 2), ([0], [1, 0]), "paired"), ((2, 3), (3, 2), ([0, 0], [1, 1]), "repeated"),
])
def test_tensordot_errors(sa, sb, axes, message):
    with pytest.raises(ShapeError, match=message):
        L.tensordot(rand(sa), rand(sb), axes)


@pytest.mark.parametrize("sa, sb, da", [((2, 3), (4, 5), np.float64), ((3,), (2,), np.float64),
                                        ((2, 2), (3,), np.int32), ((2,), (2, 3, 1), np.float32)])
def test_kron(sa, sb, da):
    check_both(L.kron, np.kron, rand(sa, da), rand(sb, seed=1))


def test_multi_dot():
    a, b, c = rand((3,)), rand((3, 4), seed=1), rand((4, 2), seed=2)
    check_both(lambda a, b, c: L.multi_dot([a, b, c]), lambda a, b, c: np.linalg.multi_dot([a, b, c]),
               a, b, c)


@SETTINGS
@given(st.integers(0, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([np.float32, np.float64, np.int32]))
def test_matmul_drawn_batches(nbatch, m, k, n, dtype):
    batch_a = tuple(np.random.default_rng(nbatch + m).integers(1, 3, size=nbatch))
    batch_b = tuple(1 if i % 2 else d for i, d in enumerate(batch_a))
    a, b = rand(batch_a + (m, k), dtype), rand(batch_b + (k, n), dtype, seed=1)
    check_both(L.matmul, np.matmul, a, b, **_tol(a, b))


# ---------------------------------------------------------------------------------------
# einsum

EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]),
    ("ji,jk->ik", [(3, 2), (3, 4)]),
    ("ij,jk->ki", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bij,bkj->bki", [(5, 2, 3), (5, 4, 3)]),
    ("ibj,jbk->bik", [(2, 5, 3), (3, 5, 4)]),
    ("i,i->", [(3,), (3,)]),
    ("i,i", [(3,), (3,)]),
    ("i,i->i", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->i", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ijk->kij", [(2, 3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("ii->", [(3, 3)]),
    ("iij->ij", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),
    ("bii->b", [(2, 3, 3)]),
    ("iii->i", [(3, 3, 3)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (5, 3, 4)]),
    ("...ij,...jk", [(1, 2, 3), (4, 3, 5)]),
    ("...ij,jk->...ik", [(2, 5, 2, 3), (3, 4)]),
    ("...i,...i->...", [(2, 3), (3,)]),
    ("i...->...", [(2, 3, 4)]),
    ("a...", [(2, 3)]),
    ("...a,b", [(2, 3), (4,)]),
    ("i...i", [(2, 3, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 5)]),
    ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("bi,bij,bj->b", [(4, 2), (4, 2, 3), (4, 3)]),
    ("ij,ij,ij->ij", [(2, 3), (2, 3), (2, 3)]),
    ("ijk,ikl,ilm->ijm", [(2, 2, 3), (2, 3, 4), (2, 4, 2)]),
    ("ij,jk->", [(2, 3), (3, 4)]),
    ("ij,kl->ijkl", [(2, 3), (4, 2)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,ij->ij", [(2, 1), (1, 3)]),
    ("i,i", [(3,), (1,)]),
    ("ij,j->i", [(2, 1), (3,)]),
    (" i j , j k -> i k ", [(2, 3), (3, 4)]),
    ("Ba,aA", [(2, 3), (3, 4)]),
    ("ij,->ij", [(2, 3), ()]),
    (",->", [(), ()]),
    ("i,->i", [(3,), ()]),
]


@pytest.mark.parametrize("spec, shapes", EINSUM_CASES)
def test_einsum(spec, shapes):
    args = [rand(s, seed=i) for i, s in enumerate(shapes)]
    check_both(lambda *xs: L.einsum(spec, *xs), lambda *xs: np.asarray(np.einsum(spec, *xs)),
               *args)


@pytest.mark.parametrize("spec, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->i", [(2, 3)]),
                                          ("ii", [(3, 3)]), ("ij,ij->", [(2, 3), (2, 3)])])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.bool_])
def test_einsum_dtypes(spec, shapes, dtype):
    args = [rand(s, dtype, seed=i) for i, s in enumerate(shapes)]
    check_both(lambda *xs: L.einsum(spec, *xs), lambda *xs: np.asarray(np.einsum(spec, *xs)),
               *args, **_tol(*args))


def test_einsum_mixed_dtypes_and_dtype_argument():
    a, b = rand((2, 3), np.int32), rand((3, 4), np.float32)
    check_both(lambda a, b: L.einsum("ij,jk", a, b), lambda a, b: np.einsum("ij,jk", a, b), a, b)
    check_both(lambda a: L.einsum("ij->i", a, dtype=np.float64),
               lambda a: np.einsum("ij->i", a, dtype=np.float64), a)
    with pytest.raises(ShapeError, match="cannot cast"):
        L.einsum("ij->i", b, dtype=np.int32)


def test_einsum_optimize_is_accepted():
    a, b = rand((2, 3)), rand((3, 4))
    assert_same(L.einsum("ij,jk", a, b, optimize=True), np.einsum("ij,jk", a, b, optimize=True))


@pytest.mark.parametrize("spec, shapes, message", [
    ("ij,jk", [(2, 3), (4, 3)], "size"),
    ("ij->iij", [(2, 3)], "more than once"),
    ("ii->i", [(2, 3)], "repeated over dimensions of sizes"),
    ("ij->k", [(2, 3)], "appears in no operand"),
    ("ijk", [(2, 3)], "subscripts for an operand"),
    ("ij", [(2, 3, 4)], "subscripts for an operand"),
    ("ij,jk", [(2, 3)], "names 2 operands"),
    ("i1", [(2, 3)], "letters"),
    ("...i->i", [(2, 3)], "no '...'"),
    ("......i", [(2, 3)], "more than once"),
])
def test_einsum_errors(spec, shapes, message):
    with pytest.raises(ShapeError, match=message):
        L.einsum(spec, *[rand(s) for s in shapes])


@pytest.mark.parametrize("interleaved", [
    lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]),
    lambda a, b: np.einsum(a, [0, 1], b, [1, 2]),            # implicit output, as 'ab,bc'
    lambda a, b: np.einsum(a, [Ellipsis, 1], b, [1, 2], [Ellipsis, 2]),
    lambda a, b: np.einsum(a, (25, 30), b, (30, 51), [51, 25]),   # tuples; ints up to 51
    lambda a, b: np.einsum(a, [0, 1], [1]),                    # one operand
    lambda a, b: np.einsum(a, [30, 1], b, [1, 2]),             # implicit output: 2 (C) before 30 (e)
    lambda a, b: np.einsum(a, [Ellipsis, 0], b, [0, 40]),
])
def test_einsum_interleaved_sublists(interleaved):
    args = (rand((2, 3), seed=0), rand((3, 4), seed=1))
    check_numpy_and_jax(interleaved, *args, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("sublists, message", [
    (([0, 52],), "ints from 0 to 51"), (([0, "i"],), "holds 'i'"), (([True, 0],), "holds True"),
    (("ij",), "must be a list of ints"),
])
def test_einsum_bad_sublists(sublists, message):
    with pytest.raises(ShapeError, match=message):
        L.einsum(rand((2, 2)), *sublists)


def test_einsum_unsupported_forms():
    a = rand((2, 2))
    with pytest.raises(UnsupportedFunctionError, match="4 operands"):
        L.einsum("i,i,i,i", *[rand((2,))] * 4)
    with pytest.raises(UnsupportedFunctionError, match="out="):
        L.einsum("ij", a, out=a)


def test_einsum_matmul_is_one_dot_general():
    from tests.helpers import stage
    closed, _ = stage(lambda a, b: L.einsum("bij,bjk->bik", a, b), rand((2, 3, 4)),
                      rand((2, 4, 5)))
    assert [e.primitive.name for e in closed.eqns] == ["dot_general"]


# ---------------------------------------------------------------------------------------
# trace


@pytest.mark.parametrize("shape, offset, axis1, axis2, dtype", [
    ((3, 3), 0, 0, 1, np.float64), ((3, 4), 1, 0, 1, np.float64), ((4, 3), -2, 0, 1, np.float64),
    ((2, 3, 3), 0, 1, 2, np.float32), ((3, 2, 3), 0, 0, -1, np.float64),
    ((3, 3), 5, 0, 1, np.float64), ((3, 3), 0, 0, 1, np.int32), ((3, 3), 0, 0, 1, np.bool_),
    ((3, 3), 0, 1, 0, np.uint8),
])
def test_trace(shape, offset, axis1, axis2, dtype):
    check_both(lambda a: L.trace(a, offset, axis1, axis2), lambda a: np.trace(a, offset, axis1, axis2),
               rand(shape, dtype))


def test_trace_dtype_and_errors():
    a = rand((3, 3), np.int32)
    check_both(lambda a: L.trace(a, dtype=np.float32), lambda a: np.trace(a, dtype=np.float32), a)
    with pytest.raises(ShapeError, match="at least 2"):
        L.trace(rand((3,)))
    with pytest.raises(ShapeError, match="same"):
        L.trace(a, axis1=1, axis2=-1)


# ---------------------------------------------------------------------------------------
# np.linalg


def spd(shape, dtype=np.float64, seed=0):
    a = rand(shape, np.float64, seed)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def well_conditioned(shape, dtype=np.float64, seed=0):
    """Diagonally dominant after a row permutation (so LU has to pivot): never singular."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    a = rng.uniform(-2, 2, size=shape)
    if np.issubdtype(dtype, np.integer):
        a = np.round(a)
    return (a + 3 * n * np.eye(n)[rng.permutation(n)]).astype(dtype)


batches = st.sampled_from([(), (2,), (1, 3), (2, 2)])
sizes = st.integers(1, 5)
seeds = st.integers(0, 2**32 - 1)


@SETTINGS
@given(batches, sizes, seeds, st.sampled_from([np.float32, np.float64, np.int64]))
def test_cholesky(batch, n, seed, dtype):
    a = spd((*batch, n, n), np.float64, seed)
    if dtype == np.int64:
        a = np.round(a).astype(np.int64) + 2 * n * np.eye(n, dtype=np.int64)
    else:
        a = a.astype(dtype)
    check_both(L.cholesky, np.linalg.cholesky, a, **_tol(a))
    check_both(lambda a: L.cholesky(a, upper=True), lambda a: np.linalg.cholesky(a, upper=True),
               a, **_tol(a))


@pytest.mark.parametrize("fn", [L.cholesky, L.inv, L.det, L.slogdet])
def test_linalg_shape_and_dtype_errors(fn):
    with pytest.raises(ShapeError, match="two-dimensional"):
        fn(rand((3,)))
    with pytest.raises(ShapeError, match="square"):
        fn(rand((2, 3)))
    with pytest.raises(ShapeError, match="float16"):
        fn(rand((2, 2), np.float16))


@SETTINGS
@given(batches, sizes, st.integers(0, 3), seeds, st.sampled_from([np.float32, np.float64]))
def test_solve(batch, n, k, seed, dtype):
    a = well_conditioned((*batch, n, n), dtype, seed)
    b = rand((*batch, n, k) if k else (n,), dtype, seed % 1000)
    check_both(L.solve, np.linalg.solve, a, b, **_tol(a))


@pytest.mark.parametrize("sa, sb, da, db", [
    ((3, 3), (3,), np.float64, np.float64), ((3, 3), (3, 2), np.float32, np.float32),
    ((2, 3, 3), (3,), np.float64, np.float64), ((2, 3, 3), (3, 4), np.float64, np.float64),
    ((3, 3), (2, 3, 4), np.float64, np.float64), ((2, 1, 3, 3), (4, 3, 1), np.float64, np.float64),
    ((3, 3), (3,), np.int64, np.int64), ((3, 3), (3,), np.float32, np.float64),
    ((3, 3), (3,), np.float32, np.int8), ((3, 3), (3, 2), np.int32, np.float32),
])
def test_solve_shapes_and_dtypes(sa, sb, da, db):
    a, b = well_conditioned(sa, da, 3), rand(sb, db, 1)
    check_both(L.solve, np.linalg.solve, a, b, **_tol(a, b))


def test_solve_errors():
    with pytest.raises(ShapeError, match="do not align"):
        L.solve(rand((3, 3)), rand((4,)))
    with pytest.raises(ShapeError, match="broadcast"):
        L.solve(rand((2, 3, 3)), rand((3, 3, 1)))


@SETTINGS
@given(batches, st.integers(0, 5), seeds, st.sampled_from([np.float32, np.float64, np.int32]))
def test_inv_det_slogdet(batch, n, seed, dtype):
    a = well_conditioned((*batch, n, n), dtype, seed)
    tol = _tol(a)
    if n == 0:
        assert_same(L.det(a), np.linalg.det(a))
        return
    check_both(L.inv, np.linalg.inv, a, **tol)
    check_both(L.det, np.linalg.det, a, rtol=tol["rtol"], atol=0)
    check_both(L.slogdet, lambda a: tuple(np.linalg.slogdet(a)), a, **tol)


def test_det_sign_follows_the_pivots():
    p = np.eye(4)[[1, 0, 3, 2]]          # two swaps: det +1
    q = np.eye(3)[[1, 2, 0]]             # a 3-cycle: det +1
    r = np.eye(3)[[0, 2, 1]]             # one swap: det -1
    for m in (p, q, r, np.stack([q, r])):
        check_both(L.det, np.linalg.det, m)
        check_both(L.slogdet, lambda a: tuple(np.linalg.slogdet(a)), m)


def test_singular_matrices():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert_same(L.det(a), np.linalg.det(a), atol=1e-12)
    with np.errstate(divide="ignore"):
        sign, logabsdet = L.slogdet(np.zeros((2, 2)))
    assert sign == 0 and logabsdet == -np.inf


def test_slogdet_is_a_named_tuple():
    out = L.slogdet(well_conditioned((3, 3)))
    assert out.sign == out[0] and out.logabsdet == out[1]
    with JaxprBuilder() as b:
        staged = L.slogdet(b.new_arg(L.aval(np.eye(3))))
    assert staged._fields == ("sign", "logabsdet")


def test_unsupported_complex():
    with pytest.raises(UnsupportedFunctionError):
        L.slogdet(np.eye(2, dtype=np.complex128))


# ---------------------------------------------------------------------------------------
# norm

NORM_CASES = [
    ((4,), None, None, False), ((4,), 2, None, False), ((4,), 1, None, False),
    ((4,), np.inf, None, False), ((4,), -np.inf, None, False), ((4,), 0, None, False),
    ((4,), 3, None, False), ((4,), 0.5, None, False), ((4,), -1, None, False),
    ((4,), None, None, True), ((4,), 2, 0, True),
    ((3, 4), None, None, False), ((3, 4), None, None, True), ((3, 4), "fro", None, False),
    ((3, 4), "fro", None, True), ((3, 4), 1, None, False), ((3, 4), -1, None, False),
    ((3, 4), np.inf, None, False), ((3, 4), -np.inf, None, True),
    ((3, 4), None, 1, False), ((3, 4), 2, 0, False), ((3, 4), 1, -1, True),
    ((2, 3, 4), None, None, False), ((2, 3, 4), None, None, True),
    ((2, 3, 4), None, (1, 2), False), ((2, 3, 4), 1, (2, 0), False), ((2, 3, 4), np.inf, (0, 2), True),
    ((2, 3, 4), -1, (-1, -2), False), ((2, 3, 4), "fro", (0, 1), True), ((2, 3, 4), 3, 1, False),
    ((2, 3, 4), 0, -1, True),
    ((3, 4), "nuc", None, False), ((3, 4), 2, None, True), ((3, 4), -2, (0, 1), False),
    ((2, 3, 4), "nuc", (2, 0), True), ((2, 3, 4), 2, (1, 2), False), ((2, 3, 4), -2, (-1, -2), False),
]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # ord < 0 meets a 0, as in NumPy
@pytest.mark.parametrize("shape, ord, axis, keepdims", NORM_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_norm(shape, ord, axis, keepdims, dtype):
    x = rand(shape, dtype)
    check_both(lambda x: L.norm(x, ord, axis, keepdims),
               lambda x: np.asarray(np.linalg.norm(x, ord, axis, keepdims)), x, **_tol(x))


@pytest.mark.parametrize("shape, ord, axis, error, message", [
    ((3, 4), 3, None, ShapeError, "invalid norm order"),
    ((4,), "fro", 0, ShapeError, "invalid norm order"),
    ((2, 3, 4), 1, None, ShapeError, "improper number of dimensions"),
    ((2, 3, 4), None, (0, 1, 2), ShapeError, "improper number of dimensions"),
    ((3, 4), None, (1, 1), ShapeError, "duplicate"),
])
def test_norm_errors(shape, ord, axis, error, message):
    with pytest.raises(error, match=message):
        L.norm(rand(shape), ord, axis)


def test_out_arguments_are_rejected():
    a = rand((2, 2))
    for call in (lambda: L.matmul(a, a, out=a), lambda: L.dot(a, a, out=a),
                 lambda: L.trace(a, out=a), lambda: L.matmul(a, a, axes=[(0, 1)] * 3)):
        with pytest.raises(UnsupportedFunctionError):
            call()


# ---------------------------------------------------------------------------------------
# cross, polyval, convolve, correlate, kron of N-d arrays: NumPy's values on both backends,
# jax's jvp and vjp

LONG_TAIL = examples(4, 25)
# Subnormals left out: XLA on CPU flushes them to zero.
FLOAT64S = st.floats(-3.0, 3.0, allow_nan=False, allow_subnormal=False)


def _floats(data, shape, label):
    return data.draw(hnp.arrays(np.float64, shape, elements=FLOAT64S), label=label)


def cross_last(a, b):
    return np.cross(a, b)


def cross_axes(a, b):
    return np.cross(np.moveaxis(a, -1, 0), b, axisa=0, axisc=0)


@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")
@LONG_TAIL
@given(data=st.data())
def test_cross(data):
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3),
                      label="batch")
    na, nb = data.draw(st.sampled_from([(3, 3), (2, 3), (3, 2), (2, 2)]), label="lengths")
    a = _floats(data, batch.input_shapes[0] + (na,), "a")
    b = _floats(data, batch.input_shapes[1] + (nb,), "b")
    check_numpy_and_jax(cross_last, a, b, rtol=1e-9, atol=1e-9)
    if (na, nb) != (2, 2):
        check_numpy_and_jax(cross_axes, a, b, rtol=1e-9, atol=1e-9)


def polyval_f(p, x):
    return np.polyval(p, x)


def convolve_and_correlate(a, v):
    return (np.convolve(a, v), np.convolve(a, v, mode="same"), np.convolve(a, v, "valid"),
            np.correlate(a, v), np.correlate(a, v, "same"), np.correlate(a, v, mode="full"))


def kron_f(a, b):
    return np.kron(a, b)


@LONG_TAIL
@given(data=st.data())
def test_polyval_convolve_correlate_kron(data):
    p = _floats(data, st.integers(1, 5).map(lambda n: (n,)), "p")
    x = _floats(data, hnp.array_shapes(max_dims=2, max_side=4), "x")
    check_numpy_and_jax(polyval_f, p, x, rtol=1e-9, atol=1e-9)
    a = _floats(data, st.integers(1, 6).map(lambda n: (n,)), "a")
    v = _floats(data, st.integers(1, 6).map(lambda n: (n,)), "v")
    check_numpy_and_jax(convolve_and_correlate, a, v, rtol=1e-9, atol=1e-9)
    sa = data.draw(hnp.array_shapes(max_dims=3, max_side=3), label="kron a shape")
    sb = data.draw(hnp.array_shapes(max_dims=3, max_side=3), label="kron b shape")
    check_numpy_and_jax(kron_f, _floats(data, sa, "ka"), _floats(data, sb, "kb"))


def test_integer_convolution_and_polynomials_stay_integers():
    check_numpy_and_jax(convolve_and_correlate, np.arange(5), np.array([1, -2, 3]),
                        derivatives=False)
    check_numpy_and_jax(polyval_f, np.array([2, 0, -1]), np.arange(4), derivatives=False)


@pytest.mark.parametrize("call, match", [
    (lambda x: np.cross(x, x), "incompatible dimensions"),
    (lambda x: np.cross(x[:3], x[:3], axisa=1), "out of bounds"),
    (lambda x: np.polyval(x[0], x), "must be a sequence"),
    (lambda x: np.convolve(x, x, mode="middle"), "mode 'middle' is not supported"),
    (lambda x: np.correlate(x.reshape(2, 2), x), "1-d arrays"),
])
def test_long_tail_errors_say_what_to_write(call, match):
    with pytest.raises(S2SError, match=match):
        s2s.jit(call)(np.arange(4.0))
