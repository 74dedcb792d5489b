"""`with np.errstate(...)` inside a staged function (issue 42): its body is staged, and
every equation it stages (in the functions it calls too, and the derivative equations
made from them) keeps the errstate, so the emitted Python writes the `with` block again
and the NumPy backend warns, ignores or raises exactly as NumPy does; XLA reports no
floating-point errors at all. Other `with` statements stay refused at their line.

Oracles: NumPy running the same function (values, warnings, FloatingPointError), autograd
for gradients.
"""
import contextlib
import re
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import s2s
from s2s.emit.python import load_source

X = np.array([0.0, 0.5, 2.0])


def emitted(fn, *args):
    source = s2s.emit_python(fn, *args)
    module = load_source(source, "emitted")
    return source, getattr(module, module.__all__[0])


def safe_log_sum(x):
    with np.errstate(divide="ignore"):
        y = np.log(x)
    return np.sum(np.where(np.isfinite(y), y, 0.0) * x)


def safe_log_sum_autograd(x):
    with np.errstate(divide="ignore"):
        y = anp.log(x)
    return anp.sum(anp.where(anp.isfinite(y), y, 0.0) * x)


@pytest.mark.filterwarnings("error::RuntimeWarning")   # any warning NumPy would not give fails
def test_the_body_is_staged_and_runs_under_the_errstate_on_every_numpy_backend():
    expected = safe_log_sum(X)   # NumPy: no warning
    closed = s2s.make_jaxpr(safe_log_sum)(X)
    np.testing.assert_allclose(s2s.eval_jaxpr(closed, X)[0], expected, rtol=1e-15)
    source, fn = emitted(safe_log_sum, X)
    assert re.search(r"with np\.errstate\(divide='ignore'\):\n +y = np\.log\(x\)", source), source
    np.testing.assert_allclose(fn(X), expected, rtol=1e-15)
    for backend in ("python", "xla"):
        np.testing.assert_allclose(s2s.jit(safe_log_sum, backend=backend)(X), expected, rtol=1e-15)


def test_the_derivative_equations_keep_the_errstate_and_warn_as_autograd_does():
    """The backward pass of log at 0 divides 0 by 0: under divide='ignore' NumPy (so
    autograd) still warns of the invalid value, and so does s2s, of nothing else."""
    x = np.array([0.0, 0.5, 2.0, 3.0])
    with pytest.warns(RuntimeWarning) as autograd_warnings:
        expected = autograd.grad(safe_log_sum_autograd)(x)
    grad = s2s.grad(safe_log_sum)
    source, fn = emitted(grad, x)
    assert source.count("with np.errstate(divide='ignore'):") == 2, source   # forward and backward
    for run in (fn, grad, s2s.jit(grad, backend="python")):
        with pytest.warns(RuntimeWarning) as s2s_warnings:
            np.testing.assert_allclose(run(x), expected, rtol=1e-14)
        assert [str(w.message) for w in s2s_warnings] == [str(w.message) for w in autograd_warnings]
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # XLA reports no floating-point errors
        np.testing.assert_allclose(s2s.jit(grad)(x), expected, rtol=1e-14)


def log_of(x):
    return np.log(x)


def raising_in_a_callee(x):
    with np.errstate(divide="raise"):
        return np.sum(log_of(x))


def test_raise_raises_floating_point_error_as_numpy_does_in_functions_it_calls_too():
    with pytest.raises(FloatingPointError):
        raising_in_a_callee(X)
    source, fn = emitted(raising_in_a_callee, X)
    for run in (fn, s2s.jit(raising_in_a_callee, backend="python"),
                lambda x: s2s.eval_jaxpr(s2s.make_jaxpr(raising_in_a_callee)(x), x)):
        with pytest.raises(FloatingPointError, match="divide by zero"):
            run(X)
    assert s2s.jit(raising_in_a_callee)(X) == -np.inf   # XLA reports no floating-point errors
    np.testing.assert_allclose(fn(X + 1.0), raising_in_a_callee(X + 1.0), rtol=1e-15)


def nested_and_in_a_loop(x):
    total = np.zeros_like(x)
    with np.errstate(all="ignore"):
        for i in range(3):
            with np.errstate(divide="warn"):    # only divide is warned of inside
                total = total + np.log(x - i) + np.sqrt(x - i)
    return np.sum(np.where(np.isfinite(total), total, 0.0))


def test_nested_blocks_and_a_loop_staged_as_one_loop():
    with pytest.warns(RuntimeWarning, match="divide by zero") as expected_warnings:
        expected = nested_and_in_a_loop(X)
    source, fn = emitted(nested_and_in_a_loop, X)
    assert re.search(r"for i in range\(3\):.*\n(.*\n)*? +with np\.errstate\(divide='warn', "
                     r"invalid='ignore', over='ignore', under='ignore'\):", source), source
    with pytest.warns(RuntimeWarning, match="divide by zero") as got_warnings:
        np.testing.assert_allclose(fn(X), expected, rtol=1e-14)
    assert {str(w.message) for w in got_warnings} == {str(w.message) for w in expected_warnings}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(s2s.jit(nested_and_in_a_loop)(X), expected, rtol=1e-14)


def h(x):
    return np.sum(np.log(x))


def grad_inside_errstate(x):
    with np.errstate(divide="ignore"):
        return s2s.grad(h)(x + 1.0)


def grad_outside_errstate(x):
    return s2s.grad(h)(x + 1.0)


def test_a_transform_staged_under_an_errstate_is_not_served_outside_it():
    inside = s2s.emit_python(grad_inside_errstate, X)
    outside = s2s.emit_python(grad_outside_errstate, X)
    assert "np.errstate" in inside and "np.errstate" not in outside, (inside, outside)


def other_context_manager(x):
    with contextlib.suppress(ValueError):
        x = x + 1.0
    return x


def errstate_with_a_callback(x):
    with np.errstate(call=print):
        return np.log(x)


def errstate_with_a_bad_value(x):
    with np.errstate(divide="loud"):
        return np.log(x)


@pytest.mark.parametrize("fn, error, message", [
    (other_context_manager, s2s.UnsupportedSyntaxError,
     r"`with` blocks other than `with np.errstate\(\.\.\.\)` are not supported"),
    (errstate_with_a_callback, s2s.UnsupportedSyntaxError, r"not `call=`"),
    (errstate_with_a_bad_value, s2s.StagingError, r"np.errstate refuses these settings"),
])
def test_other_with_statements_are_refused_at_their_line(fn, error, message):
    with pytest.raises(error, match=message) as info:
        s2s.jit(fn)(X)
    assert "with " in str(info.value) and "^" in str(info.value)   # the line, with a caret
