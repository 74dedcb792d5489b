"""NumPy's functions about complex numbers: np.angle, np.iscomplex, np.isreal,
np.iscomplexobj, np.isrealobj and np.real_if_close (np.real, np.imag and np.conj live with
the other ufuncs in `math.py`).

Each follows NumPy's source term for term, so dtypes are NumPy's: `np.angle` of a real
array is `np.arctan2(0, x)` (float16 for int8), of a complex one `np.arctan2(z.imag, z.real)`.
`iscomplexobj` and `isrealobj` depend on the dtype only, so they are static Python bools.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import UnsupportedFunctionError
from s2s.numpy_api import math as np_math
from s2s.numpy_api._base import asarray, dtype, implements, is_python_scalar, shape
from s2s.numpy_api.creation import ones, zeros
from s2s.staging import Tracer


def _is_complex(x) -> bool:
    return dtypes.is_complex(dtype(asarray(x)))


@implements(np.angle)
def angle(z, deg=False):
    """The argument of z in radians (degrees if `deg`): arctan2(imag, real)."""
    if _is_complex(z):
        result = np_math.arctan2(np_math.imag(z), np_math.real(z))
    else:
        result = np_math.arctan2(0, z)
    return np_math.multiply(result, 180 / np.pi) if deg else result


@implements(np.iscomplexobj)
def iscomplexobj(x) -> bool:
    """Whether x has a complex dtype (a fact of its type, not of its values)."""
    return _is_complex(x)


@implements(np.isrealobj)
def isrealobj(x) -> bool:
    return not _is_complex(x)


def _known_for_real(x, answer: bool):
    """iscomplex / isreal of a real dtype, known from the dtype alone: for a 0-d value
    NumPy's own np.bool_, so `a if np.iscomplex(x) else b` takes its branch while staging;
    for an array, a staged constant array."""
    dims = shape(asarray(x))
    if not dims:
        return np.bool_(answer)
    return (ones if answer else zeros)(dims, bool)


@implements(np.iscomplex)
def iscomplex(x):
    """Elementwise: a nonzero imaginary part (never, for a real array)."""
    if _is_complex(x):
        return np_math.not_equal(np_math.imag(x), 0)
    return _known_for_real(x, False)


@implements(np.isreal)
def isreal(x):
    """Elementwise: a zero imaginary part (always, for a real array)."""
    if _is_complex(x):
        return np_math.equal(np_math.imag(x), 0)
    return _known_for_real(x, True)


@implements(np.real_if_close)
def real_if_close(a, tol=100):
    """A real array (of a real array, itself). Of a staged complex array refused: NumPy
    returns a real or a complex array depending on the values, and a staged value's dtype
    must be known before they are."""
    if not isinstance(a, Tracer):
        return np.real_if_close(a if not is_python_scalar(a) else np.asarray(a), tol)
    if not _is_complex(a):
        return a
    raise UnsupportedFunctionError(
        "np.real_if_close of a complex staged array: NumPy's result is real or complex "
        "depending on the values, which are not known while the function is staged",
        "say which you want: np.real(z) when the imaginary parts are known to be negligible, "
        "or keep z complex")
