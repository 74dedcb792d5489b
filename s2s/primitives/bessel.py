"""Bessel functions of real argument: `bessel_jv(v, x)` (J_v, real v >= 0 or integer v),
`bessel_yn(n, x)` (Y_n, integer n) and `bessel_iv[scaled](v, x)` (I_v, and I_v e^-|x|
when scaled), behind scipy.special's jv/jn, yn, iv, ive and their fixed orders (j0, y1,
i0e ...).

The order is an operand like x (SciPy's are ufuncs in both), of x's dtype. Their NumPy
impl and emitted Python are `rt.jv`, `rt.yn`, `rt.iv`, `rt.ive`; their StableHLO lowering
stages the very functions those run (`s2s_runtime.bessel.bessel_j`, `bessel_y`,
`bessel_iv`) with staged operations, loops becoming `while_loop`s, so both backends run
one algorithm, in float64. Derivatives in x follow from the recurrences (J_v' = (J_v-1 - J_v+1)/2, ...), so
every order of derivative is again these primitives; derivatives in the order are
refused, as JAX refuses them.
"""
from __future__ import annotations

import numpy as np
import s2s_runtime as rt
from s2s_runtime import bessel as rt_bessel

from s2s import dtypes
from s2s.core import ClosedJaxpr, ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.passes.tangents import is_zero
from s2s.primitives import ops
from s2s.primitives.elementwise import broadcast_shapes
from s2s.primitives.staged_algorithms import StagedFunctions, staged_jaxpr
from s2s.staging import Primitive


def _bessel_abstract(name: str):
    def abstract(order, x, **params):
        if not (order.dtype == x.dtype and x.dtype.kind == "f"):
            raise ShapeError(f"{name} needs a real floating order and argument of one dtype, got "
                             f"{order.str_short()}, {x.str_short()}")
        return ShapedArray(broadcast_shapes(order.shape, x.shape), x.dtype,
                           order.weak_type and x.weak_type)
    return abstract


bessel_jv = Primitive("bessel_jv", _bessel_abstract("bessel_jv"), rt.jv)
bessel_yn = Primitive("bessel_yn", _bessel_abstract("bessel_yn"), rt.yn)
bessel_iv = Primitive("bessel_iv", _bessel_abstract("bessel_iv"),
                      lambda v, x, scaled: (rt.ive if scaled else rt.iv)(v, x))

# ---------------------------------------------------------------------------------------
# Python emission and batching: elementwise calls of the runtime's functions.

register(bessel_jv, lambda eqn, v, x: call("rt.jv", v, x))
register(bessel_yn, lambda eqn, n, x: call("rt.yn", n, x))
register(bessel_iv, lambda eqn, v, x: call("rt.ive" if eqn.params["scaled"] else "rt.iv", v, x))
for _prim in (bessel_jv, bessel_yn, bessel_iv):
    _vmap.broadcasting(_prim)

# ---------------------------------------------------------------------------------------
# jvp: in x only.


def _constant_order(name: str, order_tangent) -> None:
    if not is_zero(order_tangent):
        raise UnsupportedFunctionError(
            f"the derivative of {name} with respect to its order is not supported (JAX does not "
            "have it either)", "differentiate with respect to x only: pass the order as a constant, "
            "or hold it with s2s.stop_gradient")


def _order_step(order, step: int, dtype):
    """order + step, with primitives: the order is often a literal or a NumPy constant,
    which have no operators of ours (x, which has a tangent, is staged and gives the dtype)."""
    return ops.add(order, ops.literal(step, dtype))


def _order_recurrence_derivative(prim, order, x, sign: int, **params):
    """C_v' for C = J (sign -1) or I (sign 1): (C_v-1 + sign C_v+1) / 2 for |v| >= 1, and
    sign C_v+1 + (v/x) C_v below (where v - 1 would be a negative non-integer order, which
    needs Y or K), whose (v/x) C_v is 0 for v = 0 (C_0' = sign C_1)."""
    dtype = x.aval.dtype
    zero, one, signed = ops.literal(0, dtype), ops.literal(1, dtype), ops.literal(sign, dtype)
    recurrence = ops.ge(ops.abs_(order), one)
    out = prim.bind(order, x, **params)
    above = prim.bind(_order_step(order, 1, dtype), x, **params)
    # v itself where v - 1 is not used: its nan would reach the gradient through 0 * nan.
    below = prim.bind(ops.select(recurrence, _order_step(order, -1, dtype), order), x, **params)
    v_over_x = ops.select(ops.eq(order, zero), zero, ops.div(order, x))
    derivative = ops.select(recurrence, (below + signed * above) * ops.literal(0.5, dtype),
                            signed * above + v_over_x * out)
    return out, derivative


