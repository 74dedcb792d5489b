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
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

import s2s
from s2s.errors import ShapeError, UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function, check_hessian_on_every_backend
from tests.numpy_api.test_scipy_special import finite_floats as _floats
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


def t_cdf_functions(x, df, loc, scale):
    return stats.t.cdf(x, df, loc, scale), stats.t.cdf(x, df)


def t_cdf_sum(x, df):
    return np.sum(stats.t.cdf(x, df, 0.5, 2.0))


def t_cdf_of_x(x):
    return stats.t.cdf(x, 4.5)


def mvn_logpdf(x, mean, cov):
    return stats.multivariate_normal.logpdf(x, mean, cov)


def mvn_pdf(x, mean, cov):
    return stats.multivariate_normal.pdf(x, mean=mean, cov=cov)


def gaussian_loss(x, loc, scale):
    return np.sum(stats.norm.logcdf(x, loc, scale) + stats.norm.logpdf(x, loc, scale)
                  + stats.t.logpdf(x, 3.5, loc, scale))


def vectors(elements, size=None):
    sizes = st.integers(1, 6) if size is None else st.just(size)
    return sizes.flatmap(lambda n: hnp.arrays(np.float64, (n,), elements=elements))


# Far into both tails (log Phi(-1e3) = -5e5), across the branch points -20 and 0.
TAIL_POINTS = st.one_of(_floats(-60, 60), st.sampled_from(
    [-1e3, -38.5, -30.0, -20.0, -19.99, -20.01, 0.0, 8.5, 40.0, np.inf, -np.inf, np.nan]))


@SETTINGS
@given(vectors(TAIL_POINTS))
def test_standard_normal_matches_scipy_in_the_tails(x):
    # XLA on CPU flushes subnormal results to 0 (pdf(-38.5) = 5e-323): atol is float64's tiny.
    check_function(standard_norm_functions, x, rtol=1e-12, atol=np.finfo(np.float64).tiny)


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
    """loc and scale as staged values (Python floats become arguments); scale <= 0 is nan.
    (atol: below float64's tiny, logcdf(38) is -2.9e-316 here, -0.0 in SciPy.)"""
    tiny = np.finfo(np.float64).tiny
    check_function(norm_functions, x, loc, scale, rtol=1e-12, atol=tiny)
    check_function(norm_functions, x, np.full(4, loc), np.array([scale, 1.0, 2.0, -2.0]),
                   rtol=1e-12, atol=tiny)


@SETTINGS
@given(vectors(_floats(-30, 30), size=4),
       hnp.arrays(np.float64, (4,), elements=st.one_of(_floats(0.2, 50), st.sampled_from([np.inf, 0.0, -1.0]))),
       _floats(-2, 2), _floats(0.2, 5))
def test_student_t_matches_scipy(x, df, loc, scale):
    check_function(t_functions, x, df, loc, scale, rtol=1e-10, atol=1e-300)
    check_function(t_standard, x, df, rtol=1e-10, atol=1e-300)


@SETTINGS
@given(vectors(st.one_of(_floats(-60, 60), st.sampled_from([0.0, 1e-3, -1e-3, -1e4, np.inf, np.nan])), size=5),
       hnp.arrays(np.float64, (5,), elements=st.one_of(_floats(0.1, 200), st.sampled_from([np.inf, 0.0, -1.0, 1.0]))),
       _floats(-2, 2), _floats(0.2, 5))
def test_student_t_cdf_matches_scipy(x, df, loc, scale):
    """Off 0 < |z| < 1e-5, where SciPy's t.cdf loses digits (0.4999999933 for the Cauchy
    cdf's 0.4999999937 at z = -2e-8, a draw of loc = 6e-8): the next test holds s2s to
    the closed forms there."""
    with np.errstate(invalid="ignore"):
        z = np.abs((x - loc) / scale)
    assume(not np.any((z > 0) & (z < 1e-5)))
    check_function(t_cdf_functions, x, df, loc, scale, rtol=1e-10, atol=1e-300)


