"""scipy.stats's t.logcdf, beta, dirichlet and the multivariate normal's entropy and
singular covariances: SciPy is the oracle for values (eval_jaxpr, the emitted module and
XLA, via check_function), jax.scipy.stats for derivatives where it has them (jvp, vjp,
second order), else the closed forms (d/dx log F = pdf / cdf) or jax code written here."""
from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import jax.scipy.special
import jax.scipy.stats
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import s2s
from s2s.errors import ShapeError, UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function, check_hessian_on_every_backend
from tests.numpy_api.test_scipy_special import finite_floats, jax_twin

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)
DERIVATIVE_SETTINGS = settings(max_examples=4, deadline=None)
TINY = np.finfo(np.float64).tiny


def _jax(fn):
    return jax_twin(fn, stats=jax.scipy.stats)


# ---------------------------------------------------------------------------------------
# t.logcdf


def t_logcdf(x, df, loc, scale):
    return stats.t.logcdf(x, df, loc, scale), stats.t.logcdf(x, df)


LOG_TINY = float(np.log(TINY))


def t_logcdf_down_to_log_tiny(x, df, loc, scale):
    """Compared down to log(tiny): below, SciPy's log cdf turns -inf (its cdf underflows)
    while s2s's keeps going (held to mpmath in test_scipy_edges.py)."""
    return (np.maximum(stats.t.logcdf(x, df, loc, scale), LOG_TINY),
            np.maximum(stats.t.logcdf(x, df), LOG_TINY))


def t_logcdf_sum(x):
    return np.sum(stats.t.logcdf(x, 3.5, 0.5, 2.0))


@SETTINGS
@given(hnp.arrays(np.float64, (5,), elements=st.one_of(
           finite_floats(-60, 60).filter(lambda v: abs(v) > 1e-3 and abs(v - 0.5) > 1e-3),
           st.sampled_from([-1e8, -1e3, 1e3, 1e8, 0.0, np.inf, -np.inf, np.nan]))),
       hnp.arrays(np.float64, (5,), elements=st.one_of(finite_floats(0.2, 200), st.sampled_from([1.0, 0.0, -1.0]))),
       st.sampled_from([0.0, 0.5]), st.one_of(finite_floats(0.2, 5), st.just(-1.0)))
def test_t_logcdf_matches_scipy_into_both_tails(x, df, loc, scale):
    """log cdf(-1e8) at df = 0.5 is -9.6, and log cdf(1e8) is a tiny -2e-5 .. -1e-40: each
    side from its own small value. (x keeps off loc, where SciPy rounds t.cdf: 6e-10 off
    at z = -1e-9, df = 1.)"""
    check_function(t_logcdf_down_to_log_tiny, x, df, loc, scale, rtol=1e-10, atol=1e-300)


def test_t_logcdf_at_infinite_df_is_the_normal_logcdf_beyond_underflow():
    x = np.array([-1e3, -40.0, -3.0, 0.5, 30.0])
    for backend in ("xla", "python"):
        got = s2s.jit(t_logcdf, backend=backend)(x, np.full(5, np.inf), 0.0, 1.0)[0]
        np.testing.assert_allclose(got, stats.norm.logcdf(x), rtol=1e-13)


def test_t_logcdf_derivatives_are_pdf_over_cdf_on_both_backends():
    x = np.array([-1e3, -30.0, -3.0, -1e-9, 0.0, 0.7, 4.0, 50.0])
    z, pdf_over_cdf = (x - 0.5) / 2.0, np.exp(stats.t.logpdf(x, 3.5, 0.5, 2.0) - stats.t.logcdf(x, 3.5, 0.5, 2.0))
    grad = s2s.grad(t_logcdf_sum)
    for run in (grad, s2s.jit(grad), s2s.jit(grad, backend="python")):
        np.testing.assert_allclose(run(x), pdf_over_cdf, rtol=1e-10)
    # Second order: (log F)'' = f' / F - (f / F)^2, with f' from jax's t.pdf.
    slope = jax.vmap(jax.grad(lambda v: jax.scipy.stats.t.pdf(v, 3.5, 0.5, 2.0)))(x)
    want = np.asarray(slope) / stats.t.cdf(x, 3.5, 0.5, 2.0) - pdf_over_cdf ** 2
    second = s2s.vmap(s2s.grad(s2s.grad(lambda v: stats.t.logcdf(v, 3.5, 0.5, 2.0))))(x[1:-1])
    np.testing.assert_allclose(second, want[1:-1], rtol=1e-8, atol=1e-12)
    # In loc and scale by the chain rule: -f/F / scale and -z f/F / scale.
    d_loc, d_scale = s2s.grad(lambda v, l, s: np.sum(stats.t.logcdf(v, 3.5, l, s)), argnums=(1, 2))(x, 0.5, 2.0)
    np.testing.assert_allclose(d_loc, -np.sum(pdf_over_cdf), rtol=1e-10)
    np.testing.assert_allclose(d_scale, -np.sum(z * pdf_over_cdf), rtol=1e-10)


