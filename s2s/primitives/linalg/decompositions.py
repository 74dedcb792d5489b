"""Decompositions: eig, eigh, svd, qr and pinv, batched over leading dimensions; all but
qr of real and complex matrices.

Each is one primitive whose NumPy impl and emitted code are the `np.linalg` call, and whose
derivative is the textbook formula (the ones JAX uses, so they agree with it where the
decomposition is not unique: eigenvectors of a repeated eigenvalue and singular vectors of
a repeated singular value get inf/nan tangents, as in JAX; eigenvalues and singular values
stay finite; a complex eigenvector's or singular-vector pair's free phase moves as JAX's).
Outputs follow NumPy: `eigh` gives (w, v) with w ascending and real, and reads the
triangle `uplo` names ('L' or 'U', LAPACK's own choice, so the eigenvectors' signs are
NumPy's too) and the real part of the diagonal; `svd` gives (u, s, vh) with s descending
and real, or (s,) for compute_uv=False; `qr` gives (q, r), or (r,) for mode 'r'; `eig`
gives complex (w, v), or (w,), in geev's order (NumPy's, which makes them real for a
real matrix whose eigenvalues all are: s2s's are complex always, as JAX's).

Lowering goes through the LAPACK routines jaxlib ships as XLA FFI custom-call targets
(s2s_runtime.xla registers them). Facts about them, read from jax 0.10.2's lowerings and
checked by running them here (`s`/`d`/`c`/`z` prefix for float32/float64/complex64/complex128):
  - every target takes `num_batch_dims` as a frontend attribute and matrices in
    column-major layout (minor-to-major [nb, nb+1, nb-1, ..., 0]); vectors and the int32
    `info` per matrix are row-major; result 0 aliases operand 0 (not geev's).
  - `lapack_?syevd_ffi(a)` (real) and `lapack_?heevd_ffi(a)` (complex), backend_config
    {mode = 'V' (86), uplo = 'L' (76)}, return (eigenvectors (.., n, n), eigenvalues
    ascending (.., n) of the real dtype, info (..)).
  - `lapack_?gesdd_ffi(a)`, mode 'A' (65, full), 'S' (83, reduced) or 'N' (78, values
    only), returns (overwritten a, s (.., k) of the real dtype, u (.., m, m or k),
    vt (.., n or k, n), info); with mode 'N' u and vt are left unwritten (jax allocates
    them full size; reduced sizes run as well, checked here on a 20000 × 8 matrix).
  - `lapack_?geev_ffi(a)`, {compute_left, compute_right} each 'V' (86) or 'N' (78),
    returns for a real matrix (wr, wi (.., n), vl, vr (.., n, n) complex, info) and for a
    complex one (w, vl, vr, info): jaxlib unpacks a real matrix's conjugate-pair columns
    into complex eigenvectors itself. The eigenvectors are of unit 2-norm with their
    largest entry real (positive for a complex matrix; a real matrix's have a free sign,
    which jaxlib's sgeev and NumPy's chose differently on a float32 matrix here), the
    values in the order NumPy's geev gives (the same here).
  - `lapack_?geqrf_ffi(a)` returns (r and the Householder vectors packed (.., m, n),
    taus (.., k)); `lapack_?orgqr_ffi` (real) or `lapack_?ungqr_ffi` (complex)
    (packed (.., m, c), taus) returns q (.., m, c) from
    the packed vectors (c = m for a complete q: the packed matrix padded with zero columns).
  - a nonzero `info` (no convergence) makes the results nan, as jax does; NumPy raises
    LinAlgError there, so the Python backend raises where XLA gives nan.
LAPACK takes no empty operand: an input with no entries lowers to NumPy's results as
constants (empty arrays, identities for a full u, vh or complete q).
"""
from __future__ import annotations

import numpy as np
import s2s_runtime as rt

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.primitives import ops
from s2s.primitives.complex_parts import complex_dtype, part_dtype
from s2s.primitives.linalg.contraction import matmul
from s2s.primitives.linalg.factorizations import triangular_solve
from s2s.primitives.linalg.matrices import (LAPACK_PREFIXES, aval_of, batch_matrix_function, check_matrices,
                                            layout_attribute, lowered_as, mT, tensor_type, triangle_mask)
from s2s.primitives.linalg.solves import solve
from s2s.staging import Primitive

REAL_DTYPES = (dtypes.float32, dtypes.float64)
QR_MODES = ("reduced", "complete", "r")


# ---------------------------------------------------------------------------------------
# Declarations


