"""s2s_runtime's special functions and array helpers, held to math and jax.scipy.special.

These are what emitted modules call (`rt.erf(x)`, `rt.trunc_divide(a, b)` ...), so they
must keep the input's floating dtype, handle poles and infinities like XLA, and never
warn on values in range.
"""
from __future__ import annotations

import functools
import math
import warnings
from fractions import Fraction

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import special

import s2s_runtime as rt

SETTINGS = settings(max_examples=30, deadline=None)
FLOATS = [np.float32, np.float64]
EULER_GAMMA = 0.57721566490153286061


def _tol(dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=1e-6, atol=1e-6)
    return dict(rtol=1e-12, atol=1e-12)


def jax_special(name, *leading):
    """jax.scipy.special.<name>(*leading, x) run in float64, returned in x's dtype."""
    jax = pytest.importorskip("jax")
    import jax.scipy.special as jss
    fn = getattr(jss, name)

    def oracle(x):
        x = np.asarray(x)
        with jax.enable_x64(True):
            return np.asarray(fn(*leading, x.astype(np.float64))).astype(x.dtype)
    return oracle


def math_oracle(fn):
    vec = np.vectorize(fn, otypes=[np.float64])
    return lambda x: np.asarray(vec(np.asarray(x))).astype(np.asarray(x).dtype)


def float_arrays(dtype, lo, hi, filter_=None):
    dtype = np.dtype(dtype)
    lo, hi = float(dtype.type(lo)), float(dtype.type(hi))   # bounds chosen representable
    elements = st.floats(lo, hi, width=8 * dtype.itemsize, allow_nan=False,
                         allow_infinity=False, allow_subnormal=False)
    if filter_ is not None:
        elements = elements.filter(filter_)
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
                      elements=elements)


def not_a_pole(v):
    return v > 0 or v != math.floor(v)


