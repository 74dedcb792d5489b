"""Bad inputs get an s2s error naming the argument and what to write instead, from every
entry point, never a raw internal error and never a silently different computation."""
import inspect
import traceback
import warnings

import ml_dtypes
import numpy as np
import pytest

import s2s
from s2s.errors import S2SError


def square(x):
    return x * x


def total(x):
    return (x * x).sum()


with warnings.catch_warnings():   # NumPy discourages np.matrix; users still pass them
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    MATRIX = np.matrix([[1.0, 2.0], [3.0, 4.0]])

BAD_ARRAYS = {
    "object": np.array([1.0, 2.0], dtype=object),
    "bfloat16": np.ones(2, ml_dtypes.bfloat16),
    "longdouble": np.ones(2, np.longdouble),
    "complex256": np.ones(2, np.clongdouble),
    "datetime64": np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]"),
    "timedelta64": np.array([1, 2], dtype="timedelta64[s]"),
    "structured": np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
    "string": np.array(["a", "b"]),
    "bytes": np.array([b"a", b"b"]),
    "matrix": MATRIX,
    "masked": np.ma.masked_array([1.0, 2.0], mask=[False, True]),
}

ENTRY_POINTS = {
    "make_jaxpr": lambda x: s2s.make_jaxpr(square)(x),
    "emit_python": lambda x: s2s.emit_python(square, x),
    "jit": lambda x: s2s.jit(square)(x),
    "jit_python": lambda x: s2s.jit(square, backend="python")(x),
    "grad": lambda x: s2s.grad(total)(x),
    "value_and_grad": lambda x: s2s.value_and_grad(total)(x),
    "jvp": lambda x: s2s.jvp(square, (x,), (x,)),
    "vjp": lambda x: s2s.vjp(square, x),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", BAD_ARRAYS)
def test_unsupported_array_is_a_clear_error(kind, entry):
    with pytest.raises(S2SError) as info:
        ENTRY_POINTS[entry](BAD_ARRAYS[kind])
    message = str(info.value)
    assert "help: convert it first" in message
    assert message.startswith("argument `x` is ")   # named as the function reads it
    # As other user errors: re-raised clean, without the frames of staging that found it.
    frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert not any(f.endswith(("frontend/args.py", "frontend/__init__.py", "s2s/tree.py")) or "/s2s/emit/" in f
                   for f in frames)


def layer(params, x, *rest):
    return params["W1"] * x + sum(rest)


@pytest.mark.parametrize("wrap", [s2s.jit, lambda f: s2s.jit(f, backend="python"),
                                  lambda f: s2s.make_jaxpr(f)], ids=["jit", "jit_python", "make_jaxpr"])
def test_the_argument_is_named_by_its_path(wrap):
    jitted = wrap(layer)
    with pytest.raises(S2SError, match=r"argument `params\['W1'\]` is an array of dtype object"):
        jitted({"W1": np.ones(2, object)}, 1.0)
    with pytest.raises(S2SError, match=r"argument `x` is an array of dtype bfloat16"):
        jitted({"W1": np.ones(2)}, x=np.ones(2, ml_dtypes.bfloat16))
    with pytest.raises(S2SError, match=r"argument `rest\[1\]` is an array of dtype float128"):
        jitted({"W1": np.ones(2)}, 1.0, np.ones(2), np.ones(2, np.longdouble))


@pytest.mark.parametrize("kind", ["matrix", "masked", "object", "bfloat16", "longdouble"])
def test_jit_fast_path_refuses_what_the_python_path_refuses(kind):
    """After calls with plain arrays of the same shape and dtype have made the C++
    dispatcher's fast path, the bad array is still refused (a matrix was run as an ndarray)."""
    bad = BAD_ARRAYS[kind]
    jitted = s2s.jit(square)
    plain = np.ones(bad.shape, np.float64)
    for _ in range(3):
        jitted(plain)
    with pytest.raises(S2SError, match="argument `x`"):
        jitted(bad)


def test_matrix_product_is_not_silently_elementwise():
    m = MATRIX
    with pytest.raises(S2SError, match="np.matrix's `\\*` is a matrix product"):
        s2s.jit(square)(m)
    plain = np.asarray(m)   # what the help says to write
    np.testing.assert_allclose(s2s.jit(lambda a: a @ a)(plain), [[7.0, 10.0], [15.0, 22.0]])


@pytest.mark.parametrize("shape, complaint", [
    ((-3,), "negative dim -3"), ((2.5,), "dim 2.5, which is not an int"), ((True,), "not an int"),
    ((2**63,), "more than XLA's largest"), ("ab", "not an int"), (None, "not a tuple of dims"),
])
def test_bad_shape_dtype_shape(shape, complaint):
    with pytest.raises(S2SError, match=complaint) as info:
        s2s.ShapeDtype(shape, "float32")
    assert not any(f.name == "_checked_shape" for f in traceback.extract_tb(info.value.__traceback__))


@pytest.mark.parametrize("dtype, complaint", [
    ("flaot32", "not a dtype NumPy knows"), ("object", "not one s2s stages"),
    (ml_dtypes.bfloat16, "not one s2s stages"), (np.longdouble, "not one s2s stages"),
    ("datetime64[s]", "not one s2s stages"), ("U3", "not one s2s stages"),
])
def test_bad_shape_dtype_dtype(dtype, complaint):
    with pytest.raises(S2SError, match=complaint):
        s2s.ShapeDtype((2,), dtype)


def test_fine_inputs_stay_fine():
    """float16, 0-sized shapes, big but valid dims and a big-endian array stage as before."""
    assert s2s.make_jaxpr(square)(s2s.ShapeDtype((10**12,), "f32")).out_avals[0].shape == (10**12,)
    np.testing.assert_array_equal(s2s.jit(square)(np.full(3, 2, np.float16)), np.full(3, 4, np.float16))
    assert s2s.jit(square)(np.ones((0, 3))).shape == (0, 3)
    np.testing.assert_array_equal(s2s.jit(square)(np.arange(3.0).astype(">f8")), np.arange(3.0) ** 2)


def test_pytree_nested_a_thousand_deep():
    deep = np.ones(2)
    for _ in range(1000):
        deep = [deep]
    for call in (lambda: s2s.make_jaxpr(lambda t: 1.0)(deep), lambda: s2s.emit_python(lambda t: 1.0, deep),
                 lambda: s2s.jit(lambda t: 1.0, backend="python")(deep), lambda: s2s.jit(lambda t: 1.0)(deep),
                 lambda: s2s.grad(lambda t: 1.0)(deep)):
        with pytest.raises(S2SError, match="nested too deeply"):
            call()


def test_same_array_donated_twice():
    donating = s2s.jit(lambda a, b: (a + b, a * b), donate_argnums=(0, 1))
    x = s2s.jit(lambda v: v + 0)(np.ones(3))
    with pytest.raises(S2SError, match="donated twice: as `a` of <lambda> and as `b` of <lambda>"):
        donating(x, x)
    a, _ = donating(x, s2s.jit(lambda v: v + 0)(np.ones(3)))   # still usable: nothing was donated
    np.testing.assert_array_equal(a, np.full(3, 2.0))



def scale(x, n):
    return x * n


def test_dynamic_int_too_big_for_its_dtype():
    with pytest.raises(S2SError, match="Python int staged as int64, which cannot hold it"):
        s2s.make_jaxpr(scale, dynamic_argnums=1)(np.ones(2), 2**70)
    jitted = s2s.jit(scale, dynamic_argnums=1)
    for _ in range(3):   # the dispatcher's fast path for (f64[2], int) exists now
        np.testing.assert_array_equal(jitted(np.ones(2), 3), np.full(2, 3.0))
    with pytest.raises(S2SError, match="Python int staged as int64, which cannot hold it"):
        jitted(np.ones(2), 2**70)


def ones_times(x, rows, columns):
    return np.ones((rows, columns)) * x  # the error's line


@pytest.mark.parametrize("rows, columns", [(1 << 40, 1 << 40), (1 << 31, 1 << 31), (0, 1 << 62)],
                         ids=["elements", "bytes", "empty"])
@pytest.mark.parametrize("backend", ["xla", "python"])
def test_an_array_too_big_to_exist_is_numpys_value_error(backend, rows, columns):
    """XLA aborted the process (SIGABRT, "overflow in static extent product") on a shape
    whose bytes overflow int64, where NumPy, and so the Python backend, raises "array is
    too big". Both backends raise that ValueError now (NumPy's rule: the product of the
    nonzero dims, times the item size), s2s's at the line that makes the array."""
    jitted = s2s.jit(ones_times, static_argnums=(1, 2), backend=backend)
    with pytest.raises(ValueError, match="array is too big") as info:
        jitted(2.0, rows, columns)
    if backend == "xla":
        line = inspect.getsourcelines(ones_times)[1] + 1
        assert isinstance(info.value, S2SError) and info.value.where.line == line, str(info.value)
        with pytest.raises(ValueError, match="array is too big"):
            s2s.jit(ones_times, static_argnums=(1, 2)).lower(2.0, rows, columns)
    np.testing.assert_array_equal(jitted(2.0, 2, 3), np.full((2, 3), 2.0))   # the function is fine