# ---------------------------------------------------------------------------------------
# beta


def beta_functions(x, a, b, loc, scale):
    return (stats.beta.pdf(x, a, b, loc, scale), stats.beta.logpdf(x, a, b, loc=loc, scale=scale),
            stats.beta.cdf(x, a, b, loc, scale))


def beta_densities(x, a, b, loc, scale):
    return stats.beta.pdf(x, a, b, loc, scale), stats.beta.logpdf(x, a, b, loc, scale)


def beta_loss(x, a, b):
    return np.sum(stats.beta.logpdf(x, a, b) + stats.beta.pdf(x, a, b))


def frozen_beta(x, a):
    return stats.beta(a, 3.0).logpdf(x) + stats.beta(2.0, 0.5, scale=2.0).cdf(x)


def jax_beta_densities(x, a, b, loc, scale):
    """The beta density in jax, by lgamma: jax.scipy.stats.beta's own keeps about 6 digits
    (0.06249994 for 8 (1/2)^7 = 0.0625 at a = 1, b = 8)."""
    y = (x - loc) / scale
    log_beta = jax.scipy.special.gammaln(a) + jax.scipy.special.gammaln(b) - jax.scipy.special.gammaln(a + b)
    logpdf = (a - 1) * jnp.log(y) + (b - 1) * jnp.log1p(-y) - log_beta - jnp.log(scale)
    return jnp.exp(logpdf), logpdf


PARAMETERS = st.one_of(finite_floats(0.2, 30), st.sampled_from([1.0, 0.5, 1e4, 0.0, -1.0]))


@SETTINGS
@given(hnp.arrays(np.float64, (5,), elements=st.one_of(finite_floats(-0.2, 1.2).filter(lambda v: v == 0 or abs(v) > 1e-300),
                                                      st.sampled_from([0.0, 1.0]))),
       hnp.arrays(np.float64, (5,), elements=PARAMETERS), hnp.arrays(np.float64, (5,), elements=PARAMETERS),
       st.sampled_from([0.0, -0.1]), st.sampled_from([1.0, 1.3, 0.0]))
def test_beta_matches_scipy(x, a, b, loc, scale):
    """Inside the support and out (0 below, 1 above for the cdf), at its ends (inf where
    a or b is below 1), and nan for parameters that are not positive. (x stays off 1e-300
    and below: x / 1.3 would be subnormal, which XLA on CPU reads as 0, as README says.)"""
    check_function(beta_functions, x, a, b, loc, scale, rtol=1e-9, atol=1e-300)


@DERIVATIVE_SETTINGS
@given(hnp.arrays(np.float64, (4,), elements=finite_floats(0.02, 0.98)),
       hnp.arrays(np.float64, (4,), elements=finite_floats(0.3, 20)),
       hnp.arrays(np.float64, (4,), elements=finite_floats(0.3, 20)))
def test_beta_derivatives_match_jax(x, a, b):
    loc, scale = np.array([0.0, -0.5, 0.1, 0.0]), np.array([1.0, 2.0, 1.5, 1.0])
    check_derivatives(beta_densities, jax_beta_densities, x * scale + loc, a, b, loc, scale,
                      rtol=1e-9, atol=1e-12)
    # jax's betainc keeps about 7 digits (0.06249994 for 0.0625): the cdf's slope in x
    # is the pdf instead, on both backends.
    grad = s2s.grad(lambda v: np.sum(stats.beta.cdf(v, 2.5, 0.7, -0.5, 2.0)))
    for run in (grad, s2s.jit(grad, backend="python")):
        np.testing.assert_allclose(run(2 * x - 0.5), stats.beta.pdf(2 * x - 0.5, 2.5, 0.7, -0.5, 2.0), rtol=1e-10)


