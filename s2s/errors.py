"""Errors a user can cause, rendered like a compiler's.

Each one says where (file:line:col), shows the line with a caret, says what is wrong and
what to write instead. The staging walk attaches the location of the AST node being
staged when an error raised deeper down (a shape rule, say) has none yet.
"""
from __future__ import annotations

from s2s.source_info import SourceInfo


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


class ShapeError(S2SError, ValueError):
    """Operands whose shapes or dtypes a primitive cannot accept."""

    default_help = ("the operands' shapes or dtypes do not fit this operation: check them "
                    "(x.shape, x.dtype), and reshape, transpose or convert explicitly")


class ConcretizationError(S2SError):
    """A staged value was used where Python needs a concrete value (bool, int, range)."""


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


class TransformTypeError(StagingError, TypeError):
    """A transform applied where JAX raises a TypeError for the outputs or dtypes involved:
    grad of a non-scalar, integer or boolean output, or of a complex one without
    holomorphic=True; holomorphic=True with real inputs or outputs."""


class StaleSourceError(StagingError):
    """The source file no longer holds the code Python runs for a function (it was edited
    and the module not reloaded): s2s refuses to differentiate text that does not run."""


CONCRETE_HELP = (
    "the value depends on the function's array arguments, so it is only known when the "
    "function runs. Use np.where(cond, a, b) to choose between values, keep the decision on "
    "static values (shapes, Python ints), or mark the argument static with static_argnums"
)
