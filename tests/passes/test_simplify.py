"""The simplify pass: per-primitive rules drop identities and fold broadcast chains.

The rules live with their primitives (elementwise: `x * 1`, `x + 0`, `x - 0`; structural:
a broadcast or expand_dims of a broadcast); these tests hold the interpreter and those
rules to what they promise on small hand-built jaxprs, and check every result is still a
well-formed jaxpr computing the same values.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from s2s.core import JaxprEqn, Literal
from s2s.source_info import SourceInfo
from s2s.staging import current_builder
from s2s.passes import simplify as simplify_pass
from s2s.passes.simplify import fill_value, simplify, simplify_rules
from s2s.primitives import elementwise as E, linalg as LA, reductions as R, structural as S
from s2s.primitives.cond import cond
from tests.passes.handbuilt import arr, assert_equivalent, build, names
from tests.primitives.linalg.test_contraction import dot_problems

X3 = np.array([1.5, -2.0, 3.25])


def ones(shape, value=1.0):
    return S.broadcast_in_dim.bind(value, shape=shape, broadcast_dimensions=())


@pytest.mark.parametrize("fn", [
    lambda x: E.mul.bind(x, 1.0), lambda x: E.mul.bind(1.0, x),
    lambda x: E.add.bind(x, 0.0), lambda x: E.add.bind(0.0, x),
    lambda x: E.add_any.bind(x, 0.0), lambda x: E.add_any.bind(0.0, x),
    lambda x: E.sub.bind(x, 0.0), lambda x: E.mul.bind(x, ones((3,))),
    lambda x: E.add.bind(ones((3,), 0.0), x),
], ids=["x*1", "1*x", "x+0", "0+x", "add_any(x,0)", "add_any(0,x)", "x-0", "x*ones", "zeros+x"])
def test_an_identity_is_dropped_and_its_output_renamed_to_the_operand(fn):
    closed = build(fn, arr(3))
    simplified = simplify(closed)
    assert not {"mul", "add", "add_any", "sub"} & set(names(simplified))
    assert simplified.jaxpr.outvars == closed.jaxpr.invars
    assert_equivalent(closed, simplified, X3)


@pytest.mark.parametrize("fn", [
    lambda x: E.sub.bind(0.0, x),                   # 0 - x is -x, not x
    lambda x: E.mul.bind(x, 2.0),
    lambda x: E.mul.bind(x, 0.0),
    lambda x: E.add.bind(x, 1.0),
    lambda x: E.mul.bind(x, ones((3,), 2.0)),
    lambda x: E.mul.bind(x, E.sin.bind(x)),
], ids=["0-x", "x*2", "x*0", "x+1", "x*twos", "x*sin(x)"])
def test_an_operation_that_changes_the_value_is_kept(fn):
    closed = build(fn, arr(3))
    simplified = simplify(closed)
    assert names(simplified) == names(closed)
    assert_equivalent(closed, simplified, X3)


def test_an_identity_that_broadcasts_its_operand_is_kept():
    # x is a scalar and ones a vector: the product has ones' shape, so it is not x.
    closed = build(lambda x: E.mul.bind(x, ones((3,))), arr())
    simplified = simplify(closed)
    assert names(simplified) == ["broadcast_in_dim", "mul"]
    assert_equivalent(closed, simplified, np.float64(2.5))


def test_an_identity_of_two_literals_is_kept():
    # Nothing to rename the output to: the pass never turns an equation into a literal.
    closed = build(lambda x: [x, E.mul.bind(2.0, 1.0)], arr())
    assert names(simplify(closed)) == ["mul"]


def test_identities_in_a_chain_all_go_and_users_read_the_operand():
    closed = build(lambda x: E.sin.bind(E.add.bind(E.mul.bind(x, 1.0), 0.0)), arr(3))
    simplified = simplify(closed)
    assert names(simplified) == ["sin"]
    assert simplified.jaxpr.eqns[0].invars == closed.jaxpr.invars
    assert_equivalent(closed, simplified, X3)


def test_the_dropped_output_lends_its_name_to_a_nameless_operand():
    def fn(x):
        y = E.mul.bind(E.sin.bind(x), 1.0)
        y.variable.hint = "y"
        return y
    simplified = simplify(build(fn, arr(3)))
    (out,) = simplified.jaxpr.outvars
    assert simplified.jaxpr.eqns[0].outvars == [out] and out.hint == "y"


def test_a_named_operand_keeps_its_name():
    def fn(x):
        s = E.sin.bind(x)
        s.variable.hint = "s"
        y = E.mul.bind(s, 1.0)
        y.variable.hint = "y"
        return y
    (out,) = simplify(build(fn, arr(3))).jaxpr.outvars
    assert out.hint == "s"


def test_a_broadcast_of_a_broadcast_is_one_broadcast_of_the_source():
    def fn(x):
        inner = S.broadcast_in_dim.bind(x, shape=(2, 3), broadcast_dimensions=(1,))
        return S.broadcast_in_dim.bind(inner, shape=(4, 2, 3), broadcast_dimensions=(1, 2))
    closed = build(fn, arr(3))
    simplified = simplify(closed)
    outer = simplified.jaxpr.eqns[-1]
    assert outer.primitive is S.broadcast_in_dim and outer.invars == closed.jaxpr.invars
    assert outer.params == {"shape": (4, 2, 3), "broadcast_dimensions": (2,)}
    assert_equivalent(closed, simplified, X3)


@pytest.mark.parametrize("dimensions, expected_dims", [((0,), (2,)), ((2,), (1,)), ((1,), (2,))])
def test_expand_dims_of_a_broadcast_becomes_a_broadcast_of_the_source(dimensions, expected_dims):
    def fn(x):
        inner = S.broadcast_in_dim.bind(x, shape=(2, 3), broadcast_dimensions=(1,))
        return S.expand_dims.bind(inner, dimensions=dimensions)
    closed = build(fn, arr(3))
    simplified = simplify(closed)
    folded = simplified.jaxpr.eqns[-1]
    assert folded.primitive is S.broadcast_in_dim and folded.invars == closed.jaxpr.invars
    assert folded.params["broadcast_dimensions"] == expected_dims
    assert_equivalent(closed, simplified, X3)


def test_a_chain_of_three_broadcasts_folds_to_one_read_of_the_source():
    def fn(x):
        a = S.broadcast_in_dim.bind(x, shape=(2, 3), broadcast_dimensions=(1,))
        b = S.expand_dims.bind(a, dimensions=(0,))
        return S.broadcast_in_dim.bind(b, shape=(5, 2, 3), broadcast_dimensions=(0, 1, 2))
    closed = build(fn, arr(3))
    simplified = simplify(closed)
    assert all(e.primitive is S.broadcast_in_dim and e.invars == closed.jaxpr.invars
               for e in simplified.jaxpr.eqns)
    assert_equivalent(closed, simplified, X3)


@pytest.mark.parametrize("shape, squeezed, out_shape, dims, expected", [
    ((4, 1), (1,), (4, 5), (0,), (0, 1)),          # d[:, 0] spread over columns: d itself
    ((1, 4), (0,), (3, 4), (1,), (0, 1)),
    ((4, 1, 2), (1,), (4, 5, 2), (0, 2), (0, 1, 2)),
    ((4, 1), (1,), (4,), (0,), None),              # no output axis left for the length-1 one
    ((4, 1, 2), (1,), (4, 2), (0, 1), None),
])
def test_a_broadcast_of_a_squeeze_broadcasts_the_unsqueezed_value(shape, squeezed, out_shape, dims, expected):
    def fn(x):
        return S.broadcast_in_dim.bind(S.squeeze.bind(x, dimensions=squeezed), shape=out_shape,
                                       broadcast_dimensions=dims)
    closed = build(fn, arr(*shape))
    simplified = simplify(closed)
    last = simplified.jaxpr.eqns[-1]
    if expected is None:
        assert names(simplified) == ["squeeze", "broadcast_in_dim"]
    else:
        assert last.invars == closed.jaxpr.invars and last.params["broadcast_dimensions"] == expected
    assert_equivalent(closed, simplified, np.arange(np.prod(shape), dtype=float).reshape(shape))


@pytest.mark.parametrize("first, second, expected", [
    ((1, 0), (1, 0), None), ((1, 2, 0), (2, 0, 1), None), ((1, 2, 0), (1, 0, 2), (2, 1, 0)),
])
def test_a_transpose_of_a_transpose_is_one_or_none(first, second, expected):
    shape = (2, 3, 4)[:len(first)]
    closed = build(lambda x: S.transpose.bind(S.transpose.bind(x, permutation=first), permutation=second),
                   arr(*shape))
    simplified = simplify(closed)
    if expected is None:
        assert simplified.jaxpr.outvars == closed.jaxpr.invars
    else:
        assert simplified.jaxpr.eqns[-1].params["permutation"] == expected
        assert simplified.jaxpr.eqns[-1].invars == closed.jaxpr.invars
    assert_equivalent(closed, simplified, np.arange(np.prod(shape), dtype=float).reshape(shape))


def test_a_broadcast_of_a_computed_value_is_kept():
    closed = build(lambda x: S.broadcast_in_dim.bind(E.sin.bind(x), shape=(2, 3),
                                                     broadcast_dimensions=(1,)), arr(3))
    simplified = simplify(closed)
    assert simplified.jaxpr.eqns[-1].invars == closed.jaxpr.eqns[-1].invars


def test_a_folded_broadcast_of_a_literal_still_counts_as_filled():
    # ones reaches the mul through expand_dims: folding makes it a broadcast of 1.0, so
    # the mul is an identity.
    def fn(x):
        filled = S.expand_dims.bind(ones((3,)), dimensions=(0,))
        return E.mul.bind(x, filled)
    closed = build(fn, arr(1, 3))
    simplified = simplify(closed)
    assert "mul" not in names(simplified)
    assert_equivalent(closed, simplified, X3[None])


def test_an_identity_on_one_output_of_a_multiple_result_equation():
    def fn(keys, values):
        sorted_keys, sorted_values = R.sort.bind(keys, values, dimension=0, num_keys=1)
        return [E.mul.bind(sorted_values, 1.0), sorted_keys]
    closed = build(fn, arr(3), arr(3))
    simplified = simplify(closed)
    assert names(simplified) == ["sort"]
    assert simplified.jaxpr.outvars == simplified.jaxpr.eqns[0].outvars[::-1]
    assert_equivalent(closed, simplified, X3, X3 * 2)


def test_bodies_of_control_flow_are_simplified_and_keep_their_signature():
    """A branch nested in a branch: both lose their identities, and each still takes and
    returns what the cond passes (the identity's output becomes the branch's input)."""
    inner = build(lambda x: E.mul.bind(x, 1.0), arr(3))
    outer = build(lambda i, x: E.sin.bind(cond.bind(i, E.add.bind(x, 0.0), branches=(inner, inner))[0]),
                  arr(dtype="int32"), arr(3))
    closed = build(lambda i, x: cond.bind(i, i, x, branches=(outer, outer)), arr(dtype="int32"), arr(3))
    simplified = simplify(closed)
    (branch, _) = simplified.jaxpr.eqns[0].params["branches"]
    assert names(branch) == ["cond", "sin"]
    assert branch.jaxpr.invars == outer.jaxpr.invars
    (inner_simplified, _) = branch.jaxpr.eqns[0].params["branches"]
    assert names(inner_simplified) == [] and inner_simplified.jaxpr.outvars == inner_simplified.jaxpr.invars
    for index in (0, 1):
        assert_equivalent(closed, simplified, np.int32(index), X3)


def test_fill_value_sees_literals_and_broadcast_literals_only():
    closed = build(lambda x: [ones((3,), 2.5), S.broadcast_in_dim.bind(x, shape=(3,),
                                                                       broadcast_dimensions=())], arr())
    producers = {eqn.outvars[0]: eqn for eqn in closed.jaxpr.eqns}
    filled, broadcast_input = closed.jaxpr.outvars
    assert fill_value(filled, producers.get) == 2.5
    assert fill_value(broadcast_input, producers.get) is None
    assert fill_value(closed.jaxpr.invars[0], producers.get) is None
    assert fill_value(Literal(np.float64(4.0), arr()), producers.get) == 4.0


def test_the_families_register_their_simplifications():
    assert {E.mul, E.add, E.add_any, E.sub, S.broadcast_in_dim, S.expand_dims} <= set(simplify_rules)
    assert simplify_pass.simplify_rules is simplify_rules


def test_a_replacement_equation_computes_at_the_line_of_the_one_it_replaces(monkeypatch):
    """A rule may build its replacement with no source line; the statement it becomes would
    be emitted without its `# file:line` comment, so the pass gives it the replaced one's."""
    monkeypatch.setitem(simplify_rules, E.neg, [lambda eqn, producer: JaxprEqn(E.neg, eqn.invars, eqn.outvars, {})])

    def fn(x):
        with current_builder().at(SourceInfo("model.py", 12, 1, "model")):
            return E.neg.bind(x)
    simplified = simplify(build(fn, arr(3)))
    assert [e.source_info.line for e in simplified.jaxpr.eqns] == [12]