def test_student_t_cdf_near_zero_keeps_digits_scipy_loses():
    """At z = 1e-9 SciPy's t.cdf rounds to 1/2; the closed forms for df = 1 (Cauchy) and
    df = 2 say 1/2 + 3.2e-10 and 1/2 + 3.5e-10, and so does s2s, on both backends."""
    z = np.array([1e-9, -1e-9, 1e-5, 0.3])
    cauchy = 0.5 + np.arctan(z) / np.pi
    df_two = 0.5 + z / (2 * np.sqrt(2 + z * z))
    for run in (s2s.jit(t_cdf_functions), s2s.jit(t_cdf_functions, backend="python")):
        np.testing.assert_allclose(run(z, np.ones(4), 0.0, 1.0)[0], cauchy, rtol=1e-15)
        np.testing.assert_allclose(run(z, np.full(4, 2.0), 0.0, 1.0)[0], df_two, rtol=1e-15)


def t_logpdf_and_cdf(x, df):
    return stats.t.logpdf(x, df), stats.t.cdf(x, df)


def test_student_t_at_large_df_and_tiny_z_keeps_its_digits():
    """Found by review: lgamma(df/2 + 1/2) - lgamma(df/2) lost every digit for a large df
    (t.logpdf -28.1 for SciPy's -5.42 at df = 1e20; t.cdf 1.77 off at 1e15, nan at 1e20,
    and one element's value depended on the rest of the batch); the derivative of t.cdf
    was nan at x = 1e-300, where z^2 underflows."""
    x = np.array([-30.0, -3.0, -0.5, 1e-9, 0.7, 3.0])
    for df in (1e5, 9.9e6, 1e7, 1e10, 1e15, 1e20):
        for run in (s2s.jit(t_logpdf_and_cdf), s2s.jit(t_logpdf_and_cdf, backend="python")):
            logpdf, cdf = run(x, np.full(6, df))
            np.testing.assert_allclose(logpdf, stats.t.logpdf(x, df), rtol=1e-13)
            np.testing.assert_allclose(cdf, stats.t.cdf(x, df), rtol=1e-12, atol=0)
    alone = s2s.jit(t_logpdf_and_cdf)(np.array([-0.5]), np.array([1e10]))[1]
    batched = s2s.jit(t_logpdf_and_cdf)(np.array([-0.5, 3.0]), np.array([1e10, 3.0]))[1]
    assert alone[0] == batched[0]
    for x0 in (1e-300, -1e-200, 1e-160, 1e-9):
        for run in (s2s.grad(t_cdf_of_x), s2s.jit(s2s.grad(t_cdf_of_x))):
            np.testing.assert_allclose(run(x0), stats.t.pdf(x0, 4.5), rtol=1e-14)


def test_student_t_cdf_derivative_is_the_pdf_on_both_backends():
    x = np.array([-1e3, -30.0, -3.0, -1e-9, 0.0, 1e-9, 0.5, 2.0, 40.0])
    df = np.array([1.0, 2.5, 10.0, 0.3, 5.0, 3.0, 7.0, 1e4, np.inf])
    want = stats.t.pdf(x, df, 0.5, 2.0)
    grad = s2s.grad(t_cdf_sum)
    for run in (grad, s2s.jit(grad), s2s.jit(grad, backend="python")):
        np.testing.assert_allclose(run(x, df), want, rtol=1e-10, atol=1e-300)
    second = s2s.vmap(s2s.grad(s2s.grad(t_cdf_of_x)))(x[1:-1])
    jax_second = jax.vmap(jax.grad(lambda v: jax.scipy.stats.t.pdf(v, 4.5)))(x[1:-1])
    # Near z = 0 the second derivative (~ -z) comes out of terms in 1/z that cancel: exact
    # to 1e-9 absolutely, not relatively (0 at z = 1e-9 where the pdf's slope is 4.6e-10).
    np.testing.assert_allclose(second, jax_second, rtol=1e-8, atol=1e-9)
    with pytest.raises(UnsupportedFunctionError, match="degrees of freedom"):
        s2s.grad(t_cdf_sum, argnums=1)(x, df)


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
@given(vectors(_floats(-5, 5), size=5), _floats(-2, 2), _floats(0.4, 4))
def test_normal_derivatives_match_jax(x, loc, scale):
    """Within |z| < 19: beyond, JAX's log_ndtr (a 3-term series) is off by 4e-9 at z = -20
    and the next test holds the tails to SciPy instead."""
    loc, scale = np.full(5, loc), np.full(5, scale)
    check_derivatives(norm_functions, _jax(norm_functions), x, loc, scale, rtol=1e-9, atol=1e-12)


