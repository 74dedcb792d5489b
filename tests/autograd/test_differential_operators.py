"""s2s.autograd's differential operators against autograd's, on the same NumPy source
(`twins.autograd_twin`): values, shapes and containers, argnum conventions, keyword
arguments, operators called inside staged functions, and the errors a user meets."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.autograd import (checkpoint, deriv, elementwise_grad, grad, grad_and_aux, grad_named, hessian,
                          hessian_tensor_product, hessian_vector_product, holomorphic_grad, jacobian,
                          make_ggnvp, make_hvp, make_jvp, make_vjp, multigrad_dict, tensor_jacobian_product,
                          value_and_grad, vector_jacobian_product)
from tests.autograd.twins import assert_trees_close, autograd, autograd_twin

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 2))
X = RNG.standard_normal((4, 3))
B = RNG.standard_normal(2)
V = RNG.standard_normal(3)


def layer(W, x, b):
    return np.tanh(x @ W + b)


def layer_loss(W, x, b):
    return np.sum(layer(W, x, b) ** 2) + 0.1 * np.sum(W ** 2)


def scaled_loss(W, x, b, scale=1.0):
    return scale * layer_loss(W, x, b)


def tanh(x):
    return (1.0 - np.exp(-2 * x)) / (1.0 + np.exp(-2 * x))


def cubic_sum(v):
    return np.sum(v ** 3 * np.sin(v))


def softplus_map(v):
    return np.log1p(np.exp(v)) * v[::-1]


def against_autograd(operator_name, fn, *operator_args):
    """The operator of s2s.autograd and autograd's, each applied to `fn` as its library
    runs it."""
    ours = getattr(s2s.autograd, operator_name)(fn, *operator_args)
    theirs = getattr(autograd, operator_name)(autograd_twin(fn), *operator_args)
    return ours, theirs


@pytest.mark.parametrize("argnum", [0, 1, 2, (0, 2), [2, 0]])
@pytest.mark.parametrize("operator", ["grad", "value_and_grad"])
def test_gradients_take_autograd_argnums(operator, argnum):
    """An int gives one gradient, a tuple or a list a tuple of them, in argnum's order."""
    ours, theirs = against_autograd(operator, layer_loss, argnum)
    assert_trees_close(ours(W, X, B), theirs(W, X, B), what=f"{operator} argnum={argnum}")


def test_keyword_arguments_reach_the_function():
    ours, theirs = against_autograd("grad", scaled_loss, 1)
    assert_trees_close(ours(W, X, B, scale=3.0), theirs(W, X, B, scale=3.0))
    ours, theirs = against_autograd("make_vjp", scaled_loss, 0)
    (vjp, value), (their_vjp, their_value) = ours(W, X, B, scale=3.0), theirs(W, X, B, scale=3.0)
    assert_trees_close(value, their_value)
    assert_trees_close(vjp(2.0), their_vjp(2.0))


def test_gradients_of_trees_keep_their_containers():
    def tree_loss(params):
        return np.sum(params["w"] ** 2) * params["pair"][0] + np.sum(np.cos(params["pair"][1][0]))
    params = {"w": W, "pair": (1.5, [V])}
    ours, theirs = grad(tree_loss)(params), autograd.grad(autograd_twin(tree_loss))(params)
    assert_trees_close(ours, theirs)


@pytest.mark.parametrize("argnum", [0, 1, 2])
def test_elementwise_grad_sums_the_jacobians_columns(argnum):
    ours, theirs = against_autograd("elementwise_grad", layer, argnum)
    assert_trees_close(ours(W, X, B), theirs(W, X, B))


def test_elementwise_grad_of_elementwise_grad():
    """autograd's tanh example: derivatives of derivatives of a function of a vector."""
    x = np.linspace(-3, 3, 7)
    ours, theirs = tanh, autograd_twin(tanh)
    for order in range(1, 4):
        ours, theirs = elementwise_grad(ours), autograd.elementwise_grad(theirs)
        assert_trees_close(ours(x), theirs(x), rtol=1e-6, atol=1e-8, what=f"order {order}")


@pytest.mark.parametrize("argnum", [0, 1, 2])
def test_jacobian_is_shaped_output_then_input(argnum):
    ours, theirs = against_autograd("jacobian", layer, argnum)
    got = ours(W, X, B)
    assert got.shape == (4, 2) + np.shape((W, X, B)[argnum])
    assert_trees_close(got, theirs(W, X, B))


