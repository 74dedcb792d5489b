"""Reductions, scans, sort and linear algebra lowered to StableHLO, compiled by jaxlib,
equal to NumPy, on hypothesis-drawn shapes, dtypes and parameters (axes, sort keys,
dimension numbers, solve flags).

Two routes: defs written against NumPy (the staged run swaps `np` for s2s's NumPy surface
with `with_numpy`; the reference runs the def on NumPy itself), and direct binds of each
primitive held to the oracles its NumPy impl is tested with (tests/primitives).
"""
import types

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from s2s.errors import UnsupportedFunctionError
from s2s.numpy_api import NUMPY_IMPLS
from s2s.primitives import linalg as La
from s2s.primitives import reductions as R
from s2s.staging import Primitive
from tests.emit.strategies import ANY, FLOATS, SETTINGS, arrays, axes_of, normal_array, tolerance
from tests.helpers import check_lowered, with_numpy
from tests.primitives.linalg.test_contraction import dot_problems, einsum_oracle
from tests.primitives.linalg.test_factorizations import FLAGS, batched_reference, batches, spd, triangular_oracle
from tests.primitives.test_reductions import (CUM_ORACLES, REDUCE_ORACLES, _python_sort,
                                              sort_operands)


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


# The NumPy references warn on inf - inf and inf * 0 of the drawn non-finite values; the
# NaN they produce is the expected result, compared like any other.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

SNP = _surface()
SURFACE_DTYPES = [np.float64, np.float32, np.int32, np.int64]


def check(fn, *args, f64=1e-10, f32=1e-4):
    """`fn` staged on s2s's NumPy surface, lowered and run by XLA, equals `fn` run by NumPy."""
    dtype = next(a.dtype for a in args if isinstance(a, np.ndarray))
    check_lowered(with_numpy(fn, SNP), fn, *args, **tolerance(dtype, f64, f32))


def supported(dtypes):
    """The dtypes of an impl test's table that these tests draw: float16 is left out, as a
    product of a few small integers overflows it and an overflow's inf * 0 then depends on
    the order XLA and NumPy multiply in."""
    return [d for d in dtypes if d in ANY]


# --- reductions ----------------------------------------------------------------------


def sums(x):
    return x.sum(axis=1), x.sum(), np.sum(x, axis=(0, 2))


def extrema(x):
    return np.max(x, axis=0), np.min(x, axis=(1, 2)), x.max(), np.min(x)


def products(x):
    return np.prod(x, axis=1), np.prod(x)


def logicals(x):
    return np.all(x > 0, axis=1), np.any(x > 1, axis=0), np.all(x > -5)


@pytest.mark.parametrize("fn", [sums, extrema, products, logicals])
@SETTINGS
@given(x=arrays(SURFACE_DTYPES, nonfinite=True, min_dims=3, max_dims=3))
def test_reductions_surface(fn, x):
    """NaNs and infinities included: max and min propagate NaN, as NumPy's do."""
    check(fn, x)


@pytest.mark.parametrize("name", sorted(REDUCE_ORACLES))
@SETTINGS
@given(data=st.data())
def test_reduce(name, data):
    """Any subset of axes in any order (none: the identity), sides of 0 included."""
    oracle, dtypes = REDUCE_ORACLES[name]
    x = data.draw(arrays(supported(dtypes), nonfinite=True, min_side=0), label="x")
    axes = data.draw(axes_of(x.ndim), label="axes")
    # max and min of nothing have no identity in NumPy: the primitive refuses them.
    assume(name not in ("reduce_max", "reduce_min") or all(x.shape[a] for a in axes))
    prim = R.REDUCTIONS[name]
    check_lowered(lambda a: prim.bind(a, axes=axes), lambda a: oracle(a, axes), x,
                  **tolerance(x.dtype))


# --- argmax / argmin -----------------------------------------------------------------


def args_of(x):
    return np.argmax(x, axis=1), np.argmin(x, axis=0), np.argmax(x, axis=0), np.argmin(x, axis=1)


@SETTINGS
@given(x=arrays(SURFACE_DTYPES, nonfinite=True, min_dims=2, max_dims=2))
def test_argmax_argmin_surface(x):
    check(args_of, x)


@pytest.mark.parametrize("prim,oracle", [(R.argmax, np.argmax), (R.argmin, np.argmin)],
                         ids=["argmax", "argmin"])
