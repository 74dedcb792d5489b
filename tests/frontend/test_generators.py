"""Generators in staged code (`s2s/frontend/generators.py`): a generator function called in
a staged function gives a Python generator whose items are staged as they are asked for.

Held to NumPy's values (every backend: eval_jaxpr, the emitted module, jit on XLA and on
the Python backend) and autograd's gradients of the same source run by autograd.numpy,
which runs Python as Python, generators included."""
import inspect
import itertools

import numpy as np
import pytest

import s2s
from s2s import StagingError, UnsupportedSyntaxError
from tests.helpers import assert_same, check_function, check_values_and_gradient, with_numpy

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")

rng = np.random.default_rng(0)
X = rng.standard_normal(3)


# --- autograd's bayesian_neural_net.py: layers unpacked by a generator -----------------------

def make_nn_funs(layer_sizes, noise_variance=0.01):
    """As autograd's example writes it: the generator closes over `shapes`, and each layer
    it yields slices the weights the layer before left."""
    shapes = list(zip(layer_sizes[:-1], layer_sizes[1:]))
    num_weights = sum((m + 1) * n for m, n in shapes)

    def unpack_layers(weights):
        num_weight_sets = len(weights)
        for m, n in shapes:
            yield weights[:, :m * n].reshape((num_weight_sets, m, n)), \
                weights[:, m * n:m * n + n].reshape((num_weight_sets, 1, n))
            weights = weights[:, (m + 1) * n:]

    def predictions(weights, inputs):
        inputs = np.expand_dims(inputs, 0)
        for W, b in unpack_layers(weights):
            outputs = np.einsum('mnd,mdo->mno', inputs, W) + b
            inputs = np.tanh(outputs)
        return outputs

    def logprob(weights, inputs, targets):
        log_prior = -0.1 * np.sum(weights ** 2, axis=1)
        preds = predictions(weights, inputs)
        log_lik = -np.sum((preds - targets) ** 2, axis=1)[:, 0] / noise_variance
        return log_prior + log_lik

    def layer_norms(weights):
        Ws, bs = zip(*unpack_layers(weights))          # zip(*gen)
        return [np.sum(W ** 2) for W in Ws] + [np.sum(b ** 2) for b in list(bs)]

    return num_weights, logprob, layer_norms


LAYER_SIZES = [1, 6, 5, 1]
NUM_WEIGHTS, logprob, layer_norms = make_nn_funs(LAYER_SIZES)
INPUTS, TARGETS = rng.standard_normal((7, 1)), rng.standard_normal((7, 1))
WEIGHTS = rng.standard_normal((4, NUM_WEIGHTS))


def test_unpacked_layers_stage_as_numpy_runs_them():
    closed = check_function(logprob, WEIGHTS, INPUTS, TARGETS)
    assert "while" not in str(closed) and "scan" not in str(closed)   # the generator is inlined
    assert_same(s2s.jit(logprob, backend="python")(WEIGHTS, INPUTS, TARGETS), logprob(WEIGHTS, INPUTS, TARGETS))
    check_function(layer_norms, WEIGHTS)


def total_logprob(weights):
    return np.sum(logprob(weights, INPUTS, TARGETS))


def test_gradients_flow_through_the_yielded_layers():
    """autograd's gradient, from s2s.grad run eagerly, its emitted module (which holds no
    generator: the layers are inlined where the loop used them) and jit on both backends."""
    _, autograd_logprob, _ = with_numpy(make_nn_funs, anp)(LAYER_SIZES)
    expected = autograd.grad(lambda w: anp.sum(autograd_logprob(w, INPUTS, TARGETS)))(WEIGHTS)
    gradient = s2s.grad(total_logprob)
    assert_same(gradient(WEIGHTS), expected, rtol=1e-10, atol=1e-10)
    check_function(gradient, WEIGHTS, rtol=1e-10, atol=1e-10)     # eval_jaxpr, emitted module, jit
    assert_same(s2s.jit(gradient, backend="python")(WEIGHTS), expected, rtol=1e-10, atol=1e-10)
    assert "yield" not in s2s.emit_python(gradient, WEIGHTS)


# --- yield from, next(), values sent and returned ---------------------------------------------

def halves_then_total(x):
    yield x / 2.0
    yield x[::-1] / 2.0
    return np.sum(x)


def delegating(x):
    total = yield from halves_then_total(x)   # receives the delegated generator's return value
    yield total * x
    yield from np.stack([x, x * x])           # rows of a staged array


def takes_with_next(x):
    items = delegating(x)
    first = next(items)
    second = next(items)
    return first * second + sum(items)


def running_total(x):
    total = x
    while True:
        step = yield total          # what the consumer sends
        total = total + step


def sends_steps(x):
    totals = running_total(x)
    next(totals)
    totals.send(x * 2.0)
    return totals.send(np.sin(x))


@pytest.mark.parametrize("fn", [takes_with_next, sends_steps])
def test_yield_from_next_and_send(fn):
    check_values_and_gradient(fn, X)


# --- lazily: an endless generator, zipped with a finite range ---------------------------------

def endless_squares(x):
    while True:
        yield x
        x = np.sin(x) * x


def first_four(x):
    return sum(item * k for k, item in zip(range(4), endless_squares(x)))


def endless_generator_expression(x):
    return sum(term for _, term in zip(range(3), (x ** k for k in itertools.count(1))))


@pytest.mark.parametrize("fn", [first_four, endless_generator_expression])
def test_an_endless_generator_stages_only_the_items_taken(fn):
    check_values_and_gradient(fn, X)


