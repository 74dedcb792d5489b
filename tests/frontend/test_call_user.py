"""call_user: every kind of callable stages the same way through every entry point.

A callable's body is staged from its source wherever s2s calls it: a call in a staged
function, a `lax` branch or body, a custom_jvp/custom_vjp function or rule, an implicit
solver. The bodies here test on an array (`if x.sum() > 0:`), which only a staged body can
do: run as plain Python on staged values it would raise ConcretizationError.
"""
import functools

import numpy as np
import pytest

import s2s
from s2s import lax
from s2s.core import ClosedJaxpr

rng = np.random.default_rng(0)
X = rng.standard_normal(4)
ROWS = rng.standard_normal((3, 4))


def primitive_names(closed: ClosedJaxpr) -> list[str]:
    """The primitives of `closed` and of every jaxpr in its equations' parameters."""
    names = []
    for eqn in closed.jaxpr.eqns:
        names.append(eqn.primitive.name)
        for value in eqn.params.values():
            for body in value if isinstance(value, tuple) else (value,):
                if isinstance(body, ClosedJaxpr):
                    names += primitive_names(body)
    return names


def assert_stages_an_if(fn, *args):
    assert "cond" in primitive_names(s2s.make_jaxpr(fn)(*args))


# --- the partial regression: an `if` on an array in a partial's function ---------------

def scaled_unless_negative(scale, x):
    if x.sum() > 0:
        return x * scale
    return -x


def reference_scaled(scale, x):
    return x * scale if x.sum() > 0 else -x


scale_by_3 = functools.partial(scaled_unless_negative, 3.0)


@pytest.mark.parametrize("x", [X, -np.abs(X), np.abs(X)])
def test_a_partial_stages_its_if_when_called_directly(x):
    def f(x):
        return scale_by_3(x)
    assert_stages_an_if(f, x)
    np.testing.assert_allclose(s2s.jit(f)(x), reference_scaled(3.0, x))


@pytest.mark.parametrize("x", [X, -np.abs(X), np.abs(X)])
def test_a_partial_stages_its_if_at_the_top_level(x):
    assert_stages_an_if(scale_by_3, x)
    np.testing.assert_allclose(s2s.jit(scale_by_3)(x), reference_scaled(3.0, x))
    # Each partial is its own function: its arguments are not shared through the cache.
    np.testing.assert_allclose(s2s.jit(functools.partial(scaled_unless_negative, 5.0))(x),
                               reference_scaled(5.0, x))


@pytest.mark.parametrize("x", [X, -np.abs(X), np.abs(X)])
def test_a_partial_stages_its_if_as_a_cond_branch(x):
    def f(x):
        return lax.cond(x[0] > 10.0, np.sin, scale_by_3, x)
    assert_stages_an_if(f, x)
    np.testing.assert_allclose(s2s.jit(f)(x), reference_scaled(3.0, x))


def test_a_partial_stages_its_if_as_a_scan_body():
    def step(scale, carry, row):
        if row.sum() > 0:
            carry = carry + scale * row
        else:
            carry = carry - row
        return carry, carry.sum()

    def f(rows):
        return lax.scan(functools.partial(step, 2.0), np.zeros(4), rows)
    assert_stages_an_if(f, ROWS)
    carry, expected_ys = np.zeros(4), []
    for row in ROWS:
        carry = carry + 2.0 * row if row.sum() > 0 else carry - row
        expected_ys.append(carry.sum())
    final, ys = s2s.jit(f)(ROWS)
    np.testing.assert_allclose(final, carry)
    np.testing.assert_allclose(ys, expected_ys)


def test_a_partial_stages_its_if_as_a_custom_jvp_function():
    g = s2s.custom_jvp(scale_by_3)

    @g.defjvp
    def g_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return g(x), 2 * t

    for x in (X, -np.abs(X), np.abs(X)):
        assert_stages_an_if(calling(g), x)
        np.testing.assert_allclose(s2s.jit(calling(g))(x), reference_scaled(3.0, x))
        np.testing.assert_allclose(s2s.jvp(calling(g), (x,), (np.ones(4),))[1], 2 * np.ones(4))


# --- every kind of callable through every entry point ------------------------------------
#
# A kind makes, from a plain function `base`, a callable of its kind doing what base does.

class Holder:
    def __init__(self, fn):
        self.fn = fn

    def method(self, *args):
        return self.fn(*args)

    def __call__(self, *args):
        return self.fn(*args)


