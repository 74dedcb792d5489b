"""Argument description: which leaves s2s refuses, and ShapeDtype's own checks."""
import ml_dtypes
import numpy as np
import pytest

from s2s import dtypes
from s2s.errors import StagingError
from s2s.frontend.args import (ShapeDtype, aval_of_arg, parse_arg_specs, unsupported_argument_error,
                               unsupported_leaf_reason)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint64", "float16", "float32", "float64", "complex64",
                                   "complex128", ">f8"])
def test_supported_dtypes(dtype):
    assert dtypes.is_supported(np.dtype(dtype))
    assert unsupported_leaf_reason(np.zeros(2, dtype)) is None


@pytest.mark.parametrize("dtype", [object, ml_dtypes.bfloat16, np.longdouble, np.clongdouble, "M8[s]", "m8[s]",
                                   "U2", "S2", [("a", "f4")]])
def test_unsupported_dtypes(dtype):
    assert not dtypes.is_supported(np.dtype(dtype))
    assert "dtype" in unsupported_leaf_reason(np.zeros(2, dtype))
    with pytest.raises(StagingError, match="which XLA and s2s do not compute with"):
        aval_of_arg(np.zeros(2, dtype))


def test_float0_tangents_are_supported():
    assert dtypes.is_supported(dtypes.float0)


def test_numpy_scalar_of_unsupported_dtype():
    assert unsupported_leaf_reason(np.longdouble(1.0)) is not None
    assert unsupported_leaf_reason(np.float32(1.0)) is None


def test_subclasses_with_other_operators_are_refused_and_others_are_not(tmp_path):
    masked = np.ma.masked_array([1.0], mask=[True])
    assert "MaskedArray" in unsupported_leaf_reason(masked)
    memmap = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(3,))
    assert unsupported_leaf_reason(memmap) is None


def test_error_names_the_first_bad_leaf():
    error = unsupported_argument_error([(np.ones(2), "`x`"), (np.ones(2, object), "`params['b']`")])
    assert "argument `params['b']` is an array of dtype object" in str(error)
    assert "help: convert it first" in str(error)
    assert unsupported_argument_error([(np.ones(2), "`x`"), (3, "`n`")]) is None


def test_unnamed_leaf_is_described():
    with pytest.raises(StagingError, match=r"argument \(float64\[1\] MaskedArray\) is a numpy.ma.MaskedArray"):
        aval_of_arg(np.ma.masked_array([1.0]))


def test_shape_dtype_accepts_numpy_ints_and_one_int():
    assert ShapeDtype((np.int64(3), 2), "f32").shape == (3, 2)
    assert ShapeDtype(4, np.float64).shape == (4,)
    assert ShapeDtype((0, 3), "float16").shape == (0, 3)


def test_argument_spec_with_unknown_dtype():
    with pytest.raises(StagingError, match=r"argument spec 'f31\[3\]': ShapeDtype dtype 'f31' is not a dtype"):
        parse_arg_specs("f31[3]")
