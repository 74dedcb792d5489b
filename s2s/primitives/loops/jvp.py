"""Forward mode of `while_loop` and `scan`: each body is replaced by its JVP jaxpr. Loop
carries whose tangent can become nonzero are found by iterating to a fixed point (a zero
tangent stays symbolic only if the body keeps it zero)."""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from s2s.passes import jvp as _jvp
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.primitives.control_flow_bodies import differentiable_mask, nonzero_mask
from s2s.primitives.loops.definitions import permute, scan, scan_split, while_loop


def _carry_fixed_point(body: ClosedJaxpr, fixed_nonzero: list[bool], carry_nonzero: list[bool],
                       carry_out: slice, carry_avals) -> list[bool]:
    """Which carries have nonzero tangents through any number of iterations of `body`
    (inputs: fixed operands then carries; `carry_out`: where the carry sits in the outputs)."""
    differentiable = differentiable_mask(carry_avals)
    carry_nonzero = [nz and d for nz, d in zip(carry_nonzero, differentiable)]
    while True:
        _, out_nonzero = jvp_jaxpr(body, fixed_nonzero + carry_nonzero, instantiate_out=False)
        updated = [(a or b) and d for a, b, d in zip(carry_nonzero, out_nonzero[carry_out], differentiable)]
        if updated == carry_nonzero:
            return carry_nonzero
        carry_nonzero = updated


def _jvp_layout(n_in: int, in_nonzero: list[bool], groups: list[int]) -> list[int]:
    """Input order of a jvp jaxpr (primals, then the nonzero tangents) regrouped so that each
    group of primal inputs is followed by its own nonzero tangents: `groups` are sizes."""
    tangent_index = {}
    position = n_in
    for i, nz in enumerate(in_nonzero):
        if nz:
            tangent_index[i] = position
            position += 1
    order, start = [], 0
    for size in groups:
        order += list(range(start, start + size))
        order += [tangent_index[i] for i in range(start, start + size) if i in tangent_index]
        start += size
    return order


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_iters):
    n_fixed = cond_nconsts + body_nconsts
    carry = primals[n_fixed:]
    body_consts_nz = nonzero_mask(tangents[cond_nconsts:n_fixed])
    carry_avals = [a.strip_weak_type() for a in body_jaxpr.out_avals]
    carry_nz = _carry_fixed_point(body_jaxpr, body_consts_nz, nonzero_mask(tangents[n_fixed:]),
                                  slice(0, len(carry)), carry_avals)
    if not any(carry_nz):
        outs = while_loop.bind(*primals, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                               cond_nconsts=cond_nconsts, body_nconsts=body_nconsts, max_iters=max_iters)
        return outs, [Zero(tangent_aval(a)) for a in carry_avals]
    body_jvp, _ = jvp_jaxpr(body_jaxpr, body_consts_nz + carry_nz, instantiate_out=carry_nz)
    # body_jvp: (consts, carry, consts_dot, carry_dot) -> (carry, carry_dot); the loop wants
    # (consts, consts_dot, carry, carry_dot) -> (carry, carry_dot).
    n_consts = body_nconsts
    order = _jvp_layout(n_consts + len(carry), body_consts_nz + carry_nz, [n_consts, len(carry)])
    body_jvp = permute(body_jvp, order, list(range(len(body_jvp.jaxpr.outvars))))
    cond_jvp = _ignoring_tangents(cond_jaxpr, cond_nconsts, [tangent_aval(a) for a, nz in
                                                              zip(carry_avals, carry_nz) if nz])
    consts_dot = [instantiate(t) for t in tangents[cond_nconsts:n_fixed] if not is_zero(t)]
    carry_dot = [_zeros_or(t, a) for t, a, nz in zip(tangents[n_fixed:], carry_avals, carry_nz) if nz]
    outs = while_loop.bind(*primals[:cond_nconsts], *primals[cond_nconsts:n_fixed], *consts_dot,
                           *carry, *carry_dot, cond_jaxpr=cond_jvp, body_jaxpr=body_jvp,
                           cond_nconsts=cond_nconsts, body_nconsts=body_nconsts + len(consts_dot),
                           max_iters=max_iters)
    primal_out = outs[:len(carry)]
    tangent_out = iter(outs[len(carry):])
    return primal_out, [next(tangent_out) if nz else Zero(tangent_aval(a))
                        for a, nz in zip(carry_avals, carry_nz)]


