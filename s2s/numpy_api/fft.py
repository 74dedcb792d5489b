"""NumPy's np.fft on staged values: the transforms, their shifts and their frequencies.

Every transform is NumPy's definition written with the `fft` primitive, which transforms
the trailing 1 to 3 axes: the transformed axes are cut or zero-padded to the lengths asked
for (`n`, `s`), moved last, transformed (at most three at a time: the transforms along
different axes commute, except that a real transform goes first (`rfftn`) or last
(`irfftn`)), moved back and scaled for `norm`. Dtypes are NumPy 2's: float32 (and float16)
arrays transform in complex64, everything else in complex128.

`fftfreq` and `rfftfreq` depend on static lengths only, so they are NumPy constants.
"""
from __future__ import annotations

import math

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError
from s2s.numpy_api import math as np_math
from s2s.numpy_api._base import convert, dtype, implements, normalize_axis, operand, shape
from s2s.numpy_api.shaping import moveaxis, roll
from s2s.primitives import ops
from s2s.primitives.complex_parts import complex_dtype
from s2s.primitives.fft import MAX_FFT_RANK, fft as fft_primitive, rfft_length

NORMS = ("backward", "ortho", "forward")


def _complex_operand(a):
    """`a` as the complex dtype NumPy transforms it in."""
    a = operand(a)
    dt = dtype(a)
    if dtypes.is_complex(dt):
        return a
    return convert(a, complex_dtype(dtypes.float32 if dt in (dtypes.float16, dtypes.float32)
                                    else dtypes.float64))


def _real_operand(a, function: str):
    a = operand(a)
    dt = dtype(a)
    if dtypes.is_complex(dt):
        raise ShapeError(f"np.fft.{function} needs a real array, got {dt}",
                         f"transform the complex array with np.fft.{function[1:]}, or take "
                         "np.real(a) first if its imaginary part is meant to be dropped")
    return convert(a, dtypes.float32 if dt in (dtypes.float16, dtypes.float32) else dtypes.float64)


def _check_norm(norm) -> str:
    norm = "backward" if norm is None else norm
    if norm not in NORMS:
        raise ShapeError(f"invalid norm {norm!r}: expected None, 'backward', 'ortho' or 'forward'")
    return norm


def _check_length(n, what: str) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise ShapeError(f"{what} must be a static Python int, got {n!r}")
    if n < 1:
        raise ShapeError(f"invalid number of FFT data points ({n}) specified: {what} must be >= 1")
    return int(n)


def _axes_and_lengths(a, s, axes, last_length_default=None):
    """NumPy's (s, axes) of an n-dimensional transform, normalized: axes non-negative and
    distinct, lengths static and positive. `last_length_default` gives the default length
    of the last axis from its size (irfftn's 2 * (m - 1))."""
    ndim = len(shape(a))
    if axes is None:
        axes = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    axes = tuple(normalize_axis(ax, ndim) for ax in axes)
    if ndim == 0 or not axes:
        raise ShapeError(f"np.fft needs at least one axis to transform, got an array of shape {shape(a)}",
                         "transform an array with at least one dimension")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axes {axes} in an FFT",
                         "transform each axis once (apply the transform again for a second pass)")
    if s is None:
        sizes = [shape(a)[ax] for ax in axes]
        if last_length_default is not None:
            sizes[-1] = last_length_default(sizes[-1])
        s = sizes
    elif len(s) != len(axes):
        raise ShapeError(f"shape s={tuple(s)} and axes={axes} must have the same length")
    else:   # NumPy 2: -1 in s keeps the array's own size along that axis
        s = [shape(a)[ax] if isinstance(n, (int, np.integer)) and n == -1 else n for ax, n in zip(axes, s)]
    return axes, tuple(_check_length(n, "each length in s") for n in s)


