"""Every touch of jaxlib's internals, in one module: a jaxlib upgrade is a one-file change.

jaxlib's Python surface is not a stable API (pinned to 0.10.x in pyproject). jax normally
installs hooks on jaxlib's sharding classes that jaxlib's C++ side calls; s2s installs the
few it needs itself, so nothing here depends on jax being importable.
"""
from __future__ import annotations

import operator
import os
import re
import threading

import numpy as np

_lock = threading.Lock()
_client = None
_num_cpu_devices: int | None = None   # set_num_cpu_devices(); else S2S_NUM_CPU_DEVICES, else 1


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


def _install_sharding_hooks(xla_client) -> None:
    """The attributes jaxlib's C++ side reads from a sharding (jax would install them)."""
    sharding = xla_client.SingleDeviceSharding
    if getattr(sharding, "_s2s_hooks", False):
        return
    if not hasattr(sharding, "_to_xla_hlo_sharding"):
        sharding._to_xla_hlo_sharding = lambda self, ndim: xla_client.HloSharding.replicate()
    for name, value in (("is_fully_replicated", True), ("is_fully_addressable", True),
                        ("memory_kind", None)):
        if not hasattr(sharding, name):
            setattr(sharding, name, property(lambda self, value=value: value))
    if not hasattr(sharding, "_device_assignment"):
        sharding._device_assignment = property(lambda self: tuple(self.device_set))
    sharding._s2s_hooks = True


def _register_lapack_targets(xla_client) -> None:
    """LAPACK's routines as XLA custom-call targets (`lapack_dgetrf_ffi`, ...): jaxlib ships
    them in jaxlib.cpu._lapack; jax would register them, so s2s does it itself."""
    from jaxlib.cpu import _lapack
    _lapack.initialize()
    for name, capsule in _lapack.registrations().items():
        xla_client.register_custom_call_target(name, capsule, platform="cpu",
                                               api_version=int(name.endswith("_ffi")))


def set_num_cpu_devices(count: int) -> None:
    """How many CPU devices the client gets; only before its first use (it is made once)."""
    global _num_cpu_devices
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"the number of CPU devices must be a positive int, not {count!r}")
    with _lock:
        if _client is not None and count != len(_client.devices()):
            raise RuntimeError(
                f"the XLA client already exists with {len(_client.devices())} CPU device(s); set the "
                "number of devices before the first jit call or device query (or set "
                "S2S_NUM_CPU_DEVICES in the environment)")
        _num_cpu_devices = count


def client():
    """The process's CPU client, made once (see `set_num_cpu_devices`)."""
    global _client
    if _client is not None:
        return _client
    with _lock:
        if _client is None:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            from jaxlib import xla_client
            _install_sharding_hooks(xla_client)
            _register_lapack_targets(xla_client)
            count = _num_cpu_devices or int(os.environ.get("S2S_NUM_CPU_DEVICES", "1"))
            _client = xla_client.make_cpu_client(num_devices=count) if count > 1 \
                else xla_client.make_cpu_client()
        return _client


def devices() -> list:
    return list(client().devices())


class DonatedBufferError(RuntimeError):
    """An Array was donated to a computation and its memory now belongs to the results."""


class Array:
    """A result of an XLA computation, living on a device.

    NumPy reads it (`np.asarray(a)` copies it to the host once and remembers the copy);
    arithmetic, indexing and every ndarray method fall back to that NumPy value. Passed to
    a jitted function it is used where it lives, without a round trip through the host.
    Once donated (`jit(..., donate_argnums=...)`) every use raises DonatedBufferError.
    """

    __slots__ = ("_buffer", "_shape", "_dtype", "_device", "_value", "_donated_as", "__weakref__")
    __array_priority__ = 100

    def __init__(self, buffer, shape: tuple, dtype: np.dtype, device):
        # Shape and dtype are ours to keep: jaxlib's arrays only know them when jax is loaded.
        self._buffer = buffer
        self._shape = shape
        self._dtype = dtype
        self._device = device
        self._value = None
        self._donated_as = None

    def _live_buffer(self):
        if self._donated_as is not None:
            raise DonatedBufferError(
                f"this array was donated as {self._donated_as} and its buffer now belongs to that "
                "call's results; use the results, or do not donate this argument")
        return self._buffer

    def _numpy(self) -> np.ndarray:
        if self._value is None:   # (donation clears it, so a donated array fails here)
            value = np.asarray(self._live_buffer())
            value.flags.writeable = False
            self._value = value
        return self._value

    @property
    def shape(self) -> tuple:
        self._live_buffer()
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        self._live_buffer()
        return self._dtype

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

    def block_until_ready(self) -> "Array":
        self._live_buffer().block_until_ready()
        return self

    def is_donated(self) -> bool:
        return self._donated_as is not None

    def __array__(self, dtype=None, copy=None):
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

    def __getattr__(self, name):
        # ndarray methods and attributes (sum, reshape, T, astype, tolist, ...), on the NumPy
        # value. Other names fail without reading it: pytree code probes for `_fields` and
        # the like, and a probe must not copy the array to the host.
        if name.startswith("__") or not hasattr(np.ndarray, name):
            raise AttributeError(f"'Array' object has no attribute {name!r}")
        return getattr(self._numpy(), name)

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


def _placement(device):
    """The device list and compile options that put a one-device computation on `device`."""
    from jaxlib import xla_client
    options = xla_client.CompileOptions()
    options.executable_build_options.device_assignment = xla_client.DeviceAssignment.create(
        np.array([[device.id]]))
    return xla_client.DeviceList((device,)), options


