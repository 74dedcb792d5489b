"""Loops whose reverse mode keeps a bounded number of carries: `s2s.lax.scan(...,
checkpoints=k)` and `for t in s2s.checkpointed(range(n), k):`.

Reverse mode of a plain scan saves every step's residuals: memory grows with the number
of steps. A checkpointed scan is one scan with `checkpoints=k`: its forward pass saves
nothing per step, and its backward pass keeps at most k carries, recomputing the others
from the nearest one below with a binomial schedule (revolve; the rules are in
`primitives/loop_checkpoints.py`):

    kept        k carries, and one step's residuals
    recomputed  each step at most r times, r the least with C(k + r, r) >= n
                (10,000 steps, k = 32: r = 4)

`checkpoints="sqrt"` takes k = ceil(sqrt(n)) (r = 2 for any n). The values and the
forward pass are those of the plain scan, as its emitted Python shows.
"""
from __future__ import annotations

import math

from s2s.errors import StagingError
from s2s.primitives import loops as primitive_loops


class checkpointed:
    """`for t in s2s.checkpointed(range(n), k):` stages the loop as a scan whose reverse mode
    keeps at most `k` carries (or `"sqrt"`: see `s2s.lax.scan`'s `checkpoints`). Iterating
    it outside staging just iterates the range."""

    def __init__(self, iterable, checkpoints):
        if not isinstance(iterable, range):
            raise StagingError(f"s2s.checkpointed takes a range, not {type(iterable).__name__}",
                               "write `for t in s2s.checkpointed(range(n), k):`")
        checkpoint_count(len(iterable), checkpoints)   # a bad value is an error where it is written
        self.iterable = iterable
        self.checkpoints = checkpoints

    def __iter__(self):
        return iter(self.iterable)

    def __len__(self):
        return len(self.iterable)


def checkpoint_count(length: int, checkpoints) -> int | None:
    """How many carries reverse mode of a scan of `length` steps keeps (None: a plain
    scan, every carry fits)."""
    if isinstance(checkpoints, str):
        if checkpoints != "sqrt":
            raise StagingError(f"checkpoints={checkpoints!r} is not a schedule s2s knows",
                               'pass the number of carries to keep (checkpoints=32) or "sqrt"')
        checkpoints = math.isqrt(max(length - 1, 0)) + 1
    elif isinstance(checkpoints, bool) or not isinstance(checkpoints, int) or checkpoints < 1:
        raise StagingError(f"checkpoints must be a positive int or \"sqrt\", not {checkpoints!r}",
                           "pass the number of carries reverse mode may keep, e.g. checkpoints=32")
    return None if checkpoints >= length else checkpoints


def bind_scan(jaxpr, consts: list, init: list, xs: list, length: int, reverse: bool, unroll: int,
              checkpoints: int | None) -> list:
    """Binds a scan of `length` steps of `jaxpr` (consts, carry, x -> carry, y) whose
    reverse mode keeps at most `checkpoints` carries (all when None); returns the final
    carry and the stacked ys."""
    return primitive_loops.scan.bind(*consts, *init, *xs, jaxpr=jaxpr, num_consts=len(consts), num_carry=len(init),
                                     length=length, reverse=reverse, unroll=min(unroll, max(length, 1)),
                                     checkpoints=checkpoints)
