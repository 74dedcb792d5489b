"""Python operators and ndarray methods on staged values (`Tracer`).

Installing them here, rather than in `s2s/staging.py`, keeps the IR free of the NumPy
surface. Each operator calls the weak-type-preserving form of its function in
`s2s.numpy_api.math` (a weak staged value stands for a Python scalar, and
`python_float * 2` is still a Python float). Methods look their NumPy function up in the
dispatch table when called (`x.sum(...)` is `np.sum(x, ...)`), so the modules providing
them can be imported in any order, and a method whose function has no s2s rule yet says so.

What NumPy does in place is refused with a compiler error that says what to write
instead: `x[i] = v`, `x.sort()`, `out=` arguments. Augmented assignment (`x += 1`) has no
`__iadd__`, so Python rebinds the name to `x + 1`; staged values are immutable, so no
alias can tell the difference.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import Literal
from s2s.errors import ShapeError, UnsupportedFunctionError, UnsupportedSyntaxError
from s2s.numpy_api import creation, indexing, linalg, math
from s2s.numpy_api._base import NUMPY_IMPLS, asarray, operand
from s2s.primitives import elementwise as ew
from s2s.staging import Tracer

# Operands an operator accepts; anything else returns NotImplemented so that Python can
# try the other operand (and `x == None` is False, as for any unrelated object).
_OPERAND_TYPES = (Tracer, np.ndarray, np.generic, bool, int, float, complex, list, tuple, Literal)


def _accepts(other) -> bool:
    return isinstance(other, _OPERAND_TYPES)


def _binary(fn, reflected: bool = False):
    op = fn.operator if hasattr(fn, "operator") else fn

    if reflected:
        def method(self, other):
            if not _accepts(other):
                return NotImplemented
            return op(other, self)
    else:
        def method(self, other):
            if not _accepts(other):
                return NotImplemented
            return op(self, other)
    return method


def _numpy(name: str):
    """The s2s rule for `np.<name>`, looked up when called."""
    np_fn = getattr(np, name)
    impl = NUMPY_IMPLS.get(np_fn)
    if impl is None:
        raise UnsupportedFunctionError(f"np.{name} (and the ndarray method that calls it) "
                                       f"is not supported by s2s yet")
    return impl


def _matmul(a, b):
    return linalg.matmul(a, b)


def _divmod(self, other):
    if not _accepts(other):
        return NotImplemented
    return math.divmod_(self, other, weak_ok=True)


def _rdivmod(self, other):
    if not _accepts(other):
        return NotImplemented
    return math.divmod_(other, self, weak_ok=True)


def _pow(self, other, modulo=None):
    if modulo is not None:
        raise UnsupportedFunctionError("pow(x, y, mod) with three arguments is not supported")
    if not _accepts(other):
        return NotImplemented
    return math.power.operator(self, other)


def _rpow(self, other, modulo=None):
    if not _accepts(other):
        return NotImplemented
    return math.power.operator(other, self)


def _getitem(self, index):
    return indexing.getitem(self, index)


def _setitem(self, index, value):
    raise UnsupportedSyntaxError(
        "assigning into an array (x[...] = value) is an in-place update, which s2s does not "
        "support yet",
        "build the new array functionally instead, e.g. x = np.where(mask, value, x) for a "
        "masked update, or x = np.concatenate([x[:i], value, x[i + 1:]]) to replace a slice")


# ---------------------------------------------------------------------------------------
# Properties and methods


def _astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
    dt = dtypes.canonicalize_dtype(dtype)
    if self.dtype == dt and not self.weak_type:
        return self
    return ew.convert_element_type.bind(self, new_dtype=dt, weak_type=False)


def _scalar_type_cast(scalar_type):
    def cast(x):
        """NumPy's scalar type called on a staged array casts it, as `x.astype(...)`
        (`np.int64(x)` of floats truncates toward zero); of Python numbers it runs as
        NumPy's own (`call_user` does that before looking here)."""
        x = asarray(x)
        return _astype(x if isinstance(x, Tracer) else operand(x), scalar_type)
    return cast


# np.float32, np.int64 ... (longlong and ulonglong, distinct types of int64's size, too).
for _scalar_type in {np.dtype(code).type for code in "?bhilqBHILQefdFD"}:
    NUMPY_IMPLS[_scalar_type] = _scalar_type_cast(_scalar_type)


def _shape_args(args, what: str):
    """`x.reshape(2, 3)` and `x.reshape((2, 3))` both mean the shape (2, 3)."""
    if len(args) == 1 and (isinstance(args[0], (tuple, list)) or args[0] is None):
        return args[0]
    return tuple(args)


def _reshape(self, *shape, order="C", copy=None):
    if order not in ("C", None):
        raise UnsupportedFunctionError(f"reshape with order={order!r} is not supported",
                                       "use the default order='C'")
    if not shape:
        raise TypeError("reshape() needs a shape")
    return _numpy("reshape")(self, _shape_args(shape, "shape"))


def _transpose(self, *axes):
    axes = _shape_args(axes, "axes") if axes else None
    return _numpy("transpose")(self, axes)


