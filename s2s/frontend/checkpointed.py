"""Loops whose reverse mode keeps a bounded number of carries: `s2s.lax.scan(...,
checkpoints=k)` and `for t in s2s.checkpointed(range(n), k):`.

Reverse mode of a plain scan saves every step's residuals: memory grows with the number
of steps. Two schedules bound it:

- `checkpoints=k` (an int): one scan with the `checkpoints` parameter. Its forward pass
  saves nothing per step; its backward pass keeps at most k carries and recomputes the
  others from the nearest one below with a binomial schedule (revolve; the rules are in
  `primitives/loops/checkpoints.py`):

      kept        k carries, and one step's residuals
      recomputed  each step at most r times, r the least with C(k + r, r) >= n
                  (10,000 steps, k = 32: r = 4)

- `checkpoints="sqrt"`: the one-level schedule. The steps are split into about sqrt(n)
  segments (a count that divides n is preferred, within half of it: a leftover shorter
  segment is a second remat whose rows XLA copies out of the scanned arrays); the outer
  scan runs one segment per step, each a `remat` (`s2s.checkpoint` with
  `nothing_saveable`) of a scan over its steps, so the forward pass keeps one carry per
  segment and the backward pass reruns each segment forward from its carry, keeping that
  segment's residuals only while it runs the segment backwards:

      kept        sqrt(n) carries, and one segment's residuals (about sqrt(n) steps)
      recomputed  every step once

The values and the forward pass are those of the plain scan.
"""
from __future__ import annotations

import math

from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray
from s2s.errors import StagingError, api_boundary
from s2s.frontend.args import aval_of_arg
from s2s.primitives import loops as primitive_loops, ops
from s2s.primitives.remat import bind_remat, nothing_saveable
from s2s.staging import JaxprBuilder


class checkpointed:
    """`for t in s2s.checkpointed(range(n), k):` stages the loop as a scan whose reverse mode
    keeps at most `k` carries (or `"sqrt"`: see `s2s.lax.scan`'s `checkpoints`). Iterating
    it outside staging just iterates the range."""

    @api_boundary
    def __init__(self, iterable, checkpoints):
        if not isinstance(iterable, range):
            raise StagingError(f"s2s.checkpointed takes a range, not {type(iterable).__name__}",
                               "write `for t in s2s.checkpointed(range(n), k):`")
        schedule(len(iterable), checkpoints)      # a bad value is an error where it is written
        self.iterable = iterable
        self.checkpoints = checkpoints

    def __iter__(self):
        return iter(self.iterable)

    def __len__(self):
        return len(self.iterable)


