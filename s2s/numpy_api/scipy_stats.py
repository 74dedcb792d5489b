"""scipy.stats distributions that model code calls, on staged values: norm (pdf, logpdf,
cdf, logcdf, sf, logsf, ppf, isf), t (pdf, logpdf, cdf, logcdf), beta (pdf, logpdf, cdf),
dirichlet (pdf, logpdf) and multivariate_normal (pdf, logpdf, entropy; allow_singular),
with SciPy's parameters (`loc`, `scale`, `df`, `a`, `b`, `alpha`, `mean`, `cov`) staged
or not.

SciPy computes these in float64 whatever the input dtype, and so do they. A parameter
outside its domain (scale <= 0, df <= 0) gives nan, as SciPy's; a covariance that is not
positive definite gives nan where SciPy raises (its check needs the values).

`register_scipy_stats` maps SciPy's function objects to these; the dispatch table runs it
once the user's code has imported scipy.stats (see `_base.DispatchTable`).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError
from s2s.numpy_api import decompositions, linalg, reductions, scipy_special, shaping
from s2s.numpy_api import math as npm
from s2s.numpy_api._base import NUMPY_IMPLS, convert, implements, operand, shape
from s2s.primitives import elementwise as ew
from s2s.staging import Tracer
from s2s_runtime.special import log_gamma_ratio

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SQRT_HALF = math.sqrt(0.5)


def _float64(*xs):
    return [convert(operand(x), dtypes.canonicalize_dtype(np.float64)) for x in xs]


def _static_number(value) -> bool:
    return not isinstance(value, Tracer) and np.ndim(value) == 0


def _standardized(x, loc, scale):
    """(z, log scale, valid) with z = (x - loc) / scale in float64 and valid = scale > 0.
    A static loc of 0 and scale of 1 (the defaults) stage nothing, so emitted code reads
    `np.exp(-0.5 * x * x)`, and a static valid scale needs no check."""
    (x,) = _float64(x)
    z = x if _static_number(loc) and loc == 0 else x - _float64(loc)[0]
    if _static_number(scale) and scale > 0:
        return (z if scale == 1 else z / float(scale)), math.log(scale), True
    (scale,) = _float64(scale)
    return z / scale, npm.log(scale), scale > 0


def _less(value, log_scale):
    """value - log_scale, with nothing staged for a static log_scale of 0."""
    return value if isinstance(log_scale, float) and log_scale == 0 else value - log_scale


def _where_valid(valid, value):
    return value if valid is True else npm.where(valid, value, np.nan)


# ---------------------------------------------------------------------------------------
# The normal distribution


def normal_logpdf(z):
    return -0.5 * z * z - _LOG_SQRT_2PI


def normal_cdf(z):
    """Phi(z) = erfc(-z / sqrt 2) / 2: accurate in the left tail (Phi(-30) = 4.9e-198), where
    (1 + erf) / 2 is 0."""
    return 0.5 * scipy_special.erfc(-z * _SQRT_HALF)


# log Phi(z) for z < _SERIES_BELOW: -z^2/2 - log(-z) - log sqrt(2 pi) + log of the asymptotic
# series sum_k (-1)^k (2k - 1)!! / z^(2k), whose first omitted term is below 1e-17 there.
_SERIES_BELOW = -20.0
_SERIES_COEFFICIENTS = [(-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(11)]


def normal_logcdf(z):
    """log Phi(z), accurate everywhere: the asymptotic series in the far left tail (where
    Phi underflows), log(erfc(-z / sqrt 2) / 2) up to 0, and log1p(-erfc(z / sqrt 2) / 2)
    above (where Phi rounds to 1). Each branch sees only inputs in its own range, so the
    ones not taken give no inf or nan to the derivative."""
    far_left = z < _SERIES_BELOW
    right = z > 0
    left_z = npm.where(far_left, z, _SERIES_BELOW)
    inverse_square = 1 / (left_z * left_z)
    series = float(_SERIES_COEFFICIENTS[-1])
    for coefficient in reversed(_SERIES_COEFFICIENTS[:-1]):   # Horner's rule in 1 / z^2
        series = coefficient + inverse_square * series
    tail = -0.5 * left_z * left_z - npm.log(-left_z) - _LOG_SQRT_2PI + npm.log(series)
    middle = npm.log(normal_cdf(npm.where(far_left | right, 0.0, z)))
    upper = npm.log1p(-0.5 * scipy_special.erfc(npm.where(right, z, 0.0) * _SQRT_HALF))
    return npm.where(far_left, tail, npm.where(right, upper, middle))


def norm_pdf(x, loc=0, scale=1):
    return npm.exp(norm_logpdf(x, loc, scale))


def norm_logpdf(x, loc=0, scale=1):
    z, log_scale, valid = _standardized(x, loc, scale)
    return _where_valid(valid, _less(normal_logpdf(z), log_scale))


def norm_cdf(x, loc=0, scale=1):
    z, _, valid = _standardized(x, loc, scale)
    return _where_valid(valid, normal_cdf(z))


def norm_logcdf(x, loc=0, scale=1):
    z, _, valid = _standardized(x, loc, scale)
    return _where_valid(valid, normal_logcdf(z))


def norm_sf(x, loc=0, scale=1):
    z, _, valid = _standardized(x, loc, scale)
    return _where_valid(valid, normal_cdf(-z))


def norm_logsf(x, loc=0, scale=1):
    z, _, valid = _standardized(x, loc, scale)
    return _where_valid(valid, normal_logcdf(-z))


# ---------------------------------------------------------------------------------------
# Student's t


def t_logpdf(x, df, loc=0, scale=1):
    """log of Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale) (1 + z^2/df)^(-(df+1)/2);
    the normal's where df is inf, as SciPy."""
    z, log_scale, valid = _standardized(x, loc, scale)
    (df,) = _float64(df)
    infinite = npm.isinf(df)
    finite_df = npm.where(infinite, 1.0, df)
    half = 0.5 * (finite_df + 1)
    student = (log_gamma_ratio(0.5 * finite_df, 0.5, _STAGED) - 0.5 * npm.log(finite_df * math.pi)
               - half * npm.log1p(z * z / finite_df))
    density = _less(npm.where(infinite, normal_logpdf(z), student), log_scale)
    return _where_valid(valid & (df > 0), density)