def _flatten(self, order="C"):
    if order != "C":
        raise UnsupportedFunctionError(f"flatten with order={order!r} is not supported")
    return _numpy("ravel")(self)


def _ravel(self, order="C"):
    if order != "C":
        raise UnsupportedFunctionError(f"ravel with order={order!r} is not supported")
    return _numpy("ravel")(self)


def _mT(self):
    if self.ndim < 2:
        raise ShapeError(f"matrix transpose with ndim < 2 is undefined (shape {self.shape})")
    return _numpy("swapaxes")(self, -1, -2)


def _sort(self, *args, **kwargs):
    raise UnsupportedSyntaxError(
        "x.sort() sorts in place, which s2s does not support",
        "write `x = np.sort(x)` (or np.sort(x, axis=...)) to get a sorted copy")


def _dot(self, b, out=None):
    if out is not None:
        raise UnsupportedSyntaxError("x.dot(b, out=...) is an in-place update",
                                     "assign the result instead: y = x.dot(b)")
    return _numpy("dot")(self, b)


def _delegate(name: str, np_name: str | None = None):
    """`x.<name>(*args, **kwargs)` is `np.<np_name>(x, *args, **kwargs)`."""
    np_name = np_name or name

    def method(self, *args, **kwargs):
        return _numpy(np_name)(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"x.{name}(...) is np.{np_name}(x, ...)."
    return method


def _nonzero(self):
    raise UnsupportedFunctionError(
        "x.nonzero() returns the indices of nonzero elements; their number depends on the "
        "data, so the result has no static shape",
        "use a mask instead, e.g. np.where(x != 0, values, 0)")


_DELEGATED = [
    ("sum", None), ("prod", None), ("mean", None), ("var", None), ("std", None),
    ("max", None), ("min", None), ("argmax", None), ("argmin", None), ("all", None),
    ("any", None), ("cumsum", None), ("cumprod", None), ("ptp", None),
    ("squeeze", None), ("swapaxes", None), ("repeat", None), ("take", None),
    ("diagonal", None), ("trace", None), ("argsort", None), ("clip", None),
    ("round", None), ("conj", None), ("conjugate", None),
]

_OPERATORS = {
    "__add__": (math.add, False), "__radd__": (math.add, True),
    "__sub__": (math.subtract, False), "__rsub__": (math.subtract, True),
    "__mul__": (math.multiply, False), "__rmul__": (math.multiply, True),
    "__truediv__": (math.divide, False), "__rtruediv__": (math.divide, True),
    "__floordiv__": (math.floor_divide, False), "__rfloordiv__": (math.floor_divide, True),
    "__mod__": (math.remainder, False), "__rmod__": (math.remainder, True),
    "__and__": (math.bitwise_and, False), "__rand__": (math.bitwise_and, True),
    "__or__": (math.bitwise_or, False), "__ror__": (math.bitwise_or, True),
    "__xor__": (math.bitwise_xor, False), "__rxor__": (math.bitwise_xor, True),
    "__matmul__": (_matmul, False), "__rmatmul__": (_matmul, True),
    "__eq__": (math.equal, False), "__ne__": (math.not_equal, False),
    "__lt__": (math.less, False), "__le__": (math.less_equal, False),
    "__gt__": (math.greater, False), "__ge__": (math.greater_equal, False),
}


def install(cls=Tracer) -> None:
    """Puts the operators, methods and properties on `cls`."""
    for name, (fn, reflected) in _OPERATORS.items():
        setattr(cls, name, _binary(fn, reflected))
    cls.__pow__ = _pow
    cls.__rpow__ = _rpow
    cls.__divmod__ = _divmod
    cls.__rdivmod__ = _rdivmod
    cls.__neg__ = lambda self: math.negative.operator(self)
    cls.__pos__ = lambda self: math.positive.operator(self)
    cls.__abs__ = lambda self: math.absolute.operator(self)
    cls.__invert__ = lambda self: math.invert.operator(self)
    cls.__round__ = lambda self, ndigits=None: math.round(self, ndigits or 0)
    cls.__getitem__ = _getitem
    cls.__setitem__ = _setitem
    # `==` is elementwise, but staged values stay hashable by identity (dict keys, sets).
    cls.__hash__ = object.__hash__

    cls.T = property(lambda self: _numpy("transpose")(self))
    cls.mT = property(_mT)
    cls.real = property(lambda self: math.real(self))
    cls.imag = property(lambda self: math.imag(self))
    cls.itemsize = property(lambda self: self.dtype.itemsize)
    cls.nbytes = property(lambda self: self.size * self.dtype.itemsize)
    cls.astype = _astype
    cls.reshape = _reshape
    cls.transpose = _transpose
    cls.flatten = _flatten
    cls.ravel = _ravel
    cls.dot = _dot
    cls.copy = lambda self, order="C": creation.copy(self)
    cls.sort = _sort
    cls.nonzero = _nonzero
    for name, np_name in _DELEGATED:
        setattr(cls, name, _delegate(name, np_name))


install()
