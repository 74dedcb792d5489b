"""NumPy's scalar types called on staged arrays (`np.int64(x)`, `np.float32(x)`) are casts,
and np.iscomplex / np.isreal of a real dtype are known while staging: values against
NumPy on every backend, derivatives against jax."""
from __future__ import annotations

import enum

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.core import Literal
from tests.helpers import check_function, check_numpy_and_jax

FLOATS = hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                    elements=st.floats(-50, 50, allow_subnormal=False))   # XLA flushes subnormals


def gather_rows_by_truncated_column(W):
    """autograd's test_cast_to_int: the last column, truncated to ints, indexes rows."""
    rows = np.int64(W[:, -1])
    assert rows.dtype == np.int64
    return W[:, :-1][rows].sum()


def test_an_int64_cast_indexes_as_numpys_and_differentiates_through_the_rest():
    W = np.random.default_rng(0).standard_normal((5, 3))
    W[:, -1] = [0.0, 1.0, 2.7, -0.5, 3.9]
    check_numpy_and_jax(gather_rows_by_truncated_column, W)


def casts_of(x):
    return (np.float32(x), np.int64(x), np.int8(x * 0.5), np.uint8(np.abs(x)), np.bool_(x),
            np.complex128(x), np.complex64(x * 1.5), np.float16(x), np.float64(np.float32(x)))


@settings(max_examples=15, deadline=None)
@given(FLOATS)
def test_every_scalar_type_casts_a_staged_array_as_numpy(x):
    check_function(casts_of, x)


def cast_chain(x):
    return np.sum(np.float64(np.float32(x) * 3.0) + np.complex128(x).real * x)


def test_derivatives_of_float_casts_match_jax():
    check_numpy_and_jax(cast_chain, np.linspace(-2.0, 3.0, 7), rtol=1e-5, atol=1e-5)


def scaled_by_numpy_scalars(x):
    return x * np.float32(2.5) + np.int64(3)   # the int64 is strong: float64, as NumPy 2


def test_a_scalar_type_of_python_numbers_runs_as_numpy_while_staging():
    check_function(scaled_by_numpy_scalars, np.ones(2, np.float32))


def real_or_squared(x):
    """autograd's test_falseyness: the branch is chosen by np.iscomplex of a real value."""
    return np.real(x ** 2 if np.iscomplex(x) else np.sum(x))


@pytest.mark.parametrize("x", [2.0, np.float32(1.5), np.array(-3.0)])
def test_iscomplex_of_a_real_scalar_is_false_while_staging(x):
    closed = check_function(real_or_squared, x)
    assert not {"cond", "integer_pow", "mul"} & {eqn.primitive.name for eqn in closed.jaxpr.eqns}
    check_numpy_and_jax(real_or_squared, x)


def masks_of(x):
    return np.iscomplex(x), np.isreal(x), np.where(np.isreal(x), x, 0.0) * np.iscomplex(x)


@settings(max_examples=15, deadline=None)
@given(FLOATS)
def test_iscomplex_and_isreal_of_real_arrays_are_numpys_masks(x):
    check_function(masks_of, x)
    check_function(masks_of, x + 1j * (x > 0))


def test_iscomplex_of_a_complex_value_depends_on_it_and_still_cannot_choose_a_branch():
    with pytest.raises(s2s.ConcretizationError, match="needs a Python bool"):
        s2s.grad(real_or_squared, holomorphic=True)(2.0 + 1.0j)


class Factor(enum.IntEnum):
    TWO = 2


def times_enum_and_int(x):
    return x * Factor.TWO + x * 2


def test_an_int_subclass_stages_as_the_int_it_is():
    """An IntEnum operand of the result's dtype becomes the literal 2, as a plain 2 does
    (a fast path once kept the enum object itself in the jaxpr; review), so the two
    products are one computation."""
    closed = s2s.make_jaxpr(times_enum_and_int)(np.arange(3))
    literals = [v for e in closed.eqns for v in e.invars if isinstance(v, Literal)]
    assert literals and all(type(v.value) is not Factor for v in literals)
    assert str(closed).count("mul a 2:i64[]") == 2
    check_function(times_enum_and_int, np.arange(3))
