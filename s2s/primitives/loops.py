"""`while_loop` and `scan` and all their rules: structured loops, carrying their bodies as
jaxprs.

- `while_loop[cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_iters](*cond_consts,
  *body_consts, *init)`: while `cond_jaxpr(*cond_consts, *carry)`, carry =
  `body_jaxpr(*body_consts, *carry)`, and at most `max_iters` times unless it is None. A
  bound makes reverse mode possible: partial evaluation turns the loop into a scan of
  `max_iters` masked steps whose residuals fit fixed buffers, while a loop that is only run
  (or differentiated in forward mode) still stops as soon as its condition fails.
- `scan[jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints](*consts, *init,
  *xs)`: for i in range(length) (backwards when `reverse`), `carry, y = jaxpr(*consts,
  *carry, *(x[i] for x in xs))`; the outputs are the final carry and the ys stacked on a
  new leading axis. `checkpoints` (None, or a number of carries) changes nothing about
  the values, only what reverse mode keeps: at most that many carries, the rest
  recomputed (`loop_checkpoints.py`).

The two are one family because their rules lean on each other: a bounded while loop is
differentiated in reverse as a scan, both find their carries' tangents, unknowns and
needed values by the same fixed points, and both are written as Python loops. Their rules
are here, as for every family: abstract eval, NumPy impl, jvp, StableHLO lowering,
dead-code elimination into bodies, and batching (bodies batched, a loop whose condition
varies per example masked); their Python emission (real `while`/`for` statements) is in
`loop_emission.py`, their partial evaluation and transposition in `loop_reverse.py`.
`cond` (`cond.py`) is the other half of structured control flow (a masked step of a
bounded loop is one); what both use on their bodies is in `control_flow_bodies.py`.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var, eval_jaxpr
from s2s.emit import stablehlo as _hlo
from s2s.errors import ShapeError
from s2s.passes import dce as _dce, jvp as _jvp, vmap as _vmap
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.vmap import ANYWHERE, batch_jaxpr, move_axis, to_dim
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import (batched_carry_dims, closure_convert, constant_free,
                                                differentiable_mask, nonzero_mask, per_example_mask, prune_body,
                                                same_types, type_list)
from s2s.staging import JaxprBuilder, Primitive, inline_jaxpr


# ---------------------------------------------------------------------------------------
# Helpers on loop bodies


def permute(closed: ClosedJaxpr, in_order: list[int], out_order: list[int]) -> ClosedJaxpr:
    """`closed` with its inputs and outputs reordered (`in_order[k]`: the old index of new
    input k)."""
    jaxpr = closed.jaxpr
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, [jaxpr.invars[i] for i in in_order],
                             [jaxpr.outvars[i] for i in out_order], jaxpr.eqns), closed.consts)


# ---------------------------------------------------------------------------------------
# while_loop


def _while_abstract(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_iters):
    carry = list(avals[cond_nconsts + body_nconsts:])
    (pred,) = cond_jaxpr.out_avals
    if pred.shape != () or pred.dtype != dtypes.bool_:
        raise ShapeError(f"while_loop's condition must return a scalar bool, not {pred.str_short()}")
    if not same_types(list(body_jaxpr.out_avals), carry):
        raise ShapeError(f"while_loop's body returns ({type_list(body_jaxpr.out_avals)}) but the "
                         f"loop carries ({type_list(carry)})",
                         "return values of the same shapes and dtypes as the initial values")
    return [a.strip_weak_type() for a in carry]


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_iters):
    cond_consts = args[:cond_nconsts]
    body_consts = args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    steps = 0
    while (max_iters is None or steps < max_iters) and eval_jaxpr(cond_jaxpr, *cond_consts, *carry)[0]:
        carry = eval_jaxpr(body_jaxpr, *body_consts, *carry)
        steps += 1
    return carry


while_loop = Primitive("while_loop", _while_abstract, _while_impl, multiple_results=True)


# ---------------------------------------------------------------------------------------
# scan


def scan_split(items, num_consts, num_carry):
    """A scan's operands (or anything laid out like them) as (consts, carry, xs)."""
    return (items[:num_consts], items[num_consts:num_consts + num_carry],
            items[num_consts + num_carry:])


