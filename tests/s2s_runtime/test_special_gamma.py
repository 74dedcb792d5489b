"""s2s_runtime.special_gamma: the incomplete gamma loop's pieces, held to math and mpmath
(SciPy itself is 1e-11 off at large a, so it is not the oracle there)."""
from __future__ import annotations

import math
import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s_runtime import special_gamma as sg

SETTINGS = settings(max_examples=15, deadline=None)
FNS = sg.GammaNumpyFunctions


def finite(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@SETTINGS
@given(hnp.arrays(np.float64, 5, elements=finite(10, 1e6)), hnp.arrays(np.float64, 5, elements=finite(0.05, 5)))
def test_stirling_front_matches_the_direct_form(a, ratio):
    """log(x^a e^-x / Gamma(a)) by Stirling's series against a log x - x - lgamma(a), to
    within the rounding of the large terms the direct form cancels."""
    x = a * ratio
    got = sg.log_igamma_front(a, x, FNS)
    want = [float(ai * math.log(xi) - xi - math.lgamma(ai)) for ai, xi in zip(a, x)]
    scale = np.abs(a * np.log(x)) + x      # the size of the terms the direct form cancels
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15 * np.max(scale) + 1e-12)


@SETTINGS
@given(hnp.arrays(np.float64, 6, elements=st.one_of(finite(1e-6, 0.19), finite(-0.19, -1e-6), finite(0.2, 5))))
def test_lgamma1p_keeps_small_arguments(a):
    """Against mpmath: math.lgamma(1 + a) itself is 3e-13 off at a = 2^-9 (and 1e-11 at
    a = 1e-5), where 1 + a is exact. Below 1e-17 it is -euler_gamma a to the last bit.
    From 0.2 on it is lgamma(1 + a), whose error is absolute (1.2e-14 relative at its zero,
    a = 1.1): what the Q series needs (it exponentiates it)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    want = [float(mpmath.loggamma(1 + mpmath.mpf(float(v)))) for v in a]
    got = sg.lgamma1p(a, FNS)
    assert np.all(np.isclose(got, want, rtol=1e-14, atol=np.where(np.abs(a) < 0.2, 0, 1e-15))), (got, want)
    tiny = np.array([1e-300, -1e-20, 3e-18])
    np.testing.assert_allclose(sg.lgamma1p(tiny, FNS), -0.5772156649015329 * tiny, rtol=1e-15)


def test_zeta_values():
    assert sg._zeta(2) == pytest.approx(math.pi ** 2 / 6, rel=1e-16)
    assert sg._zeta(4) == pytest.approx(math.pi ** 4 / 90, rel=1e-16)


@pytest.mark.parametrize("a, x", [(169.0, 150.0), (807.7, 850.2), (4341.7, 4300.1), (9841.8, 10000.5),
                                  (25.0, 24.0), (0.3, 2.5), (0.01, 0.2)])
def test_values_match_mpmath(a, x):
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    p = mpmath.gammainc(a, 0, x, regularized=True)
    q = mpmath.gammainc(a, x, mpmath.inf, regularized=True)
    assert float(sg.gammainc(a, x)) == pytest.approx(float(p), rel=1e-13)
    assert float(sg.gammaincc(a, x)) == pytest.approx(float(q), rel=1e-13)


@SETTINGS
@given(hnp.arrays(np.float64, 4, elements=st.one_of(finite(0.05, 3), finite(3, 300))),
       hnp.arrays(np.float64, 4, elements=finite(0.3, 3)))
def test_derivative_in_a_matches_central_differences(a, ratio):
    x = a * ratio
    step = 1e-5 * a
    central = (sg.gammainc(a + step, x) - sg.gammainc(a - step, x)) / (2 * step)
    np.testing.assert_allclose(sg.gammainc_grad_a(a, x), central, rtol=1e-6, atol=1e-12)


def test_dtype_kept_and_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (np.float32, np.float64):
            a, x = np.array([0.0, 1.0, np.inf, 2.0], dtype), np.array([1.0, 0.0, 1.0, np.nan], dtype)
            for fn in (sg.gammainc, sg.gammaincc, sg.gammainc_grad_a):
                assert fn(a, x).dtype == dtype
