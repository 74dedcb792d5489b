"""`break` and `continue` on array conditions in a loop that must unroll (its index reads a
Python list, so it cannot be one staged loop): once broken, the later steps run under
`if running:` and leave every value unchanged. Values against NumPy running the function,
derivatives against jax running the same loop as a mask (loops.py's _masked_unrolled_for)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s
from tests.helpers import check_derivatives, check_function

STEP_SIZES = [1.0, 0.5, 0.75, 1.0, 0.9]   # a Python list read by the index: the loop unrolls


def damped_newton_sqrt(a):
    x = a
    for i in range(5):
        x = x - STEP_SIZES[i] * (x * x - a) / (2 * x)
        if np.abs(x * x - a) < 1e-2 * a:
            break
    return x


def jax_damped_newton_sqrt(a):
    """The same loop written with a mask: once stopped, x keeps its value."""
    x, running = a, True
    for i in range(5):
        stepped = x - STEP_SIZES[i] * (x * x - a) / (2 * x)
        x = jnp.where(running, stepped, x)
        running = running & ~(jnp.abs(x * x - a) < 1e-2 * a)
    return x


@pytest.mark.parametrize("a", [2.0, 9.0, 1.001, 30.0, 0.2])
def test_a_break_on_an_array_in_an_unrolled_loop_stops_as_numpy_and_differentiates_as_jax(a):
    check_function(damped_newton_sqrt, a)
    check_derivatives(damped_newton_sqrt, jax_damped_newton_sqrt, a)
    np.testing.assert_allclose(s2s.grad(s2s.grad(damped_newton_sqrt))(a),
                               jax.grad(jax.grad(jax_damped_newton_sqrt))(a), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(damped_newton_sqrt))(a),
                               jax.grad(jax_damped_newton_sqrt)(a), rtol=1e-9)


def layers_until_small(weights, x):
    """A loop over a Python list of arrays, with `continue` and `break` on array values, a
    carried name read only by the next step (`previous`) and an `else`."""
    previous = x
    total = 0.0
    for w in weights:
        h = np.tanh(w @ x)
        if np.sum(h) > 1.5:
            continue
        total = total + np.sum((h - previous) ** 2)
        previous = h
        x = h
        if np.max(np.abs(h)) < 0.3:
            break
    else:
        total = total + 10.0
    return total + np.sum(x)


def jax_layers_until_small(weights, x):
    previous, total, running = x, 0.0, True
    for w in weights:
        h = jnp.tanh(w @ x)
        live = running & ~(jnp.sum(h) > 1.5)
        total = jnp.where(live, total + jnp.sum((h - previous) ** 2), total)
        previous = jnp.where(live, h, previous)
        x = jnp.where(live, h, x)
        running = running & ~(live & (jnp.max(jnp.abs(h)) < 0.3))
    return jnp.where(running, total + 10.0, total) + jnp.sum(x)


@pytest.mark.parametrize("seed", range(6))
def test_continue_break_and_else_in_a_loop_over_a_list(seed):
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((3, 3)) * rng.uniform(0.1, 1.0) for _ in range(4)]
    x = rng.standard_normal(3)
    check_function(layers_until_small, weights, x)
    got = s2s.grad(layers_until_small, argnums=(0, 1))(weights, x)
    expected = jax.grad(jax_layers_until_small, argnums=(0, 1))(weights, x)
    for g, e in zip(s2s.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    tangent = rng.standard_normal(3)
    _, got_tangent = s2s.jvp(lambda x: layers_until_small(weights, x), (x,), (tangent,))
    _, expected_tangent = jax.jvp(lambda x: jax_layers_until_small(weights, x), (x,), (tangent,))
    np.testing.assert_allclose(got_tangent, expected_tangent, rtol=1e-9, atol=1e-12)


def reads_the_loop_variable_after(a):
    for i in range(3):
        a = a * STEP_SIZES[i]
        if a > 1.0:
            break
    return a + i


def test_the_loop_variable_after_a_break_on_an_array_is_refused_where_it_is_read():
    with pytest.raises(s2s.UnsupportedSyntaxError, match="`i`, the variable of a loop unrolled") as caught:
        s2s.jit(reads_the_loop_variable_after)(3.0)
    assert "test_unrolled_break.py" in str(caught.value) and "before the `break`" in str(caught.value)


def static_break(x):
    for i in range(6):
        x = x * STEP_SIZES[i % 5]
        if i == 2:
            break
    return x + i


def test_a_break_on_a_python_value_still_stops_while_staging():
    closed = check_function(static_break, np.ones(2))
    assert not any(eqn.primitive.name == "cond" for eqn in closed.jaxpr.eqns)


def break_leaves_the_rest_of_an_iterator(x):
    items = iter([1.0, 10.0, 100.0, 1000.0])
    for scale in items:     # a Python iterator: the loop unrolls
        x = x * scale
        if scale > 5.0:
            break
    return x + next(items)   # Python's `break` took no item after 10.0


def test_a_break_on_a_python_value_takes_no_further_item_from_an_iterator():
    check_function(break_leaves_the_rest_of_an_iterator, np.ones(2))


def break_in_unrolled_loop(x, layers):
    for i in range(len(layers)):   # layers[i] of a list: the loop unrolls
        x = np.tanh(layers[i] @ x)
        if x.sum() > 1:
            break
    return x


def test_the_loop_test_errors_once_refused_now_stages():
    """This loop was refused ("`break` inside an `if` on an array, in a loop that is
    unrolled"); it now stops where NumPy stops."""
    for scale in (0.5, 3.0):
        check_function(break_in_unrolled_loop, np.array([0.3, 0.2, 0.4]), [np.eye(3) * scale] * 3)
