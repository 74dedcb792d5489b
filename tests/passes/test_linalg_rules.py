"""Derivative rules of dot_general, cholesky, triangular_solve and lu, held to jax.

Each test differentiates a function written with the NumPy surface (or binding a primitive
directly, for the forms NumPy has no name for) and compares jvp and vjp with jax's on the
same math in jax.numpy / jax.lax.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import s2s
from s2s.passes.transpose import NonLinearEquationError, transpose_jaxpr
from s2s.primitives import linalg as la
from tests.helpers import check_derivatives
from tests.primitives.linalg.test_contraction import dot_problems

SETTINGS = settings(max_examples=10, deadline=None)


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def spd(*shape, seed=0):
    """Symmetric positive definite, well conditioned: x xᵀ + n I."""
    x = rand(*shape, seed=seed)
    n = shape[-1]
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n)


def well_conditioned(*shape, seed=0):
    """A random matrix plus a multiple of the identity: far from singular."""
    n = shape[-1]
    return rand(*shape, seed=seed) + 2 * n ** 0.5 * np.eye(n)


# ---------------------------------------------------------------------------------------
# dot_general through the NumPy products


def matmul(a, b):
    return a @ b


def dot(a, b):
    return np.dot(a, b)


def outer(a, b):
    return np.outer(a, b)


def einsum_ij_kj(a, b):
    return np.einsum("ij,kj->ik", a, b)


def einsum_batched(a, b):
    return np.einsum("bij,bkj->bik", a, b)


def einsum_ji_jk(a, b):
    return np.einsum("ji,jk->ik", a, b)


def tensordot_2(a, b):
    return np.tensordot(a, b, axes=2)


def tensordot_pairs(a, b):
    return np.tensordot(a, b, axes=([1, 0], [0, 2]))


PRODUCTS = [
    (matmul, jnp.matmul, (3, 4), (4, 2)),          # a @ b
    (matmul, jnp.matmul, (3, 4), (4,)),            # matrix @ vector
    (matmul, jnp.matmul, (4,), (4, 2)),            # vector @ matrix
    (matmul, jnp.matmul, (4,), (4,)),              # inner product
    (matmul, jnp.matmul, (2, 3, 4), (2, 4, 5)),    # batched
    (matmul, jnp.matmul, (2, 3, 4), (4, 5)),       # batch @ matrix
    (matmul, jnp.matmul, (2, 3, 4), (4,)),         # batch @ vector
    (dot, jnp.dot, (2, 3, 4), (4, 5)),
    (outer, jnp.outer, (3,), (4,)),
    (einsum_ij_kj, lambda a, b: jnp.einsum("ij,kj->ik", a, b), (3, 4), (5, 4)),
    (einsum_ji_jk, lambda a, b: jnp.einsum("ji,jk->ik", a, b), (4, 3), (4, 5)),
    (einsum_batched, lambda a, b: jnp.einsum("bij,bkj->bik", a, b), (2, 3, 4), (2, 5, 4)),
    (tensordot_2, lambda a, b: jnp.tensordot(a, b, axes=2), (2, 3, 4), (3, 4, 2)),
    (tensordot_pairs, lambda a, b: jnp.tensordot(a, b, axes=([1, 0], [0, 2])),
     (3, 4, 2), (4, 5, 3)),
]


@pytest.mark.parametrize("fn, jax_fn, lshape, rshape", PRODUCTS,
                         ids=[f"{p[0].__name__}-{p[2]}-{p[3]}" for p in PRODUCTS])
def test_products(fn, jax_fn, lshape, rshape):
    check_derivatives(fn, jax_fn, rand(*lshape, seed=1), rand(*rshape, seed=2))


def test_product_with_one_constant_operand():
    w = rand(4, 2, seed=3)

    def f(x):
        return x @ w
    check_derivatives(f, lambda x: x @ w, rand(3, 4))


# ---------------------------------------------------------------------------------------
# dot_general with any dimension numbers, bound directly


def _dot(dn, preferred=None):
    def f(a, b):
        return la.dot_general.bind(a, b, dimension_numbers=dn, preferred_element_type=preferred)
    return f


def _jax_dot(dn, preferred=None):
    return lambda a, b: jax.lax.dot_general(a, b, dn, preferred_element_type=preferred)


@SETTINGS
@given(dot_problems())
def test_dot_general_any_dimension_numbers(problem):
    lhs, rhs, dn = problem
    lhs = lhs + rand(*lhs.shape, seed=4)   # not just small integers
    check_derivatives(_dot(dn), _jax_dot(dn), lhs, rhs)


@SETTINGS
@given(dot_problems(dtype=np.float32))
def test_dot_general_preferred_element_type(problem):
    lhs, rhs, dn = problem
    f64 = np.dtype(np.float64)
    check_derivatives(_dot(dn, f64), _jax_dot(dn, jnp.float64), lhs, rhs, rtol=1e-5, atol=1e-5)


def _transposed_product_source(fn, *args) -> str:
    """The emitted backward pass of fn: (cotangent of the output) -> cotangents of args."""
    from s2s.emit.python import emit_jaxpr_source
    closed = s2s.make_jaxpr(fn)(*args)
    linear = transpose_jaxpr(closed, [True, False])    # a linear, b a residual
    rhs_linear = transpose_jaxpr(closed, [False, True])
    return emit_jaxpr_source(linear, "a_bar") + emit_jaxpr_source(rhs_linear, "b_bar")


def test_transposed_products_read_as_matrix_products():
    source = _transposed_product_source(matmul, rand(3, 4), rand(4, 2))
    assert "@ b.T" in source and "a.T @" in source
    assert "np.einsum" not in source and "np.transpose" not in source
    source = _transposed_product_source(matmul, rand(2, 3, 4), rand(2, 4, 5))
    assert "@ b.mT" in source and "a.mT @" in source
    assert "np.einsum" not in source and "np.transpose" not in source


# ---------------------------------------------------------------------------------------
# cholesky


def cholesky(a):
    return np.linalg.cholesky(a)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 4)])
def test_cholesky(shape):
    check_derivatives(cholesky, jnp.linalg.cholesky, spd(*shape, seed=5))


# ---------------------------------------------------------------------------------------
# triangular_solve


FLAGS = list(itertools.product([True, False], repeat=4))


@pytest.mark.parametrize("left_side, lower, transpose_a, unit_diagonal", FLAGS)
@pytest.mark.parametrize("batch", [(), (2,)])
def test_triangular_solve(left_side, lower, transpose_a, unit_diagonal, batch):
    flags = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                 unit_diagonal=unit_diagonal)

    def solve(a, b):
        return la.triangular_solve.bind(a, b, **flags)

    def jax_solve(a, b):
        return jax.lax.linalg.triangular_solve(a, b, **flags)

    m, n = 3, 2
    a = well_conditioned(*batch, m if left_side else n, m if left_side else n, seed=6)
    b = rand(*batch, m, n, seed=7)
    check_derivatives(solve, jax_solve, a, b)


def test_solve_triangular_as_scipy_spells_it():
    def solve(a, b):
        return la.triangular_solve.bind(a, b, left_side=True, lower=True, transpose_a=False,
                                        unit_diagonal=False)

    def jax_solve(a, b):
        return jax.scipy.linalg.solve_triangular(a, b, lower=True)
    check_derivatives(solve, jax_solve, well_conditioned(4, 4, seed=8), rand(4, 3, seed=9))


# ---------------------------------------------------------------------------------------
# lu and the np.linalg functions built on it


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 2, 3)])
def test_lu_factor(shape):
    def packed_factor(a):
        return la.lu.bind(a)[0]

    check_derivatives(packed_factor, lambda a: jax.lax.linalg.lu(a)[0], rand(*shape, seed=10))


def test_lu_integer_outputs_have_zero_tangents():
    def all_outputs(a):
        lu, pivots, permutation = la.lu.bind(a)
        return lu, pivots, permutation

    a = rand(3, 3, seed=11)
    (_, pivots, permutation), (_, t_pivots, t_permutation) = s2s.jvp(all_outputs, (a,), (a,))
    assert t_pivots.shape == pivots.shape and t_permutation.shape == permutation.shape
    assert t_pivots.dtype == jax.dtypes.float0 and t_permutation.dtype == jax.dtypes.float0


def solve(a, b):
    return np.linalg.solve(a, b)


def inv(a):
    return np.linalg.inv(a)


def det(a):
    return np.linalg.det(a)


def slogdet(a):
    sign, logabsdet = np.linalg.slogdet(a)
    return logabsdet


@pytest.mark.parametrize("bshape", [(3,), (3, 2)])
def test_solve(bshape):
    check_derivatives(solve, jnp.linalg.solve, well_conditioned(3, 3, seed=12),
                      rand(*bshape, seed=13))


@pytest.mark.parametrize("fn, jax_fn", [(inv, jnp.linalg.inv), (det, jnp.linalg.det),
                                        (slogdet, lambda a: jnp.linalg.slogdet(a)[1])],
                         ids=["inv", "det", "slogdet"])
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)])
def test_inverse_and_determinants(fn, jax_fn, shape):
    check_derivatives(fn, jax_fn, well_conditioned(*shape, seed=14))


# ---------------------------------------------------------------------------------------
# A Gaussian process's negative log-likelihood: cholesky, two solves and a log-determinant


def gp_nll(log_params, x, y):
    amplitude, length_scale, noise = np.exp(log_params[0]), np.exp(log_params[1]), \
        np.exp(log_params[2])
    sq_dist = (x[:, None] - x[None, :]) ** 2
    k = amplitude * np.exp(-0.5 * sq_dist / length_scale ** 2) + noise * np.eye(x.shape[0])
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(k, y)
    log_det = 2 * np.sum(np.log(np.diagonal(chol)))
    return 0.5 * y @ alpha + 0.5 * log_det + 0.5 * x.shape[0] * np.log(2 * np.pi)


def jax_gp_nll(log_params, x, y):
    amplitude, length_scale, noise = jnp.exp(log_params)
    sq_dist = (x[:, None] - x[None, :]) ** 2
    k = amplitude * jnp.exp(-0.5 * sq_dist / length_scale ** 2) + noise * jnp.eye(x.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jnp.linalg.solve(k, y)
    log_det = 2 * jnp.sum(jnp.log(jnp.diagonal(chol)))
    return 0.5 * y @ alpha + 0.5 * log_det + 0.5 * x.shape[0] * jnp.log(2 * jnp.pi)


def test_gaussian_process_negative_log_likelihood_gradient():
    x = np.linspace(0.0, 3.0, 6)
    y = np.sin(x) + 0.1 * rand(6, seed=15)
    log_params = np.array([0.1, -0.3, -1.5])
    for argnums in (0, (0, 1, 2)):
        got = s2s.grad(gp_nll, argnums=argnums)(log_params, x, y)
        expected = jax.grad(jax_gp_nll, argnums=argnums)(log_params, x, y)
        for g, e in zip(s2s.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-10)
    check_derivatives(gp_nll, jax_gp_nll, log_params, x, y)


# ---------------------------------------------------------------------------------------
# solve, inv, det and slogdet: textbook derivatives, on both backends


def det_sum(a):
    return np.sum(np.linalg.det(a))


def logabsdet_sum(a):
    sign, logabsdet = np.linalg.slogdet(a)
    return np.sum(logabsdet)


def inv_squares(a):
    return np.sum(np.linalg.inv(a) ** 2)


def solve_squares(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


JAX_LOSSES = {
    det_sum: lambda a: jnp.sum(jnp.linalg.det(a)),
    logabsdet_sum: lambda a: jnp.sum(jnp.linalg.slogdet(a)[1]),
    inv_squares: lambda a: jnp.sum(jnp.linalg.inv(a) ** 2),
    solve_squares: lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2),
}


def emitted_gradient(fn, *args):
    return s2s.emit_python(s2s.grad(fn, argnums=tuple(range(len(args)))), *args)


def test_linalg_gradients_read_like_the_textbook():
    """grad(det) was ~15 lines of LU, cumulative products over the padded diagonal of U and
    scatters; each gradient is now the formula, one solve with Aᵀ (A⁻ᵀ = solve(Aᵀ, I))."""
    a, b = well_conditioned(3, 3, seed=20), rand(3, 2, seed=21)
    expected = {
        # d det(A) / dA = det(A) A⁻ᵀ
        det_sum: "a_bar = rt.solve(a.T, np.broadcast_to(np.linalg.det(a), (3, 3)) * np.eye(3, dtype=np.float64))",
        # d log|det A| / dA = A⁻ᵀ
        logabsdet_sum: "a_bar = rt.solve(a.T, np.eye(3, dtype=np.float64))",
        # X = A⁻¹: Ā = −A⁻ᵀ X̄ Xᵀ
        inv_squares: "a_bar = -rt.solve(a.T, 2.0 * solve_a) @ solve_a.T",
        # x = A⁻¹ b: b̄ = A⁻ᵀ x̄, Ā = −b̄ xᵀ
        solve_squares: "a_bar = -b_bar @ solve_a.T",
    }
    for fn, line in expected.items():
        source = emitted_gradient(fn, a, b) if fn is solve_squares else emitted_gradient(fn, a)
        assert line in source, source
        assert "rt.lu" not in source and "triangular_solve" not in source, source
        assert "cumprod" not in source and "scatter_add" not in source, source
    source = emitted_gradient(solve_squares, a, b)
    assert "b_bar = rt.solve(a.T, 2.0 * solve_a)" in source, source


def central_differences(fn, args, index, eps=1e-6):
    """d fn / d args[index], one element at a time (float64)."""
    x = args[index]
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        plus = fn(*args[:index], x + step, *args[index + 1:])
        minus = fn(*args[:index], x - step, *args[index + 1:])
        grad[i] = (plus - minus) / (2 * eps)
    return grad


BACKENDS = {
    "eager": lambda g: g,
    "xla": s2s.jit,
    "python": lambda g: s2s.jit(g, backend="python"),
}


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2 ** 16), n=st.integers(1, 4), batch=st.sampled_from([(), (2,)]),
       fn=st.sampled_from(list(JAX_LOSSES)))
def test_linalg_gradients_match_jax_and_finite_differences(seed, n, batch, fn):
    """On random well-conditioned (stacks of) matrices, on each backend."""
    a = well_conditioned(*batch, n, n, seed=seed)
    args = (a, rand(*batch, n, 2, seed=seed + 1)) if fn is solve_squares else (a,)
    argnums = tuple(range(len(args)))
    expected = jax.grad(JAX_LOSSES[fn], argnums=argnums)(*args)
    # Central differences of step 1e-6 lose about |f| 1e-10 to rounding: their tolerance
    # grows with the loss (a 4x4 determinant's reaches hundreds).
    differences_atol = 1e-7 * max(1.0, abs(float(fn(*args))))
    for name, backend in BACKENDS.items():
        got = backend(s2s.grad(fn, argnums=argnums))(*args)
        for i, (g, e) in enumerate(zip(got, expected)):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-9, atol=1e-11,
                                       err_msg=f"{name} backend, argument {i}")
            np.testing.assert_allclose(np.asarray(g), central_differences(fn, args, i),
                                       rtol=1e-6, atol=differences_atol, err_msg=f"{name}, differences")


def squared_det_gradient(m):
    return np.sum(s2s.grad(det)(m) ** 2)


SECOND_ORDER = {
    "hessian of det": (s2s.hessian(det), jax.hessian(jnp.linalg.det)),
    "hessian of log|det|": (s2s.hessian(logabsdet_sum), jax.hessian(JAX_LOSSES[logabsdet_sum])),
    "grad of grad of det": (s2s.grad(squared_det_gradient),
                            jax.grad(lambda m: jnp.sum(jax.grad(jnp.linalg.det)(m) ** 2))),
}


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS)
@pytest.mark.parametrize("case", SECOND_ORDER.values(), ids=SECOND_ORDER)
def test_second_derivatives_of_det_and_slogdet(case, backend):
    """The rules are written with solve and det, which have rules: higher orders hold."""
    derivative, jax_derivative = case
    a = well_conditioned(3, 3, seed=22)
    np.testing.assert_allclose(np.asarray(backend(derivative)(a)), jax_derivative(a),
                               rtol=1e-9, atol=1e-11)


def test_solve_transposes_only_in_b():
    """solve is not linear in its matrix: transposing it there is refused, not miscomputed."""
    a = well_conditioned(3, 3, seed=23)
    with pytest.raises(NonLinearEquationError, match="linear in b only"):
        s2s.linear_transpose(lambda m: np.linalg.solve(m, np.ones(3)), a)(np.ones(3))


def test_solve_of_a_singular_matrix_is_inf_or_nan_on_both_backends():
    """rt.solve falls back to LU where np.linalg.solve raises, as XLA gives inf/nan."""
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    for backend in (lambda f: s2s.jit(f, backend="python"), s2s.jit):
        x = np.asarray(backend(solve)(singular, np.ones(2)))
        assert not np.all(np.isfinite(x))