def _scan_abstract(*avals, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints=None):
    _, carry, xs = scan_split(list(avals), num_consts, num_carry)
    for x in xs:
        if not x.shape or x.shape[0] != length:
            raise ShapeError(f"scan over {length} steps got an array of shape {x.shape} to slice",
                             "every scanned array needs the scan's length as its leading axis")
    body_out = list(jaxpr.out_avals)
    if not same_types(body_out[:num_carry], carry):
        raise ShapeError(f"scan's body returns the carry as ({type_list(body_out[:num_carry])}) "
                         f"but it starts as ({type_list(carry)})",
                         "return a carry of the same shapes and dtypes as the initial one")
    ys = [ShapedArray((length,) + y.shape, y.dtype) for y in body_out[num_carry:]]
    return [c.strip_weak_type() for c in carry] + ys


def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints=None):
    consts, carry, xs = scan_split(list(args), num_consts, num_carry)
    ys_avals = jaxpr.out_avals[num_carry:]
    ys = [np.empty((length,) + a.shape, a.dtype) for a in ys_avals]
    for i in (reversed(range(length)) if reverse else range(length)):
        out = eval_jaxpr(jaxpr, *consts, *carry, *(x[i] for x in xs))
        carry = out[:num_carry]
        for buffer, y in zip(ys, out[num_carry:]):
            buffer[i] = y
    return [np.asarray(c, a.dtype) for c, a in zip(carry, jaxpr.out_avals[:num_carry])] + ys


scan = Primitive("scan", _scan_abstract, _scan_impl, multiple_results=True)


# ---------------------------------------------------------------------------------------
# jvp: each body is replaced by its JVP jaxpr. Loop carries whose tangent can become
# nonzero are found by iterating to a fixed point (a zero tangent stays symbolic only if
# the body keeps it zero).


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


# ---------------------------------------------------------------------------------------
# StableHLO: `stablehlo.while`; bodies read outer values directly (regions may capture
# them), and a scan is a while loop over a counter that slices the xs and writes the ys
# with dynamic (update) slices.


def _lower_while(ctx, eqn, *operands):
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts = list(operands[:n_cond]), list(operands[n_cond:n_cond + n_body])
    init = list(operands[n_cond + n_body:])
    body_invars = p["body_jaxpr"].jaxpr.invars[n_body:]
    avals, hints = [v.aval for v in eqn.outvars], [v.hint for v in body_invars]

    def condition(carry):
        return _hlo.lower_jaxpr(ctx, p["cond_jaxpr"].jaxpr, cond_consts + carry)

    def step(carry):
        return _hlo.lower_jaxpr(ctx, p["body_jaxpr"].jaxpr, body_consts + carry)
    if p["max_iters"] is None:
        return _hlo.while_op(ctx, init, avals, hints, condition, step)
    # A bounded loop also carries its step count: it runs while `i < max_iters and cond`
    # (counting in 64 bits when the bound needs them: `for _ in range(10**10): ... break`).
    count = dtypes.int32 if p["max_iters"] < 2 ** 31 else dtypes.int64
    counter = ShapedArray((), count)
    counter_type = _hlo.tensor_type(counter)

    def bounded_condition(carry):
        bound = ctx.constant(p["max_iters"], count)
        below = ctx.op(f"stablehlo.compare LT, {carry[0]}, {bound}, SIGNED : "
                       f"({counter_type}, {counter_type}) -> tensor<i1>")
        (holds,) = condition(carry[1:])
        return [ctx.op(f"stablehlo.and {below}, {holds} : tensor<i1>")]

    def counted_step(carry):
        following = ctx.op(f"stablehlo.add {carry[0]}, {ctx.constant(1, count)} : {counter_type}")
        return [following] + step(carry[1:])
    return _hlo.while_op(ctx, [ctx.constant(0, count)] + init, [counter] + avals, ["step"] + hints,
                         bounded_condition, counted_step)[1:]


