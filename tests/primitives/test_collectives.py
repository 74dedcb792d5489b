"""The collectives (psum, pmax, pmin, all_gather, axis_index) on hand-built jaxprs of one
example, batched over their named axes and held to a lockstep oracle: every example of a
grid of named axes runs the jaxpr side by side, and a collective reads the operands of the
examples it spans. The batch sits at every position, operands are batched or not, names
come alone or in tuples, and two nested batchings peel a collective name by name."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.core import Literal, ShapedArray, check_jaxpr, eval_jaxpr, literal_value
from s2s.emit.python import emit_jaxpr_source, load_source
from s2s.emit.stablehlo import lower
from s2s.errors import ShapeError, StagingError
from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import collectives as coll
from s2s.primitives import elementwise as ew
from tests.passes.handbuilt import arr, build, names

SETTINGS = settings(max_examples=20, deadline=None)
REDUCING = {coll.psum: np.sum, coll.pmax: np.max, coll.pmin: np.min}


# ---------------------------------------------------------------------------------------
# The lockstep oracle


def _linear_index(coords: dict, axes) -> int:
    """An example's position along `axes`, the first name major (as JAX numbers them)."""
    index = 0
    for name, size in axes:
        index = index * size + coords[name]
    return index


def _collective(eqn, coords: dict, grid: list, operand_of):
    """What the collective `eqn` gives the example at `coords`: it reads the operands of
    the examples that differ from it only along the axes it spans, in their order."""
    axes = eqn.params["axes"]
    if eqn.primitive is coll.axis_index:
        return np.int32(_linear_index(coords, axes))
    spanned = {name for name, _ in axes}
    group = sorted((c for c in grid if all(c[n] == coords[n] for n in c if n not in spanned)),
                   key=lambda c: _linear_index(c, axes))
    values = np.stack([np.asarray(operand_of(c)) for c in group])
    if eqn.primitive in REDUCING:
        return REDUCING[eqn.primitive](values, axis=0).astype(values.dtype)
    dimension = eqn.params["dimension"]
    if eqn.params["tiled"]:
        return np.concatenate(list(values), axis=dimension)
    return np.moveaxis(values, 0, dimension)


def lockstep(closed, grid_sizes: dict, args_of) -> dict:
    """{coords: outputs} for every example of the grid of named axes `grid_sizes`, each
    example's arguments being `args_of(coords)`."""
    jaxpr = closed.jaxpr
    grid = [dict(zip(grid_sizes, c)) for c in itertools.product(*map(range, grid_sizes.values()))]
    envs = [dict(zip(jaxpr.constvars, closed.consts)) | dict(zip(jaxpr.invars, args_of(c)))
            for c in grid]

    def read(env, v):
        return literal_value(v) if isinstance(v, Literal) else env[v]
    for eqn in jaxpr.eqns:
        outs = []
        for coords, env in zip(grid, envs):
            if eqn.primitive in coll.COLLECTIVES:
                outs.append(_collective(eqn, coords, grid, lambda c: read(envs[grid.index(c)], eqn.invars[0])))
            else:
                outs.append(eqn.primitive.impl(*[read(env, v) for v in eqn.invars], **eqn.params))
        for env, out in zip(envs, outs):
            env[eqn.outvars[0]] = out
    return {tuple(c.values()): [np.asarray(read(env, v)) for v in jaxpr.outvars]
            for c, env in zip(grid, envs)}


def example_of(x, dim, b):
    return x if dim is None else np.take(x, b, axis=dim)


def run_both(batched, operands) -> list:
    """The batched jaxpr's outputs from the reference interpreter and its emitted Python,
    which must agree."""
    check_jaxpr(batched)
    ran = [np.asarray(o) for o in eval_jaxpr(batched, *operands)]
    emitted = load_source(emit_jaxpr_source(batched, "f"), "batched").f(*operands)
    emitted = [emitted] if len(ran) == 1 else list(emitted)
    for a, b in zip(ran, emitted):
        np.testing.assert_array_equal(np.asarray(b), a)
    return ran


