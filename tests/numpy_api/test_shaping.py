"""The shape-manipulation surface against NumPy: staged (jaxpr and emitted module) and eager."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s.core import ShapedArray
from s2s.errors import ConcretizationError, ShapeError, UnsupportedFunctionError
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api import shaping as S
from s2s.staging import JaxprBuilder
from tests.helpers import assert_same, check_numpy_and_jax, check_staged
from tests.primitives.test_structural import SETTINGS, random_array


def A(*shape, dtype=np.float32, seed=0):
    return random_array(shape, dtype, seed)


def same(s2s_fn, np_fn, *args):
    """Staged (eval_jaxpr and emitted module) and eager results all equal NumPy's."""
    expected = np_fn(*args)
    if isinstance(expected, (tuple, list)) and len(expected) == 1:
        # A one-output module returns its value bare: compare the single element.
        check_staged(lambda *xs: s2s_fn(*xs)[0], lambda *xs: np_fn(*xs)[0], *args)
    else:
        check_staged(s2s_fn, np_fn, *args)
    got = s2s_fn(*args)
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, type(expected)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, what="eager: ")
    else:
        assert_same(got, expected, what="eager: ")


def by_name(name, *static, **kwargs):
    """(s2s fn, NumPy fn) calling `name(array_args..., *static, **kwargs)`."""
    s2s_fn, np_fn = getattr(S, name), getattr(np, name)
    return (lambda *xs: s2s_fn(*xs, *static, **kwargs),
            lambda *xs: np_fn(*xs, *static, **kwargs))


def on_list(name, **kwargs):
    """(s2s fn, NumPy fn) calling `name([arrays...], **kwargs)`."""
    s2s_fn, np_fn = getattr(S, name), getattr(np, name)
    return (lambda *xs: s2s_fn(list(xs), **kwargs), lambda *xs: np_fn(list(xs), **kwargs))


