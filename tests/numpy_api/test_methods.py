"""Operators and ndarray methods of staged values, against the same code run on NumPy.

Every test function here is written once and run twice: on Tracers (staged, through
`check_staged`) and on NumPy arrays (the oracle), so `x + 2.5`, `2.5 + x`, `arr @ x`,
`x.sum(axis=0)` must agree in value, shape and dtype. Operators are checked both ways
round (array op tracer, scalar op tracer) and across mixed dtypes and Python scalars.
"""
from __future__ import annotations

import operator

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s.numpy_api  # noqa: F401
from s2s.core import ShapedArray
from s2s.errors import ConcretizationError, S2SError, UnsupportedSyntaxError
from s2s.staging import JaxprBuilder, Tracer
from tests.helpers import check_numpy_and_jax, check_staged, stage
from tests.numpy_api.test_math import (NUMPY_SCALARS, PY_SCALARS, expect_like_numpy, kind_id,
                                       primitive_names, python_power_of_negative, sample)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=25, deadline=None)

ARITHMETIC = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
              operator.mod, operator.pow]
COMPARISONS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]
BITWISE = [operator.and_, operator.or_, operator.xor]
DTYPES = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float32, np.float64]
KINDS = DTYPES + PY_SCALARS + NUMPY_SCALARS


@pytest.fixture(autouse=True)
def _runtime_sort_multi(monkeypatch):
    """Emitted argsort calls rt.sort_multi; until s2s_runtime/__init__.py exports it, lend it."""
    import s2s_runtime
    if not hasattr(s2s_runtime, "sort_multi"):
        from s2s_runtime import sorting
        monkeypatch.setattr(s2s_runtime, "sort_multi", sorting.sort_multi, raising=False)


def finite_sample(kind, shape):
    """`sample` without inf and nan: concrete arrays closed over by the staged function are
    written into the emitted module, which cannot spell inf/nan yet (reported)."""
    x = sample(kind, shape)
    return np.nan_to_num(x, posinf=9.0, neginf=-9.0) if x.dtype.kind == "f" else x


def _operands(k1, k2, op):
    a = finite_sample(k1, (2, 3)) if isinstance(k1, type) else k1
    b = finite_sample(k2, (3,)) if isinstance(k2, type) else k2
    if op in (operator.floordiv, operator.mod, operator.truediv) and isinstance(b, np.ndarray):
        if b.dtype.kind in "biu":
            b = np.where(b == 0, 3, b).astype(b.dtype)
    if op is operator.pow and isinstance(b, np.ndarray):
        b = np.abs(b).astype(b.dtype)
    return a, b


@pytest.mark.parametrize("op", ARITHMETIC + COMPARISONS + BITWISE, ids=lambda o: o.__name__)
def test_binary_operators_both_ways(op):
    """tracer op tracer, tracer op array, array op tracer, tracer op scalar, scalar op tracer."""
    for k1 in KINDS:
        for k2 in KINDS:
            a, b = _operands(k1, k2, op)
            numpy_values = (np.ndarray, np.generic)
            if not (isinstance(a, numpy_values) or isinstance(b, numpy_values)):
                continue
            if python_power_of_negative(op.__name__ + "power", a, b):
                continue
            cases = [(lambda x, y: op(x, y), (a, b))]
            if isinstance(a, numpy_values):
                cases.append((lambda y, a=a: op(a, y), (b,)))     # concrete value on the left
            if isinstance(b, numpy_values):
                cases.append((lambda x, b=b: op(x, b), (a,)))     # concrete value on the right
            for fn, args in cases:
                if not any(isinstance(v, (np.ndarray, np.generic, float)) for v in args):
                    continue
                try:
                    _check_op(fn, args)
                except AssertionError as e:
                    raise AssertionError(f"{op.__name__}({kind_id(k1)}, {kind_id(k2)}): {e}") from None


def _check_op(fn, args):
    from s2s.errors import UnsupportedFunctionError
    try:
        expect_like_numpy(fn, fn, *args, eager=False)
    except UnsupportedFunctionError as e:
        assert "integer power" in str(e)     # int ** staged int: documented


@pytest.mark.parametrize("op", [operator.neg, operator.pos, operator.invert, abs],
                         ids=lambda o: o.__name__)
@pytest.mark.parametrize("dtype", DTYPES + [np.float16], ids=lambda d: np.dtype(d).name)
def test_unary_operators(op, dtype):
    expect_like_numpy(lambda x: op(x), lambda x: op(x), sample(dtype), eager=False)


