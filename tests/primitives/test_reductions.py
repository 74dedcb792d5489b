"""The reduction primitives against NumPy: impls, shape rules, emitted Python, and errors.

Each primitive keeps its operand's dtype, so the oracle is NumPy with `dtype=x.dtype`
where NumPy would widen. `check_staged` holds eval_jaxpr and the emitted module to it.
"""
from __future__ import annotations

import math
import re

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import s2s_runtime
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.core import JaxprTypeError, Literal, ShapedArray, aval_of_value, check_jaxpr
from s2s.emit.python import emit_jaxpr_source
from s2s.errors import ShapeError
from s2s.primitives import reductions as red
from s2s.staging import JaxprBuilder
from s2s_runtime import sorting
from tests.helpers import assert_same, check_staged, stage
from tests.strategies import small_values

SETTINGS = settings(max_examples=30, deadline=None)

NUMERIC = [np.int8, np.int32, np.int64, np.uint8, np.uint32, np.float16, np.float32, np.float64]
ANY = NUMERIC + [np.bool_]


@pytest.fixture(autouse=True)
def _runtime_sort_multi(monkeypatch):
    """Emitted code calls rt.sort_multi; until s2s_runtime/__init__.py exports it, lend it."""
    if not hasattr(s2s_runtime, "sort_multi"):
        monkeypatch.setattr(s2s_runtime, "sort_multi", sorting.sort_multi, raising=False)


def _elements(dtype, nan: bool = False):
    return small_values(dtype, (float("nan"),) if nan else ())


@st.composite
def arrays(draw, dtypes=NUMERIC, min_dims=0, max_dims=4, min_side=0, nan=False):
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                  max_side=4))
    return draw(hnp.arrays(dtype, shape, elements=_elements(dtype, nan)))


@st.composite
def array_and_axes(draw, dtypes=NUMERIC, nan=False):
    x = draw(arrays(dtypes, nan=nan))
    axes = draw(st.lists(st.sampled_from(range(x.ndim)), unique=True) if x.ndim else st.just([]))
    return x, tuple(axes)   # any order: the primitive does not need them sorted


@st.composite
def array_and_axis(draw, dtypes=NUMERIC, nan=False, min_side=0):
    x = draw(arrays(dtypes, min_dims=1, min_side=min_side, nan=nan))
    return x, draw(st.integers(0, x.ndim - 1))


def _emits(source: str, text: str) -> bool:
    """Whether a statement of `source` is `name = <text>` or `return <text>`."""
    return re.search(r"(= |return )" + re.escape(text) + r"(  #.*)?\n", source) is not None


def _check_abstract(prim, x, out, **params):
    """The shape rule agrees with what the impl produced."""
    expected = prim.abstract_eval(aval_of_value(x), **params)
    got = np.asarray(out)
    assert expected.shape == got.shape and expected.dtype == got.dtype


# ---------------------------------------------------------------------------------------
# reduce_*

REDUCE_ORACLES = {
    "reduce_sum": (lambda x, axes: np.sum(x, axis=axes, dtype=x.dtype), NUMERIC),
    "reduce_prod": (lambda x, axes: np.prod(x, axis=axes, dtype=x.dtype), NUMERIC),
    "reduce_max": (lambda x, axes: np.max(x, axis=axes), ANY),
    "reduce_min": (lambda x, axes: np.min(x, axis=axes), ANY),
    "reduce_and": (lambda x, axes: np.all(x, axis=axes), [np.bool_]),
    "reduce_or": (lambda x, axes: np.any(x, axis=axes), [np.bool_]),
}


@pytest.mark.parametrize("name", sorted(REDUCE_ORACLES))
@SETTINGS
@given(data=st.data())
def test_reduce(name, data):
    oracle, kinds = REDUCE_ORACLES[name]
    x, axes = data.draw(array_and_axes(kinds, nan=True))
    prim = red.REDUCTIONS[name]
    if name in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
        with pytest.raises(ShapeError, match="zero-length axis"):
            prim.bind(x, axes=axes)
        return
    out = prim.bind(x, axes=axes)
    assert_same(out, oracle(x, axes))
    _check_abstract(prim, x, out, axes=axes)
    check_staged(lambda t: prim.bind(t, axes=axes), lambda v: oracle(v, axes), x)


