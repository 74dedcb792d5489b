"""The IR: typed SSA programs in the style of JAX's jaxprs.

A `Jaxpr` is a list of equations `outvars = primitive[params] invars`, each output
variable bound exactly once. A `ClosedJaxpr` pairs a jaxpr with the values of its
constant variables. Every pass reads and writes ClosedJaxprs; the printer makes any
intermediate inspectable, `check_jaxpr` catches malformed ones early, and `eval_jaxpr`
with the primitives' NumPy impls is the semantic reference for every backend.

Elementwise primitives follow NumPy's broadcasting rules (operands of equal dtype,
shapes that broadcast); everything else is explicit.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from s2s import dtypes
from s2s.errors import ShapeError
from s2s.source_info import SourceInfo, UNKNOWN


class ShapedArray:
    """The abstract value of an array: shape, dtype and whether its dtype is weak."""

    __slots__ = ("shape", "dtype", "weak_type", "_hash")

    def __init__(self, shape, dtype, weak_type: bool = False):
        self.shape = _int_shape(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = True if weak_type else False
        self._hash = None   # made when first asked: avals key the passes' memos

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def update(self, shape=None, dtype=None, weak_type=None) -> ShapedArray:
        return ShapedArray(self.shape if shape is None else shape,
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type)

    def strip_weak_type(self) -> ShapedArray:
        return self.update(weak_type=False) if self.weak_type else self

    def str_short(self) -> str:
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __eq__(self, other):
        return (isinstance(other, ShapedArray) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((self.shape, self.dtype, self.weak_type))
        return self._hash

    def __repr__(self):
        return f"ShapedArray({self.str_short()}{', weak_type=True' if self.weak_type else ''})"


# A shape tuple as given (Python or NumPy ints) -> the same shape as a tuple of Python ints.
# Staging makes an aval for nearly every equation, over a few shapes; the tuple's hash and
# equality are NumPy's own for NumPy ints, so `(np.int64(3),)` finds `(3,)`.
_INT_SHAPES: dict = {}
_MAX_REMEMBERED_SHAPES = 4096


def _int_shape(shape) -> tuple[int, ...]:
    try:
        return _INT_SHAPES[shape]
    except (KeyError, TypeError):   # (TypeError: a list, or a tuple holding one)
        pass
    ints = tuple(int(d) for d in shape)
    if type(shape) is tuple and len(_INT_SHAPES) < _MAX_REMEMBERED_SHAPES:
        _INT_SHAPES[shape] = ints
    return ints


def aval_of_value(value) -> ShapedArray:
    """The abstract value of a concrete Python or NumPy value."""
    if isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic):
        return ShapedArray((), dtypes.dtype_of_python_scalar(value), weak_type=True)
    array = np.asarray(value)
    return ShapedArray(array.shape, dtypes.canonicalize_dtype(array.dtype))


class Var:
    """An SSA variable. `hint` is the user's name for it, used by the Python emitter."""

    __slots__ = ("aval", "hint")

    def __init__(self, aval: ShapedArray, hint: str | None = None):
        self.aval = aval
        self.hint = hint

    def __repr__(self):
        return f"Var({self.hint or '?'}:{self.aval.str_short()})"


class Literal:
    """A scalar constant written inline in an equation."""

    __slots__ = ("value", "aval")

    def __init__(self, value, aval: ShapedArray):
        if aval.shape != ():
            raise ValueError("literals are scalars; arrays are constants")
        self.value = value
        self.aval = aval

    def __repr__(self):
        return f"Literal({self.value!r}:{self.aval.str_short()})"


Atom = Var | Literal


class JaxprEqn:
    """`outvars = primitive[params] invars`; `primitive` is a `s2s.staging.Primitive`.

    An equation is never changed once built (a pass that needs another makes a new one),
    so it holds the lists and the dict it is given as they are, shared with the equation
    a pass copied it from (copying them took 40% of the time it takes to make one). The
    caller gives lists and a dict (`check_jaxpr` checks): every pass makes equations by
    the ten thousand, and converting or even testing what it gives cost 1% of a gradient's
    staging."""

    __slots__ = ("primitive", "invars", "outvars", "params", "source_info")

    def __init__(self, primitive: "Primitive", invars: list, outvars: list[Var],
                 params: dict, source_info: SourceInfo = UNKNOWN):
        self.primitive = primitive
        self.invars = invars
        self.outvars = outvars
        self.params = params
        self.source_info = source_info

    def __repr__(self):
        return f"JaxprEqn({self.primitive.name}, {self.invars} -> {self.outvars})"


