"""The loop family: `while_loop` and `scan`, structured loops carrying their bodies as
jaxprs, and `while_reverse`, the backward pass of a while loop without a bound.

The two loops are one family because their rules lean on each other: a bounded while loop
is differentiated in reverse as a scan, both find their carries' tangents, unknowns and
needed values by the same fixed points, and both are written as Python loops. So the
package is split by pass, not by primitive: each module holds both loops' rules for one
pass, and the helpers those rules share.

- `definitions.py`: what the primitives compute (parameters, abstract eval, NumPy impl).
  Public helpers: `scan_split` (a scan's operands as consts, carry, xs) and `permute` (a
  body with its inputs and outputs reordered).
- `jvp.py`: forward mode, the tangent carries found by a fixed point.
- `reverse.py`: partial evaluation (what the forward loop saves per step, loop-invariant
  values hoisted and saved once) and transposition. Public helper: `saved_by_loops` (what
  the loops of a jaxpr save for their backward pass, for tests and benchmarks).
- `checkpoints.py`: reverse mode on at most k carries (`scan[checkpoints=k]`, Griewank's
  revolve) and of unbounded while loops (`while_reverse`). Public helpers, for
  `reverse.py`: `unknown_carries`, `checkpointed_partial_eval`, `checkpointed_transpose`,
  `unbounded_while_transpose`.
- `dce.py`: dead-code elimination into bodies. Public helper: `while_computing` (a while
  loop cut down to some of its carries, which reverse mode uses too).
- `batching.py`: vmap of bodies; a while loop whose condition varies per example masked.
- `lowering.py`: StableHLO, `stablehlo.while`.
- `emission.py`: Python, real `while` / `for` statements written the way the source was.
- `unrolling.py`: `scan(unroll=k)` as both backends write it. Public helper:
  `unrolled_scan`.
- `scanned_constants.py`: a constant read one row per step at the loop's counter becomes a
  scanned input. Public helper: `scanned_rows`, which the front end calls.

Outside the package, modules name the primitives and `scanned_rows` here (`loops.scan`),
any other helper on its module (`loops.reverse.saved_by_loops`). `cond` (`cond.py`) is the
other half of structured control flow (a masked step of a bounded loop is one), and what
both use on their bodies is in `control_flow_bodies.py`.
"""
# Importing a module registers its rules.
from s2s.primitives.loops import (batching, checkpoints, dce, definitions, emission, jvp,  # noqa: F401
                                  lowering, reverse)
from s2s.primitives.loops.checkpoints import while_reverse  # noqa: F401
from s2s.primitives.loops.definitions import scan, while_loop  # noqa: F401
from s2s.primitives.loops.scanned_constants import scanned_rows  # noqa: F401
