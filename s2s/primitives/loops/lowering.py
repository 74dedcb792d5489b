"""StableHLO lowering of `while_loop` and `scan`: `stablehlo.while`; bodies read outer
values directly (regions may capture them), and a scan is a while loop over a counter that
slices the xs and writes the ys with dynamic (update) slices. A scan with `unroll` > 1 is
lowered as its unrolled equivalent (`unrolling.py`). A loop whose condition or body draws
random numbers carries the generators' states too (`_hlo.drawn_in`), so each step draws
anew."""
from __future__ import annotations

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.primitives.loops.definitions import scan, scan_split, while_loop
from s2s.primitives.loops.unrolling import unrolled_scan


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
    drawn = _hlo.drawn_in(p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr)
    if p["max_iters"] is None:
        return _hlo.while_op(ctx, init, avals, hints, condition, step, drawn)
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
                         bounded_condition, counted_step, drawn)[1:]


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
                        [ShapedArray((), i32)] + carry_avals + ys_avals, hints, condition, step,
                        _hlo.drawn_in(body))
    return results[1:]


_hlo.register(while_loop, _lower_while)
_hlo.register(scan, _lower_scan)