def test_jacobian_of_scalars_and_of_a_tuple_of_arguments():
    """A scalar's Jacobian has the other's shape; a tuple argnum, which autograd refuses
    (it takes one array), gives the tuple of each argument's Jacobian, as JAX's jacrev."""
    ours, theirs = against_autograd("jacobian", cubic_sum)
    assert_trees_close(ours(V), theirs(V))
    assert_trees_close(jacobian(np.sin)(0.3), np.cos(0.3))
    with pytest.raises((TypeError, ValueError)):
        autograd.jacobian(autograd_twin(layer), (0, 2))(W, X, B)
    both = jacobian(layer, (0, 2))(W, X, B)
    assert type(both) is tuple
    assert_trees_close(both, (jacobian(layer, 0)(W, X, B), jacobian(layer, 2)(W, X, B)))


@pytest.mark.parametrize("fn, argnum", [(layer_loss, 0), (layer_loss, 2), (layer, 2), (cubic_sum, 0)])
def test_hessian(fn, argnum):
    ours, theirs = against_autograd("hessian", fn, argnum)
    args = (V,) if fn is cubic_sum else (W, X, B)
    assert_trees_close(ours(*args), theirs(*args), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["hessian_tensor_product", "hessian_vector_product"])
@pytest.mark.parametrize("argnum", [0, 2])
def test_hessian_tensor_product_takes_the_tensor_last(name, argnum):
    tensor = RNG.standard_normal(np.shape((W, X, B)[argnum]))
    ours, theirs = against_autograd(name, layer_loss, argnum)
    assert_trees_close(ours(W, X, B, tensor), theirs(W, X, B, tensor), rtol=1e-6, atol=1e-9)
    assert_trees_close(ours(W, X, B, tensor), hessian(layer_loss, argnum)(W, X, B).reshape(
        tensor.size, tensor.size).dot(tensor.ravel()).reshape(tensor.shape), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["tensor_jacobian_product", "vector_jacobian_product"])
@pytest.mark.parametrize("tensor_shape", [(4, 2), (4,), ()])
def test_tensor_jacobian_product_contracts_the_leading_axes(name, tensor_shape):
    """A tensor of the output's shape gives the vjp; one of fewer axes leaves the output's
    trailing axes in front of the argument's."""
    tensor = RNG.standard_normal(tensor_shape)
    ours, theirs = against_autograd(name, layer, 0)
    got = ours(W, X, B, tensor)
    assert got.shape == (4, 2)[len(tensor_shape):] + W.shape
    assert_trees_close(got, theirs(W, X, B, tensor))


@pytest.mark.parametrize("argnum", [0, (0, 2)])
def test_make_vjp_returns_the_vjp_and_the_value(argnum):
    ours, theirs = against_autograd("make_vjp", layer, argnum)
    (vjp, value), (their_vjp, their_value) = ours(W, X, B), theirs(W, X, B)
    assert_trees_close(value, their_value)
    for cotangent in (np.ones((4, 2)), RNG.standard_normal((4, 2))):
        assert_trees_close(vjp(cotangent), their_vjp(cotangent))


def test_make_vjp_of_an_output_that_ignores_the_argument_gives_zeros():
    vjp, value = make_vjp(lambda x, y: np.sin(y), 0)(V, 2.0)
    assert_trees_close(vjp(1.0), np.zeros(3))


@pytest.mark.parametrize("argnum", [0, 2, (0, 2)])
def test_make_jvp_and_deriv(argnum):
    tangent = (RNG.standard_normal(W.shape), RNG.standard_normal(2))
    tangent = tangent if isinstance(argnum, tuple) else tangent[0 if argnum == 0 else 1]
    ours, theirs = against_autograd("make_jvp", layer, argnum)
    assert_trees_close(ours(W, X, B)(tangent), theirs(W, X, B)(tangent))
    ours, theirs = against_autograd("deriv", layer, argnum)
    assert_trees_close(ours(W, X, B), theirs(W, X, B))


def test_deriv_of_a_scalar_function():
    assert_trees_close(deriv(tanh)(0.4), autograd.deriv(autograd_twin(tanh))(0.4))


@pytest.mark.parametrize("argnum", [0, 2])
def test_make_hvp_returns_the_product_and_the_gradient(argnum):
    ours, theirs = against_autograd("make_hvp", layer_loss, argnum)
    (hvp, gradient), (their_hvp, their_gradient) = ours(W, X, B), theirs(W, X, B)
    assert_trees_close(gradient, their_gradient)
    for _ in range(2):
        v = RNG.standard_normal(np.shape((W, X, B)[argnum]))
        assert_trees_close(hvp(v), their_hvp(v), rtol=1e-6, atol=1e-9)


