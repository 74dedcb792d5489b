"""scipy.signal.convolve and correlate on staged arrays: SciPy is the oracle for values,
shapes and dtypes (eval_jaxpr, the emitted module and XLA, via check_function),
jax.scipy.signal for derivatives (jvp and vjp, first and second order), over N-d shapes
and every mode."""
from __future__ import annotations

import jax
import jax.scipy.signal as jsig
import numpy as np
import pytest
import scipy.signal as sig
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import ShapeError
from tests.helpers import check_derivatives, check_function

MODES = ("full", "same", "valid")


@st.composite
def signal_and_kernel(draw):
    """Two arrays of one rank (1 to 3), each side 1 to 5, in1 at least in2's size on every
    axis or at most it (so 'valid' has an answer), in either order."""
    ndim = draw(st.integers(1, 3))
    small = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    large = [s + draw(st.integers(0, 2)) for s in small]
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    shapes = (large, small) if draw(st.booleans()) else (small, large)
    return tuple(rng.standard_normal(s) for s in shapes)


def convolve_full(a, b):
    return sig.convolve(a, b)


def convolve_same(a, b):
    return sig.convolve(a, b, mode="same", method="direct")


def convolve_valid(a, b):
    return sig.convolve(a, b, "valid", "fft")


def correlate_full(a, b):
    return sig.correlate(a, b)


def correlate_same(a, b):
    return sig.correlate(a, b, mode="same")


def correlate_valid(a, b):
    return sig.correlate(a, b, mode="valid")


FUNCTIONS = [convolve_full, convolve_same, convolve_valid, correlate_full, correlate_same,
             correlate_valid]


def jax_twin(fn):
    """The same call through jax.scipy.signal (which takes no `method` other than its own)."""
    name, mode = fn.__name__.split("_")
    return lambda a, b: getattr(jsig, name)(a, b, mode=mode)


@pytest.mark.parametrize("fn", FUNCTIONS)
@settings(max_examples=6, deadline=None)
@given(signal_and_kernel())
def test_values_shapes_and_dtypes_are_scipys(fn, arrays):
    check_function(fn, *arrays)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_derivatives_match_jax_scipy_signal(fn):
    rng = np.random.default_rng(1)
    for shapes in [((6,), (3,)), ((3,), (5,)), ((4, 5), (2, 3)), ((2, 3, 4), (2, 2, 3))]:
        a, b = (rng.standard_normal(s) for s in shapes)
        check_derivatives(fn, jax_twin(fn), a, b)
        loss = lambda a, b: np.sum(fn(a, b) ** 2)
        jax_loss = lambda a, b: jax.numpy.sum(jax_twin(fn)(a, b) ** 2)
        check_derivatives(s2s.grad(loss, argnums=(0, 1)), jax.grad(jax_loss, argnums=(0, 1)), a, b)


def test_complex_and_integer_arrays_keep_scipys_dtypes():
    rng = np.random.default_rng(2)
    z = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    w = rng.standard_normal((2, 2)) - 2j * rng.standard_normal((2, 2))
    for fn in FUNCTIONS:
        check_function(fn, z, w)
        check_function(fn, np.arange(12).reshape(4, 3), np.array([[1, -2], [3, 1]]))
        check_function(fn, np.arange(5.0, dtype=np.float32), np.ones(2, np.float32))


def test_scalars_multiply_as_in_scipy():
    check_function(convolve_full, np.array(2.0), np.array(-1.5))


def test_bad_shapes_and_modes_are_shape_errors_with_scipys_reason():
    with pytest.raises(ShapeError, match="same dimensionality"):
        s2s.jit(convolve_full)(np.ones(3), np.ones((2, 2)))
    with pytest.raises(ShapeError, match="one must be at least as large as the other"):
        s2s.jit(convolve_valid)(np.ones((3, 2)), np.ones((2, 3)))
    with pytest.raises(ShapeError, match="acceptable mode flags"):
        s2s.jit(lambda a, b: sig.correlate(a, b, mode="circular"))(np.ones(3), np.ones(2))
