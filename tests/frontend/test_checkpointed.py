"""Checkpointed loops (issue 15): `lax.scan(..., checkpoints=k)` and
`for t in s2s.checkpointed(range(n), k):` compute what the plain loop computes, in value
and in gradient on both backends (against jax's plain scan), while reverse mode keeps at
most k carries instead of every step's residuals (the schedule itself is tested in
tests/primitives/loops/test_checkpoints.py)."""
import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import s2s
from s2s import lax
from s2s.frontend.checkpointed import schedule
from s2s.primitives.loops import scan
from tests.frontend.test_errors import expect_error
from tests.helpers import with_numpy

jax.config.update("jax_enable_x64", True)


def rnn(W, h, xs, checkpoints, reverse):
    def step(h, x):
        h = np.tanh(W @ h + x)
        return h, h.sum()
    h, ys = lax.scan(step, h, xs, reverse=reverse, checkpoints=checkpoints)
    return (h * h).sum() + (ys * np.arange(ys.shape[0])).sum()


def rnn_jax(W, h, xs, reverse):
    def step(h, x):
        h = jax.numpy.tanh(W @ h + x)
        return h, h.sum()
    h, ys = jax.lax.scan(step, h, xs, reverse=reverse)
    return (h * h).sum() + (ys * jax.numpy.arange(ys.shape[0])).sum()


@settings(max_examples=12, deadline=None)
@given(steps=st.integers(1, 30), checkpoints=st.one_of(st.integers(1, 12), st.just("sqrt")),
       reverse=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_checkpointed_scan_gradients_equal_the_plain_scans(steps, checkpoints, reverse, seed):
    rng = np.random.default_rng(seed)
    W, h, xs = rng.normal(size=(3, 3)) * 0.5, rng.normal(size=3), rng.normal(size=(steps, 3))
    expected = jax.grad(rnn_jax, argnums=(0, 1, 2))(W, h, xs, reverse)
    grad = s2s.grad(rnn, argnums=(0, 1, 2))
    for got in (grad(W, h, xs, checkpoints, reverse),
                s2s.jit(grad, static_argnums=(3, 4))(W, h, xs, checkpoints, reverse)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rnn(W, h, xs, checkpoints, reverse), rnn_jax(W, h, xs, reverse), rtol=1e-12)


def scans_of(closed):
    return [e for e in closed.jaxpr.eqns if e.primitive is scan]


def test_reverse_mode_keeps_k_carries_and_nothing_per_step():
    """200 steps, k = 20: the forward pass stacks nothing (the loss is linear in ys, so not
    even them); the backward loop carries the k slots (one row more: the carry an advance
    reaches)."""
    rng = np.random.default_rng(0)
    W, h, xs = rng.normal(size=(4, 4)) * 0.5, rng.normal(size=4), rng.normal(size=(200, 4))
    closed = s2s.make_jaxpr(s2s.grad(rnn, argnums=(0, 1, 2)), static_argnums=(3, 4))(W, h, xs, 20, False)
    (forward,) = [e for e in scans_of(closed) if not e.params["reverse"]]
    assert forward.params["length"] == 200 and len(forward.outvars) == forward.params["num_carry"]
    (backward,) = [e for e in scans_of(closed) if e.params["reverse"]]
    assert (21, 4) in [v.aval.shape for v in backward.outvars[:backward.params["num_carry"]]]


def checkpointed_rnn(W, h, xs):
    for t in s2s.checkpointed(range(xs.shape[0]), 4):
        h = np.tanh(W @ h + xs[t])
    return (h * h).sum()


def plain_rnn(W, h, xs):
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return (h * h).sum()


def test_a_checkpointed_python_loop_is_a_checkpointed_scan():
    rng = np.random.default_rng(1)
    W, h, xs = rng.normal(size=(4, 4)) * 0.5, rng.normal(size=4), rng.normal(size=(16, 4))
    expected = jax.grad(with_numpy(plain_rnn, jax.numpy), argnums=(0, 1, 2))(W, h, xs)
    for got in (s2s.grad(checkpointed_rnn, argnums=(0, 1, 2))(W, h, xs),
                s2s.jit(s2s.grad(checkpointed_rnn, argnums=(0, 1, 2)))(W, h, xs)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-10)
    source = s2s.emit_python(s2s.grad(checkpointed_rnn, argnums=(0, 1, 2)), W, h, xs)
    assert "h_slots" in source, source
    assert checkpointed_rnn(W, h, xs) == pytest.approx(plain_rnn(W, h, xs))   # run as Python: just the range


@pytest.mark.parametrize("length, checkpoints, expected", [
    (100, "sqrt", ("segments", 10)), (10000, "sqrt", ("segments", 100)), (97, "sqrt", ("segments", 10)),
    (1, "sqrt", None), (10000, 32, ("slots", 32)), (12, 12, None), (12, 40, None), (12, 1, ("slots", 1)),
])
def test_schedule_slots_for_a_count_segments_for_sqrt(length, checkpoints, expected):
    assert schedule(length, checkpoints) == expected


def test_sqrt_is_the_one_level_schedule():
    """200 steps with "sqrt": 10 segments (the largest divisor of 200 from 15 // 2 to 15 =
    ceil(sqrt(200))); the forward pass stacks one carry per segment and nothing per step;
    each segment is a checkpoint of a scan, recomputed in the backward pass."""
    rng = np.random.default_rng(0)
    W, h, xs = rng.normal(size=(4, 4)) * 0.5, rng.normal(size=4), rng.normal(size=(200, 4))
    closed = s2s.make_jaxpr(s2s.grad(rnn, argnums=(0, 1, 2)), static_argnums=(3, 4))(W, h, xs, "sqrt", False)
    (forward,) = [e for e in scans_of(closed) if not e.params["reverse"]]
    assert forward.params["length"] == 10
    assert [v.aval.shape for v in forward.outvars[forward.params["num_carry"]:]] == [(10, 4)]
    (backward,) = [e for e in scans_of(closed) if e.params["reverse"]]
    assert any(e.primitive.name == "remat" for e in backward.params["jaxpr"].jaxpr.eqns)


def test_a_checkpointed_loop_of_no_steps_runs_nothing():
    def f(h):
        for _ in s2s.checkpointed(range(5, 5), 3):
            h = np.tanh(h)
        return h.sum()
    assert s2s.grad(f)(np.ones(2)).tolist() == [1.0, 1.0]
    assert s2s.jit(f)(np.ones(2)) == 2.0


def breaking(W, h, xs):
    for t in s2s.checkpointed(range(xs.shape[0]), 4):  # ERROR
        h = np.tanh(W @ h + xs[t])
        if h.sum() > 10:
            break
    return h.sum()


def bad_schedule(W, h, xs):
    for t in s2s.checkpointed(range(xs.shape[0]), "cube"):  # ERROR
        h = np.tanh(W @ h + xs[t])
    return h.sum()


def zero_checkpoints(W, h, xs):
    h, _ = lax.scan(lambda h, x: (np.tanh(W @ h + x), None), h, xs, checkpoints=0)  # ERROR
    return h.sum()


@pytest.mark.parametrize("fn, contains", [
    (breaking, "cannot `break`"), (bad_schedule, "not a schedule"), (zero_checkpoints, "positive int"),
])
def test_bad_checkpointed_loops_are_clear_errors(fn, contains):
    expect_error(fn, s2s.StagingError, np.eye(3), np.ones(3), np.ones((8, 3)), contains=contains)
