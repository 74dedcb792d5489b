"""What structured control flow shares: helpers on the jaxprs that `cond.py`, the loops
(`loops/`), `remat.py` and `pmapped.py` carry as bodies, and on writing a body's results.

Body jaxprs are closed with no constants: whatever a body reads from outside is an explicit
operand (`closure_convert`, which the front end also uses when it stages a body). Here too:
checking that bodies agree on types, which tangents are nonzero, which inputs a body pruned
to some of its outputs still reads (dead-code elimination into bodies), which loop carries
a batch makes vary per example, and the one simultaneous assignment that Python emission
writes a body's results with. No primitive is declared here.
"""
from __future__ import annotations

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from s2s.emit.pyexpr import Expr
from s2s.passes.dce import dce_jaxpr
from s2s.passes.vmap import align_for_broadcast, batch_jaxpr
from s2s.passes.tangents import is_zero
from s2s.passes.transpose import transpose_jaxpr
from s2s.staging import JaxprBuilder, inline_jaxpr


def closure_convert(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """`closed` with its constvars turned into leading invars, and the constants' values
    (arrays, or staged values of an enclosing function) to pass for them."""
    jaxpr = closed.jaxpr
    converted = Jaxpr([], list(jaxpr.constvars) + list(jaxpr.invars), jaxpr.outvars, jaxpr.eqns)
    return ClosedJaxpr(converted, []), list(closed.consts)


def same_types(a: list[ShapedArray], b: list[ShapedArray]) -> bool:
    """Whether two lists of types agree, weak types aside."""
    return len(a) == len(b) and all(x.strip_weak_type() == y.strip_weak_type() for x, y in zip(a, b))


def type_list(avals) -> str:
    """`f32[3], i32[]`: types as error messages list them."""
    return ", ".join(a.str_short() for a in avals)


def nonzero_mask(tangents) -> list[bool]:
    """Which tangents are not symbolic zeros."""
    return [not is_zero(t) for t in tangents]


def differentiable_mask(avals) -> list[bool]:
    """Which types get real tangents (otherwise float0)."""
    return [dtypes.is_differentiable(a.dtype) for a in avals]


def prune_body(closed: ClosedJaxpr, keep_out: list[bool]) -> tuple[Jaxpr, list[bool]]:
    """The body computing only the kept outputs, and which of its inputs it still reads."""
    jaxpr = closed.jaxpr
    body = dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars,
                           [v for v, k in zip(jaxpr.outvars, keep_out) if k], jaxpr.eqns))
    read = {v for e in body.eqns for v in e.invars if isinstance(v, Var)}
    read |= {v for v in body.outvars if isinstance(v, Var)}
    return body, [v in read for v in jaxpr.invars]


def write_assignment(block, targets: list[str], values: list[Expr], comment: str) -> None:
    """`a, b = x, y` (one simultaneous assignment, so a loop carry can swap values), with
    the comment of the statement it belongs to: every line says where it comes from. A
    target given its own value (summed in place already) is left out."""
    pairs = [(t, v) for t, v in zip(targets, values) if t != v.text]
    targets, values = [t for t, _ in pairs], [v for _, v in pairs]
    if targets:
        block.line(f"{', '.join(targets)} = {', '.join(v.text for v in values)}{comment}")


def write_body_in_place(block, body: Jaxpr, args: list[Expr], names: list, comment: str) -> list[Expr]:
    """Writes `body` (a remat's, a pmap's reference) in `block`'s lines on `args`; an
    output the statement rule was given a name for (`names`, None where not) ends up
    assigned to it. Returns the outputs' expressions."""
    targets = {v: n for v, n in zip(body.outvars, names) if n is not None and isinstance(v, Var)}
    results = block.write_inline(body, args, targets=targets)
    pending = [(n, r) for n, r in zip(names, results) if n is not None and r.text != n]
    write_assignment(block, [n for n, _ in pending], [r for _, r in pending], comment)
    return [Expr(n) if n is not None else r for n, r in zip(names, results)]


