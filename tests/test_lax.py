"""s2s.lax: cond, switch, while_loop, fori_loop, scan and map, against jax.lax.

Each function below is written once; the jax oracle is the same source run with `np`
bound to jax.numpy and `lax` to jax.lax. Values are checked on every path s2s has (NumPy
eagerly, the emitted module, jit on XLA), and forward-mode derivatives against jax.jvp.
"""
import re
import types

import autograd
import autograd.numpy as anp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s
from s2s import lax
from s2s.emit.python import load_source
from s2s.passes.dce import dce
from s2s.passes.inline import inline_calls

rng = np.random.default_rng(0)


def rnn(W, h0, xs):
    def step(h, x):
        h = np.tanh(W @ h + x)
        return h, h.sum()
    return lax.scan(step, h0, xs)


def newton_sqrt(a):
    def keep_going(state):
        x, _ = state
        return np.abs(x * x - a) > 1e-12 * a

    def improve(state):
        x, steps = state
        return x - (x * x - a) / (2 * x), steps + 1
    return lax.while_loop(keep_going, improve, (a, 0))


def piecewise(x):
    return lax.cond(x.sum() > 0, lambda v: np.sin(v) * 2, lambda v: v ** 2, x)


def three_way(i, x):
    return lax.switch(i, [lambda v: v + 1.0, lambda v: v * v, lambda v: np.exp(-v)], x)


def horner(coefficients, x):
    def step(acc, c):
        return acc * x + c, None
    value, _ = lax.scan(step, np.zeros_like(x), coefficients)
    return value


def euler_decay(y0, rate):
    def step(i, y):
        return y - 0.01 * rate * y
    return lax.fori_loop(0, 100, step, y0)


def rk4_oscillator(state, omega):
    def f(s):
        return np.stack([s[1], -omega * omega * s[0]])

    def step(i, s):
        dt = 0.05
        k1 = f(s)
        k2 = f(s + dt / 2 * k1)
        k3 = f(s + dt / 2 * k2)
        k4 = f(s + dt * k3)
        return s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return lax.fori_loop(0, 40, step, state)


def fori_with_staged_bound(n, x):
    return lax.fori_loop(0, n, lambda i, acc: acc * 0.5 + i, x)


def nested_scans(xs):
    def outer(total, row):
        def inner(acc, v):
            return acc + np.sin(v) * acc, acc
        last, partial = lax.scan(inner, total, row)
        return last, partial.sum()
    return lax.scan(outer, 1.0, xs)


def loop_with_branch(xs):
    def step(carry, x):
        carry = lax.cond(x > 0, lambda c: c * x, lambda c: c - x, carry)
        return carry, carry
    return lax.scan(step, np.float64(1.0), xs)


def reversed_cumulative(xs):
    return lax.scan(lambda acc, x: (acc + x, acc * x), 0.0, xs, reverse=True)


def squares(xs):
    return lax.map(lambda v: (v * v).sum(), xs)


def counted_doubling(x):
    def step(state, _):
        value, count = state
        return (value * 2.0, count + 1), value
    return lax.scan(step, (x, 0), None, length=5)


CASES = {
    "rnn": (rnn, lambda: (rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3),
                          rng.standard_normal((100, 3)))),   # 100 steps
    "newton_sqrt": (newton_sqrt, lambda: (np.float64(2.5),)),
    "piecewise_positive": (piecewise, lambda: (np.abs(rng.standard_normal(4)),)),
    "piecewise_negative": (piecewise, lambda: (-np.abs(rng.standard_normal(4)),)),
    "switch_clamped_high": (three_way, lambda: (np.int32(7), rng.standard_normal(3))),
    "switch_clamped_low": (three_way, lambda: (np.int32(-3), rng.standard_normal(3))),
    "switch_middle": (three_way, lambda: (np.int32(1), rng.standard_normal(3))),
    "horner": (horner, lambda: (rng.standard_normal(5), rng.standard_normal(3))),
    "euler": (euler_decay, lambda: (rng.standard_normal(2), np.float64(0.7))),
    "rk4": (rk4_oscillator, lambda: (np.array([1.0, 0.0]), np.float64(1.3))),
    "fori_staged_bound": (fori_with_staged_bound, lambda: (np.int64(7), np.float64(3.0))),
    "nested": (nested_scans, lambda: (rng.uniform(-1, 1, (3, 4)),)),
    "loop_with_branch": (loop_with_branch, lambda: (rng.standard_normal(8),)),
    "reverse": (reversed_cumulative, lambda: (rng.standard_normal(5),)),
    "map": (squares, lambda: (rng.standard_normal((4, 3)),)),
    "int_carry_no_xs": (counted_doubling, lambda: (rng.standard_normal(2),)),
}