def log_cdf_and_sf_sums(x):
    return np.sum(stats.norm.logcdf(x)), np.sum(stats.norm.logsf(x))


def test_normal_log_cdf_derivatives_are_exact_in_the_tails_on_both_backends():
    """d/dz log Phi(z) = pdf / cdf, computed from SciPy's logs, across the series' edge
    (to 1e-10: at z = -1e3 the logs are -5e5, and their difference keeps ten digits)."""
    z = np.array([-1e3, -38.0, -25.0, -20.0001, -20.0, -19.9999, -5.0, 0.0, 5.0, 30.0])
    want_cdf = np.exp(stats.norm.logpdf(z) - stats.norm.logcdf(z))
    want_sf = -np.exp(stats.norm.logpdf(z) - stats.norm.logsf(z))
    for name, run in {"eager": s2s.jacrev(log_cdf_and_sf_sums),
                      "xla": s2s.jit(s2s.jacrev(log_cdf_and_sf_sums)),
                      "python": s2s.jit(s2s.jacrev(log_cdf_and_sf_sums), backend="python")}.items():
        d_cdf, d_sf = run(z)
        np.testing.assert_allclose(d_cdf, want_cdf, rtol=1e-10, err_msg=name)
        # XLA flushes subnormals (d logsf at -38 is -1e-314) to 0.
        np.testing.assert_allclose(d_sf, want_sf, rtol=1e-10, atol=np.finfo(float).tiny, err_msg=name)


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
    check_hessian_on_every_backend(gaussian_loss, _jax(gaussian_loss), x, loc, scale, argnums=(0, 1, 2),
                                   rtol=1e-8, atol=1e-10)


def test_batched_over_leading_dimensions():
    x = np.random.default_rng(3).standard_normal((6, 5)) * 3
    got = s2s.jit(s2s.vmap(standard_norm_functions))(x)
    for g, e in zip(got, standard_norm_functions(x)):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    for backend in ("xla", "python"):   # betainc's loop, batched
        np.testing.assert_allclose(s2s.jit(s2s.vmap(t_cdf_of_x), backend=backend)(x), t_cdf_of_x(x),
                                   rtol=1e-12)


def frozen_static(x):
    return stats.norm(0.5, 2.0).logpdf(x) + stats.t(3.0, scale=2.0).cdf(x) + stats.norm().logcdf(x)


def frozen_staged(x, mu, df):
    return np.sum(stats.norm(mu, 2.0).logpdf(x) + stats.t(df).pdf(x))


def test_frozen_distributions_with_static_and_staged_parameters():
    x = np.array([-3.0, 0.1, 2.0])
    check_function(frozen_static, x, rtol=1e-12)
    check_function(frozen_staged, x, 0.3, np.array([1.0, 2.0, 5.0]), rtol=1e-12)
    grad_mu = s2s.grad(frozen_staged, argnums=1)(x, 0.3, np.array([1.0, 2.0, 5.0]))
    np.testing.assert_allclose(grad_mu, np.sum((x - 0.3) / 4), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Bad inputs


def mismatched_mvn(x):
    return stats.multivariate_normal.logpdf(x, np.zeros(2), np.eye(3))


def test_bad_inputs_say_what_to_write_instead():
    x = np.ones((2, 2))
    with pytest.raises(ShapeError, match=r"pass a \(2, 2\) matrix"):
        s2s.jit(mismatched_mvn)(x)
