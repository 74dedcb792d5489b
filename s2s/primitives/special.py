"""Special functions computed by an algorithm of several steps: betainc(a, b, x), the
regularized incomplete beta function I_x(a, b) (scipy.special.betainc), which Student's t
cdf needs, by a loop; erf_inv and erfc_inv (scipy.special.erfinv, erfcinv) by Newton
steps; and the StableHLO lowering of erf and erfc (elementwise primitives), whose complex
values XLA has no op for (their sections below).

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
from s2s_runtime import special_gamma as rt_special_gamma

from s2s import dtypes
from s2s.core import Literal, ShapedArray, aval_of_value
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.passes.tangents import add_tangents, is_zero
from s2s.primitives import ops
from s2s.primitives.elementwise import broadcast_shapes   # (so erf is declared before its lowering below)
from s2s.primitives.staged_algorithms import StagedFunctions, staged_jaxpr
from s2s.staging import Primitive, Tracer


def _betainc_abstract(a, b, x, log=False):
    if not (a.dtype == b.dtype == x.dtype and dtypes.is_inexact(a.dtype) and a.dtype.kind == "f"):
        raise ShapeError("betainc needs real floating operands of one dtype, got "
                         + ", ".join(v.str_short() for v in (a, b, x)))
    return ShapedArray(broadcast_shapes(a.shape, b.shape, x.shape), a.dtype,
                       a.weak_type and b.weak_type and x.weak_type)


# `log=True`: log I_x(a, b), which keeps a tail too small for the dtype (t.logcdf's).
betainc = Primitive("betainc", _betainc_abstract, rt.betainc)
register(betainc, lambda eqn, a, b, x: call("rt.betainc", a, b, x, **({"log": True} if eqn.params.get("log") else {})))
_vmap.broadcasting(betainc)


def _betainc_jvp(primals, tangents, log=False):
    (a, b, x), (ta, tb, tx) = primals, tangents
    if not (is_zero(ta) and is_zero(tb)):
        raise UnsupportedFunctionError(
            "the derivative of betainc(a, b, x) (and of scipy.stats.t.cdf) with respect to a "
            "and b (the degrees of freedom) is not supported (JAX does not have it either)",
            "differentiate with respect to x only: pass a, b (df) as constants, or hold them "
            "with s2s.stop_gradient")
    out = betainc.bind(a, b, x, log=log)
    # d/dx I_x(a, b) = x^(a-1) (1-x)^(b-1) / B(a, b), the beta density (over I_x(a, b) for
    # its log). Primitives on the primals: a and b are often literals (t.cdf's 1/2), which
    # have no operators.
    one = ops.literal(1, out.aval.dtype)
    log_beta = ops.sub(ops.add(ops.lgamma(a), ops.lgamma(b)), ops.lgamma(ops.add(a, b)))
    log_density = ops.sub(ops.add(ops.mul(ops.sub(a, one), ops.log(x)),
                                  ops.mul(ops.sub(b, one), ops.log1p(ops.neg(x)))),
                          log_beta)
    if log:
        log_density = ops.sub(log_density, out)
    return out, tx * ops.exp(log_density)


_jvp.register(betainc, _betainc_jvp)


def _lower_betainc(ctx, eqn, a, b, x):
    out, log = eqn.outvars[0].aval.strip_weak_type(), eqn.params.get("log", False)
    dtype = out.dtype
    fns = StagedFunctions(dtype)
    tiny, eps = float(np.finfo(dtype).tiny), float(np.finfo(dtype).eps)
    flag, scalar = out.update(dtype=dtypes.bool_), ShapedArray((), dtype)

    start = staged_jaxpr(lambda a, b, x: rt_special.betainc_start(a, b, x, tiny, fns), [out] * 3)
    a_, b_, x_, swapped, log_front, c, d, h = _hlo.lower_jaxpr(ctx, start, [a, b, x])

    def condition(carry):
        m, delta = carry[0], carry[-1]
        def unconverged(m, delta):
            running = ops.le(m, ops.literal(rt_special.BETAINC_MAX_STEPS, dtype))
            moving = ops.gt(ops.abs_(delta - 1), ops.literal(eps, dtype))
            return [ops.and_(running, ops.reduce_or(moving, tuple(range(len(out.shape)))))]
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(unconverged, [scalar, out]), [m, delta])

    def step(carry):
        def one_step(m, a, b, x, c, d, h, _):
            return [m + 1, a, b, x, *rt_special.betainc_step(a, b, x, m, c, d, h, tiny, fns)]
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(one_step, [scalar] + [out] * 7), carry)

    not_yet = ctx.constant(2, dtype, out.shape)
    *_, h, _ = _hlo.while_op(ctx, [ctx.constant(1, dtype), a_, b_, x_, c, d, h, not_yet],
                             [scalar] + [out] * 7, ["m", "a", "b", "x", "c", "d", "h", "delta"],
                             condition, step)

    def finish(*operands):
        return [rt_special.betainc_finish(*operands, fns, log)]
    return _hlo.lower_jaxpr(ctx, staged_jaxpr(finish, [out] * 3 + [flag] + [out] * 2),
                            [a, b, x, swapped, log_front, h])


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


class _InverseErfStagedFunctions(StagedFunctions):
    erf = staticmethod(ops.erf)
    erfc = staticmethod(ops.erfc)
    sqrt = staticmethod(ops.sqrt)


def _inverse_error_function(name: str, impl, emitted: str, algorithm, slope: float):
    prim = Primitive(name, _real_float_abstract, impl)
    register(prim, lambda eqn, x: call(emitted, x))
    _vmap.vectorized(prim)

    def jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y = prim.bind(x)
        return y, t * (slope * ops.exp(y * y))
    _jvp.register(prim, jvp)

    def lower(ctx, eqn, x):
        aval = eqn.outvars[0].aval.strip_weak_type()
        fns = _InverseErfStagedFunctions(aval.dtype)
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(lambda v: [algorithm(v, fns)], [aval]), [x])
    _hlo.register(prim, lower, broadcasting=True)
    return prim


_HALF_SQRT_PI = 0.886226925452758   # sqrt(pi) / 2
erf_inv = _inverse_error_function("erf_inv", rt.erfinv, "rt.erfinv", rt_special.inverse_erf, _HALF_SQRT_PI)
erfc_inv = _inverse_error_function("erfc_inv", rt.erfcinv, "rt.erfcinv", rt_special.inverse_erfc,
                                   -_HALF_SQRT_PI)

# ---------------------------------------------------------------------------------------
# erf and erfc (elementwise primitives) lower to CHLO's for real operands; CHLO has none
# for complex ones, so there the lowering stages s2s_runtime.special's complex_erf /
# complex_erfc (the algorithm the NumPy impl runs) on the real and imaginary parts, in the
# parts' dtype.


class _ComplexErfStagedFunctions(StagedFunctions):
    cos = staticmethod(ops.cos)
    sin = staticmethod(ops.sin)


def _lower_error_function(chlo_op: str, parts_fn):
    def rule(ctx, eqn, x):
        aval = eqn.invars[0].aval.strip_weak_type()
        if not dtypes.is_complex(aval.dtype):
            t = _hlo.out_type(eqn)
            return [ctx.op(f"{chlo_op} {x} : {t} -> {t}", _hlo.hint(eqn))]
        fns = _ComplexErfStagedFunctions(np.finfo(aval.dtype).dtype)

        def erf_of_parts(z):
            return [ops.complex_from_parts(*parts_fn(ops.real(z), ops.imag(z), fns))]
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(erf_of_parts, [aval]), [x])
    return rule


_hlo.register(ops.primitive(ops.erf), _lower_error_function("chlo.erf", rt_special.complex_erf), broadcasting=True)
_hlo.register(ops.primitive(ops.erfc), _lower_error_function("chlo.erfc", rt_special.complex_erfc), broadcasting=True)

# ---------------------------------------------------------------------------------------
# gammainc(a, x) and gammaincc(a, x): the regularized incomplete gamma functions P and Q
# (scipy.special's), and gammainc_grad_a(a, x) = dP/da (jax's igamma_grad_a), computed by
# s2s_runtime.special_gamma's loop: NumPy there, and on XLA a `stablehlo.while` staged
# from the same start, step and finish. Their derivative in x is the gamma density
# x^(a-1) e^-x / Gamma(a) (negated for Q); in a, gammainc_grad_a, whose own derivative in
# a (a second derivative in a) is refused.


def _incomplete_gamma_abstract(name: str):
    def abstract(a, x):
        if not (a.dtype == x.dtype and a.dtype.kind == "f"):
            raise ShapeError(f"{name} needs real floating operands of one dtype, got "
                             f"{a.str_short()}, {x.str_short()}")
        return ShapedArray(broadcast_shapes(a.shape, x.shape), a.dtype, a.weak_type and x.weak_type)
    return abstract


def _declare_incomplete_gamma(name: str, impl):
    prim = Primitive(name, _incomplete_gamma_abstract(name), impl)
    register(prim, lambda eqn, a, x: call(f"rt.{name}", a, x))
    _vmap.broadcasting(prim)
    return prim


gammainc = _declare_incomplete_gamma("gammainc", rt.gammainc)
gammaincc = _declare_incomplete_gamma("gammaincc", rt.gammaincc)
gammainc_grad_a = _declare_incomplete_gamma("gammainc_grad_a", rt.gammainc_grad_a)


class _GammaStagedFunctions(StagedFunctions):
    """The staged functions the incomplete gamma loop needs beyond betainc's."""
    expm1 = staticmethod(ops.expm1)
    digamma = staticmethod(ops.digamma)