CASES = [
    ("reshape", by_name("reshape", (3, 4)), [A(2, 6)]),
    ("reshape -1", by_name("reshape", (-1, 2)), [A(2, 6)]),
    ("reshape int", by_name("reshape", -1), [A(2, 3, 2)]),
    ("reshape to scalar", by_name("reshape", ()), [A(1, 1)]),
    ("reshape same", by_name("reshape", (2, 3)), [A(2, 3)]),
    ("reshape empty -1", by_name("reshape", (-1, 4)), [A(0, 4)]),
    ("ravel", by_name("ravel"), [A(2, 3, 4)]),
    ("ravel int", by_name("ravel"), [A(2, 3, dtype=np.int32)]),
    ("transpose", by_name("transpose"), [A(2, 3, 4)]),
    ("transpose axes", by_name("transpose", (1, 0, 2)), [A(2, 3, 4)]),
    ("transpose negative axes", by_name("transpose", (-1, 0, 1)), [A(2, 3, 4)]),
    ("permute_dims", (lambda x: S.transpose(x, (2, 0, 1)), lambda x: np.permute_dims(x, (2, 0, 1))),
     [A(2, 3, 4)]),
    ("swapaxes", by_name("swapaxes", 0, 2), [A(2, 3, 4)]),
    ("swapaxes negative", by_name("swapaxes", -1, -2), [A(2, 3, 4)]),
    ("moveaxis", by_name("moveaxis", 0, -1), [A(2, 3, 4)]),
    ("moveaxis many", by_name("moveaxis", [0, 1], [2, 0]), [A(2, 3, 4)]),
    ("squeeze", by_name("squeeze"), [A(1, 3, 1)]),
    ("squeeze axis", by_name("squeeze", 0), [A(1, 3, 1)]),
    ("squeeze axes", by_name("squeeze", (0, -1)), [A(1, 3, 1)]),
    ("squeeze nothing", by_name("squeeze"), [A(2, 3)]),
    ("expand_dims", by_name("expand_dims", 1), [A(2, 3)]),
    ("expand_dims negative", by_name("expand_dims", -1), [A(2, 3)]),
    ("expand_dims tuple", by_name("expand_dims", (0, 3)), [A(2, 3)]),
    ("concatenate", on_list("concatenate"), [A(2, 3), A(1, 3, seed=1)]),
    ("concatenate axis", on_list("concatenate", axis=1), [A(2, 3), A(2, 1, seed=1)]),
    ("concatenate axis=-1", on_list("concatenate", axis=-1), [A(2, 3), A(2, 1, seed=1)]),
    ("concatenate None", on_list("concatenate", axis=None), [A(2, 3), A(4, seed=1)]),
    ("concatenate promotes", on_list("concatenate"), [A(2), A(3, dtype=np.int32)]),
    ("concatenate dtype", on_list("concatenate", dtype=np.float64), [A(2), A(3)]),
    ("concatenate one", on_list("concatenate"), [A(2)]),
    ("stack", on_list("stack"), [A(2, 3), A(2, 3, seed=1)]),
    ("stack axis", on_list("stack", axis=1), [A(2, 3), A(2, 3, seed=1), A(2, 3, seed=2)]),
    ("stack axis=-1", on_list("stack", axis=-1), [A(2, 3), A(2, 3, seed=1)]),
    ("stack scalars", on_list("stack"), [A(), A(seed=1)]),
    ("stack promotes", on_list("stack"), [A(2, dtype=np.int32), A(2, dtype=np.float64)]),
    ("hstack", on_list("hstack"), [A(2, 3), A(2, 1, seed=1)]),
    ("hstack 1-d", on_list("hstack"), [A(2), A(3, seed=1)]),
    ("hstack scalars", on_list("hstack"), [A(), A(seed=1)]),
    ("vstack", on_list("vstack"), [A(3), A(3, seed=1)]),
    ("vstack 2-d", on_list("vstack"), [A(2, 3), A(1, 3, seed=1)]),
    ("dstack", on_list("dstack"), [A(2, 3), A(2, 3, seed=1)]),
    ("column_stack", on_list("column_stack"), [A(3), A(3, 2, seed=1)]),
    ("append", by_name("append"), [A(2, 2), A(3)]),
    ("append axis", (lambda a, b: S.append(a, b, axis=0), lambda a, b: np.append(a, b, axis=0)),
     [A(2, 2), A(1, 2)]),
    ("split", by_name("split", 3), [A(6, 2)]),
    ("split indices", by_name("split", [1, 4]), [A(6, 2)]),
    ("split negative indices", by_name("split", [-2, 10]), [A(6, 2)]),
    ("split axis", by_name("split", 2, 1), [A(3, 4)]),
    ("array_split", by_name("array_split", 4), [A(7)]),
    ("array_split more sections", by_name("array_split", 5), [A(3)]),
    ("hsplit", by_name("hsplit", 2), [A(2, 4)]),
    ("hsplit 1-d", by_name("hsplit", 2), [A(4)]),
    ("vsplit", by_name("vsplit", 2), [A(4, 2)]),
    ("dsplit", by_name("dsplit", [1]), [A(2, 2, 3)]),
    ("tile", by_name("tile", 2), [A(3)]),
    ("tile 2-d", by_name("tile", (2, 3)), [A(2, 2)]),
    ("tile promotes a", by_name("tile", (2, 1, 2)), [A(2, 3)]),
    ("tile fewer reps", by_name("tile", 2), [A(2, 3)]),
    ("tile zero", by_name("tile", (0, 2)), [A(2, 3)]),
    ("tile ones", by_name("tile", (1, 1)), [A(2, 3)]),
    ("repeat", by_name("repeat", 2), [A(2, 3)]),
    ("repeat axis", by_name("repeat", 3, 1), [A(2, 3)]),
    ("repeat counts", by_name("repeat", [1, 0, 2], 1), [A(2, 3)]),
    ("repeat counts array", by_name("repeat", np.array([2, 1]), 0), [A(2, 3)]),
    ("repeat zero", by_name("repeat", 0, 0), [A(2, 3)]),
    ("flip", by_name("flip"), [A(2, 3)]),
    ("flip axis", by_name("flip", 1), [A(2, 3)]),
    ("flip axes", by_name("flip", (0, -1)), [A(2, 3, 2)]),
    ("fliplr", by_name("fliplr"), [A(2, 3)]),
    ("flipud", by_name("flipud"), [A(2, 3)]),
    ("rot90", by_name("rot90"), [A(2, 3)]),
    ("rot90 k=2", by_name("rot90", 2), [A(2, 3)]),
    ("rot90 k=3", by_name("rot90", 3), [A(2, 3, 4)]),
    ("rot90 k=-1 axes", by_name("rot90", -1, (1, 2)), [A(2, 3, 4)]),
    ("roll", by_name("roll", 2), [A(2, 3)]),
    ("roll negative", by_name("roll", -1, 1), [A(2, 3)]),
    ("roll big", by_name("roll", 7, 0), [A(3, 2)]),
    ("roll tuple", by_name("roll", (1, 2), (0, 1)), [A(3, 4)]),
    ("roll same axis twice", by_name("roll", (1, 1), (1, 1)), [A(3, 4)]),
    ("roll zero", by_name("roll", 3, 0), [A(3, 2)]),
    ("broadcast_to", by_name("broadcast_to", (4, 2, 3)), [A(2, 1)]),
    ("broadcast_to same", by_name("broadcast_to", (2, 3)), [A(2, 3)]),
    ("broadcast_to from scalar", by_name("broadcast_to", (2,)), [A()]),
    ("broadcast_arrays", by_name("broadcast_arrays"), [A(2, 1), A(3, seed=1), A()]),
    ("atleast_1d", by_name("atleast_1d"), [A()]),
    ("atleast_1d many", by_name("atleast_1d"), [A(), A(2, 2)]),
    ("atleast_2d", by_name("atleast_2d"), [A(3)]),
    ("atleast_2d scalar", by_name("atleast_2d"), [A()]),
    ("atleast_3d", by_name("atleast_3d"), [A(3)]),
    ("atleast_3d 2-d", by_name("atleast_3d"), [A(2, 3)]),
    ("atleast_3d scalar", by_name("atleast_3d"), [A()]),
    ("pad", by_name("pad", 1), [A(2, 3)]),
    ("pad pairs", by_name("pad", ((1, 0), (0, 2))), [A(2, 3)]),
    ("pad one pair", by_name("pad", (2, 1)), [A(2, 3)]),
    ("pad value", by_name("pad", 1, constant_values=5), [A(2, 3, dtype=np.int32)]),
    ("pad value cast", by_name("pad", 1, constant_values=2.7), [A(2, 3, dtype=np.int32)]),
    ("pad per-axis values", by_name("pad", ((1, 2), (2, 1)), constant_values=((1, 2), (3, 4))),
     [A(2, 3)]),
    ("pad bool", by_name("pad", 1), [A(2, dtype=np.bool_)]),
    ("pad edge", by_name("pad", ((2, 1), (0, 3)), mode="edge"), [A(2, 3)]),
    ("pad wrap", by_name("pad", 4, mode="wrap"), [A(3, 2)]),
    ("pad reflect", by_name("pad", (1, 4), mode="reflect"), [A(3, 2)]),
    ("pad symmetric", by_name("pad", (5, 2), mode="symmetric"), [A(3, 2)]),
    ("tril", by_name("tril"), [A(3, 4)]),
    ("tril k", by_name("tril", 1), [A(3, 4)]),
    ("tril negative k", by_name("tril", -1), [A(2, 4, 3)]),
    ("tril 1-d", by_name("tril"), [A(3)]),
    ("tril int", by_name("tril"), [A(3, 3, dtype=np.int32)]),
    ("tril bool", by_name("tril"), [A(3, 3, dtype=np.bool_)]),
    ("triu", by_name("triu"), [A(3, 4)]),
    ("triu k", by_name("triu", 2), [A(4, 3)]),
    ("triu negative k", by_name("triu", -1), [A(2, 3, 3)]),
    ("diag of a vector", by_name("diag"), [A(3)]),
    ("diag of a vector k", by_name("diag", 2), [A(3)]),
    ("diag of a vector -k", by_name("diag", -1), [A(3, dtype=np.int32)]),
    ("diag of a matrix", by_name("diag"), [A(3, 4)]),
    ("diag of a matrix k", by_name("diag", 1), [A(3, 4)]),
    ("diag of a matrix -k", by_name("diag", -2), [A(3, 4)]),
    ("diag past the corner", by_name("diag", 5), [A(3, 4)]),
    ("diagonal", by_name("diagonal"), [A(3, 4)]),
    ("diagonal axes", by_name("diagonal", 1, 2, 0), [A(3, 4, 5)]),
    ("diagonal negative axes", by_name("diagonal", -1, -1, -2), [A(2, 3, 4)]),
    ("diagonal empty", by_name("diagonal", 4), [A(3, 4)]),
]


