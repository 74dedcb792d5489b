"""Elementwise primitives: unary math, binary arithmetic, comparisons, logic, select, clamp,
dtype conversion and iota.

Module attributes are named after the primitives, so some shadow builtins (`max`, `abs`,
`round`, `pow`): code here that needs the builtin spells it `builtins.max`.

n-ary elementwise primitives take operands of one dtype whose shapes broadcast by NumPy's
rules; the result has the broadcast shape. (Front-end code converts dtypes explicitly, so
every promotion is visible in the jaxpr.) The result is weak-typed only when every
operand is.
"""
from __future__ import annotations

import builtins
import re

import numpy as np
import s2s_runtime as rt

from s2s import dtypes
from s2s.core import JaxprEqn, Literal, ShapedArray, Var
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, binop, binop_rule, call, dtype_text, method, register, unop
from s2s.errors import ShapeError
from s2s.passes import (jvp as _jvp, partial_eval as _pe, simplify as _simplify, transpose as _transpose,
                        vmap as _vmap)
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval, unbroadcast
from s2s.passes.transpose import is_linear
from s2s.primitives import ops
from s2s.staging import Primitive, Tracer


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """NumPy's broadcasting of shapes, raising ShapeError with NumPy's wording."""
    shaped = [s for s in shapes if len(s)]   # a 0-d operand broadcasts to any shape
    if not shaped or all(s == shaped[0] for s in shaped):   # the common cases, at once
        return tuple(shaped[0]) if shaped else ()
    ndim = builtins.max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        size = 1
        for s in shapes:
            d = s[axis - ndim + len(s)] if axis - ndim + len(s) >= 0 else 1
            if d != 1:
                if size not in (1, d):
                    raise ShapeError(
                        "operands could not be broadcast together with shapes "
                        + " ".join(str(tuple(s)).replace(",)", ")") for s in shapes))
                size = d
        result.append(size)
    return tuple(result)


_KINDS = {
    "float": (dtypes.is_inexact, "a floating-point"),
    "real_float": (dtypes.is_float, "a real floating-point"),
    "numeric": (lambda d: not dtypes.is_bool(d), "a numeric"),
    "ordered": (lambda d: not (dtypes.is_bool(d) or dtypes.is_complex(d)), "a real numeric"),
    "integer": (lambda d: dtypes.is_integer(d) or dtypes.is_bool(d), "an integer or boolean"),
    "any": (lambda d: True, "any"),
}


_ACCEPTED: set = set()   # (kind, dtype) pairs that passed: checked once each


def _check_operands(name: str, avals, kind: str):
    first = avals[0].dtype
    for a in avals[1:]:
        if a.dtype != first:
            raise ShapeError(f"{name} needs operands of one dtype, got "
                             + ", ".join(x.str_short() for x in avals))
    if (kind, first) in _ACCEPTED:
        return
    accepts, what = _KINDS[kind]
    if accepts(first):
        _ACCEPTED.add((kind, first))
    else:
        raise ShapeError(f"{name} needs {what} dtype, got {avals[0].str_short()}",
                         _COMPLEX_HELP if dtypes.is_complex(first) else None)


# Why NumPy functions that order numbers or are real-only refuse complex operands here.
_COMPLEX_HELP = ("complex numbers have no order and no real-only functions here: apply it to "
                 "np.real(z), np.imag(z) or np.abs(z)")


def _broadcast_avals(avals) -> tuple[tuple[int, ...], bool]:
    """The shape and weak type of an elementwise result on operands `avals` (one or two
    operands, nearly every equation, without a loop)."""
    if len(avals) == 1:
        return avals[0].shape, avals[0].weak_type
    if len(avals) == 2:
        a, b = avals
        weak = a.weak_type and b.weak_type
        if a.shape == b.shape or not b.shape:
            return a.shape, weak
        if not a.shape:
            return b.shape, weak
        return broadcast_shapes(a.shape, b.shape), weak
    return broadcast_shapes(*[a.shape for a in avals]), all(a.weak_type for a in avals)


def _elementwise_abstract(name: str, kind: str, out_dtype=None):
    def abstract_eval(*avals, **params):
        _check_operands(name, avals, kind)
        shape, weak = _broadcast_avals(avals)
        if out_dtype is None:
            # An operand's aval is often the result's (`tanh(x)`, `x * 2.0`): avals are
            # immutable, so that one serves instead of an equal new one.
            for a in avals:
                if a.shape == shape and a.weak_type == weak:
                    return a
            return ShapedArray(shape, avals[0].dtype, weak)
        return ShapedArray(shape, out_dtype, weak)
    return abstract_eval


def _keep_dtype(np_fn):
    """NumPy impl that keeps the operand dtype (NumPy itself can upcast some scalar cases)."""
    def impl(*args, **params):
        out = np_fn(*args)
        return np.asarray(out, dtype=np.result_type(*args))[()]
    return impl


# ---------------------------------------------------------------------------------------
# Unary

UNARY: dict[str, Primitive] = {}


def _declare(name: str, kind: str, impl, emit_rule, out_dtype=None, bare_scalar_ok=False):
    """An elementwise primitive with its shape rule, impl and Python emission rule."""
    prim = Primitive(name, _elementwise_abstract(name, kind, out_dtype), impl)
    register(prim, emit_rule, bare_scalar_ok=bare_scalar_ok)
    return prim


def _unary(name: str, np_fn, emit: str, kind: str = "float"):
    """Declares `name` with impl `np_fn` (dtype kept) emitted as `emit(x)`."""
    prim = UNARY[name] = _declare(name, kind, _keep_dtype(np_fn), lambda eqn, x: call(emit, x))
    return prim


