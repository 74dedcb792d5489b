"""Derivative rules of the reductions, cumulative reductions and sort, held to jax's.

Each test writes one function twice, with the NumPy surface (or `prim.bind` where NumPy
has no spelling: reversed scans, cummax/cummin, multi-operand sort) and with jax.numpy /
jax.lax, and `check_derivatives` compares s2s.jvp and s2s.vjp with jax's on
hypothesis-drawn shapes, axes and values. The values are drawn to hit the cases naive
rules get wrong: ties (max, min, sort) and zeros, single and repeated (prod, cumprod).
The last tests compare s2s.grad with jax.grad on whole functions (logsumexp, softmax
cross-entropy, top-k sums).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s import dtypes
from s2s.autodiff import vjp_parts
from s2s.staging import PRIMITIVES
from s2s.passes.jvp import jvp_rules
from s2s.passes.transpose import transpose_rules
from s2s.primitives import reductions as red
from tests.helpers import check_derivatives

SETTINGS = settings(max_examples=15, deadline=None)

# Values that make ties likely (max, min, sort), and zeros likely (prod, cumprod).
TIES = st.integers(-2, 2).map(float)
ZEROS = st.sampled_from([0.0, 0.0, 1.0, -1.5, 0.5, 2.0, 3.0])
# Distinct values: cummax/cummin ties are split by jax along its scan tree, not a rule.
# No subnormals: XLA on CPU (jax, the oracle) flushes them to zero, turning distinct
# values into ties that NumPy and s2s keep apart.
DISTINCT = st.floats(-10, 10, allow_nan=False, allow_subnormal=False, width=64)


@st.composite
def float_arrays(draw, elements=None, min_dims=1, max_dims=3, min_side=1, max_side=4,
                 unique=False):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                  max_side=max_side))
    if elements is None:
        seed = draw(st.integers(0, 2 ** 16))
        return np.random.default_rng(seed).standard_normal(shape)
    return draw(hnp.arrays(np.float64, shape, elements=elements, unique=unique))


@st.composite
def axis_args(draw, ndim: int):
    """NumPy's `axis=`: None, an int (maybe negative) or a tuple of distinct axes."""
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none" or ndim == 0:
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    return tuple(draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)))


@st.composite
def reduction_cases(draw, elements=None):
    x = draw(float_arrays(elements))
    return x, draw(axis_args(x.ndim)), draw(st.booleans())


@st.composite
def scan_cases(draw, elements=None, unique=False):
    x = draw(float_arrays(elements, unique=unique))
    return x, draw(st.integers(0, x.ndim - 1)), draw(st.booleans())


# ---------------------------------------------------------------------------------------
# Every primitive of the family has its rules


def test_every_reduction_has_a_jvp_rule_and_the_linear_ones_a_transpose():
    family = ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and",
              "reduce_or", "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin", "sort"]
    missing = [n for n in family if PRIMITIVES[n] not in jvp_rules]
    assert not missing, f"no jvp rule for {missing}"
    assert red.reduce_sum in transpose_rules and red.cumsum in transpose_rules


# ---------------------------------------------------------------------------------------
# sum, max, min, prod


@SETTINGS
@given(reduction_cases())
def test_sum(case):
    x, axis, keepdims = case

    def f(x):
        return np.sum(x, axis=axis, keepdims=keepdims)

    check_derivatives(f, lambda x: jnp.sum(x, axis=axis, keepdims=keepdims), x)


@SETTINGS
@given(reduction_cases(TIES))
def test_max_splits_ties_evenly(case):
    x, axis, keepdims = case

    def f(x):
        return np.max(x, axis=axis, keepdims=keepdims)

    check_derivatives(f, lambda x: jnp.max(x, axis=axis, keepdims=keepdims), x)


@SETTINGS
@given(reduction_cases(TIES))
def test_min_splits_ties_evenly(case):
    x, axis, keepdims = case

    def f(x):
        return x.min(axis=axis, keepdims=keepdims)

    check_derivatives(f, lambda x: jnp.min(x, axis=axis, keepdims=keepdims), x)


def test_max_of_all_equal_values_averages_every_tangent():
    x = np.full((2, 3), 1.5)

    def f(x):
        return np.max(x)

    _, t = s2s.jvp(f, (x,), (np.arange(6.0).reshape(2, 3),))
    assert t == pytest.approx(np.arange(6.0).mean())
    check_derivatives(f, jnp.max, x)


# A row holding NaN between rows with ties and distinct values.
ROWS_WITH_NAN = np.array([[1.0, 3.0, 3.0, -2.0], [1.0, np.nan, 2.0, 5.0], [0.5, -1.0, 4.0, 2.0]])
ROW_WEIGHTS = np.array([1.0, 2.0, 3.0])


