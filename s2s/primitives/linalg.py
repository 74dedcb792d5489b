"""Contraction and linear algebra primitives: dot_general, cholesky, triangular_solve, lu.

`dot_general` is XLA's general contraction: a batched product of two arrays that sums over
paired `contract` dimensions and keeps paired `batch` dimensions. Every NumPy product
(`@`, dot, tensordot, einsum, inner, outer) stages to it, followed where needed by a
transpose, because its output layout is fixed: batch dims, then lhs free dims, then rhs
free dims, each group in operand order. The emitter turns it back into the NumPy
spelling that yields exactly that layout: `a @ b`, `np.dot`, `np.outer`, `np.tensordot`,
`x[..., None] * y[..., None, :]` for stacked outer products, and `np.einsum` only when
nothing plainer fits.

The factorizations follow LAPACK and XLA (lower Cholesky; getrf's pivoting and packed LU)
and are batched over leading dimensions. NumPy has no LU and no triangular solve, so
their impls and emitted code call `s2s_runtime.linalg`.
"""
from __future__ import annotations

import math

import numpy as np
import s2s_runtime.linalg as rt_linalg

from s2s import dtypes
from s2s.core import JaxprEqn, Literal, ShapedArray, aval_of_value
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import ATOM, Expr, binop, call, dtype_text, method, register, subscript
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, simplify as _simplify, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, is_zero, tangent_aval
from s2s.passes.transpose import LinearInput, is_linear
from s2s.primitives import ops
from s2s.staging import JaxprBuilder, Primitive, Tracer

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
    if lb == rb == tuple(range(k)) and ln == rn == k + 1 and not lc:
        # Outer products of stacked vectors (per-example weight gradients).
        return binop("*", subscript(a, "..., None"), subscript(b, "..., None, :"))
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


register(dot_general, _emit_dot_general, temp_name="dot")

# ---------------------------------------------------------------------------------------
# Factorizations and solves

LAPACK_DTYPES = (dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)
# The letter LAPACK's routine names start with for each dtype (lapack_zgetrf_ffi ...).
LAPACK_PREFIXES = {np.dtype(dtypes.float32): "s", np.dtype(dtypes.float64): "d",
                   np.dtype(dtypes.complex64): "c", np.dtype(dtypes.complex128): "z"}


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

# ---------------------------------------------------------------------------------------
# Derivatives. Rules read like the math: `x` is a primal, `x_dot` its tangent, `ct` an
# output cotangent. They stage with the op layer and the primitives above, so the
# derivative code reads as `a_dot @ b + a @ b_dot`, `solve(L, ...)`, `tril(...)`.
# Real dtypes only (the NumPy surface has no complex conjugation yet).


def _aval(x) -> ShapedArray:
    """The abstract value of a staged value, a constant or a LinearInput marker."""
    return x.aval if isinstance(x, (LinearInput, Tracer, Literal)) else aval_of_value(x)


def _add_terms(*terms):
    """The sum of the terms that are not symbolic zeros (None if all are)."""
    total = None
    for term in terms:
        if term is None or is_zero(term):
            continue
        total = term if total is None else total + term
    return total


def _argsort(values) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(list(values), kind="stable"))


def _mT(x):
    """The transpose of each matrix of a batch (the last two axes swapped)."""
    n = _aval(x).ndim
    return ops.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def _matmul(a, b):
    """Batched `a @ b` for equal batch dims, as one dot_general (it emits as `a @ b`)."""
    nb = _aval(a).ndim - 2
    batch = tuple(range(nb))
    return dot_general.bind(a, b, dimension_numbers=(((nb + 1,), (nb,)), (batch, batch)),
                            preferred_element_type=None)


def _solve(a, b, **flags):
    return triangular_solve.bind(a, b, **flags)


# dot_general: bilinear. The jvp is the product rule; each transpose is another
# dot_general of the cotangent with the other operand, contracting what the product kept.


def _dot_general_jvp(primals, tangents, *, dimension_numbers, preferred_element_type=None):
    (lhs, rhs), (lhs_dot, rhs_dot) = primals, tangents
    params = dict(dimension_numbers=dimension_numbers,
                  preferred_element_type=preferred_element_type)
    out = dot_general.bind(lhs, rhs, **params)
    out_dot = _add_terms(None if is_zero(lhs_dot) else dot_general.bind(lhs_dot, rhs, **params),
                         None if is_zero(rhs_dot) else dot_general.bind(lhs, rhs_dot, **params))
    return out, out_dot


