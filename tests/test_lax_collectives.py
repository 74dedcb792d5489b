"""s2s.lax's collectives (psum, pmean, pmax, pmin, all_gather, axis_index) under s2s.vmap,
against jax.vmap running the same source with np = jax.numpy and lax = jax.lax.

Each function is checked on both backends (`s2s.vmap(f)(x)` runs the emitted Python,
`s2s.jit(s2s.vmap(f))(x)` XLA) with the batch at every position, with unbatched operands,
over tuples of names and nested vmaps; per-example gradients with a pmean inside, and
gradients through a vmapped psum, against jax; and a collective over a name no vmap binds
is an error at its call.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s import lax
from s2s.errors import StagingError
from tests.test_lax import as_jax

SETTINGS = settings(max_examples=5, deadline=None)
BATCH = 4


def centered(x):
    return x - lax.pmean(x, "batch")


def softmax_over_batch(x):
    e = np.exp(x - lax.pmax(x, "batch"))
    return e / lax.psum(e, "batch")


def spread(x):
    return lax.pmax(x, "batch") - lax.pmin(x, ("batch",))


def gathered_at_1(x):
    return lax.all_gather(np.sin(x), "batch", axis=1)


def gathered_tiled_at_last(x):
    return lax.all_gather(x, "batch", axis=-1, tiled=True)


def weighted_by_position(x):
    return x * lax.axis_index("batch")


def integer_psum(x):
    return lax.psum((x > 0).astype(np.int32), "batch")


FUNCTIONS = [centered, softmax_over_batch, spread, gathered_at_1, gathered_tiled_at_last,
             weighted_by_position, integer_psum]


def assert_matches(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
    assert np.asarray(got).dtype == np.asarray(want).dtype


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=2), data=st.data())
def test_each_collective_matches_jax_on_both_backends_with_the_batch_anywhere(fn, shape, data):
    in_axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    batched_shape = list(shape)
    batched_shape.insert(in_axis % (len(shape) + 1), BATCH)
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal(batched_shape)
    want = jax.vmap(as_jax(fn), in_axes=in_axis, axis_name="batch")(x)
    mapped = s2s.vmap(fn, in_axes=in_axis, axis_name="batch")
    assert_matches(mapped(x), want)
    assert_matches(s2s.jit(mapped)(x), want)


def scaled_by_shared(w, x):
    return x * lax.psum(w, "batch") + lax.pmax(w, "batch")


def test_unbatched_operands_are_the_same_in_every_example():
    """psum of a weight is the weight times the batch size and pmax the weight itself:
    neither is broadcast to the batch to get there."""
    w, x = np.array([0.5, -1.0, 2.0]), np.arange(12.0).reshape(BATCH, 3)
    mapped = s2s.vmap(scaled_by_shared, in_axes=(None, 0), axis_name="batch")
    want = jax.vmap(as_jax(scaled_by_shared), in_axes=(None, 0), axis_name="batch")(w, x)
    assert_matches(mapped(w, x), want)
    assert_matches(s2s.jit(mapped)(w, x), want)
    eqns = s2s.make_jaxpr(mapped)(w, x).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["mul", "mul", "add"]
    assert eqns[0].outvars[0].aval.shape == (3,)


def test_a_psum_of_a_python_number_counts_the_examples():
    counted = s2s.vmap(lambda x: x * 0 + lax.psum(1, "batch"), axis_name="batch")
    assert_matches(counted(np.zeros(5)), np.full(5, 5.0))


# ---------------------------------------------------------------------------------------
# Tuples of names and nested vmaps


def grid_collectives(x):
    return (lax.psum(x, "j"), lax.psum(x, ("i", "j")), lax.pmax(x, ("j", "i")),
            lax.axis_index(("i", "j")), lax.axis_index("j"), lax.pmean(x, "i"))


def grid_gather(x):
    return lax.all_gather(x, ("i", "j")), lax.all_gather(x, ("j", "i"), tiled=True)


@pytest.mark.parametrize("in_axes", [(0, 0), (1, 0), (0, 1)])
def test_nested_vmaps_peel_a_tuple_of_names_name_by_name(in_axes):
    inner_axis, outer_axis = in_axes
    x = np.random.default_rng(3).standard_normal((2, 3, 5))   # (j, i, 5) once moved below
    mapped = s2s.vmap(s2s.vmap(grid_collectives, in_axes=inner_axis, axis_name="i"),
                      in_axes=outer_axis, axis_name="j")
    want = jax.vmap(jax.vmap(as_jax(grid_collectives), in_axes=inner_axis, axis_name="i"),
                    in_axes=outer_axis, axis_name="j")(x)
    for got in (mapped(x), s2s.jit(mapped)(x)):
        for g, w in zip(got, want, strict=True):
            assert_matches(g, w)


def test_all_gather_over_a_tuple_of_names_orders_the_first_name_major():
    """jax.vmap cannot all_gather over two names (it asserts); the order is axis_index's:
    example (i, j) lands at i * size_j + j."""
    x = np.random.default_rng(4).standard_normal((2, 3, 5))    # j=2 outer, i=3 inner
    mapped = s2s.vmap(s2s.vmap(grid_gather, axis_name="i"), axis_name="j")
    by_i_major = np.swapaxes(x, 0, 1).reshape(6, 5)              # row i * 2 + j
    by_j_major = x.reshape(6, 5)                                  # row j * 3 + i
    for stacked, tiled in (mapped(x), s2s.jit(mapped)(x)):
        assert stacked.shape == (2, 3, 6, 5) and tiled.shape == (2, 3, 30)
        for j in range(2):
            for i in range(3):
                assert_matches(stacked[j, i], by_i_major)
                assert_matches(tiled[j, i], by_j_major.reshape(30))


# ---------------------------------------------------------------------------------------
# Derivatives


def mean_loss(w, x):
    return lax.pmean(np.sum(np.tanh(x * w) ** 2), "batch")


def test_per_example_gradients_with_a_pmean_inside_match_jax():
    """JAX's convention: psum transposes to a psum, so the per-example gradient of a pmean
    of losses is each example's own gradient, not divided by the batch size."""
    w, xs = np.array([0.3, -0.2, 0.7]), np.random.default_rng(5).standard_normal((BATCH, 3))
    mapped = s2s.vmap(s2s.grad(mean_loss), in_axes=(None, 0), axis_name="batch")
    want = jax.vmap(jax.grad(as_jax(mean_loss)), in_axes=(None, 0), axis_name="batch")(w, xs)
    assert_matches(mapped(w, xs), want)
    assert_matches(s2s.jit(mapped)(w, xs), want)


