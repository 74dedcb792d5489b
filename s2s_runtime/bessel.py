"""Bessel functions of real argument (scipy.special's jv/jn, yn, iv, ive and the fixed
orders j0, j1, y0, y1, i0, i1, i0e, i1e), in NumPy, for emitted code.

Emitted code may not import SciPy, so these are computed here, in float64 whatever the
operands' dtype (the result is cast back), by textbook methods:

- J_n, Y_n (integer n): for |x| <= 2 the power series (A&S 9.1.10, 9.1.11); for
  |x| >= 25 Hankel's asymptotic expansion of J_0, J_1, Y_0, Y_1 (A&S 9.2.5-9.2.10, its
  terms taken until they are below 1e-17) followed by the forward recurrence
  C_{k+1} = (2k/x) C_k - C_{k-1}, which is stable for J while k < |x| and always for Y;
  in between, and for J_n with n >= |x|, Miller's backward recurrence from an order N well
  above max(n, |x|), normalized by J_0 + 2 sum J_2k = 1, with Y_0 and Y_1 from their
  Neumann series in the same J_k (A&S 9.1.88 and its derivative, Y_1 = -Y_0').
- I_v, real v >= 0 (or integer v): for |x| < max(30, v^2) the power series, whose terms are
  all positive (no cancellation), summed until its terms are below the precision with a
  running scale so that neither the terms nor e^|x| overflow; beyond, Hankel's expansion
  (A&S 9.7.1), which there needs at most 24 terms.

Each algorithm is written once, with array operators and the functions `fns` gives
(`NumpyFunctions` here; s2s's compiler passes staged ones, so its XLA lowering runs this
same code). Loops go through `fns.loop(keep_going, step, carry)`, whose carry holds every
value a step reads.

Outside what these methods cover the result is nan, never a guess: a non-integer order of
J or Y, a negative non-integer order of I (which needs K_v), a non-integer order of I at
negative x, Y at negative x (as SciPy), orders beyond MAX_ORDER, and infinite x except
for I_v e^-|x| (SciPy's j0, iv ... give nan there too; its i0e gives the limit 0).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from s2s_runtime import special

EULER_GAMMA = 0.5772156649015329
SERIES_UP_TO = 2.0          # |x| <= this: the power series of J_n, Y_0, Y_1 (terms <= 1/(k!)^2)
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


def _hankel_coefficients(order: int, count: int) -> list[float]:
    """a_k(v) = (4v^2 - 1^2)(4v^2 - 3^2)...(4v^2 - (2k-1)^2) / (k! 8^k), k = 0..count-1."""
    mu, term, out = 4 * order * order, Fraction(1), []
    for k in range(count):
        out.append(float(term))
        term = term * (mu - (2 * k + 1) ** 2) / ((k + 1) * 8)
    return out


_HANKEL_TERMS = 28
_HANKEL = {order: _hankel_coefficients(order, _HANKEL_TERMS) for order in (0, 1)}


def _polynomial(coefficients, z):
    """sum coefficients[k] z^k, by Horner's rule."""
    total = 0 * z + coefficients[-1]
    for c in reversed(coefficients[:-1]):
        total = total * z + c
    return total


def _hankel_jy(order: int, a, fns):
    """(J_order(a), Y_order(a)) for large a > 0, order 0 or 1: sqrt(2/(pi a)) times
    (P cos chi - Q sin chi, P sin chi + Q cos chi), chi = a - (order/2 + 1/4) pi, with the
    cosine and sine of chi from those of a (no rounding of a - 3pi/4)."""
    coefficients = _HANKEL[order]
    even = [c * (-1) ** k for k, c in enumerate(coefficients[0::2])]
    odd = [c * (-1) ** k for k, c in enumerate(coefficients[1::2])]
    inverse_square = 1 / (a * a)
    p, q = _polynomial(even, inverse_square), _polynomial(odd, inverse_square) / a
    c, s = fns.cos(a), fns.sin(a)
    if order == 0:      # chi = a - pi/4
        cos_chi, sin_chi = (c + s) * math.sqrt(0.5), (s - c) * math.sqrt(0.5)
    else:               # chi = a - 3pi/4
        cos_chi, sin_chi = (s - c) * math.sqrt(0.5), -(s + c) * math.sqrt(0.5)
    amplitude = fns.sqrt(2 / (math.pi * a))
    return amplitude * (p * cos_chi - q * sin_chi), amplitude * (p * sin_chi + q * cos_chi)