def t_pdf(x, df, loc=0, scale=1):
    return npm.exp(t_logpdf(x, df, loc, scale))


class _STAGED:
    """What s2s_runtime.special's formulas need, on values s2s stages."""
    select = staticmethod(npm.where)
    log = staticmethod(npm.log)
    log1p = staticmethod(npm.log1p)
    lgamma = staticmethod(scipy_special.gammaln)


# Below this |z|, t.cdf is 1/2 + z pdf(0) to within z^2 relative: exact in float64, and
# its derivative (the pdf) has no 0 * inf from the fraction's z^2 underflowing.
T_CDF_LINEAR_BELOW = 1e-8


def _t_cdf_by_betainc(z, df, log_lower=False):
    """t.cdf for a finite df through the regularized incomplete beta function: beyond
    |z| = 1, the tail I_{df/(df+z^2)}(df/2, 1/2) / 2 from the nearer end (accurate however
    small); within, where that argument nears 1 and its derivative in x grows without
    bound, 1/2 + sign(z) I_{z^2/(df+z^2)}(1/2, df/2) / 2 (the sum stays above 0.15: no
    digits lost); near z = 0, 1/2 + z pdf(0) (T_CDF_LINEAR_BELOW). Rounding df/(df+z^2)
    costs about df * 1e-16 relative (4e-12 at df = 1e5), so from T_SERIES_FROM_DF on the
    series below takes over. With `log_lower`, log t.cdf for z <= 0, its far tail from
    log I, which stays finite where the tail is too small for float64."""
    at_zero = npm.abs(z) < T_CDF_LINEAR_BELOW
    safe_z = npm.where(at_zero, 1.0, z)
    square = safe_z * safe_z
    near = square < 1
    # Each side sees only squares of its own range, so the other's derivative is finite.
    near_square = npm.where(near, square, 0.25)
    far_square = npm.where(near, df, square)
    near_half = 0.5 * scipy_special.betainc(0.5, 0.5 * df, near_square / (df + near_square))
    center = npm.where(safe_z > 0, 0.5 + near_half, 0.5 - near_half)
    density_at_zero = npm.exp(t_logpdf(0.0, df))
    far_argument = df / (df + far_square)
    if log_lower:
        near_log = npm.log(npm.where(at_zero, 0.5 + z * density_at_zero, center))
        far_log = math.log(0.5) + scipy_special.log_betainc(0.5 * df, 0.5, far_argument)
        return npm.where(at_zero | near, near_log, far_log)
    far_half = 0.5 * scipy_special.betainc(0.5 * df, 0.5, far_argument)
    tails = npm.where(safe_z > 0, 1 - far_half, far_half)
    student = npm.where(near, center, tails)
    return npm.where(at_zero, 0.5 + z * density_at_zero, student)


