"""Reductions, scans, sort and linear algebra lowered to StableHLO, compiled by jaxlib,
equal to NumPy. Each case is one def written against NumPy; the staged run swaps `np`
for s2s's NumPy surface (`with_numpy`), the reference runs it on NumPy itself."""
import types

import numpy as np
import pytest

from s2s.numpy_api import NUMPY_IMPLS
from tests.helpers import check_lowered, with_numpy


def _surface():
    ns = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    ns.linalg = types.SimpleNamespace(**vars(np.linalg))
    for fn, impl in NUMPY_IMPLS.items():
        name = getattr(fn, "__name__", None)
        module = getattr(fn, "__module__", "") or ""
        if name is None:
            continue
        if "linalg" in module and hasattr(np.linalg, name) and getattr(np.linalg, name) is fn:
            setattr(ns.linalg, name, impl)
        elif getattr(np, name, None) is fn:
            setattr(ns, name, impl)
    return ns


SNP = _surface()
DTYPES = [np.float64, np.float32]


def check(fn, *args, tol=None):
    dtype = next(a.dtype for a in args if isinstance(a, np.ndarray))
    if tol is None:
        tol = 1e-10 if dtype == np.float64 else 1e-4
    check_lowered(with_numpy(fn, SNP), fn, *args, rtol=tol, atol=tol)


def rand(shape, dtype, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def spd(n, dtype, batch=()):
    a = np.random.default_rng(1).normal(size=(*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


# --- reductions ----------------------------------------------------------------------


def sums(x):
    return x.sum(axis=1), x.sum(), np.sum(x, axis=(0, 2))


def extrema(x):
    return np.max(x, axis=0), np.min(x, axis=(1, 2)), x.max(), np.min(x)


def products(x):
    return np.prod(x, axis=1), np.prod(x)


def logicals(x):
    return np.all(x > 0, axis=1), np.any(x > 1, axis=0), np.all(x > -5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [sums, extrema, products, logicals])
def test_reductions(fn, dtype):
    check(fn, rand((2, 3, 4), dtype))


def test_integer_reductions():
    x = np.arange(-5, 7, dtype=np.int32).reshape(3, 4)
    check_lowered(with_numpy(extrema2d, SNP), extrema2d, x)


def extrema2d(x):
    return np.max(x, axis=0), np.min(x, axis=1), np.prod(x, axis=0)


def test_max_propagates_nan():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]])
    check(extrema2d, x)


# --- argmax / argmin -----------------------------------------------------------------


