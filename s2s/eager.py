"""Running what a transform staged on NumPy values, by its emitted Python module.

`jit(backend="python")` and the transforms called on NumPy values (`grad(f)(x)`, `jvp`,
`vjp`, ...) run what they staged the same way: the jaxpr is emitted as a Python module,
executed once, and the function kept in the `Staged`'s artifacts, so it lives as long as
the user's function and is shared by every caller of the same staging. Called on staged
values (inside another transform) the jaxpr is inlined instead (`run`).
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np

from s2s.core import ClosedJaxpr
from s2s.emit.python import EmitOptions, EmittedModule, Signature, emit_jaxpr_module, emit_module, load_source
from s2s.emit.signature import emitted_docstring, emitted_signature
from s2s.frontend import BoundCall, Staged
from s2s.frontend.args import describe_arg
from s2s.staging import Tracer, current_builder, inline_jaxpr, paused_gc
from s2s.tree import leaf_paths, register_array_type, tree_map
from s2s_runtime.array import Array

# What jit returns is an array, a leaf of every pytree (as NumPy arrays are): results can
# be passed back to jit, to the transforms, and to the emitted modules they run.
register_array_type(Array)


def function_name(staged: Staged, name: str | None = None) -> str:
    """The emitted function's name: `name`, else the user's, else `f` (a lambda's `<lambda>`)."""
    name = name or staged.name
    return name if name.isidentifier() else "f"


def emitted_module(staged: Staged, name: str | None = None,
                   options: EmitOptions | None = None) -> EmittedModule:
    """The module `s2s emit` writes for a staged function: its signature is the user's."""
    name = function_name(staged, name)
    signature = emitted_signature(staged)
    docstring = emitted_docstring(staged, name, _param_descriptions(staged, signature))
    with paused_gc():
        return emit_module(staged.closed, name, signature, docstring, options)


def _param_descriptions(staged: Staged, signature: Signature) -> list[str | None]:
    """How the header shows each parameter: its type, or for a static one (`n_steps`,
    a default such as `scale=0.5`) the value the module was specialized for; None for one
    the emitted function leaves out (the tangent of a static value, an empty `*args`)."""
    has_staged_leaf = [False] * len(staged.param_names)
    for path, staged_leaf in zip(leaf_paths(staged.in_tree), staged.staged_mask):
        has_staged_leaf[path[0][1]] |= staged_leaf
    kept = {p if p in staged.param_names else p[: -len("_leaves")] for p in signature.params}
    return [None if name not in kept else describe_arg(value) if staged_leaf else repr(value)
            for name, value, staged_leaf in zip(staged.param_names, staged.example_args, has_staged_leaf)]


# How a module run in this process is emitted: its large constants are handed to it as the
# arrays staging captured (a global, or the part of one a static slice read), not written
# out as base64 text to be compiled and decoded again (a 60 MB training set read by the
# function took 5 s per emission). They are the user's arrays: see `_unaliased`.
IN_PROCESS = EmitOptions(const_mode="memory")


def emitted_function(staged: Staged, key, name: str,
                     write_module: Callable[[str, EmitOptions], EmittedModule]) -> Callable:
    """The function `name` of the module `write_module(name, IN_PROCESS)` returns, emitted
    and executed once per (`staged`, `key`) and kept in the staged function's artifacts.
    The host objects it takes (the generators it draws from) are bound to it: this
    process's own."""
    def load():
        module = write_module(name, IN_PROCESS)
        handed = {const_name: _read_only(value) for const_name, value in module.sidecar.items()}
        loaded = load_source(module.source, name, module_globals={"_consts": handed})
        function = getattr(loaded, name)
        consts = [value for value in vars(loaded).values() if isinstance(value, np.ndarray)]
        if consts:
            function = _unaliased(function, consts)
        return functools.partial(function, **module.host_parameters) if module.host_parameters else function
    return staged.artifact(("python", key), load)


def _read_only(value) -> np.ndarray:
    """A view of a constant the emitted code may read but not write: a write (which emitted
    code never makes) would change the user's global array."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def _unaliased(function: Callable, consts: list) -> Callable:
    """`function` returning a copy of each output that may share memory with one of the
    module's constants (a gradient that is a global array, a slice of one, or a small
    constant written in the module): what a caller gets is its own array, never the global
    nor a constant later calls read (changing a gradient returned as such a constant
    changed every later gradient)."""
    def copy_if_shared(leaf):
        if isinstance(leaf, np.ndarray) and any(np.may_share_memory(leaf, c) for c in consts):
            return leaf.copy()
        return leaf

    @functools.wraps(function)
    def call(*args, **kwargs):
        out = function(*args, **kwargs)
        if type(out) is np.ndarray:   # (the common results first: a flat tree_map costs more than the call)
            return copy_if_shared(out)
        if type(out) is tuple and all(type(leaf) is np.ndarray for leaf in out):
            return tuple(map(copy_if_shared, out))
        return tree_map(copy_if_shared, out)
    return call


def run_emitted_jaxpr(staged: Staged, key, closed: ClosedJaxpr, flat_args: list) -> list:
    """The flat outputs of `closed` on NumPy values (or Arrays), by its emitted module.

    `closed` is derived from `staged` (a derivative, say) and always the same for `key`:
    its module is emitted once, under that key.
    """
    run = emitted_function(staged, key, "f", lambda name, options: emit_jaxpr_module(closed, name, options=options))
    out = run(*host_leaves(flat_args, [v.aval.dtype for v in closed.jaxpr.invars]))
    return list(out) if len(closed.jaxpr.outvars) != 1 else [out]


def host_value(value):
    """An s2s.Array as the NumPy array emitted modules compute with; other values as they are."""
    return np.asarray(value) if isinstance(value, Array) else value


def host_leaves(leaves, staged_dtypes, canonicalize: bool = False) -> list:
    """Staged leaves as the emitted code expects them: arrays, never Python scalars.

    Emitted code indexes and reshapes its inputs (`v[None]`), which a Python float cannot
    take; a leaf that is not an array yet becomes one of the dtype staging gave it, as the
    XLA backend converts it. With `canonicalize`, arrays are converted to that dtype too.
    """
    out = []
    for leaf, dtype in zip(map(host_value, leaves), staged_dtypes, strict=True):
        if not isinstance(leaf, np.ndarray):
            leaf = np.asarray(leaf, dtype)
        elif canonicalize:
            leaf = leaf.astype(dtype, copy=False)
        out.append(leaf)
    return out


def emitted_call_args(staged: Staged, signature: Signature, call: BoundCall,
                      canonicalize: bool = False) -> tuple[list, dict]:
    """The emitted function's positional and keyword arguments for a call of the user's
    function, each parameter passed as its kind says (`signature.kinds`).

    With `canonicalize`, each staged array leaf is converted to the dtype it was staged
    as (what `enable_x64=False` needs: float64 inputs run as float32).
    """
    names, treedef = list(call.names), call.tree
    leaves = [host_value(leaf) for leaf in call.leaves]
    staged_leaves = iter(host_leaves([leaf for leaf, m in zip(leaves, staged.staged_mask) if m],
                                     [v.aval.dtype for v in staged.closed.jaxpr.invars],
                                     canonicalize))
    leaves = [next(staged_leaves) if m else leaf for leaf, m in zip(leaves, staged.staged_mask)]
    by_name = dict(zip(names, treedef.unflatten(leaves)))
    positional, keyword = [], {}
    for param in signature.params:
        if param in by_name:
            value = by_name[param]
        else:   # `<name>_leaves`: the staged leaves of an argument that holds a custom pytree node.
            index = names.index(param[: -len("_leaves")])
            value = [leaf for leaf, path, staged_leaf in zip(leaves, call.paths, staged.staged_mask)
                     if staged_leaf and path[0][1] == index]
        kind = signature.kinds.get(param, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            keyword.update(value)
        elif kind is inspect.Parameter.KEYWORD_ONLY:
            keyword[param] = value
        else:
            positional.append(value)
    return positional, keyword


def run(staged: Staged, key, closed: ClosedJaxpr, flat_args: list) -> list:
    """The outputs of `closed`, derived from `staged` and kept in its artifacts under `key`,
    on `flat_args`: staged in place when staging, else computed by its emitted module."""
    if current_builder() is not None or any(isinstance(a, Tracer) for a in flat_args):
        return inline_jaxpr(closed, flat_args)
    return run_emitted_jaxpr(staged, key, closed, flat_args)
