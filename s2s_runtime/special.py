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
