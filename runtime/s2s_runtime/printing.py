"""print() of staged values, run while the program runs: on NumPy values and as XLA's host
callback.

A staged print is `debug_print[parts, sep, end, flush](*values)` (s2s/primitives/printing.py):
`parts` are the printed arguments in order, the text of a static one (str() of it, as
print shows it) or `...` where the next value goes. The NumPy implementation and XLA's
callback both print with `print_parts`, as the emitted module's own `print(...)` does.

The lowering writes each call's parts into the op (`mhlo.frontend_attributes =
{s2s_print = "..."}`), so the program text says all its callbacks print: `callbacks_in`
makes them from the text, and a program is compiled and cached by its text alone.
"""
from __future__ import annotations

import functools
import json
import re

CALLBACK_TARGET = "xla_ffi_python_cpu_callback"   # jaxlib's: calls the executable's callback `index`
_CALL = re.compile(r"mhlo\.backend_config = \{index = (\d+) : ui64\}, "
                   r'mhlo\.frontend_attributes = \{s2s_print = "((?:[^"\\]|\\.)*)"\}')


def print_parts(parts: tuple, values, sep: str, end: str, flush: bool) -> None:
    """print() of `parts`, each `...` replaced by the next of `values`."""
    remaining = iter(values)
    print(*(next(remaining) if part is ... else part for part in parts), sep=sep, end=end, flush=flush)


def op_attributes(index: int, parts: tuple, sep: str, end: str, flush: bool) -> str:
    """The attributes of the custom call that prints `parts` as the executable's callback
    `index` (the FFI target reads `index`; `s2s_print` says what it prints)."""
    described = json.dumps([[None if part is ... else part for part in parts], sep, end, flush])
    escaped = described.replace("\\", "\\\\").replace('"', '\\"')   # (ASCII: json escapes the rest)
    return (f"has_side_effect = true, mhlo.backend_config = {{index = {index} : ui64}}, "
            f'mhlo.frontend_attributes = {{s2s_print = "{escaped}"}}')


def callbacks_in(mlir_text: str) -> list:
    """The host callbacks `mlir_text`'s prints call, in the order of their index."""
    found = {}
    for index, escaped in _CALL.findall(mlir_text):
        parts, sep, end, flush = json.loads(re.sub(r"\\(.)", r"\1", escaped))
        found[int(index)] = functools.partial(_print_callback, tuple(... if p is None else p for p in parts),
                                              sep, end, flush)
    return [found[i] for i in range(len(found))]


def _print_callback(parts, sep, end, flush, *values):
    print_parts(parts, values, sep, end, flush)
    return ()