def batched_carry_dims(body: ClosedJaxpr, body_dims, init_dims: list, axis) -> list:
    """Where each loop carry's batch axis lies (None: unbatched) in the batched loop.

    A carry is batched if it starts batched or if the body makes it so from a batched
    operand, which can take several iterations to show (carry a feeds b feeds c): the body
    is batched again until nothing changes. A carry then sits where the body puts it, if
    the body keeps it there: moving an initial value once beats moving the carry back on
    every step. `body_dims(carry_dims)` gives the body's input dims; its first outputs are
    the new carry.
    """
    dims = list(init_dims)
    while True:
        _, out_dims = batch_jaxpr(body, body_dims(dims), axis)
        updated = [o if d is None else d for d, o in zip(dims, out_dims)]
        if updated == dims:
            break
        dims = updated
    natural = [d if o is None else o for d, o in zip(dims, out_dims)]
    if natural != dims and batch_jaxpr(body, body_dims(natural), axis)[1][:len(dims)] == natural:
        return natural
    return dims


def constant_free(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """A batched body as loops carry it (no constants): `closure_convert`, whose constants
    go before the body's own."""
    if not closed.consts:
        return closed, []
    return closure_convert(closed)


def per_example_mask(pred, shape, dim: int):
    """A batch of booleans (one per example, `pred` of shape (size,)) shaped to broadcast
    against values of `shape` batched at `dim` (length-1 axes elsewhere: `pred[:, None]`,
    not a copy per element), for a select that picks each example's own value."""
    if tuple(pred.aval.shape) == tuple(shape):
        return pred
    return align_for_broadcast(pred, 0, dim, len(shape) - 1)


def recomputed_first(closed: ClosedJaxpr, linear: list[bool]) -> tuple[ClosedJaxpr, ClosedJaxpr]:
    """The equations of a linear body (a loop's step, a cond's branch) that read no linear
    value (those partial evaluation copied to recompute, cheap), split off: (non-linear
    inputs -> their values still read, and the rest of the body taking those values as new
    leading inputs), so the rest is linear and transposes, and the backward step or branch
    computes them forward first."""
    jaxpr = closed.jaxpr
    linear_vars = {v for v, lin in zip(jaxpr.invars, linear) if lin}
    forward, rest = [], []
    for eqn in jaxpr.eqns:
        if any(isinstance(v, Var) and v in linear_vars for v in eqn.invars):
            linear_vars.update(eqn.outvars)
            rest.append(eqn)
        else:
            forward.append(eqn)
    read = {v for e in rest for v in e.invars if isinstance(v, Var)} | set(jaxpr.outvars)
    values = [v for e in forward for v in e.outvars if v in read]
    nonlinear_in = [v for v, lin in zip(jaxpr.invars, linear) if not lin]
    return (ClosedJaxpr(Jaxpr(jaxpr.constvars, nonlinear_in, values, forward), closed.consts),
            ClosedJaxpr(Jaxpr(jaxpr.constvars, values + list(jaxpr.invars), jaxpr.outvars, rest), closed.consts))


def transposed_body(branch: ClosedJaxpr, linear: list[bool]) -> ClosedJaxpr:
    """A body with no loop to run (a cond's branch, a remat's body) transposed:
    (non-linear operands, cotangents) -> the linear operands' cotangents. What partial
    evaluation copied into the body to recompute (`X.T` from X) reads no linear value: it
    is computed forward first."""
    recomputed, rest = recomputed_first(branch, linear)
    transposed = transpose_jaxpr(rest, [False] * len(recomputed.jaxpr.outvars) + linear)
    with JaxprBuilder() as builder:
        nonlinear = [builder.new_arg(v.aval, v.hint) for v, lin in zip(branch.jaxpr.invars, linear) if not lin]
        cts = [builder.new_arg(v.aval) for v in branch.jaxpr.outvars]
        again = inline_jaxpr(recomputed, nonlinear)
        return builder.build(inline_jaxpr(transposed, again + nonlinear + cts))