def residuals(w, x):
    return x * w - lax.psum(x * w, "b") / 3.0


def total_of_vmapped(w, xs):
    return np.sum(s2s.vmap(residuals, in_axes=(None, 0), axis_name="b")(w, xs) ** 2)


def test_the_gradient_of_a_function_of_a_vmapped_psum_matches_jax():
    w, xs = np.array([0.3, -0.2]), np.random.default_rng(6).standard_normal((3, 2))

    def jax_total(w, xs):
        return jnp.sum(jax.vmap(as_jax(residuals), in_axes=(None, 0), axis_name="b")(w, xs) ** 2)
    want = jax.grad(jax_total, argnums=(0, 1))(w, xs)
    for got in (s2s.grad(total_of_vmapped, argnums=(0, 1))(w, xs),
                s2s.jit(s2s.grad(total_of_vmapped, argnums=(0, 1)))(w, xs)):
        for g, e in zip(got, want):
            assert_matches(g, e)


def largest(x):
    return lax.pmax(x, "batch") * 2.0


def test_pmax_differentiates_to_the_examples_holding_the_maximum_ties_sharing():
    """jax has no derivative for pmax; s2s gives the tangent of the example holding the
    maximum, split evenly among ties (reduce_max's rule). Its per-example gradients (the
    cotangents of every example's output reaching each input, JAX's convention) then sum
    to the derivative of the batch's outputs."""
    x = np.array([1.0, 3.0, 3.0, -2.0])
    grads = s2s.vmap(s2s.grad(largest), axis_name="batch")(x)
    assert_matches(grads, np.array([0.0, 4.0, 4.0, 0.0]))     # 4 outputs of 2 * max, 2 ties
    _, tangent = s2s.jvp(s2s.vmap(largest, axis_name="batch"), (x,), (np.array([1.0, 5.0, 7.0, 9.0]),))
    assert_matches(tangent, np.full(4, 12.0))                  # 2 * (5 + 7) / 2


def test_a_nan_example_makes_pmax_and_its_per_example_gradients_nan_on_both_backends():
    """NumPy's max propagates NaN, and no example then equals the maximum: the derivative
    is NaN too, on XLA as in NumPy (where 0 / 0 in the rule's transpose was NaN in NumPy
    but 0 on XLA, which rewrites the product with a converted mask into a select)."""
    x = np.array([[1.0, 3.0], [np.nan, 1.0], [2.0, 3.0], [0.5, -1.0]])   # the batch on axis 0
    expected = np.where(x == x.max(0), 4.0, 0.0)                          # 2 ties of 4 * 2 * max
    expected[:, 0] = np.nan
    per_example_grads = s2s.vmap(s2s.grad(lambda v: np.sum(largest(v))), axis_name="batch")
    assert_matches(per_example_grads(x), expected)
    assert_matches(s2s.jit(per_example_grads)(x), expected)
    assert_matches(s2s.jit(s2s.vmap(largest, axis_name="batch"))(x), np.broadcast_to(2 * x.max(0), x.shape))