def test_operators_on_weak_values_stay_weak():
    """A Python float argument is a weak staged value: `(a * 2) * x32` stays float32."""
    x32 = np.arange(3, dtype=np.float32)
    for f in (lambda a, x: (a * 2 + 1) * x, lambda a, x: (-a) * x, lambda a, x: (a ** 2) * x,
              lambda a, x: (a // 2) * x, lambda a, x: (a % 2) * x, lambda a, x: abs(a) * x,
              lambda a, x: (1 / a) * x):
        closed = check_staged(f, f, 2.5, x32)
        assert closed.out_avals[0].dtype == np.float32


def test_integer_power_is_integer_pow():
    closed = expect_like_numpy(lambda x: x ** 2, lambda x: x ** 2, sample(np.float32), eager=False)
    assert primitive_names(closed) == ["integer_pow"]
    closed = expect_like_numpy(lambda x: 2 ** x, lambda x: 2 ** x, sample(np.float32), eager=False)
    assert primitive_names(closed) == ["pow"]


def test_divmod_builtin():
    x = sample(np.float64)
    expect_like_numpy(lambda a: divmod(a, 3), lambda a: divmod(a, 3), x, eager=False)
    expect_like_numpy(lambda a: divmod(7, a), lambda a: divmod(7, a), x, eager=False)


def test_matmul_operator():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float64).reshape(3, 4)
    check_staged(lambda x, y: x @ y, lambda x, y: x @ y, a, b)
    check_staged(lambda y: a @ y, lambda y: a @ y, b)
    check_staged(lambda x: x @ b, lambda x: x @ b, a)


