"""misc.fixed_points.fixed_point against autograd's: the same iterates (so the same values
and derivatives, to rounding, first and second order), derivatives by the implicit
function theorem against central differences, jit's two backends, and a program calling
autograd's own `fixed_point` (a primitive of autograd's own) staged as s2s's."""
import numpy as np
import pytest

import s2s
from s2s.autograd import grad
from s2s.autograd.misc.fixed_points import fixed_point

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
ag_fixed_points = pytest.importorskip("autograd.misc.fixed_points")


def gradient_descent_sqrt_step(a):
    return lambda x: x - 0.05 * (x ** 2 - a)


def newton_sqrt_step(a):
    return lambda x: 0.5 * (x + a / x)


def distance(x, y):
    return np.abs(x - y)


def sqrt(a, guess=10.0):
    """autograd's fixed_points example: slow steps, a loose tolerance, so the fixed point
    and its derivatives are visibly autograd's iterates rather than sqrt's."""
    return fixed_point(gradient_descent_sqrt_step, a, guess, distance, 1e-4)


def ag_sqrt(a, guess=10.0):
    return ag_fixed_points.fixed_point(gradient_descent_sqrt_step, a, guess, distance, 1e-4)


def precise_sqrt(a):
    return fixed_point(newton_sqrt_step, a, 1.0, distance, 1e-14)


def test_values_and_two_derivatives_are_autograds():
    a = 2.0
    assert sqrt(a) == ag_sqrt(a)
    np.testing.assert_allclose(grad(sqrt)(a), autograd.grad(ag_sqrt)(a), rtol=1e-13)
    np.testing.assert_allclose(grad(grad(sqrt))(a), autograd.grad(autograd.grad(ag_sqrt))(a), rtol=1e-12)


def test_autograds_fixed_point_stages_as_s2s_s():
    """A program written for autograd runs unchanged under s2s.autograd's grad."""
    a = 3.0
    np.testing.assert_allclose(grad(ag_sqrt)(a), autograd.grad(ag_sqrt)(a), rtol=1e-13)
    np.testing.assert_allclose(grad(grad(ag_sqrt))(a), autograd.grad(autograd.grad(ag_sqrt))(a), rtol=1e-12)


def central_difference(f, x, eps=1e-5):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def test_derivatives_to_second_order_match_finite_differences_and_the_true_sqrts():
    a = 2.0
    first, second = grad(precise_sqrt)(a), grad(grad(precise_sqrt))(a)
    np.testing.assert_allclose(first, central_difference(precise_sqrt, a), rtol=1e-9)
    np.testing.assert_allclose(second, central_difference(grad(precise_sqrt), a), rtol=1e-8)
    np.testing.assert_allclose([first, second], [0.5 * a ** -0.5, -0.25 * a ** -1.5], rtol=1e-12)


def test_the_initial_guess_has_no_gradient():
    assert grad(sqrt, argnum=1)(2.0, 10.0) == autograd.grad(ag_sqrt, argnum=1)(2.0, 10.0) == 0.0


# --- a vector fixed point of a parameter tree: x = tanh(W x + b) ---------------------------

RNG = np.random.default_rng(0)
W = 0.3 * RNG.standard_normal((4, 4)) / 2.0
B = RNG.standard_normal(4)
TARGET = RNG.standard_normal(4)


def layer_step(params):
    weights, bias = params
    return lambda x: np.tanh(weights @ x + bias)


def max_distance(x, y):
    return np.max(np.abs(x - y))


def equilibrium_loss(params):
    x = fixed_point(layer_step, params, np.zeros(4), max_distance, 1e-13)
    return np.sum((x - TARGET) ** 2)


def ag_layer_step(params):
    weights, bias = params
    return lambda x: anp.tanh(anp.dot(weights, x) + bias)


def ag_equilibrium_loss(params):
    x = ag_fixed_points.fixed_point(ag_layer_step, params, anp.zeros(4), max_distance, 1e-13)
    return anp.sum((x - TARGET) ** 2)


def test_a_parameter_tree_matches_autograd_and_finite_differences():
    params = (W, B)
    ours = grad(equilibrium_loss)(params)
    theirs = autograd.grad(ag_equilibrium_loss)(params)
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    direction = (RNG.standard_normal((4, 4)), RNG.standard_normal(4))
    along = lambda t: equilibrium_loss((W + t * direction[0], B + t * direction[1]))   # noqa: E731
    np.testing.assert_allclose(sum(np.sum(g * d) for g, d in zip(ours, direction)),
                               central_difference(along, 0.0, 1e-6), rtol=1e-7)


def test_jit_backends_and_the_emitted_module_agree():
    params = (W, B)
    expected = grad(equilibrium_loss)(params)
    for backend in ("python", "xla"):
        got = s2s.jit(grad(equilibrium_loss), backend=backend)(params)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15, err_msg=backend)
        np.testing.assert_allclose(s2s.jit(grad(grad(sqrt)), backend=backend)(2.0), grad(grad(sqrt))(2.0),
                                   rtol=1e-12, err_msg=backend)
    source = s2s.emit_python(sqrt, 2.0)
    assert "while " in source and "0.0001" in source