def _aval(v) -> ShapedArray:
    return v.aval if isinstance(v, (Tracer, Literal)) else aval_of_value(np.asarray(v))


def _of_shape(v, shape):
    """`v` (a staged value, a literal or a NumPy constant) broadcast to `shape` as a staged
    value, which has operators."""
    if isinstance(v, Tracer):
        return ops.broadcast_to(v, shape)
    rank = len(_aval(v).shape)
    return ops.broadcast_in_dim(v, shape, range(len(shape) - rank, len(shape)))


def _staged_operands(a, x):
    """a and x as staged values of their broadcast shape, and the staged functions."""
    out = ShapedArray(broadcast_shapes(_aval(a).shape, _aval(x).shape), _aval(a).dtype)
    return _of_shape(a, out.shape), _of_shape(x, out.shape), _GammaStagedFunctions(out.dtype)


def gamma_density(a, x):
    """x^(a-1) e^-x / Gamma(a), the derivative of P(a, x) in x, by the loop's accurate
    log front (Stirling's series for large a) less log x (no underflow for tiny x); at
    x == 0 its limit (1 for a == 1, inf below, 0 above); 0 where P is constant (a == 0,
    a == inf, x == inf), nan where P is nan."""
    a, x, fns = _staged_operands(a, x)
    positive = (x > 0) & (x < np.inf) & (a > 0) & (a < np.inf)
    safe_a, safe_x = fns.select(positive, a, 1.0), fns.select(positive, x, 1.0)
    density = fns.exp(rt_special_gamma.log_igamma_front(safe_a, safe_x, fns) - fns.log(safe_x))
    at_zero = fns.select(a == 1, 1.0, fns.select(a < 1, np.inf, 0.0))
    density = fns.select(x == 0, at_zero, density)
    density = fns.select((a == 0) | (a == np.inf) | (x == np.inf), 0.0, density)
    valid = (a >= 0) & (x >= 0) & ((a > 0) | (x > 0)) & ((a < np.inf) | (x < np.inf))
    return fns.select(valid, density, np.nan)