def args_of(x):
    return np.argmax(x, axis=1), np.argmin(x, axis=0), np.argmax(x, axis=0), np.argmin(x, axis=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_argmin(dtype):
    check(args_of, rand((4, 5), dtype))


def test_argmax_ties_and_nans():
    x = np.array([[1.0, 3.0, 3.0, 0.0, 3.0],
                  [2.0, np.nan, 5.0, np.nan, 1.0],
                  [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, np.inf, np.nan, np.nan]])
    check(args_of, x)
    check_lowered(with_numpy(args_of, SNP), args_of, np.array([[2, 7, 7], [7, 1, 1]], np.int32))


# --- scans ---------------------------------------------------------------------------


def scans(x):
    return np.cumsum(x, axis=0), np.cumsum(x, axis=1), np.cumprod(x, axis=1), np.cumsum(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scans(dtype):
    check(scans, rand((3, 4), dtype))


def test_scan_primitives_both_directions():
    from s2s.primitives import reductions as R
    x = rand((3, 4), np.float64)
    for prim, ref in [(R.cumsum, np.cumsum), (R.cumprod, np.cumprod),
                      (R.cummax, np.maximum.accumulate), (R.cummin, np.minimum.accumulate)]:
        for axis in (0, 1):
            check_lowered(lambda a: prim.bind(a, axis=axis, reverse=False),
                          lambda a: ref(a, axis=axis), x, rtol=1e-12, atol=1e-12)
            check_lowered(lambda a: prim.bind(a, axis=axis, reverse=True),
                          lambda a: np.flip(ref(np.flip(a, axis), axis=axis), axis), x,
                          rtol=1e-12, atol=1e-12)
    check_lowered(lambda a: R.cummax.bind(a, axis=0, reverse=False),
                  lambda a: np.maximum.accumulate(a, axis=0), np.array([1, 3, -2, 5], np.int32))


# --- sort ----------------------------------------------------------------------------


def sorts(x):
    return np.sort(x), np.sort(x, axis=0), np.argsort(x, axis=1, kind="stable"), np.argsort(x, axis=0, kind="stable")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort(dtype):
    check(sorts, rand((4, 5), dtype))


def test_sort_stable_with_nans():
    x = np.array([[3.0, np.nan, 1.0, 3.0, -0.0, 0.0, np.nan, -np.inf],
                  [1.0, 1.0, 1.0, 0.0, 0.0, np.inf, 2.0, 1.0]])
    check(sorts, x)
    check_lowered(with_numpy(sorts, SNP), sorts, np.array([[3, 1, 3, 1], [0, 0, 2, -1]], np.int32))


def test_sort_several_keys():
    from s2s.primitives import reductions as R
    a = np.array([2.0, 1.0, 2.0, 1.0, np.nan, 0.0])
    b = np.array([1.0, 5.0, 0.0, 5.0, 1.0, 3.0])
    c = np.arange(6.0)
    order = np.lexsort((c, b, a))
    check_lowered(lambda x, y, z: tuple(R.sort.bind(x, y, z, dimension=0, num_keys=2)),
                  lambda x, y, z: (x[order], y[order], z[order]), a, b, c)


# --- products and linear algebra -----------------------------------------------------


def products2(x, y):
    return (x @ y, np.einsum("ij,kj->ik", x, x), np.einsum("bij,bjk->bik", x[None], y[None]),
            np.einsum("i,i->", x[0], x[1]), np.einsum("ij,kl->ijkl", x, y))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_general(dtype):
    check(products2, rand((3, 4), dtype), rand((4, 2), dtype, 1))


def test_dot_general_preferred_element_type():
    from s2s.primitives import linalg as La
    x, y = rand((3, 4), np.float32), rand((4, 2), np.float32, 1)
    check_lowered(lambda a, b: La.dot_general.bind(a, b, dimension_numbers=(((1,), (0,)), ((), ())),
                                                   preferred_element_type=np.float64),
                  lambda a, b: a.astype(np.float64) @ b.astype(np.float64), x, y,
                  rtol=1e-12, atol=1e-12)


def chol(a):
    return np.linalg.cholesky(a)


def solve(a, b):
    return np.linalg.solve(a, b)


def det(a):
    return np.linalg.det(a)


def inv(a):
    return np.linalg.inv(a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky(dtype):
    check(chol, spd(4, dtype))
    check(chol, spd(3, dtype, (2,)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_det_inv(dtype):
    a = rand((4, 4), dtype)
    tol = 1e-9 if dtype == np.float64 else 1e-3
    check(solve, a, rand((4, 2), dtype, 1), tol=tol)
    check(det, a, tol=tol)
    check(inv, a, tol=tol)
    check(det, rand((2, 3, 3), dtype, 2), tol=tol)
    check(det, np.array([[1.0, 2.0], [2.0, 4.0]], dtype), tol=tol)   # singular: 0


def test_triangular_solve_flags():
    from s2s.primitives import linalg as La
    import s2s_runtime.linalg as rt_linalg
    a = rand((3, 3), np.float64) + 3 * np.eye(3)
    for left_side in (True, False):
        b = rand((3, 2) if left_side else (2, 3), np.float64, 1)
        for lower in (True, False):
            for transpose_a in (True, False):
                for unit_diagonal in (True, False):
                    flags = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                                 unit_diagonal=unit_diagonal)
                    check_lowered(lambda x, y: La.triangular_solve.bind(x, y, **flags),
                                  lambda x, y: rt_linalg.triangular_solve(x, y, **flags), a, b,
                                  rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (4, 3), (3, 5)])
def test_lu(shape):
    from s2s.primitives import linalg as La
    import s2s_runtime.linalg as rt_linalg
    a = rand(shape, np.float64, 3)
    check_lowered(lambda x: tuple(La.lu.bind(x)), lambda x: tuple(rt_linalg.lu(x)), a,
                  rtol=1e-10, atol=1e-10)
