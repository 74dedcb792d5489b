"""ClosedJaxpr → the source of a standalone, readable Python module.

The module imports only `numpy` and, when its code calls a helper, `s2s_runtime` (so a
module that needs none runs with NumPy alone). It reads like NumPy a person would
write: variables keep the user's names (`h`, `h_1`, ...), single-use temporaries are
inlined into the expression that uses them (`h = np.tanh(x @ W1 + b1)`), and dead
equations are not written at all. The output is deterministic byte for byte: nothing
depends on ids, hash order or the absolute path of the checkout.

It is also written so that a one-line edit of the source changes only the emitted lines
that depend on it (derivative files are reviewed as diffs):

- Each statement can end with a comment saying where it came from, relative to the `def`
  of the function it was staged from: `# mlp.py predict+1` is the line after
  `def predict` in mlp.py (nested functions are `outer.inner`, methods `Class.method`; a
  lambda counts from the def around it). Lines inserted above a function change nothing.
- A temporary is named from what it is, never numbered through the file: the name of the
  source variable it holds (`h`), else its operation and the source variable it derives
  from (`exp_shifted`, `max_logits`), capped in length. A new statement renames only
  temporaries of the same name after it (`exp_shifted_1`).
- The names of returned cotangents are given out first, so the cotangent of an argument
  `x` is `x_bar` even when a helper's parameter, also called `x`, has one too (`x_bar_1`).
"""
from __future__ import annotations

import ast
import base64
import functools
import inspect
import keyword
import linecache
import cmath
import math
import os
import re
import textwrap
import types
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Literal, Var, has_effects, host_objects, literal_value
from s2s.emit.pyexpr import (ATOM, BARE_SCALAR_OK, STATEMENT_RULES, TEMP_NAMES, UNARY, Expr, dtype_text,
                             naming_host_objects, python_rules, typed_scalar)
from s2s.passes.inline import inline_calls
from s2s.source_info import ERRSTATE_KINDS

INLINE_MAX_CHARS = 72          # longer expressions get a name of their own
NAME_MAX_CHARS = 24            # a temporary's name is cut to this length
LARGE_CONST_ELEMENTS = 1000    # larger constants are never written as literals
_RESERVED = {"np", "rt"} | set(keyword.kwlist)
_RUNTIME_ATTRIBUTE = re.compile(r"\brt\.")
_NUMBER_SUFFIX = re.compile(r"_\d+$")   # `h_2` -> `h`
_PLAIN_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass
class EmitOptions:
    source_comments: bool = True
    # "embed": large constants inline as base64; "sidecar": loaded from an .npz beside the
    # module (the name given in `sidecar_name`), whose arrays are returned in `sidecar`;
    # "memory": read from the `_consts` dict the module is executed with (`load_source`'s
    # `module_globals`), the arrays returned in `sidecar`: for a module run in the process
    # that staged it, where writing a big constant out as text and compiling it cost seconds.
    const_mode: str = "embed"
    sidecar_name: str | None = None


@dataclass
class Signature:
    """How the emitted function's parameters map onto the jaxpr's flat inputs and outputs.

    `params`: the def's parameter names; `input_exprs[i]`: a Python expression over those
    parameters that yields flat input i (`params['W1']`); `output_builder`: writes the
    return expression from the flat outputs' expressions (None: a flat tuple or single).
    """
    params: list[str]
    input_exprs: list[str]
    input_hints: list[str | None]
    output_builder: Callable[[list[str]], str] | None = None
    declaration: str | None = None   # the def's parameter list, defaults included (None: `params`)
    prologue: list[str] = field(default_factory=list)   # statements the body opens with (checks)
    kinds: dict = field(default_factory=dict)   # param -> its inspect.Parameter kind, if not positional
    # id of a NumPy generator the caller passes -> the expression over the parameters that
    # reads it (its draws are made from what the caller passes, as the source's are).
    host_expressions: dict = field(default_factory=dict)


@dataclass
class EmittedModule:
    source: str
    sidecar: dict[str, np.ndarray] = field(default_factory=dict)
    # The host objects (NumPy generators) the function takes as keyword-only parameters, by
    # parameter name: what a caller in this process passes.
    host_parameters: dict[str, object] = field(default_factory=dict)


