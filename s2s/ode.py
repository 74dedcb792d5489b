"""`scipy.integrate.odeint` on staged values: an adaptive Dormand-Prince 5(4) Runge-Kutta
integrator, differentiated in reverse mode by the adjoint method.

A user's model calls `scipy.integrate.odeint(func, y0, t, args=(...))` as with SciPy; s2s
maps SciPy's function object here once scipy.integrate is imported (SciPy stays
optional). The method is not SciPy's LSODA: it is the explicit 5th-order Dormand-Prince
pair with 4th-order error control, as `jax.experimental.ode.odeint` uses. A step is
accepted when the RMS over y's elements of `error / (atol + rtol * max(|y|, |y_new|))` is
at most 1, and every step is shortened to land exactly on the next time of `t`, so the
values at `t` are the integrator's own, not interpolated. Values agree with SciPy's to
about the tolerances given.

The integration is one `scan` over the intervals of `t`, each an inner `while_loop` over
steps. It is staged into a `custom_vjp_call` whose backward rule is the adjoint method
(as JAX's): a reverse `scan` over the intervals of `t` integrates the augmented system
(y, ȳ, t̄₀, args̄) backwards over each by the same differentiable odeint, so reverse mode
of any order works.
Forward mode (jvp) is refused with a clear error, as JAX refuses it.

This lives in the transforms layer, not in numpy_api: it stages the user's `func` with
`call_user` and builds loops of staged bodies, as `s2s.lax` does.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from s2s import dtypes
from s2s.autodiff import vjp_parts
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray
from s2s.errors import ShapeError, StagingError, UnsupportedFunctionError, api_boundary
from s2s.frontend import structured
from s2s.frontend.args import aval_of_arg
from s2s.frontend.structured import Direct, StagedBody
from s2s.frontend.walker import call_user
from s2s.numpy_api._base import NUMPY_IMPLS, implements
from s2s.primitives import ops
from s2s.primitives.custom_derivatives import custom_vjp_call
from s2s.staging import inline_jaxpr
from s2s.tree import tree_flatten

__all__ = ["lax_odeint", "odeint"]

# SciPy's odeint defaults: its rtol and atol, and the step limit per time of `t`.
_DEFAULT_TOLERANCE = 1.49012e-8
_DEFAULT_MXSTEP = 500

# The Dormand-Prince 5(4) tableau: stage times, stage weights, the 5th-order solution and
# the difference between it and the embedded 4th-order one (the error estimate).
_ALPHA = (1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_BETA = ((1 / 5,),
         (3 / 40, 9 / 40),
         (44 / 45, -56 / 15, 32 / 9),
         (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
         (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
         (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_C_SOLUTION = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_C_ERROR = tuple(c5 - c4 for c5, c4 in zip(_C_SOLUTION, (5179 / 57600, 0.0, 7571 / 16695, 393 / 640,
                                                         -92097 / 339200, 187 / 2100, 1 / 40)))


def _np(fn):
    """s2s's version of a NumPy function, for the arithmetic on staged values here."""
    return NUMPY_IMPLS[fn]


def _rms(x):
    return _np(np.sqrt)(_np(np.mean)(x * x))


# ---------------------------------------------------------------------------------------
# The integrator, on a dynamics jaxpr taking (y, t, *params)


def _rhs(dynamics: ClosedJaxpr, params: list):
    def rhs(y, t):
        (dy,) = inline_jaxpr(dynamics, [y, t, *params])
        return dy
    return rhs


