"""Elementwise primitives: shape/dtype rules, NumPy impls and emission, held to NumPy.

Every primitive is bound directly on hypothesis-drawn arrays (shapes that broadcast,
values in the function's domain) and checked by `check_staged` against the plain NumPy
function (or `math`, or jax.scipy.special where NumPy has none): through eval_jaxpr and
through the emitted Python module.
"""
from __future__ import annotations

import math
import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.core import ShapedArray
from s2s.staging import PRIMITIVES, Primitive
from s2s.emit.pyexpr import python_rules
from s2s.emit.python import emit_jaxpr_source
from s2s.errors import ShapeError
from s2s.primitives import elementwise as ew
from tests.helpers import assert_same, check_staged, stage

SETTINGS = settings(max_examples=25, deadline=None)

FLOATS = [np.float32, np.float64]
INTS = [np.int8, np.int32, np.int64, np.uint8]
WIDE_INTS = [np.int32, np.int64]     # arithmetic that must not overflow on small values


def _tol(dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=1e-5, atol=1e-6)
    return dict(rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Element strategies. A domain is `dtype -> strategy of elements`.


def _inward(lo, hi, dtype):
    """Bounds rounded inward to values `dtype` represents (hypothesis needs them exact)."""
    lo_t, hi_t = dtype.type(lo), dtype.type(hi)
    if float(lo_t) < lo:
        lo_t = np.nextafter(lo_t, dtype.type(np.inf))
    if float(hi_t) > hi:
        hi_t = np.nextafter(hi_t, dtype.type(-np.inf))
    return float(lo_t), float(hi_t)


def _elements(dtype, lo, hi):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        lo, hi = _inward(lo, hi, dtype)
        return st.floats(lo, hi, width=8 * dtype.itemsize, allow_nan=False,
                         allow_infinity=False, allow_subnormal=False)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(math.ceil(lo), int(info.min)), min(math.floor(hi), int(info.max))
        return st.integers(lo, hi) if lo <= hi else st.nothing()
    return st.booleans()



def span(lo, hi):
    return lambda dtype: _elements(dtype, lo, hi)


def away_from_zero(lo, hi):
    """|v| in [lo, hi], either sign (positive only for unsigned dtypes)."""
    return lambda dtype: st.one_of(_elements(dtype, lo, hi), _elements(dtype, -hi, -lo))


def divisors(lo, hi):
    """|v| in [lo, hi] of either sign, or 0: division by zero has a value everywhere (inf
    or nan for floats; 0 for integers, as in NumPy)."""
    return lambda dtype: st.one_of(_elements(dtype, 0, 0), away_from_zero(lo, hi)(dtype))


def not_a_pole(lo, hi):
    """[lo, hi] without 0, -1, -2, ... (the poles of Gamma)."""
    return lambda dtype: _elements(dtype, lo, hi).filter(lambda v: v > 0 or v != math.floor(v))


def any_float(dtype):
    return st.floats(width=8 * np.dtype(dtype).itemsize)   # nan and +-inf included


def few_values(dtype):
    """A small pool, so that comparisons see equal operands (and nan) often."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return st.sampled_from([-1.5, -1.0, 0.0, 1.0, 2.5, math.nan])
    if dtype.kind in "iu":
        return _elements(dtype, -2, 2)
    return st.booleans()


def full_range(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return st.booleans()
    info = np.iinfo(dtype)
    return st.integers(int(info.min), int(info.max))


def shapes():
    return hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)


def broadcastable(n):
    return hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3, max_side=3)


# ---------------------------------------------------------------------------------------
# Oracles


def vectorized(fn):
    """A scalar math function over arrays, computed in float64, in the input's dtype."""
    vec = np.vectorize(fn, otypes=[np.float64])
    return lambda x: np.asarray(vec(x)).astype(x.dtype)[()]


def digamma_oracle(x):
    jax = pytest.importorskip("jax")
    from jax.scipy.special import digamma
    with jax.enable_x64(True):
        return np.asarray(digamma(np.asarray(x, np.float64))).astype(x.dtype)[()]


def polygamma_oracle(n):
    jax = pytest.importorskip("jax")
    from jax.scipy.special import polygamma

    def oracle(x):
        with jax.enable_x64(True):
            return np.asarray(polygamma(n, np.asarray(x, np.float64))).astype(x.dtype)[()]
    return oracle


def logistic_oracle(x):
    return 1 / (1 + np.exp(-x))


def trunc_div_oracle(x, y):
    """Division rounding toward zero, in Python's integers: an integer divided by zero is 0
    (NumPy's x // 0), and INT_MIN / -1 wraps around to INT_MIN (two's complement)."""
    dtype = np.result_type(x, y)
    if dtype.kind == "f":
        return np.true_divide(x, y)

    def quotient(a, b):
        q = 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return q % 2 ** (8 * dtype.itemsize)
    exact = np.vectorize(quotient, otypes=[object])(np.asarray(x).astype(object), np.asarray(y).astype(object))
    return np.asarray(exact).astype(np.uint64).astype(dtype)[()]


# name -> (primitive, NumPy reference, domain, dtypes)
UNARY_CASES = {
    "exp": (ew.exp, np.exp, span(-20, 20), FLOATS),
    "log": (ew.log, np.log, span(2.0 ** -10, 1e3), FLOATS),
    "log1p": (ew.log1p, np.log1p, span(-0.9921875, 1e3), FLOATS),
    "expm1": (ew.expm1, np.expm1, span(-20, 20), FLOATS),
    "sin": (ew.sin, np.sin, span(-10, 10), FLOATS),
    "cos": (ew.cos, np.cos, span(-10, 10), FLOATS),
    "tan": (ew.tan, np.tan, span(-1.5, 1.5), FLOATS),
    "asin": (ew.asin, np.arcsin, span(-1, 1), FLOATS),
    "acos": (ew.acos, np.arccos, span(-1, 1), FLOATS),
    "atan": (ew.atan, np.arctan, span(-100, 100), FLOATS),
    "sinh": (ew.sinh, np.sinh, span(-20, 20), FLOATS),
    "cosh": (ew.cosh, np.cosh, span(-20, 20), FLOATS),
    "tanh": (ew.tanh, np.tanh, span(-20, 20), FLOATS),
    "asinh": (ew.asinh, np.arcsinh, span(-100, 100), FLOATS),
    "acosh": (ew.acosh, np.arccosh, span(1, 100), FLOATS),
    "atanh": (ew.atanh, np.arctanh, span(-0.9921875, 0.9921875), FLOATS),
    "sqrt": (ew.sqrt, np.sqrt, span(0, 100), FLOATS),
    "cbrt": (ew.cbrt, np.cbrt, span(-100, 100), FLOATS),
    "logistic": (ew.logistic, logistic_oracle, span(-30, 30), FLOATS),
    "erf": (ew.erf, vectorized(math.erf), span(-5, 5), FLOATS),
    "erfc": (ew.erfc, vectorized(math.erfc), span(-5, 25), FLOATS),
    "lgamma": (ew.lgamma, vectorized(math.lgamma), not_a_pole(-10, 30), FLOATS),
    "digamma": (ew.digamma, digamma_oracle, not_a_pole(-10, 30), FLOATS),
    "floor": (ew.floor, np.floor, span(-100, 100), FLOATS),
    "ceil": (ew.ceil, np.ceil, span(-100, 100), FLOATS),
    "round": (ew.round, np.round, span(-100, 100), FLOATS),
    "abs": (ew.abs, np.abs, span(-100, 100), FLOATS + INTS),
    "sign": (ew.sign, np.sign, span(-100, 100), FLOATS + INTS),
    "is_finite": (ew.is_finite, np.isfinite, any_float, FLOATS),
    "rsqrt": (ew.rsqrt, lambda x: 1 / np.sqrt(x), span(2.0 ** -10, 100), FLOATS),
    "neg": (ew.neg, np.negative, span(-100, 100), FLOATS + INTS),
    "not": (ew.not_, np.invert, full_range, INTS + [np.bool_]),
}

# name -> (primitive, NumPy reference, dtypes, domain of x, domain of y)
BINARY_CASES = {
    "add": (ew.add, np.add, FLOATS + WIDE_INTS, span(-1000, 1000), span(-1000, 1000)),
    "add_any": (ew.add_any, np.add, FLOATS + WIDE_INTS, span(-1000, 1000), span(-1000, 1000)),
    "sub": (ew.sub, np.subtract, FLOATS + WIDE_INTS, span(-1000, 1000), span(-1000, 1000)),
    "mul": (ew.mul, np.multiply, FLOATS + WIDE_INTS, span(-1000, 1000), span(-1000, 1000)),
    "max": (ew.max, np.maximum, FLOATS + INTS, span(-100, 100), span(-100, 100)),
    "min": (ew.min, np.minimum, FLOATS + INTS, span(-100, 100), span(-100, 100)),
    "atan2": (ew.atan2, np.arctan2, FLOATS, span(-10, 10), span(-10, 10)),
    "rem": (ew.rem, np.fmod, FLOATS + INTS, span(-100, 100), divisors(1, 10)),
    "pow": (ew.pow, np.power, FLOATS, span(2.0 ** -4, 8), span(-4, 4)),
    "div": (ew.div, trunc_div_oracle, FLOATS + INTS, span(-100, 100), divisors(1, 10)),
    "eq": (ew.eq, np.equal, FLOATS + INTS + [np.bool_], few_values, few_values),
    "ne": (ew.ne, np.not_equal, FLOATS + INTS + [np.bool_], few_values, few_values),
    "lt": (ew.lt, np.less, FLOATS + INTS, few_values, few_values),
    "le": (ew.le, np.less_equal, FLOATS + INTS, few_values, few_values),
    "gt": (ew.gt, np.greater, FLOATS + INTS, few_values, few_values),
    "ge": (ew.ge, np.greater_equal, FLOATS + INTS, few_values, few_values),
    "and": (ew.and_, np.bitwise_and, INTS + [np.bool_], full_range, full_range),
    "or": (ew.or_, np.bitwise_or, INTS + [np.bool_], full_range, full_range),
    "xor": (ew.xor, np.bitwise_xor, INTS + [np.bool_], full_range, full_range),
}

BOOL_RESULT = {"eq", "ne", "lt", "le", "gt", "ge", "is_finite"}
OTHER = {"select", "clamp", "convert_element_type", "iota", "stop_gradient", "integer_pow",
         "polygamma"}


def test_every_elementwise_primitive_is_tested_and_emittable():
    declared = {p.name for p in vars(ew).values() if isinstance(p, Primitive)}
    tested = set(UNARY_CASES) | set(BINARY_CASES) | OTHER
    assert declared == tested, (declared - tested, tested - declared)
    assert set(ew.UNARY) <= set(UNARY_CASES) | {"polygamma"}
    for name in tested:
        assert PRIMITIVES[name] in python_rules, name


# ---------------------------------------------------------------------------------------
# Values against NumPy


@pytest.mark.parametrize("name", sorted(UNARY_CASES))
@SETTINGS
@given(data=st.data())
def test_unary_matches_numpy(name, data):
    prim, reference, domain, dtypes_ = UNARY_CASES[name]
    dtype = np.dtype(data.draw(st.sampled_from(dtypes_), label="dtype"))
    x = data.draw(hnp.arrays(dtype, shapes(), elements=domain(dtype)), label="x")
    closed = check_staged(prim.bind, reference, x, **_tol(dtype))
    out = closed.out_avals[0]
    assert out.shape == x.shape
    assert out.dtype == (np.bool_ if name in BOOL_RESULT else dtype)


@pytest.mark.parametrize("name", sorted(BINARY_CASES))
@SETTINGS
@given(data=st.data())
def test_binary_matches_numpy(name, data):
    prim, reference, dtypes_, x_domain, y_domain = BINARY_CASES[name]
    dtype = np.dtype(data.draw(st.sampled_from(dtypes_), label="dtype"))
    bshapes = data.draw(broadcastable(2), label="shapes")
    x = data.draw(hnp.arrays(dtype, bshapes.input_shapes[0], elements=x_domain(dtype)), label="x")
    y = data.draw(hnp.arrays(dtype, bshapes.input_shapes[1], elements=y_domain(dtype)), label="y")
    closed = check_staged(prim.bind, reference, x, y, **_tol(dtype))
    out = closed.out_avals[0]
    assert out.shape == bshapes.result_shape == np.broadcast_shapes(x.shape, y.shape)
    assert out.dtype == (np.bool_ if name in BOOL_RESULT else dtype)


@SETTINGS
@given(data=st.data(), y=st.integers(-3, 5))
def test_integer_pow_matches_numpy(data, y):
    dtype = np.dtype(data.draw(st.sampled_from(FLOATS + WIDE_INTS if y >= 0 else FLOATS)))
    domain = span(-10, 10) if y >= 0 else away_from_zero(0.25, 4)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=domain(dtype)))
    check_staged(lambda a: ew.integer_pow.bind(a, y=y), lambda a: np.power(a, y), x, **_tol(dtype))


