"""Batching: the vmap transform of a jaxpr, as an interpreter with a rule per primitive.

`batch_jaxpr(closed, in_dims, axis)` builds the jaxpr that computes `closed` for every
example of a batch at once. An input's entry in `in_dims` is the position of its batch
axis, or None for an input shared by every example (a weight, a constant). Each equation
is handled by `batch_rules[primitive]`:

    rule(mapped, args, dims, /, **params) -> (out, out_dim)

where `args` are the operands (staged values or literals), `dims[i]` the position of
operand i's batch axis (None: unbatched), and `mapped` the `Axis` being mapped (its size,
and the name collectives refer to it by). The three are positional-only: a primitive's
parameters may be called `axis` (argmax, cumsum). A primitive with several results returns lists. The
batch axis is moved only when a rule needs it there, so a chain of elementwise operations
on a batch held at axis 1 stays at axis 1; an unbatched value is never broadcast to the
batch unless an operation truly needs every example's copy (a loop carry, an output).

An equation whose operands are all unbatched is re-staged as it is and its results stay
unbatched: no rule runs, so the weights of a per-example gradient are read once, not
once per example. Primitives that read the mapped axis itself (`axis_index`, `psum` over
its name) say so when registering (`reads_axis=True`) and are handed to their rule even
then. Variable names carry over: a batched `h` is still called `h`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Hashable

from s2s.core import ClosedJaxpr, Jaxpr, Literal, ShapedArray, aval_of_value, sub_jaxprs
from s2s.errors import StagingValueError
from s2s.passes import lax_ops
from s2s.staging import JaxprBuilder, Primitive, Tracer, current_builder, paused_gc

batch_rules: dict[Primitive, Callable] = {}
# Primitives whose rule must run even with unbatched operands: they read the mapped axis.
axis_readers: set[Primitive] = set()


@dataclasses.dataclass(frozen=True)
class Axis:
    """The axis a vmap maps over: its size, and the name collectives call it by (or None)."""
    size: int
    name: Hashable | None = None


def register(primitive: Primitive, rule: Callable, reads_axis: bool = False) -> None:
    batch_rules[primitive] = rule
    if reads_axis:
        axis_readers.add(primitive)


# ---------------------------------------------------------------------------------------
# Moving and making batch axes (the few equations every family's rules need)


def aval_of(x) -> ShapedArray:
    """The type of an operand: a staged value, a literal or a NumPy constant."""
    return x.aval if isinstance(x, (Tracer, Literal)) else aval_of_value(x)


def ndim(x) -> int:
    return aval_of(x).ndim


def shape(x) -> tuple[int, ...]:
    return tuple(aval_of(x).shape)


def example_shape(x, dim: int | None) -> tuple[int, ...]:
    """The shape of one example of `x` (batched at `dim`, or unbatched when None)."""
    s = shape(x)
    return s if dim is None else s[:dim] + s[dim + 1:]


def insert_at(values, at: int, value) -> tuple:
    """`values` as a tuple with `value` inserted at position `at` (a parameter restated
    for one more axis: a shape gets the batch size, a permutation the batch axis)."""
    values = list(values)
    values.insert(at, value)
    return tuple(values)


def move_axis(x, src: int, dst: int):
    """`x` with its axis `src` moved to position `dst` (the others keep their order)."""
    if src == dst:
        return x
    perm = [d for d in range(ndim(x)) if d != src]
    perm.insert(dst, src)
    return lax_ops.transpose(x, perm)


def broadcast_batch(x, size: int, dst: int):
    """An unbatched `x` copied for every example, the batch at `dst`: only where every
    example needs its own copy (a loop carry that becomes batched, a batched output)."""
    in_shape = shape(x)
    out_shape = in_shape[:dst] + (size,) + in_shape[dst:]
    dims = tuple(d if d < dst else d + 1 for d in range(len(in_shape)))
    return lax_ops.broadcast_in_dim(x, out_shape, dims)


def to_dim(x, dim: int | None, dst: int, size: int):
    """`x` (batched at `dim`, or unbatched when None) batched at `dst`."""
    if dim is None:
        return broadcast_batch(x, size, dst)
    return move_axis(x, dim, dst)


def to_front(x, dim: int | None, size: int):
    """`x` batched at axis 0 (broadcast when unbatched)."""
    return to_dim(x, dim, 0, size)


def batched_axis(axis: int, dim: int) -> int:
    """Where a per-example axis `axis` sits in a value batched at `dim`."""
    return axis + (axis >= dim)


def example_aval(aval: ShapedArray, dim: int | None) -> ShapedArray:
    """One example's type of a value batched at `dim` (the value's own when unbatched)."""
    if dim is None:
        return aval
    s = tuple(aval.shape)
    return ShapedArray(s[:dim] + s[dim + 1:], aval.dtype, aval.weak_type)


def batched_aval(aval: ShapedArray, dim: int | None, size: int) -> ShapedArray:
    if dim is None:
        return aval
    s = tuple(aval.shape)
    return ShapedArray(s[:dim] + (size,) + s[dim:], aval.dtype, aval.weak_type)


# ---------------------------------------------------------------------------------------
# Rule builders


def vectorized(primitive: Primitive) -> None:
    """Registers the rule of a primitive that acts on each element of its one operand
    alone (exp, neg, a dtype conversion): it runs on the batch where the batch lies."""
    def rule(mapped, args, dims, /, **params):
        out = primitive.bind(*args, **params)
        if primitive.multiple_results:
            return out, [dims[0]] * len(out)
        return out, dims[0]
    register(primitive, rule)


def align_for_broadcast(x, dim: int | None, out_dim: int, out_rank: int):
    """Operand `x` of an n-ary elementwise primitive (NumPy broadcasting, per-example
    result of rank `out_rank`), reshaped so that it broadcasts against a result batched at
    `out_dim`. An unbatched operand gets at most a length-1 axis (never the batch's size),
    and only when the batch axis falls inside its shape."""
    rank = ndim(x) - (dim is not None)
    if dim is None:
        lead = out_rank - rank       # per-example axes of the result before x's first
        if out_dim <= lead:
            return x
        return lax_ops.expand_dims(x, (out_dim - lead,))
    if rank == out_rank:
        return move_axis(x, dim, out_dim)
    # Fewer per-example axes than the result: pad with length-1 axes after the batch.
    x = move_axis(x, dim, 0)
    padded = (shape(x)[0],) + (1,) * (out_rank - rank) + shape(x)[1:]
    x = lax_ops.reshape(x, padded)
    return move_axis(x, 0, out_dim)


def broadcasting(primitive: Primitive) -> None:
    """Registers the rule of an n-ary elementwise primitive whose operands broadcast by
    NumPy's rules (add, select, clamp): the result is batched where the first full-rank
    batched operand is, and the other operands are aligned to it."""
    def rule(mapped, args, dims, /, **params):
        out_rank = max(ndim(x) - (d is not None) for x, d in zip(args, dims))
        out_dim = next((d for x, d in zip(args, dims)
                        if d is not None and ndim(x) - 1 == out_rank), 0)
        aligned = [align_for_broadcast(x, d, out_dim, out_rank) for x, d in zip(args, dims)]
        return primitive.bind(*aligned, **params), out_dim
    register(primitive, rule)


def unmapped(primitive: Primitive) -> None:
    """Registers the rule of a primitive without operands (iota): no operand of it can be
    batched, so it is always re-staged as it is and this rule only states that."""
    def rule(mapped, args, dims, /, **params):
        return primitive.bind(*args, **params), None
    register(primitive, rule)


# ---------------------------------------------------------------------------------------
# The interpreter


def _name(value, hint):
    if isinstance(value, Tracer) and value.variable.hint is None and hint is not None:
        value.variable.hint = hint


def reads_axis(eqn) -> bool:
    """Whether `eqn` reads the mapped axis even with every operand unbatched: its primitive
    is registered so (axis_index, psum), or a jaxpr it runs (a scan body, a cond branch)
    holds such an equation."""
    if eqn.primitive in axis_readers:
        return True
    return any(reads_axis(inner) for value in eqn.params.values()
               for jaxpr in sub_jaxprs(value) for inner in jaxpr.eqns)


def axis_readers_in(jaxpr: Jaxpr) -> list[str]:
    """The primitives of `jaxpr`'s equations that read a named axis (the collectives,
    axis_index), by name and in order, those in the jaxprs an equation runs at its place:
    what a mapped function communicates, as messages name it."""
    names = []
    for eqn in jaxpr.eqns:
        if eqn.primitive in axis_readers:
            names.append(eqn.primitive.name)
        names += [name for value in eqn.params.values() for inner in sub_jaxprs(value)
                  for name in axis_readers_in(inner)]
    return names


def batch_eqns(closed: ClosedJaxpr, args: list, dims: list, axis: Axis) -> tuple[list, list]:
    """Stages the batched `closed` into the current builder; returns (outputs, their dims)."""
    builder = current_builder()
    jaxpr = closed.jaxpr
    env: dict = {}

    def read(v):
        return (v, None) if isinstance(v, Literal) else env[v]

    for v, value in zip(jaxpr.constvars, closed.consts):
        env[v] = (value, None)
    for v, x, d in zip(jaxpr.invars, args, dims):
        env[v] = (x, d)
    for eqn in jaxpr.eqns:
        ins, in_dims = zip(*map(read, eqn.invars)) if eqn.invars else ((), ())
        multiple = eqn.primitive.multiple_results
        with builder.at(eqn.source_info):
            if all(d is None for d in in_dims) and not reads_axis(eqn):
                outs = eqn.primitive.bind(*ins, **eqn.params)
                outs, out_dims = (outs, [None] * len(outs)) if multiple else ([outs], [None])
            else:
                rule = batch_rules.get(eqn.primitive)
                if rule is None:
                    raise NotImplementedError(f"no batching rule for {eqn.primitive.name}")
                outs, out_dims = rule(axis, list(ins), list(in_dims), **eqn.params)
                if not multiple:
                    outs, out_dims = [outs], [out_dims]
        for v, x, d in zip(eqn.outvars, outs, out_dims):
            _name(x, v.hint)
            env[v] = (x, d)
    out = [read(v) for v in jaxpr.outvars]
    return [x for x, _ in out], [d for _, d in out]


# `out_dims` entry meaning: leave the output batched wherever the equations put it.
ANYWHERE = "anywhere"


def batch_jaxpr(closed: ClosedJaxpr, in_dims: list, axis: Axis, out_dims: list | None = None
                ) -> tuple[ClosedJaxpr, list]:
    """The batched jaxpr of `closed` and where each output's batch axis is.

    Inputs with a non-None `in_dims` entry take a batch of size `axis.size` at that
    position. `out_dims` says where each output's batch must be: an int moves it there
    (broadcasting an unbatched output), None requires an unbatched output (else a
    StagingValueError), `ANYWHERE` leaves it where it is; None for the whole list is
    `ANYWHERE` for every output.
    """
    jaxpr = closed.jaxpr
    if out_dims is None:
        out_dims = [ANYWHERE] * len(jaxpr.outvars)
    with paused_gc(), JaxprBuilder() as builder:
        args = [builder.new_arg(batched_aval(v.aval, d, axis.size), v.hint)
                for v, d in zip(jaxpr.invars, in_dims)]
        outs, dims = batch_eqns(closed, args, list(in_dims), axis)
        final, final_dims = [], []
        for index, (x, d, want) in enumerate(zip(outs, dims, out_dims)):
            if want is ANYWHERE:
                final.append(x)
                final_dims.append(d)
            elif want is None:
                if d is not None:
                    raise StagingValueError(f"output {index} varies over the mapped axis, but its "
                                       "out_axes entry is None",
                                       "give it an out_axes entry (0), or return a value that "
                                       "is the same for every example")
                final.append(x)
                final_dims.append(None)
            else:
                final.append(to_dim(x, d, want, axis.size))
                final_dims.append(want)
        result = builder.build(final)
    return result, final_dims