WEIGHTS = np.arange(12.0).reshape(3, 4)


def weighted_gathers(x):
    stacked = lax.all_gather(x, "batch", axis=1)
    tiled = lax.all_gather(x * x, "batch", tiled=True)
    return np.sum(stacked * WEIGHTS[:, :, None]) + np.sum(tiled * WEIGHTS.reshape(12, 1))


def test_all_gather_differentiates_as_jax_does():
    """Its transpose: this example's slice of the cotangents summed over the examples."""
    x = np.random.default_rng(7).standard_normal((4, 3, 2))
    mapped = s2s.vmap(s2s.grad(weighted_gathers), axis_name="batch")
    want = jax.vmap(jax.grad(as_jax(weighted_gathers)), axis_name="batch")(x)
    assert_matches(mapped(x), want)
    assert_matches(s2s.jit(mapped)(x), want)


# ---------------------------------------------------------------------------------------
# Names no vmap binds


def sums_over_batch(x):
    return lax.psum(x, "batch")


def test_an_unbound_axis_name_is_an_error_at_the_call():
    with pytest.raises(StagingError) as info:
        s2s.vmap(sums_over_batch, axis_name="examples")(np.ones((2, 3)))
    text = str(info.value)
    assert "unbound axis name: psum over axis 'batch', but only 'examples' is bound here" in text
    assert 'return lax.psum(x, "batch")' in text and "^^^" in text
    assert "s2s.vmap(fn, axis_name='batch')" in text
    with pytest.raises(StagingError, match="no enclosing vmap binds an axis name"):
        s2s.jit(sums_over_batch)(np.ones(3))
    with pytest.raises(StagingError, match="unbound axis name: pmean over axis 'other'"):
        s2s.vmap(lambda x: lax.pmean(x, ("batch", "other")), axis_name="batch")(np.ones(3))


def test_a_collective_called_on_numpy_values_outside_any_vmap_is_the_same_error():
    for call in (lambda: lax.psum(np.ones(3), "batch"), lambda: lax.axis_index("batch"),
                 lambda: lax.all_gather(np.ones(3), "batch")):
        with pytest.raises(StagingError, match="unbound axis name.*no enclosing vmap"):
            call()


def test_all_gather_refuses_an_axis_out_of_range():
    with pytest.raises(StagingError, match="all_gather axis 2 is out of range for a result of rank 2"):
        s2s.vmap(lambda x: lax.all_gather(x, "batch", axis=2), axis_name="batch")(np.ones((4, 3)))


def _scan_of_shared_weights(x, w):
    """A scan over values shared by every example, whose body reads the mapped axis."""
    def step(carry, w_t):
        return carry + lax.psum(w_t, "b") + lax.axis_index("b"), carry
    total, _ = lax.scan(step, np.float64(0.0), w)
    return x * total


def _jax_scan_of_shared_weights(x, w):
    def step(carry, w_t):
        return carry + jax.lax.psum(w_t, "b") + jax.lax.axis_index("b"), carry
    total, _ = jax.lax.scan(step, jnp.float64(0.0), w)
    return x * total


def test_a_loop_over_shared_values_whose_body_reads_the_axis_is_batched():
    """Its operands are all unbatched, yet each example gets its own axis_index: the scan
    is batched because its body holds collectives, not re-staged as it is."""
    x, w = np.arange(4.0), np.array([1.0, 2.0, 3.0])
    expected = np.asarray(jax.vmap(_jax_scan_of_shared_weights, in_axes=(0, None), axis_name="b")(x, w))
    mapped = s2s.vmap(_scan_of_shared_weights, in_axes=(0, None), axis_name="b")
    np.testing.assert_allclose(mapped(x, w), expected)
    np.testing.assert_allclose(np.asarray(s2s.jit(mapped)(x, w)), expected)


# ---------------------------------------------------------------------------------------
# axis_index_groups (jax.vmap has none: checked against NumPy)

GROUPS = [[[0, 1], [2, 3]], [[3, 0], [2, 1]], [[0, 1, 2, 3]], [[0], [1], [2], [3]]]


def in_groups(x, groups, combine):
    """NumPy: each example (axis 0 of `x`) gets `combine` of its group's examples, in order."""
    out = [None] * len(x)
    for group in groups:
        for e in group:
            out[e] = combine(x[list(group)])
    return np.stack(out)


def grouped_collectives(x, groups, name="batch"):
    """(also run under pmap by tests/test_pmap.py)"""
    return (lax.psum(x, name, axis_index_groups=groups), lax.pmean(x, name, axis_index_groups=groups),
            lax.pmax(x, name, axis_index_groups=groups), lax.pmin(x, name, axis_index_groups=groups),
            lax.all_gather(x, name, axis_index_groups=groups),
            lax.all_gather(x, name, axis_index_groups=groups, axis=1),
            lax.all_gather(x, name, axis_index_groups=groups, axis=1, tiled=True))