def as_jax(fn):
    """The same function with np = jax.numpy and lax = jax.lax (jax's own x64 mode is on)."""
    namespace = {**fn.__globals__, "np": jnp, "lax": jax.lax}
    return types.FunctionType(fn.__code__, namespace, fn.__name__)


def assert_trees_close(got, expected, rtol=1e-9, atol=1e-12):
    got_leaves, got_tree = s2s.tree_flatten(got)
    expected_leaves = jax.tree.leaves(expected)
    assert len(got_leaves) == len(expected_leaves), (got_tree, expected)
    for g, e in zip(got_leaves, expected_leaves):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_jax_on_every_path(name):
    fn, make_args = CASES[name]
    args = make_args()
    expected = as_jax(fn)(*args)
    assert_trees_close(fn(*args), expected)                                   # NumPy, eagerly
    assert_trees_close(s2s.jit(fn)(*args), expected)                          # XLA
    assert_trees_close(s2s.jit(fn, backend="python")(*args), expected)        # emitted module
    closed = s2s.make_jaxpr(fn)(*args)
    s2s.check_jaxpr(closed)
    staged = s2s.api.staged_or_error(fn, args, {})
    assert_trees_close(staged.out_tree.unflatten(s2s.eval_jaxpr(closed, *staged.flat_inputs(args, {}))),
                       expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_matches_jax(name):
    fn, make_args = CASES[name]
    args = make_args()
    tangents = tuple(rng.standard_normal(np.shape(a)) if np.asarray(a).dtype.kind == "f"
                     else np.zeros(np.shape(a), jax.dtypes.float0) for a in args)
    out, out_dot = s2s.jvp(fn, args, tangents)
    expected, expected_dot = jax.jvp(as_jax(fn), args, tangents)
    assert_trees_close(out, expected)
    float_dots = [(g, e) for g, e in zip(s2s.tree_leaves(out_dot), jax.tree.leaves(expected_dot))
                  if np.asarray(e).dtype != jax.dtypes.float0]
    for g, e in float_dots:
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-8, atol=1e-10)
    # The same jvp compiled by XLA.
    jitted = s2s.jit(lambda *a: s2s.jvp(fn, a, tangents))(*args)
    for g, (_, e) in zip([l for l, e in zip(s2s.tree_leaves(jitted[1]), jax.tree.leaves(expected_dot))
                          if np.asarray(e).dtype != jax.dtypes.float0], float_dots):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-8, atol=1e-10)


DIFFERENTIABLE = ["rnn", "piecewise_positive", "piecewise_negative", "switch_middle", "horner", "euler",
                  "rk4", "nested", "loop_with_branch", "reverse", "map", "int_carry_no_xs"]


def scalar_loss(fn):
    """The sum of every floating output: a scalar function of the same arguments."""
    def loss(*args):
        leaves = [l for l in s2s.tree_leaves(fn(*args)) if l.dtype.kind == "f"]
        return sum(l.sum() for l in leaves)
    return loss


def float_argnums(args) -> tuple:
    return tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_grad_matches_jax_on_numpy_and_xla(name):
    fn, make_args = CASES[name]
    args = make_args()
    argnums = float_argnums(args)
    expected = jax.grad(scalar_loss(as_jax(fn)), argnums=argnums)(*args)
    grad = s2s.grad(scalar_loss(fn), argnums=argnums)
    assert_trees_close(grad(*args), expected, rtol=1e-8, atol=1e-10)
    assert_trees_close(s2s.jit(grad)(*args), expected, rtol=1e-8, atol=1e-10)


