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
- tuples, lists, dicts: their fingerprinted contents (lists and dicts are mutated in place);
- NumPy arrays of at most `SMALL_ARRAY_BYTES`: identity, shape, dtype and a hash of the
  bytes, so an in-place change re-stages; larger arrays by identity, shape and dtype only,
  with a warning at staging that in-place changes are not seen (hashing them on every
  call would cost more than the call);
- anything else (functions, objects, modules): identity, held by a weak reference where
  the object allows one (a guard must not keep the user's objects alive).

Attributes are guarded on objects reached from a global or a closure cell (not on
arguments, which are the call's own, nor on modules: their attributes are the functions
and constants of a library, and guarding each `np.sin` would be checked on every call).
"""
from __future__ import annotations

import hashlib
import threading
import types
import warnings
import weakref

import numpy as np

__all__ = ["Guards", "include", "record_attribute", "record_builtin", "record_cell", "record_defaults",
           "record_global", "record_receiver", "recording", "SMALL_ARRAY_BYTES"]

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

    def result(self, where: str) -> Guards:
        """The guards, fingerprinted as the values are when staging ends: a function that
        changes what it reads while staged (appends to a closure list) is not stale."""
        recorder = self.recorder
        large_arrays: list = []
        guards = [_Guard(*read, large_arrays) for read in recorder.reads]
        for name, shape, nbytes in large_arrays:
            warnings.warn(
                f"{where} reads {name}, an array of shape {shape} ({nbytes} bytes), as a constant: it is captured "
                f"by identity, and a change made to it in place will not be seen (arrays up to "
                f"{SMALL_ARRAY_BYTES} bytes are checked by content); pass it as an argument, or "
                "assign a new array to the name after changing it", UserWarning, stacklevel=2)
        return Guards(guards + recorder.guards)


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
    stack = _stack()
    if not stack:
        return
    recorder = stack[-1]
    origin = recorder.origins.get(id(obj))
    if origin is None or isinstance(obj, types.ModuleType):
        return
    read_obj, describe = origin
    recorder.add(("attribute", id(obj), attr), lambda: getattr(read_obj(), attr),
                 value, f"{describe}.{attr}")


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
        return (kind, tuple((_fingerprint(k, refs, large_arrays), _fingerprint(v, refs, large_arrays))
                            for k, v in value.items()))
    if isinstance(value, types.MethodType):   # a new bound-method object on each read
        return (kind, _fingerprint(value.__func__, refs, large_arrays),
                ("identity", _identity(value.__self__, refs)))
    if isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and \
            not isinstance(value.__self__, types.ModuleType):   # `items.append`: likewise
        return (kind, value.__name__, ("identity", _identity(value.__self__, refs)))
    _identity(value, refs)
    if kind is np.ndarray and not value.dtype.hasobject:
        if value.nbytes <= SMALL_ARRAY_BYTES:
            digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).digest()
            return (kind, id(value), value.shape, value.dtype.str, digest)
        if large_arrays is not None:
            large_arrays.append((value.shape, value.nbytes))
        return (kind, id(value), value.shape, value.dtype.str)
    return ("identity", id(value))


def _identity(value, refs: list | None) -> int:
    """`id(value)`, with the object kept comparable (at staging, `refs` is given): a weak
    reference where possible (a dead one fails the guard), else the object itself."""
    if refs is not None:
        try:
            refs.append(weakref.ref(value))
        except TypeError:
            refs.append(value)
    return id(value)
