"""The front end: a Python function and example arguments in, a ClosedJaxpr out.

`stage(fn, args, kwargs, ...)` binds the arguments to the function's signature, decides
which leaves are staged (see `args.py`), walks the function's source with a fresh builder
(`walker.py`) and returns a `Staged` record: the jaxpr plus everything needed to call it
with the same kind of arguments again. Results are cached per (function, argument tree and
avals, static values, config); the cache holds functions weakly.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import types
import weakref
from typing import Any

from s2s import config
from s2s.core import ClosedJaxpr
from s2s.errors import S2SError, StagingError
from s2s.frontend.args import ShapeDtype, aval_of_arg, is_staged_leaf
from s2s.frontend.source import function_source
from s2s.frontend.walker import stage_python_function
from s2s.staging import JaxprBuilder, Tracer, paused_gc
from s2s.tree import PyTreeDef, leaf_paths, tree_flatten

__all__ = ["ShapeDtype", "Staged", "stage"]


@dataclasses.dataclass(eq=False)
class Staged:
    """A function staged for one kind of arguments."""
    fn: Any
    closed: ClosedJaxpr
    param_names: list[str]        # the bound parameters, in signature order
    in_tree: PyTreeDef            # of the tuple of bound parameter values
    staged_mask: list[bool]       # per input leaf: staged (a jaxpr input) or static
    out_tree: PyTreeDef
    example_args: tuple           # the bound parameter values it was staged with


_cache: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def underlying_function(fn):
    """The Python function whose source is staged, and the `self` to prepend, if any."""
    if getattr(fn, "__s2s_transform__", False):
        return fn, None   # an s2s-derived function: called directly on staged values
    if isinstance(fn, types.MethodType):
        return fn.__func__, fn.__self__
    if isinstance(fn, types.FunctionType):
        return fn, None
    if isinstance(fn, functools.partial):
        raise StagingError("functools.partial objects cannot be staged at the top level",
                           "wrap it in a def or lambda that calls it")
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType):
        return call, fn
    raise StagingError(f"s2s can only stage Python functions, not {type(fn).__name__}",
                       "pass a function defined with def or lambda")


_signatures: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def signature_of(fn) -> inspect.Signature:
    """`inspect.signature`, remembered per function: every call of a jitted function binds."""
    try:
        signature = _signatures.get(fn)
    except TypeError:   # not weak-referenceable
        return inspect.signature(fn)
    if signature is None:
        signature = _signatures[fn] = inspect.signature(fn)
    return signature


def bind_arguments(fn, args, kwargs, explicit: set | None = None) -> tuple[list[str], tuple]:
    """Binds call arguments to `fn`'s signature; returns parameter names and values.

    Parameters left to their defaults are included; their names are not added to
    `explicit` (when given), which collects the parameters the caller passed.
    """
    py_fn, self_arg = underlying_function(fn)
    signature = signature_of(py_fn)
    call_args = ((self_arg,) if self_arg is not None else ()) + tuple(args)
    try:
        bound = signature.bind(*call_args, **kwargs)
    except TypeError as e:
        raise StagingError(f"{py_fn.__qualname__}() called with the wrong arguments: {e}",
                           f"call it as {py_fn.__qualname__}{signature}") from None
    if explicit is not None:
        explicit.update(bound.arguments)
    bound.apply_defaults()
    items = list(bound.arguments.items())
    if self_arg is not None:
        items = items[1:]
    return [k for k, _ in items], tuple(v for _, v in items)


def _leaf_mode(param_index: int, name: str, leaf, static_argnums, static_argnames,
               dynamic_argnums) -> bool:
    """True when a leaf is staged."""
    if param_index in static_argnums or name in static_argnames:
        return False
    if isinstance(leaf, Tracer):
        return True
    if param_index in dynamic_argnums and isinstance(leaf, (bool, int)):
        return True
    return is_staged_leaf(leaf)


def _leaf_hint(param: str, path: tuple) -> str:
    """A readable name for an argument leaf: the dict key or field if it is a name (with
    the parameter's `_dot`/`_bar` suffix, so `params_dot['W1']` reads as `W1_dot`)."""
    if path:
        _, key = path[-1]
        if isinstance(key, str) and key.isidentifier():
            suffix = next((s for s in ("_dot", "_bar") if param.endswith(s)), "")
            return key + suffix
        return f"{param}_{'_'.join(str(k) for _, k in path)}"
    return param


def stage(fn, args=(), kwargs=None, *, static_argnums=(), static_argnames=(),
          dynamic_argnums=()) -> Staged:
    kwargs = kwargs or {}
    passed: set[str] = set()
    names, values = bind_arguments(fn, args, kwargs, passed)
    # Defaults the caller did not pass are part of the function, not inputs: static.
    static_argnames = tuple(static_argnames) + tuple(n for n in names if n not in passed)
    static_argnums = _normalize_argnums(static_argnums, len(names))
    dynamic_argnums = _normalize_argnums(dynamic_argnums, len(names))
    in_leaves, in_tree = tree_flatten(values)
    paths = leaf_paths(in_tree)
    # Each leaf's path starts with its position in the tuple of parameter values.
    param_of_leaf = [path[0][1] for path in paths]
    mask = [_leaf_mode(i, names[i], leaf, static_argnums, static_argnames, dynamic_argnums)
            for i, leaf in zip(param_of_leaf, in_leaves)]
    key = (in_tree, tuple(aval_of_arg(l) if m else ("static", _hashable_static(l, names, i))
                          for l, m, i in zip(in_leaves, mask, param_of_leaf)),
           config.cache_key())
    py_fn, self_arg = underlying_function(fn)
    owner = fn if self_arg is None else py_fn
    with _cache_lock:
        per_fn = _cache.setdefault(owner, {})
        hit = per_fn.get((key, id(self_arg)) if self_arg is not None else key)
    if hit is not None:
        return hit

    transformed = getattr(py_fn, "__s2s_transform__", False)
    if not transformed:
        function_source(py_fn)  # a clear error now if the source cannot be read
    with paused_gc(), JaxprBuilder() as builder:
        staged_leaves = []
        for leaf, staged, i, path in zip(in_leaves, mask, param_of_leaf, paths):
            if staged:
                staged_leaves.append(builder.new_arg(aval_of_arg(leaf), _leaf_hint(names[i], path[1:])))
            else:
                staged_leaves.append(leaf)
        staged_values = in_tree.unflatten(staged_leaves)
        call_kwargs = dict(zip(names, staged_values))
        call_args, call_kwargs = _split_by_kind(py_fn, self_arg, call_kwargs)
        if transformed:
            out = py_fn(*call_args, **call_kwargs)
        else:
            out = stage_python_function(py_fn, call_args, call_kwargs, self_arg=self_arg)
        out_leaves, out_tree = tree_flatten(out)
        for leaf in out_leaves:
            if not (isinstance(leaf, Tracer) or is_staged_leaf(leaf) or isinstance(leaf, (bool, int))):
                raise StagingError(
                    f"{py_fn.__qualname__} returns a {type(leaf).__name__}, which is not an array",
                    "return arrays, numbers, or tuples/lists/dicts of them",
                    None if transformed else function_source(py_fn).info(function_source(py_fn).node))
        closed = builder.build(out_leaves)
    result = Staged(fn, closed, names, in_tree, mask, out_tree, values)
    with _cache_lock:
        _cache.setdefault(owner, {})[(key, id(self_arg)) if self_arg is not None else key] = result
    return result


def _split_by_kind(py_fn, self_arg, call_kwargs: dict) -> tuple[list, dict]:
    """Positional and keyword arguments for parameters given by name (respecting
    positional-only parameters and *args/**kwargs)."""
    signature = signature_of(py_fn)
    args, kwargs = [], {}
    params = list(signature.parameters.values())
    if self_arg is not None:
        params = params[1:]
    for p in params:
        if p.name not in call_kwargs:
            continue
        value = call_kwargs[p.name]
        if p.kind is p.VAR_POSITIONAL:
            args.extend(value)
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and not kwargs):
            args.append(value)
        else:
            kwargs[p.name] = value
    return args, kwargs


def _normalize_argnums(argnums, count: int) -> frozenset[int]:
    if isinstance(argnums, int):
        argnums = (argnums,)
    return frozenset(a % count if count else a for a in argnums)


def _hashable_static(value, names, index):
    try:
        hash(value)
        return value
    except TypeError:
        raise StagingError(
            f"static argument {names[index]!r} has an unhashable value of type "
            f"{type(value).__name__}", "static values key the staging cache: pass a tuple "
            "instead of a list, or make the argument dynamic") from None


def reraise_clean(error: S2SError):
    """Raises a user-facing error without s2s's internal frames behind it."""
    error.__cause__ = None
    error.__suppress_context__ = True
    raise error.with_traceback(None)
