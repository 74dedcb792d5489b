"""scipy.special's Bessel functions of real argument on staged values: jv/jn, yn, iv, ive
and the fixed orders j0, j1, y0, y1, i0, i1, i0e, i1e; and NumPy's own np.i0.

All are the three primitives of `s2s/primitives/bessel.py` (J_v, Y_n, I_v with or without
e^-|x|). J and I take real orders >= 0 and integer orders (a negative non-integer order
needs Y_v or K_v, which s2s does not compute); Y takes integer orders. An order known
while staging that is outside that is refused here; one computed inside the function
gives nan at run time. Results are typed as SciPy types them: float32 when x
is float32 (or float16) and the order is float32 or a Python number (NEP 50's weak
scalars), float64 otherwise; yn with a Python int order uses SciPy's integer-order loop,
which is float64.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import UnsupportedFunctionError
from s2s.numpy_api._base import aval, convert, implements, is_python_scalar, operand
from s2s.primitives import bessel
from s2s.staging import Tracer

_SINGLE = (np.dtype(np.float16), np.dtype(np.float32))


def _operands(name: str, order, x, python_int_order_is_float64: bool = False):
    """(order, x) in the dtype SciPy's loops give them (see the module's docstring)."""
    weak_order = is_python_scalar(order) and not (python_int_order_is_float64 and isinstance(order, int))
    order_, x_ = _real(f"scipy.special.{name}", order), _real(f"scipy.special.{name}", x)
    single = aval(x_).dtype in _SINGLE and (weak_order or aval(order_).dtype in _SINGLE)
    to = dtypes.float32 if single else dtypes.canonicalize_dtype(np.float64)
    return convert(order_, to), convert(x_, to)


def _real(function: str, x):
    x = operand(x)
    if aval(x).dtype.kind == "c":
        raise UnsupportedFunctionError(f"{function} of complex values is not supported: s2s "
                                       "computes Bessel functions of real arguments only",
                                       "pass real arrays (x.real, where the imaginary part is 0)")
    return x


def _concrete(order):
    """The order's values if they are known while staging (a Python or NumPy value, or a
    constant the function made, such as `np.array([0.5, 1.0])`), else None."""
    if not isinstance(order, Tracer):
        return np.asarray(order)
    builder = order.builder
    if order.variable in builder.constvars:
        value = builder.consts[builder.constvars.index(order.variable)]
        return value if isinstance(value, np.ndarray) else None
    return None


def _integer_order(name: str, order) -> None:
    values = _concrete(order)
    if values is not None and values.dtype.kind in "fc" and not np.all(np.floor(values.real) == values):
        raise UnsupportedFunctionError(
            f"scipy.special.{name} of a non-integer order ({values}) is not supported: s2s computes "
            "the Bessel function Y of integer order only",
            f"pass an integer order to {name}")


def _nonnegative_or_integer_order(name: str, order, needs: str) -> None:
    values = _concrete(order)
    if values is not None and np.any((values < 0) & (np.floor(values) != values)):
        raise UnsupportedFunctionError(
            f"scipy.special.{name} of a negative non-integer order ({values}) is not supported "
            f"(it needs the Bessel function {needs}, which s2s does not compute)",
            f"pass an order >= 0 (or an integer) to {name}")


def jv(v, z):
    """J_v(z) for real v >= 0 or integer v (scipy.special.jv, and jn, which is jv); z >= 0
    unless v is an integer (nan there, as SciPy)."""
    _nonnegative_or_integer_order("jv", v, "Y_v")
    return bessel.bessel_jv.bind(*_operands("jv", v, z))


def yn(n, x):
    """Y_n(x) for integer n; nan for x < 0, -inf at 0."""
    _integer_order("yn", n)
    return bessel.bessel_yn.bind(*_operands("yn", n, x, python_int_order_is_float64=True))


def iv(v, z):
    """I_v(z) for real v >= 0 or integer v (z >= 0 unless v is an integer)."""
    _nonnegative_or_integer_order("iv", v, "K_v")
    return bessel.bessel_iv.bind(*_operands("iv", v, z), scaled=False)


def ive(v, z):
    """I_v(z) e^-|z|, which does not overflow for large z."""
    _nonnegative_or_integer_order("ive", v, "K_v")
    return bessel.bessel_iv.bind(*_operands("ive", v, z), scaled=True)


def _fixed_order(name: str, prim, order: int, **params):
    def fn(x):
        return prim.bind(*_operands(name, order, x), **params)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"scipy.special.{name}: the `{prim.name}` primitive of order {order}."
    return fn


j0 = _fixed_order("j0", bessel.bessel_jv, 0)
j1 = _fixed_order("j1", bessel.bessel_jv, 1)
y0 = _fixed_order("y0", bessel.bessel_yn, 0)
y1 = _fixed_order("y1", bessel.bessel_yn, 1)
i0 = _fixed_order("i0", bessel.bessel_iv, 0, scaled=False)
i1 = _fixed_order("i1", bessel.bessel_iv, 1, scaled=False)
i0e = _fixed_order("i0e", bessel.bessel_iv, 0, scaled=True)
i1e = _fixed_order("i1e", bessel.bessel_iv, 1, scaled=True)


@implements(np.i0)
def numpy_i0(x):
    """np.i0: I_0(x), float64 for integers and float64, the float dtype otherwise (as NumPy)."""
    x = _real("np.i0", x)
    dt = aval(x).dtype
    to = dt if dtypes.is_inexact(dt) else dtypes.canonicalize_dtype(np.float64)
    x = convert(x, to)
    return bessel.bessel_iv.bind(convert(np.asarray(0), to), x, scaled=False)


def register_scipy_bessel() -> None:
    """Maps scipy.special's Bessel function objects to the functions here."""
    import scipy.special as special
    for name in ("jv", "yn", "iv", "ive", "j0", "j1", "y0", "y1", "i0", "i1", "i0e", "i1e"):
        implements(getattr(special, name))(globals()[name])
    implements(special.jn)(jv)
