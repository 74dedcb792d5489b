"""`vmap`: a function of one example, run on a whole batch at once.

    per_example_grads = s2s.vmap(s2s.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)

`vmap(fn)` stages `fn` for one example (each mapped argument without its batch axis),
batches the jaxpr (`s2s.passes.vmap`) and runs the result: inlined when called while
staging (under jit, grad or another vmap), else by its emitted module, which is plain
vectorized NumPy with no loop over the batch. `in_axes` and `out_axes` are as in JAX: ints
(negative counts from the end), None (not mapped: shared by every example) or tree
prefixes of the positional arguments and of the results; `axis_size` gives the batch size
when no argument is mapped; `axis_name` names the mapped axis for the collectives in
`s2s.lax` (`psum`, `pmean`, ...) called inside `fn`. Keyword arguments are shared by every
example, never mapped (jax.vmap maps them along axis 0): a keyword is how a caller passes
a setting (`scale=0.5`, a weight), and mapping it would need an `in_axes` entry it cannot
have.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect

import numpy as np

from s2s.core import ClosedJaxpr
from s2s.eager import run, staged_or_error
from s2s.emit.signature import leaf_expression
from s2s.errors import StagingError, api_boundary
from s2s.frontend import Staged, transform_description
from s2s.frontend.args import aval_of_arg, describe_arg, is_staged_leaf
from s2s.passes.simplify import tidy
from s2s.passes.vmap import Axis, batch_jaxpr, example_aval
from s2s.staging import Tracer, named_axis, paused_gc
from s2s.tree import PyTreeDef, flatten_up_to, leaf_paths, tree_flatten

__all__ = ["vmap"]

_AXIS_HELP = "give in_axes as an int, None, or a tuple with one entry per positional argument"


def is_axis(spec) -> bool:
    """An entry of in_axes or out_axes (vmap's and pmap's): an int (not a bool) or None."""
    return spec is None or (isinstance(spec, (int, np.integer)) and not isinstance(spec, bool))


def axis_spec_tree(spec, what: str, transform: str = "vmap") -> tuple[list, PyTreeDef]:
    """The axes of `spec` (ints and Nones) and the tree they sit in; a refused entry (a
    string, a float, True) is an error naming it."""
    leaves, treedef = tree_flatten(spec, is_leaf=is_axis)
    for leaf in leaves:
        if not is_axis(leaf):
            raise StagingError(f"{transform} {what} must hold ints and None, got {leaf!r}",
                               f"write {what} like 0, None, or (0, None, {{'W': None, 'b': 0}})")
    return [None if a is None else int(a) for a in leaves], treedef


def axes_per_leaf(spec, tree, what: str, where: str, transform: str = "vmap") -> list:
    """`spec` (one int or None, or a tree prefix of `tree` holding them) broadcast to one
    axis per leaf of `tree`: how vmap and pmap read their in_axes and out_axes."""
    axes, spec_def = axis_spec_tree(spec, what, transform)
    try:
        subtrees = flatten_up_to(spec_def, tree)
    except ValueError as e:
        raise StagingError(f"{transform} {what} {spec!r} is not a tree prefix of {where}: {e}",
                           f"give {what} the containers of {where} down to where one axis "
                           "applies to a whole subtree, or one int/None for all of it") from None
    return [a for a, sub in zip(axes, subtrees) for _ in range(len(tree_flatten(sub)[0]))]


def _normalize(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise StagingError(f"vmap {what} is out of range for an array of rank {rank} "
                           f"(the batch axis may be at 0..{rank - 1} or -{rank}..-1)",
                           "map an axis the argument has, or pass None to not map it")
    return axis % rank


@dataclasses.dataclass(frozen=True)
class _Call:
    """A call of a vmapped function: per-example arguments and where each batch lies."""
    example_args: tuple
    in_dims: tuple            # per leaf of the positional arguments: batch axis or None
    size: int


def positional_names(fn, count: int) -> list[str]:
    """What to call each positional argument in an error: its parameter's name."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"argument {i}" for i in range(count)]


def _describe_leaf(names: list[str], path: tuple) -> str:
    """A mapped leaf as the function reads it: `x`, `params['W1']`."""
    name = names[path[0][1]]
    return f"`{leaf_expression(name, path[1:]) or name}`"


