"""Where a generated line comes from: the `# model.py loss+3` comments that `s2s emit` ends
each statement with, read back to the user's file and line.

`s2s check` annotates the source lines whose derivative changed, and the review page
(`review_page`) links each emitted statement to its line; both read the comments here, so
a line the annotation names is the line the page highlights. A comment names a line
relative to its `def` (what moving a function leaves unchanged), so reading it back needs
the source as it is now.
"""
from __future__ import annotations

import ast
import difflib
import os
import re
import sys


def shown(path: str) -> str:
    """A path as the user would type it from here: relative to the working folder when
    inside it (what a fix command and a CI annotation name), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


_COMMENT = re.compile(r"  # (?:(?P<file>\S+) (?P<function>[\w.<>]+)\+(?P<offset>\d+)|(?P<short>\S+):(?P<line>\d+))$")


def def_line(path: str, qualname: str) -> int | None:
    """The line of the `def` of `qualname` (`loss`, `Model.loss`, `loss.<locals>.inner` or
    `loss.inner`) in the file at `path`, read from its syntax tree."""
    try:
        with open(path, encoding="utf-8") as f:
            scope = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    node = None
    for part in (p for p in qualname.split(".") if p != "<locals>"):
        node = next((n for n in ast.walk(scope) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        scope = node
    return node.lineno if node is not None else None


def _source_of(basename: str, module_path: str) -> str | None:
    """The file a `# model.py loss+3` comment names: beside the exporting module, else any
    loaded module's file of that name (a helper imported from elsewhere)."""
    beside = os.path.join(os.path.dirname(module_path), basename)
    if os.path.isfile(beside):
        return beside
    for loaded in list(sys.modules.values()):
        path = getattr(loaded, "__file__", None)
        if isinstance(path, str) and os.path.basename(path) == basename:
            return path
    return None


def source_line(line: str, module_path: str) -> tuple[str, int] | None:
    """(file, line) of the user's source that an emitted line's location comment names."""
    match = _COMMENT.search(line.rstrip("\n"))
    if match is None:
        return None
    path = _source_of(match["file"] or match["short"], module_path)
    if path is None:
        return None
    if match["line"]:
        return path, int(match["line"])
    start = def_line(path, match["function"])
    return (path, start + int(match["offset"])) if start is not None else None


def changed_source_lines(committed: str, regenerated: str, module_path: str,
                         fallback: tuple[str, int]) -> list[tuple[str, int]]:
    """The source lines whose derivative changed, in order without repeats: for each run
    of changed emitted lines, the lines their location comments name (of the regenerated
    file, which follows the source as it is now), else the nearest commented line before
    the run (a statement's continuation lines have no comment), else `fallback`."""
    old, new = committed.splitlines(True), regenerated.splitlines(True)
    found: list[tuple[str, int]] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        lines = [where for where in (source_line(line, module_path) for line in new[j1:j2]) if where]
        if not lines:
            before = (source_line(line, module_path) for line in reversed(new[:j1]))
            lines = [next((where for where in before if where), fallback)]
        found.extend(where for where in lines if where not in found)
    return found
