"""s2s.autograd.extend, and the primitives a program registers with autograd itself, held
to autograd on the same functions: a primitive is differentiated by its rules (never
through its body) in grad, jvp, vmap, jit and the emitted module, to second order where
the rules are differentiable; rules s2s cannot stage and rules that return the wrong thing
are clear errors at the primitive's call.

Each function is written twice from one maker: with `s2s.autograd.extend` and NumPy, and
with `autograd.extend` and `autograd.numpy`, which s2s stages too (the second form is what
a program written for autograd runs unchanged)."""
import numpy as np
import pytest

import s2s
from s2s.autograd import extend

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
ag_extend = pytest.importorskip("autograd.extend")
ag_fixed_points = pytest.importorskip("autograd.misc.fixed_points")

rng = np.random.default_rng(0)
X = rng.standard_normal(4)
M = rng.standard_normal((3, 4))

# The two APIs: (primitive, defvjp, defjvp, defvjp_argnum, defjvp_argnum, defvjp_argnums, numpy).
S2S = (extend.primitive, extend.defvjp, extend.defjvp, extend.defvjp_argnum, extend.defjvp_argnum,
       extend.defvjp_argnums, np)
AUTOGRAD = (ag_extend.primitive, ag_extend.defvjp, ag_extend.defjvp, ag_extend.defvjp_argnum,
            ag_extend.defjvp_argnum, ag_extend.defvjp_argnums, anp)
APIS = pytest.mark.parametrize("api", [S2S, AUTOGRAD], ids=["s2s.autograd.extend", "autograd.extend"])


def python_backend(fn):
    """`fn` run by its emitted module (s2s.jit's Python backend)."""
    return s2s.jit(fn, backend="python")


# --- a rule that is not the body's derivative: the rule wins -------------------------------

def make_cube(api):
    primitive, defvjp = api[0], api[1]

    @primitive
    def cube(x):
        return x ** 3
    defvjp(cube, lambda ans, x: lambda g: g * 0.0)
    return cube


@APIS
def test_a_zero_vjp_gives_zero_as_autograd_does(api):
    cube = make_cube(api)
    ag_cube = make_cube(AUTOGRAD)

    def plus_x(x):
        return cube(x) + x

    def ag_plus_x(x):
        return ag_cube(x) + x

    assert autograd.grad(ag_plus_x)(2.0) == 1.0
    assert s2s.grad(plus_x)(2.0) == 1.0
    assert s2s.jit(s2s.grad(plus_x))(2.0) == 1.0
    assert python_backend(s2s.grad(plus_x))(2.0) == 1.0
    assert s2s.grad(cube)(2.0) == 0.0
    np.testing.assert_array_equal(s2s.vmap(s2s.grad(plus_x))(X), np.ones(4))
    assert cube(2.0) == 8.0 and s2s.jit(cube)(2.0) == 8.0   # the value is the body's


# --- a rule written with the function's output -------------------------------------------

def make_logsumexp(api):
    primitive, defvjp, xp = api[0], api[1], api[-1]

    @primitive
    def logsumexp(x, axis=None, keepdims=False):
        m = xp.max(x, axis=axis, keepdims=True)
        out = m + xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True))
        return out if keepdims else xp.squeeze(out, axis=axis)

    def logsumexp_vjp(ans, x, axis=None, keepdims=False):
        full = ans if keepdims or axis is None else xp.expand_dims(ans, axis)
        return lambda g: (g if keepdims or axis is None else xp.expand_dims(g, axis)) * xp.exp(x - full)
    defvjp(logsumexp, logsumexp_vjp)
    return logsumexp


def lse_loss_of(logsumexp, xp):
    def lse_loss(m):
        return xp.sum(xp.sin(logsumexp(m * 2.0, axis=1)) ** 2) + logsumexp(m) ** 2
    return lse_loss


@APIS
def test_a_vjp_with_keyword_arguments_matches_autograd_in_every_backend(api):
    loss = lse_loss_of(make_logsumexp(api), api[-1])
    expected = autograd.grad(lse_loss_of(make_logsumexp(AUTOGRAD), anp))(M)
    np.testing.assert_allclose(s2s.grad(loss)(M), expected, rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(loss))(M), expected, rtol=1e-12)
    np.testing.assert_allclose(python_backend(s2s.grad(loss))(M), expected, rtol=1e-12)
    batch = np.stack([M, M + 1.0])
    expected_batch = np.stack([autograd.grad(lse_loss_of(make_logsumexp(AUTOGRAD), anp))(m) for m in batch])
    np.testing.assert_allclose(s2s.vmap(s2s.grad(loss))(batch), expected_batch, rtol=1e-12)


