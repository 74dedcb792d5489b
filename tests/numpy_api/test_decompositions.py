"""np.linalg's decompositions and what is built on them, held to NumPy (values, shapes and
dtypes on every backend: eval_jaxpr, the emitted module, jit on XLA and on Python) and to
jax (jvp and vjp, and second order for eigh and svd).

Eigenvectors and singular vectors have a sign freedom (and jaxlib's LAPACK may choose
other signs than NumPy's), so the functions tested return what does not depend on it:
values, squared vectors, reconstructions, losses such as sum(w) + sum(v**2 * c).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import s2s
from s2s.errors import S2SError, ShapeError, UnsupportedFunctionError
from s2s.numpy_api import decompositions as D
from tests.helpers import check_derivatives, check_numpy_and_jax, with_numpy
from tests.strategies import examples

SETTINGS = examples(3, 15)
batches = st.sampled_from([(), (2,), (2, 1)])
dims = st.integers(1, 4)
seeds = st.integers(0, 2**32 - 1)
value_dtypes = st.sampled_from([np.float64, np.float32, np.int64])
WEIGHTS = np.linspace(-1.0, 2.0, 16).reshape(4, 4)


def tolerance(dtype):
    return dict(rtol=5e-4, atol=5e-4) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9)


def random(shape, dtype, seed):
    a = np.random.default_rng(seed).normal(size=shape) * 2
    return np.round(a).astype(dtype) if np.dtype(dtype).kind == "i" else a.astype(dtype)


def symmetric(shape, dtype, seed):
    a = random(shape, dtype, seed)
    return a + np.swapaxes(a, -1, -2)


def check(fn, *args, dtype=np.float64):
    """Values on every backend; derivatives too where jax's and ours are float64."""
    check_numpy_and_jax(fn, *args, derivatives=dtype == np.float64, **tolerance(dtype))


# ---------------------------------------------------------------------------------------
# eigh, eigvalsh


def eigh_invariants(a):
    w, v = np.linalg.eigh(a)
    return w, v * v, (v * w[..., None, :]) @ np.swapaxes(v, -1, -2)


def eigh_loss(a):
    w, v = np.linalg.eigh(a)
    return np.sum(w) + np.sum(v**2 * WEIGHTS) + np.sum(w**3) / 10


def read_lower(a):
    """The symmetric matrix np.linalg.eigh(a) reads: a's lower triangle, mirrored."""
    return np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)


def read_upper(a):
    return np.triu(a) + np.swapaxes(np.triu(a, 1), -1, -2)


def eigh_invariants_as_read(a):
    return eigh_invariants(read_lower(a))


def eigh_loss_as_read(a):
    return eigh_loss(read_lower(a))


def eigvalsh_upper(a):
    return np.linalg.eigvalsh(a, UPLO="U")


def eigvalsh_upper_as_read(a):
    return np.linalg.eigvalsh(read_upper(a), UPLO="U")


@SETTINGS
@given(batches, dims, value_dtypes, seeds)
def test_eigh(batch, n, dtype, seed):
    """Values against NumPy. Derivatives against jax's of the symmetric matrix NumPy's
    eigh reads (one triangle, mirrored): jax's own eigh symmetrizes (A + Aᵀ)/2, a different
    function of a matrix that is not symmetric, so the tangents (not symmetric) differ."""
    a = symmetric((*batch, n, n), dtype, seed)
    for fn, as_read in ((eigh_invariants, eigh_invariants_as_read),
                        (eigvalsh_upper, eigvalsh_upper_as_read)):
        check_numpy_and_jax(fn, a, derivatives=False, **tolerance(dtype))
        if dtype == np.float64:
            check_derivatives(fn, with_numpy(as_read, jnp), a, **tolerance(dtype))