def _same_dtype(ct, other):
    """With preferred_element_type the cotangent's dtype can differ from the operands':
    the transposed product is then computed in the cotangent's (wider) dtype."""
    if _aval(other).dtype != _aval(ct).dtype:
        other = ops.convert(other, _aval(ct).dtype)
    return other


def _as_operand(x_bar, aval):
    """A cotangent in its operand's dtype (computed in a wider one by _same_dtype)."""
    return ops.convert(x_bar, aval.dtype) if _aval(x_bar).dtype != aval.dtype else x_bar


def _dot_general_transpose(ct, lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    """The cotangent ct has the output layout [batch, lhs kept, rhs kept].

    lhs_bar = ct · rhs, contracting ct's rhs-kept dims with rhs's kept dims; it comes out
    as [batch, lhs kept, lhs contracting (in rhs's order)] and is permuted back to lhs's
    layout. rhs_bar = lhs · ct likewise, with lhs first so that the common cases read
    `a.T @ ct` rather than a transposed `ct.T @ a`.
    """
    if is_linear(lhs) and is_linear(rhs):
        raise _transpose.NonLinearEquationError(
            "dot_general of two linear values is not linear")
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_aval, rhs_aval = _aval(lhs), _aval(rhs)
    lhs_kept = free_dims(lhs_aval.ndim, lc, lb)
    rhs_kept = free_dims(rhs_aval.ndim, rc, rb)
    nb = len(lb)
    ct_batch = tuple(range(nb))
    ct_lhs_kept = tuple(range(nb, nb + len(lhs_kept)))
    ct_rhs_kept = tuple(range(nb + len(lhs_kept), nb + len(lhs_kept) + len(rhs_kept)))
    if is_linear(lhs):
        if is_zero(ct):
            return [Zero(tangent_aval(lhs_aval)), None]
        product = dot_general.bind(
            ct, _same_dtype(ct, rhs),
            dimension_numbers=((ct_rhs_kept, tuple(rhs_kept)), (ct_batch, tuple(rb))),
            preferred_element_type=None)
        # Its free rhs dims are rhs's contracting dims in rhs's order: lc sorted by rc.
        layout = list(lb) + lhs_kept + [lc[i] for i in _argsort(rc)]
        lhs_bar = ops.transpose(product, _argsort(layout))
        return [_as_operand(lhs_bar, lhs_aval), None]
    if is_zero(ct):
        return [None, Zero(tangent_aval(rhs_aval))]
    product = dot_general.bind(
        _same_dtype(ct, lhs), ct,
        dimension_numbers=((tuple(lhs_kept), ct_lhs_kept), (tuple(lb), ct_batch)),
        preferred_element_type=None)
    # [batch, lhs's contracting dims in lhs's order (= rc sorted by lc), rhs kept]
    layout = list(rb) + [rc[i] for i in _argsort(lc)] + rhs_kept
    rhs_bar = ops.transpose(product, _argsort(layout))
    return [None, _as_operand(rhs_bar, rhs_aval)]


_jvp.register(dot_general, _dot_general_jvp)
_transpose.register(dot_general, _dot_general_transpose)


# cholesky: from L Lᵀ = A, L⁻¹ Ȧ L⁻ᵀ = L⁻¹ L̇ + (L⁻¹ L̇)ᵀ, whose lower triangle with a halved
# diagonal is L⁻¹ L̇ (Murray 2016, arXiv:1602.07527). Ȧ is symmetrized first, as JAX's
# cholesky symmetrizes its input, so the gradient is a symmetric matrix.


def _lower_half_diagonal(x):
    """Φ(X): the lower triangle of X with its diagonal halved."""
    n = _aval(x).shape[-1]
    return ops.tril(x) / (1 + ops.eye(n, dtype=_aval(x).dtype))


def _cholesky_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    L = cholesky.bind(a)
    a_dot = (a_dot + _mT(a_dot)) / 2
    # L⁻¹ Ȧ L⁻ᵀ: a right-side solve with Lᵀ, then a left-side one with L.
    a_dot_Lt = _solve(L, a_dot, left_side=False, lower=True, transpose_a=True,
                      unit_diagonal=False)
    Li_a_dot_Lt = _solve(L, a_dot_Lt, left_side=True, lower=True, transpose_a=False,
                         unit_diagonal=False)
    return L, _matmul(L, _lower_half_diagonal(Li_a_dot_Lt))


_jvp.register(cholesky, _cholesky_jvp)


# triangular_solve(a, b) = op(a)⁻¹ b (left side) or b op(a)⁻¹: linear in b; in a,
# differentiating op(a) x = b gives op(ȧ) x + op(a) ẋ = 0. So ẋ = solve(a, ḃ − op(ȧ) x),
# with ȧ masked to the triangle the solve reads.


def _triangle_read(a_dot, lower: bool, unit_diagonal: bool):
    """The part of ȧ the solve depends on: its lower (or upper) triangle, without the
    diagonal when the diagonal is taken to be ones."""
    k = 1 if unit_diagonal else 0
    return ops.tril(a_dot, -k) if lower else ops.triu(a_dot, k)


def _triangular_solve_jvp(primals, tangents, *, left_side, lower, transpose_a, unit_diagonal):
    (a, b), (a_dot, b_dot) = primals, tangents
    flags = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                 unit_diagonal=unit_diagonal)
    x = triangular_solve.bind(a, b, **flags)
    rhs_dot = None if is_zero(b_dot) else b_dot
    if not is_zero(a_dot):
        op_a_dot = _triangle_read(a_dot, lower, unit_diagonal)
        if transpose_a:
            op_a_dot = _mT(op_a_dot)
        change = _matmul(op_a_dot, x) if left_side else _matmul(x, op_a_dot)
        rhs_dot = -change if rhs_dot is None else rhs_dot - change
    return x, triangular_solve.bind(a, rhs_dot, **flags)


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, unit_diagonal):
    """x = op(a)⁻¹ b has b̄ = op(a)⁻ᵀ x̄ (and x = b op(a)⁻¹ has b̄ = x̄ op(a)⁻ᵀ)."""
    if is_linear(a):
        raise _transpose.NonLinearEquationError(
            "triangular_solve is linear in b only, but its matrix a is a linear value")
    if is_zero(ct):
        return [None, Zero(tangent_aval(_aval(b)))]
    b_bar = triangular_solve.bind(a, ct, left_side=left_side, lower=lower,
                                  transpose_a=not transpose_a, unit_diagonal=unit_diagonal)
    return [None, b_bar]