def test_beta_second_order_matches_jax_on_both_backends():
    x, a, b = np.array([0.1, 0.5, 0.93]), np.array([0.8, 2.0, 5.0]), np.array([3.0, 0.6, 1.5])
    check_hessian_on_every_backend(beta_loss, _jax(beta_loss), x, a, b, argnums=(0, 1, 2), rtol=1e-8, atol=1e-10)


def test_frozen_beta_with_static_and_staged_parameters():
    x = np.array([0.05, 0.4, 0.9])
    check_function(frozen_beta, x, 1.7, rtol=1e-12)
    d_a = s2s.grad(lambda v, a: np.sum(stats.beta(a, 3.0).logpdf(v)), argnums=1)(x, 1.7)
    np.testing.assert_allclose(d_a, jax.grad(lambda a: jnp.sum(jax.scipy.stats.beta.logpdf(x, a, 3.0)))(1.7),
                               rtol=1e-12)


# ---------------------------------------------------------------------------------------
# dirichlet


def dirichlet_functions(x, alpha):
    return stats.dirichlet.logpdf(x, alpha), stats.dirichlet.pdf(x, alpha)


ALPHA = np.array([1.5, 0.7, 3.0])


@pytest.mark.parametrize("x", [
    np.array([0.2, 0.3, 0.5]), np.array([0.2, 0.3]),                     # K or K - 1 components
    np.array([[0.2, 0.1], [0.3, 0.6], [0.5, 0.3]]), np.array([[0.2, 0.1], [0.3, 0.6]]),   # points
    np.array([0.0, 0.3, 0.7]),                                           # -inf: x = 0, alpha > 1
    np.array([0.3, 0.3, 0.5]), np.array([0.3, 0.0, 0.7]), np.array([-0.1, 0.6, 0.5]),    # nan: SciPy raises
], ids=["K", "K-1", "points", "points-K-1", "zero-component", "off-simplex", "zero-alpha-below-1", "negative"])
def test_dirichlet_matches_scipy(x, alpha=ALPHA):
    try:
        want = dirichlet_functions(x, alpha)
    except ValueError:   # SciPy's check of the values: nan here
        got = s2s.jit(dirichlet_functions)(x, alpha)
        assert np.isnan(got[0]) and np.isnan(got[1])
        return
    check_function(dirichlet_functions, x, alpha, rtol=1e-13, atol=0)
    assert np.shape(want[0]) == np.shape(s2s.jit(dirichlet_functions)(x, alpha)[0])


def normalized_dirichlet(x, alpha):
    return stats.dirichlet.logpdf(x / np.sum(x), alpha) + stats.dirichlet.pdf(x / np.sum(x), alpha)


@DERIVATIVE_SETTINGS
@given(hnp.arrays(np.float64, (4,), elements=finite_floats(0.05, 1)), hnp.arrays(np.float64, (4,), elements=finite_floats(0.3, 10)))
def test_dirichlet_derivatives_in_x_and_alpha_match_jax(x, alpha):
    check_derivatives(normalized_dirichlet, _jax(normalized_dirichlet), x, alpha, rtol=1e-9, atol=1e-12)


def dirichlet_loss(x, alpha):
    return stats.dirichlet.logpdf(x / np.sum(x), alpha)


