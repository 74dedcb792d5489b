"""scipy.special's Bessel functions (and np.i0) in model code: SciPy is the oracle for values
and dtypes (eval_jaxpr, the emitted module, XLA and the Python backend), jax.scipy.special
for the derivatives of i0, i1, i0e, i1e (first and second order); J, Y and I of other
orders, which jax lacks, are held to central differences and to Bessel's differential
equations, whose second derivatives s2s computes by the same recurrences."""
from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import jax
import jax.scipy.special
import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from tests.numpy_api.test_scipy_special import finite_floats
from s2s.errors import UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


SETTINGS = settings(max_examples=10, deadline=None)
DERIVATIVE_SETTINGS = settings(max_examples=4, deadline=None)
SIZE = 6   # one shape: XLA compiles each function once per test session


# Arguments from every method's range: tiny (series), moderate (Miller's recurrence), large
# (Hankel's expansion), negative, and the region boundaries themselves. Not below 1e-12:
# there SciPy's iv of higher orders underflows to 0 long before the value does
# (`test_tiny_arguments_keep_the_leading_term` covers that range).
ARGUMENTS = st.one_of(finite_floats(-40, 40), finite_floats(-700, 700), finite_floats(1e-12, 1e-3),
                      st.sampled_from([0.0, 2.0, 25.0, 30.0, -25.0, 1e3]))
ARGUMENTS = ARGUMENTS.filter(lambda v: v == 0 or abs(v) >= 1e-12)


def arguments(elements=ARGUMENTS, dtype=np.float64):
    return hnp.arrays(dtype, SIZE, elements=elements)


# Model code, as a user writes it. J and Y: fixed orders, integer orders of either sign,
# and real orders of J (at |x|: SciPy's is nan at x < 0 for those, and so is s2s's).
def bessel_j_and_y(x):
    return (sp.j0(x), sp.j1(x), sp.y0(x), sp.y1(x), sp.jn(4, x), sp.jv(-5, x), sp.yn(3, x),
            sp.yn(-2, x), sp.jv(np.array([0.0, 1, 2, 7, 30, -1]), x),
            sp.jv(np.array([0.5, 1.25, 2.7, 13.3, 49.9, 120.25]), np.abs(x)), sp.jv(2.5, x))


def bessel_i(x):
    return (sp.i0(x), sp.i1(x), sp.i0e(x), sp.i1e(x), np.i0(x), sp.iv(2.5, np.abs(x)),
            sp.ive(np.array([0.5, 1, 3.25, 13.3, 49.9, 2]), np.abs(x)), sp.iv(-3, x), sp.ive(7, x))


@SETTINGS
@given(arguments())
def test_j_and_y_match_scipy_on_every_backend(x):
    # SciPy's own error reaches 1e-11 relative near the zeros at large x, and 6e-13 for
    # J_49.9(594.5) (checked with mpmath: s2s's are 1e-14 and 2e-16), so the absolute
    # tolerance is at that level.
    check_function(bessel_j_and_y, x, rtol=1e-13, atol=3e-14)


@SETTINGS
@given(arguments())
def test_i_matches_scipy_on_every_backend(x):
    # SciPy's own error reaches 2e-13 near overflow (x ~ 710) and it underflows to 0 from
    # 1e-300 on, where s2s keeps the (subnormal) value (both checked with mpmath).
    check_function(bessel_i, x, rtol=3e-13, atol=1e-300)


def single_precision(x):
    return (sp.j0(x), sp.yn(2.0, np.abs(x) + 1), sp.jv(3, x), sp.jv(2.5, np.abs(x)), sp.i1e(x),
            sp.iv(1.5, np.abs(x)), np.i0(x / 8))


@SETTINGS
@given(arguments(finite_floats(-80, 80), np.float32))
def test_float32_gives_float32_close_to_scipy(x):
    for got, want in zip(s2s.jit(single_precision)(x), single_precision(x)):
        assert np.asarray(got).dtype == want.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # SciPy's yn has a loop for a Python int order, in float64.
    assert s2s.jit(sp.yn, backend="python")(2, x).dtype == sp.yn(2, x).dtype == np.float64


def test_python_backend_and_emitted_code_call_the_runtime():
    x = np.array([0.5, 3.0, 12.0, 40.0, 2.0, 300.0])
    source = s2s.emit_python(bessel_i, x) + s2s.emit_python(bessel_j_and_y, x)
    assert "import scipy" not in source and "rt.jv(" in source and "rt.yn(" in source
    assert "rt.iv(" in source and "rt.ive(" in source
    for got, want in zip(s2s.jit(bessel_j_and_y, backend="python")(x), bessel_j_and_y(x)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_integer_arguments_give_float64_and_limits_match_scipy():
    ints = np.arange(-3, 4)
    for fn in (sp.j0, sp.y1, sp.i0e, np.i0):
        got = s2s.jit(fn, backend="python")(ints)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, fn(ints), rtol=1e-14, equal_nan=True)
    edges = np.array([0.0, -0.0, np.nan, np.inf, -np.inf])
    for fn in (sp.j0, sp.j1, sp.y0, sp.y1, lambda x: sp.yn(-1, x), sp.i0, sp.i1e, lambda x: sp.iv(2.5, x)):
        np.testing.assert_array_equal(s2s.jit(fn, backend="python")(edges), fn(edges))


