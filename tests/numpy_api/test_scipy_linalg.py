"""scipy.linalg in model code, held to SciPy (values, shapes and dtypes on every backend:
eval_jaxpr, the emitted module, jit on XLA and on Python) and to jax.scipy.linalg (jvp and
vjp, and second order), over hypothesis shapes (batched where SciPy batches) and values.

Matrices are made well conditioned (a random matrix plus a multiple of the identity, or
m mᵀ + I for positive definite ones) so that the comparisons test the math, not rounding.
Where SciPy reads one triangle and JAX's Cholesky reads a symmetrized matrix, the model
functions build their symmetric matrix inside, so both differentiate the same function.
"""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest
import scipy.linalg as spla
from hypothesis import example, given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import ShapeError, UnsupportedFunctionError
from tests.helpers import check_derivatives, check_function, check_hessian_on_every_backend

SETTINGS = settings(max_examples=4, deadline=None)   # each example compiles jax's oracle
dims = st.integers(1, 4)
seeds = st.integers(0, 2**32 - 1)
TOLERANCE = dict(rtol=1e-8, atol=1e-9)


def random(shape, seed, scale=1.0):
    return np.random.default_rng(seed).normal(size=shape) * scale


def well_conditioned(shape, seed):
    return random(shape, seed) + 4 * np.eye(shape[-1])


def jax_twin(fn):
    """`fn` (and the functions of this module it calls) with `np` and `spla` read as
    jax.numpy and jax.scipy.linalg: the derivative oracle runs the same source."""
    namespace = dict(fn.__globals__, np=jnp, spla=jax.scipy.linalg)
    for name, value in list(namespace.items()):
        if (isinstance(value, types.FunctionType) and value.__module__ == __name__
                and value.__closure__ is None):
            namespace[name] = types.FunctionType(value.__code__, namespace, name, value.__defaults__)
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def check_against_scipy_and_jax(fn, *args, tolerance=TOLERANCE, derivatives=True):
    """Values as SciPy's on every backend; jvp and vjp as jax's of the same source."""
    check_function(fn, *args, **tolerance)
    got = s2s.jit(fn, backend="python")(*args)
    for g, e in zip(s2s.tree_leaves(got), s2s.tree_leaves(fn(*args))):
        np.testing.assert_allclose(g, e, **tolerance)
        assert np.asarray(g).dtype == np.asarray(e).dtype
    if derivatives:
        check_derivatives(fn, jax_twin(fn), *args, **tolerance)


# Model-code functions, written as a user writes them.

def lower_solve(a, b):
    return spla.solve_triangular(a, b, lower=True)


def upper_transposed_unit_solve(a, b):
    return spla.solve_triangular(a, b, trans="T", unit_diagonal=True)


def positive_definite(m):
    return m @ np.swapaxes(m, -1, -2) + np.eye(m.shape[-1])


def cholesky_solve(m, b):
    return spla.cho_solve(spla.cho_factor(positive_definite(m)), b)


def lower_cholesky_solve(m, b):
    return spla.cho_solve(spla.cho_factor(positive_definite(m), lower=True), b)


def cholesky_factors(m):
    a = positive_definite(m)
    return spla.cholesky(a), spla.cholesky(a, lower=True)


def cholesky_solves_and_factors(m, b):
    return cholesky_solve(m, b), lower_cholesky_solve(m, b), cholesky_factors(m)


def solve_general(a, b):
    return spla.solve(a, b) + spla.solve(a, b, assume_a="gen")


def solve_positive(m, b):
    return spla.solve(positive_definite(m), b, assume_a="pos")


def solve_symmetric(m, b):
    a = m + np.swapaxes(m, -1, -2)
    return spla.solve(a, b, assume_a="sym") + spla.solve(a, b, assume_a="her", lower=True)


def det_and_inv(a):
    return spla.det(a), spla.inv(a)


def solves(a, m, b):
    """Every kind of solve in one function: one jax oracle to compile per example."""
    return solve_general(a, b), solve_positive(m, b), solve_symmetric(a, b), det_and_inv(a)


def sylvester(a, b, q):
    return spla.solve_sylvester(a, b, q)


def sylvester_by_kronecker(a, b, q):
    """jax.scipy.linalg.solve_sylvester has no derivative (its Schur decomposition has
    none): the derivative oracle solves the Kronecker system with jax.numpy."""
    m, n = a.shape[-1], b.shape[-1]
    kron = jnp.kron(a, jnp.eye(n)) + jnp.kron(jnp.eye(m), b.T)
    return jnp.linalg.solve(kron, q.reshape(m * n)).reshape(m, n)


