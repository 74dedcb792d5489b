"""scipy.stats distributions in model code: SciPy is the oracle for values (eval_jaxpr,
the emitted module and XLA, via check_function), jax.scipy.stats for derivatives (jvp,
vjp, second order). The normal's cdf and logcdf are checked far into the tails, where a
naive formula underflows or rounds to 1."""
from __future__ import annotations

import hypothesis.extra.numpy as hnp
import jax
import jax.scipy.stats
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import s2s
from s2s.errors import ShapeError, UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function
from tests.numpy_api.test_scipy_special import jax_twin

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)
DERIVATIVE_SETTINGS = settings(max_examples=4, deadline=None)


def _jax(fn):
    return jax_twin(fn, stats=jax.scipy.stats)


def norm_functions(x, loc, scale):
    return (stats.norm.pdf(x, loc, scale), stats.norm.logpdf(x, loc=loc, scale=scale),
            stats.norm.cdf(x, loc, scale=scale), stats.norm.logcdf(x, loc, scale),
            stats.norm.sf(x, loc, scale), stats.norm.logsf(x, loc, scale))


def standard_norm_functions(x):
    return (stats.norm.pdf(x), stats.norm.logpdf(x), stats.norm.cdf(x), stats.norm.logcdf(x),
            stats.norm.sf(x), stats.norm.logsf(x))


def t_functions(x, df, loc, scale):
    return stats.t.pdf(x, df, loc, scale), stats.t.logpdf(x, df, loc=loc, scale=scale)


def t_standard(x, df):
    return stats.t.logpdf(x, df) + stats.t.pdf(x, df, scale=2.0)


def mvn_logpdf(x, mean, cov):
    return stats.multivariate_normal.logpdf(x, mean, cov)


def mvn_pdf(x, mean, cov):
    return stats.multivariate_normal.pdf(x, mean=mean, cov=cov)


def gaussian_loss(x, loc, scale):
    return np.sum(stats.norm.logcdf(x, loc, scale) + stats.norm.logpdf(x, loc, scale)
                  + stats.t.logpdf(x, 3.5, loc, scale))


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def vectors(elements, size=None):
    sizes = st.integers(1, 6) if size is None else st.just(size)
    return sizes.flatmap(lambda n: hnp.arrays(np.float64, (n,), elements=elements))


# Far into both tails (log Phi(-1e3) = -5e5), across the branch points -20 and 0.
TAIL_POINTS = st.one_of(_floats(-60, 60), st.sampled_from(
    [-1e3, -38.5, -30.0, -20.0, -19.99, -20.01, 0.0, 8.5, 40.0, np.inf, -np.inf, np.nan]))


@SETTINGS
@given(vectors(TAIL_POINTS))
def test_standard_normal_matches_scipy_in_the_tails(x):
    check_function(standard_norm_functions, x, rtol=1e-12, atol=0)


def test_normal_cdf_at_minus_thirty_keeps_its_digits():
    x = np.array([-30.0, -38.0, 30.0])
    got = s2s.jit(standard_norm_functions)(x)
    np.testing.assert_allclose(got[2][:2], stats.norm.cdf(x[:2]), rtol=1e-13)
    np.testing.assert_allclose(got[3], stats.norm.logcdf(x), rtol=1e-13)
    np.testing.assert_allclose(got[5][2], stats.norm.logsf(30.0), rtol=1e-13)


@SETTINGS
@given(vectors(_floats(-50, 50), size=4), _floats(-3, 3),
       st.one_of(_floats(0.1, 10), st.sampled_from([0.0, -1.0])))
def test_normal_with_location_and_scale_matches_scipy(x, loc, scale):
    """loc and scale as staged values (Python floats become arguments); scale <= 0 is nan."""
    check_function(norm_functions, x, loc, scale, rtol=1e-12, atol=0)
    check_function(norm_functions, x, np.full(4, loc), np.array([scale, 1.0, 2.0, -2.0]),
                   rtol=1e-12, atol=0)


@SETTINGS
@given(vectors(_floats(-30, 30), size=4),
       hnp.arrays(np.float64, (4,), elements=st.one_of(_floats(0.2, 50), st.sampled_from([np.inf, 0.0, -1.0]))),
       _floats(-2, 2), _floats(0.2, 5))