def _series_jy(n, a, fns):
    """(J_n(a), Y_0(a), Y_1(a)) for 0 < a <= 2 by the power series (A&S 9.1.10, 9.1.11):
    J_n = (a/2)^n sum (-a^2/4)^k / (k! (n+k)!), and
    Y_0 = (2/pi)(log(a/2) + gamma) J_0 + (2/pi) sum_{k>=1} (-1)^(k+1) H_k (a^2/4)^k / (k!)^2,
    Y_1 = -2/(pi a) + (2/pi) log(a/2) J_1 - (a/(2 pi)) sum (psi(k+1) + psi(k+2)) (-a^2/4)^k / (k! (k+1)!)."""
    quarter_square = a * a / 4
    front = fns.pow(a / 2, n) * fns.exp(-fns.lgamma(n + 1))   # (a/2)^n / n!, <= 1 here
    jn_sum, term_n = 1 + 0 * a, 1 + 0 * a
    j0_sum, j1_sum, y0_sum, y1_sum = 1 + 0 * a, 1 + 0 * a, 0 * a, 0 * a
    term0, term1 = 1 + 0 * a, 1 + 0 * a     # (-a^2/4)^k / (k!)^2 and / (k! (k+1)!)
    harmonic = 0.0                           # H_k
    y1_sum = y1_sum + (1 - 2 * EULER_GAMMA) * term1   # k = 0: psi(1) + psi(2) = 1 - 2 gamma
    for k in range(1, SERIES_TERMS):
        term_n = -term_n * quarter_square / (k * (n + k))
        term0 = -term0 * quarter_square / (k * k)
        term1 = -term1 * quarter_square / (k * (k + 1))
        harmonic += 1 / k
        jn_sum, j0_sum, j1_sum = jn_sum + term_n, j0_sum + term0, j1_sum + term1
        y0_sum = y0_sum - harmonic * term0      # (-1)^(k+1) (a^2/4)^k / (k!)^2 = -term0
        y1_sum = y1_sum + (2 * harmonic + 1 / (k + 1) - 2 * EULER_GAMMA) * term1
    log_half = fns.log(a / 2)
    j0, j1 = j0_sum, a / 2 * j1_sum
    y0 = 2 / math.pi * ((log_half + EULER_GAMMA) * j0 + y0_sum)
    y1 = -2 / (math.pi * a) + 2 / math.pi * log_half * j1 - a / (2 * math.pi) * y1_sum
    return front * jn_sum, y0, y1


def _miller_start(n, a, fns):
    """An even order N from which the backward recurrence gives J_0..J_n of every element
    to full precision: J_N(a) / J_max(n,a)(a) is then far below float64's epsilon."""
    top = fns.max_all(fns.select(n > a, n, a))
    return 2 * fns.floor((top + 40 + 3 * fns.sqrt(top)) / 2)


def _miller_step(fns):
    """One step of Miller's recurrence, from J_m (here) and J_m+1 (above), unnormalized,
    to J_k, k = m - 1; J_k joins the sums of the normalization J_0 + 2 sum J_2j = 1 and of
    the Neumann series Y_0 = (2/pi)(log(a/2) + gamma) J_0 - (4/pi) sum_j (-1)^j J_2j / j,
    Y_1 = -(2/(pi a)) J_0 + (2/pi)(log(a/2) + gamma) J_1 + (2/pi) sum c_k J_k (odd k = 2j+1,
    c_k = (-1)^(j+1) (1/(j+1) + 1/j), the 1/j left out for j = 0), and is kept where n == k."""
    def step(m, a, n, above, here, wanted, norm, y0_sum, y1_sum):
        below = (2 * m / a) * here - above
        k = m - 1
        odd = _odd(k, fns)
        half = fns.select(k == 0, 1.0, k / 2)
        norm_weight = fns.select(k == 0, 1.0, 2 * (1 - odd))
        y0_weight = fns.select(k == 0, 0.0, (1 - odd) * (1 - 2 * _odd(fns.floor(half), fns)) / half)
        j = fns.floor(k / 2)                      # k = 2j + 1 where k is odd
        previous = fns.select(j >= 1, 1 / fns.select(j >= 1, j, 1.0), 0.0)
        y1_weight = odd * (2 * _odd(j, fns) - 1) * (1 / (j + 1) + previous)
        wanted = fns.select(n == k, below, wanted)
        norm = norm + norm_weight * below
        y0_sum, y1_sum = y0_sum + y0_weight * below, y1_sum + y1_weight * below
        scale = fns.select(fns.abs(below) > RESCALE, 1 / RESCALE, 1.0)
        return (k, a, n, here * scale, below * scale, wanted * scale, norm * scale,
                y0_sum * scale, y1_sum * scale)
    return step


def _miller_jy(n, a, fns):
    """(J_n(a), J_0(a), J_1(a), Y_0(a), Y_1(a)) for a > 2 by Miller's recurrence."""
    zero = 0 * a
    start = _miller_start(n, a, fns) + 1
    _, _, _, j1, j0, jn, norm, y0_sum, y1_sum = fns.loop(
        lambda m, *_: m > 0, _miller_step(fns), [start, a, n, zero, 1 + zero, zero, zero, zero, zero])
    j0, j1, jn = j0 / norm, j1 / norm, jn / norm
    log_term = fns.log(a / 2) + EULER_GAMMA
    y0 = 2 / math.pi * (log_term * j0 - 2 * y0_sum / norm)
    y1 = 2 / math.pi * (-j0 / a + log_term * j1 + y1_sum / norm)
    return jn, j0, j1, y0, y1