def grouped_expected(x, groups):
    return (in_groups(x, groups, lambda g: g.sum(0)), in_groups(x, groups, lambda g: g.mean(0)),
            in_groups(x, groups, lambda g: g.max(0)), in_groups(x, groups, lambda g: g.min(0)),
            in_groups(x, groups, lambda g: g), in_groups(x, groups, lambda g: np.stack(list(g), 1)),
            in_groups(x, groups, lambda g: np.concatenate(list(g), 1)))


@pytest.mark.parametrize("groups", GROUPS, ids=str)
@pytest.mark.parametrize("in_axis", [0, 1, None])
def test_axis_index_groups_combine_within_each_group_against_numpy(groups, in_axis):
    x = np.random.default_rng(11).standard_normal((BATCH, 3, 2))
    mapped = s2s.vmap(lambda v: grouped_collectives(v, groups), in_axes=in_axis, axis_name="batch",
                      axis_size=BATCH if in_axis is None else None)
    if in_axis is None:   # every example holds x[0]
        want = grouped_expected(np.broadcast_to(x[0], x.shape), groups)
        arg = x[0]
    else:
        want = grouped_expected(x, groups)
        arg = np.moveaxis(x, 0, in_axis)
    for got in (mapped(arg), s2s.jit(mapped)(arg)):
        for g, w in zip(got, want, strict=True):
            assert_matches(np.broadcast_to(g, w.shape), w)


def grouped_loss(x):
    gathered = lax.all_gather(x, "batch", axis_index_groups=[[1, 2], [3, 0]], axis=1)
    return (np.sum(np.sin(lax.psum(x, "batch", axis_index_groups=[[0, 2], [1, 3]])) * x)
            + np.sum(gathered * WEIGHTS[:, :2, None])
            + np.sum(lax.pmax(x, "batch", axis_index_groups=[[0, 1], [2, 3]])))


def jax_grouped_total(x):
    """Every example's grouped_loss summed, on the whole batch with NumPy-style indexing."""
    def grouped(v, groups, combine):
        out = [None] * len(v)
        for group in groups:
            for e in group:
                out[e] = combine(v[jnp.array(group)])
        return jnp.stack(out)
    sums = grouped(x, [[0, 2], [1, 3]], lambda g: g.sum(0))
    gathered = grouped(x, [[1, 2], [3, 0]], lambda g: jnp.stack(list(g), 1))
    maxima = grouped(x, [[0, 1], [2, 3]], lambda g: g.max(0))
    return jnp.sum(jnp.sin(sums) * x) + jnp.sum(gathered * WEIGHTS[None, :, :2, None]) + jnp.sum(maxima)


@pytest.mark.parametrize("groups, message", [
    ([[0, 1], [2]], "must cover axis 'batch' \\(size 4\\) exactly, in groups of equal size"),
    ([[0, 1, 2], [3]], "in groups of equal size"),
    ([[0, 1], [1, 2]], "must cover axis 'batch'"),
    ([[0, 1], [2, 5]], "must cover axis 'batch'"),
    ([], "must cover axis 'batch'"),
    ("ab", "must be a list of lists of example indices")])
def test_axis_index_groups_that_do_not_split_the_axis_evenly_are_an_error(groups, message):
    with pytest.raises(StagingError, match=message):
        s2s.vmap(lambda x: lax.psum(x, "batch", axis_index_groups=groups), axis_name="batch")(np.ones((4, 3)))


def test_axis_index_groups_need_a_single_axis_name():
    grid = s2s.vmap(s2s.vmap(lambda x: lax.psum(x, ("i", "j"), axis_index_groups=[[0, 1]]), axis_name="i"),
                    axis_name="j")
    with pytest.raises(StagingError, match="groups need a single axis name"):
        grid(np.ones((1, 2)))


# ---------------------------------------------------------------------------------------
# ppermute, psum_scatter, all_to_all (NumPy references also used by tests/test_pmap.py)


def numpy_ppermute(x, perm):
    out = np.zeros_like(x)
    for src, dst in perm:
        out[dst] = x[src]
    return out


def numpy_psum_scatter(x, dimension, tiled):
    total, n = x.sum(0), len(x)
    return np.stack([np.split(total, n, dimension)[e] if tiled else np.take(total, e, dimension)
                     for e in range(n)])


def numpy_all_to_all(x, split, concat, tiled):
    n = len(x)
    if tiled:
        return np.stack([np.concatenate([np.split(x[i], n, split)[j] for i in range(n)], concat)
                         for j in range(n)])
    return np.stack([np.stack([np.take(x[i], j, split) for i in range(n)], concat) for j in range(n)])


