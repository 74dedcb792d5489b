"""Reverse mode of `scan` and `while_loop`: partial evaluation (what the forward loop saves
for the backward one) and transposition. A scan with `checkpoints` and a while loop
without a bound are reversed on checkpoint slots instead (`checkpoints.py`).

A loop keeps per step only what depends on its carry or its scanned inputs: the known
body's loop-invariant equations are moved out (computed once, saved once), and the
cheap ones (`partial_eval.defcheap`) are recomputed in the backward step instead of saved.
"""
from __future__ import annotations

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, ShapedArray, Var, has_effects
from s2s.errors import StagingError
from s2s.passes import partial_eval as _pe, transpose as _transpose
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.tangents import Zero, instantiate, is_zero
from s2s.passes.transpose import is_linear, transpose_jaxpr
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import prune_body, recomputed_first
from s2s.primitives.loops.checkpoints import (checkpointed_partial_eval, checkpointed_transpose,
                                              unbounded_while_transpose, unknown_carries)
from s2s.primitives.loops.dce import while_computing
from s2s.primitives.loops.replay import draws_in, replaying_partial_eval
from s2s.primitives.loops.definitions import permute, scan, scan_split, while_loop
from s2s.staging import JaxprBuilder, inline_jaxpr


# ---------------------------------------------------------------------------------------
# Reverse mode. Partial evaluation splits a scan into a known scan (the forward pass, which
# also returns the residuals each iteration needs, stacked) and an unknown scan over the
# tangents; transposing that one gives a scan running the other way. Loop-invariant
# residuals are passed once, not stacked: the known body's equations that read only its
# known constants are hoisted out of the loop first (computed once, before it), so what
# they compute becomes a constant too; the tangent body's are hoisted the same way. cheap
# equations are recomputed by the backward step instead of saved. A bounded while loop
# splits as a scan.


# `partial_eval.is_cheap`: primitives the families declare cheap to recompute (views in
# NumPy, or passes XLA fuses into their consumer). A loop does not move them out (XLA folds
# a transpose into the dot that reads it, not across a loop boundary), and its reverse mode
# recomputes them in the backward pass from what they read, saved instead. `iota` too: it
# is a loop's counter (`np.arange(n)` scanned as the steps' index), which stays beside its
# loop so that it reads `for t in range(n):`.


def hoist_invariant(body: ClosedJaxpr, outer: list) -> tuple[list[JaxprEqn], ClosedJaxpr, list[Var]]:
    """Loop-invariant code motion: the equations of `body` that read only literals and the
    inputs given an outer value in `outer` (None for an input that changes per step), and
    equations computed from those, are moved out. Returns the moved equations, written on
    the outer values; `body` without them, taking the moved values it still reads as new
    leading inputs; and those values outside, in the same order. An equation without
    effects is pure, so moved out it computes what each step computed; a loop of no steps
    computes it once for nothing. One with effects (a draw) stays: each step draws anew.

    This is what keeps reverse mode from stacking a value per step that is the same at
    every step (the keys `X @ Wk` of attention over a fixed context): once moved out, it is
    one of the loop's constants, saved once. A nested loop moves its own invariant equations into the
    enclosing body first, so they move on out of every loop they do not depend on.

    A cheap equation stays in the loop too: moved out, it would be a buffer the loop
    keeps; its copy outside serves only the invariant equations computed from it (and is
    dropped as dead code where there are none)."""
    jaxpr = body.jaxpr
    outside = {v: o for v, o in zip(jaxpr.invars, outer) if o is not None}
    hoisted, kept, computed = [], [], []
    for eqn in jaxpr.eqns:
        if all(isinstance(v, Literal) or v in outside for v in eqn.invars) and not has_effects(eqn):
            outvars = [Var(v.aval, v.hint) for v in eqn.outvars]
            hoisted.append(JaxprEqn(eqn.primitive, [outside.get(v, v) for v in eqn.invars], outvars,
                                    eqn.params, eqn.source_info))
            outside.update(zip(eqn.outvars, outvars))
            if _pe.is_cheap(eqn):
                kept.append(eqn)
            else:
                computed.extend(eqn.outvars)
        else:
            kept.append(eqn)
    if len(kept) == len(jaxpr.eqns):
        return [], body, []
    read = {v for e in kept for v in e.invars if isinstance(v, Var)} | set(jaxpr.outvars)
    moved = [v for v in computed if v in read]
    rest = Jaxpr(jaxpr.constvars, moved + list(jaxpr.invars), jaxpr.outvars, kept)
    return hoisted, ClosedJaxpr(rest, body.consts), [outside[v] for v in moved]


