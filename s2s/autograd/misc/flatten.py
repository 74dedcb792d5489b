"""autograd's `flatten`: nested tuples, lists and dicts of arrays as one vector, and back.

Optimizers and model code keep their parameters as a tree and step on a vector. Both
functions run inside functions s2s stages (a loss that unflattens its parameter vector,
under `grad` or `jit`): they are written with s2s.tree and with NumPy functions reached
through `call_user_code` (staged on staged arrays, NumPy's on NumPy values), slicing and
reshaping with the array's own methods, which staged arrays have too. So the gradient of
a loss of `unflatten(vector)` is a vector, and that of a loss of `flatten(tree)[0]` a tree.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from s2s.autograd.wrap_util import call_user_code
from s2s.tree import tree_flatten

__all__ = ["flatten", "flatten_func"]


def flatten(value):
    """`(vector, unflatten)`: the leaves of `value` raveled and concatenated (dicts in the
    order of their sorted keys, as autograd), and the function that cuts such a vector
    back into arrays of the leaves' shapes in `value`'s structure. Leaves of different
    dtypes share the vector's promoted dtype."""
    leaves, structure = tree_flatten(value)
    shapes = [np.shape(leaf) for leaf in leaves]
    ends = list(itertools.accumulate(math.prod(shape) for shape in shapes))
    starts = [0, *ends[:-1]]
    raveled = [call_user_code(np.ravel, (leaf,), {}) for leaf in leaves]
    vector = call_user_code(np.concatenate, (raveled,), {}) if raveled else np.zeros(0)

    def unflatten(vector):
        return structure.unflatten([vector[start:end].reshape(shape)
                                    for start, end, shape in zip(starts, ends, shapes)])
    return vector, unflatten


def flatten_func(func, example):
    """`(flat_func, unflatten, flat_example)` for a function `func(tree, *args)` of trees
    shaped as `example`: `flat_func(vector, *args)` is `func`'s output flattened, at
    `unflatten(vector)`."""
    flat_example, unflatten = flatten(example)

    def flat_func(vector, *args):
        return flatten(call_user_code(func, (unflatten(vector), *args), {}))[0]
    return flat_func, unflatten, flat_example