def _eigh_abstract(a, *, uplo):
    if uplo not in ("L", "U"):
        raise ShapeError(f"eigh reads the triangle uplo = 'L' or 'U', got {uplo!r}")
    check_matrices("eigh", a, square=True)
    return [ShapedArray(a.shape[:-1], part_dtype(a.dtype)), a.strip_weak_type()]


def _svd_shapes(shape, full_matrices: bool, compute_uv: bool):
    """The shapes of (u, s, vh), or of (s,) without compute_uv, for a (.., m, n) input."""
    *batch, m, n = shape
    batch, k = tuple(batch), min(m, n)
    if not compute_uv:
        return [batch + (k,)]
    return [batch + (m, m if full_matrices else k), batch + (k,),
            batch + (n if full_matrices else k, n)]


def _svd_abstract(a, *, full_matrices, compute_uv):
    check_matrices("svd", a, square=False)
    shapes = _svd_shapes(a.shape, full_matrices, compute_uv)
    values = len(shapes) // 2     # s is the middle result, or the only one
    return [ShapedArray(s, part_dtype(a.dtype) if i == values else a.dtype)
            for i, s in enumerate(shapes)]


def _qr_shapes(shape, mode: str):
    """The shapes of (q, r), or of (r,) for mode 'r', for a (.., m, n) input."""
    *batch, m, n = shape
    batch = tuple(batch)
    k = m if mode == "complete" else min(m, n)
    r = batch + (k, n)
    return [r] if mode == "r" else [batch + (m, k), r]


def _qr_abstract(a, *, mode):
    if mode not in QR_MODES:
        raise ShapeError(f"qr mode must be one of {', '.join(QR_MODES)}, got {mode!r}")
    check_matrices("qr", a, square=False)
    return [ShapedArray(s, a.dtype) for s in _qr_shapes(a.shape, mode)]


def _pinv_abstract(a, *, rcond, hermitian):
    check_matrices("pinv", a, square=hermitian)
    *batch, m, n = a.shape
    return ShapedArray((*batch, n, m), a.dtype)


# (w, v) with a @ v = v * w for each symmetric matrix, reading its lower triangle.
eigh = Primitive("eigh", _eigh_abstract, lambda a, *, uplo: list(np.linalg.eigh(a, UPLO=uplo)),
                 multiple_results=True)
# (u, s, vh) with a = u * s @ vh, s descending; (s,) without compute_uv.
svd = Primitive("svd", _svd_abstract,
                lambda a, *, full_matrices, compute_uv: list(
                    np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
                    if compute_uv else [np.linalg.svd(a, compute_uv=False)]),
                multiple_results=True)
# (q, r) with a = q @ r, q orthonormal columns, r upper triangular; (r,) for mode 'r'.
qr = Primitive("qr", _qr_abstract,
               lambda a, *, mode: [np.linalg.qr(a, mode="r")] if mode == "r"
               else list(np.linalg.qr(a, mode=mode)),
               multiple_results=True)
# The pseudo-inverse: singular values at most rcond * the largest count as zero.
# With `hermitian`, of the symmetric matrix of a's lower triangle (NumPy's eigh-based path).
pinv = Primitive("pinv", _pinv_abstract, lambda a, *, rcond, hermitian: np.linalg.pinv(
    a, rcond=rcond, hermitian=hermitian))



def _eig_abstract(a, *, vectors):
    check_matrices("eig", a, square=True)
    dtype = complex_dtype(part_dtype(a.dtype))
    values = ShapedArray(a.shape[:-1], dtype)
    return [values, ShapedArray(a.shape, dtype)] if vectors else [values]


# (w, v) with a @ v = v * w, complex even for a real matrix, in LAPACK geev's order, each
# eigenvector of unit 2-norm with its largest entry real; (w,) without `vectors`.
eig = Primitive("eig", _eig_abstract,
                lambda a, *, vectors: list(rt.eig(a)) if vectors else [rt.eigvals(a)],
                multiple_results=True)


def _emit_eig(eqn, a):
    """np.linalg.eig where it is exactly the primitive (a complex matrix); NumPy's results
    for a real matrix are real where its eigenvalues all are, so rt.eig makes them complex."""
    runtime = "rt" if eqn.invars[0].aval.dtype in REAL_DTYPES else "np.linalg"
    return call(f"{runtime}.{'eig' if eqn.params['vectors'] else 'eigvals'}", a)


register(eig, _emit_eig)
register(eigh, lambda eqn, a: call("np.linalg.eigh", a) if eqn.params["uplo"] == "L"
         else call("np.linalg.eigh", a, UPLO=eqn.params["uplo"]))