def generator_expression_over_rows(x):
    return sum(np.tanh(row) * k for k, row in enumerate(np.outer(x, x)) if k != 1)


def generator_expressions_made_in_a_comprehension(x):
    """Each generator expression reads the comprehension's `w` when its items are asked
    for, after the comprehension is done: the last `w`, as Python's closures read it; the
    function's own `w` and `k` are left as they were."""
    w, k = 100.0, 10.0
    lazy = [(x * w * k for k in range(1, 3)) for w in (1.0, 2.0, 3.0)]
    eager = [sum(x * w * k for k in range(1, 3)) for w in (1.0, 2.0)]
    return sum(sum(items) for items in lazy) + w * k + eager[0] * eager[1]


@pytest.mark.parametrize("fn", [generator_expression_over_rows, generator_expressions_made_in_a_comprehension])
def test_a_generator_expression(fn):
    check_values_and_gradient(fn, X)


# --- a generator over a static range, closing over staged values ------------------------------

def powers_of_the_sum(x, n):
    scale = np.sum(x)

    def powers():
        for k in range(n):
            yield x * scale ** k
    return list(powers())[-1] + sum(powers())


def test_a_nested_generator_closes_over_staged_values():
    check_function(powers_of_the_sum, X, 4, static_argnums=1)
    expected = autograd.grad(lambda x: anp.sum(with_numpy(powers_of_the_sum, anp)(x, 4)))(X)
    assert_same(s2s.grad(lambda x: np.sum(powers_of_the_sum(x, 4)))(X), expected, rtol=1e-10)


# --- items taken inside a body staged once ----------------------------------------------------

def next_in_a_loop(x):
    items = endless_squares(x)
    total = np.zeros_like(x)
    for _ in range(3):      # would be one scan, its body staged once: unrolled instead
        total = total + next(items)
    return total


def next_of_generator_expression_in_a_loop(x):
    items = (x * 2.0 ** k for k in range(3))
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + next(items)
    return total


@pytest.mark.parametrize("fn", [next_in_a_loop, next_of_generator_expression_in_a_loop])
def test_an_item_taken_in_a_loop_body_is_taken_on_every_pass(fn):
    check_values_and_gradient(fn, X)


def next_under_an_array_test(x):
    items = endless_squares(x)
    if np.sum(x) > 0:
        x = next(items)  # ERROR
    return x


# --- refused: how many items depends on an array ----------------------------------------------

def while_on_an_array(x):
    while np.sum(x) > 0:  # ERROR
        yield x
        x = x - 1.0


def if_on_an_array(x):
    if np.sum(x) > 0:  # ERROR
        yield x


def range_of_an_array(x):
    for k in range(np.argmax(x)):  # ERROR
        yield x * k


def break_on_an_array(x):
    for k in range(3):
        if x[k] > 0:
            break  # ERROR
        yield x


def yield_in_an_expression(x):
    y = np.sin((yield x))  # ERROR
    yield y


def yield_in_a_with(x):
    with np.errstate(divide="ignore"):
        yield 1.0 / x  # ERROR


def marked_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if "# ERROR" in line)


@pytest.mark.parametrize("generator, says, advice", [
    (while_on_an_array, "this `while` holding a `yield` tests an array", "for _ in range(max_items):"),
    (if_on_an_array, "this `if` on an array holds a `yield`", "np.where(condition, a, b)"),
    (range_of_an_array, "runs over a range with an array bound", "test a Python value there"),
    (break_on_an_array, "`break` inside an `if` on an array", "a loop holding a `yield` runs while staging"),
    (yield_in_an_expression, "a `yield` inside an expression", "`name = yield value`"),
    (yield_in_a_with, "a `yield` inside a `with` block", "move the `yield` out of the block"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refusals_point_at_the_line_and_say_what_to_write(generator, says, advice):
    def consumer(x):
        return sum(generator(x))
    with pytest.raises(UnsupportedSyntaxError) as info:
        s2s.jit(consumer)(X)
    message = str(info.value)
    first = message.splitlines()[0]
    assert f"test_generators.py:{marked_line(generator)}:" in first and says in first, message
    assert "^" in message and "\nhelp: " in message and advice in message, message


def test_an_item_asked_for_in_a_branch_on_an_array_is_refused():
    with pytest.raises(StagingError) as info:
        s2s.jit(next_under_an_array_test)(X)
    message = str(info.value)
    assert f"test_generators.py:{marked_line(next_under_an_array_test)}:" in message.splitlines()[0]
    assert "asked for inside a body s2s stages once" in message and "items = list(gen)" in message


def test_a_generator_function_transformed_itself_is_refused_at_its_yield():
    with pytest.raises(UnsupportedSyntaxError) as info:
        s2s.jit(halves_then_total)(X)
    message = str(info.value)
    assert f"test_generators.py:{marked_line_of(halves_then_total, 'yield x / 2.0')}:" in message.splitlines()[0]
    assert "returns an iterator, not arrays" in message and "tuple(halves_then_total(x))" in message


def marked_line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def returns_a_generator_expression(x):
    return (x * k for k in range(3))


def test_a_generator_expression_returned_is_a_type_error_saying_to_make_a_tuple():
    with pytest.raises(TypeError) as info:
        s2s.jit(returns_a_generator_expression)(X)
    message = str(info.value)
    assert "returns_a_generator_expression returns a generator, which is not an array" in message
    assert "tuple(x * k for k in ks)" in message and "StagedGenerator" not in message