def _resized(a, axis: int, length: int):
    """`a` cut or zero-padded to `length` along `axis`, as NumPy's `n` does."""
    size = shape(a)[axis]
    if size >= length:
        return ops.slice_in_dim(a, 0, length, axis)
    config = [(0, 0, 0)] * len(shape(a))
    config[axis] = (0, length - size, 0)
    return ops.pad(a, ops.scalar(0, dtype(a)), config)


def _transform_along(a, fft_type: str, axes: tuple[int, ...], lengths: tuple[int, ...]):
    """The `fft` primitive over `axes` (at most 3): moved last, transformed, moved back."""
    last = tuple(range(len(shape(a)) - len(axes), len(shape(a))))
    moved = moveaxis(a, axes, last)
    result = fft_primitive.bind(moved, fft_type=fft_type, fft_lengths=tuple(lengths))
    return moveaxis(result, last, axes)


def _groups(axes, lengths):
    """(axes, lengths) in groups of at most 3, in order, the last group ending with the last
    axis (the one a real transform acts on)."""
    bounds = [(max(hi - MAX_FFT_RANK, 0), hi) for hi in range(len(axes), 0, -MAX_FFT_RANK)]
    return [(axes[lo:hi], lengths[lo:hi]) for lo, hi in reversed(bounds)]


def _scaled(result, norm: str, total: int, inverse: bool):
    """The result scaled for `norm`: the primitive's forward transforms are unscaled and its
    inverse ones divide by the number of points `total`, NumPy's 'backward'."""
    factor = {"backward": 1.0, "ortho": math.sqrt(total) if inverse else 1 / math.sqrt(total),
              "forward": float(total) if inverse else 1 / total}[norm]
    if factor == 1.0:
        return result
    return ops.mul(result, ops.literal(factor, dtype(result)))


def _c2c(a, s, axes, norm, inverse: bool):
    a = _complex_operand(a)
    axes, lengths = _axes_and_lengths(a, s, axes)
    for ax, n in zip(axes, lengths):
        a = _resized(a, ax, n)
    fft_type = "IFFT" if inverse else "FFT"
    for group_axes, group_lengths in _groups(axes, lengths):
        a = _transform_along(a, fft_type, group_axes, group_lengths)
    return _scaled(a, _check_norm(norm), math.prod(lengths), inverse)


def _r2c(a, s, axes, norm, function: str):
    a = _real_operand(a, function)
    axes, lengths = _axes_and_lengths(a, s, axes)
    for ax, n in zip(axes, lengths):
        a = _resized(a, ax, n)
    groups = _groups(axes, lengths)
    a = _transform_along(a, "RFFT", *groups[-1])
    for group_axes, group_lengths in groups[:-1]:
        a = _transform_along(a, "FFT", group_axes, group_lengths)
    return _scaled(a, _check_norm(norm), math.prod(lengths), inverse=False)


def _c2r(a, s, axes, norm):
    a = _complex_operand(a)
    axes, lengths = _axes_and_lengths(a, s, axes, lambda m: 2 * (m - 1))
    for ax, n in zip(axes[:-1], lengths[:-1]):
        a = _resized(a, ax, n)
    a = _resized(a, axes[-1], rfft_length(lengths[-1]))
    groups = _groups(axes, lengths)
    for group_axes, group_lengths in groups[:-1]:
        a = _transform_along(a, "IFFT", group_axes, group_lengths)
    a = _transform_along(a, "IRFFT", *groups[-1])
    return _scaled(a, _check_norm(norm), math.prod(lengths), inverse=True)


def _one_axis(n, axis):
    return (None if n is None else (n,)), (axis,)


# ---------------------------------------------------------------------------------------
# The transforms


@implements(np.fft.fft)
def fft(a, n=None, axis=-1, norm=None):
    return _c2c(a, *_one_axis(n, axis), norm, inverse=False)


@implements(np.fft.ifft)
def ifft(a, n=None, axis=-1, norm=None):
    return _c2c(a, *_one_axis(n, axis), norm, inverse=True)