_jvp.register(triangular_solve, _triangular_solve_jvp)
_transpose.register(triangular_solve, _triangular_solve_transpose)


# lu: P A = L U, so L⁻¹ P Ȧ U⁻¹ = L⁻¹ L̇ + U̇ U⁻¹, strictly lower plus upper; hence
# L̇ = L · tril(L⁻¹ P Ȧ U⁻¹, −1) and U̇ = triu(L⁻¹ P Ȧ U⁻¹) · U (De Hoog, Anderssen and
# Lukas). The packed factor's tangent is L̇ + U̇; pivots and permutation are integers.


def _lu_factors(lu_, m: int, n: int):
    """Square L (m × m, unit lower) and U (n × n, upper) from the packed m × n factor.

    A tall matrix's L gets identity columns on the right and a wide matrix's U an identity
    block below: any values would do there, as long as the factors are square and
    invertible, since L̇ and U̇ are zero in those blocks.
    """
    dtype = _aval(lu_).dtype
    batch = _aval(lu_).shape[:-2]
    ndim = len(batch) + 2
    L = ops.tril(_leading(lu_, -1, m) if m < n else lu_, -1)
    if m > n:
        L = ops.concatenate([L, ops.full(batch + (m, m - n), 0, dtype)], ndim - 1)
    L = L + ops.eye(m, dtype=dtype)
    U = _leading(lu_, -2, n) if m > n else lu_
    if m < n:
        identity_rows = ops.eye(n - m, n, k=m, dtype=dtype)
        U = ops.concatenate([U, ops.broadcast_to(identity_rows, batch + (n - m, n))], ndim - 2)
    return L, ops.triu(U)


def _leading(x, axis: int, size: int):
    """The first `size` entries of `x` along `axis` (`x[..., :size, :]` for axis -2)."""
    shape = tuple(_aval(x).shape)
    limits = list(shape)
    limits[axis] = size
    return ops.slice(x, (0,) * len(shape), limits)


def permute_rows(b, permutation):
    """`b[..., permutation, :]`, batched: `permutation` indexes the rows of each matrix of
    the batch (the batch dimensions gathered with iotas, the rows with `permutation`)."""
    shape = tuple(_aval(permutation).shape)
    nb = len(shape) - 1
    batch_index = [ops.iota(shape, d, _aval(permutation).dtype) for d in range(nb)]
    return ops.gather(b, *batch_index, permutation, axes=range(nb + 1))


