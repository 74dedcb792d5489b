"""What reverse mode of a loop saves for its backward pass (issue 19): per step exactly the
values that depend on the carry or on the scanned inputs, stacked; a value that is the same
at every step (`X.T` in a gradient-descent loop, the keys and values of attention over a
fixed context) computed once before the loop and saved once. Asserted on the gradient's
jaxpr (names and shapes of what the forward scan hands the backward scan), with gradients
checked against autograd and jax in float64."""
import autograd
import autograd.numpy as anp
import jax
import jax.numpy as jnp
import numpy as np

import s2s
from s2s.core import ClosedJaxpr, eval_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.primitives.loops.reverse import saved_by_loops
from s2s.primitives.loops import scan
from tests.helpers import with_numpy


def logistic_training(w, X, y):
    for step in range(50):
        p = 1 / (1 + np.exp(-(X @ w)))
        w = w - 0.1 * (X.T @ (p - y)) / X.shape[0]
    return (w * w).sum()


def training_until_converged(w, X, y):
    for step in range(50):
        p = 1 / (1 + np.exp(-(X @ w)))
        g = X.T @ (p - y) / X.shape[0]
        if (g * g).sum() < 1e-8:
            break
        w = w - 0.1 * g
    return (w * w).sum()


def rnn(W, h, xs):
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return (h * h).sum()


def attention_loop(Wq, X, Wk, Wv, h):
    for step in range(8):
        q = h @ Wq
        k = X @ Wk
        v = X @ Wv
        s = k @ q / np.sqrt(q.shape[0])
        a = np.exp(s - s.max())
        a = a / a.sum()
        h = np.tanh(h + a @ v)
    return (h * h).sum()


def rnn_transposed(W, h, xs):
    for t in range(xs.shape[0]):
        drift = np.tanh(W @ np.ones(W.shape[0]))
        h = np.tanh(h @ W.T + xs[t] + drift)
    return h


def rnn_in_training_loop(W, h, xs):
    for epoch in range(3):
        h = rnn_transposed(W, h, xs) * 0.5
    return (h * h).sum()


def saved(closed: ClosedJaxpr):
    """(per step, once): (name, shape of one step) of each stacked value the forward scan
    hands the backward scan, and (name, shape) of each value the backward scan reads whole."""
    loops = [e for e in closed.jaxpr.eqns if e.primitive is scan]
    assert [e.params["reverse"] for e in loops] == [False, True]
    per_step, once = saved_by_loops(closed)
    # A row is named after the value the forward body computes for it.
    row = dict(zip(loops[0].outvars, loops[0].params["jaxpr"].jaxpr.outvars))
    return ([(row[v].hint, v.aval.shape[1:]) for v in per_step],
            [(getattr(v, "hint", None), v.aval.shape) for v in once])


def all_shapes(closed: ClosedJaxpr) -> set:
    """The shape of every variable of `closed`, loop bodies included."""
    shapes = set()
    for eqn in closed.jaxpr.eqns:
        shapes.update(v.aval.shape for v in eqn.outvars)
        for param in eqn.params.values():
            for body in param if isinstance(param, tuple) else (param,):
                if isinstance(body, ClosedJaxpr):
                    shapes |= all_shapes(body)
    return shapes


def producer(closed: ClosedJaxpr, var):
    return next(e for e in closed.jaxpr.eqns if var in e.outvars)


def primitives_inside_loops(closed: ClosedJaxpr) -> list[str]:
    """The primitive names of every equation in a loop body, at any depth."""
    names = []
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive is scan:
            body = eqn.params["jaxpr"]
            names += [e.primitive.name for e in body.jaxpr.eqns] + primitives_inside_loops(body)
    return names


