"""Derivative rules of the elementwise primitives, held to jax's.

Each test writes one function twice, with the NumPy surface (or `prim.bind` where NumPy
has no spelling: rsqrt, polygamma, add_any; `snp.erf` ... for scipy.special's functions)
and with jax.numpy / jax.scipy.special / jax.lax, and `check_derivatives` compares s2s.jvp
and s2s.vjp with jax's on hypothesis-drawn shapes, dtypes (float64, and float32 with a
looser tolerance) and values in each function's domain, away from the points where it is
not differentiable. Binary (and ternary) operands have different shapes that broadcast,
so the transposes must sum cotangents back to each operand's shape; Python-scalar operands
(`x * 2.0`, `2.0 ** x`) are literals with no tangent.

The non-differentiable points get deterministic tests of JAX's conventions: max/min ties
split the tangent evenly, abs has slope 1 at 0. Then the piecewise-constant and boolean
primitives (floor, comparisons, logic, stop_gradient ...) give exact zeros, the Hessians
of a few compositions match jax.hessian, and powers are differentiable at 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s.numpy_api import math as snp
from s2s.passes.jvp import jvp_rules
from s2s.passes.transpose import transpose_rules
from s2s.primitives import elementwise as ew
from s2s.staging import Primitive
from tests import helpers

SETTINGS = settings(max_examples=10, deadline=None)
# Fewer for the tests parametrized over many functions: compiling jax's side for each new
# shape and dtype is most of this file's time.
FAMILY_SETTINGS = settings(max_examples=5, deadline=None)
FLOATS = [np.float64, np.float32]


def check_derivatives(s2s_fn, jax_fn, *args, **tolerances):
    """`tests.helpers.check_derivatives` with jax's side jitted: jax then compiles one
    program per new shape and dtype instead of one per op it runs eagerly."""
    helpers.check_derivatives(s2s_fn, jax.jit(jax_fn), *args, **tolerances)


def _runs(derived):
    """`derived` run eagerly (emitted Python), by s2s.jit on XLA and with the Python backend."""
    return {"eager": derived, "xla": s2s.jit(derived), "python": s2s.jit(derived, backend="python")}


def tol(dtype) -> dict:
    if np.dtype(dtype) == np.float32:
        return dict(rtol=2e-4, atol=2e-5)
    return dict(rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------------------
# Values in a domain. A domain is `(rng, shape) -> float64 values`.


def span(lo, hi):
    """Uniform in [lo, hi]."""
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def away_from_zero(lo, hi):
    """Magnitudes uniform in [lo, hi], either sign."""
    return lambda rng, shape: rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def values(domain, shape, dtype, seed):
    return np.asarray(domain(np.random.default_rng(seed), shape)).astype(dtype)


@st.composite
def arrays(draw, domain, dtype=None, max_dims=2, max_side=2):
    """One array of a drawn shape (0-d included) and float dtype."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, max_side=max_side))
    dtype = draw(st.sampled_from(FLOATS)) if dtype is None else dtype
    return values(domain, shape, dtype, draw(st.integers(0, 2 ** 16)))