TINY_ORDERS = (2.0, 3.25, 7.0)


def near_zero(x):
    return (*[sp.ive(order, x) for order in TINY_ORDERS], *[sp.jv(order, x) for order in TINY_ORDERS],
            sp.y0(x), sp.y1(x))


def test_tiny_arguments_keep_the_leading_term():
    """Near 0, C_v(x) = (x/2)^v / Gamma(v + 1) (1 + O(x^2)) for J and I; Y_0 is
    (2/pi)(log(x/2) + Euler's gamma), Y_1 is -2/(pi x)."""
    x = np.array([1e-83, 3e-40, 1e-20])
    leading = [(x / 2) ** order / math.gamma(order + 1) for order in TINY_ORDERS]
    want = [*leading, *leading, 2 / np.pi * (np.log(x / 2) + np.euler_gamma), -2 / (np.pi * x)]
    for got, expected in zip(s2s.jit(near_zero)(x), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-14)


def test_orders_computed_in_the_function_are_batched_and_non_integers_give_nan():
    x = np.linspace(0.5, 40.0, 5)
    orders = np.array([0.0, 1.0, 6.0, -2.0, 2.5, -1.5])
    got = s2s.vmap(lambda n: sp.jv(n, x) + sp.iv(n, x) + sp.yn(np.floor(n), x))(orders)
    want = np.stack([sp.jv(n, x) + sp.iv(n, x) + sp.yn(np.floor(n), x) for n in orders[:5]])
    np.testing.assert_allclose(got[:5], want, rtol=1e-13, atol=1e-14)
    assert np.all(np.isnan(got[5]))   # J and I of order -1.5 need Y and K: never a guess
    assert np.all(np.isnan(s2s.vmap(lambda n: sp.yn(n, x))(orders[4:])))


def bessel_grid(x):
    """Orders down a column against arguments along a row: a (2, n) grid."""
    return sp.jv(np.array([[0.0], [3.0]]), x) + sp.ive(np.array([[0.5], [2.0]]), np.abs(x))