@settings(max_examples=25, deadline=None)
@given(problem=dot_problems(), side=st.sampled_from([0, 1]), data=st.data())
def test_a_dot_of_a_transpose_reads_the_untransposed_operand_where_the_result_keeps_its_order(problem, side, data):
    """dot_general(transpose(x), y) becomes dot_general(x, y) with the dimension numbers
    mapped through the permutation, unless that would reorder the result's free dims."""
    operands, dimension_numbers = list(problem[:2]), problem[2]
    perm = tuple(data.draw(st.permutations(range(operands[side].ndim))))
    untransposed = np.transpose(operands[side], np.argsort(perm))   # transposed by perm, it is the operand

    def f(x, other):
        lhs, rhs = (S.transpose.bind(x, permutation=perm), other)[::1 if side == 0 else -1]
        return LA.dot_general.bind(lhs, rhs, dimension_numbers=dimension_numbers, preferred_element_type=None)

    closed = build(f, arr(*untransposed.shape), arr(*operands[1 - side].shape))
    simplified = simplify(closed)
    free = [perm[d] for d in LA.free_dims(len(perm), dimension_numbers[0][side], dimension_numbers[1][side])]
    (dot,) = [e for e in simplified.jaxpr.eqns if e.primitive is LA.dot_general]
    assert (dot.invars[side] is closed.jaxpr.invars[0]) == (free == sorted(free))
    assert_equivalent(closed, simplified, untransposed, operands[1 - side])