def _scan_partial_eval(eqn, unknown_ins):
    if eqn.params["checkpoints"] is not None and draws_in(eqn.params["jaxpr"]):
        return replaying_partial_eval(eqn, unknown_ins, _split_scan)
    return _split_scan(eqn, unknown_ins)


def _split_scan(eqn, unknown_ins):
    if eqn.params["checkpoints"] is not None:
        split = checkpointed_partial_eval(eqn, unknown_ins)
        if split is not None:
            return split
        eqn = JaxprEqn(scan, eqn.invars, eqn.outvars, dict(eqn.params, checkpoints=None), eqn.source_info)
    p = eqn.params
    jaxpr, n_consts, n_carry, length = p["jaxpr"], p["num_consts"], p["num_carry"], p["length"]
    consts_uk, carry_uk, xs_uk = scan_split(list(unknown_ins), n_consts, n_carry)
    carry_uk, pe = unknown_carries(jaxpr, consts_uk, carry_uk, xs_uk, recompute=_pe.body_recompute(eqn))
    ys_uk = pe.out_unknowns[n_carry:]
    body_invars = jaxpr.jaxpr.invars
    outer_of = dict(zip(body_invars, eqn.invars))
    known_consts = [v for v, u in zip(body_invars[:n_consts], consts_uk) if not u]
    n_known_in = len(pe.known.jaxpr.invars)
    hoisted, known_closed, hoisted_outer = hoist_invariant(
        pe.known, [outer_of[v] for v in known_consts] + [None] * (n_known_in - len(known_consts)))
    known_body = known_closed.jaxpr
    known_consts = known_body.invars[:len(hoisted_outer)] + known_consts
    outer_of.update(zip(known_body.invars, hoisted_outer))
    residuals = known_body.outvars[len(known_body.outvars) - pe.num_residuals:]
    # Residuals that are the body's known constants do not change between iterations.
    invariant = [r for r in residuals if r in known_consts]
    stacked = [r for r in residuals if r not in known_consts]
    # Residuals that are the step's row of a known scanned input are not copied per step:
    # the backward loop scans that input itself.
    consts_in, carry_in, xs_in = scan_split(list(eqn.invars), n_consts, n_carry)
    known_xs_outer = [v for v, u in zip(xs_in, xs_uk) if not u]
    row_of = dict(zip(known_body.invars[len(known_body.invars) - len(known_xs_outer):], known_xs_outer))
    copied = [r for r in stacked if r not in row_of]
    known_outs = [v for v, u in zip(eqn.outvars, carry_uk + ys_uk) if not u]
    copies = {r: Var(ShapedArray((length,) + r.aval.shape, r.aval.dtype)) for r in copied}
    stacked_vars = [copies[r] if r in copies else row_of[r] for r in stacked]
    known_jaxpr = ClosedJaxpr(Jaxpr([], known_body.invars, known_body.outvars[:len(known_outs)] + copied,
                                    known_body.eqns), known_closed.consts)
    known_eqn = JaxprEqn(scan, hoisted_outer
                         + [v for v, u in zip(eqn.invars, consts_uk + carry_uk + xs_uk) if not u],
                         known_outs + [copies[r] for r in copied],
                         dict(p, jaxpr=known_jaxpr, num_consts=len(known_consts),
                              num_carry=n_carry - sum(carry_uk)), eqn.source_info)
    # The unknown body takes (residuals, unknown consts, unknown carry, unknown xs); as a
    # scan it wants (invariant residuals, unknown consts | carry | stacked residuals, xs).
    unknown_body = pe.unknown
    n_res = pe.num_residuals
    res_position = {r: i for i, r in enumerate(residuals)}
    n_uk_consts, n_uk_carry = sum(consts_uk), sum(carry_uk)
    order = ([res_position[r] for r in invariant] + list(range(n_res, n_res + n_uk_consts + n_uk_carry))
             + [res_position[r] for r in stacked]
             + list(range(n_res + n_uk_consts + n_uk_carry, len(unknown_body.jaxpr.invars))))
    unknown_body = permute(unknown_body, order, list(range(len(unknown_body.jaxpr.outvars))))
    unknown_consts = [outer_of[r] for r in invariant] + [v for v, u in zip(consts_in, consts_uk) if u]
    # The tangent side has invariant equations too (the tangent of `W @ c`, c fixed, is
    # `dW @ c` at every step): moved out, their transposes run once on the summed
    # cotangent, not per step.
    uk_hoisted, unknown_body, uk_hoisted_outer = hoist_invariant(
        unknown_body, unknown_consts + [None] * (len(unknown_body.jaxpr.invars) - len(unknown_consts)))
    # What reads no unknown value (zeros, a function of residuals) is computed with the known.
    tangent = {v for v, u in zip(consts_in, consts_uk) if u}
    for e in uk_hoisted:
        if any(v in tangent for v in e.invars if isinstance(v, Var)):
            tangent.update(e.outvars)
    unknown_eqn = JaxprEqn(
        scan,
        uk_hoisted_outer + unknown_consts
        + [v for v, u in zip(carry_in, carry_uk) if u] + stacked_vars
        + [v for v, u in zip(xs_in, xs_uk) if u],
        [v for v, u in zip(eqn.outvars, carry_uk + ys_uk) if u],
        dict(p, jaxpr=unknown_body, num_consts=len(uk_hoisted_outer) + len(unknown_consts), num_carry=n_uk_carry),
        eqn.source_info)
    known_eqn, unknown_eqn = _without_unread_consts(known_eqn), _without_unread_consts(unknown_eqn)
    return (hoisted + [known_eqn] + [e for e in uk_hoisted if e.outvars[0] not in tangent],
            [e for e in uk_hoisted if e.outvars[0] in tangent] + [unknown_eqn], carry_uk + ys_uk)


