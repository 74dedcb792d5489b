"""Guards: the Python values a staging read, checked before its result is used again.

Staging runs the user's source once and bakes into the jaxpr every Python value it reads
besides the arguments: module globals, closure cells, default values, attributes of the
objects reached from them. The staging cache is keyed by code object and argument types,
so a later change to one of those values (`scale = 3.0` at module level, a closure list
appended to, `f.__defaults__` replaced, `self.scale` set, a global array changed in place,
a helper function rebound) would be served stale. Each read is recorded here while staging
(`record_*`, called by the walker) and the `Staged` keeps the list; a cache hit whose guards
no longer hold is staged again.

What a guard compares (`_fingerprint`):
- numbers, strings, bytes, None, NumPy scalars: type and exact value (repr), so rebinding a
  name to an equal value does not re-stage;
- containers, subclasses included (tuples and named tuples, lists, deques, sets, dicts,
  OrderedDict, defaultdict and its factory, Counter, ChainMap, a class's `vars()`): their
  type and fingerprinted contents, since any of them can be changed in place;
- buffers (bytearray, array.array, memoryview) and NumPy arrays of any ndarray subclass
  (a masked array's mask too): identity, type, shape and dtype, and up to
  `SMALL_ARRAY_BYTES` a hash of their bytes, so an in-place change re-stages; larger ones
  by identity, shape and dtype only, with a warning at staging that in-place changes are
  not seen (hashing them on every call would cost more than the call);
- anything else (functions, objects, modules): identity, held by a weak reference where
  the object allows one (a guard must not keep the user's objects alive).

Attributes are guarded on objects reached from a global, a closure cell or the staged
method's `self`, however they are read (`obj.attr`, `getattr(obj, name)`, `type(obj).attr`,
`vars(obj)[name]`), and on objects reached from those by attribute, subscript or an
unrolled loop over them (`self.layers[0].scale`, `for layer in self.layers`). Not on
arguments, which are the call's own. On modules, only on the user's own
(`helpers.SCALE`, read again after `importlib.reload(helpers)`): the attributes of the
standard library, of installed packages and of NumPy, SciPy and s2s are the functions and
constants of a library, and guarding each `np.sin` would be checked on every call.
A call of an `functools.lru_cache` function made while staging is guarded on its result:
clearing the cache (after the values it read changed) is seen, as plain Python sees it.
"""
from __future__ import annotations

import array
import collections
import hashlib
import os
import site
import sys
import sysconfig
import threading
import types
import warnings
import weakref

import numpy as np

__all__ = ["Guards", "include", "record_attribute", "record_builtin", "record_cached_call", "record_cell",
           "record_defaults", "record_derived", "record_global", "record_items", "record_module_attribute",
           "record_receiver", "recording", "SMALL_ARRAY_BYTES"]

# Arrays up to this size are guarded by content, hashed on each check (about 1 us at this
# size; a 32 KiB global made each jit call 7x slower), larger ones by identity.
SMALL_ARRAY_BYTES = 1024

_MISSING = object()
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


class _Guard:
    """One value read while staging: how to read it again and what it was."""
    __slots__ = ("read", "expected", "alive", "stable")

    def __init__(self, read, value, describe: str, stable: bool, large_arrays: list):
        self.read = read
        refs: list = []
        large: list = []
        self.expected = _fingerprint(value, refs, large)
        large_arrays.extend((describe, shape, nbytes) for shape, nbytes in large)
        # Objects compared by identity must stay the same objects: weak references where
        # possible (a dead one fails the guard), else the object itself.
        self.alive = refs
        # What is not checked before each call of the jit's C++ dispatcher (see
        # `Guards.stable`): an imported module, a builtin not shadowed by a global, or what
        # the recorder says cannot change the staging (`record_defaults`).
        self.stable = stable or isinstance(value, types.ModuleType) or value is _MISSING

    def holds(self) -> bool:
        for ref in self.alive:
            if isinstance(ref, weakref.ref) and ref() is None:
                return False
        try:
            current = self.read()
        except Exception:   # the name, cell or attribute is gone: stage again (and fail there)
            return False
        return _fingerprint(current, None, None) == self.expected


