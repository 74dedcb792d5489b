"""grad of realistic functions against autograd, Hessians against jax, and the API's
contracts: symbolic zeros, float0 for integers, has_aux, argnums, errors."""
import re

import numpy as np
import pytest

import s2s
from s2s.eager import emitted_call_args
from s2s.transformed import staged_or_error
from s2s.emit.signature import emitted_signature
from s2s.test_util import check_grads
from tests.frontend import test_realistic as realistic
from tests.helpers import with_numpy

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")


def squared_norm_of(fn):
    """A scalar loss of any function's outputs: the sum of squares of every output leaf."""
    def loss(*args):
        return sum(np.sum(leaf * leaf) for leaf in s2s.tree_leaves(fn(*args)))
    return loss


def float_argnums(args):
    return tuple(i for i, a in enumerate(args)
                 if isinstance(a, (np.ndarray, dict, list)) and all(
                     np.asarray(l).dtype.kind == "f" for l in s2s.tree_leaves(a))
                 and s2s.tree_leaves(a))


# autograd cannot trace these (dataclass/namedtuple pytrees, ops it lacks); s2s's own
# derivative checks (finite differences, jax) cover them below.
NOT_FOR_AUTOGRAD = {"namedtuple_params", "dataclass_module", "cumulative_returns",
                    "integer_and_bool_math", "one_hot_accuracy", "static_shape_branch"}
# autograd cannot trace these (in-place `+=` on an ndarray, transpose(*axes), diagonal of
# a box); jax, running the same source with jax.numpy, is their oracle instead.
JAX_ORACLE = {"power_series_exp", "multi_head_attention", "gp_marginal_likelihood"}
GRAD_CASES = [c for c in realistic.CASES if c[0] not in NOT_FOR_AUTOGRAD and float_argnums(c[2])]
AUTOGRAD_CASES = [c for c in GRAD_CASES if c[0] not in JAX_ORACLE]


def tolerance(args):
    single = any(np.asarray(l).dtype == np.float32 for l in s2s.tree_leaves(args))
    return dict(rtol=2e-5, atol=1e-6) if single else dict(rtol=1e-6, atol=1e-8)


def oracle_grad(name, fn, argnums):
    if name in JAX_ORACLE:
        import jax
        import jax.numpy as jnp
        return jax.grad(squared_norm_of(with_numpy(fn, jnp)), argnums=argnums)
    return autograd.grad(squared_norm_of(with_numpy(fn, anp)), argnum=argnums)


def test_at_least_forty_functions_against_autograd():
    assert len(AUTOGRAD_CASES) >= 40


@pytest.mark.parametrize("name, fn, args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grad_matches_autograd(name, fn, args):
    argnums = float_argnums(args)
    ours = s2s.grad(squared_norm_of(fn), argnums=argnums)(*args)
    theirs = oracle_grad(name, fn, argnums)(*args)
    for o, t in zip(s2s.tree_leaves(ours), s2s.tree_leaves(theirs)):
        np.testing.assert_allclose(o, t, **tolerance(args))


@pytest.mark.parametrize("name, fn, args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_emitted_gradient_module_matches_autograd(name, fn, args):
    argnums = float_argnums(args)
    grad_fn = s2s.grad(squared_norm_of(fn), argnums=argnums)
    source = s2s.emit_python(grad_fn, *args)
    assert "import jax" not in source and "autograd" not in source
    namespace = {}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    staged = staged_or_error(grad_fn, args, {})
    positional, keyword = emitted_call_args(staged, emitted_signature(staged), staged.bind_call(args, {}))
    emitted = namespace[grad_fn.__name__](*positional, **keyword)
    theirs = oracle_grad(name, fn, argnums)(*args)
    for o, t in zip(s2s.tree_leaves(emitted), s2s.tree_leaves(theirs)):
        np.testing.assert_allclose(o, t, **tolerance(args))


# --- second derivatives against jax -------------------------------------------------------

def poly(x):
    return np.sum(x ** 4 - 3 * x ** 2 + x)


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def log_sum_exp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def quadratic_form(x):
    A = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 3.0]])
    return x @ A @ x


def softplus_sum(x):
    return np.sum(np.log1p(np.exp(x)))


def tanh_net(x):
    W = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.3], [-0.5, 0.2, 0.1]])
    return np.sum(np.tanh(W @ np.tanh(W @ x)))


