"""Tangent and cotangent values: symbolic zeros, float0, and how they add.

A tangent that is known to be zero is a `Zero(aval)` instance, never a staged array of
zeros, until a rule truly needs its value (`instantiate`). That keeps the derivative of a
function that ignores an argument free of any work for it. Integer and boolean values
have `float0` tangents: `tangent_aval` says which.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import ShapedArray


class Zero:
    """A symbolic zero tangent or cotangent of a given abstract value."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self):
        return f"Zero({self.aval.str_short()})"


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """The type of a tangent of a value of type `aval` (float0 for ints and bools)."""
    if dtypes.is_differentiable(aval.dtype):
        return aval   # weak stays weak, so tangents mix with their primals without converts
    return ShapedArray(aval.shape, dtypes.float0)


def is_zero(t) -> bool:
    return isinstance(t, Zero)


def zeros(aval: ShapedArray):
    """Staged zeros of `aval` (a broadcast literal: no constant is baked in)."""
    from s2s.numpy_api.creation import full
    if aval.dtype == dtypes.float0:
        return np.zeros(aval.shape, dtypes.float0)
    return full(aval.shape, 0, dtype=aval.dtype)


def instantiate(t, aval: ShapedArray | None = None):
    """A real value for a tangent: Zero becomes staged zeros."""
    if isinstance(t, Zero):
        return zeros(t.aval)
    return t


def add_tangents(a, b):
    """Sums two tangents (or cotangents), keeping zeros symbolic."""
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    from s2s.primitives.elementwise import add_any
    return add_any.bind(a, b)


def unbroadcast(ct, shape: tuple[int, ...]):
    """Sums a cotangent over the axes NumPy broadcasting added, back to `shape`.

    The transpose of implicit broadcasting: elementwise primitives broadcast their
    operands, so their transpose rules hand each operand this sum of the cotangent.
    """
    if isinstance(ct, Zero):
        return Zero(ct.aval.update(shape=shape))
    ct_shape = tuple(ct.shape)
    if ct_shape == tuple(shape):
        return ct
    from s2s.numpy_api import reductions, shaping
    lead = len(ct_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and ct_shape[lead + i] != 1)
    summed = reductions.sum(ct, axis=axes) if axes else ct
    return shaping.reshape(summed, shape) if tuple(summed.shape) != tuple(shape) else summed