class Executable:
    """A compiled StableHLO module on one device.

    `execute` takes NumPy arrays, Python scalars and Arrays and returns Arrays (nothing is
    copied back to the host); calling it returns NumPy arrays.
    """

    def __init__(self, mlir_text: str, in_dtypes, device=None):
        from jaxlib import version as jaxlib_version
        from . import disk_cache
        device = device or devices()[0]
        cl = client()
        device_list, options = _placement(device)
        executable, cache_hit = disk_cache.get_or_compile(
            (mlir_text, jaxlib_version.__version__, cl.platform, "default-options",
             f"{len(cl.devices())} devices, on {device.id}"),
            lambda: cl.compile_and_load(mlir_text, device_list, options),
            cl.serialize_executable,
            lambda b: cl.deserialize_executable(b, device_list, options))
        self._setup(executable, in_dtypes, device, mlir_text, cache_hit)

    def _setup(self, executable, in_dtypes, device, text, cache_hit: bool) -> None:
        from jaxlib import xla_client
        self._xla_client = xla_client
        self._exe = executable
        self.in_dtypes = [np.dtype(d) for d in in_dtypes]
        self.device = device
        self.text = text
        self.cache_hit = cache_hit
        self._sharding = xla_client.SingleDeviceSharding(device)
        self._avals: dict[tuple, _Aval] = {}   # (shape, dtype) -> what device_put asks for
        self.out_avals = _output_avals(self.optimized_hlo_text())

    @classmethod
    def from_serialized(cls, data: bytes, in_dtypes, device=None) -> "Executable":
        """An executable loaded from `serialize()`'s bytes (same jaxlib version only)."""
        device = device or devices()[0]
        self = cls.__new__(cls)
        executable = client().deserialize_executable(bytes(data), *_placement(device))
        self._setup(executable, in_dtypes, device, None, False)
        return self

    def serialize(self) -> bytes:
        """The compiled executable as bytes, for `from_serialized` (never pickled)."""
        return client().serialize_executable(self._exe)

    def _put(self, value, dtype: np.dtype):
        """A device buffer of `value` on this executable's device, as `dtype`."""
        if type(value) is np.ndarray and value.dtype == dtype:
            array = value
        elif isinstance(value, Array):
            buffer = value._live_buffer()
            if value._dtype == dtype and value._device == self.device:
                return buffer
            array = np.asarray(value._numpy(), dtype)
        elif getattr(value, "dtype", None) is not None and value.dtype.kind == "V" and value.dtype.itemsize == 0:
            array = np.zeros(np.shape(value), dtype)   # a tangent of ints (float0): no data
        else:
            array = np.asarray(value, dtype)
        aval = self._avals.get((array.shape, dtype))
        if aval is None:
            aval = self._avals[array.shape, dtype] = _Aval(array.shape, dtype)
        return self._xla_client.batched_device_put(aval, self._sharding, [array], [self.device], True,
                                                   enable_x64=True)

    def execute(self, args, donated: dict[int, str] | None = None) -> list[Array]:
        """Runs on `args` (one per parameter). `donated` maps the positions of donated
        parameters to how errors name them: an Array passed there is invalid afterwards."""
        buffers = [self._put(value, dtype) for value, dtype in zip(args, self.in_dtypes)]
        if donated:
            # `f(donate(a), a)`: the other uses of a donated buffer read a copy of it.
            given = {id(buffers[p]) for p in donated}
            for position, buffer in enumerate(buffers):
                if position not in donated and id(buffer) in given:
                    buffers[position] = self._put(args[position]._numpy(), self.in_dtypes[position])
        results = self._exe.execute_sharded(buffers)
        outs = [Array(per_device[0], shape, dtype, self.device) for per_device, (shape, dtype)
                in zip(results.disassemble_into_single_device_arrays(), self.out_avals)]
        if donated:
            for position, label in donated.items():
                value = args[position]
                if isinstance(value, Array):
                    if not value._buffer.is_deleted():   # copied to this device, not consumed
                        value._buffer.delete()
                    value._donated_as = label
                    value._value = None
        return outs

    def __call__(self, *args) -> list[np.ndarray]:
        return [np.asarray(out._buffer) for out in self.execute(args)]

    def optimized_hlo_text(self) -> str:
        return self._exe.hlo_modules()[0].to_string()

    def memory_analysis(self):
        """XLA's compiled memory statistics (use temp_size_in_bytes on CPU)."""
        return self._exe.get_compiled_memory_stats()

    def cost_analysis(self):
        return self._exe.cost_analysis()


_HLO_DTYPES = {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
               "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
               "f16": np.float16, "f32": np.float32, "f64": np.float64, "c64": np.complex64,
               "c128": np.complex128}


def _output_avals(optimized_hlo: str) -> list[tuple[tuple, np.dtype]]:
    """(shape, dtype) of each result, read from the HLO's entry_computation_layout
    (`{(f32[4]{0})->(f32[4]{0}, f64[])}`): jaxlib gives result arrays no shape of their own."""
    header = optimized_hlo.split("\n", 1)[0]
    layout = header[header.index("entry_computation_layout={"):]
    results = layout[layout.index(")->") + 3:]
    return [(tuple(int(d) for d in dims.split(",") if d), np.dtype(_HLO_DTYPES[kind]))
            for kind, dims in re.findall(r"\b(pred|[suf]\d+|c\d+)\[([\d,]*)\]", results)]


def hlo_text(mlir_text: str) -> str:
    """The unoptimized XLA HLO of a StableHLO module."""
    from jaxlib import _jax
    computation = _jax.mlir.mlir_module_to_xla_computation(mlir_text, use_tuple_args=False,
                                                           return_tuple=False)
    return computation.as_hlo_text()


def process_index() -> int:
    return client().process_index()
