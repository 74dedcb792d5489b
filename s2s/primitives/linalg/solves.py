"""`solve`, `det` and `slogdet`, with all their rules: one primitive each, so that a
derivative is the textbook formula written with solves, not the derivative of the LU steps
that compute the value:

  x = A⁻¹ b:        ẋ = A⁻¹ (ḃ − Ȧ x),    so b̄ = A⁻ᵀ x̄ and Ā = −b̄ xᵀ;
  d = det A:        ḋ = d · tr(A⁻¹ Ȧ),     so Ā = d̄ · d · A⁻ᵀ;
  log|det A|:       its tangent is tr(A⁻¹ Ȧ), so Ā = ḡ · A⁻ᵀ (the sign is constant).

NumPy computes them (emitted code calls np.linalg, and rt.solve, which gives inf/nan for a
singular matrix as XLA does); StableHLO lowers each through `lu` and triangular solves, as
LAPACK's gesv and getrf do (`solve_by_lu`, `det_by_lu`, `slogdet_by_lu`).
"""
from __future__ import annotations

import numpy as np
import s2s_runtime.linalg as rt_linalg

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.primitives import ops
from s2s.primitives.linalg.contraction import matmul
from s2s.primitives.linalg.factorizations import lu, permute_rows, triangular_solve
from s2s.primitives.linalg.matrices import (add_terms, aval_of, batch_matrix_function, batch_solve, check_matrices,
                                            lowered_as, mT)
from s2s.staging import Primitive


# ---------------------------------------------------------------------------------------
# Declarations and Python emission


def _solve_abstract(a, b):
    check_matrices("solve", a)
    if b.dtype != a.dtype:
        raise ShapeError(f"solve needs operands of one dtype, got {a.str_short()} and "
                         f"{b.str_short()}")
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"solve needs b with a's batch dimensions and as many rows as a, "
                         f"got a {a.str_short()} and b {b.str_short()}")
    return b.strip_weak_type()


def _determinant_abstract(a):
    check_matrices("det", a)
    return ShapedArray(a.shape[:-2], a.dtype)


# x with a @ x = b for each matrix of a batch: a (..., n, n), b (..., n, k).
solve = Primitive("solve", _solve_abstract, lambda a, b: rt_linalg.solve(a, b))
register(solve, lambda eqn, a, b: call("rt.solve", a, b))
# The determinant of each matrix of a batch.
det = Primitive("det", _determinant_abstract, lambda a: np.linalg.det(a))
register(det, lambda eqn, a: call("np.linalg.det", a))
# (sign, log|det|) of each matrix of a batch, real matrices only.
slogdet = Primitive("slogdet", lambda a: [_determinant_abstract(a)] * 2,
                    lambda a: list(np.linalg.slogdet(a)), multiple_results=True)
register(slogdet, lambda eqn, a: call("np.linalg.slogdet", a))


# ---------------------------------------------------------------------------------------
# Derivatives


def _trace_of_solve(a, a_dot):
    """tr(A⁻¹ Ȧ) for each matrix of the batch: the tangent of log|det A|."""
    aval = aval_of(a)
    n, nd = aval.shape[-1], aval.ndim
    return ops.reduce_sum(solve.bind(a, a_dot) * ops.eye(n, dtype=aval.dtype), (nd - 2, nd - 1))


def _solve_jvp(primals, tangents):
    (a, b), (a_dot, b_dot) = primals, tangents
    x = solve.bind(a, b)
    rhs = add_terms(b_dot, None if is_zero(a_dot) else -matmul(a_dot, x))
    return x, Zero(tangent_aval(aval_of(x))) if rhs is None else solve.bind(a, rhs)


def _solve_transpose(ct, a, b):
    """x = A⁻¹ b is linear in b, with b̄ = A⁻ᵀ x̄."""
    if is_linear(a):
        raise _transpose.NonLinearEquationError(
            "solve is linear in b only, but its matrix a is a linear value")
    if is_zero(ct):
        return [None, Zero(tangent_aval(aval_of(b)))]
    return [None, solve.bind(mT(a), ct)]


def _det_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    d = det.bind(a)
    return d, d * _trace_of_solve(a, a_dot)


def _slogdet_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    sign, logabsdet = slogdet.bind(a)
    return [sign, logabsdet], [Zero(tangent_aval(aval_of(sign))), _trace_of_solve(a, a_dot)]


_jvp.register(solve, _solve_jvp)
_transpose.register(solve, _solve_transpose)
_jvp.register(det, _det_jvp)
_jvp.register(slogdet, _slogdet_jvp)


# ---------------------------------------------------------------------------------------
# StableHLO lowering, through lu and triangular solves


def solve_by_lu(a, b):
    """`solve` as LAPACK's gesv computes it: P A = L U, then x = U⁻¹ (L⁻¹ (P b))."""
    lu_, _, permutation = lu.bind(a)
    y = triangular_solve.bind(lu_, permute_rows(b, permutation), left_side=True, lower=True,
                              transpose_a=False, unit_diagonal=True)
    return triangular_solve.bind(lu_, y, left_side=True, lower=False, transpose_a=False,
                                 unit_diagonal=False)


def _diagonal(x):
    """The diagonal of each matrix of a batch, gathered: x[..., i, i]."""
    shape = tuple(aval_of(x).shape[:-1])
    nb = len(shape) - 1
    index = [ops.iota(shape, d, dtypes.int32) for d in range(nb + 1)]
    return ops.gather(x, *index, index[-1], axes=range(nb + 2))


def _permutation_sign_and_u_diagonal(a):
    """From P A = L U: det P (−1 for each pivot that swapped rows) and U's diagonal, so
    det A = det P · prod(diag U)."""
    lu_, pivots, _ = lu.bind(a)
    u_diagonal = _diagonal(lu_)
    dtype, last = aval_of(lu_).dtype, aval_of(pivots).ndim - 1
    steps = ops.iota(aval_of(pivots).shape, last, dtypes.int32)
    flips = ops.select(ops.ne(pivots, steps), ops.full((), -1, dtype), ops.full((), 1, dtype))
    return ops.reduce_prod(flips, (last,)), u_diagonal


def slogdet_by_lu(a):
    """(sign, log|det|) from LU: a sum of logs, where a product could overflow."""
    permutation_sign, u_diagonal = _permutation_sign_and_u_diagonal(a)
    last = (aval_of(u_diagonal).ndim - 1,)
    return [permutation_sign * ops.reduce_prod(ops.sign(u_diagonal), last),
            ops.reduce_sum(ops.log(ops.abs_(u_diagonal)), last)]


def det_by_lu(a):
    """det A = det P · prod(diag U) (exactly zero for a singular matrix's zero pivot)."""
    permutation_sign, u_diagonal = _permutation_sign_and_u_diagonal(a)
    return permutation_sign * ops.reduce_prod(u_diagonal, (aval_of(u_diagonal).ndim - 1,))


_hlo.register(solve, lowered_as(solve_by_lu))
_hlo.register(det, lowered_as(det_by_lu))
_hlo.register(slogdet, lowered_as(slogdet_by_lu))


# ---------------------------------------------------------------------------------------
# Batching

for _prim in (det, slogdet):
    _vmap.register(_prim, batch_matrix_function(_prim))
_vmap.register(solve, batch_solve(solve))