@pytest.mark.parametrize("name, fns, args", CASES, ids=[c[0] for c in CASES])
def test_against_numpy(name, fns, args):
    s2s_fn, np_fn = fns
    same(s2s_fn, np_fn, *args)


def test_every_function_is_registered():
    for name in ["reshape", "ravel", "transpose", "swapaxes", "moveaxis", "squeeze",
                 "expand_dims", "concatenate", "stack", "hstack", "vstack", "dstack",
                 "column_stack", "append", "split", "array_split", "hsplit", "vsplit",
                 "dsplit", "tile", "repeat", "flip", "fliplr", "flipud", "rot90", "roll",
                 "broadcast_to", "broadcast_arrays", "broadcast_shapes", "atleast_1d",
                 "atleast_2d", "atleast_3d", "pad", "tril", "triu", "diag", "diagonal"]:
        assert NUMPY_IMPLS[getattr(np, name)] is getattr(S, name), name


# ---------------------------------------------------------------------------------------
# Python scalars and weak types


@pytest.mark.parametrize("s2s_call, np_call", [
    (lambda: S.atleast_1d(3.0), lambda: np.atleast_1d(3.0)),
    (lambda: S.stack([1.0, 2.0]), lambda: np.stack([1.0, 2.0])),
    (lambda: S.stack([1, 2.5]), lambda: np.stack([1, 2.5])),
    (lambda: S.broadcast_to(2, (3,)), lambda: np.broadcast_to(2, (3,))),
    (lambda: S.reshape(True, (1, 1)), lambda: np.reshape(True, (1, 1))),
    (lambda: S.concatenate([[1, 2], [3]]), lambda: np.concatenate([[1, 2], [3]])),
    (lambda: S.tile(np.float32(2), 3), lambda: np.tile(np.float32(2), 3)),
    (lambda: S.pad([1, 2], 1), lambda: np.pad([1, 2], 1)),
])
def test_python_values_become_numpy_arrays(s2s_call, np_call):
    assert_same(s2s_call(), np_call())
    with JaxprBuilder() as builder:
        out = s2s_call()
        closed = builder.build([out])
    from s2s.core import eval_jaxpr
    assert_same(eval_jaxpr(closed)[0], np_call())


