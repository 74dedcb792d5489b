"""jit: a function compiled for each kind of arguments it is called with.

One `Jitted` holds what every backend shares: staging (through the staging cache), the
fast path for calls whose arguments are all arrays, and inlining when called on staged
values. What differs sits in a backend object with one interface: `call` (the entry point
of a call) and `runner` (how one `Staged` is run):

- `XlaBackend` lowers the jaxpr to StableHLO, compiles it with jaxlib on a device, and
  puts jaxlib's C++ dispatcher in front, which makes the calls it has seen without Python;
- `PythonBackend` runs the emitted NumPy module (see `s2s.eager`).

What is compiled hangs off the staging-cache entry (see `s2s.frontend`), so it lives as
long as the user's function and is shared by every jit of the same function.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import sys
import threading
import weakref
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from s2s import config, dtypes, tree as tree_util
from s2s.core import host_objects
from s2s.donation import donated_leaves, refuse_donating_twice
from s2s.eager import emitted_call_args, emitted_function, emitted_module, function_name, host_leaves
from s2s.emit.signature import emitted_signature
from s2s.emit.stablehlo import Lowered, device_dtypes, donation_aliases, lower, replicas_needed
from s2s.errors import (USER_ERRORS, StagingValueError, api_boundary, errors_shown_clean, marks_boundary,
                        shown_to_user, warn_at_user_code)
from s2s.frontend import BoundCall, Staged, bind_function_call, signature_of, stage_call, staging_receiver
from s2s.frontend.args import normalize_argnums
from s2s.pmap import ReplicatedProgram
from s2s.staging import current_builder, inline_jaxpr
from s2s.transformed import TransformedFunction
from s2s_runtime.array import Array
from s2s_runtime.ops import generator_seed
from s2s_runtime.fastcall import Caller, callers_jax_x64
from s2s_runtime.xla import (Executable, devices, dispatch_x64, dispatched_leaves, dispatcher,
                             is_refused_call, jax_x64_setting, refuse_in_dispatcher)


@dataclasses.dataclass
class Runner:
    """How a backend runs one `Staged`. Both functions return (the result, the C++
    dispatcher's fast path for calls like this one, or None).

    `call(bound, args, kwargs)` runs any call of the user's function (`bound`, its
    `BoundCall`, as the user passed them: `args` and `kwargs`). `call_with_inputs(flat,
    args, kwargs)` runs a call whose positional arguments are the jaxpr's inputs one to one
    (`flat`), without binding them; it is None where the backend cannot take such calls
    so, and they go through `call`.
    """
    call: Callable
    call_with_inputs: Callable | None


class Jitted(Caller, TransformedFunction):
    """A function compiled for each kind of arguments it is called with.

    backend="xla" lowers the jaxpr to StableHLO and runs it through jaxlib on `device`,
    returning `s2s.Array`s; backend="python" runs the emitted NumPy module.

    A call is its backend's (`Caller`, in C where built: no Python frame of s2s's between
    the user and jaxlib's dispatcher when the backend lets the dispatcher take calls
    directly). It is the boundary of a jitted call: an error that is the user's to fix is
    shown without the frames it came through (`_clean`).

    Called while a function is staged (inside grad, vmap, another jit ...) it is inlined
    (see `_inlined`). It keeps the function's name, as jax.jit does.
    """

    keeps_name = True

    def __init__(self, fn, static_argnums=(), static_argnames=(), dynamic_argnums=(),
                 donate_argnums=(), device=None, backend: str = "xla"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(map(repr, BACKENDS))}")
        self.static_argnums = normalize_argnums(static_argnums, what="static_argnums")
        self.static_argnames = static_argnames
        self.dynamic_argnums = normalize_argnums(dynamic_argnums, what="dynamic_argnums")
        self.donate_argnums = normalize_argnums(donate_argnums, what="donate_argnums")
        self.device = device
        self.backend = backend
        TransformedFunction.__init__(self, fn, "jit", (self.static_argnums, _argnames(static_argnames),
                                                       self.dynamic_argnums))
        _check_static_against_signature(fn, self.static_argnums, _argnames(static_argnames))
        self._backend = BACKENDS[backend](self)
        self._target = self._backend.call
        # Calls whose positional arguments are all arrays skip the staging-cache lookup:
        # (shapes and dtypes, config) -> (the staging's guards, the receiver they are
        # checked with, Runner.call_with_inputs).
        self._fast: dict[tuple, tuple] = {}

    def __getstate__(self):
        """A copy gets its own backend: the backend reaches back to its Jitted (and an XLA
        dispatcher is made for one Jitted), as do the runners of the fast path."""
        return {**self.__dict__, "_backend": copy.copy(self._backend), "_fast": {}}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._backend.jitted = weakref.ref(self)
        self._target = self._backend.call

    @property
    def _clean(self) -> tuple:
        """The errors a failed call raises without the frames they came through (`Caller`),
        as `api_boundary` does: the user's, unless a boundary further out shows them."""
        return errors_shown_clean()

    @property
    def _refused(self) -> tuple:
        """The errors by which the backend's target refuses a call (`Caller`)."""
        return self._backend.refused

    def _on_refused(self, error: Exception, args, kwargs):
        """A call whose target raised one of the backend's `refused` errors (`Caller`)."""
        return self._backend.call_refused(error, args, kwargs)

    @marks_boundary
    def _call_in_python(self, args, kwargs):
        """A call made in Python: (the result, what the dispatcher needs to make the next
        call like it by itself, or None). The jitted call's boundary (see `errors`) is here
        and in the Caller: here an error that is the user's leaves as `api_boundary` makes
        it leave, without a frame more on the way; the Caller drops the frames between."""
        try:
            if current_builder() is not None:   # called while a function is staged
                return self._inlined(bind_function_call(self.fn, args, kwargs)), None
            by_position = not (kwargs or self.static_argnums or self.static_argnames)
            fast, call = _arrays_signature(args) if by_position else None, None
            if fast is None:
                call = bind_function_call(self.fn, args, kwargs)
                if by_position:
                    fast = _bound_arrays_signature(call)
            if fast is not None:
                entry = self._fast.get(fast[0])
                if entry is not None:
                    guards, receiver, run = entry
                    if guards.hold(receiver, changing_only=True):   # as the dispatcher's calls
                        return run(fast[1], args, kwargs)
                    self._fast.pop(fast[0], None)   # stale: staged again below
            call = call or bind_function_call(self.fn, args, kwargs)
            staged = self._staged(call)
            runner = self._backend.runner(staged, call)
            if fast is not None and runner.call_with_inputs is not None and \
                    len(staged.closed.jaxpr.invars) == len(fast[1]):
                self._fast[fast[0]] = (staged.guards, staging_receiver(self.fn), runner.call_with_inputs)
            return runner.call(call, args, kwargs)
        except USER_ERRORS as error:
            raise shown_to_user(error, sys._getframe(1))

    def _staged(self, call: BoundCall) -> Staged:
        """Staged with jax's x64 as the caller had it (see `_CallersJaxX64`)."""
        with _CallersJaxX64():
            return stage_call(self.fn, call, static_argnums=self.static_argnums,
                              static_argnames=self.static_argnames, dynamic_argnums=self.dynamic_argnums)

    def _inlined(self, call: BoundCall):
        """Called inside a function being staged (`jit(f)` called in another jitted or
        differentiated function): its equations join that function's, as jax inlines a
        nested jit and as every other transform called there is (`eager.run`); the backend,
        device and donation are the outer call's. It is inlined whatever its arguments
        are: a closure over the staged function's values (`jit(lambda: x * 2)()`,
        `jit(partial(f, x))(2.0)`) reads them as the inner staging's constants, which
        inlining makes the outer values again, where running it on its own would need them
        concrete."""
        staged = self._staged(call)
        return staged.out_tree.unflatten(inline_jaxpr(staged.closed, staged.inputs(call)))

    @api_boundary
    def lower(self, *args, **kwargs) -> "Lowered":
        """The StableHLO this function lowers to for these arguments (JAX's `.lower`)."""
        call = bind_function_call(self.fn, args, kwargs)
        staged = self._staged(call)
        return Lowered(_lowered_text(staged, donated_leaves(staged, call, self.donate_argnums)),
                       device_dtypes(staged.closed.jaxpr), self.device)