class Guards:
    """The guards of one staging (its own reads and those of the stagings it used).

    Reads from the staged method's own `self` are guarded relative to the receiver of the
    call being checked (`hold(receiver)`), not to the object that was staged: the guards
    then hold no reference to it, and an object that cannot be weakly referenced (a class
    with `__slots__`) can share its class's cache entries without being kept alive.
    """

    def __init__(self, guards: list):
        self.guards = guards
        # Whether every guard is on an imported module or an unshadowed builtin: the guards
        # of the stagings the jit's C++ dispatcher runs are checked before each call,
        # except such ones, so that the common function (reading only `np` and its
        # arguments) pays nothing. Rebinding a module's name (`np = ...`) or shadowing a
        # builtin by a new global after a call is the one change that path does not see.
        self.changing = [g for g in guards if not g.stable]
        self.stable = not self.changing

    def hold(self, receiver=None, changing_only: bool = False) -> bool:
        """Whether every value read is as it was, for a call on `receiver` (the `self` of
        the staged method, or None); only those that are not `stable` with `changing_only`
        (before a call of the jit's C++ dispatcher)."""
        saved = getattr(_receiver, "value", None)
        _receiver.value = receiver
        try:
            return all(g.holds() for g in (self.changing if changing_only else self.guards))
        finally:
            _receiver.value = saved


_receiver = threading.local()   # `.value`: the receiver of the call whose guards are checked


def _current_receiver():
    return _receiver.value


class _ReceiverBound:
    """A nested staging's guard on its own receiver's attributes, added to a staging whose
    receiver is another object: checked with that receiver (held weakly where it can be)."""
    __slots__ = ("guard", "receiver", "stable")

    def __init__(self, guard, receiver):
        self.guard = guard
        self.receiver = _reference(receiver)
        self.stable = False

    def holds(self) -> bool:
        saved = _receiver.value
        _receiver.value = self.receiver()
        try:
            return _receiver.value is not None and self.guard.holds()
        finally:
            _receiver.value = saved


def _reference(obj):
    """A weak reference to `obj` where it allows one, else a function returning it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class _Recorder:
    """The reads of one staging in progress. `origins` maps the id of each object reached
    from a global, a cell or a receiver to how to read it again, so its attributes can be
    guarded. `receiver` is the staged method's `self` (None for a function)."""

    def __init__(self, receiver, function=None):
        self.receiver = receiver
        self.function = function   # the Python function staged, or None
        self.reads: list[tuple] = []       # (read, value, describe, stable) of this staging's reads
        self.guards: list[_Guard] = []     # of the nested stagings it used
        self.origins: dict[int, tuple] = {}
        self.seen: set = set()
        self.keep: list = []   # the objects in `origins`, alive while staging (ids stay theirs)

    def add(self, key, read, value, describe, stable=False):
        if key in self.seen:
            return
        self.seen.add(key)
        self.reads.append((read, value, describe, stable))
        if not isinstance(value, (types.ModuleType,) + _SCALARS):
            self.origins[id(value)] = (read, describe)
            self.keep.append(value)


_state = threading.local()


def _stack() -> list:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


class recording:
    """`with recording(receiver, function) as r:` collects the guards of one staging of
    `function` (a Python function, or None); `r.result()` returns them after the block.
    Guards of nested stagings are added with `include`."""

    def __init__(self, receiver=None, function=None):
        self.receiver = receiver
        self.function = function

    def __enter__(self):
        self.recorder = _Recorder(self.receiver, self.function)
        _stack().append(self.recorder)
        return self

    def __exit__(self, *exc):
        _stack().pop()

    def result(self, description: str, location: tuple[str, int]) -> Guards:
        """The guards, fingerprinted as the values are when staging ends: a function that
        changes what it reads while staged (appends to a closure list) is not stale. A
        warning about a read is shown at `location` (the staged function's file and line),
        the user's code, never s2s's."""
        recorder = self.recorder
        large_arrays: list = []
        guards = [_Guard(*read, large_arrays) for read in recorder.reads]
        for name, shape, nbytes in large_arrays:
            warnings.warn_explicit(
                f"{description} reads {name}, an array of shape {shape} ({nbytes} bytes), as a constant: it is "
                f"captured by identity, and s2s does not look for a change made to it in place (arrays up to "
                f"{SMALL_ARRAY_BYTES} bytes are checked by content); pass it as an argument, or "
                "assign a new array to the name after changing it", UserWarning, location[0], location[1],
                registry=_shown_warnings)
        return Guards(guards + recorder.guards)