def rotated(x):
    return lax.ppermute(x, "batch", [(0, 1), (1, 2), (2, 3), (3, 0)])


def scattered(x):
    return lax.psum_scatter(x, "batch", scatter_dimension=0)


def scattered_tiled(x):
    return lax.psum_scatter(np.sin(x), "batch", scatter_dimension=1, tiled=True)


def exchanged_forward(x):   # split before concat
    return lax.all_to_all(x, "batch", 0, 1)


def exchanged_backward(x):  # split after concat
    return lax.all_to_all(x[:, :BATCH], "batch", 1, 0)


def exchanged_in_place(x):
    return lax.all_to_all(x[:, :BATCH], "batch", 1, 1)


def exchanged_tiled(x):
    return lax.all_to_all(x, "batch", 1, 0, tiled=True)


EXCHANGES = [rotated, scattered, scattered_tiled, exchanged_forward, exchanged_backward, exchanged_in_place,
             exchanged_tiled]


@pytest.mark.parametrize("fn", EXCHANGES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("in_axis", [0, 1, 2, None])
def test_ppermute_psum_scatter_all_to_all_match_jax_with_the_batch_anywhere(fn, in_axis):
    """(jax.vmap of these on an unbatched operand is wrong in jax 0.10: the operand shared
    by every example is compared with jax on it copied for each.)"""
    x = np.random.default_rng(13).standard_normal((BATCH, BATCH, 2 * BATCH))
    if in_axis is None:
        x = np.broadcast_to(x[0], x.shape)
    arg = x[0] if in_axis is None else np.moveaxis(x, 0, in_axis)
    kwargs = {"axis_size": BATCH} if in_axis is None else {}
    want = jax.vmap(as_jax(fn), in_axes=0 if in_axis is None else in_axis, axis_name="batch")(
        x if in_axis is None else arg)
    mapped = s2s.vmap(fn, in_axes=in_axis, axis_name="batch", **kwargs)
    assert_matches(mapped(arg), want)
    assert_matches(s2s.jit(mapped)(arg), want)


def over_the_outer_name(x):
    return (lax.ppermute(x, "j", [(0, 1), (1, 0)]), lax.psum_scatter(x, "j", scatter_dimension=1),
            lax.psum_scatter(x, "j", scatter_dimension=0, tiled=True), lax.all_to_all(x, "j", 0, 1),
            lax.all_to_all(x, "j", 1, 0, tiled=True))


@pytest.mark.parametrize("in_axes", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_inside_an_inner_vmap_the_exchanges_over_the_outer_name_keep_its_batch(in_axes):
    inner_axis, outer_axis = in_axes
    x = np.random.default_rng(19).standard_normal((2, 2, 2, 2))
    mapped = s2s.vmap(s2s.vmap(over_the_outer_name, in_axes=inner_axis, axis_name="i"),
                      in_axes=outer_axis, axis_name="j")
    want = jax.vmap(jax.vmap(as_jax(over_the_outer_name), in_axes=inner_axis, axis_name="i"),
                    in_axes=outer_axis, axis_name="j")(x)
    for got in (mapped(x), s2s.jit(mapped)(x)):
        for g, w in zip(got, want, strict=True):
            assert_matches(g, w)


def within_groups(x, groups, exchange):
    """NumPy: `exchange` (of a whole axis, axis 0 of `x`) run on each group's examples."""
    out = None
    for group in groups:
        result = exchange(x[list(group)])
        out = np.zeros((len(x),) + result.shape[1:], result.dtype) if out is None else out
        out[list(group)] = result
    return out


@pytest.mark.parametrize("groups", GROUPS[:3], ids=str)
@pytest.mark.parametrize("in_axis", [0, 2, None])
@pytest.mark.parametrize("split, concat, tiled", [(0, 1, False), (1, 0, True), (0, 0, False)])
def test_psum_scatter_and_all_to_all_with_axis_index_groups_against_numpy(groups, in_axis, split, concat, tiled):
    k = len(groups[0])
    x = np.random.default_rng(21).standard_normal((BATCH, k, 2 * k))
    if in_axis is None:
        x = np.broadcast_to(x[0], x.shape)
    arg = x[0] if in_axis is None else np.moveaxis(x, 0, in_axis)
    kwargs = {"axis_size": BATCH} if in_axis is None else {}
    exchange = s2s.vmap(lambda v: lax.all_to_all(v, "batch", split, concat, axis_index_groups=groups, tiled=tiled),
                        in_axes=in_axis, axis_name="batch", **kwargs)
    want = within_groups(x, groups, lambda g: numpy_all_to_all(g, split, concat, tiled))
    assert_matches(exchange(arg), want)
    assert_matches(s2s.jit(exchange)(arg), want)
    scatter = s2s.vmap(lambda v: lax.psum_scatter(v, "batch", scatter_dimension=split, axis_index_groups=groups,
                                                  tiled=tiled), in_axes=in_axis, axis_name="batch", **kwargs)
    want = within_groups(x, groups, lambda g: numpy_psum_scatter(g, split, tiled))
    assert_matches(scatter(arg), want)
    assert_matches(s2s.jit(scatter)(arg), want)


def grouped_exchange_loss(x):
    scattered = lax.psum_scatter(x, "batch", scatter_dimension=1, axis_index_groups=[[0, 2], [3, 1]], tiled=True)
    exchanged = lax.all_to_all(x, "batch", 1, 0, axis_index_groups=[[1, 0], [2, 3]], tiled=True)
    return np.sum(np.sin(scattered) * WEIGHTS[:, :2]) + np.sum(np.cos(exchanged) * WEIGHTS.reshape(6, 2))


def jax_grouped_exchange_total(x):
    def within(v, groups, exchange):
        out = [None] * len(v)
        for group in groups:
            result = exchange(v[jnp.array(group)])
            for position, e in enumerate(group):
                out[e] = result[position]
        return jnp.stack(out)
    scattered = within(x, [[0, 2], [3, 1]],
                       lambda g: jnp.stack(jnp.split(g.sum(0), 2, 1)))
    exchanged = within(x, [[1, 0], [2, 3]],
                       lambda g: jnp.stack([jnp.concatenate([jnp.split(g[i], 2, 1)[j] for i in range(2)], 0)
                                            for j in range(2)]))
    return (jnp.sum(jnp.sin(scattered) * WEIGHTS[:, :2]) + jnp.sum(jnp.cos(exchanged) * WEIGHTS.reshape(6, 2)))


@pytest.mark.parametrize("loss, jax_total, shape, seed", [
    (grouped_loss, jax_grouped_total, (BATCH, 3, 2), 12),
    (grouped_exchange_loss, jax_grouped_exchange_total, (BATCH, 3, 4), 22),
], ids=["psum-all_gather-pmax", "psum_scatter-all_to_all"])
def test_gradients_through_grouped_collectives_match_jax_on_the_whole_batch(loss, jax_total, shape, seed):
    """Each example's gradient of every example's loss: the transposes stay in the groups."""
    x = np.random.default_rng(seed).standard_normal(shape)
    want = jax.grad(jax_total)(x)
    mapped = s2s.vmap(s2s.grad(loss), axis_name="batch")
    assert_matches(mapped(x), want)
    assert_matches(s2s.jit(mapped)(x), want)


def test_a_psum_scatter_over_the_outer_name_of_a_value_batched_after_its_axis():
    """(jax 0.10's vmap fails here: against NumPy.) Example (j, i) holds x[j, :, i, :]."""
    x = np.random.default_rng(20).standard_normal((2, 2, 2, 3))
    mapped = s2s.vmap(s2s.vmap(lambda v: lax.psum_scatter(v, "j"), in_axes=1, axis_name="i"), axis_name="j")
    assert_matches(mapped(x), x.sum(0))
    assert_matches(s2s.jit(mapped)(x), x.sum(0))


@pytest.mark.parametrize("split, concat, tiled", [(0, 1, False), (1, 0, False), (0, 0, False), (1, 0, True),
                                                  (0, 1, True), (-1, -2, True)])
def test_all_to_all_and_psum_scatter_against_numpy(split, concat, tiled):
    x = np.random.default_rng(14).standard_normal((BATCH, BATCH, (2 if tiled else 1) * BATCH))
    exchange = s2s.vmap(lambda v: lax.all_to_all(v, "batch", split, concat, tiled=tiled), axis_name="batch")
    assert_matches(s2s.jit(exchange)(x), numpy_all_to_all(x, split % 2, concat % 2, tiled))
    scatter = s2s.vmap(lambda v: lax.psum_scatter(v, "batch", scatter_dimension=split, tiled=tiled),
                       axis_name="batch")
    assert_matches(s2s.jit(scatter)(x), numpy_psum_scatter(x, split % 2, tiled))


def test_ppermute_gives_zeros_where_nothing_is_sent():
    """jax.vmap refuses a perm that is not a whole permutation; JAX's pmap gives zeros."""
    x = np.arange(1.0, 13.0).reshape(BATCH, 3)
    for perm in ([(0, 3), (2, 1)], [(1, 1)], []):
        mapped = s2s.vmap(lambda v: lax.ppermute(v, "batch", perm), axis_name="batch")
        assert_matches(mapped(x), numpy_ppermute(x, perm))
        assert_matches(s2s.jit(mapped)(x), numpy_ppermute(x, perm))
    shared = s2s.vmap(lambda v, w: v + lax.ppermute(w, "batch", [(0, 2)]), in_axes=(0, None), axis_name="batch")
    assert_matches(shared(x, np.ones(3)), x + numpy_ppermute(np.ones((BATCH, 3)), [(0, 2)]))


WEIGHTS_44 = np.random.default_rng(15).standard_normal((BATCH, 2 * BATCH))


@pytest.mark.parametrize("fn", [rotated, scattered, scattered_tiled, exchanged_in_place, exchanged_tiled],
                         ids=lambda f: f.__name__)
def test_gradients_through_ppermute_psum_scatter_all_to_all_match_jax(fn):
    """ppermute transposes to the inverse perm, psum_scatter to all_gather, all_to_all to
    all_to_all with its axes swapped."""
    def loss(x):
        y = fn(x)
        return np.sum(np.sin(y) * WEIGHTS_44.reshape(-1)[:y.size].reshape(y.shape))

    def jax_loss(x):
        y = as_jax(fn)(x)
        return jnp.sum(jnp.sin(y) * WEIGHTS_44.reshape(-1)[:y.size].reshape(y.shape))
    x = np.random.default_rng(16).standard_normal((BATCH, BATCH, 2 * BATCH))
    want = jax.vmap(jax.grad(jax_loss), axis_name="batch")(x)
    mapped = s2s.vmap(s2s.grad(loss), axis_name="batch")
    assert_matches(mapped(x), want)
    assert_matches(s2s.jit(mapped)(x), want)


@pytest.mark.parametrize("split, concat", [(0, 1), (1, 0)])
def test_a_non_tiled_all_to_all_that_moves_the_axis_transposes_exactly(split, concat):
    """jax (0.10) fails on these gradients (a cotangent of the wrong shape): checked by
    linearity instead, <grad, dx> = <weights, f(dx)> for the linear f."""
    weights = np.random.default_rng(17).standard_normal((BATCH, BATCH, BATCH))
    x = np.random.default_rng(18).standard_normal((BATCH, BATCH, BATCH))

    def weighted(v, w):
        return np.sum(lax.all_to_all(v, "batch", split, concat) * w)
    grad = s2s.jit(s2s.vmap(s2s.grad(weighted), axis_name="batch"))(x, weights)
    for seed in range(3):
        dx = np.random.default_rng(seed).standard_normal(x.shape)
        np.testing.assert_allclose(np.sum(np.asarray(grad) * dx),
                                   np.sum(numpy_all_to_all(dx, split, concat, False) * weights), rtol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda v: lax.ppermute(v, "batch", [(0, 1), (2, 1)]), "repeats a source or a destination"),
    (lambda v: lax.ppermute(v, "batch", [(0, 4)]), "names an example outside axis 'batch' \\(size 4\\)"),
    (lambda v: lax.ppermute(v, "batch", [0, 1]), "must be \\(source, destination\\) pairs"),
    (lambda v: lax.psum_scatter(v, "batch"), "its size 3 must equal the axis size 4"),
    (lambda v: lax.psum_scatter(v, "batch", tiled=True), "its size 3 must be a multiple of the axis size 4"),
    (lambda v: lax.all_to_all(v, "batch", 0, 2), "concat_axis 2 is out of range"),
    (lambda v: lax.all_to_all(v, "batch", 0, 0), "all_to_all along axis 0 of f64\\[3\\]: its size 3 must equal"),
    (lambda v: lax.psum_scatter(v, "batch", scatter_dimension=1), "psum_scatter axis 1 is out of range")])
