"""Structural primitives against NumPy: impl, shape rule, staged jaxpr and emitted module.

Each primitive is bound inside a builder on hypothesis-drawn shapes and parameters and
held to an oracle written with plain NumPy (`check_staged` runs eval_jaxpr and the emitted
module); the shape rules' errors and the emitted spelling are pinned separately.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import Literal, ShapedArray
from s2s.emit.pyexpr import Expr, python_rules
from s2s.errors import ShapeError
from s2s.primitives import structural as S
from tests.helpers import check_staged, stage

SETTINGS = settings(max_examples=30, deadline=None)
DTYPES = [np.float32, np.float64, np.int32, np.bool_]


def random_array(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        values = rng.random(shape) < 0.5
    elif dtype.kind in "iu":
        values = rng.integers(-9, 10, size=shape)
    else:
        values = rng.standard_normal(shape)
    return np.asarray(values, dtype=dtype)


@st.composite
def arrays(draw, min_dims=0, max_dims=4, min_side=0, max_side=4, dtypes=DTYPES):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                  max_side=max_side))
    dtype = draw(st.sampled_from(dtypes))
    return random_array(shape, dtype, draw(st.integers(0, 2**16)))


def subsets(n: int, size: int | None = None):
    """Sorted tuples of distinct axes below n (of `size` elements when given)."""
    if n == 0:
        return st.just(())
    return st.sets(st.integers(0, n - 1), min_size=size or 0, max_size=n if size is None else size
                   ).map(lambda s: tuple(sorted(s)))


def eager(prim, *args, **params):
    """Binding outside a builder runs the shape rule and the impl."""
    return prim.bind(*args, **params)


# ---------------------------------------------------------------------------------------
# broadcast_in_dim


@st.composite
def broadcast_cases(draw):
    out_shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    kept = draw(subsets(len(out_shape)))
    in_shape = tuple(draw(st.sampled_from([1, out_shape[d]])) for d in kept)
    x = random_array(in_shape, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 99)))
    return x, out_shape, tuple(kept)


@SETTINGS
@given(broadcast_cases())
def test_broadcast_in_dim(case):
    x, shape, dims = case
    missing = tuple(d for d in range(len(shape)) if d not in dims)

    def expected(x):
        return np.broadcast_to(np.expand_dims(x, missing), shape)

    check_staged(lambda x: S.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims),
                 expected, x)
    np.testing.assert_array_equal(eager(S.broadcast_in_dim, x, shape=shape,
                                        broadcast_dimensions=dims), expected(x))


def test_broadcast_in_dim_of_a_literal_keeps_its_dtype():
    closed = check_staged(
        lambda x: S.broadcast_in_dim.bind(Literal(np.float32(2.0), ShapedArray((), np.float32)),
                                          shape=(2, 3), broadcast_dimensions=()),
        lambda x: np.full((2, 3), 2.0, np.float32), np.zeros(1))
    assert closed.out_avals[0].dtype == np.float32


# ---------------------------------------------------------------------------------------
# reshape, transpose, squeeze, expand_dims, rev


@st.composite
def reshape_cases(draw):
    x = draw(arrays())
    shape = x.shape
    candidates = [(x.size,), shape[::-1], (1,) + shape, shape + (1,),
                  tuple(d for d in shape if d != 1)]
    if len(shape) >= 2:
        candidates.append((shape[0] * shape[1],) + shape[2:])
    return x, draw(st.sampled_from(candidates))


@SETTINGS
@given(reshape_cases())
def test_reshape(case):
    x, new = case
    check_staged(lambda x: S.reshape.bind(x, new_sizes=new), lambda x: x.reshape(new), x)


@SETTINGS
@given(st.data())
def test_transpose(data):
    x = data.draw(arrays())
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    check_staged(lambda x: S.transpose.bind(x, permutation=perm),
                 lambda x: np.transpose(x, perm), x)


@SETTINGS
@given(st.data())
def test_squeeze(data):
    x = data.draw(arrays(max_side=2))
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    dims = tuple(ones[i] for i in data.draw(subsets(len(ones))))
    check_staged(lambda x: S.squeeze.bind(x, dimensions=dims),
                 lambda x: np.squeeze(x, axis=dims), x)


@SETTINGS
@given(st.data())
def test_expand_dims(data):
    x = data.draw(arrays(max_dims=3))
    k = data.draw(st.integers(0, 2))
    dims = data.draw(subsets(x.ndim + k, k))
    check_staged(lambda x: S.expand_dims.bind(x, dimensions=dims),
                 lambda x: np.expand_dims(x, dims), x)


@SETTINGS
@given(st.data())
def test_rev(data):
    x = data.draw(arrays())
    dims = data.draw(subsets(x.ndim))
    check_staged(lambda x: S.rev.bind(x, dimensions=dims), lambda x: np.flip(x, dims), x)


# ---------------------------------------------------------------------------------------
# concatenate


@SETTINGS
@given(st.data())
def test_concatenate(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3))
    dim = data.draw(st.integers(0, len(shape) - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    xs = [random_array(shape[:dim] + (n,) + shape[dim + 1:], dtype, i) for i, n in enumerate(sizes)]
    check_staged(lambda *xs: S.concatenate.bind(*xs, dimension=dim),
                 lambda *xs: np.concatenate(xs, axis=dim), *xs)


# ---------------------------------------------------------------------------------------
# pad


def pad_oracle(x, value, config):
    """lax.pad written axis by axis with Python lists: interior, then edges, then crops."""
    for axis, (lo, hi, interior) in enumerate(config):
        moved = np.moveaxis(x, axis, 0)
        fill = np.full(moved.shape[1:], value, x.dtype)
        rows = []
        for i, row in enumerate(moved):
            if i:
                rows += [fill] * interior
            rows.append(row)
        rows = [fill] * max(lo, 0) + rows + [fill] * max(hi, 0)
        rows = rows[max(-lo, 0):len(rows) - max(-hi, 0)]
        stacked = np.stack(rows) if rows else np.zeros((0,) + moved.shape[1:], x.dtype)
        x = np.moveaxis(stacked, 0, axis)
    return x


@st.composite
def pad_cases(draw):
    x = draw(arrays(max_dims=3, max_side=3, dtypes=[np.float32, np.int32]))
    config = []
    for d in x.shape:
        interior = draw(st.integers(0, 2))
        inner = d + max(d - 1, 0) * interior
        lo = draw(st.integers(-inner - 2, 3))
        hi = draw(st.integers(-(inner + lo), max(3, -(inner + lo))))
        config.append((lo, hi, interior))
    value = draw(st.sampled_from([0, 7]))
    return x, np.asarray(value, x.dtype)[()], tuple(config)


@SETTINGS
@given(pad_cases())
def test_pad(case):
    x, value, config = case
    check_staged(lambda x, v: S.pad.bind(x, v, padding_config=config),
                 lambda x, v: pad_oracle(x, v, config), x, value)


@pytest.mark.parametrize("config, emitted", [
    (((1, 2, 0), (0, 0, 0)), "np.pad(x, ((1, 2), (0, 0)))"),
    (((1, 1, 0), (1, 1, 0)), "np.pad(x, 1)"),
    (((0, 2, 0), (0, 2, 0)), "np.pad(x, (0, 2))"),
    (((-1, 0, 0), (0, -2, 0)), "x[1:, :-2]"),
    (((-1, 2, 0), (0, 0, 0)), "rt.pad(x, 0, ((-1, 2, 0), (0, 0, 0)))"),
    (((0, 0, 1), (0, 0, 0)), "rt.pad(x, 0, ((0, 0, 1), (0, 0, 0)))"),
])
def test_pad_emits_np_pad_where_it_fits(config, emitted):
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    closed = check_staged(lambda x: S.pad.bind(x, 0, padding_config=config),
                          lambda x: pad_oracle(x, 0, config), x)
    (eqn,) = closed.eqns
    assert python_rules[S.pad](eqn, Expr("x"), Expr("0")).text == emitted


def test_pad_with_a_staged_value_uses_constant_values():
    x = np.ones((2, 2), np.float32)
    closed = check_staged(lambda x, v: S.pad.bind(x, v, padding_config=((1, 0, 0), (0, 1, 0))),
                          lambda x, v: np.pad(x, ((1, 0), (0, 1)), constant_values=v),
                          x, np.float32(3))
    (eqn,) = closed.eqns
    assert python_rules[S.pad](eqn, Expr("x"), Expr("v")).text == \
        "np.pad(x, ((1, 0), (0, 1)), constant_values=v)"


# ---------------------------------------------------------------------------------------
# slice


@st.composite
def slice_cases(draw):
    x = draw(arrays())
    starts, limits, strides = [], [], []
    for d in x.shape:
        start = draw(st.integers(0, d))
        starts.append(start)
        limits.append(draw(st.integers(start, d)))
        strides.append(draw(st.integers(1, 3)))
    return x, tuple(starts), tuple(limits), tuple(strides)


@SETTINGS
@given(slice_cases())
def test_slice(case):
    x, starts, limits, strides = case
    index = tuple(slice(s, l, st) for s, l, st in zip(starts, limits, strides))
    check_staged(lambda x: S.slice.bind(x, start_indices=starts, limit_indices=limits,
                                        strides=strides),
                 lambda x: x[index], x)


def test_slice_without_strides():
    x = np.arange(12.0).reshape(3, 4)
    check_staged(lambda x: S.slice.bind(x, start_indices=(1, 0), limit_indices=(3, 2),
                                        strides=None), lambda x: x[1:3, 0:2], x)


def test_squeeze_of_a_one_element_slice_is_written_as_an_int_index():
    x = np.arange(24.0).reshape(2, 3, 4)

    def f(x):
        y = S.slice.bind(x, start_indices=(1, 0, 2), limit_indices=(2, 3, 4), strides=(1, 1, 1))
        return S.squeeze.bind(y, dimensions=(0,))

    closed = check_staged(f, lambda x: x[1, :, 2:], x)
    slice_eqn, squeeze_eqn = closed.eqns
    sliced = python_rules[S.slice](slice_eqn, Expr("x"))
    assert python_rules[S.squeeze](squeeze_eqn, sliced).text == "x[1, :, 2:]"


# ---------------------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice (start indices clamped as XLA clamps them)


def clamp_starts(starts, shape, sizes):
    return [min(max(int(s), 0), d - n) for s, d, n in zip(starts, shape, sizes)]


@st.composite
def dynamic_slice_cases(draw):
    x = draw(arrays(min_dims=0, max_dims=3))
    sizes = tuple(draw(st.integers(0, d)) for d in x.shape)
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    starts = tuple(index_dtype(draw(st.integers(-3, d + 3))) for d in x.shape)
    return x, starts, sizes


@SETTINGS
@given(dynamic_slice_cases())
def test_dynamic_slice(case):
    x, starts, sizes = case

    def expected(x, *starts):
        begin = clamp_starts(starts, x.shape, sizes)
        return x[tuple(slice(b, b + n) for b, n in zip(begin, sizes))]

    check_staged(lambda x, *starts: S.dynamic_slice.bind(x, *starts, slice_sizes=sizes),
                 expected, x, *starts)


@SETTINGS
@given(dynamic_slice_cases())
def test_dynamic_update_slice(case):
    x, starts, sizes = case
    update = random_array(sizes, x.dtype, 7)

    def expected(x, update, *starts):
        out = x.copy()
        begin = clamp_starts(starts, x.shape, sizes)
        out[tuple(slice(b, b + n) for b, n in zip(begin, sizes))] = update
        return out

    check_staged(lambda x, u, *starts: S.dynamic_update_slice.bind(x, u, *starts),
                 expected, x, update, *starts)


def test_dynamic_slice_with_literal_starts():
    x = np.arange(10.0)
    check_staged(lambda x: S.dynamic_slice.bind(x, 8, slice_sizes=(4,)), lambda x: x[6:], x)


# ---------------------------------------------------------------------------------------
# Weak types pass through


@pytest.mark.parametrize("prim, params", [
    (S.reshape, dict(new_sizes=(1,))),
    (S.expand_dims, dict(dimensions=(0,))),
    (S.broadcast_in_dim, dict(shape=(3,), broadcast_dimensions=())),
    (S.transpose, dict(permutation=())),
])
def test_results_keep_the_operand_weak_type(prim, params):
    weak = ShapedArray((), np.float32, weak_type=True)
    assert prim.abstract_eval(weak, **params).weak_type
    assert not prim.abstract_eval(weak.strip_weak_type(), **params).weak_type


# ---------------------------------------------------------------------------------------
# Shape errors

f32 = lambda *shape: ShapedArray(shape, np.float32)  # noqa: E731
i32 = lambda *shape: ShapedArray(shape, np.int32)  # noqa: E731


@pytest.mark.parametrize("prim, avals, params, match", [
    (S.broadcast_in_dim, [f32(3)], dict(shape=(4,), broadcast_dimensions=(0,)), "cannot broadcast"),
    (S.broadcast_in_dim, [f32(3)], dict(shape=(3, 3), broadcast_dimensions=()), "one output"),
    (S.broadcast_in_dim, [f32(3, 1)], dict(shape=(1, 3), broadcast_dimensions=(1, 0)),
     "increasing"),
    (S.broadcast_in_dim, [f32(3)], dict(shape=(3,), broadcast_dimensions=(1,)), "out of range"),
    (S.reshape, [f32(2, 3)], dict(new_sizes=(4,)),
     r"cannot reshape array of size 6 into shape \(4,\)"),
    (S.reshape, [f32(2, 3)], dict(new_sizes=(-1, 3)), "non-negative"),
    (S.transpose, [f32(2, 3)], dict(permutation=(0, 0)), "not a permutation"),
    (S.transpose, [f32(2, 3)], dict(permutation=(0,)), "not a permutation"),
    (S.squeeze, [f32(2, 1)], dict(dimensions=(0,)), "size not equal to one"),
    (S.squeeze, [f32(2, 1)], dict(dimensions=(2,)), "out of range"),
    (S.expand_dims, [f32(2)], dict(dimensions=(0, 0)), "repeated"),
    (S.expand_dims, [f32(2)], dict(dimensions=(3,)), "out of range"),
    (S.concatenate, [f32(2, 3), f32(2, 4)], dict(dimension=0), "along dimension 1"),
    (S.concatenate, [f32(2, 3), f32(2)], dict(dimension=0), "same number of dimensions"),
    (S.concatenate, [f32(2), i32(2)], dict(dimension=0), "one dtype"),
    (S.concatenate, [f32()], dict(dimension=0), "zero-dimensional"),
    (S.concatenate, [f32(2)], dict(dimension=1), "out of range"),
    (S.concatenate, [], dict(dimension=0), "at least one"),
    (S.pad, [f32(3), i32()], dict(padding_config=((1, 1, 0),)), "padding value"),
    (S.pad, [f32(3), f32(1)], dict(padding_config=((1, 1, 0),)), "padding value"),
    (S.pad, [f32(3), f32()], dict(padding_config=((1, 1, -1),)), "interior"),
    (S.pad, [f32(3), f32()], dict(padding_config=((-3, -1, 0),)), "negative size"),
    (S.pad, [f32(3), f32()], dict(padding_config=()), "one .* triple"),
    (S.slice, [f32(3)], dict(start_indices=(2,), limit_indices=(1,), strides=(1,)), "out of range"),
    (S.slice, [f32(3)], dict(start_indices=(0,), limit_indices=(4,), strides=(1,)), "out of range"),
    (S.slice, [f32(3)], dict(start_indices=(0,), limit_indices=(3,), strides=(0,)), "positive"),
    (S.slice, [f32(3)], dict(start_indices=(0, 0), limit_indices=(3, 3), strides=None), "each of"),
    (S.dynamic_slice, [f32(3), i32()], dict(slice_sizes=(4,)), "do not fit"),
    (S.dynamic_slice, [f32(3), f32()], dict(slice_sizes=(1,)), "integer scalars"),
    (S.dynamic_slice, [f32(3), i32(1)], dict(slice_sizes=(1,)), "integer scalars"),
    (S.dynamic_slice, [f32(3, 3), i32()], dict(slice_sizes=(1, 1)), "one start index"),
    (S.dynamic_update_slice, [f32(3), f32(4), i32()], {}, "does not fit"),
    (S.dynamic_update_slice, [f32(3), i32(2), i32()], {}, "dtype"),
    (S.dynamic_update_slice, [f32(3), f32(2)], {}, "one start index"),
    (S.rev, [f32(3)], dict(dimensions=(1,)), "out of range"),
])
def test_shape_errors(prim, avals, params, match):
    with pytest.raises(ShapeError, match=match):
        prim.abstract_eval(*avals, **params)


def test_eager_bind_checks_the_shape_rule():
    with pytest.raises(ShapeError, match="cannot reshape"):
        S.reshape.bind(np.zeros((2, 3)), new_sizes=(5,))


# ---------------------------------------------------------------------------------------
# Emitted spelling


def emitted(fn, *args) -> str:
    closed, _ = stage(fn, *args)
    (eqn,) = closed.eqns
    names = [Expr(n) for n in "xyzw"]
    return python_rules[eqn.primitive](eqn, *names[:len(eqn.invars)]).text


@pytest.mark.parametrize("fn, shape, text", [
    (lambda x: S.transpose.bind(x, permutation=(1, 0)), (2, 3), "x.T"),
    (lambda x: S.transpose.bind(x, permutation=(1, 0, 2)), (2, 3, 4), "x.transpose(1, 0, 2)"),
    (lambda x: S.reshape.bind(x, new_sizes=(3, 2)), (2, 3), "x.reshape(3, 2)"),
    (lambda x: S.reshape.bind(x, new_sizes=()), (1, 1), "x.reshape(())"),
    (lambda x: S.broadcast_in_dim.bind(x, shape=(2, 3), broadcast_dimensions=(1,)), (3,),
     "np.broadcast_to(x, (2, 3))"),
    (lambda x: S.broadcast_in_dim.bind(x, shape=(3, 2), broadcast_dimensions=(0,)), (3,),
     "np.broadcast_to(x[:, None], (3, 2))"),
    (lambda x: S.squeeze.bind(x, dimensions=(1,)), (2, 1), "np.squeeze(x, axis=1)"),
    (lambda x: S.expand_dims.bind(x, dimensions=(0,)), (2, 3), "x[None]"),
    (lambda x: S.expand_dims.bind(x, dimensions=(1,)), (2, 3), "x[:, None]"),
    (lambda x: S.expand_dims.bind(x, dimensions=(2,)), (2, 3), "x[..., None]"),
    (lambda x: S.slice.bind(x, start_indices=(0, 1), limit_indices=(2, 3), strides=(1, 1)),
     (2, 4), "x[:, 1:3]"),
    (lambda x: S.slice.bind(x, start_indices=(0,), limit_indices=(5,), strides=(2,)), (5,),
     "x[::2]"),
    (lambda x: S.rev.bind(x, dimensions=(0,)), (3,), "x[::-1]"),
    (lambda x: S.rev.bind(x, dimensions=(1,)), (3, 2), "np.flip(x, axis=1)"),
    (lambda x: S.rev.bind(x, dimensions=(0, 1)), (3, 2), "np.flip(x, axis=(0, 1))"),
    (lambda x, y: S.concatenate.bind(x, y, dimension=1), ((2, 3), (2, 1)),
     "np.concatenate([x, y], axis=1)"),
    (lambda x, y: S.concatenate.bind(x, y, dimension=0), ((2, 3), (2, 3)),
     "np.concatenate([x, y])"),
])
def test_emitted_spelling(fn, shape, text):
    shapes = shape if isinstance(shape[0], tuple) else (shape,)
    args = [np.zeros(s, np.float32) for s in shapes]
    assert emitted(fn, *args) == text
