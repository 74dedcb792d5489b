"""Where an equation came from: file, line, column and function of the user's source.

Every equation carries one, so errors, emitted comments and (later) HLO locations
point at the line the user wrote.
"""
from __future__ import annotations

import dataclasses
import linecache
import os


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    file: str
    line: int          # 1-based
    col: int           # 1-based, as editors and compilers print it
    function: str
    end_col: int | None = None  # 1-based, exclusive; on the same line as `col`

    def short(self) -> str:
        """`mlp.py:14`: what emitted code puts in trailing comments."""
        return f"{os.path.basename(self.file)}:{self.line}"

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


UNKNOWN = SourceInfo("<unknown>", 0, 0, "<unknown>")
