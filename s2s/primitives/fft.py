"""The discrete Fourier transform: one `fft` primitive over the trailing 1 to 3 axes of its
operand, as XLA's FftOp and `jax.lax.fft` define it, with every rule.

`fft_type` is one of four transforms, `fft_lengths` the lengths of the transformed axes:

    FFT    complex -> complex   the unnormalized transform (np.fft.fftn over those axes)
    IFFT   complex -> complex   its inverse, scaled by 1/prod(fft_lengths) (np.fft.ifftn)
    RFFT   real -> complex      FFT of a real array, last axis cut to n//2 + 1 (np.fft.rfftn)
    IRFFT  complex -> real      the inverse of RFFT, giving real axes of fft_lengths (np.fft.irfftn)

NumPy's `n`/`s` padding, `axis`/`axes` and `norm` are the NumPy surface's business
(s2s/numpy_api/fft.py): it moves the transformed axes last and scales the result.

All four are linear over the reals. Transposes follow JAX's convention for complex numbers
(the transpose of multiplying by c multiplies by c, unconjugated):
- FFT and IFFT are symmetric matrices (F[j, k] = w^(jk)), so each is its own transpose.
- RFFT is "cast to complex, FFT, keep the first n//2 + 1 entries of the last axis"; its
  transpose is the transpose of each step in reverse: pad the cotangent with zeros to n,
  FFT, take the real part.
- IRFFT reads each entry 0 < m < n/2 of the last axis twice (once for itself, once for its
  mirror image n - m, whose value it implies by Hermitian symmetry) and the entries 0 and
  n/2 (n even) once, ignoring their imaginary parts. Writing x_k = (1/N) sum_m w_m Re(y_m
  e^{2 pi i mk/n}) (w_m the 1/2/1 weights) and differentiating by the real and imaginary
  parts of y_m gives ct_y = conj(w * RFFT(ct_x)) / N, where N = prod(fft_lengths); the
  conjugate comes from the convention (ct_z = ct_re - i ct_im), the weights from the
  Hermitian symmetry.
"""
from __future__ import annotations

import math

import numpy as np

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.transpose import skip_zero
from s2s.primitives import ops
from s2s.primitives.complex_parts import complex_dtype, part_dtype
from s2s.staging import Primitive

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
MAX_FFT_RANK = 3   # XLA transforms at most the 3 trailing axes at once


def rfft_length(n: int) -> int:
    """The length of the last axis of a real array's transform of length `n`."""
    return n // 2 + 1


