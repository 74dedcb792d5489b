"""Shared machinery of the NumPy surface: the dispatch table and dtype promotion.

`@implements(np.tanh)` maps a NumPy function object to the s2s function that stages it;
the front end looks calls up here, so `np.tanh`, `numpy.tanh` and `from numpy import tanh`
all reach the same rule. Every s2s function here also works eagerly on NumPy values.

Promotion happens here, visibly: operands are converted to their common dtype with
`convert_element_type` before an elementwise primitive sees them, and Python scalars
become weak-typed literals of that dtype, exactly as NumPy 2 (NEP 50) types them.
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray, aval_of_value
from s2s.errors import ShapeError
from s2s.primitives import elementwise as ew
from s2s.primitives import ops
from s2s.staging import Tracer
from s2s_runtime.array import Array


class DispatchTable(dict):
    """Function object -> s2s's implementation, filled lazily for optional libraries.

    A library s2s does not depend on (SciPy) registers a filler per module with
    `when_imported`; it runs the first time the table is read while that module is
    imported. A user's function calling `scipy.special.expit` has imported scipy.special by
    then, and importing s2s never imports it (scipy.stats alone is over half a second).
    Functions made at run time (the methods of a frozen distribution, `norm(0, 2).pdf`)
    cannot be keys: a `resolver` added to `resolvers` maps them when looked up."""

    def __init__(self):
        super().__init__()
        self.fillers: dict[str, list[Callable[[], None]]] = {}
        self.resolvers: list[Callable[[object], Callable | None]] = []

    def when_imported(self, package: str, fill: Callable[[], None]) -> None:
        self.fillers.setdefault(package, []).append(fill)

    def _fill_imported(self) -> None:
        for package in [p for p in self.fillers if p in sys.modules]:
            for fill in self.fillers.pop(package):
                fill()

    def _resolve(self, key):
        for resolver in self.resolvers:
            found = resolver(key)
            if found is not None:
                return found
        return None

    def get(self, key, default=None):
        found = dict.get(self, key)   # (a filler adds SciPy's functions: never a key found here)
        if found is not None:
            return found
        if self.fillers:
            self._fill_imported()
            found = dict.get(self, key)
        if found is None and self.resolvers:
            found = self._resolve(key)
        return default if found is None else found

    def __getitem__(self, key):
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def __iter__(self):
        if self.fillers:
            self._fill_imported()
        return super().__iter__()


NUMPY_IMPLS: DispatchTable = DispatchTable()


def implements(*numpy_functions):
    """Registers the decorated function as s2s's version of each NumPy function given."""
    def register(fn):
        for np_fn in numpy_functions:
            NUMPY_IMPLS[np_fn] = fn
        return fn
    return register


PY_SCALARS = (bool, int, float, complex)
# Exactly these types (not np.float64, a float subclass, which is strong): checked first
# where staging looks at every operand.
_EXACT_PY_SCALARS = frozenset(PY_SCALARS)


def is_python_scalar(x) -> bool:
    return isinstance(x, PY_SCALARS) and not isinstance(x, np.generic)


def aval(x) -> ShapedArray:
    if isinstance(x, (Tracer, Literal)):
        return x.aval
    if isinstance(x, (list, tuple)):
        return aval_of_value(np.asarray(x))
    return aval_of_value(x)


def shape(x) -> tuple[int, ...]:
    return aval(x).shape


def dtype(x) -> np.dtype:
    return aval(x).dtype


def ndim(x) -> int:
    return len(shape(x))


def asarray(x):
    """Accepts a Tracer, an array, a scalar or a (nested) list of them; returns an operand."""
    if type(x) in _EXACT_PY_SCALARS or isinstance(x, (Tracer, np.ndarray, np.generic, Literal)) \
            or is_python_scalar(x):
        return x
    if isinstance(x, (list, tuple)):
        if has_tracer(x):
            return stack_operands([operand(asarray(e)) for e in x], 0)
        return np.asarray(x)
    if isinstance(x, Array):   # a jitted call's result read while staging: a constant, as an ndarray is
        return np.asarray(x)
    raise TypeError(f"expected an array, got {type(x).__name__}: {x!r}")


def operand(x):
    """An array operand: Python scalars and (nested) lists become NumPy arrays as
    `np.asarray` makes them (strongly typed); staged values pass through."""
    if is_python_scalar(x):
        return np.asarray(x, dtype=dtypes.dtype_of_python_scalar(x))
    return asarray(x)


def shape_str(shape) -> str:
    """A shape as NumPy writes it in messages: `(3,)`, `(2, 3)`."""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def stack_operands(arrays: list, axis: int, dtype=None):
    """np.stack of array operands along a normalized `axis`: each given a new axis there,
    converted to their common dtype (or `dtype`), then joined."""
    first = aval(arrays[0]).shape
    if any(aval(a).shape != first for a in arrays[1:]):
        raise ShapeError("all input arrays must have the same shape, got "
                         + ", ".join(shape_str(aval(a).shape) for a in arrays))
    expanded = with_dtype([ops.expand_dims(a, (axis,)) for a in arrays], dtype)
    return expanded[0] if len(expanded) == 1 else ops.concatenate(expanded, axis)


