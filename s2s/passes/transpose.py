"""Transposition of linear jaxprs: the backward pass of reverse mode.

`transpose_jaxpr(closed, linear)` takes a jaxpr that is linear in the inputs flagged in
`linear` (the others are residuals: constants of the linear map) and builds

    residuals, cotangents of the outputs → cotangents of the linear inputs

by walking the equations backwards. Only linear equations ever reach it (partial
evaluation moved everything else to the forward pass); a non-linear one is a bug and
fails loudly. Each primitive's rule in `transpose_rules`:

    rule(cts, *args, **params) -> list with one cotangent (or None) per argument

gets the output cotangent(s) (`Zero` when symbolic) and the arguments, where a linear
one is a `LinearInput(aval)` marker and the others are their values. Cotangents are
accumulated with `add_any`, kept as symbolic zeros until needed, and popped from the
environment when read: in SSA each is read once, so memory is released as the backward
pass proceeds. A rule that only computes with a real cotangent is registered wrapped in
`skip_zero`, which answers a symbolic zero for it.

Names carry over: the cotangent of `h_dot` (the tangent of `h`) is `h_bar`.

Source lines carry over too, so every statement of an emitted backward pass says which
line of the user's code it differentiates. A rule's equations get the line of the
equation it transposes. An accumulation (`add_any`: `h_bar = h_bar + ...`, a variable read
twice) gets the line that defines the variable whose cotangent it sums: the one place both
contributions flow back to. An input of the linear jaxpr is defined by no equation: its
accumulations, and the zeros of a cotangent that stays a symbolic zero, get the line of the
first equation that reads it.
"""
from __future__ import annotations

from typing import Callable

from s2s.core import ClosedJaxpr, Literal, Var
from s2s.source_info import UNKNOWN, SourceInfo
from s2s.passes.rule_memo import RuleMemo
from s2s.passes.tangents import AvalMarker, Zero, add_tangents, instantiate, is_zero
from s2s.staging import JaxprBuilder, Primitive, Tracer, current_builder, paused_gc

transpose_rules: dict[Primitive, Callable] = {}


def register(primitive: Primitive, rule: Callable) -> None:
    transpose_rules[primitive] = rule


class LinearInput(AvalMarker):
    """Marks an argument the equation is linear in (JAX calls it an undefined primal)."""

    __slots__ = ()


def is_linear(x) -> bool:
    return isinstance(x, LinearInput)


def skip_zero(rule: Callable) -> Callable:
    """`rule`, made never to see a symbolic zero cotangent: with a zero `ct` the cotangent
    of every linear operand is zero too (and the others get none), so rules that only
    compute with a real `ct` need no check of their own."""
    def wrapped(ct, *args, **params):
        if is_zero(ct):
            return [Zero(a.aval) if is_linear(a) else None for a in args]
        return rule(ct, *args, **params)
    return wrapped


def cotangent_hint(hint: str | None) -> str | None:
    if hint is None:
        return None
    return (hint[:-len("_dot")] if hint.endswith("_dot") else hint) + "_bar"


class NonLinearEquationError(AssertionError):
    """A non-linear equation reached transposition: a bug in a jvp rule or partial eval."""


def _flat_rule(rule: Callable, eqn) -> Callable[[list], list]:
    """`eqn`'s transpose rule on one flat list (output cotangents, then operands), as
    `RuleMemo` applies rules."""
    n = len(eqn.outvars)
    if eqn.primitive.multiple_results:
        return lambda operands: list(rule(operands[:n], *operands[n:], **eqn.params))
    return lambda operands: list(rule(operands[0], *operands[n:], **eqn.params))


