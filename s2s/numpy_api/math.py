"""NumPy's elementwise functions (ufuncs and friends) on staged and concrete values.

Every function here types its result exactly as NumPy 2 does: operands are promoted with
NEP 50 (Python scalars are weak and take the dtype of the array they meet), integer and
boolean inputs of float-only functions become the float NumPy computes in (`int8 → f16`,
`int32 → f64`), `/` of integers is float64, and booleans follow NumPy's loops
(`True + True` is a logical or, `bool // bool` is int8, `-bool` is an error).

Two flavours of each binary function exist. The NumPy function (`add`, registered for
`np.add`) always returns a *strong* array, as a NumPy ufunc does even for Python scalar
arguments (`np.sqrt(2.0)` is an `np.float64`, which promotes `float32` arrays to float64).
The operator form (`add.operator`, used by `Tracer.__add__` and by the operators of staged
source) keeps the result weak when every operand is weak: a weak staged value stands for a
Python scalar, and Python scalar arithmetic gives Python scalars.

NumPy's floor division and modulo are built from the truncating `div`/`rem` primitives
plus a select that corrects the sign, the way NumPy's own `npy_divmod` does.
"""
from __future__ import annotations

import functools
import math as _pymath

import numpy as np

from s2s import config, dtypes
from s2s.core import Literal, literal_value
from s2s.errors import ShapeError, UnsupportedFunctionError, UnsupportedSyntaxError
from s2s.numpy_api._base import (asarray, aval, cast_all, convert, float_dtype_for, implements,
                                 is_python_scalar, operand_types, result_dtype)
from s2s.numpy_api.creation import zeros_like
from s2s.primitives import complex_parts as cx
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.staging import Tracer

# ---------------------------------------------------------------------------------------
# Operand preparation


def _prep(xs, weak_ok: bool, dtype_rule=None):
    """Promotes operands as NumPy does. Returns (operands, dtype, weak).

    `dtype_rule(dtype, weak) -> dtype` adjusts the promoted dtype (to a float, say).
    """
    if len(xs) == 1 and type(xs[0]) is Tracer and (dtype_rule is None or dtype_rule is _float_rule):
        # One strong staged operand (np.tanh(x)): nothing to promote or convert where the
        # result has its dtype (a float-only ufunc of an int array does not).
        a = xs[0].variable.aval
        if not a.weak_type and (dtype_rule is None or _float_result_dtype(((a.dtype, False),)) == a.dtype):
            return xs, a.dtype, False
    elif dtype_rule is None and len(xs) == 2:
        prepared = _prep_common_pair(*xs)
        if prepared is not None:
            return prepared
    xs = [x if type(x) is Tracer else asarray(x) for x in xs]
    types = operand_types(xs)
    dt, all_weak = dtypes.result_type(*types)
    if dtype_rule is _float_rule:
        dt = _float_result_dtype(types)
    elif dtype_rule is not None:
        dt = dtypes.canonicalize_dtype(dtype_rule(dt, all_weak))
    weak = weak_ok and all_weak
    return cast_all(xs, dt, weak, types), dt, weak


def _prep_common_pair(x, y):
    """`_prep` of two operands in the cases staging meets most (user code and the rules of
    jvp and transpose alike), answered without promotion tables: two strong staged values
    of one dtype (nothing to convert), and a strong inexact staged value beside a Python
    int or float (the scalar becomes a weak literal of the value's dtype, as NumPy 2 has
    it). None for every other pair: `_prep` then promotes in full."""
    if type(x) is Tracer:
        value, scalar, scalar_first = x, y, False
    elif type(y) is Tracer:
        value, scalar, scalar_first = y, x, True
    else:
        return None
    a = value.variable.aval
    if a.weak_type:
        return None
    if type(scalar) is Tracer:
        b = scalar.variable.aval
        if b.dtype != a.dtype or b.weak_type:
            return None
        return [x, y], a.dtype, False
    if (type(scalar) is float or type(scalar) is int) and a.dtype.kind in "fc":
        literal = ops.literal(scalar, a.dtype, True)
        return ([literal, value] if scalar_first else [value, literal]), a.dtype, False
    return None


def _float_rule(dt, weak):
    """Marks a float-only ufunc; `_prep` then types it with `_float_result_dtype`."""
    return float_dtype_for(dt)


def _float_result_dtype(types) -> np.dtype:
    """The float dtype NumPy's float-only ufuncs pick for operands of `types` ((dtype,
    weak_type) each; the loop every input casts to safely): each strong integer input needs
    its own float (int8, uint8 → f16; int16 → f32; int32 → f64), a weak input first takes
    the dtype the strong ones give it (`int8_array, 2` → int8 → f16, but `bool_array, 2` →
    int64 → f64)."""
    key = (types, config.values.enable_x64)
    dtype = _FLOAT_RESULTS.get(key)
    if dtype is None:
        dtype = _FLOAT_RESULTS[key] = _float_result_of(key[0])
    return dtype


_FLOAT_RESULTS: dict = {}   # ((dtype, weak) of each operand, x64) -> the float result dtype


def _float_result_of(operands) -> np.dtype:
    strong = [(dtype, False) for dtype, weak in operands if not weak]
    floats = []
    for dtype, weak in operands:
        if weak and strong:
            dtype, _ = dtypes.result_type((dtype, True), *strong)
        floats.append(float_dtype_for(dtype))
    return dtypes.canonicalize_dtype(np.result_type(*floats))


