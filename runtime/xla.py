"""Every touch of jaxlib's internals, in one module: a jaxlib upgrade is a one-file change.

jaxlib's Python surface is not a stable API (pinned to 0.10.x in pyproject). jax normally
installs hooks on jaxlib's sharding classes that jaxlib's C++ side calls; s2s installs the
few it needs itself, so nothing here depends on jax being importable.
"""
from __future__ import annotations

import os
import threading

import numpy as np

_lock = threading.Lock()
_client = None


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


def client():
    """The process's CPU client (devices: S2S_NUM_CPU_DEVICES, default 1), made once."""
    global _client
    with _lock:
        if _client is None:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            from jaxlib import xla_client
            _install_sharding_hooks(xla_client)
            count = int(os.environ.get("S2S_NUM_CPU_DEVICES", "1"))
            _client = xla_client.make_cpu_client(num_devices=count) if count > 1 \
                else xla_client.make_cpu_client()
        return _client


def devices() -> list:
    return list(client().devices())


class Executable:
    """A compiled StableHLO module on one device: call it with NumPy arrays."""

    def __init__(self, mlir_text: str, in_dtypes, device=None):
        from jaxlib import xla_client
        self._xla_client = xla_client
        self.device = device or devices()[0]
        self.in_dtypes = [np.dtype(d) for d in in_dtypes]
        self.text = mlir_text
        device_list = xla_client.DeviceList((self.device,))
        from . import disk_cache
        from jaxlib import version as jaxlib_version
        cl = client()
        self._exe, self.cache_hit = disk_cache.get_or_compile(
            (mlir_text, jaxlib_version.__version__, cl.platform, "default-options", str(len(device_list))),
            lambda: cl.compile_and_load(mlir_text, device_list, xla_client.CompileOptions()),
            cl.serialize_executable,
            lambda b: cl.deserialize_executable(b, device_list, xla_client.CompileOptions()))
        self._sharding = xla_client.SingleDeviceSharding(self.device)

    @classmethod
    def from_serialized(cls, data: bytes, in_dtypes, device=None) -> "Executable":
        """An executable loaded from `serialize()`'s bytes (same jaxlib version only)."""
        from jaxlib import xla_client
        self = cls.__new__(cls)
        self._xla_client = xla_client
        self.device = device or devices()[0]
        self.in_dtypes = [np.dtype(d) for d in in_dtypes]
        self.text = None
        self.cache_hit = False
        self._exe = client().deserialize_executable(
            bytes(data), xla_client.DeviceList((self.device,)), xla_client.CompileOptions())
        self._sharding = xla_client.SingleDeviceSharding(self.device)
        return self

    def serialize(self) -> bytes:
        """The compiled executable as bytes, for `from_serialized` (never pickled)."""
        return client().serialize_executable(self._exe)

    def __call__(self, *args) -> list[np.ndarray]:
        xc = self._xla_client
        buffers = []
        for value, dtype in zip(args, self.in_dtypes):
            array = np.asarray(value, dtype=dtype)
            buffers.append(xc.batched_device_put(_Aval(array.shape, dtype), self._sharding, [array],
                                                 [self.device], True, enable_x64=True))
        results = self._exe.execute_sharded(buffers)
        return [np.asarray(per_device[0]) for per_device in results.disassemble_into_single_device_arrays()]

    def optimized_hlo_text(self) -> str:
        return self._exe.hlo_modules()[0].to_string()

    def memory_analysis(self):
        """XLA's compiled memory statistics (use temp_size_in_bytes on CPU)."""
        return self._exe.get_compiled_memory_stats()

    def cost_analysis(self):
        return self._exe.cost_analysis()


def hlo_text(mlir_text: str) -> str:
    """The unoptimized XLA HLO of a StableHLO module."""
    from jaxlib import _jax
    computation = _jax.mlir.mlir_module_to_xla_computation(mlir_text, use_tuple_args=False,
                                                           return_tuple=False)
    return computation.as_hlo_text()


def process_index() -> int:
    return client().process_index()
