"""Partial evaluation: a jaxpr split into what known inputs compute and the rest.

Each test builds a small jaxpr, splits it, and runs the two halves one after the other
(known inputs -> known outputs and residuals; residuals and unknown inputs -> unknown
outputs) to check they compute what the whole did, besides what lands on which side.
"""
from __future__ import annotations

import numpy as np

from s2s.core import JaxprEqn, check_jaxpr, eval_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr, partial_eval_rules
from s2s.primitives import elementwise as E
from s2s.primitives.cond import cond
from s2s.primitives.loops import scan, while_loop
from s2s.source_info import SourceInfo
from s2s.staging import current_builder
from tests.passes.handbuilt import arr, build, names

X3 = np.array([0.5, -1.0, 2.0])
T3 = np.array([1.0, 2.0, -3.0])


def assert_split_computes_the_whole(closed, split, unknowns, *args):
    """Running `split.known`, then `split.unknown` on its residuals, gives `closed`'s outputs."""
    check_jaxpr(split.known)
    check_jaxpr(split.unknown)
    known_results = eval_jaxpr(split.known, *[a for a, u in zip(args, unknowns) if not u])
    n_known_outs = len(known_results) - split.num_residuals
    known_outs, residuals = known_results[:n_known_outs], known_results[n_known_outs:]
    unknown_outs = eval_jaxpr(split.unknown, *residuals, *[a for a, u in zip(args, unknowns) if u])
    known_iter, unknown_iter = iter(known_outs), iter(unknown_outs)
    joined = [next(unknown_iter) if u else next(known_iter) for u in split.out_unknowns]
    for got, expected in zip(joined, eval_jaxpr(closed, *args)):
        np.testing.assert_array_equal(got, expected)


def sin_times_t(x, t):
    return E.mul.bind(E.sin.bind(x), t)


def test_known_work_goes_to_the_known_side_and_its_result_is_the_residual():
    closed = build(sin_times_t, arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True])
    assert names(split.known) == ["sin"] and names(split.unknown) == ["mul"]
    assert split.out_unknowns == [True] and split.num_residuals == 1
    assert split.known.jaxpr.outvars == split.known.jaxpr.eqns[0].outvars   # sin(x) is saved
    assert split.unknown.jaxpr.invars[0] is split.known.jaxpr.outvars[0]
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def test_an_output_computed_from_known_inputs_only_is_known():
    closed = build(lambda x, t: [E.cos.bind(x), sin_times_t(x, t)], arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True])
    assert split.out_unknowns == [False, True]
    assert names(split.known) == ["cos", "sin"] and names(split.unknown) == ["mul"]
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def test_instantiated_known_outputs_come_out_of_the_unknown_side():
    closed = build(lambda x, t: [E.cos.bind(x), sin_times_t(x, t)], arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True], instantiate=[True, False])
    assert split.out_unknowns == [True, True]
    assert split.num_residuals == 2   # cos(x), passed through, and sin(x)
    assert split.unknown.jaxpr.outvars[0] in split.unknown.jaxpr.invars
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def test_a_known_input_read_by_unknown_work_is_itself_the_residual():
    closed = build(lambda x, t: E.mul.bind(x, t), arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True])
    assert names(split.known) == [] and split.num_residuals == 1
    assert split.known.jaxpr.outvars == split.known.jaxpr.invars
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def test_residuals_are_only_what_live_unknown_work_reads():
    def fn(x, t):
        E.mul.bind(E.exp.bind(x), t)    # unknown but dead: exp(x) is no residual
        known_only = E.cos.bind(x)      # read by nothing unknown
        return [known_only, sin_times_t(x, t)]
    closed = build(fn, arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True])
    assert split.num_residuals == 1
    assert names(split.known) == ["cos", "sin"] and names(split.unknown) == ["mul"]
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def sin_read_twice(x, t):
    s = E.sin.bind(x)
    return E.add.bind(E.mul.bind(s, t), E.div.bind(t, s))


def test_a_residual_is_saved_once_however_often_it_is_read():
    closed = build(sin_read_twice, arr(3), arr(3))
    split = partial_eval_jaxpr(closed, [False, True])
    assert split.num_residuals == 1 and names(split.unknown) == ["mul", "div", "add"]
    assert_split_computes_the_whole(closed, split, [False, True], X3, T3)


def test_all_known_and_all_unknown():
    closed = build(sin_times_t, arr(3), arr(3))
    known = partial_eval_jaxpr(closed, [False, False])
    assert known.out_unknowns == [False] and known.num_residuals == 0 and names(known.unknown) == []
    assert_split_computes_the_whole(closed, known, [False, False], X3, T3)
    unknown = partial_eval_jaxpr(closed, [True, True])
    assert unknown.out_unknowns == [True] and names(unknown.known) == []
    assert names(unknown.unknown) == ["sin", "mul"]
    assert_split_computes_the_whole(closed, unknown, [True, True], X3, T3)


def test_a_scan_is_split_into_a_known_loop_and_an_unknown_loop():
    # carry c += sin(x) * t per step: the sines are known, the products unknown.
    body = build(lambda c, x, t: [E.add.bind(c, sin_times_t(x, t)), E.cos.bind(x)],
                 arr(), arr(), arr())
    closed = build(lambda c, xs, ts: scan.bind(c, xs, ts, jaxpr=body, num_consts=0, num_carry=1,
                                                 length=3, reverse=False, unroll=1, checkpoints=None),
                   arr(), arr(3), arr(3))
    unknowns = [True, False, True]
    split = partial_eval_jaxpr(closed, unknowns)
    assert split.out_unknowns == [True, False]
    assert names(split.known) == ["scan"] and names(split.unknown) == ["scan"]
    assert "sin" in names(split.known.jaxpr.eqns[0].params["jaxpr"])
    assert "sin" not in names(split.unknown.jaxpr.eqns[0].params["jaxpr"])
    assert_split_computes_the_whole(closed, split, unknowns, np.float64(1.0), X3, T3)


def test_control_flow_rules_are_registered():
    assert {scan, cond, while_loop} <= set(partial_eval_rules)


def test_equations_a_rule_splits_off_compute_at_the_line_of_the_equation_they_split(monkeypatch):
    """A rule may build its halves with no source line; both get the split equation's, so
    each statement of the forward and backward passes says which line of the user's code
    it computes."""
    def split(eqn, unknown_ins):
        return [], [JaxprEqn(E.neg, eqn.invars, eqn.outvars, {})], [True]
    monkeypatch.setitem(partial_eval_rules, E.neg, split)

    def fn(x):
        with current_builder().at(SourceInfo("model.py", 7, 1, "model")):
            return E.neg.bind(x)
    pe = partial_eval_jaxpr(build(fn, arr(3)), [True])
    assert [e.source_info.line for e in pe.unknown.jaxpr.eqns] == [7]
