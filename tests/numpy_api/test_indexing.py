"""NumPy indexing (`getitem`), np.take, np.take_along_axis and np.compress against NumPy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.core import ShapedArray
from s2s.errors import ConcretizationError, S2SError, ShapeError
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api import indexing as I
from s2s.staging import JaxprBuilder
from tests.helpers import assert_same, check_numpy_and_jax, check_staged
from tests.primitives.test_structural import random_array


class _Index:
    """`ix[1, :, None]` is the index `(1, slice(None), None)`, written as in code."""

    def __getitem__(self, index):
        return index


ix = _Index()
X = random_array((4, 5, 6), np.float32, 0)


def same(fn, np_fn, *args):
    """Staged (eval_jaxpr and emitted module) and eager results equal NumPy's."""
    closed = check_staged(fn, np_fn, *args)
    assert_same(fn(*args), np_fn(*args), what="eager: ")
    return closed


# ---------------------------------------------------------------------------------------
# Static indices on a 3-d array

STATIC_INDICES = [
    ix[1], ix[-1], ix[0, 2], ix[3, -5, 5], ix[:], ix[1:3], ix[-3:], ix[:, 1:4:2], ix[::2, ::-1],
    ix[::-1], ix[::-2], ix[3:0:-1], ix[-1:-5:-2], ix[10:], ix[:, 7:2], ix[2:2], ix[5:1:1],
    ix[..., 1], ix[1, ...], ix[..., 1:3, 2], ix[None], ix[:, None], ix[..., None],
    ix[None, 1, None, :, None], ix[()], ix[...], ix[1, ..., None],
    ix[[0, 2]], ix[[-1, 0, 0]], ix[:, [1, 3]], ix[..., [5, 0]], ix[[0, 1], [2, 3]],
    ix[[[0], [3]], [1, 2, 4]], ix[[0, 1], :, [2, 3]], ix[:, [0, 1], [2, 3]],
    ix[1, :, [2, 3]], ix[[1, 2], 1], ix[:, 1, [2, 3]], ix[1, [2, 3], :], ix[[0, 1], 1:3, 0],
    ix[None, [0, 1], :, [0, 1]], ix[[0, 1], None, [0, 1]], ix[:, [0, 1], ..., [0, 1]],
    ix[[0, 1], ..., [0, 1]], ix[np.array([[1, 2], [3, 0]])], ix[::-1, [0, 1]],
    ix[np.array(2)], ix[np.int32(1), np.int64(-1)], ix[1:3, [0, 2], ::-2],
    ix[[]], ix[np.array([], np.int64), 1],
    ix[True], ix[False], ix[..., True], ix[[0, 1], True], ix[:, True, [0, 1]],
    ix[0, np.bool_(True)],
    ix[np.array([True, False, True, False])], ix[:, [True, False, True, False, True]],
    ix[np.arange(20).reshape(4, 5) % 3 == 0], ix[1, np.arange(30).reshape(5, 6) % 4 == 1],
    ix[np.zeros((4, 5), bool)], ix[np.array([True, False, True, True]), 1:3, [0, 1, 2]],
    ix[[True, False, True, False], [0, 2]],
]


@pytest.mark.parametrize("index", STATIC_INDICES, ids=[repr(i) for i in STATIC_INDICES])
def test_static_index(index):
    same(lambda x: I.getitem(x, index), lambda x: x[index], X)


@pytest.mark.parametrize("x, index", [
    (np.float64(3.0) * np.ones(()), ix[()]),
    (np.ones(()), ix[None]),
    (np.ones(()), ix[...]),
    (np.ones(()), ix[True]),
    (np.arange(5, dtype=np.int32), ix[3]),
    (np.arange(5, dtype=np.int32), ix[[4, 0]]),
    (np.arange(5) > 2, ix[::-1]),
    (np.arange(6.0).reshape(2, 3), ix[1]),
    (np.arange(6.0).reshape(2, 3), ix[:, -1]),
    (np.zeros((0, 3)), ix[:, 1]),
    (np.zeros((0, 3)), ix[[], 1]),
])
def test_static_index_on_other_arrays(x, index):
    same(lambda x: I.getitem(x, index), lambda x: x[index], x)


