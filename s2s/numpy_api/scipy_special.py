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

import math

import numpy as np

from s2s import dtypes
from s2s.errors import UnsupportedFunctionError
from s2s.numpy_api import math as npm
from s2s.numpy_api import reductions, scipy_bessel, shaping
from s2s.numpy_api._base import aval, convert, implements, operand
from s2s.primitives import elementwise as ew
from s2s.primitives import special as special_primitives
from s2s.staging import Tracer
from s2s_runtime.special import log_gamma_ratio

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


def _error_function(name: str, prim):
    """scipy.special.erf / erfc: SciPy's real loops (as `_unary`), and its complex ones for
    a complex x (complex64 stays complex64), holomorphic, derivative +-2/sqrt(pi) e^(-x^2)."""
    real = _unary(name, prim)

    def fn(x, out=None):
        x = operand(x)
        if aval(x).dtype.kind != "c":
            return real(x, out)
        _no_out(name, out)
        return prim.bind(x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = real.__doc__
    return fn


erf = _error_function("erf", ew.erf)
erfc = _error_function("erfc", ew.erfc)


def betainc(a, b, x, out=None):
    """I_x(a, b), the regularized incomplete beta function: its own primitive (a loop);
    differentiable in x only, as JAX's."""
    _no_out("betainc", out)
    return special_primitives.betainc.bind(*_ufunc_operands("betainc", a, b, x))


def log_betainc(a, b, x):
    """log I_x(a, b), finite where I_x(a, b) is too small for the dtype (SciPy has no such
    function: the t distribution's logcdf uses it)."""
    return special_primitives.betainc.bind(*_ufunc_operands("betainc", a, b, x), log=True)


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
    register_gamma_family(special)
    scipy_bessel.register_scipy_bessel()


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


# ---------------------------------------------------------------------------------------
# The gamma family: gamma, gammasgn, rgamma, beta, betaln, multigammaln, polygamma (as
# compositions of lgamma, digamma and polygamma), and the incomplete gamma functions
# gammainc and gammaincc (primitives: a loop; derivatives in x, and one in a).


def _nonpositive_integer(x):
    """Where x is a pole of Gamma: 0, -1, -2, ..."""
    return (x <= 0) & (x == npm.floor(x))


def _gamma_sign(x):
    """The sign of Gamma(x), with SciPy's ends: 1 for x > 0 and +inf, 1 at 0.0 and -1 at
    -0.0; between the poles -1 where floor(x) is odd; nan at the negative integers, -inf
    and nan."""
    zero_sign = npm.where(1 / npm.where(x == 0, x, 1.0) < 0, -1.0, 1.0)   # 1/-0.0 is -inf
    between_poles = npm.where(npm.remainder(npm.floor(x), 2) == 0, 1.0, -1.0)
    sign = npm.where(x > 0, 1.0, npm.where(x == 0, zero_sign, between_poles))
    sign = npm.where(((x < 0) & ((x == npm.floor(x)) | npm.isinf(x))) | npm.isnan(x), np.nan, sign)
    return convert(sign, aval(x).dtype)


def gammasgn(x, out=None):
    """The sign of Gamma(x) (constant between the poles: no derivative)."""
    _no_out("gammasgn", out)
    (x,) = _ufunc_operands("gammasgn", x)
    return ew.stop_gradient.bind(_gamma_sign(x))


def gamma(x, out=None):
    """Gamma(x) = gammasgn(x) exp(gammaln(x)): inf at 0, -inf at -0.0, nan at the negative
    integers, as SciPy's."""
    _no_out("gamma", out)
    (x,) = _ufunc_operands("gamma", x)
    return ew.stop_gradient.bind(_gamma_sign(x)) * npm.exp(ew.lgamma.bind(x))


def rgamma(x, out=None):
    """1 / Gamma(x) = gammasgn(x) exp(-gammaln(x)), 0 at the poles, as SciPy's."""
    _no_out("rgamma", out)
    (x,) = _ufunc_operands("rgamma", x)
    pole = _nonpositive_integer(x)
    safe_x = npm.where(pole, 1.0, x)
    value = ew.stop_gradient.bind(_gamma_sign(safe_x)) * npm.exp(-ew.lgamma.bind(safe_x))
    return npm.where(pole, 0.0, value)


class _GammaFunctions:
    """What s2s_runtime.special's log_gamma_ratio needs, on staged values."""
    select = staticmethod(npm.where)
    log = staticmethod(npm.log)
    log1p = staticmethod(npm.log1p)
    lgamma = staticmethod(gammaln)


def _log_abs_beta(a, b):
    """log |B(a, b)|: for positive a and b lgamma(small) - (lgamma(big + small) - lgamma(big)),
    the difference by Stirling's series for a large `big` (where the two lgammas are huge and
    nearly equal); lgamma(a) + lgamma(b) - lgamma(a + b) where either is not positive."""
    positive = (a > 0) & (b > 0)
    big, small = npm.where(a >= b, a, b), npm.where(a >= b, b, a)
    safe_big, safe_small = npm.where(positive, big, 2.0), npm.where(positive, small, 1.0)
    by_ratio = gammaln(safe_small) - log_gamma_ratio(safe_big, safe_small, _GammaFunctions)
    return npm.where(positive, by_ratio, gammaln(a) + gammaln(b) - gammaln(a + b))


def betaln(a, b, out=None):
    """log |B(a, b)| = log |Gamma(a) Gamma(b) / Gamma(a + b)|, keeping its digits when one
    argument is much larger than the other (betaln(1e10, 0.5))."""
    _no_out("betaln", out)
    return _log_abs_beta(*_ufunc_operands("betaln", a, b))


def beta(a, b, out=None):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b), as exp(betaln) with its sign."""
    _no_out("beta", out)
    a, b = _ufunc_operands("beta", a, b)
    sign = ew.stop_gradient.bind(_gamma_sign(a) * _gamma_sign(b) * _gamma_sign(a + b))
    return sign * npm.exp(_log_abs_beta(a, b))


def _float64_operands(name: str, *xs):
    """Operands in float64 whatever their dtype: SciPy's multigammaln adds a float64 scalar,
    and polygamma's integer order selects the float64 loop."""
    return [convert(x, dtypes.canonicalize_dtype(np.float64)) for x in _real_operands(name, xs)]


