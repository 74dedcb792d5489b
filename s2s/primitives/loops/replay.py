"""Loops whose reverse mode runs their steps again, drawing the numbers they drew.

A checkpointed scan (`scan(..., checkpoints=k)`, `s2s.checkpointed`) and a while loop without
a bound are differentiated by running their steps again: from the nearest checkpoint, or
the whole loop (`checkpoints.py`). A step that draws random numbers must draw, run again,
the numbers it drew the first time, or the gradient is not that of what ran forward (a
dropout mask recomputed must be the same mask).

So before partial evaluation splits such a loop, each generator its steps draw from
becomes a carry of the loop: its state, as words (`random.generator_state`). A step gives
the generator the carried state, draws, carries on the state it ends in, and gives the
generator back the state it had (`random.generator_swap`, twice):

    rng_state = rt.generator_state(rng)                  # before the loop
    for t in range(n):
        outer_state = rt.swap_generator_state(rng, rng_state)
        ...the step's draws...
        rng_state = rt.swap_generator_state(rng, outer_state)
    rt.swap_generator_state(rng, rng_state)              # after it: where the steps left it

Every step is then a function of its carry: run again from a checkpoint's carry, it draws
the same numbers, and leaves the generator as it found it; the loop run forward, followed by
the last swap, advances the generator exactly as the loop without s2s does. The
checkpoints keep one state per generator beside the carry (629 words for a RandomState),
not the draws of every step. On XLA the swaps only rename the state the draws thread.

A condition that draws cannot carry a state on (a condition returns only its verdict):
such a loop is refused, with the fix.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Var, host_objects
from s2s.errors import StagingError
from s2s.primitives import ops
from s2s.primitives.loops.definitions import scan, while_loop
from s2s.primitives.random import state_words


def draws_in(*bodies: ClosedJaxpr) -> bool:
    """Whether the bodies draw from a generator (their other effects, a print, are run again
    as they are: a step run again prints again, as in JAX)."""
    return any(host_objects(body.jaxpr) for body in bodies)


def replaying_partial_eval(eqn: JaxprEqn, unknown_ins: list[bool], split):
    """Partial evaluation of the loop `eqn` by `split` (a partial evaluation rule), with
    the loop rewritten to carry the states of the generators it draws from (see the module
    docstring): the states are read before the loop, and the generators given the states
    the loop ends with after it."""
    if eqn.primitive is while_loop and draws_in(eqn.params["cond_jaxpr"]):
        raise StagingError("reverse mode of this loop runs it again (it has no bound on its steps), and its "
                           "condition draws random numbers, which the second run could not draw again",
                           "draw in the body and carry the verdict: `go = rng.rand() < p` at the end of each "
                           "step, `while go:`", eqn.source_info)
    # Each generator's state is read once here for its size (all of a RandomState's, 629
    # words, costs 0.1 ms), not again for each equation the rewrite makes.
    states = [dict(source=s, words=state_words(s)) for s in host_objects(_body(eqn).jaxpr)]
    generator_state, generator_swap = ops.primitive(ops.generator_state), ops.primitive(ops.generator_swap)
    before = [JaxprEqn(generator_state, [], [_state_var(p)], p, eqn.source_info) for p in states]
    loop, in_at, out_at = _carrying_states(eqn, states, [e.outvars[0] for e in before])
    n = len(states)
    known, unknown, out_uk = split(loop, list(unknown_ins[:in_at]) + [False] * n + list(unknown_ins[in_at:]))
    finals = loop.outvars[out_at:out_at + n]
    after = [JaxprEqn(generator_swap, [final], [Var(final.aval)], p, eqn.source_info)
             for p, final in zip(states, finals)]
    states_unknown = any(out_uk[out_at:out_at + n])
    out_uk = list(out_uk[:out_at]) + list(out_uk[out_at + n:])
    if states_unknown:     # (the whole loop stays unknown: the generators are set where it runs)
        return before + list(known), list(unknown) + after, out_uk
    return before + list(known) + after, list(unknown), out_uk


def _body(eqn: JaxprEqn) -> ClosedJaxpr:
    return eqn.params["jaxpr"] if eqn.primitive is scan else eqn.params["body_jaxpr"]


def _state_var(state: dict) -> Var:
    """A variable for the state of the generator that `state` (the state primitives'
    parameters) names."""
    return Var(ops.primitive(ops.generator_state).abstract_eval(**state), f"{state['source'].name}_state")


def _carrying_states(eqn: JaxprEqn, states: list[dict], initial: list[Var]) -> tuple[JaxprEqn, int, int]:
    """The loop `eqn` carrying the states after its own carries, starting from `initial`;
    and where the states are among its operands and among its results."""
    p = eqn.params
    if eqn.primitive is scan:
        in_at, out_at = p["num_consts"] + p["num_carry"], p["num_carry"]
        body = _stepping_on_own_states(p["jaxpr"], states, in_at, out_at, eqn.source_info)
        params = dict(p, jaxpr=body, num_carry=p["num_carry"] + len(states))
    else:
        in_at, out_at = len(eqn.invars), len(eqn.outvars)
        body = _stepping_on_own_states(p["body_jaxpr"], states, p["body_nconsts"] + out_at, out_at,
                                       eqn.source_info)
        condition = p["cond_jaxpr"].jaxpr
        ignoring = Jaxpr(condition.constvars, list(condition.invars) + [Var(v.aval) for v in initial],
                         condition.outvars, condition.eqns)
        params = dict(p, body_jaxpr=body, cond_jaxpr=ClosedJaxpr(ignoring, p["cond_jaxpr"].consts))
    finals = [Var(v.aval, v.hint) for v in initial]
    loop = JaxprEqn(eqn.primitive, list(eqn.invars[:in_at]) + initial + list(eqn.invars[in_at:]),
                    list(eqn.outvars[:out_at]) + finals + list(eqn.outvars[out_at:]), params, eqn.source_info)
    return loop, in_at, out_at


def _stepping_on_own_states(body: ClosedJaxpr, states: list[dict], in_at: int, out_at: int,
                            source_info) -> ClosedJaxpr:
    """`body` taking the generators' states as inputs at `in_at` and returning the states
    it ends in at `out_at`: it swaps them in first and the generators' own back last."""
    jaxpr = body.jaxpr
    carried = [_state_var(p) for p in states]
    outer = [Var(v.aval, "outer_state") for v in carried]
    ends = [Var(v.aval, v.hint) for v in carried]
    generator_swap = ops.primitive(ops.generator_swap)
    swap_in = [JaxprEqn(generator_swap, [c], [o], p, source_info) for p, c, o in zip(states, carried, outer)]
    swap_out = [JaxprEqn(generator_swap, [o], [e], p, source_info) for p, o, e in zip(states, outer, ends)]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, list(jaxpr.invars[:in_at]) + carried + list(jaxpr.invars[in_at:]),
                             list(jaxpr.outvars[:out_at]) + ends + list(jaxpr.outvars[out_at:]),
                             swap_in + list(jaxpr.eqns) + swap_out), body.consts)
