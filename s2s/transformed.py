"""The transform layer's base: what every user-level transform of a function shares.

`grad(f)`, `vmap(f)`, `jit(f)`, `pmap(f)`, `checkpoint(f)` and the custom-derivative
wrappers are `TransformedFunction`s: each is named after the transform and the function
(`grad_loss`, its `describe()` 'grad(loss)' in messages and generated modules), is keyed in
the staging cache by its `cache_params` under the innermost user function (so rebuilding
`jit(grad(f))` in a loop finds what was staged), and is called directly when staged through
(`frontend.call_user`), never read as source.

A call is bound to the function's signature and flattened once (`frontend.BoundCall`):
the transform stages it with `frontend.stage_call` and reads the jaxpr's inputs from it
with `Staged.inputs`, so no step of a call flattens the user's arguments again.
"""
from __future__ import annotations

import functools

from s2s.errors import StagingTypeError, api_boundary
from s2s.frontend import Staged, signature_of, stage, transform_description

__all__ = ["TransformedFunction", "function_name", "required_parameters", "staged_or_error"]


class TransformedFunction:
    """A function derived from `fn` by the transform `transform`, whose parameters
    `params` key its caches together with the transform's name.

    It is named `<transform>_<fn's name>` (what the emitted module's function is called);
    a transform that keeps the function's own name, as `jax.jit` does, sets
    `keeps_name`. `fn`'s docstring, module and `__wrapped__` are copied, not its
    `__dict__`: copying that would overwrite these attributes when `fn` is itself
    transformed (`grad(grad(f))`). A transform that says what it makes of `fn` passes that
    as `summary`: it heads the docstring, with `fn`'s own below it, as JAX's transforms
    lay out theirs (`help(vmap(f))` says what the call takes before what f does).
    """

    __s2s_transform__ = True
    keeps_name = False

    def __init__(self, fn, transform: str, params: tuple = (), summary: str | None = None):
        if not callable(fn):   # refused when the transform is built, as JAX refuses it
            raise StagingTypeError(f"{transform} needs a function, got {type(fn).__name__} {fn!r}",
                                   f"pass the function itself: {transform}(f), not {transform}(f(x))")
        functools.update_wrapper(self, fn, updated=())
        if summary is not None:
            own = fn.__doc__
            self.__doc__ = summary + (f"\n\nOriginal documentation:\n\n{own}" if own else "")
        self.fn = fn
        self.transform = transform
        self._params = params
        if not self.keeps_name:
            inner = getattr(fn, "__name__", "f")
            self.__name__ = f"{transform}_{inner}" if isinstance(inner, str) and inner.isidentifier() \
                else transform
            self.__qualname__ = self.__name__

    @property
    def cache_params(self) -> tuple:
        """The transform's name and parameters: what keys its stagings under the function."""
        return (self.transform, *self._params)

    def describe(self) -> str:
        """'grad(loss)', 'jit(vmap(loss))': the chain of transforms around the function."""
        return transform_description(self.transform, self.fn)

    def __repr__(self):
        return f"<s2s {self.describe()}>"


def function_name(fn) -> str:
    """The name a docstring or message calls `fn` by: its own, or its type's for a callable
    object without one (a `functools.partial`)."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


@api_boundary
def staged_or_error(fn, args, kwargs, static_argnums=(), static_argnames=(),
                    dynamic_argnums=()) -> Staged:
    """Stages `fn`; a user mistake is raised as one clean compiler-style error. A boundary
    itself, for the tools (the CLI, build plans) that stage outside any entry point; inside
    one (a transform's call) it lets errors through to it."""
    return stage(fn, args, kwargs, static_argnums=static_argnums,
                 static_argnames=static_argnames, dynamic_argnums=dynamic_argnums)


def required_parameters(fn) -> list[str]:
    """The parameters of `fn` that a call must fill (no default, not `*args`/`**kwargs`).
    An emitter given no example arguments at all asks for these by name (`--args` on the
    command line, example arguments to `emit_python`) instead of reporting a bad call."""
    return [p.name for p in signature_of(fn).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