def negative_log_softmax_of_first(outputs):
    return np.log(np.sum(np.exp(outputs))) - outputs[0]


@pytest.mark.parametrize("g", [None, negative_log_softmax_of_first])
def test_make_ggnvp(g):
    def features(w, x):
        return np.tanh(x @ w)
    x = RNG.standard_normal(3)
    w = RNG.standard_normal((3, 4))
    v = RNG.standard_normal((3, 4))
    ours = make_ggnvp(features, f_argnum=0) if g is None else make_ggnvp(features, g)
    theirs = (autograd.make_ggnvp(autograd_twin(features), f_argnum=0) if g is None
              else autograd.make_ggnvp(autograd_twin(features), autograd_twin(g)))
    assert_trees_close(ours(w, x)(v), theirs(w, x)(v), rtol=1e-6, atol=1e-9)


def test_grad_and_aux_returns_the_gradient_and_the_aux():
    def loss_and_prediction(W, x, b):
        prediction = layer(W, x, b)
        return np.sum(prediction ** 2), prediction
    ours, theirs = against_autograd("grad_and_aux", loss_and_prediction, 0)
    assert_trees_close(ours(W, X, B), theirs(W, X, B))


def sine_sum(z):
    return np.sum(np.sin(z) * z)


def test_holomorphic_grad_is_the_complex_derivative():
    z = np.array([1.0 + 2.0j, -0.5 + 0.3j])
    ours, theirs = against_autograd("holomorphic_grad", sine_sum)
    assert_trees_close(ours(z), theirs(z))
    assert_trees_close(ours(z), np.sin(z) + z * np.cos(z))


def test_holomorphic_grad_of_a_real_input_warns_as_autograd():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_trees_close(holomorphic_grad(sine_sum)(V), grad(sine_sum)(V))
    assert [str(w.message) for w in caught] == ["Input to holomorphic_grad is not complex"]


def test_grad_named():
    ours = grad_named(layer_loss, "b")(W, X, B)
    assert_trees_close(ours, autograd.grad_named(autograd_twin(layer_loss), "b")(W, X, B))


def defaults_and_rest(a, b=2.0, *rest, scale, **named):
    return a * b * np.sum(rest[0]) * scale + named["c"] ** 2


def test_multigrad_dict_names_every_parameter():
    """autograd's multigrad_dict needs the funcsigs package (not installed with it, so it
    fails there): its gradients are held to autograd.grad over the same arguments."""
    got = multigrad_dict(defaults_and_rest)(1.5, 3.0, V, scale=0.5, c=4.0)
    assert list(got) == ["a", "b", "rest", "scale", "named"]

    def by_position(a, b, rest, scale, c):
        return defaults_and_rest(a, b, rest, scale=scale, c=c)
    expected = autograd.grad(autograd_twin(by_position), (0, 1, 2, 3, 4))(1.5, 3.0, V, 0.5, 4.0)
    assert_trees_close((got["a"], got["b"], got["rest"][0], got["scale"], got["named"]["c"]), expected)


def test_checkpoint_keeps_values_and_gradients():
    checkpointed = checkpoint(layer_loss)
    assert_trees_close(checkpointed(W, X, B), layer_loss(W, X, B))
    assert_trees_close(grad(checkpointed)(W, X, B), autograd.grad(autograd_twin(layer_loss))(W, X, B))


# ---------------------------------------------------------------------------------------
# Operators inside functions s2s stages: under grad and jit, as autograd nests them.

def jvp_norm(x):
    return np.sum(make_jvp(softplus_map)(x)(V)[1] ** 2)


def vjp_weighted(x):
    vjp, value = make_vjp(softplus_map)(x)
    return np.sum(vjp(value) * x)


def hvp_norm(x):
    return np.sum(hessian_vector_product(cubic_sum)(x, V) ** 2)


def deriv_sum(x):
    return np.sum(deriv(softplus_map)(x) * np.cos(x))


def tjp_sum(x):
    return np.sum(vector_jacobian_product(softplus_map)(x, V) ** 2)