def test_eigh_of_a_matrix_that_is_not_symmetric_differentiates_the_triangle_it_reads():
    """A port of autograd's tests found the derivative of (A + Aᵀ)/2 (JAX's) served for
    NumPy's value, which reads one triangle: held to finite differences now."""
    from s2s.test_util import check_grads
    a = random((4, 4), np.float64, 42)
    check_grads(lambda a: np.linalg.eigh(a), (a,), order=2)
    check_grads(lambda a: np.linalg.eigh(a, "U"), (a,), order=2)
    check_grads(lambda a: np.linalg.eigvalsh(a), (random((2, 3, 3), np.float64, 7),), order=2)
    upper_changes = np.zeros((4, 4))
    upper_changes[0, 3] = 1.0    # the lower-triangle eigh does not see it: tangent 0
    _, (w_dot, v_dot) = s2s.jvp(lambda a: np.linalg.eigh(a), (a,), (upper_changes,))
    assert not np.any(w_dot) and not np.any(v_dot)


def test_eigh_result_names_and_upper_triangle():
    a = symmetric((3, 3), np.float64, 1)
    a[0, 2] = 50.0                                   # only the upper triangle changes

    def f(a):
        result = np.linalg.eigh(a, UPLO="U")
        return result.eigenvalues, np.linalg.eigvalsh(a)
    # jax symmetrizes the input, NumPy reads one triangle: values only (derivatives are
    # those of the symmetric matrix, as jax's, tested above).
    check_numpy_and_jax(f, a, derivatives=False)
    # The eigenvectors themselves, signs included: LAPACK reads the triangle NumPy's does.
    check_numpy_and_jax(lambda a: tuple(np.linalg.eigh(a, "U")), symmetric((4, 4), np.float64, 5),
                        derivatives=False)


def test_eigh_second_order_against_jax():
    a = symmetric((4, 4), np.float64, 3)
    np.testing.assert_allclose(s2s.hessian(eigh_loss)(a), jax.hessian(with_numpy(eigh_loss_as_read, jnp))(a),
                               rtol=1e-7, atol=1e-8)


def test_repeated_eigenvalues_as_jax():
    """Eigenvalues keep finite derivatives; eigenvectors of a repeated eigenvalue get
    non-finite tangents, in the same places as jax's."""
    a = np.diag([1.0, 1.0, 2.0])
    grad = s2s.grad(lambda a: np.sum(np.linalg.eigvalsh(a) * np.array([1.0, 2.0, 3.0])))(a)
    expected = jax.grad(lambda a: jnp.sum(jnp.linalg.eigvalsh(a) * jnp.array([1.0, 2.0, 3.0])))(a)
    np.testing.assert_allclose(grad, expected)
    tangent = np.arange(9.0).reshape(3, 3)
    _, v_dot = s2s.jvp(lambda a: np.linalg.eigh(a)[1], (a,), (tangent,))
    _, j_v_dot = jax.jvp(lambda a: jnp.linalg.eigh(a)[1], (a,), (tangent,))
    np.testing.assert_array_equal(np.isfinite(v_dot), np.isfinite(j_v_dot))
    assert not np.isfinite(v_dot).all()


# ---------------------------------------------------------------------------------------
# svd


def svd_invariants(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u * u, s, vh * vh, (u * s[..., None, :]) @ vh


def svd_loss(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.sum(s**2) + np.sum(s) + np.sum(np.abs(u[..., 0]) * 2) + np.sum(vh[..., 0, :] ** 2)


def full_svd_shapes_and_values(a):
    u, s, vh = np.linalg.svd(a)
    k = s.shape[-1]
    return s, (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], np.swapaxes(u, -1, -2) @ u


@SETTINGS
@given(batches, dims, dims, value_dtypes, seeds)
def test_svd(batch, m, n, dtype, seed):
    a = random((*batch, m, n), dtype, seed)
    check(lambda a: np.linalg.svd(a, compute_uv=False), a, dtype=dtype)
    if np.unique(np.round(np.linalg.svd(a, compute_uv=False), 6), axis=-1).shape[-1] < min(m, n):
        return       # a repeated singular value: its vectors are not unique
    check(svd_invariants, a, dtype=dtype)
    check_numpy_and_jax(full_svd_shapes_and_values, a, derivatives=m == n, **tolerance(dtype))


def test_svd_second_order_against_jax():
    a = random((4, 3), np.float64, 5)
    np.testing.assert_allclose(s2s.hessian(svd_loss)(a), jax.hessian(with_numpy(svd_loss, jnp))(a),
                               rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 2), (2, 3)])