def _split_call(fn, in_axes, axis_size, args: tuple) -> _Call:
    if isinstance(in_axes, list):   # JAX reads a list as the tuple of positional axes
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple) and len(in_axes) != len(args):
        raise StagingError(f"vmap in_axes has {len(in_axes)} entries but {getattr(fn, '__name__', 'f')} was called with "
                           f"{len(args)} positional arguments", _AXIS_HELP)
    leaves, treedef = tree_flatten(args)
    axes = axes_per_leaf(in_axes, args, "in_axes", "the positional arguments")
    names = positional_names(fn, len(args))
    paths = leaf_paths(treedef)
    in_dims, sizes, example = [], [], []
    for leaf, axis, path in zip(leaves, axes, paths):
        if axis is None:
            in_dims.append(None)
            example.append(leaf)
            continue
        described = _describe_leaf(names, path)
        if not (isinstance(leaf, (Tracer, int)) or is_staged_leaf(leaf)):
            raise StagingError(f"vmap cannot map {described}: "
                               f"{describe_arg(leaf)} is not an array",
                               "pass arrays for mapped arguments, or None in in_axes")
        aval = aval_of_arg(leaf)
        if aval.ndim == 0:
            raise StagingError(f"vmap was asked to map {described} along axis "
                               f"{axis}, but it is a scalar (rank 0)",
                               "pass an array with a batch axis, or None in in_axes for this argument")
        d = _normalize(axis, aval.ndim, f"in_axes {axis} for {described}")
        in_dims.append(d)
        sizes.append((described, aval.shape[d]))
        example.append(example_aval(aval, d))
    distinct = sorted({n for _, n in sizes})
    if len(distinct) > 1:
        listed = ", ".join(f"{name} has size {n}" for name, n in sizes)
        raise StagingError(f"vmap got mapped axes of different sizes: {listed}",
                           "every mapped argument needs the same batch size along its in_axes axis")
    if sizes:
        if axis_size is not None and axis_size != distinct[0]:
            raise StagingError(f"vmap axis_size={axis_size}, but the mapped arguments have size "
                               f"{distinct[0]}", "drop axis_size, or make them agree")
        size = distinct[0]
    elif axis_size is None:
        raise StagingError("vmap maps no argument (in_axes is None for all of them), so it "
                           "cannot tell the batch size", "pass axis_size=N")
    else:
        size = int(axis_size)
    return _Call(treedef.unflatten(example), tuple(in_dims), size)


def _hashable_spec(spec):
    axes, treedef = axis_spec_tree(spec, "axes")
    return tuple(axes), treedef


class Vmapped:
    """`vmap(fn, ...)`: called like `fn`, on a batch. An s2s transform: staged through
    directly, and cached under the user's function keyed by its parameters."""

    __s2s_transform__ = True

    def __init__(self, fn, in_axes, out_axes, axis_name, axis_size):
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.in_axes, self.out_axes = in_axes, out_axes
        self.axis_name, self.axis_size = axis_name, axis_size
        self.transform = "vmap"
        self.cache_params = ("vmap", _hashable_spec(in_axes), _hashable_spec(out_axes),
                             axis_name, axis_size)
        inner = getattr(fn, "__name__", "f")
        self.__name__ = f"vmap_{inner}" if inner.isidentifier() else "vmap"
        self.__qualname__ = self.__name__

    def describe(self) -> str:
        return transform_description("vmap", self.fn)

    def __repr__(self):
        return f"<s2s {self.describe()}>"

    @api_boundary
    def __call__(self, *args, **kwargs):
        call = _split_call(self.fn, self.in_axes, self.axis_size, args)
        if self.axis_name is None:   # staged as the plain function is: one staging for every batch size
            staged = staged_or_error(self.fn, call.example_args, kwargs)
        else:
            with named_axis(self.axis_name, call.size):
                staged = staged_or_error(self.fn, call.example_args, kwargs)
        key = ("vmap", call.in_dims, call.size, self.cache_params)
        batched, out_dims = staged.artifact(key, lambda: self._batch(staged, call))
        outs = run(staged, key, batched, staged.flat_inputs(args, kwargs))
        return staged.out_tree.unflatten(outs)

    def _batch(self, staged: Staged, call: _Call) -> tuple[ClosedJaxpr, list]:
        """The batched jaxpr of `staged`, outputs moved to `out_axes`."""
        in_dims = _staged_dims(staged, call)
        outs = staged.out_tree.unflatten(range(staged.out_tree.num_leaves))
        axes = axes_per_leaf(self.out_axes, outs, "out_axes", "the results")
        out_dims = [None if a is None else _normalize(a, v.aval.ndim + 1, f"out_axes {a}")
                    for a, v in zip(axes, staged.closed.jaxpr.outvars)]
        with paused_gc():
            batched, dims = batch_jaxpr(staged.closed, in_dims, Axis(call.size, self.axis_name), out_dims)
            return tidy(batched), dims


def _staged_dims(staged: Staged, call: _Call) -> list:
    """The batch axis of each jaxpr input: positional leaves' from the call, those of
    keyword arguments (and of defaults) None: they are shared by every example."""
    positional = list(call.in_dims)
    leaf_dims = positional + [None] * (len(staged.staged_mask) - len(positional))
    return [d for d, m in zip(leaf_dims, staged.staged_mask) if m]


def _check_axis(axis_name, axis_size) -> None:
    if axis_size is not None and (not isinstance(axis_size, (int, np.integer)) or isinstance(axis_size, bool)
                                  or axis_size < 0):
        raise StagingError(f"vmap axis_size must be a non-negative int, got {axis_size!r}",
                           "pass the number of examples, e.g. axis_size=8")
    try:
        hash(axis_name)
    except TypeError:
        raise StagingError(f"vmap axis_name must be hashable, got {axis_name!r}",
                           "name the axis with a string, e.g. axis_name='batch'") from None


@api_boundary
def vmap(fn=None, in_axes=0, out_axes=0, axis_name=None, axis_size=None):
    """`fn` mapped over a batch axis of its arguments (jax.vmap); usable as a decorator,
    bare or with arguments."""
    if fn is None:
        return lambda f: vmap(f, in_axes, out_axes, axis_name, axis_size)
    if not callable(fn):
        raise TypeError(f"vmap needs a function, got {type(fn).__name__}")
    axis_spec_tree(in_axes, "in_axes")
    axis_spec_tree(out_axes, "out_axes")
    _check_axis(axis_name, axis_size)
    return Vmapped(fn, in_axes, out_axes, axis_name, axis_size)
