"""np.linalg's decompositions of complex matrices (svd, eigh, and what is built on them),
and eig / eigvals of real and complex matrices, held to NumPy (values on every backend) and
to jax (jvp and vjp; second order for eigvalsh and svdvals).

A complex eigenvector or pair of singular vectors is fixed only up to a phase, and jaxlib's
LAPACK may choose other phases than NumPy's: the functions tested return what does not
depend on it (|u|, |v|, u s vᴴ, values), as autograd's tests do. eig's eigenvectors are
the exception: LAPACK's geev fixes their phase (unit norm, largest entry real), and their
derivative follows that choice, as JAX's does; only the sign of a real matrix's
eigenvector is left free (jaxlib's float32 sgeev and NumPy's chose different ones here),
so the tests compare v ∘ v[0] (each column times its first entry) or vectors made signed.
In single precision the order of the eigenvalues differs too (jaxlib's cgeev and NumPy's
gave one pair swapped): there the pairs are compared sorted.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import s2s
from s2s.errors import ShapeError
from s2s.numpy_api import decompositions as D
from s2s.test_util import check_grads
from tests.helpers import check_derivatives, check_numpy_and_jax, with_numpy
from tests.strategies import examples

SETTINGS = examples(3, 15)
batches = st.sampled_from([(), (2,), (2, 1)])
dims = st.integers(1, 4)
seeds = st.integers(0, 2**32 - 1)
complex_dtypes = st.sampled_from([np.complex128, np.complex64])


def tolerance(dtype):
    return dict(rtol=2e-3, atol=2e-3) if dtype in (np.complex64, np.float32) else \
        dict(rtol=1e-7, atol=1e-8)


def random(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.normal(size=shape)
    return a.astype(dtype)


def hermitian(shape, dtype, seed):
    a = random(shape, dtype, seed)
    return a + np.conj(np.swapaxes(a, -1, -2))


def distinct(values) -> bool:
    """No two of each matrix's values (sorted) within 1e-3 of each other."""
    return bool(np.all(np.diff(np.sort(np.asarray(values).real, axis=-1), axis=-1) > 1e-3))


# ---------------------------------------------------------------------------------------
# svd


def svd_invariants(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.abs(u), s, np.abs(vh), (u * s[..., None, :]) @ vh


def full_svd_invariants(a):
    u, s, vh = np.linalg.svd(a)
    k = s.shape[-1]
    unitary = np.conj(np.swapaxes(u, -1, -2)) @ u
    return np.linalg.svd(a, compute_uv=False), (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], unitary


@SETTINGS
@given(batches, dims, dims, complex_dtypes, seeds)
def test_complex_svd(batch, m, n, dtype, seed):
    a = random((*batch, m, n), dtype, seed)
    derivatives = dtype == np.complex128
    check_numpy_and_jax(lambda a: np.linalg.svdvals(a), a, derivatives=derivatives, **tolerance(dtype))
    check_numpy_and_jax(full_svd_invariants, a, derivatives=False, **tolerance(dtype))
    if distinct(np.linalg.svd(a, compute_uv=False)):     # else the vectors are not unique
        check_numpy_and_jax(svd_invariants, a, derivatives=derivatives, **tolerance(dtype))


def svd_loss(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.sum(s**2) + np.sum(np.abs(u[..., 0]) * 2) + np.sum(np.abs(vh[..., 0, :]) ** 3)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (3, 3)])
def test_complex_svd_gradient_on_both_backends_against_jax(shape):
    """grad of a real function of a complex matrix is jax.grad's (∂f/∂x − i ∂f/∂y), phase
    term included (U̇'s i Im(S_jj) / s_j along u_j changes |u| not at all, but u s vᴴ)."""
    a = random(shape, np.complex128, 3)
    expected = jax.grad(with_numpy(svd_loss, jnp))(a)
    np.testing.assert_allclose(s2s.grad(svd_loss)(a), expected, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(s2s.jit(s2s.grad(svd_loss))(a), expected, rtol=1e-8, atol=1e-9)


def test_complex_svd_tangents_of_the_vectors_are_jaxs():
    """The vectors' tangents themselves, phase convention included, where the vectors are
    the same as jax's (both from LAPACK's gesdd on this machine)."""
    a = random((3, 4), np.complex128, 4)
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    j_u, _, j_vh = jnp.linalg.svd(a, full_matrices=False)
    if not (np.allclose(u, j_u) and np.allclose(vh, j_vh)):
        pytest.skip("jaxlib's LAPACK chose other phases than NumPy's")
    check_derivatives(lambda a: tuple(np.linalg.svd(a, full_matrices=False)),
                      lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)), a)


