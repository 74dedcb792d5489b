"""`vmap`: a function of one example, run on a whole batch at once.

    per_example_grads = s2s.vmap(s2s.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)

`vmap(fn)` stages `fn` for one example (each mapped argument without its batch axis),
batches the jaxpr (`s2s.passes.vmap`) and runs the result: inlined when called while
staging (under jit, grad or another vmap), else by its emitted module, which is plain
vectorized NumPy with no loop over the batch. `in_axes` and `out_axes` are as in JAX: ints
(negative counts from the end), None (not mapped: shared by every example) or tree
prefixes of the positional arguments and of the results; `axis_size` gives the batch size
when no argument is mapped; `axis_name` names the mapped axis for the collectives in
`s2s.lax` (`psum`, `pmean`, ...) called inside `fn`. As in JAX, arguments passed by
keyword are mapped along their axis 0 (`in_axes` covers the positional ones), and every
mapped axis must have the same size; a setting shared by every example is passed by
position with None in `in_axes`, or bound beforehand (`functools.partial`, a default).
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Hashable

import numpy as np

from s2s.core import ClosedJaxpr
from s2s.eager import run
from s2s.emit.signature import leaf_expression
from s2s.errors import StagingTypeError, StagingValueError, api_boundary
from s2s.frontend import BoundCall, Staged, bind_function_call, stage_call
from s2s.frontend.args import aval_of_arg, describe_arg, is_staged_leaf
from s2s.passes.simplify import tidy
from s2s.passes.vmap import Axis, batch_jaxpr, example_aval
from s2s.staging import Tracer, named_axis, paused_gc
from s2s.transformed import TransformedFunction, function_name
from s2s.tree import PyTreeDef, prefix_leaf_counts, tree_flatten

__all__ = ["vmap"]

_AXIS_HELP = "give in_axes as an int, None, or a tuple with one entry per positional argument"


def is_axis(spec) -> bool:
    """An entry of in_axes or out_axes (vmap's and pmap's): an int (not a bool) or None."""
    return spec is None or (isinstance(spec, (int, np.integer)) and not isinstance(spec, bool))


def axis_spec_tree(spec, what: str, transform: str = "vmap") -> tuple[list, PyTreeDef]:
    """The axes of `spec` (ints and Nones) and the tree they sit in (any pytree: tuples,
    lists, dicts, OrderedDicts, registered classes); a refused entry (a string, a float,
    True) is an error naming it."""
    leaves, treedef = tree_flatten(spec, is_leaf=is_axis)
    for leaf in leaves:
        if not is_axis(leaf):
            raise StagingTypeError(f"{transform} {what} must hold ints and None, got {leaf!r}",
                               f"write {what} like 0, None, or (0, None, {{'W': None, 'b': 0}})")
    return [None if a is None else int(a) for a in leaves], treedef


def check_axes_specs(in_axes, out_axes, transform: str) -> None:
    """vmap's and pmap's in_axes and out_axes checked when the transform is built, as JAX
    checks them: in_axes an int, None, or a tuple (or list) with one entry per positional
    argument; every entry of either an int, None or a container of them."""
    if not (is_axis(in_axes) or type(in_axes) in (tuple, list)):
        raise StagingTypeError(f"{transform} in_axes must be an int, None, or a tuple with one entry per "
                               f"positional argument, got {in_axes!r}",
                               f"wrap a tree of axes for one argument in a tuple: in_axes=({in_axes!r},)")
    axis_spec_tree(in_axes, "in_axes", transform)
    axis_spec_tree(out_axes, "out_axes", transform)


def axes_per_leaf(spec, tree: PyTreeDef, what: str, where: str, transform: str = "vmap") -> list:
    """`spec` (one int or None, or a tree prefix of `tree` holding them) broadcast to one
    axis per leaf of `tree`: how vmap and pmap read their in_axes and out_axes."""
    axes, spec_def = axis_spec_tree(spec, what, transform)
    try:
        counts = prefix_leaf_counts(spec_def, tree)
    except ValueError as e:
        raise StagingValueError(f"{transform} {what} {spec!r} is not a tree prefix of {where}: {e}",
                           f"give {what} the containers of {where} down to where one axis "
                           "applies to a whole subtree, or one int/None for all of it") from None
    return [a for a, n in zip(axes, counts) for _ in range(n)]


def positional_names(fn, count: int) -> list[str]:
    """What to call each positional argument in an error: its parameter's name."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"argument {i}" for i in range(count)]


