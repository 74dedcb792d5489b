"""s2s.emit.python's naming and location comments: a one-line edit of the source changes
only the emitted lines that depend on it, and every name says what it holds."""
import re
import runpy

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.core import Literal, ShapedArray
from s2s.emit.python import (LARGE_CONST_ELEMENTS, EmitOptions, _source_comment, emit_jaxpr_module, escaped,
                             literal_expr, load_source)
from s2s.source_info import SourceInfo

SOFTMAX_XENT = '''\
import numpy as np


def log_softmax(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def xent(logits, y):
    {extra}return -(y * log_softmax(logits)).sum()
'''

ARGS = (np.ones((4, 3)), np.ones((4, 3)))


def emitted_grad(tmp_path, folder: str, source: str) -> str:
    """The emitted gradient of `xent` as defined in `source`, saved as m.py in `folder`
    (a folder per version: a file's source is read from disk, by its path)."""
    path = tmp_path / folder / "m.py"
    path.parent.mkdir()
    path.write_text(source)
    xent = runpy.run_path(str(path))["xent"]
    return s2s.emit_python(s2s.grad(xent), *ARGS)


def test_lines_inserted_above_a_function_leave_its_emitted_module_unchanged(tmp_path):
    """Regression: every comment was `# m.py:LINE`, so a blank line at the top of the file
    made every derivative file stale."""
    before = emitted_grad(tmp_path, "a", SOFTMAX_XENT.format(extra=""))
    moved = "# A comment.\n\n" + SOFTMAX_XENT.format(extra="").replace("def xent", "\n\ndef xent")
    assert emitted_grad(tmp_path, "b", moved) == before
    assert "# m.py log_softmax+1" in before and "# m.py xent+1" in before
    assert not re.search(r"m\.py:\d", before)


def test_adding_a_statement_renames_no_temporary_elsewhere(tmp_path):
    """Regression: temporaries were numbered through the file (`t_3` became `t_7`
    everywhere when one statement was added). They are named from what they are now."""
    before = emitted_grad(tmp_path, "a", SOFTMAX_XENT.format(extra=""))
    after = emitted_grad(tmp_path, "b", SOFTMAX_XENT.format(extra="scale = np.exp(y).max()\n    "))
    assert not re.search(r"\bt(_\d+)?\b =", before)
    assert "max_logits = " in before and "exp_shifted = " in before
    names = set(re.findall(r"^    (\w+) = ", before, re.M))
    assert names == set(re.findall(r"^    (\w+) = ", after, re.M))   # the dead statement is not written
    # and the statement below it moved one line down in xent, which changes only its own lines:
    changed = [line for line in after.splitlines() if line not in before.splitlines()]
    assert changed and all(line.endswith("# m.py xent+2") for line in changed), changed


def test_temporary_names_are_capped_and_prefer_the_source_name():
    def f(a_rather_long_variable_name_indeed):
        return np.exp(np.sin(a_rather_long_variable_name_indeed)).sum() * 2.0

    source = s2s.emit_python(s2s.grad(f), np.ones(3))
    assigned = re.findall(r"^    (\w+) = ", source, re.M)
    assert "a_rather_long_variable_name_indeed_bar" in assigned, assigned   # a source name is never cut
    temporaries = [name for name in assigned if not name.startswith("a_rather")]
    assert temporaries and all(len(name) <= 24 for name in temporaries), temporaries


def helper(x):
    y = np.sin(x) * 2.0
    return y * x


def uses_a_helper_with_the_same_parameter_name(x, w):
    return helper(x * w).sum()


