"""The front end: a Python function and example arguments in, a ClosedJaxpr out.

`stage(fn, args, kwargs, ...)` binds the arguments to the function's signature, decides
which leaves are staged (see `args.py`), calls the function on them with a fresh builder
(`call_user` in `walker.py`, which walks a Python function's source) and returns a `Staged`
record: the jaxpr plus everything needed to call it with the same kind of arguments again.

The staging cache has two levels: a `WeakKeyDictionary` keyed by the user's function (or
the object whose method is staged), then a dict keyed by (the chain of s2s transforms
around it with their parameters, the function's code object, the argument tree and avals,
static values, config). The code object compares by bytecode, constants and names, and the
source s2s stages is read once per code object, so both are part of the key. The Python
values staging read besides the arguments are not: each entry carries their guards
(`guards.py`), checked on every hit, and an entry whose guards fail is staged again and
replaced. Everything
compiled from a `Staged` (derived jaxprs, emitted modules, executables) hangs off it in
`artifacts`, so `jit(grad(f))` rebuilt in a loop hits the cache, and dropping every reference
to `f` frees all of it: a `Staged` holds no reference back to the function.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import types
import weakref
from typing import Any

import numpy as np

from s2s import config
from s2s.core import ClosedJaxpr
from s2s.emit.signature import leaf_expression
from s2s.errors import StagingError, StagingTypeError, UnsupportedFunctionError
from s2s.frontend.args import (ShapeDtype, aval_of_arg, is_staged_leaf, normalize_argnums, object_holding_arrays_error,
                               unsupported_argument_error, unsupported_leaf_reason)
from s2s.frontend.generators import StagedGenerator, generator_result_error, is_generator_function
from s2s.frontend.guards import Guards, include, recording
from s2s.frontend.source import FunctionSource, function_source, staging_errstate
from s2s.frontend.walker import StagedFunction, call_user
from s2s.numpy_api import NUMPY_IMPLS
from s2s.staging import JaxprBuilder, Tracer, axis_env, paused_gc
from s2s.tree import PyTreeDef, leaf_paths, tree_flatten

__all__ = ["ShapeDtype", "Staged", "stage", "staging_receiver"]


@dataclasses.dataclass(eq=False)
class Staged:
    """A function staged for one kind of arguments.

    It keeps no reference to the function (the cache holding it is weak on the function):
    binding a call needs only the signature, and headers only names and a location.
    """
    closed: ClosedJaxpr
    param_names: list[str]        # the bound parameters, in signature order
    in_tree: PyTreeDef            # of the tuple of bound parameter values
    staged_mask: list[bool]       # per input leaf: staged (a jaxpr input) or static
    out_tree: PyTreeDef
    example_args: tuple           # the bound parameter values, staged leaves as their avals
    signature: inspect.Signature  # of the parameters (a method's self left out)
    name: str                     # the function's __name__
    description: str              # what it is: 'loss', or 'grad(loss)' for a derived function
    location: tuple[str, int]     # file and line of the user's def
    guards: Guards                # the Python values staging read, checked on each reuse
    # What is built from this staging, by kind: derived jaxprs, emitted modules, executables.
    artifacts: dict = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def bind_call(self, args, kwargs) -> "BoundCall":
        """A call of the staged function, bound and flattened (it needs only the signature)."""
        return bind_call(self.signature, self.name, args, kwargs)

    def inputs(self, call: "BoundCall") -> list:
        """The values of a call's staged leaves: the jaxpr's inputs, in order."""
        return [leaf for leaf, m in zip(call.leaves, self.staged_mask) if m]

    def flat_inputs(self, args, kwargs) -> list:
        """The jaxpr's inputs for a call not bound yet (a tool's, a custom rule's); the
        transforms bind each call once (`BoundCall`) and use `inputs`."""
        return self.inputs(self.bind_call(args, kwargs))

    def artifact(self, key, build):
        """`artifacts[key]`, built once (under the lock: concurrent callers build it once)."""
        found = self.artifacts.get(key)
        if found is None:
            with self.lock:
                found = self.artifacts.get(key)
                if found is None:
                    found = self.artifacts[key] = build()
        return found


# owner -> {key: Staged}; owners that cannot be weakly referenced are kept by id (a
# method's receiver never is: see `_cache_owner_and_key`).
_cache: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_strong_cache: dict[int, tuple[Any, dict]] = {}
_cache_lock = threading.Lock()


def _cache_entries(owner) -> dict:
    """The second-level dict of `owner` (call with the lock held)."""
    try:
        return _cache.setdefault(owner, {})
    except TypeError:   # not weakly referenceable: kept alive, keyed by id
        return _strong_cache.setdefault(id(owner), (owner, {}))[1]


def _cache_owner_and_key(fn) -> tuple[Any, tuple, Any]:
    """Who owns `fn`'s cache entries, the part of the key that names `fn`, and the
    receiver (`self`) of the staged method, or None.

    A chain of s2s transforms (`jit(grad(f))`) is keyed by each transform's parameters
    under the innermost user function, so rebuilding the chain finds the same entries.
    A method's entries are its receiver's; those of a receiver that cannot be weakly
    referenced (a class with `__slots__`) are its class's, shared by its instances: what
    staging read from `self` is guarded on the receiver of each call (see `Guards`), so
    an instance is never kept alive by the cache, and one whose attributes differ is staged
    again (its staging replaces the entry).
    """
    chain = []
    base = fn
    while getattr(base, "__s2s_transform__", False) and getattr(base, "cache_params", None):
        chain.append(base.cache_params)
        base = base.fn
    py_fn, self_arg = underlying_function(base)
    owner = py_fn if self_arg is None else self_arg if _weakly_referenceable(self_arg) else type(self_arg)
    return owner, (tuple(chain), None if self_arg is None else py_fn,
                   getattr(_defining_function(base), "__code__", None)), self_arg


def _weakly_referenceable(obj) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


def staging_receiver(fn):
    """The `self` whose method `fn` (under s2s transforms) stages, or None: what a
    staging's guards are checked with (`Staged.guards.hold(staging_receiver(fn))`)."""
    return _cache_owner_and_key(fn)[2]


