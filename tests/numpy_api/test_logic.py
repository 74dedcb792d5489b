"""np.select, isclose, allclose and array_equal (s2s/numpy_api/logic.py): NumPy's values
on both backends, jax's derivatives where the result is differentiable."""
from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import s2s
from s2s.errors import S2SError
from tests.helpers import check_numpy_and_jax
from tests.strategies import examples

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# ---------------------------------------------------------------------------------------
# select, isclose, allclose, array_equal: NumPy's values on both backends, jax's derivatives


def select_piecewise(x, y):
    return np.select([x > 1.0, x < -1.0], [x * y, y ** 2], 0.5)


def select_default_only_by_dtype(x, y):
    return np.select([x > 0.0], [x.astype(np.float32)], default=y.astype(np.float32))


def closeness(x, y):
    return (np.isclose(x, y), np.isclose(x, y, rtol=0.0, atol=0.5, equal_nan=True),
            np.isclose(x, 1), np.allclose(x, y), np.allclose(x, x + 1e-12),
            np.array_equal(x, y), np.array_equal(x, x), np.array_equal(x, y, equal_nan=True))


@examples(4, 25)
@given(data=st.data())
def test_select_and_closeness(data):
    shape = data.draw(hnp.array_shapes(max_dims=3, max_side=4), label="shape")
    values = st.sampled_from([-2.0, -1.5, 0.0, 0.25, 1.0, 1.0 + 1e-7, 3.0, np.inf, np.nan])
    x = data.draw(hnp.arrays(np.float64, shape, elements=values), label="x")
    y = np.where(data.draw(hnp.arrays(np.bool_, shape), label="tied"), x,
                 data.draw(hnp.arrays(np.float64, shape, elements=values), label="y"))
    finite = np.nan_to_num(x, posinf=2.0, nan=0.5), np.nan_to_num(y, posinf=2.0, nan=0.5)
    check_numpy_and_jax(select_piecewise, *finite)
    check_numpy_and_jax(select_default_only_by_dtype, *finite)
    check_numpy_and_jax(closeness, x, y, derivatives=False)


def first_if_shapes_differ(x):
    if np.array_equal(x, x[:1]):    # static: the shapes differ, so no cond is staged
        return x
    return x[:1]


def test_array_equal_of_different_shapes_is_false_while_staging():
    assert "cond" not in str(s2s.make_jaxpr(first_if_shapes_differ)(np.zeros(3)))
    check_numpy_and_jax(first_if_shapes_differ, np.arange(3.0))


def double_if_close(x, y):
    if np.allclose(x, y):
        return x * 2.0
    return x - y


def test_if_allclose_stages_a_cond():
    x = np.array([1.0, 2.0])
    assert "cond" in str(s2s.make_jaxpr(double_if_close)(x, x))
    check_numpy_and_jax(double_if_close, x, x)
    check_numpy_and_jax(double_if_close, x, x + 1.0)


@pytest.mark.parametrize("call, match", [
    (lambda x: np.select([x > 0], [x, x]), "same length"),
    (lambda x: np.select([x], [x]), "should be boolean"),
    (lambda x: np.select([], []), "empty condition list"),
])
def test_select_errors_say_what_to_write(call, match):
    with pytest.raises(S2SError, match=match):
        s2s.jit(call)(np.arange(3.0))
