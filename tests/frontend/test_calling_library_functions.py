"""Library functions that call a function they are given, inside a staged function
(issue 42): `sum(map(partial(f, a), data))`, `functools.reduce`, `filter`, `sorted(key=)`,
`itertools.starmap`/`accumulate`, beside `zip` and `enumerate` of lists of arrays. The
function given is staged as a call in the source is (walker.CALLING_LIBRARY_FUNCTIONS),
not run as plain Python on staged values, where NumPy's ufuncs refused them and the
error blamed the `map`.

Each model is checked against autograd on the same program (its value with NumPy, its
gradient with autograd's), through s2s's gradient on NumPy values, the emitted module
and jit.
"""
import functools
import itertools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import s2s
from s2s.emit.python import load_source
from tests.frontend.test_call_user import primitive_names

DATA = [np.linspace(-0.4, 1.0, 3) * (i + 1) for i in range(4)]
A = np.float64(0.7)


def softplus_score(a, d):
    """Stages an `if` on an array: run as plain Python on staged values it could not."""
    if np.sum(d) > 3.0:
        return np.sum(np.logaddexp(0.0, a * d))
    return np.sum(np.tanh(a * d))


def softplus_score_autograd(a, d):
    if anp.sum(d) > 3.0:
        return anp.sum(anp.logaddexp(0.0, a * d))
    return anp.sum(anp.tanh(a * d))


def make_models(np, score):
    """The models, written once for NumPy (staged by s2s) and once for autograd's numpy."""
    def accumulated(a, acc, d):
        return acc + np.sin(a) * np.sum(d)
    return {
        "sum(map(partial))": lambda a, data: sum(map(functools.partial(score, a), data)),
        "map of a module function": lambda a, data: a * sum(map(np.sum, map(np.sin, data))),
        "reduce(np.add)": lambda a, data: np.sum(np.sin(a * functools.reduce(np.add, data))),
        "reduce(lambda)": lambda a, data: functools.reduce(lambda acc, d: acc + score(a, d), data, 0.0),
        "reduce(partial)": lambda a, data: functools.reduce(
            functools.partial(accumulated, a), data, 0.0),
        "filter then map": lambda a, data: sum(map(functools.partial(score, a),
                                                   filter(lambda d: d.shape[0] == 3, data))),
        "sorted(key=)": lambda a, data: np.sum(np.stack(sorted(data, key=lambda d: -float(d.shape[0])))
                                               * a),
        "starmap": lambda a, data: sum(itertools.starmap(lambda x, y: np.sum(np.sin(a * x * y)),
                                                         zip(data, data[1:]))),
        "accumulate": lambda a, data: np.sum(np.cos(a * list(itertools.accumulate(data, np.multiply))[-1])),
        "enumerate": lambda a, data: sum(i * score(a, d) for i, d in enumerate(data)),
    }


MODELS = make_models(np, softplus_score)
AUTOGRAD_MODELS = make_models(anp, softplus_score_autograd)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_function_a_library_function_calls_is_staged(name):
    model, reference = MODELS[name], AUTOGRAD_MODELS[name]
    expected_value, expected_grad = reference(A, DATA), autograd.grad(reference)(A, DATA)
    np.testing.assert_allclose(s2s.jit(model)(A, DATA), expected_value, rtol=1e-12)
    grad = s2s.grad(model)
    np.testing.assert_allclose(grad(A, DATA), expected_grad, rtol=1e-12)          # NumPy backend
    np.testing.assert_allclose(s2s.jit(grad)(A, DATA), expected_grad, rtol=1e-12)  # XLA
    source = s2s.emit_python(grad, A, DATA)
    module = load_source(source, "emitted")
    emitted = getattr(module, module.__all__[0])
    np.testing.assert_allclose(emitted(A, DATA), expected_grad, rtol=1e-12, err_msg=source)


def test_the_function_map_calls_is_staged_from_its_source():
    """Its `if` on an array is a cond: the function ran through the walker."""
    closed = s2s.make_jaxpr(MODELS["sum(map(partial))"])(A, DATA)
    assert primitive_names(closed).count("cond") == len(DATA)


def test_an_error_in_the_function_map_calls_points_at_its_line():
    def broken(a, d):
        return np.sum(a * d) + undefined_name   # noqa: F821

    def model(a, data):
        return sum(map(functools.partial(broken, a), data))
    with pytest.raises(s2s.errors.StagingError, match="name 'undefined_name' is not defined") as info:
        s2s.grad(model)(A, DATA)
    assert "return np.sum(a * d) + undefined_name" in str(info.value)