def _lower_scan(ctx, eqn, *operands):
    p = eqn.params
    if p["unroll"] > 1:
        return _hlo.lower_jaxpr(ctx, unrolled_scan(eqn).jaxpr, list(operands))
    n_consts, n_carry, length = p["num_consts"], p["num_carry"], p["length"]
    body = p["jaxpr"].jaxpr
    consts, init, xs = scan_split(list(operands), n_consts, n_carry)
    x_avals = [v.aval for v in eqn.invars[n_consts + n_carry:]]
    ys_avals = [v.aval for v in eqn.outvars[n_carry:]]
    if length == 0:     # no steps: the initial carry, and empty ys
        return list(init) + [ctx.constant(0, a.dtype, a.shape) for a in ys_avals]
    carry_avals = [v.aval for v in eqn.outvars[:n_carry]]
    i32 = dtypes.int32
    ys_init = [ctx.constant(0, a.dtype, a.shape) for a in ys_avals]
    start = ctx.constant(0, i32)

    def condition(carry):
        bound = ctx.constant(length, i32)
        return [ctx.op(f"stablehlo.compare LT, {carry[0]}, {bound}, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>")]

    def step(carry):
        i, state, ys = carry[0], carry[1:1 + n_carry], carry[1 + n_carry:]
        position = i
        if p["reverse"]:
            last = ctx.constant(length - 1, i32)
            position = ctx.op(f"stablehlo.subtract {last}, {i} : tensor<i32>")
        zero = ctx.constant(0, i32)
        slices = []
        for x, aval, var in zip(xs, x_avals, body.invars[n_consts + n_carry:]):
            starts = ", ".join([position] + [zero] * (len(aval.shape) - 1))
            sizes = ", ".join(["1"] + [str(d) for d in aval.shape[1:]])
            one_row = ShapedArray((1,) + aval.shape[1:], aval.dtype)
            row = ctx.op(f"stablehlo.dynamic_slice {x}, {starts}, sizes = [{sizes}] : "
                         f"({_hlo.tensor_type(aval)}, {', '.join(['tensor<i32>'] * len(aval.shape))}) -> "
                         f"{_hlo.tensor_type(one_row)}")
            slices.append(ctx.op(f"stablehlo.reshape {row} : ({_hlo.tensor_type(one_row)}) -> "
                                 f"{_hlo.tensor_type(var.aval)}", var.hint))
        outs = _hlo.lower_jaxpr(ctx, body, list(consts) + list(state) + slices)
        new_ys = []
        for buffer, y, aval, y_var in zip(ys, outs[n_carry:], ys_avals, body.outvars[n_carry:]):
            one_row = ShapedArray((1,) + aval.shape[1:], aval.dtype)
            row = ctx.op(f"stablehlo.reshape {y} : ({_hlo.tensor_type(y_var.aval)}) -> {_hlo.tensor_type(one_row)}")
            starts = ", ".join([position] + [zero] * (len(aval.shape) - 1))
            new_ys.append(ctx.op(f"stablehlo.dynamic_update_slice {buffer}, {row}, {starts} : "
                                 f"({_hlo.tensor_type(aval)}, {_hlo.tensor_type(one_row)}, "
                                 f"{', '.join(['tensor<i32>'] * len(aval.shape))}) -> {_hlo.tensor_type(aval)}"))
        following = ctx.op(f"stablehlo.add {i}, {ctx.constant(1, i32)} : tensor<i32>")
        return [following] + outs[:n_carry] + new_ys

    hints = ["i"] + [v.hint for v in body.invars[n_consts:n_consts + n_carry]] + [v.hint or "ys" for v in eqn.outvars[n_carry:]]
    results = _hlo.while_op(ctx, [start] + list(init) + ys_init,
                        [ShapedArray((), i32)] + carry_avals + ys_avals, hints, condition, step)
    return results[1:]


_hlo.register(while_loop, _lower_while)
_hlo.register(scan, _lower_scan)


# ---------------------------------------------------------------------------------------
# scan(unroll=k): both backends write the equivalent of a scan whose body runs k steps over
# blocks of k xs, and the steps left over (length % k) straight after it; with k >= length
# no loop is left at all.


