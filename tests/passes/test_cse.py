"""Common-subexpression elimination: equal computations are done once.

`cse` merges equations that apply one primitive with equal parameters to the same
operands. Hand-built jaxprs say what is merged and what must not be.
"""
from __future__ import annotations

import numpy as np

from s2s.core import Literal
from s2s.passes.cse import cse
from s2s.passes.simplify import simplify
from s2s.primitives import elementwise as E, reductions as R, structural as S
from s2s.primitives.cond import cond
from tests.passes.handbuilt import arr, assert_equivalent, build, names

X3 = np.array([0.5, -1.0, 2.0])
Y3 = np.array([3.0, 0.25, -0.75])


def test_a_repeated_equation_is_computed_once_and_both_uses_read_it():
    closed = build(lambda x: [E.sin.bind(x), E.sin.bind(x)], arr(3))
    merged = cse(closed)
    assert names(merged) == ["sin"]
    first = merged.jaxpr.eqns[0].outvars[0]
    assert merged.jaxpr.outvars == [first, first]
    assert_equivalent(closed, merged, X3)


def test_equations_on_different_operands_are_not_merged():
    closed = build(lambda x, y: [E.sin.bind(x), E.sin.bind(y)], arr(3), arr(3))
    assert names(cse(closed)) == ["sin", "sin"]


def test_operand_order_counts():
    closed = build(lambda x, y: [E.sub.bind(x, y), E.sub.bind(y, x)], arr(3), arr(3))
    merged = cse(closed)
    assert names(merged) == ["sub", "sub"]
    assert_equivalent(closed, merged, X3, Y3)


def test_equal_parameters_merge_and_different_parameters_do_not():
    closed = build(lambda x: [E.integer_pow.bind(x, y=2), E.integer_pow.bind(x, y=3),
                              E.integer_pow.bind(x, y=2)], arr(3))
    merged = cse(closed)
    assert [e.params["y"] for e in merged.jaxpr.eqns] == [2, 3]
    assert_equivalent(closed, merged, X3)


def test_literals_merge_by_value_and_type():
    closed = build(lambda x: [E.mul.bind(x, 2.0), E.mul.bind(x, 2.0), E.mul.bind(x, 3.0),
                              E.add.bind(x, 0.0), E.add.bind(x, -0.0)], arr(3))
    merged = cse(closed)
    # 2.0 twice is one product; 3.0 differs, and so does -0.0 from 0.0 (x + -0.0 keeps -0.0).
    assert names(merged) == ["mul", "mul", "add", "add"]
    assert_equivalent(closed, merged, X3)


def test_literals_of_different_dtypes_are_not_merged():
    closed = build(lambda x, i: [E.mul.bind(x, np.float32(2.0)), E.mul.bind(i, np.int32(2))],
                   arr(3, dtype="float32"), arr(3, dtype="int32"))
    assert names(cse(closed)) == ["mul", "mul"]


def test_merging_cascades_through_renamed_operands():
    closed = build(lambda x: [E.cos.bind(E.sin.bind(x)), E.cos.bind(E.sin.bind(x))], arr(3))
    merged = cse(closed)
    assert names(merged) == ["sin", "cos"]
    assert_equivalent(closed, merged, X3)


def test_all_outputs_of_a_multiple_result_equation_are_renamed():
    def fn(keys, values):
        first = R.sort.bind(keys, values, dimension=0, num_keys=1)
        again = R.sort.bind(keys, values, dimension=0, num_keys=1)
        return [E.add.bind(first[0], again[0]), E.add.bind(first[1], again[1])]
    closed = build(fn, arr(3), arr(3))
    merged = cse(closed)
    assert names(merged) == ["sort", "add", "add"]
    sort_outs = merged.jaxpr.eqns[0].outvars
    assert [e.invars for e in merged.jaxpr.eqns[1:]] == [[v, v] for v in sort_outs]
    assert_equivalent(closed, merged, X3, Y3)


def test_control_flow_with_different_bodies_is_not_merged():
    double = build(lambda x: E.mul.bind(x, 2.0), arr(3))
    halve = build(lambda x: E.mul.bind(x, 0.5), arr(3))
    closed = build(lambda i, x: [*cond.bind(i, x, branches=(double, halve)),
                                 *cond.bind(i, x, branches=(halve, double))],
                   arr(dtype="int32"), arr(3))
    merged = cse(closed)
    assert names(merged) == ["cond", "cond"]
    assert_equivalent(closed, merged, np.int32(0), X3)


def test_unhashable_parameters_are_never_merged():
    # A list parameter cannot be a dict key: such equations are kept, not compared.
    closed = build(lambda x: [E.sin.bind(x), E.sin.bind(x)], arr(3))
    for eqn in closed.jaxpr.eqns:
        eqn.params["note"] = ["unhashable"]
    assert names(cse(closed)) == ["sin", "sin"]


def test_the_kept_equation_takes_the_dropped_ones_name_when_it_has_none():
    def fn(x):
        a, b = E.sin.bind(x), E.sin.bind(x)
        b.variable.hint = "s"
        return [a, b]
    merged = cse(build(fn, arr(3)))
    assert merged.jaxpr.outvars[0].hint == "s"


def test_constants_and_literal_outputs_pass_through():
    table = np.arange(3.0)
    closed = build(lambda x: [E.add.bind(x, table), E.add.bind(x, table), 1.5], arr(3))
    merged = cse(closed)
    assert names(merged) == ["add"]
    assert merged.jaxpr.constvars == closed.jaxpr.constvars and merged.consts == closed.consts
    assert isinstance(merged.jaxpr.outvars[2], Literal)
    assert_equivalent(closed, merged, X3)


def test_simplifying_first_lets_cse_merge_what_identities_hid():
    # sin(x * 1) and sin(x) are one sin once the identity is gone (autodiff's cleanup order).
    closed = build(lambda x: [E.sin.bind(E.mul.bind(x, 1.0)), E.sin.bind(x)], arr(3))
    assert names(cse(closed)) == ["mul", "sin", "sin"]
    cleaned = cse(simplify(closed))
    assert names(cleaned) == ["sin"]
    assert cleaned.jaxpr.eqns[0].invars == closed.jaxpr.invars
    assert_equivalent(closed, cleaned, X3)


def test_constants_read_no_variable_and_are_never_merged():
    """Regression: a scan's gradient accumulator `b_bar` started from the same zeros as the
    user's `h = np.zeros(3)`; merged, its loop was emitted `W_bar, b_bar, carry = ..., h, ...`
    (`b_bar = h`). Each fill keeps its own variable, and the emitter writes it where it is read."""
    def fn(x):
        zeros = [S.broadcast_in_dim.bind(Literal(0.0, arr()), shape=(3,), broadcast_dimensions=())
                 for _ in range(2)]
        return [E.add.bind(x, zeros[0]), zeros[1]]
    closed = build(fn, arr(3))
    merged = cse(closed)
    assert names(merged) == ["broadcast_in_dim", "broadcast_in_dim", "add"]
    assert merged.jaxpr.outvars[1] is not merged.jaxpr.eqns[0].outvars[0]
    assert_equivalent(closed, merged, X3)
