"""s2s.transformed: the one base of the user-level transforms, the one staging entry point
for tools, and each call's arguments bound and flattened once (`frontend.BoundCall`)."""
import functools

import numpy as np
import pytest

import s2s
from s2s.transformed import TransformedFunction, staged_or_error


def broken(x):
    return x.no_such_method()


def test_staged_or_error_raises_the_users_mistake_without_internal_frames():
    with pytest.raises(s2s.S2SError) as info:
        staged_or_error(broken, (np.ones(2),), {})
    assert info.value.__cause__ is None
    assert not [entry for entry in info.traceback if "walker" in str(entry.path)]   # no staging frames


def loss(w, x):
    """The loss every transform here is taken of."""
    return np.sum(np.tanh(w * x))


TRANSFORMS = {
    "grad": (lambda f: s2s.grad(f), "grad_loss", "grad(loss)"),
    "value_and_grad": (lambda f: s2s.value_and_grad(f), "value_and_grad_loss", "value_and_grad(loss)"),
    "jacfwd": (lambda f: s2s.jacfwd(f), "jacfwd_loss", "jacfwd(loss)"),
    "jacrev": (lambda f: s2s.jacrev(f), "jacrev_loss", "jacrev(loss)"),
    "vmap": (lambda f: s2s.vmap(f, in_axes=(None, 0)), "vmap_loss", "vmap(loss)"),
    "jit": (lambda f: s2s.jit(f), "loss", "jit(loss)"),                 # keeps the name, as jax.jit
    "pmap": (lambda f: s2s.pmap(f, in_axes=(None, 0)), "pmap_loss", "pmap(loss)"),
    "checkpoint": (lambda f: s2s.checkpoint(f), "checkpoint_loss", "checkpoint(loss)"),
    "custom_jvp": (lambda f: s2s.custom_jvp(f), "loss", "custom_jvp(loss)"),   # keeps the name, as JAX's
    "custom_vjp": (lambda f: s2s.custom_vjp(f), "loss", "custom_vjp(loss)"),
}


def test_a_custom_rule_given_later_is_part_of_the_cache_parameters():
    """A rule defined after the function was staged must not be served the old staging."""
    custom = s2s.custom_jvp(loss)
    before = custom.cache_params
    custom.defjvp(lambda primals, tangents: (loss(*primals), 0.0 * tangents[0].sum()))
    assert custom.cache_params != before


@pytest.mark.parametrize("name", TRANSFORMS)
def test_every_user_level_transform_is_a_transformed_function(name):
    make, expected_name, description = TRANSFORMS[name]
    transformed = make(loss)
    assert isinstance(transformed, TransformedFunction)
    assert transformed.__name__ == expected_name
    assert transformed.describe() == description
    assert repr(transformed) == f"<s2s {description}>"
    assert transformed.__wrapped__ is loss and transformed.__doc__.endswith(loss.__doc__)
    # Rebuilding the transform keys the same staging-cache entries.
    assert hash(transformed.cache_params) == hash(make(loss).cache_params)
    assert transformed.cache_params == make(loss).cache_params


@pytest.mark.parametrize("make, head", [
    (s2s.vmap, "Vectorized version of loss."), (s2s.grad, "Gradient of loss with respect to"),
    (s2s.value_and_grad, "Value and gradient of loss"), (s2s.jacrev, "Jacobian of loss"),
    (s2s.jacfwd, "Jacobian of loss")])
def test_a_transform_heads_the_docstring_with_what_it_makes_of_the_function(make, head):
    """As JAX lays out its transforms' docstrings (its test_vmap_preserves_docstr): what the
    call takes and returns, then the function's own documentation below it."""
    doc = make(loss).__doc__
    assert doc.startswith(head)
    assert doc.endswith(f"\n\nOriginal documentation:\n\n{loss.__doc__}")


def test_a_function_without_a_docstring_gets_the_transforms_summary_alone():
    assert s2s.vmap(lambda x: x).__doc__.startswith("Vectorized version of <lambda>.")
    assert "Original documentation" not in s2s.grad(lambda x: x).__doc__


def test_a_chain_of_transforms_is_described_from_the_outside_in():
    chained = s2s.jit(s2s.vmap(s2s.grad(loss), in_axes=(None, 0)))
    assert chained.describe() == "jit(vmap(grad(loss)))"


class Params:
    """A pytree node whose flatten counts the calls on the user's own values (arrays, not
    the avals or staged values of s2s's copies): how many times s2s flattens an argument
    holding it (jaxlib's dispatcher does not know the class, so only s2s does)."""
    flattens = 0

    def __init__(self, w, b):
        self.w, self.b = w, b


def _flatten_params(p):
    if isinstance(p.w, np.ndarray):
        Params.flattens += 1
    return (p.w, p.b), None


s2s.register_pytree_node(Params, _flatten_params, lambda _, children: Params(*children))


def model(params, x):
    return np.sum(np.tanh(params.w * x + params.b))


CALLS = {
    "grad": lambda params, x: s2s.grad(model)(params, x),
    "value_and_grad": lambda params, x: s2s.value_and_grad(model)(params, x),
    "jacrev": lambda params, x: s2s.jacrev(model)(params, x),
    "vmap": lambda params, x: s2s.vmap(model, in_axes=(None, 0))(params, x[None]),
    "vmap mapping the node": lambda params, x: s2s.vmap(model, in_axes=(0, None))(
        Params(params.w[None], params.b[None]), x),
    "jit": lambda params, x: s2s.jit(model)(params, x),
    "jit python": lambda params, x: s2s.jit(model, backend="python")(params, x),
    "pmap": lambda params, x: s2s.pmap(model, in_axes=(None, 0))(params, x[None]),
    "jvp": lambda params, x: s2s.jvp(model, (params, x), (params, x)),
    "vjp": lambda params, x: s2s.vjp(model, params, x)[1](1.0),
}


