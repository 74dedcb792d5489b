"""The regularized incomplete gamma functions P(a, x) and Q(a, x) = 1 - P(a, x)
(scipy.special.gammainc and gammaincc), in NumPy, for emitted code.

Each element takes the method Cephes (SciPy's) takes for it, less its uniform asymptotic
expansion for large a near x:
- Q by its continued fraction (modified Lentz) where x > 1.1 and x >= a, P = 1 - Q;
- P by its power series x^a e^-x / Gamma(a + 1) (1 + x / (a + 1) + ...) elsewhere;
- Q by the series 1 - x^a / Gamma(a + 1) - x^a / Gamma(a) sum (-x)^n / (n! (a + n)) where
  x <= 1.1 and a is small, where 1 - P would lose Q's digits.
The factor x^a e^-x / Gamma(a) in front is taken by Stirling's series from a = 10, as
a log1pmx((x - a) / a) + log(a / 2 pi) / 2 - (log Gamma's Stirling correction), so it keeps
its digits where a log x, x and log Gamma(a) are huge and nearly cancel. Both series and
the fraction take O(sqrt(a)) steps near x = a.

As `special.betainc`, the steps are written once, with array operators and the functions
`fns` gives (NumPy's here; s2s's compiler passes staged ones and builds its XLA loop from
this same code).
"""
from __future__ import annotations

import math

import numpy as np

from s2s_runtime.special import NumpyFunctions, _floating, digamma

# The series and the fraction take about 7 sqrt(a) steps near x = a (700 at a = 1e4): this
# bound reaches a ~ 1e8; an element still moving after it is nan, never a truncated sum.
GAMMAINC_MAX_STEPS = 100_000
# Converged once every element's relative change is at most this many epsilons: the
# fraction's d * c rounds to within a few of 1, never nearer.
GAMMAINC_TOLERANCE_EPS = 4
STIRLING_FROM = 10.0       # from here on, the correction's first omitted term is below 3e-17
# B_2k / (2k (2k - 1)) for k = 1..7: log Gamma(a) = (a - 1/2) log a - a + log(2 pi) / 2
# + sum_k of these / a^(2k - 1).
_STIRLING_CORRECTION = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
_CONTINUED_FRACTION_FROM = 1.1


class GammaNumpyFunctions(NumpyFunctions):
    """What the incomplete gamma steps need, for NumPy arrays."""
    expm1 = staticmethod(np.expm1)
    digamma = staticmethod(digamma)


def _log1pmx_near_zero(t, fns):
    """log(1 + t) - t for -1/3 < t < 1/2. With u = t / (2 + t) (|u| < 1/5), log(1 + t) =
    2 atanh(u) and t = 2u + 2u^2 / (1 - u), so it is 2 (u^3/3 + u^5/5 + ...) - 2u^2 / (1 - u),
    with no cancellation; 13 odd powers reach 1e-17."""
    u = t / (2 + t)
    square = u * u
    odd = 1 / 27
    for k in range(12, 0, -1):   # 1/3 + u^2/5 + ... + u^24/27, by Horner's rule
        odd = 1 / (2 * k + 1) + square * odd
    return 2 * u * square * odd - 2 * square / (1 - u)


def log_igamma_front(a, x, fns):
    """log(x^a e^-x / Gamma(a)), the factor in front of both series and the fraction, for
    a > 0, x > 0: directly below STIRLING_FROM; from there on by Stirling's series, as
    a (log(x / a) - (x - a) / a) + log(a / 2 pi) / 2 - correction(a), where the first term
    is a log1pmx((x - a) / a) near x = a (no cancellation) and log(x / a) takes the ratio
    without rounding 1 + t away from it."""
    large = a >= STIRLING_FROM
    big = fns.select(large, a, STIRLING_FROM)   # harmless where the direct form is taken
    inverse, inverse_square = 1 / big, 1 / (big * big)
    correction = _STIRLING_CORRECTION[-1]
    for coefficient in reversed(_STIRLING_CORRECTION[:-1]):
        correction = coefficient + inverse_square * correction
    t = (x - big) / big
    near = (t > -1 / 3) & (t < 0.5)
    near_t = fns.select(near, t, 0.0)
    ratio_term = fns.select(near, big * _log1pmx_near_zero(near_t, fns), big * fns.log(x / big) - (x - big))
    stirling = ratio_term + 0.5 * fns.log(big / (2 * math.pi)) - inverse * correction
    return fns.select(large, stirling, a * fns.log(x) - x - fns.lgamma(a))