def test_index_lists_of_python_values():
    same(lambda x: I.getitem(x, [1, 2]), lambda x: x[[1, 2]], X)
    same(lambda x: I.getitem(x, ([0, 3], [[1], [2]])), lambda x: x[[0, 3], [[1], [2]]], X)


def test_static_ints_and_slices_stage_slice_and_squeeze():
    closed = same(lambda x: I.getitem(x, ix[1, ::-1, 2:4]), lambda x: x[1, ::-1, 2:4], X)
    assert [e.primitive.name for e in closed.eqns] == ["slice", "squeeze", "rev"]


def test_an_int_index_is_written_as_an_int():
    from s2s.emit.python import emit_jaxpr_source
    closed = same(lambda x: I.getitem(x, ix[1, :, 2:4]), lambda x: x[1, :, 2:4], X)
    assert "x[1, :, 2:4]" in emit_jaxpr_source(closed)


def test_the_full_slice_adds_no_equation():
    closed = same(lambda x: I.getitem(x, ix[:, ...]), lambda x: x[:, ...], X)
    assert not closed.eqns


# ---------------------------------------------------------------------------------------
# Staged indices


def test_staged_scalar_index_is_a_dynamic_slice():
    for i in [np.int64(2), np.int64(-1), np.int32(-4), np.int32(3), np.uint8(1)]:
        closed = same(lambda x, i: I.getitem(x, i), lambda x, i: x[i], X, i)
        names = [e.primitive.name for e in closed.eqns]
        assert "dynamic_slice" in names and "gather" not in names


@pytest.mark.parametrize("build", [
    lambda i: ix[:, i],
    lambda i: ix[i, 1:3],
    lambda i: ix[..., i],
    lambda i: ix[1, i, ::-1],
    lambda i: ix[i, None, [0, 1]],
    lambda i: ix[[0, 1], i],
    lambda i: ix[[0, 1], :, i],
])
def test_staged_scalar_with_other_indices(build):
    i = np.int64(-2)
    same(lambda x, i: I.getitem(x, build(i)), lambda x, i: x[build(i)], X, i)


@pytest.mark.parametrize("index_fn, index_args", [
    (lambda i: ix[i], [np.array([3, 0, -1])]),
    (lambda i: ix[:, i], [np.array([[1, -2], [0, 4]], np.int32)]),
    (lambda i, j: ix[i, :, j], [np.array([0, 3]), np.array([[5], [-6]])]),
    (lambda i, j: ix[:, i, j], [np.array([0, 3]), np.array([1, 2])]),
    (lambda i, j: ix[i, j], [np.array([0, 3]), np.array([1, 2])]),
    (lambda i: ix[i, [1, 2]], [np.array([[0], [1]])]),
    (lambda i: ix[None, 1, i], [np.array([0, 1, 2])]),
    (lambda i: ix[::-1, i, 1:], [np.array([4, 0])]),
    (lambda i: ix[i, i], [np.array([1, 2], np.uint8)]),
    (lambda i, j: ix[i, j], [np.array([1, 2]), np.int64(3)]),
    (lambda i, j: ix[i, :, j], [np.array([1, 2]), np.int64(3)]),
])
def test_staged_index_arrays(index_fn, index_args):
    same(lambda x, *idx: I.getitem(x, index_fn(*idx)),
         lambda x, *idx: x[index_fn(*idx)], X, *index_args)


def test_a_list_of_staged_scalars_is_an_index_array():
    i, j = np.int64(1), np.int64(-1)
    same(lambda x, i, j: I.getitem(x, [i, j]), lambda x, i, j: x[[i, j]], X, i, j)


def test_staged_indices_are_clamped_as_xla_clamps():
    out = None
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((4,), np.float32))
        i = builder.new_arg(ShapedArray((), np.int64))
        out = builder.build([I.getitem(x, i)])
    from s2s.core import eval_jaxpr
    values = np.arange(4, dtype=np.float32)
    assert eval_jaxpr(out, values, np.int64(7))[0] == 3.0
    assert eval_jaxpr(out, values, np.int64(-9))[0] == 0.0


