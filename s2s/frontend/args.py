"""Describing arguments: `ShapeDtype`, the `f32[128,784]` spec syntax, and which leaves stage.

Arrays, NumPy scalars, Python floats and complexes, and `ShapeDtype`s are staged: they
become jaxpr inputs. Python ints and bools are static by default: their values specialize
the jaxpr, so `for i in range(n_steps)` just works. `static_argnums`/`static_argnames`
make a whole argument static; `dynamic_argnums` stages the ints and bools in an argument.
"""
from __future__ import annotations

import re

import numpy as np

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.errors import StagingError
from s2s_runtime.xla import Array


class ShapeDtype:
    """An abstract argument: `s2s.ShapeDtype((128, 784), 'float32')`."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtypes.from_short_name(dtype) if isinstance(dtype, str) else np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"ShapeDtype({self.shape}, {self.dtype.name!r})"

    def __eq__(self, other):
        return isinstance(other, ShapeDtype) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


def is_staged_leaf(leaf) -> bool:
    if isinstance(leaf, (ShapeDtype, ShapedArray, np.ndarray, np.generic, Array)):
        return True
    return isinstance(leaf, (float, complex))


def aval_of_arg(leaf) -> ShapedArray:
    """The abstract value a staged argument leaf gets (Python floats stay weak, as in NumPy)."""
    if isinstance(leaf, ShapedArray):
        return leaf
    if isinstance(leaf, (ShapeDtype, Array)):
        return ShapedArray(leaf.shape, dtypes.canonicalize_dtype(leaf.dtype))
    if hasattr(leaf, "aval") and isinstance(leaf.aval, ShapedArray):   # a staged value
        return leaf.aval
    if isinstance(leaf, (bool, int, float, complex)) and not isinstance(leaf, np.generic):
        return ShapedArray((), dtypes.dtype_of_python_scalar(leaf), weak_type=True)
    array = np.asarray(leaf)
    return ShapedArray(array.shape, dtypes.canonicalize_dtype(array.dtype))


# ---------------------------------------------------------------------------------------
# Spec strings: "f32[128,784], f32[784]", "{'W': f32[3,4], 'b': f32[4]}", "3", "(f64[], 2)"

_TOKEN = re.compile(r"""\s*(?:
    (?P<spec>[a-z][a-z0-9]*\[[0-9,\s]*\])
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<string>'[^']*'|"[^"]*")
  | (?P<word>True|False|None)
  | (?P<punct>[\[\]{}(),:])
)""", re.VERBOSE)


_SPEC_HELP = ("write specs like 'f32[128,784], f32[784]', numbers for static arguments, "
              "or dicts/lists/tuples of them: \"{'W': f32[3,4]}, (f64[], 2)\"")


def parse_arg_specs(text: str) -> list:
    """Parses a comma-separated list of argument specs into example arguments."""
    tokens = _tokenize(text)
    parser = _SpecParser(tokens, text)
    values = []
    while not parser.done():
        values.append(parser.value())
        if not parser.done():
            parser.expect(",")
    return values


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise StagingError(f"cannot parse argument spec {text!r} at {text[pos:]!r}", _SPEC_HELP)
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _SpecParser:
    def __init__(self, tokens, text):
        self.tokens, self.i, self.text = tokens, 0, text

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def peek(self):
        return self.tokens[self.i] if not self.done() else (None, None)

    def expect(self, punct: str):
        kind, value = self.peek()
        if value != punct:
            raise StagingError(f"argument spec {self.text!r}: expected {punct!r}, found {value!r}",
                               _SPEC_HELP)
        self.i += 1

    def value(self):
        kind, tok = self.peek()
        if kind is None:
            raise StagingError(f"argument spec {self.text!r} ends too early", _SPEC_HELP)
        self.i += 1
        if kind == "spec":
            name, dims = tok.split("[", 1)
            dims = [d for d in dims.rstrip("]").replace(" ", "").split(",") if d]
            try:
                return ShapeDtype(tuple(int(d) for d in dims), name)
            except TypeError:
                raise StagingError(f"unknown dtype {name!r} in argument spec {tok!r}",
                                   "use f16/f32/f64, i8/i16/i32/i64, u8..u64, bool, c64/c128 "
                                   "or a NumPy dtype name") from None
        if kind == "number":
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if kind == "string":
            return tok[1:-1]
        if kind == "word":
            return {"True": True, "False": False, "None": None}[tok]
        if tok in "([":
            close = ")" if tok == "(" else "]"
            items = self._sequence(close)
            return tuple(items) if tok == "(" else list(items)
        if tok == "{":
            out = {}
            while self.peek()[1] != "}":
                key = self.value()
                self.expect(":")
                out[key] = self.value()
                if self.peek()[1] != "}":
                    self.expect(",")
            self.expect("}")
            return out
        raise StagingError(f"argument spec {self.text!r}: unexpected {tok!r}", _SPEC_HELP)

    def _sequence(self, close: str) -> list:
        items = []
        while self.peek()[1] != close:
            items.append(self.value())
            if self.peek()[1] != close:
                self.expect(",")
        self.expect(close)
        return items


def describe_arg(value) -> str:
    """`f32[128,784]`, `{'W': f32[3,4]}`, `3`: how headers and errors show an argument."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe_arg(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(describe_arg(v) for v in value) + "]"
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        inner = ", ".join(describe_arg(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if is_staged_leaf(value):
        aval = aval_of_arg(value)
        return aval.str_short() + (" (weak)" if aval.weak_type else "")
    return repr(value)
