"""s2s.autograd.test_util: autograd's curried check_grads (argnum, modes, order), its
failures on wrong derivatives, and combo_check, beside autograd's own checks of the same
functions."""
import numpy as np
import pytest

import s2s
from s2s.autograd.test_util import check_grads, check_jvp, check_vjp, combo_check
from tests.autograd.twins import autograd, autograd_twin

X = np.array([0.3, -1.2, 0.8])
Y = np.array([2.0, 0.5, -1.0])


def weighted(x, y, scale=1.0):
    return scale * np.sin(x) * y ** 2 + np.exp(x * y)


def tree_loss(params, x):
    return np.sum(np.tanh(x @ params["w"]) * params["b"][0])


PARAMS = {"w": np.array([[0.5, -0.3], [0.2, 0.1], [-0.4, 0.9]]), "b": [np.array([1.5, -2.0])]}


@pytest.mark.parametrize("argnum", [0, 1, (0, 1)])
@pytest.mark.parametrize("modes", [["fwd"], ["rev"], ["fwd", "rev"]])
def test_check_grads_passes_where_autograds_passes(argnum, modes):
    autograd.test_util.check_grads(autograd_twin(weighted), argnum, modes, order=2)(X, Y, scale=2.0)
    check_grads(weighted, argnum, modes, order=2)(X, Y, scale=2.0)


def test_check_grads_defaults_and_trees():
    """modes=["fwd", "rev"] and order=2 by default; a tree argument is perturbed leaf by leaf."""
    check_grads(weighted)(X, Y)
    check_grads(tree_loss, order=3)(PARAMS, X)


def wrong_derivative(x):
    """sin(x) whose derivative is stopped where x is large: s2s's derivative is wrong there."""
    return np.where(x > 0, np.sin(x), np.sin(s2s.stop_gradient(x)))


def second_order_wrong(x):
    """Right first derivative, wrong second: x ** 3 with the derivative's own x stopped."""
    frozen = s2s.stop_gradient(x)
    return x ** 3 + (x - frozen) * 0.0 + (x - frozen) ** 2 * frozen


@pytest.mark.parametrize("modes", [["fwd"], ["rev"]])
def test_a_wrong_derivative_fails_in_each_mode(modes):
    with pytest.raises(AssertionError):
        check_grads(wrong_derivative, modes=modes, order=1)(X)


@pytest.mark.parametrize("modes", [["fwd"], ["rev"]])
def test_a_wrong_second_derivative_fails_only_at_order_two(modes):
    check_grads(second_order_wrong, modes=modes, order=1)(X)
    with pytest.raises(AssertionError):
        check_grads(second_order_wrong, modes=modes, order=2)(X)


def test_check_jvp_and_check_vjp_take_a_function_of_one_value():
    check_jvp(np.tanh, X)
    check_vjp(lambda x: np.cumsum(x ** 2), X)
    with pytest.raises(AssertionError):
        check_vjp(wrong_derivative, X)


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="'fwd' and 'rev'"):
        check_grads(weighted, modes=["bwd"])(X, Y)


def reduced(x, axis, keepdims):
    return np.sum(np.sin(x) ** 2, axis=axis, keepdims=keepdims)


def test_combo_check_checks_every_combination():
    arrays = [np.ones((2, 3)) * 0.5, np.arange(6.0).reshape(3, 2)]
    seen = []

    def recorded(x, axis, keepdims):
        seen.append((x.shape, axis, keepdims))
        return reduced(x, axis, keepdims)
    combo_check(recorded, [0], order=1)(arrays, axis=[0, 1, None], keepdims=[True, False])
    assert {(shape, axis, keepdims) for shape, axis, keepdims in seen} == {
        (a.shape, axis, keepdims) for a in arrays for axis in (0, 1, None) for keepdims in (True, False)}
