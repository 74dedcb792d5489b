"""Sorting several arrays together, which NumPy spells in three calls.

`sort_multi(keys_and_values..., axis=, num_keys=)` is what emitted code calls for a
multi-operand `sort`: the first `num_keys` arrays are the sort keys, compared
lexicographically (first key most significant), the sort is stable, and every array is
permuted the same way. NaNs sort to the end, as in `np.sort`.
"""
from __future__ import annotations

import numpy as np


def sort_order(*keys, axis: int = -1):
    """The stable permutation along `axis` that sorts `keys` lexicographically."""
    if len(keys) == 1:
        return np.argsort(keys[0], axis=axis, kind="stable")
    # np.lexsort's last key is the most significant one; it is stable.
    return np.lexsort(keys[::-1], axis=axis)


def sort_multi(*operands, axis: int = -1, num_keys: int = 1):
    """All `operands`, each permuted along `axis` by the stable sort of the first `num_keys`."""
    if not 1 <= num_keys <= len(operands):
        raise ValueError(f"num_keys={num_keys} needs between 1 and {len(operands)} keys")
    operands = [np.asarray(op) for op in operands]
    order = sort_order(*operands[:num_keys], axis=axis)
    return tuple(np.take_along_axis(op, order, axis=axis) for op in operands)


__all__ = ["sort_multi", "sort_order"]