def svdvals_loss(a):
    return np.sum(np.linalg.svd(a, compute_uv=False) ** 3)


def eigvalsh_loss(a):
    return np.sum(np.linalg.eigvalsh(a) ** 3)


def read_lower(a):
    """The Hermitian matrix np.linalg.eigh(a) reads: a's lower triangle, mirrored and
    conjugated, and the real part of its diagonal."""
    below = np.tril(a, -1)
    return below + np.conj(np.swapaxes(below, -1, -2)) + np.real(a) * np.eye(a.shape[-1])


def read_upper(a):
    return read_lower(np.conj(np.swapaxes(a, -1, -2)))


def eigvalsh_loss_as_read(a):
    return eigvalsh_loss(read_lower(a))


@pytest.mark.parametrize("loss, oracle, shape", [
    (svdvals_loss, svdvals_loss, (3, 4)), (svdvals_loss, svdvals_loss, (2, 3, 3)),
    (eigvalsh_loss, eigvalsh_loss_as_read, (2, 4, 4)),
])
def test_second_order_against_jax(loss, oracle, shape):
    """The jvp of the gradient (a Hessian-vector product) of a real function of a complex
    matrix, on both backends."""
    a = random(shape, np.complex128, 5)
    a = a + np.conj(np.swapaxes(a, -1, -2)) if loss is eigvalsh_loss else a
    tangent = random(shape, np.complex128, 6)
    j_grad = jax.grad(with_numpy(oracle, jnp))
    expected = jax.jvp(j_grad, (a,), (tangent,))
    for grad in (s2s.grad(loss), s2s.jit(s2s.grad(loss))):
        got = s2s.jvp(grad, (a,), (tangent,))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 2), (2, 3)])
def test_complex_matrix_norms_of_singular_values(shape):
    a = random(shape, np.complex128, 7)
    check_numpy_and_jax(lambda a: np.linalg.norm(a, "nuc", axis=(-2, -1)), a)
    check_numpy_and_jax(lambda a: np.linalg.norm(a, 2, axis=(-1, -2)), a)
    check_numpy_and_jax(lambda a: np.linalg.norm(a, -2, axis=(-2, -1), keepdims=True), a)
    check_numpy_and_jax(lambda a: np.linalg.matrix_norm(a, ord="nuc"), a)
    if len(shape) == 2:
        check_numpy_and_jax(lambda a: np.linalg.norm(a, "nuc") + np.linalg.norm(a, 2), a)


# ---------------------------------------------------------------------------------------
# eigh, eigvalsh


def eigh_invariants(a):
    w, v = np.linalg.eigh(a)
    return w, np.abs(v), (v * w[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))


def eigh_invariants_as_read(a):
    return eigh_invariants(read_lower(a))


def eigh_upper_invariants(a):
    w, v = np.linalg.eigh(a, UPLO="U")
    return w, np.abs(v), np.linalg.eigvalsh(a, "U")


def eigh_upper_invariants_as_read(a):
    return eigh_upper_invariants(read_upper(a))