@api_boundary
def jit(fn: Callable[..., Any] | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Iterable[str] = (), dynamic_argnums: int | Sequence[int] = (),
        donate_argnums: int | Sequence[int] = (), device: Any = None, backend: str = "xla") -> Callable[..., Any]:
    """`@s2s.jit` or `s2s.jit(f, static_argnums=..., donate_argnums=..., device=...)`.

    Donated positional arguments give their buffers to outputs of the same shape and
    dtype; an `s2s.Array` passed there is invalid after the call (DonatedBufferError).
    `device` (one of `s2s.devices()`) alone decides where the computation runs.
    """
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 dynamic_argnums=dynamic_argnums, donate_argnums=donate_argnums,
                                 device=device, backend=backend)
    return Jitted(fn, static_argnums, static_argnames, dynamic_argnums, donate_argnums, device, backend)


def _argnames(value) -> tuple:
    """Argument names as a tuple: one alone may be given bare."""
    return (value,) if isinstance(value, str) else tuple(value)


def _check_static_against_signature(fn, static_argnums: tuple, static_argnames: tuple) -> None:
    """static_argnums and static_argnames checked against `fn`'s parameters when jit is
    built, as JAX checks them (a ValueError either way): a number past the positional
    parameters (unless `*args` takes any count), a name no parameter has (unless
    `**kwargs` takes any). A function without a signature to read is checked at its calls."""
    try:
        parameters = list(signature_of(fn).parameters.values())
    except (TypeError, ValueError):
        return
    kinds = {p.kind for p in parameters}
    if inspect.Parameter.VAR_POSITIONAL not in kinds:
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        normalize_argnums(static_argnums, len(positional), "static_argnums")
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = [name for name in static_argnames if name not in names]
        if unknown:
            raise StagingValueError(f"static_argnames names {', '.join(map(repr, unknown))}, but "
                                    f"{getattr(fn, '__name__', 'the function')} has no such parameter",
                                    f"name parameters it has: {', '.join(sorted(names)) or 'none'}")