def _zeta(k: int) -> float:
    """Riemann's zeta(k), k >= 2, by Euler-Maclaurin after 1000 terms (error below 1e-17)."""
    n = 1000
    return math.fsum([m ** -k for m in range(1, n)] + [n ** (1 - k) / (k - 1), n ** -k / 2,
                      k * n ** (-k - 1) / 12, -k * (k + 1) * (k + 2) * n ** (-k - 3) / 720])


# lgamma(1 + a) = -euler_gamma a + sum_k>=2 (-1)^k zeta(k) a^k / k: its coefficients to a^25.
_LGAMMA1P_TAYLOR = (0.0, -0.5772156649015329) + tuple((-1) ** k * _zeta(k) / k for k in range(2, 26))
_LGAMMA1P_TAYLOR_BELOW = 0.2


def lgamma1p(a, fns):
    """lgamma(1 + a), keeping a's digits for small a (where 1 + a would round them away)."""
    small = fns.abs(a) < _LGAMMA1P_TAYLOR_BELOW
    near = fns.select(small, a, 0.0)
    series = _LGAMMA1P_TAYLOR[-1]
    for coefficient in reversed(_LGAMMA1P_TAYLOR[:-1]):
        series = coefficient + near * series
    return fns.select(small, series, fns.lgamma(a + 1))


def _regular(a, x):
    """Where neither operand is at a limit the loop leaves to gammainc_finish."""
    return (a > 0) & (x > 0) & (a < np.inf) & (x < np.inf)


# The loop's state after the operands: the power series' term and sum (P), the Q series'
# factor (-x)^n / n! and sum, Lentz's b, c, d and h for the fraction (Q); for dP/da also
# the derivatives in a of the power series' term and sum and of Lentz's c, d and h.
STATE_NAMES = ("term", "total", "factor", "q_total", "b", "c", "d", "h")
GRAD_A_STATE_NAMES = STATE_NAMES + ("term_da", "total_da", "c_da", "d_da", "h_da")


def gammainc_start(a, x, tiny, fns, *, grad_a: bool):
    """The loop's start: the operands (1 where the finish decides the result by a limit),
    then the state of STATE_NAMES (GRAD_A_STATE_NAMES with `grad_a`)."""
    regular = _regular(a, x)
    a, x = fns.select(regular, a, 1.0), fns.select(regular, x, 1.0)
    one, zero = 1 + 0 * x, 0 * x     # of x's shape and dtype, staged or not
    b = x + 1 - a
    d = 1 / _away_from_zero(b, tiny, fns)
    state = (one, one, one, zero, b, one / tiny, d, d)
    return (a, x, *state, zero, zero, zero, d * d, d * d) if grad_a else (a, x, *state)


def _away_from_zero(v, tiny, fns):
    return fns.select(fns.abs(v) < tiny, tiny, v)


def _methods(a, x, fns):
    """(by_fraction, by_q_series): where Q comes from the continued fraction, and where
    from its own series (Cephes' switch); P's power series serves the rest."""
    by_fraction = (x > _CONTINUED_FRACTION_FROM) & (x >= a)
    below_half = (x <= 0.5) & (a * fns.log(fns.select(x < 1, x, 0.5)) >= -0.4)
    by_q_series = ~by_fraction & (x <= _CONTINUED_FRACTION_FROM) & (below_half | ((x > 0.5) & (a <= 1.1 * x)))
    return by_fraction, by_q_series