def multigammaln(a, d):
    """log Gamma_d(a) = d (d - 1) / 4 log(pi) + sum_j<d gammaln(a - j / 2), the multivariate
    log-gamma function, for a static dimension d >= 1. SciPy raises for a <= (d - 1) / 2,
    which it can check on the values; a staged a gives nan there."""
    if isinstance(d, Tracer) or not float(d).is_integer() or int(d) < 1 or np.ndim(d) != 0:
        raise UnsupportedFunctionError(
            f"scipy.special.multigammaln(a, d) needs the dimension d as a positive integer known "
            f"when the function is staged, got {d!r}", "pass d as a Python int, such as multigammaln(a, 3)")
    d = int(d)
    (a,) = _float64_operands("multigammaln", a)
    terms = [gammaln(a if j == 0 else a - 0.5 * j) for j in range(d)]
    total = d * (d - 1) / 4 * math.log(math.pi) + sum(terms[1:], terms[0])
    return npm.where(a > 0.5 * (d - 1), total, np.nan)


def _polygamma_order(n):
    """psi^(n)'s order as a static integer array, or a clear error."""
    if isinstance(n, Tracer):
        raise UnsupportedFunctionError(
            "scipy.special.polygamma(n, x) with a staged order n is not supported by s2s",
            "pass n as a Python int, or as an integer array defined outside the function (one "
            "made inside it is staged)")
    orders = np.asarray(n)
    if orders.dtype.kind not in "iub" and not (orders.dtype.kind == "f" and np.all(orders == np.floor(orders))):
        raise UnsupportedFunctionError(f"scipy.special.polygamma(n, x) needs integer orders n, got {n!r}",
                                       "pass n as a non-negative Python int or integer array")
    if np.any(orders < 0):
        raise UnsupportedFunctionError(f"scipy.special.polygamma(n, x) needs orders n >= 0, got {n!r}",
                                       "pass n >= 0 (n = 0 is digamma)")
    return orders.astype(np.int64)


