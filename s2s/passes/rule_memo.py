"""Rules applied once per kind of equation: a rule's equations recorded and copied.

A derivative of a long function applies the same few rules over and over: the jvp of
`tanh` on an f32[8] with a nonzero tangent, the transpose of a `mul` by the literal 1.01.
Each application goes through the op layer, dtype promotion and the shape rules to write
the same handful of equations onto new variables. `RuleMemo` runs a rule the first time
in a builder of its own, on stand-ins for the operands, and keeps what it wrote as a
template; every later equation of the same kind gets the template's equations copied
onto its own operands (new variables, the equation's own source line), with no rule,
promotion or shape rule run. A 16k-equation grad applies three kinds of jvp rule and
three of transpose rule 16k times.

A template is right for another equation only if the rule could not tell the two apart,
so the key holds everything a rule reads: the primitive, its parameters, each operand's
abstract value (weak type included) and, for a literal, its exact value (`repr`: -0.0 is
not 0.0), and which tangents or cotangents are symbolic zeros and which operands are
linear. The configuration and the named axes cannot change during one pass, which owns
its memo. Nothing else is memoized: an equation whose parameters hold anything but plain
values (a body jaxpr, a callable, an array), an operand that is not a value of the
builder being written (a constant array, a value of an enclosing builder), or a rule
that bakes a constant in or hands back something other than its staged values, markers
and scalars is applied directly as before.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from s2s.core import JaxprEqn, Literal, Var
from s2s.passes.tangents import AvalMarker
from s2s.staging import JaxprBuilder, Tracer, copy_equations

_PLAIN = (type(None), int, str)
_UNMEMOIZABLE = object()   # a key whose rule is applied directly each time


def _plain(value):
    """`value` as a hashable key that tells apart every value a rule could tell apart, or
    raises TypeError (a body jaxpr, a callable, an array: not memoized)."""
    if type(value) in _PLAIN:
        return value
    if type(value) in (bool, float):   # (True == 1 and -0.0 == 0.0, with equal hashes)
        return (type(value), repr(value))
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    if isinstance(value, np.dtype):   # (its type is a subclass per dtype: np.dtypes.Float32DType)
        return (np.dtype, value)
    raise TypeError(type(value).__name__)


class _Template:
    """The equations a rule wrote for one kind of equation, on stand-ins `invars` for the
    staged operands, and where its results come from: ("arg", i) the i-th operand itself,
    ("var", v) a variable it defined, ("same", x) an object handed back each time (a
    marker, a literal)."""

    __slots__ = ("invars", "eqns", "outs")

    def __init__(self, invars: list[Var], eqns: list[JaxprEqn], outs: list[tuple]):
        self.invars = invars
        self.eqns = eqns
        self.outs = outs


class RuleMemo:
    """The templates of one pass run (see the module docstring)."""

    def __init__(self, builder: JaxprBuilder, flat_rule: Callable):
        """`flat_rule(rule, eqn)`: the pass's `rule` for `eqn` as a function of one flat
        list of operands giving one flat list of results (made only where a rule runs)."""
        self.builder = builder
        self.flat_rule = flat_rule
        self.templates: dict = {}

    def apply(self, rule: Callable, eqn: JaxprEqn, operands: list) -> list:
        """`flat_rule(rule, eqn)(operands)`, copied from a template when one fits."""
        staged: list[Var] = []   # the staged operands' variables, each once, in order
        key = self._key(eqn, operands, staged)
        template = self.templates.get(key) if key is not None else _UNMEMOIZABLE
        if template is None:
            template = self.templates[key] = self._record(operands, staged, self.flat_rule(rule, eqn))
        if template is _UNMEMOIZABLE:
            return self.flat_rule(rule, eqn)(operands)
        # The template's equations on new variables, reading `operands`, at the builder's
        # current source line (written out here: every memoized equation comes this way).
        builder = self.builder
        # (Most templates have one or two stand-ins, a primal and its tangent or a cotangent
        # and an operand: a dict display costs a third of what dict(zip(...)) does.)
        invars = template.invars
        if len(invars) == 2:
            env = {invars[0]: staged[0], invars[1]: staged[1]}
        elif len(invars) == 1:
            env = {invars[0]: staged[0]}
        else:
            env = dict(zip(invars, staged))
        copy_equations(builder, template.eqns, env, builder.source_info)
        results = []
        for kind, x in template.outs:
            results.append(operands[x] if kind == "arg" else Tracer(builder, env[x]) if kind == "var" else x)
        return results

    def _key(self, eqn: JaxprEqn, operands: list, staged: list):
        """The key of applying the rule of `eqn` to `operands` (None: not memoized);
        fills `staged`."""
        builder = self.builder
        keys = []
        for x in operands:
            kind = type(x)
            if kind is Tracer:
                if x.builder is not builder:
                    return None
                v = x.variable
                if v in staged:   # an operand read twice (x * x) is keyed so: a rule may tell
                    keys.append(staged.index(v))
                else:
                    staged.append(v)
                    keys.append(v.aval)
            elif kind is Literal:
                keys.append((Literal, x.aval, type(x.value), repr(x.value)))
            elif x is None:
                keys.append(None)
            elif isinstance(x, AvalMarker):
                keys.append((kind, x.aval))
            else:
                return None
        params = eqn.params
        if params:
            try:
                params = tuple((name, _plain(value)) for name, value in params.items())
            except TypeError:
                return None
        else:
            params = ()
        return eqn.primitive, params, tuple(keys)

    def _record(self, operands: list, staged: list[Var], call: Callable[[list], list]):
        """Runs the rule in a builder of its own on stand-ins for the staged operands and
        keeps what it wrote, or `_UNMEMOIZABLE`. The stand-ins' results are never used:
        the first equation of a kind is copied from its template like the others."""
        outer = self.builder
        with JaxprBuilder() as inner:
            inner.source_info = outer.source_info
            stand_in = {v: inner.new_arg(v.aval) for v in staged}
            results = call([stand_in[x.variable] if type(x) is Tracer else x for x in operands])
        if inner.consts:
            return _UNMEMOIZABLE
        # A result that is an operand is handed back as that operand.
        operand_at = {stand_in[x.variable].variable: i for i, x in reversed(list(enumerate(operands)))
                      if type(x) is Tracer}
        outs = []
        for r in results:
            if type(r) is Tracer:
                if r.builder is not inner:
                    return _UNMEMOIZABLE
                i = operand_at.get(r.variable)
                outs.append(("arg", i) if i is not None else ("var", r.variable))
            elif r is None or isinstance(r, (AvalMarker, Literal, bool, int, float, complex, np.generic)):
                outs.append(("same", r))
            else:
                return _UNMEMOIZABLE
        return _Template(inner.invars, inner.eqns, outs)