@SETTINGS
@given(data=st.data(), n=st.integers(1, 3), dtype=st.sampled_from(FLOATS))
def test_polygamma_matches_jax_on_positive_x(data, n, dtype):
    """jax.scipy.special.polygamma is right for x > 0 only; tests/s2s_runtime covers x < 0."""
    dtype = np.dtype(dtype)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=span(2.0 ** -4, 50)(dtype)))
    closed = check_staged(lambda a: ew.polygamma.bind(a, n=n), polygamma_oracle(n), x,
                          **_tol(dtype))
    assert closed.out_avals[0] == ShapedArray(x.shape, dtype)


def test_polygamma_shape_rule_and_emission():
    weak = ShapedArray((2, 1), np.float32, weak_type=True)
    assert ew.polygamma.abstract_eval(weak, n=2) == weak
    with pytest.raises(ShapeError, match="floating-point"):
        ew.polygamma.abstract_eval(ShapedArray((3,), np.int32), n=1)
    closed, _ = stage(lambda a: ew.polygamma.bind(a, n=2), X)
    assert "rt.polygamma(2, x)" in emit_jaxpr_source(closed, "f", arg_names=["x"])


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS + WIDE_INTS + [np.bool_]))
def test_select_matches_where(data, dtype):
    dtype = np.dtype(dtype)
    bshapes = data.draw(broadcastable(3))
    pred = data.draw(hnp.arrays(np.bool_, bshapes.input_shapes[0]))
    elements = span(-100, 100)(dtype)
    a = data.draw(hnp.arrays(dtype, bshapes.input_shapes[1], elements=elements))
    b = data.draw(hnp.arrays(dtype, bshapes.input_shapes[2], elements=elements))
    closed = check_staged(ew.select.bind, np.where, pred, a, b)
    assert closed.out_avals[0] == ShapedArray(bshapes.result_shape, dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS + INTS))
