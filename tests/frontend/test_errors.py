"""Bad input: every mistake is a compiler-style error at the right line, with a caret.

Each function below marks the line the error must point at with a `# ERROR` comment.
"""
import inspect
import math
import sys

import autograd
import numpy as np
import pytest

import s2s
from s2s import (ConcretizationError, ShapeError, StagingError, UnsupportedFunctionError,
                 UnsupportedSyntaxError)

G = 1.0
x3 = np.arange(3.0)
x4 = np.arange(4.0)
m23 = np.ones((2, 3))


def marked_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if "# ERROR" in line:
            return start + offset
    raise AssertionError(f"{fn.__name__} has no '# ERROR' marker")


def expect_error(fn, error_class, *args, at=None, contains=None, **kwargs):
    with pytest.raises(error_class) as info:
        s2s.make_jaxpr(fn)(*args, **kwargs)
    error = info.value
    message = str(error)
    line = marked_line(at or fn)
    assert error.where is not None, message
    assert error.where.line == line, f"error at line {error.where.line}, expected {line}:\n{message}"
    assert f":{line}:" in message.splitlines()[0]
    assert "^" in message, message
    assert "help:" in message, message
    assert error.__cause__ is None and error.__suppress_context__
    if contains:
        assert contains in message, message
    return error


# --- concretization -----------------------------------------------------------------------

def int_of_array(x):
    n = int(x[0])  # ERROR
    return x * n


def range_of_array(x):
    total = 0.0
    for i in range(x.shape[0] * x[0]):  # ERROR
        total = total + i
    return total


def and_of_arrays(x, y):
    return x > 0 and y > 0  # ERROR


def not_of_array(x):
    return not x  # ERROR


def float_of_sum(x):
    return float(x.sum())  # ERROR


def ifexp_on_value(x):
    return x if x.sum() > 0 else -x  # ERROR


def math_on_array(x):
    return math.exp(x)  # ERROR


def builtin_max_of_arrays(x, y):
    return max(x, y)  # ERROR


def assert_on_value(x):
    assert x.sum() > 0  # ERROR
    return x


def tolist_of_array(x):
    return x.tolist()  # ERROR


@pytest.mark.parametrize("fn, args, contains", [
    (int_of_array, (x3,), "int()"),
    (and_of_arrays, (x3, x3), "logical_and"),
    (not_of_array, (x3,), "`not`"),
    (float_of_sum, (x3,), "float()"),
    (ifexp_on_value, (x3,), "conditional expression"),
    (math_on_array, (x3,), "np.exp"),
    (builtin_max_of_arrays, (x3, x3), "np.maximum"),
    (assert_on_value, (x3,), "`assert`"),
    (tolist_of_array, (x3,), ".tolist()"),
])
def test_concretization_errors(fn, args, contains):
    expect_error(fn, ConcretizationError, *args, contains=contains)


# --- unsupported syntax -------------------------------------------------------------------

def generator(x):
    y = np.sin(x)
    yield y  # ERROR


def delegating_generator(x):
    if x.ndim:
        yield from [x, x]  # ERROR


async def coroutine(x):
    return await x  # ERROR


def try_except(x):
    try:  # ERROR
        return np.log(x)
    except ValueError:
        return x


def uses_global(x):
    global G  # ERROR
    G = 2.0
    return x


def prints_array(x):
    print([x])  # ERROR
    return x


def recurses(x):
    return recurses(x * 0.5)  # ERROR


def with_block(x):
    with open("/dev/null"):  # ERROR
        return x


def defines_class(x):
    class Inner:  # ERROR
        pass
    return x


def uses_nonlocal(x):
    y = 1.0

    def inner():
        nonlocal y  # ERROR
        y = 2.0
    inner()
    return x * y


def aliased_in_place(x):
    y = x * 2.0
    z = y
    y += 1.0  # ERROR
    return y + z


def formats_array(x):
    name = f"value {x}"  # ERROR
    return x


def sorts_in_place(x):
    x.sort()  # ERROR
    return x


@pytest.mark.parametrize("fn, contains", [
    (generator, "`yield` makes generator a generator"),
    (delegating_generator, "`yield from` makes delegating_generator a generator"),
    (coroutine, "`await` makes coroutine a coroutine"),
    (try_except, "try/except"),
    (uses_global, "global"),
    (prints_array, "print()"),
    (recurses, "recursion"),
    (with_block, "`with`"),
    (defines_class, "class"),
    (uses_nonlocal, "nonlocal"),
    (aliased_in_place, "also bound to `z`"),
    (formats_array, "formatting"),
    (sorts_in_place, "np.sort"),
])
def test_unsupported_syntax(fn, contains):
    expect_error(fn, UnsupportedSyntaxError, x3, contains=contains)


def sines(x, n):
    if n == 0:
        return x
    return sines(np.sin(x), n - 1)  # ERROR


def sines_200_deep(x):
    return sines(x, 200)