def _bernoulli_plus(count: int) -> list[Fraction]:
    """B_0 .. B_{count-1} with B_1 = +1/2: the coefficients of u / (1 - e^-u) = sum B_n u^n / n!."""
    numbers: list[Fraction] = []
    for m in range(count):
        numbers.append(Fraction(1) if m == 0 else
                       -sum(math.comb(m + 1, k) * numbers[k] for k in range(m)) / (m + 1))
    return [abs(b) if m == 1 else b for m, b in enumerate(numbers)]


def _sqrt_series(coefficients: list[Fraction]) -> list[Fraction]:
    """The power series h with h^2 = g (g_0 = 1), term by term."""
    root = [Fraction(1)]
    for n in range(1, len(coefficients)):
        root.append((coefficients[n] - sum(root[i] * root[n - i] for i in range(1, n))) / 2)
    return root


# t.cdf for a large df, as a normal integral: with w = sign(t) sqrt(df log(1 + t^2/df)),
# (1 + t^2/df)^(-(df+1)/2) dt = e^(-w^2/2) h(w^2/df) dw, h(u) = sqrt(u / (1 - e^-u)), so
# t.cdf(t) = C sum_k h_k M_k(w) / df^k, with M_k(w) the integral of s^2k phi(s) up to w and
# C = sqrt(2 pi) Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi)). h's series converges for
# |u| < 2 pi; T_SERIES_TERMS terms up to u = T_SERIES_UP_TO leave (0.75 / 2 pi)^18 ~ 3e-17.
# Beyond that u the tail is below e^(-0.375 df): it underflows from df = 2000 on, and below,
# betainc's df * 1e-16 is at most 2e-13.
T_SERIES_FROM_DF = 100.0
T_SERIES_UP_TO = 0.75
T_SERIES_TERMS = 18
_T_SERIES = [float(h) for h in _sqrt_series(
    [b / math.factorial(n) for n, b in enumerate(_bernoulli_plus(T_SERIES_TERMS))])]


def _t_log_lower_tail(s, df):
    """log t.cdf(s) for s <= 0 and a large df, by the normal integral above: log C +
    log Phi(w) + log sum_k h_k R_k with R_k = M_k(w) / (Phi(w) df^k), which
    integration by parts gives as R_k = ((2k - 1) R_(k-1) + |w| u^(k-1) phi(w)/Phi(w)) / df
    (u = w^2/df): positive terms, and no underflow however far the tail."""
    ratio = s * s / df
    u = npm.log1p(ratio)
    tiny = ratio < 1e-10   # log1p(r)/r = 1 - r/2 there, without the 0/0 at s = 0
    safe_ratio = npm.where(tiny, 1.0, ratio)
    w = s * npm.where(tiny, 1 - 0.25 * ratio, npm.sqrt(npm.log1p(safe_ratio) / safe_ratio))
    log_phi_cdf = normal_logcdf(w)
    mills = npm.exp(normal_logpdf(w) - log_phi_cdf)
    term, power, total = 1.0, 1.0, _T_SERIES[0]
    for k, coefficient in enumerate(_T_SERIES[1:], start=1):
        term = ((2 * k - 1) * term - w * power * mills) / df
        power = power * u
        total = total + coefficient * term
    return _t_log_normalizer(0.5 * df) + log_phi_cdf + npm.log(total)


def _t_log_normalizer(half_df):
    """log C = lgamma(n + 1/2) - lgamma(n) - log(n) / 2 for n = df/2 >= 50, by Stirling's
    series (its first omitted term below 1e-16 there): n log1p(1/(2n)) - 1/2 - ..., about
    -1/(8n), with none of the lgammas' digits lost to their difference."""
    big = half_df + 0.5
    return (half_df * npm.log1p(0.5 / half_df) - 0.5 - 1 / (24 * half_df * big)
            - (1 / big ** 3 - 1 / half_df ** 3) / 360 + (1 / big ** 5 - 1 / half_df ** 5) / 1260)


