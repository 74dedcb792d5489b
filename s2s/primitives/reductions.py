"""Reductions, arg-reductions, cumulative reductions and sort.

Every primitive here keeps its operand's dtype (`reduce_sum` of int32 is int32, unlike
`np.sum`): the NumPy surface (`s2s/numpy_api/reductions.py`) converts first, so each
widening NumPy performs is a visible `convert_element_type` in the jaxpr. Axis
parameters are static, normalized (non-negative, in range) and hashable:

  reduce_{sum,prod,max,min,and,or}[axes]   axes: tuple of distinct axes, () reduces nothing
  argmax / argmin[axis, index_dtype]       first occurrence wins ties; a NaN wins as in NumPy
  cum{sum,prod,max,min}[axis, reverse]     inclusive scans; reverse scans from the end
  sort[dimension, num_keys]                n operands of one shape, sorted together along
                                           `dimension` by the first num_keys of them
                                           (lexicographically, stable, NaNs last)

`sort` has multiple results; `argsort` is `sort(x, iota)` keeping the second result.
Like NumPy, max/min and argmax/argmin have no identity, so reducing a zero-length axis is
a shape error rather than a silent -inf.
"""
from __future__ import annotations

import functools

import numpy as np
from s2s_runtime.sorting import sort_multi

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, call, dtype_text, method, register, subscript
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, is_zero, tangent_aval
from s2s.primitives import ops
from s2s.staging import Primitive

# ---------------------------------------------------------------------------------------
# Parameter checks shared by the shape rules


def _check_axis(name: str, axis, ndim: int, what: str = "axis") -> None:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"{name}: {what} must be a static Python int, got {axis!r}")
    if not 0 <= axis < ndim:
        raise ShapeError(f"{name}: {what} {axis} is out of bounds for an array of "
                         f"dimension {ndim}")


def _check_axes(name: str, axes, ndim: int) -> None:
    if not isinstance(axes, tuple):
        raise ShapeError(f"{name}: axes must be a tuple of ints, got {axes!r}")
    for a in axes:
        _check_axis(name, a, ndim)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: repeated axis in {axes}")


def _check_dtype(name: str, x: ShapedArray, kind: str) -> None:
    if kind == "numeric" and dtypes.is_bool(x.dtype):
        raise ShapeError(f"{name} needs a numeric dtype, got {x.str_short()}; "
                         f"convert booleans to an integer dtype first")
    if kind == "bool" and not dtypes.is_bool(x.dtype):
        raise ShapeError(f"{name} needs a boolean operand, got {x.str_short()}")


def _reduced_shape(shape, axes) -> tuple[int, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------------------------------
# Emission helpers


@functools.lru_cache(maxsize=None)
def _numpy_accumulates_in(np_reduce: str, dtype: np.dtype) -> np.dtype:
    """The dtype `np.sum`/`np.prod`/`np.cumsum`/`np.cumprod` picks by default for `dtype`."""
    return np.asarray(getattr(np, np_reduce)(np.zeros((1,), dtype))).dtype


def _dtype_kwarg(np_reduce: str, dtype: np.dtype) -> dict:
    """`dtype=np.int32` where NumPy would otherwise widen (int32 sums to int64)."""
    if _numpy_accumulates_in(np_reduce, np.dtype(dtype)) != dtype:
        return {"dtype": Expr(dtype_text(dtype))}
    return {}


def _axis_kwarg(axes: tuple, ndim: int) -> dict:
    """`axis=1`, `axis=(0, 2)`, or nothing when every axis is reduced."""
    if len(axes) == ndim:   # distinct and in range, so every axis
        return {}
    if len(axes) == 1:
        return {"axis": axes[0]}
    return {"axis": tuple(sorted(axes))}


# ---------------------------------------------------------------------------------------
# reduce_*


def _reduce_abstract(name: str, kind: str, has_identity: bool):
    def abstract_eval(x: ShapedArray, *, axes):
        _check_dtype(name, x, kind)
        _check_axes(name, axes, x.ndim)
        if not has_identity and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} over a zero-length axis of {x.str_short()}: the "
                             f"reduction has no identity (NumPy raises here too)")
        return ShapedArray(_reduced_shape(x.shape, axes), x.dtype, x.weak_type)
    return abstract_eval


