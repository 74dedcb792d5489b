"""Dead-code elimination into the bodies of `while_loop` and `scan`: outputs nobody reads
are not computed, and neither are loop carries that only feed them. `while_computing`
(a while loop cut down to some of its carries) serves reverse mode too."""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn
from s2s.passes import dce as _dce
from s2s.primitives.control_flow_bodies import prune_body
from s2s.primitives.loops.definitions import scan, while_loop


def _needed_carry(body: ClosedJaxpr, n_consts: int, needed: list[bool], ys_used=()) -> list[bool]:
    """The loop carries that must be computed: those `needed` to begin with, and those
    that feed a needed carry or a used output from one iteration to the next."""
    while True:
        _, reads = prune_body(body, needed + list(ys_used))
        updated = [a or b for a, b in zip(needed, reads[n_consts:n_consts + len(needed)])]
        if updated == needed:
            return needed
        needed = updated


def _scan_dce(eqn, used):
    p = eqn.params
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    body = p["jaxpr"]
    ys_used = list(used[n_carry:])
    carry_needed = _needed_carry(body, n_consts, list(used[:n_carry]), ys_used)
    pruned, reads = prune_body(body, carry_needed + ys_used)
    keep_in = reads[:n_consts] + carry_needed + reads[n_consts + n_carry:]
    new_body = Jaxpr([], [v for v, k in zip(pruned.invars, keep_in) if k], pruned.outvars, pruned.eqns)
    return JaxprEqn(scan, [v for v, k in zip(eqn.invars, keep_in) if k],
                    [v for v, k in zip(eqn.outvars, carry_needed + ys_used) if k],
                    dict(p, jaxpr=ClosedJaxpr(new_body, []), num_consts=sum(keep_in[:n_consts]),
                         num_carry=sum(carry_needed)), eqn.source_info)


def _while_dce(eqn, used):
    """Carries that neither the condition nor a used result depends on are dropped (the
    step counter of a `for` loop whose index nobody reads, say)."""
    p = eqn.params
    _, cond_reads = prune_body(p["cond_jaxpr"], [True])
    needed = _needed_carry(p["body_jaxpr"], p["body_nconsts"],
                           [u or r for u, r in zip(used, cond_reads[p["cond_nconsts"]:])])
    return while_computing(eqn, needed)


def while_computing(eqn, carries: list[bool]) -> JaxprEqn:
    """The while loop `eqn` computing only the flagged carries (the condition, and the
    body's steps for them, must read no other carry)."""
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    condition, cond_reads = prune_body(p["cond_jaxpr"], [True])
    body, body_reads = prune_body(p["body_jaxpr"], carries)
    keep_cond, keep_body = cond_reads[:n_cond] + carries, body_reads[:n_body] + carries

    def kept(jaxpr: Jaxpr, keep: list[bool]) -> ClosedJaxpr:
        return ClosedJaxpr(Jaxpr([], [v for v, k in zip(jaxpr.invars, keep) if k], jaxpr.outvars, jaxpr.eqns), [])
    operands = eqn.invars
    return JaxprEqn(while_loop,
                    [v for v, k in zip(operands[:n_cond], keep_cond) if k]
                    + [v for v, k in zip(operands[n_cond:n_cond + n_body], keep_body) if k]
                    + [v for v, k in zip(operands[n_cond + n_body:], carries) if k],
                    [v for v, k in zip(eqn.outvars, carries) if k],
                    dict(p, cond_jaxpr=kept(condition, keep_cond), body_jaxpr=kept(body, keep_body),
                         cond_nconsts=sum(keep_cond[:n_cond]), body_nconsts=sum(keep_body[:n_body])),
                    eqn.source_info)


_dce.register(scan, _scan_dce)
_dce.register(while_loop, _while_dce)