def _zeros_or(t, aval):
    """`t`, or staged zeros of the tangent type of `aval` when it is a symbolic zero."""
    return instantiate(Zero(tangent_aval(aval))) if is_zero(t) else t


def _ignoring_tangents(closed: ClosedJaxpr, n_consts: int, tangent_avals) -> ClosedJaxpr:
    """`closed` (consts, carry) -> out, taking the carry's tangents too and ignoring them."""
    jaxpr = closed.jaxpr
    extra = [Var(a) for a in tangent_avals]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, list(jaxpr.invars) + extra, jaxpr.outvars, jaxpr.eqns),
                       closed.consts)


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints=None):
    consts_t, carry_t, xs_t = scan_split(list(tangents), num_consts, num_carry)
    consts, carry, xs = scan_split(list(primals), num_consts, num_carry)
    consts_nz, xs_nz = nonzero_mask(consts_t), nonzero_mask(xs_t)
    carry_avals = [a.strip_weak_type() for a in jaxpr.out_avals[:num_carry]]
    # The fixed point treats consts and xs as fixed operands: reorder the body's inputs.
    fixed_first = permute(jaxpr, list(range(num_consts)) + list(range(num_consts + num_carry, len(primals)))
                          + list(range(num_consts, num_consts + num_carry)),
                          list(range(len(jaxpr.jaxpr.outvars))))
    carry_nz = _carry_fixed_point(fixed_first, consts_nz + xs_nz, nonzero_mask(carry_t),
                                  slice(0, num_carry), carry_avals)
    ys_avals = jaxpr.out_avals[num_carry:]
    ys_differentiable = differentiable_mask(ys_avals)
    body_jvp, out_nz = jvp_jaxpr(jaxpr, consts_nz + carry_nz + xs_nz,
                                 instantiate_out=carry_nz + ys_differentiable)
    ys_nz = out_nz[num_carry:]
    n_xs = len(xs)
    order = _jvp_layout(len(primals), consts_nz + carry_nz + xs_nz, [num_consts, num_carry, n_xs])
    # outputs: (carry, ys, carry_dot[nz], ys_dot[nz]) -> (carry, carry_dot, ys, ys_dot)
    n_carry_dot, n_ys = sum(carry_nz), len(ys_avals)
    outs_order = (list(range(num_carry)) + list(range(num_carry + n_ys, num_carry + n_ys + n_carry_dot))
                  + list(range(num_carry, num_carry + n_ys))
                  + list(range(num_carry + n_ys + n_carry_dot, len(body_jvp.jaxpr.outvars))))
    body_jvp = permute(body_jvp, order, outs_order)
    consts_dot = [t for t in consts_t if not is_zero(t)]
    carry_dot = [_zeros_or(t, a) for t, a, nz in zip(carry_t, carry_avals, carry_nz) if nz]
    xs_dot = [t for t in xs_t if not is_zero(t)]
    outs = scan.bind(*consts, *consts_dot, *carry, *carry_dot, *xs, *xs_dot, jaxpr=body_jvp,
                     num_consts=num_consts + len(consts_dot), num_carry=num_carry + len(carry_dot),
                     length=length, reverse=reverse, unroll=unroll, checkpoints=checkpoints)
    carry_out = outs[:num_carry]
    carry_dot_out = iter(outs[num_carry:num_carry + n_carry_dot])
    ys_out = outs[num_carry + n_carry_dot:num_carry + n_carry_dot + n_ys]
    ys_dot_out = iter(outs[num_carry + n_carry_dot + n_ys:])
    tangents_out = [next(carry_dot_out) if nz else Zero(tangent_aval(a)) for a, nz in zip(carry_avals, carry_nz)]
    ys_avals_out = [ShapedArray((length,) + a.shape, a.dtype) for a in ys_avals]
    tangents_out += [next(ys_dot_out) if nz else Zero(tangent_aval(a)) for a, nz in zip(ys_avals_out, ys_nz)]
    return list(carry_out) + list(ys_out), tangents_out


_jvp.register(while_loop, _while_jvp)
_jvp.register(scan, _scan_jvp)