def _bool_to_int8(dt, weak):
    return dtypes.int8 if dtypes.is_bool(dt) else dt


def _materialize(x):
    """A literal operand as a staged (or NumPy) value, so functions never return Literals."""
    if isinstance(x, Literal):
        return ew.convert_element_type.bind(x, new_dtype=x.aval.dtype, weak_type=x.aval.weak_type)
    return x


def _boolean_refusal(name: str, instead: str) -> str:
    return f"numpy boolean {name} is not supported, use {instead} instead"


# ---------------------------------------------------------------------------------------
# The ufunc wrapper: NumPy's keyword arguments, registration, the operator form

_IGNORED_UFUNC_KWARGS = {"casting", "order", "subok"}


def _ufunc(np_fns, nin: int, name: str | None = None):
    """Wraps `core(*operands, weak_ok)` as NumPy function(s) `np_fns`.

    The wrapper accepts NumPy's ufunc keywords: `dtype=` casts the inputs first; `out=`
    and `where=` (in-place and masked updates) are rejected with a compiler error.
    `wrapper.operator(*xs)` is the weak-preserving form for Python operators.
    """
    def deco(core):
        fname = name or core.__name__.lstrip("_")

        def fn(*args, out=None, where=True, dtype=None, **kwargs):
            if len(args) == nin + 1:
                args, out = args[:nin], args[nin]
            if len(args) != nin:
                raise TypeError(f"{fname}() takes {nin} positional argument"
                                f"{'s' if nin > 1 else ''} but {len(args)} were given")
            unknown = set(kwargs) - _IGNORED_UFUNC_KWARGS if kwargs else None
            if unknown:
                raise TypeError(f"{fname}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
            if out is not None:
                raise UnsupportedSyntaxError(
                    f"np.{fname}(..., out=...) writes into an existing array; s2s does not "
                    f"support in-place updates", f"assign the result instead: y = np.{fname}(...)")
            if where is not True:
                raise UnsupportedFunctionError(
                    f"np.{fname}(..., where=...) is not supported",
                    f"compute everywhere and choose with np.where(mask, np.{fname}(...), other)")
            if dtype is not None:
                dt = dtypes.canonicalize_dtype(dtype)
                args = cast_all([asarray(a) for a in args], dt, False)
            return core(*args, weak_ok=False)

        fn.__name__ = fn.__qualname__ = fname
        fn.__doc__ = core.__doc__
        fn.operator = functools.partial(core, weak_ok=True)   # (a partial: no Python frame of its own)
        fn.core = core
        implements(*np_fns)(fn)
        return fn
    return deco


def _np(*names):
    """The NumPy functions among `names` that exist in this NumPy version."""
    return [getattr(np, n) for n in names if hasattr(np, n)]


# ---------------------------------------------------------------------------------------
# Arithmetic


def _binary_with_bool_loop(np_name: str, prim, bool_prim, doc: str | None = None):
    """The NumPy binary function `np_name`: `prim` on the promoted operands, or `bool_prim`
    when they are booleans (NumPy's boolean loops of add and maximum are a logical or)."""
    def core(x1, x2, *, weak_ok=False):
        (a, b), dt, _ = _prep([x1, x2], weak_ok)
        return (bool_prim if dtypes.is_bool(dt) else prim).bind(a, b)
    core.__doc__ = doc
    return _ufunc(_np(np_name), 2, name=np_name)(core)


add = _binary_with_bool_loop("add", ew.add, ew.or_)


@_ufunc(_np("subtract"), 2)
def subtract(x1, x2, *, weak_ok=False):
    (a, b), dt, _ = _prep([x1, x2], weak_ok)
    if dtypes.is_bool(dt):
        raise ShapeError(_boolean_refusal("subtract, the `-` operator,",
                                          "the bitwise_xor, the `^` operator, or the logical_xor function"))
    return ew.sub.bind(a, b)


multiply = _binary_with_bool_loop("multiply", ew.mul, ew.and_)


def _true_divide_rule(dt, weak):
    return dt if dtypes.is_inexact(dt) else dtypes.default_float()


@_ufunc(_np("divide", "true_divide"), 2, name="divide")
def divide(x1, x2, *, weak_ok=False):
    """True division: integers and booleans divide as float64, as in NumPy."""
    (a, b), _, _ = _prep([x1, x2], weak_ok, _true_divide_rule)
    return ew.div.bind(a, b)


true_divide = divide


def _literal_value(x: Literal):
    """The value a literal has in its dtype (1e-50 is 0 in float32)."""
    with np.errstate(all="ignore"):
        return np.asarray(x.value, dtype=x.aval.dtype)[()]


def _floor_fix(r, b, dt):
    """Where the truncated remainder `r` and divisor `b` differ in sign (r != 0).

    A concrete divisor folds to one comparison: `r < 0` for b >= 0, `r > 0` for b < 0.
    """
    zero = ops.literal(0, dt)
    if isinstance(b, Literal):
        return (ew.gt if _literal_value(b) < 0 else ew.lt).bind(r, zero)
    return ew.and_.bind(ew.ne.bind(r, zero),
                        ew.ne.bind(ew.lt.bind(r, zero), ew.lt.bind(b, zero)))


def _divmod_core(x1, x2, weak_ok, want_div: bool, want_mod: bool):
    (a, b), dt, _ = _prep([x1, x2], weak_ok, _bool_to_int8)
    if dtypes.is_inexact(dt):
        # NumPy's npy_divmod: mod = fmod(a, b); div = (a - mod) / b; fix the sign; round.
        mod = ew.rem.bind(a, b)
        fix = _floor_fix(mod, b, dt)
        div = None
        if want_div:
            div = ew.div.bind(ew.sub.bind(a, mod), b)
            div = ew.round.bind(ew.select.bind(fix, ew.sub.bind(div, ops.literal(1, dt)), div))
            # Division by zero gives a / b (±inf or nan), not nan.
            if not isinstance(b, Literal):
                div = ew.select.bind(ew.eq.bind(b, ops.literal(0, dt)), ew.div.bind(a, b), div)
            elif _literal_value(b) == 0:
                div = ew.div.bind(a, b)
        if want_mod:
            mod = ew.select.bind(fix, ew.add.bind(mod, b), mod)
        return div, mod
    if dtypes.is_integer(dt) and np.dtype(dt).kind == "u":
        return (ew.div.bind(a, b) if want_div else None), (ew.rem.bind(a, b) if want_mod else None)
    r = ew.rem.bind(a, b)
    fix = _floor_fix(r, b, dt)
    div = mod = None
    if want_div:
        q = ew.div.bind(a, b)
        div = ew.select.bind(fix, ew.sub.bind(q, ops.literal(1, dt)), q)
    if want_mod:
        mod = ew.select.bind(fix, ew.add.bind(r, b), r)
    return div, mod


@_ufunc(_np("floor_divide"), 2)
def floor_divide(x1, x2, *, weak_ok=False):
    """`//`: division rounding toward minus infinity."""
    return _divmod_core(x1, x2, weak_ok, True, False)[0]


@_ufunc(_np("remainder", "mod"), 2, name="remainder")
def remainder(x1, x2, *, weak_ok=False):
    """`%`: the remainder with the sign of the divisor (Python's and NumPy's modulo)."""
    return _divmod_core(x1, x2, weak_ok, False, True)[1]


mod = remainder


def divmod_(x1, x2, *, weak_ok=False):
    """`divmod(x1, x2)`: (x1 // x2, x1 % x2), sharing the truncated remainder."""
    return _divmod_core(x1, x2, weak_ok, True, True)


@implements(np.divmod)
def _np_divmod(x1, x2, out=None):
    if out is not None:
        raise UnsupportedSyntaxError("np.divmod(..., out=...) is an in-place update",
                                     "assign the result instead: q, r = np.divmod(x, y)")
    return divmod_(x1, x2)


@_ufunc(_np("fmod"), 2)
def fmod(x1, x2, *, weak_ok=False):
    """The remainder with the sign of the dividend (C's fmod)."""
    (a, b), _, _ = _prep([x1, x2], weak_ok, _bool_to_int8)
    return ew.rem.bind(a, b)


def _static_int(x):
    """The value of a concrete integer exponent, or None."""
    if isinstance(x, (bool, int, np.integer, np.bool_)):
        return int(x)
    if isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iu":
        return int(x)
    return None


@_ufunc(_np("power"), 2)
def power(x1, x2, *, weak_ok=False):
    """`**`. A concrete integer exponent stages `integer_pow` (exact, and its derivative
    needs no log); anything else stages `pow` on floats."""
    x1, x2 = asarray(x1), asarray(x2)
    n = _static_int(x2)
    dt, all_weak = result_dtype(x1, x2)
    if dtypes.is_bool(dt):
        dt = dtypes.int8
    weak = weak_ok and all_weak
    if n is not None and not dtypes.is_inexact(dt) and n < 0:
        if not weak:
            raise ValueError("Integers to negative integer powers are not allowed.")
        dt = dtypes.default_float()    # Python: 2 ** -1 == 0.5
    if n is not None:
        (a,) = cast_all([x1], dt, weak)
        return ew.integer_pow.bind(a, y=n)
    if not dtypes.is_inexact(dt):
        raise UnsupportedFunctionError(
            f"integer power with a staged integer exponent ({aval(x1).str_short()} ** "
            f"{aval(x2).str_short()}) is not supported",
            "use a concrete Python int exponent (x ** 3), or compute in floats: "
            "x.astype(float) ** y")
    a, b = cast_all([x1, x2], dt, weak)
    return ew.pow.bind(a, b)


@_ufunc(_np("float_power"), 2)
def float_power(x1, x2, *, weak_ok=False):
    """Power computed in float64 (complex128 for complex inputs)."""
    def rule(dt, weak):
        return dtypes.complex128 if dt.kind == "c" else dtypes.float64
    (a, b), _, _ = _prep([x1, x2], weak_ok, rule)
    return ew.pow.bind(a, b)


def _non_boolean(x, weak_ok: bool, refusal: str):
    """The operand of a unary ufunc that NumPy has no boolean loop for (`refusal` says so)."""
    (a,), dt, _ = _prep([x], weak_ok)
    if dtypes.is_bool(dt):
        raise ShapeError(refusal)
    return a


@_ufunc(_np("negative"), 1)
def negative(x, *, weak_ok=False):
    return ew.neg.bind(_non_boolean(x, weak_ok, _boolean_refusal(
        "negative, the `-` operator,", "the `~` operator or the logical_not function")))


@_ufunc(_np("positive"), 1)
def positive(x, *, weak_ok=False):
    return _materialize(_non_boolean(
        x, weak_ok, "numpy boolean positive, the unary `+` operator, is not supported"))


@_ufunc(_np("absolute"), 1, name="absolute")
def absolute(x, *, weak_ok=False):
    """|x|; of a complex x the modulus, a real array (float64 for complex128)."""
    (a,), dt, _ = _prep([x], weak_ok)
    if dtypes.is_bool(dt) or dt.kind == "u":
        return _materialize(a)
    return ew.abs.bind(a)


abs = absolute


@_ufunc(_np("fabs"), 1)
def fabs(x, *, weak_ok=False):
    (a,), _, _ = _prep([x], weak_ok, _float_rule)
    return ew.abs.bind(a)


@_ufunc(_np("sign"), 1)
def sign(x, *, weak_ok=False):
    return ew.sign.bind(_non_boolean(
        x, weak_ok, "np.sign is not defined for booleans (NumPy has no loop for it)"))


@_ufunc(_np("square"), 1)
def square(x, *, weak_ok=False):
    (a,), _, _ = _prep([x], weak_ok, _bool_to_int8)
    return ew.integer_pow.bind(a, y=2)


@_ufunc(_np("reciprocal"), 1)
def reciprocal(x, *, weak_ok=False):
    """1 / x in x's dtype (integers divide truncating, as NumPy's integer loop does)."""
    (a,), dt, _ = _prep([x], weak_ok, _bool_to_int8)
    return ew.div.bind(ops.literal(1, dt), a)


# ---------------------------------------------------------------------------------------
# Float-only unary functions


def _float_unary(np_names, prim, name=None):
    @_ufunc(_np(*np_names), 1, name=name or np_names[0])
    def core(x, *, weak_ok=False):
        (a,), _, _ = _prep([x], weak_ok, _float_rule)
        return prim.bind(a)
    core.__doc__ = f"np.{np_names[0]}: the `{prim.name}` primitive on floats."
    return core


exp = _float_unary(["exp"], ew.exp)
expm1 = _float_unary(["expm1"], ew.expm1)
log = _float_unary(["log"], ew.log)
log1p = _float_unary(["log1p"], ew.log1p)
sqrt = _float_unary(["sqrt"], ew.sqrt)
cbrt = _float_unary(["cbrt"], ew.cbrt)
sin = _float_unary(["sin"], ew.sin)
cos = _float_unary(["cos"], ew.cos)
tan = _float_unary(["tan"], ew.tan)
arcsin = _float_unary(["arcsin"], ew.asin)
arccos = _float_unary(["arccos"], ew.acos)
arctan = _float_unary(["arctan"], ew.atan)
sinh = _float_unary(["sinh"], ew.sinh)
cosh = _float_unary(["cosh"], ew.cosh)
tanh = _float_unary(["tanh"], ew.tanh)
arcsinh = _float_unary(["arcsinh"], ew.asinh)
arccosh = _float_unary(["arccosh"], ew.acosh)
arctanh = _float_unary(["arctanh"], ew.atanh)


@_ufunc(_np("exp2"), 1)
def exp2(x, *, weak_ok=False):
    """2 ** x, as pow(2, x): exact at integers."""
    (a,), dt, _ = _prep([x], weak_ok, _float_rule)
    return ew.pow.bind(ops.literal(2.0, dt), a)


def _log_base(np_name, base):
    @_ufunc(_np(np_name), 1, name=np_name)
    def core(x, *, weak_ok=False):
        (a,), dt, _ = _prep([x], weak_ok, _float_rule)
        return ew.div.bind(ew.log.bind(a), ops.literal(_pymath.log(base), dt))
    core.__doc__ = f"np.{np_name}: log(x) / log({base})."
    return core


log2 = _log_base("log2", 2)
log10 = _log_base("log10", 10)


def _unary_not_exported(prim):
    def fn(x):
        (a,), _, _ = _prep([x], False, _float_rule)
        return prim.bind(a)
    fn.__name__ = prim.name
    fn.__doc__ = f"The `{prim.name}` primitive on floats (integers convert as np.exp's do)."
    return fn


# Special functions without a NumPy name (scipy.special's erf, gammaln, psi, expit).
erf = _unary_not_exported(ew.erf)
lgamma = _unary_not_exported(ew.lgamma)
digamma = _unary_not_exported(ew.digamma)
logistic = _unary_not_exported(ew.logistic)


def _refuse_complex(name: str, dt):
    """For the functions NumPy has no complex loop for, whose formula here would accept one."""
    if dt.kind == "c":
        raise ShapeError(f"np.{name} is not defined for complex numbers (NumPy has no loop for them)",
                         "apply it to np.real(z) or np.imag(z)")


@_ufunc(_np("deg2rad", "radians"), 1, name="deg2rad")
def deg2rad(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok, _float_rule)
    _refuse_complex("deg2rad", dt)
    return ew.mul.bind(a, ops.literal(np.pi / 180.0, dt))


@_ufunc(_np("rad2deg", "degrees"), 1, name="rad2deg")
def rad2deg(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok, _float_rule)
    _refuse_complex("rad2deg", dt)
    return ew.mul.bind(a, ops.literal(180.0 / np.pi, dt))


radians = deg2rad
degrees = rad2deg


@implements(np.sinc)
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 — computed as NumPy does (pi x is nudged to eps at 0),
    which also makes every non-float input float64."""
    x = asarray(x)
    a = aval(x)
    dt = a.dtype if dtypes.is_inexact(a.dtype) else dtypes.default_float()
    (x,) = cast_all([x], dt, False)
    x = ew.mul.bind(x, ops.literal(np.pi, dt))
    eps = float(np.finfo(dt).eps) if dt.kind == "f" else 1e-20
    y = ew.select.bind(ew.ne.bind(x, ops.literal(0, dt)), x, ops.literal(eps, dt))
    return ew.div.bind(ew.sin.bind(y), y)


# ---------------------------------------------------------------------------------------
# Binary float functions


@_ufunc(_np("arctan2"), 2)
def arctan2(x1, x2, *, weak_ok=False):
    (a, b), _, _ = _prep([x1, x2], weak_ok, _float_rule)
    return ew.atan2.bind(a, b)


def _larger_first(a, b):
    """(larger, smaller, a_is_larger) of `a` and `b`, chosen by one comparison.

    Not max and min: their derivatives split a tie evenly, so at a == b the two would
    swap tangents and a formula in (larger, smaller) that is smooth in (a, b) — as
    hypot's and logaddexp's are — would lose its curvature there. With one predicate
    every order of derivative at a tie is that of the formula for a >= b, which is
    exact on both sides."""
    a_is_larger = ew.ge.bind(a, b)
    return ew.select.bind(a_is_larger, a, b), ew.select.bind(a_is_larger, b, a), a_is_larger


@_ufunc(_np("hypot"), 2)
def hypot(x1, x2, *, weak_ok=False):
    """sqrt(x1² + x2²) without overflow: big * sqrt(1 + (small / big)²); an infinite
    operand gives inf (even beside nan, as C's hypot). At x1 = x2 = 0, where hypot has
    no derivative, the gradient is (½, ½) as JAX's (the tie of np.maximum)."""
    (a, b), dt, _ = _prep([x1, x2], weak_ok, _float_rule)
    a, b = ew.abs.bind(a), ew.abs.bind(b)
    big, small, _ = _larger_first(a, b)
    zero, one, inf = (ops.literal(v, dt) for v in (0, 1, np.inf))
    big_is_zero = ew.eq.bind(big, zero)
    ratio = ew.div.bind(small, ew.select.bind(big_is_zero, one, big))
    out = ew.mul.bind(big, ew.sqrt.bind(ew.add.bind(one, ew.integer_pow.bind(ratio, y=2))))
    out = ew.select.bind(big_is_zero, ew.max.bind(a, b), out)
    infinite = ew.or_.bind(ew.eq.bind(a, inf), ew.eq.bind(b, inf))
    return ew.select.bind(infinite, inf, out)


def _logaddexp_core(x1, x2, weak_ok, softplus_of_gap):
    """max + softplus(-|x1 - x2|), with `softplus_of_gap(gap)` the base's log1p of its
    power of the gap (gap <= 0, so nothing overflows). Where x1 - x2 is nan (a nan
    operand, or two equal infinities) the result is x1 + x2: nan, inf or -inf. Between
    equal infinities the gap is taken as 0, so the derivative there is x1 + x2's (1, 1),
    with no nan from the branch not taken; a nan operand gives nan derivatives."""
    (a, b), dt, _ = _prep([x1, x2], weak_ok, _float_rule)
    big, _, a_is_larger = _larger_first(a, b)
    delta = ew.sub.bind(a, b)
    if _finite_constant(a) or _finite_constant(b):
        # (`logaddexp(0, logits)`: no equal infinities, and a nan operand makes the gap,
        # and so the result, nan already; the guards would only cost the derivative.)
        gap = ew.select.bind(a_is_larger, ew.neg.bind(delta), delta)
        return ew.add.bind(big, softplus_of_gap(gap, dt))
    undefined = ew.ne.bind(delta, delta)
    equal_infinities = ew.and_.bind(ew.eq.bind(a, b), undefined)
    delta = ew.select.bind(equal_infinities, ops.literal(0, dt), delta)
    gap = ew.select.bind(a_is_larger, ew.neg.bind(delta), delta)   # -|x1 - x2|
    soft = ew.add.bind(big, softplus_of_gap(gap, dt))
    return ew.select.bind(undefined, ew.add.bind(a, b), soft)


def _finite_constant(x) -> bool:
    """Whether operand `x` is a constant (a literal or a NumPy value, not staged) with no
    infinity or nan."""
    if isinstance(x, Tracer):
        return False
    return bool(np.all(np.isfinite(literal_value(x) if isinstance(x, Literal) else np.asarray(x))))


@_ufunc(_np("logaddexp"), 2)
def logaddexp(x1, x2, *, weak_ok=False):
    """log(exp(x1) + exp(x2)) = max + log1p(exp(-|x1 - x2|)); the derivative at x1 = x2
    is ½ each, as every derivative there is that of the smooth function."""
    return _logaddexp_core(x1, x2, weak_ok, lambda gap, dt: ew.log1p.bind(ew.exp.bind(gap)))


@_ufunc(_np("logaddexp2"), 2)
def logaddexp2(x1, x2, *, weak_ok=False):
    """log2(2**x1 + 2**x2) = max + log1p(2 ** -|x1 - x2|) / log(2)."""
    def softplus2(gap, dt):
        tail = ew.log1p.bind(ew.pow.bind(ops.literal(2.0, dt), gap))
        return ew.div.bind(tail, ops.literal(_pymath.log(2.0), dt))
    return _logaddexp_core(x1, x2, weak_ok, softplus2)


@_ufunc(_np("heaviside"), 2)
def heaviside(x1, x2, *, weak_ok=False):
    """0 for x1 < 0, x2 at 0, 1 for x1 > 0 (nan stays nan): (sign(x1) + 1) / 2 off zero."""
    (a, b), dt, _ = _prep([x1, x2], weak_ok, _float_rule)
    step = ew.mul.bind(ew.add.bind(ew.sign.bind(a), ops.literal(1, dt)), ops.literal(0.5, dt))
    return ew.select.bind(ew.eq.bind(a, ops.literal(0, dt)), b, step)


# ---------------------------------------------------------------------------------------
# Rounding


@_ufunc(_np("floor"), 1)
def floor(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok)
    return ew.floor.bind(a) if dtypes.is_inexact(dt) else _materialize(a)


@_ufunc(_np("ceil"), 1)
def ceil(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok)
    return ew.ceil.bind(a) if dtypes.is_inexact(dt) else _materialize(a)


@_ufunc(_np("trunc"), 1)
def trunc(x, *, weak_ok=False):
    """Rounds toward zero: ceil below zero, floor above."""
    (a,), dt, _ = _prep([x], weak_ok)
    return ops.trunc(a) if dtypes.is_inexact(dt) else _materialize(a)


@implements(*_np("fix"))
def fix(x, out=None):
    if out is not None:
        raise UnsupportedSyntaxError("np.fix(..., out=...) is an in-place update",
                                     "assign the result instead: y = np.fix(x)")
    return trunc(x)


@_ufunc(_np("rint"), 1)
def rint(x, *, weak_ok=False):
    """Rounds half to even; integers and booleans become floats, as in NumPy."""
    integral = not dtypes.is_inexact(aval(asarray(x)).dtype)
    (a,), dt, _ = _prep([x], weak_ok, _float_rule)
    if integral:
        return _materialize(a)      # already integral: the conversion is the rounding
    if dt.kind == "c":
        return _on_each_part(rint, a)
    return ew.round.bind(a)


def _on_each_part(fn, z):
    """`fn` of the real and of the imaginary part of z, put together: how NumPy rounds
    complex numbers and replaces their NaNs (scaling z by a complex 10**d instead would
    turn an infinite part into NaN)."""
    return cx.complex.bind(fn(cx.real.bind(z)), fn(cx.imag.bind(z)))


def round(a, decimals=0, out=None):
    """np.round: half to even at `decimals` digits, as NumPy computes it
    (rint(x * 10**d) / 10**d); integers stay integers."""
    if out is not None:
        raise UnsupportedSyntaxError("np.round(..., out=...) is an in-place update",
                                     "assign the result instead: y = np.round(x)")
    decimals = _static_decimals(decimals)
    (x,), dt, _ = _prep([a], False)
    if dtypes.is_bool(dt):
        if decimals != 0:
            raise ShapeError("np.round of a boolean array with decimals != 0 is not "
                             "supported (NumPy cannot cast the result back to bool)")
        (x,), dt, _ = _prep([x], False, _float_rule)
    if dtypes.is_inexact(dt):
        if dt.kind == "c":
            return _on_each_part(lambda part: round(part, decimals), x)
        if decimals == 0:
            return ew.round.bind(x)
        if decimals > 0:
            f = ops.literal(10.0 ** decimals, dt)
            return ew.div.bind(ew.round.bind(ew.mul.bind(x, f)), f)
        f = ops.literal(10.0 ** -decimals, dt)
        return ew.mul.bind(ew.round.bind(ew.div.bind(x, f)), f)
    if decimals >= 0:
        return _materialize(x)
    # Integers with negative decimals round in float64 and convert back, as NumPy does.
    f64 = dtypes.default_float()
    y = convert(x, f64)
    f = ops.literal(10.0 ** -decimals, f64)
    y = ew.mul.bind(ew.round.bind(ew.div.bind(y, f)), f)
    return convert(y, dt)


def _static_decimals(decimals) -> int:
    if isinstance(decimals, Tracer):
        raise UnsupportedFunctionError("np.round's `decimals` must be a concrete int, "
                                       "not a staged value")
    return int(decimals)


around = round
implements(*_np("round", "around"))(round)


# ---------------------------------------------------------------------------------------
# Maximum, minimum, clip, where


maximum = _binary_with_bool_loop("maximum", ew.max, ew.or_, "Elementwise max; nan propagates.")
minimum = _binary_with_bool_loop("minimum", ew.min, ew.and_, "Elementwise min; nan propagates.")


def _fmaxmin(x1, x2, weak_ok, prim, bool_prim, picks_x1):
    """x1 where `picks_x1(x1, x2)` holds or x2 is nan, else x2 (so nan only if both are).
    A tie picks x2, whose tangent it then takes whole, as jnp.fmax and jnp.fmin do."""
    (a, b), dt, _ = _prep([x1, x2], weak_ok)
    if dtypes.is_bool(dt):
        return bool_prim.bind(a, b)
    if not dtypes.is_inexact(dt):
        return prim.bind(a, b)
    return ew.select.bind(ew.or_.bind(picks_x1.bind(a, b), ew.ne.bind(b, b)), a, b)


@_ufunc(_np("fmax"), 2)
def fmax(x1, x2, *, weak_ok=False):
    """Elementwise max ignoring nan."""
    return _fmaxmin(x1, x2, weak_ok, ew.max, ew.or_, ew.gt)


@_ufunc(_np("fmin"), 2)
def fmin(x1, x2, *, weak_ok=False):
    """Elementwise min ignoring nan."""
    return _fmaxmin(x1, x2, weak_ok, ew.min, ew.and_, ew.lt)


_NO_VALUE = object()


@implements(np.clip)
def clip(a, a_min=_NO_VALUE, a_max=_NO_VALUE, out=None, *, min=_NO_VALUE, max=_NO_VALUE,
         **kwargs):
    """min(max(a, a_min), a_max), promoting all three as NumPy does; None drops a bound."""
    if out is not None:
        raise UnsupportedSyntaxError("np.clip(..., out=...) is an in-place update",
                                     "assign the result instead: y = np.clip(x, lo, hi)")
    if min is not _NO_VALUE:
        if a_min is not _NO_VALUE:
            raise TypeError("clip() got both a_min and min")
        a_min = min
    if max is not _NO_VALUE:
        if a_max is not _NO_VALUE:
            raise TypeError("clip() got both a_max and max")
        a_max = max
    lo = None if a_min is _NO_VALUE else a_min
    hi = None if a_max is _NO_VALUE else a_max
    bounds = [b for b in (lo, hi) if b is not None]
    ops, dt, _ = _prep([a] + bounds, False)
    x = ops[0]
    lo_op = ops[1] if lo is not None else None
    hi_op = ops[-1] if hi is not None else None
    if lo_op is not None and hi_op is not None and not dtypes.is_bool(dt):
        return ew.clamp.bind(lo_op, x, hi_op)
    if lo_op is not None:
        x = (ew.or_ if dtypes.is_bool(dt) else ew.max).bind(x, lo_op)
    if hi_op is not None:
        x = (ew.and_ if dtypes.is_bool(dt) else ew.min).bind(x, hi_op)
    return _materialize(x)


def _to_bool(x):
    """NumPy's truthiness of an operand: x != 0 (already-boolean operands pass)."""
    a = aval(x)
    if dtypes.is_bool(a.dtype):
        return x
    if isinstance(x, Literal):
        return ops.literal(bool(x.value), dtypes.bool_, a.weak_type)
    return ew.ne.bind(x, ops.literal(0, a.dtype))


@implements(np.where)
def where(condition, x=_NO_VALUE, y=_NO_VALUE):
    """np.where(condition, x, y): the `select` primitive, with x and y promoted together."""
    if x is _NO_VALUE or y is _NO_VALUE:
        if x is _NO_VALUE and y is _NO_VALUE:
            raise UnsupportedFunctionError(
                "np.where(condition) with one argument returns the indices where condition "
                "is true; their number depends on the data, so the result has no static shape",
                "use the three-argument form np.where(condition, x, y), or a mask: "
                "np.sum(np.where(condition, values, 0))")
        raise TypeError("np.where() takes either 1 or 3 arguments")
    (cond,), _, _ = _prep([condition], False)
    pred = _to_bool(cond)
    (a, b), _, _ = _prep([x, y], False)
    return ew.select.bind(pred, a, b)


# ---------------------------------------------------------------------------------------
# Floating-point classification and cleanup


@_ufunc(_np("isnan"), 1)
def isnan(x, *, weak_ok=False):
    """x != x (always False for integers)."""
    (a,), _, _ = _prep([x], weak_ok)
    return ew.ne.bind(a, a)


def _of_both_parts(classify, a, combine):
    """`classify` of a real array; of a complex one, `combine` of it on each part (NumPy:
    a complex number is infinite if either part is, finite if both are)."""
    if not dtypes.is_complex(aval(a).dtype):
        return classify(a)
    return combine.bind(classify(cx.real.bind(a)), classify(cx.imag.bind(a)))


@_ufunc(_np("isinf"), 1)
def isinf(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok)
    if not dtypes.is_inexact(dt):
        return ew.ne.bind(a, a)
    return _of_both_parts(lambda part: ew.eq.bind(ew.abs.bind(part), ops.literal(np.inf, aval(part).dtype)),
                          a, ew.or_)


@_ufunc(_np("isfinite"), 1)
def isfinite(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok)
    if not dtypes.is_inexact(dt):
        return ew.eq.bind(a, a)
    return _of_both_parts(ew.is_finite.bind, a, ew.and_)


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """nan → `nan`, +inf → `posinf` (default: the largest finite float), -inf → `neginf`."""
    (a,), dt, _ = _prep([x], False)
    if not dtypes.is_inexact(dt):
        return _materialize(a)
    if dt.kind == "c":
        return _on_each_part(lambda part: nan_to_num(part, copy, nan, posinf, neginf), a)
    info = np.finfo(dt)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    nan_v, pos_v, neg_v = cast_all([nan, posinf, neginf], dt, True)
    a = ew.select.bind(ew.ne.bind(a, a), nan_v, a)
    a = ew.select.bind(ew.eq.bind(a, ops.literal(np.inf, dt)), pos_v, a)
    return ew.select.bind(ew.eq.bind(a, ops.literal(-np.inf, dt)), neg_v, a)


def _python_attribute(value, name):
    """np.real(3) is `(3).real`: a Python scalar's attribute, still a (weak) Python scalar."""
    result = getattr(value, name)
    return _materialize(ops.literal(result, dtypes.dtype_of_python_scalar(result), weak=True))


def _complex_part(name: str, val, part, of_real_array):
    """np.real/np.imag: a Python scalar's attribute, the `part` primitive of a complex
    array, or `of_real_array(a)` for a real one (NumPy returns the array itself, or zeros)."""
    if is_python_scalar(val):
        return _python_attribute(val, name)
    (a,), dt, _ = _prep([val], False)
    return part.bind(a) if dt.kind == "c" else of_real_array(a)


@implements(np.real)
def real(val):
    return _complex_part("real", val, cx.real, _materialize)


@implements(np.imag)
def imag(val):
    return _complex_part("imag", val, cx.imag, zeros_like)


@_ufunc(_np("conjugate"), 1, name="conjugate")
def conjugate(x, *, weak_ok=False):
    (a,), dt, _ = _prep([x], weak_ok, _bool_to_int8)
    return cx.conj.bind(a) if dt.kind == "c" else _materialize(a)


conj = conjugate


# ---------------------------------------------------------------------------------------
# Comparisons


def _not(x):
    """Bitwise not; a boolean literal is negated here (Python's `~True` is -2)."""
    if isinstance(x, Literal) and dtypes.is_bool(x.aval.dtype):
        return Literal(not x.value, x.aval)
    return ew.not_.bind(x)


def _comparison(np_name, prim, bool_form):
    """`bool_form(a, b)` compares booleans with logic (the ordering primitives take numbers)."""
    @_ufunc(_np(np_name), 2, name=np_name)
    def core(x1, x2, *, weak_ok=False):
        constant = _out_of_range_comparison(np_name, x1, x2, weak_ok)
        if constant is not None:
            return constant
        (a, b), dt, _ = _prep([x1, x2], weak_ok)
        if dtypes.is_bool(dt) and bool_form is not None:
            return bool_form(a, b)
        return prim.bind(a, b)
    core.__doc__ = f"np.{np_name}: the `{prim.name}` primitive after NumPy's promotion."
    return core


_PY_COMPARE = {"equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
               "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b,
               "greater": lambda a, b: a > b, "greater_equal": lambda a, b: a >= b}


def _out_of_range_comparison(np_name, x1, x2, weak_ok):
    """NumPy 2 compares an integer array with a Python int its dtype cannot hold
    (`uint8_array > -1`) correctly: the answer is the same for every element."""
    xs = [asarray(x1), asarray(x2)]
    dt, _ = result_dtype(*xs)
    if not dtypes.is_integer(dt):
        return None
    for i, x in enumerate(xs):
        if is_python_scalar(x) and not isinstance(x, bool) and isinstance(x, int):
            info = np.iinfo(dt)
            if info.min <= x <= info.max:
                continue
            other = xs[1 - i]
            if is_python_scalar(other):
                return None
            inside = int(info.min)
            answer = _PY_COMPARE[np_name](*((inside, x) if i == 1 else (x, inside)))
            (o,), _, _ = _prep([other], weak_ok)
            return (ew.eq if answer else ew.ne).bind(o, o)
    return None


equal = _comparison("equal", ew.eq, None)
not_equal = _comparison("not_equal", ew.ne, None)
less = _comparison("less", ew.lt, lambda a, b: ew.and_.bind(_not(a), b))
less_equal = _comparison("less_equal", ew.le, lambda a, b: ew.or_.bind(_not(a), b))
greater = _comparison("greater", ew.gt, lambda a, b: ew.and_.bind(a, _not(b)))
greater_equal = _comparison("greater_equal", ew.ge, lambda a, b: ew.or_.bind(a, _not(b)))


# ---------------------------------------------------------------------------------------
# Logic and bits


def _logical_operands(xs, weak_ok):
    ops = []
    for x in xs:
        (a,), _, _ = _prep([x], weak_ok)
        ops.append(_to_bool(a))
    return ops


@_ufunc(_np("logical_and"), 2)
def logical_and(x1, x2, *, weak_ok=False):
    return ew.and_.bind(*_logical_operands([x1, x2], weak_ok))


@_ufunc(_np("logical_or"), 2)
def logical_or(x1, x2, *, weak_ok=False):
    return ew.or_.bind(*_logical_operands([x1, x2], weak_ok))


@_ufunc(_np("logical_xor"), 2)
def logical_xor(x1, x2, *, weak_ok=False):
    return ew.xor.bind(*_logical_operands([x1, x2], weak_ok))


@_ufunc(_np("logical_not"), 1)
def logical_not(x, *, weak_ok=False):
    return _materialize(_not(*_logical_operands([x], weak_ok)))


def _bitwise(np_name, prim):
    @_ufunc(_np(np_name), 2, name=np_name)
    def core(x1, x2, *, weak_ok=False):
        (a, b), dt, _ = _prep([x1, x2], weak_ok)
        if not (dtypes.is_integer(dt) or dtypes.is_bool(dt)):
            raise ShapeError(f"np.{np_name} needs integer or boolean operands, got "
                             f"{aval(x1).str_short() if not is_python_scalar(x1) else type(x1).__name__}"
                             f" and {aval(x2).str_short() if not is_python_scalar(x2) else type(x2).__name__}")
        return prim.bind(a, b)
    core.__doc__ = f"np.{np_name} on integers and booleans."
    return core


bitwise_and = _bitwise("bitwise_and", ew.and_)
bitwise_or = _bitwise("bitwise_or", ew.or_)
bitwise_xor = _bitwise("bitwise_xor", ew.xor)


@_ufunc(_np("invert", "bitwise_not"), 1, name="invert")
def invert(x, *, weak_ok=False):
    """`~`: bitwise not (logical not on booleans)."""
    (a,), dt, _ = _prep([x], weak_ok)
    if not (dtypes.is_integer(dt) or dtypes.is_bool(dt)):
        raise ShapeError(f"np.invert (the `~` operator) needs integer or boolean operands, "
                         f"got {aval(a).str_short()}")
    return _materialize(_not(a))


bitwise_not = invert

