"""Array creation, staged and eager, against NumPy: values, shapes and dtypes.

Inside a builder creation functions are always staged, even on concrete arguments, so
`np.ones((300, 1024, 1024))` is one broadcast of a literal and no constant at all; arange,
linspace, eye and tri are built on iota.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import s2s.numpy_api  # noqa: F401
from s2s import config
from s2s.core import ShapedArray
from s2s.errors import ConcretizationError, ShapeError, UnsupportedFunctionError
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api import creation as c
from s2s.staging import JaxprBuilder, Tracer
from tests.helpers import assert_same, check_numpy_and_jax, check_staged, stage
from tests.numpy_api.test_math import primitive_names
from tests.strategies import examples

SETTINGS = settings(max_examples=30, deadline=None)


def check_nullary(s2s_fn, np_fn, **tol):
    """A creation call with only static arguments: staged (must not bake its values in as
    a constant) and eager."""
    expected = np_fn()
    closed = check_staged(s2s_fn, np_fn, **tol)
    assert not closed.consts, "creation functions must stage, not bake constants"
    staged = _stage_outs(s2s_fn)
    assert isinstance(staged[0] if isinstance(staged, tuple) else staged, Tracer)
    eager = s2s_fn()
    pairs = zip(eager, expected, strict=True) if isinstance(expected, tuple) else [(eager, expected)]
    for got, want in pairs:
        assert_same(got, want, what="eager: ", **tol)
    return closed


def _stage_outs(fn):
    with JaxprBuilder():
        return fn()


def test_huge_ones_is_one_broadcast_of_a_literal():
    closed, _ = stage(lambda: c.ones((300, 1024, 1024)))
    assert not closed.consts
    assert primitive_names(closed) == ["broadcast_in_dim"]
    (eqn,) = closed.eqns
    assert eqn.invars[0].aval.shape == ()
    assert closed.out_avals[0] == ShapedArray((300, 1024, 1024), np.float64)
    closed, _ = stage(lambda: c.zeros((4096, 4096), dtype=np.float32) + c.full((4096,), np.float32(2)))
    assert not closed.consts
    assert len(closed.eqns) == 3


SHAPES = [(), 0, 3, (2, 3), [4, 1], (2, 0, 3), np.int64(2)]
DTYPE_ARGS = [None, float, int, bool, np.float32, np.int32, "float16", np.dtype("uint8")]


@pytest.mark.parametrize("dtype", DTYPE_ARGS, ids=repr)
@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_zeros_ones_empty_full(shape, dtype):
    check_nullary(lambda: c.zeros(shape, dtype), lambda: np.zeros(shape, dtype))
    check_nullary(lambda: c.ones(shape, dtype=dtype), lambda: np.ones(shape, dtype=dtype))
    closed = check_nullary(lambda: c.empty(shape, dtype) * 0, lambda: np.zeros(shape, dtype) * 0)
    for fill in (2.5, 3, True, -1):
        if dtype is not None and np.dtype(dtype).kind == "u" and fill == -1:
            continue
        check_nullary(lambda: c.full(shape, fill, dtype), lambda: np.full(shape, fill, dtype))


def test_full_with_array_and_staged_fill_values():
    row = np.arange(3, dtype=np.float32)
    check_staged(lambda r: c.full((2, 3), r), lambda r: np.full((2, 3), r), row)
    check_staged(lambda r: c.full((2, 3), r, dtype=np.int32),
                 lambda r: np.full((2, 3), r, dtype=np.int32), row)
    check_staged(lambda s: c.full((2,), s), lambda s: np.full((2,), s), np.float32(1.5))
    check_staged(lambda: c.full((2, 2), [1, 2]), lambda: np.full((2, 2), [1, 2]))
    check_staged(lambda a: c.full(3, a), lambda a: np.full(3, a), 2.5)   # weak → strong f64


@pytest.mark.parametrize("like", [np.arange(6, dtype=np.float32).reshape(2, 3),
                                  np.arange(4, dtype=np.int8), np.array(True), 2.5, 3],
                         ids=["f32", "i8", "bool0d", "pyfloat", "pyint"])
@pytest.mark.parametrize("dtype", [None, np.float64, np.int32])
@pytest.mark.parametrize("shape", [None, (2, 2)])
def test_like_functions(like, dtype, shape):
    for s2s_fn, np_fn in [(c.zeros_like, np.zeros_like), (c.ones_like, np.ones_like)]:
        check_staged(lambda a: s2s_fn(a, dtype=dtype, shape=shape),
                     lambda a: np_fn(a, dtype=dtype, shape=shape), like)
        assert_same(s2s_fn(like, dtype=dtype, shape=shape), np_fn(like, dtype=dtype, shape=shape))
    check_staged(lambda a: c.empty_like(a, dtype=dtype, shape=shape) * 0,
                 lambda a: np.zeros_like(a, dtype=dtype, shape=shape) * 0, like)
    check_staged(lambda a: c.full_like(a, 7.75, dtype=dtype, shape=shape),
                 lambda a: np.full_like(a, 7.75, dtype=dtype, shape=shape), like)
    check_staged(lambda a: c.full_like(a, a, dtype=dtype),
                 lambda a: np.full_like(a, a, dtype=dtype), like)


@SETTINGS
@given(n=st.integers(0, 6), m=st.one_of(st.none(), st.integers(0, 6)), k=st.integers(-7, 7),
       dtype=st.sampled_from([float, np.float32, np.int64, bool]))
def test_eye_and_tri(n, m, k, dtype):
    closed = check_nullary(lambda: c.eye(n, m, k, dtype=dtype), lambda: np.eye(n, m, k, dtype=dtype))
    assert {"iota", "eq"} <= set(primitive_names(closed))
    check_nullary(lambda: c.tri(n, m, k, dtype=dtype), lambda: np.tri(n, m, k, dtype=dtype))
    check_nullary(lambda: c.identity(n), lambda: np.identity(n))


def test_eye_is_small():
    closed = check_nullary(lambda: c.eye(1000), lambda: np.eye(1000))
    assert primitive_names(closed) == ["iota", "iota", "eq", "convert_element_type"]


@SETTINGS
@given(start=st.integers(-20, 20), stop=st.one_of(st.none(), st.integers(-20, 20)),
       step=st.one_of(st.none(), st.integers(-5, 5).filter(bool)),
       dtype=st.sampled_from([None, np.int32, np.float32, float, np.int8]))
def test_arange_ints(start, stop, step, dtype):
    if stop is None and step is not None:
        step = None
    args = (start,) if stop is None else (start, stop) if step is None else (start, stop, step)
    closed = check_nullary(lambda: c.arange(*args, dtype=dtype), lambda: np.arange(*args, dtype=dtype))
    assert set(primitive_names(closed)) <= {"iota", "mul", "add"}


@SETTINGS
@given(start=st.floats(-10, 10), length=st.floats(0, 20), step=st.floats(0.05, 3),
       negative=st.booleans(), dtype=st.sampled_from([None, np.float32, np.float64]))
def test_arange_floats(start, length, step, negative, dtype):
    stop = start - length if negative else start + length
    step = -step if negative else step
    assume(abs((stop - start) / step) < 500)
    check_nullary(lambda: c.arange(start, stop, step, dtype=dtype),
                  lambda: np.arange(start, stop, step, dtype=dtype), rtol=1e-6, atol=1e-5)


def test_arange_dtypes_and_keywords():
    for args, kwargs in [((5,), {}), ((0.0, 1.0, 0.1), {}), ((1, 5.0), {}),
                         ((np.float32(1), 5), {}), ((np.int8(3),), {}), ((2, 9, 3), {}),
                         ((10, 0, -3), {}), ((0.5, 5), {"dtype": int}), ((5,), {"dtype": "f4"}),
                         ((), {"start": 1, "stop": 4}), ((3, 3), {})]:
        check_nullary(lambda: c.arange(*args, **kwargs), lambda: np.arange(*args, **kwargs))


def test_arange_of_staged_bound_is_refused():
    with pytest.raises(UnsupportedFunctionError, match="must be known"):
        stage(lambda n: c.arange(n), np.int64(3))
    with pytest.raises(ConcretizationError):
        stage(lambda n: c.zeros(n), np.int64(3))
    with pytest.raises(ConcretizationError):
        stage(lambda x: c.ones((x.shape[0], x[0])), np.arange(3))


@SETTINGS
@given(start=st.floats(-10, 10), stop=st.floats(-10, 10), num=st.integers(0, 12),
       endpoint=st.booleans(), dtype=st.sampled_from([None, np.float32, np.int32]))
def test_linspace_static(start, stop, num, endpoint, dtype):
    closed = check_nullary(lambda: c.linspace(start, stop, num, endpoint, dtype=dtype),
                           lambda: np.linspace(start, stop, num, endpoint, dtype=dtype))
    assert len(closed.eqns) <= 7
    check_nullary(lambda: c.linspace(start, stop, num, endpoint, retstep=True),
                  lambda: np.linspace(start, stop, num, endpoint, retstep=True))


def test_linspace_defaults_and_ints():
    for args in [(0, 1), (0, 10, 11), (2, -3, 4), (1, 1, 3), (0.0, 1.0, 1), (5, 6, 0)]:
        closed = check_nullary(lambda: c.linspace(*args), lambda: np.linspace(*args))
    closed = check_nullary(lambda: c.linspace(0, 1, 5), lambda: np.linspace(0, 1, 5))
    assert primitive_names(closed) == ["iota", "mul"]


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace_staged_bounds(axis, endpoint):
    a = np.array([0.0, 1.0, -2.0], np.float32)
    b = np.array([1.0, 3.0, 2.0], np.float32)
    check_staged(lambda x, y: c.linspace(x, y, 5, endpoint, axis=axis),
                 lambda x, y: np.linspace(x, y, 5, endpoint, axis=axis), a, b)
    check_staged(lambda x, y: c.linspace(x, y, 4, endpoint, retstep=True, axis=axis),
                 lambda x, y: np.linspace(x, y, 4, endpoint, retstep=True, axis=axis), a, b)
    check_staged(lambda x: c.linspace(x, 10, 4, endpoint, dtype=np.int64, axis=axis),
                 lambda x: np.linspace(x, 10, 4, endpoint, dtype=np.int64, axis=axis), a)
    check_staged(lambda x: c.linspace(0.5, x, 3, endpoint), lambda x: np.linspace(0.5, x, 3, endpoint),
                 np.float64(2.0))


def test_array_and_asarray_of_staged_values():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    check_staged(lambda v: c.array([v, v * 2]), lambda v: np.array([v, v * 2]), x)
    check_staged(lambda v: c.array([v[0], 1.0]), lambda v: np.array([v[0], 1.0]), x)
    check_staged(lambda v: c.asarray([[v[0], v[1]], [v[2], 0]]),
                 lambda v: np.asarray([[v[0], v[1]], [v[2], 0]]), x)
    check_staged(lambda v: c.array(v, dtype=np.int32), lambda v: np.array(v, dtype=np.int32), x)
    check_staged(lambda v: c.array(v, ndmin=3), lambda v: np.array(v, ndmin=3), x)
    check_staged(lambda v: c.asarray(v), lambda v: np.asarray(v), x)
    check_staged(lambda v: c.copy(v), lambda v: np.copy(v), x)
    check_staged(lambda a: c.array(a) * np.float32(1), lambda a: np.array(a) * np.float32(1), 2.5)
    closed, _ = stage(lambda v: c.asarray(v), x)
    assert not closed.eqns


def test_array_of_concrete_data_is_a_constant():
    data = [[1.0, 2.0], [3.0, 4.0]]
    closed = check_staged(lambda: c.array(data), lambda: np.array(data))
    assert len(closed.consts) == 1
    check_staged(lambda: c.array(data, dtype=np.float32), lambda: np.array(data, dtype=np.float32))
    check_staged(lambda: c.asarray(3), lambda: np.asarray(3))
    check_staged(lambda: c.array([1, 2], ndmin=2), lambda: np.array([1, 2], ndmin=2))
    check_staged(lambda: c.copy(np.arange(3)), lambda: np.copy(np.arange(3)))
    for fn, np_fn in [(c.array, np.array), (c.asarray, np.asarray)]:
        assert_same(fn(data), np_fn(data))


def test_registered():
    for name in ["zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
                 "empty_like", "eye", "identity", "arange", "linspace", "array", "asarray",
                 "copy", "tri"]:
        assert NUMPY_IMPLS[getattr(np, name)] is getattr(c, name)


def test_x32_mode_canonicalizes():
    config.update("enable_x64", False)
    try:
        closed, _ = stage(lambda: (c.zeros(3), c.arange(4), c.linspace(0, 1, 3), c.eye(2)))
        assert [a.dtype for a in closed.out_avals] == [np.float32, np.int32, np.float32, np.float32]
    finally:
        config.update("enable_x64", True)


# ---------------------------------------------------------------------------------------
# meshgrid of staged coordinates; indices, triu_indices, tril_indices of static sizes


def grids(x, y, z):
    # tuple(...): NumPy 2 returns a tuple, jax.numpy (the derivative oracle) a list.
    return (tuple(np.meshgrid(x, y)), tuple(np.meshgrid(x, y, indexing="ij")),
            tuple(np.meshgrid(x, y, z, sparse=True)),
            tuple(np.meshgrid(x, y, z, indexing="ij", sparse=True)), tuple(np.meshgrid(z)))


def weighted_grid_sum(x, y):
    gx, gy = np.meshgrid(x, y)
    return np.sum(gx * gy ** 2)


@examples(4, 10)
@given(st.lists(st.integers(1, 4), min_size=3, max_size=3), st.integers(0, 5))
def test_meshgrid(sizes, seed):
    rng = np.random.default_rng(seed)
    x, y, z = (rng.standard_normal(n) for n in sizes)
    check_numpy_and_jax(grids, x, y, z)
    # NumPy flattens N-d inputs (jax.numpy.meshgrid refuses them: values only).
    check_numpy_and_jax(grids, x, y, z.reshape(1, -1), derivatives=False)
    check_numpy_and_jax(weighted_grid_sum, x, y)


def static_index_grids(x):
    rows, cols = np.triu_indices(3, 1)
    lower = np.tril_indices(3, -1, 4)
    return x[rows, cols] + x[lower] * np.indices((3, 4))[1][lower]


def test_static_index_grids_inside_staged_functions():
    check_numpy_and_jax(static_index_grids, np.arange(12.0).reshape(3, 4))


def test_meshgrid_bad_indexing_says_what_to_write():
    with pytest.raises(ShapeError, match="indexing='xy'"):
        s2s.jit(lambda x: np.meshgrid(x, x, indexing="yx"))(np.zeros(3))