def test_reduce_keeps_weak_type():
    out = red.reduce_sum.abstract_eval(ShapedArray((3, 2), np.float32, weak_type=True), axes=(0,))
    assert out == ShapedArray((2,), np.float32, weak_type=True)


def test_reduce_emits_methods():
    x = np.zeros((2, 3, 4), np.float64)
    cases = [
        (lambda t: red.reduce_sum.bind(t, axes=(1,)), "x.sum(axis=1)"),
        (lambda t: red.reduce_sum.bind(t, axes=(2, 0)), "x.sum(axis=(0, 2))"),
        (lambda t: red.reduce_sum.bind(t, axes=(0, 1, 2)), "x.sum()"),
        (lambda t: red.reduce_max.bind(t, axes=(0,)), "x.max(axis=0)"),
        (lambda t: red.reduce_min.bind(t, axes=()), "x.min(axis=())"),
        (lambda t: red.reduce_prod.bind(t, axes=(2,)), "x.prod(axis=2)"),
    ]
    for fn, text in cases:
        closed, _ = stage(fn, x)
        assert _emits(emit_jaxpr_source(closed, "f", ["x"]), text)


def test_reduce_sum_of_narrow_ints_names_its_dtype():
    # NumPy would widen int32 to int64; the primitive keeps int32, so the code says so.
    closed, _ = stage(lambda t: red.reduce_sum.bind(t, axes=(0,)), np.zeros((3, 2), np.int32))
    assert _emits(emit_jaxpr_source(closed, "f", ["x"]), "x.sum(axis=0, dtype=np.int32)")
    closed, _ = stage(lambda t: red.reduce_sum.bind(t, axes=(0,)), np.zeros((3,), np.uint8))
    assert _emits(emit_jaxpr_source(closed, "f", ["x"]), "x.sum(dtype=np.uint8)")
    closed, _ = stage(lambda t: red.reduce_prod.bind(t, axes=(0,)), np.zeros((3, 2), np.int64))
    assert _emits(emit_jaxpr_source(closed, "f", ["x"]), "x.prod(axis=0)")


def test_reduce_of_a_literal_emits_a_function_call():
    # `3.0.sum()` is not valid NumPy, so a literal operand is reduced with np.sum(...).
    with JaxprBuilder() as b:
        b.new_arg(ShapedArray((), np.float32))
        lit = Literal(np.float32(3.0), ShapedArray((), np.float32))
        out = b.add_eqn(red.reduce_sum, [lit], {"axes": ()})
        closed = b.build([out])
    source = emit_jaxpr_source(closed, "f", ["x"])
    assert "np.sum(np.float32(3.0))" in source
    check_jaxpr(closed)


@pytest.mark.parametrize("prim,x,axes,match", [
    (red.reduce_sum, np.zeros((2, 3)), (2,), "out of bounds"),
    (red.reduce_sum, np.zeros((2, 3)), (-1,), "out of bounds"),
    (red.reduce_sum, np.zeros((2, 3)), (0, 0), "repeated axis"),
    (red.reduce_sum, np.zeros((2, 3)), 0, "tuple"),
    (red.reduce_sum, np.zeros((2, 3)), (0.0,), "static Python int"),
    (red.reduce_sum, np.zeros((2,), bool), (0,), "numeric dtype"),
    (red.reduce_prod, np.zeros((2,), bool), (0,), "numeric dtype"),
    (red.reduce_and, np.zeros((2,)), (0,), "boolean operand"),
    (red.reduce_or, np.zeros((2,), np.int32), (0,), "boolean operand"),
    (red.reduce_max, np.zeros((2, 0)), (1,), "zero-length axis"),
    (red.reduce_min, np.zeros((0,)), (0,), "zero-length axis"),
])
def test_reduce_shape_errors(prim, x, axes, match):
    with pytest.raises(ShapeError, match=match):
        prim.bind(x, axes=axes)
    with pytest.raises(ShapeError, match=match):
        stage(lambda t: prim.bind(t, axes=axes), x)


