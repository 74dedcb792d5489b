"""Where an equation came from: file, line, column and function of the user's source.

Every equation carries one, so errors, emitted comments and HLO locations point at the
line the user wrote. Errors and HLO locations give the absolute line (`location()`,
`short()`); emitted Python gives it relative to the enclosing `def` (`relative()`), so that
moving a function in its file leaves its emitted derivatives unchanged.
"""
from __future__ import annotations

import linecache
import os
from typing import NamedTuple


class SourceInfo(NamedTuple):
    """(Immutable, compared and hashed by value; a NamedTuple because staging makes one
    for every expression it walks, and a tuple is made in C.)"""
    file: str
    line: int          # 1-based
    col: int           # 1-based, as editors and compilers print it
    function: str      # the enclosing def as the source spells it: `predict`, `loss.helper`
    end_col: int | None = None  # 1-based, exclusive; on the same line as `col`
    def_line: int = 0  # the line of `function`'s `def` (0: unknown)
    # The `np.errstate` the code ran under, as sorted (kind, handling) pairs over
    # divide/over/under/invalid (none: the caller's): the line is inside a
    # `with np.errstate(...)` block, or in a function called from one. Emitted Python
    # writes the block again around the equations, and derivative equations share it.
    errstate: tuple = ()

    def short(self) -> str:
        """`mlp.py:14`: the file's base name and the absolute line."""
        return f"{os.path.basename(self.file)}:{self.line}"

    def relative(self) -> str:
        """`mlp.py predict+1`: the file's base name, the enclosing def, and how many lines
        below its `def` line the code is (`short()` when the def is unknown). Emitted
        comments use it: inserting lines above a function does not change it."""
        if not self.def_line:
            return self.short()
        return f"{os.path.basename(self.file)} {self.function}+{self.line - self.def_line}"

    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def source_excerpt(self) -> str:
        """The source line with a caret under the offending span (empty if unavailable)."""
        text = linecache.getline(self.file, self.line)
        if not text:
            return ""
        text = text.rstrip("\n").expandtabs(8)
        width = 1
        if self.end_col is not None and self.end_col > self.col:
            width = self.end_col - self.col
        return f"    {text}\n    {' ' * (self.col - 1)}{'^' * width}"


def source_info(file: str, line: int, col: int, function: str, end_col: int | None,
                def_line: int, errstate: tuple = ()) -> SourceInfo:
    """`SourceInfo(file, line, ...)` with every field given, made by `tuple.__new__` alone:
    the front end makes one per expression it stages, and a NamedTuple's own constructor
    is a Python function around that call."""
    return _new_tuple(SourceInfo, (file, line, col, function, end_col, def_line, errstate))


_new_tuple = tuple.__new__

UNKNOWN = SourceInfo("<unknown>", 0, 0, "<unknown>")

# The kinds of floating-point error `np.errstate` sets (its `all=` sets each): the keys of
# SourceInfo.errstate.
ERRSTATE_KINDS = ("divide", "invalid", "over", "under")
