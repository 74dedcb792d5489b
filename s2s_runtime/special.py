"""Special functions NumPy lacks (erf, erfc, lgamma, digamma), in NumPy, for emitted code.

Emitted code may not import SciPy: where a user's code called `scipy.special.erfc`, the
emitted code calls `rt.erfc`, NumPy only, under SciPy's name.

Results keep the input's floating dtype, as the corresponding XLA ops do.
"""
from __future__ import annotations

import math

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _lgamma_scalar(v: float) -> float:
    if math.isnan(v):   # before any comparison: `nan <= 0` raises the FP invalid flag
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return math.inf  # poles of Gamma at 0, -1, -2, ...; log|Gamma(+-inf)| = inf
    try:
        return math.lgamma(v)
    except OverflowError:   # log Gamma(v) beyond the largest double (v > ~2.5e305)
        return math.inf


_lgamma = np.frompyfunc(_lgamma_scalar, 1, 1)


def _floating(x):
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def erf(x):
    x = _floating(x)
    return np.asarray(_erf(x), dtype=np.float64).astype(x.dtype)[()]


def erfc(x):
    """1 - erf(x) without the cancellation: erfc(10) is 2.1e-45, where 1 - erf(10) is 0."""
    x = _floating(x)
    return np.asarray(_erfc(x), dtype=np.float64).astype(x.dtype)[()]


def lgamma(x):
    x = _floating(x)
    with np.errstate(over="ignore"):   # float32 results beyond its range become inf
        return np.asarray(_lgamma(x), dtype=np.float64).astype(x.dtype)[()]


def digamma(x):
    """psi(x) = d/dx log Gamma(x): reflection below 1/2, recurrence up to 10, asymptotic series.

    From z >= 10 the series' first omitted term, 1/(12 z^14), is below float64's epsilon.
    """
    x = _floating(x)
    dtype = x.dtype
    z = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        reflect = z < 0.5
        # tan has period pi: reducing x to [-1/2, 1/2] first (exactly) keeps pi * x from
        # losing the digits that matter near the poles and for large negative x.
        reflection = np.where(reflect, np.pi / np.tan(np.pi * (z - np.round(z))), 0.0)
        z = np.where(reflect, 1.0 - z, z)
        shift = np.zeros_like(z)
        for _ in range(10):
            small = z < 10.0
            shift = shift - np.where(small, 1.0 / z, 0.0)
            z = np.where(small, z + 1.0, z)
        inv2 = 1.0 / (z * z)
        series = np.log(z) - 0.5 / z - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (
            1 / 252 - inv2 * (1 / 240 - inv2 * (1 / 132 - inv2 * (691 / 32760))))))
        psi = series + shift - reflection
        poles = (x <= 0) & (x == np.floor(x))
        psi = np.where(poles, np.nan, psi)
    return psi.astype(dtype)[()]


def logistic(x):
    """1 / (1 + exp(-x)) without overflow warnings for large |x|."""
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)[()]


# Bernoulli numbers B_2k, k = 1..7, for the asymptotic series of polygamma.
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)


def polygamma(n: int, x):
    """psi^(n)(x) for n >= 1: recurrence up to x >= 15, then the asymptotic series."""
    if n < 1:
        raise ValueError("polygamma here is for n >= 1; use digamma for n = 0")
    x = _floating(x)
    dtype = x.dtype
    z = x.astype(np.float64)
    sign = -1.0 if n % 2 == 0 else 1.0      # (-1)^(n+1)
    fact = math.factorial
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        valid = (z > -100) & ~((z <= 0) & (z == np.floor(z)))
        z = np.where(valid, z, 20.0)
        shift = np.zeros_like(z)
        steps = int(max(0.0, math.ceil(15.0 - float(np.min(z, initial=15.0)))))
        for _ in range(steps):
            small = z < 15.0
            shift = shift + np.where(small, sign * fact(n) / z ** (n + 1), 0.0)
            z = np.where(small, z + 1.0, z)
        series = fact(n - 1) / z ** n + fact(n) / (2 * z ** (n + 1))
        for k, b in enumerate(_BERNOULLI, start=1):
            series = series + b * fact(2 * k + n - 1) / (fact(2 * k) * z ** (2 * k + n))
        result = np.where(valid, sign * series + shift, np.nan)
    return result.astype(dtype)[()]


# ---------------------------------------------------------------------------------------
# The regularized incomplete beta function I_x(a, b) (scipy.special.betainc), by the
# continued fraction of Numerical Recipes' betacf evaluated with the modified Lentz method,
# on the side where it converges fast (x < (a + 1) / (a + b + 2); else 1 - I_{1-x}(b, a)),
# in at most O(sqrt(max(a, b))) steps. The steps are written once, with array operators
# and the functions `fns` gives (NumPy's here; s2s's compiler passes staged ones, so the
# XLA loop is built from this same code).

