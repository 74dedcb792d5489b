"""Batching of structured control flow (cond, while_loop, scan): on hand-built jaxprs
against the loop over examples with every batch position and some operands unbatched, and
through `s2s.vmap` on user code (Python `if`, `while` and `for` on arrays, and s2s.lax's
loops and branches), run both by the emitted Python module and on XLA."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s import lax
from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import elementwise as ew, ops
from s2s.primitives.cond import cond
from s2s.primitives.loops import scan, while_loop
from tests.passes.batching import check_batching
from tests.passes.handbuilt import arr, build, names

SETTINGS = settings(max_examples=15, deadline=None)
SIZE = 4


def _batched(rng, shape, dim):
    """Values of one example's `shape`, batched at `dim` (None: one shared example)."""
    full = shape if dim is None else shape[:dim] + (SIZE,) + shape[dim:]
    return rng.uniform(-1.0, 1.0, full)


@st.composite
def _operands(draw, count, rank=2):
    """`count` float operands of one shape, each batched at a drawn position or unbatched
    (at least one batched)."""
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    dims = [draw(st.one_of(st.none(), st.integers(0, rank))) for _ in range(count)]
    if all(d is None for d in dims):
        dims[0] = draw(st.integers(0, rank))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    return shape, [_batched(rng, shape, d) for d in dims], dims


def _branches(shape):
    """Three branches of (x, w): one reads both, one only x, one only w (so which outputs
    vary over the batch differs between branches and must be agreed)."""
    a = arr(*shape)
    return (build(lambda x, w: [ew.mul.bind(x, w), ew.sin.bind(x)], a, a),
            build(lambda x, w: [ew.exp.bind(x), ew.neg.bind(x)], a, a),
            build(lambda x, w: [ew.cos.bind(w), ew.add.bind(w, w)], a, a))


# ---------------------------------------------------------------------------------------
# cond


@SETTINGS
@given(operands=_operands(2), index=st.integers(-1, 3), n_branches=st.integers(2, 3))
def test_cond_with_a_shared_index_stays_one_cond(operands, index, n_branches):
    shape, (x, w), dims = operands
    branches = _branches(shape)[:n_branches]
    batched = check_batching(lambda i, x, w: cond.bind(i, x, w, branches=branches),
                             [np.int64(index), x, w], [None] + dims, out_dims=[0, 0])
    assert names(batched).count("cond") == 1 and "select" not in names(batched)


def test_cond_branches_agree_on_where_an_output_is_batched():
    """An output unbatched in one branch is batched in all where another batches it; one
    no branch batches stays unbatched."""
    a = arr(3)
    branches = (build(lambda x, w: [ew.neg.bind(w), ew.exp.bind(w)], a, a),
                build(lambda x, w: [ew.mul.bind(x, w), ew.sin.bind(w)], a, a))
    closed = build(lambda i, x, w: cond.bind(i, x, w, branches=branches), arr(dtype="int64"), a, a)
    batched, dims = batch_jaxpr(closed, [None, 1, None], Axis(5))
    assert dims == [1, None]
    assert [v.aval.shape for v in batched.jaxpr.outvars] == [(3, 5), (3,)]


@SETTINGS
@given(operands=_operands(2), n_branches=st.integers(2, 3), bool_index=st.booleans(), data=st.data())
def test_cond_with_a_batched_index_selects_each_examples_branch(operands, n_branches, bool_index, data):
    shape, (x, w), dims = operands
    branches = _branches(shape)[:n_branches]
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    if bool_index and n_branches == 2:
        index = rng.uniform(size=SIZE) > 0.5
    else:
        index = rng.integers(-1, n_branches + 1, SIZE)     # clamped into range, as lax.switch
    batched = check_batching(lambda i, x, w: cond.bind(i, x, w, branches=branches),
                             [index, x, w], [0] + dims, out_dims=[0, 1])
    assert "cond" not in names(batched)


# ---------------------------------------------------------------------------------------
# while_loop


