"""The user-facing API besides jit (see `s2s.jit`): make_jaxpr, eval_jaxpr, emit_python,
the devices, block_until_ready and stop_gradient.

Every entry point takes and returns pytrees. Errors that are the user's to fix surface as
one clean compiler-style message, without s2s's internal frames.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Sequence, TypeVar

from s2s import tree as tree_util
from s2s.core import ClosedJaxpr, eval_jaxpr as _eval_jaxpr
from s2s.eager import emitted_module
from s2s.transformed import required_parameters, staged_or_error
from s2s.emit.python import EmitOptions
from s2s.errors import StagingError, api_boundary
from s2s.pmap import Pmapped
from s2s.primitives.elementwise import stop_gradient as stop_gradient_p
from s2s_runtime import distributed, xla
from s2s_runtime.array import Array


# block_until_ready and stop_gradient give back what they are given, of the same type.
T = TypeVar("T")

def make_jaxpr(fn: Callable[..., Any], static_argnums: int | Sequence[int] = (), static_argnames: str | Iterable[str] = (),
               dynamic_argnums: int | Sequence[int] = ()) -> Callable[..., ClosedJaxpr]:
    """`make_jaxpr(f)(*args)` → the ClosedJaxpr s2s stages `f` into for those arguments."""
    @api_boundary
    @functools.wraps(fn)
    def make(*args, **kwargs) -> ClosedJaxpr:
        return staged_or_error(fn, args, kwargs, static_argnums, static_argnames, dynamic_argnums).closed
    return make


def eval_jaxpr(closed: ClosedJaxpr, *args: Any) -> list:
    """Runs a ClosedJaxpr with the NumPy reference implementations; returns flat outputs."""
    return _eval_jaxpr(closed, *args)


@api_boundary
def emit_python(fn: Callable[..., Any], *example_args: Any, static_argnums: int | Sequence[int] = (),
                static_argnames: str | Iterable[str] = (), dynamic_argnums: int | Sequence[int] = (),
                name: str | None = None, source_comments: bool = True, **example_kwargs: Any) -> str:
    """The source of a standalone module computing `fn` for arguments like the examples.

    Example arguments may be arrays, `s2s.ShapeDtype`s, or static Python values. Large
    constants are embedded compactly (base64); `s2s emit` writes them to a sidecar .npz.
    A pmapped function is written as its `reference()`: one vmapped function on NumPy.
    """
    if isinstance(fn, Pmapped):   # its semantics on NumPy: the vmapped function, no devices
        name, fn = name or fn.__name__, fn.reference()
    needed = required_parameters(fn) if not example_args and not example_kwargs else []
    if needed:
        raise StagingError(
            f"emit_python({getattr(fn, '__name__', 'fn')}) was given no example arguments, and it "
            f"takes {', '.join(needed)}",
            f"pass arguments like those it will be called with after the function: "
            f"emit_python(fn, {', '.join(needed)}), each an array, an s2s.ShapeDtype(shape, dtype) "
            f"or a static value")
    staged = staged_or_error(fn, example_args, example_kwargs, static_argnums, static_argnames,
                             dynamic_argnums)
    return emitted_module(staged, name, EmitOptions(source_comments=source_comments)).source


def devices() -> list:
    """The devices XLA runs on, every process's in a run of several (CPU;
    S2S_NUM_CPU_DEVICES sets how many per process, before first use)."""
    return distributed.global_devices()


def device_count() -> int:
    """How many devices s2s's XLA backend sees (jax.device_count): the CPU devices asked for
    with S2S_NUM_CPU_DEVICES, across every process of a distributed run."""
    return len(devices())


def local_devices() -> list:
    """The devices of this process: where jit runs, and what a pmap's local slices go to."""
    return xla.devices()


def local_device_count() -> int:
    """How many of `device_count()`'s devices belong to this process (jax.local_device_count)."""
    return len(local_devices())


def process_index() -> int:
    """This process's place in a run of several (`s2s.distributed.initialize`); 0 alone."""
    return distributed.process_index()


def process_count() -> int:
    """How many processes the run has (`s2s.distributed.initialize`); 1 alone."""
    return distributed.process_count()


@api_boundary
def block_until_ready(tree: T) -> T:
    """Waits until every `s2s.Array` in `tree` is computed (jit returns before XLA is done,
    like jax); returns `tree`."""
    for leaf in tree_util.tree_leaves(tree):
        if isinstance(leaf, Array):
            leaf.block_until_ready()
    return tree


def stop_gradient(x: T) -> T:
    """The value of `x` (a pytree), treated as a constant by differentiation."""
    return tree_util.tree_map(stop_gradient_p.bind, x)
