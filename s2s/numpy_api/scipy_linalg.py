"""scipy.linalg's functions that model code calls, on staged values: solve, solve_triangular,
cholesky, cho_factor, cho_solve, lu_factor, lu_solve, lu, eigh, svd, qr, solve_banded,
solve_sylvester, expm, det and inv (sqrtm is refused, see `sqrtm`).

SciPy is optional for s2s: `register_scipy_linalg()` maps SciPy's own function objects to
the functions here once the user's code has imported scipy.linalg (see `numpy_api`).

Each is a composition of the linear-algebra primitives (`solve`, `triangular_solve`,
`cholesky`, `lu`, `det`, `dot_general`), so derivatives, batching, lowering and emission
come from their rules, and emitted code reads as the math (`rt.triangular_solve(...)`,
`rt.solve(...)`). Dtypes are SciPy's: integers compute in float64, float32 stays float32.

Where SciPy reads one triangle of a matrix (`cholesky`, `cho_factor`, `solve` with
assume_a='sym' or 'pos', the triangular solves), so do these, so values and derivatives are
those of the function SciPy computes (JAX's agree for symmetric inputs and tangents).
`solve_banded` builds the dense matrix from the band; `solve_sylvester` solves the
Kronecker system (I ⊗ A + Bᵀ ⊗ I) vec X = vec Q, O((mn)³): meant for small matrices.
Real matrices only; complex ones are refused with an error.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.numpy_api import decompositions as np_decompositions
from s2s.numpy_api import linalg as np_linalg
from s2s.numpy_api import math as npm
from s2s.numpy_api._base import aval, convert, implements
from s2s.numpy_api.indexing import take_along_axis
from s2s.primitives import linalg as la
from s2s.primitives import ops

# ---------------------------------------------------------------------------------------
# Operands


def _shape(x) -> tuple[int, ...]:
    return tuple(aval(x).shape)


def _real_matrices(name: str, a, *others, square: bool = True):
    """a (matrices, square unless `square` is false) and `others` in SciPy's computation
    dtype; complex refused."""
    xs = np_linalg.linalg_matrices(f"scipy.linalg.{name}", a, *others, square=square)
    if aval(xs[0]).dtype.kind == "c":
        raise UnsupportedFunctionError(f"scipy.linalg.{name} of complex matrices is not supported",
                                       "pass float32 or float64 matrices")
    return xs


def _mT(x):
    n = len(_shape(x))
    return ops.transpose(x, list(range(n - 2)) + [n - 1, n - 2])


def _right_hand_side(name: str, a, b):
    """(a, b as matrices with a's batch dimensions, whether b was a vector): b is a vector
    (n,) or matrices (..., n, k), as SciPy reads it."""
    n = _shape(a)[-1]
    sb = _shape(b)
    if not sb:
        raise ShapeError(f"scipy.linalg.{name}: b must be at least one-dimensional")
    rows = sb[0] if len(sb) == 1 else sb[-2]
    if rows != n:
        raise ShapeError(f"scipy.linalg.{name}: a of shape {_shape(a)} and b of shape {sb} do "
                         f"not align: {n} != {rows}")
    if len(sb) == 1:
        batch = _shape(a)[:-2]
        return a, ops.broadcast_to(ops.reshape(b, (n, 1)), batch + (n, 1)), True
    try:
        batch = tuple(np.broadcast_shapes(_shape(a)[:-2], sb[:-2]))
    except ValueError:
        raise ShapeError(f"scipy.linalg.{name}: the batch dimensions of a {_shape(a)} and "
                         f"b {sb} do not broadcast") from None
    return ops.broadcast_to(a, batch + _shape(a)[-2:]), ops.broadcast_to(b, batch + sb[-2:]), False


def _as_given(x, was_vector: bool):
    """A solution in b's layout: a vector again where b was one."""
    return ops.reshape(x, _shape(x)[:-1]) if was_vector else x


def _triangular(a, b, *, lower: bool, transpose_a: bool = False, unit_diagonal: bool = False):
    return la.triangular_solve.bind(a, b, left_side=True, lower=lower, transpose_a=transpose_a,
                                    unit_diagonal=unit_diagonal)


def _symmetric_from(a, lower: bool):
    """The symmetric matrix that a's lower (or upper) triangle describes: what LAPACK reads."""
    if lower:
        return ops.tril(a) + _mT(ops.tril(a, -1))
    return ops.triu(a) + _mT(ops.triu(a, 1))


# ---------------------------------------------------------------------------------------
# Triangular solves and Cholesky

_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """x with op(a) x = b, reading only a's lower (or upper) triangle; op(a) is a or aᵀ
    (trans 1, 'T', or 2, 'C', the same for real matrices)."""
    if trans not in _TRANS:
        raise ShapeError(f"scipy.linalg.solve_triangular: trans must be 0, 1, 2, 'N', 'T' or "
                         f"'C', got {trans!r}")
    a, b = _real_matrices("solve_triangular", a, b)
    a, b, was_vector = _right_hand_side("solve_triangular", a, b)
    x = _triangular(a, b, lower=bool(lower), transpose_a=_TRANS[trans],
                    unit_diagonal=bool(unit_diagonal))
    return _as_given(x, was_vector)


def _cholesky_factor(name: str, a, lower: bool):
    """The lower factor L of the symmetric matrix a's chosen triangle describes."""
    (a,) = _real_matrices(name, a)
    return a, la.cholesky.bind(_symmetric_from(a, bool(lower)))


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of a: upper U with a = Uᵀ U (SciPy's default), or lower L."""
    _, factor = _cholesky_factor("cholesky", a, lower)
    return factor if lower else _mT(factor)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(c, lower): the factor in c's lower (or upper) triangle and, as SciPy leaves it, a's
    own entries in the other (cho_solve never reads them)."""
    a, factor = _cholesky_factor("cho_factor", a, lower)
    if lower:
        return factor + ops.triu(a, 1), lower
    return _mT(factor) + ops.tril(a, -1), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """x with a x = b from cho_factor's (c, lower): two triangular solves with c's triangle."""
    try:
        c, lower = c_and_lower
    except (TypeError, ValueError):
        raise ShapeError("scipy.linalg.cho_solve takes (c, lower) as cho_factor returns it, "
                         "then b", "write cho_solve(cho_factor(a), b)") from None
    c, b = _real_matrices("cho_solve", c, b)
    c, b, was_vector = _right_hand_side("cho_solve", c, b)
    lower = bool(lower)
    # a = L Lᵀ with L = c's lower triangle, or a = Uᵀ U with U = c's upper one.
    y = _triangular(c, b, lower=lower, transpose_a=not lower)
    x = _triangular(c, y, lower=lower, transpose_a=lower)
    return _as_given(x, was_vector)


# ---------------------------------------------------------------------------------------
# solve, det, inv


_ASSUME_A = {"gen": "gen", "general": "gen", "sym": "sym", "symmetric": "sym",
             "her": "sym", "hermitian": "sym", "pos": "pos", "positive definite": "pos",
             "diagonal": "diagonal", "tridiagonal": "tridiagonal", "banded": "gen",
             "lower triangular": "lower", "upper triangular": "upper"}


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
    """x with a x = b (aᵀ x = b if transposed), reading of a what SciPy's `assume_a`
    routine reads: one triangle for 'sym', 'her' and 'pos' (`lower` picks it) and the
    triangular ones, the diagonal or three diagonals for 'diagonal' and 'tridiagonal'.
    'banded' solves the general system, as SciPy's band detection gives the same x."""
    kind = _ASSUME_A.get("gen" if assume_a is None else assume_a)
    if kind is None:
        raise ShapeError(f"scipy.linalg.solve: assume_a={assume_a!r} is not one of "
                         f"{', '.join(repr(k) for k in _ASSUME_A)}")
    a, b = _real_matrices("solve", a, b)
    if kind in ("lower", "upper"):
        return solve_triangular(a, b, trans=1 if transposed else 0, lower=kind == "lower")
    if kind in ("sym", "pos"):
        a = _symmetric_from(a, bool(lower))
    elif transposed:
        a = _mT(a)
    if kind == "pos":
        return cho_solve((la.cholesky.bind(a), True), b)
    n = _shape(a)[-1]
    if kind == "diagonal":
        a = a * ops.eye(n, dtype=aval(a).dtype)
    elif kind == "tridiagonal":
        rows, cols = ops.index_grid(n, n)
        near = ops.le(ops.abs_(ops.sub(rows, cols)), ops.literal(1, dtypes.int32))
        a = ops.select(ops.broadcast_to(near, _shape(a)), a, ops.full(_shape(a), 0, aval(a).dtype))
    return np_linalg.solve(a, b)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of each matrix (np.linalg.det), in float64 as SciPy returns it for
    float32 matrices too."""
    (a,) = _real_matrices("det", a)
    return convert(np_linalg.det(a), dtypes.canonicalize_dtype(np.float64))


def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of each matrix (np.linalg.inv: a solve against the identity)."""
    (a,) = _real_matrices("inv", a)
    return np_linalg.inv(a)


# ---------------------------------------------------------------------------------------
# LU: lu_factor is the `lu` primitive (LAPACK getrf's packed factor and 0-based pivots, as
# SciPy's); lu_solve replays the pivots' row swaps into a permutation, then two triangular
# solves: P a = L U, so a x = b is L U x = P b, and aᵀ x = b is Uᵀ Lᵀ (P x) = b.


def lu_factor(a, overwrite_a=False, check_finite=True):
    """(lu, piv): L below the diagonal (its unit diagonal implied) and U on and above it in
    lu; row i was swapped with row piv[i]."""
    (a,) = _real_matrices("lu_factor", a)
    packed, pivots, _ = la.lu.bind(a)
    return packed, pivots


def _permutation_matrix(pivots, m: int, dtype):
    """P with P a = a with the pivots' swaps applied in order (row i with row pivots[i])."""
    shape = _shape(pivots)[:-1] + (m,)
    rows = ops.iota(shape, len(shape) - 1, dtypes.int32)
    order = rows
    for i in range(_shape(pivots)[-1]):
        target = ops.slice_in_dim(pivots, i, i + 1, len(shape) - 1)
        at_i = ops.slice_in_dim(order, i, i + 1, len(shape) - 1)
        at_target = take_along_axis(order, target, axis=-1)
        order = npm.where(ops.eq(rows, ops.literal(i, dtypes.int32)), at_target,
                          npm.where(ops.eq(rows, target), at_i, order))
    columns = ops.iota(shape + (m,), len(shape), dtypes.int32)
    return ops.convert(ops.eq(ops.expand_dims(order, (len(shape),)), columns), dtype)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """x with a x = b (aᵀ x = b for trans 1 or 2) from lu_factor's (lu, piv)."""
    try:
        packed, pivots = lu_and_piv
    except (TypeError, ValueError):
        raise ShapeError("scipy.linalg.lu_solve takes (lu, piv) as lu_factor returns it, then b",
                         "write lu_solve(lu_factor(a), b)") from None
    if isinstance(trans, str) or trans not in _TRANS:
        raise ShapeError(f"scipy.linalg.lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    packed, b = _real_matrices("lu_solve", packed, b)
    packed, b, was_vector = _right_hand_side("lu_solve", packed, b)
    n = _shape(packed)[-1]
    permutation = _permutation_matrix(pivots, n, aval(packed).dtype)
    if _TRANS[trans]:
        z = _triangular(packed, b, lower=False, transpose_a=True)
        y = _triangular(packed, z, lower=True, transpose_a=True, unit_diagonal=True)
        x = np_linalg.matmul(_mT(permutation), y)
    else:
        y = _triangular(packed, np_linalg.matmul(permutation, b), lower=True, unit_diagonal=True)
        x = _triangular(packed, y, lower=False)
    return _as_given(x, was_vector)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """(p, l, u) with a = p @ l @ u: p a permutation matrix, l unit lower m × k, u upper
    k × n (k = min(m, n)); (p @ l, u) with permute_l."""
    if p_indices:
        raise UnsupportedFunctionError("scipy.linalg.lu(p_indices=True) is not supported",
                                       "use the permutation matrix p that lu returns by default")
    (a,) = _real_matrices("lu", a, square=False)
    packed, _, order = la.lu.bind(a)
    *batch, m, n = _shape(a)
    k, dtype, nd = min(m, n), aval(a).dtype, len(_shape(a))
    lower = ops.tril(ops.slice(packed, (0,) * nd, tuple(batch) + (m, k)), -1)
    lower = lower + ops.eye(m, k, dtype=dtype)
    upper = ops.triu(ops.slice(packed, (0,) * nd, tuple(batch) + (k, n)))
    # a[order] = l u, so a = p l u with p[order[i], i] = 1.
    rows = ops.iota(tuple(batch) + (m, m), nd - 2, dtypes.int32)
    p = ops.convert(ops.eq(ops.expand_dims(order, (nd - 2,)), rows), dtype)
    return (np_linalg.matmul(p, lower), upper) if permute_l else (p, lower, upper)


# ---------------------------------------------------------------------------------------
# Banded and Sylvester systems


def _static_int(name: str, what: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ShapeError(f"scipy.linalg.{name}: {what} must be a non-negative Python int, got "
                         f"{value!r}", f"pass {what} as a constant")
    return int(value)


def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """x with a x = b, where a has l diagonals below and u above its main one, stored by
    diagonals in ab (a[i, j] = ab[u + i - j, j]): the dense a is gathered from ab, then solved."""
    try:
        l, u = l_and_u
    except (TypeError, ValueError):
        raise ShapeError(f"scipy.linalg.solve_banded: (l, u) must be a pair of ints, got "
                         f"{l_and_u!r}") from None
    l, u = _static_int("solve_banded", "l", l), _static_int("solve_banded", "u", u)
    shape = _shape(ab)
    if len(shape) != 2 or shape[0] != l + u + 1:
        raise ShapeError(f"scipy.linalg.solve_banded: invalid values for the number of lower and "
                         f"upper diagonals: ab of shape {shape} needs l + u + 1 = {l + u + 1} "
                         f"rows for (l, u) = ({l}, {u})",
                         "store diagonal k (k = u for the main one) in row u - k of ab")
    n = shape[1]
    i, j = np.indices((n, n))
    band = (j - i <= u) & (i - j <= l)
    rows = np.where(band, u + i - j, 0).astype(np.int32)
    (ab,) = _real_matrices("solve_banded", ab, square=False)
    dense = ops.gather(ab, rows, j.astype(np.int32), axes=(0, 1))
    dense = ops.select(band, dense, ops.full((n, n), 0, aval(ab).dtype))
    return solve(dense, b)


def solve_sylvester(a, b, q):
    """X with a X + X b = q (a m × m, b n × n, q m × n, batched over leading dimensions):
    the Kronecker system (a ⊗ I + I ⊗ bᵀ) vec X = vec q with X flattened by rows."""
    a, b, q = _real_matrices("solve_sylvester", a, b, q)
    m, n = _shape(a)[-1], _shape(b)[-1]
    if _shape(b)[-1] != _shape(b)[-2] or _shape(q)[-2:] != (m, n):
        raise ShapeError(f"scipy.linalg.solve_sylvester: a must be m × m, b n × n and q m × n, "
                         f"got {_shape(a)}, {_shape(b)} and {_shape(q)}")
    dtype = aval(a).dtype
    # K[(i, j), (k, l)] = a[i, k] δ(j, l) + δ(i, k) b[l, j], by broadcasting.
    batch_a, batch_b = _shape(a)[:-2], _shape(b)[:-2]
    a_part = npm.multiply(ops.reshape(a, batch_a + (m, 1, m, 1)),
                          ops.reshape(ops.eye(n, dtype=dtype), (1, n, 1, n)))
    b_part = npm.multiply(ops.reshape(ops.eye(m, dtype=dtype), (m, 1, m, 1)),
                          ops.reshape(_mT(b), batch_b + (1, n, 1, n)))
    kron = npm.add(a_part, b_part)
    kron = ops.reshape(kron, _shape(kron)[:-4] + (m * n, m * n))
    x = np_linalg.solve(kron, ops.reshape(q, _shape(q)[:-2] + (m * n, 1)))
    return ops.reshape(x, _shape(x)[:-2] + (m, n))


# ---------------------------------------------------------------------------------------
# The decompositions np.linalg has, under SciPy's names and result conventions (plain
# tuples; qr's mode='r' is a 1-tuple): the primitives are np.linalg's.


def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """(w, v) of each symmetric matrix, read from its lower (or upper) triangle; w alone
    with eigvals_only."""
    if b is not None or subset_by_index is not None or subset_by_value is not None:
        raise UnsupportedFunctionError("scipy.linalg.eigh of a generalized problem (b=) or a "
                                       "subset of eigenvalues is not supported",
                                       "solve the standard problem and index its result")
    uplo = "L" if lower else "U"
    if eigvals_only:
        return np_decompositions.eigvalsh(a, UPLO=uplo)
    return tuple(np_decompositions.eigh(a, UPLO=uplo))


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """(U, s, Vh) with a = U diag(s) Vh, or s alone without compute_uv."""
    out = np_decompositions.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(out) if compute_uv else out


# SciPy's mode='r' is the R of the full decomposition (m × n), NumPy's the reduced one.
_QR_MODES = {"full": "complete", "economic": "reduced", "r": "complete"}


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """(Q, R) with a = Q R (mode 'full' or 'economic'), or (R,) for mode 'r', as SciPy."""
    if pivoting or mode not in _QR_MODES:
        raise UnsupportedFunctionError(f"scipy.linalg.qr(mode={mode!r}, pivoting={pivoting!r}) "
                                       "is not supported",
                                       "use mode='full', 'economic' or 'r' without pivoting")
    q, r = np_decompositions.qr(a, mode=_QR_MODES[mode])
    return (r,) if mode == "r" else (q, r)


# ---------------------------------------------------------------------------------------
# expm: scaling and squaring with a Padé approximant (Higham, "The scaling and squaring
# method for the matrix exponential revisited", 2005). A / 2ˢ has a 1-norm below θ, where
# the [13/13] (float64) or [7/7] (float32) approximant r = (V - U)⁻¹ (V + U) is exact to the
# dtype's precision; exp(A) = r(A / 2ˢ)^(2ˢ). s depends on the values, so the squarings are
# MAX_SQUARINGS selects between R @ R and R (as JAX's expm, nan beyond that many); s is
# an integer of the values, constant to derivatives, which exp(A) = r(A/2ˢ)^(2ˢ) allows.

_PADE = {
    13: (5.371920351148152, (64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                             1187353796428800.0, 129060195264000.0, 10559470521600.0,
                             670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0,
                             16380.0, 182.0, 1.0)),
    7: (3.925724783138660, (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0,
                            1.0)),
}
MAX_SQUARINGS = 16


def _polynomial(coefficients, powers, identity):
    """Σ cₖ A^(2k) for the even powers given (powers[0] is the identity)."""
    total = None
    for c, power in zip(coefficients, [identity] + powers):
        if c:
            term = power * c
            total = term if total is None else total + term
    return total


def _pade(a, degree: int):
    """(U, V): the odd and even parts of the [degree/degree] Padé numerator at a."""
    b = _PADE[degree][1]
    n = _shape(a)[-1]
    identity = ops.broadcast_to(ops.eye(n, dtype=aval(a).dtype), _shape(a))
    a2 = np_linalg.matmul(a, a)
    a4 = np_linalg.matmul(a2, a2)
    a6 = np_linalg.matmul(a4, a2)
    if degree == 7:
        odd = _polynomial(b[1::2], [a2, a4, a6], identity)
        return np_linalg.matmul(a, odd), _polynomial(b[0::2], [a2, a4, a6], identity)
    odd_high = np_linalg.matmul(a6, _polynomial((0.0,) + b[9::2], [a2, a4, a6], identity))
    even_high = np_linalg.matmul(a6, _polynomial((0.0,) + b[8::2], [a2, a4, a6], identity))
    u = np_linalg.matmul(a, odd_high + _polynomial(b[1:9:2], [a2, a4, a6], identity))
    return u, even_high + _polynomial(b[0:8:2], [a2, a4, a6], identity)


def expm(A):
    """exp(A) of each matrix, by scaling and squaring with a Padé approximant."""
    (a,) = _real_matrices("expm", A)
    dtype = aval(a).dtype
    degree = 7 if dtype == dtypes.float32 else 13
    theta = _PADE[degree][0]
    nd = len(_shape(a))
    norm = ops.reduce_max(ops.reduce_sum(ops.abs_(a), (nd - 2,)), (nd - 2,))
    # A zero matrix needs no squaring: the norm's floor keeps log2 finite (nan stays nan).
    norm = npm.maximum(norm, ops.full((), np.finfo(dtype).tiny, dtype))
    log_ratio = npm.log2(norm * (1.0 / theta))
    squarings = npm.maximum(npm.ceil(log_ratio), ops.full((), 0, dtype))
    squarings = ops.select(npm.isfinite(log_ratio), squarings, ops.full(_shape(norm), 0, dtype))
    squarings = ops.reshape(squarings, _shape(norm) + (1, 1))
    u, v = _pade(a * npm.exp2(-squarings), degree)
    r = np_linalg.solve(v - u, v + u)
    for step in range(MAX_SQUARINGS):
        below = ops.broadcast_to(ops.lt(ops.full((), step, dtype), squarings), _shape(r))
        r = ops.select(below, np_linalg.matmul(r, r), r)
    too_many = ops.broadcast_to(ops.lt(ops.full((), MAX_SQUARINGS, dtype), squarings), _shape(r))
    return ops.select(too_many, ops.full(_shape(r), np.nan, dtype), r)


def sqrtm(A, disp=True, blocksize=64):
    """Refused: SciPy's result is complex when A has a negative real eigenvalue and real
    otherwise, so its dtype depends on the values, which a staged function cannot have."""
    raise UnsupportedFunctionError(
        "scipy.linalg.sqrtm is not supported: its result is complex or real depending on the "
        "matrix's eigenvalues, and a staged function's dtypes cannot depend on values",
        "for a symmetric positive semidefinite matrix write `w, v = np.linalg.eigh(a); "
        "root = (v * np.sqrt(w)) @ v.T`, whose derivatives s2s has")


def register_scipy_linalg() -> None:
    """Maps scipy.linalg's function objects to the functions here (once it is imported)."""
    import scipy.linalg as spla
    for name in ("solve", "solve_triangular", "cholesky", "cho_factor", "cho_solve",
                 "lu_factor", "lu_solve", "lu", "eigh", "svd", "qr", "solve_banded", "solve_sylvester", "expm", "sqrtm", "det", "inv"):
        implements(getattr(spla, name))(globals()[name])