class _RefusedArgument(Exception):
    """Raised while jaxlib's dispatcher flattens an argument s2s refuses: the call goes to
    the Python path, which says what is wrong."""


def _refuse_in_dispatcher(value):
    raise _RefusedArgument(type(value).__qualname__)


# The dispatcher types an ndarray subclass as the ndarray it derives from (it looks up the
# type's __mro__), so a matrix or masked array would run a jitted function compiled for
# plain arrays. As pytree nodes that refuse to flatten they never reach its cache.
for _refused_class in (np.matrix, np.ma.MaskedArray):
    refuse_in_dispatcher(_refused_class, _refuse_in_dispatcher)


def _arrays_signature(args) -> tuple | None:
    """((None, (shape, dtype) per argument, config), args) when every positional argument
    is an array (NumPy or s2s), the common case, found without binding or flattening: the
    key of the jit fast path, which skips the staging-cache lookup for such calls."""
    signature = _shapes_and_dtypes(args)
    return None if signature is None else ((None, signature, config.cache_key()), args)


def _bound_arrays_signature(call: BoundCall) -> tuple | None:
    """The fast path's key for a call by position whose arguments hold arrays in
    containers: ((the bound tree, (shape, dtype) per leaf, config), the positional
    arguments' leaves) when each of them is an array, else None."""
    leaves = call.leaves[:sum(len(r) for r in call.positional_leaf_ranges)]
    signature = _shapes_and_dtypes(leaves)
    return None if signature is None else ((call.tree, signature, config.cache_key()), leaves)


def _shapes_and_dtypes(values) -> tuple | None:
    """(shape, dtype) of each value when each is a NumPy array or an s2s.Array (exactly:
    a subclass may mean something else), else None."""
    signature = []
    for a in values:
        kind = type(a)
        if kind is not np.ndarray and kind is not Array:
            return None
        signature.append((a.shape, a.dtype))
    return tuple(signature)