def test_python_scalars_in_a_stack_are_strong_like_numpy():
    """np.stack([x32, 1.0]) is float64: list entries are arrays, not weak scalars."""
    x = np.ones((), np.float32)
    check_staged(lambda x: S.stack([x, 1.0]), lambda x: np.stack([x, 1.0]), x)


def test_weak_types_pass_through_shape_functions():
    with JaxprBuilder() as builder:
        weak = builder.new_arg(ShapedArray((2, 3), np.float32, weak_type=True))
        assert S.reshape(weak, (3, 2)).weak_type
        assert S.transpose(weak).weak_type
        assert S.broadcast_to(weak, (4, 2, 3)).weak_type
        assert S.flip(weak).weak_type


def test_pad_with_a_staged_constant_value():
    check_staged(lambda x, v: S.pad(x, 1, constant_values=v),
                 lambda x, v: np.pad(x, 1, constant_values=v), A(2, 2), np.float64(3.5))


def test_reshape_of_the_same_shape_adds_no_equation():
    closed = check_staged(lambda x: S.reshape(x, (2, 3)), lambda x: x, A(2, 3))
    assert not closed.eqns


def test_tril_is_iota_comparisons_and_select():
    closed = check_staged(S.tril, np.tril, A(3, 3))
    names = [e.primitive.name for e in closed.eqns]
    assert "select" in names and "iota" in names and not closed.jaxpr.constvars