class HostObject:
    """An object of the host's Python that an equation uses when it runs: the NumPy random
    generator staged code draws from. A static parameter, equal only to a HostObject of the
    same object (the generator's state changes with every draw; its identity does not).

    Emitted code reaches it through `expression` where Python can write it (NumPy's global
    state: `np.random`), else through a keyword-only parameter of the emitted function
    named after `name`; s2s's own runs pass the object itself there."""

    __slots__ = ("value", "name", "expression")

    def __init__(self, value, name: str, expression: str | None = None):
        self.value, self.name, self.expression = value, name, expression

    def __eq__(self, other):
        return isinstance(other, HostObject) and other.value is self.value

    def __hash__(self):
        return id(self.value)

    def __repr__(self):
        return self.expression or self.name


def sub_jaxprs(value):
    """The jaxprs inside an equation parameter (a loop body, a tuple of cond branches)."""
    if isinstance(value, ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from sub_jaxprs(item)


def has_effects(eqn: JaxprEqn) -> bool:
    """Whether running `eqn` changes something besides its results (a draw advances its
    generator), itself or in a jaxpr it runs: such an equation is never dropped as dead,
    merged with another or run twice, so a program draws what the Python it was staged
    from draws, in the same order."""
    return getattr(eqn.primitive, "effectful", False) or any(
        has_effects(inner) for value in eqn.params.values() for jaxpr in sub_jaxprs(value) for inner in jaxpr.eqns)


def host_objects(jaxpr: "Jaxpr") -> list[HostObject]:
    """The host objects `jaxpr`'s equations use (those of the jaxprs they run too), in the
    order of their first use."""
    found: dict[HostObject, None] = {}

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            for value in eqn.params.values():
                if isinstance(value, HostObject):
                    found.setdefault(value)
                for inner in sub_jaxprs(value):
                    walk(inner)
    walk(jaxpr)
    return list(found)


class Jaxpr:
    """A staged program: its constants' and inputs' variables, its equations in order (SSA:
    each variable defined once), and the atoms it returns. `ClosedJaxpr` pairs it with the
    constants' values; `make_jaxpr` prints one in jax's notation."""
    __slots__ = ("constvars", "invars", "outvars", "eqns")

    def __init__(self, constvars, invars, outvars, eqns):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.eqns = list(eqns)

    @property
    def in_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.outvars]

    def __str__(self):
        return pp_jaxpr(self)


class ClosedJaxpr:
    """A jaxpr together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts", "__weakref__")

    def __init__(self, jaxpr: Jaxpr, consts):
        if len(consts) != len(jaxpr.constvars):
            raise ValueError("a ClosedJaxpr needs one value per constvar")
        self.jaxpr = jaxpr
        self.consts = list(consts)

    @property
    def in_avals(self):
        return self.jaxpr.in_avals

    @property
    def out_avals(self):
        return self.jaxpr.out_avals

    @property
    def eqns(self):
        return self.jaxpr.eqns

    def __str__(self):
        return pp_jaxpr(self.jaxpr)

    def __repr__(self):
        return pp_jaxpr(self.jaxpr)


# ---------------------------------------------------------------------------------------
# Pretty-printing


def _short_names():
    """a, b, ..., z, ba, bb, ... as JAX names jaxpr variables."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    for size in itertools.count(1):
        for combo in itertools.product(letters, repeat=size):
            if size > 1 and combo[0] == "a":
                continue
            yield "".join(combo)