# ---------------------------------------------------------------------------------------
# jax's x64 setting. Once jax is imported, jaxlib's dispatcher types and keys arguments by
# jax's x64 setting, not s2s's (see `s2s_runtime.xla.jax_x64_setting`): an XLA call sets
# it to s2s's value for its thread while it runs (`Caller`), and the user's code, which
# runs while it is staged and may call jax, sees the caller's value again (`_CallersJaxX64`).


class _CallersJaxX64:
    """Inside an XLA call, jax's x64 as the caller had it; elsewhere nothing changes."""

    def __enter__(self):
        jax_x64 = jax_x64_setting()
        caller = callers_jax_x64()
        self.restore = None
        if jax_x64 is not None and caller is not None:
            self.restore = jax_x64, jax_x64.swap_local(caller)

    def __exit__(self, *exc):
        if self.restore is not None:
            jax_x64, ours = self.restore
            jax_x64.set_local(ours)


# ---------------------------------------------------------------------------------------
# The backends


class XlaBackend:
    """StableHLO compiled by jaxlib on one device, with jaxlib's C++ dispatcher in front:
    one dispatcher per configuration, made when first called."""

    def __init__(self, jitted: Jitted):
        static = set(jitted.static_argnums)
        if static & set(jitted.donate_argnums):
            raise ValueError(f"argument(s) {sorted(static & set(jitted.donate_argnums))} are both static "
                             "and donated; only arrays can be donated")
        device = jitted.device
        if device is not None and not (hasattr(device, "platform") and hasattr(device, "id")):
            raise TypeError(f"device must be one of s2s.devices(), not {device!r}")
        # The dispatcher reaches the Jitted through a weak reference: a cycle through it
        # would outlive the user's function.
        self.jitted = weakref.ref(jitted)
        # The positions the dispatcher keys by value: none when any is counted from the end
        # (the dispatcher takes them as given); s2s still keeps those static.
        self.static_argnums = tuple(sorted(static)) if all(i >= 0 for i in static) else ()
        self.static_argnames = _argnames(jitted.static_argnames)
        self.name = jitted.__name__ if isinstance(getattr(jitted, "__name__", None), str) else "jitted"
        self._dispatch = None
        jax_x64_setting()   # found now if jax is loaded, so that the first call swaps it already
        # (guards, receiver) of the stagings the dispatcher was handed whose guards can
        # change (`Guards.stable`): it runs the calls it has seen without Python, so they
        # are checked before each call, and when one fails the dispatcher is replaced (its
        # fast paths dropped) and the call goes through Python, which stages again.
        # Empty for functions that read only modules, builtins and their arguments.
        self._checked: list[tuple] = []
        # Held while `_checked` and the Jitted's target change together: a thread must not
        # send calls straight to the dispatcher while another adds guards to check.
        self._lock = threading.Lock()

    def __getstate__(self):
        """A copy makes its own dispatcher, for the Jitted it is given to."""
        state = {**self.__dict__, "_dispatch": None, "_checked": []}
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # What the dispatcher raises when it refuses a call before running anything (see
    # `call_refused`); the Jitted hands those calls there.
    refused = (ValueError, _RefusedArgument, SystemError)

    def call(self, /, *args, **kwargs):
        """A call of the user's function that checks first what the dispatcher cannot (the
        guards of `_checked`), and makes the dispatcher when there is none. The Jitted calls
        the dispatcher itself, without this, while there is nothing to check (see
        `_hand_over`)."""
        if self._dispatch is None or (self._checked and not self._guards_hold()):
            self._new_dispatcher()
        elif not self._checked:
            with self._lock:
                if not self._checked:
                    self.jitted()._target = self._dispatch
        return self._dispatch(*args, **kwargs)

    def _guards_hold(self) -> bool:
        return all(guards.hold(receiver, changing_only=True) for guards, receiver in self._checked)

    def call_refused(self, error: Exception, args, kwargs):
        """A call the dispatcher refused before running anything (an argument it cannot key,
        one s2s refuses): made in Python, which says what is wrong, if anything."""
        if isinstance(error, ValueError) and not is_refused_call(error):
            raise error
        if isinstance(error, SystemError):
            # jaxlib's flatten of a too-deep tree leaves its RecursionError set, and the
            # dispatcher goes on into Python, which reports it this way.
            if isinstance(error.__cause__, RecursionError):
                raise tree_util.nested_too_deeply() from None
            raise error
        return self.jitted()._call_in_python(args, kwargs)[0]

    def _new_dispatcher(self) -> None:
        jitted = self.jitted
        self._dispatch = dispatcher(
            self.name, lambda *args, **kwargs: jitted()._call_in_python(args, kwargs)[0],
            lambda *args, **kwargs: (*jitted()._call_in_python(args, kwargs), False),
            self.static_argnums, self.static_argnames)
        with self._lock:
            self._checked = []
            jitted()._target = self.call

    def _hand_over(self, executable, leaves, flat, consts, result, outs, checked):
        """The dispatcher's fast path for calls like this one (or None), and how the Jitted
        makes later calls: straight through the dispatcher while no guards need checking,
        else through `call`.

        The fast path must match how the dispatcher typed this call (`dispatch_x64`), which
        is by s2s's x64 when the call swapped it in (see `Caller`). Typed 32-bit where s2s
        types 64-bit (jax loaded since the swap was set up), a float64 array keys as a
        float32 one would: the dispatcher gets no such fast path, and the next call swaps."""
        x64 = dispatch_x64()
        fast = None if config.values.enable_x64 and not x64 else \
            executable.fast_path(leaves, flat, consts, result, outs, x64)
        with self._lock:
            if fast is not None and checked is not None:
                self._checked.append(checked)
            self.jitted()._target = self.call if self._checked else self._dispatch
        return fast

    def runner(self, staged: Staged, call: BoundCall) -> Runner:
        """Runs the executable. The dispatcher gets no fast path for donating calls (it
        would not mark the donated Arrays) nor for outputs without data (float0 tangents of
        ints, made here as zeros), nor for calls with a static tuple: it keys static
        arguments by value and type, but not the types inside a tuple, where s2s tells
        (1, 2) from (1.0, 2.0)."""
        jitted = self.jitted()
        if replicas_needed(staged.closed.jaxpr) > 1:
            if donated_leaves(staged, call, jitted.donate_argnums):
                warn_at_user_code("Some donated buffers were not usable: a function that calls a pmap gives "
                                  "every replica a copy of each input, so none is donated")
            return _replicated_runner(staged)
        donated = donated_leaves(staged, call, jitted.donate_argnums)
        device = jitted.device or devices()[0]
        compiled = staged.artifact(("xla", device.id, tuple(donated)),
                                   lambda: _compile_xla(staged, device, donated))
        executable, consts, out_tree = compiled.executable, compiled.consts, staged.out_tree
        float0_outputs = [i for i, v in enumerate(staged.closed.jaxpr.outvars) if v.aval.dtype == dtypes.float0]
        # A program that draws takes a fresh seed from each generator on every call: in Python.
        generators = [obj.value for obj in host_objects(staged.closed.jaxpr)]
        dispatchable = not compiled.donated and not float0_outputs and not generators
        # The dispatcher checks no guards: `call` checks those it may need to (see `_checked`).
        checked = None if staged.guards.stable else (staged.guards, staging_receiver(jitted.fn))
        static_argnums, static_argnames = self.static_argnums, self.static_argnames

        def run(flat, args, kwargs):
            if len(compiled.donated) > 1:
                refuse_donating_twice(flat, compiled.donated, len(consts))
            outs = executable.execute([*consts, *flat, *map(generator_seed, generators)], compiled.donated)
            result = list(outs)
            for i in float0_outputs:
                result[i] = np.zeros(outs[i].shape, dtypes.float0)
            result = out_tree.unflatten(result)
            if not dispatchable:
                return result, None
            statics = [a for i, a in enumerate(args) if i in static_argnums] + \
                [v for k, v in kwargs.items() if k in static_argnames]
            if any(isinstance(a, tuple) for a in statics):
                return result, None
            leaves = dispatched_leaves(args, kwargs, static_argnums, static_argnames)
            if leaves is None:
                return result, None
            return result, self._hand_over(executable, leaves, flat, consts, result, outs, checked)
        return Runner(lambda bound, args, kwargs: run(staged.inputs(bound), args, kwargs), run)