def test_dirichlet_second_order_matches_jax_on_both_backends():
    x, alpha = np.array([0.2, 0.5, 0.3]), np.array([0.9, 2.0, 4.5])
    check_hessian_on_every_backend(dirichlet_loss, _jax(dirichlet_loss), x, alpha, argnums=(0, 1),
                                   rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------
# The multivariate normal's entropy and singular covariances


def mvn_entropy(cov):
    return stats.multivariate_normal.entropy(None, cov)


def jax_mvn_entropy(cov):
    """SciPy's entropy of a positive definite cov, in jax: rank dim, pseudo-determinant det."""
    dim = cov.shape[0]
    return 0.5 * (dim * (math.log(2 * math.pi) + 1) + jnp.linalg.slogdet(0.5 * (cov + cov.T))[1])


def singular_mvn(x, mean, cov):
    return (stats.multivariate_normal.logpdf(x, mean, cov, allow_singular=True),
            stats.multivariate_normal.pdf(x, mean, cov, allow_singular=True))


def _positive_definite(seed, dim=4):
    a = np.random.default_rng(seed).standard_normal((dim, dim))
    return a @ a.T + np.eye(dim)


def test_entropy_matches_scipy_and_its_derivative_jax():
    cov = _positive_definite(5)
    check_function(mvn_entropy, cov, rtol=1e-13)
    check_function(lambda mean, c: stats.multivariate_normal.entropy(mean, c), np.zeros(4), cov, rtol=1e-13)
    check_function(mvn_entropy, np.diag([2.0, 3.0, 0.0]), rtol=1e-13)   # singular: rank 2
    check_derivatives(mvn_entropy, jax_mvn_entropy, cov, rtol=1e-10, atol=1e-12)
    # Repeated eigenvalues: the eigenvalues' derivatives alone, exact (inv(cov) / 2).
    for run in (s2s.grad(mvn_entropy), s2s.jit(s2s.grad(mvn_entropy), backend="python")):
        np.testing.assert_allclose(run(np.diag([2.0, 2.0, 0.5])), np.diag([0.25, 0.25, 1.0]), rtol=1e-14)


def _singular_problem():
    """A rank-2 covariance in 4 dimensions (rotated), points on its support and off it."""
    rotation = np.linalg.qr(np.random.default_rng(6).standard_normal((4, 4)))[0]
    cov = rotation @ np.diag([2.0, 0.5, 0.0, 0.0]) @ rotation.T
    mean = np.array([0.1, -0.2, 0.3, 0.0])
    on_support = np.random.default_rng(7).standard_normal((3, 2)) @ rotation[:, :2].T + mean
    return on_support, mean, cov, rotation


def test_singular_covariance_matches_scipy():
    on_support, mean, cov, rotation = _singular_problem()
    off_support = on_support[:1] + 0.1 * rotation[:, 3]
    check_function(singular_mvn, np.concatenate([on_support, off_support]), mean, cov, rtol=1e-10)
    check_function(singular_mvn, on_support[0], mean, cov, rtol=1e-10)   # one point: a scalar
    check_function(singular_mvn, on_support, mean, _positive_definite(8), rtol=1e-10)   # full rank


def jax_singular_mvn(x, mean, cov):
    """SciPy's formulas with a rank-2 pseudo-inverse and pseudo-determinant, in jax."""
    values, vectors = jnp.linalg.eigh(cov)
    kept = values > 1e-8
    safe = jnp.where(kept, values, 1.0)
    pinv = (vectors * jnp.where(kept, 1 / safe, 0.0)) @ vectors.T
    dev = x - mean
    logpdf = -0.5 * (2 * math.log(2 * math.pi) + jnp.sum(jnp.where(kept, jnp.log(safe), 0.0))
                     + jnp.sum((dev @ pinv) * dev, axis=-1))
    return logpdf, jnp.exp(logpdf)


def test_singular_covariance_derivatives_in_x_and_mean_match_jax():
    on_support, mean, cov, _ = _singular_problem()
    fn = lambda x, m: singular_mvn(x, m, cov)              # noqa: E731
    jax_fn = lambda x, m: jax_singular_mvn(x, m, cov)      # noqa: E731
    check_derivatives(fn, jax_fn, on_support, mean, rtol=1e-9, atol=1e-12)
    for backend in ("xla", "python"):
        got = s2s.jit(s2s.jacrev(lambda x: singular_mvn(x, mean, cov)[0]), backend=backend)(on_support[0])
        np.testing.assert_allclose(got, jax.jacrev(lambda x: jax_singular_mvn(x, mean, cov)[0])(on_support[0]),
                                   rtol=1e-9, atol=1e-12)


def test_batched_over_leading_dimensions():
    x = np.random.default_rng(9).uniform(0.01, 0.99, (6, 5))
    for backend in ("xla", "python"):
        got = s2s.jit(s2s.vmap(lambda v: stats.beta.logpdf(v, 2.0, 3.0) + stats.t.logcdf(v, 4.0)),
                      backend=backend)(x)
        np.testing.assert_allclose(got, stats.beta.logpdf(x, 2.0, 3.0) + stats.t.logcdf(x, 4.0), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Bad inputs


def mismatched_dirichlet(x):
    return stats.dirichlet.logpdf(x, np.ones(4))


def beta_cdf_in_a(a):
    return stats.beta.cdf(0.3, a, 2.0)


def test_bad_inputs_say_what_to_write_instead():
    with pytest.raises(ShapeError, match=r"(?s)dirichlet.*K - 1 components"):
        s2s.jit(mismatched_dirichlet)(np.full(2, 0.5))
    with pytest.raises(UnsupportedFunctionError, match="differentiate with respect to x only"):
        s2s.grad(beta_cdf_in_a)(1.5)
