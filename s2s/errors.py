"""Errors a user can cause, rendered like a compiler's.

Each one says where (file:line:col), shows the line with a caret, says what is wrong and
what to write instead. The staging walk attaches the location of the AST node being
staged when an error raised deeper down (a shape rule, say) has none yet.

They reach the user through one boundary (`api_boundary`, at every entry point a user
calls), which shows them without the frames of s2s's they came through: the message says
where in the user's code the mistake is, and the traceback is the user's.
"""
from __future__ import annotations

import functools
import os
import sys
import types
import warnings
from typing import Callable, ParamSpec, TypeVar

import s2s_runtime
from s2s.source_info import SourceInfo
from s2s_runtime.array import DonatedBufferError
from s2s_runtime.distributed import ProgramMismatchError


# What an api_boundary keeps of the function it wraps: its parameters and result, for type checkers.
P = ParamSpec("P")
R = TypeVar("R")

class S2SError(Exception):
    """Base class of every error that is the user's to fix."""

    # What to write instead, when the place that raises has nothing more specific to say.
    default_help = "fix the code at this line"

    def __init__(self, what: str, help: str | None = None, where: SourceInfo | None = None):
        self.what = what
        self.help = help or self.default_help
        self.where = where
        super().__init__(what)

    def at(self, where: SourceInfo) -> "S2SError":
        """Attaches a location if the error has none yet; returns self for `raise`."""
        if self.where is None:
            self.where = where
        return self

    def __str__(self) -> str:
        parts = []
        if self.where is not None:
            parts.append(f"{self.where.location()}: {type(self).__name__}: {self.what}")
            excerpt = self.where.source_excerpt()
            if excerpt:
                parts.append(excerpt)
        else:
            parts.append(self.what)
        if self.help:
            parts.append(f"help: {self.help}")
        return "\n".join(parts)


class CommandLineError(Exception):
    """A command line the `s2s` command refuses (a path that does not exist, a target it
    cannot parse, a file it must not overwrite): exit status 2, as for argparse's own
    refusals, so a CI step tells a mistyped command from stale derivatives (status 1)."""


class ShapeError(S2SError, ValueError, TypeError):
    """Operands whose shapes or dtypes a primitive cannot accept: a ValueError, as NumPy
    raises for the code s2s stages, and a TypeError, as jax.numpy and jax.lax raise."""

    default_help = ("the operands' shapes or dtypes do not fit this operation: check them "
                    "(x.shape, x.dtype), and reshape, transpose or convert explicitly")


class ConcretizationError(S2SError, TypeError):
    """A staged value was used where Python needs a concrete value (bool, int, range): a
    TypeError, as JAX's ConcretizationTypeError."""


class UnsupportedSyntaxError(S2SError):
    """Python syntax or a construct that s2s cannot stage."""

    default_help = ("rewrite it with the constructs the README lists under "
                    "'How staging reads your code'")


class UnsupportedFunctionError(S2SError):
    """A call to a NumPy (or other library) function that s2s has no rule for."""

    default_help = ("see the README's table of supported NumPy functions and write it with "
                    "those")


class StagingError(S2SError):
    """Any other mistake found while staging (an undefined name, a wrong argument ...)."""


# Code written for JAX catches JAX's exception classes: where JAX raises a TypeError or a
# ValueError for a mistake, s2s's error for it is also one, with its location and help.

class StagingTypeError(StagingError, TypeError):
    """A value of the wrong kind for where it is given, where JAX raises a TypeError: a
    transform of something not callable, in_axes holding a string, a string mapped as an
    array, a call with the wrong arguments, a loop carry or a branch result of another
    structure, tangents of another structure than the primals."""


class StagingValueError(StagingError, ValueError):
    """Values of the right kind that do not fit together, where JAX raises a ValueError:
    mapped axes of different sizes, an axis out of range, in_axes that are not a tree
    prefix of the arguments, a cotangent unlike the output, more devices than there are."""


class UnboundAxisError(StagingError, NameError):
    """A collective over an axis name no enclosing vmap or pmap binds: a NameError, as JAX
    raises."""


class TransformTypeError(StagingTypeError):
    """A transform applied where JAX raises a TypeError for the outputs or dtypes involved:
    grad of a non-scalar, integer or boolean output, or of a complex one without
    holomorphic=True; holomorphic=True with real inputs or outputs; differentiation with
    respect to an integer input."""


class ArgnumsTypeError(StagingTypeError):
    """Argument numbers (`argnums`, `static_argnums`, ...) that are not an int or a sequence
    of ints: a TypeError, as JAX raises."""


