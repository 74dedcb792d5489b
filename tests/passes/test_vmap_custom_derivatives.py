"""Batching of the custom-derivative calls (custom_jvp_call, custom_vjp_call,
custom_vjp_lin) and of implicit differentiation (custom_root, custom_linear_solve): the
batched equation computes what the loop over examples computes, and still differentiates
by the user's rules, so `grad(vmap(f))` and `vmap(grad(f))` both equal the loop."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s import lax
from s2s.core import eval_jaxpr
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.transpose import transpose_jaxpr
from s2s.passes.vmap import Axis, batch_jaxpr
from tests.passes.batching import check_batching, example_of
from tests.passes.handbuilt import arr, build, names

SETTINGS = settings(max_examples=12, deadline=None)
SIZE = 3


@s2s.custom_jvp
def softplus(x, w):
    return np.log1p(np.exp(x * w))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x, w), (tx, tw) = primals, tangents
    slope = 1 / (1 + np.exp(-x * w))
    return softplus(x, w), slope * (tx * w + x * tw)


@s2s.custom_vjp
def cube(x, w):
    return x ** 3 * w


def _cube_fwd(x, w):
    return cube(x, w), (x, w)


def _cube_bwd(residuals, g):
    x, w = residuals
    return 3 * x ** 2 * w * g, x ** 3 * g


cube.defvjp(_cube_fwd, _cube_bwd)


def root_sqrt(a, x0):
    """√a by a Newton while loop (each example stopping on its own), differentiated
    implicitly."""
    def f(x):
        return x * x - a

    def newton(f, x):
        return lax.while_loop(lambda x: np.abs(f(x)).sum() > 1e-12, lambda x: x - f(x) / (2 * x), x)
    return lax.custom_root(f, x0, newton, lambda g, y: y / g(np.ones_like(y)))


def diagonal_solve(d, b):
    """x = b / d: a diagonal system, solved by its solver and differentiated implicitly."""
    return lax.custom_linear_solve(lambda x: d * x, b, lambda matvec, b: b / matvec(np.ones_like(b)),
                                   symmetric=True)


FUNCTIONS = {"custom_jvp": softplus, "custom_vjp": cube, "custom_root": root_sqrt,
             "custom_linear_solve": diagonal_solve}


def _operands(name, rng, dims):
    """(first, second) operands of FUNCTIONS[name] of shape (2,), batched at `dims`."""
    def value(low, high, dim):
        shape = (2,) if dim is None else ((SIZE, 2) if dim == 0 else (2, SIZE))
        return rng.uniform(low, high, shape)
    if name == "custom_root":
        a = value(1.0, 9.0, dims[0])
        return [a, value(1.0, 3.0, dims[1])]
    return [value(-1.0, 1.0, dims[0]), value(0.5, 2.0, dims[1])]


@SETTINGS
@given(name=st.sampled_from(sorted(FUNCTIONS)),
       dims=st.sampled_from([(0, None), (None, 0), (0, 0), (1, 0), (None, 1), (1, 1)]), seed=st.integers(0, 99))
def test_each_custom_call_batches_as_the_loop(name, dims, seed):
    operands = _operands(name, np.random.default_rng(seed), dims)
    batched = check_batching(lambda a, b: FUNCTIONS[name](a, b), operands, list(dims), rtol=1e-8)
    assert name.replace("custom_jvp", "custom_jvp_call").replace("custom_vjp", "custom_vjp_call") in names(batched)


def test_unbatched_operands_of_a_custom_call_stay_unbatched():
    closed = build(lambda x, w: cube(x, w), arr(2), arr(2))
    batched, dims = batch_jaxpr(closed, [0, None], Axis(5))
    assert dims == [0]
    assert batched.jaxpr.invars[1].aval.shape == (2,)
    (call,) = batched.jaxpr.eqns
    assert call.invars[1] is batched.jaxpr.invars[1]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
def test_grad_of_vmap_and_vmap_of_grad_equal_the_loop(name, in_axes):
    fn = FUNCTIONS[name]
    rng = np.random.default_rng(len(name))
    operands = _operands(name, rng, in_axes)

    def loss(a, b):
        return fn(a, b).sum()
    examples = [[example_of(x, d, i) for x, d in zip(operands, in_axes)] for i in range(SIZE)]
    per_example = [s2s.grad(loss, argnums=(0, 1))(*ex) for ex in examples]
    for argnum, dim in enumerate(in_axes):
        column = [g[argnum] for g in per_example]
        # vmap(grad): one gradient per example.
        got = s2s.vmap(s2s.grad(loss, argnums=argnum), in_axes=in_axes)(*operands)
        np.testing.assert_allclose(got, np.stack(column), rtol=1e-8)
        # grad(vmap): the gradient of the batch's total, summed over examples for a shared argument.
        total_want = np.stack(column, axis=dim) if dim is not None else np.sum(column, axis=0)

        def total(*args):
            return s2s.vmap(loss, in_axes=in_axes)(*args).sum()
        for run in (s2s.grad(total, argnums=argnum), s2s.jit(s2s.grad(total, argnums=argnum))):
            np.testing.assert_allclose(np.asarray(run(*operands)), total_want, rtol=1e-8)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vmapped_custom_calls_run_on_xla(name):
    operands = _operands(name, np.random.default_rng(7), (0, None))
    mapped = s2s.vmap(FUNCTIONS[name], in_axes=(0, None))
    want = np.stack([FUNCTIONS[name](x, operands[1]) for x in operands[0]])
    np.testing.assert_allclose(mapped(*operands), want, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(s2s.jit(mapped)(*operands)), want, rtol=1e-8)


@pytest.mark.parametrize("dims", [(0, None), (None, 1), (1, 0)])
def test_a_batched_custom_vjp_lin_transposes_by_the_backward_rule_per_example(dims):
    """The linear half of a custom_vjp function (its tangents through custom_vjp_lin),
    batched and then transposed: each example's cotangent by the user's bwd, summed over
    the batch for a tangent shared by every example."""
    closed = build(lambda x, w: cube(x, w), arr(2), arr(2))
    jvp_closed, _ = jvp_jaxpr(closed, [True, True])
    split = partial_eval_jaxpr(jvp_closed, [False, False, True, True])
    linear = split.unknown
    assert "custom_vjp_lin" in names(linear)
    rng = np.random.default_rng(3)
    x, w = rng.uniform(0.5, 1.5, (SIZE, 2)), rng.uniform(0.5, 1.5, 2)
    residuals = [np.stack(rows) for rows in zip(*[eval_jaxpr(split.known, xi, w)[1:] for xi in x])]
    n_res = split.num_residuals
    res_dims = [0] * n_res
    batched, out_dims = batch_jaxpr(linear, res_dims + list(dims), Axis(SIZE), [0])
    transposed = transpose_jaxpr(batched, [False] * n_res + [True, True])
    cts = rng.normal(size=(SIZE, 2))
    got = eval_jaxpr(transposed, *residuals, cts)
    per_example = [eval_jaxpr(transpose_jaxpr(linear, [False] * n_res + [True, True]),
                              *[r[i] for r in residuals], cts[i]) for i in range(SIZE)]
    for k, dim in enumerate(dims):
        column = [p[k] for p in per_example]
        want = np.sum(column, axis=0) if dim is None else np.stack(column, axis=dim)
        np.testing.assert_allclose(got[k], want, rtol=1e-10)


@s2s.custom_jvp
def halved_slope(x):
    return x


@halved_slope.defjvp
def _halved_slope_jvp(primals, tangents):
    return primals[0], tangents[0] * 0.5


@s2s.custom_vjp
def doubled_slope(x):
    return x


doubled_slope.defvjp(lambda x: (x, ()), lambda residuals, g: (2.0 * g,))


@pytest.mark.parametrize("fn, slope", [(halved_slope, 0.5), (doubled_slope, 2.0)])
def test_a_batched_custom_call_differentiates_by_the_users_rule_not_its_body(fn, slope):
    xs = np.arange(6.0).reshape(3, 2)
    total = s2s.grad(lambda xs: s2s.vmap(fn)(xs).sum())
    np.testing.assert_allclose(total(xs), np.full_like(xs, slope))
    np.testing.assert_allclose(s2s.vmap(s2s.grad(lambda x: fn(x).sum()))(xs), np.full_like(xs, slope))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_nested_vmaps_of_a_custom_call_still_differentiate_by_its_rules(name):
    """vmap(vmap(f)) wraps the user's rules twice; the gradient of its total is each
    example's gradient, for a shared second argument summed over both batches."""
    fn = FUNCTIONS[name]
    rng = np.random.default_rng(11)
    first = _operands(name, rng, (0, None))[0]
    batches = np.stack([first, first[::-1] * 1.1])         # (2, SIZE, 2)
    shared = _operands(name, rng, (None, None))[1]
    nested = s2s.vmap(s2s.vmap(fn, in_axes=(0, None)), in_axes=(0, None))
    want = np.stack([np.stack([fn(x, shared) for x in batch]) for batch in batches])
    np.testing.assert_allclose(nested(batches, shared), want, rtol=1e-8)
    grads = [[s2s.grad(lambda a, b: fn(a, b).sum(), argnums=(0, 1))(x, shared) for x in batch] for batch in batches]
    total = s2s.grad(lambda a, b: nested(a, b).sum(), argnums=(0, 1))
    got_first, got_shared = total(batches, shared)
    np.testing.assert_allclose(got_first, np.array([[g[0] for g in row] for row in grads]), rtol=1e-8)
    np.testing.assert_allclose(got_shared, np.sum([[g[1] for g in row] for row in grads], axis=(0, 1)), rtol=1e-8)


@s2s.custom_vjp
def scaled(x):
    return x * 2.0


scaled.defvjp(lambda x: (scaled(x), (x, 3.0, np.ones(2))), lambda residuals, g: (g * residuals[1] * residuals[2],))


def test_residuals_that_are_constants_batch_as_shared_values():
    xs = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(s2s.grad(lambda xs: s2s.vmap(scaled)(xs).sum())(xs), np.full((3, 2), 3.0))


def test_a_linear_solve_without_a_transposed_solver_batches_and_differentiates_forward():
    def solve(d, b):
        return lax.custom_linear_solve(lambda x: d * x, b, lambda matvec, b: b / matvec(np.ones_like(b)))
    rng = np.random.default_rng(5)
    d, bs = rng.uniform(1.0, 2.0, 2), rng.normal(size=(SIZE, 2))
    np.testing.assert_allclose(s2s.vmap(solve, in_axes=(None, 0))(d, bs), bs / d)
    tangent = s2s.vmap(lambda b: s2s.jvp(lambda d: solve(d, b), (d,), (np.ones(2),))[1])(bs)
    np.testing.assert_allclose(tangent, -bs / d ** 2)