def _while(max_iters):
    """(x, count) -> grow x until it passes `limit` (each example stops at its own step),
    counting the steps; the condition reads a constant `limit`."""
    scalar, vec = arr(), arr(3)
    int_scalar = arr(dtype="int64")
    cond_jaxpr = build(lambda limit, x, n: ew.lt.bind(ops.reduce_sum(x, (0,)), limit), scalar, vec, int_scalar)
    body_jaxpr = build(lambda w, x, n: [ew.add.bind(ew.mul.bind(x, w), w), ew.add.bind(n, np.int64(1))],
                       vec, vec, int_scalar)

    def loop(limit, w, x, n):
        return while_loop.bind(limit, w, x, n, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                               cond_nconsts=1, body_nconsts=1, max_iters=max_iters)
    return loop


@SETTINGS
@given(limit_dim=st.sampled_from([None, 0]), w_dim=st.sampled_from([None, 0, 1]),
       x_dim=st.sampled_from([None, 0, 1]), bounded=st.booleans(), seed=st.integers(0, 99))
def test_while_loop_matches_the_loop_with_each_example_stopping_on_its_own(limit_dim, w_dim, x_dim, bounded,
                                                                         seed):
    if limit_dim is w_dim is x_dim is None:
        x_dim = 0
    rng = np.random.default_rng(seed)
    limit = rng.uniform(2.0, 30.0, SIZE if limit_dim == 0 else ())
    w = rng.uniform(1.1, 2.0, (3,) if w_dim is None else ((SIZE, 3) if w_dim == 0 else (3, SIZE)))
    x = rng.uniform(0.1, 1.0, (3,) if x_dim is None else ((SIZE, 3) if x_dim == 0 else (3, SIZE)))
    check_batching(_while(5 if bounded else None), [limit, w, x, np.int64(0)],
                   [limit_dim, w_dim, x_dim, None])


def test_a_shared_condition_keeps_the_loop_unmasked_and_its_counter_unbatched():
    loop = _while(None)
    closed = build(loop, arr(), arr(3), arr(3), arr(dtype="int64"))
    # The limit and x shared, w batched: x becomes batched, the condition (on x) too.
    _, dims = batch_jaxpr(closed, [None, 0, None, None], Axis(2))
    assert dims == [0, 0]
    # A loop counting to a shared bound: the counter stays unbatched, no select is made.
    int_scalar = arr(dtype="int64")
    counting = build(lambda n, x, i: ew.lt.bind(i, n), int_scalar, arr(3), int_scalar)
    step = build(lambda x, i: [ew.sin.bind(x), ew.add.bind(i, np.int64(1))], arr(3), int_scalar)
    closed = build(lambda n, x, i: while_loop.bind(n, x, i, cond_jaxpr=counting, body_jaxpr=step, cond_nconsts=1,
                                                   body_nconsts=0, max_iters=None), int_scalar, arr(3), int_scalar)
    batched, dims = batch_jaxpr(closed, [None, 1, None], Axis(2))
    assert dims == [1, None]
    inner = batched.jaxpr.eqns[0].params["body_jaxpr"]
    assert "select" not in names(inner)
    check_batching(lambda n, x, i: while_loop.bind(n, x, i, cond_jaxpr=counting, body_jaxpr=step, cond_nconsts=1,
                                                   body_nconsts=0, max_iters=None),
                   [np.int64(3), np.ones((3, 2)), np.int64(0)], [None, 1, None], out_dims=[0, 0])


# ---------------------------------------------------------------------------------------
# scan


def _chain_body():
    """(w; a, b, c; x) -> (a * w + x, sin a, cos b; x * x): batching only `x` or `w` makes
    a batched at once, b one step later, c two (the fixed point must see it)."""
    v = arr(3)
    return build(lambda w, a, b, c, x: [ew.add.bind(ew.mul.bind(a, w), x), ew.sin.bind(a), ew.cos.bind(b),
                                        ew.mul.bind(x, x)], v, v, v, v, v)


@SETTINGS
@given(w_dim=st.sampled_from([None, 0, 1]), carry_dims=st.lists(st.sampled_from([None, 0, 1]), min_size=3,
                                                                  max_size=3),
       xs_dim=st.sampled_from([None, 0, 1, 2]), reverse=st.booleans(), seed=st.integers(0, 99))
