"""Donated arguments (jit's and pmap's `donate_argnums`): which jaxpr inputs they are, and
the one mistake XLA would report unreadably (one buffer donated twice)."""
from __future__ import annotations

from s2s.emit.signature import leaf_expression
from s2s.errors import StagingError
from s2s.frontend import BoundCall, Staged
from s2s_runtime.array import Array


def donated_leaves(staged: Staged, call: BoundCall, donate_argnums) -> dict[int, str]:
    """{jaxpr input index: "`params['W']` of update"} for the leaves of donated positional
    args (jit's and pmap's `donate_argnums`)."""
    if not donate_argnums:
        return {}
    ranges = call.positional_leaf_ranges
    wanted = {i for a in donate_argnums if -len(ranges) <= a < len(ranges) for i in ranges[a]}
    donated, invar = {}, 0
    for leaf_index, (path, staged_leaf) in enumerate(zip(call.paths, staged.staged_mask)):
        if not staged_leaf:
            continue
        if leaf_index in wanted:
            name = staged.param_names[path[0][1]]
            shown = leaf_expression(name, path[1:]) or name
            donated[invar] = f"`{shown}` of {staged.name}"
        invar += 1
    return donated


def refuse_donating_twice(flat: list, donated: dict[int, str], offset: int) -> None:
    """XLA cannot give one buffer to two donated parameters: name both instead of its error."""
    first_label: dict[int, str] = {}
    for position, label in donated.items():
        value = flat[position - offset]
        if not isinstance(value, Array):
            continue
        if id(value) in first_label:
            raise StagingError(f"the same s2s.Array is donated twice: as {first_label[id(value)]} and as {label}",
                               "donate it once, or pass a copy to the other argument "
                               "(np.array(x), or s2s.jit(lambda v: v + 0)(x) to keep it on the device)")
        first_label[id(value)] = label
