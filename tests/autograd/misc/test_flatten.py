"""misc.flatten: autograd's vector and unflatten for trees of arrays, at the top level and
inside model code that s2s stages (under grad, jit and in an emitted module)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.autograd import grad
from s2s.autograd.misc import flatten, flatten_func
from tests.autograd.twins import assert_trees_close, autograd, autograd_twin
from autograd.misc.flatten import flatten_func as autograd_flatten_func

RNG = np.random.default_rng(0)
PARAMS = {"w": RNG.standard_normal((3, 2)), "layers": [(RNG.standard_normal(2), 0.5), RNG.standard_normal((1, 2))],
          "a": np.float64(1.5)}


def test_flatten_matches_autograds_vector_and_unflatten():
    vector, unflatten = flatten(PARAMS)
    their_vector, their_unflatten = autograd.misc.flatten(PARAMS)
    assert_trees_close(vector, their_vector)
    doubled = 2 * vector
    assert_trees_close(unflatten(doubled), their_unflatten(doubled))
    assert_trees_close(unflatten(vector), their_unflatten(vector))


@pytest.mark.filterwarnings("ignore:Output seems independent of input")   # autograd's, of an empty tree
@settings(max_examples=10)
@given(st.recursive(st.lists(st.integers(0, 3), min_size=0, max_size=2).map(
    lambda shape: np.arange(float(np.prod(shape))).reshape(shape)),
    lambda children: st.lists(children, max_size=3) | st.tuples(children, children)
    | st.dictionaries(st.sampled_from("abc"), children, max_size=3), max_leaves=6))
def test_flatten_round_trips_any_tree(tree):
    vector, unflatten = flatten(tree)
    their_vector, _ = autograd.misc.flatten(tree)
    assert_trees_close(vector, their_vector)
    assert_trees_close(unflatten(vector), tree)


def test_an_empty_tree_is_an_empty_vector():
    vector, unflatten = flatten([])
    assert vector.shape == (0,) and unflatten(vector) == []


def l2_norm(params):
    flattened, _ = flatten(params)
    return np.dot(flattened, flattened)


def log_likelihood(params, inputs):
    hidden = np.tanh(inputs @ params["w"] + params["layers"][0][0] * params["layers"][0][1])
    return np.sum(hidden * params["layers"][1]) - params["a"] * l2_norm(params)


def test_flatten_inside_a_differentiated_function():
    """autograd's neural_net example regularizes with the norm of its flattened parameters."""
    inputs = RNG.standard_normal((4, 3))
    ours = grad(log_likelihood)(PARAMS, inputs)
    theirs = autograd.grad(autograd_twin(log_likelihood))(PARAMS, inputs)
    assert_trees_close(ours, theirs)
    assert_trees_close(s2s.jit(log_likelihood)(PARAMS, inputs), log_likelihood(PARAMS, inputs))
    assert "np.concatenate" in s2s.emit_python(grad(l2_norm), PARAMS)


VECTOR, UNFLATTEN = flatten(PARAMS)


def loss_of_vector(vector, inputs):
    return log_likelihood(UNFLATTEN(vector), inputs)


def test_unflatten_inside_a_differentiated_function():
    """A loss of the parameter vector, as optimizers and scipy.optimize see it: its
    gradient is a vector, unflatten's transpose."""
    inputs = RNG.standard_normal((4, 3))
    ours = grad(loss_of_vector)(VECTOR, inputs)
    their_vector, their_unflatten = autograd.misc.flatten(PARAMS)
    theirs = autograd.grad(lambda v: autograd_twin(log_likelihood)(their_unflatten(v), inputs))(their_vector)
    assert_trees_close(ours, theirs)
    assert_trees_close(s2s.jit(loss_of_vector)(VECTOR, inputs), loss_of_vector(VECTOR, inputs))


def layer_outputs(params, inputs):
    return {"hidden": np.tanh(inputs @ params["w"]), "scaled": params["a"] * params["layers"][1]}


def test_flatten_func_flattens_input_and_output():
    inputs = RNG.standard_normal((4, 3))
    flat_fun, unflatten, example = flatten_func(layer_outputs, PARAMS)
    their_fun, _, their_example = autograd_flatten_func(autograd_twin(layer_outputs), PARAMS)
    assert_trees_close(example, their_example)
    assert_trees_close(flat_fun(example, inputs), their_fun(their_example, inputs))
    assert_trees_close(s2s.jit(flat_fun)(example, inputs), flat_fun(example, inputs))
    assert_trees_close(s2s.autograd.jacobian(flat_fun)(example, inputs),
                       autograd.jacobian(their_fun)(their_example, inputs))


def test_leaves_of_mixed_dtypes_share_a_promoted_vector():
    vector, unflatten = flatten((np.arange(3), np.ones(2, np.float32)))
    assert vector.dtype == autograd.misc.flatten((np.arange(3), np.ones(2, np.float32)))[0].dtype
    with pytest.raises(ValueError):   # a vector of another length does not fit the tree
        unflatten(np.ones(4))
