"""One algorithm for both backends: the runtime's Python functions (s2s_runtime.special,
special_gamma, bessel), which run on NumPy for the Python backend and the eager path, are
given staged operations instead of NumPy's and staged into a jaxpr, which the StableHLO
lowering of their primitive (betainc, the incomplete gamma functions, erfinv, Bessel
functions) emits inline. `StagedFunctions` is that set of operations; the families add
what their algorithms need on top of it.
"""
from __future__ import annotations

from s2s.primitives import ops
from s2s.staging import JaxprBuilder


class StagedFunctions:
    """The operations a runtime algorithm calls (`fns.exp(x)`, `fns.select(...)`), as
    staged operations in `dtype` (Python numbers, such as a tiny guard value, become
    literals of it)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def _operand(self, v):
        return ops.literal(v, self.dtype) if isinstance(v, (int, float)) else v

    def select(self, pred, on_true, on_false):
        return ops.select(pred, self._operand(on_true), self._operand(on_false))

    abs = staticmethod(ops.abs_)
    exp = staticmethod(ops.exp)
    log = staticmethod(ops.log)
    log1p = staticmethod(ops.log1p)
    lgamma = staticmethod(ops.lgamma)


def staged_jaxpr(fn, avals):
    """`fn` staged on arguments of `avals`: a jaxpr to lower inline (it must capture no
    constants: every value it reads is an argument or a literal)."""
    with JaxprBuilder() as builder:
        outs = fn(*[builder.new_arg(a) for a in avals])
        closed = builder.build(list(outs))
    if closed.consts:
        raise AssertionError(f"a staged lowering ({getattr(fn, '__qualname__', fn)}) captured constants")
    return closed.jaxpr
