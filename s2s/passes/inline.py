"""Inlining: replace call primitives by the equations of the jaxpr they call.

The emitters run this first, so a function with a custom derivative is written out as its
own equations, readable like everything else.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr
from s2s.emit.pyexpr import INLINED_BEFORE_EMISSION
from s2s.staging import JaxprBuilder, inline_jaxpr, paused_gc


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` with every call primitive replaced by its body (recursively)."""
    if not any(e.primitive in INLINED_BEFORE_EMISSION for e in closed.jaxpr.eqns):
        return closed
    with paused_gc(), JaxprBuilder() as builder:
        args = [builder.new_arg(v.aval, v.hint) for v in closed.jaxpr.invars]
        return builder.build(inline_jaxpr(closed, args, INLINED_BEFORE_EMISSION))