def _lu_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    lu_, pivots, permutation = lu.bind(a)
    m, n = _aval(a).shape[-2:]
    L, U = _lu_factors(lu_, m, n)
    pa_dot = permute_rows(a_dot, permutation)
    Li_pa_dot = _solve(L, pa_dot, left_side=True, lower=True, transpose_a=False,
                       unit_diagonal=True)
    Li_pa_dot_Ui = _solve(U, Li_pa_dot, left_side=False, lower=False, transpose_a=False,
                          unit_diagonal=False)
    lu_dot = (_matmul(L, ops.tril(Li_pa_dot_Ui, -1))
              + _matmul(ops.triu(Li_pa_dot_Ui), U))
    return ([lu_, pivots, permutation],
            [lu_dot, Zero(tangent_aval(_aval(pivots))), Zero(tangent_aval(_aval(permutation)))])


_jvp.register(lu, _lu_jvp)

# ---------------------------------------------------------------------------------------
# solve, det and slogdet: one primitive each, so that a derivative is the textbook formula
# written with solves, not the derivative of the LU steps that compute the value:
#   x = A⁻¹ b:        ẋ = A⁻¹ (ḃ − Ȧ x),    so b̄ = A⁻ᵀ x̄ and Ā = −b̄ xᵀ;
#   d = det A:        ḋ = d · tr(A⁻¹ Ȧ),     so Ā = d̄ · d · A⁻ᵀ;
#   log|det A|:       its tangent is tr(A⁻¹ Ȧ), so Ā = ḡ · A⁻ᵀ (the sign is constant).
# NumPy computes them (emitted code calls np.linalg, and rt.solve, which gives inf/nan
# for a singular matrix as XLA does); StableHLO lowers each through `lu` and triangular
# solves, as LAPACK's gesv and getrf do.


def _solve_abstract(a, b):
    _check_matrices("solve", a)
    if b.dtype != a.dtype:
        raise ShapeError(f"solve needs operands of one dtype, got {a.str_short()} and "
                         f"{b.str_short()}")
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"solve needs b with a's batch dimensions and as many rows as a, "
                         f"got a {a.str_short()} and b {b.str_short()}")
    return b.strip_weak_type()


def _determinant_abstract(a):
    _check_matrices("det", a)
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


def _trace_of_solve(a, a_dot):
    """tr(A⁻¹ Ȧ) for each matrix of the batch: the tangent of log|det A|."""
    aval = _aval(a)
    n, nd = aval.shape[-1], aval.ndim
    return ops.reduce_sum(solve.bind(a, a_dot) * ops.eye(n, dtype=aval.dtype), (nd - 2, nd - 1))


def _solve_jvp(primals, tangents):
    (a, b), (a_dot, b_dot) = primals, tangents
    x = solve.bind(a, b)
    rhs = _add_terms(b_dot, None if is_zero(a_dot) else -_matmul(a_dot, x))
    return x, Zero(tangent_aval(_aval(x))) if rhs is None else solve.bind(a, rhs)


def _solve_transpose(ct, a, b):
    """x = A⁻¹ b is linear in b, with b̄ = A⁻ᵀ x̄."""
    if is_linear(a):
        raise _transpose.NonLinearEquationError(
            "solve is linear in b only, but its matrix a is a linear value")
    if is_zero(ct):
        return [None, Zero(tangent_aval(_aval(b)))]
    return [None, solve.bind(_mT(a), ct)]


def _det_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    d = det.bind(a)
    return d, d * _trace_of_solve(a, a_dot)


def _slogdet_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    sign, logabsdet = slogdet.bind(a)
    return [sign, logabsdet], [Zero(tangent_aval(_aval(sign))), _trace_of_solve(a, a_dot)]


_jvp.register(solve, _solve_jvp)
_transpose.register(solve, _solve_transpose)
_jvp.register(det, _det_jvp)
_jvp.register(slogdet, _slogdet_jvp)


def solve_by_lu(a, b):
    """`solve` as LAPACK's gesv computes it: P A = L U, then x = U⁻¹ (L⁻¹ (P b))."""
    lu_, _, permutation = lu.bind(a)
    y = triangular_solve.bind(lu_, permute_rows(b, permutation), left_side=True, lower=True,
                              transpose_a=False, unit_diagonal=True)
    return triangular_solve.bind(lu_, y, left_side=True, lower=False, transpose_a=False,
                                 unit_diagonal=False)


def _diagonal(x):
    """The diagonal of each matrix of a batch, gathered: x[..., i, i]."""
    shape = tuple(_aval(x).shape[:-1])
    nb = len(shape) - 1
    index = [ops.iota(shape, d, dtypes.int32) for d in range(nb + 1)]
    return ops.gather(x, *index, index[-1], axes=range(nb + 2))


