"""Argument description: which leaves s2s refuses, and ShapeDtype's own checks."""
import ml_dtypes
import numpy as np
import pytest

import s2s
from s2s import dtypes
from s2s.errors import ArgnumsRangeError, ArgnumsTypeError, StagingError
from s2s.frontend.args import (ShapeDtype, aval_of_arg, normalize_argnums, parse_arg_specs,
                               unsupported_argument_error, unsupported_leaf_reason)


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


def test_argnums_are_ints_or_sequences_of_them_in_the_order_given():
    assert normalize_argnums(1) == (1,)
    assert normalize_argnums((2, 0, 2)) == (2, 0, 2)
    assert normalize_argnums([np.int64(1), True]) == (1, 1)   # NumPy's ints and bools, as jax's operator.index
    assert normalize_argnums(np.int32(0)) == (0,)
    assert normalize_argnums(np.array([1, 0])) == (1, 0)
    assert all(type(a) is int for a in normalize_argnums((np.int64(3), False)))
    assert normalize_argnums(()) == ()


def test_negative_argnums_count_from_the_end_of_the_arguments():
    assert normalize_argnums((0, -1, -3), 3) == (0, 2, 0)
    assert normalize_argnums(-1, 1) == (0,)
    assert normalize_argnums((), 0) == ()


@pytest.mark.parametrize("argnums", ["a", "01", 1.0, (0, "a"), (0, 1.5), None, [0, None], object()])
def test_argnums_of_another_type_are_a_type_error(argnums):
    with pytest.raises(ArgnumsTypeError, match=r"static_argnums=.*must be an int or a sequence of ints") as info:
        normalize_argnums(argnums, 3, what="static_argnums")
    assert isinstance(info.value, TypeError) and isinstance(info.value, StagingError)


@pytest.mark.parametrize("argnums, count", [(2, 2), ((0, 5), 2), (-3, 2), (0, 0)])
def test_argnums_out_of_range_are_a_value_error(argnums, count):
    with pytest.raises(ArgnumsRangeError, match=f"argnums -?[0-9] is out of range for {count} positional") as info:
        normalize_argnums(argnums, count)
    assert isinstance(info.value, ValueError) and isinstance(info.value, StagingError)


def _total(x, y):
    return (x * y).sum()


def _raised(call):
    try:
        call()
    except Exception as error:   # the class is what is compared
        return error
    raise AssertionError("no error raised")


def _transforms(t):
    """The argnums-taking transforms of s2s (`t` = s2s) or jax, each called on (x, x)."""
    checkpointed = lambda a: t.grad(lambda x, y: t.checkpoint(_total, static_argnums=a)(x, y))
    return {"grad": lambda a: t.grad(_total, argnums=a),
            "jit static_argnums": lambda a: t.jit(_total, static_argnums=a),
            "checkpoint static_argnums": checkpointed,
            "pmap static_broadcasted_argnums": lambda a: t.pmap(_total, static_broadcasted_argnums=a)}


# jax.grad raises a TypeError for a positive argnums past the arguments and a ValueError for a
# negative one; its jit, checkpoint and pmap raise a ValueError for both, as s2s does everywhere.
@pytest.mark.parametrize("transform", list(_transforms(s2s)))
@pytest.mark.parametrize("argnums", ["a", 1.0, (0, "a"), (0, 1.5), 5, (0, -3)])
def test_argnums_errors_are_of_jaxs_classes(transform, argnums):
    jax = pytest.importorskip("jax")
    if transform == "grad" and argnums == 5:
        pytest.skip("jax.grad raises a TypeError for it, its other transforms a ValueError")
    x = np.ones((1, 3))
    theirs = _raised(lambda: _transforms(jax)[transform](argnums)(x, x))
    ours = _raised(lambda: _transforms(s2s)[transform](argnums)(x, x))
    expected = TypeError if isinstance(theirs, TypeError) else ValueError
    assert isinstance(theirs, expected) and isinstance(ours, expected), (theirs, ours)
    assert isinstance(ours, (ArgnumsTypeError, ArgnumsRangeError)), ours