def row_max(x):
    return np.max(x, axis=1)


def row_min(x):
    return x.min(axis=1)


def row_ptp(x):
    return np.ptp(x, axis=1)


def weighted(f):
    def total(x):
        return np.sum(f(x) * ROW_WEIGHTS)
    return total


def tangent_of(f):
    def tangent(x, t):
        return s2s.jvp(f, (x,), (t,))[1]
    return tangent


@pytest.mark.parametrize("f,jax_f", [(row_max, lambda x: jnp.max(x, axis=1)),
                                     (row_min, lambda x: jnp.min(x, axis=1)),
                                     (row_ptp, lambda x: jnp.ptp(x, axis=1))],
                         ids=["max", "min", "ptp"])
def test_max_min_ptp_of_a_nan_row_have_nan_derivatives_on_every_backend(f, jax_f):
    """NumPy's max of a row holding NaN is NaN, and so is its derivative: the same eagerly,
    on XLA and on the Python backend, forward and reverse (XLA gave a gradient of 0,
    rewriting the rule's inf * 0 into a select). The other rows keep jax's derivatives."""
    finite = np.where(np.isnan(ROWS_WITH_NAN), 0.0, ROWS_WITH_NAN)
    t = np.arange(12.0).reshape(3, 4) - 5.0
    want_grad = np.array(jax.grad(lambda x: jnp.sum(jax_f(x) * ROW_WEIGHTS))(finite))
    want_tangent = np.array(jax.jvp(jax_f, (finite,), (t,))[1])
    want_grad[1], want_tangent[1] = np.nan, np.nan
    grad, forward = s2s.grad(weighted(f)), tangent_of(f)
    runs = {"eager": (grad, forward), "xla": (s2s.jit(grad), s2s.jit(forward)),
            "python": (s2s.jit(grad, backend="python"), s2s.jit(forward, backend="python"))}
    for name, (grad_run, forward_run) in runs.items():
        np.testing.assert_allclose(np.asarray(grad_run(ROWS_WITH_NAN)), want_grad, rtol=1e-15, err_msg=name)
        np.testing.assert_allclose(np.asarray(forward_run(ROWS_WITH_NAN, t)), want_tangent, rtol=1e-15,
                                   err_msg=name)


@SETTINGS
@given(reduction_cases(ZEROS))
def test_prod_with_zeros(case):
    x, axis, keepdims = case

    def f(x):
        return np.prod(x, axis=axis, keepdims=keepdims)

    check_derivatives(f, lambda x: jnp.prod(x, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("x", [np.array([2.0, 0.0, 3.0, 4.0]),       # one zero
                               np.array([0.0, 5.0, 0.0, 4.0]),       # two zeros
                               np.array([[1.0, 0.0], [2.0, 3.0]]),
                               np.array([7.0])])
def test_prod_gradient_at_zeros(x):
    def f(x):
        return x.prod()

    np.testing.assert_allclose(s2s.grad(f)(x), jax.grad(jnp.prod)(x), rtol=1e-12)


@SETTINGS
@given(float_arrays(), st.data())
def test_prod_over_several_axes(x, data):
    axes = tuple(data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True, min_size=1)))

    def f(x):
        return np.prod(x, axis=axes)

    check_derivatives(f, lambda x: jnp.prod(x, axis=axes), x)


def test_prod_over_an_empty_axis():
    x = np.zeros((3, 0))

    def f(x):
        return np.prod(x, axis=1)

    check_derivatives(f, lambda x: jnp.prod(x, axis=1), x)


# ---------------------------------------------------------------------------------------
# all, any, argmax, argmin: no tangent of their own


@SETTINGS
@given(float_arrays(TIES), st.data())
def test_argmax_picks_where_the_tangent_comes_from(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))

    def f(x):
        i = np.argmax(x, axis=axis, keepdims=True)
        j = np.argmin(x, axis=axis, keepdims=True)
        return np.take_along_axis(x, i, axis) * np.take_along_axis(x, j, axis)

    def g(x):
        i = jnp.argmax(x, axis=axis, keepdims=True)
        j = jnp.argmin(x, axis=axis, keepdims=True)
        return jnp.take_along_axis(x, i, axis) * jnp.take_along_axis(x, j, axis)

    check_derivatives(f, g, x)