class _Names:
    """Allocates readable, unique Python identifiers: h, h_1, h_2 ..."""

    def __init__(self, taken=()):
        self.taken = set(_RESERVED) | set(taken)
        self.next_suffix: dict[str, int] = {}   # stem -> the first suffix not yet tried

    def fresh(self, hint: str | None, default: str = "t") -> str:
        base = _identifier(hint) if hint else default
        if base not in self.taken:
            self.taken.add(base)
            return base
        stem = _NUMBER_SUFFIX.sub("", base) if base[-1].isdigit() else base   # (\d is a digit)
        i = self.next_suffix.get(stem, 1)
        name = f"{stem}_{i}"
        while name in self.taken:
            i += 1
            name = f"{stem}_{i}"
        self.next_suffix[stem] = i + 1
        self.taken.add(name)
        return name


def _identifier(hint: str) -> str:
    if hint.isascii() and hint.isidentifier():   # the common case: already a plain name
        return hint
    name = re.sub(r"\W", "_", hint)
    if not name or name[0].isdigit():
        name = "v_" + name
    return name


def escaped(text: str, also: str = "", keep: str = "") -> str:
    """`text` with every character that is not printable (newlines, carriage returns,
    NUL, bidirectional overrides, lone surrogates ...) and every character in `also`
    written as its backslash escape, except those in `keep`. User strings (file names,
    function names, argument descriptions) pass through here before they reach generated
    source, so that none can end a comment or a string literal early; ordinary text, which
    has none of these characters, is unchanged byte for byte."""
    if text.isprintable() and not any(ch in text for ch in also):   # ordinary text, at C speed
        return text
    return "".join(ch if ch in keep or (ch.isprintable() and ch not in also)
                   else "\\" + ch if ch in also else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def docstring_literal(text: str) -> str:
    """`text` as a module docstring that reads back as exactly `text` and cannot end early:
    backslashes and double quotes are escaped, as is everything not printable."""
    return '"""' + escaped(text.strip(), also='\\"', keep="\n") + '\n"""'


def literal_expr(lit: Literal, bare_ok: bool) -> Expr:
    """A literal as Python source: bare (`0.5`) where its dtype is the default one or, if
    weakly typed, where NumPy types it like the array beside it (`bare_ok`); else with its
    dtype (`np.float32(0.5)`). Every literal of every equation comes through here, so the
    kinds are tested most common first and the default dtype only of the kind at hand."""
    dtype = lit.aval.dtype
    kind = dtype.kind
    value = lit.value
    if kind == "f":
        v = float(value)
        text = repr(v) if math.isfinite(v) else "np.nan" if v != v else "np.inf" if v > 0 else "-np.inf"
    elif kind == "i" or kind == "u":
        text = repr(int(value))
    elif kind == "b":
        text = repr(bool(value))
    elif dtype == dtypes.float0:   # a scalar float0 zero (the tangent of a 0-d int or bool)
        return Expr(f"np.zeros((), {dtype_text(dtype)})")
    else:   # `(inf+1j)`, complex's repr, is not Python: see _complex_text
        text = _complex_text(value)
    if (bare_ok and lit.aval.weak_type) or dtype == _BARE_DTYPE[kind]():
        return Expr(text, UNARY if text[0] == "-" else ATOM)
    return Expr(f"{dtype_text(dtype)}({text})")


# Kind -> the dtype a bare literal of that kind has in NumPy (under the current x64
# setting), where it is written bare without an array beside it. A bare `True` is a Python
# int to `~` and `-`, so bools are written bare only beside arrays; unsigned ints never.
_BARE_DTYPE = {"f": dtypes.default_float, "i": dtypes.default_int, "u": lambda: None,
               "b": lambda: None, "c": lambda: dtypes.complex128}


def _float_text(v) -> str:
    """The shortest text that reads back as the same value of v's own dtype."""
    if np.isnan(v):
        return "np.nan"
    if np.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return str(v)


def _complex_text(v) -> str:
    """A complex value as Python reads it back: `(1+2j)`, or `complex(np.inf, 1.0)`."""
    v = complex(v)
    return repr(v) if cmath.isfinite(v) else f"complex({_float_text(v.real)}, {_float_text(v.imag)})"


def _const_source(name: str, value: np.ndarray, options: EmitOptions, sidecar: dict) -> str:
    value = np.asarray(value)
    if value.size == 0:
        return f"{name} = np.zeros({tuple(value.shape)!r}, dtype={dtype_text(value.dtype)})"
    if value.size <= LARGE_CONST_ELEMENTS:
        listed = np.array2string(value, separator=", ", threshold=LARGE_CONST_ELEMENTS + 1,
                                 max_line_width=88, floatmode="unique",
                                 formatter={"float_kind": _float_text, "complex_kind": _complex_text})
        listed = listed.replace("\n", "\n" + " " * (len(name) + 13))
        return f"{name} = np.array({listed}, dtype={dtype_text(value.dtype)})"
    if options.const_mode in ("sidecar", "memory"):
        sidecar[name] = value
        return f"{name} = _consts[{name!r}]"
    raw = base64.b64encode(np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()).decode()
    chunks = [raw[i:i + 76] for i in range(0, len(raw), 76)]
    body = "\n".join(f"    {c!r}" for c in chunks)
    return (f"{name} = rt.array_from_base64(\n{body},\n"
            f"    {value.dtype.name!r}, {tuple(value.shape)!r})")


def emit_module(closed: ClosedJaxpr, name: str, signature: Signature, header: str,
                options: EmitOptions | None = None) -> EmittedModule:
    options = options or EmitOptions()
    closed = inline_calls(closed)
    jaxpr = closed.jaxpr
    names = _Names(taken=[name] + signature.params)
    hosts, taken_as_parameters = {}, {}   # generators read from parameters; the others' keyword-only names
    for obj in host_objects(jaxpr):
        if id(obj.value) in signature.host_expressions:
            hosts[obj] = signature.host_expressions[id(obj.value)]
        elif obj.expression is None:
            hosts[obj] = taken_as_parameters[obj] = names.fresh(obj.name, "rng")
    if taken_as_parameters:
        header += "\n\n" + _generator_parameters_text(taken_as_parameters)
    module_names = _Names(taken=[name] + ["_consts"])
    exprs: dict[Var, Expr] = {}
    sidecar: dict[str, np.ndarray] = {}

    uses = _uses(jaxpr)
    const_lines = []
    for var, value in zip(jaxpr.constvars, closed.consts):
        if not uses.get(var):
            continue
        const_name = module_names.fresh(var.hint, "c")
        names.taken.add(const_name)
        const_lines.append(_const_source(const_name, value, options, sidecar))
        exprs[var] = Expr(const_name)

    body = Block(names, options)
    body.origins.update((var, var.hint) for var in exprs if var.hint)
    for text in signature.prologue:
        body.line(text)
    in_exprs = []
    for var, source, hint in zip(jaxpr.invars, signature.input_exprs, signature.input_hints):
        if source in signature.params or not uses.get(var):
            in_exprs.append(Expr(source))
        else:
            local = names.fresh(hint or var.hint, "x")
            body.line(f"{local} = {source}")
            in_exprs.append(Expr(local))
    with naming_host_objects(hosts):
        outs = [e.text for e in body.write(jaxpr, in_exprs, exprs, _returned_names(jaxpr, names), uses=uses)]
    # A return that computes (an output written where it is read) says where, as statements do.
    comment = next((body.inlined_comments[v] for v in jaxpr.outvars if v in body.inlined_comments), "")
    if signature.output_builder is not None:
        body.line(f"return {signature.output_builder(outs)}{comment}")
    elif len(outs) == 1:
        body.line(f"return {outs[0]}{comment}")
    else:
        body.line(f"return {', '.join(outs)}{comment}" if outs else "return ()")

    code_lines = []
    if sidecar and options.const_mode == "sidecar":
        code_lines += [f"_consts = rt.load_npz(__file__, {options.sidecar_name!r})"]
    if const_lines:
        code_lines += const_lines + [""]
    declaration = ", ".join(signature.params) if signature.declaration is None else signature.declaration
    declaration = _with_keyword_only(declaration, signature.kinds, list(taken_as_parameters.values()))
    code_lines += ["", f"def {name}({declaration}):"]
    code_lines += [f"    {line}" for line in body.lines]
    code = "\n".join(code_lines) + "\n"
    imports = ["import numpy as np"] + (["import s2s_runtime as rt"] if _reads_runtime(code) else [])
    source = "\n".join([docstring_literal(header), *imports, "", f"__all__ = [{name!r}]", ""]) + "\n" + code
    return EmittedModule(source, sidecar, {param: obj.value for obj, param in taken_as_parameters.items()})


def _reads_runtime(code: str) -> bool:
    """Whether the module's code (not a comment or string quoting source) reads `rt`, a
    name no variable may take (`_RESERVED`): only then does the module import s2s_runtime,
    so a module that calls no helper runs where NumPy alone is installed. Every read is an
    attribute (`rt.gather(`), so code without the text `rt.` is answered without parsing
    it (parsing costs as much as emitting a small module)."""
    if _RUNTIME_ATTRIBUTE.search(code) is None:
        return False
    return any(isinstance(node, ast.Name) and node.id == "rt" for node in ast.walk(ast.parse(code)))


def _generator_parameters_text(parameters: dict) -> str:
    """The docstring's word on the generators the function takes: the source draws from a
    generator a module cannot name, so its caller passes it."""
    described = [f"`{param}`, the np.random.{type(obj.value).__name__}" for obj, param in parameters.items()]
    return textwrap.fill(f"It draws random numbers from {', and '.join(described)} the source draws from: "
                         f"pass {'it' if len(described) == 1 else 'each'} by keyword (the same generator "
                         "state draws the same numbers as the source).", width=88)


def _with_keyword_only(declaration: str, kinds: dict, names: list[str]) -> str:
    """A def's parameter list with keyword-only parameters `names` added (after a `*` or
    `*args` it has, before its `**kwargs`)."""
    if not names:
        return declaration
    star = any(kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.KEYWORD_ONLY) for kind in kinds.values())
    added = ("" if star else "*, ") + ", ".join(names)
    var_keyword = next((p for p, kind in kinds.items() if kind is inspect.Parameter.VAR_KEYWORD), None)
    if var_keyword is None:
        return f"{declaration}, {added}" if declaration else added
    at = declaration.rindex(f"**{var_keyword}")
    return f"{declaration[:at]}{added}, {declaration[at:]}"