register(svd, lambda eqn, a: call("np.linalg.svd", a, full_matrices=eqn.params["full_matrices"])
         if eqn.params["compute_uv"] else call("np.linalg.svd", a, compute_uv=False))
register(qr, lambda eqn, a: call("np.linalg.qr", a, mode=eqn.params["mode"]))
register(pinv, lambda eqn, a: call("np.linalg.pinv", a, rcond=eqn.params["rcond"],
                                   **({"hermitian": True} if eqn.params["hermitian"] else {})))

# ---------------------------------------------------------------------------------------
# Derivatives (`a_dot` is the input's tangent). Complex matrices follow JAX's convention:
# the rules are JAX's formulas with conjugate transposes (ᴴ), and a transposed rule is
# never conjugated (README, complex numbers).


def _is_complex(x) -> bool:
    return dtypes.is_complex(aval_of(x).dtype)


def _mH(x):
    """The conjugate transpose of each matrix of a batch (the transpose of a real one)."""
    return ops.conj(mT(x)) if _is_complex(x) else mT(x)


def _real_part(x):
    return ops.real(x) if _is_complex(x) else x


def _like(x, y):
    """x (real) in y's dtype, so it multiplies y's complex entries."""
    return ops.convert(x, aval_of(y).dtype) if aval_of(x).dtype != aval_of(y).dtype else x


def _column_dots(x, y):
    """Σ_k conj(x[.., k, i]) y[.., k, i]: diag(xᴴ y) without forming xᴴ y."""
    return ops.reduce_sum((ops.conj(x) if _is_complex(x) else x) * y, (aval_of(x).ndim - 2,))


def _row(x):
    """A vector of a batch as a row, x[.., None, :], to broadcast against matrices."""
    return ops.expand_dims(x, (aval_of(x).ndim - 1,))


def _column(x):
    """A vector of a batch as a column, x[.., :, None]."""
    return ops.expand_dims(x, (aval_of(x).ndim,))


def _reciprocal_differences(d):
    """F[i, j] = 1 / d[i, j] off the diagonal and 0 on it, from a matrix d of differences
    zero on the diagonal (1 / (d + I) − I, as JAX writes it: a tie off the diagonal
    gives inf)."""
    identity = ops.eye(aval_of(d).shape[-1], dtype=aval_of(d).dtype)
    return 1 / (d + identity) - identity


def _eigh_jvp(primals, tangents, *, uplo):
    """ẇ = Re diag(vᴴ Ȧ v) and v̇ = v (F ∘ vᴴ Ȧ v) with F[i, j] = 1 / (w_j − w_i), for Ȧ
    the tangent of the Hermitian matrix the value reads: the `uplo` triangle of the
    tangent, mirrored (conjugated), with a real diagonal. (JAX symmetrizes (A + Aᴴ)/2 for
    the value too; NumPy's value reads one triangle, so for a matrix that is not Hermitian
    the derivative must as well.) A complex eigenvector's phase is free; v̇ ⟂ v is JAX's
    choice."""
    (a,), (a_dot,) = primals, tangents
    w, v = eigh.bind(a, uplo=uplo)
    a_dot = lower_hermitian(a_dot) if uplo == "L" else lower_hermitian(_mH(a_dot))
    a_dot_v = matmul(a_dot, v)
    vh_a_dot_v = matmul(_mH(v), a_dot_v)
    f = _reciprocal_differences(_row(w) - _column(w))
    return [w, v], [_real_part(_column_dots(v, a_dot_v)), matmul(v, _like(f, v) * vh_a_dot_v)]


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    """With S = Uᴴ Ȧ V: ṡ = Re diag(S), U̇ = U (F ∘ (S s + (S s)ᴴ)), V̇ = V (F ∘ (s S + (s S)ᴴ))
    with F[i, j] = 1 / (s_j² − s_i²), plus the parts outside U's (V's) span for a tall
    (wide) matrix, (I − U Uᴴ) Ȧ V / s (Townsend 2016, as JAX). A complex pair of singular
    vectors has a free common phase: U̇ takes i Im(S_jj) / s_j along u_j, JAX's choice."""
    (a,), (a_dot,) = primals, tangents
    m, n = aval_of(a).shape[-2:]
    if compute_uv and full_matrices and m != n:
        raise UnsupportedFunctionError(
            "the derivative of np.linalg.svd(a, full_matrices=True) of a non-square matrix "
            "is not implemented (the extra singular vectors are not unique)",
            "pass full_matrices=False")
    # The primal's own call where it has these shapes (LAPACK's signs can depend on it).
    u, s, vh = svd.bind(a, full_matrices=full_matrices and m == n, compute_uv=True)
    v = _mH(vh)
    a_dot_v = matmul(a_dot, v)
    s_dot = _real_part(_column_dots(u, a_dot_v))
    if not compute_uv:
        return [s], [s_dot]
    s_row = _row(s)
    dS = matmul(_mH(u), a_dot_v)
    f = _like(_reciprocal_differences((s_row + mT(s_row)) * (s_row - mT(s_row))), dS)
    s_row = _like(s_row, dS)
    dS_s, s_dS = s_row * dS, mT(s_row) * dS
    u_rotation = f * (dS_s + _mH(dS_s))
    if _is_complex(dS):     # (for a real matrix S_jj is real: the term is zero)
        u_rotation = u_rotation + _phase_term(dS, s)
    u_dot = matmul(u, u_rotation)
    v_dot = matmul(v, f * (s_dS + _mH(s_dS)))
    if m > n:
        u_dot = u_dot + (a_dot_v - matmul(u, matmul(_mH(u), a_dot_v))) / s_row
    if n > m:
        a_dot_h_u = matmul(_mH(a_dot), u)
        v_dot = v_dot + (a_dot_h_u - matmul(v, matmul(vh, a_dot_h_u))) / s_row
    return [u, s, vh], [u_dot, s_dot, _mH(v_dot)]


