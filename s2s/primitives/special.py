"""Special functions computed by an algorithm of several steps: betainc(a, b, x), the
regularized incomplete beta function I_x(a, b) (scipy.special.betainc), which Student's t
cdf needs, by a loop; erf_inv and erfc_inv (scipy.special.erfinv, erfcinv) by Newton
steps (their section below).

betainc's NumPy impl and emitted Python are `rt.betainc`; its StableHLO lowering is a
`stablehlo.while` whose start, step and finish are staged from the very functions
`rt.betainc` runs (`s2s_runtime.special.betainc_start` ...), given staged operations, so
the two backends run one algorithm. The derivative in x is the beta density; derivatives
in a and b are refused, as JAX refuses them.
"""
from __future__ import annotations

import numpy as np
import s2s_runtime as rt
from s2s_runtime import special as rt_special

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.passes.tangents import is_zero
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.staging import JaxprBuilder, Primitive


def _betainc_abstract(a, b, x):
    if not (a.dtype == b.dtype == x.dtype and dtypes.is_inexact(a.dtype) and a.dtype.kind == "f"):
        raise ShapeError("betainc needs real floating operands of one dtype, got "
                         + ", ".join(v.str_short() for v in (a, b, x)))
    return ShapedArray(ew.broadcast_shapes(a.shape, b.shape, x.shape), a.dtype,
                       a.weak_type and b.weak_type and x.weak_type)


betainc = Primitive("betainc", _betainc_abstract, rt.betainc)
register(betainc, lambda eqn, a, b, x: call("rt.betainc", a, b, x))
_vmap.broadcasting(betainc)


def _betainc_jvp(primals, tangents):
    (a, b, x), (ta, tb, tx) = primals, tangents
    if not (is_zero(ta) and is_zero(tb)):
        raise UnsupportedFunctionError(
            "the derivative of betainc(a, b, x) (and of scipy.stats.t.cdf) with respect to a "
            "and b (the degrees of freedom) is not supported (JAX does not have it either)",
            "differentiate with respect to x only: pass a, b (df) as constants, or hold them "
            "with s2s.stop_gradient")
    out = betainc.bind(a, b, x)
    # d/dx I_x(a, b) = x^(a-1) (1-x)^(b-1) / B(a, b), the beta density. Primitives on the
    # primals: a and b are often literals (t.cdf's 1/2), which have no operators.
    one = ops.literal(1, out.aval.dtype)
    log_beta = ew.sub.bind(ew.add.bind(ew.lgamma.bind(a), ew.lgamma.bind(b)), ew.lgamma.bind(ew.add.bind(a, b)))
    log_density = ew.sub.bind(ew.add.bind(ew.mul.bind(ew.sub.bind(a, one), ew.log.bind(x)),
                                          ew.mul.bind(ew.sub.bind(b, one), ew.log1p.bind(ew.neg.bind(x)))),
                              log_beta)
    return out, tx * ew.exp.bind(log_density)


_jvp.register(betainc, _betainc_jvp)


