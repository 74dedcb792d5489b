"""Dead-code elimination: drop equations whose outputs nothing reads.

Every primitive is pure, so an equation is dead exactly when none of its outputs is used
by a live equation or returned. Run on every derivative so emitted gradients carry no
dead work. Primitives with bodies (control flow) have a rule in `dce_rules`,

    rule(eqn, used_outputs: list[bool]) -> an equation computing just the used outputs,

so a loop stops computing what nobody reads (a forward scan's unused primal outputs in a
gradient, say).
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, has_effects

dce_rules: dict = {}


def register(primitive, rule) -> None:
    dce_rules[primitive] = rule


def dce_jaxpr(jaxpr: Jaxpr, prune_invars: bool = False) -> Jaxpr:
    """The jaxpr without dead equations (and, if `prune_invars`, without unused inputs)."""
    kept, live = _live_equations(jaxpr)
    invars = [v for v in jaxpr.invars if v in live] if prune_invars else jaxpr.invars
    return Jaxpr(jaxpr.constvars, invars, jaxpr.outvars, kept)


def _live_equations(jaxpr: Jaxpr) -> tuple[list, set]:
    """(the equations something reads, in order; every atom they or the outputs read)."""
    live = set(jaxpr.outvars)   # (literals too: atoms hash by identity, and are never looked up)
    kept = []
    for eqn in reversed(jaxpr.eqns):
        outvars = eqn.outvars
        if len(outvars) == 1:   # the common case, written out
            if outvars[0] not in live and not has_effects(eqn):
                continue
        else:
            used = [v in live for v in outvars]
            if not any(used) and not has_effects(eqn):
                continue
            rule = dce_rules.get(eqn.primitive)
            if rule is not None and not all(used):
                eqn = rule(eqn, used)
        kept.append(eqn)
        live.update(eqn.invars)
    kept.reverse()
    return kept, live


def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """DCE of a closed jaxpr, also dropping constants nothing reads."""
    jaxpr = closed.jaxpr
    kept, live = _live_equations(jaxpr)
    pairs = [(v, c) for v, c in zip(jaxpr.constvars, closed.consts) if v in live]
    constvars = [v for v, _ in pairs]
    return ClosedJaxpr(Jaxpr(constvars, jaxpr.invars, jaxpr.outvars, kept), [c for _, c in pairs])