def test_static_recursion_stages_each_call():
    """A recursion on a static int stages its calls one inside the other: 60 deep is
    NumPy's value, and its derivative the product of the cosines along the way."""
    value, derivative = x3, np.ones(3)
    for _ in range(60):
        value, derivative = np.sin(value), derivative * np.cos(value)
    np.testing.assert_allclose(s2s.jit(sines, static_argnums=1)(x3, 60), value, rtol=1e-12)
    np.testing.assert_allclose(s2s.grad(lambda x: np.sum(sines(x, 60)))(x3), derivative, rtol=1e-12)


def test_static_recursion_too_deep_to_stage_is_told_at_the_recursive_call():
    """200 deep, staging ran out of Python's stack: a StagingError quoting the
    RecursionError, with help to fix the expression. Past 200 calls (with a raised
    recursion limit) it said "calls itself with the same static arguments", which these
    were not. Both say the recursion is too deep, and to write a loop."""
    error = expect_error(sines_200_deep, UnsupportedSyntaxError, x3, at=sines, contains="recurses too deep to stage")
    assert "Python's stack ran out" in str(error) and "write the recursion as a loop" in str(error)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)   # (staging's calls nest in Python frames, not the C stack)
    try:
        error = expect_error(sines_200_deep, UnsupportedSyntaxError, x3, at=sines, contains="(200 calls deep)")
    finally:
        sys.setrecursionlimit(limit)
    assert "stages at most 200 calls" in str(error) and "same static arguments" not in str(error)


@pytest.mark.parametrize("transform", [
    lambda f: s2s.grad(f)(x3), lambda f: s2s.jit(f)(x3), lambda f: s2s.make_jaxpr(f)(x3),
    lambda f: s2s.emit_python(f, x3)], ids=["grad", "jit", "make_jaxpr", "emit_python"])
def test_generator_function_is_refused_at_the_yield(transform):
    """A generator was refused at its `def` line: the error now points at the `yield`
    (line, column and caret), whichever transform stages it."""
    with pytest.raises(UnsupportedSyntaxError) as info:
        transform(generator)
    message = str(info.value)
    assert f"test_errors.py:{marked_line(generator)}:5:" in message.splitlines()[0]
    assert "    yield y  # ERROR\n        ^^^^^^^\n" in message, message


def sum_of_generator_expression(xs):
    return sum(x_i * 2.0 for x_i in xs)


def test_generator_expressions_that_stage_keep_working():
    xs = (np.ones(2), np.arange(2.0))
    np.testing.assert_allclose(s2s.jit(sum_of_generator_expression)(xs), [2.0, 4.0])
    np.testing.assert_allclose(s2s.grad(lambda t: np.sum(sum_of_generator_expression(t)))(xs)[1],
                               [2.0, 2.0])


# --- names, calls, shapes, functions --------------------------------------------------------

def undefined_name(x):
    return x * not_defined_anywhere  # ERROR  # noqa: F821


def used_before_assignment(x):
    y = x + z  # ERROR
    z = 1.0
    return y


def add_mismatch(x, y):
    return x + y  # ERROR


def matmul_mismatch(a, b):
    return a @ b  # ERROR


def bad_reshape(x):
    return x.reshape(5, 2)  # ERROR


def bad_axis(x):
    return x.sum(axis=3)  # ERROR


def unsupported_numpy(x):
    return np.unique(x)  # ERROR


def sets_real_part(x):
    z = x + 1j
    z.real = 3.0  # ERROR
    return z


def sets_shape(x):
    x.shape = (3, 1)  # ERROR
    return x


def generator_made_inside(x):
    return x + np.random.default_rng(0).normal(size=3)  # ERROR


def helper_with_bug(h):
    return h @ np.ones((5, 5))  # ERROR


def calls_buggy_helper(x):
    return helper_with_bug(x) + 1.0


def two_args(a, b):
    return a + b


def wrong_arity(x):
    return two_args(x)  # ERROR


def raises_in_static_branch(x, mode):
    if mode not in ("sum", "mean"):
        raise ValueError(f"unknown mode {mode}")  # ERROR
    return x.sum()


def staged_mask(x):
    return x[x > 0]  # ERROR


def returns_string(x):  # ERROR
    return "done"


@pytest.mark.parametrize("fn, error_class, args, contains", [
    (undefined_name, StagingError, (x3,), "not defined"),
    (used_before_assignment, StagingError, (x3,), "before it is assigned"),
    (add_mismatch, ShapeError, (x3, x4), "broadcast"),
    (matmul_mismatch, ShapeError, (m23, m23), None),
    (bad_reshape, ShapeError, (x3,), None),
    (bad_axis, ShapeError, (x3,), "axis"),
    (unsupported_numpy, UnsupportedFunctionError, (x3,), "np.unique"),
    (generator_made_inside, UnsupportedFunctionError, (x3,), "make the generator outside the function"),
    (sets_real_part, UnsupportedSyntaxError, (x3,), "np.imag(z)"),
    (sets_shape, UnsupportedSyntaxError, (x3,), "reshape"),
    (wrong_arity, StagingError, (x3,), "two_args"),
    (raises_in_static_branch, StagingError, (x3, "max"), "unknown mode max"),
    (staged_mask, s2s.S2SError, (x3,), "np.where"),
    (returns_string, StagingError, (x3,), "str"),
])
def test_other_errors(fn, error_class, args, contains):
    expect_error(fn, error_class, *args, contains=contains)