@pytest.mark.parametrize("add", [E.add, E.add_any])
@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_two_zero_padded_pieces_that_tile_an_axis_sum_to_their_concatenation(add, swapped, axis):
    """What the transpose of two consecutive slices sums (`xs[:2]`, `xs[2:]`) is built once."""
    shapes = [(2, 3), (4, 3)] if axis == 0 else [(3, 2), (3, 4)]

    def placed(x, before, after):
        config = [(0, 0, 0), (0, 0, 0)]
        config[axis] = (before, after, 0)
        return S.pad.bind(x, 0.0, padding_config=tuple(config))

    def fn(a, b):
        first, second = placed(a, 0, 4), placed(b, 2, 0)
        return add.bind(*((second, first) if swapped else (first, second)))
    closed = build(fn, arr(*shapes[0]), arr(*shapes[1]))
    simplified = simplify(closed)
    (last,) = [e for e in simplified.jaxpr.eqns if e.outvars == closed.jaxpr.outvars]
    assert last.primitive is S.concatenate and last.params["dimension"] == axis
    assert last.invars == closed.jaxpr.invars
    assert_equivalent(closed, simplified, np.arange(6.0).reshape(shapes[0]), -np.arange(12.0).reshape(shapes[1]))


@pytest.mark.parametrize("second_placement, value", [((1, 0), 0.0), ((3, 0), 0.0), ((2, 0), 1.0)],
                         ids=["overlapping", "gap", "padded-with-one"])
def test_pieces_that_do_not_tile_with_zeros_are_summed_as_they_are(second_placement, value):
    def fn(a, b):
        first = S.pad.bind(a, 0.0, padding_config=((0, 4, 0),))
        second = S.pad.bind(b, value, padding_config=((*second_placement, 0),))
        return E.add_any.bind(first, second)
    size_b = 6 - second_placement[0]
    closed = build(fn, arr(2), arr(size_b))
    simplified = simplify(closed)
    assert "concatenate" not in names(simplified)
    assert_equivalent(closed, simplified, np.arange(2.0), np.arange(float(size_b)))