def _phase_term(dS, s):
    """(S − Sᴴ) diag(1 / (2 s)): i Im(S_jj) / s_j on the diagonal, 0 where s_j = 0 (JAX's
    choice of the singular vectors' common phase)."""
    zero = ops.eq(s, ops.full((), 0, aval_of(s).dtype))
    zeros = ops.full(aval_of(s).shape, 0, aval_of(s).dtype)
    twice = s + s
    half_inverse = ops.select(zero, zeros, 1 / ops.select(zero, zeros + 1, twice))
    identity = ops.eye(aval_of(s).shape[-1], dtype=aval_of(s).dtype)
    return (dS - _mH(dS)) * _like(identity * _row(half_inverse), dS)


def _thin_qr_jvp(q, r, a_dot):
    """For a = q r with m ≥ n: with C = qᴴ Ȧ r⁻¹ and Ω = tril(C, −1) − tril(C, −1)ᴴ
    (+ i Im diag(C) for complex matrices, as JAX: r's diagonal stays real),
    q̇ = q (Ω − C) + Ȧ r⁻¹ and ṙ = (C − Ω) r (Walter and Lehmann; Townsend's note)."""
    a_dot_r_inv = triangular_solve.bind(r, a_dot, left_side=False, lower=False,
                                        transpose_a=False, unit_diagonal=False)
    c = matmul(_mH(q), a_dot_r_inv)
    below = ops.tril(c, -1)
    omega = below - _mH(below)
    if _is_complex(c):
        identity = ops.eye(aval_of(c).shape[-1], dtype=part_dtype(aval_of(c).dtype))
        omega = omega + _like(identity, c) * (c - _like(ops.real(c), c))
    return matmul(q, omega - c) + a_dot_r_inv, matmul(c - omega, r)


def _complete_q_jvp(q, q_dot_mn):
    """The tangent of the last m − n columns of a complete q (m × m) of a tall matrix, from
    that of its first n (Roberts and Roberts, arXiv:2409.13374, eqs. 32-33, as JAX): with
    Z = q_pn (q_nn − I)⁻¹, q̇_mp = q̇_mn Zᴴ − (q_mn + q_mp Z)(q̇_pn − Z q̇_nn)ᴴ."""
    m, n = aval_of(q).shape[-1], aval_of(q_dot_mn).shape[-1]
    rows, cols = aval_of(q).ndim - 2, aval_of(q).ndim - 1
    q_mn, q_mp = ops.slice_in_dim(q, 0, n, cols), ops.slice_in_dim(q, n, m, cols)
    q_nn, q_pn = ops.slice_in_dim(q_mn, 0, n, rows), ops.slice_in_dim(q_mn, n, m, rows)
    q_dot_nn = ops.slice_in_dim(q_dot_mn, 0, n, rows)
    q_dot_pn = ops.slice_in_dim(q_dot_mn, n, m, rows)
    z_t = solve.bind(_mH(q_nn - ops.eye(n, dtype=aval_of(q).dtype)), _mH(q_pn))
    z = _mH(z_t)
    return matmul(q_dot_mn, z_t) - matmul(q_mn + matmul(q_mp, z),
                                             _mH(q_dot_pn - matmul(z, q_dot_nn)))


