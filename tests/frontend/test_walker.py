"""The walker's core (s2s/frontend/walker.py): functions defined inside a staged function
(`StagedFunction`), their decorators, and what counts as recursion.

Each program is written once against a library: `program(t, np)` is run as s2s on NumPy
(`t` = s2s, `np` = numpy) and as JAX (`t` = jax, `np` = jax.numpy), the oracle, as JAX's
own users write such code. Its value and gradient are compared on NumPy's backend (the
emitted module, `jit(backend="python")`) and under XLA (`jit`).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s
from s2s import StagingError, UnsupportedSyntaxError
from tests.frontend.test_errors import expect_error

X = 0.7


def assert_matches_jax(program, x=X, transforms=jax):
    """`program(s2s, numpy)`'s value and gradient at `x` equal JAX's of `program(jax,
    jax.numpy)` (or of `program(transforms, jax.numpy)`), staged and run by either s2s
    backend."""
    ours, theirs = program(s2s, np), program(transforms, jnp)
    value, gradient = theirs(x), jax.grad(theirs)(x)
    for backend in ("python", "xla"):
        np.testing.assert_allclose(s2s.jit(ours, backend=backend)(x), value, rtol=1e-12)
        np.testing.assert_allclose(s2s.jit(s2s.grad(ours), backend=backend)(x), gradient, rtol=1e-12)
    np.testing.assert_allclose(s2s.grad(ours)(x), gradient, rtol=1e-12)


# --- decorators on functions defined inside a staged function --------------------------

def twice(fn):
    """A decorator written as libraries write them: a `functools.wraps` wrapper."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return 2.0 * fn(*args, **kwargs)
    return wrapper


def scaled_by(factor):
    """A decorator factory (`@scaled_by(3.0)`) whose decorator returns a lambda."""
    return lambda fn: lambda *args: factor * fn(*args)


REGISTERED = []


def registered(fn):
    """A decorator that records the function and returns it as it is."""
    REGISTERED.append(fn.__name__)
    return fn


def jit_closing_over_x(t, np):
    def f(x):
        @t.jit
        def g(y):
            return np.sin(y) * x
        return g(x) + g(2.0 * x)
    return f


def jit_with_static_argnums(t, np):
    def f(x):
        @functools.partial(t.jit, static_argnums=1)
        def power(y, n):
            return y ** n
        return power(x, 3) + power(np.cos(x), 2)
    return f


def jit_with_a_static_first_argument(t, np):
    def f(x):
        @functools.partial(t.jit, static_argnames="n")
        def power(n, y):
            return y ** n
        return power(n=3, y=x)
    return f


def checkpoint_closing_over_x(t, np):
    def f(x):
        @t.checkpoint
        def g(y):
            return np.sin(np.sin(y) * x)
        return g(x) * g(0.5 * x)
    return f


def custom_jvp_given_its_rule_after(t, np):
    def f(x):
        @t.custom_jvp
        def g(y):
            return np.sin(y)

        @g.defjvp
        def g_jvp(primals, tangents):
            (y,), (y_dot,) = primals, tangents
            return g(y), 2.0 * np.cos(y) * y_dot   # twice the true derivative: the rule is used
        return g(x) * x
    return f


def custom_vjp_given_its_rules_after(t, np):
    def f(x):
        @t.custom_vjp
        def g(y):
            return np.tanh(y)

        def g_fwd(y):
            return g(y), y

        def g_bwd(y, ct):
            return (3.0 * ct,)
        g.defvjp(g_fwd, g_bwd)
        return g(x * x)
    return f


def wraps_decorator_from_module(t, np):
    def f(x):
        @twice
        def g(y):
            """g's docstring."""
            return np.sin(y) * x
        assert g.__name__ == "g" and g.__doc__ == "g's docstring." and g.__wrapped__ is not g
        return g(x)
    return f


def wraps_decorator_defined_inside(t, np):
    def f(x):
        def plus_x(fn):
            @functools.wraps(fn)
            def wrapper(y):
                return fn(y) + x
            return wrapper

        @plus_x
        def g(y):
            return y * y
        return g(np.sin(x))
    return f


