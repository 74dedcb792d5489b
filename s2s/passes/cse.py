"""Common-subexpression elimination: one equation for each distinct computation.

Two equations are the same when they apply the same primitive with equal parameters to
the same operands (variables by identity, literals by value and type). The later one is
dropped and its outputs are renamed to the earlier one's. Primitives are pure, so this is
always sound; it removes the duplicates that differentiation rules produce (the same
`cos x` for two tangents, the same `x - mean` the user wrote twice).

An equation that reads no variable (zeros, a fill of a literal) is never merged: it
costs one fill to compute again, while merging it makes unrelated values one variable,
read under the first one's name. A scan's gradient accumulator initialized with the same
zeros as the user's `h = np.zeros(3)` would start as `b_bar = h`.

Derivatives are cleaned by `dce(cse(simplify(dce(jaxpr))))` (`s2s/autodiff.py`): the
identities `simplify` removes (`x * 1`, a broadcast of a broadcast) can hide duplicates,
so simplification runs first.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var


def _literal_key(v: Literal) -> tuple:
    """A literal is keyed by its value (`repr`: tells -0.0 from 0.0) and aval."""
    value = v.value.item() if hasattr(v.value, "item") else v.value
    return ("literal", repr(value), v.aval)


def _params_key(params: dict):
    if not params:
        return ()
    try:
        key = tuple(sorted(params.items()))
        hash(key)
        return key
    except TypeError:
        return None  # parameters we cannot compare (sub-jaxprs): never merged


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` with each repeated equation replaced by the first one (top level only);
    `closed` itself where none repeats. An equation none of whose operands was renamed is
    kept as it is (equations are never changed once built)."""
    jaxpr = closed.jaxpr
    rename: dict[Var, Var] = {}
    seen: dict[tuple, list[Var]] = {}
    eqns = []
    # Each literal -> the first literal of its value and type, which stands for it in keys:
    # literals hash by identity, so a key's hash is all identities (and a literal object
    # shared by the equations a rule template wrote is looked up once).
    same_literal: dict[Literal, Literal] = {}
    first_literal: dict[tuple, Literal] = {}
    for eqn in jaxpr.eqns:
        invars = eqn.invars
        if rename and any(v in rename for v in invars if type(v) is Var):
            invars = [rename.get(v, v) if type(v) is Var else v for v in invars]
            eqn = JaxprEqn(eqn.primitive, invars, eqn.outvars, eqn.params, eqn.source_info)
        params_key = _params_key(eqn.params) if eqn.params else ()
        reads_a_var = False
        atoms = []
        for v in invars:
            if type(v) is Var:
                atoms.append(v)
                reads_a_var = True
            else:
                stand_in = same_literal.get(v)
                if stand_in is None:
                    stand_in = same_literal[v] = first_literal.setdefault(_literal_key(v), v)
                atoms.append(stand_in)
        if params_key is None or not reads_a_var:   # (see the module docstring)
            eqns.append(eqn)
            continue
        key = (eqn.primitive, tuple(atoms), params_key)
        first = seen.get(key)
        if first is None:
            seen[key] = eqn.outvars
            eqns.append(eqn)
            continue
        for old, new in zip(eqn.outvars, first):
            rename[old] = new
            if new.hint is None:
                new.hint = old.hint
    if not rename:   # (no equation merged: every one is kept as it is)
        return closed
    outvars = [rename.get(v, v) if isinstance(v, Var) else v for v in jaxpr.outvars]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns), closed.consts)
