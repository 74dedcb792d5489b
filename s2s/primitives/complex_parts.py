"""Complex parts: `real`, `imag`, `conj` of a complex array and `complex` (x + iy) of two
real ones, with every rule.

Derivatives follow JAX's convention for complex numbers, so `s2s.grad` of a real-valued
function of complex inputs is `jax.grad`'s (∂f/∂x - i ∂f/∂y, the conjugate of the steepest
ascent direction). Every rule is the transpose of a map that is linear over the reals,
written without conjugating anything the map did not conjugate: the transpose of `real` is
`complex(ct, 0)`, of `imag` is `complex(0, -ct)`, of `complex` is `(real(ct), -imag(ct))`,
and of `conj` is `conj`. Multiplication by a constant `c` transposes to multiplication by
`c` itself (elementwise's `mul` rule), as in JAX.

The primitives take complex (or, for `complex`, floating) operands only: the NumPy surface
handles real arrays itself (`np.real` of a real array is the array). Module attributes are
named after the primitives, so `complex` shadows the builtin: code here spells that one
`builtins.complex`.
"""
from __future__ import annotations

import builtins

import numpy as np
import s2s_runtime as rt

from s2s import dtypes
from s2s.core import Literal, ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import call, register
from s2s.errors import ShapeError
from s2s.passes import jvp as _jvp, simplify as _simplify, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import instantiate, unbroadcast
from s2s.passes.transpose import is_linear, skip_zero
from s2s.primitives import ops
from s2s.primitives.elementwise import broadcast_shapes
from s2s.staging import Primitive


def part_dtype(dtype) -> np.dtype:
    """The real dtype of each part of a complex dtype (complex64 -> float32)."""
    return np.finfo(np.dtype(dtype)).dtype


def complex_dtype(dtype) -> np.dtype:
    """The complex dtype whose parts have the real dtype `dtype` (float32 -> complex64)."""
    return dtypes.complex64 if np.dtype(dtype) == dtypes.float32 else dtypes.complex128


def _complex_operand(name: str, x: ShapedArray):
    if not dtypes.is_complex(x.dtype):
        raise ShapeError(f"{name} needs a complex operand, got {x.str_short()}")


def _part_abstract(name: str):
    def abstract_eval(x):
        _complex_operand(name, x)
        return ShapedArray(x.shape, part_dtype(x.dtype), x.weak_type)
    return abstract_eval


def _conj_abstract(x):
    _complex_operand("conj", x)
    return x


def _complex_abstract(x, y):
    if x.dtype != y.dtype or x.dtype not in (dtypes.float32, dtypes.float64):
        raise ShapeError("complex needs two float32 or two float64 operands, got "
                         f"{x.str_short()}, {y.str_short()}")
    return ShapedArray(broadcast_shapes(x.shape, y.shape), complex_dtype(x.dtype),
                       x.weak_type and y.weak_type)


real = Primitive("real", _part_abstract("real"), lambda x: np.real(x).copy()[()])
imag = Primitive("imag", _part_abstract("imag"), lambda x: np.imag(x).copy()[()])
conj = Primitive("conj", _conj_abstract, lambda x: np.conj(x))
complex = Primitive("complex", _complex_abstract, rt.complex_from_parts)   # noqa: A001  (lax's name)

# ---------------------------------------------------------------------------------------
# Python emission: NumPy's own names; x + iy through the runtime, since `x + 1j * y` is
# not x + iy where y is infinite (1j * inf has a NaN real part).

register(real, lambda eqn, x: call("np.real", x))
register(imag, lambda eqn, x: call("np.imag", x))
register(conj, lambda eqn, x: call("np.conj", x))
register(complex, lambda eqn, x, y: call("rt.complex_from_parts", x, y), temp_name="as_complex")

# ---------------------------------------------------------------------------------------
# Derivatives: all four are linear over the reals.

