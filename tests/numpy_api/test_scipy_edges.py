"""SciPy's values where they are hardest to get right, on every backend: digamma and its
derivative at the signed zeros and the poles (SciPy the oracle, through check_function),
t.cdf / t.logcdf in both tails for df from 0.1 to 1e20 (mpmath the oracle, relative
1e-12; derivatives against SciPy's pdf and jax's), and erf / erfc of complex arguments over
the plane (SciPy the oracle; jax has no complex erf, so derivatives against the formula
+-2/sqrt(pi) e^(-z^2), itself checked by central differences)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st
import hypothesis.extra.numpy as hnp

import jax
import scipy.stats as stats

import s2s
from tests.helpers import check_function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)
# A result below float64's smallest normal keeps no relative precision (XLA:CPU flushes it to 0).
BELOW_NORMAL = 1e-300

# ---------------------------------------------------------------------------------------
# digamma at 0 and -0.0: SciPy's -1/x (-inf and inf); nan at the negative integers.

DIGAMMA_EDGES = np.array([0.0, -0.0, -1.0, -2.0, -np.inf, np.inf, np.nan, 0.5, -0.5, 1e-300, -1e-300])


def digamma_and_trigamma(x):
    return sp.digamma(x), sp.polygamma(1, x)


def test_digamma_at_zeros_and_poles_matches_scipy():
    check_function(digamma_and_trigamma, DIGAMMA_EDGES, rtol=1e-13, atol=0)
    for backend in ("xla", "python"):
        got = np.asarray(s2s.jit(sp.digamma, backend=backend)(np.array([0.0, -0.0])))
        np.testing.assert_array_equal(got, [-np.inf, np.inf], err_msg=backend)


@pytest.mark.parametrize("backend", ["xla", "python"])
def test_digamma_derivative_at_the_poles_is_trigammas_infinity(backend):
    """d digamma / dx = polygamma(1, x), +inf at 0, -0.0 and the negative integers (SciPy's
    and jax.grad(digamma)(0.0)'s value)."""
    poles = np.array([0.0, -0.0, -1.0, -3.0])
    derivative = s2s.jit(s2s.vmap(s2s.grad(sp.digamma)), backend=backend)(poles)
    np.testing.assert_array_equal(np.asarray(derivative), sp.polygamma(1, poles))


@SETTINGS
@given(hnp.arrays(np.float64, st.sampled_from([(3,), (2, 3)]),
                  elements=st.one_of(st.floats(-30, 30, allow_subnormal=False).filter(lambda v: v > 0 or abs(v - round(v)) > 1e-6),
                                     st.sampled_from([0.0, -0.0, -4.0]))))
def test_digamma_matches_scipy_with_zeros_drawn(x):
    """(Off the poles by 1e-6: within, SciPy's digamma loses digits, 0.6% off at
    -2 + 3.6e-15, where s2s's is -1/(x + 2) as it should. No subnormals: XLA on CPU reads
    them as 0, and digamma(0) is -inf, as README says.)"""
    check_function(digamma_and_trigamma, x, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# t.cdf and t.logcdf: relative 1e-12 in both tails, df from 0.1 to 1e20.


def t_cdf_and_logcdf(x, df):
    return stats.t.cdf(x, df), stats.t.logcdf(x, df)


def exact_t_cdf_and_logcdf(z, df):
    """mpmath at 40 digits: I_{df/(df+z^2)}(df/2, 1/2) / 2 for the lower tail, and the
    log of the upper side as log1p(-lower tail of -z)."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(40):
        z, df = mpmath.mpf(float(z)), mpmath.mpf(float(df))
        tail = mpmath.betainc(df / 2, mpmath.mpf(0.5), 0, df / (df + z * z), regularized=True) / 2
        return (float(tail), float(mpmath.log(tail))) if z <= 0 else (float(1 - tail), float(mpmath.log1p(-tail)))


def assert_t_cdf_matches_mpmath(z, df, rtol=1e-12):
    exact = np.array([exact_t_cdf_and_logcdf(a, b) for a, b in zip(z, df)])
    for backend in ("xla", "python"):
        cdf, logcdf = s2s.jit(t_cdf_and_logcdf, backend=backend)(z, df)
        # Below float64's smallest normal the cdf keeps no relative precision (XLA:CPU
        # flushes it to 0); its log keeps all of it, however far into the tail (but a log
        # that is itself that small, the upper tail's -5e-314, is flushed like any value).
        tiny = np.finfo(np.float64).tiny
        normal = exact[:, 0] > tiny
        np.testing.assert_allclose(np.asarray(cdf)[normal], exact[normal, 0], rtol=rtol, atol=0, err_msg=backend)
        np.testing.assert_allclose(np.asarray(logcdf), exact[:, 1], rtol=rtol, atol=tiny, err_msg=backend)


T_GRID_Z = np.array([-40.0, -37.0, -30.0, -10.0, -3.0, -1.0, -1e-3, 0.0, 0.5, 2.0, 8.0, 25.0, 40.0])


@pytest.mark.parametrize("df", [0.1, 2.5, 30.0, 99.9, 100.0, 1e3, 1e5, 9.9e6, 1e7, 1e10, 1e20])
def test_t_cdf_and_logcdf_match_mpmath_in_both_tails(df):
    """Found by review: from df = 1e7 on t.cdf was the normal's with a 1/df term, 2e-4
    relative off at z = -30 (1e-10 at z = -5), and below, betainc's rounded argument
    df / (df + z^2) cost df * 1e-16 (3e-10 at df = 9.9e6); t.logcdf inherited both."""
    assert_t_cdf_matches_mpmath(T_GRID_Z, np.full(T_GRID_Z.shape, df))


def test_t_logcdf_is_finite_where_the_cdf_is_below_float64():
    """Found by a hypothesis run: at x = -1e3, df = 162, log cdf = -710.4 (a subnormal cdf,
    which XLA flushed to 0: the log was -inf). The log now comes from log I, as far into
    the tail as the log itself reaches (SciPy's is -inf from about -745 on)."""
    z = np.array([-1e3, -1e3, -1e3, -1e8, -1e8, -1e150])
    df = np.array([162.0, 170.0, 60.0, 30.0, 50.0, 2.5])
    assert_t_cdf_matches_mpmath(z, df)


@settings(max_examples=8, deadline=None)
@given(hnp.arrays(np.float64, (4,), elements=st.floats(-40, 40)),
       hnp.arrays(np.float64, (4,), elements=st.floats(-1, 20)))
def test_t_cdf_matches_mpmath_for_drawn_z_and_df(z, log10_df):
    assert_t_cdf_matches_mpmath(z, 10.0 ** log10_df)


def t_cdf_sum(x, df):
    return np.sum(stats.t.cdf(x, df))


def t_logcdf_sum(x, df):
    return np.sum(stats.t.logcdf(x, df))


@pytest.mark.parametrize("df", [150.0, 1e4, 1e7, 1e12, 1e20])
def test_t_cdf_derivatives_at_large_df_are_the_pdf(df):
    """d t.cdf / dx = t.pdf and d t.logcdf / dx = pdf / cdf, into both tails, on both
    backends and by jvp; the second derivative against jax's slope of t.pdf."""
    x, dfs = np.array([-40.0, -12.0, -2.0, 0.0, 1e-9, 3.0, 35.0]), np.full(7, df)
    pdf = stats.t.pdf(x, df)
    ratio = np.exp(stats.t.logpdf(x, df) - np.array([exact_t_cdf_and_logcdf(v, df)[1] for v in x]))
    for run in (s2s.grad(t_cdf_sum), s2s.jit(s2s.grad(t_cdf_sum)), s2s.jit(s2s.grad(t_cdf_sum), backend="python")):
        np.testing.assert_allclose(run(x, dfs), pdf, rtol=1e-11, atol=BELOW_NORMAL)
    np.testing.assert_allclose(s2s.grad(t_logcdf_sum)(x, dfs), ratio, rtol=1e-11)
    _, tangent = s2s.jvp(lambda v: stats.t.cdf(v, dfs), (x,), (np.ones(7),))
    np.testing.assert_allclose(tangent, pdf, rtol=1e-11, atol=BELOW_NORMAL)
    if df <= 1e4:   # beyond, jax's t.pdf loses digits to its lgamma difference
        second = s2s.vmap(s2s.grad(s2s.grad(lambda v: stats.t.cdf(v, df))))(x)
        jax.config.update("jax_enable_x64", True)
        slope = jax.vmap(jax.grad(lambda v: jax.scipy.stats.t.pdf(v, df)))(x)
        # Near z = 0 the second derivative (~ -z) is a difference of terms near pdf(0)^2:
        # exact to 1e-16 absolutely there, not relatively.
        np.testing.assert_allclose(second, slope, rtol=1e-9, atol=1e-15)


# ---------------------------------------------------------------------------------------
# erf and erfc of complex arguments, by the Faddeeva function (s2s_runtime.special).


def error_functions(z):
    return sp.erf(z), sp.erfc(z)


def assert_error_functions_match_scipy(z, tol=2e-13):
    """Within tol of SciPy relative to max(|erf|, |erfc|): the scale of erf = 1 - erfc's
    own rounding, which near their complex zeros no method beats."""
    want_erf, want_erfc = error_functions(z)
    size = np.maximum(np.abs(want_erf), np.abs(want_erfc))
    for backend in ("xla", "python"):
        got_erf, got_erfc = s2s.jit(error_functions, backend=backend)(z)
        assert np.asarray(got_erf).dtype == want_erf.dtype, backend
        for got, want in ((got_erf, want_erf), (got_erfc, want_erfc)):
            assert np.all(np.abs(np.asarray(got) - want) <= tol * size), (backend, z, got, want)


COMPLEX_EDGES = np.array([0j, 1e-300 + 1e-300j, -1e-8j, 0.5j, -0.999 + 0.01j, 1 + 0j, 1.0001j,
                          1.4506 + 1.8809j, -2.5 + 1.5j, 5 - 3j, 3 + 20j, -26 + 0.5j, 1e3 + 1e3j,
                          -20 - 1e-9j, 0.1 + 26.5j])


def test_complex_erf_and_erfc_match_scipy_at_edges():
    assert_error_functions_match_scipy(COMPLEX_EDGES)
    check_function(error_functions, COMPLEX_EDGES[:8], rtol=1e-12, atol=1e-15)


@SETTINGS
@given(hnp.arrays(np.float64, (2, 4), elements=st.floats(-30, 30)),
       st.sampled_from([1e-3, 0.7, 1.0, 3.0, 10.0]))
def test_complex_erf_and_erfc_match_scipy_over_the_plane(parts, scale):
    z = (parts[0] + 1j * parts[1]) * (scale / 30)
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(error_functions(z)[0])
    assert_error_functions_match_scipy(z[finite])


def test_complex64_erf_stays_complex64():
    z = np.array([0.3 + 0.2j, -2 + 1j], np.complex64)
    for backend in ("xla", "python"):
        got_erf, got_erfc = s2s.jit(error_functions, backend=backend)(z)
        assert np.asarray(got_erf).dtype == np.complex64
        np.testing.assert_allclose(got_erf, sp.erf(z), rtol=1e-5)
        np.testing.assert_allclose(got_erfc, sp.erfc(z), rtol=1e-5)


def sum_of_error_functions(z):
    return sp.erf(z) + 2 * sp.erfc(z)


def test_complex_erf_derivatives_are_holomorphic():
    """jvp: f'(z) t with f' = -2/sqrt(pi) e^(-z^2) for erf + 2 erfc; vjp: c f'(z) (JAX's
    convention for a holomorphic function: no conjugate); the formula checked by central
    differences of SciPy's values; second order by jvp of jvp: 4 z/sqrt(pi) e^(-z^2)."""
    z = np.array([0.3 + 0.2j, -1.5 + 2j, 2 - 0.5j, 0.01j])
    slope = -2 / np.sqrt(np.pi) * np.exp(-z * z)
    h = 1e-6
    numeric = (sum_of_error_functions(z + h) - sum_of_error_functions(z - h)) / (2 * h)
    np.testing.assert_allclose(numeric, slope, rtol=1e-8)
    tangent = np.array([1 + 0j, 1j, 0.5 - 2j, -1 + 1j])
    _, t_out = s2s.jvp(sum_of_error_functions, (z,), (tangent,))
    np.testing.assert_allclose(t_out, slope * tangent, rtol=1e-12)
    out, pullback = s2s.vjp(sum_of_error_functions, z)
    np.testing.assert_allclose(out, sum_of_error_functions(z), rtol=1e-13)
    np.testing.assert_allclose(pullback(tangent)[0], tangent * slope, rtol=1e-12)
    second = s2s.jit(lambda v: s2s.jvp(lambda u: s2s.jvp(sp.erf, (u,), (np.ones(4, complex),))[1],
                                       (v,), (np.ones(4, complex),))[1])(z)
    np.testing.assert_allclose(second, -4 * z / np.sqrt(np.pi) * np.exp(-z * z), rtol=1e-12)
