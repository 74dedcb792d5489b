"""In-place updates of staged arrays (`x[i] = v`, `x[i] += v`, `out[:, j] = col`) are
functional updates with NumPy's meaning; aliasing that would make them differ is refused."""
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import s2s

rng = np.random.default_rng(0)


def rnn_states(W, h0, xs):
    H = np.zeros((xs.shape[0] + 1, h0.shape[0]))
    H[0] = h0
    for t in range(xs.shape[0]):
        H[t + 1] = np.tanh(W @ H[t] + xs[t])
    return H


def scale_columns(A):
    out = np.zeros_like(A)
    for j in range(A.shape[1]):
        out[:, j] = A[:, j] * (j + 1)
    return out


def histogram(x, bins):
    counts = np.zeros(5)
    for i in range(bins.shape[0]):
        counts[bins[i]] += x[i]
    return counts


def strided_and_fancy(x):
    y = x * 1.0
    y[::2] = -1.0
    y[np.array([1, 3])] += 10.0
    y[-1] = y[0] * 2
    return y


def copies_written(x):
    """NumPy's own idiom: copy, then write the copy (of the argument, of a slice of it, by
    .copy(), np.copy and np.array): the original stays as it was."""
    y = x.copy()
    y[0] = 1.0
    window = x[1:3].copy()
    window[0] = 5.0
    z = np.copy(x)
    z += 1.0
    w = np.array(x)
    w[1] = 7.0
    return np.concatenate([y, window, z, w, x])


def masked(x):
    y = x + 0.0
    y[np.array([True, False, True, False])] = 0.0
    y[y > 0.5] = 0.5
    return y


CASES = {
    "rnn_states": (rnn_states, lambda: (rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3),
                                        rng.standard_normal((6, 3)))),
    "scale_columns": (scale_columns, lambda: (rng.standard_normal((3, 4)),)),
    "histogram": (histogram, lambda: (rng.standard_normal(6), np.array([0, 2, 2, 4, 1, 2]))),
    "strided_and_fancy": (strided_and_fancy, lambda: (rng.standard_normal(6),)),
    "masked": (masked, lambda: (rng.standard_normal(4),)),
    "copies_written": (copies_written, lambda: (rng.standard_normal(4),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_in_place_updates_equal_numpy_on_every_path(name):
    fn, make_args = CASES[name]
    args = make_args()
    expected = fn(*[a.copy() for a in args])
    for backend in ("xla", "python"):
        np.testing.assert_allclose(s2s.jit(fn, backend=backend)(*args), expected, rtol=1e-12)


def test_a_loop_writing_rows_is_one_scan_and_differentiates_like_autograd():
    W, h0, xs = CASES["rnn_states"][1]()
    assert [e.primitive.name for e in s2s.make_jaxpr(rnn_states)(W, h0, xs).eqns].count("scan") == 1

    def rnn_lists(W, h0, xs):
        hs = [h0]
        for t in range(xs.shape[0]):
            hs.append(anp.tanh(W @ hs[-1] + xs[t]))
        return (anp.stack(hs) ** 2).sum()
    expected = autograd.grad(rnn_lists, (0, 1, 2))(W, h0, xs)
    got = s2s.grad(lambda W, h0, xs: (rnn_states(W, h0, xs) ** 2).sum(), argnums=(0, 1, 2))(W, h0, xs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


@settings(max_examples=25)
@given(start=st.integers(-6, 5), stop=st.integers(-6, 6), step=st.sampled_from([None, 1, 2, -1, 3]),
       value=st.floats(-5, 5, allow_subnormal=False))   # XLA:CPU flushes subnormals to zero
def test_slice_stores_match_numpy(start, stop, step, value):
    def store(x, v):
        y = x + 0.0
        y[start:stop:step] = v
        return y
    x = np.arange(6.0)
    expected = x.copy()
    expected[start:stop:step] = value
    np.testing.assert_array_equal(s2s.jit(store)(x, np.float64(value)), expected)


def aliased(x):
    y = x * 1.0
    z = y
    y[0] = 1.0
    return z


def through_a_view(x):
    y = x * 1.0
    v = y[1:]
    v[0] = 3.0
    return y


def writes_a_global(x):
    TABLE[0] = x.sum()
    return TABLE


TABLE = np.zeros(3)


def test_aliasing_that_numpy_would_see_is_refused():
    with pytest.raises(s2s.UnsupportedSyntaxError, match="also bound to `z`"):
        s2s.make_jaxpr(aliased)(np.ones(3))
    with pytest.raises(s2s.UnsupportedSyntaxError, match="view of `y`"):
        s2s.make_jaxpr(through_a_view)(np.ones(3))
    with pytest.raises(s2s.UnsupportedSyntaxError, match="defined outside the function"):
        s2s.make_jaxpr(writes_a_global)(np.ones(3))


def updates_its_argument(x):
    x[0] = 5.0
    return x * 2


def test_an_argument_updated_in_place_warns_once_and_is_not_written_back():
    x = np.ones(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = s2s.jit(updates_its_argument)(x)
        s2s.jit(updates_its_argument)(np.ones(4))
    assert [str(w.message).count("not written back") for w in caught] == [1]
    np.testing.assert_allclose(out, [10.0, 2.0, 2.0])
    np.testing.assert_allclose(x, 1.0)