def _incomplete_gamma_jvp(prim, sign: float):
    """P's (sign 1) or Q's (sign -1) jvp: density * tx + gammainc_grad_a * ta, signed."""
    def jvp(primals, tangents):
        (a, x), (ta, tx) = primals, tangents
        terms = []
        if not is_zero(tx):
            terms.append(tx * gamma_density(a, x))
        if not is_zero(ta):
            terms.append(ta * gammainc_grad_a.bind(a, x))
        tangent = terms[0] if len(terms) == 1 else add_tangents(*terms)
        return prim.bind(a, x), tangent if sign > 0 else -tangent
    return jvp


def _gammainc_grad_a_jvp(primals, tangents):
    """d/dx of dP/da is d/da of the density: density * (log x - digamma(a))."""
    (a, x), (ta, tx) = primals, tangents
    if not is_zero(ta):
        raise UnsupportedFunctionError(
            "the second derivative of gammainc(a, x) / gammaincc(a, x) (and of scipy.stats."
            "gamma.cdf, chi2.cdf, poisson.cdf) in a (the shape, df or count) is not supported by s2s",
            "take at most one derivative in a (any in x), or hold a with s2s.stop_gradient")
    staged_a, staged_x, fns = _staged_operands(a, x)
    log_derivative = fns.log(staged_x) - fns.digamma(staged_a)
    return gammainc_grad_a.bind(a, x), tx * (gamma_density(a, x) * log_derivative)