@SETTINGS
@given(data=st.data(), index_dtype=st.sampled_from([np.dtype(np.int64), np.dtype(np.int32)]))
def test_arg_reductions(prim, oracle, data, index_dtype):
    """Ties (small integers) go to the first; the first NaN wins, as in NumPy."""
    x = data.draw(arrays(ANY, nonfinite=True, min_dims=1), label="x")
    axis = data.draw(st.integers(0, x.ndim - 1), label="axis")
    check_lowered(lambda a: prim.bind(a, axis=axis, index_dtype=index_dtype),
                  lambda a: oracle(a, axis=axis).astype(index_dtype), x)


# --- scans ---------------------------------------------------------------------------


def scans(x):
    return np.cumsum(x, axis=0), np.cumsum(x, axis=1), np.cumprod(x, axis=1), np.cumsum(x)


@SETTINGS
@given(x=arrays(SURFACE_DTYPES, min_dims=2, max_dims=2))
def test_scans_surface(x):
    check(scans, x)


@pytest.mark.parametrize("name", sorted(CUM_ORACLES))
@SETTINGS
@given(data=st.data(), reverse=st.booleans())
def test_cumulative(name, data, reverse):
    oracle, dtypes = CUM_ORACLES[name]
    x = data.draw(arrays(supported(dtypes), nonfinite=True, min_dims=1, min_side=0), label="x")
    axis = data.draw(st.integers(0, x.ndim - 1), label="axis")
    prim = R.CUMULATIVE[name]
    check_lowered(lambda a: prim.bind(a, axis=axis, reverse=reverse),
                  lambda a: oracle(a, axis, reverse), x, **tolerance(x.dtype))


# --- sort ----------------------------------------------------------------------------


def sorts(x):
    return (np.sort(x), np.sort(x, axis=0), np.argsort(x, axis=1, kind="stable"),
            np.argsort(x, axis=0, kind="stable"))


@SETTINGS
@given(x=arrays(SURFACE_DTYPES + [np.bool_], nonfinite=True, min_dims=2, max_dims=2))
def test_sort_surface(x):
    """Stable, NaNs last, -0.0 tied with 0.0, as NumPy sorts."""
    check(sorts, x)


@SETTINGS
@given(sort_operands())
def test_sort_several_operands_and_keys(case):
    """One to three operands of mixed dtypes, the first `num_keys` of them keys (NaNs and
    ties among them), against Python's stable sorted()."""
    operands, dimension, num_keys = case
    check_lowered(lambda *xs: tuple(R.sort.bind(*xs, dimension=dimension, num_keys=num_keys)),
                  lambda *xs: tuple(_python_sort(list(xs), dimension, num_keys)), *operands)


# --- products and linear algebra -----------------------------------------------------


def products2(x, y):
    return (x @ y, np.einsum("ij,kj->ik", x, x), np.einsum("bij,bjk->bik", x[None], y[None]),
            np.einsum("i,i->", x[0], x[1]), np.einsum("ij,kl->ijkl", x, y))


@SETTINGS
@given(data=st.data(), n=st.integers(2, 4), k=st.integers(1, 4), m=st.integers(1, 4))
def test_dot_general_surface(data, n, k, m):
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    check(products2, normal_array(data.draw, (n, k), dtype), normal_array(data.draw, (k, m), dtype))


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS + [np.int32, np.int64]))
def test_dot_general(data, dtype):
    """Batch, contracting and free dimensions anywhere in either operand (small integer
    entries: the sums are exact in every dtype)."""
    lhs, rhs, numbers = data.draw(dot_problems(dtype), label="problem")
    check_lowered(lambda a, b: La.dot_general.bind(a, b, dimension_numbers=numbers,
                                                   preferred_element_type=None),
                  lambda a, b: einsum_oracle(a, b, numbers), lhs, rhs)


@SETTINGS
@given(data=st.data(), source=st.sampled_from([np.float32, np.int32]))
def test_dot_general_preferred_element_type(data, source):
    """Operands converted to float64 first: the product is the float64 one."""
    lhs, rhs, numbers = data.draw(dot_problems(source), label="problem")
    check_lowered(lambda a, b: La.dot_general.bind(a, b, dimension_numbers=numbers,
                                                   preferred_element_type=np.float64),
                  lambda a, b: einsum_oracle(a.astype(np.float64), b.astype(np.float64), numbers),
                  lhs, rhs)


def chol(a):
    return np.linalg.cholesky(a)