def _without_unread_consts(eqn: JaxprEqn) -> JaxprEqn:
    """The scan `eqn` no longer passed the constants its body stopped reading when their
    readers moved out. Scanned inputs stay, read or not: an unread counter is still the
    user's loop variable (`for step in range(50):`)."""
    p = eqn.params
    body, n_consts = p["jaxpr"].jaxpr, p["num_consts"]
    read = {v for e in body.eqns for v in e.invars if isinstance(v, Var)} | set(body.outvars)
    keep = [v in read for v in body.invars[:n_consts]] + [True] * (len(body.invars) - n_consts)
    if all(keep):
        return eqn
    new_body = Jaxpr(body.constvars, [v for v, k in zip(body.invars, keep) if k], body.outvars, body.eqns)
    return JaxprEqn(scan, [v for v, k in zip(eqn.invars, keep) if k], eqn.outvars,
                    dict(p, jaxpr=ClosedJaxpr(new_body, p["jaxpr"].consts), num_consts=sum(keep[:n_consts])),
                    eqn.source_info)


def saved_by_loops(closed: ClosedJaxpr) -> tuple[list[Var], list[Var]]:
    """What the loops of a reverse-mode jaxpr (`make_jaxpr(grad(f))`) keep for their
    backward pass, as jax's `print_saved_residuals` tells for a whole function: (per step,
    once), the forward scans' stacked outputs that the backward (reversed) scans read, and
    the values the backward scans read whole (their non-linear constants). Top-level loops
    only; a nested loop's residuals are stacked in its enclosing loop's."""
    loops = [e for e in closed.jaxpr.eqns if e.primitive is scan]
    read_whole, read = [], set()
    for backward in (e for e in loops if e.params["reverse"]):
        read.update(backward.invars)
        read_whole += [v for v in backward.invars[:backward.params["num_consts"]] if v not in read_whole]
    per_step = [v for forward in loops if not forward.params["reverse"]
                for v in forward.outvars[forward.params["num_carry"]:] if v in read]
    return per_step, read_whole


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints=None):
    if checkpoints is not None:
        in_cts = checkpointed_transpose(cts, list(args), dict(jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry,
                                                             length=length, reverse=reverse, checkpoints=checkpoints))
        if in_cts is not None:
            return in_cts
    consts, carry, xs = scan_split(list(args), num_consts, num_carry)
    consts_lin, xs_lin = [is_linear(c) for c in consts], [is_linear(x) for x in xs]
    # Every carry is transposed as linear: one whose initial value is known (a tangent that
    # starts as zeros and becomes nonzero in the loop) just gets no cotangent back.
    ct_carry, ct_ys = cts[:num_carry], cts[num_carry:]
    body = jaxpr.jaxpr
    carry_avals = [v.aval for v in body.invars[num_consts:num_consts + num_carry]]
    y_avals = [v.aval for v in body.outvars[num_carry:]]
    lin_const_avals = [v.aval for v, lin in zip(body.invars[:num_consts], consts_lin) if lin]
    # body^T: (residual consts, residual x slices, ct of carry out, ct of y) ->
    #         (ct of linear consts, ct of carry in, ct of linear x slices)
    recomputed, jaxpr = recomputed_first(jaxpr, consts_lin + [True] * num_carry + xs_lin)
    transposed = transpose_jaxpr(jaxpr, [False] * len(recomputed.jaxpr.outvars) + consts_lin
                                 + [True] * num_carry + xs_lin)
    res_const_avals = [v.aval for v, lin in zip(body.invars[:num_consts], consts_lin) if not lin]
    res_x_avals = [v.aval for v, lin in zip(body.invars[num_consts + num_carry:], xs_lin) if not lin]
    with JaxprBuilder() as builder:
        res_consts = [builder.new_arg(a) for a in res_const_avals]
        acc = [builder.new_arg(a) for a in lin_const_avals]
        ct_c = [builder.new_arg(a) for a in carry_avals]
        res_x = [builder.new_arg(a) for a in res_x_avals]
        ct_y = [builder.new_arg(a) for a in y_avals]
        again = inline_jaxpr(recomputed, res_consts + res_x)
        outs = inline_jaxpr(transposed, again + res_consts + res_x + ct_c + ct_y)
        d_consts, d_carry, d_xs = (outs[:len(acc)], outs[len(acc):len(acc) + num_carry],
                                   outs[len(acc) + num_carry:])
        new_acc = [a + d for a, d in zip(acc, d_consts)]
        body_t = builder.build(new_acc + list(d_carry) + list(d_xs))
    zeros = [instantiate(Zero(a)) for a in lin_const_avals]
    ct_carry = [instantiate(c) if not is_zero(c) else instantiate(Zero(a)) for c, a in zip(ct_carry, carry_avals)]
    ct_ys = [instantiate(c) if not is_zero(c) else instantiate(Zero(ShapedArray((length,) + a.shape, a.dtype)))
             for c, a in zip(ct_ys, y_avals)]
    res_consts_in = [c for c, lin in zip(consts, consts_lin) if not lin]
    res_xs_in = [x for x, lin in zip(xs, xs_lin) if not lin]
    outs = scan.bind(*res_consts_in, *zeros, *ct_carry, *res_xs_in, *ct_ys, jaxpr=body_t,
                     num_consts=len(res_consts_in), num_carry=len(zeros) + num_carry, length=length,
                     reverse=not reverse, unroll=unroll, checkpoints=None)
    ct_consts_out, ct_init, ct_xs_out = outs[:len(zeros)], outs[len(zeros):len(zeros) + num_carry], \
        outs[len(zeros) + num_carry:]
    consts_cts, it = [], iter(ct_consts_out)
    for lin in consts_lin:
        consts_cts.append(next(it) if lin else None)
    xs_cts, it = [], iter(ct_xs_out)
    for lin in xs_lin:
        xs_cts.append(next(it) if lin else None)
    init_cts = [ct if is_linear(c) else None for ct, c in zip(ct_init, carry)]
    return consts_cts + init_cts + xs_cts