def test_scan_matches_the_loop_with_batches_anywhere(w_dim, carry_dims, xs_dim, reverse, seed):
    if w_dim is xs_dim is None and all(d is None for d in carry_dims):
        xs_dim = 0
    rng = np.random.default_rng(seed)
    length = 5
    w = _batched(rng, (3,), w_dim)
    carry = [_batched(rng, (3,), d) for d in carry_dims]
    xs = _batched(rng, (length, 3), xs_dim)
    body = _chain_body()

    def fn(w, a, b, c, xs):
        return scan.bind(w, a, b, c, xs, jaxpr=body, num_consts=1, num_carry=3, length=length,
                         reverse=reverse, unroll=1, checkpoints=None)
    check_batching(fn, [w, *carry, xs], [w_dim, *carry_dims, xs_dim], out_dims=[0, 1, 0, 2])


def test_scan_keeps_unbatched_consts_and_carries_unbatched():
    body = _chain_body()
    closed = build(lambda w, a, b, c, xs: scan.bind(w, a, b, c, xs, jaxpr=body, num_consts=1, num_carry=3,
                                                    length=4, reverse=False, unroll=1, checkpoints=None),
                   *[arr(3)] * 4, arr(4, 3))
    batched, dims = batch_jaxpr(closed, [None, None, None, None, 0], Axis(2))
    assert dims == [0, 0, 0, 1]          # ys batched at 1: axis 0 is the scan's
    assert batched.jaxpr.invars[0].aval.shape == (3,)      # the weight is not copied per example
    batched, dims = batch_jaxpr(closed, [0, None, None, None, None], Axis(2))
    assert dims == [0, 0, 0, None]       # y reads only x, which is shared


# ---------------------------------------------------------------------------------------
# Through s2s.vmap on user code: the emitted module and XLA, against a loop.


def _both_backends(fn, args, in_axes=0):
    """`vmap(fn)` run by its emitted module and by XLA, both equal to the loop."""
    mapped = s2s.vmap(fn, in_axes=in_axes)
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
    per_example = [fn(*[a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, axes)])
                   for b in range(size)]
    want = [np.stack(column) for column in zip(*[p if isinstance(p, tuple) else (p,) for p in per_example])]
    for got in (mapped(*args), s2s.jit(mapped)(*args)):
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)


def piecewise(x, w):
    if x.sum() > 0:
        y = x * w
    else:
        y = np.sin(x) - w
    return y


def newton_sqrt(a):
    x = a
    steps = 0
    while np.abs(x * x - a) > 1e-12 * a:
        x = x - (x * x - a) / (2 * x)
        steps += 1
    return x, steps


def rnn(W, h, xs):
    for x in xs:
        h = np.tanh(W @ h + x)
    return h


def test_python_control_flow_on_arrays_batches():
    rng = np.random.default_rng(0)
    xs, w = rng.normal(size=(6, 3)), rng.normal(size=3)
    _both_backends(piecewise, (xs, w), (0, None))
    _both_backends(piecewise, (xs, np.stack([w] * 6, 1)), (0, 1))
    _both_backends(newton_sqrt, (np.array([1.0, 2.0, 9.0, 1e4, 0.25]),))
    W = rng.normal(size=(3, 3)) * 0.5
    _both_backends(rnn, (W, np.zeros(3), rng.normal(size=(4, 5, 3))), (None, None, 0))
    _both_backends(rnn, (W, rng.normal(size=(3, 4)), rng.normal(size=(5, 4, 3))), (None, 1, 1))
    _both_backends(rnn, (np.stack([W] * 4, 2), np.zeros(3), rng.normal(size=(5, 3))), (2, None, None))


