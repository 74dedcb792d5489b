"""Python effects inside a body s2s stages once for all the times it runs.

A loop staged as one loop (scan, while_loop) has its body staged once and run n times,
and each branch of an `if` on an array is staged though at most one of them runs. What
such a body does to Python objects, rather than to staged values, happens once, while
staging: `next(it)` moves an iterator made before the loop on by one item where Python
moves it n times, `rng.random()` of Python's `random` draws one number that every pass
reuses, `stack.pop()` in a helper the body calls pops once. The number served would be
wrong, with no error.

So while a body is staged once (`staging_once`), the walker asks before each Python
operation that can change an object (an opaque call: a builtin, a method written in C or
the standard library; a store or `del` into an object; iterating an iterator) whether
the object was made before the body, and if so refuses (`OnceStagedEffect`) before the
operation runs, so nothing has moved yet. A `for` loop over a static range or an array
then unrolls, as for any other reason it cannot be one loop (`Loops._staged_for`); a
loop whose trip count is an array's value, and an `if` on an array, report the error
with what to write instead. Objects the body makes itself (a list display, a `zip(...)`,
an instance of a class) are its own to change: `made_in_body` records them.
"""
from __future__ import annotations

import builtins
import copy
import threading
import types
from contextlib import contextmanager

import numpy as np

from s2s.errors import StagingError
from s2s.staging import Tracer

# Methods of Python's containers that read and never change them (`params.get("W")`,
# `d.items()`), so calling them in a body staged once is no effect.
READ_ONLY_METHODS = frozenset({
    "get", "keys", "values", "items", "copy", "index", "count", "union", "intersection",
    "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "fromkeys",
    "__getitem__", "__len__", "__contains__", "__iter__"})

# Functions s2s runs as Python that read their arguments and never change them (besides
# classes, whose constructors copy or wrap what they are given: `list(xs)`, `deque(xs)`).
# Any other such call given a changeable object made before the body (`heapq.heappop(h)`,
# `bisect.insort(xs, v)`, `setattr(obj, ...)`, `list.append(xs, v)`) may change it.
READ_ONLY_CALLS = frozenset({
    builtins.len, builtins.isinstance, builtins.issubclass, builtins.id, builtins.hash, builtins.repr,
    builtins.format, builtins.abs, builtins.min, builtins.max, builtins.sum, builtins.sorted, builtins.any,
    builtins.all, builtins.round, builtins.divmod, builtins.pow, builtins.print, builtins.callable,
    builtins.getattr, builtins.hasattr, builtins.iter, copy.copy, copy.deepcopy})

# Values that no Python operation changes (or that s2s stages rather than runs).
_UNCHANGING = (bool, int, float, complex, str, bytes, tuple, frozenset, range, slice, type(None),
               np.generic, np.dtype, np.ndarray, Tracer, type, types.ModuleType, types.FunctionType,
               types.BuiltinFunctionType, types.MethodType)


class ChecksItsOwnStaging:
    """A Python object that refuses by itself to change from a body staged once, with help
    of its own (a generator s2s stages: `generators.StagedGenerator`): left to it."""
    __slots__ = ()


class OnceStagedEffect(StagingError):
    """A Python object made before a body staged once would be changed while staging it."""


class _Body:
    """One body being staged once: what it is, for messages, and the objects it made
    (held, so their ids stay theirs while the body is staged)."""
    __slots__ = ("what", "made")

    def __init__(self, what: str):
        self.what = what
        self.made: dict[int, object] = {}


_local = threading.local()


def _bodies() -> list:
    bodies = getattr(_local, "bodies", None)
    if bodies is None:
        bodies = _local.bodies = []
    return bodies


@contextmanager
def staging_once(what: str):
    """While a body that runs any number of times is staged once: `what` names it in
    errors ("a loop staged as one loop", "a branch of an `if` on an array"). What a body
    nested in it makes is the enclosing body's own too."""
    bodies = _bodies()
    body = _Body(what)
    bodies.append(body)
    try:
        yield
    finally:
        bodies.pop()
        if bodies:
            bodies[-1].made.update(body.made)


