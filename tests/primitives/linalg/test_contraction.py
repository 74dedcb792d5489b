"""dot_general (`s2s/primitives/linalg/contraction.py`): shape rules, impl and emission,
with einsum as the oracle.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s.core import ShapedArray
from s2s.emit.python import emit_jaxpr_source
from s2s.errors import ShapeError
from s2s.primitives import linalg as la
from tests.helpers import assert_same, check_staged, stage

SETTINGS = settings(max_examples=25, deadline=None)
LETTERS = "abcdefghijklmnopqrstuvwxyz"


# ---------------------------------------------------------------------------------------
# dot_general


def einsum_oracle(lhs, rhs, dimension_numbers):
    """dot_general by its definition, independently of the code under test."""
    (lc, rc), (lb, rb) = dimension_numbers
    left = [LETTERS[i] for i in range(lhs.ndim)]
    right = [LETTERS[13 + i] for i in range(rhs.ndim)]
    for l, r in zip(lc + lb, rc + rb):
        right[r] = left[l]
    out = ([left[d] for d in lb]
           + [left[d] for d in range(lhs.ndim) if d not in lc + lb]
           + [right[d] for d in range(rhs.ndim) if d not in rc + rb])
    spec = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    return np.asarray(np.einsum(spec, lhs, rhs))[()]


@st.composite
def dot_problems(draw, dtype=np.float64):
    """Two operands and dimension numbers with batch, contracting and free dims anywhere."""
    size = st.integers(1, 3)
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nlf, nrf = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    batch = [draw(size) for _ in range(nb)]
    contract = [draw(size) for _ in range(nc)]
    lfree = [draw(size) for _ in range(nlf)]
    rfree = [draw(size) for _ in range(nrf)]
    # Place the lhs dims (batch, contract, free) at shuffled positions; likewise the rhs.
    lperm = draw(st.permutations(range(nb + nc + nlf)))
    rperm = draw(st.permutations(range(nb + nc + nrf)))
    lsizes = batch + contract + lfree
    rsizes = batch + contract + rfree
    lshape = [0] * len(lsizes)
    for role, pos in enumerate(lperm):
        lshape[pos] = lsizes[role]
    rshape = [0] * len(rsizes)
    for role, pos in enumerate(rperm):
        rshape[pos] = rsizes[role]
    lb = tuple(lperm[i] for i in range(nb))
    rb = tuple(rperm[i] for i in range(nb))
    lc = tuple(lperm[nb + i] for i in range(nc))
    rc = tuple(rperm[nb + i] for i in range(nc))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lhs = rng.integers(-3, 4, size=lshape).astype(dtype)
    rhs = rng.integers(-3, 4, size=rshape).astype(dtype)
    return lhs, rhs, ((lc, rc), (lb, rb))


def _dot(dimension_numbers, preferred_element_type=None):
    return lambda a, b: la.dot_general.bind(a, b, dimension_numbers=dimension_numbers,
                                            preferred_element_type=preferred_element_type)


@SETTINGS
@given(dot_problems())
def test_dot_general_matches_einsum(problem):
    lhs, rhs, dn = problem
    expected = einsum_oracle(lhs, rhs, dn)
    aval = la.dot_general.abstract_eval(ShapedArray(lhs.shape, lhs.dtype),
                                        ShapedArray(rhs.shape, rhs.dtype), dimension_numbers=dn)
    assert aval.shape == np.shape(expected) and aval.dtype == lhs.dtype
    assert_same(la.dot_general.impl(lhs, rhs, dimension_numbers=dn), expected)
    check_staged(_dot(dn), lambda a, b: einsum_oracle(a, b, dn), lhs, rhs)


@SETTINGS
@given(dot_problems(dtype=np.int32), st.sampled_from([np.int32, np.float32, np.bool_]))
def test_dot_general_integer_and_bool_dtypes(problem, dtype):
    lhs, rhs, dn = problem
    lhs, rhs = lhs.astype(dtype), rhs.astype(dtype)
    check_staged(_dot(dn), lambda a, b: einsum_oracle(a, b, dn), lhs, rhs)


@SETTINGS
@given(dot_problems(dtype=np.int32))
def test_dot_general_preferred_element_type(problem):
    lhs, rhs, dn = problem
    oracle = lambda a, b: einsum_oracle(a.astype(np.float64), b.astype(np.float64), dn)
    check_staged(_dot(dn, np.dtype(np.float64)), oracle, lhs, rhs)


def _mat(*shape):
    return np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)


# (lhs shape, rhs shape, dimension numbers, text the emitted module must contain)
EMISSION_CASES = [
    ((3, 4), (4, 5), (((1,), (0,)), ((), ())), "a @ b"),
    ((4, 3), (4, 5), (((0,), (0,)), ((), ())), "a.T @ b"),
    ((3, 4), (5, 4), (((1,), (1,)), ((), ())), "a @ b.T"),
    ((4, 3), (5, 4), (((0,), (1,)), ((), ())), "a.T @ b.T"),
    ((4,), (4,), (((0,), (0,)), ((), ())), "a @ b"),
    ((3, 4), (4,), (((1,), (0,)), ((), ())), "a @ b"),
    ((4,), (4, 5), (((0,), (0,)), ((), ())), "a @ b"),
    ((4,), (5, 4), (((0,), (1,)), ((), ())), "b @ a"),
    ((2, 3, 4), (4,), (((2,), (0,)), ((), ())), "a @ b"),
    ((4,), (2, 4, 5), (((0,), (1,)), ((), ())), "a @ b"),
    ((2, 3, 4), (6, 4, 5), (((2,), (1,)), ((), ())), "np.dot(a, b)"),
    ((3,), (5,), (((), ()), ((), ())), "np.outer(a, b)"),
    ((2, 3), (5,), (((), ()), ((), ())), "np.multiply.outer(a, b)"),
    ((), (5,), (((), ()), ((), ())), "a * b"),
    ((2, 3, 4), (3, 4, 5), (((1, 2), (0, 1)), ((), ())), "np.tensordot(a, b, axes=2)"),
    ((3, 2, 4), (4, 3), (((0, 2), (1, 0)), ((), ())), "np.tensordot(a, b, axes=([0, 2], [1, 0]))"),
    ((6, 3, 4), (6, 4, 5), (((2,), (1,)), ((0,), (0,))), "a @ b"),
    ((6, 4, 3), (6, 5, 4), (((1,), (2,)), ((0,), (0,))), "a.mT @ b.mT"),
    ((6, 3, 4), (6, 4), (((2,), (1,)), ((0,), (0,))), "np.einsum('abc,ac->ab', a, b)"),
    ((3, 6, 4), (4, 6, 5), (((2,), (0,)), ((1,), (1,))), "np.einsum('abc,cbd->bad', a, b)"),
]


@pytest.mark.parametrize("lshape, rshape, dn, text", EMISSION_CASES)
def test_dot_general_emits_plain_numpy(lshape, rshape, dn, text):
    lhs, rhs = _mat(*lshape), _mat(*rshape)

    def fn(a, b):
        return la.dot_general.bind(a, b, dimension_numbers=dn, preferred_element_type=None)

    closed, _ = stage(fn, lhs, rhs)
    source = emit_jaxpr_source(closed, "f", arg_names=["a", "b"])
    assert text in source, source
    check_staged(fn, lambda a, b: einsum_oracle(a, b, dn), lhs, rhs)


def test_dot_general_preferred_element_type_emission_casts_operands():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    dn = (((1,), (0,)), ((), ()))
    closed, _ = stage(_dot(dn, np.dtype(np.float64)), a, a.T.copy())
    source = emit_jaxpr_source(closed, "f", arg_names=["a", "b"])
    assert "a.astype(np.float64) @ b.astype(np.float64)" in source, source


@pytest.mark.parametrize("lshape, rshape, dn, dtypes_, message", [
    ((3, 4), (5, 6), (((1,), (0,)), ((), ())), None, "contracting dimensions differ"),
    ((2, 3, 4), (3, 4, 5), (((2,), (1,)), ((0,), (0,))), None, "batch dimensions differ"),
    ((3, 4), (4, 5), (((2,), (0,)), ((), ())), None, "out of range"),
    ((3, 3), (3, 3), (((1, 1), (0, 1)), ((), ())), None, "repeat"),
    ((3, 3), (3, 3), (((1,), (0,)), ((1,), (1,))), None, "repeat"),
    ((3, 4), (4, 5), (((1,), ()), ((), ())), None, "pair up"),
    ((2, 4), (2, 4), (((1,), (1,)), ((0,), ())), None, "pair up"),
    ((3, 4), (4, 5), (((1,), (0,)), ((), ())), (np.float32, np.float64), "one dtype"),
    ((3, 4), (4, 5), ((1, 0), ((), ())), None, "must be a tuple of ints"),
    ((3, 4), (4, 5), ((1, 0),), None, "dimension_numbers must be"),
])
def test_dot_general_shape_errors(lshape, rshape, dn, dtypes_, message):
    ldt, rdt = dtypes_ or (np.float64, np.float64)
    with pytest.raises(ShapeError, match=message):
        la.dot_general.abstract_eval(ShapedArray(lshape, ldt), ShapedArray(rshape, rdt),
                                     dimension_numbers=dn)
    with pytest.raises(ShapeError, match=message):
        la.dot_general.bind(np.ones(lshape, ldt), np.ones(rshape, rdt), dimension_numbers=dn)


def test_dot_general_weak_type_and_preferred_type():
    weak = ShapedArray((3,), np.float64, weak_type=True)
    dn = (((0,), (0,)), ((), ()))
    assert la.dot_general.abstract_eval(weak, weak, dimension_numbers=dn).weak_type
    strong = ShapedArray((3,), np.float64)
    assert not la.dot_general.abstract_eval(weak, strong, dimension_numbers=dn).weak_type
    out = la.dot_general.abstract_eval(ShapedArray((3,), np.int32), ShapedArray((3,), np.int32),
                                       dimension_numbers=dn,
                                       preferred_element_type=np.dtype(np.float32))
    assert out == ShapedArray((), np.float32)
