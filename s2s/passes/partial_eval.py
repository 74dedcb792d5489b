"""Partial evaluation: split a jaxpr into the part computable from known inputs and the rest.

`partial_eval_jaxpr(closed, unknowns)` returns

    known:   known inputs          → known outputs, residuals
    unknown: residuals, unknown inputs → unknown outputs

An equation is unknown when any of its inputs is; everything else runs in the known
jaxpr. Primitives with a rule in `partial_eval_rules` (control flow, whose bodies can be
split too) are split into a known and an unknown equation instead:

    rule(eqn, unknown_inputs) -> (known_eqns, unknown_eqns, unknown_outputs)

where the unknown equations may read new variables the known ones define, and every
variable the unknown equations define is unknown. Equations a
rule makes without a source line get `eqn`'s: both halves compute what it did.

Residuals are exactly the known values that unknown equations (or unknown
outputs) read, after dead-code elimination of both sides, so nothing is saved that the
unknown side does not use.

`linearize = jvp + partial_eval`: with primals known and tangents unknown, the known
jaxpr is the forward pass and the unknown one is linear in the tangents.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses

from s2s.core import ClosedJaxpr, Jaxpr, Var
from s2s.passes.dce import dce_jaxpr


partial_eval_rules: dict = {}


def register(primitive, rule) -> None:
    partial_eval_rules[primitive] = rule


# Primitives that cost less to redo than to keep: each makes a view in NumPy (a transpose,
# a reshape) or one cheap pass that XLA fuses into its consumer (neg, a dtype conversion),
# where a saved result is a buffer of its own. A loop's reverse mode recomputes them in the
# backward pass from what they read (see `recompute` below). Families declare theirs.
cheap_to_recompute: set = set()


def defcheap(primitive) -> None:
    """Declares `primitive` cheaper to recompute than to save (see `cheap_to_recompute`)."""
    cheap_to_recompute.add(primitive)


def is_cheap(eqn) -> bool:
    """Whether `eqn` is cheaper to recompute than to save."""
    return eqn.primitive in cheap_to_recompute


# Inside a checkpoint (`remat`), its policy's `recompute` test: loops and conds in its body
# split their own bodies by it too, so the policy decides equation by equation there as
# well (a `dots_saveable` checkpoint around a scan saves each step's dot products).
_checkpoint_recompute = contextvars.ContextVar("checkpoint_recompute", default=None)


@contextlib.contextmanager
def under_checkpoint(recompute):
    """Partial evaluation of a checkpoint's body, whose policy recomputes what `recompute`
    holds for (see `body_recompute`)."""
    token = _checkpoint_recompute.set(recompute)
    try:
        yield
    finally:
        _checkpoint_recompute.reset(token)


def _split_by_policy(eqn) -> bool:
    """Whether the loop or cond `eqn`, inside a checkpoint, is split by the checkpoint's
    policy: the policy saves some equation of its bodies, so the forward pass runs it and
    saves that. One whose bodies the policy saves nothing of is recomputed whole in the
    backward pass instead, which then keeps the loop's usual residuals while it runs."""
    policy = _checkpoint_recompute.get()
    return (policy is not None and eqn.primitive in partial_eval_rules
            and any(not policy(e) for body in _bodies(eqn) for e in _equations(body)))


def _bodies(eqn) -> list:
    return [b for v in eqn.params.values() for b in (v if isinstance(v, tuple) else (v,)) if hasattr(b, "jaxpr")]


def _equations(closed):
    """The equations of `closed` and of the bodies inside it."""
    for eqn in closed.jaxpr.eqns:
        yield eqn
        for body in _bodies(eqn):
            yield from _equations(body)


def body_recompute(eqn):
    """The `recompute` test the loop or cond `eqn` gives `partial_eval_jaxpr` for its
    bodies: cheap equations, and inside a checkpoint whose policy splits it (see
    `_split_by_policy`), also the equations the policy does not save."""
    if not _split_by_policy(eqn):
        return is_cheap
    policy = _checkpoint_recompute.get()
    return lambda e: is_cheap(e) or policy(e)


def splits_by_rule(closed: ClosedJaxpr) -> bool:
    """Whether a rule of `partial_eval_rules` would split an equation of `closed`. A rule
    may refuse an equation that is dead (reverse mode of a `while_loop`), so a caller that
    leaves dead code to `partial_eval_jaxpr` (which drops it from both sides) removes it
    first where this holds."""
    return any(eqn.primitive in partial_eval_rules for eqn in closed.jaxpr.eqns)