def _qr_jvp(primals, tangents, *, mode):
    """The thin rule for m ≥ n (extended to a complete q by _complete_q_jvp); a wide
    a = [a1 a2] is a square QR of a1 and r2 = qᴴ a2, so ṙ2 = q̇ᴴ a2 + qᴴ ȧ2."""
    (a,), (a_dot,) = primals, tangents
    m, n = aval_of(a).shape[-2:]
    rows, cols = aval_of(a).ndim - 2, aval_of(a).ndim - 1
    outs = qr.bind(a, mode="reduced" if mode == "r" else mode)
    q, r = outs
    if m < n:
        q_dot, r1_dot = _thin_qr_jvp(q, ops.slice_in_dim(r, 0, m, cols),
                                     ops.slice_in_dim(a_dot, 0, m, cols))
        r2_dot = matmul(_mH(q_dot), ops.slice_in_dim(a, m, n, cols)) \
            + matmul(_mH(q), ops.slice_in_dim(a_dot, m, n, cols))
        r_dot = ops.concatenate([r1_dot, r2_dot], cols)
    elif mode == "complete" and m > n:
        q_dot_mn, r_dot_nn = _thin_qr_jvp(ops.slice_in_dim(q, 0, n, cols),
                                          ops.slice_in_dim(r, 0, n, rows), a_dot)
        q_dot = ops.concatenate([q_dot_mn, _complete_q_jvp(q, q_dot_mn)], cols)
        zeros = ops.full(aval_of(r).shape[:-2] + (m - n, n), 0, aval_of(r).dtype)
        r_dot = ops.concatenate([r_dot_nn, zeros], rows)
    else:
        q_dot, r_dot = _thin_qr_jvp(q, r, a_dot)
    return ([r], [r_dot]) if mode == "r" else ([q, r], [q_dot, r_dot])


def _pinv_jvp(primals, tangents, *, rcond, hermitian):
    """Golub and Pereyra (1973), as JAX's pinv: with P = a⁺,
    Ṗ = −P Ȧ P + P Pᴴ Ȧᴴ (I − a P) + (I − P a) Ȧᴴ Pᴴ P, products ordered for the shape.
    A hermitian pinv is of the Hermitian matrix its lower triangle makes, and so is its
    tangent (as eigh's)."""
    (a,), (a_dot,) = primals, tangents
    p = pinv.bind(a, rcond=rcond, hermitian=hermitian)
    if hermitian:
        a, a_dot = lower_hermitian(a), lower_hermitian(a_dot)
    m, n = aval_of(a).shape[-2:]
    a_dot_t, p_t = _mH(a_dot), _mH(p)
    if m >= n:
        s = matmul(matmul(p, p_t), a_dot_t)
        t = matmul(matmul(a_dot_t, p_t), p)
        p_dot = -matmul(matmul(p, a_dot), p) + s - matmul(matmul(s, a), p) + t \
            - matmul(matmul(p, a), t)
    else:
        s = matmul(p, matmul(p_t, a_dot_t))
        t = matmul(a_dot_t, matmul(p_t, p))
        p_dot = -matmul(p, matmul(a_dot, p)) + s - matmul(s, matmul(a, p)) + t \
            - matmul(p, matmul(a, t))
    return p, p_dot


def _diagonal(x):
    """The diagonal of each matrix of a batch, (.., n)."""
    identity = ops.eye(aval_of(x).shape[-1], dtype=aval_of(x).dtype)
    return ops.reduce_sum(x * identity, (aval_of(x).ndim - 2,))


def _eig_jvp(primals, tangents, *, vectors):
    """For distinct eigenvalues (nondegenerate perturbation theory, as JAX): with
    P = v⁻¹ Ȧ v, ẇ = diag(P) and v̇ = v (F ∘ P) + v diag(c), F[i, j] = 1 / (w_j − w_i).
    c fixes the free scale of each eigenvector as LAPACK's geev does (unit 2-norm, its
    largest entry v_kj real), JAX's choice: c_j = −Re(v_jᴴ u_j) − i Im(u_kj) / v_kj for
    u = v (F ∘ P). A repeated eigenvalue makes F, and the eigenvectors' tangents, inf."""
    (a,), (a_dot,) = primals, tangents
    w, v = eig.bind(a, vectors=True)
    a_dot = _like(a_dot, v)
    p = solve.bind(v, matmul(a_dot, v))
    w_dot = _diagonal(p)
    if not vectors:
        return [w], [w_dot]
    u = matmul(v, _reciprocal_differences(_row(w) - _column(w)) * p)
    rows = aval_of(v).ndim - 2
    largest = ops.argmax(ops.abs_(v), rows, dtypes.int32)
    at_largest = _like(ops.eq(ops.iota(aval_of(v).shape, rows, dtypes.int32),
                              ops.expand_dims(largest, (rows,))), v)
    phase = ops.imag(ops.reduce_sum(at_largest * u, (rows,))) \
        / ops.real(ops.reduce_sum(at_largest * v, (rows,)))
    c = ops.complex_from_parts(ops.neg(ops.real(_column_dots(v, u))), ops.neg(phase))
    return [w, v], [w_dot, u + v * _row(c)]


