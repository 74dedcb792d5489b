"""What the modules of the linear-algebra family share about batched matrices (arrays of
matrices in their last two axes). No primitive is declared here.

- Staging: `aval_of` (the type of what a rule stages on), `add_terms` (a sum that skips
  symbolic zeros), `mT` (each matrix transposed).
- Checking: `check_matrices` (what every factorization, solve and decomposition accepts:
  the dtypes LAPACK has, `LAPACK_DTYPES`) and `LAPACK_PREFIXES` (the letter LAPACK's
  routine names start with for each of them).
- StableHLO: `tensor_type`, `triangle_mask`, `layout_attribute` (custom calls' layouts)
  and `lowered_as` (the lowering of a primitive StableHLO has no op for, through a
  decomposition into primitives that lower).
- Batching: the primitives are batched over leading dimensions already, so a batch axis
  among them stays where it is, and one among the matrix axes moves just before them
  (`batch_matrix_function`). A batch of right-hand sides against a shared matrix is
  folded into b's columns (or rows, for a right-side solve), so the matrix is factored
  once, not once per example (`batch_solve`).
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray, aval_of_value
from s2s.emit import stablehlo as _hlo
from s2s.errors import ShapeError
from s2s.passes import vmap as _vmap
from s2s.passes.tangents import is_zero
from s2s.passes.transpose import LinearInput
from s2s.primitives import ops
from s2s.staging import JaxprBuilder, Tracer


# ---------------------------------------------------------------------------------------
# Staging and checking


def aval_of(x) -> ShapedArray:
    """The abstract value of a staged value, a constant or a LinearInput marker."""
    return x.aval if isinstance(x, (LinearInput, Tracer, Literal)) else aval_of_value(x)


def add_terms(*terms):
    """The sum of the terms that are not symbolic zeros (None if all are)."""
    total = None
    for term in terms:
        if term is None or is_zero(term):
            continue
        total = term if total is None else total + term
    return total


def mT(x):
    """The transpose of each matrix of a batch (the last two axes swapped)."""
    n = aval_of(x).ndim
    return ops.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


LAPACK_DTYPES = (dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)
# The letter LAPACK's routine names start with for each dtype (lapack_zgetrf_ffi ...).
LAPACK_PREFIXES = {np.dtype(dtypes.float32): "s", np.dtype(dtypes.float64): "d",
                   np.dtype(dtypes.complex64): "c", np.dtype(dtypes.complex128): "z"}


def check_matrices(name: str, aval, square: bool = True):
    """Raises ShapeError, naming the primitive, unless `aval` is an array of (square)
    matrices of a dtype LAPACK has."""
    if aval.ndim < 2:
        raise ShapeError(f"{name} needs an array of matrices (at least 2 dimensions), got "
                         f"{aval.str_short()}")
    if square and aval.shape[-1] != aval.shape[-2]:
        raise ShapeError(f"{name} needs square matrices in the last two dimensions, got "
                         f"{aval.str_short()}")
    if aval.dtype not in LAPACK_DTYPES:
        raise ShapeError(f"{name} needs float32, float64, complex64 or complex128, got "
                         f"{aval.str_short()}")


# ---------------------------------------------------------------------------------------
# StableHLO


def tensor_type(shape, dtype) -> str:
    """`tensor<2x3xf32>`: the StableHLO type of an array of `shape` and `dtype`."""
    return _hlo.tensor_type(ShapedArray(tuple(shape), dtype))


def triangle_mask(ctx, shape, lower: bool, strict: bool = False) -> str:
    """A boolean tensor of `shape` (matrices last) true on the lower (or upper) triangle."""
    nd = len(shape)
    it = tensor_type(shape, dtypes.int32)
    rows = ctx.op(f"stablehlo.iota dim = {nd - 2} : {it}")
    cols = ctx.op(f"stablehlo.iota dim = {nd - 1} : {it}")
    direction = ("GT" if strict else "GE") if lower else ("LT" if strict else "LE")
    return ctx.op(f"stablehlo.compare {direction}, {rows}, {cols}, SIGNED : ({it}, {it}) -> "
                  f"{tensor_type(shape, dtypes.bool_)}")


def layout_attribute(minor_to_major) -> str:
    """A custom call's operand or result layout, its dimensions listed minor to major."""
    dims = ", ".join(str(d) for d in minor_to_major)
    return f"dense<[{dims}]> : tensor<{len(minor_to_major)}xindex>" if minor_to_major else \
        "dense<> : tensor<0xindex>"


def lowered_as(decomposition):
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


# ---------------------------------------------------------------------------------------
# Batching


def _matrix_batch_dim(dims, rank: int) -> int:
    """Where a batch of arrays of matrices (per-example `rank`) is handed to a primitive
    batched over leading dims: the first batched operand's position if it is a leading
    one, else the last leading position (just before the matrix axes)."""
    leading = [d for d in dims if d is not None and d <= rank - 2]
    return leading[0] if leading else rank - 2


def batch_matrix_function(prim):
    """cholesky, lu, det, slogdet, the decompositions: one operand, every result batched
    over its leading dims."""
    def rule(mapped, args, dims, /, **params):
        (a,), (dim,) = args, dims
        target = _matrix_batch_dim(dims, _vmap.ndim(a) - 1)
        out = prim.bind(_vmap.move_axis(a, dim, target), **params)
        return out, [target] * len(out) if prim.multiple_results else target
    return rule


def batch_solve(prim):
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