def test_clamp_matches_clip(data, dtype):
    """clamp(lo, x, hi) is np.clip(x, lo, hi), also where lo > hi (hi wins)."""
    dtype = np.dtype(dtype)
    bshapes = data.draw(broadcastable(3))
    lo, x, hi = (data.draw(hnp.arrays(dtype, s, elements=span(-100, 100)(dtype)))
                 for s in bshapes.input_shapes)
    closed = check_staged(ew.clamp.bind, lambda lo, x, hi: np.clip(x, lo, hi), lo, x, hi)
    assert closed.out_avals[0] == ShapedArray(bshapes.result_shape, dtype)


CONVERTIBLE = FLOATS + [np.int8, np.int32, np.int64, np.bool_]


@SETTINGS
@given(data=st.data(), src=st.sampled_from(CONVERTIBLE), dst=st.sampled_from(CONVERTIBLE))
def test_convert_element_type_matches_astype(data, src, dst):
    src, dst = np.dtype(src), np.dtype(dst)
    # Values every destination holds (float -> int truncates toward zero, as astype does).
    x = data.draw(hnp.arrays(src, shapes(), elements=span(-100, 100)(src)))
    closed = check_staged(
        lambda a: ew.convert_element_type.bind(a, new_dtype=dst, weak_type=False),
        lambda a: a.astype(dst), x)
    assert closed.out_avals[0] == ShapedArray(x.shape, dst)