@SETTINGS
@given(batches, dims, complex_dtypes, seeds)
def test_complex_eigh(batch, n, dtype, seed):
    """Values against NumPy; derivatives against jax's of the Hermitian matrix NumPy's eigh
    reads (see test_decompositions.test_eigh)."""
    a = hermitian((*batch, n, n), dtype, seed)
    for fn, as_read in ((eigh_invariants, eigh_invariants_as_read),
                        (eigh_upper_invariants, eigh_upper_invariants_as_read)):
        check_numpy_and_jax(fn, a, derivatives=False, **tolerance(dtype))
        if dtype == np.complex128 and distinct(np.linalg.eigvalsh(a)):
            check_derivatives(fn, with_numpy(as_read, jnp), a, **tolerance(dtype))


def test_complex_eigh_of_a_matrix_that_is_not_hermitian_differentiates_what_it_reads():
    """NumPy's eigh reads one triangle and the real part of the diagonal (LAPACK's heevd):
    a change elsewhere has tangent 0; held to finite differences (autograd's port test)."""
    a = random((4, 4), np.complex128, 42)
    check_grads(lambda a: tuple(np.abs(x) for x in np.linalg.eigh(a)), (a,), order=2)
    check_grads(lambda a: tuple(np.abs(x) for x in np.linalg.eigh(a, "U")), (a,), order=1)
    unread = np.zeros((4, 4), np.complex128)
    unread[0, 3] = 1.0 + 2.0j       # the upper triangle ...
    unread[1, 1] = 3.0j             # ... and the diagonal's imaginary part
    _, (w_dot, v_dot) = s2s.jvp(lambda a: np.linalg.eigh(a), (a,), (unread,))
    assert not np.any(w_dot) and not np.any(v_dot)


# ---------------------------------------------------------------------------------------
# qr (LAPACK's geqrf and ungqr fix q's phases: NumPy's and s2s's q are the same)


@SETTINGS
@given(batches, dims, dims, complex_dtypes, seeds)
def test_complex_qr(batch, m, n, dtype, seed):
    a = random((*batch, m, n), dtype, seed) + 3 * np.eye(m, n)
    a = a.astype(dtype)
    derivatives = dtype == np.complex128
    check_numpy_and_jax(lambda a: tuple(np.linalg.qr(a)), a, derivatives=derivatives, **tolerance(dtype))
    check_numpy_and_jax(lambda a: np.linalg.qr(a, mode="r"), a, derivatives=derivatives, **tolerance(dtype))
    check_numpy_and_jax(lambda a: tuple(np.linalg.qr(a, mode="complete")), a,
                        derivatives=derivatives, **tolerance(dtype))


# ---------------------------------------------------------------------------------------
# What follows the SVD: pinv, lstsq, matrix_rank, hermitian svd


def pinv_and_hermitian(a):
    return np.linalg.pinv(a), np.linalg.svd(a, compute_uv=False, hermitian=True)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_complex_pinv_rank_and_hermitian_svd(shape):
    a = random(shape, np.complex128, 8)
    check_numpy_and_jax(lambda a: np.linalg.pinv(a), a)
    check_numpy_and_jax(lambda a: np.linalg.pinv(a[..., :2]), a)
    h = hermitian(shape, np.complex128, 9)
    check_numpy_and_jax(pinv_and_hermitian, h, derivatives=False)
    u, s, vh = s2s.jit(lambda a: tuple(np.linalg.svd(a, hermitian=True)))(h)
    n_u, n_s, n_vh = np.linalg.svd(h, hermitian=True)
    np.testing.assert_allclose(s, n_s, rtol=1e-10)
    np.testing.assert_allclose(np.abs(u), np.abs(n_u), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, h, rtol=1e-8, atol=1e-10)
    low_rank = a[..., :2] @ np.conj(np.swapaxes(a[..., :2], -1, -2))
    for rank in (lambda a: np.linalg.matrix_rank(a), lambda a: np.linalg.matrix_rank(a, hermitian=True)):
        check_numpy_and_jax(rank, low_rank, derivatives=False)


def test_complex_lstsq():
    a, b = random((5, 3), np.complex128, 10), random((5, 2), np.complex128, 11)
    check_numpy_and_jax(lambda a, b: np.linalg.lstsq(a, b), a, b, derivatives=False)
    check_numpy_and_jax(lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], a, b)