_pe.register(scan, _scan_partial_eval)
_transpose.register(scan, _scan_transpose)


def _while_partial_eval(eqn, unknown_ins):
    """A bounded loop with some known inputs becomes a scan of `max_iters` steps, each
    running the body only while the condition has held (`active`, an `if` around the
    body: steps past the end neither compute nor differentiate it, so a body that would
    divide by zero there gives no NaN), and the scan splits as any other: its residuals
    are stacked in buffers of `max_iters` rows. An unbounded loop stays whole on the
    unknown side (and cannot be transposed)."""
    p = eqn.params
    if p["max_iters"] is None or all(unknown_ins):
        return _unbounded_while_partial_eval(eqn, unknown_ins)
    if p["max_iters"] >= 2 ** 31:
        raise StagingError(
            f"reverse-mode differentiation of a loop bounded by {p['max_iters']} steps: its "
            "residuals would need a buffer row per step",
            "bound the loop by the steps it can really take (`for _ in range(100): ... break`)")
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    flag = ShapedArray((), dtypes.bool_)
    with JaxprBuilder() as unchanged:
        kept = [unchanged.new_arg(a) for a in p["body_jaxpr"].in_avals]
        unchanged = unchanged.build(kept[n_body:])
    with JaxprBuilder() as builder:
        args = [builder.new_arg(v.aval, v.hint) for v in eqn.invars[:n_cond + n_body]]
        active = builder.new_arg(flag, "active")
        carry = [builder.new_arg(v.aval, b.hint or v.hint)
                 for v, b in zip(eqn.outvars, p["body_jaxpr"].jaxpr.invars[n_body:])]
        (holds,) = inline_jaxpr(p["cond_jaxpr"], args[:n_cond] + carry)
        active = ops.and_(active, holds)
        stepped = ops.cond(active, *args[n_cond:], *carry, branches=(unchanged, p["body_jaxpr"]))
        body = builder.build([active] + list(stepped))
    masked = JaxprEqn(scan, list(eqn.invars[:n_cond + n_body]) + [Literal(True, flag)]
                      + list(eqn.invars[n_cond + n_body:]),
                      [Var(flag)] + list(eqn.outvars),
                      dict(jaxpr=body, num_consts=n_cond + n_body, num_carry=1 + len(eqn.outvars),
                           length=p["max_iters"], reverse=False, unroll=1, checkpoints=None), eqn.source_info)
    unknowns = list(unknown_ins[:n_cond + n_body]) + [False] + list(unknown_ins[n_cond + n_body:])
    known, unknown, out_unknowns = _scan_partial_eval(masked, unknowns)
    return known, unknown, out_unknowns[1:]