def _reduce_impl(np_fn, pass_dtype: bool):
    def impl(x, *, axes):
        x = np.asarray(x)
        kwargs = {"dtype": x.dtype} if pass_dtype else {}
        return np.asarray(np_fn(x, axis=axes, **kwargs), dtype=x.dtype)[()]
    return impl


def _reduce_rule(method_name: str, dtype_from: str | None):
    def rule(eqn, x: Expr) -> Expr:
        operand = eqn.invars[0].aval
        kwargs = _axis_kwarg(eqn.params["axes"], operand.ndim)
        if dtype_from is not None:
            kwargs.update(_dtype_kwarg(dtype_from, operand.dtype))
        if operand.ndim == 0:   # a literal or a Python scalar at run time: `3.0.sum()` fails
            return call(f"np.{method_name}", x, **kwargs)
        return method(x, method_name, **kwargs)
    return rule


def _reduction(name: str, np_fn, method_name: str, kind: str, has_identity: bool = True,
               pass_dtype: bool = False) -> Primitive:
    prim = Primitive(name, _reduce_abstract(name, kind, has_identity),
                     _reduce_impl(np_fn, pass_dtype))
    register(prim, _reduce_rule(method_name, method_name if pass_dtype else None))
    return prim


reduce_sum = _reduction("reduce_sum", np.sum, "sum", "numeric", pass_dtype=True)
reduce_prod = _reduction("reduce_prod", np.prod, "prod", "numeric", pass_dtype=True)
reduce_max = _reduction("reduce_max", np.max, "max", "any", has_identity=False)
reduce_min = _reduction("reduce_min", np.min, "min", "any", has_identity=False)
reduce_and = _reduction("reduce_and", np.all, "all", "bool")
reduce_or = _reduction("reduce_or", np.any, "any", "bool")

REDUCTIONS = {p.name: p for p in (reduce_sum, reduce_prod, reduce_max, reduce_min,
                                  reduce_and, reduce_or)}

# ---------------------------------------------------------------------------------------
# argmax, argmin


def _arg_abstract(name: str):
    def abstract_eval(x: ShapedArray, *, axis, index_dtype):
        _check_axis(name, axis, x.ndim)
        if not dtypes.is_integer(index_dtype):
            raise ShapeError(f"{name}: index_dtype must be an integer dtype, got "
                             f"{np.dtype(index_dtype).name}")
        if x.shape[axis] == 0:
            raise ShapeError(f"{name} of an empty sequence: axis {axis} of {x.str_short()} "
                             f"has length 0")
        return ShapedArray(_reduced_shape(x.shape, (axis,)), index_dtype)
    return abstract_eval


def _arg_impl(np_fn):
    def impl(x, *, axis, index_dtype):
        return np.asarray(np_fn(np.asarray(x), axis=axis)).astype(index_dtype)[()]
    return impl


def _arg_rule(np_name: str):
    def rule(eqn, x: Expr) -> Expr:
        axis, index_dtype = eqn.params["axis"], np.dtype(eqn.params["index_dtype"])
        ndim = eqn.invars[0].aval.ndim
        expr = call(np_name, x) if ndim == 1 else call(np_name, x, axis=axis)
        if index_dtype != np.dtype(np.intp):
            expr = method(expr, "astype", Expr(dtype_text(index_dtype)))
        return expr
    return rule


argmax = Primitive("argmax", _arg_abstract("argmax"), _arg_impl(np.argmax))
argmin = Primitive("argmin", _arg_abstract("argmin"), _arg_impl(np.argmin))
register(argmax, _arg_rule("np.argmax"))
register(argmin, _arg_rule("np.argmin"))

# ---------------------------------------------------------------------------------------
# Cumulative reductions


def _cum_abstract(name: str, kind: str):
    def abstract_eval(x: ShapedArray, *, axis, reverse):
        _check_dtype(name, x, kind)
        _check_axis(name, axis, x.ndim)
        if not isinstance(reverse, bool):
            raise ShapeError(f"{name}: reverse must be a bool, got {reverse!r}")
        return x
    return abstract_eval


def _cum_impl(scan):
    def impl(x, *, axis, reverse):
        x = np.asarray(x)
        if reverse:
            return np.flip(scan(np.flip(x, axis), axis), axis).astype(x.dtype)
        return np.asarray(scan(x, axis), dtype=x.dtype)
    return impl


def _flip(x: Expr, axis: int, ndim: int) -> Expr:
    return subscript(x, "::-1") if ndim == 1 else call("np.flip", x, axis=axis)