@dataclasses.dataclass(frozen=True)
class MappedCall:
    """A call of a vmapped or pmapped function, split along its in_axes: the call one
    example (one device) sees, and where each leaf's batch lies."""
    example: BoundCall        # the call with each mapped leaf as one example's aval
    in_dims: tuple            # per leaf of the call: its batch axis, or None (shared)
    sizes: tuple              # (the leaf as the function reads it, its batch size) per mapped leaf

    def staged_dims(self, staged: Staged) -> list:
        """The batch axis of each jaxpr input."""
        return [d for d, m in zip(self.in_dims, staged.staged_mask) if m]

    def size(self, transform: str, help: str) -> int | None:
        """The batch size every mapped leaf has (None when no leaf is mapped); mapped
        leaves of different sizes are an error naming each, with `help`."""
        distinct = {n for _, n in self.sizes}
        if len(distinct) > 1:
            listed = ", ".join(f"{name} has size {n}" for name, n in self.sizes)
            raise StagingValueError(f"{transform} got mapped axes of different sizes: {listed}", help)
        return distinct.pop() if distinct else None


def split_call(transform: str, fn, in_axes, call: BoundCall, static: frozenset = frozenset()) -> MappedCall:
    """`call` split along `in_axes` (an int or None for every positional argument, or a
    tuple with one entry, itself a tree prefix, per positional argument): vmap's and pmap's
    one reading of their arguments. Arguments passed by keyword are mapped along axis 0,
    as JAX maps them; positional arguments in `static` (pmap's static_broadcasted_argnums)
    and parameters left to their defaults are shared by every example. A mapped leaf must
    be an array of rank 1 or more; sizes are for the caller to check."""
    if isinstance(in_axes, list):   # JAX reads a list as the tuple of positional axes
        in_axes = tuple(in_axes)
    name = getattr(fn, "__name__", "f")
    if isinstance(in_axes, tuple) and len(in_axes) != call.n_args:
        raise StagingValueError(f"{transform} in_axes has {len(in_axes)} entries but {name} was called with "
                           f"{call.n_args} positional arguments", _AXIS_HELP)
    names = positional_names(fn, call.n_args)
    if isinstance(in_axes, tuple):   # one entry per argument, each matched with it (and named by it)
        axes = [axis for spec, tree, name in zip(in_axes, call.positional_trees, names)
                for axis in axes_per_leaf(spec, tree, "in_axes", f"`{name}`", transform)]
    else:
        positional = PyTreeDef(tuple, None, tuple(call.positional_trees))
        axes = axes_per_leaf(in_axes, positional, "in_axes", "the positional arguments", transform)
    for index, leaves in enumerate(call.positional_leaf_ranges):
        if index in static:
            for i in leaves:
                axes[i] = None
    axes += [0 if call.names[param] in call.passed else None for param in call.param_of_leaf[len(axes):]]
    in_dims, sizes, example = [None] * len(call.leaves), [], list(call.leaves)
    for i, axis in enumerate(axes):
        if axis is None:
            continue
        leaf, described = call.leaves[i], _described_leaf(call, names, i)
        if not (isinstance(leaf, (Tracer, int, float)) or is_staged_leaf(leaf)):
            raise StagingTypeError(f"{transform} cannot map {described}: {describe_arg(leaf)} is not an array",
                               "pass arrays for mapped arguments, or None in in_axes")
        aval = aval_of_arg(leaf)
        if aval.ndim == 0:
            raise StagingValueError(f"{transform} was asked to map {described} along axis "
                               f"{axis}, but it is a scalar (rank 0)",
                               "pass an array with a batch axis, or None in in_axes for this argument")
        if not -aval.ndim <= axis < aval.ndim:
            raise StagingValueError(f"{transform} in_axes {axis} for {described} is out of range for an array "
                               f"of rank {aval.ndim} (the batch axis may be at 0..{aval.ndim - 1} or "
                               f"-{aval.ndim}..-1)", "map an axis the argument has, or pass None to not map it")
        in_dims[i] = axis % aval.ndim
        sizes.append((described, aval.shape[in_dims[i]]))
        example[i] = example_aval(aval, in_dims[i])
    return MappedCall(call.with_leaves(example), tuple(in_dims), tuple(sizes))


def _described_leaf(call: BoundCall, names: list[str], index: int) -> str:
    """A mapped leaf as the function reads it: `x`, `params['W1']` (an `*args` entry by its
    position, a `**kwargs` entry by its keyword)."""
    path = call.paths[index]
    param = call.names[path[0][1]]
    if param == call.var_positional:
        position = next(a for a, leaves in enumerate(call.positional_leaf_ranges) if index in leaves)
        name, rest = names[position], path[2:]
    elif param == call.var_keyword:
        name, rest = path[1][1], path[2:]
    else:
        name = names[path[0][1]] if path[0][1] < len(names) else param
        rest = path[1:]
    return f"`{leaf_expression(name, rest) or name}`"


