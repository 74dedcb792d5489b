"""Contraction and linear algebra primitives: dot_general, cholesky, triangular_solve, lu.

`dot_general` is XLA's general contraction: a batched product of two arrays that sums over
paired `contract` dimensions and keeps paired `batch` dimensions. Every NumPy product
(`@`, dot, tensordot, einsum, inner, outer) stages to it, followed where needed by a
transpose, because its output layout is fixed: batch dims, then lhs free dims, then rhs
free dims, each group in operand order. The emitter turns it back into the NumPy
spelling that yields exactly that layout: `a @ b`, `np.dot`, `np.outer`, `np.tensordot`,
and `np.einsum` only when nothing plainer fits.

The factorizations follow LAPACK and XLA (lower Cholesky; getrf's pivoting and packed LU)
and are batched over leading dimensions. NumPy has no LU and no triangular solve, so
their impls and emitted code call `s2s_runtime.linalg`.
"""
from __future__ import annotations

import math

import numpy as np
import s2s_runtime.linalg as rt_linalg

from s2s import dtypes
from s2s.core import Primitive, ShapedArray
from s2s.emit.pyexpr import ATOM, Expr, binop, call, dtype_text, method, register
from s2s.errors import ShapeError

# ---------------------------------------------------------------------------------------
# dot_general