def _cot_derivative_polynomial(n: int) -> list[int]:
    """The coefficients (lowest first) of P_n with d^n/dz^n cot(z) = P_n(cot z):
    P_0(c) = c and P_k+1(c) = -(1 + c^2) P_k'(c)."""
    p = [0, 1]
    for _ in range(n):
        derivative = [i * p[i] for i in range(1, len(p))]
        p = [0] * (len(derivative) + 2)
        for i, v in enumerate(derivative):
            p[i] -= v
            p[i + 2] -= v
    return p


def _polygamma_by_reflection(x, k: int):
    """psi^(k)(x), for negative x by the reflection psi^(k)(x) = (-1)^k psi^(k)(1 - x)
    - pi^(k+1) P_k(cot(pi x)), x reduced to [-1/2, 1/2] first (exactly, cot has period pi), so
    only positive arguments reach the polygamma primitive (XLA's loses digits below 0:
    3.7e-10 at psi''(-5.5))."""
    negative = x < 0
    safe = npm.where(negative, x, -0.25)    # the other branch's operands stay finite
    reduced = safe - npm.round(safe)
    # cot(pi r) = tan(pi (1/2 - |r|)) sign(r), exact at r = 1/2, where 1 / tan(pi r) is
    # 6e-17 off; near r = 0, where 1/2 - |r| rounds, 1 / tan(pi r) itself.
    magnitude = npm.abs(reduced)
    central = magnitude < 0.25
    cot = npm.where(central, 1 / npm.tan(np.pi * npm.where(central, reduced, 0.25)),
                    npm.sign(reduced) * npm.tan(np.pi * (0.5 - magnitude)))
    coefficients = _cot_derivative_polynomial(k)
    polynomial = float(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        polynomial = coefficient + cot * polynomial
    reflected = (-1) ** k * ew.polygamma.bind(1 - safe, n=k) - np.pi ** (k + 1) * polynomial
    return npm.where(negative, reflected, ew.polygamma.bind(npm.where(negative, 1.0, x), n=k))


def polygamma(n, x):
    """psi^(n)(x), the n-th derivative of digamma, for static orders n >= 0: digamma for
    n = 0, the polygamma primitive above; an array of orders selects per element."""
    orders = _polygamma_order(n)
    (x,) = _float64_operands("polygamma", x)
    x = shaping.broadcast_to(x, np.broadcast_shapes(orders.shape, aval(x).shape))

    def of_order(k: int):
        if k == 0:
            return ew.digamma.bind(x)
        # At the poles (and -inf) SciPy's (-1)^(k+1) k! zeta(k + 1, x) is infinite; at inf
        # it is 0 (where XLA's polygamma gives nan).
        pole = _nonpositive_integer(x) | (x == -np.inf)
        value = npm.where(x == np.inf, 0.0, _polygamma_by_reflection(x, k))
        return npm.where(pole, (-1) ** (k + 1) * np.inf, value)
    if orders.ndim == 0:
        return of_order(int(orders))
    values = np.unique(orders)
    result = of_order(int(values[-1]))
    for k in values[:-1]:
        result = npm.where(orders == k, of_order(int(k)), result)
    return result


def gammainc(a, x, out=None):
    """P(a, x), the regularized lower incomplete gamma function: its own primitive (a loop),
    differentiable in x and (once) in a."""
    _no_out("gammainc", out)
    return special_primitives.gammainc.bind(*_ufunc_operands("gammainc", a, x))


def gammaincc(a, x, out=None):
    """Q(a, x) = 1 - P(a, x), computed directly where P is near 1: its own primitive."""
    _no_out("gammaincc", out)
    return special_primitives.gammaincc.bind(*_ufunc_operands("gammaincc", a, x))


def register_gamma_family(special) -> None:
    """Maps the gamma family of scipy.special (the module given) to the functions here."""
    for name in ("gamma", "gammasgn", "rgamma", "beta", "betaln", "multigammaln", "polygamma",
                 "gammainc", "gammaincc"):
        implements(getattr(special, name))(globals()[name])