def format_param(value) -> str:
    if isinstance(value, np.dtype):
        return dtypes.short_name(value)
    if isinstance(value, type) and issubclass(value, np.generic):
        return dtypes.short_name(np.dtype(value))
    if isinstance(value, ClosedJaxpr | Jaxpr):
        text = pp_jaxpr(value.jaxpr if isinstance(value, ClosedJaxpr) else value)
        return text.replace("\n", "\n    ")
    if isinstance(value, tuple):
        inner = ", ".join(format_param(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


def format_literal(lit: Literal) -> str:
    value = lit.value
    if isinstance(value, np.generic):
        value = value.item()
    return f"{value!r}:{lit.aval.str_short()}"


def pp_jaxpr(jaxpr: Jaxpr) -> str:
    """Prints `{ lambda consts ; args . let eqns in (outs,) }` as JAX does."""
    names: dict[Var, str] = {}
    fresh = _short_names()

    def name(v: Atom, binding: bool = False) -> str:
        if isinstance(v, Literal):
            return format_literal(v)
        if v not in names:
            names[v] = next(fresh)
        return f"{names[v]}:{v.aval.str_short()}" if binding else names[v]

    consts = " ".join(name(v, True) for v in jaxpr.constvars)
    args = " ".join(name(v, True) for v in jaxpr.invars)
    lines = []
    for eqn in jaxpr.eqns:
        outs = " ".join(name(v, True) for v in eqn.outvars)
        params = ""
        if eqn.params:
            params = "[" + ", ".join(f"{k}={format_param(v)}"
                                     for k, v in sorted(eqn.params.items())) + "]"
        ins = " ".join(name(v) for v in eqn.invars)
        call = f"{eqn.primitive.name}{params} {ins}".rstrip()
        lines.append(f"{outs} = {call}" if outs else call)   # (an equation run for its effect: a print)
    outs = ", ".join(name(v) for v in jaxpr.outvars)
    outs = f"({outs}{',' if len(jaxpr.outvars) == 1 else ''})"
    head = f"{{ lambda {consts + ' ' if consts else ''}; {args}."
    if len(lines) <= 1:
        body = f" {lines[0]}" if lines else ""
        text = f"{head} let{body} in {outs} }}"
        if len(text) <= 100:
            return text
    return "\n".join([f"{head} let"] + [f"    {l}" for l in lines] + [f"  in {outs} }}"])


# ---------------------------------------------------------------------------------------
# Checking


class JaxprTypeError(Exception):
    """A malformed jaxpr: always a bug in s2s, never the user's mistake."""


def check_jaxpr(jaxpr: Jaxpr | ClosedJaxpr) -> None:
    """Checks SSA (each var bound once, defined before use) and every equation's types,
    in the jaxprs of control-flow bodies too (each a scope of its own)."""
    if isinstance(jaxpr, ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    defined: set[int] = set()

    def bind(v: Var, where: str):
        if not isinstance(v, Var):
            raise JaxprTypeError(f"{where}: binds a non-variable {v!r}")
        if id(v) in defined:
            raise JaxprTypeError(f"{where}: variable {v!r} bound twice")
        defined.add(id(v))

    def read(v: Atom, where: str):
        if isinstance(v, Literal):
            return
        if id(v) not in defined:
            raise JaxprTypeError(f"{where}: variable {v!r} used before it is defined")

    for v in jaxpr.constvars:
        bind(v, "constvars")
    for v in jaxpr.invars:
        bind(v, "invars")
    for i, eqn in enumerate(jaxpr.eqns):
        where = f"equation {i} ({eqn.primitive.name})"
        if (type(eqn.invars), type(eqn.outvars), type(eqn.params)) != (list, list, dict):
            raise JaxprTypeError(f"{where}: its operands and outputs must be lists and its parameters a dict, "
                                 f"not {type(eqn.invars).__name__}, {type(eqn.outvars).__name__} and "
                                 f"{type(eqn.params).__name__}")
        for v in eqn.invars:
            read(v, where)
        for name, value in eqn.params.items():
            for body in (value if isinstance(value, tuple) else (value,)):
                if isinstance(body, ClosedJaxpr):
                    try:
                        check_jaxpr(body)
                    except JaxprTypeError as e:
                        raise JaxprTypeError(f"{where}, in {name}: {e}") from None
        try:
            expected = eqn.primitive.abstract_eval(*[v.aval for v in eqn.invars], **eqn.params)
        except ShapeError as e:
            raise JaxprTypeError(f"{where}: {e.what}") from None
        expected = list(expected) if eqn.primitive.multiple_results else [expected]
        if len(expected) != len(eqn.outvars):
            raise JaxprTypeError(f"{where}: {len(eqn.outvars)} outputs, rule says {len(expected)}")
        for out, aval in zip(eqn.outvars, expected):
            if out.aval.strip_weak_type() != aval.strip_weak_type():
                raise JaxprTypeError(f"{where}: output typed {out.aval.str_short()}, "
                                     f"rule says {aval.str_short()}")
            bind(out, where)
    for v in jaxpr.outvars:
        read(v, "outvars")


# ---------------------------------------------------------------------------------------
# Reference interpreter


def literal_value(lit: Literal):
    return np.asarray(lit.value, dtype=lit.aval.dtype)[()]


def eval_jaxpr(closed: ClosedJaxpr, *args) -> list:
    """Runs a closed jaxpr on NumPy values with each primitive's impl; returns the outputs."""
    jaxpr = closed.jaxpr
    if len(args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(args)}")
    env: dict[Var, Any] = {}

    def read(v: Atom):
        return literal_value(v) if isinstance(v, Literal) else env[v]

    for v, value in zip(jaxpr.constvars, closed.consts):
        env[v] = value
    for v, value in zip(jaxpr.invars, args):
        env[v] = np.asarray(value, dtype=v.aval.dtype)
    for eqn in jaxpr.eqns:
        if eqn.source_info.errstate:   # staged inside `with np.errstate(...)`
            with np.errstate(**dict(eqn.source_info.errstate)):
                outs = eqn.primitive.impl(*map(read, eqn.invars), **eqn.params)
        else:
            outs = eqn.primitive.impl(*map(read, eqn.invars), **eqn.params)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, value in zip(eqn.outvars, outs):
            env[v] = value
    return [read(v) for v in jaxpr.outvars]
