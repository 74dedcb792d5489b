"""Bessel functions of real argument (scipy.special's jv/jn, yn, iv, ive and the fixed
orders j0, j1, y0, y1, i0, i1, i0e, i1e), in NumPy, for emitted code.

Emitted code may not import SciPy, so these are computed here, in float64 whatever the
operands' dtype (the result is cast back), by textbook methods:

- J_v (real v >= 0, or integer v): for |x| <= 2 the power series (A&S 9.1.10); for
  |x| >= 25 above the order, Hankel's asymptotic expansion (A&S 9.2.5-9.2.10, its terms
  taken until they are below 1e-17) of J_mu and J_mu+1, mu the order's fractional part,
  then the forward recurrence C_{k+1} = (2k/x) C_k - C_{k-1}, stable for J while k < |x|;
  elsewhere Miller's backward recurrence from an order well above max(v, |x|),
  normalized by (x/2)^v / Gamma(v+1) = sum_j w_j J_v+2j (A&S 9.1.87; J_0 + 2 sum J_2j = 1
  for v = 0).
- Y_n (integer n): Y_0 and Y_1 by their power series near 0 (A&S 9.1.11, 9.1.13),
  Hankel's expansion from 25, or in between from the J_k of Miller's recurrence through
  their Neumann series (A&S 9.1.88 and its derivative, Y_1 = -Y_0'); then the forward
  recurrence, stable for Y at every order.
- I_v, real v >= 0 (or integer v): for |x| < max(30, v^2) the power series, whose terms are
  all positive (no cancellation), summed until its terms are below the precision with a
  running scale so that neither the terms nor e^|x| overflow; beyond, Hankel's expansion
  (A&S 9.7.1), which there needs at most 24 terms.

Each algorithm is written once, with array operators and the functions `fns` gives
(`NumpyFunctions` here; s2s's compiler passes staged ones, so its XLA lowering runs this
same code). Loops go through `fns.loop(keep_going, step, carry)`, whose carry holds every
value a step reads.

Outside what these methods cover the result is nan, never a guess: a non-integer order of
Y, a negative non-integer order of J or I (which needs Y_v or K_v), a non-integer order
of J or I at negative x and Y at negative x (as SciPy), orders beyond MAX_ORDER, and
infinite x except
for I_v e^-|x| (SciPy's j0, iv ... give nan there too; its i0e gives the limit 0).
"""
from __future__ import annotations

import math

import numpy as np

from s2s_runtime import special

EULER_GAMMA = 0.5772156649015329
SERIES_UP_TO = 2.0          # |x| <= this: the power series of J_v, Y_0, Y_1 (terms <= 1/(k!)^2)
SERIES_TERMS = 20           # 1 / (20!)^2 ~ 2e-37
JY_ASYMPTOTIC_FROM = 25.0   # |x| >= this: Hankel's expansion, its smallest term ~ e^(-2x)
I_ASYMPTOTIC_FROM = 30.0    # and x >= v^2: Hankel's expansion of I_v converges fast
I_ASYMPTOTIC_TERMS = 24
RESCALE = 1e10              # Miller's recurrence grows up to 2k/x a step: rescale beyond this
SERIES_RESCALE = 1e250      # the I series' running scale


class NumpyFunctions(special.NumpyFunctions):
    """The functions the algorithms need, for NumPy arrays: betainc's, and these."""
    sqrt = staticmethod(np.sqrt)
    sin = staticmethod(np.sin)
    cos = staticmethod(np.cos)
    floor = staticmethod(np.floor)
    pow = staticmethod(np.power)
    not_ = staticmethod(np.logical_not)

    @staticmethod
    def max_all(x):
        """The largest element, as a 0-d array (-inf for none)."""
        return np.max(x, initial=-np.inf)

    @staticmethod
    def any(x):
        return bool(np.any(x))

    @staticmethod
    def loop(keep_going, step, carry):
        carry = list(carry)
        while keep_going(*carry):
            carry = list(step(*carry))
        return carry


