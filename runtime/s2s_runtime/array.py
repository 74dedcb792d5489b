"""`s2s.Array`: a result of an XLA computation, living on a device, read as NumPy.

Its storage (`ResultBase`) is `s2s_runtime.fastcall`'s, what jaxlib's dispatcher builds
each result with; everything a user does with an Array is here.
"""
from __future__ import annotations

import operator

import numpy as np

from s2s_runtime import quiet_logs  # noqa: F401  (before jaxlib loads)
from s2s_runtime.fastcall import ResultBase
from jaxlib import xla_client


class _Aval:
    """The minimal abstract value jaxlib's device_put asks for."""

    __slots__ = ("shape", "dtype", "weak_type", "ndim")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = False
        self.ndim = len(self.shape)

    def str_short(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


class DonatedBufferError(RuntimeError):
    """An Array was donated to a computation and its memory now belongs to the results."""


class Array(ResultBase):
    """A result of an XLA computation, living on a device.

    NumPy reads it through the device buffer's memory (`np.asarray(a)`: read-only; on the
    CPU, where s2s runs, no copy), or through `__array__` where s2s_runtime.fastcall runs
    in Python, which copies it to the host once and remembers the copy. Arithmetic,
    indexing and every ndarray method fall back to that NumPy value. Passed to a jitted
    function it is used where it lives, without a round trip through the host.
    Once donated (`jit(..., donate_argnums=...)`) every use raises DonatedBufferError.
    """

    __slots__ = ()
    __array_priority__ = 100

    def __init__(self, buffer, shape: tuple, dtype: np.dtype, device):
        # Shape and dtype are ours to keep: jaxlib's arrays only know them when jax is
        # loaded. The dispatcher's results (`_from_dispatch`) are built without them, their
        # buffers' avals being ours.
        self._buffer = buffer
        self._shape = shape
        self._dtype = dtype
        self._device = device

    def __copy__(self) -> "Array":
        """A copy owns its data, as a copy of a jax Array does: donating the original
        later leaves the copy readable (a copy sharing the buffer would lose it with the
        donation). A donated Array has nothing to copy, and raises DonatedBufferError."""
        return Array(device_copy(self._live_buffer(), self._device), self._shape, self._dtype, self._device)

    def __deepcopy__(self, memo) -> "Array":
        return self.__copy__()

    def __reduce__(self):
        """Pickled as its NumPy value, and unpickled as that ndarray: a pickle then loads
        where NumPy alone is installed, needing no device (`copy.deepcopy` gives an Array)."""
        return self._numpy().__reduce__()

    def _live_buffer(self):
        if self._donated_as is not None:
            raise DonatedBufferError(
                f"this array was donated as {self._donated_as} and its buffer now belongs to that "
                "call's results; use the results, or do not donate this argument")
        return self._buffer

    def _numpy(self) -> np.ndarray:
        value = self._value
        if value is None:   # (donation clears it, so a donated array fails here)
            value = np.asarray(self._buffer if self._donated_as is None else self._live_buffer())
            if value.flags.writeable:   # (jaxlib exports its host buffers read-only already)
                value.flags.writeable = False
            self._value = value
        return value

    @property
    def shape(self) -> tuple:
        buffer = self._live_buffer()
        shape = self._shape
        return buffer.aval.shape if shape is None else shape

    @property
    def dtype(self) -> np.dtype:
        buffer = self._live_buffer()
        dtype = self._dtype
        return buffer.aval.dtype if dtype is None else dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def device(self):
        self._live_buffer()
        return self._device

    def is_donated(self) -> bool:
        return self._donated_as is not None

    def _donate(self, label: str) -> None:
        """Given to a call as `label`: its memory is the call's now (or was copied there)."""
        if not self._buffer.is_deleted():   # copied to the device, not consumed
            self._buffer.delete()
        self._donated_as = label
        self._value = None

    def __array__(self, dtype=None, copy=None):
        value = self._value
        if value is None:
            value = self._numpy()
        if dtype is not None and np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        return value.copy() if copy else value

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [np.asarray(x) if isinstance(x, Array) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(x) if isinstance(x, Array) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*_to_numpy(args), **_to_numpy(kwargs))

    def __repr__(self) -> str:
        if self._donated_as is not None:
            return f"Array(<donated as {self._donated_as}>)"
        return "Array(" + np.array2string(self._numpy(), separator=", ", prefix="Array(") + \
            f", dtype={self.dtype.name})"

    def __len__(self) -> int:
        return len(self._numpy())

    def __iter__(self):
        return iter(self._numpy())

    def __getitem__(self, index):
        return self._numpy()[index]

    def __bool__(self) -> bool:
        return bool(self._numpy())

    def __float__(self) -> float:
        return float(self._numpy())

    def __int__(self) -> int:
        return int(self._numpy())

    def __complex__(self) -> complex:
        return complex(self._numpy())

    def __index__(self) -> int:
        return operator.index(self._numpy())

    __hash__ = None


def device_copy(buffer, device):
    """A new buffer on `device` (where `buffer` is) holding `buffer`'s values in memory of
    its own: the NumPy copy read from it, which the device keeps without copying it again.
    (Typed by that copy: a buffer jaxlib split from a pmap's result has no aval unless
    jax is loaded.)"""
    value = np.array(buffer)
    return xla_client.batched_device_put(_Aval(value.shape, value.dtype), buffer._sharding, [value], [device],
                                         True, enable_x64=True)


def _read_through(name: str) -> property:
    """Array's `name`, read from its NumPy value (ndarray's own attribute or bound method)."""
    return property(lambda self: getattr(self._numpy(), name), doc=f"ndarray.{name}, on the NumPy value")


# ndarray's methods and attributes (sum, reshape, T, astype, tolist, ...) on the NumPy value,
# as class attributes rather than a `__getattr__`: a name Array lacks then fails in C without
# running Python, and NumPy probes every argument for `__array_struct__` and
# `__array_interface__` before it calls `__array__` (two Python-level AttributeErrors a read,
# with a `__getattr__`). Pytree code probing for `_fields` and the like reads nothing either.
for _name in dir(np.ndarray):
    if not _name.startswith("__") and not hasattr(Array, _name):
        setattr(Array, _name, _read_through(_name))


def _to_numpy(value):
    """`value` with every Array in it (through lists, tuples and dicts) read into NumPy."""
    if isinstance(value, Array):
        return value._numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value


def _operator(ufunc, reflected: bool):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.true_divide), ("floordiv", np.floor_divide), ("mod", np.remainder),
                      ("pow", np.power), ("matmul", np.matmul), ("and", np.bitwise_and),
                      ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                      ("rshift", np.right_shift), ("divmod", np.divmod)]:
    setattr(Array, f"__{_name}__", _operator(_ufunc, False))
    setattr(Array, f"__r{_name}__", _operator(_ufunc, True))
for _name, _ufunc in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                      ("gt", np.greater), ("ge", np.greater_equal)]:
    setattr(Array, f"__{_name}__", _operator(_ufunc, False))
for _name, _ufunc in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute),
                      ("invert", np.invert)]:
    setattr(Array, f"__{_name}__", lambda self, _ufunc=_ufunc: _ufunc(self))