def underlying_function(fn):
    """The Python function whose source is staged, and the `self` to prepend, if any. s2s
    transforms, `functools.partial` objects, NumPy functions s2s implements
    (`s2s.grad(np.sqrt)`) and functions defined in a function being staged
    (`StagedFunction`s, with signatures of their own) are their own (call_user calls them)."""
    if getattr(fn, "__s2s_transform__", False) or isinstance(fn, (functools.partial, StagedFunction)) \
            or is_numpy_function(fn):
        return fn, None
    if isinstance(fn, types.MethodType):
        return fn.__func__, fn.__self__
    if isinstance(fn, types.FunctionType):
        return fn, None
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType):
        return call, fn
    module = getattr(fn, "__module__", None) or ""
    if module == "numpy" or module.startswith("numpy.") or isinstance(fn, np.ufunc):
        name = f"np.{fn.__name__}" if module in ("numpy", "") else f"{module}.{fn.__name__}"
        raise UnsupportedFunctionError(f"{name} is not supported by s2s",
                                       "see the README's table of supported NumPy functions; "
                                       "write the computation with supported ones in a def or lambda")
    raise StagingError(f"s2s can only stage Python functions, not {type(fn).__name__}",
                       "pass a function defined with def or lambda")


def is_numpy_function(fn) -> bool:
    """Whether `fn` is a NumPy function (a ufunc too) that s2s stages by its own implementation."""
    try:
        return fn in NUMPY_IMPLS
    except TypeError:          # unhashable
        return False


def _defining_function(fn):
    """The user's def (or lambda) whose source `fn` runs: under s2s transforms and partials."""
    while getattr(fn, "__s2s_transform__", False) or isinstance(fn, functools.partial):
        fn = fn.func if isinstance(fn, functools.partial) else fn.fn
    return underlying_function(fn)[0]


_signatures: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def signature_of(fn) -> inspect.Signature:
    """The parameters a call of `fn` fills (a method's self left out), remembered per
    function: every call of a jitted function binds."""
    py_fn, self_arg = underlying_function(fn)
    # Remembered with the defaults it was read with: `f.__defaults__` may be replaced.
    defaults = (getattr(py_fn, "__defaults__", None), getattr(py_fn, "__kwdefaults__", None))
    try:
        remembered = _signatures.get(py_fn)
    except TypeError:   # not weak-referenceable
        remembered = None
    if remembered is not None and remembered[0][0] is defaults[0] and remembered[0][1] is defaults[1]:
        signature = remembered[1]
    else:
        signature = inspect.signature(py_fn)
        ufunc = _defining_function(fn)
        if isinstance(ufunc, np.ufunc):      # its operands (a transform of it has its signature); not out=, where=
            signature = signature.replace(parameters=list(signature.parameters.values())[:ufunc.nin])
        try:
            _signatures[py_fn] = (defaults, signature)
        except TypeError:
            pass
    if self_arg is not None:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