@APIS
def test_second_derivatives_run_the_rule_again(api):
    """Reverse over reverse (autograd's hessian): the output a vjp reads is the primitive's
    own, so its derivative is the rule's too."""
    loss = lse_loss_of(make_logsumexp(api), api[-1])
    expected = autograd.hessian(lse_loss_of(make_logsumexp(AUTOGRAD), anp))(M)
    np.testing.assert_allclose(s2s.jacrev(s2s.jacrev(loss))(M), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.jacrev(s2s.grad(loss)))(M), expected, rtol=1e-10, atol=1e-12)


def test_the_emitted_module_runs_the_rule_not_the_body():
    lse = make_logsumexp(AUTOGRAD)

    def loss(x):
        return lse(x) ** 2
    source = s2s.emit_python(s2s.grad(loss), X)
    assert "np.exp(x - " in source and ".max(" in source   # the vjp's exp(x - ans), the body's max
    assert source.count("np.exp(") == 2                     # once in the body, once in the vjp


# --- jvps: forward mode by them, reverse mode by their transpose -------------------------

def make_softplus(api):
    primitive, defjvp, xp = api[0], api[2], api[-1]

    @primitive
    def softplus(x, scale):
        return xp.log1p(xp.exp(x * scale)) / scale
    defjvp(softplus, lambda g, ans, x, scale: g / (1 + xp.exp(-x * scale)),
           lambda g, ans, x, scale: g * (x / (1 + xp.exp(-x * scale)) - ans) / scale)
    return softplus


def softplus_times_x_of(softplus):
    def softplus_times_x(x, scale):
        return softplus(x, scale) * x
    return softplus_times_x


def softplus_reference(x, scale):
    return np.log1p(np.exp(x * scale)) / scale * x