def test_diagonal_is_a_gather():
    closed = check_staged(S.diagonal, np.diagonal, A(3, 3))
    assert "gather" in [e.primitive.name for e in closed.eqns]


# ---------------------------------------------------------------------------------------
# Hypothesis: reshape, transpose, moveaxis, tile, repeat, roll, pad, split


@st.composite
def small_arrays(draw, min_dims=0, max_dims=3, min_side=0):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                  max_side=4))
    dtype = draw(st.sampled_from([np.float32, np.int32, np.float64]))
    return random_array(shape, dtype, draw(st.integers(0, 99)))


@SETTINGS
@given(small_arrays(), st.data())
def test_reshape_with_minus_one(x, data):
    if x.size == 0:
        return
    divisors = [d for d in range(1, x.size + 1) if x.size % d == 0]
    d = data.draw(st.sampled_from(divisors))
    shape = data.draw(st.sampled_from([(d, -1), (-1, d), (-1,), (1, d, -1)]))
    same(lambda x: S.reshape(x, shape), lambda x: np.reshape(x, shape), x)


@SETTINGS
@given(small_arrays(), st.data())
def test_moveaxis_and_swapaxes(x, data):
    if x.ndim == 0:
        return
    src = data.draw(st.integers(-x.ndim, x.ndim - 1))
    dst = data.draw(st.integers(-x.ndim, x.ndim - 1))
    same(lambda x: S.moveaxis(x, src, dst), lambda x: np.moveaxis(x, src, dst), x)
    same(lambda x: S.swapaxes(x, src, dst), lambda x: np.swapaxes(x, src, dst), x)


@SETTINGS
@given(small_arrays(max_dims=2), st.lists(st.integers(0, 3), min_size=0, max_size=3))
def test_tile(x, reps):
    reps = tuple(reps)
    same(lambda x: S.tile(x, reps), lambda x: np.tile(x, reps), x)


@SETTINGS
@given(small_arrays(min_dims=1), st.data())
def test_repeat(x, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    n = x.size if axis is None else x.shape[axis]
    repeats = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=n, max_size=n))
    same(lambda x: S.repeat(x, repeats, axis), lambda x: np.repeat(x, repeats, axis), x)


@SETTINGS
@given(small_arrays(min_dims=1), st.data())
def test_roll(x, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1))
    shift = data.draw(st.integers(-6, 6))
    same(lambda x: S.roll(x, shift, axis), lambda x: np.roll(x, shift, axis), x)


@SETTINGS
@given(small_arrays(min_dims=1, min_side=1), st.data())
def test_pad(x, data):
    mode = data.draw(st.sampled_from(["constant", "edge", "wrap", "reflect", "symmetric"]))
    width = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in x.shape)
    if mode == "reflect" and any(d == 1 for d in x.shape):
        mode = "symmetric"
    same(lambda x: S.pad(x, width, mode=mode), lambda x: np.pad(x, width, mode=mode), x)