def _dims_tuple(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(isinstance(d, (int, np.integer))
                                               and not isinstance(d, bool) for d in value):
        raise ShapeError(f"dot_general {what} must be a tuple of ints, got {value!r}")
    return tuple(int(d) for d in value)


def parse_dimension_numbers(dimension_numbers):
    """Validates the structure ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))."""
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise ShapeError("dot_general dimension_numbers must be "
                         "((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)), got "
                         f"{dimension_numbers!r}") from None
    return ((_dims_tuple(lc, "lhs contracting dims"), _dims_tuple(rc, "rhs contracting dims")),
            (_dims_tuple(lb, "lhs batch dims"), _dims_tuple(rb, "rhs batch dims")))


def free_dims(ndim: int, contract, batch) -> list[int]:
    """The dimensions of an operand that are neither contracted nor batch, in order."""
    used = set(contract) | set(batch)
    return [d for d in range(ndim) if d not in used]


def _dot_general_abstract(lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    (lc, rc), (lb, rb) = parse_dimension_numbers(dimension_numbers)
    if lhs.dtype != rhs.dtype:
        raise ShapeError(f"dot_general needs operands of one dtype, got {lhs.str_short()} "
                         f"and {rhs.str_short()}")
    if len(lc) != len(rc):
        raise ShapeError(f"dot_general contracts {len(lc)} lhs dims with {len(rc)} rhs dims: "
                         f"{lc} and {rc} must pair up")
    if len(lb) != len(rb):
        raise ShapeError(f"dot_general has {len(lb)} lhs batch dims and {len(rb)} rhs batch "
                         f"dims: {lb} and {rb} must pair up")
    for side, aval, contract, batch in (("lhs", lhs, lc, lb), ("rhs", rhs, rc, rb)):
        for d in contract + batch:
            if not 0 <= d < aval.ndim:
                raise ShapeError(f"dot_general {side} dimension {d} is out of range for "
                                 f"{aval.str_short()}")
        if len(set(contract + batch)) != len(contract + batch):
            raise ShapeError(f"dot_general {side} dimensions repeat: contracting {contract}, "
                             f"batch {batch}")
    for what, ls, rs in (("contracting", lc, rc), ("batch", lb, rb)):
        for l, r in zip(ls, rs):
            if lhs.shape[l] != rhs.shape[r]:
                raise ShapeError(
                    f"dot_general {what} dimensions differ in size: lhs {lhs.str_short()} "
                    f"dim {l} has {lhs.shape[l]}, rhs {rhs.str_short()} dim {r} has "
                    f"{rhs.shape[r]}")
    shape = ([lhs.shape[d] for d in lb]
             + [lhs.shape[d] for d in free_dims(lhs.ndim, lc, lb)]
             + [rhs.shape[d] for d in free_dims(rhs.ndim, rc, rb)])
    if preferred_element_type is None:
        return ShapedArray(shape, lhs.dtype, lhs.weak_type and rhs.weak_type)
    return ShapedArray(shape, np.dtype(preferred_element_type))


def _dot_general_impl(lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    """As a batched matmul: (batch, free, contract) @ (batch, contract, free), then reshape."""
    (lc, rc), (lb, rb) = dimension_numbers
    dtype = np.result_type(lhs, rhs) if preferred_element_type is None else \
        np.dtype(preferred_element_type)
    lhs = np.asarray(lhs, dtype=dtype)
    rhs = np.asarray(rhs, dtype=dtype)
    lf, rf = free_dims(lhs.ndim, lc, lb), free_dims(rhs.ndim, rc, rb)
    batch_shape = [lhs.shape[d] for d in lb]
    lf_shape, rf_shape = [lhs.shape[d] for d in lf], [rhs.shape[d] for d in rf]
    nb, m, n = math.prod(batch_shape), math.prod(lf_shape), math.prod(rf_shape)
    k = math.prod(lhs.shape[d] for d in lc)
    left = lhs.transpose(list(lb) + lf + list(lc)).reshape(nb, m, k)
    right = rhs.transpose(list(rb) + list(rc) + rf).reshape(nb, k, n)
    out = left[0] @ right[0] if nb == 1 else left @ right
    return np.asarray(out.reshape(batch_shape + lf_shape + rf_shape), dtype=dtype)[()]


dot_general = Primitive("dot_general", _dot_general_abstract, _dot_general_impl)


def _transposed(x: Expr, batched: bool) -> Expr:
    return Expr(f"{x.wrap(ATOM)}.{'mT' if batched else 'T'}")


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def einsum_spec(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
    """The einsum subscripts of a dot_general: 'abc,acd->abd'."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs = [_LETTERS[i] for i in range(lhs_ndim)]
    rhs = [""] * rhs_ndim
    for l, r in zip(lc + lb, rc + rb):
        rhs[r] = lhs[l]
    fresh = iter(_LETTERS[lhs_ndim:])
    rhs = [s or next(fresh) for s in rhs]
    out = ([lhs[d] for d in lb] + [lhs[d] for d in free_dims(lhs_ndim, lc, lb)]
           + [rhs[d] for d in free_dims(rhs_ndim, rc, rb)])
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def dot_general_expr(lhs_ndim: int, rhs_ndim: int, dimension_numbers, a: Expr, b: Expr) -> Expr:
    """The plainest NumPy expression with exactly dot_general's output layout."""
    (lc, rc), (lb, rb) = dimension_numbers
    ln, rn = lhs_ndim, rhs_ndim
    if not lb:
        if not lc:
            if ln == 0 or rn == 0:
                return binop("*", a, b)
            if ln == 1 and rn == 1:
                return call("np.outer", a, b)
            return call("np.multiply.outer", a, b)
        if len(lc) == 1 and ln <= 2 and rn <= 2:
            # Matrix and vector products, with the transposes they need.
            (l,), (r,) = lc, rc
            lhs_t = ln == 2 and l == 0          # contracting a's rows: a.T
            rhs_t = rn == 2 and r == 1          # contracting b's columns: b.T
            if ln == 1 and rhs_t:
                return binop("@", b, a)         # v . M[j, :] for each row j
            return binop("@", _transposed(a, False) if lhs_t else a,
                         _transposed(b, False) if rhs_t else b)
        if rn == 1 and lc == (ln - 1,) or ln == 1 and rc == (rn - 2,):
            return binop("@", a, b)             # stacks of matrices times a vector, or v @ M
        if len(lc) == 1 and lc == (ln - 1,) and rc == (rn - 2,):
            return call("np.dot", a, b)         # last of a with second-to-last of b
        k = len(lc)
        if lc == tuple(range(ln - k, ln)) and rc == tuple(range(k)):
            return call("np.tensordot", a, b, axes=k)
        return call("np.tensordot", a, b, axes=(list(lc), list(rc)))
    k = len(lb)
    if lb == rb == tuple(range(k)) and ln == rn == k + 2 and len(lc) == 1:
        (l,), (r,) = lc, rc
        return binop("@", _transposed(a, True) if l == k else a,
                     _transposed(b, True) if r == k + 1 else b)
    spec = einsum_spec(ln, rn, dimension_numbers)
    return call("np.einsum", Expr(repr(spec)), a, b)


def _cast(x: Expr, ndim: int, dtype) -> Expr:
    if ndim == 0:
        return call(dtype_text(dtype), x)
    return method(x, "astype", Expr(dtype_text(dtype)))


def _emit_dot_general(eqn, a, b):
    lhs, rhs = (v.aval for v in eqn.invars)
    preferred = eqn.params.get("preferred_element_type")
    if preferred is not None and np.dtype(preferred) != lhs.dtype:
        a, b = _cast(a, lhs.ndim, preferred), _cast(b, rhs.ndim, preferred)
    return dot_general_expr(lhs.ndim, rhs.ndim, eqn.params["dimension_numbers"], a, b)


register(dot_general, _emit_dot_general)

# ---------------------------------------------------------------------------------------
# Factorizations and solves

LAPACK_DTYPES = (dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)


def _check_matrices(name: str, aval, square: bool = True):
    if aval.ndim < 2:
        raise ShapeError(f"{name} needs an array of matrices (at least 2 dimensions), got "
                         f"{aval.str_short()}")
    if square and aval.shape[-1] != aval.shape[-2]:
        raise ShapeError(f"{name} needs square matrices in the last two dimensions, got "
                         f"{aval.str_short()}")
    if aval.dtype not in LAPACK_DTYPES:
        raise ShapeError(f"{name} needs float32, float64, complex64 or complex128, got "
                         f"{aval.str_short()}")


def _cholesky_abstract(a):
    _check_matrices("cholesky", a)
    return a.strip_weak_type()


# The lower factor L with a = L @ L^H, as np.linalg.cholesky (batched over leading dims).
cholesky = Primitive("cholesky", _cholesky_abstract, lambda a: np.linalg.cholesky(a))
register(cholesky, lambda eqn, a: call("np.linalg.cholesky", a))


def _triangular_solve_abstract(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    _check_matrices("triangular_solve", a)
    if b.dtype != a.dtype:
        raise ShapeError(f"triangular_solve needs operands of one dtype, got {a.str_short()} "
                         f"and {b.str_short()}")
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2]:
        raise ShapeError(f"triangular_solve needs b with a's batch dimensions, got a "
                         f"{a.str_short()} and b {b.str_short()}")
    m = b.shape[-2] if left_side else b.shape[-1]
    if a.shape[-1] != m:
        side = "a @ x = b: a's size must equal b's rows" if left_side else \
            "x @ a = b: a's size must equal b's columns"
        raise ShapeError(f"triangular_solve solving {side}, got a {a.str_short()} and "
                         f"b {b.str_short()}")
    return b.strip_weak_type()


def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    return rt_linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                      transpose_a=transpose_a, unit_diagonal=unit_diagonal)


# Solves op(a) @ x = b (left_side) or x @ op(a) = b, op(a) = a or a.T, reading only the
# `lower` (or upper) triangle of a, and not its diagonal when `unit_diagonal`.
triangular_solve = Primitive("triangular_solve", _triangular_solve_abstract,
                             _triangular_solve_impl)
register(triangular_solve, lambda eqn, a, b: call("rt.triangular_solve", a, b, **{
    k: eqn.params[k] for k in ("left_side", "lower", "transpose_a", "unit_diagonal")}))


def _lu_abstract(a):
    _check_matrices("lu", a, square=False)
    *batch, m, n = a.shape
    return [a.strip_weak_type(),
            ShapedArray((*batch, min(m, n)), dtypes.int32),
            ShapedArray((*batch, m), dtypes.int32)]


# LAPACK getrf: (lu, pivots, permutation) with a[..., permutation, :] = L @ U.
lu = Primitive("lu", _lu_abstract, lambda a: list(rt_linalg.lu(a)), multiple_results=True)
register(lu, lambda eqn, a: call("rt.lu", a))