def _jv_jvp(primals, tangents):
    (v, x), (tv, tx) = primals, tangents
    _constant_order("scipy.special.jv", tv)
    out, derivative = _order_recurrence_derivative(bessel_jv, v, x, -1)
    return out, tx * derivative


def _yn_jvp(primals, tangents):
    """Y_n' = (Y_n-1 - Y_n+1) / 2 (Y_-n = (-1)^n Y_n keeps it right for n <= 0)."""
    (n, x), (tn, tx) = primals, tangents
    _constant_order("scipy.special.yn", tn)
    dtype = x.aval.dtype
    difference = bessel_yn.bind(_order_step(n, -1, dtype), x) - bessel_yn.bind(_order_step(n, 1, dtype), x)
    return bessel_yn.bind(n, x), tx * (difference * ops.literal(0.5, dtype))


def _iv_jvp(primals, tangents, scaled):
    """I_v' as J_v' with the other sign; the scaled e^-|x| I_v adds -sign(x) e^-|x| I_v."""
    (v, x), (tv, tx) = primals, tangents
    _constant_order("scipy.special.ive" if scaled else "scipy.special.iv", tv)
    out, derivative = _order_recurrence_derivative(bessel_iv, v, x, 1, scaled=scaled)
    if scaled:
        derivative = derivative - ops.sign(x) * out
    return out, tx * derivative


_jvp.register(bessel_jv, _jv_jvp)
_jvp.register(bessel_yn, _yn_jvp)
_jvp.register(bessel_iv, _iv_jvp)

# ---------------------------------------------------------------------------------------
# StableHLO lowering: the runtime's algorithm, staged.


class _BesselStagedFunctions(StagedFunctions):
    """What `s2s_runtime.bessel`'s algorithms need, as staged float64 operations: the shared
    ones (Python numbers become literals, strong here, as the loops' carries are), these,
    and `loop`, a `while_loop` whose carry holds all it reads."""

    def __init__(self):
        super().__init__(dtypes.canonicalize_dtype(np.float64))

    def _operand(self, v):
        return ops.literal(v, self.dtype, weak=False) if isinstance(v, (int, float)) else v

    sqrt = staticmethod(ops.sqrt)
    sin = staticmethod(ops.sin)
    cos = staticmethod(ops.cos)
    floor = staticmethod(ops.floor)
    pow = staticmethod(ops.pow_)
    not_ = staticmethod(ops.not_)

    @staticmethod
    def max_all(x):
        return ops.reduce_max(x, tuple(range(len(x.aval.shape))))

    @staticmethod
    def any(x):
        return ops.reduce_or(x, tuple(range(len(x.aval.shape))))

    @staticmethod
    def loop(keep_going, step, carry):
        avals = [c.aval.strip_weak_type() for c in carry]
        condition, body = _staged(lambda *c: [keep_going(*c)], avals), _staged(step, avals)
        return ops.while_loop(*carry, cond_jaxpr=condition, body_jaxpr=body)


def _staged(fn, avals) -> ClosedJaxpr:
    """`fn` staged on arguments of `avals`, closed over nothing (as betainc's pieces are)."""
    return ClosedJaxpr(staged_jaxpr(fn, avals), [])


def _lowering(compute):
    """The lowering of a primitive whose value is `compute(order, x, fns, **params)`, run
    in float64 and converted to the result's dtype."""
    def lower(ctx, eqn, order, x):
        out = eqn.outvars[0].aval.strip_weak_type()
        fns = _BesselStagedFunctions()
        wide = out.update(dtype=fns.dtype)

        def in_float64(order, x):
            value = compute(ops.convert(order, wide.dtype), ops.convert(x, wide.dtype), fns,
                            **eqn.params)
            return [ops.convert(value, out.dtype)]
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(in_float64, [out, out]), [order, x])
    return lower


_hlo.register(bessel_jv, _lowering(rt_bessel.bessel_j), broadcasting=True)
_hlo.register(bessel_yn, _lowering(rt_bessel.bessel_y), broadcasting=True)
_hlo.register(bessel_iv, _lowering(rt_bessel.bessel_iv), broadcasting=True)