_jvp.register(eig, _eig_jvp)
_jvp.register(eigh, _eigh_jvp)
_jvp.register(svd, _svd_jvp)
_jvp.register(qr, _qr_jvp)
_jvp.register(pinv, _pinv_jvp)

# ---------------------------------------------------------------------------------------
# StableHLO lowering through jaxlib's LAPACK targets (facts in the module docstring).

_MODE_CHARS = {"eigh": "V", "full": "A", "reduced": "S", "values": "N", "vectors": "V"}


def _lapack_call(ctx, routine: str, operands, operand_avals, result_avals, config: str,
                 hint: str, in_place: bool = True) -> list[str]:
    """One `lapack_<s|d|c|z><routine>_ffi` custom call on the matrices of operand 0's
    dtype, passed column-major (vectors and info row-major); result 0 aliases operand 0
    where `in_place`. Returns the names of its results."""
    nb = len(operand_avals[0].shape) - 2
    row_major = lambda rank: list(range(rank - 1, -1, -1))  # noqa: E731

    def layout(aval):
        rank = len(aval.shape)
        return layout_attribute([nb, nb + 1] + row_major(nb) if rank == nb + 2 else row_major(rank))
    prefix = LAPACK_PREFIXES[np.dtype(operand_avals[0].dtype)]
    in_types = ", ".join(tensor_type(x.shape, x.dtype) for x in operand_avals)
    out_types = ", ".join(tensor_type(x.shape, x.dtype) for x in result_avals)
    several = len(result_avals) > 1
    alias = (f"output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = "
             f"{'[0]' if several else '[]'}, operand_index = 0, operand_tuple_indices = []>], "
             if in_place else "")
    name = ctx.op(
        f"stablehlo.custom_call @lapack_{prefix}{routine}_ffi({', '.join(operands)}) "
        f"{{backend_config = \"\", mhlo.backend_config = {{{config}}}, "
        f"mhlo.frontend_attributes = {{num_batch_dims = \"{nb}\"}}, "
        f"operand_layouts = [{', '.join(layout(x) for x in operand_avals)}], {alias}"
        f"result_layouts = [{', '.join(layout(x) for x in result_avals)}]}} : "
        f"({in_types}) -> {f'({out_types})' if several else out_types}",
        hint, results=len(result_avals))
    return [f"{name}#{i}" for i in range(len(result_avals))] if several else [name]


def _mode_config(mode: str) -> str:
    return f"mode = {ord(_MODE_CHARS[mode])} : ui8"


def _nan_where_failed(ctx, info: str, value: str, aval: ShapedArray, batch: tuple) -> str:
    """`value` where LAPACK's info is 0, nan for every matrix of the batch it failed on."""
    i32, bool_t = dtypes.int32, tensor_type(aval.shape, dtypes.bool_)
    ok = ctx.op(f"stablehlo.compare EQ, {info}, {ctx.constant(0, i32, batch)}, SIGNED : "
                f"({tensor_type(batch, i32)}, {tensor_type(batch, i32)}) -> {tensor_type(batch, dtypes.bool_)}")
    ok = ctx.op(f"stablehlo.broadcast_in_dim {ok}, dims = [{', '.join(map(str, range(len(batch))))}] : "
                f"({tensor_type(batch, dtypes.bool_)}) -> {bool_t}")
    nan = ctx.constant(float("nan"), aval.dtype, aval.shape)
    return ctx.op(f"stablehlo.select {ok}, {value}, {nan} : {bool_t}, {tensor_type(aval.shape, aval.dtype)}",
                  "checked")