def test_a_while_loop_differentiates_in_both_modes():
    """d sqrt(a) / da through the Newton iterations: reverse mode recomputes the iterates from
    slots (tests/primitives/loops/test_checkpoints.py), forward mode carries tangents."""
    grad = s2s.grad(lambda a: newton_sqrt(a)[0])
    for derivative in (grad, s2s.jit(grad), s2s.jacfwd(lambda a: newton_sqrt(a)[0])):
        np.testing.assert_allclose(derivative(np.float64(2.0)), 0.5 / np.sqrt(2.0), rtol=1e-12)


def test_grad_of_an_rnn_is_a_loop_each_way():
    W, h0, xs = rng.standard_normal((8, 8)) * 0.3, np.zeros(8), rng.standard_normal((100, 8))
    grad = s2s.grad(scalar_loss(rnn))
    source = s2s.emit_python(grad, W, h0, xs)
    assert "for i in range(100):" in source and "in reversed(range(100)):" in source
    assert source.count("np.tanh") == 1
    text = s2s.jit(grad).lower(W, h0, xs).as_text()
    assert text.count("stablehlo.while") == 2      # the forward loop and the backward loop
    expected = jax.grad(scalar_loss(as_jax(rnn)))(W, h0, xs)
    name = re.search(r"^def (\w+)\(", source, re.M).group(1)
    emitted = getattr(load_source(source, name), name)(W, h0, xs)   # loss(*args), called as the source is
    assert_trees_close(emitted, expected, rtol=1e-8, atol=1e-10)


def test_a_long_scan_stays_one_equation_a_loop_in_python_and_one_while_in_hlo():
    W, h0, xs = rng.standard_normal((8, 8)) * 0.3, np.zeros(8), rng.standard_normal((1000, 8))
    closed = s2s.make_jaxpr(rnn)(W, h0, xs)
    assert [e.primitive.name for e in closed.eqns] == ["scan"]
    source = s2s.emit_python(rnn, W, h0, xs)
    assert "for i in range(1000):" in source and source.count("np.tanh") == 1
    text = s2s.jit(rnn).lower(W, h0, xs).as_text()
    assert text.count("stablehlo.while") == 1 and text.count("stablehlo.tanh") == 1
    module = load_source(source, "rnn")
    assert_trees_close(module.rnn(W, h0, xs), as_jax(rnn)(W, h0, xs))


def test_emitted_control_flow_reads_like_python():
    source = s2s.emit_python(newton_sqrt, np.float64(2.0))
    assert re.search(r"x, steps = a, np\.int64\(0\)  # test_lax\.py \S+\n    while np\.abs\(x \* x - a\) > ", source)
    source = s2s.emit_python(piecewise, np.ones(3))
    assert re.search(r"if x\.sum\(\) > 0\.0:.*\n        r = np\.sin\(x\) \* 2\.0.*\n    else:\n        r = x \*\* 2",
                     source), source
    source = s2s.emit_python(three_way, np.int32(1), np.ones(3))
    assert "elif index == 1:" in source


def test_static_predicates_and_indices_just_call_the_branch():
    def f(x):
        return lax.cond(True, lambda v: v * 2, lambda v: v * 3, x) + lax.switch(2, [np.sin, np.cos, np.tan], x)
    closed = s2s.make_jaxpr(f)(np.ones(2))
    assert "cond" not in [e.primitive.name for e in closed.eqns]


def test_bad_bodies_are_clear_errors():
    def wrong_carry(x):
        return lax.scan(lambda c, v: (c.sum(), v), x, x)

    def branch_types(x):
        return lax.cond(x.sum() > 0, lambda v: v, lambda v: v.sum(), x)

    def not_a_pair(x):
        return lax.scan(lambda c, v: c + v, x[0], x)
    with pytest.raises(s2s.ShapeError, match="carry"):
        s2s.make_jaxpr(wrong_carry)(np.ones(3))
    with pytest.raises(s2s.ShapeError, match="branches return different types"):
        s2s.make_jaxpr(branch_types)(np.ones(3))
    with pytest.raises(s2s.StagingError, match=r"must return a pair \(carry, y\)"):
        s2s.make_jaxpr(not_a_pair)(np.ones(3))


