"""User classes passed as arguments that hold arrays (issue 42): `class Params: def
__init__(self, W, b)`, as autograd's and NumPy users write them.

s2s takes apart only the containers it knows (tuples, lists, dicts, namedtuples,
dataclasses, registered classes): which attributes of any other object are inputs, and
how another one is built from new arrays, only its class can say. So such an object
holding arrays is refused at the call with the ways to say it (it used to be static, its
arrays baked in as constants: in-place changes went unseen, and grad refused it as "a
static value"); decorated with `s2s.register_pytree_node_class` (JAX's decorator and
protocol) it is a pytree and every transform takes and returns it. An object holding no
arrays (a configuration) stays a static value.

Oracles: jax on the same class registered with jax's own decorator, autograd on the
same model over a tuple, and NumPy.
"""
import collections
import dataclasses

import autograd
import autograd.numpy as anp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s
from s2s.emit.python import load_source

RNG = np.random.default_rng(0)
W0, B0, X = RNG.standard_normal((3, 2)), RNG.standard_normal(2), RNG.standard_normal((4, 3))


class Params:
    def __init__(self, W, b):
        self.W = W
        self.b = b


class Layers:
    def __init__(self, weights):
        self.weights = weights   # a list of arrays


@s2s.register_pytree_node_class
@jax.tree_util.register_pytree_node_class
class RegisteredParams:
    def __init__(self, W, b, scale=1.0):
        self.W, self.b, self.scale = W, b, scale   # scale: static data

    def tree_flatten(self):
        return (self.W, self.b), self.scale

    @classmethod
    def tree_unflatten(cls, scale, children):
        return cls(*children, scale=scale)


@dataclasses.dataclass
class DataclassParams:
    W: np.ndarray
    b: np.ndarray


TupleParams = collections.namedtuple("TupleParams", "W b")


def loss(p, x):
    return np.sum(np.tanh(x @ p.W + p.b) ** 2)


def jax_loss(p, x):
    return jnp.sum(jnp.tanh(x @ p.W + p.b) ** 2)


def autograd_loss(W, b, x):
    return anp.sum(anp.tanh(anp.dot(x, W) + b) ** 2)


@pytest.mark.parametrize("transform", ["grad", "jit", "emit_python", "vmap"])
def test_a_plain_object_holding_arrays_is_refused_at_the_call_with_how_to_register_it(transform):
    p = Params(W0, B0)
    call = {"grad": lambda: s2s.grad(loss)(p, X), "jit": lambda: s2s.jit(loss)(p, X),
            "emit_python": lambda: s2s.emit_python(loss, p, X),
            "vmap": lambda: s2s.vmap(loss, in_axes=(None, 0))(p, X[:, None, :])}[transform]
    with pytest.raises(s2s.StagingError) as info:
        call()
    message = str(info.value)
    assert "argument `p` is a Params object holding arrays (`p.W`)" in message
    assert "@s2s.register_pytree_node_class" in message and "dataclass" in message
    assert "s2s.register_pytree_node(Params, flatten, unflatten)" in message


def test_the_error_names_where_a_nested_object_holds_its_array():
    def first_layer_sum(model, x):
        return np.sum(x @ model.weights[0])
    with pytest.raises(s2s.StagingError, match=r"argument `models\[1\]` is a Layers object holding "
                                               r"arrays \(`models\[1\]\.weights\[0\]`\)"):
        s2s.jit(lambda models, x: first_layer_sum(models[1], x))([None, Layers([W0])], X)


class Config:
    def __init__(self, depth, activation):
        self.depth, self.activation = depth, activation


def test_an_object_holding_no_arrays_stays_static():
    def model(config, x):
        for _ in range(config.depth):
            x = np.tanh(x) if config.activation == "tanh" else np.maximum(x, 0.0)
        return np.sum(x)
    expected = np.sum(np.tanh(np.tanh(X)))
    np.testing.assert_allclose(s2s.jit(model)(Config(2, "tanh"), X), expected, rtol=1e-12)
    np.testing.assert_allclose(s2s.grad(model, argnums=1)(Config(2, "tanh"), X),
                               jax.grad(lambda x: jnp.sum(jnp.tanh(jnp.tanh(x))))(X), rtol=1e-12)


@pytest.mark.parametrize("make", [RegisteredParams, DataclassParams, TupleParams])
def test_a_registered_class_dataclass_or_namedtuple_is_taken_and_returned_by_every_transform(make):
    p = make(W0, B0)
    expected_value = autograd_loss(W0, B0, X)
    expected_W, expected_b = autograd.grad(autograd_loss, argnum=(0, 1))(W0, B0, X)
    grads = {"NumPy backend": s2s.grad(loss)(p, X), "jit": s2s.jit(s2s.grad(loss))(p, X),
             "jit python": s2s.jit(s2s.grad(loss), backend="python")(p, X)}
    for where, g in grads.items():
        assert type(g) is make, where
        np.testing.assert_allclose(g.W, expected_W, rtol=1e-12, err_msg=where)
        np.testing.assert_allclose(g.b, expected_b, rtol=1e-12, err_msg=where)
    np.testing.assert_allclose(s2s.jit(loss)(p, X), expected_value, rtol=1e-12)
    source = s2s.emit_python(s2s.grad(loss), p, X)
    compile(source, "emitted.py", "exec")
    load_source(source, "emitted")


def test_a_registered_class_keeps_its_static_data_and_matches_jax():
    def scaled_loss(p, x):
        return p.scale * np.sum(np.tanh(x @ p.W + p.b) ** 2)

    def jax_scaled_loss(p, x):
        return p.scale * jnp.sum(jnp.tanh(x @ p.W + p.b) ** 2)
    p = RegisteredParams(W0, B0, scale=3.0)
    got, expected = s2s.jit(s2s.grad(scaled_loss))(p, X), jax.grad(jax_scaled_loss)(p, X)
    assert got.scale == 3.0
    np.testing.assert_allclose(got.W, expected.W, rtol=1e-12)
    np.testing.assert_allclose(got.b, expected.b, rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(scaled_loss)(RegisteredParams(W0, B0, scale=2.0), X),
                               2.0 * autograd_loss(W0, B0, X), rtol=1e-12)


def test_a_registered_objects_arrays_are_inputs_so_a_change_in_place_is_seen():
    p = RegisteredParams(W0.copy(), B0.copy())
    jitted = s2s.jit(loss)
    jitted(p, X)
    p.W[0, 0] += 1.0
    np.testing.assert_allclose(jitted(p, X), autograd_loss(p.W, p.b, X), rtol=1e-12)