def test_orders_broadcast_against_arguments_batched_and_differentiated():
    x = np.array([[0.4, 3.0, 27.0], [-1.5, 9.0, 2.0]])
    check_function(bessel_grid, x[0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(s2s.vmap(bessel_grid)(x), np.stack([bessel_grid(row) for row in x]),
                               rtol=1e-13, atol=1e-15)
    # The cotangent of x sums over the orders it was broadcast against.
    got = s2s.grad(lambda x: np.sum(sp.jv(np.array([[0.0], [3.0]]), x)))(x[0])
    np.testing.assert_allclose(got, -sp.j1(x[0]) + (sp.jv(2, x[0]) - sp.jv(4, x[0])) / 2, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Derivatives


def i_functions(x):
    return sp.i0(x) + 2 * sp.i1(x) + 3 * sp.i0e(x) + 4 * sp.i1e(x) + np.i0(x / 2)


@jax.jit
def jax_i_functions(x):
    s = jax.scipy.special
    return s.i0(x) + 2 * s.i1(x) + 3 * s.i0e(x) + 4 * s.i1e(x) + s.i0(x / 2)


jax_i_second_derivatives = jax.jit(jax.vmap(jax.hessian(jax_i_functions)))


# Not near 0: jax's second derivative of i1e divides by x there (its i1e' has i1e(x)/x).
@DERIVATIVE_SETTINGS
@given(arguments(finite_floats(-30, 30).filter(lambda v: abs(v) > 1e-3)))
def test_i_derivatives_match_jax_first_and_second_order(x):
    check_derivatives(i_functions, jax_i_functions, x, rtol=1e-10, atol=1e-10)
    second = s2s.vmap(s2s.hessian(i_functions))(x)
    want = jax_i_second_derivatives(x)
    np.testing.assert_allclose(second, want, rtol=1e-9, atol=1e-9)


def test_i_derivatives_at_zero_are_those_of_the_smooth_functions():
    """I_0 and I_1 are smooth at 0: I_0' = I_1 = 0 and I_0'' = 1/2 there (jax gives 1 and 3/2,
    from d|x|/dx = 1 in its e^|x| i0e(x)). The e^-|x| of i0e and i1e has a kink at 0:
    the derivative there is the mean of both sides (sign(0) = 0), as jax's."""
    zero = np.zeros(1)
    for fn, first, second in ((sp.i0, 0.0, 0.5), (sp.i1, 0.5, 0.0), (sp.i0e, 0.0, None), (sp.i1e, 0.5, None)):
        np.testing.assert_allclose(s2s.vmap(s2s.grad(fn))(zero), [first], atol=1e-15)
        if second is not None:
            np.testing.assert_allclose(s2s.vmap(s2s.hessian(fn))(zero), [second], atol=1e-15)
        if fn in (sp.i0e, sp.i1e):
            np.testing.assert_allclose(s2s.vmap(s2s.grad(fn))(zero), jax.vmap(jax.grad(getattr(
                jax.scipy.special, fn.__name__)))(zero), atol=1e-15)


FUNCTIONS_OF_ORDER = {
    "J": lambda n: lambda x: sp.jv(n, x),
    "Y": lambda n: lambda x: sp.yn(n, x),
    "I": lambda n: lambda x: sp.iv(n, x),
}


@pytest.mark.parametrize("kind, order", [("J", 0), ("J", 1), ("J", 3), ("J", -2), ("J", 0.5), ("J", 2.5),
                                         ("J", 31.75), ("Y", 0), ("Y", 1),
                                         ("Y", 4), ("Y", -3), ("I", 0), ("I", 1), ("I", 2.5),
                                         ("I", 0.5), ("I", 17.25)])
def test_second_derivatives_solve_bessels_equation(kind, order):
    """x^2 y'' + x y' + (x^2 - n^2) y = 0 for J_n and Y_n, and with -(x^2 + v^2) for I_v; and
    the first derivative against central differences."""
    fn = FUNCTIONS_OF_ORDER[kind](order)
    x = np.array([0.3, 1.7, 2.0, 5.5, 18.0, 26.0, 60.0, 400.0])
    if kind == "I":
        x = x[:-1]
    y, first = fn(x), s2s.vmap(s2s.grad(fn))(x)
    second = s2s.vmap(s2s.hessian(fn))(x)
    sign = -1 if kind == "I" else 1
    residual = x * x * second + x * first + (sign * x * x - order * order) * y
    scale = x * x * np.abs(second) + x * np.abs(first) + (x * x + order * order) * np.abs(y)
    np.testing.assert_array_less(np.abs(residual), 1e-12 * scale)
    h = 1e-6 * np.maximum(1, x)
    np.testing.assert_allclose(first, (fn(x + h) - fn(x - h)) / (2 * h), rtol=1e-7, atol=1e-9)


def test_ive_derivative_is_that_of_iv_times_exp():
    x = np.array([-7.0, -0.4, 0.4, 3.0, 35.0])
    got = s2s.vmap(s2s.grad(lambda x: sp.ive(3, x)))(x)
    want = s2s.vmap(s2s.grad(lambda x: sp.iv(3, x) * np.exp(-np.abs(x))))(x)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, tangent = s2s.jvp(lambda x: sp.ive(2.5, x), (np.array([4.0]),), (np.array([1.0]),))
    want = sp.ive(2.5, 4.0) * (sp.iv(3.5, 4.0) / sp.iv(2.5, 4.0) + 2.5 / 4.0 - 1)
    np.testing.assert_allclose(tangent, [want], rtol=1e-12)


def test_jit_of_grad_matches_the_recurrence():
    x = np.array([0.7, 9.0, 31.0])
    got = s2s.jit(s2s.grad(lambda x: np.sum(sp.j1(x) + sp.y0(x))))(x)
    np.testing.assert_allclose(got, (sp.j0(x) - sp.jv(2, x)) / 2 - sp.y1(x), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# What is refused


@pytest.mark.parametrize("fn, message", [
    (lambda x: sp.jv(-2.5, x), "negative non-integer order"),
    (lambda x: sp.jn(np.array([1.0, -0.5]), x), "negative non-integer order"),
    (lambda x: sp.yn(1.5, x), "non-integer order"),
    (lambda x: sp.yn(np.array([1.0, 0.5]), x), "non-integer order"),
    (lambda x: sp.iv(-1.5, x), "negative non-integer order"),
    (lambda x: sp.ive(np.array([-0.5]), x), "negative non-integer order"),
    (lambda x: sp.j0(x + 1j), "complex"),
])
def test_unsupported_orders_and_complex_arguments_are_refused(fn, message):
    with pytest.raises(UnsupportedFunctionError, match=message):
        s2s.jit(fn)(np.array([1.0, 2.0]))


@pytest.mark.parametrize("fn", [lambda n: sp.jv(n, 2.0), lambda n: sp.yn(n, 2.0), lambda n: sp.ive(n, 2.0)])
def test_derivative_in_the_order_is_refused(fn):
    with pytest.raises(UnsupportedFunctionError, match="with respect to its order"):
        s2s.grad(fn)(1.0)
