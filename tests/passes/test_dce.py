"""Dead-code elimination: only what the outputs need is computed.

Equations nobody reads go, transitively; equations with a used output stay; control
flow with a `dce_rules` entry shrinks to the outputs that are read; `dce` also drops
constants, and `dce_jaxpr(prune_invars=True)` inputs, that nothing reads.
"""
from __future__ import annotations

import numpy as np

from s2s.core import ClosedJaxpr, Jaxpr, Literal
from s2s.passes.dce import dce, dce_jaxpr, dce_rules
from s2s.primitives import elementwise as E, reductions as R
from s2s.primitives.cond import cond
from s2s.primitives.loops import scan, while_loop
from tests.passes.handbuilt import arr, assert_equivalent, build, names

X3 = np.array([0.5, -1.0, 2.0])
Y3 = np.array([3.0, 0.25, -0.75])


def with_outputs(closed: ClosedJaxpr, keep: list[int]) -> ClosedJaxpr:
    """`closed` returning only the outputs at `keep` (the others become dead)."""
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, [jaxpr.outvars[i] for i in keep],
                             jaxpr.eqns), closed.consts)


def test_an_unread_equation_goes_and_a_read_one_stays():
    def fn(x):
        E.exp.bind(x)
        return E.sin.bind(x)
    closed = build(fn, arr(3))
    cleaned = dce(closed)
    assert names(cleaned) == ["sin"]
    assert_equivalent(closed, cleaned, X3)


def test_a_dead_chain_goes_entirely_and_a_shared_producer_stays():
    def fn(x):
        shared = E.sin.bind(x)
        E.log.bind(E.exp.bind(E.cos.bind(shared)))    # dead, reading the live sin
        return E.neg.bind(shared)
    cleaned = dce(build(fn, arr(3)))
    assert names(cleaned) == ["sin", "neg"]


def test_an_equation_with_one_used_output_of_several_is_kept_whole():
    def fn(keys, values):
        sorted_keys, _ = R.sort.bind(keys, values, dimension=0, num_keys=1)
        return sorted_keys
    closed = build(fn, arr(3), arr(3))
    cleaned = dce(closed)
    assert names(cleaned) == ["sort"] and len(cleaned.jaxpr.eqns[0].outvars) == 2
    assert_equivalent(closed, cleaned, X3, Y3)


def test_equations_keep_their_order():
    closed = build(lambda x: [E.cos.bind(x), E.sin.bind(x), E.exp.bind(x)], arr(3))
    assert names(dce(with_outputs(closed, [2, 0]))) == ["cos", "exp"]


def test_inputs_are_kept_unless_pruning_is_asked_for():
    closed = build(lambda x, unused: E.sin.bind(x), arr(3), arr(2))
    assert dce_jaxpr(closed.jaxpr).invars == closed.jaxpr.invars
    assert dce_jaxpr(closed.jaxpr, prune_invars=True).invars == closed.jaxpr.invars[:1]


def test_unread_constants_are_dropped_and_read_ones_kept():
    used, unused = np.arange(3.0), np.ones(3)
    def fn(x):
        E.add.bind(x, unused)
        return E.mul.bind(x, used)
    closed = build(fn, arr(3))
    assert len(closed.consts) == 2
    cleaned = dce(closed)
    assert len(cleaned.consts) == 1 and cleaned.consts[0] is used
    assert_equivalent(closed, cleaned, X3)


def test_literal_and_input_outputs_need_no_equation():
    closed = build(lambda x: [x, 2.0, E.exp.bind(x)], arr(3))
    cleaned = dce(with_outputs(closed, [0, 1]))
    assert names(cleaned) == []
    assert isinstance(cleaned.jaxpr.outvars[1], Literal)


def test_nothing_to_remove_leaves_the_equations_as_they_are():
    closed = build(lambda x: E.sin.bind(E.cos.bind(x)), arr(3))
    assert dce(closed).jaxpr.eqns == closed.jaxpr.eqns


def scan_of_sin_and_cos():
    """A scan summing xs into its carry and stacking sin(x) and cos(x)."""
    body = build(lambda c, x: [E.add.bind(c, x), E.sin.bind(x), E.cos.bind(x)], arr(), arr())
    return build(lambda init, xs: scan.bind(init, xs, jaxpr=body, num_consts=0, num_carry=1,
                                              length=3, reverse=False, unroll=1, checkpoints=None),
                 arr(), arr(3))


def test_a_scan_stops_computing_a_stacked_output_nobody_reads():
    closed = with_outputs(scan_of_sin_and_cos(), [0, 1])
    cleaned = dce(closed)
    (loop,) = cleaned.jaxpr.eqns
    assert names(loop.params["jaxpr"]) == ["add", "sin"] and len(loop.outvars) == 2
    assert_equivalent(closed, cleaned, np.float64(0.0), X3)


def test_a_scan_whose_carry_is_unread_drops_the_carry_and_its_input():
    closed = with_outputs(scan_of_sin_and_cos(), [2])
    cleaned = dce(closed)
    (loop,) = cleaned.jaxpr.eqns
    assert loop.params["num_carry"] == 0 and loop.invars == [closed.jaxpr.invars[1]]
    assert names(loop.params["jaxpr"]) == ["cos"]
    assert_equivalent(closed, cleaned, np.float64(0.0), X3)


def test_a_cond_keeps_only_the_read_outputs_of_every_branch():
    first = build(lambda x, y: [E.sin.bind(x), E.cos.bind(y)], arr(3), arr(3))
    second = build(lambda x, y: [E.neg.bind(x), E.exp.bind(y)], arr(3), arr(3))
    closed = with_outputs(build(lambda i, x, y: cond.bind(i, x, y, branches=(first, second)),
                                arr(dtype="int32"), arr(3), arr(3)), [0])
    cleaned = dce(closed)
    (branch,) = cleaned.jaxpr.eqns
    assert [names(b) for b in branch.params["branches"]] == [["sin"], ["neg"]]
    assert branch.invars == closed.jaxpr.invars[:2]   # y is no longer read
    for index in (0, 1):
        assert_equivalent(closed, cleaned, np.int32(index), X3, Y3)


def test_control_flow_rules_are_registered():
    assert {scan, cond, while_loop} <= set(dce_rules)