@st.composite
def broadcasting(draw, *domains):
    """One array per domain, of one float dtype, with shapes that broadcast together."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=len(domains), min_dims=0,
                                                    max_dims=3, max_side=2))
    dtype = draw(st.sampled_from(FLOATS))
    seed = draw(st.integers(0, 2 ** 16))
    return tuple(values(d, s, dtype, seed + i)
                 for i, (d, s) in enumerate(zip(domains, shapes.input_shapes)))


def primitives_in(fn, *args) -> set[str]:
    return {eqn.primitive.name for eqn in s2s.make_jaxpr(fn)(*args).jaxpr.eqns}


# ---------------------------------------------------------------------------------------
# Every primitive of the family has its rules, and a test below


ZERO_DERIVATIVE = {"floor", "ceil", "round", "sign", "eq", "ne", "lt", "le", "gt", "ge",
                   "and", "or", "xor", "not", "is_finite", "stop_gradient"}
LINEAR = {"add", "add_any", "sub", "mul", "div", "neg", "convert_element_type", "select"}


def test_every_elementwise_primitive_has_a_jvp_rule_and_the_linear_ones_a_transpose():
    declared = {p for p in vars(ew).values() if isinstance(p, Primitive)}
    assert not {p.name for p in declared if p not in jvp_rules}
    assert not {name for name in LINEAR if getattr(ew, name) not in transpose_rules}


def test_every_elementwise_primitive_is_tested_here():
    declared = {p.name for p in vars(ew).values() if isinstance(p, Primitive)}
    tested = (set(UNARY) | set(BINARY) | ZERO_DERIVATIVE
              | {"polygamma", "integer_pow", "select", "clamp", "convert_element_type"})
    # iota has no operands: there is nothing to differentiate.
    assert declared - {"iota"} == tested, (declared - tested, tested - declared)


# ---------------------------------------------------------------------------------------
# Unary functions


# name -> (the NumPy-surface function, jax's, domain)
UNARY = {
    "exp": (np.exp, jnp.exp, span(-5, 5)),
    "log": (np.log, jnp.log, span(0.1, 10)),
    "log1p": (np.log1p, jnp.log1p, span(-0.9, 10)),
    "expm1": (np.expm1, jnp.expm1, span(-5, 5)),
    "sin": (np.sin, jnp.sin, span(-5, 5)),
    "cos": (np.cos, jnp.cos, span(-5, 5)),
    "tan": (np.tan, jnp.tan, span(-1.3, 1.3)),
    "asin": (np.arcsin, jnp.arcsin, span(-0.95, 0.95)),
    "acos": (np.arccos, jnp.arccos, span(-0.95, 0.95)),
    "atan": (np.arctan, jnp.arctan, span(-10, 10)),
    "sinh": (np.sinh, jnp.sinh, span(-4, 4)),
    "cosh": (np.cosh, jnp.cosh, span(-4, 4)),
    "tanh": (np.tanh, jnp.tanh, span(-4, 4)),
    "asinh": (np.arcsinh, jnp.arcsinh, span(-10, 10)),
    "acosh": (np.arccosh, jnp.arccosh, span(1.1, 10)),
    "atanh": (np.arctanh, jnp.arctanh, span(-0.95, 0.95)),
    "sqrt": (np.sqrt, jnp.sqrt, span(0.1, 10)),
    "rsqrt": (ew.rsqrt.bind, jax.lax.rsqrt, span(0.1, 10)),
    "cbrt": (np.cbrt, jnp.cbrt, away_from_zero(0.1, 10)),
    "logistic": (snp.logistic, jax.nn.sigmoid, span(-6, 6)),
    "erf": (snp.erf, jsp.erf, span(-3, 3)),
    "erfc": (ew.erfc.bind, jsp.erfc, span(-3, 3)),
    "lgamma": (snp.lgamma, jsp.gammaln, span(0.2, 8)),
    "digamma": (snp.digamma, jsp.digamma, span(0.2, 8)),
    "abs": (np.abs, jnp.abs, away_from_zero(0.1, 5)),
    "neg": (np.negative, jnp.negative, span(-5, 5)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@FAMILY_SETTINGS
@given(data=st.data())
def test_unary(name, data):
    numpy_fn, jax_fn, domain = UNARY[name]
    x = data.draw(arrays(domain), label="x")

    def f(x):
        return numpy_fn(x)

    assert name in primitives_in(f, x)
    check_derivatives(f, jax_fn, x, **tol(x.dtype))


@SETTINGS
@given(arrays(span(0.3, 5)), st.integers(1, 3))
def test_polygamma(x, n):
    def f(x):
        return ew.polygamma.bind(x, n=n)

    check_derivatives(f, lambda x: jsp.polygamma(n, x), x, **tol(x.dtype))


@SETTINGS
@given(arrays(away_from_zero(0.3, 3)), st.integers(-3, 5))
def test_integer_pow(x, n):
    def f(x):
        return x ** n

    assert n in (0, 1) or "integer_pow" in primitives_in(f, x)
    check_derivatives(f, lambda x: x ** n, x, **tol(x.dtype))


@SETTINGS
@given(arrays(span(-3, 3)))
def test_square_and_operator_neg(x):
    def f(x):
        return -np.square(x) + np.power(x, 3)

    check_derivatives(f, lambda x: -jnp.square(x) + jnp.power(x, 3), x, **tol(x.dtype))


# ---------------------------------------------------------------------------------------
# Binary functions, on operands of different shapes that broadcast


def add(x, y):
    return x + y


def sub(x, y):
    return x - y


def mul(x, y):
    return x * y


def div(x, y):
    return x / y


def power(x, y):
    return x ** y


def maximum(x, y):
    return np.maximum(x, y)


def minimum(x, y):
    return np.minimum(x, y)


def arctan2(x, y):
    return np.arctan2(x, y)


def fmod(x, y):
    return np.fmod(x, y)


def add_any(x, y):
    return ew.add_any.bind(x, y)


# name -> (the NumPy-surface function, jax's, domain of x, domain of y). Continuous
# random values make max/min ties and fmod's jumps (x / y an integer) vanishingly rare.
BINARY = {
    "add": (add, jnp.add, span(-5, 5), span(-5, 5)),
    "sub": (sub, jnp.subtract, span(-5, 5), span(-5, 5)),
    "mul": (mul, jnp.multiply, span(-5, 5), span(-5, 5)),
    "div": (div, jnp.divide, span(-5, 5), away_from_zero(0.5, 3)),
    "pow": (power, jnp.power, span(0.2, 3), span(-2, 2)),
    "max": (maximum, jnp.maximum, span(-5, 5), span(-5, 5)),
    "min": (minimum, jnp.minimum, span(-5, 5), span(-5, 5)),
    "atan2": (arctan2, jnp.arctan2, span(-3, 3), span(-3, 3)),
    "rem": (fmod, jnp.fmod, span(-5, 5), away_from_zero(0.5, 2)),
    "add_any": (add_any, jnp.add, span(-5, 5), span(-5, 5)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@FAMILY_SETTINGS
@given(data=st.data())
def test_binary_broadcasting(name, data):
    f, jax_fn, x_domain, y_domain = BINARY[name]
    x, y = data.draw(broadcasting(x_domain, y_domain), label="x, y")
    assert name in primitives_in(f, x, y)
    check_derivatives(f, jax_fn, x, y, **tol(x.dtype))


# Python-scalar operands: literals in the jaxpr, with no tangent and no cotangent, on
# either side of each binary primitive (and as both bounds of clamp).


def arithmetic(x):
    return 1.5 - (x * 2.0 + 0.5) + 3.0 / x + x / 4.0


def powers_of_scalars(x):
    return 2.0 ** x + x ** 0.5 + x ** 3 - x ** -1


def clipped(x):
    return np.minimum(np.maximum(x, 0.25), 1.0) + np.clip(x, 0.5, 2.5) * np.maximum(2.0, x)


def angles(x):
    return np.arctan2(x, 2.0) + np.arctan2(1.0, x)


def remainders(x):
    return np.fmod(x, 0.75) + np.fmod(7.0, x)


def where_scalar(x):
    return np.where(x > 1.0, x, 0.5) + np.where(x < 2.0, 1.5, x)


SCALAR_CASES = [
    (arithmetic, lambda x: 1.5 - (x * 2.0 + 0.5) + 3.0 / x + x / 4.0),
    (powers_of_scalars, lambda x: 2.0 ** x + x ** 0.5 + x ** 3 - x ** -1),
    (clipped, lambda x: jnp.minimum(jnp.maximum(x, 0.25), 1.0)
     + jnp.clip(x, 0.5, 2.5) * jnp.maximum(2.0, x)),
    (angles, lambda x: jnp.arctan2(x, 2.0) + jnp.arctan2(1.0, x)),
    (remainders, lambda x: jnp.fmod(x, 0.75) + jnp.fmod(7.0, x)),
    (where_scalar, lambda x: jnp.where(x > 1.0, x, 0.5) + jnp.where(x < 2.0, 1.5, x)),
]


@pytest.mark.parametrize("f, jax_fn", SCALAR_CASES, ids=[c[0].__name__ for c in SCALAR_CASES])
@FAMILY_SETTINGS
@given(data=st.data())
def test_python_scalar_operands(f, jax_fn, data):
    # Positive: the domain of x ** 0.5 and 7 / x. Continuous values miss the kinks (0.25,
    # 1.0 ...) and fmod's jumps.
    x = data.draw(arrays(span(0.1, 3)), label="x")
    check_derivatives(f, jax_fn, x, **tol(x.dtype))


# ---------------------------------------------------------------------------------------
# select, clamp, convert_element_type


@SETTINGS
@given(broadcasting(span(-1, 1), span(-5, 5), span(-5, 5)))
def test_select_broadcasting(operands):
    def f(c, a, b):
        return np.where(c > 0, a, b)

    assert "select" in primitives_in(f, *operands)
    check_derivatives(f, lambda c, a, b: jnp.where(c > 0, a, b), *operands,
                      **tol(operands[0].dtype))


@SETTINGS
@given(broadcasting(span(-3, 3), span(-1.5, -0.2), span(0.2, 1.5)), st.booleans())
def test_clamp_broadcasting(operands, swapped):
    x, lo, hi = operands
    if swapped:     # lo > hi: np.clip gives hi everywhere, and lo gets no gradient
        lo, hi = hi, lo

    def f(x, lo, hi):
        return np.clip(x, lo, hi)

    assert "clamp" in primitives_in(f, x, lo, hi)
    check_derivatives(f, jnp.clip, x, lo, hi, **tol(x.dtype))


def test_clamp_with_bounds_the_wrong_way_round_differentiates_hi_only():
    x, lo, hi = np.array([-1.0, 0.5, 2.0]), np.array(1.0), np.array(0.0)

    def f(x, lo, hi):
        return np.sum(np.clip(x, lo, hi))

    grads = s2s.grad(f, argnums=(0, 1, 2))(x, lo, hi)
    np.testing.assert_array_equal(grads[0], [0.0, 0.0, 0.0])
    assert grads[1] == 0.0 and grads[2] == 3.0
    check_derivatives(f, lambda x, lo, hi: jnp.sum(jnp.clip(x, lo, hi)), x, lo, hi)


@SETTINGS
@given(arrays(span(-5, 5)))
def test_convert_between_floats(x):
    other = np.float32 if x.dtype == np.float64 else np.float64

    def f(x):
        return np.sin(x).astype(other) * 2.0

    assert "convert_element_type" in primitives_in(f, x)
    check_derivatives(f, lambda x: jnp.sin(x).astype(other) * 2.0, x, **tol(np.float32))


@SETTINGS
@given(arrays(away_from_zero(0.1, 5)))
def test_convert_to_int_has_no_tangent(x):
    def f(x):
        return x.astype(np.int32).astype(x.dtype) * x

    check_derivatives(f, lambda x: x.astype(jnp.int32).astype(x.dtype) * x, x, **tol(x.dtype))


# ---------------------------------------------------------------------------------------
# Non-differentiable points: JAX's conventions


def test_max_min_ties_split_the_tangent_evenly():
    x, y = np.array([1.0, 2.0, -3.0, 0.5]), np.array([1.0, 0.0, -3.0, 4.0])
    ones, zeros = np.ones(4), np.zeros(4)
    _, t = s2s.jvp(maximum, (x, y), (ones, zeros))
    np.testing.assert_array_equal(t, [0.5, 1.0, 0.5, 0.0])
    _, t = s2s.jvp(minimum, (x, y), (ones, zeros))
    np.testing.assert_array_equal(t, [0.5, 0.0, 0.5, 1.0])
    for f, jax_fn in [(maximum, jnp.maximum), (minimum, jnp.minimum)]:
        check_derivatives(f, jax_fn, x, y)
        # Broadcast: the tied scalar gets half of each tied element's cotangent.
        check_derivatives(f, jax_fn, np.array([[1.0, 2.0], [2.0, 3.0]]), np.array(2.0))


def test_relu_at_zero_has_slope_one_half():
    def relu(x):
        return np.sum(np.maximum(x, 0.0))

    x = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(s2s.grad(relu)(x), [0.0, 0.5, 1.0])
    expected = jax.grad(lambda x: jnp.sum(jnp.maximum(x, 0.0)))(x)
    np.testing.assert_array_equal(s2s.grad(relu)(x), expected)


def relu_by_maximum(x, w):
    return np.sum(np.maximum(x, 0.0) * w)


def relu_by_where(x, w):
    return np.sum(np.where(x > 0, x, 0.0) * w)


def negative_part(x, w):
    return np.sum(np.minimum(0.0, x) * w)


@pytest.mark.parametrize("relu, jax_relu", [
    (relu_by_maximum, lambda x, w: jnp.sum(jnp.maximum(x, 0.0) * w)),
    (relu_by_where, lambda x, w: jnp.sum(jnp.where(x > 0, x, 0.0) * w)),
    (negative_part, lambda x, w: jnp.sum(jnp.minimum(0.0, x) * w)),
], ids=["maximum", "where", "minimum"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_gradient_is_one_where(relu, jax_relu, dtype):
    """grad(np.maximum(x, 0.0)) emitted a mask, its converts and two `np.where`s added
    (the tangent of the constant 0.0 taken as real zeros): it is now the cotangent times
    one where expression (1 where x wins, ½ on a tie as JAX, 0 elsewhere), in x's dtype."""
    x = np.array([-1.5, 0.0, 2.0, -0.0, 3.0], dtype)
    w = np.arange(1.0, 6.0).astype(dtype)
    source = s2s.emit_python(s2s.grad(relu), x, w)
    body = [line.strip() for line in source.split("def grad_")[1].splitlines()[1:-1]]
    assert len(body) <= 2 and sum(line.count("np.where(") for line in body) <= 2, source
    assert "astype" not in source and "rt." not in source, source
    expected = jax.grad(jax_relu)(x, w)
    for run in (s2s.grad(relu), s2s.jit(s2s.grad(relu)), s2s.jit(s2s.grad(relu), backend="python")):
        got = np.asarray(run(x, w))
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)