@dataclasses.dataclass(frozen=True)
class BoundCall:
    """One call of a user's function, bound to its signature and flattened once: what
    staging, the staging-cache lookup and a transform's run of the call all read, so no
    step binds or flattens the user's arguments again (a pytree node's flatten is user
    code, and a big tree's flatten is most of a call's cost).

    `leaves` and `tree` are those of the bound parameter values (defaults applied), in
    signature order; the leaves of the positional arguments come first (the parameters
    they fill come first, `*args` included), then those of the parameters passed by
    keyword or left to their defaults.
    """
    names: tuple[str, ...]        # the bound parameters, in signature order
    passed: frozenset[str]        # those the caller passed (the rest are defaults: static)
    n_args: int                   # how many arguments were passed by position
    leaves: list
    tree: PyTreeDef
    def with_leaves(self, leaves: list) -> "BoundCall":
        """The same call with other leaves (a vmap's per-example avals for mapped ones)."""
        return dataclasses.replace(self, leaves=leaves)

    @functools.cached_property
    def paths(self) -> list[tuple]:
        """Each leaf's path (`leaf_paths`): it starts with the leaf's parameter index."""
        return leaf_paths(self.tree)

    @functools.cached_property
    def param_of_leaf(self) -> list[int]:
        """The index of the parameter each leaf belongs to (the tree's root has a child per
        parameter)."""
        return [i for i, parameter in enumerate(self.tree.children) for _ in range(parameter.num_leaves)]

    @functools.cached_property
    def positional_params(self) -> int:
        """How many leading parameters the positional arguments fill (`*args` is one)."""
        if self.var_positional is None or self.n_args <= self.names.index(self.var_positional):
            return self.n_args
        return self.names.index(self.var_positional) + 1

    @functools.cached_property
    def positional_trees(self) -> list[PyTreeDef]:
        """The tree of each positional argument, read off `tree` (those past the named
        parameters are the children of the `*args` tuple)."""
        trees = []
        for name, param_tree in zip(self.names[:self.positional_params], self.tree.children):
            trees.extend(param_tree.children if name == self.var_positional else [param_tree])
        return trees

    @functools.cached_property
    def positional_leaf_ranges(self) -> list[range]:
        """For each positional argument, the indices of its leaves (consecutive ranges)."""
        ranges, start = [], 0
        for arg_tree in self.positional_trees:
            ranges.append(range(start, start + arg_tree.num_leaves))
            start += arg_tree.num_leaves
        return ranges

    var_positional: str | None = None   # the name of the `*args` parameter, if any
    var_keyword: str | None = None      # the name of the `**kwargs` parameter, if any


def bind_call(signature: inspect.Signature, name: str, args, kwargs) -> BoundCall:
    """`args` and `kwargs` bound to `signature` (of the function called `name`) and
    flattened: the one binding and flattening of a call (see `BoundCall`)."""
    passed: set[str] = set()
    names, values = _bind(signature, name, args, kwargs, passed)
    leaves, tree = tree_flatten(values)
    kinds = {p.kind: p.name for p in signature.parameters.values()}
    return BoundCall(tuple(names), frozenset(passed), len(args), leaves, tree,
                     kinds.get(inspect.Parameter.VAR_POSITIONAL), kinds.get(inspect.Parameter.VAR_KEYWORD))


def bind_function_call(fn, args, kwargs) -> BoundCall:
    """A call of `fn` (a user's function, a method, a transform of one) bound and flattened."""
    return bind_call(signature_of(fn), getattr(fn, "__qualname__", type(fn).__qualname__), args, kwargs)


def bind_arguments(fn, args, kwargs, explicit: set | None = None) -> tuple[list[str], tuple]:
    """Binds call arguments to `fn`'s signature; returns parameter names and values.

    Parameters left to their defaults are included; their names are not added to
    `explicit` (when given), which collects the parameters the caller passed.
    """
    return _bind(signature_of(fn), getattr(fn, "__qualname__", type(fn).__qualname__), args, kwargs,
                 explicit)