def gammainc_step(a, x, m, state, tiny, fns):
    """Step m (1, 2, ...) of all three, and of the derivatives in a when `state` holds them
    (b's is -1, an's is m): (state, residual), the residual being the relative change of
    what each element's methods compute, below the precision once they have converged."""
    term, total, factor, q_total, b, c, d, h = state[:8]
    grad_a = len(state) > 8
    if grad_a:
        term_da, total_da, c_da, d_da, h_da = state[8:]
        term_da = (term_da * x - term * x / (a + m)) / (a + m)
        total_da = total_da + term_da
    term = term * x / (a + m)
    total = total + term
    factor = -factor * x / m
    q_term = factor / (a + m)
    q_total = q_total + q_term
    an = m * (a - m)
    b = b + 2
    new_d = 1 / _away_from_zero(an * d + b, tiny, fns)
    if grad_a:
        d_da = -(m * d + an * d_da - 1) * new_d * new_d
        c_da = -1 + m / c - an * c_da / (c * c)
    c, d = _away_from_zero(b + an / c, tiny, fns), new_d
    delta = d * c
    by_fraction, by_q_series = _methods(a, x, fns)
    series_change = fns.abs(term / total)
    fraction_change = fns.abs(delta - 1)
    if grad_a:
        new_h_da = h_da * delta + h * (d_da * c + d * c_da)
        series_change = _larger(series_change, fns.abs(term_da / _away_from_zero(total_da, tiny, fns)), fns)
        fraction_change = _larger(fraction_change,
                                  fns.abs((new_h_da - h_da) / _away_from_zero(new_h_da, tiny, fns)), fns)
    h = h * delta
    q_change = fns.select(by_q_series, fns.abs(q_term / _away_from_zero(q_total, tiny, fns)), 0.0)
    residual = fns.select(by_fraction, fraction_change, _larger(series_change, q_change, fns))
    state = (term, total, factor, q_total, b, c, d, h)
    return (state + (term_da, total_da, c_da, d_da, new_h_da) if grad_a else state), residual


def _larger(u, v, fns):
    return fns.select(v > u, v, u)


def _with_limits(a, x, value, at_zero, at_one, fns):
    """`value` with SciPy's limits: nan for a or x negative or nan, or both 0, or both inf;
    `at_zero` at x == 0 or a == inf, `at_one` at a == 0 or x == inf."""
    value = fns.select(_regular(a, x), value, at_zero)
    value = fns.select((a == 0) | (x == np.inf), at_one, value)
    valid = (a >= 0) & (x >= 0) & ((a > 0) | (x > 0)) & ((a < np.inf) | (x < np.inf))
    return fns.select(valid, value, np.nan)


def gammainc_finish(a, x, sanitized_a, sanitized_x, state, fns, *, upper: bool):
    """P(a, x) (or Q(a, x) when `upper`) from the converged sums and fraction: P = 1 at
    a == 0 or x == inf, P = 0 at x == 0 or a == inf."""
    total, q_total, h = state[1], state[3], state[7]
    front = fns.exp(log_igamma_front(sanitized_a, sanitized_x, fns))
    by_fraction, by_q_series = _methods(sanitized_a, sanitized_x, fns)
    lower_series = front * total / sanitized_a
    from_fraction = front * h
    if upper:
        log_x = fns.log(sanitized_x)
        from_q_series = (-fns.expm1(sanitized_a * log_x - lgamma1p(sanitized_a, fns))
                         - fns.exp(sanitized_a * log_x - fns.lgamma(sanitized_a)) * q_total)
        value = fns.select(by_fraction, from_fraction,
                           fns.select(by_q_series, from_q_series, 1 - lower_series))
        return _with_limits(a, x, value, 1.0, 0.0, fns)
    return _with_limits(a, x, fns.select(by_fraction, 1 - from_fraction, lower_series), 0.0, 1.0, fns)