def test_argument_cotangent_is_x_bar_even_when_a_helper_parameter_is_called_x():
    """Regression: the helper's `x_bar` was written first and took the name, and the
    gradient of the argument `x` came out as `x_bar_1`."""
    x, w = np.linspace(0.1, 1.0, 3), np.linspace(-1.0, 1.0, 3)
    source = s2s.emit_python(s2s.grad(uses_a_helper_with_the_same_parameter_name, argnums=(0, 1)), x, w)
    assert source.rstrip().endswith("return x_bar, w_bar")
    module = load_source(source, "grad_uses_a_helper_with_the_same_parameter_name")
    expected = jax.grad(lambda x, w: (jax.numpy.sin(x * w) * 2.0 * (x * w)).sum(), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(module.grad_uses_a_helper_with_the_same_parameter_name(x, w), expected, rtol=1e-12)


def layers_in_a_loop(W, b, x):
    h = x
    for _ in range(3):
        h = np.tanh(h @ W + b)
    return np.sum(h * h)


def test_argument_cotangent_accumulated_by_a_loop_is_x_bar():
    """Regression: a loop's carry took the body's name first, and the gradients of `W` and
    `b`, accumulated by the backward loop, came out as `W_bar_1` and `b_bar_1`."""
    W, b, x = np.eye(4) / 2, np.linspace(-0.5, 0.5, 4), np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    source = s2s.emit_python(s2s.grad(layers_in_a_loop, argnums=(0, 1)), W, b, x)
    assert source.rstrip().endswith("return W_bar, b_bar"), source
    module = load_source(source, "grad_layers_in_a_loop")

    def with_jax(W, b, x):
        h = x
        for _ in range(3):
            h = jax.numpy.tanh(h @ W + b)
        return (h * h).sum()
    expected = jax.grad(with_jax, argnums=(0, 1))(W, b, x)
    for got, want in zip(module.grad_layers_in_a_loop(W, b, x), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def outer(x):
    def inner(v):
        c = np.cos(v)
        return c * c

    square = lambda v: v * v  # noqa: E731
    s = square(x)
    return inner(x) + s


def test_nested_functions_and_lambdas_have_readable_locations():
    source = s2s.emit_python(outer, np.ones(3))
    assert "c = np.cos(x)  # test_python.py outer.inner+1" in source
    assert "s = x * x  # test_python.py outer+5" in source   # the lambda's line, counted from `def outer`


def std_of_one_with_ddof(x):
    return np.std(x, ddof=1)


def mean_of_nothing_plus_sum(x):
    return np.mean(x[:0]) + np.sum(x)


def times_complex_infinity(z):
    return z * complex(np.inf, 1.0) + np.array([complex(0.0, np.nan), 2j])


@pytest.mark.parametrize("fn, arg", [(s2s.grad(std_of_one_with_ddof), np.array([3.0])),
                                     (s2s.grad(mean_of_nothing_plus_sum), np.array([3.0, 1.0])),
                                     (times_complex_infinity, np.array([1 + 2j, -1 - 0.5j]))])
def test_constants_with_a_zero_divisor_or_a_non_finite_part_are_valid_python(fn, arg):
    """`np.float64(1.0 / 0.0)` raised ZeroDivisionError and `(inf+1j)` was a NameError in
    the emitted code (review): literals are folded as NumPy computes them, and complex ones
    with a non-finite part are written `complex(np.inf, 1.0)`."""
    source = s2s.emit_python(fn, arg)
    assert "/ 0.0" not in source and "(inf" not in source and "nanj" not in source
    with np.errstate(all="ignore"):
        expected = s2s.jit(fn)(arg)
        got = s2s.jit(fn, backend="python")(arg)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


@settings(max_examples=15, deadline=None)
@given(file=st.text(min_size=1, max_size=12), function=st.text(min_size=1, max_size=12),
       line=st.integers(0, 10_000), def_line=st.integers(0, 10_000))
def test_a_statements_comment_is_its_escaped_relative_location(file, function, line, def_line):
    """The emitter writes comments from the def's label it remembers (every statement has
    one): the text is still exactly `relative()`, escaped, for any file or function name,
    also with the def unknown (0) or the line unknown (0: no comment)."""
    info = SourceInfo(file, line, 1, function, def_line=def_line)
    expected = f"  # {escaped(info.relative())}" if line else ""
    assert _source_comment(info) == expected


@pytest.mark.parametrize("value, dtype, weak, bare_ok, text", [
    (0.5, "float64", False, False, "0.5"),            # the default float: bare
    (0.5, "float32", True, True, "0.5"),              # weak, beside an array: bare
    (0.5, "float32", True, False, "np.float32(0.5)"),
    (-0.0, "float64", False, False, "-0.0"),
    (float("inf"), "float64", False, False, "np.inf"),
    (-float("inf"), "float32", False, False, "np.float32(-np.inf)"),
    (float("nan"), "float64", True, True, "np.nan"),
    (3, "int64", False, False, "3"),
    (3, "int32", False, False, "np.int32(3)"),
    (255, "uint8", True, False, "np.uint8(255)"),      # never bare unless weak and beside an array
    (True, "bool", False, False, "np.bool(True)"),    # a bare True is an int to `~` and `-`
    (True, "bool", True, True, "True"),
    (complex(1, 2), "complex128", False, False, "(1+2j)"),
    (complex(float("inf"), 1), "complex64", False, False, "np.complex64(complex(np.inf, 1.0))"),
])
def test_literals_are_written_bare_only_where_numpy_gives_them_their_dtype(value, dtype, weak, bare_ok, text):
    literal = Literal(np.asarray(value, dtype)[()], ShapedArray((), dtype, weak))
    assert literal_expr(literal, bare_ok).text == text


@pytest.mark.filterwarnings("ignore:.*reads the closure variable 'table'")
def test_memory_const_mode_hands_large_constants_to_the_module():
    table = np.linspace(0.0, 1.0, LARGE_CONST_ELEMENTS + 1)

    def shifted(x):
        return x + table
    closed = s2s.make_jaxpr(shifted)(np.ones_like(table))
    module = emit_jaxpr_module(closed, "f", options=EmitOptions(const_mode="memory"))
    assert "base64" not in module.source and "load_npz" not in module.source
    [held] = module.sidecar.values()
    assert held is closed.consts[0]
    f = load_source(module.source, "f", module_globals={"_consts": module.sidecar}).f
    np.testing.assert_array_equal(f(np.ones_like(table)), 1.0 + table)
