"""s2s.autograd.scipy.signal.convolve held to autograd's own convolve: values and gradients
over axis arrangements, 'full' and 'valid' modes and contracted axes; its emitted module
and its XLA executable agree; a program calling `autograd.scipy.signal.convolve` stages it
as s2s's (autograd's is a primitive of autograd's own, whose body s2s cannot stage)."""
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import s2s
from s2s.autograd.scipy.signal import convolve
from tests.strategies import examples

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
ag_signal = pytest.importorskip("autograd.scipy.signal")


@st.composite
def convolutions(draw):
    """(A, B, axes, dot_axes, mode): each operand's convolved, contracted and kept axes in a
    drawn order, convolved pairs matched in a drawn order; in 'valid' mode one operand
    (drawn) no larger than the other along every convolved axis, as autograd requires."""
    mode = draw(st.sampled_from(["full", "valid"]))
    n_conv, n_dot = draw(st.integers(1, 2)), draw(st.integers(0, 1))
    kernel_sizes = draw(st.lists(st.integers(1, 3), min_size=n_conv, max_size=n_conv))
    if mode == "valid":
        other_sizes = [k + draw(st.integers(0, 3)) for k in kernel_sizes]
        a_conv, b_conv = (kernel_sizes, other_sizes) if draw(st.booleans()) else (other_sizes, kernel_sizes)
    else:
        a_conv, b_conv = kernel_sizes, draw(st.lists(st.integers(1, 5), min_size=n_conv, max_size=n_conv))
    dot_sizes = draw(st.lists(st.integers(1, 3), min_size=n_dot, max_size=n_dot))
    shapes, axes = [], []
    for conv_sizes in (a_conv, b_conv):
        kept = draw(st.lists(st.integers(1, 3), max_size=1))
        sizes = conv_sizes + dot_sizes + kept
        order = draw(st.permutations(range(len(sizes))))   # order[i]: the axis holding sizes[i]
        shape = [0] * len(sizes)
        for i, axis in enumerate(order):
            shape[axis] = sizes[i]
        shapes.append(tuple(shape))
        axes.append((list(order[:n_conv]), list(order[n_conv:n_conv + n_dot])))
    pairing = draw(st.permutations(range(n_conv)))   # which of B's convolved axes meets A's i-th
    conv_axes = (axes[0][0], [axes[1][0][j] for j in pairing])
    b_shape = list(shapes[1])
    for i, j in enumerate(pairing):   # B's sizes follow the pairing
        b_shape[axes[1][0][j]] = b_conv[i]
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shapes[0]), rng.standard_normal(b_shape), conv_axes,
            (axes[0][1], axes[1][1]), mode)


def autograds(fn, *args):
    """autograd's result, or None where its convolve swaps its operands back and forth
    without end (operands of one size, each larger along some convolved axis, in 'full'
    mode: its value, or its gradient's convolutions): there is no oracle."""
    try:
        return fn(*args)
    except RecursionError:
        return None


def loss(convolve, xp, A, B, axes, dot_axes, mode, weights):
    return xp.sum(xp.sin(convolve(A, B, axes=axes, dot_axes=dot_axes, mode=mode)) * weights)


@examples(25, 200)
@given(convolutions())
def test_values_and_gradients_match_autograds_convolve(case):
    A, B, axes, dot_axes, mode = case
    expected = autograds(lambda: ag_signal.convolve(A, B, axes=axes, dot_axes=dot_axes, mode=mode))
    assume(expected is not None)
    weights = np.cos(np.arange(expected.size)).reshape(expected.shape)
    theirs = autograds(autograd.grad(loss, argnum=(2, 3)), ag_signal.convolve, anp, A, B, axes, dot_axes, mode, weights)
    assume(theirs is not None)
    got = convolve(A, B, axes=axes, dot_axes=dot_axes, mode=mode)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    ours = s2s.grad(loss, argnums=(2, 3))(convolve, np, A, B, axes, dot_axes, mode, weights)
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_axes_none_convolves_every_axis():
    A, B = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4) ** 2
    for mode in ("full", "valid"):
        np.testing.assert_allclose(convolve(A, B, mode=mode), ag_signal.convolve(A, B, mode=mode), rtol=1e-13)