def _replicated_runner(staged: Staged) -> Runner:
    """A function that calls pmaps runs as one module over the replicas they need (see
    `ReplicatedProgram`), on the first devices; without the dispatcher's fast path."""
    program = staged.artifact(("xla replicated", tuple(d.id for d in devices())),
                              lambda: ReplicatedProgram(staged.closed, devices()))

    def run(flat, args, kwargs):
        return staged.out_tree.unflatten(program(flat)), None
    return Runner(lambda bound, args, kwargs: run(staged.inputs(bound), args, kwargs), run)


class PythonBackend:
    """The emitted NumPy module, run on the host."""

    def __init__(self, jitted: Jitted):
        if jitted.donate_argnums or jitted.device is not None:
            raise ValueError("donate_argnums and device need backend='xla': the Python backend "
                             "runs NumPy on the host")
        self.jitted = weakref.ref(jitted)   # as XlaBackend's: no cycle through the Jitted

    refused = ()

    def call(self, /, *args, **kwargs):
        """A call of the user's function."""
        return self.jitted()._call_in_python(args, kwargs)[0]

    def runner(self, staged: Staged, call: BoundCall) -> Runner:
        """Runs the module `emit_python` shows. Without x64, 64-bit inputs run as the 32-bit
        types they were staged as, so only calls with x64 on take arrays as they come."""
        run = emitted_function(staged, "module", function_name(staged),
                               lambda name, options: emitted_module(staged, name, options))
        signature = staged.artifact("emitted signature", lambda: emitted_signature(staged))
        if signature.output_builder is None:   # the module returns the flat leaves
            run = _rebuilding_output_tree(run, staged.out_tree)
        canonicalize = not config.values.enable_x64

        def run_call(bound, args, kwargs):
            positional, keyword = emitted_call_args(staged, signature, bound, canonicalize)
            return run(*positional, **keyword), None

        in_dtypes = [v.aval.dtype for v in staged.closed.jaxpr.invars]

        def call_with_inputs(flat, args, kwargs):
            return run(*host_leaves(flat, in_dtypes)), None
        one_to_one = len(signature.params) == call.n_args == len(staged.closed.jaxpr.invars)
        return Runner(run_call, call_with_inputs if one_to_one and not canonicalize else None)


