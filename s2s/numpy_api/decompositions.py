"""np.linalg's decompositions and what NumPy builds on them: eig, eigvals, eigh, eigvalsh,
svd, svdvals, qr, pinv, lstsq, matrix_rank, and matrix_power (products and inverses only).

The decompositions are one primitive each (`s2s.primitives.linalg.decompositions`), so emitted
code calls `np.linalg.eig`, `np.linalg.eigh`, `np.linalg.svd` and `np.linalg.qr` and
derivatives are the textbook formulas. Dtypes are np.linalg's (integers computed in
float64); every function takes complex matrices.

Differences from NumPy, by design: `eig` and `eigvals` are complex always (NumPy's are
real for a real matrix whose eigenvalues all are: a dtype that depends on the values);
`lstsq` of a tall matrix always returns the residuals, where NumPy returns an empty array
for a rank-deficient one (the shape of a result cannot depend on the values), and its
`rank` is a 0-d int array; qr's 'raw' mode is refused. `hermitian=True` reads the lower
triangle, as NumPy's eigh-based paths do.
"""
from __future__ import annotations

import operator

import numpy as np
from numpy.linalg._linalg import EigResult, EighResult, QRResult, SVDResult  # NumPy's named results

from s2s import dtypes
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.numpy_api._base import aval, convert, implements
from s2s.numpy_api.indexing import take_along_axis
from s2s.numpy_api.linalg import inv, linalg_matrices, matmul
from s2s.numpy_api.math import absolute, conjugate
from s2s.numpy_api.reductions import argsort, sort
from s2s.numpy_api.shaping import expand_dims, flip, swapaxes
from s2s.primitives.linalg import decompositions as dc
from s2s.primitives import ops