# ---------------------------------------------------------------------------------------
# Random indices against NumPy: where NumPy raises IndexError, s2s raises ShapeError


@st.composite
def index_cases(draw):
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    x = random_array(shape, draw(st.sampled_from([np.float32, np.int32])), draw(st.integers(0, 99)))
    entries, staged = [], []
    axis = 0
    while axis < ndim or draw(st.booleans()):
        if len(entries) > 5:
            break
        size = shape[axis] if axis < ndim else 3
        kind = draw(st.sampled_from(["int", "slice", "none", "array", "ellipsis", "mask",
                                     "staged int", "staged array"]))
        if kind == "int":
            entries.append(draw(st.integers(-size - 1, size)))
        elif kind == "slice":
            bound = st.none() | st.integers(-size - 2, size + 2)
            entries.append(slice(draw(bound), draw(bound),
                                 draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))))
        elif kind == "none":
            entries.append(None)
            continue
        elif kind == "ellipsis":
            entries.append(Ellipsis)
            continue
        elif kind == "mask":
            entries.append(np.random.default_rng(len(entries)).random(size) < 0.5)
        elif kind == "array":
            n = draw(st.integers(0, 3))
            entries.append(np.asarray(draw(st.lists(st.integers(-size, size - 1), min_size=n,
                                                    max_size=n)), dtype=np.int64))
        elif kind == "staged int":
            staged.append(np.int64(draw(st.integers(-size, size - 1))))
            entries.append(("staged", len(staged) - 1))
        else:
            n = draw(st.integers(1, 3))
            staged.append(np.asarray(draw(st.lists(st.integers(-size, size - 1), min_size=n,
                                                   max_size=n)), dtype=np.int32))
            entries.append(("staged", len(staged) - 1))
        axis += 1
    return x, tuple(entries), staged


def _resolve(entries, staged):
    return tuple(staged[e[1]] if isinstance(e, tuple) else e for e in entries)


@settings(max_examples=120, deadline=None)
@given(index_cases())
def test_random_indices(case):
    x, entries, staged = case
    try:
        expected = x[_resolve(entries, staged)]
    except IndexError:
        try:
            x[_resolve(entries, [np.zeros_like(v) for v in staged])]
            return   # only the staged values are out of bounds: s2s clamps those (XLA's rule)
        except IndexError:
            pass
        with pytest.raises(ShapeError):
            with JaxprBuilder() as builder:
                args = [builder.new_arg(ShapedArray(np.shape(s), s.dtype)) for s in staged]
                I.getitem(builder.new_arg(ShapedArray(x.shape, x.dtype)), _resolve(entries, args))
        return
    assert expected is not None
    same(lambda x, *s: I.getitem(x, _resolve(entries, s)),
         lambda x, *s: x[_resolve(entries, s)], x, *staged)


# ---------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("index, match", [
    (ix[4], "index 4 is out of bounds for axis 0 with size 4"),
    (ix[-5], "index -5 is out of bounds for axis 0 with size 4"),
    (ix[:, 5], "index 5 is out of bounds for axis 1 with size 5"),
    (ix[[0, 9]], "index 9 is out of bounds for axis 0 with size 4"),
    (ix[:, :, [-7]], "index -7 is out of bounds for axis 2 with size 6"),
    (ix[0, 0, 0, 0], "too many indices for array: array is 3-dimensional, but 4 were indexed"),
    (ix[..., ...], "an index can only have a single ellipsis"),
    (ix[1.0], "only integers, slices"),
    (ix["a"], "only integers, slices"),
    (ix[np.array([1.0])], "must be of integer \\(or boolean\\) type"),
    (ix[[0, 1], [0, 1, 2]], "shape mismatch: indexing arrays could not be broadcast together "
                            "with shapes \\(2,\\) \\(3,\\)"),
    (ix[np.ones(3, bool)], "boolean index did not match indexed array along axis 0; size of "
                           "axis is 4 but size of corresponding boolean axis is 3"),
    (ix[::0], "slice step cannot be zero"),
    (ix[1.5:], "slice indices must be integers"),
])
def test_index_errors(index, match):
    with pytest.raises(ShapeError, match=match):
        I.getitem(X, index)