@SETTINGS
@given(dtype=st.sampled_from(FLOATS + WIDE_INTS),
       shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4), data=st.data())
def test_iota_matches_indices(dtype, shape, data):
    dimension = data.draw(st.integers(0, len(shape) - 1))
    dtype = np.dtype(dtype)
    closed = check_staged(lambda: ew.iota.bind(dtype=dtype, shape=shape, dimension=dimension),
                          lambda: np.indices(shape, dtype=dtype)[dimension])
    assert closed.out_avals[0] == ShapedArray(shape, dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(FLOATS + INTS + [np.bool_]))
def test_stop_gradient_is_the_identity(data, dtype):
    dtype = np.dtype(dtype)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=span(-100, 100)(dtype)))
    closed = check_staged(ew.stop_gradient.bind, lambda a: a, x)
    assert closed.out_avals[0] == ShapedArray(x.shape, dtype)
    weak = ShapedArray((), dtype, weak_type=True)
    assert ew.stop_gradient.abstract_eval(weak) == weak


# ---------------------------------------------------------------------------------------
# Edge values NumPy defines exactly


def test_round_is_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])
    closed = check_staged(ew.round.bind, np.round, x)
    np.testing.assert_array_equal(ew.round.bind(x), [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0])
    assert closed.out_avals[0].dtype == np.float64


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_rem_and_div_round_toward_zero(dtype):
    x = np.array([7, -7, 7, -7, 0, 6], dtype=dtype)
    y = np.array([2, 2, -2, -2, -3, 3], dtype=dtype)
    assert_same(ew.rem.bind(x, y), np.array([1, -1, 1, -1, 0, 0], dtype=dtype))
    check_staged(ew.rem.bind, np.fmod, x, y)
    if np.dtype(dtype).kind == "i":
        assert_same(ew.div.bind(x, y), np.array([3, -3, -3, 3, 0, 2], dtype=dtype))
        check_staged(ew.div.bind, trunc_div_oracle, x, y)