@SETTINGS
@given(data=st.data())
def test_arithmetic_random(data):
    dtype = data.draw(st.sampled_from([np.int32, np.int64, np.float32, np.float64]))
    shape = data.draw(hnp.array_shapes(max_dims=2, max_side=4))
    elements = (st.integers(-100, 100) if np.dtype(dtype).kind == "i"
                else st.floats(-100, 100, width=np.dtype(dtype).itemsize * 8))
    x = data.draw(hnp.arrays(dtype, shape, elements=elements))
    y = data.draw(hnp.arrays(dtype, shape, elements=elements.filter(bool)))
    s = data.draw(st.one_of(st.integers(-5, 5).filter(bool), st.floats(-5, 5).filter(bool)))
    for f in (lambda a, b: a * b - b / a + a, lambda a, b: (a // b, a % b, b // a),
              lambda a, b: (a + s, s - a, a * s, s / b, b // s, s // b, a % s, s % b),
              lambda a, b: (a < s, s <= b, a == b, s != a, -a, abs(b))):
        expect_like_numpy(f, f, x, y, eager=False)


# ---------------------------------------------------------------------------------------
# Equality, hashing, refused in-place forms


def test_eq_is_elementwise_and_hash_is_identity():
    with JaxprBuilder() as b:
        x = b.new_arg(ShapedArray((3,), np.float32))
        y = x == 1.0
        assert isinstance(y, Tracer) and y.dtype == np.bool_
        assert isinstance(x != x, Tracer)
        assert hash(x) == object.__hash__(x)
        assert {x: 1}[x] == 1
        assert (x == None) is False      # noqa: E711  (no elementwise meaning; Python's rule)
        assert (x != "a") is True
        assert x in [x]


def test_setitem_and_sort_are_refused():
    x = np.arange(4.0)

    def assign(v):
        v[0] = 1.0
        return v

    with pytest.raises(UnsupportedSyntaxError, match="np.where"):
        stage(assign, x)
    with pytest.raises(UnsupportedSyntaxError, match="np.sort"):
        stage(lambda v: v.sort(), x)
    with pytest.raises(ConcretizationError):
        stage(lambda v: v.item(), x)
    with pytest.raises(ConcretizationError):
        stage(lambda v: v.tolist(), x)
    with pytest.raises(S2SError):
        stage(lambda v: v.nonzero(), x)


def test_augmented_assignment_rebinds():
    def f(v):
        v += 1
        v *= 2
        v //= 3
        return v
    check_staged(f, lambda v: f(v.copy()), np.arange(6.0))


# ---------------------------------------------------------------------------------------
# ndarray methods and properties

M = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
I = np.arange(12, dtype=np.int32).reshape(3, 4) - 5


METHOD_CASES = [
    ("T", lambda x: x.T, M), ("mT", lambda x: x.mT, M),
    ("real", lambda x: x.real, M), ("imag", lambda x: x.imag, M),
    ("astype", lambda x: x.astype(np.int32), M), ("astype_same", lambda x: x.astype(np.float32), M),
    ("astype_bool", lambda x: x.astype(bool), I),
    ("reshape_args", lambda x: x.reshape(6, 4), M), ("reshape_tuple", lambda x: x.reshape((4, -1)), M),
    ("reshape_order", lambda x: x.reshape(-1, order="C"), M),
    ("transpose", lambda x: x.transpose(), M), ("transpose_args", lambda x: x.transpose(2, 0, 1), M),
    ("transpose_tuple", lambda x: x.transpose((1, 2, 0)), M),
    ("flatten", lambda x: x.flatten(), M), ("ravel", lambda x: x.ravel(), M),
    ("squeeze", lambda x: x.reshape(1, 24, 1).squeeze(), M),
    ("squeeze_axis", lambda x: x.reshape(1, 24, 1).squeeze(axis=0), M),
    ("swapaxes", lambda x: x.swapaxes(0, 2), M),
    ("sum", lambda x: x.sum(), M), ("sum_axis", lambda x: x.sum(axis=1, keepdims=True), M),
    ("sum_dtype", lambda x: x.sum(0, dtype=np.float64), I),
    ("mean", lambda x: x.mean(axis=(0, 2)), M), ("std", lambda x: x.std(ddof=1), M),
    ("var", lambda x: x.var(axis=0), M),
    ("max", lambda x: x.max(axis=-1), M), ("min", lambda x: x.min(), I),
    ("prod", lambda x: (x / 10).prod(axis=0), M), ("argmax", lambda x: x.argmax(axis=1), M),
    ("argmin", lambda x: x.argmin(), I), ("all", lambda x: x.all(axis=0), I),
    ("any", lambda x: (x > 3).any(), I), ("cumsum", lambda x: x.cumsum(axis=1), I),
    ("cumprod", lambda x: (x / 10).cumprod(), M),
    ("dot", lambda x: x.dot(np.ones(4, np.float32)), M),
    ("clip", lambda x: x.clip(-1, 2.5), M), ("clip_kw", lambda x: x.clip(max=3), I),
    ("round", lambda x: (x / 3).round(2), M), ("round0", lambda x: (x / 3).round(), M),
    ("copy", lambda x: x.copy(), M), ("conj", lambda x: x.conj(), M),
    ("conjugate", lambda x: x.conjugate(), I),
    ("repeat", lambda x: x.repeat(2, axis=1), I), ("take", lambda x: x.take([0, 2], axis=1), I),
    ("diagonal", lambda x: x.diagonal(), I), ("trace", lambda x: x.trace(offset=1), I),
    ("argsort", lambda x: x.argsort(axis=0), I),
    ("getitem", lambda x: x[1, :, ::2], M), ("getitem_neg", lambda x: x[-1], M),
    ("iter", lambda x: [row for row in x], I), ("len", lambda x: x * len(x), I),
    ("sizes", lambda x: x * (x.size + x.ndim + x.shape[0] + x.itemsize + x.nbytes), I),
]


@pytest.mark.parametrize("name,fn,arg", METHOD_CASES, ids=[c[0] for c in METHOD_CASES])
def test_methods_match_numpy(name, fn, arg):
    check_staged(fn, fn, arg)


def test_astype_same_dtype_stages_nothing():
    closed, _ = stage(lambda x: x.astype(np.float32), M)
    assert not closed.eqns
    closed, _ = stage(lambda a: a.astype(np.float64), 2.5)    # weak → strong needs a convert
    assert primitive_names(closed) == ["convert_element_type"]




def truncated_times(x):
    return x.astype(int) * x


def truncated(x):
    return x.astype(int)


@settings(max_examples=10, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4),
                  elements=st.floats(-9.5, 9.5, allow_subnormal=False).filter(
                      lambda v: v != int(v))))
def test_astype_int_of_staged_floats_truncates_and_has_no_derivative(x):
    """x.astype(int) rounds toward zero as NumPy; its derivative is zero, as jax's."""
    check_numpy_and_jax(truncated_times, x)
    check_numpy_and_jax(truncated, x, derivatives=False)