def _odd(k, fns):
    """1 where the integer-valued k is odd, else 0."""
    return k - 2 * fns.floor(k / 2)


def _is_integer(v, fns):
    return fns.floor(v) == v


HANKEL_TERMS = 28


def _hankel_jy(order, a, fns):
    """(J_order(a), Y_order(a)) for large a > 0 and order^2 well below a (order >= 0):
    sqrt(2/(pi a)) (P cos chi - Q sin chi, P sin chi + Q cos chi), chi = a - phase with
    phase = (order/2 + 1/4) pi, P = sum_j (-1)^j a_2j / a^2j, Q = sum_j (-1)^j a_2j+1 / a^2j+1,
    a_k = (4 order^2 - 1^2)(4 order^2 - 3^2)...(4 order^2 - (2k-1)^2) / (k! 8^k). The cosine
    and sine of chi come from those of a and of the phase, so a - phase is never rounded."""
    mu, inverse = 4 * order * order, 1 / a    # one division: XLA's are slow to compile
    term, p, q = 1 + 0 * a, 1 + 0 * a, 0 * a
    for k in range(1, HANKEL_TERMS):
        term = term * ((mu - (2 * k - 1) ** 2) / (8 * k)) * inverse
        sign = -1 if (k // 2) % 2 else 1
        if k % 2:
            q = q + sign * term
        else:
            p = p + sign * term
    phase = (order / 2 + 0.25) * math.pi + 0 * a
    cos_a, sin_a, cos_phase, sin_phase = fns.cos(a), fns.sin(a), fns.cos(phase), fns.sin(phase)
    cos_chi, sin_chi = cos_a * cos_phase + sin_a * sin_phase, sin_a * cos_phase - cos_a * sin_phase
    amplitude = fns.sqrt(2 / (math.pi * a))
    return amplitude * (p * cos_chi - q * sin_chi), amplitude * (p * sin_chi + q * cos_chi)


def _power_over_gamma(a, v, fns):
    """(a/2)^v / Gamma(v + 1): the power itself where it is in range (exp of a large log
    loses |v log(a/2)| ulps), else through logarithms."""
    log_power = v * fns.log(a / 2)
    direct = log_power < 600
    by_power = fns.pow(a / 2, fns.select(direct, v, 0.0)) * fns.exp(-fns.lgamma(v + 1))
    return fns.select(direct, by_power, fns.exp(log_power - fns.lgamma(v + 1)))


def _series_j(v, a, fns):
    """J_v(a) for 0 < a <= 2 by the power series (A&S 9.1.10):
    (a/2)^v sum_k (-a^2/4)^k / (k! Gamma(v + k + 1))."""
    quarter_square = a * a / 4
    total, term = 1 + 0 * a, 1 + 0 * a
    for k in range(1, SERIES_TERMS):
        term = -term * quarter_square / (k * (v + k))
        total = total + term
    return _power_over_gamma(a, v, fns) * total


def _series_y01(a, fns):
    """(Y_0(a), Y_1(a)) for 0 < a <= 2 by the power series (A&S 9.1.11, 9.1.13):
    Y_0 = (2/pi)(log(a/2) + gamma) J_0 + (2/pi) sum_{k>=1} (-1)^(k+1) H_k (a^2/4)^k / (k!)^2,
    Y_1 = -2/(pi a) + (2/pi) log(a/2) J_1 - (a/(2 pi)) sum (psi(k+1) + psi(k+2)) (-a^2/4)^k / (k! (k+1)!)."""
    quarter_square = a * a / 4
    j0_sum, j1_sum, y0_sum = 1 + 0 * a, 1 + 0 * a, 0 * a
    term0, term1 = 1 + 0 * a, 1 + 0 * a     # (-a^2/4)^k / (k!)^2 and / (k! (k+1)!)
    harmonic = 0.0                           # H_k
    y1_sum = (1 - 2 * EULER_GAMMA) * term1   # k = 0: psi(1) + psi(2) = 1 - 2 gamma
    for k in range(1, SERIES_TERMS):
        term0 = -term0 * quarter_square / (k * k)
        term1 = -term1 * quarter_square / (k * (k + 1))
        harmonic += 1 / k
        j0_sum, j1_sum = j0_sum + term0, j1_sum + term1
        y0_sum = y0_sum - harmonic * term0      # (-1)^(k+1) (a^2/4)^k / (k!)^2 = -term0
        y1_sum = y1_sum + (2 * harmonic + 1 / (k + 1) - 2 * EULER_GAMMA) * term1
    log_half = fns.log(a / 2)
    j0, j1 = j0_sum, a / 2 * j1_sum
    y0 = 2 / math.pi * ((log_half + EULER_GAMMA) * j0 + y0_sum)
    y1 = -2 / (math.pi * a) + 2 / math.pi * log_half * j1 - a / (2 * math.pi) * y1_sum
    return y0, y1


def _miller_start(n, a, fns):
    """An even order N from which the backward recurrence gives J_0..J_n of every element
    to full precision: J_N(a) / J_max(n,a)(a) is then far below float64's epsilon."""
    top = fns.max_all(fns.select(n > a, n, a))
    return 2 * fns.floor((top + 40 + 3 * fns.sqrt(top)) / 2)


def _miller_y_step(fns):
    """One step of Miller's recurrence, from J_m (here) and J_m+1 (above), unnormalized,
    to J_k, k = m - 1; J_k joins the sums of the normalization J_0 + 2 sum J_2j = 1 and of
    the Neumann series Y_0 = (2/pi)(log(a/2) + gamma) J_0 - (4/pi) sum_j (-1)^j J_2j / j,
    Y_1 = -(2/(pi a)) J_0 + (2/pi)(log(a/2) + gamma) J_1 + (2/pi) sum c_k J_k (odd k = 2j+1,
    c_k = (-1)^(j+1) (1/(j+1) + 1/j), the 1/j left out for j = 0)."""
    def step(m, a, above, here, norm, y0_sum, y1_sum):
        below = (2 * m / a) * here - above
        k = m - 1
        odd = _odd(k, fns)
        half = fns.select(k == 0, 1.0, k / 2)
        norm_weight = fns.select(k == 0, 1.0, 2 * (1 - odd))
        y0_weight = fns.select(k == 0, 0.0, (1 - odd) * (1 - 2 * _odd(fns.floor(half), fns)) / half)
        j = fns.floor(k / 2)                      # k = 2j + 1 where k is odd
        previous = fns.select(j >= 1, 1 / fns.select(j >= 1, j, 1.0), 0.0)
        y1_weight = odd * (2 * _odd(j, fns) - 1) * (1 / (j + 1) + previous)
        norm = norm + norm_weight * below
        y0_sum, y1_sum = y0_sum + y0_weight * below, y1_sum + y1_weight * below
        scale = fns.select(fns.abs(below) > RESCALE, 1 / RESCALE, 1.0)
        return k, a, here * scale, below * scale, norm * scale, y0_sum * scale, y1_sum * scale
    return step


def _miller_y(a, fns):
    """(Y_0(a), Y_1(a)) for a > 2 from the J_k of Miller's recurrence."""
    zero = 0 * a
    _, _, j1, j0, norm, y0_sum, y1_sum = fns.loop(
        lambda m, *_: m > 0, _miller_y_step(fns), [_miller_start(zero, a, fns) + 1, a, zero, 1 + zero,
                                                   zero, zero, zero])
    j0, j1 = j0 / norm, j1 / norm
    log_term = fns.log(a / 2) + EULER_GAMMA
    y0 = 2 / math.pi * (log_term * j0 - 2 * y0_sum / norm)
    y1 = 2 / math.pi * (-j0 / a + log_term * j1 + y1_sum / norm)
    return y0, y1


def _forward_step(fns):
    """C_base+m+1 = (2(base + m)/a) C_base+m - C_base+m-1, kept where m + 1 == n; -inf
    (Y_n at tiny a) stays -inf."""
    def step(m, a, base, n, top, before, here, wanted):
        after = fns.select(fns.abs(here) == np.inf, here, (2 * (base + m) / a) * here - before)
        m = m + 1
        return m, a, base, n, top, here, after, fns.select(n == m, after, wanted)
    return step


def _forward(base, n, a, first, second, fns):
    """C_base+n from C_base (first) and C_base+1 (second) by the forward recurrence."""
    top = fns.max_all(n)
    return fns.loop(lambda m, a, base, n, top, *_: m < top, _forward_step(fns),
                    [1 + 0 * top, a, base, n, top, first, second, fns.select(n == 0, first, second)])[-1]


def _miller_j_step(fns):
    """One step of Miller's recurrence over the orders v + m, down to k = m - 1. J_v+k joins
    the normalization (a/2)^v / Gamma(v+1) = sum_j w_j J_v+2j (A&S 9.1.87), with
    w_j = (v + 2j) Gamma(v + j) / (j! Gamma(v + 1)), w_0 = 1, by Horner's rule from the
    top: at k = 2j, norm = J_v+2j + (w_j+1 / w_j) norm, where w_1 / w_0 = v + 2 and
    w_j+1 / w_j = (v + 2j + 2)(v + j) / ((v + 2j)(j + 1)); no Gamma function is evaluated."""
    def step(m, a, v, above, here, norm):
        below = (2 * (v + m) / a) * here - above
        k = m - 1
        j = k / 2
        ratio = fns.select(k == 0, v + 2, (v + k + 2) * (v + j) / ((v + k) * (j + 1)))
        norm = fns.select(_odd(k, fns) == 1, norm, below + ratio * norm)
        scale = fns.select(fns.abs(below) > RESCALE, 1 / RESCALE, 1.0)
        return k, a, v, here * scale, below * scale, norm * scale
    return step


def _miller_j(v, a, fns):
    """J_v(a), v >= 0, a > 2, by Miller's recurrence from well above max(v, a)."""
    zero = 0 * a
    *_, jv, norm = fns.loop(lambda m, *_: m > 0, _miller_j_step(fns),
                            [_miller_start(v, a, fns) + 1, a, v, zero, 1 + zero, zero])
    return jv / norm * _power_over_gamma(a, v, fns)


MAX_ORDER = 1e5   # orders beyond give nan: the recurrences would run that many steps


def bessel_j(order, x, fns):
    """J_order(x) for real orders >= 0 and integer orders, real x (x >= 0 unless the order
    is an integer), nan elsewhere: the power series near 0, Miller's recurrence, and for
    large x above the order Hankel's expansion of J_mu, J_mu+1 (mu the order's fractional
    part) with the forward recurrence up to the order."""
    a = fns.abs(x)
    integer = _is_integer(order, fns)
    v = fns.select(integer, fns.abs(order), order)
    valid = (v >= 0) & (v <= MAX_ORDER) & (a == a) & ((x >= 0) | integer)
    v = fns.select(valid, v, 0.0)
    inside = valid & (a > 0) & (a < np.inf)
    small = a <= SERIES_UP_TO
    miller = inside & fns.not_(small) & ((a < JY_ASYMPTOTIC_FROM) | (v >= a))
    forward = inside & fns.not_(small) & fns.not_(miller)
    series = _series_j(v, fns.select(small & inside, a, 1.0), fns)
    steps = fns.select(forward, fns.floor(v), 0.0)
    mu, a_large = v - fns.floor(v), fns.select(forward, a, JY_ASYMPTOTIC_FROM)
    first, _ = _hankel_jy(mu, a_large, fns)
    second, _ = _hankel_jy(mu + 1, a_large, fns)
    large = _forward(mu, steps, a_large, first, second, fns)
    value = fns.select(small, series, fns.select(miller, _miller_j(fns.select(miller, v, 0.0),
                                                                   fns.select(miller, a, 10.0), fns), large))
    value = fns.select(a == 0, fns.select(v == 0, 1.0, 0.0), fns.select(a == np.inf, np.nan, value))
    flip = integer & (_odd(v, fns) == 1) & ((order < 0) != (x < 0))   # J_-n = J_n(-x) = (-1)^n J_n
    return fns.select(valid, fns.select(flip, -value, value), np.nan)


def bessel_y(order, x, fns):
    """Y_order(x) for integer orders, x >= 0, nan elsewhere: Y_0 and Y_1 by the power
    series near 0, Miller's recurrence, or Hankel's expansion, then the forward recurrence
    (stable for Y at every order)."""
    a, n = fns.abs(x), fns.abs(order)
    valid = _is_integer(order, fns) & (n <= MAX_ORDER) & (x >= 0)
    n = fns.select(valid, n, 0.0)
    inside = valid & (a > 0) & (a < np.inf)
    small = a <= SERIES_UP_TO
    large = a >= JY_ASYMPTOTIC_FROM
    y0_series, y1_series = _series_y01(fns.select(small & inside, a, 1.0), fns)
    a_large = fns.select(large & inside, a, JY_ASYMPTOTIC_FROM)
    _, y0_large = _hankel_jy(0.0, a_large, fns)
    _, y1_large = _hankel_jy(1.0, a_large, fns)
    y0_miller, y1_miller = _miller_y(fns.select(inside & fns.not_(small) & fns.not_(large), a, 10.0), fns)
    y0 = fns.select(small, y0_series, fns.select(large, y0_large, y0_miller))
    y1 = fns.select(small, y1_series, fns.select(large, y1_large, y1_miller))
    yn = _forward(0 * a, fns.select(inside, n, 0.0), fns.select(inside, a, 1.0), y0, y1, fns)
    yn = fns.select(a == 0, -np.inf, fns.select(a == np.inf, np.nan, yn))   # at infinity as SciPy
    flip = (_odd(n, fns) == 1) & (order < 0)     # Y_-n = (-1)^n Y_n
    return fns.select(valid, fns.select(flip, -yn, yn), np.nan)


def _series_step(fns):
    """The next term of I_v's series, (a^2/4)^k / (k! Gamma(v + k + 1)) relative to the
    first, added to the total, both rescaled (into log_scale) before they could overflow."""
    def step(k, a, v, term, total, log_scale):
        k = k + 1
        term = term * (a * a / 4) / (k * (v + k))
        total = total + term
        big = total > SERIES_RESCALE
        scale = fns.select(big, 1 / SERIES_RESCALE, 1.0)
        log_scale = log_scale + fns.select(big, math.log(SERIES_RESCALE), 0.0)
        return k, a, v, term * scale, total * scale, log_scale
    return step


def _series_iv(v, a, scaled: bool, fns):
    """I_v(a) (times e^-a if scaled), a > 0, v >= 0, by the power series."""
    eps = float(np.finfo(np.float64).eps) / 4
    zero = 0 * a
    _, _, _, _, total, log_scale = fns.loop(
        lambda k, a, v, term, total, log_scale: fns.any(term > eps * total),
        _series_step(fns), [0 * fns.max_all(a), a, v, 1 + zero, 1 + zero, zero])
    # total (a/2)^v / Gamma(v + 1) (e^-a): with the power itself wherever no step can over-
    # or underflow, as exp(log) loses |v log(a/2)| ulps; elsewhere in logarithms.
    log_power = v * fns.log(a / 2)
    rest = log_scale - fns.lgamma(v + 1) - (a if scaled else 0)
    direct = (log_power < 600) & (log_scale == 0) & (rest > -600)
    by_power = total * (fns.pow(a / 2, v) * fns.exp(fns.select(direct, rest, 0.0)))
    return fns.select(direct, by_power, total * fns.exp(log_power + rest))


def _hankel_iv(v, a, scaled: bool, fns):
    """I_v(a) (times e^-a if scaled) for a >= max(30, v^2), by Hankel's expansion
    e^a / sqrt(2 pi a) sum_k (-1)^k a_k(v) / a^k."""
    mu, inverse = 4 * v * v, 1 / a
    term, total = 1 + 0 * a, 1 + 0 * a
    for k in range(1, I_ASYMPTOTIC_TERMS):
        term = -term * ((mu - (2 * k - 1) ** 2) / (8 * k)) * inverse
        total = total + term
    scaled_value = total / fns.sqrt(2 * math.pi * a)
    if scaled:
        return scaled_value
    half = fns.exp(a / 2)     # e^a alone overflows from a = 709.8, I_0(a) only from 713.9
    return scaled_value * half * half


def bessel_iv(order, x, fns, scaled: bool):
    """I_order(x), times e^-|x| if scaled (scipy's iv, ive): for real order >= 0 or
    integer order, any real x for integer orders and x >= 0 otherwise; nan elsewhere."""
    a = fns.abs(x)
    integer = _is_integer(order, fns)
    v = fns.select(integer, fns.abs(order), order)
    valid = (v >= 0) & (v <= MAX_ORDER) & ((x >= 0) | integer) & (a == a)
    v = fns.select(valid, v, 0.0)
    inside = valid & (a > 0) & (a < np.inf)
    asymptotic = (a >= I_ASYMPTOTIC_FROM) & (a >= v * v)
    series = _series_iv(v, fns.select(inside & fns.not_(asymptotic), a, 1.0), scaled, fns)
    hankel = _hankel_iv(v, fns.select(inside & asymptotic, a, I_ASYMPTOTIC_FROM), scaled, fns)
    value = fns.select(asymptotic, hankel, series)
    value = fns.select(a == 0, fns.select(v == 0, 1.0, 0.0), value)
    # At infinity SciPy's iv is nan; its i0e and i1e are 0, the limit, and so is ive here.
    value = fns.select(a == np.inf, 0.0 if scaled else np.nan, value)
    flip = integer & (_odd(v, fns) == 1) & (x < 0)     # I_n(-x) = (-1)^n I_n(x)
    return fns.select(valid, fns.select(flip, -value, value), np.nan)


# ---------------------------------------------------------------------------------------
# The functions emitted code calls.


def _float64_operands(*xs):
    xs = [np.asarray(x) for x in xs]
    dtype = np.result_type(*[x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64 for x in xs])
    return [x.astype(np.float64) for x in np.broadcast_arrays(*xs)], dtype


def _run(fn, *xs):
    (order, x), dtype = _float64_operands(*xs)
    with np.errstate(all="ignore"):
        return np.asarray(fn(order, x), dtype)[()]


def jv(v, x):
    """J_v(x) for real v >= 0 and integer v (nan for other v), as scipy.special.jv."""
    return _run(lambda v, x: bessel_j(v, x, NumpyFunctions), v, x)


def yn(n, x):
    """Y_n(x) for integer n (nan for other n), as scipy.special.yn."""
    return _run(lambda n, x: bessel_y(n, x, NumpyFunctions), n, x)


def iv(v, x):
    """I_v(x), as scipy.special.iv, for v >= 0 or integer v."""
    return _run(lambda v, x: bessel_iv(v, x, NumpyFunctions, scaled=False), v, x)


def ive(v, x):
    """I_v(x) e^-|x|, as scipy.special.ive, for v >= 0 or integer v."""
    return _run(lambda v, x: bessel_iv(v, x, NumpyFunctions, scaled=True), v, x)