def test_argmax_and_all_have_float0_tangents():
    x = np.array([[1.0, -2.0], [3.0, 0.0]])

    def f(x):
        return np.argmax(x, axis=0), np.all(x > 0, axis=1), np.any(x < 0)

    outs, tangents = s2s.jvp(f, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(outs[0], [1, 1])
    for t, out in zip(tangents, outs):
        assert np.asarray(t).dtype == dtypes.float0 and np.shape(t) == np.shape(out)


@SETTINGS
@given(float_arrays(TIES))
def test_all_and_any_select_a_branch(x):
    def f(x):
        return np.where(np.all(x > -2, axis=0), x.sum(axis=0), 0.0) + np.any(x > 1) * x

    def g(x):
        return jnp.where(jnp.all(x > -2, axis=0), x.sum(axis=0), 0.0) + jnp.any(x > 1) * x

    check_derivatives(f, g, x)


# ---------------------------------------------------------------------------------------
# cumsum, cumprod, cummax, cummin


@SETTINGS
@given(scan_cases())
def test_cumsum(case):
    x, axis, reverse = case

    def f(x):
        return red.cumsum.bind(x, axis=axis, reverse=reverse)

    check_derivatives(f, lambda x: jax.lax.cumsum(x, axis=axis, reverse=reverse), x)


@SETTINGS
@given(float_arrays())
def test_cumsum_numpy_surface(x):
    def f(x):
        return np.cumsum(x, axis=0) + np.cumsum(x).reshape(x.shape)

    check_derivatives(f, lambda x: jnp.cumsum(x, axis=0) + jnp.cumsum(x).reshape(x.shape), x)


@SETTINGS
@given(scan_cases(ZEROS))
def test_cumprod_with_zeros(case):
    x, axis, reverse = case

    def f(x):
        return red.cumprod.bind(x, axis=axis, reverse=reverse)

    check_derivatives(f, lambda x: jax.lax.cumprod(x, axis=axis, reverse=reverse), x)


@pytest.mark.parametrize("x", [np.array([2.0, 0.0, 3.0, 4.0]),
                               np.array([2.0, 0.0, 3.0, 0.0, 5.0]),
                               np.array([0.0, 0.0, 1.0]),
                               np.array([[1.5, 0.0, 2.0], [0.0, 3.0, -1.0]])])
def test_cumprod_gradient_at_zeros(x):
    def f(x):
        return (np.cumprod(x, axis=0) * np.arange(1.0, x.shape[0] + 1).reshape(
            (-1,) + (1,) * (x.ndim - 1))).sum()

    def g(x):
        return (jnp.cumprod(x, axis=0) * jnp.arange(1.0, x.shape[0] + 1).reshape(
            (-1,) + (1,) * (x.ndim - 1))).sum()

    np.testing.assert_allclose(s2s.grad(f)(x), jax.grad(g)(x), rtol=1e-12)


@SETTINGS
@given(float_arrays(ZEROS))
def test_cumprod_numpy_surface(x):
    def f(x):
        return np.cumprod(x, axis=-1)

    check_derivatives(f, lambda x: jnp.cumprod(x, axis=-1), x)


@SETTINGS
@given(scan_cases(DISTINCT, unique=True), st.sampled_from(["cummax", "cummin"]))
def test_cummax_cummin(case, name):
    x, axis, reverse = case
    prim, lax_fn = getattr(red, name), getattr(jax.lax, name)

    def f(x):
        return prim.bind(x, axis=axis, reverse=reverse)

    check_derivatives(f, lambda x: lax_fn(x, axis=axis, reverse=reverse), x)


@pytest.mark.parametrize("reverse", [False, True])
def test_cummax_ties_take_the_first_element_the_scan_reached(reverse):
    x = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 5.0])

    def f(x):
        return red.cummax.bind(x, axis=0, reverse=reverse)

    _, t = s2s.jvp(f, (x,), (np.arange(10.0, 16.0),))
    expected = [10, 11, 11, 11, 11, 15] if not reverse else [15, 15, 15, 15, 15, 15]
    np.testing.assert_array_equal(t, expected)
    y = np.array([4.0, 1.0, 4.0, 0.0])
    _, t = s2s.jvp(f, (y,), (np.arange(4.0),))
    np.testing.assert_array_equal(t, [0, 0, 0, 0] if not reverse else [2, 2, 2, 3])


# ---------------------------------------------------------------------------------------
# sort


@SETTINGS
@given(float_arrays(TIES), st.data())
def test_sort_with_ties(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))

    def f(x):
        return np.sort(x, axis=axis)

    check_derivatives(f, lambda x: jnp.sort(x, axis=axis), x)