def absolute(x):
    return np.abs(x)


def test_abs_at_zero_has_slope_one():
    def f(x):
        return np.sum(np.abs(x))

    x = np.array([0.0, -0.0, 1.5, -2.0])
    np.testing.assert_array_equal(s2s.grad(f)(x), [1.0, 1.0, 1.0, -1.0])
    np.testing.assert_array_equal(s2s.grad(f)(x), jax.grad(lambda x: jnp.sum(jnp.abs(x)))(x))
    check_derivatives(absolute, jnp.abs, x)


def clip_sum(x, lo, hi):
    return np.sum(np.clip(x, lo, hi) * np.arange(1.0, 1.0 + x.size))


def fmax_fmin_sum(x, y):
    return np.sum(np.fmax(x, y) + 2.0 * np.fmin(x, y))


def std_of(x):
    return np.std(x)


def std_ddof_of(x):
    return np.std(x, ddof=1)


def var_of(x):
    return np.var(x)


def norm_of(x):
    return np.linalg.norm(x)


def zero_to_the(x):
    return np.sum(0.0 ** x)


def abs_sum(x):
    return np.sum(np.abs(x))


def maximum_minimum_sum(x, y):
    return np.sum(np.maximum(x, y) + 2.0 * np.minimum(x, y))


# Each kink (and the smooth case beside it) as s2s source, jax twin, and arguments placed
# on the kink. Both gradients and Hessians must equal jax's, nan where jax's is nan.
KINKS = {
    "abs at 0": (abs_sum, lambda x: jnp.sum(jnp.abs(x)), (np.array([0.0, -0.0, 1.5, -2.0]),)),
    "maximum, minimum ties": (maximum_minimum_sum,
                              lambda x, y: jnp.sum(jnp.maximum(x, y) + 2.0 * jnp.minimum(x, y)),
                              (np.array([1.0, -2.0, 0.0, 3.0]), np.array([1.0, -2.0, 0.0, -3.0]))),
    "clip at its bounds": (clip_sum, lambda x, lo, hi: jnp.sum(jnp.clip(x, lo, hi) * jnp.arange(1.0, 1.0 + x.size)),
                           (np.array([-1.0, -1.0, 0.3, 2.0, 2.0, 5.0]), np.array(-1.0), np.array(2.0))),
    "clip with lo == hi": (clip_sum, lambda x, lo, hi: jnp.sum(jnp.clip(x, lo, hi) * jnp.arange(1.0, 1.0 + x.size)),
                           (np.array([-1.0, 0.5, 0.5]), np.array(0.5), np.array(0.5))),
    "fmax, fmin ties": (fmax_fmin_sum, lambda x, y: jnp.sum(jnp.fmax(x, y) + 2.0 * jnp.fmin(x, y)),
                        (np.array([1.0, -2.0, 0.0, np.nan, 4.0]), np.array([1.0, -2.0, 3.0, 1.0, np.nan]))),
    "std at zero spread": (std_of, jnp.std, (np.full(4, 1.5),)),
    "std(ddof=1) at zero spread": (std_ddof_of, lambda x: jnp.std(x, ddof=1), (np.full(3, -2.0),)),
    "var at zero spread": (var_of, jnp.var, (np.full(4, 1.5),)),
    "norm at 0": (norm_of, jnp.linalg.norm, (np.zeros(3),)),
    "0.0 ** x": (zero_to_the, lambda x: jnp.sum(0.0 ** x), (np.array([2.0, 0.5, 0.0, -1.0]),)),
}


