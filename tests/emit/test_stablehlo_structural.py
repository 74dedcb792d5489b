"""Structural and indexing primitives lowered to StableHLO, compiled by XLA, held to NumPy.

Two routes: functions written with the NumPy surface (staged by the front end, as a user's
`def` is) and direct binds of the primitives with parameters the surface rarely produces
(non-trailing broadcast dimensions, negative and interior padding, several gather axes,
out-of-range indices that must clamp, repeated scatter positions that must accumulate).
"""
from __future__ import annotations

import numpy as np
import pytest

import s2s
from s2s.emit.stablehlo import lower
from s2s.primitives import indexing as I
from s2s.primitives import structural as S
from tests.helpers import assert_same, check_lowered

pytest.importorskip("jaxlib")

FLOATS = [np.float64, np.float32]


def rand(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check_def(fn, *args):
    """`fn` (a def using the NumPy surface) staged by the front end, lowered, compiled and
    run by XLA, equals `fn(*args)` run by NumPy. Returns the StableHLO text."""
    from s2s_runtime.xla import Executable
    closed = s2s.make_jaxpr(fn)(*args)
    text = lower(closed)
    staged = [a for a in args if isinstance(a, (np.ndarray, np.generic, float))]
    exe = Executable(text, [v.aval.dtype for v in closed.jaxpr.constvars + closed.jaxpr.invars])
    got = exe(*closed.consts, *staged)
    expected = fn(*args)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, e, what="XLA: ")
    return text


# ---------------------------------------------------------------------------------------
# The NumPy surface, in defs


def reshape_fn(x):
    return np.reshape(x, (-1,)) + x.reshape(x.size, 1)[:, 0]


def transpose_fn(x):
    return x.T * 2


def transpose3_fn(x):
    return np.transpose(x, (2, 0, 1))


def squeeze_expand_fn(x):
    return np.squeeze(np.expand_dims(x, 1), 1) + x[None][0]


def broadcast_fn(x, row):
    return x + row[:, None] + np.broadcast_to(row[:, None], x.shape)


def pad_fn(x):
    return np.pad(x, ((1, 2), (0, 3)))


def pad_value_fn(x):
    return np.pad(x, 1, constant_values=2.5)


def slice_fn(x):
    return x[1:, ::2]


def slice_neg_fn(x):
    return x[::-1, 1:3]


def flip_fn(x):
    return np.flip(x) + np.flip(x, 0)


def concatenate_fn(x, y):
    return np.concatenate([x, y, x], axis=0), np.concatenate([x, x], axis=1)


def gather_fn(x, idx):
    return x[idx]


def gather_2d_fn(x, rows, cols):
    return x[rows, cols]


def gather_middle_fn(x, idx):
    return x[:, idx]


def take_fn(x, idx):
    return np.take(x, idx, axis=1)


def dynamic_row_fn(x, i):
    return x[i]


def dynamic_elem_fn(x, i, j):
    return x[i, j] * 2