def made_in_body(value):
    """Records `value` (a list, dict or set display, a comprehension's result, an object a
    class or `iter` made) as made by the body being staged once, if any; returns it."""
    bodies = _bodies()
    if bodies and not isinstance(value, _UNCHANGING):
        bodies[-1].made[id(value)] = value
    return value


def _made_before(value) -> bool:
    """Whether `value` is a changeable Python object from outside the body staged once."""
    return not isinstance(value, (_UNCHANGING, ChecksItsOwnStaging)) and id(value) not in _bodies()[-1].made


def is_iterator(value) -> bool:
    """Whether taking items from `value` moves it on (a container gives a new iterator each time)."""
    return hasattr(type(value), "__next__")


def _refuse(what: str, help: str):
    raise OnceStagedEffect(f"{what} inside {_bodies()[-1].what}, which s2s stages once, not each time it "
                           "runs: Python would change the object each time, staging would change it once", help)


_TAKE_BEFORE = ("take what you need from it before the loop (`items = list(it)`, `first = next(it)`) and "
                "index that with the loop's index or a carried counter; or loop over a static `range(n)`, "
                "which s2s then unrolls")


def check_call(fn, args, kwargs) -> None:
    """Refuses an opaque call (one s2s runs as Python rather than stages) that would change
    a Python object made before the body staged once: a method of it that is not read-only
    (`stack.pop()`, `rng.random()`, `f.readline()`), an iterator given to the call, which
    may advance it (`next(it)`, `sum(it)`, `zip(it, ys)`), or any changeable object given
    to a call not known to read only (`heapq.heappop(h)`, `setattr(obj, "n", v)`)."""
    if not _bodies():
        return
    receiver = getattr(fn, "__self__", None)
    if receiver is not None and _made_before(receiver) \
            and getattr(fn, "__name__", "") not in READ_ONLY_METHODS:
        _refuse(f"`.{fn.__name__}()` may change the {type(receiver).__name__} it is called on, made before "
                "it", "call it before the loop and keep the values it gives; " + _TAKE_BEFORE)
    reads_only = isinstance(fn, type) or _is_read_only_call(fn)
    for value in (*args, *kwargs.values()):
        if not _made_before(value):
            continue
        if is_iterator(value):
            _refuse(f"{getattr(fn, '__name__', 'this call')}() advances a {type(value).__name__} made "
                    "before it", _TAKE_BEFORE)
        if not reads_only:
            _refuse(f"{getattr(fn, '__name__', 'this call')}() may change the {type(value).__name__} made "
                    "before it that it is given",
                    "make the calls before the loop and keep what they give; or loop over a static "
                    "`range(n)`, which s2s then unrolls")


def _is_read_only_call(fn) -> bool:
    try:
        return fn in READ_ONLY_CALLS
    except TypeError:   # (an unhashable callable)
        return False


def record_call_result(fn, args, result):
    """An object a class or `iter` made (`zip(xs, ys)`, `Counter()`, `iter(row)`), in a body
    staged once, is that body's own; not one of the arguments given back (`iter(it)`)."""
    if _bodies() and (isinstance(fn, type) or fn is builtins.iter) and not any(result is a for a in args):
        made_in_body(result)
    return result


def checked_iterable(iterable):
    """`iterable`, which the walker is about to iterate (`for v in it:`, `[v for v in it]`);
    refused, in a body staged once, when it is an iterator made before the body: each pass
    would take the next items in Python."""
    if _bodies() and is_iterator(iterable) and _made_before(iterable):
        _refuse(f"this loop takes the items of a {type(iterable).__name__} made before it", _TAKE_BEFORE)
    return iterable


def check_store(obj, what: str) -> None:
    """Refuses a store, augmented store or `del` (`what`) into a Python object made before
    the body staged once (`d[k] = v`, `self.n += 1` in a method the body calls)."""
    if _bodies() and _made_before(obj):
        _refuse(f"{what} changes the {type(obj).__name__} it stores into, made before it",
                "assign the new value to a name in the body (a staged loop carries it, an `if` on an "
                "array gives it as its result) and store it after the loop or `if`")