def _results_of_empty_input(ctx, eqn) -> list[str] | None:
    """NumPy's results where the input has no entries (LAPACK takes no empty operand):
    empty arrays, and identities for the square u, vh or q of a full decomposition.
    None where the input has entries."""
    if 0 not in eqn.invars[0].aval.shape:
        return None
    outs = []
    for out in eqn.outvars:
        shape, dtype = out.aval.shape, out.aval.dtype
        if 0 in shape:
            outs.append(ctx.op(f"stablehlo.constant dense<> : {tensor_type(shape, dtype)}"))
            continue
        ints, bools = tensor_type(shape, dtypes.int32), tensor_type(shape, dtypes.bool_)
        rows = ctx.op(f"stablehlo.iota dim = {len(shape) - 2} : {ints}")
        cols = ctx.op(f"stablehlo.iota dim = {len(shape) - 1} : {ints}")
        diagonal = ctx.op(f"stablehlo.compare EQ, {rows}, {cols}, SIGNED : ({ints}, {ints}) -> {bools}")
        outs.append(ctx.op(f"stablehlo.select {diagonal}, {ctx.constant(1, dtype, shape)}, "
                           f"{ctx.constant(0, dtype, shape)} : {bools}, {tensor_type(shape, dtype)}", "identity"))
    return outs


def _lower_eigh(ctx, eqn, a):
    if (empty := _results_of_empty_input(ctx, eqn)) is not None:
        return empty
    aval = eqn.invars[0].aval
    w_aval, v_aval = (v.aval for v in eqn.outvars)
    info = ShapedArray(aval.shape[:-2], dtypes.int32)
    routine = "heevd" if dtypes.is_complex(aval.dtype) else "syevd"
    v, w, status = _lapack_call(ctx, routine, [a], [aval], [v_aval, w_aval, info],
                                f"{_mode_config('eigh')}, uplo = {ord(eqn.params['uplo'])} : ui8",
                                routine)
    return [_nan_where_failed(ctx, status, w, w_aval, info.shape),
            _nan_where_failed(ctx, status, v, v_aval, info.shape)]


def _lower_svd(ctx, eqn, a):
    if (empty := _results_of_empty_input(ctx, eqn)) is not None:
        return empty
    aval = eqn.invars[0].aval
    full, compute_uv = eqn.params["full_matrices"], eqn.params["compute_uv"]
    # Mode 'N' leaves u and vt unwritten; reduced buffers keep a tall matrix's from m × m.
    u_shape, s_shape, vt_shape = _svd_shapes(aval.shape, full and compute_uv, True)
    results = [aval, ShapedArray(s_shape, part_dtype(aval.dtype)), ShapedArray(u_shape, aval.dtype),
               ShapedArray(vt_shape, aval.dtype), ShapedArray(aval.shape[:-2], dtypes.int32)]
    mode = "values" if not compute_uv else "full" if full else "reduced"
    _, s, u, vt, status = _lapack_call(ctx, "gesdd", [a], [aval], results, _mode_config(mode),
                                       "gesdd")
    outs = [u, s, vt] if compute_uv else [s]
    return [_nan_where_failed(ctx, status, x, v.aval, aval.shape[:-2])
            for x, v in zip(outs, eqn.outvars)]


def _lower_eig(ctx, eqn, a):
    """geev: a real matrix's eigenvalues come as real and imaginary parts, joined here; its
    eigenvectors come complex already (jaxlib unpacks LAPACK's conjugate-pair columns)."""
    if (empty := _results_of_empty_input(ctx, eqn)) is not None:
        return empty
    aval = eqn.invars[0].aval
    w_aval = eqn.outvars[0].aval
    vectors_aval = ShapedArray(aval.shape, w_aval.dtype)
    batch = aval.shape[:-2]
    real = aval.dtype in REAL_DTYPES
    values = [ShapedArray(w_aval.shape, aval.dtype)] * (2 if real else 1)
    right = "vectors" if eqn.params["vectors"] else "values"
    config = f"compute_left = {ord(_MODE_CHARS['values'])} : ui8, " \
             f"compute_right = {ord(_MODE_CHARS[right])} : ui8"
    *w, _, v, status = _lapack_call(ctx, "geev", [a], [aval],
                                    values + [vectors_aval, vectors_aval,
                                              ShapedArray(batch, dtypes.int32)],
                                    config, "geev", in_place=False)
    if real:
        parts = tensor_type(w_aval.shape, aval.dtype)
        w = [ctx.op(f"stablehlo.complex {w[0]}, {w[1]} : ({parts}, {parts}) -> "
                    f"{tensor_type(w_aval.shape, w_aval.dtype)}", "eigenvalues")]
    outs = [w[0], v] if eqn.params["vectors"] else [w[0]]
    return [_nan_where_failed(ctx, status, x, out.aval, batch) for x, out in zip(outs, eqn.outvars)]