def test_a_staged_boolean_mask_is_refused_with_advice():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float32))
        mask = builder.new_arg(ShapedArray((3,), np.bool_))
        with pytest.raises(ShapeError) as info:
            I.getitem(x, mask)
    assert isinstance(info.value, S2SError)
    assert "np.where" in info.value.help and "static" in info.value.what


def test_staged_slice_bounds_are_refused():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float32))
        i = builder.new_arg(ShapedArray((), np.int64))
        with pytest.raises(ConcretizationError, match="slice start must be static") as info:
            I.getitem(x, slice(i, None))
    assert "dynamic_slice" in info.value.help


def test_a_staged_index_into_an_empty_axis_is_out_of_bounds():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((0, 3), np.float32))
        i = builder.new_arg(ShapedArray((), np.int64))
        with pytest.raises(ShapeError, match="out of bounds for axis 0 with size 0"):
            I.getitem(x, i)


def test_indexing_with_32_bit_canonicalization():
    from s2s import config
    config.update("enable_x64", False)
    try:
        x = np.arange(24.0).reshape(2, 3, 4)
        closed = check_staged(lambda x: I.getitem(x, ix[[1, 0], :, np.array([True, False] * 2)]),
                              lambda x: x[[1, 0], :, np.array([True, False] * 2)].astype(np.float32),
                              x.astype(np.float32))
        assert all(c.dtype == np.int32 for c in closed.consts)
        i = np.array([[2], [0], [3]], np.int32)
        check_staged(lambda x, i: I.take_along_axis(x, i, axis=1),
                     lambda x, i: np.take_along_axis(x, i, axis=1), x[0].astype(np.float32), i)
    finally:
        config.update("enable_x64", True)


def test_staged_float_index_is_refused():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float32))
        i = builder.new_arg(ShapedArray((2,), np.float32))
        with pytest.raises(ShapeError, match="integer"):
            I.getitem(x, i)


# ---------------------------------------------------------------------------------------
# take, take_along_axis, compress, dynamic slices


@pytest.mark.parametrize("indices, kwargs", [
    ([0, 5, -1], {}),
    (np.array([[1, 2], [3, 4]]), dict(axis=1)),
    (2, dict(axis=2)),
    ([0, -1], dict(axis=-1)),
    ([0, 7, -9], dict(axis=0, mode="clip")),
    ([0, 7, -9], dict(axis=1, mode="wrap")),
    (np.array([True, False]), dict(axis=0)),
])
def test_take_static(indices, kwargs):
    same(lambda x: I.take(x, indices, **kwargs), lambda x: np.take(x, indices, **kwargs), X)


@pytest.mark.parametrize("indices, kwargs", [
    (np.array([0, 5, -1]), {}),
    (np.array([[1, 2], [3, -4]], np.int32), dict(axis=1)),
    (np.int64(-2), dict(axis=2)),
    (np.array([0, 7, -9]), dict(axis=0, mode="clip")),
    (np.array([0, 7, -9, -5]), dict(axis=1, mode="wrap")),
])
def test_take_staged(indices, kwargs):
    same(lambda x, i: I.take(x, i, **kwargs), lambda x, i: np.take(x, i, **kwargs), X, indices)


@pytest.mark.parametrize("shape, index_shape, axis", [
    ((4, 5, 6), (4, 5, 2), 2),
    ((4, 5, 6), (4, 3, 6), 1),
    ((4, 5, 6), (1, 5, 1), 2),
    ((4, 5, 6), (2, 1, 6), 0),
    ((4, 5), (4, 0), 1),
    ((7,), (3,), 0),
    ((4, 5), (7,), None),
    ((4, 5), (4, 2), -1),
])
def test_take_along_axis(shape, index_shape, axis):
    x = random_array(shape, np.float32, 1)
    n = x.size if axis is None else shape[axis]
    indices = np.random.default_rng(2).integers(-n, n, size=index_shape)
    np_fn = lambda x, i: np.take_along_axis(x, i, axis)  # noqa: E731
    same(lambda x, i: I.take_along_axis(x, i, axis), np_fn, x, indices)           # staged indices
    same(lambda x: I.take_along_axis(x, indices, axis), lambda x: np_fn(x, indices), x)