def _returned_names(jaxpr, names: "_Names") -> dict[Var, str]:
    """Names for the returned cotangents (`x_bar`: the gradient of argument `x`), given
    out before any other, so that no temporary takes them first: a helper's parameter also
    called `x` has the cotangent `x_bar_1`. (Other returned values keep the order of their
    assignments: `acc`, `acc_1`, ... for a variable assigned again and again.)"""
    inputs = {*jaxpr.invars, *jaxpr.constvars}   # (every other variable is defined by an equation)
    returned = {}
    for v in jaxpr.outvars:
        if isinstance(v, Var) and v not in inputs and (v.hint or "").endswith("_bar") and v not in returned:
            returned[v] = names.fresh(v.hint)
    return returned


def _uses(jaxpr) -> dict[Var, int]:
    """How often each variable is read by the equations that matter (those whose outputs
    are used, transitively, by the outputs, and those with effects: a draw): dead equations
    are never written. The results of an equation with effects are counted from 0: one
    nothing reads is written as a statement of its own (the draw still advances its
    generator)."""
    uses: dict[Var, int] = {}
    for v in jaxpr.outvars:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 1
    live = uses.keys()
    get = uses.get
    for eqn in reversed(jaxpr.eqns):
        if live.isdisjoint(eqn.outvars):
            if not has_effects(eqn):
                continue
            uses.update((v, 0) for v in eqn.outvars)
        for v in eqn.invars:
            if type(v) is Var:
                uses[v] = get(v, 0) + 1
    return uses