def call_through(fn, *args):
    return fn(*args)


def closure_of(fn):
    def closure(*args):
        return fn(*args)
    return closure


KINDS = {
    "function": lambda base: base,
    "closure": closure_of,
    "lambda": lambda base: lambda *args: base(*args),
    "bound method": lambda base: Holder(base).method,
    "callable object": Holder,
    "partial": lambda base: functools.partial(call_through, base),
}
# Called as they are, not staged from source: for bodies of arrays only.
ARRAY_FUNCTION_KINDS = {
    "s2s transform": s2s.jit,
}


def unary(x):
    if x.sum() > 0:
        return np.sin(x)
    return x * 0.5


def step(carry, row):
    if row.sum() > 0:
        carry = carry + row
    return carry, carry * 2


def indexed(i, x):
    if x.sum() > 0:
        return x * 0.5 + i
    return x + 1.0


def keep_going(x):
    return x.sum() < 10.0


def grow(x):
    if x.sum() > 0:
        return x * 2.0 + 0.5
    return x + 1.0


def scan_reference(rows):
    carry, ys = np.zeros(4), []
    for row in rows:
        carry, y = step(carry, row)
        ys.append(y)
    return carry, np.stack(ys)


def fori_reference(x):
    for i in range(3):
        x = indexed(i, x)
    return x


def while_reference(x):
    while keep_going(x):
        x = grow(x)
    return x


# entry point: (base function it calls, the staged function given the callable, its args, reference)
ENTRIES = {
    "direct call": (unary, lambda fn: lambda x: fn(x), (X,), unary),
    "cond branch": (unary, lambda fn: lambda x: lax.cond(x[0] > 10.0, np.cos, fn, x), (X,), unary),
    "switch branch": (unary, lambda fn: lambda x: lax.switch((x[0] > -10.0).astype(int), [np.cos, fn], x),
                      (X,), unary),
    "while_loop body": (grow, lambda fn: lambda x: lax.while_loop(keep_going, fn, x), (X,), while_reference),
    "fori_loop body": (indexed, lambda fn: lambda x: lax.fori_loop(0, 3, fn, x), (X,), fori_reference),
    "scan body": (step, lambda fn: lambda rows: lax.scan(fn, np.zeros(4), rows), (ROWS,), scan_reference),
    "map function": (unary, lambda fn: lambda rows: lax.map(fn, rows), (ROWS,),
                     lambda rows: np.stack([unary(r) for r in rows])),
    "custom_jvp function": (unary, lambda fn: calling(with_jvp_rule(s2s.custom_jvp(fn))), (X,), unary),
}


def with_jvp_rule(g):
    g.defjvp(lambda primals, tangents: (g(*primals), tangents[0]))
    return g


def calling(g):
    """A function calling `g` (s2s stages functions, not custom_jvp objects, at the top)."""
    return lambda *args: g(*args)


def assert_trees_close(actual, expected):
    for a, e in zip(s2s.tree_leaves(actual), s2s.tree_leaves(expected)):
        np.testing.assert_allclose(a, e, rtol=1e-12)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_callable_stages_its_body_through_each_entry_point(kind, entry):
    base, make, args, reference = ENTRIES[entry]
    staged = make(KINDS[kind](base))
    assert_stages_an_if(staged, *args)
    assert_trees_close(s2s.jit(staged)(*args), reference(*args))


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("kind", sorted(ARRAY_FUNCTION_KINDS))
def test_s2s_transforms_are_called_through_each_entry_point(kind, entry):
    base, make, args, reference = ENTRIES[entry]
    staged = make(ARRAY_FUNCTION_KINDS[kind](base))
    assert_trees_close(s2s.jit(staged)(*args), reference(*args))


# NumPy's functions and s2s's own, where a function of one array goes (a custom_jvp
# function is a Python function: it has a signature to bind).
NATIVE_CASES = [pytest.param(fn, reference, entry, id=f"{kind}-{entry}")
                for kind, fn, reference in [("numpy function", np.sin, np.sin),
                                            ("s2s function", s2s.stop_gradient, lambda x: x)]
                for entry in sorted(ENTRIES)
                if ENTRIES[entry][0] is unary and not (fn is np.sin and entry == "custom_jvp function")]


@pytest.mark.parametrize("fn, reference, entry", NATIVE_CASES)
def test_numpy_and_s2s_functions_run_through_each_entry_point(fn, reference, entry):
    _, make, args, _ = ENTRIES[entry]
    np.testing.assert_allclose(s2s.jit(make(fn))(*args), reference(args[0]), rtol=1e-12)


