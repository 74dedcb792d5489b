"""Describing arguments: `ShapeDtype`, the `f32[128,784]` spec syntax, and which leaves stage.

Arrays, NumPy scalars, Python floats and complexes, and `ShapeDtype`s are staged: they
become jaxpr inputs. Python ints and bools are static by default: their values specialize
the jaxpr, so `for i in range(n_steps)` just works. `static_argnums`/`static_argnames`
make a whole argument static; `dynamic_argnums` stages the ints and bools in an argument.

Only what XLA and the NumPy module can both run stages: bool, (u)int8-64, float16-64 and
complex64/128 arrays. Anything else (object, bfloat16, longdouble, datetime, string,
structured arrays; `np.matrix` and masked arrays, whose operators mean something else than
an ndarray's) is refused here with an error that names the argument, never staged as
something it is not.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import re
import types
from collections.abc import Callable

import numpy as np

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.errors import ArgnumsRangeError, ArgnumsTypeError, StagingError, api_boundary
from s2s.staging import Tracer
from s2s.tree import node_children
from s2s_runtime.array import Array


def normalize_argnums(argnums, count: int | None = None, what: str = "argnums") -> tuple[int, ...]:
    """Argument numbers as a tuple of ints, in the order given: one alone may be given bare
    (`argnums=1`), as every transform takes them. Checked when the transform is made (no
    `count`), so a mistake shows at the line that makes it; resolved at a call against the
    `count` arguments it has, a negative number counting from the end, as in JAX.

    Anything but ints (NumPy's included, via `__index__`) is an `ArgnumsTypeError`, a number
    outside the `count` arguments an `ArgnumsRangeError`: JAX's TypeError and ValueError.
    """
    if type(argnums) is tuple and all(type(a) is int for a in argnums):
        items = argnums   # the common case, on every staging: no exception raised and caught
    else:
        single = _index(argnums)
        try:
            items = (single,) if single is not None else tuple(_index(a) for a in argnums)
        except TypeError:   # not iterable
            items = (None,)
    if None in items:
        raise ArgnumsTypeError(f"{what}={argnums!r}: argument numbers must be an int or a sequence of ints",
                               f"pass {what}=0 or {what}=(0, 1)")
    if count is None:
        return items
    for a in items:
        if not -count <= a < count:
            plural = "" if count == 1 else "s"
            raise ArgnumsRangeError(f"{what} {a} is out of range for {count} positional argument{plural}",
                                    f"use {what} between {-count} and {count - 1}" if count else
                                    f"pass the argument {what} names, or drop {what}")
    return tuple(a % count for a in items)


def is_bare_argnums(argnums) -> bool:
    """Whether `argnums` names one argument bare (`0`, `np.int64(0)`): the derivative is then
    that argument's itself, not a tuple of one as for `(0,)`. One test for a result's shape
    and its cache key, so the two never disagree."""
    return _index(argnums) is not None


def _index(value) -> int | None:
    """`value` as an argument number (NumPy's ints and bools too, as JAX takes them through
    `operator.index`), or None for a float, a string or a sequence."""
    try:
        return operator.index(value)
    except TypeError:
        return None


class ShapeDtype:
    """An abstract argument: `s2s.ShapeDtype((128, 784), 'float32')`."""

    __slots__ = ("shape", "dtype")

    @api_boundary   # the user's call is the place to show
    def __init__(self, shape, dtype):
        self.shape = _checked_shape(shape)
        self.dtype = _checked_dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"ShapeDtype({self.shape}, {self.dtype.name!r})"

    def __eq__(self, other):
        return isinstance(other, ShapeDtype) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


_SHAPE_HELP = "write the shape as a tuple of non-negative ints: ShapeDtype((128, 784), 'float32')"
_DTYPE_HELP = ("use one of bool, int8..int64, uint8..uint64, float16, float32, float64, complex64, "
               "complex128 (or f16/f32/f64, i8..i64, u8..u64, c64/c128)")


_MAX_DIM = np.iinfo(np.int64).max


def _checked_shape(shape) -> tuple[int, ...]:
    """`shape` as a tuple of dims, each a non-negative int (a float, a bool or a negative
    dim is a mistake, not something to round)."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise StagingError(f"ShapeDtype shape {shape!r} is not a tuple of dims", _SHAPE_HELP) from None
    for dim in dims:
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise StagingError(f"ShapeDtype shape {shape!r} has the dim {dim!r}, which is not an int",
                               _SHAPE_HELP)
        if dim < 0:
            raise StagingError(f"ShapeDtype shape {shape!r} has the negative dim {dim}", _SHAPE_HELP)
        if dim > _MAX_DIM:
            raise StagingError(f"ShapeDtype shape {shape!r} has the dim {dim}, more than XLA's "
                               f"largest ({_MAX_DIM}, a signed 64-bit int)", _SHAPE_HELP)
    return tuple(int(d) for d in dims)


def _checked_dtype(dtype) -> np.dtype:
    """`dtype` (a NumPy dtype, a type, or a name such as 'float32' or 'f32') if s2s stages it."""
    try:
        parsed = dtypes.from_short_name(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    except (TypeError, ValueError):
        raise StagingError(f"ShapeDtype dtype {dtype!r} is not a dtype NumPy knows", _DTYPE_HELP) from None
    if not dtypes.is_supported(parsed):
        raise StagingError(f"ShapeDtype dtype {parsed} is not one s2s stages", _DTYPE_HELP)
    return parsed


def unsupported_leaf_reason(leaf) -> str | None:
    """Why an argument leaf cannot be staged (None when it can): what it is, for an error."""
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray and _overrides_operators(type(leaf)):
        return (f"a {type(leaf).__module__}.{type(leaf).__qualname__}, whose operators mean something "
                "else than an ndarray's (np.matrix's `*` is a matrix product, a masked array's "
                "skip masked entries)")
    dtype = getattr(leaf, "dtype", None)
    if isinstance(leaf, (np.ndarray, np.generic)) and not dtypes.is_supported(dtype):
        return f"an array of dtype {dtype}, which XLA and s2s do not compute with"
    return None


# The operators an ndarray subclass may give another meaning: such a subclass is refused,
# others (np.memmap, say) stage as the ndarray they are.
_OPERATORS = ("__array_ufunc__", "__array_function__", "__mul__", "__rmul__", "__matmul__",
              "__pow__", "__add__", "__sub__", "__truediv__")


def _overrides_operators(cls: type) -> bool:
    return any(getattr(cls, name, None) is not getattr(np.ndarray, name) for name in _OPERATORS)


UNSUPPORTED_LEAF_HELP = ("convert it first: np.asarray(x, dtype=np.float64) for object, longdouble "
                         "or bfloat16 arrays (x.astype(np.float32) for bfloat16), np.asarray(m) "
                         "for an np.matrix (then `@` for its matrix product), m.filled(value) for "
                         "a masked array; numbers in strings or datetimes must be converted to "
                         "numeric arrays")


def unsupported_argument_error(leaves_with_names) -> StagingError | None:
    """The error naming the first argument leaf that cannot be staged, or None.

    `leaves_with_names` yields (leaf, how the user names it: "`params['W1']`", or what it is
    where its parameter is not known: "(float64[2,2] matrix)")."""
    for leaf, name in leaves_with_names:
        reason = unsupported_leaf_reason(leaf)
        if reason is not None:
            return StagingError(f"argument {name} is {reason}", UNSUPPORTED_LEAF_HELP)
    return None


# Objects whose attributes are never looked into for arrays: what they hold is code, not
# a model's parameters.
_NOT_CONTAINERS = (types.ModuleType, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                   functools.partial)


def array_inside(value, depth: int = 3) -> str | None:
    """Where an object that is no pytree node (a plain `class Params` instance) holds an
    array, as the path from it (`.W`, `.layers[0]`), looking `depth` objects deep; None
    when it holds none. Such an object passed as an argument would be static, its arrays
    baked into the staging as constants and read again only when it is a new object."""
    attributes = getattr(value, "__dict__", None)
    if depth == 0 or not isinstance(attributes, dict) or isinstance(value, _NOT_CONTAINERS):
        return None
    for name, attribute in attributes.items():
        found = _array_path(attribute, depth - 1)
        if found is not None:
            return f".{name}{found}"
    return None


def _array_path(value, depth: int) -> str | None:
    """"" where `value` is an array, else the path to an array inside it (through lists,
    tuples, dicts and other objects' attributes), or None."""
    if isinstance(value, (np.ndarray, Array, Tracer)):
        return ""
    if isinstance(value, (list, tuple)):
        items = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return array_inside(value, depth)
    for key, item in items:
        found = _array_path(item, depth)
        if found is not None:
            return f"[{key!r}]{found}"
    return None


def object_holding_arrays_error(name_of: Callable[[], str], leaf) -> StagingError | None:
    """The error for the argument `name_of()` names, an object of a class s2s does not know as a pytree
    that holds arrays, or None for any other leaf. Staged it cannot be (which attributes
    are inputs, and how is another one built?); static, its arrays would be constants that
    a change in place never reaches and that no gradient is taken of."""
    if isinstance(leaf, (int, float, complex, str, bytes, np.ndarray, np.generic, Array, Tracer)) or leaf is None:
        return None
    where = array_inside(leaf)
    if where is None:
        return None
    cls, name = type(leaf).__qualname__, name_of()
    return StagingError(
        f"argument `{name}` is a {cls} object holding arrays (`{name}{where}`), and {cls} is not a "
        "pytree s2s can take apart: its arrays would be baked into the function as constants",
        f"make {cls} a pytree: decorate it with @s2s.register_pytree_node_class and give it "
        "`tree_flatten(self) -> (arrays, static_data)` and a classmethod "
        "`tree_unflatten(cls, static_data, arrays)`; or make it a @dataclasses.dataclass; or call "
        f"s2s.register_pytree_node({cls}, flatten, unflatten)")


def is_staged_leaf(leaf) -> bool:
    if isinstance(leaf, (ShapeDtype, ShapedArray, np.ndarray, np.generic, Array)):
        return True
    return isinstance(leaf, (float, complex))


def aval_of_arg(leaf) -> ShapedArray:
    """The abstract value a staged argument leaf gets (Python floats stay weak, as in NumPy)."""
    if type(leaf) is np.ndarray and dtypes.is_supported(leaf.dtype):   # (the common case, first: every call asks)
        return ShapedArray(leaf.shape, dtypes.canonicalize_dtype(leaf.dtype))
    if isinstance(leaf, ShapedArray):
        return leaf
    if isinstance(leaf, (ShapeDtype, Array)):
        return ShapedArray(leaf.shape, dtypes.canonicalize_dtype(leaf.dtype))
    if hasattr(leaf, "aval") and isinstance(leaf.aval, ShapedArray):   # a staged value
        return leaf.aval
    if unsupported_leaf_reason(leaf) is not None:   # named by what it is: its path is not known here
        raise unsupported_argument_error([(leaf, f"({describe_value(leaf)})")])
    if isinstance(leaf, (bool, int, float, complex)) and not isinstance(leaf, np.generic):
        dtype = dtypes.dtype_of_python_scalar(leaf)
        if dtypes.is_integer(dtype) and not np.iinfo(dtype).min <= leaf <= np.iinfo(dtype).max:
            raise StagingError(f"argument {leaf} is a Python int staged as {dtype}, which cannot hold it",
                               "pass it as a float, or keep it static (out of dynamic_argnums)")
        return ShapedArray((), dtype, weak_type=True)
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
            except StagingError as error:
                raise StagingError(f"argument spec {tok!r}: {error.what}", error.help) from None
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
    node = None if value is None else node_children(value)
    if node is not None:   # a namedtuple, dataclass or registered class: its leaves, described
        # (its repr may show data, or an address that differs from run to run)
        name, children, aux = node
        fields = getattr(value, "_fields", None) or (aux if dataclasses.is_dataclass(value) else None)
        if fields is not None:
            return f"{name}({', '.join(f'{k}={describe_arg(c)}' for k, c in zip(fields, children))})"
        shown = [describe_arg(c) for c in children] + ([] if aux is None else [f"aux={aux!r}"])
        return f"{name}({', '.join(shown)})"
    return repr(value)


def describe_value(value) -> str:
    """An argument leaf as errors show it when its name is not known: `float64[2,2] matrix`."""
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None or shape is None:
        return type(value).__name__
    return f"{dtype}[{','.join(map(str, shape))}] {type(value).__name__}"
