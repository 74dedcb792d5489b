"""Forward mode: the JVP transform of a jaxpr, as an interpreter with a rule per primitive.

`jvp_jaxpr(closed, nonzero)` builds a jaxpr that computes the original outputs and their
tangents from the original inputs and the tangents of the inputs flagged in `nonzero`.
Each equation is handled by `jvp_rules[primitive]`:

    rule(primals: list, tangents: list, **params) -> (primal_out, tangent_out)

where a tangent is a staged value or a symbolic `Zero`; for a primitive with multiple
results both outputs are lists. An equation whose tangents are all `Zero` is just
re-staged, and its outputs' tangents are `Zero`: no rule runs, so a function that ignores
an argument costs nothing for it. Rules are written with `Primitive.bind` and the op layer
(`s2s.primitives.ops`), so they read like the math they implement; `defzero` and
`deflinear` build the two rules every family needs.

Variable names carry over: a primal keeps its user name (`h`), its tangent is `h_dot`.
"""
from __future__ import annotations

from typing import Callable

from s2s.core import ClosedJaxpr, Literal
from s2s.passes.rule_memo import RuleMemo
from s2s.passes.tangents import Zero, instantiate, tangent_aval
from s2s.staging import JaxprBuilder, Primitive, Tracer, current_builder, paused_gc

jvp_rules: dict[Primitive, Callable] = {}


def register(primitive: Primitive, rule: Callable) -> None:
    jvp_rules[primitive] = rule


def defzero(primitive: Primitive) -> None:
    """Registers a zero tangent for `primitive`: its results are piecewise constant (floor,
    comparisons) or not differentiable at all (booleans, indices)."""
    def rule(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        if primitive.multiple_results:
            return out, [Zero(tangent_aval(y.aval)) for y in out]
        return out, Zero(tangent_aval(out.aval))
    register(primitive, rule)


def deflinear(primitive: Primitive) -> None:
    """Registers the tangent of a primitive linear in all its operands: the primitive
    applied to the tangents (symbolic zeros instantiated)."""
    def rule(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        return out, primitive.bind(*[instantiate(t) for t in tangents], **params)
    register(primitive, rule)


def tangent_hint(hint: str | None) -> str | None:
    return None if hint is None else f"{hint}_dot"


def _name(value, hint: str):
    """Names `value`'s variable `hint`, unless it has a name already."""
    if isinstance(value, Tracer) and value.variable.hint is None:
        value.variable.hint = hint


def _flat_rule(rule: Callable, eqn) -> Callable[[list], list]:
    """`eqn`'s jvp rule on one flat list (primals, then tangents) giving one flat list
    (outputs, then their tangents), as `RuleMemo` applies rules."""
    n, multiple = len(eqn.invars), eqn.primitive.multiple_results

    def flat(operands):
        outs, out_tangents = rule(operands[:n], operands[n:], **eqn.params)
        return [*outs, *out_tangents] if multiple else [outs, out_tangents]
    return flat


def jvp_eqns(closed: ClosedJaxpr, primals: list, tangents: list) -> tuple[list, list]:
    """Stages the JVP of `closed` into the current builder; returns (primals, tangents) out."""
    builder = current_builder()
    jaxpr = closed.jaxpr
    primal_env, tangent_env = {}, {}
    literal_zeros: dict = {}   # a literal's aval -> the Zero of its tangent

    def read(v):
        if type(v) is Literal:
            zero = literal_zeros.get(v.aval)
            if zero is None:
                zero = literal_zeros[v.aval] = Zero(tangent_aval(v.aval))
            return v, zero
        return primal_env[v], tangent_env[v]

    for v, value in zip(jaxpr.constvars, closed.consts):
        primal_env[v], tangent_env[v] = value, Zero(tangent_aval(v.aval))
    for v, p, t in zip(jaxpr.invars, primals, tangents):
        primal_env[v], tangent_env[v] = p, t
    memo = RuleMemo(builder, _flat_rule)
    outer_source_info = builder.source_info
    try:
        for eqn in jaxpr.eqns:
            ins, in_tangents = [], []
            all_zero = True
            for v in eqn.invars:   # (`read` written out, noting whether every tangent is zero)
                if type(v) is Literal:
                    p, t = read(v)
                else:
                    p, t = primal_env[v], tangent_env[v]
                    if all_zero and not isinstance(t, Zero):
                        all_zero = False
                ins.append(p)
                in_tangents.append(t)
            builder.source_info = eqn.source_info   # (what `builder.at` does, once per equation)
            if all_zero:
                # Staged again as it was (no shape rule: the primals have their avals).
                outs = builder.restage(eqn, ins)
                if outs is None:
                    outs = eqn.primitive.bind(*ins, **eqn.params)
                    outs = outs if eqn.primitive.multiple_results else [outs]
                out_tangents = [Zero(tangent_aval(v.aval)) for v in eqn.outvars]
            else:
                rule = jvp_rules.get(eqn.primitive)
                if rule is None:
                    raise NotImplementedError(f"no jvp rule for {eqn.primitive.name}")
                results = memo.apply(rule, eqn, ins + in_tangents)
                if len(results) == 2:   # (one output and its tangent, most equations: not sliced)
                    outs, out_tangents = (results[0],), (results[1],)
                else:
                    outs, out_tangents = results[:len(eqn.outvars)], results[len(eqn.outvars):]
            for v, p, t in zip(eqn.outvars, outs, out_tangents):
                if v.hint is not None:
                    _name(p, v.hint)
                    _name(t, tangent_hint(v.hint))
                primal_env[v], tangent_env[v] = p, t
    finally:
        builder.source_info = outer_source_info
    out = [read(v) for v in jaxpr.outvars]
    return [p for p, _ in out], [t for _, t in out]


def jvp_jaxpr(closed: ClosedJaxpr, nonzero: list[bool], instantiate_out: bool | list[bool] = True
              ) -> tuple[ClosedJaxpr, list[bool]]:
    """The JVP of `closed` as a jaxpr: (primals, nonzero tangents) → (primals, tangents).

    Returns the jaxpr and, per output, whether its tangent is nonzero (symbolic zero
    outputs are instantiated when `instantiate_out` says so, and then count as nonzero).
    """
    jaxpr = closed.jaxpr
    if isinstance(instantiate_out, bool):
        instantiate_out = [instantiate_out] * len(jaxpr.outvars)
    with paused_gc(), JaxprBuilder() as builder:
        primals = [builder.new_arg(v.aval, v.hint) for v in jaxpr.invars]
        tangents = [builder.new_arg(tangent_aval(v.aval), tangent_hint(v.hint)) if nz
                    else Zero(tangent_aval(v.aval)) for v, nz in zip(jaxpr.invars, nonzero)]
        outs, out_tangents = jvp_eqns(closed, primals, tangents)
        out_nonzero = []
        final_tangents = []
        for t, inst in zip(out_tangents, instantiate_out):
            if isinstance(t, Zero) and inst:
                t = instantiate(t)
            out_nonzero.append(not isinstance(t, Zero))
            if not isinstance(t, Zero):
                final_tangents.append(t)
        result = builder.build(list(outs) + final_tangents)
    return result, out_nonzero
