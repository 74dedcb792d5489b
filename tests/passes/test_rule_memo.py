"""Rules applied once per kind of equation (`s2s/passes/rule_memo.py`), through the two
passes that use it: an equation gets the equations its own rule would write, on its own
operands and at its own line, whether they were copied from a template or not."""
from __future__ import annotations

import numpy as np
import pytest

from s2s.core import check_jaxpr, eval_jaxpr
from s2s.passes import jvp as jvp_pass, transpose as transpose_pass
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.transpose import transpose_jaxpr
from s2s.primitives import elementwise as E, reductions as R
from s2s.source_info import SourceInfo
from s2s.staging import current_builder
from tests.passes.handbuilt import arr, build


def at(line: int) -> SourceInfo:
    return SourceInfo("model.py", line, 1, "model")


def staged_at(line, primitive, *args, **params):
    with current_builder().at(at(line)):
        return primitive.bind(*args, **params)


@pytest.fixture
def counted(monkeypatch):
    """`counted(table, primitive)` wraps the rule in `table` so that its calls are counted."""
    calls = {}

    def count(table, primitive):
        rule = table[primitive]
        calls[primitive] = 0

        def counting(*args, **params):
            calls[primitive] += 1
            return rule(*args, **params)
        monkeypatch.setitem(table, primitive, counting)
        return calls
    return count


def chain(x, n):
    for line in range(n):
        x = staged_at(line + 1, E.tanh, x)
    return x


def test_a_rule_runs_once_for_equations_of_one_kind_and_each_copy_is_at_its_own_line(counted):
    calls = counted(jvp_pass.jvp_rules, E.tanh)
    closed = build(lambda x: chain(x, 50), arr(3))
    jvp_closed, _ = jvp_jaxpr(closed, [True])
    check_jaxpr(jvp_closed.jaxpr)
    assert calls[E.tanh] == 1
    lines = sorted({e.source_info.line for e in jvp_closed.jaxpr.eqns})
    assert lines == list(range(1, 51))
    x, t = np.linspace(-1, 1, 3), np.array([1.0, -2.0, 0.5])
    y, y_dot = eval_jaxpr(jvp_closed, x, t)
    expected, expected_dot = x, t
    for _ in range(50):
        expected, expected_dot = np.tanh(expected), expected_dot * (1 - np.tanh(expected) ** 2)
    np.testing.assert_allclose(y, expected, rtol=1e-13)
    np.testing.assert_allclose(y_dot, expected_dot, rtol=1e-12)


def test_literals_that_compare_equal_but_differ_get_rules_of_their_own():
    """0.0 == -0.0 (with equal hashes), yet t * -0.0 is -0.0 where t * 0.0 is 0.0."""
    closed = build(lambda x: [E.mul.bind(x, 0.0), E.mul.bind(x, -0.0), E.mul.bind(x, 0.0)], arr(2))
    jvp_closed, _ = jvp_jaxpr(closed, [True])
    *_, a_dot, b_dot, c_dot = eval_jaxpr(jvp_closed, np.ones(2), np.ones(2))
    assert not np.signbit(a_dot).any() and np.signbit(b_dot).all() and not np.signbit(c_dot).any()


def test_an_operand_read_twice_is_not_taken_for_two_operands(counted):
    calls = counted(jvp_pass.jvp_rules, E.mul)
    closed = build(lambda x, y: [E.mul.bind(x, x), E.mul.bind(x, y), E.mul.bind(y, y), E.mul.bind(y, x)],
                   arr(2), arr(2))
    jvp_closed, _ = jvp_jaxpr(closed, [True, True])
    assert calls[E.mul] == 2   # x * x and x * y are two kinds; y * y and y * x are copies
    x, y, tx, ty = np.array([1.0, 2.0]), np.array([3.0, -1.0]), np.array([0.5, 1.0]), np.array([2.0, 3.0])
    *_, xx_dot, xy_dot, yy_dot, yx_dot = eval_jaxpr(jvp_closed, x, y, tx, ty)
    np.testing.assert_allclose(xx_dot, 2 * x * tx)
    np.testing.assert_allclose(xy_dot, tx * y + x * ty)
    np.testing.assert_allclose(yy_dot, 2 * y * ty)
    np.testing.assert_allclose(yx_dot, ty * x + y * tx)


