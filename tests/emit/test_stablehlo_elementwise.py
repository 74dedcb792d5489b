"""Every elementwise primitive lowered to StableHLO, compiled by jaxlib, equal to NumPy.

The primitives, their NumPy references, value domains and accepted dtypes are the tables
the NumPy impls are tested with (tests/primitives/test_elementwise.py), so a primitive
added there is lowered here too; hypothesis draws the dtype, the (NumPy-broadcast) shapes
and the values.
"""
import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from s2s.emit.stablehlo import lower, stablehlo_rules
from s2s.errors import ShapeError
from s2s.primitives import elementwise as ew
from s2s.staging import Primitive
from tests.emit.strategies import FLOATS, SETTINGS, shapes, tolerance
from tests.helpers import check_lowered, stage
from tests.primitives.test_elementwise import (BINARY_CASES, CONVERTIBLE, UNARY_CASES, WIDE_INTS,
                                               away_from_zero, broadcastable, polygamma_oracle,
                                               span, trunc_div_oracle)


def ties_and_any(dtype):
    """Ties k + 1/2 (round must take them to even, as NumPy does, not away from zero) and
    values anywhere."""
    return st.one_of(st.integers(-100, 100).map(lambda k: k + 0.5), span(-100, 100)(dtype))


# Domains that differ from the impl tests' ones, for the lowering.
DOMAINS = {"round": ties_and_any}

def _draw_dtype(data, dtypes):
    return np.dtype(data.draw(st.sampled_from(dtypes), label="dtype"))


@pytest.mark.parametrize("name", sorted(UNARY_CASES))
@SETTINGS
@given(data=st.data())
def test_unary(name, data):
    prim, reference, domain, dtypes = UNARY_CASES[name]
    dtype = _draw_dtype(data, dtypes)
    domain = DOMAINS.get(name, domain)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=domain(dtype)), label="x")
    check_lowered(prim.bind, reference, x, **tolerance(dtype))


@pytest.mark.parametrize("name", sorted(BINARY_CASES))
@SETTINGS
@given(data=st.data())
def test_binary_with_numpy_broadcasting(name, data):
    prim, reference, dtypes, x_domain, y_domain = BINARY_CASES[name]
    dtype = _draw_dtype(data, dtypes)
    bshapes = data.draw(broadcastable(2), label="shapes")
    x = data.draw(hnp.arrays(dtype, bshapes.input_shapes[0], elements=x_domain(dtype)), label="x")
    y = data.draw(hnp.arrays(dtype, bshapes.input_shapes[1], elements=y_domain(dtype)), label="y")
    check_lowered(prim.bind, reference, x, y, **tolerance(dtype))


@SETTINGS
@given(data=st.data(), y=st.integers(-3, 7))
def test_integer_pow(data, y):
    """Exponentiation by squaring; a negative exponent divides (floats only)."""
    dtype = _draw_dtype(data, FLOATS + WIDE_INTS if y >= 0 else FLOATS)
    domain = span(-10, 10) if y >= 0 else away_from_zero(0.25, 4)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=domain(dtype)), label="x")
    check_lowered(lambda a: ew.integer_pow.bind(a, y=y), lambda a: np.power(a, y), x,
                  **tolerance(dtype))


@SETTINGS
@given(data=st.data(), n=st.integers(1, 3))
def test_polygamma(data, n):
    """On x > 0, where the jax oracle is right (as in tests/primitives)."""
    dtype = _draw_dtype(data, FLOATS)
    x = data.draw(hnp.arrays(dtype, shapes(), elements=span(2.0 ** -4, 50)(dtype)), label="x")
    check_lowered(lambda a: ew.polygamma.bind(a, n=n), polygamma_oracle(n), x,
                  **tolerance(dtype))


@SETTINGS
@given(data=st.data())
def test_select(data):
    dtype = _draw_dtype(data, FLOATS + WIDE_INTS + [np.bool_])
    bshapes = data.draw(broadcastable(3), label="shapes")
    pred = data.draw(hnp.arrays(np.bool_, bshapes.input_shapes[0]), label="pred")
    a, b = (data.draw(hnp.arrays(dtype, s, elements=span(-100, 100)(dtype)))
            for s in bshapes.input_shapes[1:])
    check_lowered(ew.select.bind, np.where, pred, a, b)