@pytest.mark.parametrize("fn", [jvp_norm, vjp_weighted, hvp_norm, deriv_sum, tjp_sum])
def test_operators_inside_a_differentiated_function(fn):
    x = np.array([0.3, -1.2, 0.8])
    assert_trees_close(grad(fn)(x), autograd.grad(autograd_twin(fn))(x), rtol=1e-6, atol=1e-9)
    assert_trees_close(s2s.jit(fn)(x), autograd_twin(fn)(x), rtol=1e-6, atol=1e-9)


def test_jit_of_operators():
    tensor = RNG.standard_normal(W.shape)
    assert_trees_close(s2s.jit(hessian_tensor_product(layer_loss))(W, X, B, tensor),
                       hessian_tensor_product(layer_loss)(W, X, B, tensor), rtol=1e-6, atol=1e-9)
    assert_trees_close(s2s.jit(elementwise_grad(layer, 2))(W, X, B), elementwise_grad(layer, 2)(W, X, B))


@settings(max_examples=8)
@given(n=st.integers(1, 4), m=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_every_operator_on_random_shapes(n, m, seed):
    rng = np.random.default_rng(seed)
    w, x, b = rng.standard_normal((n, m)), rng.standard_normal((2, n)), rng.standard_normal(m)
    tensor = rng.standard_normal((n, m))
    for name, extra in [("grad", ()), ("elementwise_grad", ()), ("jacobian", ()), ("hessian", ()),
                        ("deriv", ()), ("hessian_tensor_product", (tensor,)),
                        ("tensor_jacobian_product", (rng.standard_normal((2, m)),))]:
        fn = layer if name in ("elementwise_grad", "jacobian", "deriv", "tensor_jacobian_product") else layer_loss
        ours, theirs = against_autograd(name, fn, 0)
        assert_trees_close(ours(w, x, b, *extra), theirs(w, x, b, *extra), rtol=1e-6, atol=1e-9, what=name)


# ---------------------------------------------------------------------------------------
# The errors a user meets.

def test_grad_of_a_non_scalar_function_is_a_type_error_as_in_autograd():
    with pytest.raises(TypeError, match="Grad only applies to real scalar-output"):
        autograd.grad(autograd_twin(layer))(W, X, B)
    with pytest.raises(TypeError, match="one scalar floating-point output"):
        grad(layer)(W, X, B)
    with pytest.raises(TypeError):
        value_and_grad(layer)(W, X, B)


def cube(x):
    return x ** 3


def test_gradient_with_respect_to_an_integer_is_a_type_error_as_in_autograd():
    with pytest.raises(TypeError, match="Can't differentiate"):
        autograd.grad(autograd_twin(cube))(3)
    for integer in (3, np.arange(3)):
        with pytest.raises(TypeError, match="only floating-point inputs have gradients"):
            grad(cube)(integer)


def test_elementwise_grad_of_a_complex_output_is_a_type_error_as_in_autograd():
    z = np.array([1.0 + 1.0j])
    with pytest.raises(TypeError, match="Elementwise_grad only applies to real-output"):
        autograd.elementwise_grad(autograd_twin(np.sin))(z)
    with pytest.raises(TypeError, match="elementwise_grad only applies to real-output"):
        elementwise_grad(lambda z: np.sin(z))(z)


@pytest.mark.parametrize("operator, tensor", [(grad, ()), (elementwise_grad, ()), (jacobian, ()), (make_vjp, ()),
                                              (make_jvp, ()), (deriv, ()), (make_hvp, ()),
                                              (hessian_tensor_product, (W,)), (tensor_jacobian_product, (1.0,))])
def test_argnum_out_of_range_and_of_the_wrong_type(operator, tensor):
    """autograd raises IndexError (out of range, at the call) and AssertionError (not an
    int or sequence, when the operator is applied); s2s raises its argnums errors at the
    same moments, a ValueError and a TypeError naming the mistake."""
    with pytest.raises(ValueError, match="argnums 5 is out of range"):
        operator(layer_loss, 5)(W, X, B, *tensor)
    with pytest.raises(TypeError, match="must be an int or a sequence of ints"):
        operator(layer_loss, 1.5)


def test_grad_and_aux_needs_a_pair():
    with pytest.raises(s2s.StagingError, match="return a pair"):
        grad_and_aux(layer_loss)(W, X, B)


def test_hessian_tensor_product_with_a_tensor_of_the_wrong_shape():
    with pytest.raises(s2s.S2SError):
        hessian_tensor_product(layer_loss)(W, X, B, np.ones(5))
