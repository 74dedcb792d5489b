"""scipy.signal's convolve and correlate on staged arrays: N-d, modes 'full', 'same' and
'valid', SciPy's shapes and NumPy's dtypes.

Every `method` SciPy offers ('direct', 'fft', 'auto') computes the same numbers, so s2s
takes any and computes them one way, the way np.convolve does in 1-d: in1, zero-padded by
the kernel's size less one on each side, is read as its sliding windows along each axis
(one np.take of a static index per axis, whose derivative is a scatter-add), and one
tensordot with the flipped in2 sums each window. Memory grows with the output's size times
the kernel's: meant for the small kernels of model code, not for long signals.

SciPy is optional: `register_scipy_signal` maps SciPy's function objects to these once
the user's code has imported scipy.signal (the dispatch table runs it).
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError
from s2s.numpy_api._base import aval, implements, operand
from s2s.numpy_api.indexing import take
from s2s.numpy_api.linalg import tensordot
from s2s.numpy_api.math import conjugate, multiply
from s2s.numpy_api.shaping import flip, pad

_MODES = ("full", "same", "valid")


def _window(n: int, m: int, mode: str) -> tuple[int, int]:
    """(start, size) of `mode`'s output within the full convolution along one axis of
    lengths n (in1) and m (in2): 'same' is in1's size, centered as SciPy centers it."""
    full = n + m - 1
    if mode == "full":
        return 0, full
    if mode == "same":
        return (full - n) // 2, n
    return min(n, m) - 1, abs(n - m) + 1


def _check(name: str, in1, in2, mode: str) -> None:
    shape1, shape2 = aval(in1).shape, aval(in2).shape
    if mode not in _MODES:
        raise ShapeError(f"scipy.signal.{name}: acceptable mode flags are 'valid', 'same', "
                         f"or 'full', got {mode!r}")
    if len(shape1) != len(shape2):
        raise ShapeError(f"scipy.signal.{name}: in1 and in2 should have the same "
                         f"dimensionality, got shapes {shape1} and {shape2}",
                         "add axes of length 1 to the smaller one (x[None, :])")
    if 0 in shape1 + shape2:
        raise ShapeError(f"scipy.signal.{name} of an empty array (shapes {shape1}, {shape2}) "
                         "is not supported")
    if mode == "valid" and not (all(a >= b for a, b in zip(shape1, shape2))
                                or all(b >= a for a, b in zip(shape1, shape2))):
        raise ShapeError(f"scipy.signal.{name}: for 'valid' mode, one must be at least as "
                         f"large as the other in every dimension, got shapes {shape1} and {shape2}",
                         "use mode='full' or 'same'")


def _convolve(in1, in2, mode: str):
    """sum_j in1[k - j] * in2[j] over the output positions k of `mode`."""
    shape1, shape2 = aval(in1).shape, aval(in2).shape
    if not shape1:
        return multiply(in1, in2)
    padded = pad(in1, [(m - 1, m - 1) for m in shape2])
    for axis, (n, m) in enumerate(zip(shape1, shape2)):
        start, size = _window(n, m, mode)
        index = (start + np.arange(size))[:, None] + np.arange(m)[None, :]
        # The windows along this axis take its place as two axes (output, kernel offset).
        padded = take(padded, index.astype(dtypes.default_int()), axis=2 * axis)
    ndim = len(shape1)
    return tensordot(padded, flip(in2), (tuple(range(1, 2 * ndim, 2)), tuple(range(ndim))))


def convolve(in1, in2, mode="full", method="auto"):
    """scipy.signal.convolve: the N-d convolution of in1 with in2."""
    in1, in2 = operand(in1), operand(in2)
    _check("convolve", in1, in2, mode)
    return _convolve(in1, in2, mode)


def correlate(in1, in2, mode="full", method="auto"):
    """scipy.signal.correlate: the convolution of in1 with in2 flipped and conjugated, as
    SciPy computes it (its 'fft' method does exactly that, and 'direct' agrees)."""
    in1, in2 = operand(in1), operand(in2)
    _check("correlate", in1, in2, mode)
    if dtypes.is_complex(aval(in2).dtype):
        in2 = conjugate(in2)
    return _convolve(in1, flip(in2), mode)


def register_scipy_signal() -> None:
    """Maps scipy.signal's function objects to the functions here (once it is imported)."""
    import scipy.signal as signal
    implements(signal.convolve)(convolve)
    implements(signal.correlate)(correlate)