# Plain-Python versions of the same computations (loops and ifs), differentiated by autograd.


def rnn_python(W, h0, xs):
    h, total = h0, 0.0
    for x in xs:
        h = anp.tanh(W @ h + x)
        total = total + h.sum()
    return h.sum() + total


def horner_python(coefficients, x):
    acc = anp.zeros_like(x)
    for c in coefficients:
        acc = acc * x + c
    return acc.sum()


def rk4_python(state, omega):
    def f(s):
        return anp.stack([s[1], -omega * omega * s[0]])
    s = state
    for _ in range(40):
        k1 = f(s)
        k2 = f(s + 0.025 * k1)
        k3 = f(s + 0.025 * k2)
        k4 = f(s + 0.05 * k3)
        s = s + 0.05 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return s.sum()


def loop_with_branch_python(xs):
    carry, total = 1.0, 0.0
    for x in xs:
        carry = carry * x if x > 0 else carry - x
        total = total + carry
    return carry + total


AUTOGRAD_PAIRS = {"rnn": rnn_python, "horner": horner_python, "rk4": rk4_python,
                  "loop_with_branch": loop_with_branch_python}


@pytest.mark.parametrize("name", sorted(AUTOGRAD_PAIRS))
def test_grad_matches_autograd_of_the_plain_python_loop(name):
    fn, make_args = CASES[name]
    args = make_args()
    argnums = float_argnums(args)
    expected = autograd.grad(AUTOGRAD_PAIRS[name], argnums)(*args)
    got = s2s.grad(scalar_loss(fn), argnums=argnums)(*args)
    assert_trees_close(got, expected, rtol=1e-8, atol=1e-10)


def rnn_unrolled(W, h0, xs, unroll, reverse):
    def step(h, x):
        h = np.tanh(W @ h + x)
        return h, h.sum()
    return lax.scan(step, h0, xs, unroll=unroll, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll, tanh_ops, loops", [(1, 1, 1), (3, 3 + 1, 1), (5, 5, 1), (10, 10, 0), (True, 10, 0)])
def test_unroll_repeats_the_body_and_changes_nothing_else(unroll, tanh_ops, loops, reverse):
    W, h0, xs = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3), rng.standard_normal((10, 3))
    args = (W, h0, xs, unroll, reverse)
    expected = as_jax(rnn_unrolled)(W, h0, xs, 1, reverse)
    text = s2s.jit(rnn_unrolled, static_argnums=(3, 4)).lower(*args).as_text()
    assert text.count("stablehlo.tanh") == tanh_ops and text.count("stablehlo.while") == loops
    source = s2s.emit_python(rnn_unrolled, *args, static_argnums=(3, 4))
    assert source.count("np.tanh") == tanh_ops and source.count("for i") == loops
    for backend in ("xla", "python"):
        assert_trees_close(s2s.jit(rnn_unrolled, static_argnums=(3, 4), backend=backend)(*args), expected)
    loss = lambda W, h0, xs: rnn_unrolled(W, h0, xs, unroll, reverse)[1].sum()  # noqa: E731
    expected_grad = jax.grad(lambda W, h0, xs: as_jax(rnn_unrolled)(W, h0, xs, 1, reverse)[1].sum())(W, h0, xs)
    assert_trees_close(s2s.jit(s2s.grad(loss))(W, h0, xs), expected_grad, rtol=1e-8, atol=1e-10)