def test_integer_division_of_the_minimum_value():
    x = np.array([-128, 127, -128, -128], dtype=np.int8)
    y = np.array([3, -3, -3, -128], dtype=np.int8)
    closed = check_staged(ew.div.bind, trunc_div_oracle, x, y)
    assert_same(ew.div.bind(x, y), np.array([-42, -42, 42, 1], dtype=np.int8))
    assert closed.out_avals[0] == ShapedArray((4,), np.int8)


def test_integer_division_of_scalars():
    x, y = np.int32(-7), np.int32(2)
    check_staged(ew.div.bind, lambda a, b: np.int32(-3), x, y)


def test_max_min_propagate_nan():
    x = np.array([np.nan, 1.0, 2.0])
    y = np.array([0.0, np.nan, 1.0])
    check_staged(ew.max.bind, np.maximum, x, y)
    check_staged(ew.min.bind, np.minimum, x, y)
    assert np.isnan(ew.max.bind(x, y)[:2]).all() and np.isnan(ew.min.bind(x, y)[:2]).all()


def test_is_finite_on_special_values():
    x = np.array([0.0, -1.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    closed = check_staged(ew.is_finite.bind, np.isfinite, x)
    assert closed.out_avals[0] == ShapedArray((5,), np.bool_)
    np.testing.assert_array_equal(ew.is_finite.bind(x), [True, True, False, False, False])


@pytest.mark.parametrize("dtype", FLOATS)
def test_logistic_saturates_without_warnings(dtype):
    x = np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], dtype=dtype)
    expected = np.array([0.0, math.exp(-100), 0.5, 1.0, 1.0]).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_staged(ew.logistic.bind, lambda a: expected, x, rtol=1e-5, atol=0)


@pytest.mark.parametrize("y", [0, 1, 2, 3])
def test_integer_pow_small_exponents(y):
    x = np.array([-2, -1, 0, 3], dtype=np.int32)
    check_staged(lambda a: ew.integer_pow.bind(a, y=y), lambda a: a ** y, x)


def test_not_of_a_bool_literal_is_a_bool():
    """A bare `~True` would be Python's int -2; the emitted code must invert a NumPy bool."""
    mask = np.array([True, False])
    fn = lambda m: ew.and_.bind(ew.not_.bind(True), m)
    closed = check_staged(fn, lambda m: np.zeros(2, bool), mask)
    source = emit_jaxpr_source(closed, "f", arg_names=["m"])
    assert "~True" not in source, source
    check_staged(lambda m: ew.xor.bind(ew.not_.bind(False), m), np.logical_not, mask)


def test_select_with_a_scalar_predicate_and_literal_branches():
    x = np.arange(3.0, dtype=np.float32)
    check_staged(lambda p, a: ew.select.bind(p, a, np.float32(-1.0)),
                 lambda p, a: np.where(p, a, np.float32(-1.0)), np.bool_(False), x)
    check_staged(lambda p, a: ew.select.bind(p, a, np.float32(-1.0)),
                 lambda p, a: np.where(p, a, np.float32(-1.0)), np.bool_(True), x)


def test_eager_bind_runs_numpy_and_keeps_dtype():
    x = np.array([1.0, 4.0], dtype=np.float32)
    assert_same(ew.sqrt.bind(x), np.array([1.0, 2.0], np.float32))
    assert_same(ew.add.bind(x, x), np.array([2.0, 8.0], np.float32))
    assert_same(ew.lt.bind(x, np.float32(2.0)), np.array([True, False]))
    assert_same(ew.rsqrt.bind(x), np.array([1.0, 0.5], np.float32))


# ---------------------------------------------------------------------------------------
# Shape and dtype rules


def _accepted_dtype(name):
    if name in UNARY_CASES:
        return np.dtype(UNARY_CASES[name][3][0])
    return np.dtype(BINARY_CASES[name][2][0])


