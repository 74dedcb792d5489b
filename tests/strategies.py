"""Hypothesis strategies shared by the test packages."""
import numpy as np
from hypothesis import strategies as st


def small_values(dtype, specials=()):
    """Small integers in `dtype`: ties and repeats are common, and sums and products of a
    few are exact in every dtype, so results do not depend on the order of a reduction.
    `specials` (NaN, infinities, -0.0) join them for floating dtypes."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind == "u":
        return st.integers(0, 4)
    if dtype.kind == "i":
        return st.integers(-4, 4)
    values = st.integers(-4, 4).map(float)
    return st.one_of(values, st.sampled_from(list(specials))) if specials else values