def test_check_jaxpr_catches_a_wrong_reduction_type():
    closed, _ = stage(lambda t: red.reduce_sum.bind(t, axes=(0,)), np.zeros((3, 2)))
    closed.jaxpr.eqns[0].params["axes"] = (1,)   # now the rule says f64[3], the var f64[2]
    with pytest.raises(JaxprTypeError):
        check_jaxpr(closed)


# ---------------------------------------------------------------------------------------
# argmax, argmin


@pytest.mark.parametrize("prim,oracle", [(red.argmax, np.argmax), (red.argmin, np.argmin)])
@pytest.mark.parametrize("index_dtype", [np.dtype(np.int64), np.dtype(np.int32)])
@SETTINGS
@given(data=st.data())
def test_arg_reductions(prim, oracle, index_dtype, data):
    x, axis = data.draw(array_and_axis(ANY, nan=True))
    if x.shape[axis] == 0:
        with pytest.raises(ShapeError, match="empty sequence"):
            prim.bind(x, axis=axis, index_dtype=index_dtype)
        return
    expected = oracle(x, axis=axis).astype(index_dtype)   # ties: first; NaN: first NaN
    out = prim.bind(x, axis=axis, index_dtype=index_dtype)
    assert_same(out, expected)
    _check_abstract(prim, x, out, axis=axis, index_dtype=index_dtype)
    check_staged(lambda t: prim.bind(t, axis=axis, index_dtype=index_dtype),
                 lambda v: oracle(v, axis=axis).astype(index_dtype), x)


def test_argmax_ties_and_nans_follow_numpy():
    x = np.array([1.0, 3.0, 3.0, np.nan, 2.0, np.nan])
    assert red.argmax.bind(x, axis=0, index_dtype=np.dtype(np.int64)) == 3
    assert red.argmin.bind(x, axis=0, index_dtype=np.dtype(np.int64)) == 3
    y = np.array([[2, 5, 5], [7, 7, 1]])
    assert_same(red.argmax.bind(y, axis=1, index_dtype=np.dtype(np.int64)), np.array([1, 0]))


def test_argmax_emission():
    closed, _ = stage(lambda t: red.argmax.bind(t, axis=1, index_dtype=np.dtype(np.int64)),
                      np.zeros((2, 3)))
    assert _emits(emit_jaxpr_source(closed, "f", ["x"]), "np.argmax(x, axis=1)")
    closed, _ = stage(lambda t: red.argmin.bind(t, axis=0, index_dtype=np.dtype(np.int32)),
                      np.zeros((3,)))
    assert _emits(emit_jaxpr_source(closed, "f", ["x"]), "np.argmin(x).astype(np.int32)")


@pytest.mark.parametrize("x,params,match", [
    (np.zeros((2, 3)), {"axis": 2, "index_dtype": np.dtype(np.int64)}, "out of bounds"),
    (np.zeros((2, 3)), {"axis": -1, "index_dtype": np.dtype(np.int64)}, "out of bounds"),
    (np.zeros(()), {"axis": 0, "index_dtype": np.dtype(np.int64)}, "out of bounds"),
    (np.zeros((2, 3)), {"axis": 0, "index_dtype": np.dtype(np.float32)}, "integer dtype"),
    (np.zeros((0, 3)), {"axis": 0, "index_dtype": np.dtype(np.int64)}, "empty sequence"),
])
def test_arg_shape_errors(x, params, match):
    with pytest.raises(ShapeError, match=match):
        red.argmax.bind(x, **params)


# ---------------------------------------------------------------------------------------
# Cumulative reductions


def _scan_oracle(np_scan):
    def oracle(x, axis, reverse):
        if reverse:
            return np.flip(np_scan(np.flip(x, axis), axis), axis).astype(x.dtype)
        return np.asarray(np_scan(x, axis), dtype=x.dtype)
    return oracle


CUM_ORACLES = {
    "cumsum": (_scan_oracle(lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype)), NUMERIC),
    "cumprod": (_scan_oracle(lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype)), NUMERIC),
    "cummax": (_scan_oracle(lambda x, a: np.maximum.accumulate(x, axis=a)), ANY),
    "cummin": (_scan_oracle(lambda x, a: np.minimum.accumulate(x, axis=a)), ANY),
}