def lu_solves(a, b):
    factors = spla.lu_factor(a)
    return spla.lu_solve(factors, b), spla.lu_solve(factors, b, trans=1), factors[0]


def transposed_lu_solve(a, b):
    return spla.lu_solve(spla.lu_factor(a), b, trans=2)


def banded(ab, b):
    return spla.solve_banded((1, 2), ab, b)


def dense_from_band(ab, lower, upper):
    n = ab.shape[1]
    return sum(np.diag(ab[upper - k, max(k, 0):n + min(k, 0)], k) for k in range(-lower, upper + 1))


def matrix_exponential(a):
    return spla.expm(a)


# ---------------------------------------------------------------------------------------
# Triangular and Cholesky solves


@SETTINGS
@given(dims, st.sampled_from([(), (3,)]), seeds)
def test_solve_triangular_matches_scipy_and_jax(n, columns, seed):
    a, b = random((n, n), seed) + 4 * np.eye(n), random((n,) + columns, seed + 1)
    check_against_scipy_and_jax(lower_solve, a, b)
    check_against_scipy_and_jax(upper_transposed_unit_solve, a, b)


def test_solve_triangular_is_batched_as_scipy():
    a, b = well_conditioned((2, 3, 3), 0), random((2, 3, 2), 1)
    check_against_scipy_and_jax(lower_solve, a, b)


@SETTINGS
@given(dims, st.sampled_from([(), (2,)]), seeds)
def test_cholesky_solves_and_factors_match_scipy_and_jax(n, columns, seed):
    m, b = random((n, n), seed), random((n,) + columns, seed + 1)
    check_against_scipy_and_jax(cholesky_solves_and_factors, m, b)