@APIS
def test_jvps_drive_forward_mode_as_in_autograd(api):
    f = softplus_times_x_of(make_softplus(api))
    ag_f = softplus_times_x_of(make_softplus(AUTOGRAD))
    t = rng.standard_normal(4)
    ag_out, ag_tangent = autograd.make_jvp(lambda xs: ag_f(*xs))((X, 1.5))((t, 0.3))
    out, tangent = s2s.jvp(f, (X, 1.5), (t, 0.3))
    np.testing.assert_allclose(out, ag_out, rtol=1e-13)
    np.testing.assert_allclose(tangent, ag_tangent, rtol=1e-13)
    jacobian = np.stack([autograd.make_jvp(lambda x: ag_f(x, 1.5))(X)(e)[1] for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(s2s.jacfwd(f)(X, 1.5), jacobian, rtol=1e-13)
    np.testing.assert_allclose(s2s.jit(s2s.jacfwd(f))(X, 1.5), jacobian, rtol=1e-13)
    np.testing.assert_allclose(python_backend(s2s.jacfwd(f))(X, 1.5), jacobian, rtol=1e-13)
    batched = s2s.vmap(s2s.jacfwd(f), in_axes=(0, None))(np.stack([X, X]), 1.5)
    np.testing.assert_allclose(batched, np.stack([jacobian, jacobian]), rtol=1e-13)


@APIS
def test_reverse_mode_transposes_the_jvps(api):
    """autograd refuses reverse mode without a vjp; s2s transposes the jvps (linear in g)."""
    f = softplus_times_x_of(make_softplus(api))
    grad = s2s.grad(lambda x, scale: np.sum(f(x, scale)), argnums=(0, 1))(X, 1.5)
    h = 1e-6
    for i, arg in enumerate((X, 1.5)):
        step = np.eye(4) * h if i == 0 else [h]
        fd = [(np.sum(softplus_reference(*[a + s if j == i else a for j, a in enumerate((X, 1.5))]))
               - np.sum(softplus_reference(*[a - s if j == i else a for j, a in enumerate((X, 1.5))]))) / (2 * h)
              for s in step]
        np.testing.assert_allclose(grad[i], fd if i == 0 else fd[0], rtol=1e-7)


def make_scaled(api):
    """A function linear in its first argument: the jvp "same" applies it to the tangent."""
    primitive, defjvp = api[0], api[2]

    @primitive
    def scaled(x, w):
        return x * w
    defjvp(scaled, "same", lambda g, ans, x, w: x * g)
    return scaled


@APIS
def test_a_same_jvp_applies_the_primitive_to_the_tangent(api):
    scaled = make_scaled(api)
    out, tangent = s2s.jvp(lambda x, w: scaled(x, w) ** 2, (X, 3.0), (np.ones(4), 0.5))
    ag_scaled = make_scaled(AUTOGRAD)
    ag_out, ag_tangent = autograd.make_jvp(lambda xs: ag_scaled(*xs) ** 2)((X, 3.0))((np.ones(4), 0.5))
    np.testing.assert_allclose(out, ag_out)
    np.testing.assert_allclose(tangent, ag_tangent)


# --- vjps and jvps both: each mode by its own rule ------------------------------------------

def make_cube_with_both(api):
    """The jvp is the derivative, the vjp is zero: which one a mode runs shows."""
    primitive, defvjp, defjvp = api[:3]

    @primitive
    def cube(x):
        return x ** 3
    defvjp(cube, lambda ans, x: lambda g: g * 0.0)
    defjvp(cube, lambda g, ans, x: g * 3.0 * x ** 2)
    return cube


@APIS
def test_with_both_rules_forward_mode_runs_the_jvp_and_reverse_mode_the_vjp(api):
    cube, ag_cube = make_cube_with_both(api), make_cube_with_both(AUTOGRAD)
    assert autograd.make_jvp(ag_cube)(2.0)(1.0)[1] == 12.0 and autograd.grad(ag_cube)(2.0) == 0.0
    assert s2s.jvp(lambda x: cube(x), (2.0,), (1.0,))[1] == 12.0
    assert s2s.jit(s2s.jacfwd(cube))(2.0) == 12.0
    assert python_backend(s2s.jacfwd(cube))(2.0) == 12.0
    np.testing.assert_array_equal(s2s.vmap(s2s.jacfwd(cube))(X), 3.0 * X ** 2)
    assert s2s.eval_jaxpr(s2s.make_jaxpr(s2s.jacfwd(cube))(2.0), 2.0) == [12.0]   # the reference interpreter
    assert s2s.grad(lambda x: cube(x))(2.0) == 0.0


def make_logsumexp_with_both(api):
    primitive, defvjp, defjvp, xp = api[0], api[1], api[2], api[-1]

    @primitive
    def logsumexp(x):
        m = xp.max(x)
        return m + xp.log(xp.sum(xp.exp(x - m)))
    defvjp(logsumexp, lambda ans, x: lambda g: g * xp.exp(x - ans))
    defjvp(logsumexp, lambda g, ans, x: xp.sum(g * xp.exp(x - ans)))
    return logsumexp


def squared_lse_of(logsumexp):
    def squared_lse(x):
        return logsumexp(x * x) ** 2
    return squared_lse


@APIS
def test_with_both_rules_every_order_and_mode_matches_autograd(api):
    """The Hessian forward over reverse (s2s.hessian: the jvp over what the vjp staged),
    forward over forward, batched and compiled, against autograd's reverse over reverse."""
    f = squared_lse_of(make_logsumexp_with_both(api))
    expected = autograd.hessian(squared_lse_of(make_logsumexp_with_both(AUTOGRAD)))(X)
    for hessian in (s2s.hessian(f), s2s.jacfwd(s2s.jacfwd(f)), s2s.jacrev(s2s.jacfwd(f)),
                    s2s.jit(s2s.hessian(f)), python_backend(s2s.hessian(f))):
        np.testing.assert_allclose(hessian(X), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s2s.vmap(s2s.hessian(f))(np.stack([X, X])), np.stack([expected, expected]),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s2s.jacfwd(s2s.vmap(s2s.grad(f)))(np.stack([X, X]))[0, :, 0], expected,
                               rtol=1e-12, atol=1e-14)


# --- the other ways of giving rules ------------------------------------------------------

def make_product(api):
    """x * y with rules given per argument number (autograd's `_argnum(s)` forms), and
    None for a maker in defvjp (a zero cotangent)."""
    primitive, defvjp, _, defvjp_argnum, defjvp_argnum, defvjp_argnums, _ = api

    @primitive
    def product(x, y):
        return x * y
    defvjp_argnum(product, lambda argnum, ans, args, kwargs: lambda g: g * args[1 - argnum])
    defjvp_argnum(product, lambda argnum, g, ans, args, kwargs: g * args[1 - argnum])

    @primitive
    def product_by_argnums(x, y):
        return x * y
    defvjp_argnums(product_by_argnums, lambda argnums, ans, args, kwargs:
                   lambda g: [g * args[1 - i] for i in argnums])

    @primitive
    def product_with_x_held(x, y):
        return x * y
    defvjp(product_with_x_held, None, lambda ans, x, y: lambda g: g * x)
    return product, product_by_argnums, product_with_x_held


@APIS
def test_argnum_forms_and_none_makers_match_autograd(api):
    for prim, ag_prim in zip(make_product(api), make_product(AUTOGRAD)):
        expected = autograd.grad(lambda x, y: anp.sum(ag_prim(x, y) ** 2), argnum=(0, 1))(X, X[::-1])
        got = s2s.grad(lambda x, y: np.sum(prim(x, y) ** 2), argnums=(0, 1))(X, X[::-1])
        np.testing.assert_allclose(got[0], expected[0])
        np.testing.assert_allclose(got[1], expected[1])
    product = make_product(api)[0]
    ag_product = make_product(AUTOGRAD)[0]
    _, tangent = s2s.jvp(product, (X, 2.0), (np.ones(4), 1.0))
    np.testing.assert_allclose(tangent, autograd.make_jvp(lambda xs: ag_product(*xs))((X, 2.0))((np.ones(4), 1.0))[1])


def make_polar(api):
    """Two outputs: the vjp is given a pair of cotangents."""
    primitive, defvjp, xp = api[0], api[1], api[-1]

    @primitive
    def polar(x, y):
        return xp.sqrt(x * x + y * y), xp.arctan2(y, x)
    defvjp(polar, lambda ans, x, y: lambda g: g[0] * x / ans[0] - g[1] * y / ans[0] ** 2,
           lambda ans, x, y: lambda g: g[0] * y / ans[0] + g[1] * x / ans[0] ** 2)
    return polar


@APIS
def test_a_primitive_with_two_outputs(api):
    polar, ag_polar = make_polar(api), make_polar(AUTOGRAD)
    expected = autograd.grad(lambda x, y: anp.sum(ag_polar(x, y)[0] * anp.cos(ag_polar(x, y)[1])),
                             argnum=(0, 1))(X, M[0])
    got = s2s.grad(lambda x, y: np.sum(polar(x, y)[0] * np.cos(polar(x, y)[1])), argnums=(0, 1))(X, M[0])
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


# --- a fixed-point solver, to second order -------------------------------------------------

@extend.primitive
def fixed_point(f, a, x0, distance, tol):
    """autograd.misc.fixed_points's solver, written for s2s: `f(a)` is the step."""
    step = f(a)
    x, x_prev = step(x0), x0
    while distance(x, x_prev) > tol:
        x, x_prev = step(x), x
    return x


def fixed_point_vjp(ans, f, a, x0, distance, tol):
    """The adjoint is itself a fixed point (of the step's vjp at the solution), solved by
    the same primitive: so its derivatives are by this rule too."""
    def adjoint_step(params):
        a, x_star, x_star_bar = params
        _, step_vjp = s2s.vjp(f(a), x_star)
        return lambda g: step_vjp(g)[0] + x_star_bar
    _, a_vjp = s2s.vjp(lambda a: f(a)(ans), a)
    return lambda g: a_vjp(fixed_point(adjoint_step, (a, ans, g), np.zeros_like(x0), distance, tol))[0]


extend.defvjp(fixed_point, None, fixed_point_vjp, None)


def newton_sqrt_step(a):
    return lambda x: 0.5 * (x + a / x)


def distance(x, y):
    return np.abs(x - y)


def sqrt_by_fixed_point(a):
    return fixed_point(newton_sqrt_step, a, 1.0, distance, 1e-4)


def ag_sqrt_by_fixed_point(a):
    return ag_fixed_points.fixed_point(newton_sqrt_step, a, 1.0, distance, 1e-4)


def test_a_fixed_point_solver_matches_autograds_to_second_order():
    a = 2.0
    assert sqrt_by_fixed_point(a) == ag_sqrt_by_fixed_point(a)
    first, second = autograd.grad(ag_sqrt_by_fixed_point)(a), autograd.grad(autograd.grad(ag_sqrt_by_fixed_point))(a)
    np.testing.assert_allclose(s2s.grad(sqrt_by_fixed_point)(a), first, rtol=1e-14)
    np.testing.assert_allclose(s2s.grad(s2s.grad(sqrt_by_fixed_point))(a), second, rtol=1e-14)
    np.testing.assert_allclose(s2s.jit(s2s.grad(s2s.grad(sqrt_by_fixed_point)))(a), second, rtol=1e-14)
    np.testing.assert_allclose([first, second], [0.5 / np.sqrt(a), -0.25 * a ** -1.5], rtol=1e-9)


@ag_extend.primitive
def ag_square(x):
    return x * x


def ag_square_vjp(ans, x):
    vjp, _ = autograd.make_vjp(lambda y: y * y)(x)   # autograd's tracing, on s2s's staged values
    return vjp


ag_extend.defvjp(ag_square, ag_square_vjp)


def test_a_rule_running_autograds_tracing_is_refused_at_the_call():
    def loss(x):
        return ag_square(x) * 2.0
    with pytest.raises(s2s.UnsupportedFunctionError, match="runs autograd's own code") as error:
        s2s.grad(loss)(1.0)
    assert "return ag_square(x) * 2.0" in str(error.value) and "s2s.autograd.extend.defvjp" in str(error.value)


# --- mistakes ------------------------------------------------------------------------------

def plain_double(x):
    return 2.0 * x


@pytest.mark.parametrize("target", [plain_double, ag_extend.primitive(plain_double)], ids=["function", "autograd"])
@pytest.mark.parametrize("define", [extend.defvjp, extend.defjvp, extend.defvjp_argnum])
def test_rules_need_an_s2s_primitive(define, target):
    with pytest.raises(s2s.StagingError, match="needs a function made with s2s.autograd.extend.primitive"):
        define(target, lambda *args: None)


@extend.primitive
def total(x):
    return np.sum(x ** 2)


extend.defvjp(total, lambda ans, x: lambda g: g * 2.0 * x[:2])   # one element short


@ag_extend.primitive
def ag_total(x):
    return anp.sum(x ** 2)


ag_extend.defvjp(ag_total, lambda ans, x: lambda g: (g * 2.0 * x, g))   # a pair for one array


@extend.primitive
def product_without_y_rule(x, y):
    return x * y


extend.defvjp(product_without_y_rule, lambda ans, x, y: lambda g: g * y)


@extend.primitive
def undefined_derivative(x):
    return x * 2.0


@pytest.mark.parametrize("loss, args, error, message", [
    (lambda x: total(x) * 2.0, (X,), s2s.ShapeError, r"the vjp of total returns shape \(2,\) for argument 0, "
                                                     r"which has shape \(4,\)"),
    (lambda x: ag_total(x) * 2.0, (X,), s2s.StagingError, "the vjp of ag_total returns .* for argument 0"),
    (lambda x, y: product_without_y_rule(x, y), (1.0, 2.0), s2s.StagingError,
     "product_without_y_rule has no rule for its argument 1"),
    (lambda x: undefined_derivative(x), (1.0,), s2s.StagingError, "undefined_derivative has no vjp"),
], ids=["shape", "structure", "missing maker", "no rules"])
def test_a_rule_returning_the_wrong_thing_is_an_error_at_the_call(loss, args, error, message):
    with pytest.raises(error, match=message) as raised:
        s2s.grad(loss, argnums=tuple(range(len(args))))(*args)
    assert raised.value.where is not None and raised.value.where.line > 0
    assert "lambda" in raised.value.where.source_excerpt()


@APIS
def test_forward_mode_without_a_jvp_is_refused_as_autograd_refuses_it(api):
    cube = make_cube(api)
    with pytest.raises(s2s.StagingError, match=r"forward-mode differentiation .*\.cube is not supported") as error:
        s2s.jvp(lambda x: cube(x), (2.0,), (1.0,))
    assert "defjvp" in str(error.value)


# --- rules given later are seen --------------------------------------------------------

@pytest.mark.parametrize("api", [S2S, AUTOGRAD], ids=["s2s.autograd.extend", "autograd.extend"])
def test_new_rules_stage_again(api):
    cube = make_cube(api)

    def plus_x(x):
        return cube(x) + x
    grad, jitted = s2s.grad(plus_x), s2s.jit(s2s.grad(plus_x))
    assert grad(2.0) == jitted(2.0) == 1.0
    api[1](cube, lambda ans, x: lambda g: g * 3.0 * x ** 2)
    assert grad(2.0) == jitted(2.0) == 13.0


def test_the_hessian_of_a_primitive_with_only_a_vjp_is_autograds():
    """s2s.autograd.hessian is reverse over reverse, as autograd's: a vjp-only primitive has one."""
    from s2s.autograd import hessian as s2s_hessian
    from s2s.autograd.extend import defvjp as s2s_defvjp, primitive as s2s_primitive
    import autograd
    from autograd.extend import defvjp as ag_defvjp, primitive as ag_primitive

    def make(primitive, defvjp):
        @primitive
        def softplus(x):
            return np.log1p(np.exp(x))
        defvjp(softplus, lambda ans, x: lambda g: g / (1.0 + np.exp(-x)))

        def loss(x):
            return np.sum(softplus(x) * x)
        return loss
    x = np.array([0.3, -1.2, 2.0])
    ours = s2s_hessian(make(s2s_primitive, s2s_defvjp))(x)
    theirs = autograd.hessian(make(ag_primitive, ag_defvjp))(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