def _python_scan(x, axis, reverse, op):
    """An independent oracle: a Python loop along the axis."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    for index in np.ndindex(moved.shape[:-1]):
        line = list(moved[index])
        order = range(len(line) - 1, -1, -1) if reverse else range(len(line))
        acc = None
        for i in order:
            acc = line[i] if acc is None else op(acc, line[i])
            out[index + (i,)] = acc
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("name", sorted(CUM_ORACLES))
@pytest.mark.parametrize("reverse", [False, True])
@SETTINGS
@given(data=st.data())
def test_cumulative(name, reverse, data):
    oracle, kinds = CUM_ORACLES[name]
    x, axis = data.draw(array_and_axis(kinds, nan=True))
    prim = red.CUMULATIVE[name]
    out = prim.bind(x, axis=axis, reverse=reverse)
    assert_same(out, oracle(x, axis, reverse))
    _check_abstract(prim, x, out, axis=axis, reverse=reverse)
    check_staged(lambda t: prim.bind(t, axis=axis, reverse=reverse),
                 lambda v: oracle(v, axis, reverse), x)


@pytest.mark.parametrize("prim,op", [(red.cumsum, lambda a, b: a + b),
                                     (red.cummax, lambda a, b: max(a, b))])
def test_cumulative_matches_a_python_loop(prim, op):
    x = np.array([[3, 1, 4, 1], [5, 9, 2, 6], [5, 3, 5, 8]], np.int64)
    for axis in (0, 1):
        for reverse in (False, True):
            assert_same(prim.bind(x, axis=axis, reverse=reverse),
                        _python_scan(x, axis, reverse, op))


def test_cumulative_emission():
    def source(prim, x, **params):
        closed, _ = stage(lambda t: prim.bind(t, **params), x)
        return emit_jaxpr_source(closed, "f", ["x"])

    x1, x2, i2 = np.zeros(3), np.zeros((2, 3)), np.zeros((2, 3), np.int32)
    cases = [
        (red.cumsum, x2, 0, False, "np.cumsum(x, axis=0)"),
        (red.cumsum, x1, 0, False, "np.cumsum(x)"),
        (red.cumsum, x1, 0, True, "np.cumsum(x[::-1])[::-1]"),
        (red.cumprod, x2, 1, True, "np.flip(np.cumprod(np.flip(x, axis=1), axis=1), axis=1)"),
        (red.cumsum, i2, 1, False, "np.cumsum(x, axis=1, dtype=np.int32)"),
        (red.cummax, x2, 0, False, "np.maximum.accumulate(x)"),
        (red.cummin, x2, 1, False, "np.minimum.accumulate(x, axis=1)"),
    ]
    for prim, x, axis, reverse, text in cases:
        assert _emits(source(prim, x, axis=axis, reverse=reverse), text), text


@pytest.mark.parametrize("prim,x,params,match", [
    (red.cumsum, np.zeros((2, 3)), {"axis": 2, "reverse": False}, "out of bounds"),
    (red.cumsum, np.zeros(()), {"axis": 0, "reverse": False}, "out of bounds"),
    (red.cumsum, np.zeros((2,), bool), {"axis": 0, "reverse": False}, "numeric dtype"),
    (red.cumprod, np.zeros((2,)), {"axis": 0, "reverse": 1}, "reverse must be a bool"),
    (red.cummax, np.zeros((2,)), {"axis": None, "reverse": False}, "static Python int"),
])
def test_cumulative_shape_errors(prim, x, params, match):
    with pytest.raises(ShapeError, match=match):
        prim.bind(x, **params)


# ---------------------------------------------------------------------------------------
# sort


def _sort_key(value):
    """Orders like NumPy: NaNs after every number."""
    if isinstance(value, float) and math.isnan(value):
        return (1, 0.0)
    return (0, value)


def _python_sort(operands, dimension, num_keys):
    """An independent oracle: Python's stable `sorted` on each line, keyed by a tuple."""
    moved = [np.moveaxis(op, dimension, -1) for op in operands]
    outs = [np.empty_like(m) for m in moved]
    for index in np.ndindex(moved[0].shape[:-1]):
        lines = [m[index].tolist() for m in moved]
        order = sorted(range(len(lines[0])),
                       key=lambda i: tuple(_sort_key(lines[k][i]) for k in range(num_keys)))
        for out, line in zip(outs, lines):
            out[index] = [line[i] for i in order]
    return [np.moveaxis(o, -1, dimension) for o in outs]