def test_matrix_norms_of_singular_values(shape):
    a = random(shape, np.float64, 7)
    check(lambda a: np.linalg.norm(a, "nuc", axis=(-2, -1)), a)
    check(lambda a: np.linalg.norm(a, 2, axis=(-1, -2)), a)
    check(lambda a: np.linalg.norm(a, -2, axis=(-2, -1)), a)
    check(lambda a: np.linalg.svdvals(a), a)
    check(lambda a: np.linalg.matrix_norm(a, ord="nuc"), a)
    check(lambda a: np.linalg.matrix_norm(a, keepdims=True, ord=-2), a)
    if len(shape) == 2:
        check(lambda a: np.linalg.norm(a, "nuc"), a)
        check_numpy_and_jax(lambda a: np.linalg.norm(a, 2, keepdims=True), a)
    else:
        check(lambda a: np.linalg.norm(a, ord=2, axis=(0, 2), keepdims=True), a)


@pytest.mark.parametrize("loss, shape", [(eigh_loss, (2, 4, 4)), (svd_loss, (3, 2)),
                                         (svd_loss, (2, 4))])
def test_float32_derivatives_against_jax(loss, shape):
    a = random(shape, np.float32, 11)
    a = a + np.swapaxes(a, -1, -2) if loss is eigh_loss else a
    oracle = eigh_loss_as_read if loss is eigh_loss else loss   # see test_eigh
    check_derivatives(loss, with_numpy(oracle, jnp), a, rtol=2e-3, atol=2e-3)


def hermitian_svd_invariants(a):
    u, s, vh = np.linalg.svd(a, hermitian=True)
    return u * u, s, vh * vh, (u * s[..., None, :]) @ vh, np.linalg.svd(a, False, False, True)


def hermitian_svd_invariants_as_read(a):
    return hermitian_svd_invariants(read_lower(a))


def hermitian_pinv(a):
    return np.linalg.pinv(a, hermitian=True)


def hermitian_pinv_as_read(a):
    return hermitian_pinv(read_lower(a))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_hermitian_svd_pinv_and_rank_as_numpy(shape):
    a = symmetric(shape, np.float64, 8)
    for fn, as_read in ((hermitian_svd_invariants, hermitian_svd_invariants_as_read),
                        (hermitian_pinv, hermitian_pinv_as_read)):   # derivatives: see test_eigh
        check_numpy_and_jax(fn, a, derivatives=False, **tolerance(np.float64))
        check_derivatives(fn, with_numpy(as_read, jnp), a, **tolerance(np.float64))
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a, hermitian=True), a, derivatives=False)
    lopsided = a + np.triu(np.ones(shape[-2:]), 1)      # NumPy reads the lower triangle only
    for fn in (hermitian_svd_invariants, lambda a: np.linalg.pinv(a, hermitian=True),
               lambda a: np.linalg.matrix_rank(a, hermitian=True)):
        check_numpy_and_jax(fn, lopsided, derivatives=False)


# ---------------------------------------------------------------------------------------
# qr


@SETTINGS
@given(batches, dims, dims, value_dtypes, seeds)
def test_qr(batch, m, n, dtype, seed):
    a = random((*batch, m, n), dtype, seed) + (3 * np.eye(m, n) if dtype != np.int64 else 0)
    a = a.astype(dtype)
    check(lambda a: tuple(np.linalg.qr(a)), a, dtype=dtype)
    check(lambda a: np.linalg.qr(a, mode="r"), a, dtype=dtype)
    check(lambda a: tuple(np.linalg.qr(a, mode="complete")), a, dtype=dtype)


