"""Reverse mode of checkpointed scans (`primitives/loops/checkpoints.py`): the forward pass
saves nothing per step, the backward pass keeps at most k carries and advances each step
at most r times (r the least with C(k + r, r) >= n), and the gradients are jax's for
carries of every kind, scanned ys, reversed scans, nesting, vmap and forward-over-reverse."""
import math
import re

import autograd
import jax
import numpy as np
import pytest

import s2s
from s2s import lax
from s2s.core import eval_jaxpr
from s2s.primitives import elementwise
from s2s.primitives.loops import scan, while_loop, while_reverse
from tests.frontend.test_control_flow import newton_sqrt
from tests.helpers import with_numpy

jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def _rnn_loss(numpy, scan_fn):
    """A tanh RNN with a pytree carry: the state, a running total that starts at known zeros
    (its tangent is zero until the loop makes it nonzero), and an int step counter."""
    def loss(W, h, xs, checkpoints=None):
        def step(carry, x):
            h, total, i = carry
            h = numpy.tanh(W @ h + x)
            return (h, total + h * i, i + 1), h * 2.0
        kwargs = {} if checkpoints is None else {"checkpoints": checkpoints}
        (h, total, _), ys = scan_fn(step, (h, numpy.zeros(h.shape), 0), xs, **kwargs)
        return (h * h).sum() + total.sum() + (ys ** 2).sum()
    return loss


rnn_loss, jax_rnn_loss = _rnn_loss(np, lax.scan), _rnn_loss(jnp, jax.lax.scan)


def rnn_args(steps, seed=0, hidden=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(hidden, hidden)) * 0.5, rng.normal(size=hidden), rng.normal(size=(steps, hidden))


@pytest.mark.parametrize("steps, checkpoints", [(17, 1), (17, 2), (17, 5), (40, "sqrt"), (64, 8)])
def test_gradients_equal_jax_on_both_backends(steps, checkpoints):
    args = rnn_args(steps)
    expected = jax.grad(jax_rnn_loss, argnums=(0, 1, 2))(*args)
    grad = s2s.grad(rnn_loss, argnums=(0, 1, 2))
    for got in (grad(*args, checkpoints), s2s.jit(grad, static_argnums=(3,))(*args, checkpoints)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def _counting_tanh_calls(monkeypatch):
    calls = []
    impl = elementwise.tanh.impl
    monkeypatch.setattr(elementwise.tanh, "impl", lambda x: calls.append(1) or impl(x))
    return calls


@pytest.mark.parametrize("steps, checkpoints", [(200, 4), (100, 10), (30, 1), (500, 32)])
def test_each_step_is_advanced_at_most_r_times(monkeypatch, steps, checkpoints):
    """The step runs n times forward, n times to recompute its residuals, and the schedule's
    advances: at most r per step, and n(n-1)/2 exactly with one slot (the initial carry)."""
    W, h, xs = rnn_args(steps)
    closed = s2s.make_jaxpr(s2s.grad(rnn_loss, argnums=(0, 1, 2)), static_argnums=(3,))(W, h, xs, checkpoints)
    calls = _counting_tanh_calls(monkeypatch)
    eval_jaxpr(closed, W, h, xs)
    advances = len(calls) - 2 * steps
    r = next(r for r in range(steps) if math.comb(checkpoints + r, r) >= steps)
    assert steps - 1 <= advances <= r * steps
    if checkpoints == 1:
        assert advances == steps * (steps - 1) // 2


def _all_avals(jaxpr):
    for eqn in jaxpr.eqns:
        yield from (v.aval for v in eqn.outvars)
        for param in eqn.params.values():
            bodies = param if isinstance(param, tuple) else (param,)
            for body in bodies:
                if hasattr(body, "jaxpr"):
                    yield from _all_avals(body.jaxpr)


def test_nothing_grows_with_the_steps_but_the_inputs_and_their_cotangents():
    """600 steps, k = 6: no value of the gradient's program, inside loops or out, has 600
    rows but xs and its cotangent; the carries are kept in a (k + 1)-row buffer."""
    W, h, xs = rnn_args(600, hidden=5)
    closed = s2s.make_jaxpr(s2s.grad(rnn_loss, argnums=(0, 1, 2)), static_argnums=(3,))(W, h, xs, 6)
    per_step = [a for a in _all_avals(closed.jaxpr) if a.shape[:1] == (600,)]
    assert all(a.shape == (600, 5) for a in per_step), per_step
    forward = [e for e in closed.jaxpr.eqns if e.primitive is scan and not e.params["reverse"]]
    assert all(len(e.outvars) == e.params["num_carry"] + 1 for e in forward)   # the carries and the ys only
    (backward,) = [e for e in closed.jaxpr.eqns if e.primitive is scan and e.params["reverse"]]
    carried = [v.aval.shape for v in backward.outvars[:backward.params["num_carry"]]]
    assert (7, 5) in carried and (7,) in carried, carried


def test_a_reversed_scan_without_xs():
    def loss(w, h):
        def step(h, _):
            return h + 0.1 * np.sin(w * h), h
        h, ys = lax.scan(step, h, None, length=23, reverse=True, checkpoints=3)
        return h.sum() + (ys * np.arange(23)[:, None]).sum()

    def jax_loss(w, h):
        def step(h, _):
            return h + 0.1 * jnp.sin(w * h), h
        h, ys = jax.lax.scan(step, h, None, length=23, reverse=True)
        return h.sum() + (ys * jnp.arange(23)[:, None]).sum()
    w, h = 0.9, np.linspace(0.1, 1, 4)
    expected = jax.grad(jax_loss, argnums=(0, 1))(w, h)
    for got in (s2s.grad(loss, argnums=(0, 1))(w, h), s2s.jit(s2s.grad(loss, argnums=(0, 1)))(w, h)):
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-10)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-10)


