"""The inverse error functions (scipy.special.erfinv, erfcinv, ndtri), scipy.special's
normal functions (ndtr, log_ndtr) and the normal's quantiles (scipy.stats.norm.ppf, isf):
SciPy is the oracle for values (eval_jaxpr, the emitted module and XLA, via
check_function), jax.scipy for derivatives (jvp, vjp, second order). The tails are held to
SciPy's digits: erfcinv(1e-300) is 26.2 where erfinv(1 - 1e-300) cannot be formed."""
from __future__ import annotations

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import jax.scipy.special
import jax.scipy.stats
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special as sp
from scipy import stats

import s2s
from s2s.errors import UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function
from tests.numpy_api.test_scipy_special import finite_floats

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)
DERIVATIVE_SETTINGS = settings(max_examples=4, deadline=None)


def inverse_error_functions(x, y):
    return sp.erfinv(x), sp.erfcinv(y), sp.ndtri(0.5 * y)


def normal_special_functions(x):
    return sp.ndtr(x), sp.log_ndtr(x)


def quantiles(q, loc, scale):
    return stats.norm.ppf(q, loc, scale), stats.norm.isf(q, loc=loc, scale=scale)


def jax_inverse_error_functions(x, y):
    """jax.scipy has no erfcinv: erfcinv(y) = -ndtri(y / 2) / sqrt(2)."""
    return (jax.scipy.special.erfinv(x), -jax.scipy.special.ndtri(0.5 * y) / jnp.sqrt(2.0),
            jax.scipy.special.ndtri(0.5 * y))


def jax_quantiles(q, loc, scale):
    return jax.scipy.stats.norm.ppf(q, loc, scale), jax.scipy.stats.norm.isf(q, loc, scale)


# Across the branch points (|x| = 1/2, y = 1/2 and 3/2), into the tails, and the ends.
# Drawn values stay off 1e-300 and below: erfinv(x) ~ 0.89 x and ndtri(y / 2) read a
# subnormal there, which XLA on CPU reads as 0, as README says.
ERFINV_POINTS = st.one_of(finite_floats(-1, 1).filter(lambda v: v == 0 or abs(v) > 1e-300), st.sampled_from(
    [0.0, 0.5, -0.5, 0.50000001, 1 - 1e-16, -1 + 2 ** -53, 1e-300, 1.0, -1.0, 1.5, np.nan]))
ERFCINV_POINTS = st.one_of(finite_floats(0, 2).filter(lambda v: v == 0 or v > 1e-300), st.sampled_from(
    [1e-300, 1e-100, 1e-20, 0.5, 0.49999999, 1.0, 1.5, 2 - 1e-15, 0.0, 2.0, -0.5, 2.5, np.nan]))


@SETTINGS
@given(hnp.arrays(np.float64, (6,), elements=ERFINV_POINTS), hnp.arrays(np.float64, (6,), elements=ERFCINV_POINTS))
def test_inverse_error_functions_match_scipy(x, y):
    check_function(inverse_error_functions, x, y, rtol=2e-15, atol=0)


@pytest.mark.parametrize("backend", ["xla", "python"])
def test_far_tails_keep_every_digit(backend):
    y = np.array([1e-300, 1e-200, 3e-50, 1e-17, 2 - 1e-15])
    x = np.array([1e-300, 1e-20, 1 - 1e-16, -(1 - 2 ** -53), 0.9999999])
    run = s2s.jit(inverse_error_functions, backend=backend)
    got_erfinv, got_erfcinv, got_ndtri = run(x, y)
    np.testing.assert_allclose(got_erfinv, sp.erfinv(x), rtol=2e-15)
    np.testing.assert_allclose(got_erfcinv, sp.erfcinv(y), rtol=2e-15)
    np.testing.assert_allclose(got_ndtri, sp.ndtri(0.5 * y), rtol=2e-15)
    assert got_erfcinv[0] == pytest.approx(26.209469960516124, rel=1e-15)


def test_float32_stays_float32_as_scipy():
    x = np.array([-0.7, 0.1, 0.9], np.float32)
    for fn in (sp.erfinv, sp.erfcinv, sp.ndtri, sp.ndtr, sp.log_ndtr):
        got = s2s.jit(lambda v: fn(v))(x)
        assert np.asarray(got).dtype == np.float32 == fn(x).dtype
        np.testing.assert_allclose(got, fn(x), rtol=2e-6)


@SETTINGS
@given(hnp.arrays(np.float64, (5,), elements=st.one_of(finite_floats(-40, 40), st.sampled_from([-1e3, -25.0, np.inf]))))
def test_ndtr_and_log_ndtr_match_scipy(x):
    check_function(normal_special_functions, x, rtol=1e-12, atol=np.finfo(np.float64).tiny)


@SETTINGS
@given(hnp.arrays(np.float64, (4,), elements=st.one_of(finite_floats(0, 1), st.sampled_from([1e-300, 0.0, 1.0, 1.5]))),
       finite_floats(-3, 3), st.one_of(finite_floats(0.1, 10), st.sampled_from([0.0, -1.0])))