@pytest.fixture
def no_warnings():
    """Any NumPy floating-point warning or Python warning fails the test."""
    with warnings.catch_warnings(), np.errstate(over="raise", divide="raise", invalid="raise"):
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("fn", [rt.erf, rt.erfc, rt.lgamma, rt.digamma, rt.logistic,
                                functools.partial(rt.polygamma, 1)],
                         ids=["erf", "erfc", "lgamma", "digamma", "logistic", "polygamma"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_floating_dtype_is_kept(fn, dtype):
    x = np.array([0.5, 1.5, 3.0], dtype=dtype)
    assert fn(x).dtype == dtype and fn(x).shape == (3,)
    scalar = fn(dtype(0.75))
    assert isinstance(scalar, np.generic) and scalar.dtype == dtype
    assert fn(np.ones((2, 0, 3), dtype)).shape == (2, 0, 3)


@pytest.mark.parametrize("fn", [rt.erf, rt.erfc, rt.lgamma, rt.digamma])
def test_integers_and_python_scalars_compute_in_float64(fn):
    assert fn(np.array([1, 2, 3], dtype=np.int32)).dtype == np.float64
    assert fn(2).dtype == np.float64
    assert fn(2.5).dtype == np.float64


# ---------------------------------------------------------------------------------------
# erf


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_erf_matches_math_and_jax(data, dtype):
    x = data.draw(float_arrays(dtype, -8, 8))
    out = rt.erf(x)
    np.testing.assert_array_equal(out, math_oracle(math.erf)(x))
    np.testing.assert_allclose(out, jax_special("erf")(x), **_tol(dtype))


def test_erf_special_values(no_warnings):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300])
    out = rt.erf(x)
    np.testing.assert_array_equal(out[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(out[1]) and np.isnan(out[4]) and out[5] == 1.0
    assert out[6] == pytest.approx(-2 / math.sqrt(math.pi) * 1e-300, rel=1e-15)
    np.testing.assert_allclose(rt.erf(np.float32(0.5)), math.erf(0.5), rtol=1e-7)


# ---------------------------------------------------------------------------------------
# lgamma


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_lgamma_matches_math_and_jax(data, dtype):
    x = data.draw(float_arrays(dtype, -30, 200, not_a_pole))
    out = rt.lgamma(x)
    np.testing.assert_array_equal(out, math_oracle(math.lgamma)(x))
    np.testing.assert_allclose(out, jax_special("gammaln")(x), **_tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_lgamma_poles_infinities_and_overflow_are_inf(dtype, no_warnings):
    poles = np.array([0.0, -0.0, -1.0, -2.0, -7.0, -100.0, -2.0 ** 60], dtype=dtype)
    assert np.all(rt.lgamma(poles) == np.inf)
    assert np.all(rt.lgamma(np.array([np.inf, -np.inf], dtype)) == np.inf)
    assert np.isnan(rt.lgamma(dtype(np.nan)))
    # log Gamma(x) > the dtype's largest value: inf, not an error or a warning.
    big = np.array([1e306 if dtype == np.float64 else 3e38], dtype=dtype)
    assert rt.lgamma(big)[0] == np.inf


def test_lgamma_known_values():
    x = np.array([1.0, 2.0, 0.5, -0.5, -1.5, 10.0, 1e-300])
    expected = [0.0, 0.0, math.log(math.sqrt(math.pi)), math.log(2 * math.sqrt(math.pi)),
                math.log(4 / 3 * math.sqrt(math.pi)), math.log(362880.0), -math.log(1e-300)]
    np.testing.assert_allclose(rt.lgamma(x), expected, rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------------------------
# digamma


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_digamma_matches_jax_on_positive_x(data, dtype):
    x = data.draw(float_arrays(dtype, 2.0 ** -20, 1e6))
    np.testing.assert_allclose(rt.digamma(x), jax_special("digamma")(x), **_tol(dtype))


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_digamma_matches_jax_on_negative_non_integers(data, dtype):
    x = data.draw(float_arrays(dtype, -1000, 0, not_a_pole))
    got, expected = rt.digamma(x), jax_special("digamma")(x)
    # Relative to max(|psi|, 1): near a pole psi is huge, near its zeros it is tiny.
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_array_less(np.abs(got - expected), tol * np.maximum(np.abs(expected), 1) + 1e-300)


@SETTINGS
@given(data=st.data())
def test_digamma_recurrence_and_reflection(data):
    x = data.draw(float_arrays(np.float64, 0.01, 50))
    np.testing.assert_allclose(rt.digamma(x + 1), rt.digamma(x) + 1 / x, rtol=1e-12, atol=1e-12)
    y = x[(x != np.round(x)) & (np.abs(x - np.round(x)) > 1e-3)]   # away from the poles of cot
    np.testing.assert_allclose(rt.digamma(1 - y) - rt.digamma(y), np.pi / np.tan(np.pi * y),
                               rtol=1e-9, atol=1e-9)


@SETTINGS
@given(data=st.data())
def test_digamma_is_the_derivative_of_lgamma(data):
    # Central differences, kept 0.1 away from the poles (and from 0, where h would cross it).
    x = data.draw(float_arrays(np.float64, -20, 50, lambda v: abs(v - round(v)) > 0.1 or v > 1))
    h = 1e-5
    numeric = (rt.lgamma(x + h) - rt.lgamma(x - h)) / (2 * h)
    np.testing.assert_allclose(rt.digamma(x), numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_digamma_poles_match_scipy(dtype, no_warnings):
    """nan at the negative integers; at the signed zeros the pole's -1/x, as SciPy's."""
    poles = np.array([-1.0, -2.0, -5.0, -1e6, -2.0 ** 60, -np.inf], dtype=dtype)
    assert np.all(np.isnan(rt.digamma(poles)))
    np.testing.assert_array_equal(rt.digamma(np.array([0.0, -0.0], dtype)), [-np.inf, np.inf])
    assert rt.digamma(dtype(-0.0)) == np.inf and rt.digamma(dtype(0.0)) == -np.inf
    assert np.isnan(rt.digamma(dtype(np.nan)))
    assert rt.digamma(dtype(np.inf)) == np.inf


def test_digamma_known_values():
    x = np.array([1.0, 2.0, 0.5, 1.5, -0.5, 10.0])
    psi_half = -EULER_GAMMA - 2 * math.log(2)
    expected = [-EULER_GAMMA, 1 - EULER_GAMMA, psi_half, psi_half + 2, psi_half + 2,
                -EULER_GAMMA + sum(1 / k for k in range(1, 10))]   # psi(n) = H(n-1) - gamma
    np.testing.assert_allclose(rt.digamma(x), expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("dtype", FLOATS)
def test_digamma_large_and_tiny_x(dtype, no_warnings):
    big = np.array([1e10, 1e20, 3e38] + ([1e100, 1e300] if dtype == np.float64 else []),
                   dtype=dtype)
    z = big.astype(np.float64)
    expected = np.log(z) - 0.5 / z
    np.testing.assert_allclose(rt.digamma(big), expected.astype(dtype), **_tol(dtype))
    # psi(x) ~ -1/x - gamma near 0, on both sides.
    tiny = np.array([1e-30, -1e-30], dtype=dtype)
    np.testing.assert_allclose(rt.digamma(tiny), (-1 / tiny.astype(np.float64)).astype(dtype),
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------
# polygamma


@SETTINGS
@given(data=st.data(), n=st.integers(1, 4), dtype=st.sampled_from(FLOATS))
def test_polygamma_matches_jax_on_positive_x(data, n, dtype):
    x = data.draw(float_arrays(dtype, 2.0 ** -10, 1e4))
    expected = jax_special("polygamma", n)(x)
    tol = dict(rtol=1e-6, atol=0) if dtype == np.float32 else dict(rtol=1e-11, atol=0)
    np.testing.assert_allclose(rt.polygamma(n, x), expected, **tol)


@SETTINGS
@given(data=st.data(), n=st.integers(1, 3))
def test_polygamma_on_negative_non_integers(data, n):
    """jax.scipy.special.polygamma is wrong for x < 0, so mpmath is the oracle there."""
    mpmath = pytest.importorskip("mpmath")
    x = data.draw(float_arrays(np.float64, -99, 0, lambda v: abs(v - round(v)) > 1e-6))
    expected = np.vectorize(lambda v: float(mpmath.polygamma(n, v)), otypes=[np.float64])(x)
    np.testing.assert_allclose(rt.polygamma(n, x), expected, rtol=1e-11)


@SETTINGS
@given(data=st.data(), n=st.integers(1, 4))
def test_polygamma_recurrence(data, n):
    x = data.draw(float_arrays(np.float64, 0.05, 50))
    step = (-1) ** (n + 1) * math.factorial(n) / x ** (n + 1)   # psi^(n)(x+1) - psi^(n)(x) = -step
    np.testing.assert_allclose(rt.polygamma(n, x + 1) + step, rt.polygamma(n, x), rtol=1e-12)


def test_trigamma_is_the_derivative_of_digamma():
    x = np.array([-3.5, -0.25, 0.3, 1.0, 2.5, 40.0])
    h = 1e-5
    numeric = (rt.digamma(x + h) - rt.digamma(x - h)) / (2 * h)
    np.testing.assert_allclose(rt.polygamma(1, x), numeric, rtol=1e-7)
    np.testing.assert_allclose(rt.polygamma(1, np.array([1.0, 0.5])),
                               [math.pi ** 2 / 6, math.pi ** 2 / 2], rtol=1e-14)


@pytest.mark.parametrize("dtype", FLOATS)
def test_polygamma_poles_are_scipys_infinities(dtype, no_warnings):
    """(-1)^(n+1) inf at 0, -0.0 and the negative integers: SciPy's n! zeta(n+1, x)."""
    poles = np.array([0.0, -0.0, -1.0, -7.0], dtype=dtype)
    for n in (1, 2, 3):
        np.testing.assert_array_equal(rt.polygamma(n, poles), (-1) ** (n + 1) * np.inf)
        assert np.isnan(rt.polygamma(n, dtype(np.nan)))


def test_polygamma_needs_n_of_at_least_one():
    with pytest.raises(ValueError, match="n >= 1"):
        rt.polygamma(0, np.array([1.0]))


# ---------------------------------------------------------------------------------------
# logistic


def logistic_oracle(x):
    """exp(-log(1 + exp(-x))), stably, in float64."""
    x = np.asarray(x)
    return np.exp(-np.logaddexp(0.0, -x.astype(np.float64))).astype(x.dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_logistic_matches_a_stable_oracle(data, dtype):
    x = data.draw(float_arrays(dtype, -1000, 1000))
    tiny = np.finfo(dtype).tiny    # float32's results below it are subnormal
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(rt.logistic(x), logistic_oracle(x), rtol=rtol, atol=tiny)
    np.testing.assert_allclose(rt.logistic(-x), 1 - rt.logistic(x), rtol=0, atol=2 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", FLOATS)
def test_logistic_saturates_without_overflow_warnings(dtype, no_warnings):
    x = np.array([-1e30, -1000.0, -999.5, 0.0, 999.5, 1000.0, 1e30, -np.inf, np.inf], dtype=dtype)
    out = rt.logistic(x)
    np.testing.assert_array_equal(out, np.array([0, 0, 0, 0.5, 1, 1, 1, 0, 1], dtype=dtype))
    assert out.dtype == dtype
    assert np.isnan(rt.logistic(np.array([np.nan], dtype)))[0]
    assert rt.logistic(dtype(-1000.0)) == 0 and rt.logistic(dtype(1000.0)) == 1


# ---------------------------------------------------------------------------------------
# trunc_divide


def trunc_oracle(x, y):
    """Exact rational division rounded toward zero, one Python int at a time."""
    x, y = np.broadcast_arrays(x, y)
    out = [int(Fraction(int(a), int(b))) for a, b in zip(x.ravel(), y.ravel())]
    return np.array(out, dtype=np.result_type(x, y)).reshape(x.shape)


INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(INTS))
def test_trunc_divide_rounds_toward_zero(data, dtype):
    info = np.iinfo(dtype)
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    values = st.integers(int(info.min), int(info.max))
    x = data.draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=values))
    y = data.draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=values.filter(bool)))
    assume(not np.any((x == info.min) & (y == -1)))   # min / -1 overflows in any arithmetic
    out = rt.trunc_divide(x, y)
    assert np.asarray(out).dtype == dtype
    np.testing.assert_array_equal(out, trunc_oracle(x, y))


def test_trunc_divide_signs_and_scalars():
    x = np.array([7, -7, 7, -7, 0, 6, -6], dtype=np.int32)
    y = np.array([2, 2, -2, -2, -3, 3, 3], dtype=np.int32)
    out = rt.trunc_divide(x, y)
    np.testing.assert_array_equal(out, [3, -3, -3, 3, 0, 2, -2])
    assert out.dtype == np.int32
    scalar = rt.trunc_divide(np.int16(-7), np.int16(2))
    assert isinstance(scalar, np.int16) and scalar == -3
    assert rt.trunc_divide(-7, 2) == -3 and rt.trunc_divide(7, -2) == -3
    assert rt.trunc_divide(np.int8(3), np.int64(2)).dtype == np.int64   # NumPy's promotion


def test_trunc_divide_of_the_minimum_and_of_unsigned_values(no_warnings):
    """abs(int8 -128) is -128: a sign fix-up after abs gets these wrong."""
    assert rt.trunc_divide(np.int8(-128), np.int8(3)) == -42
    assert rt.trunc_divide(np.int8(-128), np.int8(-3)) == 42
    assert rt.trunc_divide(np.int8(-128), np.int8(-128)) == 1
    assert rt.trunc_divide(np.int64(-2 ** 63), np.int64(7)) == -(2 ** 63 // 7)
    np.testing.assert_array_equal(rt.trunc_divide(np.array([-128, 127], np.int8), np.int8(-128)),
                                  [1, 0])
    assert rt.trunc_divide(np.uint8(7), np.uint8(2)) == 3     # no negation of unsigned values
    np.testing.assert_array_equal(rt.trunc_divide(np.array([255, 1], np.uint8), np.uint8(1)),
                                  [255, 1])


# ---------------------------------------------------------------------------------------
# iota


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4),
       dtype=st.sampled_from([np.int32, np.int64, np.float32, np.float64]), data=st.data())
def test_iota_counts_along_one_dimension(shape, dtype, data):
    dimension = data.draw(st.integers(0, len(shape) - 1))
    out = rt.iota(dtype, shape, dimension)
    np.testing.assert_array_equal(out, np.indices(shape, dtype=dtype)[dimension])
    assert out.dtype == dtype and out.shape == shape
    assert out.flags.writeable and out.flags.c_contiguous   # a real array, not a broadcast view


def test_iota_accepts_a_list_shape():
    np.testing.assert_array_equal(rt.iota(np.int32, [2, 3], 0), [[0, 0, 0], [1, 1, 1]])


def test_inverse_error_functions_keep_every_digit_on_a_dense_grid(no_warnings):
    """rt.erfinv and rt.erfcinv against SciPy (the oracle in tests only) over their whole
    domains, across the branch points (|x| = 1/2; y = 1/2, 3/2) and down to 1e-308."""
    from scipy import special
    x = np.concatenate([np.linspace(-1, 1, 4001)[1:-1], [1e-300, -1e-20, 0.5, np.nextafter(0.5, 1),
                                                         1 - 1e-16, -1 + 2 ** -53]])
    y = np.concatenate([np.linspace(0, 2, 4001)[1:-1], 10.0 ** -np.arange(1, 309), [2 - 1e-15, 1.5, 0.5]])
    keep = y != 1   # erfcinv(1) is 0: held exactly below
    np.testing.assert_allclose(rt.erfinv(x), special.erfinv(x), rtol=1e-15)
    np.testing.assert_allclose(rt.erfcinv(y[keep]), special.erfcinv(y[keep]), rtol=2e-15)
    assert rt.erfcinv(1.0) == 0 and rt.erfinv(0.0) == 0
    ends = rt.erfinv(np.array([1.0, -1.0, 1.5, np.nan])), rt.erfcinv(np.array([0.0, 2.0, -0.5, 2.5, np.nan]))
    np.testing.assert_array_equal(ends[0], [np.inf, -np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(ends[1], [np.inf, -np.inf, np.nan, np.nan, np.nan])


@pytest.mark.parametrize("dtype", FLOATS)
def test_inverse_error_functions_keep_the_dtype(dtype):
    x = np.array([-0.6, 0.2, 0.9], dtype)
    assert rt.erfinv(x).dtype == dtype and rt.erfcinv(x + 1).dtype == dtype
    np.testing.assert_allclose(rt.erf(rt.erfinv(x)), x, **_tol(dtype))
    np.testing.assert_allclose(rt.erfc(rt.erfcinv(x + 1)), x + 1, **_tol(dtype))
