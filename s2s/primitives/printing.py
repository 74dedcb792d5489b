"""`debug_print`: print() of staged values, made when the program runs, with every rule.

A `print(...)` in a staged function whose arguments include staged arrays (`print(i)` in
a loop over `range(1000)`, `print("loss", loss)`) stages `debug_print[parts, sep, end,
flush](*values)`: `parts` are the printed arguments, the text of a static one (what print
shows of it) or `...` where the next staged value goes. It has no results and is
`effectful`: passes never drop, merge or move it, so it prints once per run of the code
around it, in order: once per step of a loop, which stays one loop.

- **NumPy** (`eval_jaxpr`) prints with `s2s_runtime.printing.print_parts`; **emitted
  Python** writes the `print(...)` call itself.
- **Derivatives**: it prints the primal values (a loop's forward pass prints each step);
  there is nothing to differentiate. Steps a reverse pass runs again (a checkpointed
  loop's, a `checkpoint`'s body) print again, as they run again.
- **Batching** prints a batched value whole, its examples along the first axis.
- **XLA** calls back into Python (jaxlib's `xla_ffi_python_cpu_callback`) with the values;
  the op says what it prints, so the program text is all the callback needs
  (`s2s_runtime.printing.callbacks_in`). A program of several replicas (pmap) cannot.
"""
from __future__ import annotations

from s2s_runtime import printing as rt_printing

from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, register
from s2s.errors import UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.passes.vmap import to_front
from s2s.staging import Primitive


def _impl(*values, parts, sep, end, flush):
    rt_printing.print_parts(parts, values, sep, end, flush)
    return []


debug_print = Primitive("debug_print", lambda *avals, **params: [], _impl, multiple_results=True, effectful=True)


def print_at_run_time(parts: tuple, values: list, sep: str | None, end: str | None, flush: bool) -> None:
    """Stages print() of `parts` (see the module docstring), `values` filling its `...`;
    `sep` and `end` None are print's own defaults, as print takes them."""
    debug_print.bind(*values, parts=tuple(parts), sep=" " if sep is None else sep, end="\n" if end is None else end,
                     flush=flush)


# ---------------------------------------------------------------------------------------
# Python emission: the print call itself.


def _emit(eqn, *values):
    p = eqn.params
    remaining = iter(values)
    arguments = [next(remaining).text if part is ... else repr(part) for part in p["parts"]]
    if p["sep"] != " ":
        arguments.append(f"sep={p['sep']!r}")
    if p["end"] != "\n":
        arguments.append(f"end={p['end']!r}")
    if p["flush"]:
        arguments.append("flush=True")
    return Expr(f"print({', '.join(arguments)})")


register(debug_print, _emit, bare_scalar_ok=True)   # (print shows a Python number as NumPy's)

# ---------------------------------------------------------------------------------------
# Derivatives and batching

_jvp.defzero(debug_print)


def _batch(axis, values, dims, **params):
    debug_print.bind(*(v if d is None else to_front(v, d, axis.size) for v, d in zip(values, dims)), **params)
    return [], []


_vmap.register(debug_print, _batch, reads_axis=True)

# ---------------------------------------------------------------------------------------
# StableHLO lowering: a host callback


def _lower(ctx, eqn, *values):
    if ctx.replica_axes or ctx.replicas != 1:
        raise UnsupportedFunctionError(
            "print() of staged values in a program run on several replicas (pmap): XLA cannot call "
            "back into Python from it", "print the values pmap returns, outside it")
    p = eqn.params
    types = [_hlo.tensor_type(v.aval) for v in eqn.invars]
    attributes = rt_printing.op_attributes(ctx.host_callbacks, p["parts"], p["sep"], p["end"], p["flush"])
    ctx.host_callbacks += 1
    ctx.lines.append(f"stablehlo.custom_call @{rt_printing.CALLBACK_TARGET}({', '.join(values)}) "
                     f"{{{attributes}}} : ({', '.join(types)}) -> (){ctx.location}")
    return []


_hlo.register(debug_print, _lower)