@pytest.mark.parametrize("case", sorted(KINKS))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the nan cases divide by zero
def test_derivatives_at_kinks_are_jax_conventions(case):
    """The conventions the README lists under "Derivatives at kinks", held to jax: first
    order eagerly and on both jit backends, second order eagerly, on every argument."""
    f, jax_fn, args = KINKS[case]
    argnums = tuple(range(len(args)))
    expected = jax.grad(jax_fn, argnums=argnums)(*args)
    derived = s2s.grad(f, argnums=argnums)
    for name, run in _runs(derived).items():
        for got, want in zip(run(*args), expected):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True, err_msg=name)
    expected = jax.hessian(jax_fn, argnums=argnums)(*args)
    got = s2s.hessian(f, argnums=argnums)(*args)
    for i in argnums:
        for j in argnums:
            np.testing.assert_allclose(got[i][j], expected[i][j], rtol=1e-12, atol=0, equal_nan=True,
                                       err_msg=f"hessian [{i}][{j}]")


def test_clip_at_a_bound_splits_the_tangent_with_the_bound():
    """np.clip is min(max(x, lo), hi): at x == lo, x and lo get half each (jnp.clip's
    convention, and that of np.maximum); strictly inside, x gets it all."""
    x = np.array([0.0, 0.5, 1.0, -1.0, 2.0])

    def f(x):
        return np.sum(np.clip(x, 0.0, 1.0))

    np.testing.assert_array_equal(s2s.grad(f)(x), [0.5, 1.0, 0.5, 0.0, 0.0])
    grads = s2s.grad(clip_sum, argnums=(1, 2))(x, np.array(0.0), np.array(1.0))
    assert grads == (0.5 * 1.0 + 1.0 * 4.0, 0.5 * 3.0 + 1.0 * 5.0)