# ---------------------------------------------------------------------------------------
# eig, eigvals


def with_complex_eigenvalues(shape, dtype, seed):
    """A real matrix with a pair of complex eigenvalues for n ≥ 2 (a dominant rotation), so
    NumPy's results are complex as s2s's always are; a complex matrix as it comes."""
    a = random(shape, dtype, seed)
    if np.dtype(dtype).kind == "f" and shape[-1] >= 2:
        a = a + (4 * np.eye(shape[-1], k=1) - 4 * np.eye(shape[-1], k=-1)).astype(dtype)
    return a


def eig_values_and_vectors(a):
    """w, and the eigenvectors each times its first entry: free of the vectors' sign, not
    of the phase geev chooses."""
    w, v = np.linalg.eig(a)
    return w, v * v[..., :1, :], np.linalg.eigvals(a)


def signed(v):
    """Eigenvectors with the (real) entry of largest modulus made positive."""
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    return v * np.where(np.real(top) < 0, -1, 1).astype(np.real(v).dtype)


def eig_invariants(a):
    w, v = np.linalg.eig(a)
    return w, np.abs(v), np.linalg.eigvals(a)


def jax_eig(a):
    return tuple(jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True))


def jax_eig_values_and_vectors(a):
    w, v = jax_eig(a)
    return w, v * v[..., :1, :], w


def jax_eig_invariants(a):
    w, v = jax_eig(a)
    return w, jnp.abs(v), w


@SETTINGS
@given(batches, st.integers(2, 4), st.sampled_from([np.float64, np.complex128, np.float32,
                                                    np.complex64]), seeds)
def test_eig(batch, n, dtype, seed):
    """Values as NumPy's (LAPACK's order and eigenvector phases) on every backend;
    derivatives against jax's eig with eigenvector derivatives enabled."""
    a = with_complex_eigenvalues((*batch, n, n), dtype, seed)
    if dtype in (np.float32, np.complex64):
        check_sorted_eigenpairs(a)
        return
    check_numpy_and_jax(eig_values_and_vectors, a, derivatives=False, **tolerance(dtype))
    w = np.linalg.eigvals(a)
    separated = np.min(np.abs(w[..., :, None] - w[..., None, :]) + np.eye(n) * 10) > 1e-2
    if dtype in (np.float64, np.complex128) and separated:
        check_derivatives(eig_values_and_vectors, jax_eig_values_and_vectors, a, **tolerance(dtype))
        check_derivatives(eig_invariants, jax_eig_invariants, a, **tolerance(dtype))


def sorted_eigenpairs(w, v):
    """The eigenvalues sorted (by real part, then imaginary part, rounded), the signed
    eigenvectors in that order."""
    order = np.lexsort((np.round(w.imag, 3), np.round(w.real, 3)), axis=-1)
    return (np.take_along_axis(w, order, axis=-1),
            np.take_along_axis(signed(v), order[..., None, :], axis=-1))


def check_sorted_eigenpairs(a):
    """eig on both backends against NumPy's, each sorted (single precision: the order of
    LAPACK's eigenvalues differs between jaxlib's build and NumPy's)."""
    expected = sorted_eigenpairs(*np.linalg.eig(a))
    for backend in ("xla", "python"):
        w, v = s2s.jit(lambda a: tuple(np.linalg.eig(a)), backend=backend)(a)
        assert w.dtype == v.dtype == np.complex64
        for g, e in zip(sorted_eigenpairs(w, v), expected):
            np.testing.assert_allclose(g, e, rtol=2e-3, atol=2e-3, err_msg=backend)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_eig_of_a_matrix_with_real_eigenvalues_is_complex(dtype):
    """NumPy's eig of a real matrix with real eigenvalues is real (a dtype that depends on
    the values); s2s's is complex always, as JAX's, with NumPy's values."""
    a = np.array([[2, 1, 0], [1, 3, 1], [0, 1, 4]], dtype)
    complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
    n_w, n_v = np.linalg.eig(a)
    for backend in ("xla", "python"):
        w, v = s2s.jit(lambda a: tuple(np.linalg.eig(a)), backend=backend)(a)
        values = s2s.jit(lambda a: np.linalg.eigvals(a), backend=backend)(a)
        assert w.dtype == v.dtype == values.dtype == complex_dtype
        np.testing.assert_allclose(w, n_w, **tolerance(dtype))
        np.testing.assert_allclose(signed(v), signed(n_v), **tolerance(dtype))
        np.testing.assert_allclose(values, n_w, **tolerance(dtype))


