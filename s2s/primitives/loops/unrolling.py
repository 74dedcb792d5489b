"""`scan(unroll=k)`: both backends write the equivalent of a scan whose body runs k steps
over blocks of k xs, and the steps left over (length % k) straight after it; with
k >= length no loop is left at all. `unrolled_scan` stages that equivalent."""
from __future__ import annotations

from s2s.core import ClosedJaxpr, ShapedArray, Var
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import closure_convert
from s2s.primitives.loops.definitions import scan, scan_split
from s2s.staging import JaxprBuilder, inline_jaxpr


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