def has_tracer(x) -> bool:
    """Whether `x` is a staged value or a (nested) list or tuple holding one."""
    if isinstance(x, (list, tuple)):
        return any(has_tracer(e) for e in x)
    return isinstance(x, Tracer)


def _cast_scalar(value, to: np.dtype):
    kind = to.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "f":
        return float(value)
    return complex(value)


def convert(x, to, weak_type: bool = False):
    """`x` as dtype `to`: a staged conversion, or a retyped literal for Python scalars."""
    to = np.dtype(to)
    if is_python_scalar(x):
        return Literal(_cast_scalar(x, to), ShapedArray((), to, weak_type=True))
    if isinstance(x, Literal):
        if x.aval.dtype == to:
            return x
        return Literal(_cast_scalar(x.value, to), ShapedArray((), to, x.aval.weak_type))
    current = aval(x)
    if current.dtype == to and current.weak_type == weak_type:
        return x
    if isinstance(x, np.generic):
        return x.astype(to)
    return ew.convert_element_type.bind(x, new_dtype=to, weak_type=weak_type)


def operand_types(xs) -> tuple[tuple[np.dtype, bool], ...]:
    """The (dtype, weak_type) of each operand: what promotion reads. (Staged values and
    Python scalars, nearly every operand staging meets, are typed without making an aval.)"""
    types = []
    for x in xs:
        if type(x) in _EXACT_PY_SCALARS:
            types.append((dtypes.dtype_of_python_scalar(x), True))
        else:
            a = x.variable.aval if isinstance(x, Tracer) else aval(x)
            types.append((a.dtype, a.weak_type))
    return tuple(types)


def result_dtype(*xs) -> tuple[np.dtype, bool]:
    return dtypes.result_type(*operand_types(xs))


def cast(x, to: np.dtype, weak: bool):
    """`x` as dtype `to`. Python scalars stay weak literals (written bare in emitted code);
    `cast_all` makes one operand strong where the result must be."""
    if is_python_scalar(x):
        return ops.literal(x, to, True)
    if isinstance(x, Literal):
        return ops.literal(x.value, to, x.aval.weak_type)
    a = aval(x)
    if a.dtype == to:
        return x
    return convert(x, to, weak_type=a.weak_type and weak)


def cast_all(xs, to: np.dtype, weak: bool, types=None) -> list:
    """Converts operands to `to`. When `weak` is False, makes sure one operand is strong
    (retagging a literal is free; a weak staged value needs a convert). `types` are the
    operands' `operand_types` where the caller has them."""
    if types is None:
        types = operand_types(xs)
    if weak or not all(weak_type for _, weak_type in types):
        # No operand needs to become strong: the common case, where a Python scalar becomes a
        # weak literal and an operand already of dtype `to` stays as it is, is answered here
        # (a subclass of a Python scalar, an IntEnum say, is made a literal by `cast`).
        return [ops.literal(x, to, True) if type(x) in _EXACT_PY_SCALARS
                else x if dtype == to and type(x) is not Literal and not isinstance(x, PY_SCALARS)
                else cast(x, to, weak)
                for x, (dtype, _) in zip(xs, types)]
    out = [cast(x, to, weak) for x in xs]
    if not weak and out and all(aval(o).weak_type for o in out):
        lits = [i for i, o in enumerate(out) if isinstance(o, Literal)]
        if lits:
            for i in lits:
                out[i] = Literal(out[i].value, out[i].aval.update(weak_type=False))
        else:
            out[0] = convert(out[0], to, weak_type=False)
    return out


def promote(*xs):
    """Converts operands to their NumPy result dtype; returns them as a list."""
    xs = [asarray(x) for x in xs]
    to, weak = result_dtype(*xs)
    return [x if (aval(x).dtype == to and not is_python_scalar(x)) else convert(x, to, weak)
            for x in xs]


def with_dtype(arrays, dtype):
    """`arrays` converted to `dtype`, or promoted to their common dtype when it is None."""
    if dtype is None:
        return promote(*arrays)
    to = dtypes.canonicalize_dtype(dtype)
    return [convert(a, to) for a in arrays]


def float_dtype_for(dt: np.dtype, weak: bool = False) -> np.dtype:
    """The floating dtype NumPy's float-only ufuncs compute in for inputs of dtype `dt`."""
    dt = np.dtype(dt)
    if dtypes.is_inexact(dt):
        return dt
    if weak:
        return dtypes.default_float()
    return dtypes.canonicalize_dtype(np.result_type(dt, np.float16))


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)):
        raise ShapeError(f"{what} must be a static Python int, got {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{what} {axis} is out of bounds for an array of dimension {ndim}")
    return axis % max(ndim, 1)


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """None means every axis; an int or a tuple of ints otherwise (NumPy's `axis=`)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"repeated axis in {tuple(axis)}")
        return axes
    return (normalize_axis(axis, ndim),)