def _transformed_input_shape(fft_type: str, fft_lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The trailing shape the operand of a transform must have."""
    if fft_type == "IRFFT":
        return fft_lengths[:-1] + (rfft_length(fft_lengths[-1]),)
    return fft_lengths


def _transformed_output_shape(fft_type: str, fft_lengths: tuple[int, ...]) -> tuple[int, ...]:
    if fft_type == "RFFT":
        return fft_lengths[:-1] + (rfft_length(fft_lengths[-1]),)
    return fft_lengths


def _fft_abstract(x: ShapedArray, *, fft_type: str, fft_lengths: tuple[int, ...]):
    if fft_type not in FFT_TYPES:
        raise ShapeError(f"fft_type must be one of {', '.join(FFT_TYPES)}, got {fft_type!r}")
    rank = len(fft_lengths)
    if not 1 <= rank <= min(MAX_FFT_RANK, x.ndim) or any(n < 1 for n in fft_lengths):
        raise ShapeError(f"fft of {x.str_short()} needs 1 to {MAX_FFT_RANK} positive lengths, "
                         f"at most one per axis, got {fft_lengths}")
    wants_real = fft_type == "RFFT"
    dtype_fits = x.dtype in (dtypes.float32, dtypes.float64) if wants_real else dtypes.is_complex(x.dtype)
    if not dtype_fits:
        kind = "a float32 or float64" if wants_real else "a complex"
        raise ShapeError(f"{fft_type} needs {kind} operand, got {x.str_short()}")
    expected = _transformed_input_shape(fft_type, fft_lengths)
    if tuple(x.shape[-rank:]) != expected:
        raise ShapeError(f"{fft_type} with lengths {fft_lengths} needs trailing axes {expected}, "
                         f"got {x.str_short()}")
    if fft_type == "RFFT":
        out_dtype = complex_dtype(x.dtype)
    elif fft_type == "IRFFT":
        out_dtype = part_dtype(x.dtype)
    else:
        out_dtype = x.dtype
    return ShapedArray(tuple(x.shape[:-rank]) + _transformed_output_shape(fft_type, fft_lengths),
                       out_dtype)


NUMPY_FUNCTIONS = {"FFT": "fftn", "IFFT": "ifftn", "RFFT": "rfftn", "IRFFT": "irfftn"}


def _fft_impl(x, *, fft_type: str, fft_lengths: tuple[int, ...]):
    axes = tuple(range(-len(fft_lengths), 0))
    transform = getattr(np.fft, NUMPY_FUNCTIONS[fft_type])
    return transform(x, s=fft_lengths, axes=axes)


fft = Primitive("fft", _fft_abstract, _fft_impl)

# ---------------------------------------------------------------------------------------
# Python emission: NumPy's own call, one-axis transforms as np.fft.fft(x) and the like.


def _emit_fft(eqn, x):
    fft_type, lengths = eqn.params["fft_type"], eqn.params["fft_lengths"]
    name = NUMPY_FUNCTIONS[fft_type]
    if len(lengths) == 1:
        kwargs = {"n": lengths[0]} if fft_type == "IRFFT" else {}
        return call(f"np.fft.{name[:-1]}", x, **kwargs)
    axes = tuple(range(-len(lengths), 0))
    kwargs = {"s": lengths} if fft_type == "IRFFT" else {}
    return call(f"np.fft.{name}", x, **kwargs, axes=axes)


register(fft, _emit_fft)

# ---------------------------------------------------------------------------------------
# Derivatives: linear, so the tangent is the transform of the tangent.

_jvp.deflinear(fft)


def _rfft_transpose(ct, fft_lengths):
    """Zero-pad the last axis back to n, FFT, real part (see the module docstring)."""
    missing = fft_lengths[-1] - ct.aval.shape[-1]
    config = [(0, 0, 0)] * (ct.aval.ndim - 1) + [(0, missing, 0)]
    padded = ops.pad(ct, ops.scalar(0, ct.aval.dtype), config)
    return ops.real(fft.bind(padded, fft_type="FFT", fft_lengths=fft_lengths))


def hermitian_weights(n: int, dtype):
    """The weights with which IRFFT reads each entry of a last axis of length n//2 + 1:
    1 for entry 0 and (n even) entry n/2, 2 for the entries whose mirror images it implies."""
    counts = [(1, 1), (2, (n - 1) // 2), (1, 1 - n % 2)]   # (weight, how many entries)
    return ops.concatenate([ops.full((count,), weight, dtype) for weight, count in counts if count],
                           0)


def _irfft_transpose(ct, fft_lengths):
    """conj(w * RFFT(ct)) / prod(fft_lengths) (see the module docstring)."""
    spectrum = fft.bind(ct, fft_type="RFFT", fft_lengths=fft_lengths)
    shape, dtype = spectrum.aval.shape, spectrum.aval.dtype
    weights = ops.convert(hermitian_weights(fft_lengths[-1], part_dtype(dtype)), dtype)
    weights = ops.broadcast_in_dim(weights, shape, (len(shape) - 1,))
    scaled = ops.mul(ops.mul(spectrum, weights), ops.literal(1 / math.prod(fft_lengths), dtype))
    return ops.conj(scaled)


@skip_zero
def _fft_transpose(ct, x, *, fft_type: str, fft_lengths: tuple[int, ...]):
    if fft_type == "RFFT":
        return [_rfft_transpose(ct, fft_lengths)]
    if fft_type == "IRFFT":
        return [_irfft_transpose(ct, fft_lengths)]
    return [fft.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)]


_transpose.register(fft, _fft_transpose)

# ---------------------------------------------------------------------------------------
# Batching: leading axes are free; a batch among the transformed axes moves to the front.


def _fft_batch(mapped, args, dims, /, *, fft_type, fft_lengths):
    (x,), (dim,) = args, dims
    if dim >= _vmap.ndim(x) - len(fft_lengths):
        x, dim = _vmap.move_axis(x, dim, 0), 0
    return fft.bind(x, fft_type=fft_type, fft_lengths=fft_lengths), dim


_vmap.register(fft, _fft_batch)

# ---------------------------------------------------------------------------------------
# StableHLO lowering: XLA's own FftOp.


def _lower_fft(ctx, eqn, x):
    fft_type, lengths = eqn.params["fft_type"], eqn.params["fft_lengths"]
    return [ctx.op(f"stablehlo.fft {x}, type = {fft_type}, length = [{', '.join(map(str, lengths))}] : "
                   f"({_hlo.tensor_type(eqn.invars[0].aval)}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


_hlo.register(fft, _lower_fft)