def trig_mix(x):
    return np.sum(np.sin(x) * np.cos(2 * x) + np.sqrt(1 + x ** 2))


def rational(x):
    return np.sum(x / (1 + x ** 2))


def entropy(x):
    p = np.exp(x) / np.sum(np.exp(x))
    return -np.sum(p * np.log(p))


def norm_and_exp(x):
    return np.sqrt(np.sum(x ** 2)) + np.exp(np.mean(x))


HESSIAN_CASES = [poly, rosenbrock, log_sum_exp, quadratic_form, softplus_sum, tanh_net,
                 trig_mix, rational, entropy, norm_and_exp]


@pytest.mark.parametrize("fn", HESSIAN_CASES, ids=[f.__name__ for f in HESSIAN_CASES])
def test_hessian_matches_jax(fn):
    import jax
    import jax.numpy as jnp
    x = np.array([0.3, -0.7, 1.1])
    np.testing.assert_allclose(s2s.hessian(fn)(x), jax.hessian(with_numpy(fn, jnp))(x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fn", HESSIAN_CASES[:5], ids=[f.__name__ for f in HESSIAN_CASES[:5]])
def test_check_grads_second_order(fn):
    check_grads(fn, (np.array([0.3, -0.7, 1.1]),), order=2)


def test_grad_of_grad_of_grad():
    third = s2s.grad(s2s.grad(s2s.grad(lambda x: np.sin(x) * x ** 3)))
    x = 0.4
    expected = -np.cos(x) * x ** 3 - 9 * np.sin(x) * x ** 2 + 18 * np.cos(x) * x + 6 * np.sin(x)
    np.testing.assert_allclose(third(x), expected, rtol=1e-10)


def test_check_grads_catches_a_wrong_rule(monkeypatch):
    from s2s.passes import jvp as jvp_pass
    from s2s.primitives import elementwise as ew
    monkeypatch.setitem(jvp_pass.jvp_rules, ew.sin, lambda p, t: (ew.sin.bind(*p), t[0] * 2.0))
    with pytest.raises(AssertionError):
        check_grads(lambda x: np.sin(x).sum(), (np.array([0.1, 0.2]),), order=1)


# --- API contracts --------------------------------------------------------------------------

def ignores_y(x, y):
    return np.sum(np.tanh(x))


def test_symbolic_zeros_do_no_work_for_an_ignored_argument():
    closed = s2s.make_jaxpr(s2s.grad(ignores_y, argnums=1))(np.ones(3), np.ones(3))
    assert [e.primitive.name for e in closed.eqns] == ["broadcast_in_dim"]
    grads = s2s.grad(ignores_y, argnums=(0, 1))(np.ones(3), np.ones(3))
    np.testing.assert_array_equal(grads[1], np.zeros(3))


def scaled(x, n):
    return np.sum(x) * n


def test_integer_arguments_need_allow_int():
    with pytest.raises(s2s.StagingError, match="'n'"):
        s2s.grad(scaled, argnums=1)(np.ones(3), 2)
    gx, gn = s2s.grad(scaled, argnums=(0, 1), allow_int=True)(np.ones(3), 2)
    assert gn.dtype == s2s.dtypes.float0
    np.testing.assert_array_equal(gx, [2.0, 2.0, 2.0])


def with_aux(x):
    return np.sum(x ** 2), {"norm": np.sqrt(np.sum(x ** 2))}


def test_has_aux_and_value_and_grad():
    x = np.array([3.0, 4.0])
    g, aux = s2s.grad(with_aux, has_aux=True)(x)
    np.testing.assert_allclose(g, 2 * x)
    np.testing.assert_allclose(aux["norm"], 5.0)
    (value, aux), g = s2s.value_and_grad(with_aux, has_aux=True)(x)
    np.testing.assert_allclose(value, 25.0)
    value, g = s2s.value_and_grad(lambda x: np.sum(x ** 3))(x)
    np.testing.assert_allclose(g, 3 * x ** 2)


@pytest.mark.parametrize("fn", [lambda x: x * 2, lambda x: x[:2], lambda x: (x > 0).sum(),
                                lambda x: np.allclose(x, x * 3.0 / 3.0), lambda x: (x.sum(), x.sum())])
def test_grad_of_a_non_scalar_integer_or_boolean_output_is_a_type_error_as_in_jax(fn):
    import jax
    import jax.numpy as jnp
    with pytest.raises(TypeError, match="one scalar") as caught:
        s2s.grad(fn)(np.ones(3))
    assert isinstance(caught.value, s2s.StagingError)   # with the location and help of one
    with pytest.raises(TypeError):
        jax.grad(with_numpy(fn, jnp))(jnp.ones(3))


def quadratic_form_of_a_column(x):
    return x.T @ np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 3.0]]) @ np.sin(x)


