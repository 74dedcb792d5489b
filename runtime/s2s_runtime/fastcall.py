"""What runs on every call that jaxlib's C++ dispatcher makes: the jitted function the user
calls (`Caller`), which sets jax's x64 setting for its thread around it when it must
(`set_jax_x64`, `callers_jax_x64`), and the storage of each result (`ResultBase`).

All of it is written in C (`_fastcall.c`, built by `pip install` where a C compiler is
found): in Python each costs a frame per call, together about a fifth of a small call's
time. The definitions below are the same in Python, used where the extension was not built
or when S2S_PURE_PYTHON_CALLS=1 is set; `COMPILED` says which are in use. The tests run
both.
"""
from __future__ import annotations

import os
import threading


class _Callers(threading.local):
    value = None   # jax's x64 as the caller had it, while a call that swapped it runs


_callers = _Callers()
_jax_x64 = [None, True]   # jax's x64 setting (None until jax is loaded), s2s's x64


def python_set_jax_x64(setting, value) -> None:
    """What each call swaps: jax's x64 setting (a jaxlib Config; None while jax is not
    loaded, and nothing is swapped) is set to s2s's `value` for the calling thread, unless
    it has that value already, outside any other swapping call. jaxlib's dispatcher types a
    call's arguments by jax's setting once jax is loaded."""
    _jax_x64[:] = [setting, value]


def python_callers_jax_x64():
    """jax's x64 as the caller had it (its thread-local value, maybe jaxlib's `unset`),
    inside a call that swapped it; else None. Code of the user's run while the call stages
    is given it back."""
    return _callers.value


def _swapping_call(target, args, kwargs):
    setting, ours = _jax_x64
    if setting is None:
        return target(*args, **kwargs)
    outer = _callers.value
    if outer is None and setting.value == ours:
        return target(*args, **kwargs)
    previous = setting.swap_local(ours)
    try:
        _callers.value = previous
        return target(*args, **kwargs)
    finally:
        _callers.value = outer
        setting.set_local(previous)


class PythonCaller:
    """A callable whose call is its `_target`'s (jaxlib's dispatcher, or a function that
    checks something first), with jax's x64 swapped around it (see `set_jax_x64`). When the
    target raises an exception of one of the classes in `_refused` (not also of `_clean`),
    the call is `self._on_refused(error, args, kwargs)`'s instead. An exception of a
    `_clean` class (the user's mistake, told in its message) leaves without the frames it
    came through. Subclasses give `_refused`, `_clean` and `_on_refused`; they are read
    only when a call fails."""

    __slots__ = ("_target",)

    def __init__(self):
        self._target = None

    def __call__(self, /, *args, **kwargs):
        target = self._target
        if target is None:
            raise TypeError(f"{type(self).__name__} has nothing to call yet")
        try:
            return _swapping_call(target, args, kwargs)
        except BaseException as error:   # what happens next is decided outside the handler
            failure = error
        clean = isinstance(failure, getattr(self, "_clean", ()))
        if not clean and isinstance(failure, getattr(self, "_refused", ())):
            try:
                return self._on_refused(failure, args, kwargs)
            except BaseException as error:
                failure = error
            clean = isinstance(failure, getattr(self, "_clean", ()))
        raise failure.with_traceback(None) if clean else failure


# ResultBase's fields, each None until set.
RESULT_FIELDS = ("_buffer", "_device", "_value", "_donated_as", "_shape", "_dtype")


class PythonResultBase:
    """The storage of `s2s.Array`: its device buffer and device, the NumPy copy once read,
    what it was donated as, and the shape and dtype when given (else the buffer's).
    Unset fields read None."""

    __slots__ = RESULT_FIELDS + ("__weakref__",)

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self._buffer = self._device = self._value = self._donated_as = self._shape = self._dtype = None
        return self

    @classmethod
    def _from_dispatch(cls, device, buffers):
        """The Array around a result buffer the dispatcher made (its pytree node's
        unflatten): `cls._from_dispatch(device, (buffer,))`."""
        if type(buffers) is not tuple or len(buffers) != 1:
            raise TypeError("_from_dispatch takes (device, (buffer,))")
        self = cls.__new__(cls)
        self._device = device
        self._buffer = buffers[0]
        return self

    def _live(self):
        buffer = self._buffer
        if self._donated_as is not None or buffer is None:
            return self._live_buffer()
        return buffer

    def _to_dispatch(self):
        """((buffer,), device): what the dispatcher passes for this Array (its pytree
        node's flatten); a donated one raises through `_live_buffer`."""
        return (self._live(),), self._device

    def block_until_ready(self):
        """Waits until the computation that makes this Array has finished; returns it."""
        self._live().block_until_ready()
        return self


Caller, ResultBase, COMPILED = PythonCaller, PythonResultBase, False
set_jax_x64, callers_jax_x64 = python_set_jax_x64, python_callers_jax_x64
if os.environ.get("S2S_PURE_PYTHON_CALLS") != "1":
    try:   # the same, in C
        from s2s_runtime._fastcall import Caller, ResultBase, callers_jax_x64, set_jax_x64
        COMPILED = True
    except ImportError:   # not built (no C compiler where s2s was installed)
        pass