def _last_reads(jaxpr) -> dict[Var, int]:
    """Each variable -> the index of the last equation of `jaxpr` that reads it (past the
    end for an output): where a loop's buffers may be freed (`Block._drop_buffers`)."""
    last_read = {v: at for at, e in enumerate(jaxpr.eqns) for v in e.invars if isinstance(v, Var)}
    last_read.update((v, len(jaxpr.eqns)) for v in jaxpr.outvars if isinstance(v, Var))
    return last_read


def _constant_scalar(eqn, operands) -> bool:
    """Whether `eqn` computes a 0-d value from bare Python literals alone: its expression
    (`1.0 * 2.0`) is a Python number, which has no NumPy methods or indexing. (One typed
    operand, `-np.float32(1.0)`, already makes a NumPy scalar.)"""
    if eqn.primitive.multiple_results or not eqn.invars or eqn.outvars[0].aval.shape != ():
        return False
    return (eqn.outvars[0].aval.dtype != dtypes.float0 and all(isinstance(v, Literal) for v in eqn.invars)
            and not any(o.text.startswith("np.") for o in operands))


def _folded(eqn) -> Expr:
    """The 0-d value an equation of literals computes, as a typed literal (`np.float64(2.0)`
    for `1.0 * 2.0`). Computed as the NumPy interpreter computes it, so `1.0 / 0.0` is
    `np.float64(np.inf)`, where Python's own arithmetic would raise ZeroDivisionError."""
    with np.errstate(all="ignore"):
        value = eqn.primitive.impl(*map(literal_value, eqn.invars), **eqn.params)
    aval = eqn.outvars[0].aval
    return typed_scalar(literal_expr(Literal(np.asarray(value, aval.dtype)[()], aval), False), aval.dtype)


