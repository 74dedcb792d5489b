"""Hypothesis strategies shared by the StableHLO lowering tests (tests/emit/test_stablehlo_*).

The lowering tests hold the XLA-compiled result of a primitive to a NumPy reference on
drawn shapes and dtypes. Every example costs a jaxlib compile (~20-50 ms), so `SETTINGS`
keeps the number of examples per test small; the shapes are small too (a side of 0 or 1
still appears, which is where lowering rules go wrong). Domains and oracles that already
exist for the NumPy impls (tests/primitives) are imported from there rather than redone.
"""
from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from tests.strategies import small_values

SETTINGS = settings(max_examples=6)

FLOATS = [np.float64, np.float32]
INTS = [np.int8, np.int32, np.int64, np.uint8, np.uint32]
NUMERIC = FLOATS + INTS
ANY = NUMERIC + [np.bool_]


def tolerance(dtype, f64=1e-12, f32=1e-5):
    """rtol = atol for comparing XLA with NumPy: XLA and NumPy's libm differ by a few ulp, so
    float32 (ulp ~ 1.2e-7) needs a looser bound than float64; integers compare exactly."""
    return dict(rtol=f32, atol=f32) if np.dtype(dtype) == np.float32 else dict(rtol=f64, atol=f64)


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=3):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


NONFINITE = (math.nan, math.inf, -math.inf, -0.0)


@st.composite
def arrays(draw, dtypes=ANY, nonfinite=False, **shape_kwargs):
    """An array of a drawn dtype and shape (`shapes(**shape_kwargs)`) of `small_values`."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(shapes(**shape_kwargs))
    return draw(hnp.arrays(dtype, shape, elements=small_values(dtype, NONFINITE if nonfinite else ())))


def normal_array(draw, shape, dtype):
    """A standard-normal array of `shape` (seeded by a drawn int: hypothesis picks the
    shape, NumPy fills it), for the linear algebra where small integers make singular
    matrices."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return rng.standard_normal(shape).astype(dtype)


def axes_of(ndim: int, min_size: int = 0):
    """Distinct axes of an ndim-array, in any order (the primitives need not have them sorted)."""
    if ndim == 0:
        return st.just(())
    return st.lists(st.integers(0, ndim - 1), min_size=min_size, max_size=ndim,
                    unique=True).map(tuple)
