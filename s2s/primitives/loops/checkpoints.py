"""Reverse mode of a scan that keeps at most k carries: `scan[..., checkpoints=k]`, what
`s2s.lax.scan(..., checkpoints=k)` and `for t in s2s.checkpointed(range(n), k):` stage.

A plain scan's reverse mode saves every step's residuals, so its memory grows with the
number of steps. A checkpointed scan saves none:

- partial evaluation splits it into a plain scan computing the known outputs (the
  forward pass, saving nothing per step) and the whole scan again on the unknown side,
  which reads only the loop's own known inputs (constants, initial carry, scanned
  arrays): nothing that grows with the steps is kept;
- transposition runs the steps backwards with a binomial checkpointing schedule
  (Griewank and Walther's revolve, in its online form): the backward loop holds at most k
  carries in slots, recomputes the carry of the step it differentiates from the nearest
  slot below it, and stores carries on the way so that the next steps are near one.

The schedule. Slot 0 holds the initial carry (step 0); the occupied slots hold carries of
increasing steps, the topmost nearest. To differentiate step t, the backward loop takes
the topmost slot (step p <= t), and while p < t advances a(l, s) steps from it, with
s = k - 1 - (occupied slots above slot 0) free slots and l = t - p + 1 steps to reverse,
storing the carry it reaches unless that is step t's own. Then it recomputes step t's
residuals from that carry, runs step t's transposed tangent equations, and frees the
slot holding step t, if one does.

L(s, r) = C(s + r + 1, r) is how many steps one held carry and s free slots reverse if each
step may be advanced at most r times (one step for r = 0, r + 1 steps for s = 0, and
L(s, r) = L(s - 1, r) + L(s, r - 1): advance to a new slot, reverse what lies past it
with one slot fewer, then what lies before it, advanced once already). For the least r
with L(s, r) >= l, a(l, s) = min(L(s, r - 1), l - 1) splits the l steps into parts of
those sizes. So every step is advanced at most r times, r the least with
C(k + r, r) >= n: 10,000 steps with 32 slots advance each step at most 4 times (35,637
advances in all, against the 10,000 steps of the forward pass).

Kept: k carries (in k + 1 rows: the carry an advance reaches is written above the top
slot) and one step's residuals, whatever n is.

A while loop without a bound (`while_loop[max_iters=None]`) is reversed by `while_reverse`:
its number of steps is only known when it runs, so the backward pass runs the primal loop
again, and on XLA reverses its steps in the same way on the `while_loop_checkpoints` slots of
`s2s.config` (counting them
first: only what the condition reads, so a loop to `n` counts without computing its body),
while NumPy keeps a tape. The schedule's own loops are such while loops, so reverse over
reverse works too.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from s2s import config, dtypes
from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Var, aval_of_value, eval_jaxpr
from s2s.emit import stablehlo as _hlo
from s2s.passes import jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import PartialEval, partial_eval_jaxpr
from s2s.passes.simplify import tidy
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.passes.vmap import batch_jaxpr
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import closure_convert, nonzero_mask, prune_body, transposed_body
from s2s.primitives.loops.definitions import permute, scan, scan_split, while_loop
from s2s.staging import JaxprBuilder, Primitive, inline_jaxpr

_INDEX = np.dtype(dtypes.int64)     # steps, slots and schedule counts


def unknown_carries(jaxpr: ClosedJaxpr, consts_uk: list[bool], carry_uk: list[bool], xs_uk: list[bool],
                    recompute=None) -> tuple[list[bool], PartialEval]:
    """Which carries of a scan body are unknown: those that start unknown, and those the
    body makes unknown from an unknown value, which can take several steps to show (a
    feeds b feeds c); and the body split with that layout (unknown carries instantiated)."""
    n_ys = len(jaxpr.jaxpr.outvars) - len(carry_uk)
    while True:
        split = partial_eval_jaxpr(jaxpr, consts_uk + carry_uk + xs_uk, instantiate=carry_uk + [False] * n_ys,
                                   recompute=recompute)
        updated = [a or b for a, b in zip(carry_uk, split.out_unknowns[:len(carry_uk)])]
        if updated == carry_uk:
            return carry_uk, split
        carry_uk = updated


# ---------------------------------------------------------------------------------------
# Partial evaluation: the forward pass saves nothing per step.


def checkpointed_partial_eval(eqn: JaxprEqn, unknown_ins: list[bool]):
    """The checkpointed scan `eqn` split: a plain scan of the known outputs, and the whole
    scan on the unknown side (its known inputs are the residuals). None when every carry
    is unknown: nothing is carried forward to checkpoint, and the plain split applies."""
    p = eqn.params
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    consts_uk, carry_uk, xs_uk = scan_split(list(unknown_ins), n_consts, n_carry)
    carry_uk, split = unknown_carries(p["jaxpr"], consts_uk, carry_uk, xs_uk)
    if all(carry_uk):
        return None
    out_uk = split.out_unknowns
    n_known_outs = out_uk.count(False)
    known_body, _ = prune_body(split.known, [True] * n_known_outs + [False] * split.num_residuals)
    known_eqn = JaxprEqn(scan, [v for v, u in zip(eqn.invars, consts_uk + carry_uk + xs_uk) if not u],
                         [v for v, u in zip(eqn.outvars, out_uk) if not u],
                         dict(p, jaxpr=ClosedJaxpr(known_body, split.known.consts),
                              num_consts=consts_uk.count(False), num_carry=carry_uk.count(False),
                              checkpoints=None), eqn.source_info)
    unknown_eqn = JaxprEqn(scan, list(eqn.invars), [v if u else Var(v.aval) for v, u in zip(eqn.outvars, out_uk)],
                           p, eqn.source_info)
    return [known_eqn], [unknown_eqn], out_uk


# ---------------------------------------------------------------------------------------
# Transposition: the backward loop with its slots.


@dataclasses.dataclass
class _StepReversal:
    """A loop's step split for its backward pass: one step forward, (primal consts, primal
    carry, rows of the known xs) -> primal carry (`advance`); the step's residuals from the
    same operands (`residuals`); both at once, the carry then the residuals (`forward`);
    and its tangent equations transposed, (residuals, cotangents of the tangent carry and
    of the linear ys rows) -> cotangents of the linear consts, of the tangent carry and of
    the linear xs rows (`transposed`)."""
    advance: ClosedJaxpr
    residuals: ClosedJaxpr
    forward: ClosedJaxpr
    transposed: ClosedJaxpr
    carry_linear: list[bool]      # which carries are tangents (the others are primal)
    ys_linear: list[bool]


def _step_reversal(body: ClosedJaxpr, consts_lin: list[bool], carry_lin: list[bool],
                   xs_lin: list[bool]) -> _StepReversal | None:
    """`body` split for a backward pass that recomputes its primal carries; None when every
    carry is a tangent (nothing to recompute)."""
    carry_lin, split = unknown_carries(body, consts_lin, carry_lin, xs_lin)
    if all(carry_lin):
        return None
    ys_lin = split.out_unknowns[len(carry_lin):]
    n_primal, n_res = carry_lin.count(False), split.num_residuals
    n_known = n_primal + ys_lin.count(False)
    def computing(outputs: list[bool]) -> ClosedJaxpr:
        return ClosedJaxpr(prune_body(split.known, outputs)[0], split.known.consts)
    primal, known_ys, res = [True] * n_primal, [False] * (n_known - n_primal), [True] * n_res
    n_linear_in = consts_lin.count(True) + carry_lin.count(True) + xs_lin.count(True)
    return _StepReversal(computing(primal + known_ys + [False] * n_res), computing([False] * n_known + res),
                         computing(primal + known_ys + res),
                         transposed_body(split.unknown, [False] * n_res + [True] * n_linear_in), carry_lin, ys_lin)


def _backward_step(step: _StepReversal, schedule: "_Schedule", t, slots: list, slot_steps, top, acc: list,
                   ct_carry: list, x_rows: list, ct_y_rows: list):
    """Stages one step of the backward loop, for step `t`: the carry of step t from the
    slots, the step's residuals from it, its transposed tangent equations, and the slot
    holding step t freed. Returns (slots, slot_steps, top, acc, carry and xs rows' cotangents)."""
    slots, slot_steps, top, at_t = schedule.carry_at(t, slots, slot_steps, top)
    outs = inline_jaxpr(step.transposed, inline_jaxpr(step.residuals, schedule.consts + at_t + x_rows)
                        + ct_carry + ct_y_rows)
    d_consts, d_carry, d_xs = _unpack(outs, [len(acc), len(ct_carry), len(outs) - len(acc) - len(ct_carry)])
    freed = _named(ops.convert(ops.eq(ops.dynamic_index(slot_steps, top), t), _INDEX), "freed")
    return slots, slot_steps, ops.sub(top, freed), [ops.add(a, d) for a, d in zip(acc, d_consts)], d_carry, d_xs


def _slots(primal_init: list, slots_kept: int):
    """The slots and the steps they hold: every slot starts as the initial carry (slot 0
    keeps it; the others are written before they are read). One row more than
    `slots_kept`: the carry an advance reaches is written above the top slot even when it
    is not kept, so no branch copies a buffer."""
    slots = [ops.broadcast_in_dim(c, (slots_kept + 1,) + tuple(_aval(c).shape), tuple(range(1, _aval(c).ndim + 1)))
             for c in primal_init]
    return slots, ops.full((slots_kept + 1,), 0, _INDEX)


def checkpointed_transpose(cts: list, args: list, params: dict) -> list | None:
    """The cotangents of a checkpointed scan's linear operands (None for the others), or
    None when every carry is linear (nothing to recompute: the plain transposition). The
    backward loop is a scan over the steps, last first."""
    jaxpr, n_consts, n_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    length, reverse, slots_kept = params["length"], params["reverse"], params["checkpoints"]
    consts, carry, xs = scan_split(list(args), n_consts, n_carry)
    consts_lin, carry_lin, xs_lin = scan_split([is_linear(a) for a in args], n_consts, n_carry)
    step = _step_reversal(jaxpr, consts_lin, carry_lin, xs_lin)
    if step is None:
        return None
    body, carry_lin = jaxpr.jaxpr, step.carry_linear
    primal_consts = [c for c, lin in zip(consts, consts_lin) if not lin]
    known_xs = [x for x, lin in zip(xs, xs_lin) if not lin]
    carry_vars = body.invars[n_consts:n_consts + n_carry]
    lin_const_avals = [v.aval for v, lin in zip(body.invars[:n_consts], consts_lin) if lin]
    lin_y_avals = [v.aval for v, lin in zip(body.outvars[n_carry:], step.ys_linear) if lin]
    ct_carry = [_instantiated(c, v.aval) for c, v, lin in zip(cts[:n_carry], carry_vars, carry_lin) if lin]
    ct_ys = [_instantiated(c, a.update(shape=(length,) + a.shape)) for c, a in
             zip([c for c, lin in zip(cts[n_carry:], step.ys_linear) if lin], lin_y_avals)]
    slots0, slot_steps0 = _slots([c for c, lin in zip(carry, carry_lin) if not lin], slots_kept)

    def row_of(t):
        """The row of the scanned arrays that step `t` reads."""
        return ops.sub(ops.literal(length - 1, _INDEX), t) if reverse else t

    schedule = _Schedule(step.advance, primal_consts, known_xs, row_of, slots_kept,
                         _primal_hints(carry_vars, carry_lin))
    layout = [len(slots0), 3, len(lin_const_avals), len(ct_carry), len(ct_ys)]

    def backward(*state):
        slots, (slot_steps, top, t), acc, ct_c, ct_y_rows = _unpack(state, layout)
        x_rows = [ops.dynamic_index(x, row_of(t)) for x in known_xs]
        slots, slot_steps, top, acc, d_carry, d_xs = _backward_step(step, schedule, t, slots, slot_steps, top, acc,
                                                                    ct_c, x_rows, ct_y_rows)
        return [*slots, slot_steps, top, ops.sub(t, ops.literal(1, _INDEX)), *acc, *d_carry, *d_xs]

    index = _aval(slot_steps0).update(shape=())
    hints = (_slot_hints(schedule.hints) + ["slot_steps", "top", "t"] + _bar_hints(body.invars[:n_consts], consts_lin)
             + _bar_hints(carry_vars, carry_lin) + [None] * len(ct_ys))
    in_avals = ([_aval(s) for s in slots0] + [_aval(slot_steps0), index, index] + lin_const_avals
                + [_aval(c) for c in ct_carry] + lin_y_avals)
    body_t, captured = _staged(backward, in_avals, hints)
    zeros = [instantiate(Zero(a)) for a in lin_const_avals]
    outs = scan.bind(*captured, *slots0, slot_steps0, ops.full((), 0, _INDEX), ops.full((), length - 1, _INDEX),
                     *zeros, *ct_carry, *ct_ys, jaxpr=body_t, num_consts=len(captured),
                     num_carry=len(slots0) + 3 + len(zeros) + len(ct_carry), length=length,
                     reverse=not reverse, unroll=1, checkpoints=None)
    _, ct_consts_out, ct_init, ct_xs_out = _unpack(outs, [len(slots0) + 3, len(zeros), len(ct_carry),
                                                          len(outs) - len(slots0) - 3 - len(zeros) - len(ct_carry)])
    return (_scattered(ct_consts_out, consts_lin) + _init_cts(ct_init, carry, carry_lin)
            + _scattered(ct_xs_out, xs_lin))


def unbounded_while_transpose(cts: list, args: list, params: dict) -> list | None:
    """The cotangents of a while loop's linear operands (None for the others), with no
    bound on its steps: one `while_reverse` (below). None when the loop has no primal
    carry, or its condition reads a linear value (no fixed program runs it backwards)."""
    n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts, carry = args[:n_cond], args[n_cond:n_cond + n_body], args[n_cond + n_body:]
    consts_lin = [is_linear(c) for c in body_consts]
    step = _step_reversal(params["body_jaxpr"], consts_lin, [is_linear(c) for c in carry], [])
    if step is None or any(is_linear(c) for c in cond_consts):
        return None
    carry_lin = step.carry_linear
    condition, reads = prune_body(params["cond_jaxpr"], [True])
    if any(r and lin for r, lin in zip(reads[n_cond:], carry_lin)):
        return None
    # The condition on the primal carry alone (it reads no tangent).
    condition = ClosedJaxpr(Jaxpr([], condition.invars[:n_cond] + [v for v, lin in zip(condition.invars[n_cond:],
                                                                                      carry_lin) if not lin],
                                  condition.outvars, condition.eqns), [])
    body_invars = params["body_jaxpr"].jaxpr.invars
    carry_vars = body_invars[n_body:]
    ct_carry = [_instantiated(c, v.aval) for c, v, lin in zip(cts, carry_vars, carry_lin) if lin]
    operands = [*cond_consts, *[c for c, lin in zip(body_consts, consts_lin) if not lin],
                *[c for c, lin in zip(carry, carry_lin) if not lin], *ct_carry]
    hints = [v.hint for v in condition.jaxpr.invars[:n_cond]] + [
        v.hint for v, lin in zip(body_invars, consts_lin + carry_lin) if not lin] + _bar_hints(carry_vars, carry_lin)
    n_primal_consts = consts_lin.count(False)
    lin_const_avals = [v.aval for v, lin in zip(body_invars[:n_body], consts_lin) if lin]
    slots_kept = config.values.while_loop_checkpoints
    schedule, captured = _staged(lambda *ops_: _reversed_on_slots(step, condition, n_cond, n_primal_consts, slots_kept,
                                                            lin_const_avals, _primal_hints(carry_vars, carry_lin),
                                                            _bar_hints(body_invars[:n_body], consts_lin)
                                                            + _bar_hints(carry_vars, carry_lin), list(ops_)),
                          [_aval(o) for o in operands], hints)
    assert not captured, "the slots' program reads only its operands"
    invariant, forward, transposed = _tape_parts(step, n_primal_consts)
    outs = while_reverse.bind(*operands, schedule=tidy(schedule), condition=condition, invariant=invariant,
                              forward=forward, transposed=transposed, num_cond_consts=n_cond,
                              num_consts=n_primal_consts)
    for out, hint in zip(outs, _bar_hints(body_invars[:n_body], consts_lin) + _bar_hints(carry_vars, carry_lin)):
        if hint:
            _named(out, hint)
    ct_consts_out, ct_init = outs[:len(lin_const_avals)], outs[len(lin_const_avals):]
    return [None] * n_cond + _scattered(ct_consts_out, consts_lin) + _init_cts(ct_init, carry, carry_lin)


def _tape_parts(step: _StepReversal, n_consts: int) -> tuple[ClosedJaxpr, ClosedJaxpr, ClosedJaxpr]:
    """What a tape needs: the residuals that read no carry, computed once (consts, primal
    carry -> those; the carry is not read); the step with the residuals that change per
    step, which the tape holds (-> carry, those); and the transposed step taking the two
    kinds in that order, then the cotangents."""
    jaxpr = step.forward.jaxpr
    per_step = set(jaxpr.invars[n_consts:])
    for eqn in jaxpr.eqns:
        if any(isinstance(v, Var) and v in per_step for v in eqn.invars):
            per_step.update(eqn.outvars)
    n_primal = len(jaxpr.invars) - n_consts
    residuals = jaxpr.outvars[n_primal:]
    varies = [isinstance(r, Var) and r in per_step for r in residuals]
    invariant = ClosedJaxpr(prune_body(step.forward, [False] * n_primal + [not v for v in varies])[0],
                            step.forward.consts)
    forward = ClosedJaxpr(prune_body(step.forward, [True] * n_primal + varies)[0], step.forward.consts)
    order = [k for k, v in enumerate(varies) if not v] + [k for k, v in enumerate(varies) if v]
    n_in = len(step.transposed.jaxpr.invars)
    transposed = permute(step.transposed, order + list(range(len(residuals), n_in)),
                         list(range(len(step.transposed.jaxpr.outvars))))
    return invariant, forward, transposed


def _reversed_on_slots(step: _StepReversal, condition: ClosedJaxpr, n_cond: int, n_consts: int, slots_kept: int,
                       lin_const_avals, primal_hints: list, bar_hints: list, operands: list) -> list:
    """Stages what `while_reverse` computes on XLA: the primal loop run again to count its
    steps n (only what the condition reads), then `while t >= 0:` over steps n - 1 .. 0 on
    `slots_kept` slots. Returns the cotangents of the linear consts and of the tangent
    carries."""
    cond_consts, primal_consts = operands[:n_cond], operands[n_cond:n_cond + n_consts]
    n_primal = len(step.advance.out_avals)
    primal_init, ct_carry = operands[n_cond + n_consts:n_cond + n_consts + n_primal], operands[n_cond + n_consts + n_primal:]

    def holds(steps, *primal):
        return inline_jaxpr(condition, list(cond_consts) + list(primal))[0]

    def advanced(steps, *primal):
        return [ops.add(steps, ops.literal(1, _INDEX)), *inline_jaxpr(step.advance, primal_consts + list(primal))]
    steps = _while(holds, advanced, [ops.full((), 0, _INDEX), *primal_init], ["steps", *primal_hints])[0]
    slots0, slot_steps0 = _slots(primal_init, slots_kept)
    schedule = _Schedule(step.advance, primal_consts, [], None, slots_kept, primal_hints)
    layout = [1, len(slots0), 2, len(lin_const_avals), len(ct_carry)]

    def not_done(*state):
        return ops.le(ops.literal(0, _INDEX), state[0])

    def backward(*state):
        (t,), slots, (slot_steps, top), acc, ct_c = _unpack(state, layout)
        slots, slot_steps, top, acc, d_carry, _ = _backward_step(step, schedule, t, slots, slot_steps, top, acc,
                                                                 ct_c, [], [])
        return [ops.sub(t, ops.literal(1, _INDEX)), *slots, slot_steps, top, *acc, *d_carry]
    zeros = [instantiate(Zero(a)) for a in lin_const_avals]
    outs = _while(not_done, backward,
                  [ops.sub(steps, ops.literal(1, _INDEX)), *slots0, slot_steps0, ops.full((), 0, _INDEX), *zeros,
                   *ct_carry],
                  ["t", *_slot_hints(primal_hints), "slot_steps", "top", *bar_hints])
    return outs[1 + len(slots0) + 2:]


# ---------------------------------------------------------------------------------------
# while_reverse[schedule, condition, invariant, forward, transposed, num_cond_consts,
# num_consts](*cond_consts, *consts, *init, *cts): the backward pass of a while loop with no
# bound, given its primal operands (the condition's constants, the body's primal
# constants, the initial primal carry) and the cotangents of its tangent carries at the
# end; returns the cotangents of the body's linear constants and of the tangent carries at
# the start. Two programs compute it:
#
# - NumPy (the impl, and emitted Python) keeps a tape, as Tangent and autograd do: the loop
#   runs again (`forward`: the step and its residuals) appending each step's residuals to
#   a list, then `for residuals in reversed(tape):` runs the step's transposed tangent
#   equations. Residuals that read no carry (`invariant`: `W.T` of a constant `W`) are
#   computed once, before the loop, and kept out of the tape. Memory grows with the steps;
#   the loop runs once more than the forward pass did (the forward pass is a loop of its
#   own; it is dead code, and gone, when only the gradient is asked for).
# - XLA, whose shapes are static, runs `schedule`: the same backward pass on a fixed number
#   of slots (`_reversed_on_slots`, `s2s.config`'s while_loop_checkpoints). jvp, transposition and batching are those of `schedule`
#   too: a derivative of this backward pass is staged, and lowered, as while loops.


def _while_reverse_abstract(*avals, schedule, **params):
    return list(schedule.out_avals)


def _while_reverse_impl(*args, schedule, condition, invariant, forward, transposed, num_cond_consts, num_consts):
    cond_consts, consts = args[:num_cond_consts], args[num_cond_consts:num_cond_consts + num_consts]
    n_primal = len(forward.jaxpr.invars) - num_consts
    primal = list(args[num_cond_consts + num_consts:num_cond_consts + num_consts + n_primal])
    cts = list(args[num_cond_consts + num_consts + n_primal:])
    fixed = eval_jaxpr(invariant, *consts, *primal)
    tape = []
    while eval_jaxpr(condition, *cond_consts, *primal)[0]:
        outs = eval_jaxpr(forward, *consts, *primal)
        primal = outs[:n_primal]
        tape.append(outs[n_primal:])
    n_acc = len(schedule.out_avals) - len(cts)
    acc = [np.zeros(a.shape, a.dtype) for a in schedule.out_avals[:n_acc]]
    for residuals in reversed(tape):
        outs = eval_jaxpr(transposed, *fixed, *residuals, *cts)
        acc = [np.asarray(a + d, a.dtype) for a, d in zip(acc, outs[:n_acc])]
        cts = outs[n_acc:]
    return acc + list(cts)


while_reverse = Primitive("while_reverse", _while_reverse_abstract, _while_reverse_impl, multiple_results=True)


def _while_reverse_jvp(primals, tangents, *, schedule, **params):
    nonzero = nonzero_mask(tangents)
    jvp_body, out_nonzero = jvp_jaxpr(schedule, nonzero, instantiate_out=False)
    outs = inline_jaxpr(jvp_body, [*primals, *[instantiate(t) for t in tangents if not is_zero(t)]])
    n = len(schedule.out_avals)
    out_tangents = iter(outs[n:])
    return outs[:n], [next(out_tangents) if nz else Zero(tangent_aval(a)) for a, nz in zip(schedule.out_avals,
                                                                                         out_nonzero)]


def _while_reverse_transpose(cts, *args, schedule, **params):
    linear = [is_linear(a) for a in args]
    in_cts = iter(inline_jaxpr(transposed_body(schedule, linear),
                               [a for a, lin in zip(args, linear) if not lin] + [instantiate(c) for c in cts]))
    return [next(in_cts) if lin else None for lin in linear]


def _while_reverse_batch(axis, args, dims, *, schedule, **params):
    batched, out_dims = batch_jaxpr(schedule, dims, axis)
    return inline_jaxpr(batched, list(args)), out_dims


_jvp.register(while_reverse, _while_reverse_jvp)
_transpose.register(while_reverse, _while_reverse_transpose)
_vmap.register(while_reverse, _while_reverse_batch)
_hlo.register(while_reverse, lambda ctx, eqn, *operands: _hlo.lower_jaxpr(ctx, eqn.params["schedule"].jaxpr,
                                                                          list(operands)))


def _primal_hints(carry_vars, carry_lin) -> list:
    return [v.hint for v, lin in zip(carry_vars, carry_lin) if not lin]


def _slot_hints(hints: list) -> list:
    return [f"{h}_slots" if h else "slots" for h in hints]


def _bar_hints(variables, flags) -> list:
    """Cotangents' names: `h_bar` for the flagged variables named `h` (or `h_dot`, tangents)."""
    return [f"{v.hint.removesuffix('_dot')}_bar" if v.hint else None for v, flag in zip(variables, flags) if flag]


def _init_cts(cts: list, carry: list, carry_lin: list[bool]) -> list:
    """The initial carries' cotangents (`cts`: one per tangent carry): a carry linear inside
    the loop but started from a known value (a tangent that is zeros until the loop makes
    it nonzero) gets none."""
    it, out = iter(cts), []
    for c, lin in zip(carry, carry_lin):
        ct = next(it) if lin else None
        out.append(ct if lin and is_linear(c) else None)
    return out


class _Schedule:
    """Stages the backward loop's way to the carry of a step (see the module docstring)."""

    def __init__(self, advance: ClosedJaxpr, consts: list, whole_xs: list, row_of, slots_kept: int, hints: list):
        self.advance, self.consts, self.whole_xs = advance, consts, whole_xs
        self.row_of, self.slots_kept = row_of, slots_kept
        self.hints = hints            # the primal carries' names

    def carry_at(self, t, slots: list, slot_steps, top):
        """(slots, slot_steps, top, the carry of step t): advances from the topmost slot
        until step t, storing carries on the way."""
        n = len(slots)

        def short_of_t(top, step, *rest):
            return ops.lt(step, t)

        def advance_and_store(top, step, *rest):
            at, slots, slot_steps = _unpack(rest, [n, n, 1])
            free = _named(ops.sub(ops.literal(self.slots_kept - 1, _INDEX), top), "free_slots")
            steps_left = _named(ops.add(ops.sub(t, step), ops.literal(1, _INDEX)), "steps_left")
            reached = _named(ops.add(step, self.advance_count(steps_left, free)), "reached")
            at = self.run_steps(at, step, reached)
            above = ops.add(top, ops.literal(1, _INDEX))
            slots = [ops.dynamic_update_index(s, a, above) for s, a in zip(slots, at)]
            slot_steps = ops.dynamic_update_index(slot_steps[0], reached, above)
            kept = ops.convert(ops.lt(reached, t), _INDEX)
            return [ops.add(top, kept), reached, *at, *slots, slot_steps]
        at = [ops.dynamic_index(s, top) for s in slots]
        outs = _while(short_of_t, advance_and_store, [top, ops.dynamic_index(slot_steps, top), *at, *slots,
                                                      slot_steps],
                      ["top", "step", *self.hints, *_slot_hints(self.hints), "slot_steps"])
        top, _, at, slots, (slot_steps,) = _unpack(outs, [1, 1, n, n, 1])
        return slots, slot_steps, top[0], at

    def run_steps(self, carry: list, start, stop) -> list:
        """The carry after running steps start .. stop - 1 from `carry` (that of `start`)."""
        def before_stop(step, *carry):
            return ops.lt(step, stop)

        def one_step(step, *carry):
            rows = [ops.dynamic_index(x, self.row_of(step)) for x in self.whole_xs]
            return [ops.add(step, ops.literal(1, _INDEX)), *inline_jaxpr(self.advance, self.consts + list(carry) + rows)]
        return _while(before_stop, one_step, [start, *carry], ["step", *self.hints])[1:]

    def advance_count(self, steps, free):
        """a(l, s) for l = `steps` (>= 2) and s = `free` slots: min(L(s, r - 1), l - 1) for the
        least r with L(s, r) = C(s + r + 1, r) >= l (l - 1 when no slot is free)."""
        def below(r, reach, previous):
            return ops.and_(ops.lt(reach, steps), ops.lt(ops.literal(0, _INDEX), free))

        def next_r(r, reach, previous):      # L(s, r + 1) = L(s, r) (s + r + 2) / (r + 1), exactly
            r = ops.add(r, ops.literal(1, _INDEX))
            grown = ops.div(ops.mul(reach, ops.add(ops.add(free, r), ops.literal(1, _INDEX))), r)
            return [r, grown, reach]
        one = ops.full((), 1, _INDEX)
        _, _, previous = _while(below, next_r, [ops.full((), 0, _INDEX), one, one], ["r", "reach", "previous"])
        all_but_one = ops.sub(steps, ops.literal(1, _INDEX))
        return ops.select(ops.lt(ops.literal(0, _INDEX), free), ops.minimum(previous, all_but_one), all_but_one)


# ---------------------------------------------------------------------------------------
# Helpers


def _while(condition, body, init: list, hints: list) -> list:
    """Stages `while condition(*carry): carry = body(*carry)` from `init`; returns the
    final carry. The functions may read staged values from outside (passed as operands)."""
    avals = [_aval(v) for v in init]
    cond_jaxpr, cond_consts = _staged(lambda *c: [condition(*c)], avals, hints)
    body_jaxpr, body_consts = _staged(body, avals, hints)
    return while_loop.bind(*cond_consts, *body_consts, *init, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                           cond_nconsts=len(cond_consts), body_nconsts=len(body_consts), max_iters=None)


def _staged(fn, avals: list, hints: list) -> tuple[ClosedJaxpr, list]:
    """`fn` staged on arguments of `avals`, as a body without constants, and the outer
    values it reads (its leading operands)."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(a, h) for a, h in zip(avals, hints)]
        closed = builder.build(list(fn(*args)))
    return closure_convert(closed)


def _unpack(items, sizes: list[int]) -> list[list]:
    """`items` cut into consecutive lists of `sizes`."""
    items, parts, start = list(items), [], 0
    for size in sizes:
        parts.append(items[start:start + size])
        start += size
    assert start == len(items), (start, len(items))
    return parts


def _named(value, hint: str):
    """`value` (a staged value this module computed) called `hint` in printed and emitted code."""
    value.variable.hint = hint
    return value


def _aval(value):
    return value.aval if hasattr(value, "aval") else aval_of_value(value)


def _instantiated(ct, aval):
    return instantiate(Zero(aval)) if is_zero(ct) else instantiate(ct)


def _scattered(values: list, flags: list[bool]) -> list:
    """`values` at the flagged positions, None elsewhere."""
    it = iter(values)
    return [next(it) if flag else None for flag in flags]
