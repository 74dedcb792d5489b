"""scipy.special's functions that model code calls, on staged values: logsumexp, expit,
logit, gammaln, digamma/psi, erf, erfc, betainc, xlogy, xlog1py, softmax, log_softmax,
erfinv, erfcinv, ndtri (ndtr and log_ndtr are scipy_stats's normal cdf and log cdf).

SciPy is optional for s2s. `register_scipy_special()` maps SciPy's own function objects to
the functions here; `numpy_api` asks the dispatch table to run it the first time the table
is read while scipy.special is imported, so `scipy.special.expit` in a user's function is
recognized, and neither importing s2s nor jaxlib's own use of scipy.linalg imports it.

Each is written as NumPy code on s2s's NumPy surface (a composition of primitives), so
the emitted Python reads as the math and derivatives follow from the primitives' rules.
Only erfc, betainc, erfinv and erfcinv needed primitives of their own (`rt.erfc`,
`rt.betainc`, `rt.erfinv`, `rt.erfcinv` in emitted code, NumPy only, since emitted code
never imports SciPy). Results are typed as SciPy types them: its ufuncs
compute in float32 only when every operand is float32 and in float64 otherwise;
logsumexp and the softmaxes keep any floating dtype and make integers float64.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import UnsupportedFunctionError
from s2s.numpy_api import math as npm
from s2s.numpy_api import reductions, shaping
from s2s.numpy_api._base import aval, convert, implements, operand
from s2s.primitives import elementwise as ew
from s2s.primitives import special as special_primitives

# ---------------------------------------------------------------------------------------
# Operand typing


def _real_operands(name: str, xs):
    xs = [operand(x) for x in xs]
    for x in xs:
        if aval(x).dtype.kind == "c":
            raise UnsupportedFunctionError(f"scipy.special.{name} of complex values is not supported",
                                           "pass real arrays (x.real, where the imaginary part is 0)")
    return xs


def _ufunc_operands(name: str, *xs):
    """The operands of a SciPy ufunc, converted to the one dtype its loops pick: float32
    when every operand is float32, float64 otherwise (SciPy has no float16 loops, and a
    Python scalar beside a float32 array selects the float64 loop)."""
    xs = _real_operands(name, xs)
    single = all(aval(x).dtype == dtypes.float32 for x in xs)
    to = dtypes.float32 if single else dtypes.canonicalize_dtype(np.float64)
    return [convert(x, to) for x in xs]


def _floating_operand(name: str, x):
    """`x` in its floating dtype, or float64 for integers and booleans."""
    (x,) = _real_operands(name, [x])
    dt = aval(x).dtype
    return x if dtypes.is_inexact(dt) else convert(x, dtypes.canonicalize_dtype(np.float64))


def _unary(name: str, prim):
    def fn(x, out=None):
        _no_out(name, out)
        (x,) = _ufunc_operands(name, x)
        return prim.bind(x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"scipy.special.{name}: the `{prim.name}` primitive."
    return fn


def _no_out(name: str, out):
    if out is not None:
        raise UnsupportedFunctionError(f"scipy.special.{name}(..., out=...) writes into an existing "
                                       "array; s2s does not support in-place updates",
                                       f"assign the result instead: y = {name}(...)")


expit = _unary("expit", ew.logistic)
gammaln = _unary("gammaln", ew.lgamma)
digamma = _unary("digamma", ew.digamma)
erf = _unary("erf", ew.erf)
erfc = _unary("erfc", ew.erfc)


def betainc(a, b, x, out=None):
    """I_x(a, b), the regularized incomplete beta function: its own primitive (a loop);
    differentiable in x only, as JAX's."""
    _no_out("betainc", out)
    return special_primitives.betainc.bind(*_ufunc_operands("betainc", a, b, x))


def logit(x, out=None):
    """log(p / (1 - p)), as SciPy computes it: -inf at 0, inf at 1, nan outside [0, 1]."""
    _no_out("logit", out)
    (p,) = _ufunc_operands("logit", x)
    return npm.log(p / (1 - p))


def _x_times_log(name: str, log_fn, pole: float):
    """x * log_fn(y), 0 where x == 0 unless y is nan (SciPy's xlogy and xlog1py). Only where
    that product is not already 0 (y at or below the log's pole, or infinite) is the 0
    chosen, so the derivative in x at x == 0 stays log_fn(y), as JAX's."""
    def fn(x, y, out=None):
        _no_out(name, out)
        x, y = _ufunc_operands(name, x, y)
        undefined = (x == 0) & ((y <= pole) | npm.isinf(y))
        safe_y = npm.where(undefined, pole + 1, y)
        return npm.where(undefined, 0 * x, x * log_fn(safe_y))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"scipy.special.{name}: {_x_times_log.__doc__}"
    return fn


xlogy = _x_times_log("xlogy", npm.log, 0.0)
xlog1py = _x_times_log("xlog1py", npm.log1p, -1.0)

