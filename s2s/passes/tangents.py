"""Tangent and cotangent values: symbolic zeros, float0, and how they add.

A tangent that is known to be zero is a `Zero(aval)` instance, never a staged array of
zeros, until a rule truly needs its value (`instantiate`). That keeps the derivative of a
function that ignores an argument free of any work for it. Integer and boolean values
have `float0` tangents: `tangent_aval` says which.

Passes sit below the primitive families, so the few equations staged here (the zeros'
broadcast, `add_any`, unbroadcasting's `reduce_sum` and `reshape`) are written with the
passes' ops (`passes/lax_ops.py`), which find their primitives in the registry when called.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray
from s2s.passes import lax_ops


class AvalMarker:
    """A stand-in for a value of which a pass knows only the abstract value: a symbolic
    zero here, a linear input in `transpose`."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self):
        return f"{type(self).__name__}({self.aval.str_short()})"


class Zero(AvalMarker):
    """A symbolic zero tangent or cotangent of a given abstract value."""

    __slots__ = ()


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """The type of a tangent of a value of type `aval` (float0 for ints and bools)."""
    if dtypes.is_differentiable(aval.dtype):
        return aval   # weak stays weak, so tangents mix with their primals without converts
    return ShapedArray(aval.shape, dtypes.float0)


def is_zero(t) -> bool:
    return isinstance(t, Zero)


def zeros(aval: ShapedArray):
    """Staged zeros of `aval` (a broadcast strong literal: no constant is baked in)."""
    if aval.dtype == dtypes.float0:
        return np.zeros(aval.shape, dtypes.float0)
    zero = Literal(np.zeros((), aval.dtype).item(), ShapedArray((), aval.dtype))
    return lax_ops.broadcast_in_dim(zero, aval.shape, ())


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
    return lax_ops.add_any(a, b)


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
    lead = len(ct_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and ct_shape[lead + i] != 1)
    summed = lax_ops.reduce_sum(ct, axes) if axes else ct
    return lax_ops.reshape(summed, shape)