def _t_cdf_parts(x, df, loc, scale):
    """What t.cdf and t.logcdf share: (z, valid, df, infinite, by_series, log_tail,
    by_betainc) with log_tail = log t.cdf(-|z|) by the series where `by_series`, and
    by_betainc(z') t.cdf by the incomplete beta function elsewhere (by_betainc(z',
    log_lower=True) its log, for z' <= 0). Each way sees
    only values in its own range, so the other's derivative stays finite."""
    z, _, valid = _standardized(x, loc, scale)
    (df,) = _float64(df)
    infinite = npm.isinf(df)
    by_series = (df >= T_SERIES_FROM_DF) & ~infinite & (npm.log1p(z * z / df) <= T_SERIES_UP_TO)
    series_z = npm.where(by_series, z, 0.0)
    series_df = npm.where(by_series, df, T_SERIES_FROM_DF)
    log_tail = _t_log_lower_tail(npm.where(series_z > 0, -series_z, series_z), series_df)
    beta_df = npm.where(infinite | by_series, 1.0, df)
    return z, valid, df, infinite, by_series, log_tail, lambda at, log_lower=False: _t_cdf_by_betainc(
        at, beta_df, log_lower)


def t_cdf(x, df, loc=0, scale=1):
    """From T_SERIES_FROM_DF on, by the normal integral (`_t_log_lower_tail`), the upper
    side as 1 - lower tail of -z; below, by the incomplete beta function
    (`_t_cdf_by_betainc`); the normal's where df is inf, as SciPy.
    Its derivative in x is the pdf; in df it is refused, as JAX has none."""
    z, valid, df, infinite, by_series, log_tail, by_betainc = _t_cdf_parts(x, df, loc, scale)
    lower_tail = npm.exp(log_tail)   # at most 1/2, so 1 - it loses no digits
    series = npm.where(z > 0, 1 - lower_tail, lower_tail)
    cdf = npm.where(infinite, normal_cdf(z), npm.where(by_series, series, by_betainc(z)))
    return _where_valid(valid & (df > 0), cdf)


# ---------------------------------------------------------------------------------------
# The multivariate normal


def _mvn_parameters(mean, cov):
    """(mean, cov, dim) as SciPy reads them: the dimension from `mean` (or cov's, else 1);
    a scalar cov is cov * I, a 1-D cov the diagonal."""
    if mean is None:
        cov_shape = shape(operand(cov))
        dim = cov_shape[0] if len(cov_shape) == 2 else 1
        mean = np.zeros(dim)
    (mean, cov) = _float64(mean, cov)
    mean_shape = shape(mean)
    dim = int(np.prod(mean_shape)) if mean_shape else 1
    mean = shaping.reshape(mean, (dim,))
    cov_shape = shape(cov)
    if len(cov_shape) == 0:
        cov = cov * np.eye(dim)
    elif len(cov_shape) == 1 and cov_shape[0] == dim:
        cov = cov * np.eye(dim)
    elif cov_shape != (dim, dim):
        raise ShapeError(f"multivariate_normal: cov of shape {cov_shape} does not fit a mean "
                         f"of dimension {dim}: pass a ({dim}, {dim}) matrix, a length-{dim} "
                         "diagonal or a scalar")
    return mean, cov, dim


def mvn_logpdf(x, mean=None, cov=1, allow_singular=False):
    """-(dim log 2 pi + log det cov + (x - mean)^T cov^-1 (x - mean)) / 2, through the
    Cholesky factor L of cov: log det cov = 2 sum log diag L, and the quadratic form is the
    squared norm of L^-1 (x - mean). `x` is one point (a vector of length dim, or a scalar
    when dim is 1) or points along its leading axes; size-1 axes of the result are
    squeezed out, as SciPy does. With allow_singular, SciPy's pseudo-determinant and
    pseudo-inverse instead (`mvn_singular_logpdf`)."""
    mean, cov, dim = _mvn_parameters(mean, cov)
    (x,) = _float64(x)
    x_shape = shape(x)
    if len(x_shape) == 0 or (len(x_shape) == 1 and dim == 1):
        x = shaping.reshape(x, x_shape + (1,))
    if shape(x)[-1] != dim:
        raise ShapeError(f"multivariate_normal: points of dimension {shape(x)[-1]} do not fit "
                         f"a mean of dimension {dim}")
    centered = shaping.reshape(x - mean, (-1, dim))
    if allow_singular:
        return shaping.squeeze(shaping.reshape(mvn_singular_logpdf(centered, cov), shape(x)[:-1]))
    # SciPy reads one triangle of cov; a function of cov's symmetric part has the symmetric
    # gradient (JAX's too), where the factor of one triangle would give a triangular one.
    factor = linalg.cholesky(0.5 * (cov + shaping.swapaxes(cov, -1, -2)))
    whitened = linalg.solve(factor, shaping.transpose(centered))
    quadratic = reductions.sum(whitened * whitened, axis=0)
    log_det = 2 * reductions.sum(npm.log(shaping.diagonal(factor)))
    out = -0.5 * (dim * math.log(2 * math.pi) + log_det + quadratic)
    return shaping.squeeze(shaping.reshape(out, shape(x)[:-1]))


