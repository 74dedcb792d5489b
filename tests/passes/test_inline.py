"""Inlining: call primitives are replaced by the equations of the jaxpr they call.

The emitters inline before writing code, so a function with a custom derivative reads as
its own equations. Tests check the calls are gone (at the top, inside other calls, inside
the bodies of control flow), that what is left computes the same values and is a
well-formed jaxpr, and that the called body's names come along.
"""
from __future__ import annotations

import numpy as np

import s2s
from s2s.core import ClosedJaxpr
from s2s.passes.inline import call_primitives, inline_calls
from s2s.primitives import custom_derivatives as CD, elementwise as E, implicit
from s2s.primitives.cond import cond
from s2s.primitives.loops import scan
from tests.passes.handbuilt import arr, assert_equivalent, build, names

X3 = np.array([0.5, -1.0, 2.0])


def call_of(body: ClosedJaxpr):
    """`x -> custom_jvp_call[call=body](x)`, as staged code would call it."""
    return lambda x: CD.custom_jvp_call.bind(x, call=body, rule=None)


def all_primitive_names(closed: ClosedJaxpr) -> set[str]:
    """The primitives used anywhere in `closed`, bodies of control flow included."""
    found = set()
    for eqn in closed.jaxpr.eqns:
        found.add(eqn.primitive.name)
        for value in eqn.params.values():
            for body in value if isinstance(value, tuple) else (value,):
                if isinstance(body, ClosedJaxpr):
                    found |= all_primitive_names(body)
    return found


def sin_then_exp():
    def fn(x):
        s = E.sin.bind(x)
        s.variable.hint = "s"
        return E.exp.bind(s)
    return build(fn, arr(3))


def test_a_jaxpr_without_calls_is_returned_as_it_is():
    closed = build(lambda x: E.sin.bind(x), arr(3))
    assert inline_calls(closed) is closed


def test_a_call_is_replaced_by_its_body_with_the_body_s_names():
    closed = build(lambda x: E.neg.bind(call_of(sin_then_exp())(x)[0]), arr(3))
    inlined = inline_calls(closed)
    assert names(inlined) == ["sin", "exp", "neg"]
    assert inlined.jaxpr.eqns[0].outvars[0].hint == "s"
    assert_equivalent(closed, inlined, X3)


def test_a_call_inside_a_call_is_inlined_too():
    outer = build(lambda x: E.cos.bind(call_of(sin_then_exp())(x)[0]), arr(3))
    closed = build(lambda x: call_of(outer)(x), arr(3))
    inlined = inline_calls(closed)
    assert names(inlined) == ["sin", "exp", "cos"]
    assert_equivalent(closed, inlined, X3)


def test_calls_in_the_bodies_of_control_flow_are_inlined():
    body = build(lambda c, x: [E.add.bind(c, call_of(sin_then_exp())(x)[0]), x], arr(3), arr(3))
    first = build(lambda x: call_of(sin_then_exp())(x), arr(3))
    second = build(lambda x: E.neg.bind(x), arr(3))
    def fn(i, x, xs):
        branch_out = cond.bind(i, x, branches=(first, second))
        return scan.bind(*branch_out, xs, jaxpr=body, num_consts=0, num_carry=1, length=2,
                           reverse=False, unroll=1, checkpoints=None)
    closed = build(fn, arr(dtype="int32"), arr(3), arr(2, 3))
    assert "custom_jvp_call" in all_primitive_names(closed)
    inlined = inline_calls(closed)
    assert names(inlined) == ["cond", "scan"]
    assert "custom_jvp_call" not in all_primitive_names(inlined)
    for index in (0, 1):
        assert_equivalent(closed, inlined, np.int32(index), X3, np.stack([X3, -X3]))


def softplus_primal(x):
    return np.log1p(np.exp(x))


softplus = s2s.custom_jvp(softplus_primal)
softplus.defjvps(lambda t, ans, x: t / (1 + np.exp(-x)))


def test_a_staged_custom_jvp_function_is_written_out_as_its_primal():
    closed = s2s.make_jaxpr(lambda x: softplus(x) * 2.0)(X3)
    assert names(closed) == ["custom_jvp_call", "mul"]
    inlined = inline_calls(closed)
    assert names(inlined) == ["exp", "log1p", "mul"]
    assert_equivalent(closed, inlined, X3)


def test_every_call_primitive_is_registered_for_inlining():
    assert call_primitives == {CD.custom_jvp_call, CD.custom_vjp_call, CD.custom_vjp_lin,
                               implicit.custom_root, implicit.custom_linear_solve}