# The warnings shown, for Python's once-per-location rule: a function staged again for each
# new static argument (an optimizer's step number) warns of its large global once, not at
# every step (`warn_explicit` with no registry shows a warning every time).
_shown_warnings: dict = {}


def include(guards: Guards, receiver=None) -> None:
    """Adds a nested staging's guards (a helper staged through the cache, for a call on
    `receiver`) to the staging in progress, if any: when they fail, the outer staging is
    stale too."""
    stack = _stack()
    if stack:
        recorder = stack[-1]
        rebind = receiver is not recorder.receiver
        for guard in guards.guards:
            if id(guard) not in recorder.seen:
                recorder.seen.add(id(guard))
                recorder.guards.append(_ReceiverBound(guard, receiver) if rebind and receiver is not None
                                       else guard)


def record_global(fn_globals: dict, name: str, value) -> None:
    """A global read: guarded on the value the name is bound to in the module."""
    stack = _stack()
    if stack:
        recorder, key = stack[-1], ("global", id(fn_globals), name)
        if key not in recorder.seen:   # (a name read again, `np` on every line, is guarded once)
            recorder.add(key, _global_reader(recorder, fn_globals, name), value, f"the global {name!r}")


def record_builtin(fn_globals: dict, name: str) -> None:
    """A name resolved to a builtin: guarded on staying absent from the globals."""
    stack = _stack()
    if stack:
        stack[-1].add(("global", id(fn_globals), name), _global_reader(stack[-1], fn_globals, name),
                      _MISSING, f"the builtin {name!r}")


def _global_reader(recorder: "_Recorder", fn_globals: dict, name: str):
    """How a guard reads the global `name` again. Where `fn_globals` are the staged
    function's own, through a weak reference to that function: its cache entry (which
    keeps the guard) is weakly keyed by the function, and the globals hold the function,
    so a guard holding them would keep both, and everything staged from them, alive
    for good once the module is dropped (a module loaded and let go, the functions of
    exec'd code). A function that died fails its guard (the read raises)."""
    function = recorder.function
    if function is not None and function.__globals__ is fn_globals:
        function_ref = weakref.ref(function)
        return lambda: function_ref().__globals__.get(name, _MISSING)
    return lambda: fn_globals.get(name, _MISSING)


def record_cell(cell, name: str, value) -> None:
    stack = _stack()
    if stack:
        stack[-1].add(("cell", id(cell)), lambda: cell.cell_contents, value, f"the closure variable {name!r}")


def record_defaults(fn) -> None:
    """The default values of a function staged (they are bound into the staging). A
    function without defaults was called with every argument: defaults given to it later
    cannot change this staging, so that guard may go unchecked."""
    stack = _stack()
    if stack:
        fn_ref = weakref.ref(fn)
        defaults = (fn.__defaults__, fn.__kwdefaults__)
        stack[-1].add(("defaults", id(fn)), lambda: (fn_ref().__defaults__, fn_ref().__kwdefaults__),
                      defaults, f"the defaults of {fn.__qualname__}", stable=defaults == (None, None))


def record_receiver(obj, describe: str) -> None:
    """The object a staged method is called on (`self`): its attributes are guarded as
    those of objects reached from a global. The staging's own receiver is read as the
    receiver of the call checked (see `Guards`); another object through a weak reference
    where it allows one."""
    stack = _stack()
    if not stack or isinstance(obj, types.ModuleType) or id(obj) in stack[-1].origins:
        return
    recorder = stack[-1]
    recorder.origins[id(obj)] = (_current_receiver if obj is recorder.receiver else _reference(obj), describe)
    recorder.keep.append(obj)


def record_attribute(obj, attr: str, value) -> None:
    """`obj.attr` read while staging: guarded when `obj` was reached from a global or cell."""
    record_derived(obj, "." + attr, lambda o: getattr(o, attr), value)