def mvn_pdf(x, mean=None, cov=1, allow_singular=False):
    return npm.exp(mvn_logpdf(x, mean, cov, allow_singular))


# ---------------------------------------------------------------------------------------
# Registration


def _frozen_method_resolver(stats):
    """A resolver for the dispatch table: the method of a frozen distribution (`norm(0,
    2).pdf`, made anew by each call) is the distribution's own method with the frozen
    parameters, `norm.pdf(x, 0, 2)`. (A frozen distribution holds a copy of `norm`, so the
    method is found by the distribution's name.)"""
    frozen_type = (type(stats.norm()), type(stats.poisson(1.0)))   # continuous, discrete

    def resolve(fn):
        owner = getattr(fn, "__self__", None)
        if not isinstance(owner, frozen_type):
            return None
        distribution = getattr(stats, owner.dist.name, None)
        unfrozen = NUMPY_IMPLS.get(getattr(distribution, fn.__name__, None))
        if unfrozen is None:
            return None
        return lambda x: unfrozen(x, *owner.args, **owner.kwds)
    return resolve


def register_scipy_stats() -> None:
    """Maps scipy.stats's methods to the functions here (once scipy.stats is imported)."""
    import scipy.stats as stats
    NUMPY_IMPLS.resolvers.append(_frozen_method_resolver(stats))
    for method in ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"):
        implements(getattr(stats.norm, method))(globals()[f"norm_{method}"])
    for method in ("pdf", "logpdf", "cdf"):
        implements(getattr(stats.t, method))(globals()[f"t_{method}"])
    implements(stats.multivariate_normal.pdf)(mvn_pdf)
    implements(stats.multivariate_normal.logpdf)(mvn_logpdf)
    register_gamma_family_stats(stats)


# ---------------------------------------------------------------------------------------
# Quantiles of the normal (norm.ppf, isf) and scipy.special's normal functions (ndtr,
# log_ndtr), which are the standard normal's cdf and log cdf above.


def _destandardized(z, loc, scale):
    """loc + scale z in float64, nan where scale <= 0; a static loc of 0 and scale of 1
    stage nothing."""
    x = z if _static_number(scale) and scale == 1 else z * _float64(scale)[0]
    x = x if _static_number(loc) and loc == 0 else x + _float64(loc)[0]
    valid = True if _static_number(scale) and scale > 0 else _float64(scale)[0] > 0
    return _where_valid(valid, x)


def norm_ppf(q, loc=0, scale=1):
    """The x with cdf(x) = q: loc + scale ndtri(q); -inf at 0, inf at 1, nan outside."""
    return _destandardized(scipy_special.ndtri(*_float64(q)), loc, scale)


def norm_isf(q, loc=0, scale=1):
    """The x with sf(x) = q: loc - scale ndtri(q), which keeps its digits for a small q
    (ppf(1 - q) would round 1 - q)."""
    return _destandardized(-scipy_special.ndtri(*_float64(q)), loc, scale)


def ndtr(x):
    """scipy.special.ndtr: Phi(x), in float32 for float32 x as SciPy's ufunc."""
    (x,) = scipy_special._ufunc_operands("ndtr", x)
    return normal_cdf(x)


def log_ndtr(x):
    """scipy.special.log_ndtr: log Phi(x), accurate in both tails."""
    (x,) = scipy_special._ufunc_operands("log_ndtr", x)
    return normal_logcdf(x)


# ---------------------------------------------------------------------------------------
# t.logcdf


