"""Transposition: the backward pass of a linear jaxpr, on hand-built jaxprs.

Here: the source lines the equations it makes carry (see `s2s/passes/transpose.py`), so
that every statement of an emitted backward pass says which line of the user's code it
differentiates.
"""
from __future__ import annotations

import numpy as np

from s2s.core import eval_jaxpr
from s2s.passes.transpose import transpose_jaxpr
from s2s.primitives import elementwise as E
from s2s.source_info import SourceInfo
from s2s.staging import current_builder
from tests.passes.handbuilt import arr, build


def at(line: int) -> SourceInfo:
    return SourceInfo("model.py", line, 1, "model")


def staged_at(line, primitive, *args):
    with current_builder().at(at(line)):
        return primitive.bind(*args)


def lines_of(closed, primitive) -> list[int]:
    return [e.source_info.line for e in closed.jaxpr.eqns if e.primitive is primitive]


def test_an_accumulation_carries_the_line_that_defines_the_accumulated_variable():
    """Regression: `shifted_bar = logp_bar + ...` (the add_any of two contributions) was
    emitted with no `# file:line` comment: the equation had no source info."""
    def linear(t):
        u = staged_at(1, E.neg, t)
        return [staged_at(2, E.mul, u, 2.0), staged_at(3, E.mul, u, 3.0)]
    backward = transpose_jaxpr(build(linear, arr(3)), [True])
    assert lines_of(backward, E.add_any) == [1]
    assert all(e.source_info.line for e in backward.jaxpr.eqns)
    (t_bar,) = eval_jaxpr(backward, np.ones(3), np.full(3, 10.0))
    np.testing.assert_array_equal(t_bar, np.full(3, -32.0))   # -(2 * 1 + 3 * 10)


def test_an_input_read_twice_accumulates_at_the_line_that_first_reads_it():
    def linear(t):
        return [staged_at(5, E.neg, t), staged_at(6, E.mul, t, 2.0)]
    backward = transpose_jaxpr(build(linear, arr(3)), [True])
    assert lines_of(backward, E.add_any) == [5]
    (t_bar,) = eval_jaxpr(backward, np.ones(3), np.ones(3))
    np.testing.assert_array_equal(t_bar, np.ones(3))   # -1 + 2


def test_the_zeros_of_an_input_whose_cotangent_stays_zero_carry_the_line_that_reads_it():
    def linear(t, s):
        staged_at(8, E.neg, s)   # read, but its result flows nowhere: s_bar is a symbolic zero
        return staged_at(9, E.neg, t)
    backward = transpose_jaxpr(build(linear, arr(2), arr(2)), [True, True])
    assert [e.source_info.line for e in backward.jaxpr.eqns] == [9, 8]   # -t_bar, then the zeros
    t_bar, s_bar = eval_jaxpr(backward, np.ones(2))
    np.testing.assert_array_equal(s_bar, np.zeros(2))
