"""autograd's `autograd.scipy.signal.convolve`: an N-d convolution over chosen axis pairs of
two tensors that also contracts chosen pairs of their other axes (a convolutional layer's
input channels), which is not SciPy's function of the same name.

    convolve(A, B, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid")

convolves A's axes `axes[0]` with B's `axes[1]` pair by pair (one operand flipped, as a
convolution is), sums the products over the pairs `dot_axes`, and keeps each operand's
other axes. The output's axes are A's kept ones, then B's kept ones (each in their order),
then the convolved ones (in the order of `axes`). `axes=None` convolves every axis of A
with the same-numbered one of B. `mode="full"` is the whole convolution (sizes n + m - 1);
`mode="valid"` the part where the smaller operand lies wholly inside the larger (sizes
|n - m| + 1), which needs one operand no larger than the other along every convolved axis.

Written with slicing and `np.tensordot` (reached through `call_user_code`), it runs on
NumPy values and stages on staged ones, where s2s derives it as it derives any NumPy code:
the smaller operand is the kernel, and the output is the sum, over its offsets (unrolled
when staged: its sizes are static), of the kernel's slice at that offset contracted with
the window of the other operand it meets. A program's `autograd.scipy.signal.convolve`
stages as this function (`s2s.autograd.extend`).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from s2s.autograd.wrap_util import call_user_code
from s2s.errors import ShapeError

__all__ = ["convolve"]

_MODES = ("full", "valid")


class _Operand:
    """One operand of the convolution: its value, its convolved and contracted axes, and
    the label each of its axes has in the output ('A0', 'B2' for a kept axis, 'conv1' for
    the second convolved pair)."""

    def __init__(self, name: str, value, conv_axes, dot_axes):
        self.value, self.shape = value, np.shape(value)
        ndim = len(self.shape)   # (negative axes count from the end, as NumPy's do)
        self.conv_axes = [int(a) % ndim for a in conv_axes]
        self.dot_axes = [int(a) % ndim for a in dot_axes]
        self.labels = [f"{name}{axis}" for axis in range(len(self.shape))]
        for pair, axis in enumerate(self.conv_axes):
            self.labels[axis] = f"conv{pair}"
        self.kept_labels = [self.labels[axis] for axis in range(len(self.shape))
                            if axis not in self.conv_axes and axis not in self.dot_axes]

    @property
    def conv_sizes(self) -> list[int]:
        return [self.shape[axis] for axis in self.conv_axes]


def convolve(A, B, axes=None, dot_axes=((), ()), mode="full"):
    """autograd's convolve (see the module's docstring)."""
    if mode not in _MODES:
        raise ShapeError(f"autograd's convolve takes mode 'full' or 'valid', not {mode!r}",
                         "compute another mode's part by slicing the 'full' convolution")
    if axes is None:
        axes = (range(np.ndim(A)), range(np.ndim(A)))
    a = _Operand("A", A, axes[0], dot_axes[0])
    b = _Operand("B", B, axes[1], dot_axes[1])
    if len(a.conv_axes) != len(b.conv_axes) or len(a.dot_axes) != len(b.dot_axes):
        raise ShapeError(f"convolve pairs axes of A and B, but got axes={axes} and dot_axes={dot_axes}",
                         "give as many axes of B as of A in each pair of lists")
    kernel, signal = _kernel_and_signal(a, b, mode)
    window_sizes = [n - k + 1 if mode == "valid" else n + k - 1
                    for n, k in zip(signal.conv_sizes, kernel.conv_sizes)]
    signal_value = signal.value
    if mode == "full":   # the signal, padded with zeros on each side so the kernel can overhang it
        padding = [(0, 0)] * len(signal.shape)
        for axis, k in zip(signal.conv_axes, kernel.conv_sizes):
            padding[axis] = (k - 1, k - 1)
        signal_value = call_user_code(np.pad, (signal_value, padding), {})
    # The kernel at offset m meets the signal's window starting at (kernel size - 1 - m):
    # summed over m, out[i] = sum_m kernel[m] * signal[i + k - 1 - m], a convolution.
    kernel_dot = [axis - sum(c < axis for c in kernel.conv_axes) for axis in kernel.dot_axes]
    total = None
    for offsets in itertools.product(*(range(k) for k in kernel.conv_sizes)):
        at_offset = [slice(None)] * len(kernel.shape)
        for axis, m in zip(kernel.conv_axes, offsets):
            at_offset[axis] = m
        window = [slice(None)] * len(signal.shape)
        for axis, k, m, size in zip(signal.conv_axes, kernel.conv_sizes, offsets, window_sizes):
            window[axis] = slice(k - 1 - m, k - 1 - m + size)
        term = call_user_code(np.tensordot, (kernel.value[tuple(at_offset)], signal_value[tuple(window)]),
                              {"axes": (kernel_dot, signal.dot_axes)})
        total = term if total is None else total + term
    # tensordot's axes: the kernel's kept ones, then the signal's kept and convolved ones.
    got = kernel.kept_labels + [label for axis, label in enumerate(signal.labels) if axis not in signal.dot_axes]
    wanted = a.kept_labels + b.kept_labels + [f"conv{pair}" for pair in range(len(a.conv_axes))]
    return call_user_code(np.transpose, (total, [got.index(label) for label in wanted]), {})


def _kernel_and_signal(a: _Operand, b: _Operand, mode: str) -> tuple[_Operand, _Operand]:
    """Which operand slides over the other: in 'valid' mode the one no larger along every
    convolved axis (A where both are), in 'full' mode the one with fewer offsets (the
    convolution is the same either way; fewer offsets stage fewer terms)."""
    if mode == "full":
        return (a, b) if math.prod(a.conv_sizes) <= math.prod(b.conv_sizes) else (b, a)
    if all(m <= n for m, n in zip(a.conv_sizes, b.conv_sizes)):
        return a, b
    if all(n <= m for m, n in zip(a.conv_sizes, b.conv_sizes)):
        return b, a
    raise ShapeError(f"convolve's 'valid' mode needs one operand no larger than the other along every "
                     f"convolved axis, but A's sizes there are {a.conv_sizes} and B's {b.conv_sizes}",
                     "use mode='full', or swap the axes so one operand is the smaller everywhere")