@pytest.mark.parametrize("name", CALLS)
def test_each_call_flattens_the_users_arguments_once(name):
    """On the call that stages (a staging-cache miss) and on the next (a hit), each
    argument is flattened once: binding, the staging-cache key, the jaxpr's inputs, vmap's
    in_axes, donation and assembling the gradient trees all read the one flattening. (jvp
    passes the node twice, as primal and as tangent.)"""
    per_call = 2 if name == "jvp" else 1
    call = CALLS[name]
    x = np.linspace(-1.0, 1.0, 3)
    params = Params(np.full(3, 0.5), np.full(3, 0.1))
    for attempt in ("cache miss", "cache hit"):
        Params.flattens = 0
        call(params, x)
        assert Params.flattens == per_call, f"{attempt}: flattened {Params.flattens} times"


def test_the_gradient_of_a_node_is_a_node_of_gradients():
    x = np.linspace(-1.0, 1.0, 3)
    params = Params(np.full(3, 0.5), np.full(3, 0.1))
    grads = s2s.grad(model)(params, x)
    assert isinstance(grads, Params)
    pre = params.w * x + params.b
    np.testing.assert_allclose(grads.w, x * (1 - np.tanh(pre) ** 2))
    np.testing.assert_allclose(grads.b, 1 - np.tanh(pre) ** 2)


def test_custom_rules_read_nondiff_argnums_as_every_transform_reads_argnums():
    def scaled(k, x):
        return k * x
    custom = s2s.custom_jvp(scaled, nondiff_argnums=0)   # one alone may be bare
    custom.defjvp(lambda k, primals, tangents: (k * primals[0], k * tangents[0]))
    assert custom.nondiff_argnums == (0,)
    np.testing.assert_allclose(s2s.grad(lambda x: custom(3.0, x))(2.0), 3.0)
    with pytest.raises(TypeError):
        s2s.custom_jvp(scaled, nondiff_argnums="k")


# --- NumPy's functions passed to a transform, as JAX takes jax.numpy's -------------------
# Each case is written against a library (`t` = s2s or jax, `np` = numpy or jax.numpy), so
# JAX runs the same expression as the oracle.

M = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
CUBE = np.linspace(-1.0, 1.0, 24).reshape(2, 3, 4)
V = np.linspace(0.1, 0.9, 3)

NUMPY_FUNCTIONS = {
    "vmap(sum)": (lambda t, np: t.vmap(np.sum), (M,)),
    "grad(sum)": (lambda t, np: t.grad(np.sum), (M,)),
    "jit(tanh)": (lambda t, np: t.jit(np.tanh), (M,)),
    "vmap(dot)": (lambda t, np: t.vmap(np.dot), (M, M)),
    "vmap(add, in_axes=(0, None))": (lambda t, np: t.vmap(np.add, in_axes=(0, None)), (M, M[0])),
    "vmap(partial(sum, axis=0))": (lambda t, np: t.vmap(functools.partial(np.sum, axis=0)), (CUBE,)),
    "jit(partial(mean, axis=1))": (lambda t, np: t.jit(functools.partial(np.mean, axis=1)), (CUBE,)),
    "vmap(max)": (lambda t, np: t.vmap(np.max), (M,)),
    "vmap(var)": (lambda t, np: t.vmap(np.var), (M,)),
    "vmap(cumsum)": (lambda t, np: t.vmap(np.cumsum), (M,)),
    "grad(linalg.norm)": (lambda t, np: t.grad(np.linalg.norm), (M,)),
    "value_and_grad(prod)": (lambda t, np: t.value_and_grad(np.prod), (V,)),
    "jacfwd(sin)": (lambda t, np: t.jacfwd(np.sin), (V,)),
    "jacrev(tanh)": (lambda t, np: t.jacrev(np.tanh), (V,)),
    "hessian(prod)": (lambda t, np: t.hessian(np.prod), (V,)),
    "vmap(grad(tanh))": (lambda t, np: t.vmap(t.grad(np.tanh)), (V,)),
    "grad(checkpoint(sin)) in a function": (
        lambda t, np: t.grad(lambda x: np.sum(t.checkpoint(np.sin)(x) * x)), (V,)),
}


@pytest.mark.parametrize("name", NUMPY_FUNCTIONS)
def test_a_numpy_function_passed_to_a_transform_computes_as_jax_numpys(name):
    """On NumPy values (the emitted module), under jit (XLA) and by jit's Python backend,
    which calls the emitted module with the user's signature: NumPy's, whose defaults
    (`keepdims=<no value>`) it could not write before."""
    import jax
    import jax.numpy as jnp
    make, args = NUMPY_FUNCTIONS[name]
    ours, expected = make(s2s, np), make(jax, jnp)(*args)
    for run in (ours, s2s.jit(ours), s2s.jit(ours, backend="python")):
        (got, got_tree), (wanted, wanted_tree) = s2s.tree_flatten(run(*args)), s2s.tree_flatten(expected)
        assert got_tree == wanted_tree
        for g, e in zip(got, wanted, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)
    compile(s2s.emit_python(ours, *args), "<emitted>", "exec")


def test_a_numpy_function_s2s_does_not_implement_is_named_when_passed_to_a_transform():
    """It said "s2s can only stage Python functions, not _ArrayFunctionDispatcher"."""
    for transform in (s2s.vmap, s2s.grad, s2s.jit):
        with pytest.raises(s2s.UnsupportedFunctionError, match=r"np\.lexsort is not supported by s2s"):
            transform(np.lexsort)(M)
