"""One SPMD program run on several devices, one XLA replica per device.

What `s2s.pmap` runs: the module (`mhlo.num_replicas = n`) is compiled once for the `n`
devices; each argument goes in as ONE jaxlib array spanning them, built from one shard per
device (JAXLIB_NOTES.md, "Several devices"); the results come back one array per device
per output. In a run of several processes (`s2s_runtime.distributed`) the `n` devices are
every process's, each process compiles the same program and gives the shards of its own
devices only (the array spans all `n`; jaxlib asks for the addressable shards alone), and
gets back its own devices' results; before such a program first runs, the processes
check that they all run it (`distributed.agree_on_program`). jaxlib's per-device arrays
are put on a GSPMD sharding marked replicated: each device's shard has the shape the
program sees, which is what a replica's parameter is. Compiled executables are kept in
memory by (module text, devices), and on disk in the executable cache like jit's, keyed by
everything that changes the compiled code. Like `s2s_runtime.xla`, nothing here depends
on jax being importable.
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from s2s_runtime import disk_cache, distributed, printing, quiet_logs  # noqa: F401  (quiet_logs: before jaxlib loads)
from s2s_runtime.array import Array, device_copy
from s2s_runtime.xla import Executable, _Aval, client, devices, disk_cache_key, install_sharding_hooks
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
    """(the executable, the bytes it was loaded from or None, whether it came from a cache):
    in memory, then on disk, else compiled. The bytes are kept because jaxlib cannot
    serialize an executable it deserialized (see `xla.Executable.serialize`)."""
    if printing.callbacks_in(mlir_text):   # (run without its callbacks, the program would crash the process)
        raise ValueError("a program run on several replicas cannot call back into Python: it prints while "
                         "it runs (print() of staged values)")
    key = (mlir_text, tuple(d.id for d in devices))
    with _compiled_lock:
        cached = _compiled.get(key)
        if cached is not None:
            _compiled.move_to_end(key)
            return (*cached, True)
    cl = client()
    loaded = []
    exe, hit = disk_cache.get_or_compile(
        disk_cache_key(mlir_text, devices[0], options, placement=f"replicas on {[d.id for d in devices]}, "
                       f"compiled by process {cl.process_index()}"),
        lambda: cl.compile_and_load(mlir_text, device_list, options), cl.serialize_executable,
        lambda data: loaded.append(bytes(data)) or cl.deserialize_executable(data, device_list, options))
    serialized = loaded[-1] if hit else None
    with _compiled_lock:
        _compiled[key] = (exe, serialized)
        while len(_compiled) > _KEEP:
            _compiled.popitem(last=False)
    return exe, serialized, hit


class ReplicatedExecutable:
    """A StableHLO module with `mhlo.num_replicas = len(replicas)`, compiled for the
    devices `replicas`, of which this process feeds and reads `devices` (all of them in a
    run of one process).

    `execute(shards)` takes, per parameter, one array per device of `devices` (the i-th
    gets `shards[p][i]`) or a ShardedArray, and returns, per result, one device array per
    device of `devices`. `label` and `aspects` say what the program is in words, for the
    message when processes about to run it disagree (see `distributed.agree_on_program`).
    """

    def __init__(self, mlir_text: str, in_dtypes, replicas: list, label: str = "a replicated program",
                 aspects: dict[str, list[str]] | None = None):
        device_list, options = replica_options(replicas)
        exe, serialized, cache_hit = _compile(mlir_text, list(replicas), device_list, options)
        self._setup(exe, serialized, in_dtypes, replicas, device_list, mlir_text, cache_hit, label, aspects)

    def _setup(self, exe, serialized, in_dtypes, replicas, device_list, text, cache_hit: bool,
               label: str = "a replicated program", aspects: dict[str, list[str]] | None = None) -> None:
        _install_sharding_hooks()
        self._exe, self._serialized = exe, serialized
        self.replicas = list(replicas)
        here = client().process_index()
        self.devices = [d for d in self.replicas if d.process_index == here]
        # Replicas in other processes run it only if those processes agree to (first call).
        self._unagreed = len(self.devices) < len(self.replicas)
        self.label, self.aspects = label, aspects or {}
        self.text = text
        self.cache_hit = cache_hit
        self.in_dtypes = [np.dtype(d) for d in in_dtypes]
        self._sharding = xla_client.GSPMDSharding(device_list, xla_client.HloSharding.replicate())
        self._device_shardings = [xla_client.SingleDeviceSharding(d) for d in self.devices]

    @classmethod
    def from_serialized(cls, data: bytes, in_dtypes, devices: list) -> "ReplicatedExecutable":
        """An executable loaded from `serialize()`'s bytes, onto `devices` (as many as it
        has replicas; same jaxlib version only)."""
        self = cls.__new__(cls)
        device_list, options = replica_options(devices)
        exe = client().deserialize_executable(bytes(data), device_list, options)
        self._setup(exe, bytes(data), in_dtypes, devices, device_list, None, False)
        return self

    def serialize(self) -> bytes:
        """The compiled executable as bytes, for `from_serialized` (never pickled)."""
        return self._serialized if self._serialized is not None else client().serialize_executable(self._exe)

    parameter_types = Executable.parameter_types   # what one replica's program declares

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
        if self._unagreed:   # before any collective: one that other processes run differently breaks them
            distributed.agree_on_program(self.text if self.text is not None else self._serialized,
                                         self.replicas, self.label, self.aspects)
            self._unagreed = False
        arrays = [self._spanning_array(parts, dtype) for parts, dtype in zip(shards, self.in_dtypes)]
        with distributed.peer_failures_raised_clearly():
            results = self._exe.execute_sharded(arrays).disassemble_into_single_device_arrays()
        return [list(per_device) for per_device in results]

    def optimized_hlo_text(self) -> str:
        return self._exe.hlo_modules()[0].to_string()

    def run_split(self, args: list, in_axes: list, out_axes: list) -> list[np.ndarray]:
        """Runs on whole NumPy arrays, as pmap calls its program: each argument split along
        its `in_axes` entry (one slice per replica; None: every replica gets all of it), and
        each result stacked along its `out_axes` entry (None: replica 0's)."""
        results = self.execute([device_shards(np.asarray(a, dtype), axis, len(self.devices))
                                for a, dtype, axis in zip(args, self.in_dtypes, in_axes)])
        return [np.asarray(per_device[0]) if axis is None else
                np.stack([np.asarray(p) for p in per_device], axis=axis)
                for per_device, axis in zip(results, out_axes)]


def first_devices(count: int) -> list:
    """The first `count` devices, for a program of `count` replicas; a clear error when
    this process has fewer."""
    available = devices()
    if len(available) < count:
        raise RuntimeError(f"the program runs as {count} replicas, one per device, but this process "
                           f"has {len(available)} device(s): set S2S_NUM_CPU_DEVICES={count} in the "
                           f"environment (before the first device query)")
    return available[:count]


def device_shards(array: np.ndarray, axis: int | None, count: int) -> list:
    """`array` as one part per device: its slices along `axis`, or all of it on each."""
    return [array] * count if axis is None else list(np.moveaxis(array, axis, 0))


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

    def __copy__(self) -> "ShardedArray":
        """A copy owns its data (see Array.__copy__): each part copied on its device."""
        parts = [device_copy(part, device) for part, device in zip(self._live_parts(), self.devices)]
        return ShardedArray(parts, self.part_shape, self.dtype, self.axis, self.devices)

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
