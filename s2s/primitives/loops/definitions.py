"""What `while_loop` and `scan` compute: the two primitives, with their abstract evaluation
and NumPy impl, and the helpers every pass of theirs uses on their operands and bodies.

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
  recomputed (`checkpoints.py`).
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, eval_jaxpr
from s2s.errors import ShapeError
from s2s.primitives.control_flow_bodies import same_types, type_list
from s2s.staging import Primitive


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