def _hermitian(name: str, a, UPLO: str):
    if UPLO not in ("L", "U"):
        raise ShapeError(f"{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    (a,) = linalg_matrices(name, a)
    return a


@implements(np.linalg.eig)
def eig(a):
    """(eigenvalues, eigenvectors as columns) of each square matrix, complex, in LAPACK's
    order, each eigenvector of unit norm with its largest entry real."""
    (a,) = linalg_matrices("np.linalg.eig", a)
    return EigResult(*dc.eig.bind(a, vectors=True))


@implements(np.linalg.eigvals)
def eigvals(a):
    """The eigenvalues of each square matrix, complex, in LAPACK's order."""
    (a,) = linalg_matrices("np.linalg.eigvals", a)
    return dc.eig.bind(a, vectors=False)[0]


@implements(np.linalg.eigh)
def eigh(a, UPLO="L"):
    """(eigenvalues ascending, eigenvectors as columns) of each Hermitian (symmetric)
    matrix, read from its UPLO triangle (and the real part of its diagonal)."""
    return EighResult(*dc.eigh.bind(_hermitian("np.linalg.eigh", a, UPLO), uplo=UPLO))


@implements(np.linalg.eigvalsh)
def eigvalsh(a, UPLO="L"):
    """The eigenvalues of each Hermitian (symmetric) matrix, ascending."""
    return dc.eigh.bind(_hermitian("np.linalg.eigvalsh", a, UPLO), uplo=UPLO)[0]


@implements(np.linalg.svd)
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """(U, S, Vh) with a = U * S @ Vh and S descending, or S alone without compute_uv."""
    if hermitian:
        return _symmetric_svd(a, compute_uv)
    (a,) = linalg_matrices("np.linalg.svd", a, square=False)
    out = dc.svd.bind(a, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return SVDResult(*out) if compute_uv else out[0]


def _symmetric_svd(a, compute_uv):
    """NumPy's SVD of Hermitian matrices (read from the lower triangle), by eigh: S = |w|
    descending, U the eigenvectors in that order and Vh = (U · ±1)ᴴ, −1 where w < 0
    (NumPy's copysign(1, w): +1 for w = 0, as for every w but −0.0)."""
    if not compute_uv:
        return flip(sort(absolute(eigvalsh(a))), axis=-1)
    w, u = eigh(a)
    order = flip(argsort(absolute(w)), axis=-1)
    u = take_along_axis(u, expand_dims(order, -2), axis=-1)
    one = ops.full((), 1, aval(w).dtype)
    signs = ops.select(ops.lt(w, ops.full(aval(w).shape, 0, aval(w).dtype)),
                       ops.full(aval(w).shape, -1, aval(w).dtype), ops.broadcast_to(one, aval(w).shape))
    signs = expand_dims(take_along_axis(signs, order, axis=-1), -2)
    return SVDResult(u, take_along_axis(absolute(w), order, axis=-1),
                     conjugate(swapaxes(u * signs, -1, -2)))


@implements(np.linalg.svdvals)
def svdvals(x, /):
    """The singular values of each matrix, descending: svd(x, compute_uv=False)."""
    return svd(x, compute_uv=False)


@implements(np.linalg.qr)
def qr(a, mode="reduced"):
    """(Q, R) with a = Q @ R, or R alone for mode='r'."""
    if mode not in dc.QR_MODES:
        raise UnsupportedFunctionError(f"np.linalg.qr(mode={mode!r}) is not supported",
                                       "use mode='reduced', 'complete' or 'r'")
    (a,) = linalg_matrices("np.linalg.qr", a, square=False)
    out = dc.qr.bind(a, mode=mode)
    return out[0] if mode == "r" else QRResult(*out)


def _static_number(name: str, what: str, value) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise ShapeError(f"{name}: {what} must be a Python number, got {type(value).__name__}",
                         f"pass {what} as a constant")
    return float(value)


def _default_rtol(a) -> float:
    """max(M, N) · eps, NumPy's default relative cutoff for small singular values."""
    return max(aval(a).shape[-2:]) * float(np.finfo(aval(a).dtype).eps)


@implements(np.linalg.pinv)
def pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """The pseudo-inverse; singular values up to rcond · the largest count as zero
    (rcond defaults to 1e-15, or max(M, N) · eps when rtol=None, as NumPy)."""
    (a,) = linalg_matrices("np.linalg.pinv", a, square=bool(hermitian))
    if rcond is not None and rtol is not np._NoValue:
        raise ShapeError("np.linalg.pinv: `rtol` and `rcond` can't be both set")
    if rcond is None:
        rcond = 1e-15 if rtol is np._NoValue else _default_rtol(a) if rtol is None else rtol
    return dc.pinv.bind(a, rcond=_static_number("np.linalg.pinv", "rcond", rcond),
                        hermitian=bool(hermitian))


def _count_above(s, cutoff, dtype=np.int64):
    """How many singular values of each matrix are above `cutoff`."""
    above = ops.convert(ops.lt(cutoff, s), dtypes.canonicalize_dtype(dtype))
    return ops.reduce_sum(above, (len(aval(s).shape) - 1,))


def _relative_cutoff(s, rtol: float):
    """rtol · the largest singular value of each matrix, broadcast against s (0 for an
    empty matrix, which has none: NumPy's rank 0 and zero solution follow)."""
    nd = len(aval(s).shape)
    if aval(s).shape[-1] == 0:
        return ops.full(aval(s).shape[:-1] + (1,), 0, aval(s).dtype)
    largest = ops.expand_dims(ops.reduce_max(s, (nd - 1,)), (nd - 1,))
    return largest * ops.full((), rtol, aval(s).dtype)


@implements(np.linalg.lstsq)
def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s): x minimizes ‖b − a x‖ (the least-norm one), through the
    pseudo-inverse with NumPy's cutoff rcond · max(s) (rcond defaults to max(M, N) · eps)."""
    a, b = linalg_matrices("np.linalg.lstsq", a, b, square=False)
    sa, sb = aval(a).shape, aval(b).shape
    if len(sa) != 2 or len(sb) not in (1, 2):
        raise ShapeError(f"np.linalg.lstsq: a must be a matrix and b a vector or a matrix, got "
                         f"shapes {sa} and {sb}", "use np.linalg.pinv(a) @ b for stacks")
    m, n = sa
    if sb[0] != m:
        raise ShapeError(f"np.linalg.lstsq: incompatible dimensions: a has {m} rows, b {sb[0]}")
    rtol = _default_rtol(a) if rcond is None else _static_number("np.linalg.lstsq", "rcond", rcond)
    if rtol < 0:      # LAPACK's gelsd: a negative rcond means machine precision
        rtol = float(np.finfo(aval(a).dtype).eps)
    x = matmul(dc.pinv.bind(a, rcond=rtol, hermitian=False), b)
    (s,) = dc.svd.bind(a, full_matrices=False, compute_uv=False)
    rank = _count_above(s, _relative_cutoff(s, rtol), np.int32)   # LAPACK's gelsd's int
    if m > n:
        error = b - matmul(a, x)
        squares = error * error if aval(error).dtype.kind != "c" else \
            ops.real(error * conjugate(error))
        residuals = ops.reduce_sum(squares, (0,))
        residuals = ops.reshape(residuals, (1,)) if len(sb) == 1 else residuals
    else:
        residuals = ops.full((0,), 0, aval(x).dtype)
    return x, residuals, rank, s


@implements(np.linalg.matrix_rank)
def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """How many singular values of each matrix are above tol (default: rtol · max(s), rtol
    max(M, N) · eps), as an integer: it has no derivative."""
    if len(aval(A).shape) < 2:
        nonzero = ops.reduce_or(ops.ne(A, ops.full((), 0, aval(A).dtype)),
                                tuple(range(len(aval(A).shape))))
        return ops.convert(nonzero, dtypes.canonicalize_dtype(np.int64))
    (a,) = linalg_matrices("np.linalg.matrix_rank", A, square=hermitian)
    s = absolute(eigvalsh(a)) if hermitian else \
        dc.svd.bind(a, full_matrices=False, compute_uv=False)[0]
    if tol is None:
        relative = _default_rtol(a) if rtol is None else \
            _static_number("np.linalg.matrix_rank", "rtol", rtol)
        return _count_above(s, _relative_cutoff(s, relative))
    cutoff = convert(tol, aval(s).dtype)
    return _count_above(s, ops.expand_dims(cutoff, (len(aval(cutoff).shape),))
                        if aval(cutoff).shape else cutoff)


@implements(np.linalg.matrix_power)
def matrix_power(a, n):
    """a to the integer power n by repeated squaring (n < 0: of the inverse; n = 0: the
    identity, in a's dtype), as NumPy."""
    try:
        n = operator.index(n)
    except TypeError:
        raise ShapeError("np.linalg.matrix_power: the exponent must be a Python integer",
                         "pass n as an int constant") from None
    shape = aval(a).shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"np.linalg.matrix_power: a must be square matrices in its last two "
                         f"dimensions, got shape {shape}")
    if n == 0:
        return ops.broadcast_to(ops.eye(shape[-1], dtype=aval(a).dtype), shape)
    if n < 0:
        a, n = inv(a), -n
    result, power = None, a
    while n:
        if n & 1:
            result = power if result is None else matmul(result, power)
        n >>= 1
        if n:
            power = matmul(power, power)
    return result