def _initial_step(rhs, y0, t0, f0, rtol, atol):
    """Hairer, Nørsett and Wanner's starting step for a method of order 4 (the error's)."""
    scale = atol + _np(np.abs)(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = _np(np.where)((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / _np(np.maximum)(d1, 1e-300))
    f1 = rhs(y0 + h0 * f0, t0 + h0)
    d2 = _rms((f1 - f0) / scale) / h0
    h1 = _np(np.where)((d1 <= 1e-15) & (d2 <= 1e-15), _np(np.maximum)(1e-6, h0 * 1e-3),
                       (0.01 / _np(np.maximum)(_np(np.maximum)(d1, d2), 1e-300)) ** (1 / 5))
    return _np(np.minimum)(100 * h0, h1)


def _dormand_prince_step(rhs, y, f, t, h):
    """One step of size h: the 5th-order solution, the error estimate, f at the new point."""
    ks = [f]
    for alpha, beta in zip(_ALPHA, _BETA):
        increment = sum(b * k for b, k in zip(beta, ks) if b != 0.0)
        ks.append(rhs(y + h * increment, t + alpha * h))
    y_new = y + h * sum(c * k for c, k in zip(_C_SOLUTION, ks) if c != 0.0)
    error = h * sum(c * k for c, k in zip(_C_ERROR, ks) if c != 0.0)
    return y_new, error, ks[-1]


def _next_step(h, error_ratio):
    """The step after one of size h with this error ratio: grown at most 10-fold, shrunk
    at most 5-fold after a rejection, with the usual safety factor 0.9."""
    shrink_floor = _np(np.where)(error_ratio < 1, 1.0, 0.2)
    factor = _np(np.minimum)(10.0, _np(np.maximum)(0.9 * _np(np.maximum)(error_ratio, 1e-300) ** (-1 / 5),
                                                   shrink_floor))
    return _np(np.where)(error_ratio == 0, 10 * h, h * factor)


def _integrate(dynamics: ClosedJaxpr, y0, t, params: list, rtol: float, atol: float, mxstep: int):
    """y at every time of `t`, stacked (NaN where `mxstep` steps did not reach a time, or
    where `t` goes back in time)."""
    rhs = _rhs(dynamics, params)
    t0 = t[0]
    f0 = rhs(y0, t0)
    h0 = _initial_step(rhs, y0, t0, f0, rtol, atol)

    def interval(carry, target):
        y, f, t_now, h = carry

        def keep_stepping(state):
            _, _, t_now, _, steps = state
            return (t_now < target) & (steps < mxstep)

        def step(state):
            y, f, t_now, h, steps = state
            remaining = target - t_now
            lands = h >= remaining
            h_taken = _np(np.where)(lands, remaining, h)
            y_new, error, f_new = _dormand_prince_step(rhs, y, f, t_now, h_taken)
            tolerance = atol + rtol * _np(np.maximum)(_np(np.abs)(y), _np(np.abs)(y_new))
            error_ratio = _rms(error / tolerance)
            accept = error_ratio <= 1
            t_next = _np(np.where)(accept, _np(np.where)(lands, target, t_now + h_taken), t_now)
            return (_np(np.where)(accept, y_new, y), _np(np.where)(accept, f_new, f), t_next,
                    _next_step(h_taken, error_ratio), steps + 1)

        y, f, t_now, h, _ = structured.while_loop(
            Direct(keep_stepping, ["state"]), Direct(step, ["state"]), (y, f, t_now, h, np.int32(0)))
        reached = _np(np.where)(t_now == target, y, np.nan)
        return (y, f, t_now, h), reached

    _, ys = structured.scan(Direct(interval, ["carry", "target"]), (y0, f0, t0, h0), t[1:])
    return _np(np.concatenate)([y0[None], ys])


# ---------------------------------------------------------------------------------------
# The differentiable odeint: a custom_vjp_call whose backward rule is the adjoint method


def _dynamics_jaxpr(fn, y, t, params: list, what: str) -> tuple[ClosedJaxpr, list]:
    """`fn(y, t, params)` staged as a jaxpr taking (y, t, *consts, *params), and the
    consts it read from around it (which join the params)."""
    body = StagedBody(Direct(fn, ["y", "t", "params"]), (y, t, list(params)), what)
    (dy,) = body.out_avals if len(body.out_avals) == 1 else (None,)
    y_aval = aval_of_arg(y)
    if dy is None or dy.shape != y_aval.shape:
        got = "a tuple" if dy is None else f"shape {dy.shape}"
        raise ShapeError(f"{what} returns {got}, but y0 has shape {y_aval.shape}",
                         "return dy/dt as one array shaped like y")
    jaxpr, n = body.jaxpr.jaxpr, len(body.consts)
    invars = list(jaxpr.invars)
    reordered = Jaxpr([], invars[n:n + 2] + invars[:n] + invars[n + 2:], jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(reordered, []), list(body.consts)


class _AdjointSite:
    """The rule a `custom_vjp_call` of odeint carries: forward, the integration; backward,
    the adjoint method. Hashable by identity, so it can be a primitive parameter."""

    name = "odeint"

    def __init__(self, call: ClosedJaxpr, dynamics: ClosedJaxpr, n_call_consts: int, rtol, atol, mxstep):
        self.call, self.dynamics, self.n_call_consts = call, dynamics, n_call_consts
        self.rtol, self.atol, self.mxstep = rtol, atol, mxstep

    def __repr__(self):
        return "odeint"

    def apply_fwd(self, primals: list):
        outs = inline_jaxpr(self.call, primals)
        return outs, list(primals) + outs

    def apply_bwd(self, residuals: list, cts: list) -> list:
        n = self.n_call_consts
        y0, t, params, ys = residuals[n], residuals[n + 1], list(residuals[n + 2:-1]), residuals[-1]
        y0_bar, t_bar, param_bars = _adjoint(self, y0, t, params, ys, cts[0])
        return [None] * n + [y0_bar, t_bar] + param_bars


def _adjoint(site: _AdjointSite, y0, t, params: list, ys, g):
    """ȳ₀, t̄ and the params' cotangents for the cotangent `g` of ys: the augmented system
    integrated backwards from each time of t to the one before (JAX's formulation)."""
    y_aval = aval_of_arg(y0)
    dtype, size, shape = y_aval.dtype, int(np.prod(y_aval.shape)), y_aval.shape
    floating = [dtypes.is_inexact(aval_of_arg(p).dtype) for p in params]
    parts = vjp_parts(site.dynamics, [True, True] + floating, [True])
    sizes = [size, size, 1] + [int(np.prod(aval_of_arg(p).shape)) for p, f in zip(params, floating) if f]
    offsets = np.cumsum([0] + sizes)

    def flat(x):
        return ops.reshape(ops.convert(x, dtype), (int(np.prod(aval_of_arg(x).shape)),))

    def unflat(z, k, like):
        piece = ops.slice_in_dim(z, int(offsets[k]), int(offsets[k + 1]))
        return ops.convert(ops.reshape(piece, aval_of_arg(like).shape), aval_of_arg(like).dtype)

    def augmented(z, s, params):
        y = ops.reshape(ops.slice_in_dim(z, 0, size), shape)
        y_bar = ops.reshape(ops.slice_in_dim(z, size, 2 * size), shape)
        dy, *residuals = inline_jaxpr(parts.forward, [y, -s, *params])
        bars = inline_jaxpr(parts.backward, residuals + [y_bar])
        return _np(np.concatenate)([flat(-dy)] + [flat(b) for b in bars])

    z_aval = ShapedArray((int(offsets[-1]),), dtype)
    aug, aug_consts = _dynamics_jaxpr(augmented, z_aval, t[0], params, "odeint's adjoint system")
    rhs = _rhs(site.dynamics, params)
    float_params = [p for p, f in zip(params, floating) if f]

    def interval_back(carry, point):
        """From time t[i] back to t[i - 1]: the adjoint state there and t[i]'s cotangent."""
        y_bar, t0_bar, param_bars = carry
        y_i, t_i, t_before, g_i, g_before = point
        t_bar = _np(np.sum)(rhs(y_i, t_i) * g_i)
        z = _np(np.concatenate)([flat(y_i), flat(y_bar), flat(t0_bar - t_bar)] + [flat(b) for b in param_bars])
        span = _np(np.stack)([-t_i, -t_before])
        z = _odeint_staged(aug, z, span, aug_consts + params, site.rtol, site.atol, site.mxstep)[1]
        param_bars = [unflat(z, 3 + k, p) for k, p in enumerate(float_params)]
        return (unflat(z, 1, y0) + g_before, ops.reshape(unflat(z, 2, t0_bar[None]), ()), param_bars), t_bar

    init = (g[-1], _np(np.zeros)((), dtype), [_np(np.zeros_like)(p) for p in float_params])
    points = (ys[1:], t[1:], t[:-1], g[1:], g[:-1])
    (y_bar, t0_bar, param_bars), t_bars = structured.scan(Direct(interval_back, ["carry", "point"]), init,
                                                          points, reverse=True)
    t_bar = _np(np.concatenate)([t0_bar[None], t_bars])
    it = iter(param_bars)
    return y_bar, t_bar, [next(it) if f else None for f in floating]


def _odeint_staged(dynamics: ClosedJaxpr, y0, t, params: list, rtol, atol, mxstep):
    """The integration as one custom_vjp_call (y0, t and params staged or NumPy)."""
    call = StagedBody(Direct(lambda y0, t, params: _integrate(dynamics, y0, t, list(params), rtol, atol, mxstep),
                             ["y0", "t", "params"]), (y0, t, list(params)), "odeint")
    site = _AdjointSite(call.jaxpr, dynamics, len(call.consts), rtol, atol, mxstep)
    (ys,) = custom_vjp_call.bind(*call.consts, y0, t, *params, call=call.jaxpr, rule=site)
    return ys


# ---------------------------------------------------------------------------------------
# scipy.integrate.odeint's signature

_UNSUPPORTED = {"Dfun": None, "col_deriv": 0, "full_output": 0, "ml": None, "mu": None, "tcrit": None,
                "h0": 0.0, "hmax": 0.0, "hmin": 0.0, "ixpr": 0, "mxhnil": 0, "mxordn": 12, "mxords": 5,
                "printmessg": 0}


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, rtol=None,
           atol=None, tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, mxordn=12,
           mxords=5, printmessg=0, tfirst=False):
    """y(t) for dy/dt = func(y, t, *args), y(t[0]) = y0, at every time of the increasing
    1-d `t` (scipy.integrate.odeint; `tfirst=True`: func(t, y, *args)). Dormand-Prince
    5(4) with SciPy's rtol/atol meaning, not LSODA; LSODA's own options are refused."""
    given = dict(Dfun=Dfun, col_deriv=col_deriv, full_output=full_output, ml=ml, mu=mu, tcrit=tcrit, h0=h0,
                 hmax=hmax, hmin=hmin, ixpr=ixpr, mxhnil=mxhnil, mxordn=mxordn, mxords=mxords,
                 printmessg=printmessg)
    for name, default in _UNSUPPORTED.items():
        if given[name] is not default and given[name] != default:
            raise UnsupportedFunctionError(f"odeint(..., {name}=...) is an option of SciPy's LSODA; s2s "
                                           "integrates with Dormand-Prince 5(4) and does not support it",
                                           f"leave {name} at its default")
    args = args if isinstance(args, tuple) else (args,)
    rtol = _DEFAULT_TOLERANCE if rtol is None else rtol
    atol = _DEFAULT_TOLERANCE if atol is None else atol
    mxstep = mxstep or _DEFAULT_MXSTEP
    # SciPy integrates in float64, with y a vector (a scalar y0 is one of length 1).
    float64 = dtypes.canonicalize_dtype(np.float64)
    y0, t = _np(np.atleast_1d)(_np(np.asarray)(y0, dtype=float64)), _np(np.asarray)(t, dtype=float64)
    if aval_of_arg(y0).ndim != 1:
        raise ShapeError(f"scipy.integrate.odeint needs y0 one-dimensional, got shape {aval_of_arg(y0).shape}",
                         "pass y0.ravel() and reshape it inside func, or call s2s.lax.odeint, "
                         "which takes y0 of any shape")
    if tfirst:
        return _odeint_user(lambda y, t, *args: call_user(func, (t, y, *args), {}), y0, t, args, rtol, atol, mxstep)
    return _odeint_user(func, y0, t, args, rtol, atol, mxstep)


@api_boundary
def lax_odeint(func: Callable[..., Any], y0: Any, t: Any, *args: Any, rtol: float = 1.4e-8, atol: float = 1.4e-8,
               mxstep: float = np.inf) -> Any:
    """`s2s.lax.odeint`, with jax.experimental.ode.odeint's signature (`args` may be pytrees; `mxstep` counts the
    steps between two times of `t`): the same integration as `scipy.integrate.odeint`."""
    return _odeint_user(func, y0, t, args, rtol, atol, mxstep)


def _odeint_user(func, y0, t, args: tuple, rtol, atol, mxstep):
    """The user's odeint call: `func(y, t, *args)` staged once with call_user into the
    dynamics jaxpr, then the differentiable integration."""
    y0, t = _np(np.asarray)(y0), _np(np.asarray)(t)
    t_aval, y_aval = aval_of_arg(t), aval_of_arg(y0)
    if t_aval.ndim != 1 or t_aval.shape[0] < 1:
        raise ShapeError(f"odeint needs t as a 1-d array of times, got shape {t_aval.shape}",
                         "pass the times to report y at, e.g. np.linspace(0.0, 1.0, 11)")
    dtype = np.result_type(y_aval.dtype, t_aval.dtype, np.float16)
    if dtype.kind == "c":
        raise UnsupportedFunctionError("odeint of complex y0 or t is not supported",
                                       "split y into its real and imaginary parts")
    y0, t = _np(np.asarray)(y0, dtype=dtype), _np(np.asarray)(t, dtype=dtype)
    leaves, args_tree = tree_flatten(args)
    if any(aval_of_arg(leaf).dtype.kind == "c" for leaf in leaves):
        raise UnsupportedFunctionError("odeint with complex args is not supported",
                                       "pass their real and imaginary parts as two real args")

    def user_dynamics(y, t, params):
        dy = call_user(func, (y, t, *args_tree.unflatten(params)), {})
        return _np(np.asarray)(dy, dtype=dtype)

    dynamics, consts = _dynamics_jaxpr(user_dynamics, y0, t[0], leaves, "odeint's func")
    steps = int(min(mxstep, np.iinfo(np.int32).max))     # the step counter is an int32
    return _odeint_staged(dynamics, y0, t, consts + leaves, float(rtol), float(atol), steps)


def register_scipy_integrate() -> None:
    """Maps scipy.integrate.odeint to `odeint` (once the user has imported scipy.integrate)."""
    import scipy.integrate as integrate
    implements(integrate.odeint)(odeint)


NUMPY_IMPLS.when_imported("scipy.integrate", register_scipy_integrate)