def solve(a, b):
    return np.linalg.solve(a, b)


def det(a):
    return np.linalg.det(a)


def inv(a):
    return np.linalg.inv(a)


def slogdet(a):
    sign, logabsdet = np.linalg.slogdet(a)
    return sign, logabsdet


@st.composite
def matrices(draw, dtypes=FLOATS):
    """(batch shape, n, dtype) of a stack of n x n matrices."""
    return draw(batches), draw(st.integers(1, 4)), np.dtype(draw(st.sampled_from(dtypes)))


@SETTINGS
@given(data=st.data(), problem=matrices())
def test_cholesky(data, problem):
    batch, n, dtype = problem
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    check(chol, spd(rng, batch, n, dtype))


@SETTINGS
@given(data=st.data(), problem=matrices(), k=st.integers(1, 3))
def test_solve_det_inv(data, problem, k):
    """Random (well enough conditioned) matrices: float32 loses ~cond * 1e-7."""
    batch, n, dtype = problem
    a = normal_array(data.draw, (*batch, n, n), dtype) + 2 * np.eye(n, dtype=dtype)
    b = normal_array(data.draw, (*batch, n, k), dtype)
    check(solve, a, b, f64=1e-9, f32=1e-3)
    check(det, a, f64=1e-9, f32=1e-3)
    check(inv, a, f64=1e-9, f32=1e-3)
    check(slogdet, a, f64=1e-9, f32=1e-3)


@pytest.mark.parametrize("dtype", FLOATS)
def test_det_of_a_singular_matrix_is_zero(dtype):
    check(det, np.array([[1.0, 2.0], [2.0, 4.0]], dtype), f64=1e-9, f32=1e-3)


@SETTINGS
@given(data=st.data(), problem=matrices(), k=st.integers(1, 3), flags=st.sampled_from(FLAGS))
def test_triangular_solve(data, problem, k, flags):
    """Big diagonal, junk in the other triangle: the solve must ignore it."""
    batch, n, dtype = problem
    a = normal_array(data.draw, (*batch, n, n), dtype) + 4 * np.eye(n, dtype=dtype)
    b = normal_array(data.draw, (*batch, n, k) if flags["left_side"] else (*batch, k, n), dtype)
    check_lowered(lambda x, y: La.triangular_solve.bind(x, y, **flags),
                  lambda x, y: triangular_oracle(x, y, **flags), a, b,
                  **tolerance(dtype, 1e-10, 1e-4))


@SETTINGS
@given(data=st.data(), problem=matrices(), m=st.integers(1, 4))
def test_lu(data, problem, m):
    """Square, wide and tall stacks, against LAPACK's unblocked getf2 written out."""
    batch, n, dtype = problem
    a = normal_array(data.draw, (*batch, m, n), dtype)
    check_lowered(lambda x: tuple(La.lu.bind(x)), lambda x: tuple(batched_reference(x)), a,
                  **tolerance(dtype, 1e-10, 1e-4))


def test_every_reduction_and_linalg_primitive_is_tested_here():
    tested = (set(REDUCE_ORACLES) | set(CUM_ORACLES)
              | {"argmax", "argmin", "sort", "dot_general", "cholesky", "triangular_solve", "lu",
                 "solve", "det", "slogdet"})
    # The decompositions' LAPACK lowerings are tested with them (tests/primitives/linalg).
    declared = {p.name for m in (R, La.contraction, La.factorizations, La.solves)
                for p in vars(m).values() if isinstance(p, Primitive)}
    assert declared == tested, (declared - tested, tested - declared)


def complex_sums_and_products(z):
    return np.sum(z, axis=0), np.prod(z, axis=1), z.mean(), np.cumsum(z, axis=1), np.cumprod(z, axis=0)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@SETTINGS
@given(data=st.data())
def test_complex_sums_and_products(dtype, data):
    parts = data.draw(arrays([np.float32], min_dims=2, max_dims=2, min_side=1), label="re")
    z = (parts + 1j * parts[::-1]).astype(dtype)
    check_lowered(complex_sums_and_products, complex_sums_and_products, z, rtol=1e-4, atol=1e-4)


def test_complex_max_is_a_clear_error():
    with pytest.raises(UnsupportedFunctionError, match="complex64 reductions cannot be lowered"):
        check_lowered(lambda z: np.max(z, axis=0), lambda z: np.max(z, axis=0),
                      np.ones((2, 2), np.complex64))