def t_logcdf(x, df, loc=0, scale=1):
    """log of t.cdf, each side from its small value: below 0 the log of the cdf (the
    tail's own digits), above the log1p of minus the survival function cdf(-z), so a cdf
    near 1 keeps its tiny log; by the series the log of the tail itself, which never
    underflows; log Phi(z) where df is inf. Differentiable in x, loc and scale, as t.cdf."""
    z, valid, df, infinite, by_series, log_tail, by_betainc = _t_cdf_parts(x, df, loc, scale)
    upper = z > 0
    series = npm.where(upper, npm.log1p(-npm.exp(log_tail)), log_tail)
    lower_tail = by_betainc(npm.where(upper, 0.0, z), log_lower=True)
    upper_tail = npm.log1p(-by_betainc(-npm.where(upper, z, 0.0)))
    student = npm.where(by_series, series, npm.where(upper, upper_tail, lower_tail))
    return _where_valid(valid & (df > 0), npm.where(infinite, normal_logcdf(z), student))


# ---------------------------------------------------------------------------------------
# The beta distribution


def _log_beta(a, b):
    """log B(a, b) = lgamma(small) - (lgamma(big + small) - lgamma(big)), the difference by
    `log_gamma_ratio`, which keeps its digits for a large a or b."""
    big, small = npm.where(a >= b, a, b), npm.where(a >= b, b, a)
    return scipy_special.gammaln(small) - log_gamma_ratio(big, small, _STAGED)


def beta_logpdf(x, a, b, loc=0, scale=1):
    """(a - 1) log y + (b - 1) log(1 - y) - log B(a, b) - log scale for y = (x - loc) /
    scale in [0, 1] (as SciPy, by xlogy: 0 log 0 is 0), -inf outside; nan unless a, b and
    scale are positive. Differentiable in x, a, b, loc and scale."""
    y, log_scale, valid = _standardized(x, loc, scale)
    a, b = _float64(a, b)
    inside = ((y >= 0) & (y <= 1)) | npm.isnan(y)   # (a nan x stays nan, as SciPy's)
    safe_y = npm.where(inside, y, 0.5)
    density = (scipy_special.xlogy(a - 1, safe_y) + scipy_special.xlog1py(b - 1, -safe_y)
               - _log_beta(a, b))
    return _where_valid(valid & (a > 0) & (b > 0), _less(npm.where(inside, density, -np.inf), log_scale))


def beta_pdf(x, a, b, loc=0, scale=1):
    return npm.exp(beta_logpdf(x, a, b, loc, scale))


def beta_cdf(x, a, b, loc=0, scale=1):
    """I_y(a, b) with y clipped to [0, 1] (0 below, 1 above, as SciPy), by betainc:
    differentiable in x, loc and scale; in a and b refused, as betainc's."""
    y, _, valid = _standardized(x, loc, scale)
    a, b = _float64(a, b)
    cdf = scipy_special.betainc(a, b, npm.minimum(npm.maximum(y, 0.0), 1.0))
    return _where_valid(valid & (a > 0) & (b > 0), cdf)


# ---------------------------------------------------------------------------------------
# The Dirichlet distribution

# SciPy refuses points whose components sum to 1 by more than this; here they give nan.
_SIMPLEX_TOLERANCE = 10e-10


def dirichlet_logpdf(x, alpha):
    """sum((alpha - 1) log x) - log B(alpha), B(alpha) = prod Gamma(alpha_i) / Gamma(sum
    alpha), over x's first axis (the components, as SciPy: x of shape (K,) or (K, n)
    points; K - 1 components get the last as 1 - their sum). nan where SciPy raises: a
    component outside [0, 1], or 0 where its alpha is below 1, a sum off 1, an alpha not
    positive. Differentiable in x and alpha."""
    x, alpha = _float64(x, alpha)
    alpha_shape, x_shape = shape(alpha), shape(x)
    if len(alpha_shape) != 1 or len(x_shape) not in (1, 2) or x_shape[0] not in (alpha_shape[0], alpha_shape[0] - 1):
        raise ShapeError(f"dirichlet: alpha of shape {alpha_shape} and x of shape {x_shape} do "
                         "not fit: pass a 1-D alpha of length K and x of shape (K,) or (K, n) "
                         "(or K - 1 components in place of K)")
    if x_shape[0] != alpha_shape[0]:
        x = shaping.concatenate([x, 1 - reductions.sum(x, axis=0, keepdims=True)], axis=0)
    exponents = shaping.reshape(alpha - 1, alpha_shape + (1,) * (len(x_shape) - 1))
    log_beta = (reductions.sum(scipy_special.gammaln(alpha))
                - scipy_special.gammaln(reductions.sum(alpha)))
    out = reductions.sum(scipy_special.xlogy(exponents, x), axis=0) - log_beta
    on_simplex = (reductions.all((x >= 0) & (x <= 1) & ((x > 0) | (exponents >= 0)), axis=0)
                  & (npm.abs(reductions.sum(x, axis=0) - 1) <= _SIMPLEX_TOLERANCE))
    return npm.where(on_simplex & reductions.all(alpha > 0), out, np.nan)


