"""SciPy's values where they are hardest to get right: digamma and its derivative at the
signed zeros and the poles, on every backend (SciPy is the oracle for values, through
check_function; jax and SciPy's polygamma for derivatives)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st
import hypothesis.extra.numpy as hnp

import s2s
from tests.helpers import check_function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)

# ---------------------------------------------------------------------------------------
# digamma at 0 and -0.0: SciPy's -1/x (-inf and inf); nan at the negative integers.

DIGAMMA_EDGES = np.array([0.0, -0.0, -1.0, -2.0, -np.inf, np.inf, np.nan, 0.5, -0.5, 1e-300, -1e-300])


def digamma_and_trigamma(x):
    return sp.digamma(x), sp.polygamma(1, x)


def test_digamma_at_zeros_and_poles_matches_scipy():
    check_function(digamma_and_trigamma, DIGAMMA_EDGES, rtol=1e-13, atol=0)
    for backend in ("xla", "python"):
        got = np.asarray(s2s.jit(sp.digamma, backend=backend)(np.array([0.0, -0.0])))
        np.testing.assert_array_equal(got, [-np.inf, np.inf], err_msg=backend)


@pytest.mark.parametrize("backend", ["xla", "python"])
def test_digamma_derivative_at_the_poles_is_trigammas_infinity(backend):
    """d digamma / dx = polygamma(1, x), +inf at 0, -0.0 and the negative integers (SciPy's
    and jax.grad(digamma)(0.0)'s value)."""
    poles = np.array([0.0, -0.0, -1.0, -3.0])
    derivative = s2s.jit(s2s.vmap(s2s.grad(sp.digamma)), backend=backend)(poles)
    np.testing.assert_array_equal(np.asarray(derivative), sp.polygamma(1, poles))


@SETTINGS
@given(hnp.arrays(np.float64, st.sampled_from([(3,), (2, 3)]),
                  elements=st.one_of(st.floats(-30, 30), st.sampled_from([0.0, -0.0, -4.0]))))
def test_digamma_matches_scipy_with_zeros_drawn(x):
    check_function(digamma_and_trigamma, x, rtol=1e-10, atol=1e-12)