class ArgnumsRangeError(StagingValueError, TypeError):
    """An argument number outside the arguments a call has: a ValueError, as JAX's jit,
    pmap, checkpoint and jacfwd raise, and a TypeError, as its grad and value_and_grad
    raise."""


class StaleSourceError(StagingError):
    """The source file no longer holds the code Python runs for a function (it was edited
    and the module not reloaded): s2s refuses to differentiate text that does not run."""


CONCRETE_HELP = (
    "the value depends on the function's array arguments, so it is only known when the "
    "function runs. Use np.where(cond, a, b) to choose between values, keep the decision on "
    "static values (shapes, Python ints), or mark the argument static with static_argnums"
)


# ---------------------------------------------------------------------------------------
# The error boundary (JAX's `api_boundary`)

# What is the user's to fix: s2s's errors, and those its runtime raises (a donated array
# used again, processes about to run different programs), which cannot derive from
# S2SError because s2s_runtime imports nothing of s2s.
USER_ERRORS = (S2SError, DonatedBufferError, ProgramMismatchError)

# Where s2s's frames come from: its two packages.
_OWN_DIRS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, s2s_runtime.__file__))


def warn_at_user_code(message: str, category=UserWarning) -> None:
    """Warns at the line of the user's code that called into s2s (the nearest frame outside
    s2s's packages), as a traceback would show it: never at a line of s2s's own."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame = frame.f_back
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


def api_boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` as an entry point a user calls: an error of USER_ERRORS leaves it without the
    frames of s2s's it came through (theirs, of code s2s ran as Python, stay), its message
    and location as they were. Only the outermost boundary of a call does so: one that
    another boundary called (`grad` staging a function that calls `vmap(g)`) lets the
    error through as it is, for the outer one to show. A user's own exception, of any
    other class, passes untouched, with every frame. What is left of s2s's in the
    traceback is this boundary's own frame (`user_api_boundary`), where the error leaves."""
    @functools.wraps(fn)
    def user_api_boundary(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as error:
            raise shown_to_user(error, sys._getframe(1))
    return user_api_boundary


def shown_to_user(error: BaseException, caller) -> BaseException:
    """`error` as a boundary called from frame `caller` raises it: outermost, without the
    frames of s2s's it came through and without the exceptions it was raised while handling
    (as `raise error from None`); inside another boundary, as it is. What `api_boundary`
    raises, and where a boundary cannot be a decorator (`marks_boundary`)."""
    if not _inside_boundary(caller):
        error.__cause__, error.__suppress_context__ = None, True
        error.__traceback__ = _without_s2s_frames(error.__traceback__)
    return error


def marks_boundary(fn):
    """Marks `fn` as a boundary that is not a decorator (the jitted call's Python path,
    where the `Caller` in front of it cannot run Python without a frame): a boundary that
    `fn` reaches lets errors through to it, and `fn` raises them through `shown_to_user`
    itself. Returns `fn` as it is: nothing is added to its calls."""
    _BOUNDARY_CODES.add(fn.__code__)
    return fn


def errors_shown_clean() -> tuple:
    """The error classes a boundary that cannot be `api_boundary` (a `Caller`: the jitted
    call, in C, reads this when a call fails) raises without the frames they came through:
    USER_ERRORS, unless the call is inside another boundary, which then shows them. The
    Caller keeps none of those frames (it cannot filter them without a frame of its own),
    so a frame of the user's code that staging ran as Python goes too; the error's
    location still names the user's line that called it."""
    return () if _inside_boundary(sys._getframe(1)) else USER_ERRORS


def _without_s2s_frames(traceback: types.TracebackType | None) -> types.TracebackType | None:
    """`traceback` without the entries of frames of s2s's code."""
    kept = []
    while traceback is not None:
        if not traceback.tb_frame.f_code.co_filename.startswith(_OWN_DIRS):
            kept.append(traceback)
        traceback = traceback.tb_next
    result = None
    for entry in reversed(kept):
        result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return result


def _inside_boundary(frame) -> bool:
    """Whether `frame` or one that called it is a boundary's (read only when a call failed)."""
    while frame is not None:
        if frame.f_code in _BOUNDARY_CODES:
            return True
        frame = frame.f_back
    return False


# The code of every api_boundary (one function made by each decoration shares it), and of
# the functions marked by `marks_boundary`.
_BOUNDARY_CODES = {api_boundary(len).__code__}
