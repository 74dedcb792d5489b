"""Python expressions for the emitter, and the table of per-primitive emission rules.

A rule turns one equation into idiomatic NumPy: `rule(eqn, *operands) -> Expr`, where
each operand is an `Expr` (a variable name, a literal, or a whole inlined expression).
An `Expr` knows its precedence, so rules compose them without redundant parentheses and
the emitter can inline single-use temporaries: `h = np.tanh(x @ W1 + b1)`.

Family modules in `s2s/primitives/` register their rules in `python_rules`; the emitter
in `s2s/emit/python.py` looks them up. Emitted code may use `np` (numpy) and `rt`
(s2s_runtime) and nothing else.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable

import numpy as np

from s2s import dtypes

# Precedences, loosest to tightest, as in Python's grammar.
TERNARY, OR, AND, NOT, COMPARE, BITOR, BITXOR, BITAND, SHIFT, ADD, MUL, UNARY, POWER, ATOM = range(14)

BINARY_PRECEDENCE = {
    "|": BITOR, "^": BITXOR, "&": BITAND, "<<": SHIFT, ">>": SHIFT, "+": ADD, "-": ADD,
    "*": MUL, "/": MUL, "//": MUL, "%": MUL, "@": MUL, "**": POWER,
    "<": COMPARE, "<=": COMPARE, ">": COMPARE, ">=": COMPARE, "==": COMPARE, "!=": COMPARE,
}


class Expr:
    __slots__ = ("text", "prec")

    def __init__(self, text: str, prec: int = ATOM):
        self.text = text
        self.prec = prec

    def wrap(self, min_prec: int) -> str:
        """The text, parenthesized if it binds looser than `min_prec`."""
        return self.text if self.prec >= min_prec else f"({self.text})"

    def __repr__(self):
        return f"Expr({self.text!r})"


python_rules: dict = {}   # Primitive -> rule(eqn, *operands: Expr) -> Expr

# Control flow is written as statements (`if`, `while`, `for` blocks) by rules of another
# kind: rule(block, eqn, operands: list[Expr], names: list[str | None]) -> list[Expr], where
# `names` are the names the caller wants the results in, if any (see emit/python.py's Block).
STATEMENT_RULES: set = set()

# Primitives whose NumPy spelling types a bare Python scalar operand like the array beside
# it (NEP 50), so `x * 0.5` can be written instead of `x * np.float32(0.5)`.
BARE_SCALAR_OK: set = set()


# Primitive -> the short word an unnamed temporary it computes is named with (`cast_x` for
# convert_element_type); a primitive without one is named by its own name.
TEMP_NAMES: dict = {}


def register(primitive, rule: Callable, bare_scalar_ok: bool = False, temp_name: str | None = None) -> None:
    python_rules[primitive] = rule
    if bare_scalar_ok:
        BARE_SCALAR_OK.add(primitive)
    if temp_name is not None:
        TEMP_NAMES[primitive] = temp_name


def register_statement(primitive, rule: Callable) -> None:
    python_rules[primitive] = rule
    STATEMENT_RULES.add(primitive)


def py_value(value) -> str:
    """Python source for a static parameter value (ints, tuples, dtypes, None ...)."""
    if isinstance(value, np.dtype):
        return dtype_text(value)
    if isinstance(value, tuple):
        inner = ", ".join(py_value(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, list):
        return "[" + ", ".join(py_value(v) for v in value) + "]"
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return repr(value.item())
    return repr(value)


def dtype_text(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == dtypes.float0:
        return "rt.float0"
    return f"np.{dtype.name}"


def typed_scalar(expr: Expr, dtype) -> Expr:
    """A scalar written with its dtype, `np.float32(0.5)`, unless it already is."""
    wrapper = dtype_text(dtype)
    return expr if expr.text.startswith(wrapper + "(") else Expr(f"{wrapper}({expr.text})")


_host_names = threading.local()


@contextlib.contextmanager
def naming_host_objects(names: dict):
    """While a module is written: the name its function gives each host object it takes
    as a parameter (`host_expression`)."""
    outer = getattr(_host_names, "current", None)
    _host_names.current = names
    try:
        yield
    finally:
        _host_names.current = outer


def host_expression(obj) -> str:
    """How emitted code reaches a host object (`core.HostObject`): what writes it, else the
    parameter the function takes it as."""
    return obj.expression or _host_names.current[obj]


def call(fn: str, *args: Expr, **kwargs) -> Expr:
    """`fn(a, b, key=value)`; keyword values are static Python values or Exprs."""
    parts = [a.text for a in args]
    if kwargs:
        parts += [f"{k}={v.text if isinstance(v, Expr) else py_value(v)}" for k, v in kwargs.items()]
    return Expr(f"{fn}({', '.join(parts)})")


def method(obj: Expr, name: str, *args: Expr, **kwargs) -> Expr:
    inner = call(name, *args, **kwargs).text
    return Expr(f"{obj.wrap(ATOM)}.{inner}")


def binop_rule(op: str) -> Callable:
    """The emission rule of a primitive written as the binary operator `op`, `rule(eqn, lhs,
    rhs) -> Expr` (the equation is not read): its precedence is looked up once, here, for
    the most common equations there are."""
    prec = BINARY_PRECEDENCE[op]
    if op == "**":  # right-associative; its left operand binds tighter than unary minus
        return lambda eqn, lhs, rhs: Expr(f"{lhs.wrap(ATOM)} ** {rhs.wrap(UNARY)}", prec)
    if prec == COMPARE:  # comparisons chain in Python: never put one bare inside another
        return lambda eqn, lhs, rhs: Expr(f"{lhs.wrap(COMPARE + 1)} {op} {rhs.wrap(COMPARE + 1)}", prec)

    def rule(eqn, lhs: Expr, rhs: Expr) -> Expr:   # (`wrap` written out)
        left = lhs.text if lhs.prec >= prec else f"({lhs.text})"
        right = rhs.text if rhs.prec > prec else f"({rhs.text})"
        return Expr(f"{left} {op} {right}", prec)
    return rule


_BINOP_RULES = {op: binop_rule(op) for op in BINARY_PRECEDENCE}


def binop(op: str, lhs: Expr, rhs: Expr) -> Expr:
    return _BINOP_RULES[op](None, lhs, rhs)


def unop(op: str, operand: Expr) -> Expr:
    return Expr(f"{op}{operand.wrap(UNARY)}", UNARY)


def subscript(obj: Expr, index: str) -> Expr:
    return Expr(f"{obj.wrap(ATOM)}[{index}]")


def slice_text(start, stop, step=None) -> str:
    """`a:b:c` with the parts NumPy would take by default left out."""
    text = f"{'' if start in (None, 0) else start}:{'' if stop is None else stop}"
    if step not in (None, 1):
        text += f":{step}"
    return text