def test_fmax_and_fmin_ties_take_the_second_operand():
    """jnp.fmax(x, y) is where(x > y or y is nan, x, y): a tie goes to y whole."""
    x, y = np.array([1.0, 2.0, np.nan]), np.array([1.0, 1.0, 3.0])
    gx, gy = s2s.grad(fmax_fmin_sum, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(gy, [3.0, 2.0, 3.0])


# ---------------------------------------------------------------------------------------
# Piecewise-constant and boolean primitives: exactly zero derivatives


def rounding(x, y):
    return np.floor(x) + np.ceil(y) * np.round(x) - np.sign(x * y)


def comparisons(x, y):
    below = (x < y) | (x <= -y)
    above = (x > y) & (x >= 0.5 * y)
    same = (x == y) ^ (x != 2.0 * y)
    return np.where(below, 1.0, 0.0) + np.where(above, 2.0, 0.0) + np.where(same, 4.0, 0.0)


def logic(x, y):
    mask = np.logical_xor(np.logical_and(x > 0, y > 0), np.logical_or(x < -1, ~(y < 1)))
    return np.where(np.logical_not(mask) & np.isfinite(x / y), 3.0, -1.0)


def stopped(x, y):
    return s2s.stop_gradient(x * y) + s2s.stop_gradient(np.exp(x))


ZERO_CASES = [
    (rounding, {"floor", "ceil", "round", "sign"}),
    (comparisons, {"lt", "le", "gt", "ge", "eq", "ne", "or", "and", "xor"}),
    (logic, {"and", "or", "xor", "not", "is_finite"}),
    (stopped, {"stop_gradient"}),
]


@pytest.mark.parametrize("f, prims", ZERO_CASES, ids=[c[0].__name__ for c in ZERO_CASES])
@SETTINGS
@given(data=st.data())
def test_zero_derivatives(f, prims, data):
    x, y = data.draw(broadcasting(away_from_zero(0.1, 3), away_from_zero(0.1, 3)), label="x, y")
    assert prims <= primitives_in(f, x, y)
    expected = f(x, y)      # the same function, run by NumPy
    out, t = s2s.jvp(f, (x, y), (np.ones_like(x), np.ones_like(y)))
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(t, np.zeros_like(expected))
    _, vjp_fn = s2s.vjp(f, x, y)
    ct_x, ct_y = vjp_fn(np.ones_like(out))
    np.testing.assert_array_equal(ct_x, np.zeros_like(x))
    np.testing.assert_array_equal(ct_y, np.zeros_like(y))
    assert ct_x.dtype == x.dtype and ct_y.dtype == y.dtype


# ---------------------------------------------------------------------------------------
# Second derivatives: forward over reverse through the rules


def smooth(x):
    return np.sum(np.sin(x) * np.exp(x) / (1 + x ** 2))


def saturating(x):
    return np.sum(np.tanh(x) ** 3 + np.log1p(x * x) - snp.logistic(x) * snp.erf(x))


def angular(x):
    return np.sum(np.arctan2(x, 1.5 + np.cos(x)) * np.sqrt(x * x + 1.0) + np.cbrt(x + 4.0))


def powers(x):
    return np.sum(np.exp(x) ** 1.5 + 2.0 ** x + x ** 3 + snp.lgamma(x + 2.0)
                  + np.maximum(x, 0.3) * x)


HESSIAN_CASES = [
    (smooth, lambda x: jnp.sum(jnp.sin(x) * jnp.exp(x) / (1 + x ** 2))),
    (saturating, lambda x: jnp.sum(jnp.tanh(x) ** 3 + jnp.log1p(x * x)
                                   - jax.nn.sigmoid(x) * jsp.erf(x))),
    (angular, lambda x: jnp.sum(jnp.arctan2(x, 1.5 + jnp.cos(x)) * jnp.sqrt(x * x + 1.0)
                                + jnp.cbrt(x + 4.0))),
    (powers, lambda x: jnp.sum(jnp.exp(x) ** 1.5 + 2.0 ** x + x ** 3 + jsp.gammaln(x + 2.0)
                               + jnp.maximum(x, 0.3) * x)),
]


@pytest.mark.parametrize("f, jax_fn", HESSIAN_CASES, ids=[c[0].__name__ for c in HESSIAN_CASES])
def test_hessian(f, jax_fn):
    x = np.array([-0.7, 0.2, 1.1])
    np.testing.assert_allclose(s2s.hessian(f)(x), jax.jit(jax.hessian(jax_fn))(x),
                               rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------------------
# Powers at zero


def cube(x):
    return x ** 3


def square(x):
    return x ** 2


def sum_of_powers(x, y):
    return np.sum(x ** y)


def test_grad_of_integer_pow_at_zero():
    for f, jax_fn in [(cube, lambda x: x ** 3), (square, lambda x: x ** 2)]:
        g = s2s.grad(f)(np.float64(0.0))
        assert np.isfinite(g) and g == jax.grad(jax_fn)(0.0) == 0.0
        h = s2s.grad(s2s.grad(f))(np.float64(0.0))
        assert np.isfinite(h) and h == jax.grad(jax.grad(jax_fn))(0.0)


@pytest.mark.parametrize("y", [1.0, 1.5, 2.0, 3.0])
def test_grad_of_pow_at_zero(y):
    got = s2s.grad(power, argnums=(0, 1))(np.float64(0.0), np.float64(y))
    expected = jax.grad(lambda x, y: x ** y, argnums=(0, 1))(0.0, y)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # Among other values, with the exponent broadcast.
    x = np.array([0.0, 0.5, 2.0])
    got = s2s.grad(sum_of_powers, argnums=(0, 1))(x, np.float64(y))
    expected = jax.grad(lambda x, y: jnp.sum(x ** y), argnums=(0, 1))(x, y)
    assert all(np.all(np.isfinite(g)) for g in got)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


# A constant array exponent or base: `x ** Y`, `Y ** x` with Y a NumPy array closed over
# (a constant of the jaxpr, reaching the rule as a NumPy value) or passed undifferentiated.

EXPONENTS = np.array([1.0, 2.0, 0.5, 3.0, -1.5, 2.0])
BASES = np.array([1.0, 2.5, 0.5, 3.0, 4.0, 0.0])


def to_the_constant(x):
    return np.sum(x ** EXPONENTS)


def constant_to_the(x):
    return np.sum(BASES ** x)


def to_the_argument(x, y):
    return np.sum(x ** y)


jax_to_the_constant, jax_constant_to_the, jax_to_the_argument = (
    helpers.with_numpy(f, jnp) for f in (to_the_constant, constant_to_the, to_the_argument))


@pytest.mark.parametrize("f, jax_fn", [(to_the_constant, jax_to_the_constant),
                                       (constant_to_the, jax_constant_to_the)],
                         ids=["x ** Y", "Y ** x"])
def test_pow_with_a_constant_array_operand(f, jax_fn):
    x = np.array([0.7, 1.3, 2.0, 0.4, 1.1, 1.9])
    check_derivatives(f, jax_fn, x)
    for derived, jax_derived in [(s2s.grad(f), jax.grad(jax_fn)), (s2s.hessian(f), jax.hessian(jax_fn))]:
        expected = jax_derived(x)
        for name, run in _runs(derived).items():
            np.testing.assert_allclose(run(x), expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_pow_with_an_undifferentiated_array_exponent():
    x = np.array([0.7, 1.3, 2.0, 0.4, 1.1, 1.9])
    check_derivatives(to_the_argument, jax_to_the_argument, x, EXPONENTS)
    expected = jax.hessian(jax_to_the_argument)(x, EXPONENTS)
    for name, run in _runs(s2s.hessian(to_the_argument)).items():
        np.testing.assert_allclose(run(x, EXPONENTS), expected, rtol=1e-12, err_msg=name)
    # An integer array exponent is converted to the base's float dtype.
    ints = np.array([1, 2, 0, 3, 2, 1])
    np.testing.assert_allclose(s2s.grad(to_the_argument)(x, ints), jax.grad(jax_to_the_argument)(x, ints), rtol=1e-12)


def test_the_derivative_of_x_to_the_zero_is_zero_at_zero():
    """x ** 0.0 is 1 for every x, so its derivative is 0, also at x == 0 (jax's pow gives
    0 * 0**-1 = nan there for a float exponent; its integer exponents give 0, as here)."""
    x = np.array([0.0, 0.0, 2.0, 0.0])
    y = np.array([0.0, 1.0, 0.0, 2.0])
    gx, gy = s2s.grad(to_the_argument, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(gy, [0.0, 0.0, np.log(2.0), 0.0])
    np.testing.assert_array_equal(gx, jax.grad(jax_to_the_argument)(x, y.astype(int)))
    # The second derivative in x: x ** 1.0 is a line, x ** 2.0 a parabola.
    np.testing.assert_array_equal(np.diag(s2s.hessian(to_the_argument)(x, y)), [0.0, 0.0, 0.0, 2.0])