def test_norm_quantiles_match_scipy(q, loc, scale):
    """Staged loc and scale (scale <= 0 is nan); q = 1e-300 is where isf keeps its digits.
    Where loc + scale * z cancels (loc 0.34, result -0.002) the sum is held to a few ulps
    of loc, not to its own digits: one rounding of loc is already more than 1e-14 of it."""
    atol = 4e-16 * (abs(loc) + 1)
    check_function(quantiles, q, loc, scale, rtol=1e-14, atol=atol)
    check_function(quantiles, q, np.array([[loc], [0.5]]), np.array([scale, 1.0, 2.0, 3.0]), rtol=1e-14, atol=atol)


def frozen_quantiles(q):
    return stats.norm(1.0, 2.0).ppf(q) + stats.norm().isf(q)


def test_frozen_norm_quantiles():
    check_function(frozen_quantiles, np.array([0.01, 0.5, 0.7]), rtol=1e-14)


# ---------------------------------------------------------------------------------------
# Derivatives against jax.scipy


@DERIVATIVE_SETTINGS
@given(hnp.arrays(np.float64, (5,), elements=finite_floats(-0.999, 0.999)),
       hnp.arrays(np.float64, (5,), elements=finite_floats(1e-3, 1.999)))
def test_inverse_error_function_derivatives_match_jax(x, y):
    check_derivatives(inverse_error_functions, jax_inverse_error_functions, x, y, rtol=1e-10, atol=1e-12)


def jax_normal_special_functions(x):
    return jax.scipy.special.ndtr(x), jax.scipy.special.log_ndtr(x)


def test_ndtr_and_log_ndtr_derivatives_match_jax():
    x = np.array([-30.0, -19.0, -3.0, 0.0, 0.4, 6.0])
    check_derivatives(normal_special_functions, jax_normal_special_functions, x, rtol=1e-9, atol=1e-12)


@DERIVATIVE_SETTINGS
@given(hnp.arrays(np.float64, (4,), elements=finite_floats(0.01, 0.99)), finite_floats(-2, 2), finite_floats(0.3, 4))
def test_quantile_derivatives_match_jax(q, loc, scale):
    check_derivatives(quantiles, jax_quantiles, q, np.full(4, loc), np.full(4, scale), rtol=1e-9, atol=1e-12)


def inverse_error_sum(x):
    return np.sum(sp.erfinv(x) * sp.erfcinv(1 - 0.9 * x))


def jax_inverse_error_sum(x):
    return jnp.sum(jax.scipy.special.erfinv(x) * -jax.scipy.special.ndtri(0.5 * (1 - 0.9 * x)) / jnp.sqrt(2.0))


def test_second_order_matches_jax_on_both_backends():
    x = np.array([-0.95, -0.3, 1e-8, 0.6, 0.99])
    want = jax.hessian(jax_inverse_error_sum)(x)
    hessian = s2s.hessian(inverse_error_sum)
    for run in (hessian, s2s.jit(hessian), s2s.jit(hessian, backend="python")):
        np.testing.assert_allclose(run(x), want, rtol=1e-9, atol=1e-12)


def test_derivative_in_the_far_tail_is_exact():
    """d erfcinv(y)/dy = -sqrt(pi)/2 e^(erfcinv(y)^2), finite at y = 1e-300 (-1.2e298)."""
    y = np.array([1e-300, 1e-30, 0.3])
    want = -np.sqrt(np.pi) / 2 * np.exp(sp.erfcinv(y) ** 2)
    for run in (s2s.grad(lambda v: np.sum(sp.erfcinv(v))), s2s.jit(s2s.grad(lambda v: np.sum(sp.erfcinv(v))))):
        np.testing.assert_allclose(run(y), want, rtol=1e-12)


def test_batched_over_leading_dimensions():
    x = np.random.default_rng(4).uniform(-1, 1, (6, 5))
    for backend in ("xla", "python"):
        got = s2s.jit(s2s.vmap(inverse_error_functions), backend=backend)(x, x + 1)
        for g, e in zip(got, inverse_error_functions(x, x + 1)):
            np.testing.assert_allclose(g, e, rtol=2e-15)


def test_emitted_python_calls_the_runtime():
    source = s2s.emit_python(inverse_error_functions, np.zeros(2), np.ones(2))
    assert "rt.erfinv(" in source and "rt.erfcinv(" in source and "import scipy" not in source


# ---------------------------------------------------------------------------------------
# Bad inputs


def complex_erfinv(x):
    return sp.erfinv(x * 1j)


def erfinv_into(x):
    return sp.erfinv(x, out=x)


def test_bad_inputs_say_what_to_write_instead():
    with pytest.raises(UnsupportedFunctionError, match=r"(?s)erfinv of complex values.*x\.real"):
        s2s.jit(complex_erfinv)(np.ones(2))
    with pytest.raises(UnsupportedFunctionError, match="assign the result instead"):
        s2s.jit(erfinv_into)(np.ones(2))