exp = _unary("exp", np.exp, "np.exp")
log = _unary("log", np.log, "np.log")
log1p = _unary("log1p", np.log1p, "np.log1p")
expm1 = _unary("expm1", np.expm1, "np.expm1")
sin = _unary("sin", np.sin, "np.sin")
cos = _unary("cos", np.cos, "np.cos")
tan = _unary("tan", np.tan, "np.tan")
asin = _unary("asin", np.arcsin, "np.arcsin")
acos = _unary("acos", np.arccos, "np.arccos")
atan = _unary("atan", np.arctan, "np.arctan")
sinh = _unary("sinh", np.sinh, "np.sinh")
cosh = _unary("cosh", np.cosh, "np.cosh")
tanh = _unary("tanh", np.tanh, "np.tanh")
asinh = _unary("asinh", np.arcsinh, "np.arcsinh")
acosh = _unary("acosh", np.arccosh, "np.arccosh")
atanh = _unary("atanh", np.arctanh, "np.arctanh")
sqrt = _unary("sqrt", np.sqrt, "np.sqrt")
cbrt = _unary("cbrt", np.cbrt, "np.cbrt", kind="real_float")
logistic = _unary("logistic", rt.logistic, "rt.logistic", kind="real_float")
erf = _unary("erf", rt.erf, "rt.erf")
lgamma = _unary("lgamma", rt.lgamma, "rt.lgamma", kind="real_float")
digamma = _unary("digamma", rt.digamma, "rt.digamma", kind="real_float")
floor = _unary("floor", np.floor, "np.floor", kind="real_float")
ceil = _unary("ceil", np.ceil, "np.ceil", kind="real_float")
round = _unary("round", np.round, "np.round", kind="real_float")   # half to even, as NumPy rounds


def _abs_abstract(x):
    """|x|; of a complex x the modulus, a real number (float64 for complex128)."""
    out = _elementwise_abstract("abs", "numeric")(x)
    return out.update(dtype=np.finfo(x.dtype).dtype) if dtypes.is_complex(x.dtype) else out


abs = UNARY["abs"] = Primitive("abs", _abs_abstract, np.abs)
register(abs, lambda eqn, x: call("np.abs", x))
sign = _unary("sign", np.sign, "np.sign", kind="numeric")
# polygamma(x; n): the n-th derivative of digamma (n >= 1), which digamma's derivative needs.
polygamma = Primitive("polygamma", _elementwise_abstract("polygamma", "real_float"),
                      lambda x, *, n: rt.polygamma(n, x))
register(polygamma, lambda eqn, x: call("rt.polygamma", Expr(str(eqn.params["n"])), x))
UNARY["polygamma"] = polygamma

is_finite = Primitive("is_finite", _elementwise_abstract("is_finite", "real_float", dtypes.bool_),
                      lambda x: np.isfinite(x))
register(is_finite, lambda eqn, x: call("np.isfinite", x))

rsqrt = Primitive("rsqrt", _elementwise_abstract("rsqrt", "float"), _keep_dtype(lambda x: 1 / np.sqrt(x)))
register(rsqrt, lambda eqn, x: binop("/", Expr("1"), call("np.sqrt", x)))

neg = Primitive("neg", _elementwise_abstract("neg", "numeric"), _keep_dtype(np.negative))
register(neg, lambda eqn, x: unop("-", x))

not_ = Primitive("not", _elementwise_abstract("not", "integer"), np.invert)
register(not_, lambda eqn, x: unop("~", x))


def _integer_pow_abstract(x, *, y: int):
    # NumPy's rule (the NumPy surface raises the same): 1 / x**k has no integer value.
    if y < 0 and not dtypes.is_inexact(x.dtype):
        raise ShapeError(f"integer_pow with a negative exponent ({y}) needs a floating-point "
                         f"dtype, got {x.str_short()}")
    return _elementwise_abstract("integer_pow", "numeric")(x)


def _integer_pow_impl(x, *, y: int):
    return np.asarray(x ** y if y >= 0 else 1 / x ** -y, dtype=x.dtype)[()]


integer_pow = Primitive("integer_pow", _integer_pow_abstract, _integer_pow_impl)
register(integer_pow, lambda eqn, x: binop("**", x, Expr(str(eqn.params["y"]))
                                           if eqn.params["y"] >= 0
                                           else unop("-", Expr(str(-eqn.params["y"])))),
         temp_name="pow")

# ---------------------------------------------------------------------------------------
# Binary arithmetic


def _binary(name: str, np_fn, emit, kind: str = "numeric", out_dtype=None):
    """`emit` is an operator ("+") or a function name ("np.maximum")."""
    impl = _keep_dtype(np_fn) if out_dtype is None else (lambda x, y: np_fn(x, y))
    if emit.startswith(("np.", "rt.")):
        def emit_rule(eqn, x, y):
            return call(emit, x, y)
    else:
        emit_rule = binop_rule(emit)
    return _declare(name, kind, impl, emit_rule, out_dtype, bare_scalar_ok=True)


add = _binary("add", np.add, "+")
sub = _binary("sub", np.subtract, "-")
mul = _binary("mul", np.multiply, "*")
max = _binary("max", np.maximum, "np.maximum", kind="ordered")
min = _binary("min", np.minimum, "np.minimum", kind="ordered")
atan2 = _binary("atan2", np.arctan2, "np.arctan2", kind="real_float")
rem = _binary("rem", np.fmod, "np.fmod", kind="ordered")      # sign of the dividend, like C and XLA
pow = Primitive("pow", _elementwise_abstract("pow", "float"), _keep_dtype(np.power))
# `**` of two Python floats is complex for a negative base; np.power gives NaN, like XLA.
register(pow, lambda eqn, x, y: binop("**", x, y) if eqn.outvars[0].aval.shape
         else call("np.power", x, y), bare_scalar_ok=True)


def _div_impl(x, y):
    if np.issubdtype(np.result_type(x, y), np.integer):
        return rt.trunc_divide(x, y)
    return np.asarray(np.true_divide(x, y), dtype=np.result_type(x, y))[()]


def _emit_div(eqn, x, y):
    if dtypes.is_integer(eqn.outvars[0].aval.dtype):
        return call("rt.trunc_divide", x, y)
    return binop("/", x, y)


# Floats divide; integers divide rounding toward zero (XLA's rule). NumPy's `//` floors:
# the NumPy surface builds floor division out of this and a correction.
div = Primitive("div", _elementwise_abstract("div", "numeric"), _div_impl)
register(div, _emit_div, bare_scalar_ok=True)