def test_take_along_axis_with_argsort_style_indices():
    x = random_array((3, 4), np.float64, 5)
    order = np.argsort(x, axis=1)
    same(lambda x, i: I.take_along_axis(x, i, axis=1),
         lambda x, i: np.take_along_axis(x, i, axis=1), x, order)


@pytest.mark.parametrize("call, match", [
    (lambda: I.take_along_axis(X, np.zeros((4, 5), np.int64), 0), "same number of dimensions"),
    (lambda: I.take_along_axis(X, np.zeros((4, 5, 1)), 0), "integer"),
    (lambda: I.take_along_axis(X, np.zeros((3, 5, 1), np.int64), 2), "shape mismatch"),
    (lambda: I.take_along_axis(X, np.zeros((4, 5, 1), np.int64), None), "single dimension"),
    (lambda: I.take_along_axis(X, np.full((4, 5, 1), 6), 2), "out of bounds"),
    (lambda: I.take(X, [4]), None),
    (lambda: I.take(X, [4], axis=0), "index 4 is out of bounds for axis 0 with size 4"),
    (lambda: I.take(X, [0], mode="bogus"), "clipmode"),
    (lambda: I.compress([[True]], X), "1-d"),
])
def test_take_errors(call, match):
    if match is None:   # in range after raveling: no error
        call()
        return
    with pytest.raises(ShapeError, match=match):
        call()


@pytest.mark.parametrize("condition, axis", [
    ([True, False, True], 0), ([False, True], 1), ([True] * 5 + [False], None), ([], 2),
])
def test_compress(condition, axis):
    same(lambda x: I.compress(condition, x, axis), lambda x: np.compress(condition, x, axis), X)


def test_registered():
    for name in ["take", "take_along_axis", "compress"]:
        assert NUMPY_IMPLS[getattr(np, name)] is getattr(I, name)


def test_dynamic_slice_and_update():
    x = random_array((5, 4), np.float32, 3)
    same(lambda x, i: I.dynamic_slice(x, (i, 1), (2, 3)),
         lambda x, i: x[min(max(int(i), 0), 3):min(max(int(i), 0), 3) + 2, 1:4], x, np.int64(9))
    update = random_array((2, 2), np.float32, 4)

    def expected(x, u, i):
        out = x.copy()
        out[1:3, 2:4] = u
        return out

    same(lambda x, u, i: I.dynamic_update_slice(x, u, (1, i)), expected, x, update, np.int32(2))


# ---------------------------------------------------------------------------------------
# unravel_index, ravel_multi_index: static shapes, staged indices


def round_trip(flat, dims, order):
    coords = np.unravel_index(flat, dims, order=order)
    return coords, np.ravel_multi_index(coords, dims, order=order)


def wrapped_and_clipped(i, j):
    return (np.ravel_multi_index((i, j), (3, 4), mode="wrap"),
            np.ravel_multi_index((i, j), (3, 4), mode=("clip", "wrap")))


def with_a_static_index(i):
    return np.ravel_multi_index((i, 1), (7, 5), order="F")


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from("CF"), st.data())
def test_unravel_and_ravel_multi_index(dims, order, data):
    size = int(np.prod(dims))
    flat = np.array(data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=5)))
    check_numpy_and_jax(lambda f: round_trip(f, tuple(dims), order), flat, derivatives=False)
    i, j = (np.array(data.draw(st.lists(st.integers(-9, 9), min_size=3, max_size=3)))
            for _ in range(2))
    check_numpy_and_jax(wrapped_and_clipped, i, j, derivatives=False)
    check_numpy_and_jax(with_a_static_index, np.abs(i) % 7, derivatives=False)


def test_ravel_multi_index_needs_one_index_per_dimension():
    with pytest.raises(ShapeError, match="one index array per dimension"):
        s2s.jit(lambda i: np.ravel_multi_index((i,), (3, 4)))(np.arange(2))
    with pytest.raises(ShapeError, match="only int indices"):
        s2s.jit(lambda x: np.unravel_index(x, (3, 4)))(np.arange(2.0))