def _rebuilding_output_tree(run: Callable, out_tree) -> Callable:
    def rebuilt(*call_args):
        out = run(*call_args)
        return out_tree.unflatten(out if out_tree.num_leaves != 1 else [out])
    return rebuilt


BACKENDS = {"xla": XlaBackend, "python": PythonBackend}


# ---------------------------------------------------------------------------------------
# Lowering and compiling for XLA


@dataclasses.dataclass
class _XlaCompiled:
    executable: object
    donated: dict[int, str]    # executable parameter -> how errors name the donated argument
    consts: list               # the jaxpr's constants, on the device once (Arrays)


def _lowered_text(staged: Staged, donated: dict[int, str]) -> str:
    invars = staged.closed.jaxpr.invars
    aliases = donation_aliases(staged.closed, [i in donated for i in range(len(invars))])
    unusable = [f"{invars[i].aval.str_short()} ({label})" for i, label in donated.items() if i not in aliases]
    if unusable:
        warn_at_user_code("Some donated buffers were not usable (no output has the same shape and "
                          f"dtype): {', '.join(unusable)}")
    return lower(staged.closed, aliases=aliases)


def _compile_xla(staged: Staged, device, donated: dict[int, str]) -> _XlaCompiled:
    text = _lowered_text(staged, donated)
    jaxpr = staged.closed.jaxpr
    executable = Executable(text, device_dtypes(jaxpr), device)
    offset = len(jaxpr.constvars)
    consts = [executable.device_array(c, i) for i, c in enumerate(staged.closed.consts)]
    return _XlaCompiled(executable, {offset + i: label for i, label in donated.items()}, consts)