def test_equations_with_other_parameters_or_types_are_other_kinds(counted):
    calls = counted(jvp_pass.jvp_rules, R.reduce_sum)
    closed = build(lambda x: [R.reduce_sum.bind(x, axes=(0,)), R.reduce_sum.bind(x, axes=(1,)),
                              R.reduce_sum.bind(x, axes=(0,)),
                              R.reduce_sum.bind(E.convert_element_type.bind(x, new_dtype=np.dtype("float32"),
                                                                            weak_type=False), axes=(0,))],
                   arr(2, 3))
    jvp_closed, _ = jvp_jaxpr(closed, [True])
    check_jaxpr(jvp_closed.jaxpr)
    assert calls[R.reduce_sum] == 3
    t = np.arange(6.0).reshape(2, 3)
    *_, s0, s1, s0_again, s0_f32 = eval_jaxpr(jvp_closed, np.ones((2, 3)), t)
    np.testing.assert_array_equal(s0, t.sum(0))
    np.testing.assert_array_equal(s1, t.sum(1))
    np.testing.assert_array_equal(s0_again, t.sum(0))
    assert s0_f32.dtype == np.float32


def test_a_dtype_parameter_is_part_of_the_kind(counted):
    calls = counted(jvp_pass.jvp_rules, E.convert_element_type)
    to = lambda x, dtype: E.convert_element_type.bind(x, new_dtype=np.dtype(dtype), weak_type=False)
    closed = build(lambda x: [to(x, "float32"), to(x, "float16"), to(x, "float32")], arr(3))
    jvp_closed, _ = jvp_jaxpr(closed, [True])
    check_jaxpr(jvp_closed.jaxpr)
    assert calls[E.convert_element_type] == 2   # float32 twice is one kind (memoized), float16 another
    *_, a_dot, b_dot, c_dot = eval_jaxpr(jvp_closed, np.ones(3), np.array([0.5, 1.0, 2.0]))
    assert (a_dot.dtype, b_dot.dtype, c_dot.dtype) == (np.float32, np.float16, np.float32)
    np.testing.assert_array_equal(b_dot, [0.5, 1.0, 2.0])


def test_a_constant_operand_is_applied_directly_and_stays_right():
    weights = np.array([2.0, 3.0])
    closed = build(lambda x: [E.mul.bind(x, weights), E.mul.bind(x, weights)], arr(2))
    assert closed.consts   # the array is a constant of the jaxpr, not a staged value
    jvp_closed, _ = jvp_jaxpr(closed, [True])
    *_, a_dot, b_dot = eval_jaxpr(jvp_closed, np.ones(2), np.ones(2))
    np.testing.assert_array_equal(a_dot, weights)
    np.testing.assert_array_equal(b_dot, weights)


def test_transpose_rules_run_once_per_kind_and_sum_their_cotangents(counted):
    calls = counted(transpose_pass.transpose_rules, E.mul)

    def linear(t):
        return [staged_at(line, E.mul, t, 1.5) for line in range(1, 21)]
    backward = transpose_jaxpr(build(linear, arr(3)), [True])
    assert calls[E.mul] == 1
    assert {e.source_info.line for e in backward.jaxpr.eqns if e.primitive is E.mul} == set(range(1, 21))
    cts = [np.full(3, float(k)) for k in range(20)]
    (t_bar,) = eval_jaxpr(backward, *cts)
    np.testing.assert_allclose(t_bar, np.full(3, 1.5 * sum(range(20))))
