"""Promotion follows NumPy 2 (NEP 50): checked against NumPy on real values."""
import itertools

import numpy as np
import pytest

import s2s
from s2s import dtypes

ARRAY_DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.float16, np.float32, np.float64]
PY_SCALARS = [True, 2, 2.5]


@pytest.mark.parametrize("a, b", list(itertools.product(ARRAY_DTYPES, repeat=2)))
def test_array_array_promotion_matches_numpy(a, b):
    expected = (np.ones(2, a) + np.ones(2, b)).dtype
    assert dtypes.result_type((np.dtype(a), False), (np.dtype(b), False)) == (expected, False)


@pytest.mark.parametrize("a, scalar", list(itertools.product(ARRAY_DTYPES, PY_SCALARS)))
def test_python_scalars_are_weak(a, scalar):
    expected = (np.ones(2, a) * scalar).dtype
    weak = dtypes.dtype_of_python_scalar(scalar)
    assert dtypes.result_type((np.dtype(a), False), (weak, True))[0] == expected


def test_float32_times_python_float_stays_float32():
    assert dtypes.result_type((dtypes.float32, False), (dtypes.float64, True)) == (dtypes.float32, False)


def test_weak_with_weak_stays_weak():
    assert dtypes.result_type((dtypes.int64, True), (dtypes.float64, True)) == (dtypes.float64, True)


def test_disabling_x64_canonicalizes_like_jax():
    try:
        s2s.config.update("enable_x64", False)
        assert dtypes.canonicalize_dtype(np.float64) == np.float32
        assert dtypes.canonicalize_dtype(np.int64) == np.int32
        closed = s2s.make_jaxpr(lambda x: x * 2.0)(np.ones(3))
        assert closed.out_avals[0].dtype == np.float32
    finally:
        s2s.config.update("enable_x64", True)
    assert dtypes.canonicalize_dtype(np.float64) == np.float64


def test_unknown_config_option_lists_known_ones():
    with pytest.raises(ValueError, match="enable_x64"):
        s2s.config.update("enable_x65", True)


def test_float0_is_zero_width():
    assert dtypes.float0.itemsize == 0
    assert dtypes.short_name(dtypes.float0) == "float0"


@pytest.mark.parametrize("name, dtype", [("f32", np.float32), ("float64", np.float64),
                                         ("i32", np.int32), ("bool", np.bool_), ("u8", np.uint8)])
def test_short_names_round_trip(name, dtype):
    assert dtypes.from_short_name(name) == dtype
    assert dtypes.from_short_name(dtypes.short_name(dtype)) == dtype