@pytest.mark.parametrize("name", sorted(UNARY_CASES) + sorted(BINARY_CASES))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_shape_rule_broadcasts_and_keeps_dtype(name, data):
    prim = PRIMITIVES[name]
    n = 1 if name in UNARY_CASES else 2
    bshapes = data.draw(broadcastable(n))
    weak = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    dtype = _accepted_dtype(name)
    avals = [ShapedArray(s, dtype, w) for s, w in zip(bshapes.input_shapes, weak)]
    out = prim.abstract_eval(*avals)
    assert out.shape == bshapes.result_shape == np.broadcast_shapes(*bshapes.input_shapes)
    assert out.dtype == (np.bool_ if name in BOOL_RESULT else dtype)
    assert out.weak_type == all(weak)


@settings(max_examples=20, deadline=None)
@given(bshapes=broadcastable(3), weak=st.lists(st.booleans(), min_size=3, max_size=3))
def test_select_and_clamp_shape_rules(bshapes, weak):
    s0, s1, s2 = bshapes.input_shapes
    f32 = np.dtype(np.float32)
    out = ew.select.abstract_eval(ShapedArray(s0, np.bool_, weak[0]), ShapedArray(s1, f32, weak[1]),
                                  ShapedArray(s2, f32, weak[2]))
    assert out == ShapedArray(bshapes.result_shape, f32, weak[1] and weak[2])
    out = ew.clamp.abstract_eval(*[ShapedArray(s, f32, w) for s, w in zip(bshapes.input_shapes, weak)])
    assert out == ShapedArray(bshapes.result_shape, f32, all(weak))


def test_convert_element_type_sets_dtype_and_weak_type():
    x = ShapedArray((2, 3), np.float64)
    assert ew.convert_element_type.abstract_eval(x, new_dtype=np.dtype(np.int32), weak_type=False) \
        == ShapedArray((2, 3), np.int32)
    assert ew.convert_element_type.abstract_eval(x, new_dtype=np.dtype(np.float32), weak_type=True) \
        == ShapedArray((2, 3), np.float32, weak_type=True)


def test_integer_pow_keeps_dtype_and_weak_type():
    assert ew.integer_pow.abstract_eval(ShapedArray((2,), np.int8), y=3) == ShapedArray((2,), np.int8)
    weak = ShapedArray((), np.float64, weak_type=True)
    assert ew.integer_pow.abstract_eval(weak, y=-2) == weak


def _avals(*specs):
    return [ShapedArray(shape, dtype) for shape, dtype in specs]


F32, F64, I32, B = np.float32, np.float64, np.int32, np.bool_

# (primitive, operand (shape, dtype)s, params, message)
SHAPE_ERRORS = [
    # mismatched dtypes
    (ew.add, [((3,), F32), ((3,), F64)], {}, "one dtype"),
    (ew.eq, [((3,), I32), ((3,), F32)], {}, "one dtype"),
    (ew.and_, [((3,), B), ((3,), I32)], {}, "one dtype"),
    (ew.select, [((3,), B), ((3,), F32), ((3,), F64)], {}, "one dtype"),
    (ew.clamp, [((), F32), ((3,), F64), ((), F32)], {}, "one dtype"),
    # shapes that do not broadcast
    (ew.add, [((2, 3), F32), ((4,), F32)], {}, "could not be broadcast"),
    (ew.lt, [((2,), F64), ((3,), F64)], {}, "could not be broadcast"),
    (ew.select, [((2,), B), ((3,), F32), ((3,), F32)], {}, "could not be broadcast"),
    (ew.clamp, [((2,), F32), ((3,), F32), ((), F32)], {}, "could not be broadcast"),
    (ew.mul, [((0,), F32), ((2,), F32)], {}, "could not be broadcast"),
    # float-only operations on integers
    *[(PRIMITIVES[n], [((3,), I32)], {}, "floating-point")
      for n in sorted(UNARY_CASES) if UNARY_CASES[n][3] == FLOATS],
    (ew.atan2, [((3,), I32), ((3,), I32)], {}, "floating-point"),
    (ew.pow, [((3,), I32), ((3,), I32)], {}, "floating-point"),
    (ew.integer_pow, [((3,), I32)], {"y": -2}, "negative exponent"),
    # numeric operations on booleans
    *[(PRIMITIVES[n], [((3,), B)] * 2, {}, "numeric")
      for n in ("add", "sub", "mul", "max", "min", "rem", "div", "lt", "le", "gt", "ge")],
    (ew.neg, [((3,), B)], {}, "numeric"),
    (ew.abs, [((3,), B)], {}, "numeric"),
    (ew.integer_pow, [((3,), B)], {"y": 2}, "numeric"),
    (ew.clamp, [((), B), ((3,), B), ((), B)], {}, "numeric"),
    # logic operations on floats
    (ew.and_, [((3,), F32), ((3,), F32)], {}, "integer or boolean"),
    (ew.or_, [((3,), F64), ((3,), F64)], {}, "integer or boolean"),
    (ew.xor, [((3,), F64), ((3,), F64)], {}, "integer or boolean"),
    (ew.not_, [((3,), F32)], {}, "integer or boolean"),
    # select's predicate
    (ew.select, [((3,), I32), ((3,), F32), ((3,), F32)], {}, "boolean predicate"),
    (ew.select, [((3,), F32), ((3,), F32), ((3,), F32)], {}, "boolean predicate"),
]


