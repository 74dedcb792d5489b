"""Every elementwise primitive lowered to StableHLO, compiled by jaxlib, equal to NumPy."""
import numpy as np
import pytest

import s2s_runtime as rt
from s2s.emit.stablehlo import stablehlo_rules
from s2s.primitives import elementwise as ew
from tests.helpers import check_lowered

rng = np.random.default_rng(0)
POSITIVE = rng.uniform(0.2, 2.0, (2, 3))
UNIT = rng.uniform(-0.9, 0.9, (2, 3))
ANY = rng.standard_normal((2, 3)) * 2

UNARY = [  # (primitive, operand, NumPy reference)
    (ew.neg, ANY, np.negative), (ew.exp, ANY, np.exp), (ew.log, POSITIVE, np.log),
    (ew.log1p, POSITIVE, np.log1p), (ew.expm1, ANY, np.expm1), (ew.sin, ANY, np.sin),
    (ew.cos, ANY, np.cos), (ew.tan, UNIT, np.tan), (ew.tanh, ANY, np.tanh),
    (ew.logistic, ANY, rt.logistic), (ew.sqrt, POSITIVE, np.sqrt),
    (ew.rsqrt, POSITIVE, lambda x: 1 / np.sqrt(x)), (ew.cbrt, ANY, np.cbrt), (ew.abs, ANY, np.abs),
    (ew.sign, ANY, np.sign), (ew.floor, ANY, np.floor), (ew.ceil, ANY, np.ceil),
    (ew.round, np.array([0.5, 1.5, -2.5, 2.4]), np.round), (ew.asin, UNIT, np.arcsin),
    (ew.acos, UNIT, np.arccos), (ew.atan, ANY, np.arctan), (ew.sinh, ANY, np.sinh),
    (ew.cosh, ANY, np.cosh), (ew.asinh, ANY, np.arcsinh), (ew.acosh, POSITIVE + 1, np.arccosh),
    (ew.atanh, UNIT, np.arctanh), (ew.erf, ANY, rt.erf), (ew.lgamma, POSITIVE, rt.lgamma),
    (ew.digamma, POSITIVE, rt.digamma), (ew.is_finite, np.array([1.0, np.inf, np.nan]), np.isfinite),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("prim, x, reference", UNARY, ids=[p.name for p, _, _ in UNARY])
def test_unary(prim, x, reference, dtype):
    x = x.astype(dtype)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    check_lowered(lambda a: prim.bind(a), lambda a: reference(a), x, rtol=tol, atol=tol)


BINARY = [(ew.add, np.add), (ew.sub, np.subtract), (ew.mul, np.multiply), (ew.div, np.divide),
          (ew.max, np.maximum), (ew.min, np.minimum), (ew.atan2, np.arctan2), (ew.rem, np.fmod),
          (ew.add_any, np.add)]


@pytest.mark.parametrize("prim, reference", BINARY, ids=[p.name for p, _ in BINARY])
def test_binary_with_numpy_broadcasting(prim, reference):
    x, y = ANY, rng.standard_normal(3) + 3.0
    if prim is ew.add_any:
        y = rng.standard_normal((2, 3))
    check_lowered(lambda a, b: prim.bind(a, b), reference, x, y, rtol=1e-12, atol=1e-12)


def test_pow_integer_pow_and_polygamma():
    check_lowered(lambda a, b: ew.pow.bind(a, b), np.power, POSITIVE, ANY, rtol=1e-12)
    for y in (0, 1, 2, 3, 7, -2):
        check_lowered(lambda a: ew.integer_pow.bind(a, y=y), lambda a: a ** float(y), POSITIVE, rtol=1e-12)
    check_lowered(lambda a: ew.polygamma.bind(a, n=1), lambda a: rt.polygamma(1, a), POSITIVE, rtol=1e-10)


@pytest.mark.parametrize("prim, reference", [(ew.eq, np.equal), (ew.ne, np.not_equal), (ew.lt, np.less),
                                             (ew.le, np.less_equal), (ew.gt, np.greater), (ew.ge, np.greater_equal)])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_comparisons(prim, reference, dtype):
    x = np.array([[0, 1, 2], [3, 1, 0]]).astype(dtype)
    y = np.array([1, 1, 0]).astype(dtype)
    check_lowered(lambda a, b: prim.bind(a, b), reference, x, y)


def test_integer_division_truncates_and_logic():
    x, y = np.array([-7, 7, -8, 9], np.int64), np.array([2, -2, 3, 4], np.int64)
    check_lowered(lambda a, b: ew.div.bind(a, b), rt.trunc_divide, x, y)
    check_lowered(lambda a, b: ew.rem.bind(a, b), np.fmod, x, y)
    p, q = np.array([True, False, True]), np.array([True, True, False])
    for prim, ref in [(ew.and_, np.logical_and), (ew.or_, np.logical_or), (ew.xor, np.logical_xor)]:
        check_lowered(lambda a, b: prim.bind(a, b), ref, p, q)
    check_lowered(lambda a: ew.not_.bind(a), np.logical_not, p)


def test_select_clamp_convert_iota():
    p = np.array([True, False, True])
    check_lowered(lambda c, a, b: ew.select.bind(c, a, b), np.where, p, ANY, np.zeros(3))
    check_lowered(lambda lo, a, hi: ew.clamp.bind(lo, a, hi), lambda lo, a, hi: np.clip(a, lo, hi),
                  np.full(3, -0.5), ANY, np.full(3, 0.5))
    check_lowered(lambda a: ew.convert_element_type.bind(a, new_dtype=np.dtype(np.float32), weak_type=False),
                  lambda a: a.astype(np.float32), ANY)
    check_lowered(lambda a: ew.convert_element_type.bind(a, new_dtype=np.dtype(np.bool_), weak_type=False),
                  lambda a: a.astype(bool), np.array([0.0, 2.0, -0.0, np.nan]))
    check_lowered(lambda: ew.iota.bind(dtype=np.dtype(np.int64), shape=(2, 3), dimension=1),
                  lambda: rt.iota(np.int64, (2, 3), 1))


def test_every_elementwise_primitive_lowers():
    missing = [name for name, prim in vars(ew).items()
               if isinstance(prim, type(ew.add)) and prim not in stablehlo_rules]
    assert not missing