def check_over_one_axis(fn, operands, dims, name="b"):
    """Batches `fn` (of one example) over the axis `name`, every output requested at 0, and
    compares with the lockstep oracle; returns the batched jaxpr."""
    size = next(np.shape(x)[d] for x, d in zip(operands, dims) if d is not None)
    closed = build(fn, *[_aval(example_of(x, d, 0)) for x, d in zip(operands, dims)])
    batched, _ = batch_jaxpr(closed, list(dims), Axis(size, name), [0] * len(closed.jaxpr.outvars))
    expected = lockstep(closed, {name: size},
                        lambda c: [example_of(x, d, c[name]) for x, d in zip(operands, dims)])
    for i, got in enumerate(run_both(batched, operands)):
        want = np.stack([expected[(b,)][i] for b in range(size)])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert got.dtype == want.dtype
    return batched


def _aval(x):
    x = np.asarray(x)
    return ShapedArray(x.shape, x.dtype)


# ---------------------------------------------------------------------------------------
# Over the mapped axis


@st.composite
def batched_operand(draw, batch=3, kind=None):
    """(batch position or None, operand): small integers so that pmax/pmin meet ties."""
    rank = draw(st.integers(0, 2))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    dim = draw(st.sampled_from([None, *range(rank + 1)]))
    if dim is not None:
        shape = shape[:dim] + (batch,) + shape[dim:]
    kind = kind or draw(st.sampled_from(["float", "int"]))
    values = np.random.default_rng(draw(st.integers(0, 2**16))).integers(-2, 3, shape)
    return dim, values.astype(np.float64 if kind == "float" else np.int32)


@SETTINGS
@given(prim=st.sampled_from(list(REDUCING)), operand=batched_operand(), data=st.data())
def test_psum_pmax_pmin_reduce_over_the_batch_wherever_it_is(prim, operand, data):
    dim, x = operand
    if dim is None:     # one batched operand fixes the batch size; it is added afterwards
        w = np.arange(3.0)
        batched = check_over_one_axis(lambda w, x: [ew.sin.bind(w), prim.bind(x, axes=(("b", 3),))],
                                      [w, x], [0, None])
    else:
        batched = check_over_one_axis(lambda x: prim.bind(x, axes=(("b", 3),)), [x], [dim])
    assert not set(names(batched)) & {"psum", "pmax", "pmin"}


def test_a_sum_over_the_batch_is_one_reduce_sum_and_its_result_is_unbatched():
    closed = build(lambda x: ew.mul.bind(x, coll.psum.bind(x, axes=(("b", 4),))), arr(3))
    batched, dims = batch_jaxpr(closed, [0], Axis(4, "b"), None)
    assert names(batched) == ["reduce_sum", "mul"] and dims == [0]
    assert batched.jaxpr.eqns[0].outvars[0].aval.shape == (3,)


def test_psum_of_an_unbatched_operand_multiplies_by_the_size_without_broadcasting():
    closed = build(lambda x, w: ew.add.bind(x, coll.psum.bind(w, axes=(("b", 5),))), arr(2), arr(2))
    batched, dims = batch_jaxpr(closed, [0, None], Axis(5, "b"), None)
    assert names(batched) == ["mul", "add"] and "broadcast_in_dim" not in names(batched)


@SETTINGS
@given(operand=batched_operand(), tiled=st.booleans(), data=st.data())
def test_all_gather_moves_the_batch_to_its_axis(operand, tiled, data):
    dim, x = operand
    rank = x.ndim - (dim is not None)
    if tiled and rank == 0:
        x, rank = x[..., None], 1
    dimension = data.draw(st.integers(0, rank - 1 if tiled else rank))
    gather = lambda v: coll.all_gather.bind(v, axes=(("b", 3),), dimension=dimension, tiled=tiled)
    if dim is None:
        check_over_one_axis(lambda w, v: [ew.sin.bind(w), gather(v)], [np.arange(3.0), x], [0, None])
    else:
        check_over_one_axis(gather, [x], [dim])


def test_axis_index_is_an_iota_over_the_batch():
    batched = check_over_one_axis(lambda x: ew.add.bind(x, coll.axis_index.bind(axes=(("b", 4),))),
                                  [np.zeros((2, 4), np.int32)], [1])
    assert "iota" in names(batched)


# ---------------------------------------------------------------------------------------
# Over other names: an outer vmap's, or a tuple of both


AXES = {"i": 3, "j": 2}