_jvp.register(gammainc, _incomplete_gamma_jvp(gammainc, 1.0))
_jvp.register(gammaincc, _incomplete_gamma_jvp(gammaincc, -1.0))
_jvp.register(gammainc_grad_a, _gammainc_grad_a_jvp)


def _lower_incomplete_gamma(finish, grad_a: bool = False):
    """The loop in StableHLO (with the derivatives in a when `grad_a`), then
    `finish(a, x, sanitized_a, sanitized_x, state, fns)`."""
    names = rt_special_gamma.GRAD_A_STATE_NAMES if grad_a else rt_special_gamma.STATE_NAMES

    def lower(ctx, eqn, a, x):
        out = eqn.outvars[0].aval.strip_weak_type()
        dtype = out.dtype
        fns = _GammaStagedFunctions(dtype)
        tiny = float(np.finfo(dtype).tiny)
        tolerance = rt_special_gamma.GAMMAINC_TOLERANCE_EPS * float(np.finfo(dtype).eps)
        scalar = ShapedArray((), dtype)
        start = staged_jaxpr(lambda a, x: rt_special_gamma.gammainc_start(a, x, tiny, fns, grad_a=grad_a),
                        [out] * 2)
        sanitized_a, sanitized_x, *state = _hlo.lower_jaxpr(ctx, start, [a, x])

        def condition(carry):
            m, residual = carry[0], carry[-1]
            def unconverged(m, residual):
                running = ops.le(m, ops.literal(rt_special_gamma.GAMMAINC_MAX_STEPS, dtype))
                moving = ops.gt(residual, ops.literal(tolerance, dtype))
                return [ops.and_(running, ops.reduce_or(moving, tuple(range(len(out.shape)))))]
            return _hlo.lower_jaxpr(ctx, staged_jaxpr(unconverged, [scalar, out]), [m, residual])

        def step(carry):
            def one_step(m, a, x, *state_and_residual):
                *state, residual = state_and_residual
                state, residual = rt_special_gamma.converged_frozen(
                    state, residual, *rt_special_gamma.gammainc_step(a, x, m, state, tiny, fns), tolerance, fns)
                return [m + 1, a, x, *state, residual]
            return _hlo.lower_jaxpr(ctx, staged_jaxpr(one_step, [scalar] + [out] * (len(names) + 3)), carry)

        not_yet = ctx.constant(1, dtype, out.shape)
        results = _hlo.while_op(ctx, [ctx.constant(1, dtype), sanitized_a, sanitized_x, *state, not_yet],
                                [scalar] + [out] * (len(names) + 3), ["m", "a", "x", *names, "residual"],
                                condition, step)

        def finished(a, x, sanitized_a, sanitized_x, *state_and_residual):
            *state, residual = state_and_residual
            value = finish(a, x, sanitized_a, sanitized_x, state, fns)
            return [rt_special_gamma.unconverged_to_nan(value, residual, tolerance, fns)]
        return _hlo.lower_jaxpr(ctx, staged_jaxpr(finished, [out] * (len(names) + 5)), [a, x, *results[1:]])
    return lower


_hlo.register(gammainc, _lower_incomplete_gamma(
    lambda *args: rt_special_gamma.gammainc_finish(*args, upper=False)), broadcasting=True)
_hlo.register(gammaincc, _lower_incomplete_gamma(
    lambda *args: rt_special_gamma.gammainc_finish(*args, upper=True)), broadcasting=True)
_hlo.register(gammainc_grad_a, _lower_incomplete_gamma(rt_special_gamma.gammainc_grad_a_finish, grad_a=True),
              broadcasting=True)