def test_student_t_matches_scipy(x, df, loc, scale):
    check_function(t_functions, x, df, loc, scale, rtol=1e-10, atol=1e-300)
    check_function(t_standard, x, df, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("points", [(5, 3), (3,), (2, 4, 3)], ids=str)
def test_multivariate_normal_matches_scipy(points):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 3))
    cov, mean = a @ a.T + np.eye(3), rng.standard_normal(3)
    x = rng.standard_normal(points)
    check_function(mvn_logpdf, x, mean, cov, rtol=1e-10)
    check_function(mvn_pdf, x, mean, cov, rtol=1e-10)


@pytest.mark.parametrize("x, mean, cov", [
    (np.array([0.5, -1.0]), np.zeros(2), 2.0),                       # scalar cov: 2 I
    (np.array([[0.5, -1.0], [1.0, 2.0]]), np.ones(2), np.array([1.0, 3.0])),   # a diagonal
    (np.array([0.3, 1.2, -0.4]), np.array([0.1]), np.array([[2.0]])),  # dimension 1: points
    (np.array([[0.5, -1.0]]), np.zeros(2), np.eye(2)),               # one point: squeezed
], ids=["scalar-cov", "diagonal-cov", "dimension-1", "one-point"])
def test_multivariate_normal_reads_parameters_as_scipy(x, mean, cov):
    check_function(mvn_logpdf, x, mean, cov, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Derivatives against jax.scipy.stats


@DERIVATIVE_SETTINGS
@given(vectors(_floats(-40, 40), size=5), _floats(-2, 2), _floats(0.3, 4))
def test_normal_derivatives_match_jax(x, loc, scale):
    loc, scale = np.full(5, loc), np.full(5, scale)
    check_derivatives(norm_functions, _jax(norm_functions), x, loc, scale, rtol=1e-9, atol=1e-12)


@DERIVATIVE_SETTINGS
@given(vectors(_floats(-20, 20), size=4), vectors(_floats(0.5, 30), size=4))
def test_student_t_derivatives_match_jax(x, df):
    loc, scale = np.array([0.0, 1.0, -1.0, 0.5]), np.array([1.0, 2.0, 0.5, 3.0])
    check_derivatives(t_functions, _jax(t_functions), x, df, loc, scale, rtol=1e-9, atol=1e-12)


def test_multivariate_normal_derivatives_match_jax():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 3))
    cov, mean, x = a @ a.T + np.eye(3), rng.standard_normal(3), rng.standard_normal((4, 3))
    for fn in (mvn_logpdf, mvn_pdf):
        check_derivatives(fn, _jax(fn), x, mean, cov, rtol=1e-9, atol=1e-12)


def test_second_order_matches_jax_on_both_backends():
    x, loc, scale = np.array([-25.0, -3.0, 0.5, 4.0]), np.array([0.2]), np.array([1.5])
    want = jax.hessian(_jax(gaussian_loss), argnums=(0, 1, 2))(x, loc, scale)
    hessian = s2s.hessian(gaussian_loss, argnums=(0, 1, 2))
    for run in (hessian, s2s.jit(hessian), s2s.jit(hessian, backend="python")):
        got = run(x, loc, scale)
        for i in range(3):
            for j in range(3):
                np.testing.assert_allclose(got[i][j], want[i][j], rtol=1e-8, atol=1e-10)


def test_batched_over_leading_dimensions():
    x = np.random.default_rng(3).standard_normal((6, 5))
    got = s2s.jit(s2s.vmap(standard_norm_functions))(x)
    for g, e in zip(got, standard_norm_functions(x)):
        np.testing.assert_allclose(g, e, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Bad inputs


def t_cdf(x):
    return stats.t.cdf(x, 3.0)


def singular_mvn(x):
    return stats.multivariate_normal.logpdf(x, np.zeros(2), np.eye(2), allow_singular=True)


def mismatched_mvn(x):
    return stats.multivariate_normal.logpdf(x, np.zeros(2), np.eye(3))


def test_bad_inputs_say_what_to_write_instead():
    x = np.ones((2, 2))
    with pytest.raises(UnsupportedFunctionError, match="incomplete beta"):
        s2s.jit(t_cdf)(x)
    with pytest.raises(UnsupportedFunctionError, match="allow_singular"):
        s2s.jit(singular_mvn)(x)
    with pytest.raises(ShapeError, match=r"pass a \(2, 2\) matrix"):
        s2s.jit(mismatched_mvn)(x)
