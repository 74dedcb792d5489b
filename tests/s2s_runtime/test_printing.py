"""s2s_runtime.printing: what a staged print's XLA callback prints is read back from the
program text alone, whatever the printed text holds (quotes, backslashes, newlines,
braces, text that looks like the attribute itself, any Unicode), and prints what print()
prints."""
import contextlib
import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from s2s_runtime.printing import callbacks_in, op_attributes, print_parts

TRICKY = ['"', "\\", '\\"', "\n", "}", '"}', "{index = 3 : ui64}", "s2s_print = \"x\"", "\u00e9\u4e2d\U0001f600"]


def _printed(run) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run()
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.sampled_from(TRICKY)), max_size=4),
       st.sampled_from([" ", "", ", ", '"']), st.sampled_from(["\n", "", ";\n", "\\"]), st.booleans())
def test_the_callback_read_from_the_text_prints_what_print_prints(parts, sep, end, flush):
    parts = tuple(... if part is None else part for part in parts)
    values = [np.arange(k + 1.0) for k, part in enumerate(parts) if part is ...]
    text = (f"stablehlo.custom_call @xla_ffi_python_cpu_callback() {{{op_attributes(0, parts, sep, end, flush)}}}"
            f" : () -> ()\n  stablehlo.custom_call @xla_ffi_python_cpu_callback() "
            f"{{{op_attributes(1, ('second',), ' ', chr(10), False)}}} : () -> ()")
    first, second = callbacks_in(text)
    remaining = iter(values)
    expected = _printed(lambda: print(*(next(remaining) if p is ... else p for p in parts), sep=sep, end=end))
    assert _printed(lambda: first(*values)) == expected
    assert _printed(lambda: print_parts(parts, values, sep, end, flush)) == expected
    assert _printed(second) == "second\n"


def test_a_program_without_prints_has_no_callbacks():
    assert callbacks_in("module @main { func.func public @main() -> () { return } }") == []