def _permutation_sign_and_u_diagonal(a):
    """From P A = L U: det P (−1 for each pivot that swapped rows) and U's diagonal, so
    det A = det P · prod(diag U)."""
    lu_, pivots, _ = lu.bind(a)
    u_diagonal = _diagonal(lu_)
    dtype, last = _aval(lu_).dtype, _aval(pivots).ndim - 1
    steps = ops.iota(_aval(pivots).shape, last, dtypes.int32)
    flips = ops.select(ops.ne(pivots, steps), ops.full((), -1, dtype), ops.full((), 1, dtype))
    return ops.reduce_prod(flips, (last,)), u_diagonal


def slogdet_by_lu(a):
    """(sign, log|det|) from LU: a sum of logs, where a product could overflow."""
    permutation_sign, u_diagonal = _permutation_sign_and_u_diagonal(a)
    last = (_aval(u_diagonal).ndim - 1,)
    return [permutation_sign * ops.reduce_prod(ops.sign(u_diagonal), last),
            ops.reduce_sum(ops.log(ops.abs_(u_diagonal)), last)]


def det_by_lu(a):
    """det A = det P · prod(diag U) (exactly zero for a singular matrix's zero pivot)."""
    permutation_sign, u_diagonal = _permutation_sign_and_u_diagonal(a)
    return permutation_sign * ops.reduce_prod(u_diagonal, (_aval(u_diagonal).ndim - 1,))


# ---------------------------------------------------------------------------------------
# Simplification: a transposed operand is read through the dimension numbers instead.


def _fold_transposed_operand(eqn, producer):
    """dot_general of a transpose reads the untransposed operand with its dimension numbers
    mapped through the permutation, where the result keeps its order (the free dimensions
    stay in order). A backward step that recomputes `X.T` and transposes `X.T @ g` then
    reads `X @ g_bar`, not `X.T.T @ g_bar`. Both operands are folded at once (the
    replacement is final: `simplify` does not look at it again)."""
    (contract, batch) = eqn.params["dimension_numbers"]
    mapped, invars = [list(contract), list(batch)], list(eqn.invars)
    for side in (0, 1):
        inner = producer(eqn.invars[side])
        if inner is None or inner.primitive is not ops.primitive(ops.transpose):
            continue
        perm = inner.params["permutation"]
        kept = [perm[d] for d in free_dims(len(perm), contract[side], batch[side])]
        if kept != sorted(kept):
            continue
        mapped[0][side] = tuple(perm[d] for d in contract[side])
        mapped[1][side] = tuple(perm[d] for d in batch[side])
        invars[side] = inner.invars[0]
    if invars == eqn.invars:
        return None
    return JaxprEqn(dot_general, invars, eqn.outvars,
                    {**eqn.params, "dimension_numbers": (tuple(mapped[0]), tuple(mapped[1]))}, eqn.source_info)


_simplify.register(dot_general, _fold_transposed_operand)


# ---------------------------------------------------------------------------------------
# StableHLO lowering. dot_general, cholesky and triangular_solve are StableHLO ops (XLA
# expands the last two on CPU, no LAPACK custom call needed). `lu` has no op: it lowers to
# unrolled getrf steps for the static min(m, n) (partial pivoting on the first largest
# |a[i, j]|, row swaps as selects, then the rank-1 update), batched over leading dims, so
# the module runs on a jaxlib without jax's LAPACK targets registered.



def _tt(shape, dtype) -> str:
    return _hlo.tensor_type(ShapedArray(tuple(shape), dtype))