def backward_pass(closed: ClosedJaxpr, linear: list[bool], args: list, cts_out: list,
                  lines: "CotangentLines | None" = None) -> list:
    """Stages the transpose into the current builder.

    `args[i]` is the value of non-linear input i (ignored for linear ones); returns the
    cotangent of every linear input (a value or `Zero`), in input order. `lines` is the
    caller's `CotangentLines(closed.jaxpr)` when it has one.
    """
    jaxpr = closed.jaxpr
    builder = current_builder()
    linear_vars: set[Var] = {v for v, lin in zip(jaxpr.invars, linear) if lin}
    values: dict[Var, object] = {v: c for v, c in zip(jaxpr.constvars, closed.consts)}
    values.update({v: a for v, a, lin in zip(jaxpr.invars, args, linear) if not lin})
    for eqn in jaxpr.eqns:  # every equation must depend on a linear input
        if not linear_vars.isdisjoint(eqn.invars):   # (literals hash by identity: never in it)
            linear_vars.update(eqn.outvars)
        else:
            raise NonLinearEquationError(
                f"transpose reached `{eqn.primitive.name}`, which reads no linear input; "
                "partial evaluation should have moved it to the forward pass")

    cts: dict[Var, object] = {}
    if lines is None:
        lines = CotangentLines(jaxpr)

    def write(v, ct):
        """Adds `ct` to the cotangent of `v`: the callers write only a real contribution
        (`ct` not None) to a linear variable (`v in linear_vars`; a literal never is)."""
        earlier = cts.get(v)
        if earlier is None or isinstance(earlier, Zero):
            cts[v] = ct
        elif not isinstance(ct, Zero):   # a second contribution: summed at v's line
            with builder.at(lines.get(v, UNKNOWN)):
                cts[v] = add_tangents(earlier, ct)

    def pop(v):
        """The finished cotangent of `v`, named after it (`h_bar`) unless named already."""
        ct = cts.pop(v, None)
        if ct is None:
            return Zero(v.aval)
        if isinstance(ct, Tracer) and ct.variable.hint is None:
            ct.variable.hint = cotangent_hint(v.hint)
        return ct

    for v, ct in zip(jaxpr.outvars, cts_out):
        if ct is not None and v in linear_vars:
            write(v, ct)

    memo = RuleMemo(builder, _flat_rule)
    linear_inputs: dict = {}   # aval -> its LinearInput marker (one per aval is enough)

    outer_source_info = builder.source_info
    try:
        for eqn in reversed(jaxpr.eqns):
            outvars = eqn.outvars
            # The rule's flat operands: the output cotangents, then the equation's operands.
            if len(outvars) == 1:   # (most equations: written out)
                operands = [pop(outvars[0])]
                if isinstance(operands[0], Zero):
                    continue
            else:
                operands = list(map(pop, outvars))
                if all(map(is_zero, operands)):
                    continue
            rule = transpose_rules.get(eqn.primitive)
            if rule is None:
                raise NonLinearEquationError(f"{eqn.primitive.name} is not linear (no transpose rule)")
            for v in eqn.invars:
                if v in linear_vars:   # (a literal hashes by identity: never in it)
                    marker = linear_inputs.get(v.aval)
                    if marker is None:
                        marker = linear_inputs[v.aval] = LinearInput(v.aval)
                    operands.append(marker)
                else:
                    operands.append(v if type(v) is Literal else values[v])
            builder.source_info = eqn.source_info   # (what `builder.at` does, once per equation)
            in_cts = memo.apply(rule, eqn, operands)
            builder.source_info = outer_source_info
            for v, ct in zip(eqn.invars, in_cts):
                if ct is not None and v in linear_vars:   # (not a residual's)
                    write(v, ct)
    finally:
        builder.source_info = outer_source_info
    return [pop(v) for v, lin in zip(jaxpr.invars, linear) if lin]


class CotangentLines:
    """The line each variable's cotangent is accumulated at: that of the equation defining
    it, or for an input, of the first equation reading it (see the module docstring).
    Found for every variable at once, the first time one is asked for: most backward
    passes sum no cotangent (each tangent of a chain is read once), and then only an input
    whose cotangent is a symbolic zero asks, for the line its zeros are written at."""

    __slots__ = ("jaxpr", "lines")

    def __init__(self, jaxpr):
        self.jaxpr = jaxpr
        self.lines: dict[Var, SourceInfo] | None = None

    def get(self, v: Var, default: SourceInfo = UNKNOWN) -> SourceInfo:
        lines = self.lines
        if lines is None:
            lines = self.lines = {}
            for eqn in self.jaxpr.eqns:
                for u in eqn.invars:
                    if isinstance(u, Var) and u not in lines:
                        lines[u] = eqn.source_info
                lines.update((u, eqn.source_info) for u in eqn.outvars)
        return lines.get(v, default)


def transpose_jaxpr(closed: ClosedJaxpr, linear: list[bool]) -> ClosedJaxpr:
    """(non-linear inputs, output cotangents) → cotangents of the linear inputs."""
    jaxpr = closed.jaxpr
    with paused_gc(), JaxprBuilder() as builder:
        args = [None if lin else builder.new_arg(v.aval, v.hint)
                for v, lin in zip(jaxpr.invars, linear)]
        cts_out = [builder.new_arg(v.aval, cotangent_hint(getattr(v, "hint", None)))
                   for v in jaxpr.outvars]
        lines = CotangentLines(jaxpr)
        cts_in = backward_pass(closed, linear, args, cts_out, lines)
        outs = []
        for v, ct in zip([v for v, lin in zip(jaxpr.invars, linear) if lin], cts_in):
            if is_zero(ct):   # (its zeros are written at the line that reads `v` first)
                with builder.at(lines.get(v)):
                    ct = instantiate(ct)
            outs.append(ct)
        result = builder.build(outs)
    return result
