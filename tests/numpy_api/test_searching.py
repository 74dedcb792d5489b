"""searchsorted, digitize, interp and histogram (s2s/numpy_api/searching.py): NumPy's
values on both backends, jax's jvp and vjp for interp."""
from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import S2SError
from tests.helpers import check_numpy_and_jax
from tests.strategies import examples

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

LONG_TAIL = examples(4, 25)
# Subnormals left out: XLA on CPU flushes them to zero.
FLOAT64S = st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False)


def searchsorted_both_sides(a, v):
    return np.searchsorted(a, v), np.searchsorted(a, v, side="right")


def digitize_both_ways(x, bins):
    return np.digitize(x, bins), np.digitize(x, bins[::-1], right=True)


@LONG_TAIL
@given(data=st.data())
def test_searchsorted_and_digitize(data):
    # Values drawn from a few points, so ties with the sorted array are common.
    points = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, np.nan])
    a = np.sort(data.draw(hnp.arrays(np.float64, st.integers(1, 6), elements=points)))
    v = data.draw(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                             elements=points))
    check_numpy_and_jax(searchsorted_both_sides, a, v, derivatives=False)
    bins = np.unique(a[~np.isnan(a)])
    check_numpy_and_jax(digitize_both_ways, v, bins, derivatives=False)


def test_searchsorted_with_a_sorter_and_staged_bins_of_either_direction():
    a = np.array([3.0, -1.0, 2.0, 0.0])
    v = np.array([-2.0, 0.0, 2.5, 9.0])

    def sorted_by(a, v):
        return np.searchsorted(a, v, sorter=np.argsort(a))

    check_numpy_and_jax(sorted_by, a, v, derivatives=False)
    for bins in (np.array([-1.0, 0.0, 2.0]), np.array([2.0, 0.0, -1.0])):
        check_numpy_and_jax(lambda x, bins: np.digitize(x, bins), v, bins, derivatives=False)


def interp_weighted(x, xp, fp):
    return np.interp(x, xp, fp) * np.arange(1.0, 1.0 + x.size).reshape(x.shape)


def interp_with_fill(x, xp, fp):
    return np.interp(x, xp, fp, left=-7.0, right=fp[1])


@LONG_TAIL
@given(data=st.data())
def test_interp_values_and_derivatives(data):
    n = data.draw(st.integers(2, 6), label="n")
    steps = data.draw(hnp.arrays(np.float64, n, elements=st.floats(0.25, 2.0)), label="steps")
    xp = np.cumsum(steps) - 3.0
    fp = data.draw(hnp.arrays(np.float64, n, elements=FLOAT64S), label="fp")
    x = data.draw(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                             elements=FLOAT64S), label="x")
    # Away from the knots, where interp's derivative in x jumps.
    assume(np.min(np.abs(x.reshape(-1, 1) - xp.reshape(1, -1)), initial=1.0) > 1e-3)
    check_numpy_and_jax(interp_weighted, x, xp, fp, rtol=1e-9, atol=1e-9)
    check_numpy_and_jax(interp_with_fill, x, xp, fp, rtol=1e-9, atol=1e-9)


def test_interp_at_the_knots_takes_the_right_segment_as_jax():
    xp, fp = np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0, 3.0])
    x = np.array([0.0, 1.0, 3.0, -1.0, 0.5])
    check_numpy_and_jax(interp_weighted, x, xp, fp)
    check_numpy_and_jax(lambda x, xp, fp: np.interp(x, xp[:1], fp[:1]), x, xp, fp)


def interp_periodic(x, xp, fp):
    return np.interp(x, xp, fp, period=360.0) + np.interp(x, xp, fp, period=-90.0)


@examples(3, 8)
@given(data=st.data())
def test_interp_with_a_period_is_numpys_and_differentiates_as_jax(data):
    """Angles in any order and any turn: x and xp wrap into one period, xp is sorted with
    fp, and the ends join around the circle (NumPy's and jax's normalization)."""
    n = data.draw(st.integers(2, 6), label="n")
    angles = st.floats(-700.0, 700.0, allow_subnormal=False)
    xp = data.draw(hnp.arrays(np.float64, n, elements=angles, unique=True), label="xp")
    fp = data.draw(hnp.arrays(np.float64, n, elements=FLOAT64S), label="fp")
    x = data.draw(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                             elements=angles), label="x")
    wrapped = [np.mod(v, p) for p in (360.0, 90.0) for v in (x, xp)]
    # Distinct samples after wrapping, and x away from them, where the derivative jumps.
    assume(all(len(np.unique(np.round(w, 6))) == n for w in wrapped[1::2]))
    assume(all(np.min(np.abs(np.mod(wx.reshape(-1, 1) - wxp.reshape(1, -1) + p / 2, p) - p / 2),
                      initial=1.0) > 1e-3
               for wx, wxp, p in ((wrapped[0], wrapped[1], 360.0), (wrapped[2], wrapped[3], 90.0))))
    check_numpy_and_jax(interp_periodic, x, xp, fp, rtol=1e-9, atol=1e-9)


def histograms_of_static_edges(x, w):
    return (np.histogram(x, 4, range=(-1.0, 2.0), weights=w),
            np.histogram(x, np.array([-3.0, -0.5, 0.0, 0.5, 3.0])))


def histograms_of_the_data_range(x):
    return np.histogram(x), np.histogram(x, 3, density=True)


@LONG_TAIL
@given(data=st.data())
def test_histogram(data):
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=6), label="shape")
    # Static edges: values on the edges, where NumPy's half-open bins decide.
    points = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.0, 3.0])
    x = data.draw(hnp.arrays(np.float64, shape, elements=points), label="x")
    w = data.draw(hnp.arrays(np.float64, shape, elements=FLOAT64S), label="w")
    check_numpy_and_jax(histograms_of_static_edges, x, w, derivatives=False)
    # Edges from the staged min and max, equal to NumPy's to the bit on both backends: the
    # same points often fall on them (a constant array puts its value on the middle edge).
    y = data.draw(hnp.arrays(np.float64, shape, elements=st.one_of(points, FLOAT64S)), label="y")
    check_numpy_and_jax(histograms_of_the_data_range, y, derivatives=False)
    check_numpy_and_jax(lambda y: np.histogram(y.astype(np.int32), 3), y, derivatives=False)


UNSORTED_BINS = np.array([1.0, 0.0, 2.0])


@pytest.mark.parametrize("call, match", [
    (lambda x: np.searchsorted(x, x[0], side="middle"), "side must be 'left' or 'right'"),
    (lambda x: np.searchsorted(x.reshape(2, 2), x), "must be 1-d"),
    (lambda x: np.digitize(x, UNSORTED_BINS), "monotonically"),
    (lambda x: np.interp(x, x, x[:3]), "not of the same length"),
    (lambda x: np.interp(x, x, x, period=0.0), "period must be a non-zero value"),
    (lambda x: np.histogram(x, bins="auto"), "no static shape"),
])
def test_errors_say_what_to_write(call, match):
    with pytest.raises(S2SError, match=match):
        s2s.jit(call)(np.arange(4.0))