def _lower_dot_general(ctx, eqn, a, b, **_):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    if lhs.dtype != out.dtype:   # preferred_element_type: compute in the result's dtype
        lt, rt_ = _tt(lhs.shape, out.dtype), _tt(rhs.shape, out.dtype)
        a = ctx.op(f"stablehlo.convert {a} : ({_hlo.tensor_type(lhs)}) -> {lt}")
        b = ctx.op(f"stablehlo.convert {b} : ({_hlo.tensor_type(rhs)}) -> {rt_}")
        lhs, rhs = ShapedArray(lhs.shape, out.dtype), ShapedArray(rhs.shape, out.dtype)

    def dims(ds):
        return f"[{', '.join(str(d) for d in ds)}]"
    parts = []
    if lb:
        parts.append(f"batching_dims = {dims(lb)} x {dims(rb)}")
    parts.append(f"contracting_dims = {dims(lc)} x {dims(rc)}")
    return [ctx.op(f"stablehlo.dot_general {a}, {b}, {', '.join(parts)} : "
                   f"({_hlo.tensor_type(lhs)}, {_hlo.tensor_type(rhs)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


def _triangle_mask(ctx, shape, lower: bool, strict: bool = False) -> str:
    """A boolean tensor of `shape` (matrices last) true on the lower (or upper) triangle."""
    nd = len(shape)
    it = _tt(shape, dtypes.int32)
    rows = ctx.op(f"stablehlo.iota dim = {nd - 2} : {it}")
    cols = ctx.op(f"stablehlo.iota dim = {nd - 1} : {it}")
    direction = ("GT" if strict else "GE") if lower else ("LT" if strict else "LE")
    return ctx.op(f"stablehlo.compare {direction}, {rows}, {cols}, SIGNED : ({it}, {it}) -> "
                  f"{_tt(shape, dtypes.bool_)}")


def _lower_cholesky(ctx, eqn, a, **_):
    aval = eqn.outvars[0].aval
    t = _hlo.out_type(eqn)
    factor = ctx.op(f'"stablehlo.cholesky"({a}) <{{lower = true}}> : ({t}) -> {t}')
    keep = _triangle_mask(ctx, aval.shape, lower=True)
    zero = ctx.constant(0, aval.dtype, aval.shape)
    return [ctx.op(f"stablehlo.select {keep}, {factor}, {zero} : "
                   f"{_tt(aval.shape, dtypes.bool_)}, {t}", _hlo.hint(eqn))]


def _lower_triangular_solve(ctx, eqn, a, b, **_):
    p = eqn.params
    transpose = "TRANSPOSE" if p["transpose_a"] else "NO_TRANSPOSE"
    flag = lambda v: "true" if v else "false"  # noqa: E731
    return [ctx.op(f'"stablehlo.triangular_solve"({a}, {b}) <{{left_side = {flag(p["left_side"])}, '
                   f'lower = {flag(p["lower"])}, transpose_a = #stablehlo<transpose {transpose}>, '
                   f'unit_diagonal = {flag(p["unit_diagonal"])}}}> : '
                   f"({_hlo.tensor_type(eqn.invars[0].aval)}, {_hlo.tensor_type(eqn.invars[1].aval)}) "
                   f"-> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _layout(minor_to_major) -> str:
    dims = ", ".join(str(d) for d in minor_to_major)
    return f"dense<[{dims}]> : tensor<{len(minor_to_major)}xindex>" if minor_to_major else \
        "dense<> : tensor<0xindex>"


def _lower_lu(ctx, eqn, a):
    """LU through LAPACK's getrf, the custom-call target jaxlib ships (`lapack_?getrf_ffi`,
    registered by s2s_runtime.xla); the permutation is built from the pivots by a loop."""
    aval = eqn.invars[0].aval
    dtype, i32 = np.dtype(aval.dtype), dtypes.int32
    *batch, m, n = aval.shape
    batch, nb, k = tuple(batch), len(aval.shape) - 2, min(m, n)
    piv_shape, perm_shape = batch + (k,), batch + (m,)
    if k == 0:
        return [a, ctx.op(f"stablehlo.constant dense<> : {_tt(piv_shape, i32)}" if 0 in piv_shape
                          else f"stablehlo.iota dim = 0 : {_tt(piv_shape, i32)}"),
                ctx.op(f"stablehlo.iota dim = {nb} : {_tt(perm_shape, i32)}", "perm")]
    t = _tt(aval.shape, dtype)
    row_major = lambda rank: list(range(rank - 1, -1, -1))  # noqa: E731
    target = f"lapack_{LAPACK_PREFIXES[dtype]}getrf_ffi"
    result_types = f"{t}, {_tt(piv_shape, i32)}, {_tt(batch, i32)}"
    factored = ctx.op(
        f"stablehlo.custom_call @{target}({a}) {{backend_config = \"\", mhlo.backend_config = {{}}, "
        f"mhlo.frontend_attributes = {{num_batch_dims = \"{nb}\"}}, "
        f"operand_layouts = [{_layout([nb, nb + 1] + row_major(nb))}], "
        f"output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], "
        f"operand_index = 0, operand_tuple_indices = []>], "
        f"result_layouts = [{_layout([nb, nb + 1] + row_major(nb))}, {_layout(row_major(nb + 1))}, "
        f"{_layout(row_major(nb))}]}} : ({t}) -> ({result_types})", "getrf", results=3)
    one = ctx.constant(1, i32, piv_shape)
    pivots = ctx.op(f"stablehlo.subtract {factored}#1, {one} : {_tt(piv_shape, i32)}", "pivots")
    return [f"{factored}#0", pivots, _permutation_from_pivots(ctx, pivots, batch, m, k)]


def _permutation_from_pivots(ctx, pivots: str, batch: tuple, m: int, k: int) -> str:
    """perm = arange(m), then for j < k: swap perm[j] and perm[pivots[j]] — a while loop."""
    i32, nb = dtypes.int32, len(batch)
    scalar, pt = _tt((), i32), _tt(batch + (k,), i32)
    perm_t, row_t = _tt(batch + (m,), i32), _tt(batch, i32)
    bool_t = _tt(batch + (m,), dtypes.bool_)
    perm0 = ctx.op(f"stablehlo.iota dim = {nb} : {perm_t}", "perm")

    def more(carry):
        bound = ctx.constant(k, i32)
        return [ctx.op(f"stablehlo.compare LT, {carry[0]}, {bound}, SIGNED : ({scalar}, {scalar}) -> "
                       f"{_tt((), dtypes.bool_)}")]

    def swap(carry):
        j, perm = carry
        zero = ctx.constant(0, i32)
        starts = ", ".join([zero] * nb + [j])
        sizes = ", ".join([str(d) for d in batch] + ["1"])
        p = ctx.op(f"stablehlo.dynamic_slice {pivots}, {starts}, sizes = [{sizes}] : "
                   f"({pt}, {', '.join([scalar] * (nb + 1))}) -> {_tt(batch + (1,), i32)}")
        rows = ctx.op(f"stablehlo.iota dim = {nb} : {perm_t}")
        p_full = ctx.op(f"stablehlo.broadcast_in_dim {p}, dims = [{', '.join(map(str, range(nb + 1)))}] : "
                        f"({_tt(batch + (1,), i32)}) -> {perm_t}")
        j_full = ctx.op(f"stablehlo.broadcast_in_dim {j}, dims = [] : ({scalar}) -> {perm_t}")
        is_p = ctx.op(f"stablehlo.compare EQ, {rows}, {p_full}, SIGNED : ({perm_t}, {perm_t}) -> {bool_t}")
        is_j = ctx.op(f"stablehlo.compare EQ, {rows}, {j_full}, SIGNED : ({perm_t}, {perm_t}) -> {bool_t}")
        zeros = ctx.constant(0, i32, batch + (m,))

        def entry(mask):   # perm at the one row where `mask` holds, broadcast back over the rows
            picked = ctx.op(f"stablehlo.select {mask}, {perm}, {zeros} : {bool_t}, {perm_t}")
            total = ctx.op(f"stablehlo.reduce({picked} init: {zero}) applies stablehlo.add across "
                           f"dimensions = [{nb}] : ({perm_t}, {scalar}) -> {row_t}")
            return ctx.op(f"stablehlo.broadcast_in_dim {total}, dims = [{', '.join(map(str, range(nb)))}] : "
                          f"({row_t}) -> {perm_t}")
        at_p, at_j = entry(is_p), entry(is_j)
        swapped = ctx.op(f"stablehlo.select {is_p}, {at_j}, {perm} : {bool_t}, {perm_t}")
        swapped = ctx.op(f"stablehlo.select {is_j}, {at_p}, {swapped} : {bool_t}, {perm_t}")
        return [ctx.op(f"stablehlo.add {j}, {ctx.constant(1, i32)} : {scalar}"), swapped]

    _, perm = _hlo.while_op(ctx, [ctx.constant(0, i32), perm0],
                            [ShapedArray((), i32), ShapedArray(batch + (m,), i32)], ["j", "perm"], more, swap)
    return perm


_hlo.register(dot_general, _lower_dot_general)
_hlo.register(cholesky, _lower_cholesky)
_hlo.register(triangular_solve, _lower_triangular_solve)
_hlo.register(lu, _lower_lu)


def _lowered_as(decomposition):
    """A lowering that stages `decomposition` (primitives that lower) on the equation's
    operands and parameters and lowers that: StableHLO has no solve and no determinant."""
    def lower(ctx, eqn, *operands):
        with JaxprBuilder() as builder:
            outs = decomposition(*[builder.new_arg(v.aval) for v in eqn.invars], **eqn.params)
            closed = builder.build(outs if eqn.primitive.multiple_results else [outs])
        if closed.consts:
            raise AssertionError(f"the decomposition of {eqn.primitive.name} captured constants")
        return _hlo.lower_jaxpr(ctx, closed.jaxpr, list(operands))
    return lower


_hlo.register(solve, _lowered_as(solve_by_lu))
_hlo.register(det, _lowered_as(det_by_lu))
_hlo.register(slogdet, _lowered_as(slogdet_by_lu))


# ---------------------------------------------------------------------------------------
# Batching. dot_general takes a batch as it is: a batch of one operand alone is one more
# free dimension of it (a batch of inputs times a shared weight stays one matrix product,
# the weight read as it is), and a batch of both is one more batch dimension. The
# factorizations and solves are batched over leading dimensions already: a batch axis
# among them stays where it is, one among the matrix axes moves just before them. A batch
# of right-hand sides against a shared matrix is folded into b's columns (or rows, for a
# right-side solve), so the matrix is factored once, not once per example.


def _dot_general_batch(mapped, args, dims, /, *, dimension_numbers, preferred_element_type=None):
    (lhs, rhs), (lhs_dim, rhs_dim) = args, dims
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_free = free_dims(_vmap.ndim(lhs) - (lhs_dim is not None), lc, lb)
    rhs_free = free_dims(_vmap.ndim(rhs) - (rhs_dim is not None), rc, rb)
    # The output is [batch dims, lhs's free dims, rhs's free dims], each in operand order.
    if lhs_dim is not None and rhs_dim is not None:
        out_dim = 0
    elif lhs_dim is not None:
        out_dim = len(lb) + sum(d < lhs_dim for d in lhs_free)
    else:
        out_dim = len(lb) + len(lhs_free) + sum(d < rhs_dim for d in rhs_free)

    def shifted(ds, dim):
        return ds if dim is None else tuple(_vmap.batched_axis(d, dim) for d in ds)

    lc, lb, rc, rb = shifted(lc, lhs_dim), shifted(lb, lhs_dim), shifted(rc, rhs_dim), shifted(rb, rhs_dim)
    if lhs_dim is not None and rhs_dim is not None:
        lb, rb = (lhs_dim, *lb), (rhs_dim, *rb)
    out = dot_general.bind(lhs, rhs, dimension_numbers=((lc, rc), (lb, rb)),
                           preferred_element_type=preferred_element_type)
    return out, out_dim


def _matrix_batch_dim(dims, rank: int) -> int:
    """Where a batch of arrays of matrices (per-example `rank`) is handed to a primitive
    batched over leading dims: the first batched operand's position if it is a leading
    one, else the last leading position (just before the matrix axes)."""
    leading = [d for d in dims if d is not None and d <= rank - 2]
    return leading[0] if leading else rank - 2


def _batch_matrix_function(prim):
    """cholesky, lu, det, slogdet, the decompositions: one operand, every result batched
    over its leading dims."""
    def rule(mapped, args, dims, /, **params):
        (a,), (dim,) = args, dims
        target = _matrix_batch_dim(dims, _vmap.ndim(a) - 1)
        out = prim.bind(_vmap.move_axis(a, dim, target), **params)
        return out, [target] * len(out) if prim.multiple_results else target
    return rule


def _solve_batch(prim):
    """solve and triangular_solve (a, b): a batched matrix gets b aligned with it (copied
    per example if b is shared); a shared matrix solves every example's b at once, the
    batch folded into b's columns (rows for `x @ op(a) = b`)."""
    def rule(mapped, args, dims, /, **params):
        (a, b), (a_dim, b_dim) = args, dims
        rank = _vmap.ndim(b) - (b_dim is not None)
        if a_dim is not None:
            target = _matrix_batch_dim(dims, rank)
            b = _vmap.to_dim(b, b_dim, target, mapped.size)
            return prim.bind(_vmap.move_axis(a, a_dim, target), b, **params), target
        # b's rows are what a's columns multiply (its columns, for x @ op(a) = b); the
        # batch rides with b's other matrix axis. solve is always a left-side solve.
        fold = rank - 1 if params.get("left_side", True) else rank - 2
        b = _vmap.move_axis(b, b_dim, fold)
        batched_shape = _vmap.shape(b)
        merged = batched_shape[:fold] + (batched_shape[fold] * batched_shape[fold + 1],) \
            + batched_shape[fold + 2:]
        x = prim.bind(a, ops.reshape(b, merged), **params)
        return ops.reshape(x, batched_shape), fold
    return rule


_vmap.register(dot_general, _dot_general_batch)
for _prim in (cholesky, lu, det, slogdet):
    _vmap.register(_prim, _batch_matrix_function(_prim))
for _prim in (solve, triangular_solve):
    _vmap.register(_prim, _solve_batch(_prim))