def dirichlet_pdf(x, alpha):
    return npm.exp(dirichlet_logpdf(x, alpha))


# ---------------------------------------------------------------------------------------
# The multivariate normal with a singular covariance, and its entropy: SciPy's
# pseudo-determinant and pseudo-inverse from one eigendecomposition (its `_PSD`), with
# eigenvalues at most 1e6 eps max|s| counted as 0.

_PSEUDO_CUTOFF = 1e6 * np.finfo(np.float64).eps
_LOG_2PI = math.log(2 * math.pi)


def _pseudo_spectrum(cov):
    """(eigenvalues, eigenvectors, kept, safe eigenvalues) of cov's symmetric part: kept
    marks the eigenvalues above the cutoff; safe is 1 where not kept, so logs and inverses
    of the dropped ones give no inf to the derivative."""
    values, vectors = decompositions.eigh(0.5 * (cov + shaping.swapaxes(cov, -1, -2)))
    cutoff = _PSEUDO_CUTOFF * reductions.max(npm.abs(values))
    kept = values > cutoff
    return values, vectors, kept, npm.where(kept, values, 1.0)


def _rank_and_log_pdet(kept, safe):
    rank = reductions.sum(npm.where(kept, 1.0, 0.0))
    return rank, reductions.sum(npm.where(kept, npm.log(safe), 0.0))


def mvn_singular_logpdf(centered, cov):
    """-(rank log 2 pi + log pdet cov + |U^T (x - mean)|^2) / 2 with U the eigenvectors
    scaled by the pseudo-inverse's square roots, for `centered` points of shape (n, dim);
    -inf for a point off the support (its part along the dropped eigenvectors at least
    1e3 times the cutoff, as SciPy). Its derivative in cov goes through the eigenvectors,
    so it is nan where cov has a repeated eigenvalue (as JAX's eigh); in the points it is
    exact."""
    values, vectors, kept, safe = _pseudo_spectrum(cov)
    rank, log_pdet = _rank_and_log_pdet(kept, safe)
    scaled = vectors * npm.where(kept, 1 / npm.sqrt(safe), 0.0)
    whitened = linalg.matmul(centered, scaled)
    off_support = linalg.matmul(centered, vectors * npm.where(kept, 0.0, 1.0))
    support_tolerance = 1e3 * _PSEUDO_CUTOFF * reductions.max(npm.abs(values))
    outside = reductions.sum(off_support * off_support, axis=-1) >= support_tolerance * support_tolerance
    out = -0.5 * (rank * _LOG_2PI + log_pdet + reductions.sum(whitened * whitened, axis=-1))
    return npm.where(outside, -np.inf, out)


def mvn_entropy(mean=None, cov=1):
    """(rank (log 2 pi + 1) + log pdet cov) / 2, as SciPy (which allows a singular cov
    here); differentiable in cov (mean does not enter)."""
    _, cov, _ = _mvn_parameters(mean, cov)
    _, _, kept, safe = _pseudo_spectrum(cov)
    rank, log_pdet = _rank_and_log_pdet(kept, safe)
    return 0.5 * (rank * (_LOG_2PI + 1) + log_pdet)


def register_normal_special() -> None:
    """Maps scipy.special's ndtr and log_ndtr to the normal's functions here."""
    import scipy.special as special
    implements(special.ndtr)(ndtr)
    implements(special.log_ndtr)(log_ndtr)


def register_quantiles_and_more_distributions() -> None:
    """Maps norm.ppf and isf, t.logcdf, beta, dirichlet and multivariate_normal.entropy."""
    import scipy.stats as stats
    implements(stats.norm.ppf)(norm_ppf)
    implements(stats.norm.isf)(norm_isf)
    implements(stats.t.logcdf)(t_logcdf)
    for method in ("pdf", "logpdf", "cdf"):
        implements(getattr(stats.beta, method))(globals()[f"beta_{method}"])
    implements(stats.dirichlet.pdf)(dirichlet_pdf)
    implements(stats.dirichlet.logpdf)(dirichlet_logpdf)
    implements(stats.multivariate_normal.entropy)(mvn_entropy)