def test_exchanges_refuse_what_does_not_fit_the_axis(call, message):
    with pytest.raises((StagingError, s2s.errors.ShapeError), match=message):
        s2s.vmap(call, axis_name="batch")(np.ones((4, 3)))


# Over a tuple of names: examples numbered as axis_index numbers them, the first name
# major. Three nested vmaps (i: 2, j: 3, k: 2), so that a name batched in the middle has
# names both before and after it in the tuple.

GRID = {"i": 2, "j": 3, "k": 2}


def over_the_grid(fn, in_axes=(0, 0, 0)):
    return s2s.vmap(s2s.vmap(s2s.vmap(fn, in_axes=in_axes[2], axis_name="k"), in_axes=in_axes[1], axis_name="j"),
                    in_axes=in_axes[0], axis_name="i")


def numpy_over_names(x, names, exchange):
    """NumPy: `exchange` (of a whole axis, axis 0) over the examples of `names` flattened in
    their order, for each example of the grid's other names; `x` holds the grid (i, j, k) first."""
    order = list(names) + [n for n in GRID if n not in names]
    moved = np.moveaxis(x, [list(GRID).index(n) for n in order], range(3))
    n = int(np.prod([GRID[name] for name in names]))
    flat = moved.reshape((n, -1) + moved.shape[3:])
    out = np.stack([exchange(flat[:, c]) for c in range(flat.shape[1])], 1)
    out = out.reshape(tuple(GRID[name] for name in order) + out.shape[2:])
    return np.moveaxis(out, range(3), [list(GRID).index(n) for n in order])