BETAINC_MAX_STEPS = 1000


class NumpyFunctions:
    """What the betainc steps need, for NumPy arrays."""
    select = staticmethod(np.where)
    abs = staticmethod(np.abs)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    log1p = staticmethod(np.log1p)
    lgamma = staticmethod(lgamma)


STIRLING_FROM = 1e3   # log_gamma_ratio's series: its next term is below 1e-20 from here on


def log_gamma_ratio(big, small, fns):
    """lgamma(big + small) - lgamma(big), for big >= small >= 0. For a large `big` the two
    lgammas are huge and nearly equal (lgamma(5e9) ~ 1e11), so their difference loses every
    digit; Stirling's series for both, subtracted term by term, keeps them:
    (big - 1/2) log1p(small / big) + small log(big + small) - small
    - small / (12 big (big + small)) - (1 / (big + small)^3 - 1 / big^3) / 360."""
    large = big >= STIRLING_FROM
    z = fns.select(large, big, STIRLING_FROM)   # the series' operand, harmless where unused
    total = z + small
    series = ((z - 0.5) * fns.log1p(small / z) + small * fns.log(total) - small
              - small / (12 * z * total) - (1 / (total * total * total) - 1 / (z * z * z)) / 360)
    return fns.select(large, series, fns.lgamma(big + small) - fns.lgamma(big))


def _away_from_zero(v, tiny, fns):
    return fns.select(fns.abs(v) < tiny, tiny, v)


def betainc_start(a, b, x, tiny, fns):
    """(a, b, x, swapped, front, c, d, h): the side to work on, the factor
    x^a (1 - x)^b / (a B(a, b)) in front of the fraction, and Lentz's start."""
    swapped = x > (a + 1) / (a + b + 2)
    a, b, x = fns.select(swapped, b, a), fns.select(swapped, a, b), fns.select(swapped, 1 - x, x)
    big, small = fns.select(a >= b, a, b), fns.select(a >= b, b, a)   # log B(a, b), for any a, b:
    log_front = a * fns.log(x) + b * fns.log1p(-x) - fns.lgamma(small) + log_gamma_ratio(big, small, fns)
    front = fns.exp(log_front) / a
    d = 1 / _away_from_zero(1 - (a + b) * x / (a + 1), tiny, fns)
    c = 1 + 0 * d    # ones of d's shape and dtype, staged or not
    return a, b, x, swapped, front, c, d, d


def betainc_step(a, b, x, m, c, d, h, tiny, fns):
    """Step m (1, 2, ...) of the fraction, its even and odd terms: (c, d, h, delta), where
    |delta - 1| below the precision means h has converged."""
    aa = m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m))
    d = 1 / _away_from_zero(1 + aa * d, tiny, fns)
    c = _away_from_zero(1 + aa / c, tiny, fns)
    h = h * d * c
    aa = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m))
    d = 1 / _away_from_zero(1 + aa * d, tiny, fns)
    c = _away_from_zero(1 + aa / c, tiny, fns)
    delta = d * c
    return c, d, h * delta, delta


def betainc_finish(a, b, x, swapped, front, h, fns):
    """I_x(a, b) from the converged fraction h, with SciPy's limits: for a == 0 < b it is 1
    (0 at x == 0), for b == 0 < a it is 0 (1 at x == 1); nan for a or b negative, both 0,
    or x outside [0, 1]."""
    value = front * h
    value = fns.select(swapped, 1 - value, value)
    value = fns.select(a == 0, fns.select(x > 0, 1.0, 0.0), value)
    value = fns.select(b == 0, fns.select(x < 1, 0.0, 1.0), value)
    valid = (a >= 0) & (b >= 0) & ((a > 0) | (b > 0)) & (x >= 0) & (x <= 1)
    return fns.select(valid, value, np.nan)


def betainc(a, b, x):
    """I_x(a, b) in a, b, x's dtype, as scipy.special.betainc."""
    a, b, x = np.broadcast_arrays(_floating(a), _floating(b), _floating(x))
    dtype = np.result_type(a, b, x)
    fns, tiny, eps = NumpyFunctions, float(np.finfo(dtype).tiny), float(np.finfo(dtype).eps)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a_, b_, x_, swapped, front, c, d, h = betainc_start(a.astype(dtype), b.astype(dtype),
                                                            x.astype(dtype), tiny, fns)
        for m in range(1, BETAINC_MAX_STEPS + 1):
            c, d, h, delta = betainc_step(a_, b_, x_, dtype.type(m), c, d, h, tiny, fns)
            if not np.any(np.abs(delta - 1) > eps):   # nan counts as converged
                break
        return np.asarray(betainc_finish(a, b, x, swapped, front, h, fns), dtype)[()]