# ---------------------------------------------------------------------------------------
# logsumexp and the softmaxes: the maximum is subtracted first, so exp never overflows,
# and it is a constant to the derivative (the result does not depend on it), so the
# gradient of logsumexp is exactly the softmax.


def _shift(x, axis):
    """The maximum along `axis` (kept as size-1 axes), 0 where it is not finite (all -inf,
    or an inf that exp then carries), held constant for derivatives."""
    peak = reductions.max(x, axis=axis, keepdims=True)
    return ew.stop_gradient.bind(npm.where(npm.isfinite(peak), peak, 0))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """log(sum(b * exp(a))) along `axis` (every axis by default), shifted by the maximum.
    Elements with b == 0 are left out (a may be inf there); with return_sign the log of
    |sum| and its sign, else a negative sum gives nan, as SciPy. Where that is not finite,
    SciPy gives the unshifted log(sum(b * exp(a))) (nan for inf * 0), and so does this."""
    a = shaping.atleast_1d(_floating_operand("logsumexp", a))
    if b is not None:
        a, b = _promoted_floats(a, shaping.atleast_1d(operand(b)))
        unshifted = ew.stop_gradient.bind(reductions.sum(b * npm.exp(a), axis=axis, keepdims=True))
        a = npm.where(b == 0, -np.inf, a)
    peak = _shift(a, axis)
    terms = npm.exp(a - peak)
    total = reductions.sum(terms if b is None else b * terms, axis=axis, keepdims=True)
    sign = npm.sign(total) if return_sign else None
    out = npm.log(npm.abs(total) if return_sign else total) + peak
    if b is not None:
        finite = npm.isfinite(out)
        out = npm.where(finite, out, npm.log(npm.abs(unshifted) if return_sign else unshifted))
        sign = npm.where(finite, sign, npm.sign(unshifted)) if return_sign else None
    if not keepdims:
        out = _squeeze_axes(out, axis)
        sign = None if sign is None else _squeeze_axes(sign, axis)
    return (out, sign) if return_sign else out


def _promoted_floats(*xs):
    """Operands promoted as NumPy does, after integers become float64 (logsumexp's a, b)."""
    xs = [_floating_operand("logsumexp", x) for x in xs]
    to = dtypes.canonicalize_dtype(np.result_type(*[aval(x).dtype for x in xs]))
    return [convert(x, to) for x in xs]


def _squeeze_axes(x, axis):
    axes = tuple(range(len(aval(x).shape))) if axis is None else axis
    return shaping.squeeze(x, axis=axes)


def softmax(x, axis=None):
    """exp(x - max) / sum(exp(x - max)) along `axis` (every axis by default, as SciPy)."""
    x = _floating_operand("softmax", x)
    shifted = npm.exp(x - ew.stop_gradient.bind(reductions.max(x, axis=axis, keepdims=True)))
    return shifted / reductions.sum(shifted, axis=axis, keepdims=True)


def log_softmax(x, axis=None):
    """x - logsumexp(x) along `axis`, as (x - max) - log(sum(exp(x - max)))."""
    x = _floating_operand("log_softmax", x)
    shifted = x - _shift(x, axis)
    return shifted - npm.log(reductions.sum(npm.exp(shifted), axis=axis, keepdims=True))


def register_scipy_special() -> None:
    """Maps scipy.special's function objects to the functions here (once it is imported)."""
    import scipy.special as special
    for name in ("expit", "gammaln", "erf", "erfc", "betainc", "logit", "xlogy", "xlog1py",
                 "logsumexp", "softmax", "log_softmax"):
        implements(getattr(special, name))(globals()[name])
    implements(special.digamma, special.psi)(digamma)


# ---------------------------------------------------------------------------------------
# The inverse error functions, primitives of their own (see primitives/special.py), and
# ndtri, the standard normal's quantile, through erfcinv: -sqrt(2) erfcinv(2 p) keeps its
# digits in both tails (2 p and erfcinv's own reflections are exact). scipy.special's ndtr
# and log_ndtr are the normal's cdf and log cdf, registered by scipy_stats, which has them.

erfinv = _unary("erfinv", special_primitives.erf_inv)
erfcinv = _unary("erfcinv", special_primitives.erfc_inv)
_SQRT_2 = 1.4142135623730951


def ndtri(p, out=None):
    """The x with Phi(x) = p (scipy.special.ndtri): -inf at 0, inf at 1, nan outside."""
    _no_out("ndtri", out)
    (p,) = _ufunc_operands("ndtri", p)
    return -_SQRT_2 * special_primitives.erfc_inv.bind(2 * p)


def register_inverse_error_functions() -> None:
    """Maps scipy.special's erfinv, erfcinv and ndtri to the functions here."""
    import scipy.special as special
    implements(special.erfinv)(erfinv)
    implements(special.erfcinv)(erfcinv)
    implements(special.ndtri)(ndtri)