@SETTINGS
@given(data=st.data())
def test_clamp(data):
    """clamp(lo, x, hi) is np.clip(x, lo, hi), also where lo > hi (hi wins)."""
    dtype = _draw_dtype(data, FLOATS + WIDE_INTS + [np.uint8])
    bshapes = data.draw(broadcastable(3), label="shapes")
    lo, x, hi = (data.draw(hnp.arrays(dtype, s, elements=span(-100, 100)(dtype)))
                 for s in bshapes.input_shapes)
    check_lowered(ew.clamp.bind, lambda lo, x, hi: np.clip(x, lo, hi), lo, x, hi)


def _convertible_values(src, dst):
    """Values every destination holds; to bool and float also -0.0 and NaN (nonzero, so True)."""
    values = span(-100, 100)(src)
    if src.kind == "f" and dst.kind in "fb":
        values = st.one_of(values, st.sampled_from([-0.0, math.nan]))
    return values


@SETTINGS
@given(data=st.data(), src=st.sampled_from(CONVERTIBLE), dst=st.sampled_from(CONVERTIBLE))
def test_convert_element_type(data, src, dst):
    src, dst = np.dtype(src), np.dtype(dst)
    x = data.draw(hnp.arrays(src, shapes(), elements=_convertible_values(src, dst)), label="x")
    check_lowered(lambda a: ew.convert_element_type.bind(a, new_dtype=dst, weak_type=False),
                  lambda a: a.astype(dst), x)


@SETTINGS
@given(data=st.data(), shape=shapes(min_dims=1, max_dims=4, max_side=4))
def test_iota(data, shape):
    dtype = _draw_dtype(data, FLOATS + WIDE_INTS)
    dimension = data.draw(st.integers(0, len(shape) - 1), label="dimension")
    check_lowered(lambda: ew.iota.bind(dtype=dtype, shape=shape, dimension=dimension),
                  lambda: np.indices(shape, dtype=dtype)[dimension])


@SETTINGS
@given(data=st.data())
def test_stop_gradient_is_the_identity(data):
    dtype = _draw_dtype(data, FLOATS + WIDE_INTS + [np.bool_])
    x = data.draw(hnp.arrays(dtype, shapes(), elements=span(-100, 100)(dtype)), label="x")
    check_lowered(ew.stop_gradient.bind, lambda a: a, x)


TESTED_ELSEWHERE = {"integer_pow", "polygamma", "select", "clamp", "convert_element_type", "iota",
                    "stop_gradient"}


def test_every_elementwise_primitive_lowers_and_is_tested_here():
    declared = {p.name: p for p in vars(ew).values() if isinstance(p, Primitive)}
    assert not [name for name, p in declared.items() if p not in stablehlo_rules]
    tested = set(UNARY_CASES) | set(BINARY_CASES) | TESTED_ELSEWHERE
    assert set(declared) == tested, (set(declared) - tested, tested - set(declared))


def test_abs_and_sign_of_unsigned_integers():
    """StableHLO's abs/sign take signless integers only; unsigned ones are rewritten."""
    for dtype in (np.uint8, np.uint32, np.uint64):
        x = np.array([0, 3, 200], dtype)
        check_lowered(ew.abs.bind, np.abs, x)
        check_lowered(ew.sign.bind, np.sign, x)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64])
def test_integer_division_by_zero_and_of_the_minimum_by_minus_one_are_numpys(dtype):
    """x / 0 and x % 0 are 0 in NumPy (XLA's own divide gives -1, or all ones unsigned, and
    its remainder x); INT_MIN / -1 is INT_MIN and INT_MIN % -1 is 0 in both."""
    info = np.iinfo(dtype)
    x = np.array([7, 0, info.max, info.min, info.min, 5], dtype)
    y = np.array([0, 0, 0, 0, -1 if info.min else 3, 3], dtype)
    with np.errstate(divide="ignore", over="ignore"):
        check_lowered(ew.div.bind, trunc_div_oracle, x, y)
        check_lowered(ew.rem.bind, np.fmod, x, y)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_constants_lower_exactly(dtype):
    x = np.array([1 + 1j, -2.5, 0.5j], dtype)
    check_lowered(lambda v: v * (1 + 2j) + 1.5 - v * 1, lambda v: v * dtype(1 + 2j) + dtype(1.5) - v, x)
    check_lowered(lambda v: v * (1 / 3 + 1j / 7), lambda v: v * dtype(1 / 3 + 1j / 7), x, rtol=0, atol=0)


def test_an_integer_too_large_for_its_type_is_a_clear_error():
    closed, _ = stage(lambda v: (v, 2 ** 70), np.arange(3))    # Python's int, returned as it is
    with pytest.raises(ShapeError, match=f"the integer {2 ** 70} does not fit int64"):
        lower(closed)
