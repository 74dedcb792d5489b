"""Small jaxprs built by hand for the unit tests of the passes: every equation in them is
one the test wrote with `primitive.bind`, so a test can say exactly what a pass must do."""
from __future__ import annotations

import numpy as np

from s2s.core import ShapedArray, check_jaxpr, eval_jaxpr
from s2s.staging import JaxprBuilder


def arr(*shape, dtype="float64") -> ShapedArray:
    return ShapedArray(shape, np.dtype(dtype))


def build(fn, *avals):
    """The closed jaxpr `fn` stages on fresh inputs of `avals`; `fn` returns one output or a
    list of them."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(aval) for aval in avals]
        outs = fn(*args)
        return builder.build(list(outs) if isinstance(outs, (list, tuple)) else [outs])


def names(closed) -> list[str]:
    """The primitives of `closed`'s equations, in order."""
    return [eqn.primitive.name for eqn in closed.jaxpr.eqns]


def assert_equivalent(before, after, *args) -> None:
    """`after` is a well-formed jaxpr computing what `before` computes on `args`."""
    check_jaxpr(after)
    expected, got = eval_jaxpr(before, *args), eval_jaxpr(after, *args)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
        assert np.asarray(g).dtype == np.asarray(e).dtype