def _stack(rows):
    """`np.stack(rows)`: each row given a leading axis, then joined along it."""
    expanded = [ops.expand_dims(r, (0,)) for r in rows]
    return expanded[0] if len(expanded) == 1 else ops.concatenate(expanded, 0)


def unrolled_scan(eqn) -> ClosedJaxpr:
    """A jaxpr equal to the scan `eqn` (same inputs and outputs), its body unrolled by
    `unroll` steps."""
    p = eqn.params
    body, n_consts, n_carry, length, k = p["jaxpr"], p["num_consts"], p["num_carry"], p["length"], p["unroll"]
    reverse = p["reverse"]
    k = min(k, length)
    blocks, leftover = (length // k, length % k) if k else (0, length)
    if blocks == 1 and leftover == 0 and k == length:   # fully unrolled: no loop
        blocks, leftover = 0, length
    with JaxprBuilder() as builder:
        ins = [builder.new_arg(v.aval, v.hint if isinstance(v, Var) else None) for v in eqn.invars]
        consts, carry, xs = scan_split(ins, n_consts, n_carry)

        def steps(carry, xs_rows, indices):
            """Runs the body for `indices` (in loop order); returns the carry and ys rows."""
            ys_rows = {}
            for j in indices:
                rows = [ops.index_in_dim(x, j) for x in xs_rows]
                out = inline_jaxpr(body, list(consts) + list(carry) + rows)
                carry, ys_rows[j] = out[:n_carry], out[n_carry:]
            return carry, [[ys_rows[j][m] for j in sorted(ys_rows)] for m in range(len(body.out_avals) - n_carry)]

        # The leftover steps sit at the end of xs for a forward scan, at its start for a
        # reversed one (which runs them last).
        main = (0, blocks * k) if not reverse else (leftover, length)
        rest = range(blocks * k, length) if not reverse else range(0, leftover)
        ys_parts = []
        if blocks:
            blocked_xs = [ops.reshape(ops.slice_in_dim(x, *main), (blocks, k) + tuple(x.shape[1:]))
                          for x in xs]
            order = list(range(k))[::-1] if reverse else list(range(k))

            def block_body(*args):
                c, xb = list(args[n_consts:n_consts + n_carry]), args[n_consts + n_carry:]
                c, rows = steps(c, xb, order)
                return tuple(c) + tuple(_stack(r) for r in rows)
            with JaxprBuilder() as inner:
                args = [inner.new_arg(v.aval) for v in consts + list(carry)] + \
                    [inner.new_arg(ShapedArray((k,) + tuple(x.shape[1:]), x.dtype)) for x in xs]
                block_closed = inner.build(list(block_body(*args)))
            block_jaxpr, captured = closure_convert(block_closed)
            outs = scan.bind(*captured, *consts, *carry, *blocked_xs, jaxpr=block_jaxpr,
                             num_consts=len(captured) + n_consts, num_carry=n_carry, length=blocks,
                             reverse=reverse, unroll=1, checkpoints=None)
            carry = outs[:n_carry]
            ys_parts.append([ops.reshape(y, (blocks * k,) + tuple(y.shape[2:]))
                             for y in outs[n_carry:]])
        if rest:
            order = list(rest)[::-1] if reverse else list(rest)
            carry, rows = steps(carry, xs, order)
            rest_ys = [_stack(r) for r in rows]
            ys_parts = ys_parts + [rest_ys] if not reverse else [rest_ys] + ys_parts
        ys = [parts[0] if len(ys_parts) == 1 else ops.concatenate(parts, 0)
              for parts in zip(*ys_parts)] if ys_parts else []
        return builder.build(list(carry) + ys)


# ---------------------------------------------------------------------------------------
# Dead-code elimination into bodies: outputs nobody reads are not computed, and neither
# are loop carries that only feed them.


def _needed_carry(body: ClosedJaxpr, n_consts: int, needed: list[bool], ys_used=()) -> list[bool]:
    """The loop carries that must be computed: those `needed` to begin with, and those
    that feed a needed carry or a used output from one iteration to the next."""
    while True:
        _, reads = prune_body(body, needed + list(ys_used))
        updated = [a or b for a, b in zip(needed, reads[n_consts:n_consts + len(needed)])]
        if updated == needed:
            return needed
        needed = updated


def _scan_dce(eqn, used):
    p = eqn.params
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    body = p["jaxpr"]
    ys_used = list(used[n_carry:])
    carry_needed = _needed_carry(body, n_consts, list(used[:n_carry]), ys_used)
    pruned, reads = prune_body(body, carry_needed + ys_used)
    keep_in = reads[:n_consts] + carry_needed + reads[n_consts + n_carry:]
    new_body = Jaxpr([], [v for v, k in zip(pruned.invars, keep_in) if k], pruned.outvars, pruned.eqns)
    return JaxprEqn(scan, [v for v, k in zip(eqn.invars, keep_in) if k],
                    [v for v, k in zip(eqn.outvars, carry_needed + ys_used) if k],
                    dict(p, jaxpr=ClosedJaxpr(new_body, []), num_consts=sum(keep_in[:n_consts]),
                         num_carry=sum(carry_needed)), eqn.source_info)


def _while_dce(eqn, used):
    """Carries that neither the condition nor a used result depends on are dropped (the
    step counter of a `for` loop whose index nobody reads, say)."""
    p = eqn.params
    _, cond_reads = prune_body(p["cond_jaxpr"], [True])
    needed = _needed_carry(p["body_jaxpr"], p["body_nconsts"],
                           [u or r for u, r in zip(used, cond_reads[p["cond_nconsts"]:])])
    return _while_computing(eqn, needed)


def _while_computing(eqn, carries: list[bool]) -> JaxprEqn:
    """The while loop `eqn` computing only the flagged carries (the condition, and the
    body's steps for them, must read no other carry)."""
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    condition, cond_reads = prune_body(p["cond_jaxpr"], [True])
    body, body_reads = prune_body(p["body_jaxpr"], carries)
    keep_cond, keep_body = cond_reads[:n_cond] + carries, body_reads[:n_body] + carries

    def kept(jaxpr: Jaxpr, keep: list[bool]) -> ClosedJaxpr:
        return ClosedJaxpr(Jaxpr([], [v for v, k in zip(jaxpr.invars, keep) if k], jaxpr.outvars, jaxpr.eqns), [])
    operands = eqn.invars
    return JaxprEqn(while_loop,
                    [v for v, k in zip(operands[:n_cond], keep_cond) if k]
                    + [v for v, k in zip(operands[n_cond:n_cond + n_body], keep_body) if k]
                    + [v for v, k in zip(operands[n_cond + n_body:], carries) if k],
                    [v for v, k in zip(eqn.outvars, carries) if k],
                    dict(p, cond_jaxpr=kept(condition, keep_cond), body_jaxpr=kept(body, keep_body),
                         cond_nconsts=sum(keep_cond[:n_cond]), body_nconsts=sum(keep_body[:n_body])),
                    eqn.source_info)


_dce.register(scan, _scan_dce)
_dce.register(while_loop, _while_dce)


# ---------------------------------------------------------------------------------------
# Batching. Constants and scanned arrays keep their batch where it is (unbatched ones stay
# unbatched); a carry is batched where the body keeps it, once the fixed point of
# `batched_carry_dims` says the loop makes it vary over the batch. A while loop whose
# condition varies over the batch runs until every example is done, and a finished
# example's carry stops changing: each step selects the new carry only where the example's
# own condition still holds. A bound (`max_iters`) counts steps as before: an example
# stops at its own end or at the bound, whichever comes first, as in the loop over examples.


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


# ---------------------------------------------------------------------------------------
# `for t in range(n): ... xs[t] ...` is staged as a scan over the counter `np.arange(n)`
# with `xs` a constant of the body, read one row per step by a dynamic_slice at the
# counter. As written, reverse mode would transpose that read into a full-size
# `dynamic_update_slice` of zeros per step, summed into xs's cotangent, and the forward
# loop would index with a negative-index wrap it never needs. A constant read only so is
# the loop's scanned input (what `lax.scan(f, h, xs)` would have been given): each step
# reads its row directly, and its cotangent is one row written per step.


def _at_counter(atom, counters: set, producer: dict) -> bool:
    """Whether `atom` equals a scanned counter: the counter itself, or NumPy's wrap of a
    negative index `where(d < 0, d + n, d)` of a counter d (never negative, so the wrap is
    d)."""
    if atom in counters:
        return True
    eqn = producer.get(atom)
    if eqn is None or eqn.primitive is not ops.primitive(ops.select) or eqn.invars[2] not in counters:
        return False
    test = producer.get(eqn.invars[0])
    return (test is not None and test.primitive is ops.primitive(ops.lt) and test.invars[0] is eqn.invars[2]
            and getattr(test.invars[1], "value", None) == 0)


def _row_read(eqn, const, counters: set, producer: dict) -> bool:
    """Whether `eqn` is `dynamic_slice(const, counter, ...)` of one whole row of `const`
    (later start indices do not matter: a slice the whole size of an axis starts at 0)."""
    return (eqn.primitive is ops.primitive(ops.dynamic_slice) and eqn.invars[0] is const
            and eqn.params["slice_sizes"] == (1,) + tuple(const.aval.shape[1:])
            and const not in eqn.invars[1:]
            and _at_counter(eqn.invars[1], counters, producer))


def scanned_rows(body: ClosedJaxpr, num_consts: int, num_carry: int, length: int,
                 counter_xs: list[bool]) -> tuple[list[int], ClosedJaxpr]:
    """The body's constants that are read only a row per step at the step's counter
    (`counter_xs[k]`: the k-th scanned input is `arange(length)`), and the body with each
    of them taken as a scanned input instead (appended after the others, one row per step).
    The caller passes the first `length` rows of each such constant as that input."""
    jaxpr = body.jaxpr
    xs_vars = jaxpr.invars[num_consts + num_carry:]
    counters = {v for v, is_counter in zip(xs_vars, counter_xs) if is_counter}
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    users: dict = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            users.setdefault(v, []).append(eqn)
    chosen = [k for k, c in enumerate(jaxpr.invars[:num_consts])
              if counters and c.aval.shape and c.aval.shape[0] >= length and c not in jaxpr.outvars
              and users.get(c) and all(_row_read(e, c, counters, producer) for e in users[c])]
    if not chosen:
        return [], body
    rows = {jaxpr.invars[k]: Var(ShapedArray(jaxpr.invars[k].aval.shape[1:], jaxpr.invars[k].aval.dtype),
                                 jaxpr.invars[k].hint) for k in chosen}
    row_of_read: dict = {}   # a rewritten read's (1, ...) result -> the row it holds
    rename: dict = {}        # a squeeze of such a result -> the row
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive is ops.primitive(ops.dynamic_slice) and eqn.invars[0] in rows:
            (out,) = eqn.outvars
            row_of_read[out] = rows[eqn.invars[0]]
            eqn = JaxprEqn(ops.primitive(ops.broadcast_in_dim), [row_of_read[out]], [out],
                           dict(shape=out.aval.shape, broadcast_dimensions=tuple(range(1, out.aval.ndim))),
                           eqn.source_info)
        elif (eqn.primitive is ops.primitive(ops.squeeze) and eqn.params["dimensions"] == (0,)
              and eqn.invars[0] in row_of_read):
            rename[eqn.outvars[0]] = row_of_read[eqn.invars[0]]
            continue
        else:
            eqn = JaxprEqn(eqn.primitive, [rename.get(v, v) for v in eqn.invars], eqn.outvars, eqn.params,
                           eqn.source_info)
        eqns.append(eqn)
    kept = [v for k, v in enumerate(jaxpr.invars) if k not in chosen]
    rewritten = Jaxpr(jaxpr.constvars, kept + list(rows.values()), [rename.get(v, v) for v in jaxpr.outvars], eqns)
    return chosen, ClosedJaxpr(_dce.dce_jaxpr(rewritten), body.consts)