def test_unroll_with_an_int_carry_starting_as_a_literal():
    """The counter `n` starts as the literal 0: the unrolled body takes it like any operand."""
    def counted(W, h, xs):
        def step(carry, x):
            h, n = carry
            return (np.tanh(W @ h + x), n + 1), None
        (h, n), _ = lax.scan(step, (h, 0), xs, unroll=2)
        return h.sum() * n

    def counted_jax(W, h, xs):
        def step(carry, x):
            h, n = carry
            return (jax.numpy.tanh(W @ h + x), n + 1), None
        (h, n), _ = jax.lax.scan(step, (h, 0), xs)
        return h.sum() * n
    W, h, xs = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3), rng.standard_normal((7, 3))
    expected = jax.grad(counted_jax, argnums=(0, 1))(W, h, xs)
    for grad in (s2s.grad(counted, argnums=(0, 1)), s2s.jit(s2s.grad(counted, argnums=(0, 1)))):
        assert_trees_close(grad(W, h, xs), expected, rtol=1e-10, atol=1e-12)


# --- implicit differentiation ---------------------------------------------------------

def sqrt_by_newton(a):
    def f(x):
        return x * x - a

    def newton(f, x0):
        x = x0
        while np.abs(f(x)) > 1e-12:
            x = x - f(x) / (2 * x)
        return x
    return lax.custom_root(f, a, newton, lambda g, y: y / g(1.0))


def cg_solve(A, b):
    def matvec(x):
        return A @ x

    def conjugate_gradients(matvec, b):
        x = np.zeros_like(b)
        r = b - matvec(x)
        p = r
        rs = r @ r
        for _ in range(b.shape[0]):
            Ap = matvec(p)
            alpha = rs / (p @ Ap)
            x = x + alpha * p
            r = r - alpha * Ap
            rs_new = r @ r
            p = r + rs_new / rs * p
            rs = rs_new
        return x
    return lax.custom_linear_solve(matvec, b, conjugate_gradients, symmetric=True)


def spd_system():
    M = rng.standard_normal((4, 4))
    return M @ M.T + 4 * np.eye(4), rng.standard_normal(4)


def test_custom_root_differentiates_a_while_loop_solver_implicitly():
    a = np.float64(2.5)
    np.testing.assert_allclose(sqrt_by_newton(a), np.sqrt(a), rtol=1e-12)
    expected = jax.grad(jnp.sqrt)(a)
    for grad in (s2s.grad(sqrt_by_newton), s2s.jit(s2s.grad(sqrt_by_newton))):
        np.testing.assert_allclose(grad(a), expected, rtol=1e-12)
    np.testing.assert_allclose(s2s.jvp(sqrt_by_newton, (a,), (np.float64(2.0),))[1], 2 * expected, rtol=1e-12)
    # Reverse mode never runs the solver backwards: its while loop is only in the forward pass.
    closed = s2s.make_jaxpr(s2s.grad(sqrt_by_newton))(a)
    assert [e.primitive.name for e in inline_calls(closed).eqns].count("while_loop") == 1


def test_custom_linear_solve_with_conjugate_gradients_matches_a_direct_solve():
    A, b = spd_system()
    np.testing.assert_allclose(s2s.jit(cg_solve)(A, b), np.linalg.solve(A, b), rtol=1e-10)

    def loss(A, b):
        return (cg_solve(A, b) ** 2).sum()
    expected = jax.grad(lambda A, b: (jnp.linalg.solve(A, b) ** 2).sum(), argnums=(0, 1))(A, b)
    for grad in (s2s.grad(loss, argnums=(0, 1)), s2s.jit(s2s.grad(loss, argnums=(0, 1)))):
        assert_trees_close(grad(A, b), expected, rtol=1e-8, atol=1e-10)
    tangents = (rng.standard_normal((4, 4)), rng.standard_normal(4))
    expected_dot = jax.jvp(jnp.linalg.solve, (A, b), tangents)[1]
    np.testing.assert_allclose(s2s.jvp(cg_solve, (A, b), tangents)[1], expected_dot, rtol=1e-8, atol=1e-10)