def record_derived(obj, what: str, derive, value) -> None:
    """A value read from `obj` while staging, by `derive(obj)`: `getattr(obj, name, default)`,
    `type(obj)` or `vars(obj)` called as builtins (named `what` after `obj`'s own name);
    guarded when `obj` was reached from a global, a cell or the receiver."""
    stack = _stack()
    if not stack:
        return
    recorder = stack[-1]
    origin = recorder.origins.get(id(obj))
    if origin is None or isinstance(obj, types.ModuleType):
        return
    read_obj, describe = origin
    recorder.add(("derived", id(obj), what), lambda: derive(read_obj()), value, describe + what)


def record_items(container, items) -> None:
    """Items of a list, tuple or dict reached from a global, a cell or the receiver, by a
    subscript or an unrolled loop (`self.layers[0]`, `self.blocks["enc"]`, `for layer in
    self.layers`): their attributes are guarded as those of the container's (the
    container's own guard compares which objects it holds). `items` are (key, item) pairs."""
    stack = _stack()
    if not stack or not isinstance(container, (list, tuple, dict)):
        return
    recorder = stack[-1]
    origin = recorder.origins.get(id(container))
    if origin is None:
        return
    read_container, describe = origin
    for index, item in items:
        if id(item) not in recorder.origins and not isinstance(item, (types.ModuleType,) + _SCALARS):
            recorder.origins[id(item)] = (lambda i=index: read_container()[i], f"{describe}[{index}]")
            recorder.keep.append(item)


def record_module_attribute(module: types.ModuleType, attr: str, value) -> None:
    """`module.attr` read while staging (or `from module import attr` in a staged function):
    guarded where the module is the user's own (`is_library_module`)."""
    stack = _stack()
    if stack and not is_library_module(module):
        module_ref = weakref.ref(module)
        stack[-1].add(("module", id(module), attr), lambda: getattr(module_ref(), attr, _MISSING), value,
                      f"{module.__name__}.{attr}")


def record_cached_call(fn, args, kwargs, result) -> None:
    """A call of a `functools.lru_cache` function on static arguments, which runs the
    function outside staging (the values it reads are not recorded) or not at all (a
    cache hit): guarded by calling it again, a lookup while the cache holds the result,
    the function's new answer once the cache is cleared."""
    stack = _stack()
    if stack:
        fn_ref = _reference(fn)
        stack[-1].add(("cached call", id(fn), len(stack[-1].reads)), lambda: fn_ref()(*args, **kwargs), result,
                      f"the result of {getattr(fn, '__qualname__', 'a cached function')}()")


