"""Hypothesis strategies shared by the test packages, and how many examples a slow
property test draws."""
import os

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

# S2S_EXHAUSTIVE=1 runs the slow property tests with their full example counts (a sweep
# before a release); the suite CI runs keeps them small, within its time on 2 cores.
EXHAUSTIVE = os.environ.get("S2S_EXHAUSTIVE") == "1"


def examples(default: int, exhaustive: int) -> settings:
    """Hypothesis settings drawing `default` examples, or `exhaustive` with S2S_EXHAUSTIVE=1."""
    return settings(max_examples=exhaustive if EXHAUSTIVE else default, deadline=None)


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