def _cum_rule(fn: str, dtype_from: str | None, default_axis: int | None):
    """`default_axis`: the axis `fn` scans when none is given (None: it flattens)."""
    def rule(eqn, x: Expr) -> Expr:
        axis, reverse = eqn.params["axis"], eqn.params["reverse"]
        operand = eqn.invars[0].aval
        kwargs = {} if (operand.ndim == 1 or axis == default_axis) else {"axis": axis}
        if dtype_from is not None:
            kwargs.update(_dtype_kwarg(dtype_from, operand.dtype))
        if not reverse:
            return call(fn, x, **kwargs)
        return _flip(call(fn, _flip(x, axis, operand.ndim), **kwargs), axis, operand.ndim)
    return rule


def _cumulative(name: str, scan, kind: str, fn: str, dtype_from, default_axis) -> Primitive:
    prim = Primitive(name, _cum_abstract(name, kind), _cum_impl(scan))
    register(prim, _cum_rule(fn, dtype_from, default_axis))
    return prim


cumsum = _cumulative("cumsum", lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype), "numeric",
                     "np.cumsum", "cumsum", None)
cumprod = _cumulative("cumprod", lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype), "numeric",
                      "np.cumprod", "cumprod", None)
cummax = _cumulative("cummax", lambda x, a: np.maximum.accumulate(x, axis=a), "any",
                     "np.maximum.accumulate", None, 0)
cummin = _cumulative("cummin", lambda x, a: np.minimum.accumulate(x, axis=a), "any",
                     "np.minimum.accumulate", None, 0)

CUMULATIVE = {p.name: p for p in (cumsum, cumprod, cummax, cummin)}

# ---------------------------------------------------------------------------------------
# sort


def _sort_abstract(*operands: ShapedArray, dimension, num_keys):
    if not operands:
        raise ShapeError("sort needs at least one operand")
    shape = operands[0].shape
    for op in operands[1:]:
        if op.shape != shape:
            raise ShapeError("sort needs operands of one shape, got "
                             + ", ".join(o.str_short() for o in operands))
    _check_axis("sort", dimension, len(shape), "dimension")
    if not isinstance(num_keys, int) or not 1 <= num_keys <= len(operands):
        raise ShapeError(f"sort: num_keys must be between 1 and {len(operands)} "
                         f"(the number of operands), got {num_keys!r}")
    return list(operands)


def _sort_impl(*operands, dimension, num_keys):
    return list(sort_multi(*operands, axis=dimension, num_keys=num_keys))


def _emit_sort(eqn, *operands: Expr) -> Expr:
    """`np.sort(x)` for one operand, else `rt.sort_multi(...)`, a tuple the emitter unpacks.

    The emitter writes `a, b = <expr>` for several results and `a = <expr>` for a single
    one, so the one-operand case is the sorted array itself, not a 1-tuple.
    """
    dimension, num_keys = eqn.params["dimension"], eqn.params["num_keys"]
    ndim = eqn.invars[0].aval.ndim
    kwargs = {} if dimension == ndim - 1 else {"axis": dimension}
    if len(operands) == 1:
        return call("np.sort", operands[0], **kwargs)
    if num_keys != 1:
        kwargs["num_keys"] = num_keys
    return call("rt.sort_multi", *operands, **kwargs)


sort = Primitive("sort", _sort_abstract, _sort_impl, multiple_results=True)
register(sort, _emit_sort)

# ---------------------------------------------------------------------------------------
# Derivatives. `x` is the operand, `y` the result, `t` the operand's tangent. Sums and
# scans of sums are linear; the others are written so that their tangents stay linear in
# `t` (a mask, a weight or a permutation computed from the primals, then a sum or a
# gather of `t`) and so that they are right where a naive formula divides by zero.

def _kept(ndim: int, axes) -> tuple[int, ...]:
    return tuple(d for d in range(ndim) if d not in axes)


def _broadcast_back(y, shape, axes):
    """`y`, reduced over `axes`, broadcast back to the operand's `shape`."""
    return ops.broadcast_in_dim(y, shape, _kept(len(shape), axes))


def _shift(x, axis: int, reverse: bool, fill):
    """`x` moved one step along the scan direction, `fill` entering at the start: the
    value just before each position (`out[i] = x[i - 1]`, or `x[i + 1]` when reversed)."""
    config = [(0, 0, 0)] * x.ndim
    config[axis] = (-1, 1, 0) if reverse else (1, -1, 0)
    return ops.pad(x, ops.scalar(fill, x.dtype), config)