def stacked_decorators(t, np):
    def f(x):
        @t.jit
        @twice
        @scaled_by(3.0)
        @registered
        def g(y):
            return np.exp(-y * x)
        return g(x)
    return f


@pytest.mark.parametrize("program", [
    jit_closing_over_x, jit_with_static_argnums, jit_with_a_static_first_argument,
    checkpoint_closing_over_x, custom_jvp_given_its_rule_after, custom_vjp_given_its_rules_after,
    wraps_decorator_from_module, wraps_decorator_defined_inside, stacked_decorators])
def test_a_decorated_nested_function_computes_as_in_jax(program):
    assert_matches_jax(program)


def test_decorators_apply_innermost_first_after_their_expressions_and_defaults():
    """Python's order: decorator expressions, then defaults, then the decorators from the
    innermost out; s2s stages the same steps."""
    order = []

    def noting(what):
        order.append(f"evaluate {what}")

        def decorator(fn):
            order.append(f"apply {what}")
            return fn
        return decorator

    def default():
        order.append("default")
        return 1.0

    def f(x):
        @noting("outer")
        @noting("inner")
        def g(y, k=default()):
            return y * k
        return g(x)
    expected = ["evaluate outer", "evaluate inner", "default", "apply inner", "apply outer"]
    f(X)
    assert order == expected
    order.clear()
    s2s.make_jaxpr(f)(X)
    assert order == expected


def test_a_checkpointed_nested_function_is_recomputed_in_the_emitted_gradient():
    source = s2s.emit_python(s2s.grad(checkpoint_closing_over_x(s2s, np)), X)
    assert source.count("# recomputed (checkpoint") == 2                # once per call of g
    assert source.count("checkpoint_closing_over_x.f.g+1") >= 2         # at g's own line


# --- bad decorators: refused at the decorator's line ------------------------------------

def returns_nothing(fn):
    pass


def decorated_by_one_returning_none(x):
    @returns_nothing  # ERROR
    def g(y):
        return y
    return g(x)


def decorated_by_lru_cache(x):
    @functools.lru_cache  # ERROR
    def g(y):
        return y
    return g(x)


def decorated_by_np_vectorize(x):
    @np.vectorize  # ERROR
    def g(y):
        return y
    return g(x)


@pytest.mark.parametrize("fn, what", [(decorated_by_one_returning_none, "None"),
                                      (decorated_by_lru_cache, "a _lru_cache_wrapper"),
                                      (decorated_by_np_vectorize, "a vectorize")])
def test_a_decorator_whose_result_s2s_cannot_stage_is_refused_at_its_line(fn, what):
    error = expect_error(fn, UnsupportedSyntaxError, np.ones(2), contains=f"turns g into {what}")
    assert "apply this decorator outside the staged function" in str(error)


def refuses(fn):
    raise ValueError("not this one")  # ERROR


def decorated_by_one_that_raises(x):
    @refuses
    def g(y):
        return y
    return g(x)


def test_a_decorator_that_raises_is_shown_at_its_raise():
    expect_error(decorated_by_one_that_raises, StagingError, np.ones(2), at=refuses, contains="not this one")


def custom_jvp_reading_x(t, np):
    def f(x):
        @t.custom_jvp
        def g(y):
            return np.sin(y) * x

        @g.defjvp
        def g_jvp(primals, tangents):
            return g(*primals), np.cos(primals[0]) * tangents[0]
        return g(2.0 * x)  # ERROR
    return f


def test_a_custom_jvp_function_reading_a_staged_value_around_it_is_refused():
    """Its rule defines no derivative for `x`: differentiated as a constant, it gave a
    wrong gradient, and jitted it failed in XLA. JAX refuses to differentiate it too."""
    error = expect_error(custom_jvp_reading_x(s2s, np), StagingError, X,
                         contains="reads `x` computed by the function being staged around it")
    assert "nondiff_argnums" in str(error)
    with pytest.raises(Exception, match="tracer"):
        jax.grad(custom_jvp_reading_x(jax, jnp))(X)


