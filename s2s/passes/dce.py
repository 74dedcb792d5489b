"""Dead-code elimination: drop equations whose outputs nothing reads.

Every primitive is pure, so an equation is dead exactly when none of its outputs is used
by a live equation or returned. Run on every derivative so emitted gradients carry no
dead work. Primitives with bodies (control flow) have a rule in `dce_rules`,

    rule(eqn, used_outputs: list[bool]) -> an equation computing just the used outputs,

so a loop stops computing what nobody reads (a forward scan's unused primal outputs in a
gradient, say).
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, Var

dce_rules: dict = {}


def register(primitive, rule) -> None:
    dce_rules[primitive] = rule


def dce_jaxpr(jaxpr: Jaxpr, prune_invars: bool = False) -> Jaxpr:
    """The jaxpr without dead equations (and, if `prune_invars`, without unused inputs)."""
    live: set[Var] = {v for v in jaxpr.outvars if isinstance(v, Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        used = [v in live for v in eqn.outvars]
        if any(used):
            rule = dce_rules.get(eqn.primitive)
            if rule is not None and not all(used):
                eqn = rule(eqn, used)
            kept.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, Var))
    kept.reverse()
    invars = [v for v in jaxpr.invars if v in live] if prune_invars else jaxpr.invars
    return Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, kept)


def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """DCE of a closed jaxpr, also dropping constants nothing reads."""
    jaxpr = dce_jaxpr(closed.jaxpr)
    live = {v for e in jaxpr.eqns for v in e.invars if isinstance(v, Var)}
    live |= {v for v in jaxpr.outvars if isinstance(v, Var)}
    pairs = [(v, c) for v, c in zip(jaxpr.constvars, closed.consts) if v in live]
    constvars = [v for v, _ in pairs]
    return ClosedJaxpr(Jaxpr(constvars, jaxpr.invars, jaxpr.outvars, jaxpr.eqns), [c for _, c in pairs])