def _unbounded_while_partial_eval(eqn, unknown_ins):
    """A while loop without residuals to save: the carries that depend only on known
    values (a jvp's primal values, a `break` flag) are computed by a known loop of their
    own, so what branches on them stays known; the unknown side reruns the whole loop."""
    if draws_in(eqn.params["body_jaxpr"], eqn.params["cond_jaxpr"]):
        return replaying_partial_eval(eqn, unknown_ins, _split_unbounded_while)
    return _split_unbounded_while(eqn, unknown_ins)


def _split_unbounded_while(eqn, unknown_ins):
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    consts_uk, carry_uk = list(unknown_ins[n_cond:n_cond + n_body]), list(unknown_ins[n_cond + n_body:])
    while True:   # a carry is unknown if it starts unknown or the body makes it so
        out_uk = partial_eval_jaxpr(p["body_jaxpr"], consts_uk + carry_uk).out_unknowns
        updated = [a or b for a, b in zip(carry_uk, out_uk)]
        if updated == carry_uk:
            break
        carry_uk = updated
    _, cond_reads = prune_body(p["cond_jaxpr"], [True])
    if all(carry_uk) or any(r and u for r, u in zip(cond_reads, list(unknown_ins[:n_cond]) + carry_uk)):
        return [], [eqn], [True] * len(eqn.outvars)
    known = [not u for u in carry_uk]
    unknown_eqn = JaxprEqn(while_loop, list(eqn.invars),
                           [Var(v.aval) if k else v for v, k in zip(eqn.outvars, known)], p, eqn.source_info)
    return [while_computing(eqn, known)], [unknown_eqn], carry_uk


def _while_transpose(cts, *args, **params):
    """A while loop's number of steps is only known when it runs: the loop is run again to
    count them, and the backward loop recomputes carries from a fixed number of slots
    (`checkpoints.unbounded_while_transpose`)."""
    in_cts = unbounded_while_transpose(list(cts), list(args), params)
    if in_cts is not None:
        return in_cts
    raise StagingError(
        "reverse-mode differentiation of a while_loop whose condition depends on the values "
        "being differentiated (or that carries only such values): no fixed program runs it backwards",
        "make the condition depend only on values that are not differentiated (wrap what it "
        "reads in s2s.lax.stop_gradient), or use forward mode (s2s.jvp, s2s.jacfwd)")


_pe.register(while_loop, _while_partial_eval)
_transpose.register(while_loop, _while_transpose)
