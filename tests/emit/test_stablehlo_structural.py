"""Structural and indexing primitives lowered to StableHLO, compiled by XLA, held to NumPy.

Two routes: functions written with the NumPy surface (staged by the front end, as a user's
`def` is) and direct binds of the primitives with parameters the surface rarely produces
(non-trailing broadcast dimensions, negative and interior padding, several gather axes,
out-of-range indices that must clamp, repeated scatter positions that must accumulate).
Shapes, dtypes (float64, float32, int32, bool) and parameters are drawn by hypothesis with
the strategies the NumPy impls are tested with (tests/primitives), whose oracles are
plain NumPy loops.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s.emit.stablehlo import lower
from s2s.primitives import indexing as I
from s2s.primitives import structural as S
from s2s.staging import Primitive
from s2s_runtime.xla import Executable
from tests.emit.strategies import SETTINGS, shapes, tolerance
from tests.helpers import assert_same, check_lowered
from tests.primitives import test_structural as impl_tests
from tests.primitives.test_indexing import gather_cases, gather_oracle, scatter_add_oracle

pytest.importorskip("jaxlib")

DTYPES = impl_tests.DTYPES                  # float32, float64, int32, bool
NUMERIC = [d for d in DTYPES if d != np.bool_]


def check_def(fn, *args):
    """`fn` (a def using the NumPy surface) staged by the front end, lowered, compiled and
    run by XLA, equals `fn(*args)` run by NumPy. Returns the StableHLO text."""
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


def draw_arrays(data, shape_list, dtypes=DTYPES):
    """Arrays of the given shapes and one drawn dtype (random values: hypothesis draws the
    seed, the shapes and the dtype)."""
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    return [impl_tests.random_array(s, dtype, seed + i) for i, s in enumerate(shape_list)]


def index_array(data, size, min_dims=0, max_dims=2, shape=None, label="idx"):
    """Integer indices of drawn shape and dtype into an axis of `size`, negative ones (from
    the end, as NumPy reads them) included."""
    shape = shape if shape is not None else data.draw(shapes(min_dims, max_dims, min_side=0),
                                                      label=f"{label} shape")
    dtype = data.draw(st.sampled_from([np.int32, np.int64]), label=f"{label} dtype")
    return data.draw(hnp.arrays(dtype, shape, elements=st.integers(-size, size - 1)), label=label)


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


def gather_middle_fn(x, idx):
    return x[:, idx]


def take_fn(x, idx):
    return np.take(x, idx, axis=1)


def gather_2d_fn(x, rows, cols):
    return x[rows, cols]


def dynamic_row_fn(x, i):
    return x[i]


def dynamic_elem_fn(x, i, j):
    return x[i, j] * 2


def one(min_dims=1, max_dims=3):
    """The shape list of a one-argument def."""
    return shapes(min_dims, max_dims, min_side=0).map(lambda s: [s])


SURFACE = [   # (def, strategy of its arguments' shapes)
    (reshape_fn, one(0)),
    (transpose_fn, one(0)),
    (transpose3_fn, one(3, 3)),
    (squeeze_expand_fn, one()),
    (broadcast_fn, shapes(2, 2, min_side=0).map(lambda s: [s, s[:1]])),
    (pad_fn, one(2, 2)),
    (pad_value_fn, one()),
    (slice_fn, one(2, 2)),
    (slice_neg_fn, one(2, 2)),
    (flip_fn, one()),
    (concatenate_fn, st.tuples(shapes(2, 2, min_side=0), st.integers(0, 3))
     .map(lambda p: [p[0], (p[1], p[0][1])])),
]


@pytest.mark.parametrize("fn,shape_lists", SURFACE, ids=[f.__name__ for f, _ in SURFACE])
@SETTINGS
@given(data=st.data())
def test_numpy_surface(fn, shape_lists, data):
    check_def(fn, *draw_arrays(data, data.draw(shape_lists, label="shapes")))


@pytest.mark.parametrize("fn,axis", [(gather_fn, 0), (gather_middle_fn, 1), (take_fn, 1)],
                         ids=["x[idx]", "x[:, idx]", "take"])
@SETTINGS
@given(data=st.data())
def test_gather_surface(fn, axis, data):
    (x,) = draw_arrays(data, [data.draw(shapes(axis + 1, 3), label="x shape")])
    idx = index_array(data, x.shape[axis])
    text = check_def(fn, x, idx)
    if idx.ndim:
        assert "stablehlo.gather" in text


@SETTINGS
@given(data=st.data())
def test_gather_two_index_arrays(data):
    """x[rows, cols] with index arrays that broadcast against each other."""
    (x,) = draw_arrays(data, [data.draw(shapes(2, 3), label="x shape")])
    index_shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2),
                             label="index shapes").input_shapes
    rows, cols = (index_array(data, n, shape=s, label=name)
                  for n, s, name in zip(x.shape, index_shapes, ["rows", "cols"]))
    check_def(gather_2d_fn, x, rows, cols)


@SETTINGS
@given(data=st.data())
def test_dynamic_index(data):
    (x,) = draw_arrays(data, [data.draw(shapes(2, 3), label="x shape")])
    i, j = (index_array(data, n, shape=(), label=name)[()] for n, name in zip(x.shape, "ij"))
    text = check_def(dynamic_row_fn, x, i)
    assert "stablehlo.dynamic_slice" in text
    check_def(dynamic_elem_fn, x, i, j)


# ---------------------------------------------------------------------------------------
# Direct binds through check_lowered


@SETTINGS
@given(impl_tests.broadcast_cases())
def test_broadcast_in_dim(case):
    x, shape, dims = case
    missing = tuple(d for d in range(len(shape)) if d not in dims)
    check_lowered(lambda x: S.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims),
                  lambda x: np.broadcast_to(np.expand_dims(x, missing), shape), x)


@SETTINGS
@given(impl_tests.reshape_cases())
def test_reshape(case):
    x, new = case
    check_lowered(lambda x: S.reshape.bind(x, new_sizes=new), lambda x: np.reshape(x, new), x)


@SETTINGS
@given(st.data())
def test_squeeze(data):
    x = data.draw(impl_tests.arrays(max_side=2))
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    dims = tuple(ones[i] for i in data.draw(impl_tests.subsets(len(ones))))
    check_lowered(lambda x: S.squeeze.bind(x, dimensions=dims), lambda x: np.squeeze(x, dims), x)


@SETTINGS
@given(st.data())
def test_expand_dims(data):
    x = data.draw(impl_tests.arrays(max_dims=3))
    k = data.draw(st.integers(0, 2))
    dims = data.draw(impl_tests.subsets(x.ndim + k, k))
    check_lowered(lambda x: S.expand_dims.bind(x, dimensions=dims),
                  lambda x: np.expand_dims(x, dims), x)


@SETTINGS
@given(st.data())
def test_transpose(data):
    x = data.draw(impl_tests.arrays())
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    check_lowered(lambda x: S.transpose.bind(x, permutation=perm),
                  lambda x: np.transpose(x, perm), x)


@SETTINGS
@given(impl_tests.pad_cases(), st.sampled_from(DTYPES), st.booleans())
def test_pad(case, dtype, staged_value):
    """Negative (cropping) and interior padding, with a staged padding value or a literal.
    pad_cases draws float32 or int32 operands; they are cast to the drawn dtype."""
    x, value, config = case
    x, value = x.astype(dtype), np.asarray(value, dtype)
    if staged_value:
        check_lowered(lambda x, v: S.pad.bind(x, v, padding_config=config),
                      lambda x, v: impl_tests.pad_oracle(x, v, config), x, value)
    else:
        check_lowered(lambda x: S.pad.bind(x, value[()], padding_config=config),
                      lambda x: impl_tests.pad_oracle(x, value, config), x)


@SETTINGS
@given(impl_tests.slice_cases(), st.booleans())
def test_slice(case, unit_strides_as_none):
    x, starts, limits, strides = case
    if unit_strides_as_none:
        strides = None
    index = tuple(slice(s, l, k) for s, l, k in zip(starts, limits, strides or [1] * x.ndim))
    check_lowered(lambda x: S.slice.bind(x, start_indices=starts, limit_indices=limits,
                                         strides=strides), lambda x: x[index], x)


@SETTINGS
@given(st.data())
def test_rev(data):
    x = data.draw(impl_tests.arrays())
    dims = data.draw(impl_tests.subsets(x.ndim))
    check_lowered(lambda x: S.rev.bind(x, dimensions=dims), lambda x: np.flip(x, dims), x)


@SETTINGS
@given(st.data())
def test_concatenate(data):
    """One to three operands (one is the identity), sizes along the axis 0 included."""
    shape = data.draw(shapes(1, 3, min_side=0))
    dim = data.draw(st.integers(0, len(shape) - 1), label="dimension")
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3), label="sizes")
    xs = draw_arrays(data, [shape[:dim] + (n,) + shape[dim + 1:] for n in sizes])
    check_lowered(lambda *xs: S.concatenate.bind(*xs, dimension=dim),
                  lambda *xs: np.concatenate(xs, axis=dim), *xs)


def _clamped_window(x, starts, sizes):
    """The index of the window XLA reads: starts clamped into [0, dim - size]."""
    begin = impl_tests.clamp_starts(starts, x.shape, sizes)
    return tuple(slice(b, b + n) for b, n in zip(begin, sizes))


@SETTINGS
@given(impl_tests.dynamic_slice_cases())
def test_dynamic_slice_clamps(case):
    x, starts, sizes = case
    check_lowered(lambda x, *starts: S.dynamic_slice.bind(x, *starts, slice_sizes=sizes),
                  lambda x, *starts: x[_clamped_window(x, starts, sizes)], x, *starts)


@SETTINGS
@given(impl_tests.dynamic_slice_cases())
def test_dynamic_update_slice_clamps(case):
    x, starts, sizes = case
    update = impl_tests.random_array(sizes, x.dtype, 7)

    def expected(x, update, *starts):
        out = x.copy()
        out[_clamped_window(x, starts, sizes)] = update
        return out
    check_lowered(lambda x, u, *starts: S.dynamic_update_slice.bind(x, u, *starts),
                  expected, x, update, *starts)


@SETTINGS
@given(gather_cases(in_range=False))
def test_gather(case):
    """Several axes in any order, repeated and out-of-range (clamped) indices."""
    x, indices, axes = case
    text = check_lowered(lambda x, *idx: I.gather.bind(x, *idx, axes=axes),
                         lambda x, *idx: gather_oracle(x, idx, axes), x, *indices)
    assert "stablehlo.gather" in text


@SETTINGS
@given(gather_cases(in_range=False, dtypes=tuple(NUMERIC)))
def test_scatter_add(case):
    """Repeated positions accumulate (as np.add.at); out-of-range ones clamp, as gather's."""
    x, indices, axes = case
    updates = impl_tests.random_array(gather_oracle(x, indices, axes).shape, x.dtype, 3)
    text = check_lowered(lambda x, u, *idx: I.scatter_add.bind(x, u, *idx, axes=axes),
                         lambda x, u, *idx: scatter_add_oracle(x, u, idx, axes),
                         x, updates, *indices, **tolerance(x.dtype, f32=1e-6))
    assert "stablehlo.scatter" in text


@SETTINGS
@given(st.data())
def test_literal_operands(data):
    """A scalar constant operand (a jaxpr literal) lowers like any 0-d operand."""
    shape = data.draw(shapes(0, 3), label="shape")
    (x,) = draw_arrays(data, [shape], NUMERIC)
    one = np.ones((), x.dtype)[()]
    check_lowered(lambda x: S.broadcast_in_dim.bind(one, shape=shape, broadcast_dimensions=())
                  + x, lambda x: x + one, x)
    check_lowered(lambda x: S.reshape.bind(one, new_sizes=(1,) * x.ndim) * x, lambda x: x * one, x)


def test_every_structural_and_indexing_primitive_is_tested_here():
    tested = {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose", "pad", "slice",
              "rev", "concatenate", "dynamic_slice", "dynamic_update_slice", "gather",
              "scatter_add"}
    declared = {p.name for m in (S, I) for p in vars(m).values() if isinstance(p, Primitive)}
    assert declared == tested, (declared - tested, tested - declared)