NAME_TUPLES = [("i", "j", "k"), ("k", "i", "j"), ("j", "k", "i"), ("j", "k"), ("k", "j"), ("k", "i")]


def _batched_at(x, in_axes):
    """The grid `x` (i, j, k first) laid out for `over_the_grid(fn, in_axes)`."""
    return np.moveaxis(np.moveaxis(x, 2, 2 + in_axes[2]), 1, 1 + in_axes[1])


@pytest.mark.parametrize("names", NAME_TUPLES, ids="".join)
@pytest.mark.parametrize("in_axes", [(0, 0, 0), (0, 1, 2)], ids=str)
def test_ppermute_and_psum_scatter_over_a_tuple_of_names_against_numpy(names, in_axes):
    """(jax.vmap asserts on these over several names.) JAX's pmap numbers a perm's and the
    parts' examples as axis_index does, the first name major; so does s2s."""
    n = int(np.prod([GRID[name] for name in names]))
    perm = [(e, (5 * e + 1) % n) for e in range(n) if e != 1]   # the destination of 1 gets zeros
    x = np.random.default_rng(23).standard_normal((2, 3, 2, n, 2 * n))
    cases = [(lambda v: lax.ppermute(v, names, perm), lambda g: numpy_ppermute(g, perm)),
             (lambda v: lax.psum_scatter(v, names), lambda g: numpy_psum_scatter(g, 0, False)),
             (lambda v: lax.psum_scatter(v, names, scatter_dimension=1, tiled=True),
              lambda g: numpy_psum_scatter(g, 1, True))]
    for fn, exchange in cases:
        mapped = over_the_grid(fn, in_axes)
        want = numpy_over_names(x, names, exchange)
        assert_matches(mapped(_batched_at(x, in_axes)), want)
        assert_matches(s2s.jit(mapped)(_batched_at(x, in_axes)), want)


