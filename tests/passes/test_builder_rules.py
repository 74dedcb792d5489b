"""The rules the rule builders next to each pass make: `jvp.defzero`, `jvp.deflinear` and
`transpose.skip_zero`, which every family uses instead of writing its own."""
import numpy as np

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import ShapedArray
from s2s.passes import jvp, transpose
from s2s.passes.tangents import Zero, is_zero, tangent_aval
from s2s.passes.transpose import LinearInput
from s2s.primitives import elementwise as ew
from s2s.primitives import structural as st
from s2s.staging import JaxprBuilder

MATRIX = ShapedArray((2, 3), np.dtype(np.float64))


def test_defzero_gives_a_symbolic_zero_tangent_of_the_result_type():
    with JaxprBuilder() as builder:
        x, t = builder.new_arg(MATRIX), builder.new_arg(MATRIX)
        y, y_dot = jvp.jvp_rules[ew.lt]([x, x], [t, t])
        assert is_zero(y_dot) and y_dot.aval == tangent_aval(y.aval)
        y, y_dot = jvp.jvp_rules[ew.floor]([x], [t])
        assert is_zero(y_dot) and y_dot.aval.shape == (2, 3)


def test_deflinear_applies_the_primitive_to_the_tangents():
    with JaxprBuilder() as builder:
        x, t = builder.new_arg(MATRIX), builder.new_arg(MATRIX)
        y, y_dot = jvp.jvp_rules[st.reshape]([x], [t], new_sizes=(3, 2))
        closed = builder.build([y, y_dot])
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["reshape", "reshape"]
    assert closed.jaxpr.eqns[1].invars[0] is closed.jaxpr.invars[1]


def test_deflinear_instantiates_symbolic_zero_tangents():
    with JaxprBuilder() as builder:
        x, t = builder.new_arg(MATRIX), builder.new_arg(MATRIX)
        _, out_dot = jvp.jvp_rules[ew.add_any]([x, x], [t, Zero(MATRIX)])
        closed = builder.build([out_dot])
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["add_any", "broadcast_in_dim",
                                                             "add_any"]


def test_skip_zero_answers_zero_for_linear_operands_and_none_for_the_others():
    calls = []
    rule = transpose.skip_zero(lambda ct, *args, **params: calls.append(ct) or ["ran"])
    linear, index = LinearInput(MATRIX), np.int64(1)
    cts = rule(Zero(MATRIX), linear, index, axis=0)
    assert is_zero(cts[0]) and cts[0].aval == MATRIX and cts[1] is None and not calls
    assert rule("ct", linear, index, axis=0) == ["ran"] and calls == ["ct"]
