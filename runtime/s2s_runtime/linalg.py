"""Dense linear algebra NumPy lacks: LU with partial pivoting, triangular solves, a
solve that gives inf/nan for a singular matrix, and eig / eigvals whose results are
complex for every matrix.

`np.linalg` factors and solves, but hides the factorization: it has no `lu` and no
`triangular_solve`, and its `solve` raises on a singular matrix where XLA's returns inf or
nan. Emitted code (and the primitives' reference impls) call these instead.
Both are batched over leading dimensions and vectorized: a Python loop over the n columns,
each step a NumPy operation on every matrix of the batch at once. No SciPy.

Semantics are LAPACK's and XLA's, so the Python and StableHLO backends agree:
  - `lu(a)` is getrf: partial pivoting by the largest magnitude in the column (the first
    one on ties), L unit lower and U upper packed into one matrix, `pivots[i]` the row
    swapped with row i at step i (0-based), `permutation` the resulting row order, so
    `a[..., permutation, :] == L @ U`. Both index arrays are int32.
  - `triangular_solve(a, b, ...)` solves `op(a) @ x = b` (left_side) or `x @ op(a) = b`,
    `op(a)` being `a` or `a.T`; it reads only the triangle `lower` names (and not the
    diagonal when `unit_diagonal`), so whatever is stored in the other triangle, e.g. the
    other factor of an LU, is ignored.
"""
from __future__ import annotations

import numpy as np

__all__ = ["eig", "eigvals", "lu", "solve", "triangular_solve"]


def _swap_last(x):
    return np.swapaxes(x, -1, -2)


def triangular_solve(a, b, left_side=False, lower=False, transpose_a=False,
                     unit_diagonal=False):
    """Solves a triangular system for each matrix of a batch.

    a: (..., m, m) if left_side else (..., n, n); b: (..., m, n), same batch dims as a.
    Returns x of b's shape and dtype with `op(a) @ x = b` (left_side) or `x @ op(a) = b`.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    # Reduce every case to a left-side solve `A @ X = B`: transposing a turns lower into
    # upper, and the right-side system x @ op(a) = b is op(a).T @ x.T = b.T.
    if transpose_a != (not left_side):
        a, lower = _swap_last(a), not lower
    if not left_side:
        b = _swap_last(b)
    x = _solve_left(a, b, lower, unit_diagonal)
    return x if left_side else _swap_last(x)


def _solve_left(a, b, lower, unit_diagonal):
    """Forward (lower) or back (upper) substitution, one row of x per step."""
    n = a.shape[-1]
    x = np.empty(b.shape, dtype=np.result_type(a, b))
    rows = range(n) if lower else range(n - 1, -1, -1)
    for i in rows:
        known = slice(0, i) if lower else slice(i + 1, n)
        # b[i] - a[i, known] @ x[known], for every matrix in the batch.
        row = b[..., i, :] - (a[..., i:i + 1, known] @ x[..., known, :])[..., 0, :]
        if not unit_diagonal:
            row = row / a[..., i, i, None]
        x[..., i, :] = row
    return x


def solve(a, b):
    """x with a @ x = b for each matrix of a batch: a (..., n, n), b (..., n, k).

    LAPACK's gesv through np.linalg.solve; a singular matrix, which it refuses, is solved
    by `lu` and two triangular solves instead, as XLA does, giving inf or nan.
    """
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        factors, _, permutation = lu(a)
        rows = np.take_along_axis(np.asarray(b), permutation[..., None].astype(np.intp), axis=-2)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = triangular_solve(factors, rows, left_side=True, lower=True, unit_diagonal=True)
            return triangular_solve(factors, y, left_side=True, lower=False)


def lu(a):
    """LU factorization with partial pivoting: returns (lu, pivots, permutation).

    a: (..., m, n). lu: (..., m, n), a's dtype; pivots: (..., min(m, n)) int32;
    permutation: (..., m) int32.
    """
    a = np.asarray(a)
    *batch, m, n = a.shape
    k = min(m, n)
    count = int(np.prod(batch, dtype=np.int64))
    work = np.array(a, copy=True).reshape(count, m, n)
    pivots = np.zeros((count, k), dtype=np.int32)
    perm = np.broadcast_to(np.arange(m, dtype=np.int32), (count, m)).copy()
    every = np.arange(count)
    for j in range(k):
        p = j + np.argmax(np.abs(work[:, j:, j]), axis=-1)
        pivots[:, j] = p
        # Swap rows j and p of every matrix (a no-op where p == j).
        row_j = work[every, j].copy()
        work[every, j] = work[every, p]
        work[every, p] = row_j
        perm_j = perm[every, j].copy()
        perm[every, j] = perm[every, p]
        perm[every, p] = perm_j
        # Multipliers below the pivot (LAPACK leaves a zero column unscaled), then the
        # rank-1 update of the trailing block.
        pivot = work[:, j, j]
        nonzero = pivot != 0
        safe = np.where(nonzero, pivot, 1)
        work[:, j + 1:, j] = np.where(nonzero[:, None], work[:, j + 1:, j] / safe[:, None],
                                      work[:, j + 1:, j])
        work[:, j + 1:, j + 1:] -= work[:, j + 1:, j, None] * work[:, j, None, j + 1:]
    return (work.reshape(a.shape), pivots.reshape(*batch, k), perm.reshape(*batch, m))


def _complex(x, like):
    """x in the complex dtype of like's precision (complex64 for float32 or complex64)."""
    return x.astype(np.result_type(like.dtype, np.complex64), copy=False)


def eig(a):
    """np.linalg.eig(a) with complex results always: NumPy's are real for a real matrix
    whose eigenvalues all are, a dtype that depends on the values where a compiled
    program's cannot."""
    a = np.asarray(a)
    w, v = np.linalg.eig(a)
    return _complex(w, a), _complex(v, a)


def eigvals(a):
    """np.linalg.eigvals(a), complex always (as eig)."""
    a = np.asarray(a)
    return _complex(np.linalg.eigvals(a), a)