# ---------------------------------------------------------------------------------------
# Comparisons and logic

eq = _binary("eq", np.equal, "==", kind="any", out_dtype=dtypes.bool_)
# How `ops.eye` builds an identity (row index == column index, as int32 iotas), as written.
_IOTA_2D = re.compile(r"rt\.iota\(np\.int32, \((\d+), (\d+)\), ([01])\)")
_BOOLEAN_EYE = re.compile(r"np\.eye\((\d+(?:, \d+)?), dtype=np\.bool\)")


def _emit_eq(eqn, x, y):
    """`x == y`; the comparison of a row-index iota with a column-index iota is the
    identity matrix, and is written as one: `np.eye(3, dtype=np.bool)` (the textbook `I` in
    derivatives of linear algebra, not two iotas)."""
    rows, cols = _IOTA_2D.fullmatch(x.text), _IOTA_2D.fullmatch(y.text)
    if rows and cols and rows.group(1, 2) == cols.group(1, 2) and (rows.group(3), cols.group(3)) == ("0", "1"):
        n, m = rows.group(1, 2)
        return Expr(f"np.eye({n if n == m else f'{n}, {m}'}, dtype=np.bool)")
    return binop("==", x, y)


register(eq, _emit_eq, bare_scalar_ok=True)
ne = _binary("ne", np.not_equal, "!=", kind="any", out_dtype=dtypes.bool_)
lt = _binary("lt", np.less, "<", kind="ordered", out_dtype=dtypes.bool_)
le = _binary("le", np.less_equal, "<=", kind="ordered", out_dtype=dtypes.bool_)
gt = _binary("gt", np.greater, ">", kind="ordered", out_dtype=dtypes.bool_)
ge = _binary("ge", np.greater_equal, ">=", kind="ordered", out_dtype=dtypes.bool_)
and_ = _binary("and", np.bitwise_and, "&", kind="integer")
or_ = _binary("or", np.bitwise_or, "|", kind="integer")
xor = _binary("xor", np.bitwise_xor, "^", kind="integer")

# ---------------------------------------------------------------------------------------
# select, clamp


def _select_abstract(pred, on_true, on_false):
    if pred.dtype != dtypes.bool_:
        raise ShapeError(f"select needs a boolean predicate, got {pred.str_short()}")
    _check_operands("select", [on_true, on_false], "any")
    shape = broadcast_shapes(pred.shape, on_true.shape, on_false.shape)
    return ShapedArray(shape, on_true.dtype, on_true.weak_type and on_false.weak_type)


# select(pred, on_true, on_false) is np.where: broadcasting, as everything elementwise.
select = Primitive("select", _select_abstract,
                   lambda p, a, b: np.asarray(np.where(p, a, b), dtype=np.result_type(a, b))[()])
register(select, lambda eqn, p, a, b: call("np.where", p, a, b), bare_scalar_ok=True, temp_name="where")


def _clamp_abstract(lo, x, hi):
    _check_operands("clamp", [lo, x, hi], "ordered")
    return ShapedArray(broadcast_shapes(lo.shape, x.shape, hi.shape), x.dtype,
                       lo.weak_type and x.weak_type and hi.weak_type)


# clamp(lo, x, hi) = np.clip(x, lo, hi): min(max(x, lo), hi), so lo wins nothing over hi.
clamp = Primitive("clamp", _clamp_abstract,
                  lambda lo, x, hi: np.asarray(np.minimum(np.maximum(x, lo), hi), dtype=x.dtype)[()])
register(clamp, lambda eqn, lo, x, hi: call("np.clip", x, lo, hi), bare_scalar_ok=True)

# ---------------------------------------------------------------------------------------
# convert_element_type, iota


def _convert_abstract(x, *, new_dtype, weak_type):
    return ShapedArray(x.shape, new_dtype, weak_type)


def _drops_imaginary_part(source, new_dtype) -> bool:
    """Whether converting `source` to `new_dtype` keeps only the real part (complex to a real
    number; to bool, nonzero counts either part, as in NumPy)."""
    return dtypes.is_complex(source) and not (dtypes.is_complex(new_dtype) or dtypes.is_bool(new_dtype))


def _convert_impl(x, *, new_dtype, weak_type):
    x = np.asarray(x)
    # The real part, taken explicitly: NumPy's astype does the same with a ComplexWarning.
    return (np.real(x) if _drops_imaginary_part(x.dtype, new_dtype) else x).astype(new_dtype)[()]


def _emit_convert(eqn, x):
    dtype = eqn.params["new_dtype"]
    boolean_eye = _BOOLEAN_EYE.fullmatch(x.text)
    if boolean_eye:   # the identity of another dtype: `np.eye(3, dtype=np.float64)`
        return Expr(f"np.eye({boolean_eye.group(1)}, dtype={dtype_text(dtype)})")
    if _drops_imaginary_part(eqn.invars[0].aval.dtype, dtype):   # never `np.float64(z)`
        x = call("np.real", x)
    if eqn.invars[0].aval.shape == ():
        return call(dtype_text(dtype), x)
    return method(x, "astype", Expr(dtype_text(dtype)))


convert_element_type = Primitive("convert_element_type", _convert_abstract, _convert_impl)
register(convert_element_type, _emit_convert, temp_name="cast")


def _iota_abstract(*, dtype, shape, dimension):
    if not 0 <= dimension < len(shape):
        raise ShapeError(f"iota dimension {dimension} out of range for shape {shape}")
    return ShapedArray(shape, dtype)


def _emit_iota(eqn):
    dtype, shape, dim = (eqn.params[k] for k in ("dtype", "shape", "dimension"))
    if len(shape) == 1:
        return call("np.arange", Expr(str(shape[0])), dtype=Expr(dtype_text(dtype)))
    return call("rt.iota", Expr(dtype_text(dtype)), Expr(repr(tuple(shape))), Expr(str(dim)))


iota = Primitive("iota", _iota_abstract,
                 lambda *, dtype, shape, dimension: rt.iota(dtype, shape, dimension))