def test_a_checkpointed_scan_inside_a_checkpointed_scan():
    def loss(W, h, xss):
        def outer(h, xs):
            def inner(h, x):
                return np.tanh(W @ h + x), None
            h, _ = lax.scan(inner, h, xs, checkpoints=2)
            return h, h.sum()
        h, ys = lax.scan(outer, h, xss, checkpoints=3)
        return (h ** 2).sum() + (ys ** 2).sum()

    def jax_loss(W, h, xss):
        def outer(h, xs):
            h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(W @ h + x), None), h, xs)
            return h, h.sum()
        h, ys = jax.lax.scan(outer, h, xss)
        return (h ** 2).sum() + (ys ** 2).sum()
    rng = np.random.default_rng(3)
    W, h, xss = rng.normal(size=(3, 3)) * 0.5, rng.normal(size=3), rng.normal(size=(7, 5, 3))
    expected = jax.grad(jax_loss, argnums=(0, 1, 2))(W, h, xss)
    for got in (s2s.grad(loss, argnums=(0, 1, 2))(W, h, xss), s2s.jit(s2s.grad(loss, argnums=(0, 1, 2)))(W, h, xss)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_vmap_of_grad_and_forward_over_reverse():
    W, h, xs = rnn_args(19, seed=4)
    Ws = np.stack([W, 0.5 * W])
    expected = jax.vmap(jax.grad(jax_rnn_loss), in_axes=(0, None, None))(Ws, h, xs)
    got = s2s.vmap(s2s.grad(rnn_loss), in_axes=(0, None, None, None))(Ws, h, xs, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    hessian = s2s.hessian(rnn_loss, argnums=1)(W, h, xs, 4)
    np.testing.assert_allclose(hessian, jax.hessian(jax_rnn_loss, argnums=1)(W, h, xs), rtol=1e-9, atol=1e-12)


def test_reverse_over_reverse():
    """The backward pass's loops are while loops, themselves differentiated in reverse mode
    on slots."""
    W, h, xs = rnn_args(9)
    expected = jax.grad(lambda h: jax.grad(jax_rnn_loss, argnums=1)(W, h, xs).sum())(h)
    for grad in (s2s.grad(lambda h: s2s.grad(rnn_loss, argnums=1)(W, h, xs, 3).sum()),):
        np.testing.assert_allclose(grad(h), expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s2s.jit(grad)(h), expected, rtol=1e-9, atol=1e-12)


def test_the_backward_loops_are_while_loops_on_the_slots():
    """What the emitted gradient shows: a backward loop over the steps, a `while` that
    advances from the top slot, and the step's residuals recomputed from the carry."""
    W, h, xs = rnn_args(12)
    source = s2s.emit_python(s2s.grad(rnn_loss, argnums=(0, 1, 2)), W, h, xs, 3, static_argnums=(3,))
    assert "_slots" in source and "slot_steps" in source and "while step < t:" in source, source
    closed = s2s.make_jaxpr(s2s.grad(rnn_loss), static_argnums=(3,))(W, h, xs, 3)
    (backward,) = [e for e in closed.jaxpr.eqns if e.primitive is scan and e.params["reverse"]]
    assert any(e.primitive is while_loop for e in backward.params["jaxpr"].jaxpr.eqns)


# ---------------------------------------------------------------------------------------
# while loops with no bound: the steps are counted by running the loop again, and the
# backward loop keeps s2s.config's while_loop_checkpoints carries (32).


newton_sqrt_autograd = with_numpy(newton_sqrt, autograd.numpy)


@pytest.mark.parametrize("a", [2.0, 9.0, 1e4, 0.03])
def test_a_newton_solve_differentiates_in_reverse_mode_as_autograd_does(a):
    expected = autograd.grad(newton_sqrt_autograd)(a)
    np.testing.assert_allclose(expected, 0.5 / np.sqrt(a), rtol=1e-9)
    for grad in (s2s.grad(newton_sqrt), s2s.jit(s2s.grad(newton_sqrt))):
        np.testing.assert_allclose(grad(a), expected, rtol=1e-12)


def test_a_batch_of_newton_solves_stops_each_at_its_own_step():
    a = np.array([2.0, 9.0, 1e4, 0.03])
    expected = [autograd.grad(newton_sqrt_autograd)(v) for v in a]
    np.testing.assert_allclose(s2s.vmap(s2s.grad(newton_sqrt))(a), expected, rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.vmap(s2s.grad(newton_sqrt)))(a), expected, rtol=1e-12)


def rnn_while(W, h, n):
    """A loop whose trip count is an argument (40 steps: more than the 32 slots), a pytree carry."""
    i, total = 0, np.zeros(h.shape)
    while i < n:
        h = np.tanh(W @ h)
        total = total + h * i
        i = i + 1
    return (h * h).sum() + total.sum()


def jax_rnn_fori(W, h, n):
    def step(i, carry):
        h, total = carry
        h = jnp.tanh(W @ h)
        return h, total + h * i
    h, total = jax.lax.fori_loop(0, n, step, (h, jnp.zeros(h.shape)))
    return (h * h).sum() + total.sum()


@pytest.mark.parametrize("steps", [0, 1, 40, 300])
def test_a_while_loop_longer_than_its_slots_differentiates_as_jax(steps):
    W, h, _ = rnn_args(1, seed=5)
    expected = jax.grad(jax_rnn_fori, argnums=(0, 1))(W, h, steps)
    for grad in (s2s.grad(rnn_while, argnums=(0, 1)), s2s.jit(s2s.grad(rnn_while, argnums=(0, 1)))):
        for g, e in zip(grad(W, h, np.int64(steps)), expected):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_a_while_loop_keeps_its_slots_and_advances_each_step_at_most_r_times(monkeypatch):
    """XLA's program for the backward pass (`while_reverse`'s schedule), run here on NumPy:
    300 steps on 32 slots, r = 2 (C(34, 2) = 561 >= 300). Besides the advances, the step
    runs once forward and once to recompute its residuals; the loop that counts the steps
    computes only what the condition reads (the counter). The tape gives the same gradient."""
    W, h, _ = rnn_args(1, seed=5)
    closed = s2s.make_jaxpr(s2s.grad(rnn_while, argnums=(0, 1)))(W, h, np.int64(300))
    assert not [a for a in _all_avals(closed.jaxpr) if a.shape[:1] == (300,)]
    assert (33, 3) in [a.shape for a in _all_avals(closed.jaxpr)]
    with_tape = eval_jaxpr(closed, W, h, np.int64(300))
    monkeypatch.setattr(while_reverse, "impl", lambda *args, schedule, **params: eval_jaxpr(schedule, *args))
    calls = _counting_tanh_calls(monkeypatch)
    on_slots = eval_jaxpr(closed, W, h, np.int64(300))
    advances = len(calls) - 2 * 300
    assert 299 <= advances <= 2 * 300
    for a, b in zip(with_tape, on_slots):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_fewer_slots_for_a_big_carry(monkeypatch):
    """`s2s.config`'s while_loop_checkpoints sets the slots (here 4: five rows of the carry);
    the gradient is the same."""
    W, h, _ = rnn_args(1, seed=6)
    expected = jax.grad(jax_rnn_fori, argnums=(0, 1))(W, h, 50)
    monkeypatch.setattr(s2s.config.values, "while_loop_checkpoints", 4)
    monkeypatch.setattr(s2s.config, "_key", None)
    closed = s2s.make_jaxpr(s2s.grad(rnn_while, argnums=(0, 1)))(W, h, np.int64(50))
    shapes = [a.shape for a in _all_avals(closed.jaxpr)]
    assert (5, 3) in shapes and (33, 3) not in shapes
    for g, e in zip(s2s.jit(s2s.grad(rnn_while, argnums=(0, 1)))(W, h, np.int64(50)), expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="positive int"):
        s2s.config.update("while_loop_checkpoints", 0)


def scaled_rnn_while(W, h, n):
    i = 0
    while i < n:
        h = np.tanh((W * 0.9) @ h)
        i = i + 1
    return h.sum()


def test_the_tape_holds_only_what_changes_per_step():
    """`W * 0.9` reads no carry: it is computed once, before the loop, not taped per step."""
    W, h, _ = rnn_args(1, seed=7)
    source = s2s.emit_python(s2s.grad(scaled_rnn_while), W, h, np.int64(5))
    (appended,) = re.findall(r"tape\.append\((.*)\)", source)
    assert "mul_W" not in appended and "mul_W = W * 0.9" in source, source
    expected = jax.grad(lambda W, h: jax.lax.fori_loop(0, 5, lambda i, h: jnp.tanh((W * 0.9) @ h), h).sum())(W, h)
    np.testing.assert_allclose(s2s.grad(scaled_rnn_while)(W, h, np.int64(5)), expected, rtol=1e-12)


def test_emitted_python_keeps_a_tape():
    source = s2s.emit_python(s2s.grad(newton_sqrt), 2.0)
    assert "tape.append((x, " in source and "in reversed(tape):" in source and "del tape" in source, source
    assert "slots" not in source, source


def test_hessian_of_a_while_loop_is_forward_over_reverse():
    expected = jax.hessian(lambda h: jax_rnn_fori(np.eye(3) * 0.9, h, 12))(np.ones(3) * 0.3)
    got = s2s.hessian(rnn_while, argnums=1)(np.eye(3) * 0.9, np.ones(3) * 0.3, np.int64(12))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
