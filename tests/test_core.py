"""The IR: printer, checker, reference interpreter."""
import numpy as np
import pytest

import s2s
from s2s.core import (ClosedJaxpr, Jaxpr, JaxprEqn, JaxprTypeError, Literal, ShapedArray, Var,
                      check_jaxpr, eval_jaxpr)
from s2s.primitives import elementwise as ew
from s2s.staging import JaxprBuilder


def test_printer_one_line_for_a_single_equation():
    closed = s2s.make_jaxpr(lambda x: np.sin(x))(np.ones(3, np.float32))
    assert str(closed) == "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }"


def test_printer_multi_line_with_params_and_literals():
    def f(x, y):
        return np.tanh(x @ y).sum(axis=0) * 2.0
    closed = s2s.make_jaxpr(f)(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    assert str(closed) == (
        "{ lambda ; a:f32[2,3] b:f32[3,4]. let\n"
        "    c:f32[2,4] = dot_general[dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=None] a b\n"
        "    d:f32[2,4] = tanh c\n"
        "    e:f32[4] = reduce_sum[axes=(0,)] d\n"
        "    f:f32[4] = mul e 2.0:f32[]\n"
        "  in (f,) }")


def test_constant_output_is_a_literal():
    closed = s2s.make_jaxpr(lambda x: 1.)(0.)
    assert isinstance(closed.jaxpr.outvars[0], Literal)
    assert closed.jaxpr.outvars[0].value == 1.0
    assert str(closed) == "{ lambda ; a:f64[]. let  in (1.0:f64[],) }".replace("let  in", "let in")


def test_global_arrays_become_named_constants():
    W = np.arange(6.0).reshape(2, 3)
    closed = s2s.make_jaxpr(lambda x: x @ W)(np.ones(2))
    assert len(closed.consts) == 1 and closed.jaxpr.constvars[0].hint == "W"
    assert str(closed).startswith("{ lambda a:f64[2,3] ; b:f64[2]. let")


def _eqn(prim, ins, outs, **params):
    return JaxprEqn(prim, ins, outs, params)


def test_check_jaxpr_rejects_use_before_definition():
    a, b, c = (Var(ShapedArray((3,), np.float32)) for _ in range(3))
    bad = Jaxpr([], [a], [c], [_eqn(ew.add, [a, b], [c])])
    with pytest.raises(JaxprTypeError, match="used before"):
        check_jaxpr(bad)


def test_check_jaxpr_rejects_double_binding():
    a, b = (Var(ShapedArray((3,), np.float32)) for _ in range(2))
    bad = Jaxpr([], [a], [b], [_eqn(ew.sin, [a], [b]), _eqn(ew.cos, [a], [b])])
    with pytest.raises(JaxprTypeError, match="bound twice"):
        check_jaxpr(bad)


def test_check_jaxpr_rejects_an_equation_not_made_of_lists_and_a_dict():
    """An equation holds what it is given (no copy): a tuple of operands is a caller's bug."""
    a, b = (Var(ShapedArray((3,), np.float32)) for _ in range(2))
    with pytest.raises(JaxprTypeError, match="must be lists and its parameters a dict, not tuple, list and dict"):
        check_jaxpr(Jaxpr([], [a], [b], [JaxprEqn(ew.sin, (a,), [b], {})]))
    check_jaxpr(Jaxpr([], [a], [b], [JaxprEqn(ew.sin, [a], [b], {})]))


def test_check_jaxpr_rejects_wrong_types():
    a = Var(ShapedArray((3,), np.float32))
    b = Var(ShapedArray((4,), np.float32))
    with pytest.raises(JaxprTypeError, match="rule says f32\\[3\\]"):
        check_jaxpr(Jaxpr([], [a], [b], [_eqn(ew.sin, [a], [b])]))


def test_eval_jaxpr_runs_numpy_impls():
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float64))
        closed = builder.build([ew.mul.bind(ew.exp.bind(x), Literal(2.0, ShapedArray((), np.float64, True)))])
    check_jaxpr(closed)
    (out,) = eval_jaxpr(closed, np.arange(3.0))
    np.testing.assert_allclose(out, 2 * np.exp(np.arange(3.0)))


def test_eval_jaxpr_checks_argument_count():
    closed = s2s.make_jaxpr(lambda x: x)(1.0)
    with pytest.raises(TypeError, match="1 arguments"):
        eval_jaxpr(closed)


def test_closed_jaxpr_needs_one_const_per_constvar():
    with pytest.raises(ValueError):
        ClosedJaxpr(Jaxpr([Var(ShapedArray((), np.float32))], [], [], []), [])


def _sine_times_two():
    return s2s.make_jaxpr(lambda x: np.sin(x) * 2.0)(np.ones(3, np.float32))


def test_inlining_on_the_same_avals_restages_without_the_shape_rule(monkeypatch):
    """JaxprBuilder.restage: an equation inlined on operands of its own avals keeps its
    output avals, names and line; the shape rule does not run again."""
    from s2s.staging import inline_jaxpr
    closed = _sine_times_two()
    calls = []
    monkeypatch.setattr(ew.sin, "abstract_eval", lambda *a, **p: calls.append(a) or a[0])
    with JaxprBuilder() as builder:
        x = builder.new_arg(closed.jaxpr.invars[0].aval)
        (out,) = inline_jaxpr(closed, [x])
        restaged = builder.build([out])
    assert calls == [] and str(restaged) == str(closed)
    assert [e.source_info for e in restaged.jaxpr.eqns] == [e.source_info for e in closed.jaxpr.eqns]


def test_inlining_on_other_avals_runs_the_shape_rule():
    """On an operand of another dtype the equation is bound again: its output gets the aval
    the shape rule gives (float64 here), not the inlined equation's."""
    from s2s.staging import inline_jaxpr
    closed = s2s.make_jaxpr(np.sin)(np.ones(3, np.float32))
    with JaxprBuilder() as builder:
        x = builder.new_arg(ShapedArray((3,), np.float64))
        (out,) = inline_jaxpr(closed, [x])
        restaged = builder.build([out])
    assert str(restaged.jaxpr.eqns[0].outvars[0].aval.dtype) == "float64"
    np.testing.assert_allclose(eval_jaxpr(restaged, np.arange(3.0))[0], np.sin(np.arange(3.0)))