def test_lax_control_flow_batches():
    rng = np.random.default_rng(1)
    xs, w = rng.normal(size=(5, 3)), rng.normal(size=3)

    def with_cond(x, w):
        return lax.cond(x[0] > 0, lambda x, w: x * w, lambda x, w: x + w, x, w)

    def with_switch(i, x):
        return lax.switch(i, [np.sin, np.cos, lambda x: x * 2.0], x)

    def with_fori(x, w):
        return lax.fori_loop(0, 4, lambda i, c: c * w + i, x)

    def with_while(x, n):
        return lax.while_loop(lambda c: c[1] < n, lambda c: (c[0] * 1.5, c[1] + 1), (x, 0))

    def with_scan(w, xs):
        return lax.scan(lambda c, x: (c + x * w, c.sum()), np.zeros(3), xs)

    _both_backends(with_cond, (xs, w), (0, None))
    _both_backends(with_cond, (xs[0], np.stack([w] * 5)), (None, 0))
    _both_backends(with_switch, (np.array([0, 1, 2, 5, -1]), xs), (0, 0))
    _both_backends(with_switch, (1, xs), (None, 0))
    _both_backends(with_switch, (np.array([0, 1, 2, 5, -1]), xs[0]), (0, None))
    _both_backends(with_fori, (xs, w), (0, None))
    _both_backends(with_while, (xs, np.array([0, 1, 2, 3, 4])), (0, 0))
    _both_backends(with_while, (xs, 3), (0, None))
    _both_backends(with_while, (xs[0], np.array([0, 1, 2, 3, 4])), (None, 0))
    _both_backends(with_scan, (w, rng.normal(size=(5, 4, 3))), (None, 0))
    _both_backends(with_scan, (xs, rng.normal(size=(4, 3))), (0, None))


def test_derivatives_and_batching_of_control_flow_compose():
    """grad of a vmapped loop and vmap of a loop's grad both equal the loop over examples."""
    rng = np.random.default_rng(2)
    w, xs = rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(4, 6, 3))

    def loss(w, xs):
        return rnn(w, np.zeros(3), xs).sum() + piecewise(xs[0], w[0]).sum()
    per_example = np.stack([s2s.grad(loss)(w, x) for x in xs])
    np.testing.assert_allclose(s2s.vmap(s2s.grad(loss), in_axes=(None, 0))(w, xs), per_example, rtol=1e-10)
    batch_loss = s2s.grad(lambda w: s2s.vmap(loss, in_axes=(None, 0))(w, xs).sum())
    np.testing.assert_allclose(batch_loss(w), per_example.sum(0), rtol=1e-10)
    np.testing.assert_allclose(s2s.jit(batch_loss)(w), per_example.sum(0), rtol=1e-10)


def bounded_newton_sqrt(a):
    x = a
    for _ in range(30):
        if np.abs(x * x - a) < 1e-12:
            break
        x = x - (x * x - a) / (2 * x)
    return x


def test_derivatives_of_a_loop_with_a_per_example_stopping_point():
    """A bounded loop with `break` (reverse mode makes it a masked scan whose step is a
    cond on a batched flag): every example stops at its own step, and its derivative is
    the derivative of its own iterations. Examples past their end compute a step that is
    thrown away (it may divide by zero: NumPy's warning is silenced)."""
    a = np.array([1.0, 4.0, 9.0, 0.25])
    per_example = np.array([s2s.grad(bounded_newton_sqrt)(v) for v in a])
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose(s2s.vmap(s2s.grad(bounded_newton_sqrt))(a), per_example, rtol=1e-10)
        total = s2s.grad(lambda a: s2s.vmap(bounded_newton_sqrt)(a).sum())
        np.testing.assert_allclose(total(a), per_example, rtol=1e-10)
        np.testing.assert_allclose(s2s.jit(total)(a), per_example, rtol=1e-10)


def test_nested_vmaps_of_control_flow():
    """A vmap of a vmap: the inner batched loops and branches (masks, selects, moved
    axes) are batched again."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 20.0, (3, 4))
    got = s2s.vmap(s2s.vmap(newton_sqrt))(a)
    np.testing.assert_allclose(got[0], np.sqrt(a), rtol=1e-10)
    xs, w = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 3))
    want = np.stack([np.stack([piecewise(x, w[i]) for x in xs[i]]) for i in range(2)])
    nested = s2s.vmap(s2s.vmap(piecewise, in_axes=(0, None)))
    np.testing.assert_allclose(nested(xs, w), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(s2s.jit(nested)(xs, w)), want, rtol=1e-12)
    W = rng.normal(size=(3, 3)) * 0.5
    seqs = rng.normal(size=(2, 3, 5, 3))
    want = np.stack([np.stack([rnn(W, np.zeros(3), s) for s in batch]) for batch in seqs])
    np.testing.assert_allclose(s2s.vmap(s2s.vmap(rnn, in_axes=(None, None, 0)), in_axes=(None, None, 0))(
        W, np.zeros(3), seqs), want, rtol=1e-12)
