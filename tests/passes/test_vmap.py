"""The batching interpreter and its rule builders, on hand-built jaxprs: batch axes stay
where they are unless a rule needs them moved, unbatched values stay unbatched, and every
elementwise primitive matches a loop over examples with the batch at any position."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s import lax
from s2s.errors import StagingError
from s2s.passes.vmap import Axis, axis_readers_in, batch_jaxpr
from s2s.primitives import elementwise as ew
from s2s.staging import named_axis
from tests.passes.batching import check_batching
from tests.passes.handbuilt import arr, build, names

SETTINGS = settings(max_examples=20, deadline=None)


def _rng(seed):
    return np.random.default_rng(seed)


def test_an_elementwise_chain_keeps_the_batch_where_it_is():
    closed = build(lambda x, w: ew.tanh.bind(ew.add.bind(ew.mul.bind(x, w), w)), arr(3, 4), arr(3, 4))
    batched, dims = batch_jaxpr(closed, [1, None], Axis(5), None)
    assert dims == [1]
    # No transpose of the batch; the weight gets a length-1 axis, never the batch's size.
    assert "transpose" not in names(batched) and "broadcast_in_dim" not in names(batched)
    assert batched.jaxpr.invars[1].aval.shape == (3, 4)


def test_an_equation_of_unbatched_operands_stays_unbatched():
    closed = build(lambda x, w: ew.mul.bind(x, ew.exp.bind(w)), arr(3), arr(3))
    batched, _ = batch_jaxpr(closed, [0, None], Axis(7), None)
    exp_eqn = next(e for e in batched.jaxpr.eqns if e.primitive is ew.exp)
    assert exp_eqn.outvars[0].aval.shape == (3,)


def test_an_unbatched_output_is_broadcast_only_when_asked():
    closed = build(lambda x, w: [ew.neg.bind(x), ew.exp.bind(w)], arr(2), arr(2))
    batched, dims = batch_jaxpr(closed, [0, None], Axis(4), [0, 1])
    assert dims == [0, 1]
    assert [v.aval.shape for v in batched.jaxpr.outvars] == [(4, 2), (2, 4)]
    with pytest.raises(StagingError, match="out_axes entry is None"):
        batch_jaxpr(closed, [0, None], Axis(4), [None, None])


UNARY = sorted(ew.UNARY, key=str)
POSITIVE = {"log", "sqrt", "rsqrt", "lgamma", "digamma", "polygamma", "acosh", "log1p"}
UNIT = {"asin", "acos", "atanh"}


@SETTINGS
@given(name=st.sampled_from(UNARY), rank=st.integers(0, 2), data=st.data())
def test_every_unary_primitive_batches_with_the_batch_anywhere(name, rank, data):
    prim = ew.UNARY[name]
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    dim = data.draw(st.integers(0, rank))
    batched_shape = shape[:dim] + (3,) + shape[dim:]
    x = _rng(data.draw(st.integers(0, 99))).uniform(-0.9, 0.9, batched_shape)
    if name in POSITIVE:
        x = np.abs(x) + 1.1
    params = {"n": 1} if name == "polygamma" else {}
    check_batching(lambda x: prim.bind(x, **params), [x], [dim])


BINARY = [ew.add, ew.sub, ew.mul, ew.max, ew.min, ew.atan2, ew.rem, ew.pow, ew.div, ew.eq,
          ew.ne, ew.lt, ew.le, ew.gt, ew.ge, ew.add_any]


@SETTINGS
@given(prim=st.sampled_from(BINARY), data=st.data())
def test_every_binary_primitive_broadcasts_batched_against_unbatched(prim, data):
    """Operands of different ranks (NumPy broadcasting), either one or both batched, each
    batch at any position of its operand."""
    x_shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    y_shape = x_shape[data.draw(st.integers(0, len(x_shape))):]
    if data.draw(st.booleans()):
        x_shape, y_shape = y_shape, x_shape
    dims = data.draw(st.sampled_from([(0, None), (None, 0), (0, 0), ("any", "any")]))
    rng = _rng(data.draw(st.integers(0, 99)))
    operands, in_dims = [], []
    for s, d in zip((x_shape, y_shape), dims):
        if d == "any":
            d = data.draw(st.integers(0, len(s)))
        value = rng.uniform(0.5, 2.0, s if d is None else s[:d] + (4,) + s[d:])
        operands.append(value)
        in_dims.append(d)
    check_batching(lambda x, y: prim.bind(x, y), operands, in_dims)


def test_integer_and_boolean_primitives_batch():
    x = np.arange(12, dtype=np.int64).reshape(4, 3)
    y = np.array([1, 2, 3], dtype=np.int64)
    for prim in (ew.and_, ew.or_, ew.xor):
        check_batching(lambda a, b: prim.bind(a, b), [x, y], [0, None])
    check_batching(lambda a: ew.not_.bind(a), [x > 4], [1])
    check_batching(lambda a: ew.integer_pow.bind(a, y=3), [x.astype(float)], [0])
    check_batching(lambda a: ew.convert_element_type.bind(a, new_dtype=np.dtype("float32"),
                                                          weak_type=False), [x], [1])


def test_select_and_clamp_with_some_operands_unbatched():
    rng = _rng(0)
    pred = rng.uniform(size=(3, 5)) > 0.5
    a, b = rng.normal(size=(5,)), rng.normal(size=(3, 5))
    check_batching(lambda p, x, y: ew.select.bind(p, x, y), [pred, a, b], [0, None, 0])
    check_batching(lambda p, x, y: ew.select.bind(p, x, y), [pred[0], a, b], [None, None, 0])
    check_batching(lambda p, x, y: ew.select.bind(p, x, y), [pred, a, b.T], [0, None, 1])
    lo, hi = np.float64(-0.2), rng.uniform(0, 1, size=(5, 3))
    check_batching(lambda l, x, h: ew.clamp.bind(l, x, h), [lo, b, hi], [None, 0, 1])


def _body(i, x):
    return lax.pmax(x, "i") + i


def _communicating(x):
    return lax.all_gather(lax.fori_loop(0, 2, _body, lax.psum(x, "i")), "i")


def test_axis_readers_in_lists_the_collectives_in_order_with_those_in_loop_bodies():
    with named_axis("i", 2):
        closed = build(_communicating, arr(3))
    assert names(closed) == ["psum", "scan", "all_gather"]
    assert axis_readers_in(closed.jaxpr) == ["psum", "pmax", "all_gather"]