SURFACE = [
    (reshape_fn, [(3, 4)]),
    (transpose_fn, [(3, 4)]),
    (transpose3_fn, [(2, 3, 4)]),
    (squeeze_expand_fn, [(3, 4)]),
    (broadcast_fn, [(3, 4), (3,)]),
    (pad_fn, [(2, 3)]),
    (pad_value_fn, [(2, 3)]),
    (slice_fn, [(3, 5)]),
    (slice_neg_fn, [(4, 5)]),
    (flip_fn, [(3, 4)]),
    (concatenate_fn, [(2, 3), (1, 3)]),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn,shapes", SURFACE, ids=[f.__name__ for f, _ in SURFACE])
def test_numpy_surface(fn, shapes, dtype):
    check_def(fn, *[rand(s, dtype, i) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("idx", [np.array([0, 2, 2, 1]), np.array([[1, 0], [2, 2]]),
                                 np.array([-1, 0]), np.array([1], np.int32)])
def test_gather_surface(idx, dtype):
    x = rand((3, 4), dtype)
    text = check_def(gather_fn, x, idx)
    assert "stablehlo.gather" in text
    check_def(gather_middle_fn, rand((2, 3, 4), dtype), idx)
    check_def(take_fn, rand((2, 3, 4), dtype), idx)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gather_two_arrays(dtype):
    check_def(gather_2d_fn, rand((3, 4, 2), dtype), np.array([0, 2, 1]), np.array([[3], [0]]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("i", [0, 2, -1, -3])
def test_dynamic_index(i, dtype):
    x = rand((3, 4), dtype)
    text = check_def(dynamic_row_fn, x, np.int64(i))
    assert "stablehlo.dynamic_slice" in text
    check_def(dynamic_elem_fn, x, np.int32(i), np.int64(1))


# ---------------------------------------------------------------------------------------
# Direct binds through check_lowered


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("in_shape,shape,dims", [
    ((3,), (3, 4), (0,)), ((4,), (2, 3, 4), (2,)), ((1, 4), (3, 2, 4), (1, 2)),
    ((), (2, 3), ()), ((3, 1), (3, 5), (0, 1)),
])
def test_broadcast_in_dim(in_shape, shape, dims, dtype):
    def expected(x):
        view = [1] * len(shape)
        for i, d in enumerate(dims):
            view[d] = x.shape[i]
        return np.broadcast_to(np.reshape(x, view), shape)
    check_lowered(lambda x: S.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims),
                  expected, rand(in_shape, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,new", [((2, 3), (3, 2)), ((2, 3, 4), (6, 4)), ((1,), ()),
                                       ((6,), (1, 2, 3, 1))])
def test_reshape(shape, new, dtype):
    check_lowered(lambda x: S.reshape.bind(x, new_sizes=new), lambda x: np.reshape(x, new),
                  rand(shape, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_squeeze_expand_dims(dtype):
    x = rand((2, 1, 3, 1), dtype)
    check_lowered(lambda x: S.squeeze.bind(x, dimensions=(1, 3)),
                  lambda x: np.squeeze(x, (1, 3)), x)
    check_lowered(lambda x: S.expand_dims.bind(x, dimensions=(0, 5)),
                  lambda x: np.expand_dims(x, (0, 5)), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_transpose(perm, dtype):
    check_lowered(lambda x: S.transpose.bind(x, permutation=perm),
                  lambda x: np.transpose(x, perm), rand((2, 3, 4), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("config", [
    ((1, 2, 0), (0, 0, 0)), ((0, 0, 1), (2, 1, 2)), ((-1, 0, 0), (1, -2, 0)),
    ((-1, -1, 1), (0, 0, 0)), ((0, 0, 0), (0, 0, 0)),
])
def test_pad(config, dtype):
    from s2s_runtime import indexing as rt
    x, v = rand((3, 4), dtype), np.asarray(rand((), dtype, 1))
    check_lowered(lambda x, v: S.pad.bind(x, v, padding_config=config),
                  lambda x, v: rt.pad(x, v, config), x, v)
    check_lowered(lambda x: S.pad.bind(x, np.zeros((), dtype)[()], padding_config=config),
                  lambda x: rt.pad(x, np.zeros((), dtype), config), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("starts,limits,strides", [
    ((0, 1), (3, 4), None), ((1, 0), (3, 4), (2, 3)), ((2, 2), (2, 4), (1, 1)),
])
def test_slice(starts, limits, strides, dtype):
    def expected(x):
        st = strides or (1, 1)
        return x[starts[0]:limits[0]:st[0], starts[1]:limits[1]:st[1]]
    check_lowered(lambda x: S.slice.bind(x, start_indices=starts, limit_indices=limits,
                                         strides=strides), expected, rand((3, 4), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [(), (0,), (1,), (0, 2)])
def test_rev(dims, dtype):
    check_lowered(lambda x: S.rev.bind(x, dimensions=dims), lambda x: np.flip(x, dims),
                  rand((2, 3, 4), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_concatenate(dtype):
    a, b, c = rand((2, 3), dtype, 0), rand((2, 1), dtype, 1), rand((2, 2), dtype, 2)
    check_lowered(lambda a, b, c: S.concatenate.bind(a, b, c, dimension=1),
                  lambda a, b, c: np.concatenate([a, b, c], 1), a, b, c)
    check_lowered(lambda a: S.concatenate.bind(a, dimension=0), lambda a: a, a)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (-5, 9), (7, -1)])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_dynamic_slice_clamps(starts, index_dtype, dtype):
    from s2s_runtime import indexing as rt
    x = rand((4, 5), dtype)
    i, j = (np.asarray(s, index_dtype) for s in starts)
    check_lowered(lambda x, i, j: S.dynamic_slice.bind(x, i, j, slice_sizes=(2, 3)),
                  lambda x, i, j: rt.dynamic_slice(x, (i, j), (2, 3)), x, i, j)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("starts", [(0, 0), (1, 2), (-5, 9), (7, -1)])
def test_dynamic_update_slice_clamps(starts, dtype):
    from s2s_runtime import indexing as rt
    x, u = rand((4, 5), dtype), rand((2, 3), dtype, 1)
    i, j = np.asarray(starts[0], np.int32), np.asarray(starts[1], np.int64)
    check_lowered(lambda x, u, i, j: S.dynamic_update_slice.bind(x, u, i, j),
                  lambda x, u, i, j: rt.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


GATHER_CASES = [   # operand shape, index shape B, axes
    ((5,), (3,), (0,)), ((4, 3), (2, 2), (0,)), ((4, 3), (5,), (1,)),
    ((3, 4, 5), (2,), (2, 0)), ((3, 4, 5), (), (1,)), ((3, 4, 5), (2, 3), (0, 1, 2)),
    ((2, 3, 4), (0,), (1,)),
]


def _indices(operand_shape, batch, axes, seed):
    """Index arrays with in-range, repeated and out-of-range (clamped) values."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-2, operand_shape[a] + 2, batch).astype(np.int64) for a in axes]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,batch,axes", GATHER_CASES)
def test_gather(shape, batch, axes, dtype):
    from s2s_runtime import indexing as rt
    x = rand(shape, dtype)
    idx = _indices(shape, batch, axes, 1)
    text = check_lowered(lambda x, *idx: I.gather.bind(x, *idx, axes=axes),
                         lambda x, *idx: rt.gather(x, idx, axes), x, *idx)
    assert "stablehlo.gather" in text


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,batch,axes", GATHER_CASES)
def test_scatter_add(shape, batch, axes, dtype):
    from s2s_runtime import indexing as rt
    x = rand(shape, dtype)
    idx = _indices(shape, batch, axes, 2)
    updates = rand(tuple(batch) + tuple(d for i, d in enumerate(shape) if i not in axes), dtype, 3)
    text = check_lowered(lambda x, u, *idx: I.scatter_add.bind(x, u, *idx, axes=axes),
                         lambda x, u, *idx: rt.scatter_add(x, u, idx, axes), x, updates, *idx)
    assert "stablehlo.scatter" in text


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_add_is_add_at(dtype):
    """Repeated positions accumulate, as np.add.at does."""
    x, u = rand((4, 3), dtype), rand((5, 3), dtype, 1)
    idx = np.array([0, 2, 0, 0, 3])

    def add_at(x, u, idx):
        out = x.copy()
        np.add.at(out, idx, u)
        return out
    check_lowered(lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(0,)), add_at, x, u, idx)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_operands(dtype):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    idx = np.array([2, 0, 2])
    check_lowered(lambda x, i: I.gather.bind(x, i, axes=(0,)), lambda x, i: x[i], x, idx)
    u = np.ones((3, 4), dtype)

    def add_at(x, u, i):
        out = x.copy()
        np.add.at(out, i, u)
        return out
    check_lowered(lambda x, u, i: I.scatter_add.bind(x, u, i, axes=(0,)), add_at, x, u, idx)
    check_def(pad_fn, x)
    check_def(transpose_fn, x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_literal_operands(dtype):
    """A scalar constant operand (a jaxpr literal) lowers like any 0-d operand."""
    one = np.ones((), dtype)[()]
    check_lowered(lambda x: S.broadcast_in_dim.bind(one, shape=(2, 3), broadcast_dimensions=())
                  + x, lambda x: x + 1, rand((2, 3), dtype))
    check_lowered(lambda x: S.reshape.bind(one, new_sizes=(1, 1)) * x, lambda x: x * 1,
                  rand((1, 1), dtype))
