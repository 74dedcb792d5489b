"""wrap_util: autograd's n-ary convention for operators written on s2s.autograd, on NumPy
values and inside staged functions, and the user's argument names in emitted modules."""
import numpy as np
import pytest

import s2s
from s2s.autograd import elementwise_grad, make_vjp, tensor_jacobian_product
from s2s.autograd.wrap_util import call_user_code, unary_to_nary
from tests.autograd.twins import assert_trees_close, autograd

X = np.array([0.3, -1.2, 0.8])


@unary_to_nary
def squared_gradient_norm(fun, x):
    """A user's own operator, written as autograd's are: on a function of one value."""
    vjp, _ = make_vjp(fun)(x)
    return np.sum(np.sin(vjp(1.0)) ** 2)


@autograd.wrap_util.unary_to_nary
def autograd_squared_gradient_norm(fun, x):
    vjp, _ = autograd.make_vjp(fun)(x)
    return autograd.numpy.sum(autograd.numpy.sin(vjp(1.0)) ** 2)


def weighted(x, y, scale=1.0):
    return scale * np.sum(np.sin(x) * y ** 2)


def autograd_weighted(x, y, scale=1.0):
    return scale * autograd.numpy.sum(autograd.numpy.sin(x) * y ** 2)


@pytest.mark.parametrize("argnum", [0, 1])
def test_a_users_operator_takes_argnum_and_keywords(argnum):
    y = np.array([2.0, 0.5, -1.0])
    got = squared_gradient_norm(weighted, argnum)(X, y, scale=3.0)
    expected = autograd_squared_gradient_norm(autograd_weighted, argnum)(X, y, scale=3.0)
    assert_trees_close(got, expected)


def norm_of_the_operator(x):
    return squared_gradient_norm(weighted, 1)(x, x)


def test_a_users_operator_inside_a_staged_function():
    """The function of one value is the user's function with the others held: held at
    staged values here (grad and jit stage `norm_of_the_operator`)."""
    expected = autograd.grad(lambda x: autograd_squared_gradient_norm(autograd_weighted, 1)(x, x))(X)
    assert_trees_close(s2s.autograd.grad(norm_of_the_operator)(X), expected)
    assert_trees_close(s2s.jit(norm_of_the_operator)(X), norm_of_the_operator(X))


def test_argnum_is_checked_when_the_operator_is_applied():
    with pytest.raises(TypeError, match="argnums='x'"):
        squared_gradient_norm(weighted, "x")


def test_call_user_code_runs_python_outside_staging_and_stages_inside():
    """Outside a staging the user's function runs as Python (a print runs); inside, s2s
    stages it (its NumPy calls reach staged arrays)."""
    printed = []

    def noisy(x):
        printed.append(type(x))
        return np.sin(x)
    assert_trees_close(call_user_code(noisy, (X,), {}), np.sin(X))
    assert printed == [np.ndarray]
    assert_trees_close(s2s.jit(lambda x: call_user_code(np.cos, (x,), {}))(X), np.cos(X))


def scaled_tanh(weights, inputs):
    return np.tanh(inputs * weights)


def test_emitted_modules_name_the_users_arguments():
    """The functions operators derive take the user's function's signature: the emitted
    derivative reads `weights` and `inputs`, the tensor product's also `tensor`."""
    source = s2s.emit_python(elementwise_grad(scaled_tanh), X, X)
    assert "(weights, inputs):" in source
    source = s2s.emit_python(tensor_jacobian_product(scaled_tanh), X, X, X)
    assert "(weights, inputs, tensor):" in source