class _StagedFunctions:
    """What rt.betainc's steps need, as staged operations in `dtype` (Python numbers, such
    as the tiny guard value, become literals of it)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def _operand(self, v):
        return ops.literal(v, self.dtype) if isinstance(v, (int, float)) else v

    def select(self, pred, on_true, on_false):
        return ew.select.bind(pred, self._operand(on_true), self._operand(on_false))

    abs = staticmethod(ew.abs.bind)
    exp = staticmethod(ew.exp.bind)
    log = staticmethod(ew.log.bind)
    log1p = staticmethod(ew.log1p.bind)
    lgamma = staticmethod(ew.lgamma.bind)


def _staged(fn, avals):
    """`fn` staged on arguments of `avals`: a jaxpr to lower inline."""
    with JaxprBuilder() as builder:
        outs = fn(*[builder.new_arg(a) for a in avals])
        closed = builder.build(list(outs))
    if closed.consts:
        raise AssertionError("betainc's lowering captured constants")
    return closed.jaxpr


def _lower_betainc(ctx, eqn, a, b, x):
    out = eqn.outvars[0].aval.strip_weak_type()
    dtype = out.dtype
    fns = _StagedFunctions(dtype)
    tiny, eps = float(np.finfo(dtype).tiny), float(np.finfo(dtype).eps)
    flag, scalar = out.update(dtype=dtypes.bool_), ShapedArray((), dtype)

    start = _staged(lambda a, b, x: rt_special.betainc_start(a, b, x, tiny, fns), [out] * 3)
    a_, b_, x_, swapped, front, c, d, h = _hlo.lower_jaxpr(ctx, start, [a, b, x])

    def condition(carry):
        m, delta = carry[0], carry[-1]
        def unconverged(m, delta):
            running = ew.le.bind(m, ops.literal(rt_special.BETAINC_MAX_STEPS, dtype))
            moving = ew.gt.bind(ew.abs.bind(delta - 1), ops.literal(eps, dtype))
            return [ew.and_.bind(running, ops.reduce_or(moving, tuple(range(len(out.shape)))))]
        return _hlo.lower_jaxpr(ctx, _staged(unconverged, [scalar, out]), [m, delta])

    def step(carry):
        def one_step(m, a, b, x, c, d, h, _):
            return [m + 1, a, b, x, *rt_special.betainc_step(a, b, x, m, c, d, h, tiny, fns)]
        return _hlo.lower_jaxpr(ctx, _staged(one_step, [scalar] + [out] * 7), carry)

    not_yet = ctx.constant(2, dtype, out.shape)
    *_, h, _ = _hlo.while_op(ctx, [ctx.constant(1, dtype), a_, b_, x_, c, d, h, not_yet],
                             [scalar] + [out] * 7, ["m", "a", "b", "x", "c", "d", "h", "delta"],
                             condition, step)

    def finish(*operands):
        return [rt_special.betainc_finish(*operands, fns)]
    return _hlo.lower_jaxpr(ctx, _staged(finish, [out] * 3 + [flag] + [out] * 2),
                            [a, b, x, swapped, front, h])


_hlo.register(betainc, _lower_betainc, broadcasting=True)


# ---------------------------------------------------------------------------------------
# erf_inv and erfc_inv, the inverses of erf and erfc (scipy.special.erfinv, erfcinv; the
# normal quantile is -sqrt(2) erfc_inv(2 p)). Two primitives, since neither inverse is the
# other's composition without losing digits: erfinv(1e-20) is 8.9e-21 where 1 - 1e-20 == 1,
# erfcinv(1e-300) is 26.2 where 1 - 1e-300 == 1. Their NumPy impls and emitted Python are
# `rt.erfinv`, `rt.erfcinv`; their lowerings stage the same algorithm
# (`s2s_runtime.special.inverse_erf`, `inverse_erfc`) with staged operations, rather than
# CHLO's erf_inv, which is 4e-14 off near x = 0.99998 in float64 (measured against SciPy;
# this algorithm: below 1e-15). The derivatives read the results: d erfinv(x)/dx =
# sqrt(pi)/2 e^(erfinv(x)^2), d erfcinv(y)/dy = -sqrt(pi)/2 e^(erfcinv(y)^2).


def _real_float_abstract(x):
    if not (dtypes.is_inexact(x.dtype) and x.dtype.kind == "f"):
        raise ShapeError(f"the inverse error functions need a real floating operand, got {x.str_short()}")
    return x


class _InverseErfStagedFunctions(_StagedFunctions):
    erf = staticmethod(ew.erf.bind)
    erfc = staticmethod(ew.erfc.bind)
    sqrt = staticmethod(ew.sqrt.bind)


def _inverse_error_function(name: str, impl, emitted: str, algorithm, slope: float):
    prim = Primitive(name, _real_float_abstract, impl)
    register(prim, lambda eqn, x: call(emitted, x))
    _vmap.vectorized(prim)

    def jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y = prim.bind(x)
        return y, t * (slope * ew.exp.bind(y * y))
    _jvp.register(prim, jvp)

    def lower(ctx, eqn, x):
        aval = eqn.outvars[0].aval.strip_weak_type()
        fns = _InverseErfStagedFunctions(aval.dtype)
        return _hlo.lower_jaxpr(ctx, _staged(lambda v: [algorithm(v, fns)], [aval]), [x])
    _hlo.register(prim, lower, broadcasting=True)
    return prim


_HALF_SQRT_PI = 0.886226925452758   # sqrt(pi) / 2
erf_inv = _inverse_error_function("erf_inv", rt.erfinv, "rt.erfinv", rt_special.inverse_erf, _HALF_SQRT_PI)
erfc_inv = _inverse_error_function("erfc_inv", rt.erfcinv, "rt.erfcinv", rt_special.inverse_erfc,
                                   -_HALF_SQRT_PI)