@SETTINGS
@given(small_arrays(min_dims=1), st.data())
def test_array_split(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    sections = data.draw(st.integers(1, 4) | st.lists(st.integers(-5, 5), max_size=3))
    same(lambda x: S.array_split(x, sections, axis), lambda x: np.array_split(x, sections, axis), x)


@SETTINGS
@given(small_arrays(min_dims=2, min_side=1), st.integers(-4, 4))
def test_triangles_and_diagonals(x, k):
    same(lambda x: S.tril(x, k), lambda x: np.tril(x, k), x)
    same(lambda x: S.triu(x, k), lambda x: np.triu(x, k), x)
    same(lambda x: S.diagonal(x, k), lambda x: np.diagonal(x, k), x)


# ---------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("call, error, match", [
    (lambda: S.reshape(A(2, 3), (4,)), ShapeError,
     r"cannot reshape array of size 6 into shape \(4,\)"),
    (lambda: S.reshape(A(2, 3), (-1, 4)), ShapeError, "cannot reshape"),
    (lambda: S.reshape(A(2, 3), (-1, -1)), ShapeError, "only specify one unknown"),
    (lambda: S.reshape(A(2, 3), (3, 2), order="F"), UnsupportedFunctionError, "order='F'"),
    (lambda: S.ravel(A(2, 3), order="F"), UnsupportedFunctionError, "order='F'"),
    (lambda: S.concatenate([A(2)], out=A(2)), UnsupportedFunctionError, r"concatenate\(\.\.\., out="),
    (lambda: S.stack([A(2)], out=A(1, 2)), UnsupportedFunctionError, r"stack\(\.\.\., out="),
    (lambda: S.transpose(A(2, 3), (0,)), ShapeError, "axes don't match array"),
    (lambda: S.transpose(A(2, 3), (0, 0)), ShapeError, "repeated axis"),
    (lambda: S.transpose(A(2, 3), (0, 2)), ShapeError, "out of bounds"),
    (lambda: S.swapaxes(A(2, 3), 0, 2), ShapeError, "out of bounds"),
    (lambda: S.moveaxis(A(2, 3), (0, 1), 0), ShapeError, "same number of elements"),
    (lambda: S.squeeze(A(2, 3), 0), ShapeError, "size not equal to one"),
    (lambda: S.expand_dims(A(2, 3), 3), ShapeError, "out of bounds"),
    (lambda: S.expand_dims(A(2, 3), (0, 0)), ShapeError, "repeated axis"),
    (lambda: S.concatenate([A(2, 3), A(3, 2)]), ShapeError, "along dimension 1"),
    (lambda: S.concatenate([A(2, 3), A(3)]), ShapeError, "same number of dimensions"),
    (lambda: S.concatenate([A(), A()]), ShapeError, "zero-dimensional"),
    (lambda: S.concatenate([]), ShapeError, "at least one array"),
    (lambda: S.concatenate([A(2)], axis=1), ShapeError, "out of bounds"),
    (lambda: S.stack([A(2), A(3)]), ShapeError, "same shape"),
    (lambda: S.split(A(5), 2), ShapeError, "equal division"),
    (lambda: S.array_split(A(5), 0), ShapeError, "larger than 0"),
    (lambda: S.vsplit(A(4), 2), ShapeError, "2 or more dimensions"),
    (lambda: S.tile(A(2), (-1,)), ShapeError, "negative"),
    (lambda: S.repeat(A(3), [1, 2]), ShapeError, "could not be broadcast"),
    (lambda: S.repeat(A(3), -1), ShapeError, "negative"),
    (lambda: S.fliplr(A(3)), ShapeError, ">= 2-d"),
    (lambda: S.flipud(A()), ShapeError, ">= 1-d"),
    (lambda: S.rot90(A(2, 2), axes=(0, 0)), ShapeError, "different"),
    (lambda: S.broadcast_to(A(3), (4,)), ShapeError, "cannot broadcast"),
    (lambda: S.broadcast_to(A(2, 3), (3,)), ShapeError, "cannot broadcast"),
    (lambda: S.broadcast_arrays(A(3), A(4)), ShapeError, "could not be broadcast"),
    (lambda: S.pad(A(3), -1), ShapeError, "negative"),
    (lambda: S.pad(A(3), ((1, 2), (3, 4))), ShapeError, "pad_width"),
    (lambda: S.pad(A(3), 1.5), ShapeError, "integral"),
    (lambda: S.pad(A(3), 1, mode="mean"), UnsupportedFunctionError, "mode='mean'"),
    (lambda: S.pad(A(3), 1, mode="reflect", reflect_type="odd"), UnsupportedFunctionError, "odd"),
    (lambda: S.pad(A(0), 1, mode="wrap"), ShapeError, "empty axis"),
    (lambda: S.tril(A()), ShapeError, "at least one dimension"),
    (lambda: S.diag(A(2, 2, 2)), ShapeError, "1- or 2-d"),
    (lambda: S.diagonal(A(3)), ShapeError, "at least two"),
    (lambda: S.diagonal(A(3, 3), 0, 1, 1), ShapeError, "cannot be the same"),
])
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_static_arguments_cannot_be_staged():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float32))
        n = builder.new_arg(ShapedArray((), np.int64))
        with pytest.raises(ConcretizationError, match="static"):
            S.reshape(x, (n,))
        with pytest.raises(ConcretizationError):
            S.repeat(x, n)
        with pytest.raises(ConcretizationError):
            S.roll(x, n)