def _normalize_out_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise StagingValueError(f"vmap out_axes {axis} is out of range for an array of rank {rank} "
                           f"(the batch axis may be at 0..{rank - 1} or -{rank}..-1)",
                           "map an axis the argument has, or pass None to not map it")
    return axis % rank


def hashable_axes(spec):
    """in_axes or out_axes as part of a cache key."""
    axes, treedef = axis_spec_tree(spec, "axes")
    return tuple(axes), treedef


class Vmapped(TransformedFunction):
    """`vmap(fn, ...)`: called like `fn`, on a batch."""

    def __init__(self, fn, in_axes, out_axes, axis_name, axis_size):
        name = function_name(fn)
        super().__init__(fn, "vmap", (hashable_axes(in_axes), hashable_axes(out_axes), axis_name, axis_size),
                         f"Vectorized version of {name}. Called with {name}'s arguments, each carrying an "
                         f"extra axis where in_axes says ({in_axes!r}), it maps {name} over that axis "
                         f"and stacks the results along out_axes ({out_axes!r}).")
        self.in_axes, self.out_axes = in_axes, out_axes
        self.axis_name, self.axis_size = axis_name, axis_size

    @api_boundary
    def __call__(self, *args, **kwargs):
        call = bind_function_call(self.fn, args, kwargs)
        mapped = split_call("vmap", self.fn, self.in_axes, call)
        size = self._size(mapped)
        if self.axis_name is None:   # staged as the plain function is: one staging for every batch size
            staged = stage_call(self.fn, mapped.example)
        else:
            with named_axis(self.axis_name, size):
                staged = stage_call(self.fn, mapped.example)
        in_dims = mapped.staged_dims(staged)
        key = ("vmap", tuple(in_dims), size, self.cache_params)
        batched = staged.artifact(key, lambda: self._batch(staged, in_dims, size))
        return staged.out_tree.unflatten(run(staged, key, batched, staged.inputs(call)))

    def _size(self, mapped: MappedCall) -> int:
        size = mapped.size("vmap", "every mapped argument needs the same batch size along its in_axes axis")
        if size is None:
            if self.axis_size is None:
                raise StagingValueError("vmap maps no argument (in_axes is None for all of them), so it "
                                   "cannot tell the batch size", "pass axis_size=N")
            return int(self.axis_size)
        if self.axis_size is not None and self.axis_size != size:
            raise StagingValueError(f"vmap axis_size={self.axis_size}, but the mapped arguments have size "
                               f"{size}", "drop axis_size, or make them agree")
        return size

    def _batch(self, staged: Staged, in_dims: list, size: int) -> ClosedJaxpr:
        """The batched jaxpr of `staged`, outputs moved to `out_axes`."""
        axes = axes_per_leaf(self.out_axes, staged.out_tree, "out_axes", "the results")
        out_dims = [None if a is None else _normalize_out_axis(a, v.aval.ndim + 1)
                    for a, v in zip(axes, staged.closed.jaxpr.outvars)]
        with paused_gc():
            return tidy(batch_jaxpr(staged.closed, in_dims, Axis(size, self.axis_name), out_dims)[0])


def _check_axis(axis_name, axis_size) -> None:
    if axis_size is not None and (not isinstance(axis_size, (int, np.integer)) or isinstance(axis_size, bool)
                                  or axis_size < 0):
        raise StagingTypeError(f"vmap axis_size must be a non-negative int, got {axis_size!r}",
                           "pass the number of examples, e.g. axis_size=8")
    try:
        hash(axis_name)
    except TypeError:
        raise StagingTypeError(f"vmap axis_name must be hashable, got {axis_name!r}",
                           "name the axis with a string, e.g. axis_name='batch'") from None


@api_boundary
def vmap(fn: Callable[..., Any] | None = None, in_axes: Any = 0, out_axes: Any = 0, axis_name: Hashable | None = None,
         axis_size: int | None = None) -> Callable[..., Any]:
    """`fn` mapped over a batch axis of its arguments (jax.vmap); usable as a decorator,
    bare or with arguments."""
    if fn is None:
        return lambda f: vmap(f, in_axes, out_axes, axis_name, axis_size)
    check_axes_specs(in_axes, out_axes, "vmap")
    _check_axis(axis_name, axis_size)
    return Vmapped(fn, in_axes, out_axes, axis_name, axis_size)