def _bind(signature: inspect.Signature, name: str, args, kwargs,
          explicit: set | None = None) -> tuple[list[str], tuple]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise StagingTypeError(f"{name}() called with the wrong arguments: {e}",
                               f"call it as {name}{signature}") from None
    if explicit is not None:
        explicit.update(bound.arguments)
    bound.apply_defaults()
    return list(bound.arguments), tuple(bound.arguments.values())


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
    """`fn` staged for a call with `args` and `kwargs` (see `stage_call`)."""
    return stage_call(fn, bind_function_call(fn, args, kwargs or {}), static_argnums=static_argnums,
                      static_argnames=static_argnames, dynamic_argnums=dynamic_argnums)


def stage_call(fn, call: BoundCall, *, static_argnums=(), static_argnames=(),
               dynamic_argnums=()) -> Staged:
    """`fn` staged for a bound call (from the staging cache when staged for this kind of
    call before and what it read still holds; a function defined in a function being
    staged, every time)."""
    names, passed = list(call.names), call.passed
    # Defaults the caller did not pass are part of the function, not inputs: static.
    if isinstance(static_argnames, str):   # one name, as jax takes it (not its letters)
        static_argnames = (static_argnames,)
    static_argnames = tuple(static_argnames) + tuple(n for n in names if n not in passed)
    static_argnums = frozenset(normalize_argnums(static_argnums, len(names), "static_argnums"))
    dynamic_argnums = frozenset(normalize_argnums(dynamic_argnums, len(names), "dynamic_argnums"))
    in_leaves, in_tree = call.leaves, call.tree
    param_of_leaf = call.param_of_leaf
    mask = [_leaf_mode(i, names[i], leaf, static_argnums, static_argnames, dynamic_argnums)
            for i, leaf in zip(param_of_leaf, in_leaves)]
    for leaf, staged, i, at in zip(in_leaves, mask, param_of_leaf, range(len(in_leaves))):
        # (the leaves' paths are only worked out for a message or a staging)
        def name() -> str:   # as the function reads it: params['W1']
            return leaf_expression(names[i], call.paths[at][1:]) or names[i]
        if staged and unsupported_leaf_reason(leaf) is not None:
            raise unsupported_argument_error([(leaf, f"`{name()}`")])
        if not staged and i not in static_argnums and names[i] not in static_argnames:
            opaque = object_holding_arrays_error(name, leaf)
            if opaque is not None:
                raise opaque
    owner, fn_key, receiver = _cache_owner_and_key(fn)
    defining = _defining_function(fn)
    # A function defined in a function being staged reads that function's variables, which
    # change as it runs and which no guard watches: it is staged again on every call.
    cached = not isinstance(defining, StagedFunction)
    hit = None
    if cached:
        key = (fn_key, in_tree,
               tuple(aval_of_arg(l) if m else ("static", _hashable_static(l, names, i))
                     for l, m, i in zip(in_leaves, mask, param_of_leaf)),
               config.cache_key(), axis_env(), staging_errstate())
        with _cache_lock:
            hit = _cache_entries(owner).get(key)
        if hit is not None and hit.guards.hold(receiver):
            include(hit.guards, receiver)
            return hit
    transformed = getattr(fn, "__s2s_transform__", False)
    with paused_gc():   # (reading a big file's source allocates as much as staging it)
        # A clear error now if the source cannot be read.
        source = None if transformed else _source_of(defining)
    with paused_gc(), recording(receiver, defining if isinstance(defining, types.FunctionType) else None) as reads, \
            JaxprBuilder() as builder:
        builder.shares_inlined = transformed   # (a transform's call names nothing it stages)
        staged_leaves = []
        for leaf, staged, i, path in zip(in_leaves, mask, param_of_leaf, call.paths):
            if staged:
                staged_leaves.append(builder.new_arg(aval_of_arg(leaf), _leaf_hint(names[i], path[1:])))
            else:
                staged_leaves.append(leaf)
        staged_values = in_tree.unflatten(staged_leaves)
        call_args, call_kwargs = _split_by_kind(signature_of(fn), dict(zip(names, staged_values)),
                                                call.n_args, passed)
        out = call_user(fn, call_args, call_kwargs)
        if isinstance(out, StagedGenerator) and source is not None and is_generator_function(source.node):
            raise generator_result_error(source)
        out_leaves, out_tree = tree_flatten(out)
        for leaf in out_leaves:
            if not (isinstance(leaf, Tracer) or is_staged_leaf(leaf) or isinstance(leaf, (bool, int))):
                generator = isinstance(leaf, StagedGenerator)
                raise StagingTypeError(   # (a TypeError, as JAX raises for a result that is not an array)
                    f"{_qualname(fn)} returns a {'generator' if generator else type(leaf).__name__}, which "
                    "is not an array",
                    "return a tuple of its items: `tuple(x * k for k in ks)`" if generator
                    else "return arrays, numbers, or tuples/lists/dicts of them",
                    None if source is None else source.info(source.node))
        closed = builder.build(out_leaves)
    example_args = in_tree.unflatten([aval_of_arg(l) if m else l for l, m in zip(in_leaves, mask)])
    description, location = _description_and_location(fn)
    guards = reads.result(description, location)
    include(guards, receiver)
    result = Staged(closed, names, in_tree, mask, out_tree, example_args, signature_of(fn),
                    getattr(fn, "__name__", "f"), description, location, guards)
    if not cached:
        return result
    with _cache_lock:
        # Threads that staged the same thing at once all use the first result; a stale
        # entry (`hit`, whose guards failed) is replaced, and what was built from it goes.
        entries = _cache_entries(owner)
        current = entries.get(key)
        if current is None or current is hit:
            current = entries[key] = result
        return current