def _scaled_by_its_shape(x):
    return x * np.shape(x)[0] + np.ndim(x) + np.size(x) + np.size(x, axis=-1)


def test_shape_ndim_and_size_of_a_staged_array_are_static_ints():
    x = np.arange(6.0).reshape(2, 3)
    expected = _scaled_by_its_shape(x)
    np.testing.assert_allclose(s2s.jit(_scaled_by_its_shape)(x), expected)
    np.testing.assert_allclose(s2s.jit(_scaled_by_its_shape, backend="python")(x), expected)
    np.testing.assert_allclose(s2s.grad(lambda x: _scaled_by_its_shape(x).sum())(x), np.full((2, 3), 2.0))


# ---------------------------------------------------------------------------------------
# rollaxis, row_stack


def rolled(x, axis, start):
    return np.rollaxis(x, axis, start) * 2.0


def row_stacked(x):
    return np.row_stack([x, x])


@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")
@settings(max_examples=10, deadline=None)
@given(small_arrays(min_dims=1), st.data())
def test_rollaxis_and_row_stack(x, data):
    x = x.astype(np.float64)
    nd = x.ndim
    axis = data.draw(st.integers(-nd, nd - 1), label="axis")
    start = data.draw(st.integers(-nd, nd), label="start")
    check_numpy_and_jax(lambda x: rolled(x, axis, start), x)
    check_numpy_and_jax(row_stacked, x, derivatives=False)    # jax.numpy has no row_stack


def test_rollaxis_start_out_of_range_says_the_range():
    with pytest.raises(ShapeError, match=r"start 4 is out of bounds.*\[-2, 2\]"):
        s2s.jit(lambda x: np.rollaxis(x, 0, 4))(np.zeros((2, 3)))


# ---------------------------------------------------------------------------------------
# np.r_ and np.c_ with staged items


def r_joined(x, y):
    return np.r_[x, 0.5, y[:2], 1:4, -1:1:5j] * 2.0


def c_joined(x, y):
    return np.c_[x, y, x * y]


def c_rows(m):
    return np.c_[m, m[:, :1]] * 2.0


@pytest.mark.parametrize("fn, args", [(r_joined, (np.arange(3.0), np.linspace(0, 1, 4))),
                                      (c_joined, (np.arange(3.0), np.linspace(0, 1, 3))),
                                      (c_rows, (np.arange(6.0).reshape(2, 3),))])
def test_r_and_c_join_staged_pieces_as_numpy(fn, args):
    check_numpy_and_jax(fn, *args)


def test_r_string_directives_say_what_to_write():
    with pytest.raises(UnsupportedFunctionError, match="string directives"):
        s2s.jit(lambda x: np.r_["0,2", x, x])(np.ones(2))