# --- distinct closures of one def or lambda are not recursion ---------------------------

def compose(f, g):
    return lambda y: f(g(y))


def nested_factory(t, np):
    def f(x):
        def doubling(inner):
            def g(y):
                return 2.0 * np.sin(inner(y)) if inner is not None else y
            return g
        return doubling(doubling(doubling(None)))(x)
    return f


def module_level_compositions(t, np):
    h = compose(np.sin, compose(np.cos, compose(np.tanh, np.exp)))
    return lambda x: h(x)


def one_lambda_folded_over_a_list(t, np):
    def f(x):
        composed = lambda outer, inner: lambda y: outer(inner(y))
        h = functools.reduce(composed, [np.sin, np.cos, lambda y: y * x, np.tanh, np.exp])
        return h(x)
    return f


def lambdas_of_one_comprehension(t, np):
    def f(x):
        fs = [lambda y, k=k: np.sin(y) * k for k in range(3)]
        return sum(g(x) for g in fs) + fs[2](fs[1](x))
    return f


@pytest.mark.parametrize("program", [nested_factory, module_level_compositions, one_lambda_folded_over_a_list,
                                     lambdas_of_one_comprehension])
def test_closures_of_one_def_calling_one_another_are_not_recursion(program):
    assert_matches_jax(program)


def recursing_closure(x):
    def g(y):
        return g(y)  # ERROR
    return g(x)


def test_a_closure_calling_itself_is_still_recursion():
    expect_error(recursing_closure, UnsupportedSyntaxError, np.ones(2), contains="calls itself")


def endless_closures():
    return lambda y: endless_closures()(y)


def test_closures_made_afresh_by_each_call_are_stopped_by_depth():
    """Each level calls a new closure, never the same function again: the staging depth
    ends it, with the help to write a loop."""
    with pytest.raises(UnsupportedSyntaxError, match="recurses too deep to stage"):
        s2s.make_jaxpr(lambda x: endless_closures()(x))(X)


def test_nested_functions_keep_their_names_and_signatures():
    """What `functools.wraps`, `inspect.signature` and the transforms read of a def met
    while staging, asserted by the staged code itself (its asserts run while staging)."""
    def f(x):
        def g(y, n=2, *, scale=1.0):
            """Doc."""
            return y
        import inspect
        assert (g.__name__, g.__doc__) == ("g", "Doc.")
        assert g.__qualname__.endswith("f.<locals>.g")
        assert str(inspect.signature(g)) == "(y, n=2, *, scale=1.0)"
        assert (lambda: 0).__name__ == "<lambda>"
        return g(x)
    s2s.make_jaxpr(f)(X)


# --- a transform of a nested function reads what it closes over at each call ------------

def vmapped_closure_whose_names_are_rebound(t, np):
    def f(x):
        g = t.vmap(lambda y: y * c)
        c = x
        first = g(np.ones(2) * x)
        c = np.sin(x)
        return (first + g(np.ones(2) * x)).sum()
    return f


def gradient_of_a_closure_whose_names_are_rebound(t, np):
    def f(x):
        g = t.grad(lambda y: np.sin(y) * c)
        c = x
        first = g(x)
        c = 2.0
        return first + g(x)
    return f


@pytest.mark.parametrize("program", [vmapped_closure_whose_names_are_rebound,
                                     gradient_of_a_closure_whose_names_are_rebound])
def test_a_nested_function_is_staged_again_at_each_call(program):
    """What a nested function reads of the function around it changes as that function
    runs, and no guard watches it: the staging cache served the first call's staging to
    the second (x * x twice instead of x * x + x sin x)."""
    assert_matches_jax(program)


def test_a_jax_numpy_function_in_staged_code_says_to_write_numpy_at_its_line():
    def loss(x):
        return np.sum(jnp.tanh(x) ** 2)
    with pytest.raises(s2s.errors.UnsupportedFunctionError, match=r"jax\.numpy\.tanh is JAX's function") as info:
        s2s.grad(loss)(np.ones(3))
    assert "write np.tanh" in str(info.value)
    assert info.value.where.line == loss.__code__.co_firstlineno + 1