def _lower_qr(ctx, eqn, a):
    if (empty := _results_of_empty_input(ctx, eqn)) is not None:
        return empty
    aval = eqn.invars[0].aval
    mode = eqn.params["mode"]
    *batch, m, n = aval.shape
    batch, k, dtype = tuple(batch), min(m, n), aval.dtype
    taus_aval = ShapedArray(batch + (k,), dtype)
    packed, taus = _lapack_call(ctx, "geqrf", [a], [aval], [aval, taus_aval], "", "geqrf")
    r_aval = eqn.outvars[-1].aval
    outs = [_upper(ctx, _leading_block(ctx, packed, aval, rows=r_aval.shape[-2]), r_aval)]
    if mode != "r":
        q_aval = eqn.outvars[0].aval
        if m < n:
            reflectors = _leading_block(ctx, packed, aval, cols=m)
        elif q_aval.shape[-1] > n:   # a complete q of a tall matrix: zero columns appended
            zeros = ", ".join(["0"] * (len(batch) + 2))
            reflectors = ctx.op(
                f"stablehlo.pad {packed}, {ctx.constant(0, dtype)}, low = [{zeros}], "
                f"high = [{', '.join(['0'] * (len(batch) + 1) + [str(m - n)])}], interior = [{zeros}] : "
                f"({tensor_type(aval.shape, dtype)}, {tensor_type((), dtype)}) -> {tensor_type(q_aval.shape, dtype)}")
        else:
            reflectors = packed
        routine = "ungqr" if dtypes.is_complex(dtype) else "orgqr"
        (q,) = _lapack_call(ctx, routine, [reflectors, taus], [q_aval, taus_aval], [q_aval],
                            "", routine)
        outs.insert(0, q)
    return outs


def _leading_block(ctx, x: str, aval, rows: int | None = None, cols: int | None = None) -> str:
    """x[.., :rows, :cols] (the whole of an axis where None) for x of `aval`."""
    shape = aval.shape
    limits = shape[:-2] + (shape[-2] if rows is None else rows, shape[-1] if cols is None else cols)
    if limits == shape:
        return x
    ranges = ", ".join(f"0:{d}" for d in limits)
    return ctx.op(f"stablehlo.slice {x} [{ranges}] : ({tensor_type(shape, aval.dtype)}) -> "
                  f"{tensor_type(limits, aval.dtype)}")


def _upper(ctx, x: str, aval: ShapedArray) -> str:
    """The upper triangle of each matrix of x, zeros below (geqrf leaves reflectors there)."""
    keep = triangle_mask(ctx, aval.shape, lower=False)
    zero = ctx.constant(0, aval.dtype, aval.shape)
    return ctx.op(f"stablehlo.select {keep}, {x}, {zero} : {tensor_type(aval.shape, dtypes.bool_)}, "
                  f"{tensor_type(aval.shape, aval.dtype)}")


def lower_hermitian(a):
    """The Hermitian (real: symmetric) matrices of a's lower triangles, the imaginary part
    of the diagonal dropped: what LAPACK's heevd and syevd, and NumPy's hermitian paths, read."""
    below = ops.tril(a, -1)
    if not _is_complex(a):
        return ops.tril(a) + mT(below)
    identity = ops.eye(aval_of(a).shape[-1], dtype=part_dtype(aval_of(a).dtype))
    return below + _mH(below) + _like(identity * ops.real(a), a)


def pinv_by_svd(a, *, rcond, hermitian):
    """a⁺ = V diag(1/s) Uᴴ over the singular values above rcond · max(s) (the others
    count as zero), as np.linalg.pinv computes it."""
    *batch, m, n = aval_of(a).shape
    if 0 in (m, n):     # no singular values: an empty result, as NumPy's
        return ops.full((*batch, n, m), 0, aval_of(a).dtype)
    if hermitian:
        a = lower_hermitian(a)
    u, s, vh = svd.bind(a, full_matrices=False, compute_uv=True)
    nd = aval_of(s).ndim
    largest = ops.reduce_max(s, (nd - 1,))
    cutoff = ops.expand_dims(largest, (nd - 1,)) * ops.full((), rcond, aval_of(s).dtype)
    kept = ops.lt(cutoff, s)
    zeros = ops.full(aval_of(s).shape, 0, aval_of(s).dtype)
    s_inv = ops.select(kept, 1 / ops.select(kept, s, zeros + 1), zeros)
    return matmul(_mH(vh), _like(_column(s_inv), u) * _mH(u))


_hlo.register(eig, _lower_eig)
_hlo.register(eigh, _lower_eigh)
_hlo.register(svd, _lower_svd)
_hlo.register(qr, _lower_qr)
_hlo.register(pinv, lowered_as(pinv_by_svd))

# ---------------------------------------------------------------------------------------
# Batching: every decomposition is batched over leading dimensions already.

for _prim in (eig, eigh, svd, qr, pinv):
    _vmap.register(_prim, batch_matrix_function(_prim))