# --- rules and solvers --------------------------------------------------------------------

def sin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    if x.sum() > 100:
        return np.sin(x), t
    return np.sin(x), np.cos(x) * t


def sin_fwd(x):
    return np.sin(x), x


def sin_bwd(x, ct):
    if x.sum() > 100:
        return (ct,)
    return (np.cos(x) * ct,)


def newton(f, x0):
    x = x0
    for _ in range(30):
        x = x - f(x) / (2 * x)
    if x.sum() < 0:
        return -x
    return x


def divide_by_derivative(g, y):
    slope = g(np.ones_like(y))
    if slope.sum() > 0:
        return y / slope
    return -y / -slope


DIAGONAL = np.array([1.0, 2.0, 4.0, 8.0])


def diagonal_solve(matvec, b):
    x = b / DIAGONAL
    if b.sum() > 1e300:
        return matvec(x)
    return x


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_callable_stages_as_a_custom_jvp_rule(kind):
    g = s2s.custom_jvp(lambda x: np.sin(x))
    g.defjvp(KINDS[kind](sin_jvp))
    t = rng.standard_normal(4)
    def tangent_of_g(x, t):
        return s2s.jvp(calling(g), (x,), (t,))[1]
    assert_stages_an_if(tangent_of_g, X, t)
    np.testing.assert_allclose(s2s.jit(tangent_of_g)(X, t), np.cos(X) * t)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_callable_stages_as_custom_vjp_rules(kind):
    g = s2s.custom_vjp(lambda x: np.sin(x))
    g.defvjp(KINDS[kind](sin_fwd), KINDS[kind](sin_bwd))
    loss = s2s.grad(lambda x: g(x).sum())
    assert_stages_an_if(loss, X)
    np.testing.assert_allclose(s2s.jit(loss)(X), np.cos(X))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_callable_stages_as_custom_root_solvers(kind):
    def sqrt(a):
        return lax.custom_root(lambda x: x * x - a, np.ones_like(a), KINDS[kind](newton),
                               KINDS[kind](divide_by_derivative))
    a = np.abs(X) + 1.0
    assert_stages_an_if(sqrt, a)
    np.testing.assert_allclose(s2s.jit(sqrt)(a), np.sqrt(a), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(lambda a: sqrt(a).sum()))(a), 0.5 / np.sqrt(a), rtol=1e-12)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_callable_stages_as_custom_linear_solvers(kind):
    def solve(b):
        return lax.custom_linear_solve(lambda x: DIAGONAL * x, b, KINDS[kind](diagonal_solve),
                                       symmetric=True)
    assert_stages_an_if(solve, X)
    np.testing.assert_allclose(s2s.jit(solve)(X), X / DIAGONAL, rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(lambda b: solve(b).sum()))(X), 1 / DIAGONAL, rtol=1e-12)


# --- functions defined inside a staged function --------------------------------------------

def inner_functions_everywhere(x, rows):
    def halve_or_sin(v):
        if v.sum() > 0:
            return np.sin(v)
        return v * 0.5

    def accumulate(total, row):
        return total + halve_or_sin(row), total
    direct = halve_or_sin(x)
    branch = lax.cond(x[0] > 10.0, np.cos, halve_or_sin, x)
    switched = lax.switch((x[0] > -10.0).astype(int), [np.cos, lambda v: halve_or_sin(v)], x)
    looped = lax.fori_loop(0, 3, lambda i, v: halve_or_sin(v) + i, x)
    scanned = lax.scan(accumulate, np.zeros(4), rows)
    mapped = lax.map(halve_or_sin, rows)
    return direct, branch, switched, looped, scanned, mapped


def test_functions_defined_inside_a_staged_function_stage_through_each_entry_point():
    looped = X
    for i in range(3):
        looped = unary(looped) + i
    totals = np.cumsum([np.zeros(4)] + [unary(r) for r in ROWS], axis=0)
    expected = (unary(X), unary(X), unary(X), looped, (totals[-1], totals[:-1]),
                np.stack([unary(r) for r in ROWS]))
    assert primitive_names(s2s.make_jaxpr(inner_functions_everywhere)(X, ROWS)).count("cond") >= 6
    assert_trees_close(s2s.jit(inner_functions_everywhere)(X, ROWS), expected)