def gammainc_grad_a_finish(a, x, sanitized_a, sanitized_x, state, fns):
    """dP(a, x)/da (= -dQ/da), as jax.scipy's igamma_grad_a: the derivative of the power
    series x^a e^-x / Gamma(a) sum_n x^n / (a (a+1) ... (a+n)), or of the fraction for Q,
    the front's log derivative being log x - digamma(a). 0 at x == 0, x == inf and
    a == inf (P is constant there); nan at a == 0, where P jumps to 1."""
    total, h, total_da, h_da = state[1], state[7], state[9], state[12]
    a_, x_ = sanitized_a, sanitized_x
    front = fns.exp(log_igamma_front(a_, x_, fns))
    log_derivative = fns.log(x_) - fns.digamma(a_)
    series = front / a_ * (total * log_derivative + total_da - total / a_)
    fraction = -front * (h * log_derivative + h_da)
    by_fraction, _ = _methods(a_, x_, fns)
    value = _with_limits(a, x, fns.select(by_fraction, fraction, series), 0.0, 0.0, fns)
    return fns.select(a == 0, np.nan, value)


def run_gammainc_loop(a, x, finish, *, grad_a: bool = False):
    """The loop on NumPy arrays, then `finish(a, x, sanitized_a, sanitized_x, state, fns)`,
    in a and x's dtype; with the derivatives in a when `grad_a`."""
    a, x = np.broadcast_arrays(_floating(a), _floating(x))
    dtype = np.result_type(a, x)
    a, x = a.astype(dtype), x.astype(dtype)
    fns, tiny = GammaNumpyFunctions, float(np.finfo(dtype).tiny)
    tolerance = GAMMAINC_TOLERANCE_EPS * float(np.finfo(dtype).eps)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        sanitized_a, sanitized_x, *state = gammainc_start(a, x, tiny, fns, grad_a=grad_a)
        residual = np.ones_like(sanitized_a)
        for m in range(1, GAMMAINC_MAX_STEPS + 1):
            state, residual = converged_frozen(
                state, residual, *gammainc_step(sanitized_a, sanitized_x, dtype.type(m), state, tiny, fns),
                tolerance, fns)
            if not np.any(residual > tolerance):   # nan counts as converged
                break
        value = finish(a, x, sanitized_a, sanitized_x, state, fns)
        return np.asarray(unconverged_to_nan(value, residual, tolerance, fns), dtype)[()]


def converged_frozen(state, residual, new_state, new_residual, tolerance, fns):
    """A step's (state, residual), except where the residual already was below the
    tolerance: such an element keeps the state it converged to. (Lentz's residual drifts
    back above the tolerance some thousand steps after converging; in a batch that keeps
    moving, every element would otherwise step on until GAMMAINC_MAX_STEPS and be nan.)"""
    frozen = residual <= tolerance
    return ([fns.select(frozen, old, new) for old, new in zip(state, new_state)],
            fns.select(frozen, residual, new_residual))


def unconverged_to_nan(value, residual, tolerance, fns):
    """nan where the loop stopped at GAMMAINC_MAX_STEPS before converging."""
    return fns.select(residual > tolerance, np.nan, value)


def gammainc(a, x):
    """P(a, x), the regularized lower incomplete gamma function, as scipy.special.gammainc."""
    return run_gammainc_loop(a, x, lambda *args: gammainc_finish(*args, upper=False))


def gammaincc(a, x):
    """Q(a, x) = 1 - P(a, x), the regularized upper one, as scipy.special.gammaincc."""
    return run_gammainc_loop(a, x, lambda *args: gammainc_finish(*args, upper=True))


def gammainc_grad_a(a, x):
    """dP(a, x)/da, as jax.scipy.special's igamma_grad_a (SciPy has no such function)."""
    return run_gammainc_loop(a, x, gammainc_grad_a_finish, grad_a=True)
