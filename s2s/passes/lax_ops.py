"""The ops the passes stage, and the one way an op reaches its primitive.

Passes sit below the primitive families, yet a few of them stage equations of their own:
a symbolic zero made real is a broadcast, two cotangents add with `add_any`, unbroadcasting
sums and reshapes, vmap moves and makes batch axes. They cannot import the families that
declare those primitives, so they use the ops here, which this layer's test table puts
below the passes (`tests/test_layers.py`): this module imports no pass and no family.

The mechanism, used by these ops and by every op of `s2s.primitives.ops` built on them:
an op is declared with `@binds("name")`, the one place a primitive's name is written, and
`bind(op, ...)` stages it, looking the primitive up in the registry (`staging.PRIMITIVES`)
when called, so the family that declares it need only have been imported by the time a
rule runs. `primitive(op)` is the same lookup for code that recognizes or writes an
equation of another family's primitive (`eqn.primitive is primitive(ops.pad)`). No pass
and no family reads the registry itself (`tests/test_layers.py` checks that).
"""
from __future__ import annotations

from typing import Callable

from s2s.staging import PRIMITIVES, Primitive


def binds(name: str) -> Callable:
    """Declares the decorated op as staging the primitive registered as `name`."""
    def declare(op):
        op.primitive_name = name
        return op
    return declare


def primitive(op) -> Primitive:
    """The primitive `op` stages (a family declares it; the registry finds it)."""
    return PRIMITIVES[op.primitive_name]


def bind(op, *args, **params):
    """Stages `op`'s primitive on `args` (or runs its NumPy impl outside any builder)."""
    return primitive(op).bind(*args, **params)


def ints(values) -> tuple[int, ...]:
    """Static sizes or axes as a tuple of Python ints (as the jaxpr's params print them)."""
    return tuple(int(v) for v in values)


@binds("add_any")
def add_any(x, y):
    """The sum of two tangents or cotangents of one type, as AD writes it."""
    return bind(add_any, x, y)


@binds("broadcast_in_dim")
def broadcast_in_dim(x, shape, broadcast_dimensions):
    """`x` broadcast to `shape`; its axis i becomes axis `broadcast_dimensions[i]`."""
    return bind(broadcast_in_dim, x, shape=ints(shape), broadcast_dimensions=ints(broadcast_dimensions))


@binds("reshape")
def reshape(x, shape):
    """`x` with the same elements in `shape` (C order); `x` itself when nothing changes."""
    shape = ints(shape)
    return x if tuple(x.shape) == shape else bind(reshape, x, new_sizes=shape)


@binds("transpose")
def transpose(x, permutation):
    """`x` with its axes permuted; `x` itself for the identity permutation."""
    permutation = ints(permutation)
    if permutation == tuple(range(len(permutation))):
        return x
    return bind(transpose, x, permutation=permutation)


@binds("expand_dims")
def expand_dims(x, dimensions):
    """`x` with new axes of length 1 at `dimensions` (positions in the result)."""
    return bind(expand_dims, x, dimensions=tuple(sorted(dimensions)))


@binds("reduce_sum")
def reduce_sum(x, axes):
    """The sum of `x` over `axes` (dtype preserved)."""
    return bind(reduce_sum, x, axes=ints(axes))