def _take_along(t, index, axis: int):
    """`np.take_along_axis(t, index, axis)` for an in-range `index` of `t`'s shape."""
    shape = tuple(t.shape)
    indices = [index if d == axis else ops.iota(shape, d) for d in range(len(shape))]
    return ops.gather(t, *indices, axes=range(len(shape)))


def _differentiable(value) -> bool:
    return dtypes.is_differentiable(value.dtype)


for _prim in (reduce_and, reduce_or, argmax, argmin):   # boolean and index results
    _jvp.defzero(_prim)


def _one_operand_jvp(prim, tangent_of):
    """The jvp of a reduction or scan of one operand: `tangent_of(x, y, t, **params)` is the
    output's tangent; a result that is not differentiable (integers, booleans) has a zero one."""
    def rule(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        y = prim.bind(x, **params)
        if not _differentiable(y):
            return y, Zero(tangent_aval(y.aval))
        return y, tangent_of(x, y, t, **params)
    return rule


def _extremum_tangent(x, y, t, *, axes):
    """max/min: the tangent at the extremum; ties share it evenly, as in JAX:
    `sum(t * at_extremum) / count(at_extremum)`.

    A slice whose extremum is NaN (NumPy's max propagates it) has no element equal to it;
    there `at_extremum` is NaN, so the derivative is NaN like the value, on every backend.
    Left to 0 / 0, it would not be: the transpose, `ct / count * at_extremum`, is inf * 0 in
    NumPy but 0 on XLA, which rewrites a product with a converted mask into a select."""
    if not axes:
        return t
    def against_x(v):   # with the reduced axes as 1s, v broadcasts against x (a scalar as it is)
        return ops.expand_dims(v, axes) if v.shape else v
    at_extremum = ops.select(against_x(ops.ne(y, y)), ops.scalar(np.nan, t.dtype),
                             ops.convert(ops.eq(x, against_x(y)), t.dtype))
    count = reduce_sum.bind(at_extremum, axes=axes)
    return reduce_sum.bind(t * at_extremum, axes=axes) / count


def _exclusive_products(x, axis: int):
    """For each position, the product of the other elements of its slice along `axis`:
    (product of those before) * (product of those after). No division, so it is right
    where the slice has zeros."""
    before = _shift(cumprod.bind(x, axis=axis, reverse=False), axis, False, 1)
    after = _shift(cumprod.bind(x, axis=axis, reverse=True), axis, True, 1)
    return before * after


def _product_of_others(x, axes):
    """The product of the other elements reduced with each one (its partial derivative of
    `reduce_prod`). Several axes are first merged into one, last axis."""
    if len(axes) == 1:
        return _exclusive_products(x, axes[0])
    shape = tuple(x.shape)
    kept = _kept(len(shape), axes)
    permutation = kept + tuple(axes)
    moved = ops.transpose(x, permutation)
    moved_shape = tuple(shape[d] for d in permutation)
    merged_shape = moved_shape[:len(kept)] + (int(np.prod(moved_shape[len(kept):])),)
    merged = ops.reshape(moved, merged_shape)
    others = ops.reshape(_exclusive_products(merged, len(kept)), moved_shape)
    return ops.transpose(others, np.argsort(permutation))


def _reduce_prod_tangent(x, y, t, *, axes):
    if not axes:
        return t
    return reduce_sum.bind(t * _product_of_others(x, axes), axes=axes)


def _cumprod_tangent(x, y, t, *, axis, reverse):
    """d y_i = sum_{j <= i} t_j * prod_{k <= i, k != j} x_k, in three regimes along the scan:

      before the first zero   every factor is nonzero: y_i * sum_{j <= i} t_j / x_j
      up to the second zero   only the zero's own term survives: t_z * (y_i with x_z := 1)
      after the second zero   every term has a zero factor: 0
    """
    def scan_sum(v):
        return cumsum.bind(v, axis=axis, reverse=reverse)

    index = dtypes.canonicalize_dtype(np.intp)
    is_zero_ = ops.eq(x, ops.scalar(0, x.dtype))
    zeros_so_far = scan_sum(ops.convert(is_zero_, index))
    first_zero = is_zero_ & (zeros_so_far == 1)
    zero = ops.scalar(0, y.dtype)
    before = ops.select(zeros_so_far == 0, y, zero)
    safe_x = ops.select(is_zero_, ops.scalar(1, x.dtype), x)
    without_first_zero = cumprod.bind(ops.select(first_zero, ops.scalar(1, x.dtype), x),
                                      axis=axis, reverse=reverse)
    after_one = ops.select(zeros_so_far == 1, without_first_zero, zero)
    t_at_first_zero = ops.select(first_zero, t, zero)
    return before * scan_sum(t / safe_x) + after_one * scan_sum(t_at_first_zero)


def _running_extremum_tangent(x, y, t, *, axis, reverse):
    """cummax/cummin: the tangent of the element the running extremum came from (with
    ties, the first one reached by the scan), gathered with `take_along_axis`."""
    n = x.shape[axis]
    iota = ops.iota(x.shape, axis)
    index = iota.dtype
    first = ops.eq(iota, ops.scalar(n - 1 if reverse else 0, index))
    # A new extremum starts where the running value changes (or at the first element).
    starts = first | ops.ne(y, _shift(y, axis, reverse, 0))
    # Its position, carried along the scan: the latest start reached so far (the
    # largest index going forward, the smallest going backward).
    marked = ops.select(starts, iota, ops.scalar(n - 1 if reverse else 0, index))
    source = (cummin if reverse else cummax).bind(marked, axis=axis, reverse=reverse)
    return _take_along(t, source, axis)


def _sort_jvp(primals, tangents, *, dimension, num_keys):
    """Every operand is permuted alike: sort an iota along with them to get the
    permutation, and gather each tangent with it."""
    shape = primals[0].shape
    *outs, permutation = sort.bind(*primals, ops.iota(shape, dimension), dimension=dimension,
                                   num_keys=num_keys)
    out_tangents = [Zero(tangent_aval(y.aval)) if is_zero(t) or not _differentiable(y)
                    else _take_along(t, permutation, dimension)
                    for y, t in zip(outs, tangents)]
    return outs, out_tangents


for _prim, _tangent_of in [
        (reduce_sum, lambda x, y, t, *, axes: reduce_sum.bind(t, axes=axes)),
        (reduce_max, _extremum_tangent), (reduce_min, _extremum_tangent),
        (reduce_prod, _reduce_prod_tangent),
        (cumsum, lambda x, y, t, *, axis, reverse: cumsum.bind(t, axis=axis, reverse=reverse)),
        (cumprod, _cumprod_tangent),
        (cummax, _running_extremum_tangent), (cummin, _running_extremum_tangent)]:
    _jvp.register(_prim, _one_operand_jvp(_prim, _tangent_of))
_jvp.register(sort, _sort_jvp)

# ---------------------------------------------------------------------------------------
# Transposes of the linear ones: a sum spreads its cotangent back over what it summed; a
# running sum's cotangent is the running sum of the cotangents from the other end.


def _reduce_sum_transpose(ct, x, *, axes):
    if is_zero(ct):
        return [Zero(x.aval.strip_weak_type())]
    return [_broadcast_back(ct, x.aval.shape, axes)]


def _cumsum_transpose(ct, x, *, axis, reverse):
    if is_zero(ct):
        return [Zero(x.aval.strip_weak_type())]
    return [cumsum.bind(ct, axis=axis, reverse=not reverse)]


_transpose.register(reduce_sum, _reduce_sum_transpose)
_transpose.register(cumsum, _cumsum_transpose)

# ---------------------------------------------------------------------------------------
# StableHLO lowering. Reductions are `stablehlo.reduce` from the operation's identity;
# argmax/argmin a variadic reduce of (value, iota) whose reducer keeps NumPy's answer
# whatever order XLA combines in (the first NaN, else the first extremum); scans are
# `stablehlo.reduce_window` with a window as long as the axis, padded in front; sort is
# `stablehlo.sort` with a lexicographic comparator that orders like NumPy (NaNs last).



def _ttype(shape, dtype) -> str:
    return _hlo.tensor_type(ShapedArray(tuple(shape), dtype))


def _compare_kind(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return "FLOAT"
    if dtype.kind in "iu" or dtype == dtypes.bool_:
        return "UNSIGNED" if dtype.kind in "ub" else "SIGNED"
    raise _unsupported(dtype)


def _unsupported(dtype):
    return UnsupportedFunctionError(f"{np.dtype(dtype).name} reductions cannot be lowered to "
                                    f"StableHLO yet", "use backend='python' for this function")


def _compare(ctx, direction, a, b, dtype, kind=None):
    t = _ttype((), dtype)
    return ctx.op(f"stablehlo.compare {direction}, {a}, {b}, {kind or _compare_kind(dtype)} : "
                  f"({t}, {t}) -> tensor<i1>")


def _region_op(ctx, name, operands, in_types, out_types, arg_types, body, attrs, hint=None):
    """A generic-form op with one region: `body(*block_args)` stages the region's ops
    with `ctx` and returns the (name, type) pairs it yields."""
    args = [ctx.fresh("r") for _ in arg_types]
    saved, ctx.lines = ctx.lines, []
    returned = body(*args)
    inner, ctx.lines = ctx.lines, saved
    result = ctx.fresh(hint)
    n = len(out_types)
    head = f"{result}:{n}" if n > 1 else result
    ctx.lines.append(f'{head} = "{name}"({", ".join(operands)}) <{{{attrs}}}> ({{')
    ctx.lines.append(f"^bb0({', '.join(f'{a}: {t}' for a, t in zip(args, arg_types))}):")
    ctx.lines.extend(f"  {line}" for line in inner)
    ctx.lines.append(f"  stablehlo.return {', '.join(r for r, _ in returned)} : "
                     f"{', '.join(t for _, t in returned)}")
    ctx.lines.append(f"}}) : ({', '.join(in_types)}) -> ({', '.join(out_types)}){ctx.location}")
    return [f"{result}#{i}" for i in range(n)] if n > 1 else [result]


def _array(values) -> str:
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>" if len(values) else "array<i64>"


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if dtype == dtypes.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    dtype = np.dtype(dtype)
    if dtype == dtypes.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _combiner(kind: str, dtype) -> tuple[str, object]:
    """(the StableHLO op, its identity) of a reduction kind for `dtype`."""
    is_bool = np.dtype(dtype) == dtypes.bool_
    if kind == "sum":
        return ("stablehlo.or" if is_bool else "stablehlo.add"), 0
    if kind == "prod":
        return ("stablehlo.and" if is_bool else "stablehlo.multiply"), 1
    if kind == "max":
        return ("stablehlo.or" if is_bool else "stablehlo.maximum"), _lowest(dtype)
    if kind == "min":
        return ("stablehlo.and" if is_bool else "stablehlo.minimum"), _highest(dtype)
    if kind == "and":
        return "stablehlo.and", True
    return "stablehlo.or", False


# Reductions of complex numbers XLA has: sums and products (NumPy orders complex numbers
# lexicographically for max/min; StableHLO's compare does not).
_COMPLEX_KINDS = ("sum", "prod")


def _reduce_text(ctx, x, aval, axes, kind, hint=None):
    """`x` (of `aval`) reduced over `axes` with the combiner of `kind`."""
    if np.dtype(aval.dtype).kind == "c" and kind not in _COMPLEX_KINDS:
        raise _unsupported(aval.dtype)
    op, identity = _combiner(kind, aval.dtype)
    init = ctx.constant(identity, aval.dtype)
    out = _ttype(_reduced_shape(aval.shape, axes), aval.dtype)
    dims = ", ".join(str(a) for a in sorted(axes))
    return ctx.op(f"stablehlo.reduce({x} init: {init}) applies {op} across dimensions = [{dims}] : "
                  f"({_hlo.tensor_type(aval)}, {_ttype((), aval.dtype)}) -> {out}", hint)


def _lower_reduce(kind: str):
    def rule(ctx, eqn, x, **_):
        axes = eqn.params["axes"]
        if not axes:
            return [x]
        return [_reduce_text(ctx, x, eqn.invars[0].aval, axes, kind, _hlo.hint(eqn))]
    return rule


def _lower_arg_reduce(ctx, x, aval, axis: int, index_dtype, maximum: bool, hint=None) -> str:
    """The index of the first maximum (or minimum) of `x` along `axis`; a NaN counts as
    beyond every number, and the first NaN wins, as in NumPy."""
    dtype = np.dtype(aval.dtype)
    index_dtype = np.dtype(index_dtype)
    if dtype.kind == "c":
        raise _unsupported(dtype)
    iota = ctx.op(f"stablehlo.iota dim = {axis} : {_ttype(aval.shape, index_dtype)}")
    init = ctx.constant(_lowest(dtype) if maximum else _highest(dtype), dtype)
    zero = ctx.constant(0, index_dtype)
    vt, it = _ttype((), dtype), _ttype((), index_dtype)
    floating = dtype.kind == "f"

    def body(a, ia, b, ib):
        better = _compare(ctx, "GT" if maximum else "LT", a, b, dtype)
        tie = _compare(ctx, "EQ", a, b, dtype)
        if floating:
            a_nan = _compare(ctx, "NE", a, a, dtype)
            b_nan = _compare(ctx, "NE", b, b, dtype)
            b_num = ctx.op(f"stablehlo.not {b_nan} : tensor<i1>")
            a_only = ctx.op(f"stablehlo.and {a_nan}, {b_num} : tensor<i1>")
            better = ctx.op(f"stablehlo.or {better}, {a_only} : tensor<i1>")
            both = ctx.op(f"stablehlo.and {a_nan}, {b_nan} : tensor<i1>")
            tie = ctx.op(f"stablehlo.or {tie}, {both} : tensor<i1>")
        first = _compare(ctx, "LT", ia, ib, index_dtype)
        tie_first = ctx.op(f"stablehlo.and {tie}, {first} : tensor<i1>")
        take = ctx.op(f"stablehlo.or {better}, {tie_first} : tensor<i1>")
        value = ctx.op(f"stablehlo.select {take}, {a}, {b} : tensor<i1>, {vt}")
        index = ctx.op(f"stablehlo.select {take}, {ia}, {ib} : tensor<i1>, {it}")
        return [(value, vt), (index, it)]

    out_shape = _reduced_shape(aval.shape, (axis,))
    _, index = _region_op(
        ctx, "stablehlo.reduce", [x, iota, init, zero],
        [_hlo.tensor_type(aval), _ttype(aval.shape, index_dtype), vt, it],
        [_ttype(out_shape, dtype), _ttype(out_shape, index_dtype)],
        [vt, it, vt, it], body, f"dimensions = {_array([axis])}", hint)
    return index


def _lower_arg(maximum: bool):
    def rule(ctx, eqn, x, **_):
        return [_lower_arg_reduce(ctx, x, eqn.invars[0].aval, eqn.params["axis"],
                                 eqn.params["index_dtype"], maximum, _hlo.hint(eqn))]
    return rule


def _lower_cumulative(kind: str):
    def rule(ctx, eqn, x, **_):
        axis, reverse = eqn.params["axis"], eqn.params["reverse"]
        aval = eqn.invars[0].aval
        if np.dtype(aval.dtype).kind == "c" and kind not in _COMPLEX_KINDS:
            raise _unsupported(aval.dtype)
        t = _hlo.tensor_type(aval)
        n = aval.shape[axis]
        if n == 0:
            return [x]
        if reverse:
            x = ctx.op(f"stablehlo.reverse {x}, dims = [{axis}] : {t}")
        op, identity = _combiner(kind, aval.dtype)
        init = ctx.constant(identity, aval.dtype)
        st = _ttype((), aval.dtype)
        ndim = aval.ndim
        window = [n if d == axis else 1 for d in range(ndim)]
        padding = ", ".join(f"[{n - 1 if d == axis else 0}, 0]" for d in range(ndim))
        attrs = (f"padding = dense<[{padding}]> : tensor<{ndim}x2xi64>, "
                 f"window_dimensions = {_array(window)}, window_strides = {_array([1] * ndim)}")

        def body(a, b):
            return [(ctx.op(f"{op} {a}, {b} : {st}"), st)]

        (out,) = _region_op(ctx, "stablehlo.reduce_window", [x, init], [t, st], [t],
                            [st, st], body, attrs, None if reverse else _hlo.hint(eqn))
        if reverse:
            out = ctx.op(f"stablehlo.reverse {out}, dims = [{axis}] : {t}", _hlo.hint(eqn))
        return [out]
    return rule


def _sort_key(ctx, v, dtype):
    """A float key with -0.0 made 0.0 and every NaN the positive quiet NaN, so that the
    total order sorts like NumPy (-0.0 ties 0.0, NaNs last)."""
    t = _ttype((), dtype)
    zero = ctx.constant(0, dtype)
    is_zero_ = _compare(ctx, "EQ", v, zero, dtype)
    v = ctx.op(f"stablehlo.select {is_zero_}, {zero}, {v} : tensor<i1>, {t}")
    is_nan = _compare(ctx, "NE", v, v, dtype)
    nan = ctx.constant(np.nan, dtype)
    return ctx.op(f"stablehlo.select {is_nan}, {nan}, {v} : tensor<i1>, {t}")


def _lower_sort(ctx, eqn, *operands, **_):
    dimension, num_keys = eqn.params["dimension"], eqn.params["num_keys"]
    avals = [v.aval for v in eqn.invars]
    for aval in avals[:num_keys]:
        _compare_kind(aval.dtype)   # raises for complex keys
    scalar_types = [_ttype((), a.dtype) for a in avals]
    arg_types = [t for t in scalar_types for _ in (0, 1)]

    def body(*args):
        less = None
        for k in reversed(range(num_keys)):
            dtype = np.dtype(avals[k].dtype)
            a, b = args[2 * k], args[2 * k + 1]
            kind = _compare_kind(dtype)
            if dtype.kind == "f":
                a, b, kind = _sort_key(ctx, a, dtype), _sort_key(ctx, b, dtype), "TOTALORDER"
            lt = _compare(ctx, "LT", a, b, dtype, kind)
            if less is None:
                less = lt
            else:
                eq = _compare(ctx, "EQ", a, b, dtype, kind)
                rest = ctx.op(f"stablehlo.and {eq}, {less} : tensor<i1>")
                less = ctx.op(f"stablehlo.or {lt}, {rest} : tensor<i1>")
        return [(less, "tensor<i1>")]

    types = [_hlo.tensor_type(a) for a in avals]
    return _region_op(ctx, "stablehlo.sort", list(operands), types, types, arg_types, body,
                      f"dimension = {dimension} : i64, is_stable = true", _hlo.hint(eqn))


for _prim, _kind in [(reduce_sum, "sum"), (reduce_prod, "prod"), (reduce_max, "max"),
                     (reduce_min, "min"), (reduce_and, "and"), (reduce_or, "or")]:
    _hlo.register(_prim, _lower_reduce(_kind))
for _prim, _kind in [(cumsum, "sum"), (cumprod, "prod"), (cummax, "max"), (cummin, "min")]:
    _hlo.register(_prim, _lower_cumulative(_kind))
_hlo.register(argmax, _lower_arg(True))
_hlo.register(argmin, _lower_arg(False))
_hlo.register(sort, _lower_sort)

# ---------------------------------------------------------------------------------------
# Batching: each example is reduced, scanned or sorted along its own axes, so the batch
# stays where it is and only the axis parameters shift past it. A reduction removes its
# axes, so the result's batch sits that many places earlier.


def _batch_reduce(prim):
    def rule(mapped, args, dims, /, *, axes):
        (x,), (dim,) = args, dims
        out = prim.bind(x, axes=tuple(_vmap.batched_axis(a, dim) for a in axes))
        return out, dim - sum(a < dim for a in axes)
    return rule


def _batch_arg_reduce(prim):
    def rule(mapped, args, dims, /, *, axis, index_dtype):
        (x,), (dim,) = args, dims
        out = prim.bind(x, axis=_vmap.batched_axis(axis, dim), index_dtype=index_dtype)
        return out, dim - (axis < dim)
    return rule


def _batch_cumulative(prim):
    def rule(mapped, args, dims, /, *, axis, reverse):
        (x,), (dim,) = args, dims
        return prim.bind(x, axis=_vmap.batched_axis(axis, dim), reverse=reverse), dim
    return rule


def _batch_sort(mapped, operands, dims, /, *, dimension, num_keys):
    """Operands sorted together must line up, so every one is batched where the first
    batched one is; an unbatched one is copied per example, since each example permutes
    it in its own order."""
    dim = next(d for d in dims if d is not None)
    aligned = [_vmap.to_dim(x, d, dim, mapped.size) for x, d in zip(operands, dims)]
    outs = sort.bind(*aligned, dimension=_vmap.batched_axis(dimension, dim), num_keys=num_keys)
    return outs, [dim] * len(outs)


for _prim in REDUCTIONS.values():
    _vmap.register(_prim, _batch_reduce(_prim))
for _prim in (argmax, argmin):
    _vmap.register(_prim, _batch_arg_reduce(_prim))
for _prim in CUMULATIVE.values():
    _vmap.register(_prim, _batch_cumulative(_prim))
_vmap.register(sort, _batch_sort)