def schedule(length: int, checkpoints) -> tuple[str, int] | None:
    """How reverse mode of a scan of `length` steps bounds what it keeps: ("slots", k) for
    the binomial schedule on k carries, ("segments", s) for the one-level schedule in s
    segments, None for a plain scan (every carry fits)."""
    if isinstance(checkpoints, str):
        if checkpoints != "sqrt":
            raise StagingError(f"checkpoints={checkpoints!r} is not a schedule s2s knows",
                               'pass the number of carries to keep (checkpoints=32) or "sqrt"')
        count = math.isqrt(max(length - 1, 0)) + 1
        if count >= length or count == 1:
            return None
        dividing = [s for s in range(max(2, count // 2), count + 1) if length % s == 0]
        return "segments", max(dividing) if dividing else count
    if isinstance(checkpoints, bool) or not isinstance(checkpoints, int) or checkpoints < 1:
        raise StagingError(f"checkpoints must be a positive int or \"sqrt\", not {checkpoints!r}",
                           "pass the number of carries reverse mode may keep, e.g. checkpoints=32")
    return None if checkpoints >= length else ("slots", checkpoints)


def bind_scan(jaxpr, consts: list, init: list, xs: list, length: int, reverse: bool, unroll: int,
              plan: tuple[str, int] | None) -> list:
    """Binds a scan of `length` steps of `jaxpr` (consts, carry, x -> carry, y) whose
    reverse mode keeps what `plan` (from `schedule`) says; returns the final carry and the
    stacked ys, as one scan does."""
    n_consts, n_carry = len(consts), len(init)
    if plan is None or plan[0] == "slots":
        return primitive_loops.scan.bind(*consts, *init, *xs, jaxpr=jaxpr, num_consts=n_consts, num_carry=n_carry,
                                         length=length, reverse=reverse, unroll=min(unroll, max(length, 1)),
                                         checkpoints=None if plan is None else plan[1])
    segments = plan[1]
    jaxpr, xs = _without_unread_xs(jaxpr, n_consts + n_carry, xs)    # a `range`'s unread counter goes
    per = -(-length // segments)                  # steps in a segment
    whole, rest = divmod(length, per)             # whole segments, and the steps left over

    def segment(steps: int):
        """(consts, carry, `steps` rows of xs) -> (carry, `steps` rows of ys): a plain scan,
        which the remat around it recomputes in the backward pass."""
        avals = [aval_of_arg(a) for a in (*consts, *init)] + [
            ShapedArray((steps,) + tuple(aval_of_arg(x).shape[1:]), aval_of_arg(x).dtype) for x in xs]
        with JaxprBuilder() as inner:
            args = [inner.new_arg(a, v.hint) for a, v in zip(avals, jaxpr.jaxpr.invars)]
            body = inner.build(bind_scan(jaxpr, args[:n_consts], args[n_consts:n_consts + n_carry],
                                         args[n_consts + n_carry:], steps, reverse, unroll, None))
        return body

    def whole_segments(carry):
        rows = [ops.reshape(ops.slice_in_dim(x, 0, whole * per), (whole, per) + tuple(x.shape[1:])) for x in xs]
        with JaxprBuilder() as step:
            avals = [aval_of_arg(a) for a in (*consts, *carry)] + [ShapedArray(tuple(r.shape[1:]), r.dtype)
                                                                   for r in rows]
            args = [step.new_arg(a, _segment_hint(v, n_consts + n_carry, k))
                    for k, (a, v) in enumerate(zip(avals, jaxpr.jaxpr.invars))]
            body = step.build(bind_remat(segment(per), args, policy=nothing_saveable, prevent_cse=True,
                                         differentiated=False))
        outs = primitive_loops.scan.bind(*consts, *carry, *rows, jaxpr=body, num_consts=n_consts,
                                         num_carry=n_carry, length=whole, reverse=reverse, unroll=1,
                                         checkpoints=None)
        return outs[:n_carry], [ops.reshape(y, (whole * per,) + tuple(y.shape[2:])) for y in outs[n_carry:]]

    def leftover_steps(carry):
        rows = [ops.slice_in_dim(x, whole * per, length) for x in xs]
        outs = bind_remat(segment(rest), [*consts, *carry, *rows], policy=nothing_saveable, prevent_cse=True,
                          differentiated=False)
        return outs[:n_carry], outs[n_carry:]

    if rest == 0:
        carry, ys = whole_segments(init)
    elif not reverse:
        carry, ys_whole = whole_segments(init)
        carry, ys_rest = leftover_steps(carry)
        ys = [ops.concatenate([a, b], 0) for a, b in zip(ys_whole, ys_rest)]
    else:                                         # backwards: the leftover steps come first
        carry, ys_rest = leftover_steps(init)
        carry, ys_whole = whole_segments(carry)
        ys = [ops.concatenate([a, b], 0) for a, b in zip(ys_whole, ys_rest)]
    return list(carry) + list(ys)



def _segment_hint(var, n_leading: int, position: int) -> str | None:
    """What the outer loop calls its operand `position`: the body's name for a constant or
    carry, `xs_segment` for the rows of `xs` one segment reads."""
    if position < n_leading or not var.hint:
        return var.hint
    return f"{var.hint}_segment"


def _without_unread_xs(jaxpr, n_leading: int, xs: list):
    """The body and scanned inputs without the inputs no step reads."""
    body = jaxpr.jaxpr
    read = {v for eqn in body.eqns for v in eqn.invars} | set(body.outvars)
    keep = [k for k, v in enumerate(body.invars[n_leading:]) if v in read]
    if len(keep) == len(xs):
        return jaxpr, xs
    invars = body.invars[:n_leading] + [body.invars[n_leading + k] for k in keep]
    return ClosedJaxpr(Jaxpr(body.constvars, invars, body.outvars, body.eqns), jaxpr.consts), [xs[k] for k in keep]