def singleton_sum(x):
    return np.sum(x * x, axis=0, keepdims=True)


def two_means(x):
    return np.mean(x ** 2) + np.mean(np.abs(x))


def cumulative_and_reversed(x):
    return np.sum(np.cumsum(x)) + np.sum(x[::-1])


def test_a_gradient_shares_its_cotangent_seed_work():
    """Both parts of a gradient are tidied before they are joined: tidied only once joined,
    the seed's broadcasts (which read literals only, and cse leaves those alone) were
    written once per use, and x * 1 + 1 * x was not x + x (found by review)."""
    for fn, x, want in ((singleton_sum, np.ones((3, 1)), "x_bar = x + x"),
                        (two_means, np.ones((4, 6), np.float32), None),
                        (cumulative_and_reversed, np.ones(3, np.float32), None)):
        source = s2s.emit_python(s2s.grad(fn), x)
        assert want is None or want in source
        assert source.count("np.broadcast_to(") + source.count("np.full(") <= 1, source


@pytest.mark.parametrize("fn, x", [(quadratic_form_of_a_column, np.array([[0.3], [-1.2], [0.8]])),
                                   (singleton_sum, np.array([[0.5, -1.5, 2.0]]).T)])
def test_grad_of_a_one_element_output_is_the_gradient_of_that_element(fn, x):
    """A (1, 1) or (1,) output is a scalar for autograd and NumPy code (`x.T @ A @ x` of a
    column x); JAX refuses it. s2s seeds the backward pass with ones of its shape, so grad
    is jax.grad of the element, on both backends and at second order."""
    import jax
    import jax.numpy as jnp
    element = with_numpy(fn, jnp)
    expected = jax.grad(lambda x: element(x).reshape(()))(x)
    for run in (s2s.grad(fn), s2s.jit(s2s.grad(fn)), s2s.jit(s2s.grad(fn), backend="python")):
        np.testing.assert_allclose(run(x), expected, rtol=1e-12)
    value, gradient = s2s.value_and_grad(fn)(x)
    np.testing.assert_allclose(value, fn(x))
    assert value.shape == fn(x).shape
    np.testing.assert_allclose(gradient, expected, rtol=1e-12)
    hessian = jax.hessian(lambda x: element(x).reshape(()))(x)
    np.testing.assert_allclose(s2s.jacfwd(s2s.grad(fn))(x), hessian, rtol=1e-12)
    np.testing.assert_allclose(s2s.grad(lambda x: np.sum(s2s.grad(fn)(x) ** 2))(x),
                               jax.grad(lambda x: jnp.sum(jax.grad(lambda x: element(x).reshape(()))(x) ** 2))(x),
                               rtol=1e-12)


@pytest.mark.parametrize("fn", [lambda x: x[:2], lambda x: (x[:1] > 0), lambda x: x[:1].astype(int),
                                lambda x: x[:1] * 1j])
def test_grad_refuses_one_element_outputs_only_when_a_scalar_would_be_refused(fn):
    with pytest.raises(TypeError):
        s2s.grad(fn)(np.ones(3))


def squared(z):
    return z * z


def imaginary_sum(x):
    return np.sum(x * 1j)


def holomorphic_mix(z, w):
    return np.sum(np.sin(z) * z ** 3 / (1.0 + z) + z * w + np.exp(w))


def jax_holomorphic_mix(z, w):
    import jax.numpy as jnp
    return jnp.sum(jnp.sin(z) * z ** 3 / (1.0 + z) + z * w + jnp.exp(w))