# ---------------------------------------------------------------------------------------
# The gamma distribution, chi-squared (gamma with shape df/2 and scale 2) and Poisson.


def gamma_logpdf(x, a, loc=0, scale=1):
    """(a - 1) log z - z - log Gamma(a) - log scale on z = (x - loc) / scale >= 0 (-inf
    below); at z == 0 it is 0 for a == 1 and +inf for a < 1, as SciPy's xlogy gives."""
    z, log_scale, valid = _standardized(x, loc, scale)
    (a,) = _float64(a)
    inside = (z >= 0) | npm.isnan(z)   # (a nan x stays nan, as SciPy's)
    safe_z = npm.where(inside, z, 1.0)
    density = scipy_special.xlogy(a - 1, safe_z) - safe_z - scipy_special.gammaln(a)
    return _where_valid(valid & (a > 0), npm.where(inside, _less(density, log_scale), -np.inf))


def gamma_pdf(x, a, loc=0, scale=1):
    return npm.exp(gamma_logpdf(x, a, loc, scale))


def gamma_cdf(x, a, loc=0, scale=1):
    """P(a, z), the regularized lower incomplete gamma function (0 below z = 0);
    differentiable in x, loc and scale, and once in a."""
    z, _, valid = _standardized(x, loc, scale)
    (a,) = _float64(a)
    return _where_valid(valid & (a > 0), scipy_special.gammainc(a, npm.where((z > 0) | npm.isnan(z), z, 0.0)))


def _chi2_as_gamma(gamma_method):
    def method(x, df, loc=0, scale=1):
        return gamma_method(x, 0.5 * df, loc, 2 * scale)
    method.__name__ = method.__qualname__ = gamma_method.__name__.replace("gamma", "chi2")
    method.__doc__ = f"chi2 with df degrees of freedom: {gamma_method.__name__} with a = df / 2, scale 2 scale."
    return method


chi2_pdf, chi2_logpdf, chi2_cdf = (_chi2_as_gamma(m) for m in (gamma_pdf, gamma_logpdf, gamma_cdf))


def _poisson_count(k, loc):
    (k,) = _float64(k)
    return k if _static_number(loc) and loc == 0 else k - _float64(loc)[0]


def poisson_logpmf(k, mu, loc=0):
    """k log mu - log k! - mu at the non-negative integers k - loc (xlogy: 0 log 0 is 0, so
    mu == 0 puts all mass on 0); -inf elsewhere; nan for mu < 0, as SciPy."""
    k = _poisson_count(k, loc)
    (mu,) = _float64(mu)
    count = (k >= 0) & (k == npm.floor(k))
    safe_k = npm.where(count, k, 0.0)
    mass = scipy_special.xlogy(safe_k, mu) - scipy_special.gammaln(safe_k + 1) - mu
    return npm.where((mu >= 0) & ~npm.isnan(k), npm.where(count, mass, -np.inf), np.nan)


def poisson_pmf(k, mu, loc=0):
    return npm.exp(poisson_logpmf(k, mu, loc))


def poisson_cdf(k, mu, loc=0):
    """Q(floor(k - loc) + 1, mu), the regularized upper incomplete gamma function, 0 below
    k = loc; differentiable in mu (k counts: it has no derivative)."""
    k = ew.stop_gradient.bind(npm.floor(_poisson_count(k, loc)))
    (mu,) = _float64(mu)
    below = k < 0
    cdf = scipy_special.gammaincc(npm.where(below, 0.0, k) + 1, mu)
    return npm.where(mu >= 0, npm.where(below, 0.0, cdf), np.nan)


def register_gamma_family_stats(stats) -> None:
    """Maps scipy.stats's gamma, chi2 and poisson methods (of the module given) to these."""
    for name in ("gamma", "chi2"):
        for method in ("pdf", "logpdf", "cdf"):
            implements(getattr(getattr(stats, name), method))(globals()[f"{name}_{method}"])
    for method in ("pmf", "logpmf", "cdf"):
        implements(getattr(stats.poisson, method))(globals()[f"poisson_{method}"])