@SETTINGS
@given(float_arrays(TIES), st.data())
def test_sort_several_operands(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    num_keys = data.draw(st.integers(1, 2))
    y = np.random.default_rng(1).standard_normal(x.shape)
    z = (np.arange(x.size) % 3).reshape(x.shape)    # an integer operand: a Zero tangent

    def f(x, y):
        sorted_x, sorted_y, _ = red.sort.bind(x, y, z, dimension=axis, num_keys=num_keys)
        return sorted_x, sorted_y

    def g(x, y):
        sorted_x, sorted_y, _ = jax.lax.sort((x, y, z), dimension=axis, num_keys=num_keys)
        return sorted_x, sorted_y

    check_derivatives(f, g, x, y)


@SETTINGS
@given(float_arrays(TIES, max_dims=2))
def test_argsort_gathers(x):
    def f(x):
        return np.take_along_axis(x, np.argsort(x, axis=-1), -1) ** 2

    def g(x):
        return jnp.take_along_axis(x, jnp.argsort(x, axis=-1, stable=True), -1) ** 2

    check_derivatives(f, g, x)


# ---------------------------------------------------------------------------------------
# Whole functions: s2s.grad against jax.grad


def logsumexp(x):
    m = np.max(x, axis=-1, keepdims=True)
    return (m[..., 0] + np.log(np.sum(np.exp(x - m), axis=-1))).sum()


def jax_logsumexp(x):
    m = jnp.max(x, axis=-1, keepdims=True)
    return (m[..., 0] + jnp.log(jnp.sum(jnp.exp(x - m), axis=-1))).sum()


def cross_entropy(logits, labels):
    m = logits.max(axis=1, keepdims=True)
    shifted = logits - m
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -(labels * log_probs).sum() / logits.shape[0]


def jax_cross_entropy(logits, labels):
    m = logits.max(axis=1, keepdims=True)
    shifted = logits - m
    log_probs = shifted - jnp.log(jnp.exp(shifted).sum(axis=1, keepdims=True))
    return -(labels * log_probs).sum() / logits.shape[0]


def max_then_sum(x):
    return x.max(axis=0).sum()


def top3(x):
    return np.sort(x)[-3:].sum()


def prod_cumprod(x):
    return x.prod() + np.cumprod(x).sum() + np.min(x) * np.max(x)


GRAD_CASES = [
    (logsumexp, jax_logsumexp, np.array([[1.0, 2.0, 2.0], [-1.0, 0.5, 3.0]])),
    (max_then_sum, lambda x: x.max(axis=0).sum(), np.array([[1.0, 4.0], [1.0, 2.0], [0.0, 4.0]])),
    (top3, lambda x: jnp.sort(x)[-3:].sum(), np.array([3.0, -1.0, 5.0, 3.0, 0.0, 2.0])),
    (prod_cumprod, lambda x: x.prod() + jnp.cumprod(x).sum() + jnp.min(x) * jnp.max(x),
     np.array([2.0, 0.0, -1.0, 3.0, 0.5])),
]


@pytest.mark.parametrize("fn, jax_fn, x", GRAD_CASES, ids=[c[0].__name__ for c in GRAD_CASES])
def test_grad_matches_jax(fn, jax_fn, x):
    np.testing.assert_allclose(s2s.grad(fn)(x), jax.grad(jax_fn)(x), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(float_arrays(TIES, min_dims=2, max_dims=2, min_side=2))
def test_softmax_cross_entropy_grad(logits):
    labels = np.eye(logits.shape[1])[np.arange(logits.shape[0]) % logits.shape[1]]
    got = s2s.grad(cross_entropy)(logits, labels)
    np.testing.assert_allclose(got, jax.grad(jax_cross_entropy)(logits, labels),
                               rtol=1e-10, atol=1e-12)


def test_hessian_of_logsumexp():
    x = np.array([[0.5, -1.0, 2.0]])
    np.testing.assert_allclose(s2s.hessian(logsumexp)(x), jax.hessian(jax_logsumexp)(x),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn, x", [(max_then_sum, np.ones((3, 2))),
                                   (top3, np.arange(5.0)),
                                   (prod_cumprod, np.arange(4.0))])
def test_backward_pass_holds_no_forward_work(fn, x):
    """The masks, weights and permutations are residuals: the backward jaxpr only moves
    cotangents (no max, sort, prod or comparisons rerun there)."""
    closed = s2s.make_jaxpr(fn)(x)
    parts = vjp_parts(closed, [True], [True])
    names = {eqn.primitive.name for eqn in parts.backward.eqns}
    assert not names & {"reduce_max", "reduce_min", "reduce_prod", "cumprod", "sort", "eq",
                        "cummax", "cummin"}, names