@pytest.mark.parametrize("transform", [s2s.grad, s2s.value_and_grad])
def test_grad_of_a_complex_output_is_a_type_error_as_in_jax(transform):
    """grad of a complex output returned its real part silently (from the cotangent
    cast back to a real input). It is JAX's TypeError, a compiler error at the `return`
    that says what to write instead."""
    for fn, arg in [(squared, 1.0 + 2.0j), (imaginary_sum, np.ones(2))]:
        with pytest.raises(TypeError) as caught:
            transform(fn)(arg)
        assert isinstance(caught.value, s2s.StagingError)
        message = str(caught.value)
        assert f"{transform.__name__} requires real-valued outputs" in message
        assert f"{fn.__name__} returns complex128" in message
        assert f"test_autodiff.py:{fn.__code__.co_firstlineno + 1}:5" in message and "^^^" in message
        assert "holomorphic=True" in message and "s2s.vjp" in message


def test_holomorphic_needs_complex_inputs_and_outputs():
    with pytest.raises(TypeError, match="requires inputs with complex dtype, but positional "
                                        "argument 0 \\('z'\\) holds float64"):
        s2s.grad(squared, holomorphic=True)(1.5)
    with pytest.raises(TypeError, match="requires inputs with complex dtype, but positional argument 1"):
        s2s.grad(holomorphic_mix, argnums=(0, 1), holomorphic=True)(np.array([1j]), np.ones(1))

    def ignores_z(z, x):
        return np.sum(x)

    with pytest.raises(TypeError, match="requires outputs with complex dtype, but .*ignores_z returns float64"):
        s2s.value_and_grad(ignores_z, holomorphic=True)(np.array([1j]), np.ones(2))


def test_holomorphic_grad_matches_jax_on_both_backends():
    import jax
    z = np.array([0.3 + 0.7j, -1.2 + 0.1j, 2.0 - 0.5j])
    w = np.array([1.0 - 1.0j, 0.5j, -0.25 + 0.0j])
    expected = jax.grad(jax_holomorphic_mix, argnums=(0, 1), holomorphic=True)(z, w)
    derived = s2s.grad(holomorphic_mix, argnums=(0, 1), holomorphic=True)
    for run in (derived, s2s.jit(derived), s2s.jit(derived, backend="python")):
        for got, want in zip(run(z, w), expected):
            assert np.asarray(got).dtype == np.complex128
            np.testing.assert_allclose(got, want, rtol=1e-12)
    value, grads = s2s.value_and_grad(holomorphic_mix, holomorphic=True)(z, w)
    np.testing.assert_allclose(value, jax_holomorphic_mix(z, w), rtol=1e-12)
    np.testing.assert_allclose(grads, expected[0], rtol=1e-12)
    # Second order: f''(z) of a scalar holomorphic function.
    second = s2s.grad(s2s.grad(squared_sine, holomorphic=True), holomorphic=True)
    want = jax.grad(jax.grad(jax_squared_sine, holomorphic=True), holomorphic=True)(0.3 + 0.7j)
    for run in (second, s2s.jit(second), s2s.jit(second, backend="python")):
        np.testing.assert_allclose(run(0.3 + 0.7j), want, rtol=1e-12)


def squared_sine(z):
    return np.sin(z) * np.sin(z) * z


def jax_squared_sine(z):
    import jax.numpy as jnp
    return jnp.sin(z) * jnp.sin(z) * z


def loss_and_prediction(x):
    prediction = np.sin(x)
    return np.sum(prediction ** 2), prediction


def three_outputs(x):
    return [np.sum(x), x, x]


@pytest.mark.parametrize("transform", [s2s.grad, s2s.value_and_grad])
def test_grad_of_a_tuple_returning_function_without_has_aux(transform):
    """grad of `return loss, aux` said only "one scalar floating-point output". It now says
    the function returns a tuple of 2, points at the `return`, and suggests has_aux=True."""
    with pytest.raises(s2s.StagingError) as caught:
        transform(loss_and_prediction)(np.ones(3))
    message = str(caught.value)
    line = loss_and_prediction.__code__.co_firstlineno + 2
    assert f"test_autodiff.py:{line}:5" in message
    assert "return np.sum(prediction ** 2), prediction\n" in message and "^^^^" in message
    assert "loss_and_prediction returns a tuple of 2 values (f64[], f64[3])" in message
    assert f"{transform.__name__}(loss_and_prediction, has_aux=True)" in message
    result = transform(loss_and_prediction, has_aux=True)(np.ones(3))   # what it suggests works
    grads = result[0] if transform is s2s.grad else result[1]
    np.testing.assert_allclose(grads, np.full(3, np.sin(2.0)))   # d/dx sin(x)^2 = sin(2x)