@pytest.mark.parametrize("prim, specs, params, message", SHAPE_ERRORS,
                         ids=lambda v: v.name if isinstance(v, Primitive) else None)
def test_shape_errors(prim, specs, params, message):
    with pytest.raises(ShapeError, match=message):
        prim.abstract_eval(*_avals(*specs), **params)
    arrays = [np.ones(shape, dtype) for shape, dtype in specs]
    with pytest.raises(ShapeError, match=message):      # eagerly
        prim.bind(*arrays, **params)
    with pytest.raises(ShapeError, match=message):      # staged
        stage(lambda *a: prim.bind(*a, **params), *arrays)


@pytest.mark.parametrize("shape, dimension", [((3, 4), 2), ((3, 4), -1), ((), 0), ((5,), 1)])
def test_iota_dimension_out_of_range(shape, dimension):
    params = dict(dtype=np.dtype(np.int32), shape=shape, dimension=dimension)
    with pytest.raises(ShapeError, match="out of range"):
        ew.iota.abstract_eval(**params)
    with pytest.raises(ShapeError, match="out of range"):
        stage(lambda: ew.iota.bind(**params))


def test_shape_error_names_the_shapes():
    with pytest.raises(ShapeError) as info:
        ew.add.abstract_eval(*_avals(((2, 3), F32), ((4,), F32)))
    assert "(2, 3)" in info.value.what and "(4" in info.value.what
    with pytest.raises(ShapeError) as info:
        ew.add.abstract_eval(*_avals(((3,), F32), ((3,), F64)))
    assert "f32[3]" in info.value.what and "f64[3]" in info.value.what


# ---------------------------------------------------------------------------------------
# Emitted Python

X = np.arange(1.0, 4.0)
X32 = X.astype(np.float32)
I = np.array([7, -7, 5], dtype=np.int32)
J = np.array([2, 2, -3], dtype=np.int32)
P = np.array([True, False, True])


def _convert(a, dtype):
    return ew.convert_element_type.bind(a, new_dtype=np.dtype(dtype), weak_type=False)


