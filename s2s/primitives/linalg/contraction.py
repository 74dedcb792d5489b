"""`dot_general`, XLA's general contraction, with all its rules.

`dot_general` is a batched product of two arrays that sums over paired `contract`
dimensions and keeps paired `batch` dimensions. Every NumPy product (`@`, dot, tensordot,
einsum, inner, outer) stages to it, followed where needed by a transpose, because its
output layout is fixed: batch dims, then lhs free dims, then rhs free dims, each group in
operand order. The emitter turns it back into the NumPy spelling that yields exactly that
layout: `a @ b`, `np.dot`, `np.outer`, `np.tensordot`, `x[..., None] * y[..., None, :]` for
stacked outer products, and `np.einsum` only when nothing plainer fits.

Public helpers: `matmul` (batched `a @ b` as one dot_general, which the other modules'
derivatives are written with), `free_dims`, `parse_dimension_numbers`, `einsum_spec` and
`dot_general_expr`.
"""
from __future__ import annotations

import math

import numpy as np

from s2s.core import JaxprEqn, ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import ATOM, Expr, binop, call, dtype_text, method, register, subscript
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, simplify as _simplify, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.primitives import ops
from s2s.primitives.linalg.matrices import add_terms, aval_of, tensor_type
from s2s.staging import Primitive


# ---------------------------------------------------------------------------------------
# Declaration and Python emission


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
# Derivatives. Rules read like the math: `x` is a primal, `x_dot` its tangent, `ct` an
# output cotangent. dot_general is bilinear: the jvp is the product rule; each transpose
# is another dot_general of the cotangent with the other operand, contracting what the
# product kept.


def _argsort(values) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(list(values), kind="stable"))


def matmul(a, b):
    """Batched `a @ b` for equal batch dims, as one dot_general (it emits as `a @ b`)."""
    nb = aval_of(a).ndim - 2
    batch = tuple(range(nb))
    return dot_general.bind(a, b, dimension_numbers=(((nb + 1,), (nb,)), (batch, batch)),
                            preferred_element_type=None)


def _dot_general_jvp(primals, tangents, *, dimension_numbers, preferred_element_type=None):
    (lhs, rhs), (lhs_dot, rhs_dot) = primals, tangents
    params = dict(dimension_numbers=dimension_numbers,
                  preferred_element_type=preferred_element_type)
    out = dot_general.bind(lhs, rhs, **params)
    out_dot = add_terms(None if is_zero(lhs_dot) else dot_general.bind(lhs_dot, rhs, **params),
                         None if is_zero(rhs_dot) else dot_general.bind(lhs, rhs_dot, **params))
    return out, out_dot


def _same_dtype(ct, other):
    """With preferred_element_type the cotangent's dtype can differ from the operands':
    the transposed product is then computed in the cotangent's (wider) dtype."""
    if aval_of(other).dtype != aval_of(ct).dtype:
        other = ops.convert(other, aval_of(ct).dtype)
    return other


def _as_operand(x_bar, aval):
    """A cotangent in its operand's dtype (computed in a wider one by _same_dtype)."""
    return ops.convert(x_bar, aval.dtype) if aval_of(x_bar).dtype != aval.dtype else x_bar


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
    lhs_aval, rhs_aval = aval_of(lhs), aval_of(rhs)
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
# StableHLO lowering: `stablehlo.dot_general`.


def _lower_dot_general(ctx, eqn, a, b, **_):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    if lhs.dtype != out.dtype:   # preferred_element_type: compute in the result's dtype
        lt, rt_ = tensor_type(lhs.shape, out.dtype), tensor_type(rhs.shape, out.dtype)
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


_hlo.register(dot_general, _lower_dot_general)


# ---------------------------------------------------------------------------------------
# Batching. dot_general takes a batch as it is: a batch of one operand alone is one more
# free dimension of it (a batch of inputs times a shared weight stays one matrix product,
# the weight read as it is), and a batch of both is one more batch dimension.


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


_vmap.register(dot_general, _dot_general_batch)