def _forward_step(fns):
    """C_m+1 = (2m/a) C_m - C_m-1 for J and Y; Y's -inf (Y_n at tiny a) stays -inf."""
    def step(m, a, n, top, j_before, j_here, y_before, y_here, j_wanted, y_wanted):
        j_next = (2 * m / a) * j_here - j_before
        y_next = fns.select(fns.abs(y_here) == np.inf, y_here, (2 * m / a) * y_here - y_before)
        m = m + 1
        return (m, a, n, top, j_here, j_next, y_here, y_next,
                fns.select(n == m, j_next, j_wanted), fns.select(n == m, y_next, y_wanted))
    return step


MAX_ORDER = 1e5   # orders beyond give nan: the recurrences would run that many steps


def bessel_jy(order, x, fns):
    """(J_order(x), Y_order(x)) for integer orders (nan elsewhere), any real x (Y: x >= 0)."""
    a, n = fns.abs(x), fns.abs(order)
    valid = _is_integer(order, fns) & (n <= MAX_ORDER) & (a == a)
    n = fns.select(valid, n, 0.0)
    inside = valid & (a > 0) & (a < np.inf)
    small = a <= SERIES_UP_TO
    large = a >= JY_ASYMPTOTIC_FROM
    miller = inside & fns.not_(small) & (fns.not_(large) | (n >= a))
    jn_series, y0_series, y1_series = _series_jy(n, fns.select(small & inside, a, 1.0), fns)
    a_large = fns.select(large & inside, a, JY_ASYMPTOTIC_FROM)
    j0_large, y0_large = _hankel_jy(0, a_large, fns)
    j1_large, y1_large = _hankel_jy(1, a_large, fns)
    jn_miller, j0_miller, j1_miller, y0_miller, y1_miller = _miller_jy(
        fns.select(miller, n, 0.0), fns.select(miller, a, 10.0), fns)
    j0 = fns.select(large, j0_large, j0_miller)
    j1 = fns.select(large, j1_large, j1_miller)
    y0 = fns.select(small, y0_series, fns.select(large, y0_large, y0_miller))
    y1 = fns.select(small, y1_series, fns.select(large, y1_large, y1_miller))
    a_any = fns.select(inside, a, 1.0)
    top = fns.max_all(fns.select(inside, n, 0.0))
    *_, jn_forward, yn = fns.loop(
        lambda m, a, n, top, *_: m < top, _forward_step(fns),
        [1 + 0 * top, a_any, n, top, j0, j1, y0, y1, fns.select(n == 0, j0, j1), fns.select(n == 0, y0, y1)])
    jn = fns.select(small, jn_series, fns.select(miller, jn_miller, jn_forward))
    # a == 0: J_n(0) is 1 for n = 0, else 0; Y_n(0) is -inf. At infinity nan, as SciPy.
    jn = fns.select(a == 0, fns.select(n == 0, 1.0, 0.0), fns.select(a == np.inf, np.nan, jn))
    yn = fns.select(a == 0, -np.inf, fns.select(a == np.inf, np.nan, yn))
    # J_-n = (-1)^n J_n, J_n(-x) = (-1)^n J_n(x); Y_-n = (-1)^n Y_n, Y at x < 0 is nan.
    odd = _odd(n, fns) == 1
    j_flip = odd & ((order < 0) != (x < 0))
    jn = fns.select(valid, fns.select(j_flip, -jn, jn), np.nan)
    yn = fns.select(valid & (x >= 0), fns.select(odd & (order < 0), -yn, yn), np.nan)
    return jn, yn


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
    mu = 4 * v * v
    term, total = 1 + 0 * a, 1 + 0 * a
    for k in range(1, I_ASYMPTOTIC_TERMS):
        term = -term * (mu - (2 * k - 1) ** 2) / (8 * k * a)
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


def jv(n, x):
    """J_n(x) for integer n (nan for other n), as scipy.special.jv."""
    return _run(lambda n, x: bessel_jy(n, x, NumpyFunctions)[0], n, x)


def yn(n, x):
    """Y_n(x) for integer n (nan for other n), as scipy.special.yn."""
    return _run(lambda n, x: bessel_jy(n, x, NumpyFunctions)[1], n, x)


def iv(v, x):
    """I_v(x), as scipy.special.iv, for v >= 0 or integer v."""
    return _run(lambda v, x: bessel_iv(v, x, NumpyFunctions, scaled=False), v, x)


def ive(v, x):
    """I_v(x) e^-|x|, as scipy.special.ive, for v >= 0 or integer v."""
    return _run(lambda v, x: bessel_iv(v, x, NumpyFunctions, scaled=True), v, x)