def test_reverse_mode_of_a_nonsymmetric_solve_needs_transpose_solve():
    def solve_only(A, b):
        return lax.custom_linear_solve(lambda x: A @ x, b, lambda mv, rhs: np.linalg.solve(A, rhs))
    A, b = spd_system()
    np.testing.assert_allclose(s2s.jit(solve_only)(A, b), np.linalg.solve(A, b), rtol=1e-10)
    with pytest.raises(s2s.StagingError, match="transpose_solve"):
        s2s.grad(lambda A, b: solve_only(A, b).sum(), argnums=1)(A, b)


def test_dead_outputs_of_loops_and_branches_are_not_computed():
    W, h0, xs = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3), rng.standard_normal((5, 3))
    # grad of the final carry only: the forward scan stops computing the per-step sums.
    source = s2s.emit_python(s2s.grad(lambda W, h0, xs: rnn(W, h0, xs)[0].sum()), W, h0, xs)
    assert ".sum()" not in source.split("reversed(range(5))")[0]

    def two_outputs(x):
        return lax.cond(x.sum() > 0, lambda v: (np.sin(v), np.exp(v)), lambda v: (v, -v), x)
    closed = s2s.make_jaxpr(lambda x: two_outputs(x)[0])(np.ones(2))
    (branch_eqn,) = [e for e in dce(closed).eqns if e.primitive.name == "cond"]
    assert len(branch_eqn.outvars) == 1
    assert "exp" not in str(branch_eqn.params["branches"][1])


def bounded_newton(a):
    def keep_going(x):
        return np.abs(x * x - a) > 1e-12 * a

    def improve(x):
        return x - (x * x - a) / (2 * x)
    return lax.while_loop(keep_going, improve, a, max_iters=60)


def test_a_while_loop_with_max_iters_differentiates_in_reverse_mode():
    a = np.float64(3.0)
    np.testing.assert_allclose(bounded_newton(a), np.sqrt(a), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(bounded_newton)(a), np.sqrt(a), rtol=1e-12)
    expected = jax.grad(jnp.sqrt)(a)
    for grad in (s2s.grad(bounded_newton), s2s.jit(s2s.grad(bounded_newton))):
        np.testing.assert_allclose(grad(a), expected, rtol=1e-9)
    # The residuals live in fixed-size buffers: the backward pass is a scan of 60 steps.
    source = s2s.emit_python(s2s.grad(bounded_newton), a)
    assert "reversed(range(60))" in source


@s2s.custom_jvp
def stable_softplus(x):
    return np.log1p(np.exp(x))


@stable_softplus.defjvp
def stable_softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return stable_softplus(x), t / (1 + np.exp(-x))


def softplus_sum(xs):
    return lax.scan(lambda total, x: (total + stable_softplus(x), None), 0.0, xs)[0]


def test_a_custom_jvp_function_inside_a_loop_is_written_out_by_both_backends():
    xs = np.linspace(-2.0, 2.0, 5)
    expected = np.log1p(np.exp(xs)).sum()
    for backend in ("xla", "python"):
        np.testing.assert_allclose(s2s.jit(softplus_sum, backend=backend)(xs), expected, rtol=1e-12)
        np.testing.assert_allclose(s2s.jit(s2s.grad(softplus_sum), backend=backend)(xs),
                                   1 / (1 + np.exp(-xs)), rtol=1e-12)


@pytest.mark.parametrize("bound", [-1, 2.5, True])
def test_max_iters_must_be_a_non_negative_int(bound):
    with pytest.raises(s2s.StagingError, match="max_iters must be a non-negative int"):
        s2s.make_jaxpr(lambda x: lax.while_loop(lambda v: v < 1, lambda v: v + 1, x, max_iters=bound))(0.0)


def test_loops_of_zero_steps_lower_and_differentiate():
    x = np.float64(2.0)

    def never(x):
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * x, x, max_iters=0)

    def empty_scan(x):
        carry, ys = lax.scan(lambda c, _: (c * x, c), x, None, length=0)
        return carry + ys.sum()
    for fn in (never, empty_scan):
        np.testing.assert_allclose(s2s.jit(fn)(x), 2.0)
        np.testing.assert_allclose(s2s.jit(s2s.grad(fn))(x), 1.0)