# (function, NumPy reference, args, argument names, text the module must contain)
EMISSION_CASES = [
    (ew.add.bind, np.add, (X, X), "xy", "x + y"),
    (ew.tanh.bind, np.tanh, (X,), "x", "np.tanh(x)"),
    (ew.asin.bind, np.arcsin, (X / 4,), "x", "np.arcsin(x)"),
    (lambda a: ew.integer_pow.bind(a, y=2), np.square, (X,), "x", "x ** 2"),
    (lambda a: ew.integer_pow.bind(a, y=-2), lambda a: a ** -2.0, (X,), "x", "x ** -2"),
    (ew.select.bind, np.where, (P, X, -X), "pab", "np.where(p, a, b)"),
    (lambda a: _convert(a, np.float32), lambda a: a.astype(np.float32), (X,), "x",
     "x.astype(np.float32)"),
    (lambda a: _convert(a, np.float32), lambda a: np.float32(a), (np.float64(2.5),), "x",
     "np.float32(x)"),
    (lambda a: _convert(a, np.int32), lambda a: np.int32(a), (np.float64(-2.7),), "x",
     "np.int32(x)"),
    (ew.div.bind, np.divide, (X, X + 1), "xy", "x / y"),
    (ew.div.bind, trunc_div_oracle, (I, J), "xy", "rt.trunc_divide(x, y)"),
    (ew.rem.bind, np.fmod, (I, J), "xy", "np.fmod(x, y)"),
    (ew.rsqrt.bind, lambda a: 1 / np.sqrt(a), (X32,), "x", "1 / np.sqrt(x)"),
    (ew.neg.bind, np.negative, (X,), "x", "-x"),
    (ew.not_.bind, np.invert, (P,), "m", "~m"),
    (ew.clamp.bind, lambda lo, a, hi: np.clip(a, lo, hi), (np.float64(1.5), X, np.float64(2.5)),
     ["lo", "x", "hi"], "np.clip(x, lo, hi)"),
    (ew.erf.bind, vectorized(math.erf), (X,), "x", "rt.erf(x)"),
    (ew.erfc.bind, vectorized(math.erfc), (X,), "x", "rt.erfc(x)"),
    (ew.logistic.bind, logistic_oracle, (X,), "x", "rt.logistic(x)"),
    (ew.max.bind, np.maximum, (X, -X), "xy", "np.maximum(x, y)"),
    (ew.atan2.bind, np.arctan2, (X, -X), "xy", "np.arctan2(x, y)"),
    (ew.pow.bind, np.power, (X, X), "xy", "x ** y"),
    (ew.eq.bind, np.equal, (I, J), "xy", "x == y"),
    (ew.and_.bind, np.bitwise_and, (I, J), "xy", "x & y"),
    (ew.xor.bind, np.bitwise_xor, (P, P), "pq", "p ^ q"),
    (ew.is_finite.bind, np.isfinite, (X,), "x", "np.isfinite(x)"),
    (lambda: ew.iota.bind(dtype=np.dtype(np.int32), shape=(4,), dimension=0),
     lambda: np.arange(4, dtype=np.int32), (), "", "np.arange(4, dtype=np.int32)"),
    (lambda: ew.iota.bind(dtype=np.dtype(np.float32), shape=(2, 3), dimension=1),
     lambda: np.indices((2, 3), dtype=np.float32)[1], (), "", "rt.iota(np.float32, (2, 3), 1)"),
    # Scalar literals: Python's (weak, float64) written bare, NumPy's typed.
    (lambda a: ew.add.bind(a, 2.0), lambda a: a + 2.0, (X,), "x", "x + 2.0"),
    (lambda a: ew.mul.bind(a, np.float32(0.5)), lambda a: a * np.float32(0.5), (X32,), "x",
     "x * np.float32(0.5)"),
    (lambda a: ew.div.bind(a, np.int32(2)), lambda a: trunc_div_oracle(a, np.int32(2)), (I,), "x",
     "rt.trunc_divide(x, np.int32(2))"),
    (lambda a: ew.select.bind(ew.gt.bind(a, 2.0), a, 0.0), lambda a: np.where(a > 2, a, 0.0),
     (X,), "x", "np.where(x > 2.0, x, 0.0)"),
    # Precedence: parentheses exactly where Python needs them.
    (lambda a, b: ew.mul.bind(ew.add.bind(a, b), b), lambda a, b: (a + b) * b, (X, X), "xy",
     "(x + y) * y"),
    (lambda a, b: ew.sub.bind(a, ew.sub.bind(b, a)), lambda a, b: a - (b - a), (X, X), "xy",
     "x - (y - x)"),
    (lambda a: ew.neg.bind(ew.integer_pow.bind(a, y=2)), lambda a: -(a ** 2), (X,), "x",
     "-x ** 2"),
    (lambda a: ew.integer_pow.bind(ew.neg.bind(a), y=3), lambda a: (-a) ** 3, (X,), "x",
     "(-x) ** 3"),
    (lambda a, b: ew.eq.bind(ew.lt.bind(a, b), ew.lt.bind(b, a)), lambda a, b: (a < b) == (b < a),
     (X, X[::-1].copy()), "xy", "(x < y) == (y < x)"),
]


@pytest.mark.parametrize("fn, reference, args, names, text", EMISSION_CASES,
                         ids=[case[-1] for case in EMISSION_CASES])
def test_emitted_text(fn, reference, args, names, text):
    closed = check_staged(fn, reference, *args)
    source = emit_jaxpr_source(closed, "f", arg_names=list(names))
    assert text in source, source
    assert "import jax" not in source


def identity_times(a):
    return (np.eye(3) * a).sum() + (np.eye(2, 3, dtype=np.float32) * a[:2]).sum()


def test_the_identity_is_emitted_as_np_eye():
    """`ops.eye` compares a row-index iota with a column-index iota; the emitted code says
    what that is (`np.eye`), in every dtype, square or not, and computes the same."""
    a = np.arange(9.0).reshape(3, 3)
    source = s2s.emit_python(identity_times, a)
    assert "np.eye(3, dtype=np.float64)" in source and "np.eye(2, 3, dtype=np.float32)" in source, source
    assert "rt.iota" not in source, source
    namespace = {}
    exec(compile(source, "identity_times.py", "exec"), namespace)
    np.testing.assert_allclose(namespace["identity_times"](a), identity_times(a))