def transform_description(transform: str, fn) -> str:
    """How an s2s transform of `fn` is named in messages and generated modules:
    'grad(loss)', 'jit(vmap(loss))', each transform of the chain by its own `describe()`."""
    inner = fn.describe() if getattr(fn, "__s2s_transform__", False) else getattr(fn, "__qualname__", "f")
    return f"{transform}({inner})"


def _description_and_location(fn) -> tuple[str, tuple[str, int]]:
    """'grad(loss)' or 'loss', and the file and line where the user's function is defined."""
    description = fn.describe() if getattr(fn, "__s2s_transform__", False) else None
    defining = _defining_function(fn)
    source = _source_of(defining)
    if source is None:          # NumPy's own function
        return description or defining.__name__, ("numpy", 0)
    return description or source.name, (source.filename, source.node.lineno)


def _source_of(defining) -> FunctionSource | None:
    """The source a staging of the user's function `defining` walks: a def or lambda met
    while staging keeps its own; a NumPy function has none."""
    if isinstance(defining, StagedFunction):
        return defining.source
    return None if is_numpy_function(defining) else function_source(defining)


def _qualname(fn) -> str:
    """The qualified name of what `fn` calls (a method's function, a partial's)."""
    py_fn = underlying_function(fn)[0]
    return getattr(py_fn, "__qualname__", None) or _defining_function(fn).__qualname__


def _split_by_kind(signature: inspect.Signature, call_kwargs: dict, positional_count: int,
                   passed: frozenset) -> tuple[list, dict]:
    """Positional and keyword arguments for parameters given by name (respecting
    positional-only parameters and *args/**kwargs): the first `positional_count`, which the
    caller passed by position, by position; the rest by name, as the caller passed them.
    Those it left to their defaults are not passed, so the function takes its own. That
    matters to s2s transforms called while staging: `vmap` maps positional arguments by
    `in_axes` and those passed by keyword along axis 0, `grad`'s argnums count positions."""
    args, kwargs = [], {}
    position = 0
    for p in signature.parameters.values():
        if p.name not in call_kwargs or p.name not in passed:
            continue
        value = call_kwargs[p.name]
        if p.kind is p.VAR_POSITIONAL:
            args.extend(value)
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and not kwargs
                                             and position < positional_count):
            args.append(value)
        else:
            kwargs[p.name] = value
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            position += 1
    return args, kwargs


def _hashable_static(value, names, index):
    """The cache key of a static argument: its value with its type (True == 1 in Python,
    but they stage differently), after checking it is hashable."""
    try:
        hash(value)
        return _typed(value)
    except TypeError:
        raise StagingError(
            f"static argument {names[index]!r} has an unhashable value of type "
            f"{type(value).__name__}", "static values key the staging cache: pass a tuple "
            "instead of a list, or make the argument dynamic") from None


def _typed(value):
    if isinstance(value, tuple):
        return (tuple,) + tuple(_typed(v) for v in value)
    return type(value), value
