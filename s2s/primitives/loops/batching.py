"""Batching of `while_loop` and `scan`. Constants and scanned arrays keep their batch where
it is (unbatched ones stay unbatched); a carry is batched where the body keeps it, once the
fixed point of `batched_carry_dims` says the loop makes it vary over the batch. A while
loop whose condition varies over the batch runs until every example is done, and a
finished example's carry stops changing: each step selects the new carry only where the
example's own condition still holds. A bound (`max_iters`) counts steps as before: an
example stops at its own end or at the bound, whichever comes first, as in the loop over
examples."""
from __future__ import annotations

from s2s.core import ClosedJaxpr
from s2s.passes import vmap as _vmap
from s2s.passes.vmap import ANYWHERE, batch_jaxpr, move_axis, to_dim
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import batched_carry_dims, constant_free, per_example_mask
from s2s.primitives.loops.definitions import scan, scan_split, while_loop
from s2s.staging import JaxprBuilder, inline_jaxpr


def _scan_batch(axis, args, dims, *, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints=None):
    consts, carry, xs = scan_split(list(args), num_consts, num_carry)
    const_dims, init_dims, xs_dims = scan_split(list(dims), num_consts, num_carry)
    # Axis 0 of a scanned array is the scan's: its batch goes to 1 if it is there.
    xs = [move_axis(x, 0, 1) if d == 0 else x for x, d in zip(xs, xs_dims)]
    xs_dims = [1 if d == 0 else d for d in xs_dims]
    slice_dims = [None if d is None else d - 1 for d in xs_dims]
    carry_dims = batched_carry_dims(jaxpr, lambda c: const_dims + c + slice_dims, init_dims, axis)
    carry = _carry_at(carry, init_dims, carry_dims, axis)
    body, body_dims = batch_jaxpr(jaxpr, const_dims + carry_dims + slice_dims, axis,
                                  carry_dims + [ANYWHERE] * (len(jaxpr.out_avals) - num_carry))
    body, body_consts = constant_free(body)
    outs = scan.bind(*body_consts, *consts, *carry, *xs, jaxpr=body, num_consts=len(body_consts) + num_consts,
                     num_carry=num_carry, length=length, reverse=reverse, unroll=unroll, checkpoints=checkpoints)
    ys_dims = [None if d is None else d + 1 for d in body_dims[num_carry:]]
    return outs, carry_dims + ys_dims


def _carry_at(carry: list, dims: list, carry_dims: list, axis) -> list:
    """The initial carry, batched at `dims`, moved (or copied per example) to `carry_dims`."""
    return [x if d == want else to_dim(x, d, want, axis.size) for x, d, want in zip(carry, dims, carry_dims)]


def _while_batch(axis, args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_iters):
    n_fixed = cond_nconsts + body_nconsts
    cond_consts, body_consts, carry = args[:cond_nconsts], args[cond_nconsts:n_fixed], args[n_fixed:]
    cond_dims, body_const_dims, init_dims = dims[:cond_nconsts], dims[cond_nconsts:n_fixed], dims[n_fixed:]
    carry_dims = batched_carry_dims(body_jaxpr, lambda c: body_const_dims + c, init_dims, axis)
    _, (pred_dim,) = batch_jaxpr(cond_jaxpr, cond_dims + carry_dims, axis)
    if pred_dim is not None:     # each example stops on its own: every carry is per example
        carry_dims = [0 if d is None else d for d in carry_dims]
    carry = _carry_at(carry, init_dims, carry_dims, axis)
    new_cond, (pred_dim,) = batch_jaxpr(cond_jaxpr, cond_dims + carry_dims, axis)
    new_body, _ = batch_jaxpr(body_jaxpr, body_const_dims + carry_dims, axis, carry_dims)
    if pred_dim is not None:
        new_body = _masked_step(new_cond, new_body, cond_nconsts, carry_dims, pred_dim)
        new_cond = _any_holds(new_cond, pred_dim)
        body_consts = list(cond_consts) + list(body_consts)
    new_cond, extra_cond = constant_free(new_cond)
    new_body, extra_body = constant_free(new_body)
    outs = while_loop.bind(*extra_cond, *cond_consts, *extra_body, *body_consts, *carry,
                           cond_jaxpr=new_cond, body_jaxpr=new_body,
                           cond_nconsts=len(extra_cond) + cond_nconsts,
                           body_nconsts=len(extra_body) + len(body_consts), max_iters=max_iters)
    return outs, carry_dims


def _any_holds(batched_cond: ClosedJaxpr, pred_dim: int) -> ClosedJaxpr:
    """The condition of the batched loop: whether any example's condition holds."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(a, v.hint) for a, v in zip(batched_cond.in_avals, batched_cond.jaxpr.invars)]
        (pred,) = inline_jaxpr(batched_cond, args)
        return builder.build([ops.reduce_or(pred, (pred_dim,))])


def _masked_step(batched_cond: ClosedJaxpr, batched_body: ClosedJaxpr, cond_nconsts: int,
                 carry_dims: list, pred_dim: int) -> ClosedJaxpr:
    """The body of the batched loop (taking the condition's constants, then the body's,
    then the carry): one step for the examples whose condition holds; the others' carry
    is kept as it is."""
    n_carry = len(carry_dims)
    cond_const_avals = batched_cond.in_avals[:cond_nconsts]
    with JaxprBuilder() as builder:
        cond_consts = [builder.new_arg(a) for a in cond_const_avals]
        body_args = [builder.new_arg(a, v.hint) for a, v in zip(batched_body.in_avals, batched_body.jaxpr.invars)]
        carry = body_args[len(body_args) - n_carry:]
        (pred,) = inline_jaxpr(batched_cond, cond_consts + carry)
        stepped = inline_jaxpr(batched_body, body_args)
        kept = [ops.select(per_example_mask(pred, new.aval.shape, d), new, old)
                for new, old, d in zip(stepped, carry, carry_dims)]
        return builder.build(kept)


_vmap.register(scan, _scan_batch)
_vmap.register(while_loop, _while_batch)