@implements(np.fft.rfft)
def rfft(a, n=None, axis=-1, norm=None):
    return _r2c(a, *_one_axis(n, axis), norm, "rfft")


@implements(np.fft.irfft)
def irfft(a, n=None, axis=-1, norm=None):
    return _c2r(a, *_one_axis(n, axis), norm)


@implements(np.fft.fft2)
def fft2(a, s=None, axes=(-2, -1), norm=None):
    return _c2c(a, s, axes, norm, inverse=False)


@implements(np.fft.ifft2)
def ifft2(a, s=None, axes=(-2, -1), norm=None):
    return _c2c(a, s, axes, norm, inverse=True)


@implements(np.fft.rfft2)
def rfft2(a, s=None, axes=(-2, -1), norm=None):
    return _r2c(a, s, axes, norm, "rfft2")


@implements(np.fft.irfft2)
def irfft2(a, s=None, axes=(-2, -1), norm=None):
    return _c2r(a, s, axes, norm)


@implements(np.fft.fftn)
def fftn(a, s=None, axes=None, norm=None):
    return _c2c(a, s, axes, norm, inverse=False)


@implements(np.fft.ifftn)
def ifftn(a, s=None, axes=None, norm=None):
    return _c2c(a, s, axes, norm, inverse=True)


@implements(np.fft.rfftn)
def rfftn(a, s=None, axes=None, norm=None):
    return _r2c(a, s, axes, norm, "rfftn")


@implements(np.fft.irfftn)
def irfftn(a, s=None, axes=None, norm=None):
    return _c2r(a, s, axes, norm)


_SWAPPED_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


@implements(np.fft.hfft)
def hfft(a, n=None, axis=-1, norm=None):
    """The transform of a signal with Hermitian symmetry given by its first half: NumPy's
    irfft of the conjugate with the opposite normalization."""
    return _c2r(np_math.conjugate(_complex_operand(a)), *_one_axis(n, axis),
                _SWAPPED_NORM[_check_norm(norm)])


@implements(np.fft.ihfft)
def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of hfft: the conjugate of rfft with the opposite normalization."""
    return np_math.conjugate(_r2c(a, *_one_axis(n, axis), _SWAPPED_NORM[_check_norm(norm)], "ihfft"))


# ---------------------------------------------------------------------------------------
# Shifts and frequencies


def _shift_axes(x, axes) -> tuple[int, ...]:
    ndim = len(shape(x))
    if axes is None:
        return tuple(range(ndim))
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    return tuple(normalize_axis(ax, ndim) for ax in axes)


@implements(np.fft.fftshift)
def fftshift(x, axes=None):
    """The zero frequency moved to the middle: a roll by half of each axis."""
    x = operand(x)
    axes = _shift_axes(x, axes)
    return roll(x, [shape(x)[ax] // 2 for ax in axes], axes)


@implements(np.fft.ifftshift)
def ifftshift(x, axes=None):
    """The inverse of fftshift (they differ for odd lengths)."""
    x = operand(x)
    axes = _shift_axes(x, axes)
    return roll(x, [-(shape(x)[ax] // 2) for ax in axes], axes)


@implements(np.fft.fftfreq)
def fftfreq(n, d=1.0, device=None):
    """The sample frequencies of an n-point transform: a constant of the static `n`
    (a staged spacing `d` scales it)."""
    n = _check_length(n, "n")
    if isinstance(d, (int, float, np.number)):
        return np.fft.fftfreq(n, d)
    return np_math.divide(np.fft.fftfreq(n), d)


@implements(np.fft.rfftfreq)
def rfftfreq(n, d=1.0, device=None):
    n = _check_length(n, "n")
    if isinstance(d, (int, float, np.number)):
        return np.fft.rfftfreq(n, d)
    return np_math.divide(np.fft.rfftfreq(n), d)