@SETTINGS
@given(prim=st.sampled_from([*REDUCING, coll.all_gather, coll.axis_index]),
       spanned=st.sampled_from([("i",), ("j",), ("i", "j"), ("j", "i")]),
       dims=st.tuples(st.sampled_from([None, 0, 1]), st.sampled_from([0, 1])),
       tiled=st.booleans(), seed=st.integers(0, 99))
def test_nested_batching_peels_the_names_one_by_one(prim, spanned, dims, tiled, seed):
    """Batched over 'i' (inner) then 'j' (outer): a collective over either, or both in
    either order, gives what the grid of examples gives. `dims`: where the inner batch is
    in the example (None: x is shared by the examples of 'i'), then the outer batch."""
    axes = tuple((n, AXES[n]) for n in spanned)
    params = {"dimension": 1, "tiled": tiled} if prim is coll.all_gather else {}
    inner_dim, outer_dim = dims
    shape = [2, 2]
    if inner_dim is not None:
        shape.insert(inner_dim, AXES["i"])
    shape.insert(outer_dim, AXES["j"])
    x = np.random.default_rng(seed).integers(-2, 3, shape).astype(np.float64)

    def fn(x):
        return prim.bind(axes=axes) if prim is coll.axis_index else prim.bind(x, axes=axes, **params)

    closed = build(fn, arr(2, 2))
    inner, (i_dim,) = batch_jaxpr(closed, [inner_dim], Axis(AXES["i"], "i"), None)
    outer, _ = batch_jaxpr(inner, [outer_dim], Axis(AXES["j"], "j"), [0])
    got = run_both(outer, [x])[0]
    expected = lockstep(closed, AXES, lambda c: [example_of(example_of(x, outer_dim, c["j"]),
                                                            inner_dim, c["i"])])
    if i_dim is None:   # the same for every example of 'i' (a collective over it)
        assert all(np.array_equal(expected[(i, j)][0], expected[(0, j)][0])
                   for i in range(3) for j in range(2))
        want = np.stack([expected[(0, j)][0] for j in range(2)])
    else:
        got = np.moveaxis(got, i_dim + 1, 1)
        want = np.stack([np.stack([expected[(i, j)][0] for i in range(3)]) for j in range(2)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    assert not set(names(outer)) & {p.name for p in coll.COLLECTIVES}


def test_a_collective_over_an_outer_name_keeps_the_batch_where_it_is():
    closed = build(lambda x: coll.psum.bind(ew.sin.bind(x), axes=(("outer", 2),)), arr(3, 4))
    batched, dims = batch_jaxpr(closed, [1], Axis(5, "inner"), None)
    assert names(batched) == ["sin", "psum"] and dims == [1]
    assert batched.jaxpr.outvars[0].aval.shape == (3, 5, 4)


# ---------------------------------------------------------------------------------------
# Shapes, and the clear errors of a collective left unbatched


def test_all_gather_shapes_and_refusals():
    x = arr(2, 3)
    axes = (("b", 4),)
    assert coll.all_gather.abstract_eval(x, axes=axes, dimension=2, tiled=False).shape == (2, 3, 4)
    assert coll.all_gather.abstract_eval(x, axes=axes, dimension=1, tiled=True).shape == (2, 12)
    with pytest.raises(ShapeError, match="out of range"):
        coll.all_gather.abstract_eval(x, axes=axes, dimension=2, tiled=True)
    with pytest.raises(ShapeError, match="repeated"):
        coll.psum.abstract_eval(x, axes=(("b", 4), ("b", 4)))
    with pytest.raises(ShapeError, match="bool"):
        coll.psum.abstract_eval(arr(2, dtype="bool"), axes=axes)


def test_a_collective_no_vmap_batched_is_refused_by_every_backend_with_a_clear_error():
    closed = build(lambda x: coll.psum.bind(x, axes=(("batch", 4),)), arr(3))
    with pytest.raises(StagingError, match="psum over axis 'batch' is only lowered inside the pmap"):
        lower(closed)
    with pytest.raises(StagingError, match="only emitted as Python inside the pmap that binds it"):
        emit_jaxpr_source(closed, "f")
    with pytest.raises(StagingError, match="needs every example of the mapping") as info:
        eval_jaxpr(closed, np.ones(3))
    assert "axis_name='batch'" in str(info.value)
