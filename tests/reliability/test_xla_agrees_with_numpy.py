"""The XLA backend gives NumPy's results wherever NumPy defines them, as the Python backend
and eager runs do; where XLA is allowed to differ (README, "Where XLA may differ from
NumPy"), it differs only as that table says, so a jaxlib that changes it fails here first.
"""
import warnings

import numpy as np
import pytest

import s2s

INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float16, np.float32, np.float64]


def numpy_quietly(fn, *args):
    """NumPy's result, without the RuntimeWarnings it gives for x // 0 and invalid casts."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def every_backend(fn, *args, eager=True):
    """`fn(*args)` by s2s.jit on XLA, on the Python backend and (with `eager`) s2s.vmap's
    eager run over a batch of one, each as NumPy arrays."""
    with np.errstate(all="ignore"):   # NumPy's warnings, on the Python backend
        runs = {"xla": s2s.jit(fn)(*args), "python": s2s.jit(fn, backend="python")(*args)}
        if eager:
            batched = s2s.vmap(fn)(*[a[None] for a in args])
            runs["eager"] = s2s.tree_map(lambda r: r[0], batched)
    return {name: s2s.tree_map(np.asarray, out) for name, out in runs.items()}


def floor_divide(x, y):
    return x // y


def remainder(x, y):
    return x % y


def div_and_mod(x, y):
    return divmod(x, y)


def fmod(x, y):
    return np.fmod(x, y)


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: np.dtype(d).name)
def test_integer_division_by_zero_and_of_the_minimum_by_minus_one(dtype):
    """NumPy: x // 0, x % 0 and fmod(x, 0) are 0; INT_MIN // -1 is INT_MIN, its remainder 0
    (XLA's divide gave -1, 255 for uint8, and its remainder x)."""
    info = np.iinfo(dtype)
    x = np.array([7, 0, info.max, info.min, info.min, info.max, 9], dtype)
    y = np.array([0, 0, 0, 0, -1 if info.min else 2, 2, 4], dtype)
    if info.min:
        x, y = np.append(x, dtype(-7)), np.append(y, dtype(0))
    for fn in (floor_divide, remainder, div_and_mod, fmod):
        want = s2s.tree_flatten(numpy_quietly(fn, x, y))[0]
        for name, out in every_backend(fn, x, y).items():
            for got, expected in zip(s2s.tree_flatten(out)[0], want, strict=True):
                assert got.dtype == expected.dtype, (fn.__name__, name)
                np.testing.assert_array_equal(got, expected, err_msg=f"{fn.__name__} on {name}")


def cast_to(x, dtype_name):
    return x.astype(np.dtype(dtype_name))


def defined_casts(source, target):
    """Values of `source` whose truncation toward zero `target` holds (where C, and so
    NumPy, defines the cast), the bounds of `target` and the edges just inside them."""
    info = np.iinfo(target)
    candidates = [0.0, -0.0, 0.9, -0.9, 2.5, -2.5, 100.75, -100.75, float(info.max), float(info.min),
                  float(info.max) + 0.75, float(info.min) - 0.75, float(info.max) / 3, float(info.min) / 3]
    with np.errstate(over="ignore"):   # (int64's bounds are inf in float16)
        values = np.array(candidates, np.float64).astype(source)
    values = values[np.isfinite(values)]
    truncated = np.trunc(values.astype(np.float64))
    # Compared in Python's integers: float(info.max) of int64 is 2**63, out of range.
    inside = [int(info.min) <= int(t) <= int(info.max) for t in truncated]
    return values[inside]


@pytest.mark.parametrize("source", FLOATS, ids=lambda d: np.dtype(d).name)
def test_float_to_integer_casts_agree_where_numpy_defines_them(source):
    for target in INTEGERS:
        x = defined_casts(source, target)
        want = x.astype(target)
        for name, got in every_backend(cast_to, x, np.dtype(target).name, eager=False).items():
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=f"{x.dtype} -> {want.dtype} on {name}")


# ---------------------------------------------------------------------------------------
# Where XLA may differ: each row of README's table, as it stands with this jaxlib.


def count_nonzero(x):
    return np.count_nonzero(x)


def divide_by(x, s):
    return x / s


def masked(x):
    return x * (x > 0)


def test_nan_and_out_of_range_casts_saturate_on_xla():
    """NumPy leaves them undefined (a RuntimeWarning and the platform's value: INT_MIN on
    x86 for int32 and int64); XLA gives 0 for NaN and the nearest bound otherwise."""
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9])
    runs = every_backend(cast_to, x, "int32", eager=False)
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(runs["xla"], [0, info.max, info.min, info.max, info.min])
    np.testing.assert_array_equal(runs["python"], numpy_quietly(x.astype, np.int32))


def test_subnormals_are_zeros_on_xla():
    """XLA:CPU runs with flush-to-zero and denormals-are-zero; no compile option turns that
    off (`xla_cpu_ftz` only changes code generation)."""
    x = np.array([1.0, 0.0, 1e-320, 2.0])
    runs = every_backend(count_nonzero, x, eager=False)
    assert (int(runs["xla"]), int(runs["python"]), np.count_nonzero(x)) == (2, 3, 3)


def test_division_by_a_scalar_multiplies_by_its_reciprocal_on_xla():
    """XLA computes x / s, s broadcast, as x * (1 / s): within an ulp of NumPy's correctly
    rounded quotient, and 0 where 1 / s is subnormal (flushed)."""
    x = np.array([1.0, 7.0, 10.0, 1e300])
    thirds = every_backend(divide_by, x, np.float64(3.0), eager=False)
    np.testing.assert_array_equal(thirds["python"], x / 3.0)
    assert not np.array_equal(thirds["xla"], x / 3.0)
    np.testing.assert_array_max_ulp(thirds["xla"], x / 3.0, maxulp=1)
    by_huge = every_backend(divide_by, x, np.float64(1.7e308), eager=False)
    np.testing.assert_array_equal(by_huge["python"], x / 1.7e308)
    np.testing.assert_array_equal(by_huge["xla"], np.zeros(4))


def test_a_product_with_a_boolean_mask_is_a_select_on_xla():
    """x * (x > 0) is 0 where the mask is False on XLA, also at -inf and NaN, where NumPy's
    product is NaN."""
    x = np.array([-np.inf, np.nan, -2.0, 3.0])
    runs = every_backend(masked, x, eager=False)
    np.testing.assert_array_equal(runs["python"], numpy_quietly(masked, x))
    np.testing.assert_array_equal(runs["xla"], [0.0, 0.0, 0.0, 3.0])