def test_qr_result_names_and_complete_q_of_tall_matrices():
    check(lambda a: np.linalg.qr(a).R, random((4, 3), np.float64, 2))
    check(lambda a: tuple(np.linalg.qr(a, mode="complete")), random((2, 5, 2), np.float64, 3))


# ---------------------------------------------------------------------------------------
# pinv, lstsq, matrix_rank, matrix_power


@SETTINGS
@given(batches, dims, dims, value_dtypes, seeds)
def test_pinv(batch, m, n, dtype, seed):
    check(lambda a: np.linalg.pinv(a), random((*batch, m, n), dtype, seed), dtype=dtype)


def test_pinv_cutoffs():
    a = np.diag([4.0, 1e-9, 0.0]) @ random((3, 3), np.float64, 4)
    for fn in (lambda a: np.linalg.pinv(a, rcond=1e-6), lambda a: np.linalg.pinv(a, rtol=None),
               lambda a: np.linalg.pinv(a, rtol=1e-12)):
        check_numpy_and_jax(fn, a, derivatives=False)


def lstsq_all(a, b):
    return np.linalg.lstsq(a, b)


def lstsq_solution(a, b):
    return np.linalg.lstsq(a, b, rcond=None)[0]


@pytest.mark.parametrize("m, n, b_shape", [(5, 3, (5,)), (5, 3, (5, 2)), (3, 3, (3,)),
                                           (2, 4, (2, 3)), (4, 4, (4, 1))])
def test_lstsq(m, n, b_shape):
    a, b = random((m, n), np.float64, m), random(b_shape, np.float64, n)
    check_numpy_and_jax(lstsq_all, a, b, derivatives=False, rtol=1e-8, atol=1e-9)
    check_numpy_and_jax(lstsq_solution, a, b, rtol=1e-8, atol=1e-9)
    check_numpy_and_jax(lambda a, b: np.linalg.lstsq(a.astype(np.float32), b, rcond=1e-3), a, b,
                        derivatives=False, rtol=1e-6, atol=1e-6)
    deficient = np.concatenate([a, a[:, :1]], axis=1)      # rank below its column count
    check_numpy_and_jax(lambda a, b: np.linalg.lstsq(a, b, rcond=-1)[:3:2], deficient, b,
                        derivatives=False, rtol=1e-8, atol=1e-9)


def rank_times_sum(a):
    return np.linalg.matrix_rank(a) * np.sum(a)


@pytest.mark.parametrize("shape, rank", [((4, 4), 2), ((3, 5), 3), ((2, 4, 3), 1), ((3, 3), 0)])
def test_matrix_rank(shape, rank):
    *batch, m, n = shape
    a = random((*batch, m, rank), np.float64, 1) @ random((*batch, rank, n), np.float64, 2)
    check_numpy_and_jax(rank_times_sum, a)          # the rank has no derivative
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a, tol=0.5), a, derivatives=False)
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a, rtol=1e-3), a, derivatives=False)
    tolerances = np.linspace(0.1, 3.0, np.prod(batch, dtype=int)).reshape(batch)
    check_numpy_and_jax(lambda a, tol: np.linalg.matrix_rank(a, tol=tol), a, tolerances,
                        derivatives=False)
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a), a[..., 0, :], derivatives=False)
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a.astype(np.int64)), np.round(a), derivatives=False)


@pytest.mark.parametrize("power", [-3, -1, 0, 1, 2, 5, 6])
def test_matrix_power(power):
    a = random((2, 3, 3), np.float64, power + 10) + 4 * np.eye(3)
    check_numpy_and_jax(lambda a: np.linalg.matrix_power(a, power), a, rtol=1e-8, atol=1e-8)
    if power >= 0:
        ints = random((3, 3), np.int64, 3)
        check_numpy_and_jax(lambda a: np.linalg.matrix_power(a, power), ints, derivatives=False)