def test_cho_factor_leaves_the_other_triangle_as_scipy():
    a = np.array([[4.0, 2.0, 0.5], [1.0, 3.0, 1.0], [-0.5, 0.2, 5.0]])   # PD either way

    def factor(a, lower):
        return spla.cho_factor(a, lower=lower)[0]
    for lower in (False, True):
        check_function(factor, a, lower, static_argnums=(1,), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------
# solve (assume_a), det, inv


@SETTINGS
@given(dims, st.sampled_from([(), (2,)]), seeds)
def test_solve_matches_scipy_and_jax(n, columns, seed):
    a, b = well_conditioned((n, n), seed), random((n,) + columns, seed + 1)
    check_against_scipy_and_jax(solves, a, random((n, n), seed + 2), b)


@pytest.mark.parametrize("assume_a", ["gen", "lower triangular", "upper triangular", "diagonal",
                                      "tridiagonal", "banded", "sym", "pos"])
@pytest.mark.parametrize("transposed", [False, True])
def test_solve_reads_what_scipys_assume_a_reads(assume_a, transposed):
    """Values only: jax's solve has no `transposed` and no triangle-reading assume_a."""
    a = random((4, 4), 3) + 6 * np.eye(4)    # not symmetric: each routine reads its part

    def solve_assuming(a, b):
        return spla.solve(a, b, assume_a=assume_a, transposed=transposed)
    check_function(solve_assuming, a, random(4, 4), rtol=1e-10, atol=1e-12)


def test_det_and_inv_are_batched_and_typed_as_scipy():
    check_against_scipy_and_jax(det_and_inv, well_conditioned((2, 3, 3), 5))
    check_function(det_and_inv, np.array([[2, 1], [1, 3]]))                 # int -> float64
    check_function(det_and_inv, well_conditioned((3, 3), 6).astype(np.float32), rtol=1e-5)


# ---------------------------------------------------------------------------------------
# LU


@SETTINGS
@given(dims, st.sampled_from([(), (2,)]), seeds)
def test_lu_factor_and_lu_solve_match_scipy_and_jax(n, columns, seed):
    """Random matrices pivot: the pivots' row swaps are replayed in lu_solve."""
    a, b = random((n, n), seed), random((n,) + columns, seed + 1)
    check_against_scipy_and_jax(lu_solves, a, b)

    def pivots(a):
        return spla.lu_factor(a)[1]
    check_function(pivots, a)


def test_lu_solve_is_batched_as_scipy():
    check_function(lu_solves, random((2, 3, 3), 11), random((2, 3, 2), 12), **TOLERANCE)


def lu_decomposition(a):
    p, l, u = spla.lu(a)
    return p, l, u, spla.lu(a, permute_l=True)


def decompositions(a):
    """What does not depend on the eigen- and singular vectors' signs: values, squares and
    reconstructions."""
    w, v = spla.eigh(a + np.swapaxes(a, -1, -2))
    upper_w = spla.eigh(a + np.swapaxes(a, -1, -2), lower=False, eigvals_only=True)
    u, s, vh = spla.svd(a, full_matrices=False)
    q, r = spla.qr(a, mode="economic")
    return w, v ** 2, upper_w, s, u ** 2, (u * s[..., None, :]) @ vh, q @ r, r ** 2


@SETTINGS
@given(dims, dims, seeds)
def test_lu_matches_scipy_and_jax(m, n, seed):
    check_against_scipy_and_jax(lu_decomposition, random((m, n), seed))


def test_eigh_svd_and_qr_match_scipy_and_jax():
    a = random((3, 3), 13)
    check_against_scipy_and_jax(decompositions, a)
    check_function(decompositions, random((2, 3, 3), 14), **TOLERANCE)

    def full_and_r(a):
        return spla.qr(a)[1] ** 2, spla.qr(a, mode="r")[0] ** 2, spla.svd(a, compute_uv=False)
    check_function(full_and_r, random((4, 3), 15), **TOLERANCE)


# ---------------------------------------------------------------------------------------
# Banded and Sylvester systems


@SETTINGS
@given(st.integers(3, 6), st.sampled_from([(), (2,)]), seeds)
def test_solve_banded_matches_scipy_and_the_dense_solve(n, columns, seed):
    ab = random((4, n), seed)
    ab[2] += 6.0                                      # the main diagonal: row u of ab
    b = random((n,) + columns, seed + 1)
    check_against_scipy_and_jax(banded, ab, b, derivatives=False)

    def dense_solve(ab, b):
        return jnp.linalg.solve(jax_twin(dense_from_band)(ab, 1, 2), b)
    check_derivatives(banded, dense_solve, ab, b, **TOLERANCE)


@SETTINGS
@given(dims, dims, seeds)
def test_solve_sylvester_matches_scipy_and_jax(m, n, seed):
    a, b = well_conditioned((m, m), seed), well_conditioned((n, n), seed + 1)
    q = random((m, n), seed + 2)
    check_against_scipy_and_jax(sylvester, a, b, q, derivatives=False)
    check_derivatives(sylvester, sylvester_by_kronecker, a, b, q, **TOLERANCE)


def test_solve_sylvester_is_batched_and_has_second_derivatives():
    a, b, q = well_conditioned((2, 3, 3), 0), well_conditioned((2, 2, 2), 1), random((2, 3, 2), 2)
    check_function(sylvester, a, b, q, **TOLERANCE)
    a, b, q = a[0], b[0], q[0]

    def loss(a, b, q):
        return np.sum(np.sin(spla.solve_sylvester(a, b, q)))

    def jax_loss(a, b, q):
        return jnp.sum(jnp.sin(sylvester_by_kronecker(a, b, q)))
    check_hessian_on_every_backend(loss, jax_loss, a, b, q, argnums=(0, 1, 2), **TOLERANCE)


# ---------------------------------------------------------------------------------------
# expm


@SETTINGS
@given(dims, st.sampled_from([1e-3, 0.5, 3.0, 40.0]), seeds)
@example(n=1, scale=40.0, seed=65762453)   # jax's expm is 3.3e-8 off exp(38.67) there; SciPy's 5e-17
def test_expm_matches_scipy_and_jax(n, scale, seed):
    """Scales from no squaring to several, where the 1-norm passes θ₁₃ many times over.
    The values and the jvp are held to SciPy's (`expm_frechet` is the exact derivative) at
    1e-8. jax's expm is no such oracle at the largest scale: over 120 random matrices of
    scale 40 its value and jvp were up to 6.4e-7 (relative) from SciPy's, where s2s's were
    within 1.5e-13; there it is held to 1e-6."""
    a = random((n, n), seed, scale)
    tolerance = dict(rtol=1e-8, atol=1e-10)
    check_against_scipy_and_jax(matrix_exponential, a, tolerance=tolerance, derivatives=False)
    tangent = random((n, n), seed + 1)
    value, derivative = s2s.jvp(matrix_exponential, (a,), (tangent,))
    exact_value, exact_derivative = spla.expm_frechet(a, tangent)
    np.testing.assert_allclose(value, exact_value, **tolerance)
    np.testing.assert_allclose(derivative, exact_derivative, rtol=1e-8, atol=1e-10 * np.abs(exact_derivative).max())
    check_derivatives(matrix_exponential, jax_twin(matrix_exponential), a,
                      **(dict(rtol=1e-6, atol=1e-10) if scale == 40.0 else tolerance))


def test_expm_is_batched_typed_and_differentiable_twice_as_scipy_and_jax():
    check_against_scipy_and_jax(matrix_exponential, random((2, 3, 3), 4, 2.0))
    check_function(matrix_exponential, random((3, 3), 5).astype(np.float32), rtol=1e-5, atol=1e-5)
    check_function(matrix_exponential, np.array([[0, 1], [-1, 0]]))          # int -> float64
    check_function(matrix_exponential, np.zeros((3, 3)))

    def loss(a):
        return np.sum(spla.expm(a) ** 2)
    check_hessian_by_differences_of_jax_grad(loss, random((2, 2), 6))


def check_hessian_by_differences_of_jax_grad(loss, a, step=1e-5):
    """s2s.hessian (eager, jitted on XLA and on Python) against central differences of
    jax.grad: jax.hessian of expm alone compiles for ten seconds."""
    grad = jax.jit(jax.grad(jax_twin(loss)))
    columns = []
    for k in range(a.size):
        e = np.zeros(a.size)
        e[k] = step
        e = e.reshape(a.shape)
        columns.append((np.asarray(grad(a + e)) - np.asarray(grad(a - e))) / (2 * step))
    want = np.stack(columns, axis=-1).reshape(a.shape * 2)
    hessian = s2s.hessian(loss)
    for run in (hessian, s2s.jit(hessian), s2s.jit(hessian, backend="python")):
        np.testing.assert_allclose(run(a), want, rtol=1e-6, atol=1e-6)


def test_expm_beyond_its_squarings_is_nan_as_jax():
    huge = np.array([[1e12, 0.0], [0.0, 1.0]])
    assert np.isnan(s2s.jit(matrix_exponential)(huge)).all()
    assert np.isnan(np.asarray(jax.scipy.linalg.expm(huge))).all()


def test_vmap_of_the_solvers_is_the_solver_of_each():
    a, b = well_conditioned((3, 4, 4), 7), random((3, 4), 8)
    ab = random((3, 4, 4), 9) + np.array([0.0, 0.0, 6.0, 0.0])[:, None]
    for fn, args in [(lower_solve, (a, b)), (cholesky_solve, (a, b)), (banded, (ab, b)),
                     (transposed_lu_solve, (a, b)),
                     (matrix_exponential, (a,)), (sylvester, (a, a, a))]:
        got = s2s.vmap(fn)(*args)
        want = np.stack([fn(*[x[i] for x in args]) for i in range(3)])
        np.testing.assert_allclose(got, want, **TOLERANCE)


# ---------------------------------------------------------------------------------------
# Bad inputs


def _raises(error, fn, *args, match):
    with pytest.raises(error, match=match) as info:
        s2s.jit(fn)(*args)
    return info


def test_bad_inputs_get_clear_errors():
    _raises(ShapeError, matrix_exponential, np.ones((2, 3)), match="square")
    _raises(ShapeError, det_and_inv, np.ones(3), match="two-dimensional")
    _raises(ShapeError, lower_solve, np.eye(3), np.ones(4), match="do not align")
    _raises(ShapeError, banded, np.ones((3, 5)), np.ones(5), match="l \\+ u \\+ 1 = 4 rows")
    _raises(ShapeError, sylvester, np.eye(2), np.eye(3), np.ones((3, 2)), match="q m × n")

    def factors_forgotten(a, b):
        return spla.lu_solve(a, b)
    _raises(ShapeError, factors_forgotten, np.eye(3), np.ones(3), match="lu_factor")

    def pivoted(a):
        return spla.qr(a, pivoting=True)
    _raises(UnsupportedFunctionError, pivoted, np.eye(2), match="pivoting")

    def generalized(a, b):
        return spla.eigh(a, b)
    _raises(UnsupportedFunctionError, generalized, np.eye(2), np.eye(2), match="generalized")

    def bad_assumption(a, b):
        return spla.solve(a, b, assume_a="orthogonal")
    _raises(ShapeError, bad_assumption, np.eye(2), np.ones(2), match="assume_a")

    def complex_exponential(a):
        return spla.expm(a * 1j)
    _raises(UnsupportedFunctionError, complex_exponential, np.eye(2), match="complex")


def test_sqrtm_is_refused_with_the_alternative_for_symmetric_matrices():
    """SciPy's sqrtm is complex or real depending on the eigenvalues: refused, and the
    alternative the message names is right for a positive definite matrix."""
    def root(a):
        return spla.sqrtm(a)
    info = _raises(UnsupportedFunctionError, root, np.eye(2), match="depending on the matrix")
    assert "np.linalg.eigh" in str(info.value)

    def root_by_eigh(a):
        w, v = np.linalg.eigh(a)
        return (v * np.sqrt(w)) @ v.T
    a = positive_definite(random((3, 3), 10))
    np.testing.assert_allclose(s2s.jit(root_by_eigh)(a), spla.sqrtm(a), rtol=1e-10)
