"""Algebraic simplification: equations rewritten by per-primitive rules.

Differentiation leaves arithmetic a person would not write: `1.0 * t` (the cotangent seed
is a literal 1), `t + 0`, a broadcast of a broadcast (the transpose of a reduction). Each
primitive that has such an identity registers a rule in `simplify_rules` (a primitive may
have several, from different families, tried in the order they were registered):

    rule(eqn, producer) -> an atom, an equation, or None

`eqn`'s operands are already simplified; `producer(atom)` is the (simplified) equation
that defines an operand, or None for inputs, constants and literals, so a rule can look
one step up the graph. A rule returns the atom the equation's one output equals (the
equation is dropped and its output renamed), a replacement equation with the same
outputs (in its final form: it is not simplified again), or None to keep the equation.
A replacement without a source line gets the line of the equation it replaces, so the
statement it becomes still says what line of the user's code it computes.

Primitives are pure, so a rule only has to preserve values, shapes and dtypes. Bodies of
control flow (and of calls) are simplified too, each on its own: a backward loop or
branch is transposed code like any other (`X.T.T @ g` is `X @ g` there as well), and a
body keeps its inputs and number of outputs.
"""
from __future__ import annotations

from typing import Callable

from s2s.core import Atom, ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
from s2s.passes.cse import cse
from s2s.passes.dce import dce

simplify_rules: dict = {}   # Primitive -> [rule(eqn, producer) -> Atom | JaxprEqn | None]

# Primitives whose result repeats their operand: broadcast from a literal, every element of
# the result is that literal's value (see `fill_value`).
_REPEATS_OPERAND: set = set()


def register(primitive, rule: Callable) -> None:
    simplify_rules.setdefault(primitive, []).append(rule)


def register_repeating(primitive) -> None:
    """Declares that `primitive`'s result is its first operand repeated (a broadcast)."""
    _REPEATS_OPERAND.add(primitive)


def fill_value(atom: Atom, producer: Callable):
    """The value every element of `atom` holds, when the jaxpr fixes it at compile time (a
    literal, or a literal repeated by a broadcast); None otherwise."""
    if isinstance(atom, Literal):
        return atom.value
    eqn = producer(atom)
    if eqn is not None and eqn.primitive in _REPEATS_OPERAND and isinstance(eqn.invars[0], Literal):
        return eqn.invars[0].value
    return None


def simplify(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` with every equation a rule simplifies replaced, in the bodies of control
    flow too; `closed` itself where no rule applied."""
    jaxpr = closed.jaxpr
    rename: dict[Var, Atom] = {}          # output of a dropped equation -> the atom it equals
    producers: dict[Var, JaxprEqn] = {}   # output -> the kept equation that defines it

    def renamed(v):
        return rename.get(v, v) if isinstance(v, Var) else v

    def producer(atom):
        return producers.get(atom) if isinstance(atom, Var) else None

    eqns = []
    changed = False
    for eqn in jaxpr.eqns:
        params = eqn.params
        if params and any(isinstance(p, (ClosedJaxpr, tuple)) for p in params.values()):
            simplified = {name: _with_simplified_bodies(value) for name, value in params.items()}
            if any(simplified[name] is not value for name, value in params.items()):
                params = simplified   # (a tuple of axes comes back as it was: no copy for it)
        if params is not eqn.params or (rename and any(v in rename for v in eqn.invars if type(v) is Var)):
            eqn = JaxprEqn(eqn.primitive, [renamed(v) for v in eqn.invars], eqn.outvars, params,
                           eqn.source_info)   # (unchanged equations are kept as they are)
            changed = True
        rules = simplify_rules.get(eqn.primitive)
        result = None
        if rules:
            for rule in rules:
                result = rule(eqn, producer)
                if result is not None:
                    break
            if type(result) is JaxprEqn:
                if not result.source_info.line:   # it computes what `eqn` did: at its line
                    result.source_info = eqn.source_info
                eqn, result = result, None
                changed = True
        if result is None:
            eqns.append(eqn)
            if len(eqn.outvars) == 1:
                producers[eqn.outvars[0]] = eqn
            else:
                producers.update(dict.fromkeys(eqn.outvars, eqn))
        else:
            (out,) = eqn.outvars
            rename[out] = result
            if isinstance(result, Var) and result.hint is None:   # keep the user's name for it
                result.hint = out.hint
    if not changed and not rename:
        return closed
    outvars = [renamed(v) for v in jaxpr.outvars]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns), closed.consts)


def _with_simplified_bodies(param):
    """A parameter with the jaxprs it holds (a loop's body, a cond's branches) simplified."""
    if isinstance(param, ClosedJaxpr):
        return simplify(param)
    if isinstance(param, tuple) and param and all(isinstance(b, ClosedJaxpr) for b in param):
        return tuple(simplify(b) for b in param)
    return param


def tidy(closed: ClosedJaxpr) -> ClosedJaxpr:
    """What every jaxpr a transform writes goes through before it is emitted or compiled
    (a derivative, a batched function): dead code out, rules applied, duplicates merged."""
    live = dce(closed)
    merged = cse(simplify(live))
    return live if merged is live else dce(merged)   # (what neither changed has no dead code)