register(iota, _emit_iota)

# ---------------------------------------------------------------------------------------
# stop_gradient: the identity, whose derivative is zero. Written out as the value itself.

stop_gradient = Primitive("stop_gradient", lambda x: x, lambda x: x)
register(stop_gradient, lambda eqn, x: x)

# add_any: the sum of two cotangents (or tangents) of one type, made by AD itself.
add_any = Primitive("add_any", _elementwise_abstract("add_any", "any"), _keep_dtype(np.add))
register(add_any, lambda eqn, x, y: binop("+", x, y), temp_name="add")

# ---------------------------------------------------------------------------------------
# Derivatives. Tangent rules read like the math: `t` is the input tangent, `x` the input,
# `y` the output. Written with operators and the op layer, so they stage readable equations.

_UNARY_TANGENTS = {
    exp: lambda x, y, t: t * y,
    log: lambda x, y, t: t / x,
    log1p: lambda x, y, t: t / (1 + x),
    expm1: lambda x, y, t: t * ops.exp(x),   # not y + 1: that cancels for x << 0
    sin: lambda x, y, t: t * ops.cos(x),
    cos: lambda x, y, t: -(t * ops.sin(x)),
    tan: lambda x, y, t: t * (1 + y * y),
    asin: lambda x, y, t: t / ops.sqrt(1 - x * x),
    acos: lambda x, y, t: -(t / ops.sqrt(1 - x * x)),
    atan: lambda x, y, t: t / (1 + x * x),
    sinh: lambda x, y, t: t * ops.cosh(x),
    cosh: lambda x, y, t: t * ops.sinh(x),
    tanh: lambda x, y, t: t * (1 - y * y),
    asinh: lambda x, y, t: t / ops.sqrt(x * x + 1),
    acosh: lambda x, y, t: t / ops.sqrt(x * x - 1),
    atanh: lambda x, y, t: t / (1 - x * x),
    sqrt: lambda x, y, t: t / (2 * y),
    rsqrt: lambda x, y, t: t * (-0.5 * y / x),
    cbrt: lambda x, y, t: t / (3 * y * y),
    logistic: lambda x, y, t: t * (y * (1 - y)),
    erf: lambda x, y, t: t * (1.1283791670955126 * ops.exp(-(x * x))),   # 2 / sqrt(pi)
    lgamma: lambda x, y, t: t * digamma.bind(x),
    digamma: lambda x, y, t: t * polygamma.bind(x, n=1),
    abs: lambda x, y, t: _abs_tangent(x, y, t),
}


def _abs_tangent(x, y, t):
    """Slope 1 at 0 for real x, as JAX's abs has. For complex x, JAX's rule: the tangent of
    |x| is Re(conj(x) t) / |x|, and 0 at x == 0 (where |x| has no derivative)."""
    if not dtypes.is_complex(x.aval.dtype):
        return ops.select(x >= 0, t, -t)
    nonzero = ops.select(ops.eq(y, ops.literal(0, y.aval.dtype)), ops.literal(1, y.aval.dtype), y)
    return ops.div(ops.real(ops.mul(ops.conj(x), t)), nonzero)


