"""The factorizations: `cholesky`, `triangular_solve` and `lu`, with all their rules.

They follow LAPACK and XLA (lower Cholesky; getrf's pivoting and packed LU) and are
batched over leading dimensions. NumPy has no LU and no triangular solve, so their impls
and emitted code call `s2s_runtime.linalg`. StableHLO has cholesky and triangular_solve
ops (XLA expands them on CPU, no LAPACK custom call needed); `lu` lowers to LAPACK's getrf,
the custom call jaxlib ships, and builds the permutation from the pivots with a loop.

Public helper: `permute_rows` (`b[..., permutation, :]`, batched), which `solves.py`
solves with.
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
from s2s.primitives.linalg.matrices import (LAPACK_PREFIXES, aval_of, batch_matrix_function, batch_solve,
                                            check_matrices, layout_attribute, mT, tensor_type, triangle_mask)
from s2s.staging import Primitive


# ---------------------------------------------------------------------------------------
# Declarations and Python emission


def _cholesky_abstract(a):
    check_matrices("cholesky", a)
    return a.strip_weak_type()


# The lower factor L with a = L @ L^H, as np.linalg.cholesky (batched over leading dims).
cholesky = Primitive("cholesky", _cholesky_abstract, lambda a: np.linalg.cholesky(a))
register(cholesky, lambda eqn, a: call("np.linalg.cholesky", a))


def _triangular_solve_abstract(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    check_matrices("triangular_solve", a)
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
    check_matrices("lu", a, square=False)
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


def _solve(a, b, **flags):
    return triangular_solve.bind(a, b, **flags)


# cholesky: from L Lᵀ = A, L⁻¹ Ȧ L⁻ᵀ = L⁻¹ L̇ + (L⁻¹ L̇)ᵀ, whose lower triangle with a halved
# diagonal is L⁻¹ L̇ (Murray 2016, arXiv:1602.07527). Ȧ is symmetrized first, as JAX's
# cholesky symmetrizes its input, so the gradient is a symmetric matrix.


def _lower_half_diagonal(x):
    """Φ(X): the lower triangle of X with its diagonal halved."""
    n = aval_of(x).shape[-1]
    return ops.tril(x) / (1 + ops.eye(n, dtype=aval_of(x).dtype))


def _cholesky_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    L = cholesky.bind(a)
    a_dot = (a_dot + mT(a_dot)) / 2
    # L⁻¹ Ȧ L⁻ᵀ: a right-side solve with Lᵀ, then a left-side one with L.
    a_dot_Lt = _solve(L, a_dot, left_side=False, lower=True, transpose_a=True,
                      unit_diagonal=False)
    Li_a_dot_Lt = _solve(L, a_dot_Lt, left_side=True, lower=True, transpose_a=False,
                         unit_diagonal=False)
    return L, matmul(L, _lower_half_diagonal(Li_a_dot_Lt))


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
            op_a_dot = mT(op_a_dot)
        change = matmul(op_a_dot, x) if left_side else matmul(x, op_a_dot)
        rhs_dot = -change if rhs_dot is None else rhs_dot - change
    return x, triangular_solve.bind(a, rhs_dot, **flags)


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, unit_diagonal):
    """x = op(a)⁻¹ b has b̄ = op(a)⁻ᵀ x̄ (and x = b op(a)⁻¹ has b̄ = x̄ op(a)⁻ᵀ)."""
    if is_linear(a):
        raise _transpose.NonLinearEquationError(
            "triangular_solve is linear in b only, but its matrix a is a linear value")
    if is_zero(ct):
        return [None, Zero(tangent_aval(aval_of(b)))]
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
    dtype = aval_of(lu_).dtype
    batch = aval_of(lu_).shape[:-2]
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
    shape = tuple(aval_of(x).shape)
    limits = list(shape)
    limits[axis] = size
    return ops.slice(x, (0,) * len(shape), limits)


def permute_rows(b, permutation):
    """`b[..., permutation, :]`, batched: `permutation` indexes the rows of each matrix of
    the batch (the batch dimensions gathered with iotas, the rows with `permutation`)."""
    shape = tuple(aval_of(permutation).shape)
    nb = len(shape) - 1
    batch_index = [ops.iota(shape, d, aval_of(permutation).dtype) for d in range(nb)]
    return ops.gather(b, *batch_index, permutation, axes=range(nb + 1))


def _lu_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    lu_, pivots, permutation = lu.bind(a)
    m, n = aval_of(a).shape[-2:]
    L, U = _lu_factors(lu_, m, n)
    pa_dot = permute_rows(a_dot, permutation)
    Li_pa_dot = _solve(L, pa_dot, left_side=True, lower=True, transpose_a=False,
                       unit_diagonal=True)
    Li_pa_dot_Ui = _solve(U, Li_pa_dot, left_side=False, lower=False, transpose_a=False,
                          unit_diagonal=False)
    lu_dot = (matmul(L, ops.tril(Li_pa_dot_Ui, -1))
              + matmul(ops.triu(Li_pa_dot_Ui), U))
    return ([lu_, pivots, permutation],
            [lu_dot, Zero(tangent_aval(aval_of(pivots))), Zero(tangent_aval(aval_of(permutation)))])


_jvp.register(lu, _lu_jvp)


# ---------------------------------------------------------------------------------------
# StableHLO lowering


def _lower_cholesky(ctx, eqn, a, **_):
    aval = eqn.outvars[0].aval
    t = _hlo.out_type(eqn)
    factor = ctx.op(f'"stablehlo.cholesky"({a}) <{{lower = true}}> : ({t}) -> {t}')
    keep = triangle_mask(ctx, aval.shape, lower=True)
    zero = ctx.constant(0, aval.dtype, aval.shape)
    return [ctx.op(f"stablehlo.select {keep}, {factor}, {zero} : "
                   f"{tensor_type(aval.shape, dtypes.bool_)}, {t}", _hlo.hint(eqn))]


def _lower_triangular_solve(ctx, eqn, a, b, **_):
    p = eqn.params
    transpose = "TRANSPOSE" if p["transpose_a"] else "NO_TRANSPOSE"
    flag = lambda v: "true" if v else "false"  # noqa: E731
    return [ctx.op(f'"stablehlo.triangular_solve"({a}, {b}) <{{left_side = {flag(p["left_side"])}, '
                   f'lower = {flag(p["lower"])}, transpose_a = #stablehlo<transpose {transpose}>, '
                   f'unit_diagonal = {flag(p["unit_diagonal"])}}}> : '
                   f"({_hlo.tensor_type(eqn.invars[0].aval)}, {_hlo.tensor_type(eqn.invars[1].aval)}) "
                   f"-> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_lu(ctx, eqn, a):
    """LU through LAPACK's getrf, the custom-call target jaxlib ships (`lapack_?getrf_ffi`,
    registered by s2s_runtime.xla); the permutation is built from the pivots by a loop."""
    aval = eqn.invars[0].aval
    dtype, i32 = np.dtype(aval.dtype), dtypes.int32
    *batch, m, n = aval.shape
    batch, nb, k = tuple(batch), len(aval.shape) - 2, min(m, n)
    piv_shape, perm_shape = batch + (k,), batch + (m,)
    if k == 0:
        return [a, ctx.op(f"stablehlo.constant dense<> : {tensor_type(piv_shape, i32)}" if 0 in piv_shape
                          else f"stablehlo.iota dim = 0 : {tensor_type(piv_shape, i32)}"),
                ctx.op(f"stablehlo.iota dim = {nb} : {tensor_type(perm_shape, i32)}", "perm")]
    t = tensor_type(aval.shape, dtype)
    row_major = lambda rank: list(range(rank - 1, -1, -1))  # noqa: E731
    target = f"lapack_{LAPACK_PREFIXES[dtype]}getrf_ffi"
    result_types = f"{t}, {tensor_type(piv_shape, i32)}, {tensor_type(batch, i32)}"
    factored = ctx.op(
        f"stablehlo.custom_call @{target}({a}) {{backend_config = \"\", mhlo.backend_config = {{}}, "
        f"mhlo.frontend_attributes = {{num_batch_dims = \"{nb}\"}}, "
        f"operand_layouts = [{layout_attribute([nb, nb + 1] + row_major(nb))}], "
        f"output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], "
        f"operand_index = 0, operand_tuple_indices = []>], "
        f"result_layouts = [{layout_attribute([nb, nb + 1] + row_major(nb))}, {layout_attribute(row_major(nb + 1))}, "
        f"{layout_attribute(row_major(nb))}]}} : ({t}) -> ({result_types})", "getrf", results=3)
    one = ctx.constant(1, i32, piv_shape)
    pivots = ctx.op(f"stablehlo.subtract {factored}#1, {one} : {tensor_type(piv_shape, i32)}", "pivots")
    return [f"{factored}#0", pivots, _permutation_from_pivots(ctx, pivots, batch, m, k)]


def _permutation_from_pivots(ctx, pivots: str, batch: tuple, m: int, k: int) -> str:
    """perm = arange(m), then for j < k: swap perm[j] and perm[pivots[j]] — a while loop."""
    i32, nb = dtypes.int32, len(batch)
    scalar, pt = tensor_type((), i32), tensor_type(batch + (k,), i32)
    perm_t, row_t = tensor_type(batch + (m,), i32), tensor_type(batch, i32)
    bool_t = tensor_type(batch + (m,), dtypes.bool_)
    perm0 = ctx.op(f"stablehlo.iota dim = {nb} : {perm_t}", "perm")

    def more(carry):
        bound = ctx.constant(k, i32)
        return [ctx.op(f"stablehlo.compare LT, {carry[0]}, {bound}, SIGNED : ({scalar}, {scalar}) -> "
                       f"{tensor_type((), dtypes.bool_)}")]

    def swap(carry):
        j, perm = carry
        zero = ctx.constant(0, i32)
        starts = ", ".join([zero] * nb + [j])
        sizes = ", ".join([str(d) for d in batch] + ["1"])
        p = ctx.op(f"stablehlo.dynamic_slice {pivots}, {starts}, sizes = [{sizes}] : "
                   f"({pt}, {', '.join([scalar] * (nb + 1))}) -> {tensor_type(batch + (1,), i32)}")
        rows = ctx.op(f"stablehlo.iota dim = {nb} : {perm_t}")
        p_full = ctx.op(f"stablehlo.broadcast_in_dim {p}, dims = [{', '.join(map(str, range(nb + 1)))}] : "
                        f"({tensor_type(batch + (1,), i32)}) -> {perm_t}")
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


_hlo.register(cholesky, _lower_cholesky)
_hlo.register(triangular_solve, _lower_triangular_solve)
_hlo.register(lu, _lower_lu)


# ---------------------------------------------------------------------------------------
# Batching

for _prim in (cholesky, lu):
    _vmap.register(_prim, batch_matrix_function(_prim))
_vmap.register(triangular_solve, batch_solve(triangular_solve))