@dataclasses.dataclass
class PartialEval:
    known: ClosedJaxpr        # known inputs -> known outputs + residuals
    unknown: ClosedJaxpr      # residuals + unknown inputs -> unknown outputs
    out_unknowns: list[bool]  # per original output
    num_residuals: int


def partial_eval_jaxpr(closed: ClosedJaxpr, unknowns: list[bool],
                       instantiate: bool | list[bool] = False, recompute=None) -> PartialEval:
    """Splits `closed`. Outputs flagged in `instantiate` are made unknown even if known
    (they are then passed through as residuals), so the caller gets a fixed layout.

    A known equation for which `recompute(eqn)` holds is also copied to the unknown side,
    so what it reads is saved instead of what it computes: a loop passes the primitives
    that cost less to redo than to store per step (a transpose of a constant). The unknown
    jaxpr then has equations that read no unknown input; whoever transposes it computes
    those forward first."""
    jaxpr = closed.jaxpr
    recomputed: set[Var] = set()
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * len(jaxpr.outvars)
    unknown_vars: set[Var] = {v for v, u in zip(jaxpr.invars, unknowns) if u}
    known_eqns, unknown_eqns = [], []
    for eqn in jaxpr.eqns:
        if unknown_vars.isdisjoint(eqn.invars):   # (literals hash by identity: never in it)
            known_eqns.append(eqn)
            if recompute is not None and recompute(eqn):
                unknown_eqns.append(eqn)
                recomputed.update(eqn.outvars)
            continue
        rule = partial_eval_rules.get(eqn.primitive)
        if rule is not None:
            unknown_ins = [isinstance(v, Var) and v in unknown_vars for v in eqn.invars]
            known_part, unknown_part, unknown_outs = rule(eqn, unknown_ins)
            for part in [*known_part, *unknown_part]:   # both halves compute at eqn's line
                if not part.source_info.line:
                    part.source_info = eqn.source_info
            known_eqns.extend(known_part)
            for part in known_part:
                if recompute is not None and recompute(part) and not _split_by_policy(part):
                    unknown_eqns.append(part)
                    recomputed.update(part.outvars)
            unknown_eqns.extend(unknown_part)
            unknown_vars.update(v for v, u in zip(eqn.outvars, unknown_outs) if u)
            # What the unknown half defines on the way (a loop's hoisted tangent equations)
            # lives on the unknown side too: it is no residual.
            unknown_vars.update(v for part in unknown_part for v in part.outvars)
        else:
            unknown_eqns.append(eqn)
            unknown_vars.update(eqn.outvars)

    out_unknowns = [(isinstance(v, Var) and v in unknown_vars) or inst
                    for v, inst in zip(jaxpr.outvars, instantiate)]

    # Residuals: known vars read on the unknown side (inputs of unknown equations, and
    # outputs that are known values but must be produced by the unknown jaxpr).
    residuals: list[Var] = []
    seen: set[Var] = set()

    def add_residual(v):
        if isinstance(v, Var) and v not in unknown_vars and v not in recomputed and v not in seen:
            seen.add(v)
            residuals.append(v)

    unknown_jaxpr_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if u]
    live_unknown = dce_jaxpr(Jaxpr([], [], unknown_jaxpr_outs, unknown_eqns), prune_invars=False)
    for eqn in live_unknown.eqns:
        for v in eqn.invars:   # (`add_residual` in short, first for what is unknown: most are)
            if v not in unknown_vars:
                add_residual(v)
    for v in unknown_jaxpr_outs:
        add_residual(v)

    known_invars = [v for v, u in zip(jaxpr.invars, unknowns) if not u]
    known_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if not u]
    known = Jaxpr(jaxpr.constvars, known_invars, known_outs + residuals, known_eqns)
    known = dce_jaxpr(known, prune_invars=False)
    unknown_invars = [v for v, u in zip(jaxpr.invars, unknowns) if u]
    unknown = Jaxpr([], residuals + unknown_invars, unknown_jaxpr_outs, live_unknown.eqns)
    return PartialEval(ClosedJaxpr(known, closed.consts), ClosedJaxpr(unknown, []),
                       out_unknowns, len(residuals))