def test_grad_of_a_list_or_dict_returning_function_names_the_container():
    """Only a pair suggests has_aux; other containers get the general advice."""
    with pytest.raises(s2s.StagingError, match="three_outputs returns a list of 3 values") as caught:
        s2s.grad(three_outputs)(np.ones(2))
    assert "has_aux=True)" not in str(caught.value)
    with pytest.raises(s2s.StagingError, match="returns a dict of 1 value "):
        s2s.grad(lambda x: {"loss": np.sum(x)})(np.ones(2))


def test_grad_as_a_decorator():
    @s2s.grad
    def f(x):
        return np.sum(x ** 2)

    @s2s.grad(argnums=1)
    def g(x, y):
        return np.sum(x * y)

    np.testing.assert_allclose(f(np.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(g(np.arange(2.0), np.ones(2)), [0.0, 1.0])


def test_jvp_vjp_linearize_linear_transpose():
    def f(x, y):
        return np.sin(x) * y, np.sum(x)
    x, y = np.array([0.1, 0.2]), np.array([1.0, 2.0])
    tx, ty = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    (out, s), (t_out, t_s) = s2s.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(t_out, np.cos(x) * tx * y + np.sin(x) * ty)
    np.testing.assert_allclose(t_s, 1.0)
    out2, f_jvp = s2s.linearize(f, x, y)
    np.testing.assert_allclose(f_jvp(tx, ty)[0], t_out)
    out3, vjp_fn = s2s.vjp(f, x, y)
    cx, cy = vjp_fn((np.ones(2), 1.0))
    np.testing.assert_allclose(cx, np.cos(x) * y + 1.0)
    np.testing.assert_allclose(cy, np.sin(x))
    transpose = s2s.linear_transpose(lambda v: 3.0 * v + v[::-1], x)
    np.testing.assert_allclose(transpose(np.array([1.0, 10.0]))[0], [13.0, 31.0])


def test_jacobians_match_jax():
    import jax
    import jax.numpy as jnp

    def f(x):
        return np.tanh(x) * np.sum(x ** 2)
    x = np.array([0.1, -0.4, 0.9])
    expected = jax.jacobian(with_numpy(f, jnp))(x)
    np.testing.assert_allclose(s2s.jacrev(f)(x), expected, rtol=1e-10)
    np.testing.assert_allclose(s2s.jacfwd(f)(x), expected, rtol=1e-10)


def test_stop_gradient_blocks_derivatives():
    g = s2s.grad(lambda x: np.sum(s2s.stop_gradient(x) * x))(np.array([2.0, 3.0]))
    np.testing.assert_allclose(g, [2.0, 3.0])


@s2s.custom_jvp
def log1pexp(x):
    return np.log1p(np.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1 - 1 / (1 + np.exp(x)))


def log1pexp_loss(x):
    return np.sum(log1pexp(x))


@s2s.custom_vjp
def clip_gradient(x, lo, hi):
    return x


def clip_fwd(x, lo, hi):
    return x, (lo, hi)


def clip_bwd(res, g):
    lo, hi = res
    return np.clip(g, lo, hi), None, None


clip_gradient.defvjp(clip_fwd, clip_bwd)


def test_custom_jvp_gives_a_stable_gradient_where_autodiff_overflows():
    x = np.array([1.0, 100.0, 1000.0, -30.0])
    g = s2s.grad(log1pexp_loss)(x)
    np.testing.assert_allclose(g, 1 / (1 + np.exp(-np.array([1.0, 100.0, 700.0, -30.0]))),
                               rtol=1e-12, atol=1e-15)
    assert np.all(np.isfinite(g))
    source = s2s.emit_python(s2s.grad(log1pexp_loss), x)
    assert "np.log1p" not in source and "np.exp(x)" in source


def test_custom_jvp_primal_is_inlined_in_emitted_code():
    source = s2s.emit_python(log1pexp_loss, np.ones(2))
    assert "np.log1p(np.exp(x))" in source


def test_custom_vjp_replaces_the_backward_pass():
    def loss(x):
        return np.sum(clip_gradient(x, -1.0, 1.0) * 5.0)
    np.testing.assert_allclose(s2s.grad(loss)(np.ones(3)), [1.0, 1.0, 1.0])


def test_custom_jvp_with_nondiff_argnums_and_defjvps():
    def scale_impl(n, x):
        return x * n
    scale = s2s.custom_jvp(scale_impl, nondiff_argnums=(0,))

    def scale_jvp(n, primals, tangents):
        return scale(n, primals[0]), tangents[0] * (n + 1)   # deliberately not the true rule
    scale.defjvp(scale_jvp)
    g = s2s.grad(lambda x: np.sum(scale(3, x)))(np.ones(2))
    np.testing.assert_allclose(g, [4.0, 4.0])

    sq = s2s.custom_jvp(lambda x, y: x * y)
    sq.defjvps(lambda t, ans, x, y: t * y, lambda t, ans, x, y: t * x)
    np.testing.assert_allclose(s2s.grad(lambda a, b: np.sum(sq(a, b)), argnums=(0, 1))(
        np.array([2.0]), np.array([5.0])), ([5.0], [2.0]))


def test_custom_vjp_with_nondiff_argnums():
    def scaled_impl(k, x):
        return x * k
    scaled_op = s2s.custom_vjp(scaled_impl, nondiff_argnums=(0,))

    def fwd(k, x):
        return x * k, x

    def bwd(k, x, g):
        return (g * k * 10.0,)   # deliberately scaled, so the test sees the custom rule run
    scaled_op.defvjp(fwd, bwd)
    np.testing.assert_allclose(s2s.grad(lambda x: np.sum(scaled_op(2.0, x)))(np.ones(2)), [20.0, 20.0])


def test_custom_vjp_fwd_takes_the_arguments_in_their_order_with_a_later_nondiff_argnum():
    """fwd gets f's arguments as f does (the static `n` last); only bwd gets it first."""
    def scaled_impl(v, u, n):
        return v * u * n
    scaled = s2s.custom_vjp(scaled_impl, nondiff_argnums=(2,))
    scaled.defvjp(lambda v, u, n: (v * u * n, (u, v)),
                  lambda n, res, g: (g * res[0] * n, g * res[1] * n))
    v, u = np.array([1.0, 10.0, 100.0]), np.array([10.0, 20.0, 30.0])
    grads = s2s.grad(lambda v, u: np.sum(scaled(v, u, 3)), argnums=(0, 1))(v, u)
    np.testing.assert_allclose(grads[0], 3 * u)
    np.testing.assert_allclose(grads[1], 3 * v)


def scaled_by_square(a, c):
    return a * c ** 2


def test_custom_rules_compute_with_an_argument_the_passes_made_a_constant():
    """A default argument reaches the call as a constant the jvp pass folds into a literal;
    fwd, bwd and jvp get it as the number it stands for (arithmetic on it works)."""
    by_vjp = s2s.custom_vjp(scaled_by_square)
    by_vjp.defvjp(lambda a, c: (by_vjp(a, c), (a, c)),
                  lambda res, g: (g * res[1] ** 2, 2 * g * res[0] * res[1]))
    by_jvp = s2s.custom_jvp(scaled_by_square)
    by_jvp.defjvp(lambda primals, tangents: (by_jvp(*primals),
                                             tangents[0] * primals[1] ** 2 + 2 * tangents[1] * primals[0] * primals[1]))
    for custom in (by_vjp, by_jvp):
        def loss(a, c=3.0):
            return custom(a, c)
        assert s2s.grad(loss)(2.0) == 9.0


def test_forward_mode_of_custom_vjp_is_a_clear_error():
    with pytest.raises(s2s.S2SError, match="custom_vjp"):
        s2s.jvp(lambda x: clip_gradient(x, -1.0, 1.0), (np.ones(2),), (np.ones(2),))


def test_every_derivative_is_cleaned_by_dce_simplify_and_cse():
    def f(x):
        unused = np.exp(x) * 3.0   # dead: never reaches the output
        return np.sum(np.sin(x) * np.sin(x))
    closed = s2s.make_jaxpr(s2s.grad(f))(np.ones(3))
    names = [e.primitive.name for e in closed.eqns]
    assert "exp" not in names
    assert names.count("sin") == 1 and names.count("cos") == 1


def test_broadcast_chains_fold_into_one_broadcast():
    """Transposed reductions broadcast, expand and broadcast again; simplify folds the chain."""
    from examples import mlp
    rng = np.random.default_rng(0)
    params = mlp.init_params(rng, (6, 5, 3))
    x, y = rng.standard_normal((4, 6)).astype(np.float32), np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    closed = s2s.make_jaxpr(s2s.grad(mlp.loss))(params, x, y)
    made_by_broadcast = {v for e in closed.eqns if e.primitive.name == "broadcast_in_dim" for v in e.outvars}
    for e in closed.eqns:
        if e.primitive.name in ("broadcast_in_dim", "expand_dims"):
            assert e.invars[0] not in made_by_broadcast, f"unfolded chain at {e}"
    g = s2s.grad(mlp.loss)(params, x, y)
    expected = autograd.grad(with_numpy(mlp.loss, anp))(params, x, y)
    for k in params:
        np.testing.assert_allclose(g[k], expected[k], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("fn, expected", [(lambda x: x[0] * 2.0, [2.0, 0.0, 0.0]),
                                          (lambda x: x[0] / 2.0, [0.5, 0.0, 0.0]),
                                          (lambda x: -x[0], [-1.0, 0.0, 0.0])])
def test_a_gradient_from_constants_alone_is_written_as_a_numpy_scalar(fn, expected):
    """The cotangent of x[0] here is `1.0 * 2.0`, literals only: emitted bare it was a
    Python float, and `(1.0 * 2.0)[None]` failed."""
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(s2s.grad(fn)(x), expected)
    np.testing.assert_allclose(s2s.jit(s2s.grad(fn), backend="python")(x), expected)


def rnn_with_bias(W, b, xs):
    h = np.zeros(3)
    for i in range(3):
        h = np.tanh(W @ h + b + xs[i])
    return h.sum()


def test_a_gradient_accumulator_never_starts_as_an_alias_of_unrelated_zeros():
    """Regression: the loop accumulating `b_bar` started from the same zeros as the user's
    `h = np.zeros(3)`; common-subexpression elimination merged them, and the backward loop
    was emitted `W_bar, b_bar, carry = np.full(...), h, h_bar`: `b_bar = h`."""
    args = (np.eye(3) * 0.5, np.full(3, 0.1), np.linspace(-1.0, 1.0, 9).reshape(3, 3))
    source = s2s.emit_python(s2s.grad(rnn_with_bias, argnums=(0, 1)), *args)
    init = next(line for line in source.splitlines() if re.match(r"\s+W_bar\w*, b_bar\w*, carry = ", line))
    assert init.split(" = ")[1].split("  #")[0].split(", h_bar")[0].count("np.full(") == 2, init
    namespace = {}
    exec(compile(source, "<grad_rnn_with_bias>", "exec"), namespace)
    got = namespace["grad_rnn_with_bias"](*args)
    expected = autograd.grad(with_numpy(rnn_with_bias, anp), argnum=(0, 1))(*args)
    for o, t in zip(got, expected):
        np.testing.assert_allclose(o, t, rtol=1e-10)


@pytest.mark.parametrize("fn, args", [(np.sqrt, (4.0,)), (np.tanh, (0.3,)), (np.arctan2, (1.0, 2.0)),
                                      (np.exp, (np.array([0.5, 1.0]),))])
def test_a_numpy_function_is_differentiated_as_passed(fn, args):
    """`s2s.grad(np.sqrt)`, as `jax.grad(jnp.sqrt)`: a NumPy function s2s implements is
    staged by its implementation (its operands only: out=, where= are not arguments)."""
    import jax
    jax_fn = getattr(jax.numpy, fn.__name__)
    argnums = tuple(range(len(args)))
    if np.ndim(args[0]):
        expected = jax.jacrev(jax_fn)(*args)
        for jac in (s2s.jacrev(fn), s2s.jit(s2s.jacfwd(fn))):
            np.testing.assert_allclose(jac(*args), expected, rtol=1e-12)
        return
    expected = jax.grad(jax_fn, argnums=argnums)(*args)
    for grad in (s2s.grad(fn, argnums=argnums), s2s.jit(s2s.grad(fn, argnums=argnums))):
        np.testing.assert_allclose(grad(*args), expected, rtol=1e-12)
    assert "def grad_" in s2s.emit_python(s2s.grad(fn, argnums=argnums), *args)


def _reads_x_after_a_dead_long_loop(x):
    y = x
    for _ in range(3_000_000_000):   # staged (a bounded while) and never read afterwards
        y = y * 2.0
        if np.sum(y) > 10.0:
            break
    return np.sum(np.sin(x))


def test_a_dead_loop_that_reverse_mode_refuses_does_not_stop_grad():
    # Reverse mode refuses a loop bounded by 3e9 steps (a buffer row per step); a dead one
    # is dropped before partial evaluation's rule for loops sees it.
    x = np.array([0.5, 1.0])
    np.testing.assert_allclose(s2s.grad(_reads_x_after_a_dead_long_loop)(x), np.cos(x), rtol=1e-12)


def _with_aux(x, y):
    out = np.sin(x) * y
    return out, {"norm": np.sum(out ** 2), "count": 3}


@pytest.mark.parametrize("name", ["jacrev", "jacfwd", "hessian"])
def test_jacobians_and_the_hessian_take_has_aux_as_jax_does(name):
    import jax
    import jax.numpy as jnp
    x, y = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.5, -2.0])
    ours = getattr(s2s, name)(_with_aux, argnums=(0, 1), has_aux=True)

    def theirs_fn(x, y):
        out = jnp.sin(x) * y
        return out, {"norm": jnp.sum(out ** 2), "count": 3}
    if name == "hessian":   # of a scalar function
        ours = s2s.hessian(lambda x, y: (lambda o, a: (np.sum(o ** 3), a))(*_with_aux(x, y)), argnums=(0, 1),
                           has_aux=True)
        theirs = jax.hessian(lambda x, y: (lambda o, a: (jnp.sum(o ** 3), a))(*theirs_fn(x, y)), argnums=(0, 1),
                             has_aux=True)
    else:
        theirs = getattr(jax, name)(theirs_fn, argnums=(0, 1), has_aux=True)
    expected_jac, expected_aux = theirs(x, y)   # (the suite runs jax with x64: conftest)
    for run in (ours, s2s.jit(ours)):
        jac, aux = run(x, y)
        for got, want in zip(s2s.tree_leaves(jac), jax.tree_util.tree_leaves(expected_jac)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(aux["norm"]), float(expected_aux["norm"]), rtol=1e-12)
        assert int(np.asarray(aux["count"])) == 3


def test_has_aux_needs_a_pair():
    with pytest.raises(s2s.StagingError, match=r"jacrev\(has_aux=True\) needs the function to return a pair"):
        s2s.jacrev(np.sin, has_aux=True)(np.ones(2))


def test_argnums_bare_and_as_a_tuple_of_one_never_share_a_derivative():
    """grad(f, 0) gives the gradient, grad(f, (0,)) a tuple of it, in either order of first
    use (they once shared a cached derivative, and the second got the first's structure)."""
    def f(x):
        return np.sum(np.sin(x) ** 2)
    x = np.linspace(0.1, 1.0, 4)
    for first, second in ((0, (0,)), ((0,), 0)):
        results = [transform(f, argnums)(x) for argnums in (first, second)
                   for transform in (s2s.grad, s2s.jacrev, s2s.jacfwd)]
        for argnums, result in zip([first] * 3 + [second] * 3, results):
            assert isinstance(result, tuple) == isinstance(argnums, tuple)


@pytest.mark.parametrize("name", ["grad", "jacfwd"])
def test_a_numpy_int_argnums_is_bare_as_in_jax(name):
    """argnums=np.int64(1) names one argument, as 1 does in JAX (operator.index): its
    derivative comes bare. (jax.jacrev alone gives a tuple of one for it; s2s's jacrev
    gives it bare too, one rule for every transform and for its cache key.)"""
    def f(x, y):
        return np.sum(np.sin(x) * y)
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = np.linspace(0.1, 1.0, 3)
    ours = getattr(s2s, name)(f, np.int64(1))(x, x)
    theirs = getattr(jax, name)(lambda x, y: jnp.sum(jnp.sin(x) * y), np.int64(1))(x, x)
    assert not isinstance(ours, tuple) and not isinstance(theirs, tuple)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