for _prim in (real, imag, conj):
    _jvp.deflinear(_prim)


def _complex_jvp(primals, tangents):
    out = complex.bind(*primals)
    parts = [ops.broadcast_to(instantiate(t), out.aval.shape) for t in tangents]
    return out, complex.bind(*parts)


_jvp.register(complex, _complex_jvp)


def _zeros_like(ct):
    return ops.full(ct.aval.shape, 0, ct.aval.dtype)


@skip_zero
def _real_transpose(ct, x):
    return [complex.bind(ct, _zeros_like(ct))]


@skip_zero
def _imag_transpose(ct, x):
    return [complex.bind(_zeros_like(ct), ops.neg(ct))]


@skip_zero
def _conj_transpose(ct, x):
    return [conj.bind(ct)]


@skip_zero
def _complex_transpose(ct, x, y):
    return [unbroadcast(real.bind(ct), x.aval.shape) if is_linear(x) else None,
            unbroadcast(ops.neg(imag.bind(ct)), y.aval.shape) if is_linear(y) else None]


for _prim, _rule in [(real, _real_transpose), (imag, _imag_transpose), (conj, _conj_transpose),
                     (complex, _complex_transpose)]:
    _transpose.register(_prim, _rule)

# ---------------------------------------------------------------------------------------
# Simplification: the transpose of `real` makes `complex(ct, 0)`; with a literal seed
# (grad's 1.0) that is the number 1+0j, written as one (and then dropped from `z * (1+0j)`
# by mul's identity rule).


def _literal_parts(eqn, producer):
    """complex(a, b) of two scalars the jaxpr fixes (literals, or a literal broadcast to
    shape ()) is the literal a+bj."""
    out = eqn.outvars[0].aval
    re, im = (_simplify.fill_value(v, producer) for v in eqn.invars)
    if out.shape or re is None or im is None:
        return None
    return Literal(builtins.complex(re, im), ShapedArray((), out.dtype, out.weak_type))


_simplify.register(complex, _literal_parts)

# ---------------------------------------------------------------------------------------
# Batching: elementwise, so the batch stays where it is.

for _prim in (real, imag, conj):
    _vmap.vectorized(_prim)
_vmap.broadcasting(complex)

# ---------------------------------------------------------------------------------------
# StableHLO lowering. StableHLO has real, imag and complex; conj is complex(re, -im), as
# XLA itself writes it.


def _lower_part(op):
    def rule(ctx, eqn, x):
        return [ctx.op(f"{op} {x} : ({_hlo.tensor_type(eqn.invars[0].aval)}) -> {_hlo.out_type(eqn)}",
                       _hlo.hint(eqn))]
    return rule


def _lower_complex(ctx, eqn, x, y):
    parts = _hlo.tensor_type(ShapedArray(eqn.outvars[0].aval.shape, eqn.invars[0].aval.dtype))
    return [ctx.op(f"stablehlo.complex {x}, {y} : ({parts}, {parts}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


def _lower_conj(ctx, eqn, x):
    source = _hlo.tensor_type(eqn.invars[0].aval)
    parts = _hlo.tensor_type(ShapedArray(eqn.outvars[0].aval.shape, part_dtype(eqn.outvars[0].aval.dtype)))
    re = ctx.op(f"stablehlo.real {x} : ({source}) -> {parts}")
    im = ctx.op(f"stablehlo.imag {x} : ({source}) -> {parts}")
    minus_im = ctx.op(f"stablehlo.negate {im} : {parts}")
    return [ctx.op(f"stablehlo.complex {re}, {minus_im} : ({parts}, {parts}) -> {_hlo.out_type(eqn)}",
                   _hlo.hint(eqn))]


_hlo.register(real, _lower_part("stablehlo.real"))
_hlo.register(imag, _lower_part("stablehlo.imag"))
_hlo.register(conj, _lower_conj)
_hlo.register(complex, _lower_complex, broadcasting=True)