def _library_roots() -> tuple:
    """The folders of the standard library and of installed packages."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return tuple(sorted(_folder(root) for root in roots if root))


def _folder(path: str) -> str:
    """`path` as a folder prefix, spelled as `_folder` spells every other path (on Windows
    too, where the case and the separators of a module's file may differ from sysconfig's)."""
    return os.path.join(os.path.normcase(os.path.normpath(path)), "")


_LIBRARY_ROOTS = _library_roots()
_LIBRARY_PACKAGES = frozenset({"numpy", "scipy", "s2s", "s2s_runtime"})
_library_modules: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def is_library_module(module: types.ModuleType) -> bool:
    """Whether `module` is a library's, whose attributes staging does not guard: NumPy,
    SciPy and s2s, built-in modules, and modules loaded from the standard library's or
    installed packages' folders. The user's files (an editable install too) and modules
    made by hand are not."""
    known = _library_modules.get(module)
    if known is None:
        spec = getattr(module, "__spec__", None)
        origin = getattr(module, "__file__", None) or getattr(spec, "origin", None)
        known = (module.__name__.partition(".")[0] in _LIBRARY_PACKAGES
                 or origin in ("built-in", "frozen") or module.__name__ in sys.builtin_module_names
                 or (isinstance(origin, str) and _folder(origin).startswith(_LIBRARY_ROOTS)))
        _library_modules[module] = known
    return known


def _fingerprint(value, refs: list | None, large_arrays: list | None):
    """What a guard compares (see the module docstring). `refs` (at staging) collects the
    objects compared by identity; `large_arrays` the arrays too large to hash."""
    kind = type(value)
    if value is _MISSING:
        return ("missing",)
    if isinstance(value, _SCALARS):
        return (kind, repr(value))
    if kind is tuple or kind is list:
        return (kind, tuple(_fingerprint(v, refs, large_arrays) for v in value))
    if kind is dict:
        return (kind, _items_fingerprint(value.items(), refs, large_arrays))
    if kind is types.FunctionType:   # (the most common object read: a helper)
        return ("identity", _identity(value, refs))
    if isinstance(value, types.MethodType):   # a new bound-method object on each read
        return (kind, _fingerprint(value.__func__, refs, large_arrays),
                ("identity", _identity(value.__self__, refs)))
    if isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and \
            not isinstance(value.__self__, types.ModuleType):   # `items.append`: likewise
        return (kind, value.__name__, ("identity", _identity(value.__self__, refs)))
    if isinstance(value, _MAPPINGS):
        return _mapping_fingerprint(value, refs, large_arrays)
    if isinstance(value, _SEQUENCES):
        return (kind, tuple(_fingerprint(v, refs, large_arrays) for v in value))
    if isinstance(value, (set, frozenset)):
        return (kind, frozenset(_fingerprint(v, refs, large_arrays) for v in value))
    _identity(value, refs)
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        mask = np.ma.getmask(value) if isinstance(value, np.ma.MaskedArray) else None
        return (kind, id(value), value.shape, value.dtype.str) + _bytes_fingerprint(
            value, value.nbytes, large_arrays, lambda: np.ascontiguousarray(value).tobytes()
            + (b"" if mask is None or mask is np.ma.nomask else np.ascontiguousarray(mask).tobytes()))
    if isinstance(value, _BUFFERS):
        view = memoryview(value)
        return (kind, id(value), view.format, view.shape) + _bytes_fingerprint(
            value, view.nbytes, large_arrays, view.tobytes)
    return ("identity", id(value))


# Containers guarded by content beyond the exact tuple, list and dict (their subclasses:
# named tuples, OrderedDict, defaultdict, Counter; a class's `vars()`).
_SEQUENCES = (tuple, list, collections.deque, collections.UserList)
_MAPPINGS = (dict, types.MappingProxyType, collections.ChainMap, collections.UserDict)
_BUFFERS = (bytearray, array.array, memoryview)


def _mapping_fingerprint(value, refs, large_arrays):
    kind = type(value)
    if isinstance(value, collections.ChainMap):
        return (kind, tuple(_fingerprint(m, refs, large_arrays) for m in value.maps))
    if isinstance(value, collections.UserDict):
        return (kind, _fingerprint(value.data, refs, large_arrays))
    items = dict.items(value) if isinstance(value, dict) else value.items()
    factory = getattr(value, "default_factory", None) if isinstance(value, collections.defaultdict) else None
    return (kind, _fingerprint(factory, refs, large_arrays), _items_fingerprint(items, refs, large_arrays))


def _items_fingerprint(items, refs, large_arrays) -> tuple:
    return tuple((_fingerprint(k, refs, large_arrays), _fingerprint(v, refs, large_arrays)) for k, v in items)


def _bytes_fingerprint(value, nbytes: int, large_arrays: list | None, read_bytes) -> tuple:
    """A hash of the bytes `read_bytes()` returns, for a buffer small enough to hash on
    every check; nothing for a larger one (noted in `large_arrays` at staging)."""
    if nbytes <= SMALL_ARRAY_BYTES:
        return (hashlib.blake2b(read_bytes(), digest_size=16).digest(),)
    if large_arrays is not None:
        large_arrays.append((getattr(value, "shape", (len(value),)), nbytes))
    return ()


def _identity(value, refs: list | None) -> int:
    """`id(value)`, with the object kept comparable (at staging, `refs` is given): a weak
    reference where possible (a dead one fails the guard), else the object itself."""
    if refs is not None:
        try:
            refs.append(weakref.ref(value))
        except TypeError:
            refs.append(value)
    return id(value)