def assert_grads_equal(got, expected):
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def classification_data(seed: int, examples: int, features: int):
    """(w, X, y): small initial weights, standard normal features, 0/1 labels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((examples, features))
    y = (rng.random(examples) > 0.5).astype(np.float64)
    return rng.standard_normal(features) * 0.1, X, y


def test_a_training_loop_saves_X_once_and_no_transpose_of_it():
    w, X, y = classification_data(0, 200, 50)
    closed = s2s.make_jaxpr(s2s.grad(logistic_training))(w, X, y)
    per_step, once = saved(closed)
    # Carry-dependent, one row of 200 per step each: exp(-X @ w), 1 + that, and p.
    assert sorted(per_step, key=str) == sorted([(None, (200,)), ("p", (200,)), (None, (200,))], key=str)
    # X.T is not saved at all: a transpose (a view in NumPy, folded into the dot by XLA)
    # is recomputed in the backward step from X, which is saved once.
    assert once == [("X", (200, 50))]
    assert (50, 50, 200) not in all_shapes(closed)   # X.T stacked per step, before
    for argnums in [0, (0, 1)]:
        assert_grads_equal(s2s.grad(logistic_training, argnums=argnums)(w, X, y),
                           jax.grad(with_numpy(logistic_training, jnp), argnums=argnums)(w, X, y))


def test_a_loop_that_can_break_saves_its_data_once_not_per_step():
    """The `break` makes the body a cond inside a bounded loop. The cond's residuals that
    are its operands (X) are handed to the backward cond as operands, and X.T is recomputed
    there: the loop keeps X once, and per step only what depends on w."""
    w, X, y = classification_data(4, 20, 5)
    closed = s2s.make_jaxpr(s2s.grad(training_until_converged))(w, X, y)
    per_step, once = saved(closed)
    assert ("X", (20, 5)) in once
    assert not any(shape in ((20, 5), (5, 20)) for _, shape in per_step)
    assert not any(s[-2:] in ((20, 5), (5, 20)) and len(s) > 2 for s in all_shapes(closed))

    def with_jax(w, X, y):   # the same loop, a step past convergence leaving w as it is
        done = False
        for step in range(50):
            p = 1 / (1 + jnp.exp(-(X @ w)))
            g = X.T @ (p - y) / X.shape[0]
            done = done | ((g * g).sum() < 1e-8)
            w = jnp.where(done, w, w - 0.1 * g)
        return (w * w).sum()
    for argnums in [0, (0, 1)]:
        assert_grads_equal(s2s.grad(training_until_converged, argnums=argnums)(w, X, y),
                           jax.grad(with_jax, argnums=argnums)(w, X, y))


def test_an_rnn_of_1000_steps_saves_per_step_only_what_depends_on_the_hidden_state():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((8, 8)) / np.sqrt(8)
    h = rng.standard_normal(8)
    xs = rng.standard_normal((1000, 8))
    closed = s2s.make_jaxpr(s2s.grad(rnn, argnums=(0, 1, 2)))(W, h, xs)
    per_step, once = saved(closed)
    # The state going in (for dW) and the derivative of the tanh coming out. `xs[t]` at
    # the loop's counter makes xs a scanned input: its cotangent is written a row per step
    # (no index saved per step, no full-size update of zeros per step).
    assert sorted(per_step, key=str) == sorted([("h", (8,)), (None, (8,))], key=str)
    assert once == [("W", (8, 8))]
    assert not any(len(s) == 3 for s in all_shapes(closed))
    assert "dynamic_update_slice" not in str(closed)
    assert_grads_equal(s2s.grad(rnn, argnums=(0, 1, 2))(W, h, xs),
                       autograd.grad(with_numpy(rnn, anp), argnum=(0, 1, 2))(W, h, xs))


def test_attention_in_a_loop_computes_keys_and_values_once():
    rng = np.random.default_rng(2)
    Wq, Wk, Wv = (rng.standard_normal((5, 5)) for _ in range(3))
    X = rng.standard_normal((7, 5))
    h = rng.standard_normal(5)
    argnums = (0, 1, 2, 3, 4)
    closed = s2s.make_jaxpr(s2s.grad(attention_loop, argnums=argnums))(Wq, X, Wk, Wv, h)
    per_step, once = saved(closed)
    # All depend on h: h and q (for the weights' gradients), the softmax's pieces, tanh'.
    assert sorted(per_step, key=str) == sorted(
        [("h", (5,)), ("q", (5,)), (None, (7,)), (None, ()), ("a", (7,)), (None, ()), ("a", (7,)),
         (None, (5,))], key=str)
    assert sorted(once, key=str) == sorted([("Wq", (5, 5)), ("k", (7, 5)), ("v", (7, 5))], key=str)
    (backward,) = [e for e in closed.jaxpr.eqns if e.primitive is scan and e.params["reverse"]]
    for value in backward.invars[:backward.params["num_consts"]]:
        if value.hint in ("k", "v"):   # X @ Wk, X @ Wv: before the loop, once
            assert producer(closed, value).primitive.name == "dot_general"
    assert not any(len(s) == 3 for s in all_shapes(closed))   # no (8, 7, 5): k or v per step
    assert_grads_equal(s2s.grad(attention_loop, argnums=argnums)(Wq, X, Wk, Wv, h),
                       jax.grad(with_numpy(attention_loop, jnp), argnums=argnums)(Wq, X, Wk, Wv, h))


def test_an_rnn_in_a_training_loop_moves_invariant_work_out_of_both_loops():
    """The inner loop moves its invariant equations into the outer body and the outer loop
    moves them on out (`W @ c`, with c fixed); the transpose `W.T`, cheaper to redo than to
    keep, stays in the loops and is not saved: W is, once."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((6, 6)) / np.sqrt(6)
    h = rng.standard_normal(6)
    xs = rng.standard_normal((20, 6))
    argnums = (0, 1, 2)
    closed = s2s.make_jaxpr(s2s.grad(rnn_in_training_loop, argnums=argnums))(W, h, xs)
    top = [e.primitive.name for e in closed.jaxpr.eqns]
    before_loops = top[:top.index("scan")]
    assert "dot_general" in before_loops and "tanh" in before_loops   # drift = tanh(W @ c), once
    per_step, once = saved(closed)
    assert once == [("W", (6, 6))]
    # Per outer step, the inner loop's rows (unnamed buffers): h and tanh'. xs is scanned
    # (read at the inner loop's counter): no index of it is saved.
    assert sorted(shape for _, shape in per_step) == [(20, 6), (20, 6)]
    assert not any(s[-2:] == (6, 6) and len(s) > 2 for s in all_shapes(closed))   # nothing of W per step
    assert_grads_equal(s2s.grad(rnn_in_training_loop, argnums=argnums)(W, h, xs),
                       autograd.grad(with_numpy(rnn_in_training_loop, anp), argnum=argnums)(W, h, xs))