def _source_comment(info) -> str:
    """The comment a statement from `info` ends with: `  # mlp.py predict+1`, its
    `relative()` location, escaped (none for an unknown line). Every statement asks, so
    the common case, a known def, writes the def's escaped `mlp.py predict` remembered."""
    if not info.line:
        return ""
    if not info.def_line:
        return f"  # {escaped(info.relative())}"
    return f"  # {_def_label(info.file, info.function)}+{info.line - info.def_line}"


@functools.lru_cache(maxsize=256)
def _def_label(file: str, function: str) -> str:
    """`mlp.py predict`: how `SourceInfo.relative()` names a def, escaped."""
    return escaped(f"{os.path.basename(file)} {function}")


@functools.lru_cache(maxsize=4096)
def _temporary_stem(primitive, origin: str | None) -> str:
    """`exp_shifted`: a nameless value's operation and the source name it derives from
    (`Block.value_name`), made once per pair: a derivative names thousands of values
    from a few such pairs."""
    operation = TEMP_NAMES.get(primitive, primitive.name.removeprefix("reduce_"))
    base = f"{operation}_{origin}" if origin else operation
    return base[:NAME_MAX_CHARS].rstrip("_")


class Block:
    """Writes equations as statements into `lines`, indented by `indent`. Control-flow
    rules (`STATEMENT_RULES`) open nested blocks with `nested()` and write their bodies
    (sub-jaxprs) with `write`; names are shared, so every name in a function is unique."""

    def __init__(self, names: "_Names", options: EmitOptions, lines: list[str] | None = None,
                 indent: str = "", origins: dict | None = None,
                 literal_texts: tuple | None = None):
        self.names = names
        self.options = options
        self.lines = [] if lines is None else lines
        self.indent = indent
        # The source name each variable derives from (its own, else its first operand's).
        self.origins: dict[Var, str] = {} if origins is None else origins
        # Literal -> its text, typed and (at index 1, where `bare_ok`) bare: the equations
        # one rule template wrote (a derivative's) share their literal objects, so each is
        # written once. (A key is held here, so no other literal takes its id meanwhile.)
        self.literal_texts: tuple[dict, dict] = ({}, {}) if literal_texts is None else literal_texts
        self.inlined_comments: dict[Var, str] = {}   # an output written where it is read -> its comment
        # Names of the arrays loops of this block fill step by step (reverse mode's saved
        # values): a loop that reads one for the last time is followed by `del`, so what
        # reverse mode saved is freed once the backward loop has read it, not when the
        # function returns. A block one level in has its own: a loop body, a branch or a
        # body written in place (`write_inline`) does not see the last reads of the block
        # around it, so it frees only what it filled.
        self.buffers: set[str] = set()

    def line(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def nested(self, apart: bool = False) -> "Block":
        """A block one level in, writing into these lines (or into lines of its own)."""
        return Block(self.names, self.options, [] if apart else self.lines, self.indent + "    ",
                     self.origins, self.literal_texts)

    def pass_if_empty(self, since: int) -> None:
        """Writes `pass` where nothing was written in these lines since line `since`: the
        body of a `for`, `while` or `if` must hold a statement, and one whose equations
        all leave the carry as it was (`lax.scan(lambda c, _: (c, None), ...)`, and its
        transpose) writes none."""
        if len(self.lines) == since:
            self.line("pass")

    def comment(self, eqn) -> str:
        return _source_comment(eqn.source_info) if self.options.source_comments else ""

    def _literal(self, lit: Literal, bare_ok: bool) -> Expr:
        texts = self.literal_texts[bare_ok]
        expr = texts.get(lit)
        if expr is None:
            expr = texts[lit] = literal_expr(lit, bare_ok)
        return expr

    def temporary_name(self, eqn, var: Var) -> str:
        """A fresh name for `var`, an output of `eqn`: the source name it has (`h`), else
        its operation and the source name it derives from (`exp_shifted`)."""
        return self.names.fresh(self.value_name(eqn, var))

    def value_name(self, eqn, var: Var) -> str:
        """What `var`, an output of `eqn` (None: an input), is called, not yet made unique:
        its source name, else its operation and the source name it derives from (also the
        stem of a buffer holding it on every loop step, `exp_shifted_per_step`)."""
        if var.hint or eqn is None:
            return var.hint or self.origins.get(var) or "t"
        return _temporary_stem(eqn.primitive, self.origins.get(var))

    def _note_origins(self, eqn) -> None:
        """Records what each output of `eqn` derives its name from: its own name, else the
        first operand's origin. (Asked of every equation written: one output, the common
        case, is written out.)"""
        origins = self.origins
        outvars = eqn.outvars
        if len(outvars) == 1:
            out = outvars[0]
            if out.hint:
                origins[out] = out.hint
                return
            for v in eqn.invars:   # (a literal is never a key)
                origin = origins.get(v)
                if origin:
                    origins[out] = origin
                    return
            return
        origin = next(filter(None, map(origins.get, eqn.invars)), None)
        for v in outvars:
            name = v.hint or origin
            if name:
                origins[v] = name

    def output_name(self, jaxpr, in_exprs: list[Expr], var, computed: bool) -> str | None:
        """What output `var` of `jaxpr` would be called when written on `in_exprs`, before
        it is: its own name, the name of the input it passes on (`w` for `w_1`), else, if
        `computed`, what computes it from what (`exp_X`); None for a constant, which says
        nothing."""
        if not isinstance(var, Var):
            return None
        if var.hint:
            return var.hint
        if var in jaxpr.invars:
            text = in_exprs[jaxpr.invars.index(var)].text
            return _NUMBER_SUFFIX.sub("", text) if _PLAIN_NAME.fullmatch(text) else None
        producers = {v: e for e in jaxpr.eqns for v in e.outvars}
        producer = producers.get(var)
        if not computed or producer is None or not any(isinstance(v, Var) for v in producer.invars):
            return None
        for v, e in zip(jaxpr.invars, in_exprs):    # as `write` notes them
            if v.hint or _PLAIN_NAME.fullmatch(e.text):
                self.origins.setdefault(v, v.hint or e.text)
        for eqn in jaxpr.eqns[:jaxpr.eqns.index(producer) + 1]:
            self._note_origins(eqn)
        return self.value_name(producer, var)

    def named(self, expr: Expr, hint: str | None, comment: str = "") -> Expr:
        """`expr` as a plain name (assigning it first unless it already is one)."""
        if _PLAIN_NAME.fullmatch(expr.text):
            return expr
        local = self.names.fresh(hint)
        self.line(f"{local} = {expr.text}{comment}")
        return Expr(local)

    def _drop_buffers(self, statement, at: int, exprs: dict, last_read: dict) -> None:
        """`del` the buffers statement `at` (a loop) read for the last time. Only a buffer
        this block filled qualifies (`buffers`: a loop nested in another reads its operands
        on every step of the outer one), and only where no value still to be read is written
        with its name."""
        dead = {exprs[v].text for v in statement.invars
                if isinstance(v, Var) and last_read.get(v) == at and exprs[v].text in self.buffers}
        still_read = [exprs[v].text for v, last in last_read.items() if last > at and v in exprs]
        dead = sorted(name for name in dead if not any(re.search(rf"\b{name}\b", t) for t in still_read))
        if dead:
            self.buffers.difference_update(dead)
            self.line(f"del {', '.join(dead)}  # read for the last time by the loop above")

    def write_inline(self, jaxpr, in_exprs: list[Expr], targets: dict | None = None) -> list[Expr]:
        """Writes the body `jaxpr` (a remat's, an unrolled loop's) in this block's lines, as
        `write` does, except that it frees only the buffers the body fills: what the body
        reads last, the block around it may read again."""
        outer, self.buffers = self.buffers, set()
        try:
            return self.write(jaxpr, in_exprs, targets=targets)
        finally:
            self.buffers = outer

    def write(self, jaxpr, in_exprs: list[Expr], exprs: dict | None = None,
              targets: dict | None = None, in_place: dict | None = None,
              uses: dict | None = None) -> list[Expr]:
        """Writes `jaxpr`'s live equations on `in_exprs`; returns its outputs' expressions.
        `targets` names the variables to assign to given names (a branch's outputs).
        `in_place` maps the result of an `add` that reads variable `name` to that name:
        the sum is written `name += term`, into the array `name` holds (a loop's
        accumulator, which the caller owns); a term read only there is written in it.
        `uses`: `_uses(jaxpr)`, where the caller has it already."""
        uses = _uses(jaxpr) if uses is None else uses
        live = uses.keys()
        targets = targets or {}
        in_place = in_place or {}
        summed_terms = {v for e in jaxpr.eqns if e.outvars and e.outvars[0] in in_place
                        for v in e.invars} if in_place else set()
        last_read = None   # variable -> the index of the last equation reading it, once a loop asks
        # Equations staged under `with np.errstate(...)` are written in such a block again;
        # a value is written in place where it is read only under the errstate it ran under.
        pinned = _errstate_pinned(jaxpr)
        open_errstate, errstate_at = (), -1   # the `with np.errstate` block written in, and its line
        source_comments = self.options.source_comments
        comments: dict = {}   # SourceInfo -> its comment
        lines, indent = self.lines, self.indent
        literal_texts, inlined_comments = self.literal_texts, self.inlined_comments
        returned = set(jaxpr.outvars)   # (the values whose inlined comment `return` may need)
        exprs = {} if exprs is None else exprs
        exprs.update(zip(jaxpr.invars, in_exprs))
        for v, e in zip(jaxpr.invars, in_exprs):
            if v.hint or _PLAIN_NAME.fullmatch(e.text):
                self.origins.setdefault(v, v.hint or e.text)
        # Every live equation of every emitted function passes through this loop: what most
        # need (no literal, one output, no in-place sum) is tested with the fewest steps.
        for at, eqn in enumerate(jaxpr.eqns):
            outvars = eqn.outvars
            if live.isdisjoint(outvars) and (outvars or not has_effects(eqn)):   # (a print has no results)
                continue
            self._note_origins(eqn)
            primitive = eqn.primitive
            operands = list(map(exprs.get, eqn.invars))   # None: a literal (a literal is never a key)
            literals = operands.count(None)
            if literals:
                bare_ok = literals < len(operands) and primitive in BARE_SCALAR_OK
                texts = literal_texts[bare_ok]   # (`_literal`'s table, read here first)
                operands = []
                for v in eqn.invars:
                    operands.append(exprs[v] if type(v) is not Literal else texts.get(v) or self._literal(v, bare_ok))
            rule = python_rules.get(primitive)
            if rule is None:
                raise NotImplementedError(f"no Python emission rule for {primitive.name}")
            if primitive in STATEMENT_RULES:   # (at the block's indent: its body's lines under their errstate)
                if open_errstate:
                    open_errstate = ()
                    indent, errstate_at = self._enter_errstate(open_errstate, errstate_at)
                names = [targets.pop(v, None) for v in eqn.outvars]
                exprs.update(zip(eqn.outvars, rule(self, eqn, operands, names)))
                last_read = _last_reads(jaxpr) if last_read is None else last_read
                self._drop_buffers(eqn, at, exprs, last_read)
                continue
            if eqn.source_info.errstate != open_errstate:
                open_errstate = eqn.source_info.errstate
                indent, errstate_at = self._enter_errstate(open_errstate, errstate_at)
            if in_place and eqn.outvars[0] in in_place:
                name = in_place[eqn.outvars[0]]
                (term,) = [o for o in operands if o.text != name]
                lines.append(f"{indent}{name} += {term.text}{self.comment(eqn)}")
                exprs[eqn.outvars[0]] = Expr(name)
                continue
            # `1.0 * 2.0` would be a Python float: `np.float64(2.0)`
            if literals == len(operands) and _constant_scalar(eqn, operands):
                expr = _folded(eqn)
            else:
                expr = rule(eqn, *operands)
            if not primitive.multiple_results:
                (out,) = outvars
                # A nameless value read once is written where it is read (an output: in `return`,
                # whose comment then says where it is computed); a draw where it is made, so
                # draws stay in the program's order.
                if out not in targets and (out.hint is None or out in summed_terms) and uses[out] == 1 \
                        and len(expr.text) <= INLINE_MAX_CHARS and not primitive.effectful and out not in pinned:
                    exprs[out] = expr
                    if out in returned:
                        comment = self.comment(eqn)
                        if comment:
                            inlined_comments[out] = comment
                    continue
            if source_comments:   # (the equations of a line share its SourceInfo: each is written once)
                info = eqn.source_info
                comment = comments.get(info)
                if comment is None:
                    comment = comments[info] = _source_comment(info)
            else:
                comment = ""
            if not outvars:   # run for its effect alone: `print(i)`
                lines.append(f"{indent}{expr.text}{comment}")
                continue
            if primitive.multiple_results:
                names = []
                for v in outvars:
                    if v in live:
                        names.append(targets.pop(v) if v in targets else self.temporary_name(eqn, v))
                        exprs[v] = Expr(names[-1])
                    else:
                        names.append("_")
                lines.append(f"{indent}{', '.join(names)} = {expr.text}{comment}")
                continue
            if not uses[out]:   # a draw nothing reads
                lines.append(f"{indent}{expr.text}{comment}")
                continue
            local = targets.pop(out) if out in targets else self.temporary_name(eqn, out)
            lines.append(f"{indent}{local} = {expr.text}{comment}")   # (`line`)
            exprs[out] = Expr(local)
        if open_errstate:
            self._enter_errstate((), errstate_at)
        return [literal_expr(v, False) if isinstance(v, Literal) else exprs[v] for v in jaxpr.outvars]

    def _enter_errstate(self, settings: tuple, header_at: int) -> tuple[str, int]:
        """Starts writing under `settings` (SourceInfo.errstate; none: the block's own
        state, which writing at the block's indent, after the `with` block, gives back).
        Drops the `with` line at `header_at` if nothing was written under it (its first
        equation went in place where it is read), then writes `with np.errstate(...):` for
        `settings`. Returns the indent of the lines under it and where its line is (-1:
        none)."""
        if header_at >= 0 and header_at == len(self.lines) - 1:
            self.lines.pop()
        if not settings:
            return self.indent, -1
        values = {value for _, value in settings}
        if len(settings) == len(ERRSTATE_KINDS) and len(values) == 1:
            arguments = f"all={values.pop()!r}"
        else:
            arguments = ", ".join(f"{kind}={value!r}" for kind, value in settings)
        self.line(f"with np.errstate({arguments}):")
        return self.indent + "    ", len(self.lines) - 1



def _errstate_pinned(jaxpr) -> frozenset:
    """The variables that must be named where they are computed rather than written in
    place where they are read, because the equation reading them runs under another
    `np.errstate` (a statement's operands and the returned values, under none)."""
    if not any(eqn.source_info.errstate for eqn in jaxpr.eqns):
        return frozenset()
    produced_under: dict[Var, tuple] = {}
    pinned = set()
    for eqn in jaxpr.eqns:
        reading_under = () if eqn.primitive in STATEMENT_RULES else eqn.source_info.errstate
        for v in eqn.invars:
            if type(v) is Var and produced_under.get(v, reading_under) != reading_under:
                pinned.add(v)
        produced_under.update((v, eqn.source_info.errstate) for v in eqn.outvars)
    pinned.update(v for v in jaxpr.outvars if isinstance(v, Var) and produced_under.get(v))
    return frozenset(pinned)


def flat_signature(closed: ClosedJaxpr, arg_names=None) -> Signature:
    invars = closed.jaxpr.invars
    allocator = _Names()
    params = [allocator.fresh(arg_names[i] if arg_names else v.hint, "x")
              for i, v in enumerate(invars)]
    return Signature(params, params, list(params))


def emit_jaxpr_module(closed: ClosedJaxpr, name: str = "f", arg_names=None,
                      options: EmitOptions | None = None) -> EmittedModule:
    """The module for a jaxpr taken as a function of its flat inputs."""
    header = f"Generated by s2s from a jaxpr with inputs ({', '.join(a.str_short() for a in closed.in_avals)})."
    return emit_module(closed, name, flat_signature(closed, arg_names), header, options)


def emit_jaxpr_source(closed: ClosedJaxpr, name: str = "f", arg_names=None,
                      options: EmitOptions | None = None) -> str:
    """The source of `emit_jaxpr_module` (for tests and tools)."""
    return emit_jaxpr_module(closed, name, arg_names, options).source


def load_source(source: str, name: str, filename: str | None = None,
                module_globals: dict | None = None) -> types.ModuleType:
    """Executes emitted source as a module, registered with linecache for tracebacks;
    `module_globals` are set in the module first (`_consts` for `const_mode="memory"`)."""
    filename = filename or f"<s2s generated {name}>"
    module = types.ModuleType(f"s2s_generated_{name}")
    module.__dict__.update(module_globals or {})
    module.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), module.__dict__)
    return module