def test_error_inside_a_helper_points_into_the_helper():
    error = expect_error(calls_buggy_helper, ShapeError, m23, at=helper_with_bug)
    assert error.where.function == "helper_with_bug"


def test_unhashable_static_argument_is_a_clear_error():
    with pytest.raises(StagingError, match="unhashable"):
        s2s.make_jaxpr(lambda x, n: x * len(n), static_argnums=1)(x3, {1, 2})


def test_error_names_the_file_and_shows_the_line():
    error = expect_error(return_in_unrolled_loop, UnsupportedSyntaxError, x3, [x3, -x3],
                         contains="`return` inside an `if`")
    message = str(error)
    assert message.startswith(__file__)
    assert "return w" in message
    caret_line = message.splitlines()[2]
    source_line = message.splitlines()[1]
    # The caret sits under the start of the offending statement.
    assert source_line[caret_line.index("^")] == "r"


def assigned_in_one_branch(x):
    if x.sum() > 0:  # ERROR
        y = x * 2
    return y


def return_in_unrolled_loop(x, weights):
    for w in weights:   # a list: the loop unrolls
        if (w * x).sum() > 0:
            return w  # ERROR
    return x


def while_true_on_an_array(x):
    while True:
        x = x / 2
        if x.max() < 1:
            break  # ERROR
    return x


def none_on_one_path(x):
    if x.sum() > 0:  # ERROR
        return x


def test_staged_control_flow_errors_say_what_to_write():
    expect_error(assigned_in_one_branch, StagingError, x3,
                 contains="`y` is assigned in only one branch")
    expect_error(none_on_one_path, StagingError, x3, contains="ends without `return` returns None")
    error = expect_error(while_true_on_an_array, UnsupportedSyntaxError, x3, contains="`break` inside")
    assert "for _ in range(n): ... if done: break" in str(error)
    expect_error(range_of_array, StagingError, x3, contains="range() needs integer scalars")


def weak_float_against_int(n):
    if n.sum() > 0:  # ERROR
        y = 0.5
    else:
        y = n.sum()
    return y


def returns_after_appending(x):
    acc = []
    if x.sum() > 0:  # ERROR
        return x
    acc.append(x)
    return x * len(acc)


def while_with_else(x):
    while x.sum() < 10:
        x = x * 1.5
        if x.max() > 5:
            break
    else:
        x = -x
    return x.sum()


def test_reviewed_mistakes_say_what_to_write():
    # A Python float is never truncated to the other branch's int dtype.
    expect_error(weak_float_against_int, ShapeError, np.array([1, 2]), contains="different types")
    expect_error(returns_after_appending, UnsupportedSyntaxError, x3, contains="changes Python lists")
    # reverse mode of an unbounded while, whose `else:` branch reads its `break` flag,
    # differentiates as autograd runs the Python loop
    np.testing.assert_allclose(s2s.grad(while_with_else)(np.ones(2)), autograd.grad(while_with_else)(np.ones(2)))


def minus_one_against_unsigned(n):
    if n[0] > 0:  # ERROR
        y = -1
    else:
        y = n[1]
    return y


def test_a_python_number_that_does_not_fit_the_other_branch_says_so():
    expect_error(minus_one_against_unsigned, StagingError, np.array([1, 2], np.uint32), contains="cannot hold")


def loop_variable_rebound(xs):
    for x in xs:  # ERROR
        x = x * 2
    return x


def test_a_rebound_loop_variable_read_after_the_loop_says_so():
    expect_error(loop_variable_rebound, StagingError, x3, contains="the body assigns it too")


def carried_without_a_value(x, n):
    for i in range(n):  # ERROR
        if i > 0:
            x = x + y
        y = x * 2
    return x


def test_a_name_a_staged_loop_passes_on_needs_a_value_before_it():
    error = expect_error(carried_without_a_value, StagingError, x3, np.int64(3),
                         contains="`y` is assigned in this `for` loop and read after it or in its next pass")
    assert "give `y` a value before the loop" in str(error)


def continue_in_a_python_while(x):
    k = 0
    while k < 3:
        k += 1
        if x.sum() > 1:
            continue  # ERROR
        x = x * 2
    return x


def test_a_continue_in_a_python_while_says_how_to_skip():
    error = expect_error(continue_in_a_python_while, UnsupportedSyntaxError, x3, contains="`continue` inside")
    assert "under `if not skip:`" in str(error) and "break" not in str(error).split("help:")[1]