def _make_unary_jvp(prim, tangent_of):
    def rule(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        y = prim.bind(x, **params)
        return y, tangent_of(x, y, t)
    return rule


for _prim, _tangent_of in _UNARY_TANGENTS.items():
    _jvp.register(_prim, _make_unary_jvp(_prim, _tangent_of))


for _prim in (floor, ceil, round, is_finite, not_, eq, ne, lt, le, gt, ge, and_, or_, xor,
              stop_gradient, iota):
    _jvp.defzero(_prim)


def _sign_jvp(primals, tangents):
    """Real sign is piecewise constant (tangent 0, as JAX). Complex sign is x / |x|, smooth
    away from 0: its tangent is (t - y Re(conj(y) t)) / |x| (t minus its component along
    y, over |x|), 0 at x == 0. JAX gives 0 there too; this is the derivative."""
    (x,), (t,) = primals, tangents
    y = sign.bind(x)
    if not dtypes.is_complex(x.aval.dtype) or is_zero(t):
        return y, Zero(tangent_aval(y.aval))
    dtype = x.aval.dtype
    at_zero = ops.eq(x, ops.literal(0, dtype))
    modulus = ops.convert(abs.bind(x), dtype)
    safe = ops.select(at_zero, ops.literal(1, dtype), modulus)
    along = ops.mul(y, ops.convert(ops.real(ops.mul(ops.conj(y), t)), dtype))
    tangent = ops.div(ops.sub(t, along), safe)
    return y, ops.select(at_zero, ops.full(x.aval.shape, 0, dtype), tangent)


_jvp.register(sign, _sign_jvp)


def _spread(t, shape):
    """A tangent broadcast to the output shape (only where an operand was smaller)."""
    return ops.broadcast_to(t, shape)


def _sum_tangents(shape, *terms):
    """Adds the nonzero terms (each a thunk, called only if its tangent is nonzero)."""
    total = None
    for tangent, term in terms:
        if is_zero(tangent):
            continue
        value = term()
        total = value if total is None else total + value
    return _spread(total, shape)


def _add_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = add.bind(x, y)
    return out, _sum_tangents(out.shape, (tx, lambda: tx), (ty, lambda: ty))


def _sub_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = sub.bind(x, y)
    if is_zero(ty):
        return out, _spread(tx, out.shape)
    return out, _spread(-ty if is_zero(tx) else tx - ty, out.shape)


def _mul_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = mul.bind(x, y)
    return out, _sum_tangents(out.shape, (tx, lambda: tx * y), (ty, lambda: x * ty))


def _div_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = div.bind(x, y)
    if dtypes.is_integer(out.dtype):
        return out, Zero(tangent_aval(out.aval))
    return out, _sum_tangents(out.shape, (tx, lambda: tx / y), (ty, lambda: -(out * ty) / y))


def _is_nonzero_constant(y) -> bool:
    """Whether `y` is a literal or a NumPy constant with no zero element."""
    if isinstance(y, Tracer):
        return False
    value = y.value if isinstance(y, Literal) else y
    return bool(np.all(np.asarray(value) != 0))


def _pow_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = pow.bind(x, y)
    # Primitives on the primals: x or y may be a literal (`x ** 0.5`, `2.0 ** x`) or a
    # NumPy constant (`x ** Y` with Y closed over), which have no operators and no aval.
    # Both operands have the output's dtype.
    dtype = out.aval.dtype
    one, zero = ops.literal(1, dtype), ops.literal(0, dtype)

    def d_base():   # y * x**(y - 1); at y == 0 the exponent is taken as 1, so 0 * x**0 = 0
        # (x**0 is 1 for every x: its derivative is 0 at x == 0 too, not 0 * inf)
        exponent = y if _is_nonzero_constant(y) else select.bind(eq.bind(y, zero), one, y)
        return tx * mul.bind(y, pow.bind(x, sub.bind(exponent, one)))

    def d_exponent():   # log(x) * x**y, taken as 0 where x == 0 (the limit for y > 0)
        safe = x if _is_nonzero_constant(x) else select.bind(eq.bind(x, zero), one, x)
        return ty * mul.bind(out, log.bind(safe))
    return out, _sum_tangents(out.shape, (tx, d_base), (ty, d_exponent))


def _integer_pow_jvp(primals, tangents, *, y):
    (x,), (t,) = primals, tangents
    out = integer_pow.bind(x, y=y)
    if y == 0:
        return out, Zero(tangent_aval(out.aval))
    if y == 1:
        return out, t
    power = x if y == 2 else integer_pow.bind(x, y=y - 1)
    return out, t * (y * power)


def _minmax_jvp(prim, picks_x):
    """max/min: the tangent of the operand that wins; ties split it evenly (as JAX does).

    Against a constant (ReLU's `np.maximum(x, 0.0)`) the tangent is the moving operand's
    times one weight, 1 where it wins, ½ on a tie and 0 where it loses, so the derivative
    is one `np.where` expression, not masks of both operands added up.
    """
    def rule(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        out = prim.bind(x, y)
        if is_zero(tx) != is_zero(ty):
            moving, other, t = (x, y, tx) if is_zero(ty) else (y, x, ty)
            def constant(value):
                return ops.literal(value, out.aval.dtype, weak=False)
            weight = select.bind(picks_x(moving, other), constant(1),
                                 select.bind(eq.bind(moving, other), constant(0.5), constant(0)))
            return out, _spread(t, out.shape) * weight
        tx, ty = (_spread(instantiate(t), out.shape) for t in (tx, ty))
        x_wins, y_wins = picks_x(x, y), picks_x(y, x)
        return out, select.bind(x_wins, tx, select.bind(y_wins, ty, (tx + ty) / 2))
    return rule


_max_jvp = _minmax_jvp(max, lambda a, b: a > b)
_min_jvp = _minmax_jvp(min, lambda a, b: a < b)


def _atan2_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = atan2.bind(x, y)
    denominator = mul.bind(x, x) + mul.bind(y, y)   # mul.bind: x or y may be a literal
    return out, _sum_tangents(out.shape, (tx, lambda: tx * y / denominator),
                              (ty, lambda: -(ty * x) / denominator))


def _rem_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = rem.bind(x, y)
    if dtypes.is_integer(out.dtype):
        return out, Zero(tangent_aval(out.aval))
    return out, _sum_tangents(out.shape, (tx, lambda: tx), (ty, lambda: -(ty * ops.trunc(x / y))))


def _select_jvp(primals, tangents):
    (p, a, b), (_, ta, tb) = primals, tangents
    out = select.bind(p, a, b)
    if is_zero(ta) and is_zero(tb):
        return out, Zero(tangent_aval(out.aval))
    ta, tb = instantiate(ta), instantiate(tb)
    return out, _spread(select.bind(p, ta, tb), out.shape)


def _where_else_zero(pred, t):
    """`t` where `pred` holds, 0 elsewhere (a weak literal, so it takes `t`'s dtype)."""
    return select.bind(pred, t, ops.literal(0, t.dtype))


def _clamp_jvp(primals, tangents):
    """np.clip's derivative is that of min(max(x, lo), hi), ties included (as jnp.clip's):
    at x == lo or x == hi the tangent is split evenly with the bound, and lo > hi gives
    hi everything (min is applied last)."""
    (lo, x, hi), (tlo, tx, thi) = primals, tangents
    out = clamp.bind(lo, x, hi)
    if is_zero(tx) and is_zero(tlo):
        raised, t_raised = max.bind(x, lo), Zero(tangent_aval(out.aval))
    else:
        raised, t_raised = _max_jvp([x, lo], [tx, tlo])
    _, t_out = _min_jvp([raised, hi], [t_raised, thi])
    return out, t_out


def _convert_jvp(primals, tangents, *, new_dtype, weak_type):
    (x,), (t,) = primals, tangents
    out = convert_element_type.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if not (dtypes.is_inexact(new_dtype) and dtypes.is_inexact(x.dtype)):
        return out, Zero(tangent_aval(out.aval))
    return out, convert_element_type.bind(t, new_dtype=new_dtype, weak_type=False)


for _prim, _rule in [(add, _add_jvp), (sub, _sub_jvp), (mul, _mul_jvp), (div, _div_jvp),
                     (pow, _pow_jvp), (integer_pow, _integer_pow_jvp),
                     (max, _max_jvp), (min, _min_jvp),
                     (atan2, _atan2_jvp), (rem, _rem_jvp), (select, _select_jvp),
                     (clamp, _clamp_jvp), (convert_element_type, _convert_jvp)]:
    _jvp.register(_prim, _rule)
_jvp.deflinear(neg)
_jvp.deflinear(add_any)   # of two values of one type: nothing to broadcast


def _polygamma_jvp(primals, tangents, *, n):
    (x,), (t,) = primals, tangents
    return polygamma.bind(x, n=n), t * polygamma.bind(x, n=n + 1)


_jvp.register(polygamma, _polygamma_jvp)

# ---------------------------------------------------------------------------------------
# Transposes of the linear ones. `ct` is the output cotangent; a linear operand is a
# LinearInput marker, the other operands are values.


def _map_ct(ct, fn):
    """`fn(ct)`, or the symbolic zero itself: rules never compute with zeros."""
    return ct if is_zero(ct) else fn(ct)


def _add_transpose(ct, x, y):
    return [unbroadcast(ct, x.aval.shape) if is_linear(x) else None,
            unbroadcast(ct, y.aval.shape) if is_linear(y) else None]


def _sub_transpose(ct, x, y):
    return [unbroadcast(ct, x.aval.shape) if is_linear(x) else None,
            unbroadcast(_map_ct(ct, lambda c: -c), y.aval.shape) if is_linear(y) else None]


def _mul_transpose(ct, x, y):
    if is_linear(x) and is_linear(y):
        raise _transpose.NonLinearEquationError("mul of two linear values is not linear")
    if is_linear(x):
        return [unbroadcast(_map_ct(ct, lambda c: c * y), x.aval.shape), None]
    return [None, unbroadcast(_map_ct(ct, lambda c: x * c), y.aval.shape)]


def _div_transpose(ct, x, y):
    if is_linear(y):
        raise _transpose.NonLinearEquationError("division by a linear value is not linear")
    return [unbroadcast(_map_ct(ct, lambda c: c / y), x.aval.shape), None]


def _neg_transpose(ct, x):
    return [_map_ct(ct, lambda c: -c)]


def _convert_transpose(ct, x, *, new_dtype, weak_type):
    if is_zero(ct):
        return [Zero(x.aval.strip_weak_type())]
    return [convert_element_type.bind(ct, new_dtype=x.aval.dtype, weak_type=False)]


def _select_transpose(ct, p, a, b):
    return [None] + [unbroadcast(_map_ct(ct, keep), operand.aval.shape) if is_linear(operand) else None
                     for operand, keep in ((a, lambda c: _where_else_zero(p, c)),
                                           (b, lambda c: select.bind(p, ops.literal(0, c.dtype), c)))]


for _prim, _rule in [(add, _add_transpose), (add_any, _add_transpose), (sub, _sub_transpose),
                     (mul, _mul_transpose), (div, _div_transpose), (neg, _neg_transpose),
                     (convert_element_type, _convert_transpose), (select, _select_transpose)]:
    _transpose.register(_prim, _rule)

# ---------------------------------------------------------------------------------------
# StableHLO lowering. Operands arrive already broadcast to the output shape.


_HLO_UNARY = {
    neg: "stablehlo.negate", exp: "stablehlo.exponential", log: "stablehlo.log",
    log1p: "stablehlo.log_plus_one", expm1: "stablehlo.exponential_minus_one",
    sin: "stablehlo.sine", cos: "stablehlo.cosine", tan: "chlo.tan", tanh: "stablehlo.tanh",
    logistic: "stablehlo.logistic", sqrt: "stablehlo.sqrt", rsqrt: "stablehlo.rsqrt",
    cbrt: "stablehlo.cbrt", abs: "stablehlo.abs", sign: "stablehlo.sign",
    floor: "stablehlo.floor", ceil: "stablehlo.ceil", round: "stablehlo.round_nearest_even",
    not_: "stablehlo.not", asin: "chlo.asin", acos: "chlo.acos", atan: "chlo.atan",
    sinh: "chlo.sinh", cosh: "chlo.cosh", asinh: "chlo.asinh", acosh: "chlo.acosh",
    atanh: "chlo.atanh", lgamma: "chlo.lgamma",
}
_HLO_BINARY = {
    add: "stablehlo.add", add_any: "stablehlo.add", sub: "stablehlo.subtract",
    mul: "stablehlo.multiply", div: "stablehlo.divide", pow: "stablehlo.power",
    max: "stablehlo.maximum", min: "stablehlo.minimum", atan2: "stablehlo.atan2",
    rem: "stablehlo.remainder", and_: "stablehlo.and", or_: "stablehlo.or", xor: "stablehlo.xor",
}
_HLO_COMPARE = {eq: "EQ", ne: "NE", lt: "LT", le: "LE", gt: "GT", ge: "GE"}


def _lower_unary(op):
    def rule(ctx, eqn, x):
        t = _hlo.out_type(eqn)
        if op in _UNSIGNED_REWRITES and np.dtype(eqn.invars[0].aval.dtype).kind == "u":
            return _UNSIGNED_REWRITES[op](ctx, eqn, x)
        if op.startswith("chlo."):
            return [ctx.op(f"{op} {x} : {t} -> {t}", _hlo.hint(eqn))]
        if eqn.invars[0].aval.dtype != eqn.outvars[0].aval.dtype:   # abs of complex: real
            return [ctx.op(f"{op} {x} : ({_hlo.tensor_type(eqn.invars[0].aval)}) -> {t}", _hlo.hint(eqn))]
        return [ctx.op(f"{op} {x} : {t}", _hlo.hint(eqn))]
    return rule


def _unsigned_sign(ctx, eqn, x):
    """sign(x) == (x != 0) for unsigned x (StableHLO's sign takes signless integers only)."""
    aval = eqn.invars[0].aval
    nonzero = _compare(ctx, "NE", x, ctx.constant(0, aval.dtype, aval.shape), aval)
    return [ctx.op(f"stablehlo.convert {nonzero} : ({_bool_type(aval)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


# StableHLO's abs and sign take signless integers only: unsigned operands are rewritten.
_UNSIGNED_REWRITES = {"stablehlo.abs": lambda ctx, eqn, x: [x], "stablehlo.sign": _unsigned_sign}


def _lower_binary(op):
    def rule(ctx, eqn, x, y):
        return [ctx.op(f"{op} {x}, {y} : {_hlo.out_type(eqn)}", _hlo.hint(eqn))]
    return rule


def _lower_division(op):
    """div and rem: an integer divided by zero gives 0, NumPy's quotient and remainder
    (XLA's are -1, all ones unsigned, and the dividend). INT_MIN / -1 needs nothing: both
    give INT_MIN, remainder 0. A literal divisor that is not zero needs no select."""
    plain = _lower_binary(op)

    def rule(ctx, eqn, x, y):
        aval, divisor = eqn.outvars[0].aval, eqn.invars[1]
        if dtypes.is_inexact(aval.dtype) or (isinstance(divisor, Literal) and _is_nonzero_constant(divisor)):
            return plain(ctx, eqn, x, y)
        quotient = ctx.op(f"{op} {x}, {y} : {_hlo.tensor_type(aval)}")
        zero = ctx.constant(0, aval.dtype, aval.shape)
        return [_select(ctx, _compare(ctx, "EQ", y, zero, aval), zero, quotient, aval, _hlo.hint(eqn))]
    return rule


def _compare_type(dtype) -> str:
    if dtypes.is_inexact(dtype):
        return "FLOAT"
    return "UNSIGNED" if np.dtype(dtype).kind in "ub" else "SIGNED"


def _compare(ctx, direction: str, x, y, aval, hint=None) -> str:
    """`x <direction> y` of two operands of `aval`: a boolean of its shape."""
    t = _hlo.tensor_type(aval)
    return ctx.op(f"stablehlo.compare {direction}, {x}, {y}, {_compare_type(aval.dtype)} : ({t}, {t}) -> "
                  f"{_bool_type(aval)}", hint)


def _select(ctx, pred, on_true, on_false, aval, hint=None) -> str:
    """`on_true` where `pred`, else `on_false`, all of `aval`'s shape, the values of its dtype."""
    return ctx.op(f"stablehlo.select {pred}, {on_true}, {on_false} : {_bool_type(aval)}, "
                  f"{_hlo.tensor_type(aval)}", hint)


def _lower_compare(direction):
    def rule(ctx, eqn, x, y):
        return [_compare(ctx, direction, x, y, eqn.invars[0].aval.update(shape=eqn.outvars[0].aval.shape),
                         _hlo.hint(eqn))]
    return rule


def _lower_integer_pow(ctx, eqn, x):
    t, aval, y = _hlo.out_type(eqn), eqn.outvars[0].aval, eqn.params["y"]
    if y == 0:
        return [ctx.constant(1, aval.dtype, aval.shape)]
    result, base, n = None, x, builtins.abs(y)
    while n:                       # exponentiation by squaring
        if n & 1:
            result = base if result is None else ctx.op(f"stablehlo.multiply {result}, {base} : {t}")
        n >>= 1
        if n:
            base = ctx.op(f"stablehlo.multiply {base}, {base} : {t}")
    if y < 0:
        one = ctx.constant(1, aval.dtype, aval.shape)
        result = ctx.op(f"stablehlo.divide {one}, {result} : {t}")
    return [result]


def _lower_is_finite(ctx, eqn, x):
    return [ctx.op(f"stablehlo.is_finite {x} : ({_hlo.tensor_type(eqn.invars[0].aval)}) -> "
                   f"{_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_digamma(ctx, eqn, x):
    """chlo.digamma, except at a signed zero, where it gives nan and SciPy the pole's
    -1/x: -inf at +0.0, inf at -0.0. XLA:CPU reads subnormals as zeros, so they get the
    same infinities (their -1/x is at least 4.5e307)."""
    aval, t = eqn.outvars[0].aval, _hlo.out_type(eqn)
    psi = ctx.op(f"chlo.digamma {x} : {t} -> {t}", _hlo.hint(eqn))
    zero, minus_one = ctx.constant(0, aval.dtype, aval.shape), ctx.constant(-1, aval.dtype, aval.shape)
    at_zero = _compare(ctx, "EQ", x, zero, aval)
    pole = ctx.op(f"stablehlo.divide {minus_one}, {x} : {t}")
    return [_select(ctx, at_zero, pole, psi, aval, _hlo.hint(eqn))]


def _bool_type(aval) -> str:
    return _hlo.tensor_type(ShapedArray(aval.shape, dtypes.bool_))


def _lower_polygamma(ctx, eqn, x):
    """chlo.polygamma, and at the poles (0, -1, -2, ...), where it gives nan for an even
    order, SciPy's (-1)^(n+1) inf: n! zeta(n+1, x) is inf there."""
    aval, t, n = eqn.outvars[0].aval, _hlo.out_type(eqn), eqn.params["n"]
    order = ctx.constant(n, aval.dtype, aval.shape)
    value = ctx.op(f"chlo.polygamma {order}, {x} : {t}, {t} -> {t}", _hlo.hint(eqn))
    zero = ctx.constant(0, aval.dtype, aval.shape)
    integer = _compare(ctx, "EQ", x, ctx.op(f"stablehlo.floor {x} : {t}"), aval)
    pole = ctx.op(f"stablehlo.and {integer}, {_compare(ctx, 'LE', x, zero, aval)} : {_bool_type(aval)}")
    infinity = ctx.constant(np.inf if n % 2 else -np.inf, aval.dtype, aval.shape)
    return [_select(ctx, pole, infinity, value, aval, _hlo.hint(eqn))]


def _lower_select(ctx, eqn, p, a, b):
    return [_select(ctx, p, a, b, eqn.outvars[0].aval, _hlo.hint(eqn))]


def _lower_clamp(ctx, eqn, lo, x, hi):
    t = _hlo.out_type(eqn)
    return [ctx.op(f"stablehlo.clamp {lo}, {x}, {hi} : ({t}, {t}, {t}) -> {t}", _hlo.hint(eqn))]


def _lower_convert(ctx, eqn, x):
    source, new_dtype = _hlo.tensor_type(eqn.invars[0].aval), eqn.params["new_dtype"]
    if eqn.invars[0].aval.dtype == np.dtype(new_dtype):
        return [x]
    if np.dtype(new_dtype) == dtypes.bool_:   # NumPy: nonzero is True
        aval = eqn.invars[0].aval
        return [_compare(ctx, "NE", x, ctx.constant(0, aval.dtype, aval.shape), aval, _hlo.hint(eqn))]
    if _drops_imaginary_part(eqn.invars[0].aval.dtype, new_dtype):
        part = eqn.invars[0].aval.update(dtype=np.finfo(eqn.invars[0].aval.dtype).dtype)
        x = ctx.op(f"stablehlo.real {x} : ({source}) -> {_hlo.tensor_type(part)}")
        source = _hlo.tensor_type(part)
        if part.dtype == np.dtype(new_dtype):
            return [x]
    return [ctx.op(f"stablehlo.convert {x} : ({source}) -> {_hlo.out_type(eqn)}", _hlo.hint(eqn))]


def _lower_iota(ctx, eqn):
    return [ctx.op(f"stablehlo.iota dim = {eqn.params['dimension']} : {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


for _prim, _op in _HLO_UNARY.items():
    _hlo.register(_prim, _lower_unary(_op), broadcasting=True)
for _prim, _op in _HLO_BINARY.items():
    _hlo.register(_prim, (_lower_division if _prim in (div, rem) else _lower_binary)(_op),
                  broadcasting=True)
for _prim, _direction in _HLO_COMPARE.items():
    _hlo.register(_prim, _lower_compare(_direction), broadcasting=True)
for _prim, _rule in [(integer_pow, _lower_integer_pow), (is_finite, _lower_is_finite),
                     (polygamma, _lower_polygamma), (digamma, _lower_digamma), (select, _lower_select),
                     (clamp, _lower_clamp), (convert_element_type, _lower_convert)]:
    _hlo.register(_prim, _rule, broadcasting=True)
_hlo.register(iota, _lower_iota)
_hlo.register(stop_gradient, lambda ctx, eqn, x: [x])

# ---------------------------------------------------------------------------------------
# Simplification: `x * 1`, `x + 0` and `x - 0` are `x`. Differentiation makes them (the
# cotangent seed is a literal 1, and the transpose of a sum broadcasts it); dropping them
# keeps emitted derivatives free of `1.0 * t` noise.


def _identity_rule(unit, commutative: bool):
    """The rule dropping an equation whose one operand passes through because the other is
    `unit` everywhere (and the result has the operand's shape and dtype: no broadcast or
    promotion is lost)."""
    orders = ((0, 1), (1, 0)) if commutative else ((0, 1),)

    def rule(eqn, producer):
        invars = eqn.invars
        out = eqn.outvars[0].aval
        for keep, other in orders:
            operand = invars[keep]
            if type(operand) is not Var:
                continue
            aval = operand.aval
            if aval is not out and (aval.shape != out.shape or aval.dtype != out.dtype):
                continue   # (the equation broadcasts or promotes it)
            value = _simplify.fill_value(invars[other], producer)
            if value is not None and value == unit:
                return operand
        return None
    return rule


# One pass XLA fuses into its consumer (and a loop's counter, iota, stays by its loop):
# loops recompute them in the backward pass rather than save them per step.
for _prim in (neg, convert_element_type, iota):
    _pe.defcheap(_prim)

def _pieces_into_concatenation(eqn, producer):
    """The sum of two zero-padded pieces that tile one axis is their concatenation: the
    cotangent of an array read in two consecutive slices (`xs[:36]`, `xs[36:]`, as a
    checkpointed loop splits its steps) is then assembled once, not summed from two
    full-size padded copies."""
    if type(eqn.invars[0]) is not Var or type(eqn.invars[1]) is not Var:   # (`x + 0.1`: no piece)
        return None
    pad, concatenate = ops.primitive(ops.pad), ops.primitive(ops.concatenate)    # structural's
    pads = [producer(v) for v in eqn.invars]
    if any(p is None or p.primitive is not pad or _simplify.fill_value(p.invars[1], producer) != 0 for p in pads):
        return None
    configs = [p.params["padding_config"] for p in pads]
    moved = [[d for d, edges in enumerate(c) if edges != (0, 0, 0)] for c in configs]
    if len(moved[0]) != 1 or moved[0] != moved[1]:
        return None
    (axis,) = moved[0]
    pieces = [p.invars[0] for p in pads]
    sizes = [piece.aval.shape[axis] for piece in pieces]
    for first, second in ((0, 1), (1, 0)):
        if configs[first][axis] == (0, sizes[second], 0) and configs[second][axis] == (sizes[first], 0, 0):
            return JaxprEqn(concatenate, [pieces[first], pieces[second]], eqn.outvars, {"dimension": axis},
                            eqn.source_info)
    return None


_simplify.register(mul, _identity_rule(1, commutative=True))
_simplify.register(add, _identity_rule(0, commutative=True))
_simplify.register(add_any, _identity_rule(0, commutative=True))
_simplify.register(add, _pieces_into_concatenation)
_simplify.register(add_any, _pieces_into_concatenation)
_simplify.register(sub, _identity_rule(0, commutative=False))

# ---------------------------------------------------------------------------------------
# Batching: every element is computed alone, so the batch stays where it is. n-ary
# primitives broadcast, so an unbatched operand (a weight, a literal) is read as it is.

for _prim in (*UNARY.values(), is_finite, rsqrt, neg, not_, integer_pow, convert_element_type,
              stop_gradient):
    _vmap.vectorized(_prim)
for _prim in (add, sub, mul, max, min, atan2, rem, pow, div, eq, ne, lt, le, gt, ge, and_, or_,
              xor, select, clamp, add_any):
    _vmap.broadcasting(_prim)
_vmap.unmapped(iota)

# ---------------------------------------------------------------------------------------
# erfc: 1 - erf(x) as its own primitive, because the difference loses every digit in the
# right tail (erfc(10) is 2.1e-45; 1 - erf(10) is 0). scipy.special.erfc and the normal
# distribution's cdf in its tails need it. Every rule of it sits in this block, but its
# lowering: special.py lowers erf and erfc, whose complex values need a staged algorithm.

erfc = _unary("erfc", rt.erfc, "rt.erfc")
_jvp.register(erfc, _make_unary_jvp(erfc, lambda x, y, t: t * (-1.1283791670955126 * ops.exp(-(x * x)))))
_vmap.vectorized(erfc)