def eig_loss(a):
    w, v = np.linalg.eig(a)
    return np.sum(np.abs(v) ** 2 * np.arange(4.0)) + np.sum(np.real(w) ** 2) + np.sum(np.imag(w))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_eig_against_finite_differences(dtype):
    """autograd's port tests: |w| and |v| of a real matrix, w and |v| of a complex one,
    forward and reverse mode against central differences (second order too)."""
    a = with_complex_eigenvalues((4, 4), dtype, 12)
    check_grads(lambda a: tuple(np.abs(x) for x in np.linalg.eig(a)), (a,), order=2)
    check_grads(lambda a: np.linalg.eigvals(a), (a,), order=1)
    expected = jax.grad(_jax_eig_loss)(a)
    np.testing.assert_allclose(s2s.grad(eig_loss)(a), expected, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(s2s.jit(s2s.grad(eig_loss))(a), expected, rtol=1e-8, atol=1e-9)


def _jax_eig_loss(a):
    w, v = jax_eig(a)
    return jnp.sum(jnp.abs(v) ** 2 * jnp.arange(4.0)) + jnp.sum(jnp.real(w) ** 2) + jnp.sum(jnp.imag(w))


@pytest.mark.parametrize("in_axis", [0, 2])
def test_eig_batched_by_vmap_and_emitted_as_numpy(in_axis):
    a = random((3, 3, 3), np.complex128, 13)
    w, v = s2s.vmap(lambda a: tuple(np.linalg.eig(a)), in_axes=in_axis)(np.moveaxis(a, 0, in_axis))
    n_w, n_v = np.linalg.eig(a)
    np.testing.assert_allclose(w, n_w, rtol=1e-10)
    np.testing.assert_allclose(signed(v), signed(n_v), rtol=1e-10, atol=1e-12)
    assert "np.linalg.eig(a)" in s2s.emit_python(lambda a: np.linalg.eig(a), a)
    assert "np.linalg.eigvals(a)" in s2s.emit_python(lambda a: np.linalg.eigvals(a), a)
    assert "rt.eig(a)" in s2s.emit_python(lambda a: np.linalg.eig(a), a.real)


@pytest.mark.parametrize("call, match", [
    (lambda: D.eig(np.ones((2, 3))), "square"),
    (lambda: D.eigvals(np.ones(3)), "two-dimensional"),
    (lambda: D.eig(np.ones((2, 2), np.float16)), "float16"),
    (lambda: D.eigh(np.ones((2, 2), np.complex64), UPLO="X"), "UPLO"),
    (lambda: D.svd(np.ones((2, 3), np.complex128), hermitian=True), "square"),
])
def test_bad_input_says_what_to_write(call, match):
    with pytest.raises(ShapeError, match=match):
        call()


def test_complex_solve_inv_and_det_run_on_xla():
    """eig's derivative solves with its eigenvectors: complex LU (LAPACK's cgetrf and
    zgetrf) lowers to XLA, and with it solve, inv and det of complex matrices."""
    a, b = random((2, 3, 3), np.complex128, 14), random((2, 3, 2), np.complex128, 15)
    check_numpy_and_jax(lambda a, b: np.linalg.solve(a, b), a, b)
    check_numpy_and_jax(lambda a: (np.linalg.inv(a), np.linalg.det(a)), a)
    check_numpy_and_jax(lambda a: np.linalg.inv(a), a[0].astype(np.complex64), rtol=1e-4, atol=1e-4,
                        derivatives=False)
