"""Inlining: replace call primitives by the equations of the jaxpr they call.

The emitters run this first, so a function with a custom derivative is written out as its
own equations, readable like everything else. Bodies of control flow (a scan's jaxpr, a
cond's branches) are inlined too, so a call inside a loop is written out as well.

A call primitive (custom_jvp_call ...) carries the jaxpr it calls in its `call` parameter;
its family declares it with `register_call`, and the emitters, which inline first, need no
rule for it. One whose `call` is None (a custom_vjp_lin without a forward map) is left for
its own emission rule.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr
from s2s.staging import JaxprBuilder, inline_jaxpr, paused_gc

call_primitives: set = set()   # primitives whose equations are replaced by their `call` jaxpr


def register_call(primitive) -> None:
    call_primitives.add(primitive)


def _bodies(value) -> list[ClosedJaxpr]:
    """The jaxprs a parameter value holds (one, a tuple of them, or none)."""
    if isinstance(value, ClosedJaxpr):
        return [value]
    if isinstance(value, tuple) and value and all(isinstance(v, ClosedJaxpr) for v in value):
        return list(value)
    return []


def _has_calls(closed: ClosedJaxpr) -> bool:
    """Whether `closed` or a body in it has a call (asked of every jaxpr emitted: a loop
    rather than nested generators, and only parameters that can hold jaxprs looked into)."""
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive in call_primitives and eqn.params["call"] is not None:
            return True
        if eqn.params:   # (most equations have none)
            for value in eqn.params.values():
                if isinstance(value, (ClosedJaxpr, tuple)) and any(_has_calls(b) for b in _bodies(value)):
                    return True
    return False


def _with_bodies_inlined_params(params: dict) -> dict:
    return {k: _with_bodies_inlined(v) for k, v in params.items()}


def _with_bodies_inlined(value):
    if isinstance(value, ClosedJaxpr):
        return inline_calls(value)
    if _bodies(value):
        return tuple(inline_calls(v) for v in value)
    return value


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` with every call primitive replaced by its body (recursively, also inside
    the bodies of control flow)."""
    if not _has_calls(closed):
        return closed
    with paused_gc(), JaxprBuilder() as builder:
        args = [builder.new_arg(v.aval, v.hint) for v in closed.jaxpr.invars]
        return builder.build(inline_jaxpr(closed, args, call_primitives, _with_bodies_inlined_params))