def test_matrix_power_is_repeated_squaring():
    closed = s2s.make_jaxpr(lambda a: np.linalg.matrix_power(a, 6))(np.eye(3))
    assert [e.primitive.name for e in closed.jaxpr.eqns].count("dot_general") == 3


def qr_loss(a):
    q, r = np.linalg.qr(a, mode="complete")
    return np.sum(q * WEIGHTS[: q.shape[0], : q.shape[1]]) + np.sum(r**2)


def pinv_lstsq_loss(a):
    return np.sum(np.linalg.pinv(a) ** 2) + np.sum(np.linalg.lstsq(a, a[:, 0])[0])


@pytest.mark.parametrize("loss, shape", [
    (eigh_loss, (2, 4, 4)), (svd_loss, (4, 2)), (svd_loss, (2, 2, 3)), (qr_loss, (4, 2)),
    (qr_loss, (2, 3)), (pinv_lstsq_loss, (4, 3)), (pinv_lstsq_loss, (2, 3)),
    (lambda a: np.linalg.norm(a, "nuc") + np.linalg.norm(a, 2), (3, 4)),
])
def test_gradients_compiled_by_xla_match_the_python_backend(loss, shape):
    a = random(shape, np.float64, 13)
    a = a + np.swapaxes(a, -1, -2) if loss is eigh_loss else a
    expected = jax.grad(with_numpy(eigh_loss_as_read if loss is eigh_loss else loss, jnp))(a)
    np.testing.assert_allclose(s2s.jit(s2s.grad(loss))(a), expected, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(s2s.jit(s2s.grad(loss), backend="python")(a), expected,
                               rtol=1e-8, atol=1e-9)


# ---------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("call, error, match", [
    (lambda: D.eigh(np.ones((2, 3))), ShapeError, "square"),
    (lambda: D.eigvalsh(np.ones(3)), ShapeError, "two-dimensional"),
    (lambda: D.eigh(np.ones((2, 2)), UPLO="X"), ShapeError, "UPLO"),
    (lambda: D.svd(np.ones((2, 3)), hermitian=True), ShapeError, "square"),
    (lambda: D.svd(np.ones((2, 2), np.float16)), ShapeError, "float16"),
    (lambda: D.qr(np.ones((2, 2)), mode="raw"), UnsupportedFunctionError, "mode"),
    (lambda: D.pinv(np.ones((2, 2)), rcond=0.1, rtol=0.1), ShapeError, "both"),
    (lambda: D.lstsq(np.ones((2, 2, 2)), np.ones((2, 2))), ShapeError, "pinv"),
    (lambda: D.lstsq(np.ones((3, 2)), np.ones(2)), ShapeError, "incompatible"),
    (lambda: D.matrix_power(np.ones((2, 3)), 2), ShapeError, "square"),
    (lambda: D.matrix_power(np.ones((2, 2)), 2.0), ShapeError, "integer"),
])
def test_bad_input_says_what_to_write(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_traced_cutoff_is_refused_with_a_location():
    def f(a, rcond):
        return np.linalg.pinv(a, rcond=rcond)
    with pytest.raises(S2SError, match="constant"):
        s2s.jit(f)(np.eye(2), 0.1)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 4)])
def test_rank_and_least_squares_of_empty_matrices_are_numpys(shape):
    """They raised "reduce_max over a zero-length axis ... (NumPy raises here too)", where
    NumPy gives rank 0 and the zero solution (review)."""
    a = np.zeros(shape)
    check_numpy_and_jax(lambda a: np.linalg.matrix_rank(a), a, derivatives=False)
    if len(shape) == 2:
        b = np.zeros(shape[0])
        check_numpy_and_jax(lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], a, b, derivatives=False)