@pytest.mark.parametrize("names", NAME_TUPLES, ids="".join)
@pytest.mark.parametrize("split, concat, tiled", [(0, 0, False), (0, 1, False), (1, 0, False), (1, 1, True),
                                                  (0, 1, True), (1, 0, True)])
def test_all_to_all_over_a_tuple_of_names_matches_jax(names, split, concat, tiled):
    n = int(np.prod([GRID[name] for name in names]))
    x = np.random.default_rng(24).standard_normal((2, 3, 2, n, 2 * n) if tiled else (2, 3, 2, n, n))

    def exchanged(v):
        return lax.all_to_all(v, names, split, concat, tiled=tiled)

    def theirs(v):
        return jax.lax.all_to_all(v, names, split, concat, tiled=tiled)
    want = jax.vmap(jax.vmap(jax.vmap(theirs, axis_name="k"), axis_name="j"), axis_name="i")(x)
    assert_matches(over_the_grid(exchanged)(x), want)
    assert_matches(s2s.jit(over_the_grid(exchanged, (0, 1, 2)))(_batched_at(x, (0, 1, 2))), want)


@pytest.mark.parametrize("exchange", [
    lambda v: lax.ppermute(v, ("k", "i", "j"), [(e, (e + 5) % 12) for e in range(12)]),
    lambda v: lax.psum_scatter(v, ("j", "k", "i"), scatter_dimension=1, tiled=True),
    lambda v: lax.all_to_all(v, ("k", "i", "j"), 0, 1, tiled=True),
    lambda v: lax.all_to_all(v, ("j", "k"), 1, 1, tiled=True)], ids=["ppermute", "psum_scatter", "all_to_all",
                                                                    "all_to_all_in_place"])
def test_exchanges_over_a_tuple_of_names_transpose_exactly(exchange):
    """Each is linear: the gradient of <w, f(x)> is f's transpose applied to w, so
    <grad, dx> = <w, f(dx)> for every dx (f itself checked above against NumPy and jax)."""
    shape = (2, 3, 2, 12, 12)
    forward = s2s.jit(over_the_grid(exchange))
    weights = np.random.default_rng(25).standard_normal(np.shape(forward(np.zeros(shape))))
    grad = s2s.jit(over_the_grid(s2s.grad(lambda v, w: np.sum(exchange(v) * w))))(np.zeros(shape), weights)
    for seed in range(2):
        dx = np.random.default_rng(seed).standard_normal(shape)
        np.testing.assert_allclose(np.sum(np.asarray(grad) * dx), np.sum(np.asarray(forward(dx)) * weights),
                                   rtol=1e-12)