@st.composite
def sort_operands(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    count = draw(st.integers(1, 3))
    operands = []
    for _ in range(count):
        dtype = np.dtype(draw(st.sampled_from([np.int32, np.float64, np.float32, np.bool_])))
        operands.append(draw(hnp.arrays(dtype, shape, elements=_elements(dtype, nan=True))))
    dimension = draw(st.integers(0, len(shape) - 1))
    num_keys = draw(st.integers(1, count))
    return operands, dimension, num_keys


@SETTINGS
@given(sort_operands())
def test_sort(case):
    operands, dimension, num_keys = case
    params = dict(dimension=dimension, num_keys=num_keys)
    expected = _python_sort(operands, dimension, num_keys)
    outs = red.sort.bind(*operands, **params)
    assert len(outs) == len(operands)
    for out, e in zip(outs, expected):
        assert_same(out, e)
    avals = red.sort.abstract_eval(*[aval_of_value(o) for o in operands], **params)
    assert [a.shape for a in avals] == [o.shape for o in operands]
    assert [a.dtype for a in avals] == [o.dtype for o in operands]
    # check_staged reads a tuple as several outputs; one output goes back bare.
    pack = (lambda outs: outs[0]) if len(operands) == 1 else tuple
    check_staged(lambda *ts: pack(red.sort.bind(*ts, **params)),
                 lambda *vs: pack(_python_sort(list(vs), dimension, num_keys)), *operands)


def test_sort_is_stable_and_builds_argsort():
    x = np.array([[3.0, 1.0, 3.0, np.nan, 1.0], [0.0, 0.0, -1.0, 2.0, np.nan]])
    iota = np.broadcast_to(np.arange(5), x.shape).copy()
    values, order = red.sort.bind(x, iota, dimension=1, num_keys=1)
    assert_same(order, np.argsort(x, axis=1, kind="stable"))
    assert_same(values, np.sort(x, axis=1))


def test_sort_emission():
    def source(fn, *xs):
        closed, _ = stage(fn, *xs)
        return emit_jaxpr_source(closed, "f", [f"x{i}" for i in range(len(xs))])

    x = np.zeros((2, 3))
    assert _emits(source(lambda t: red.sort.bind(t, dimension=1, num_keys=1)[0], x),
                  "np.sort(x0)")
    assert _emits(source(lambda t: red.sort.bind(t, dimension=0, num_keys=1)[0], x),
                  "np.sort(x0, axis=0)")
    assert _emits(source(lambda a, b: tuple(red.sort.bind(a, b, dimension=0, num_keys=2)),
                         x, x), "rt.sort_multi(x0, x1, axis=0, num_keys=2)")
    assert _emits(source(lambda a, b: tuple(red.sort.bind(a, b, dimension=1, num_keys=1)),
                         x, x), "rt.sort_multi(x0, x1)")


@pytest.mark.parametrize("operands,params,match", [
    ([np.zeros((2, 3)), np.zeros((3, 2))], {"dimension": 0, "num_keys": 1}, "one shape"),
    ([np.zeros((2, 3))], {"dimension": 2, "num_keys": 1}, "out of bounds"),
    ([np.zeros(())], {"dimension": 0, "num_keys": 1}, "out of bounds"),
    ([np.zeros((2, 3))], {"dimension": 0, "num_keys": 0}, "num_keys"),
    ([np.zeros((2, 3))], {"dimension": 0, "num_keys": 2}, "num_keys"),
    ([], {"dimension": 0, "num_keys": 1}, "at least one operand"),
])
def test_sort_shape_errors(operands, params, match):
    with pytest.raises(ShapeError, match=match):
        red.sort.bind(*operands, **params)


def test_runtime_sort_multi_needs_valid_keys():
    with pytest.raises(ValueError, match="num_keys"):
        sorting.sort_multi(np.zeros(3), axis=0, num_keys=2)
