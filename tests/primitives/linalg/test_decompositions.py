"""eig, eigh, svd, qr and pinv: shape rules, impls, emission, LAPACK lowering and batching.

NumPy is the oracle for values. Eigenvectors and singular vectors are defined up to sign,
and jaxlib's LAPACK and NumPy's may pick different ones, so vectors compared across
backends are first given a sign (the largest entry of each vector positive); R of a QR is
Householder's and compared as it is.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.core import ShapedArray
from s2s.emit.pyexpr import python_rules
from s2s.emit.stablehlo import lower
from s2s.errors import S2SError, ShapeError
from s2s.primitives.linalg import decompositions as dc
from s2s.staging import PRIMITIVES
from s2s_runtime.xla import Executable
from tests.helpers import BLOCK_JAX, ROOT, assert_same, check_staged, stage

SETTINGS = settings(max_examples=12, deadline=None)
batches = st.sampled_from([(), (2,), (1, 3)])
dims = st.integers(1, 5)
real_dtypes = st.sampled_from([np.float32, np.float64])
seeds = st.integers(0, 2**32 - 1)


def tolerance(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)


def signed(vectors, axis):
    """Vectors (along `axis`) with their largest-magnitude entry made positive."""
    index = np.argmax(np.abs(vectors), axis=axis)
    top = np.take_along_axis(vectors, np.expand_dims(index, axis), axis=axis)
    return vectors * np.where(top < 0, -1, 1).astype(vectors.dtype)


def run_xla(fn, *args):
    closed, _ = stage(fn, *args)
    exe = Executable(lower(closed), [v.aval.dtype for v in closed.jaxpr.invars])
    return exe(*args)


def symmetric(shape, dtype, seed):
    a = np.random.default_rng(seed).normal(size=shape)
    return (a + np.swapaxes(a, -1, -2)).astype(dtype)


def test_every_decomposition_has_an_emission_rule():
    for name in ("eig", "eigh", "svd", "qr", "pinv"):
        assert PRIMITIVES[name] in python_rules


# ---------------------------------------------------------------------------------------
# Values: the NumPy impl and the emitted module (check_staged), and the compiled module


@SETTINGS
@given(batches, dims, real_dtypes, seeds, st.sampled_from("LU"))
def test_eigh(batch, n, dtype, seed, uplo):
    a = symmetric((*batch, n, n), dtype, seed)
    tol = tolerance(dtype)
    bind = lambda a: dc.eigh.bind(a, uplo=uplo)  # noqa: E731
    check_staged(bind, lambda a: list(np.linalg.eigh(a, UPLO=uplo)), a, **tol)
    w, v = run_xla(bind, a)
    expected_w, expected_v = np.linalg.eigh(a, UPLO=uplo)
    assert_same(w, expected_w, **tol)
    assert_same(signed(v, -2), signed(expected_v, -2), **tol)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_one_triangle_on_both_backends(uplo):
    a = np.array([[2.0, 100.0], [-50.0, 3.0]])     # the other triangle is ignored, as by NumPy
    bind = lambda a: dc.eigh.bind(a, uplo=uplo)  # noqa: E731
    assert_same(run_xla(bind, a)[0], np.linalg.eigh(a, UPLO=uplo)[0])
    check_staged(bind, lambda a: list(np.linalg.eigh(a, UPLO=uplo)), a)


@SETTINGS
@given(batches, dims, dims, real_dtypes, seeds, st.booleans())
def test_svd(batch, m, n, dtype, seed, full_matrices):
    a = np.random.default_rng(seed).normal(size=(*batch, m, n)).astype(dtype)
    tol = tolerance(dtype)
    bind = lambda a: dc.svd.bind(a, full_matrices=full_matrices, compute_uv=True)  # noqa: E731
    u, s, vh = run_xla(bind, a)
    expected_u, expected_s, expected_vh = np.linalg.svd(a, full_matrices=full_matrices)
    assert_same(s, expected_s, **tol)
    assert u.shape == expected_u.shape and vh.shape == expected_vh.shape
    k = min(m, n)
    assert_same((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, rtol=10 * tol["rtol"],
                atol=10 * tol["atol"])
    for q in (u, np.swapaxes(vh, -1, -2)):      # orthonormal columns, also the extra ones
        assert_same(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1], dtype=dtype),
                                                                q.shape[:-2] + (q.shape[-1],) * 2),
                    rtol=10 * tol["rtol"], atol=10 * tol["atol"])
    closed = check_staged(lambda a: dc.svd.bind(a, full_matrices=full_matrices, compute_uv=False),
                          lambda a: [np.linalg.svd(a, compute_uv=False)], a, **tol)
    assert_same(run_xla(lambda a: dc.svd.bind(a, full_matrices=True, compute_uv=False), a)[0],
                expected_s, **tol)
    assert closed.jaxpr.eqns[0].primitive is dc.svd


@SETTINGS
@given(batches, dims, dims, real_dtypes, seeds, st.sampled_from(dc.QR_MODES))
def test_qr_and_pinv(batch, m, n, dtype, seed, mode):
    a = np.random.default_rng(seed).normal(size=(*batch, m, n)).astype(dtype)
    tol = tolerance(dtype)
    expected = [np.linalg.qr(a, mode="r")] if mode == "r" else list(np.linalg.qr(a, mode=mode))
    check_staged(lambda a: dc.qr.bind(a, mode=mode), lambda a: expected, a, **tol)
    for got, want in zip(run_xla(lambda a: dc.qr.bind(a, mode=mode), a), expected, strict=True):
        assert_same(got, want, rtol=10 * tol["rtol"], atol=10 * tol["atol"])
    pinv = lambda a: dc.pinv.bind(a, rcond=1e-15, hermitian=False)   # noqa: E731
    check_staged(pinv, np.linalg.pinv, a, **tol)
    assert_same(run_xla(pinv, a)[0], np.linalg.pinv(a), rtol=50 * tol["rtol"], atol=50 * tol["atol"])


def test_pinv_drops_small_singular_values_on_both_backends():
    a = np.diag([3.0, 1e-3, 0.0])
    for rcond in (1e-15, 1e-2):
        pinv = lambda a: dc.pinv.bind(a, rcond=rcond, hermitian=False)   # noqa: E731
        check_staged(pinv, lambda a: np.linalg.pinv(a, rcond=rcond), a)
        assert_same(run_xla(pinv, a)[0], np.linalg.pinv(a, rcond=rcond))


def test_hermitian_pinv_reads_the_lower_triangle_on_both_backends():
    a = np.array([[2.0, 9.0, 0.5], [1.0, 3.0, -4.0], [0.25, 1.5, 1.0]])
    pinv = lambda a: dc.pinv.bind(a, rcond=1e-15, hermitian=True)   # noqa: E731
    check_staged(pinv, lambda a: np.linalg.pinv(a, hermitian=True), a)
    assert_same(run_xla(pinv, a)[0], np.linalg.pinv(a, hermitian=True))


def test_emitted_code_calls_np_linalg():
    a = np.ones((3, 2))
    source = s2s.emit_python(lambda a: (np.linalg.svd(a, compute_uv=False), np.linalg.qr(a)[1],
                                        np.linalg.pinv(a)), a)
    assert "np.linalg.svd(a, compute_uv=False)" in source
    assert "np.linalg.qr(a, mode='reduced')" in source
    assert "np.linalg.pinv(a, rcond=1e-15)" in source


# ---------------------------------------------------------------------------------------
# Batching: vmap over any axis, against the decomposition of each example


@pytest.mark.parametrize("in_axis", [0, 1, 2])
def test_vmap_of_each_decomposition(in_axis):
    rng = np.random.default_rng(in_axis)
    a = np.moveaxis(rng.normal(size=(3, 4, 4)), 0, in_axis)
    a = a + np.swapaxes(a, *[d for d in range(3) if d != in_axis])   # symmetric examples

    def f(x):
        w = np.linalg.eigvalsh(x)
        return w, np.linalg.svd(x, compute_uv=False), np.linalg.qr(x)[1], np.linalg.pinv(x)
    got = s2s.vmap(f, in_axes=in_axis)(a)
    expected = [np.stack(r) for r in zip(*[f(np.take(a, i, axis=in_axis)) for i in range(3)])]
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------------------------------
# Shape rules and errors


def test_shape_rules():
    aval = ShapedArray((2, 5, 3), np.float32)
    assert [o.shape for o in dc.svd.abstract_eval(aval, full_matrices=True, compute_uv=True)] == \
        [(2, 5, 5), (2, 3), (2, 3, 3)]
    assert [o.shape for o in dc.qr.abstract_eval(aval, mode="complete")] == [(2, 5, 5), (2, 5, 3)]
    assert [o.shape for o in dc.qr.abstract_eval(aval, mode="r")] == [(2, 3, 3)]
    assert dc.pinv.abstract_eval(aval, rcond=0.0, hermitian=False).shape == (2, 3, 5)
    square = ShapedArray((2, 3, 3), np.float32)
    assert [(o.shape, o.dtype) for o in dc.eig.abstract_eval(square, vectors=True)] == \
        [((2, 3), np.complex64), ((2, 3, 3), np.complex64)]
    complex_aval = ShapedArray((2, 5, 3), np.complex128)
    assert [o.dtype for o in dc.svd.abstract_eval(complex_aval, full_matrices=False, compute_uv=True)] \
        == [np.complex128, np.float64, np.complex128]
    assert [o.dtype for o in dc.eigh.abstract_eval(ShapedArray((3, 3), np.complex64), uplo="L")] == \
        [np.float32, np.complex64]


@pytest.mark.parametrize("prim, params, aval, message", [
    (dc.eigh, dict(uplo="L"), ShapedArray((3, 4), np.float64), "square"),
    (dc.eigh, dict(uplo="U"), ShapedArray((4,), np.float64), "at least 2"),
    (dc.eigh, dict(uplo="X"), ShapedArray((4, 4), np.float64), "uplo"),
    (dc.svd, dict(full_matrices=True, compute_uv=True), ShapedArray((3, 3), np.int32), "float"),
    (dc.qr, dict(mode="raw"), ShapedArray((3, 3), np.float64), "mode"),
    (dc.eig, dict(vectors=True), ShapedArray((3, 4), np.complex128), "square"),
    (dc.eig, dict(vectors=False), ShapedArray((3, 3), np.float16), "f16"),
    (dc.pinv, dict(rcond=0.0, hermitian=True), ShapedArray((3, 2), np.float64), "square"),
])
def test_bad_operands(prim, params, aval, message):
    with pytest.raises(ShapeError, match=message):
        prim.abstract_eval(aval, **params)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 3, 0), (0, 2, 2)])
def test_empty_matrices_on_both_backends(shape):
    a = np.ones(shape)
    calls = [(lambda a, full=full, uv=uv: dc.svd.bind(a, full_matrices=full, compute_uv=uv),
              lambda a, full=full, uv=uv: list(np.linalg.svd(a, full_matrices=full)) if uv
              else [np.linalg.svd(a, compute_uv=False)])
             for full in (True, False) for uv in (True, False)]
    calls += [(lambda a, mode=mode: dc.qr.bind(a, mode=mode),
               lambda a, mode=mode: [np.linalg.qr(a, mode="r")] if mode == "r"
               else list(np.linalg.qr(a, mode=mode))) for mode in dc.QR_MODES]
    calls.append((lambda a: dc.pinv.bind(a, rcond=1e-15, hermitian=False), np.linalg.pinv))
    if shape[-1] == shape[-2]:
        calls.append((lambda a: dc.eigh.bind(a, uplo="L"), lambda a: list(np.linalg.eigh(a))))
        calls.append((lambda a: dc.eig.bind(a, vectors=True),
                      lambda a: [x.astype(np.complex128) for x in np.linalg.eig(a)]))
    for bind, numpy_fn in calls:
        expected = numpy_fn(a)
        check_staged(bind, lambda a: expected, a)
        got = run_xla(bind, a)
        for g, e in zip(got if isinstance(expected, list) else got[:1],
                        expected if isinstance(expected, list) else [expected], strict=True):
            assert_same(g, e)


def test_full_svd_of_a_non_square_matrix_has_no_derivative_as_in_jax():
    a = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(S2SError, match="full_matrices=False"):
        s2s.jvp(lambda a: np.linalg.svd(a)[0], (a,), (a,))


def decompose(a):
    w = np.linalg.eigvalsh(a @ a.T)
    z = a[:3] * (1 + 2j)
    complex_parts = (np.linalg.eigvalsh(z + np.conj(z.T)), np.linalg.svd(z, compute_uv=False),
                     np.abs(np.linalg.qr(z)[1]), np.linalg.solve(z + 3 * np.eye(3), z[:, 0]))
    return (w, np.linalg.svd(a, compute_uv=False), np.linalg.qr(a)[1], np.linalg.pinv(a),
            np.linalg.eigvals(a[:3]), np.linalg.eigvals(z)) + complex_parts


NO_JAX_SCRIPT = BLOCK_JAX + textwrap.dedent("""
    import numpy as np
    import s2s
    from tests.primitives.linalg.test_decompositions import decompose

    a = np.arange(12.0).reshape(4, 3) ** 0.5
    for got, want in zip(s2s.jit(decompose)(a), decompose(a)):
        assert np.allclose(got, want, atol=1e-10), (got, want)
    assert not any(m == "jax" or m.startswith("jax.") for m in sys.modules), "jax was imported"
    print("ok without jax")
""")


def test_lapack_targets_run_without_jax(tmp_path):
    """The LAPACK custom calls (real and complex) are registered by s2s itself, not by jax."""
    env = dict(os.environ, S2S_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", NO_JAX_SCRIPT], cwd=ROOT, capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok without jax" in result.stdout