def test_partial_eval_saves_what_a_recomputed_equation_reads():
    """`recompute` copies a known equation to the unknown side: the residual is then its
    input (x), not its result (x.T), and the unknown side computes the transpose itself."""

    def f(x, t):
        return x.T * t
    closed = s2s.make_jaxpr(f)(np.ones((2, 3)), np.ones((3, 2)))
    plain = partial_eval_jaxpr(closed, [False, True])
    assert [v.aval.shape for v in plain.unknown.jaxpr.invars[:plain.num_residuals]] == [(3, 2)]
    assert "transpose" not in [e.primitive.name for e in plain.unknown.jaxpr.eqns]
    again = partial_eval_jaxpr(closed, [False, True], recompute=lambda e: e.primitive.name == "transpose")
    assert [v.aval.shape for v in again.unknown.jaxpr.invars[:again.num_residuals]] == [(2, 3)]
    assert [e.primitive.name for e in again.unknown.jaxpr.eqns] == ["transpose", "mul"]
    x, t = np.arange(6.0).reshape(2, 3), np.arange(6.0, 12.0).reshape(3, 2)
    residuals = eval_jaxpr(again.known, x)   # f's one output is unknown: only residuals
    np.testing.assert_array_equal(eval_jaxpr(again.unknown, *residuals, t)[0], x.T * t)