@pytest.mark.parametrize("mode", ["valid", "full"])
def test_negative_axes_count_from_the_end_as_numpys_do(mode):
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((3, 4, 3, 2))
    got = convolve(A, B, axes=([-2, -1], [-2, -1]), dot_axes=([-3], [0]), mode=mode)
    expected = ag_signal.convolve(A, B, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode=mode)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_full_mode_where_each_operand_is_larger_along_one_axis():
    """Where autograd's convolve recurses without end (`autograds`), SciPy's is the oracle:
    with no contracted axes, they are the same convolution."""
    scipy_signal = pytest.importorskip("scipy.signal")
    A, B = np.arange(6.0).reshape(2, 3), np.cos(np.arange(6.0)).reshape(3, 2)
    assert autograds(ag_signal.convolve, A, B) is None
    np.testing.assert_allclose(convolve(A, B), scipy_signal.convolve(A, B, mode="full", method="direct"), rtol=1e-13)


# --- a convolutional layer, as autograd's convnet example writes it -------------------------

RNG = np.random.default_rng(1)
IMAGES = RNG.standard_normal((3, 2, 8, 7))     # [data, color_in, y, x]
FILTERS = RNG.standard_normal((2, 4, 3, 2))    # [color_in, color_out, y, x]


def conv_layer(filters, images):
    return np.tanh(convolve(images, filters, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid"))


def conv_loss(filters, images):
    return np.sum(conv_layer(filters, images) ** 2)


def ag_conv_loss(filters, images):
    conv = ag_signal.convolve(images, filters, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid")
    return anp.sum(anp.tanh(conv) ** 2)


def test_a_conv_layer_agrees_in_the_emitted_module_and_under_xla():
    expected = autograd.grad(ag_conv_loss)(FILTERS, IMAGES)
    for backend in ("python", "xla"):
        np.testing.assert_allclose(s2s.jit(conv_layer, backend=backend)(FILTERS, IMAGES), conv_layer(FILTERS, IMAGES),
                                   rtol=1e-12, err_msg=backend)
        np.testing.assert_allclose(s2s.jit(s2s.grad(conv_loss), backend=backend)(FILTERS, IMAGES), expected,
                                   rtol=1e-11, err_msg=backend)
    source = s2s.emit_python(conv_layer, FILTERS, IMAGES)   # one contraction per offset of the 3x2 filter
    assert source.count("np.tensordot(filters[:, :, ") == 6 and "np.tensordot(filters[:, :, 2, 1], images[:, :, :6, :6]" in source


def test_autograds_convolve_stages_as_s2s_s():
    """A program written for autograd runs unchanged: its call of autograd's convolve (a
    primitive of autograd's own) is s2s's convolve."""
    expected = autograd.grad(ag_conv_loss)(FILTERS, IMAGES)
    np.testing.assert_allclose(s2s.grad(ag_conv_loss)(FILTERS, IMAGES), expected, rtol=1e-11)
    np.testing.assert_allclose(s2s.jit(ag_conv_loss)(FILTERS, IMAGES), ag_conv_loss(FILTERS, IMAGES), rtol=1e-12)


def test_mistakes_are_errors_with_the_fix():
    with pytest.raises(s2s.ShapeError, match="'full' or 'valid'"):
        convolve(np.ones(3), np.ones(2), mode="same")
    with pytest.raises(s2s.ShapeError, match="no larger than the other along every convolved axis"):
        convolve(np.ones((2, 5)), np.ones((4, 3)), mode="valid")
    with pytest.raises(s2s.ShapeError, match="as many axes of B as of A"):
        convolve(np.ones((2, 5)), np.ones((4, 3)), axes=([0, 1], [0]))
