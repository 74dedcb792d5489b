"""One SPMD program run on several devices, one XLA replica per device.

What `s2s.pmap` runs: the module (`mhlo.num_replicas = n`) is compiled once for the `n`
devices; each argument goes in as ONE jaxlib array spanning them, built from one shard per
device (JAXLIB_NOTES.md, "Several devices"); the results come back one array per device
per output. In a run of several processes (`s2s_runtime.distributed`) the `n` devices are
every process's, each process compiles the same program and gives the shards of its own
devices only (the array spans all `n`; jaxlib asks for the addressable shards alone), and
gets back its own devices' results. jaxlib's per-device arrays are put on a GSPMD sharding
marked replicated: each device's shard has the shape the program sees, which is what a
replica's parameter is. Compiled executables are kept in memory by (module text, devices),
and on disk in the executable cache like jit's, keyed by everything that changes the
compiled code. Like `s2s_runtime.xla`, nothing here depends on jax being importable.
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from s2s_runtime import disk_cache, distributed, quiet_logs  # noqa: F401  (quiet_logs: before jaxlib loads)
from s2s_runtime.xla import Array, _Aval, client, disk_cache_key, install_sharding_hooks
from jaxlib import xla_client

# (text, device ids) -> compiled executable, the most recent last. A pmapped function is
# staged again when the Python values its staging read change (a lambda made in its body
# is new each call): the module it lowers to is then the same text, served from here.
_compiled: collections.OrderedDict = collections.OrderedDict()
_compiled_lock = threading.Lock()
_KEEP = 64


def _install_sharding_hooks() -> None:
    """jaxlib's hooks on a GSPMD sharding, as `xla` installs them on a single device's."""
    install_sharding_hooks(xla_client.GSPMDSharding, lambda self, ndim: self._hlo_sharding,
                           lambda self: tuple(self._devices))


def replica_options(devices: list):
    """The device list and compile options of a program replicated over `devices`."""
    options = xla_client.CompileOptions()
    build = options.executable_build_options
    build.num_replicas = len(devices)
    build.num_partitions = 1
    build.device_assignment = xla_client.DeviceAssignment.create(np.array([[d.id] for d in devices]))
    return xla_client.DeviceList(tuple(devices)), options


def _compile(mlir_text: str, devices: list, device_list, options):
    """(the executable, whether it came from a cache): in memory, then on disk, else compiled."""
    key = (mlir_text, tuple(d.id for d in devices))
    with _compiled_lock:
        exe = _compiled.get(key)
        if exe is not None:
            _compiled.move_to_end(key)
            return exe, True
    cl = client()
    exe, hit = disk_cache.get_or_compile(
        disk_cache_key(mlir_text, devices[0], options, placement=f"replicas on {[d.id for d in devices]}, "
                       f"compiled by process {cl.process_index()}"),
        lambda: cl.compile_and_load(mlir_text, device_list, options), cl.serialize_executable,
        lambda data: cl.deserialize_executable(data, device_list, options))
    with _compiled_lock:
        _compiled[key] = exe
        while len(_compiled) > _KEEP:
            _compiled.popitem(last=False)
    return exe, hit


class ReplicatedExecutable:
    """A StableHLO module with `mhlo.num_replicas = len(replicas)`, compiled for the
    devices `replicas`, of which this process feeds and reads `devices` (all of them in a
    run of one process).

    `execute(shards)` takes, per parameter, one array per device of `devices` (the i-th
    gets `shards[p][i]`) or a ShardedArray, and returns, per result, one device array per
    device of `devices`.
    """

    def __init__(self, mlir_text: str, in_dtypes, replicas: list):
        _install_sharding_hooks()
        self.replicas = list(replicas)
        here = client().process_index()
        self.devices = [d for d in self.replicas if d.process_index == here]
        self.text = mlir_text
        self.in_dtypes = [np.dtype(d) for d in in_dtypes]
        device_list, options = replica_options(self.replicas)
        self._exe, self.cache_hit = _compile(mlir_text, self.replicas, device_list, options)
        self._sharding = xla_client.GSPMDSharding(device_list, xla_client.HloSharding.replicate())
        self._device_shardings = [xla_client.SingleDeviceSharding(d) for d in self.devices]

    def _spanning_array(self, shards, dtype: np.dtype):
        """One jaxlib array over every device, replica i's part `shards[i]`: a ShardedArray
        already on these devices gives its parts as they are (no copy through the host)."""
        if isinstance(shards, ShardedArray) and shards.devices == self.devices and shards.dtype == dtype:
            return xla_client.ArrayImpl(_Aval(shards.part_shape, dtype), self._sharding, shards._live_parts(),
                                        True, True)
        if isinstance(shards, ShardedArray):
            shards = list(np.moveaxis(np.asarray(shards), shards.axis, 0))
        first = np.asarray(shards[0], dtype)
        aval = _Aval(first.shape, dtype)
        parts = []
        for i, (shard, device, sharding) in enumerate(zip(shards, self.devices, self._device_shardings)):
            array = first if i == 0 else np.asarray(shard, dtype)
            if array.shape != first.shape:
                raise ValueError(f"replica {i} was given a shard of shape {array.shape}, "
                                 f"replica 0 one of shape {first.shape}")
            parts.append(xla_client.batched_device_put(aval, sharding, [np.ascontiguousarray(array)],
                                                       [device], True, enable_x64=True))
        return xla_client.ArrayImpl(aval, self._sharding, parts, True, True)

    def execute(self, shards: list) -> list[list]:
        """Runs on `shards`: per parameter, one array per device, or a ShardedArray on these
        devices split along its device axis. Returns, per result, one device array per
        device (jaxlib's; `np.asarray` reads one)."""
        if len(shards) != len(self.in_dtypes):
            raise ValueError(f"the program takes {len(self.in_dtypes)} parameters, got {len(shards)}")
        arrays = [self._spanning_array(parts, dtype) for parts, dtype in zip(shards, self.in_dtypes)]
        with distributed.peer_failures_raised_clearly():
            results = self._exe.execute_sharded(arrays).disassemble_into_single_device_arrays()
        return [list(per_device) for per_device in results]

    def optimized_hlo_text(self) -> str:
        return self._exe.hlo_modules()[0].to_string()


class ShardedArray(Array):
    """A result of a pmap: one part per device, the device axis at `axis` when read.

    NumPy reads it (`np.asarray`: the parts stacked along `axis`, copied to the host once);
    everything else an `s2s.Array` does works on that value. Passed to a pmap over the
    same devices whose in_axes maps that axis, its parts are used where they are, without a
    round trip through the host.
    """

    __slots__ = ("parts", "part_shape", "axis", "devices")

    def __init__(self, parts: list, part_shape: tuple, dtype: np.dtype, axis: int, devices: list):
        # Shapes and dtypes are ours to keep: jaxlib's arrays only know them when jax is loaded.
        shape = tuple(part_shape[:axis]) + (len(parts),) + tuple(part_shape[axis:])
        super().__init__(None, shape, np.dtype(dtype), None)
        self.parts, self.part_shape, self.axis, self.devices = list(parts), tuple(part_shape), axis, list(devices)

    def _live_buffer(self):
        self._live_parts()

    def _live_parts(self) -> list:
        if self._donated_as is not None:
            super()._live_buffer()     # says it was donated
        return self.parts

    def _numpy(self) -> np.ndarray:
        if self._value is None:
            with distributed.peer_failures_raised_clearly():
                value = np.stack([np.asarray(p) for p in self._live_parts()], axis=self.axis)
            value.flags.writeable = False
            self._value = value
        return self._value

    def block_until_ready(self) -> "ShardedArray":
        with distributed.peer_failures_raised_clearly():
            for part in self._live_parts():
                part.block_until_ready()
        return self

    def _donate(self, label: str) -> None:
        for part in self.parts:
            if not part.is_deleted():
                part.delete()
        self._donated_as = label
        self._value = None
