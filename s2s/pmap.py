"""`pmap`: a function of one device's share of a batch, run on several devices at once.

    grads = s2s.pmap(step, axis_name="devices", in_axes=(None, 0, 0))(params, xs, ys)

`pmap(fn)` splits each mapped argument along its `in_axes` axis, one slice per device, and
runs `fn` on every device at once as one SPMD program (XLA replicas, one per device). `fn`
is staged once, for one device's shapes, under the named axis `axis_name`, so the
collectives of `s2s.lax` in it (`psum`, `pmean`, `pmax`, `pmin`, `all_gather`,
`axis_index`, `ppermute`, `psum_scatter`, `all_to_all`) lower to XLA's cross-replica ops (see `s2s/primitives/collectives.py`).

As in JAX: the mapped size is the number of devices used (the first ones of
`s2s.devices()`, or exactly `devices`); `in_axes` is an int, None (the argument is
replicated: every device gets all of it) or a tuple with one entry per positional
argument, each an int, None or a tree prefix of the argument holding them (`{"W": None,
"b": 0}`); `out_axes` (an int, None, or a tree prefix of the results holding them) is where
the device axis goes in the results (None: the results are the same on every device, and
device 0's is returned);
`static_broadcasted_argnums` are passed to `fn` as Python values (hashable), one staging
per value. Keyword arguments are replicated. The results are `s2s.Array`s: with out_axes
an int, ShardedArrays (one part per device, read as NumPy with the device axis at
out_axes), which a later pmap over the same devices mapping that axis takes where they are,
without a round trip through the host; with out_axes None, device 0's result.

It runs on the CPU devices of one process (`S2S_NUM_CPU_DEVICES=8` or
`s2s.config.update("num_cpu_devices", 8)` before the first device query), or across
processes after `s2s.distributed.initialize`: then each process passes one slice per local
device, the axis and its collectives span every process's devices, and each process gets
its own devices' results. Called inside another transform (jit, grad, vmap, another pmap:
whenever a function is being staged), a pmap binds the `pmap` primitive
(`s2s/primitives/pmapped.py`), one equation the transforms around handle; a program
holding pmaps (a jitted function calling one, a pmap whose body calls one) runs as a
`ReplicatedProgram`, on as many devices (of this process) as its nested pmaps' sizes
multiply to. `donate_argnums`, as jit's: a donated argument's memory may hold the
results (XLA aliases each donated input with a result of its type), and a donated
s2s.Array cannot be used again. `s2s.emit_python` of a pmapped function writes its
`reference()`, the same computation as one vmapped function on NumPy. A body that draws
random numbers (`np.random`, a generator it reads) is given one fresh seed per generator
on each call, the same on every device, and each device folds its index into it
(`stablehlo.states_per_replica`): the devices draw independent samples.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, host_objects
from s2s.donation import donated_leaves, refuse_donating_twice
from s2s.emit.stablehlo import Lowered, device_dtype, device_dtypes, donation_aliases, lower, replicas_needed
from s2s.errors import StagingError, StagingTypeError, StagingValueError, api_boundary
from s2s.frontend import BoundCall, Staged, bind_function_call, stage_call
from s2s.frontend.args import aval_of_arg, describe_arg, is_staged_leaf, normalize_argnums
from s2s.passes.vmap import axis_readers_in
from s2s.primitives.pmapped import bind_pmap
from s2s.staging import JaxprBuilder, current_builder, named_axis
from s2s.transformed import TransformedFunction
from s2s.vmapped import MappedCall, axes_per_leaf, check_axes_specs, hashable_axes, split_call, vmap
from s2s_runtime.distributed import process_count, replica_count, replica_devices, several_processes
from s2s_runtime.replicated import ReplicatedExecutable, ShardedArray, device_shards
from s2s_runtime.array import Array
from s2s_runtime.ops import generator_seed
from s2s_runtime.xla import devices as all_devices

__all__ = ["pmap"]


class Pmapped(TransformedFunction):
    """`pmap(fn, ...)`: called like `fn` on a batch split over devices."""

    def __init__(self, fn, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, donate_argnums=()):
        static_argnums = normalize_argnums(static_broadcasted_argnums, what="static_broadcasted_argnums")
        donate_argnums = normalize_argnums(donate_argnums, what="donate_argnums")
        devices = None if devices is None else list(devices)
        super().__init__(fn, "pmap", (axis_name, hashable_axes(in_axes), hashable_axes(out_axes), static_argnums,
                                      None if devices is None else tuple(d.id for d in devices), donate_argnums))
        self.axis_name = axis_name
        self.in_axes, self.out_axes = in_axes, out_axes
        self.static_argnums, self.devices, self.donate_argnums = static_argnums, devices, donate_argnums

    # -- splitting a call over devices

    def _static_positions(self, count: int) -> frozenset[int]:
        """Which of `count` positional arguments static_broadcasted_argnums names."""
        return frozenset(normalize_argnums(self.static_argnums, count, "static_broadcasted_argnums"))

    def _split(self, call: BoundCall, devices_needed: bool) -> tuple[MappedCall, int]:
        """The call split along in_axes, and the size of its device axis."""
        mapped = split_call("pmap", self.fn, self.in_axes, call, self._static_positions(call.n_args))
        size = mapped.size("pmap", "every mapped argument needs one slice per device along its in_axes axis")
        if size is None:
            raise StagingValueError("pmap maps no argument (in_axes is None for all of them), so it "
                               "cannot tell how many devices to use",
                               "map at least one argument along its device axis")
        if devices_needed:
            available = self.devices if self.devices is not None else all_devices()
            exactly = self.devices is not None or process_count() > 1   # across processes: all local devices
            if (exactly and size != len(available)) or size > len(available):
                name = mapped.sizes[0][0]
                raise StagingValueError(f"pmap's mapped axis of {name} has size {size}, but "
                                   f"{len(available)} device(s) are "
                                   f"{'given' if self.devices is not None else 'available'}",
                                   "the mapped axis needs one slice per device: give it that size "
                                   "(set S2S_NUM_CPU_DEVICES or s2s.config num_cpu_devices for more CPU devices)")
        return mapped, size

    def _staged(self, mapped: MappedCall, size: int) -> Staged:
        if self.axis_name is None:
            return stage_call(self.fn, mapped.example, static_argnums=self.static_argnums)
        with named_axis(self.axis_name, size):
            return stage_call(self.fn, mapped.example, static_argnums=self.static_argnums)

    def _out_axes(self, staged: Staged) -> list:
        """The out_axes entry of each result: out_axes is an int, None, or a tree prefix of
        the results holding them (read once per staging)."""
        return staged.artifact(("pmap out_axes", self.cache_params), lambda: self._read_out_axes(staged))

    def _read_out_axes(self, staged: Staged) -> list:
        axes = axes_per_leaf(self.out_axes, staged.out_tree, "out_axes", f"the results of {self.__name__}", "pmap")
        for axis, aval in zip(axes, staged.closed.out_avals):
            if axis is not None and not -(aval.ndim + 1) <= axis <= aval.ndim:
                raise StagingValueError(f"pmap out_axes {axis} is out of range for a result of rank {aval.ndim} "
                                   f"(with the device axis, rank {aval.ndim + 1})",
                                   f"give an axis from {-(aval.ndim + 1)} to {aval.ndim}, or None for a "
                                   "result that is the same on every device")
        return axes

    def _bind(self, call: BoundCall):
        """Called inside a function being staged (by jit, grad, vmap or another pmap): one
        `pmap` equation of the body staged for one device's shapes."""
        if several_processes():   # run on this process's devices (or values) alone: a partial psum
            raise StagingError("a pmap inside jit, grad or vmap, or a pmap with pmaps inside, runs on this "
                               "process's devices only, and this run has several processes: its "
                               "collectives would leave the other processes' values out",
                               "call the pmap at the top level (its collectives span every process), "
                               "and put jit or grad inside it")
        mapped, size = self._split(call, devices_needed=False)
        staged = self._staged(mapped, size)
        outs = bind_pmap(staged.closed, staged.inputs(call), axis_name=self.axis_name,
                         axis_size=size, in_axes=mapped.staged_dims(staged),
                         out_axes=self._out_axes(staged))
        return staged.out_tree.unflatten(outs)

    def _with_inner_pmaps(self, staged: Staged, mapped: MappedCall, size: int,
                          flat: list) -> tuple[ClosedJaxpr, tuple]:
        """A body with pmaps inside runs on more replicas than this axis has, as jit runs a
        program that calls pmaps: (the jaxpr of one `pmap` equation on the whole arguments
        `flat`, the key it is kept under in the staging's artifacts)."""
        avals = [aval_of_arg(x) for x in flat]
        in_dims, out_axes = mapped.staged_dims(staged), self._out_axes(staged)
        key = ("pmap with pmaps inside", self.axis_name, tuple(in_dims), tuple(out_axes), tuple(avals))

        def build():
            with JaxprBuilder() as builder:
                ins = [builder.new_arg(aval) for aval in avals]
                return builder.build(bind_pmap(staged.closed, ins, axis_name=self.axis_name, axis_size=size,
                                               in_axes=in_dims, out_axes=out_axes))
        return staged.artifact(key, build), key

    def _run_with_inner_pmaps(self, staged: Staged, mapped: MappedCall, size: int, flat: list):
        """On every replica the pmaps need together, the results device 0's (the stacked
        arrays, not ShardedArrays)."""
        closed, key = self._with_inner_pmaps(staged, mapped, size, flat)
        devices = self.devices if self.devices is not None else all_devices()
        program = staged.artifact(key + (tuple(d.id for d in devices),), lambda: ReplicatedProgram(closed, devices))
        return staged.out_tree.unflatten(program(flat))

    def _replica_axes(self, size: int) -> tuple:
        return ((self.axis_name, size),) if self.axis_name is not None else ((object(), size),)

    def _text(self, staged: Staged, size: int, donated: dict[int, str] | None = None,
              root: str | None = None) -> str:
        """The module; donated inputs ({input index: label}) alias the outputs of their type;
        `root` as `lower`'s."""
        invars = staged.closed.jaxpr.invars
        aliases = donation_aliases(staged.closed, [i in (donated or {}) for i in range(len(invars))])
        return lower(staged.closed, aliases=aliases, root=root, replica_axes=self._replica_axes(size))

    def spmd_module(self, args: tuple, root: str | None = None):
        """What `s2s compile` builds for an exported pmap, as the pmap itself runs it: (the
        staged body, its SPMD module, the replica count, each flat input's device axis,
        each flat output's device axis). None when the body calls pmaps itself: its program
        is then not one replica per device, and is built as a whole, as jit builds it."""
        mapped, size = self._split(bind_function_call(self.fn, args, {}), devices_needed=False)
        staged = self._staged(mapped, size)
        if replicas_needed(staged.closed.jaxpr) > 1:
            return None
        out_axes = [None if axis is None else axis % (a.ndim + 1)
                    for axis, a in zip(self._out_axes(staged), staged.closed.out_avals)]
        return staged, self._text(staged, size, root=root), size, mapped.staged_dims(staged), out_axes

    @api_boundary
    def __call__(self, *args, **kwargs):
        call = bind_function_call(self.fn, args, kwargs)
        if current_builder() is not None:   # inside jit, grad, vmap or another pmap
            return self._bind(call)
        mapped, size = self._split(call, devices_needed=True)
        used = replica_devices(self.devices, size)
        size = len(used)   # across processes: every process's devices
        staged = self._staged(mapped, size)
        flat = staged.inputs(call)
        if replicas_needed(staged.closed.jaxpr) > 1:
            return self._run_with_inner_pmaps(staged, mapped, size, flat)
        in_dims = mapped.staged_dims(staged)
        donated = donated_leaves(staged, call, self.donate_argnums)
        refuse_donating_twice(flat, donated, 0)
        key = ("pmap", self.axis_name, tuple(d.id for d in used), tuple(in_dims), tuple(sorted(donated)))
        executable = staged.artifact(key, lambda: self._compile(staged, size, used, donated, call))
        outs = self._run(executable, staged, in_dims, flat, len(executable.devices), self._out_axes(staged))
        for position, label in donated.items():   # its memory is the results' now
            if isinstance(flat[position], Array):
                flat[position]._donate(label)
        return staged.out_tree.unflatten(outs)

    def _compile(self, staged: Staged, size: int, used: list, donated: dict[int, str],
                 call: BoundCall) -> ReplicatedExecutable:
        jaxpr = staged.closed.jaxpr
        return ReplicatedExecutable(self._text(staged, size, donated),
                                    device_dtypes(jaxpr), used,
                                    *self._described(staged, call))

    def _described(self, staged: Staged, call: BoundCall) -> tuple[str, dict[str, list[str]]]:
        """This call in words, for the message when the processes of a run are about to run
        different programs: where its function is, and what it runs and is passed (this
        process's arguments, as the user passed them, each array by its type; a static one
        by its type alone, as its repr may hold an address, which differs between processes)."""
        file, line = staged.location
        static = self._static_positions(call.n_args)
        as_types = [aval_of_arg(leaf) if is_staged_leaf(leaf) else leaf for leaf in call.leaves]
        passed = []
        for i, (tree, leaves) in enumerate(zip(call.positional_trees, call.positional_leaf_ranges)):
            shown = tree.unflatten([as_types[j] for j in leaves])
            passed.append(f"a static {type(shown).__name__}" if i in static else describe_arg(shown))
        values = call.tree.unflatten(as_types)
        by_keyword = dict(zip(call.names[call.positional_params:], values[call.positional_params:]))
        passed += [f"{k}={describe_arg(v)}" for k, v in sorted(by_keyword.items()) if k in call.passed]
        return (f"pmap({staged.description}) at {file}:{line}",
                {"runs": axis_readers_in(staged.closed.jaxpr) or ["no collective"], "passes": passed})

    def _run(self, executable, staged: Staged, in_dims: list, flat: list, size: int, out_axes: list) -> list:
        jaxpr = staged.closed.jaxpr
        shards = [[np.asarray(c)] * size for c in staged.closed.consts]
        for value, d, v in zip(flat, in_dims, jaxpr.invars):
            dtype = device_dtype(v.aval.dtype)
            if isinstance(value, ShardedArray) and d is not None and value.axis == d and value.dtype == dtype:
                shards.append(value)      # its parts are where they are needed (or moved there)
                continue
            array = np.asarray(value, dtype)
            shards.append(device_shards(array, d, size))
        results = executable.execute(shards + _seeds_for_replicas(jaxpr, size))
        outs = []
        for per_device, v, axis in zip(results, jaxpr.outvars, out_axes):
            if v.aval.dtype == dtypes.float0:
                shape = v.aval.shape if axis is None else _with_axis(v.aval.shape, axis, size)
                outs.append(np.zeros(shape, dtypes.float0))
            elif axis is None:       # the same on every device: device 0's, as an s2s.Array
                outs.append(Array(per_device[0], tuple(v.aval.shape), np.dtype(v.aval.dtype), executable.devices[0]))
            else:
                outs.append(ShardedArray(per_device, tuple(v.aval.shape), v.aval.dtype,
                                         axis % (v.aval.ndim + 1), executable.devices))
        return outs

    @api_boundary
    def reference(self):
        """What this pmap computes, as one function on the whole batch: `vmap` with the
        same axes and axis name, its collectives reductions over the batch axis. The
        semantics written down, without devices: what `s2s.emit_python` of a pmapped
        function emits (tested equal to the pmap)."""
        in_axes = self.in_axes
        if self.static_argnums:
            if not isinstance(in_axes, (tuple, list)):
                raise StagingError("the reference of a pmap with static_broadcasted_argnums needs in_axes "
                                   "as a tuple (one entry per positional argument)",
                                   "give in_axes as a tuple, with None for the static arguments")
            static = self._static_positions(len(in_axes))
            in_axes = tuple(None if i in static else a for i, a in enumerate(in_axes))
        return vmap(self.fn, in_axes=in_axes, out_axes=self.out_axes, axis_name=self.axis_name)

    @api_boundary
    def lower(self, *args, **kwargs) -> "Lowered":
        """The StableHLO module this function runs for these arguments (no devices needed)."""
        call = bind_function_call(self.fn, args, kwargs)
        mapped, size = self._split(call, devices_needed=False)
        size = replica_count(self.devices, size)
        staged = self._staged(mapped, size)
        self._out_axes(staged)   # an out_axes that does not fit the results is an error here too
        if replicas_needed(staged.closed.jaxpr) > 1:
            return Lowered(lower(self._with_inner_pmaps(staged, mapped, size, staged.inputs(call))[0]))
        return Lowered(self._text(staged, size, donated_leaves(staged, call, self.donate_argnums)))


class ReplicatedProgram:
    """A jaxpr with pmaps inside (jit of a pmap, nested pmaps) compiled as one module over
    the replicas its pmaps need (`replicas_needed`), on the first that many of `devices`.
    Outside its pmaps every replica computes the same, so each is given every input whole,
    and the results are replica 0's."""

    def __init__(self, closed: ClosedJaxpr, devices: list):
        replicas = replicas_needed(closed.jaxpr)
        if replicas > len(devices):
            raise StagingValueError(f"the pmaps in this function need {replicas} devices together, "
                               f"but {len(devices)} are available",
                               "map axes whose sizes multiply to at most the device count (set "
                               "S2S_NUM_CPU_DEVICES or s2s.config num_cpu_devices for more CPU devices)")
        self.closed = closed
        jaxpr = closed.jaxpr
        self.executable = ReplicatedExecutable(lower(closed), device_dtypes(jaxpr), devices[:replicas])

    def __call__(self, flat: list) -> list:
        replicas = len(self.executable.devices)
        jaxpr = self.closed.jaxpr
        inputs = [*self.closed.consts, *flat]
        results = self.executable.execute([[np.asarray(x, device_dtype(v.aval.dtype))] * replicas
                                           for x, v in zip(inputs, jaxpr.constvars + jaxpr.invars)]
                                          + _seeds_for_replicas(jaxpr, replicas))
        return [np.zeros(v.aval.shape, dtypes.float0) if v.aval.dtype == dtypes.float0 else
                Array(per_replica[0], tuple(v.aval.shape), np.dtype(v.aval.dtype), self.executable.devices[0])
                for per_replica, v in zip(results, jaxpr.outvars)]


def _seeds_for_replicas(jaxpr, replicas: int) -> list[list[np.ndarray]]:
    """The inputs after the arguments of a module `jaxpr` lowers to: per generator its code
    draws from, a fresh seed from it (advancing it, as jit's calls do), the same for every
    replica (the module makes each device's numbers its own: `states_per_replica`)."""
    return [[generator_seed(obj.value)] * replicas for obj in host_objects(jaxpr)]


def _with_axis(shape: tuple, axis: int, size: int) -> tuple:
    axis %= len(shape) + 1
    return tuple(shape[:axis]) + (size,) + tuple(shape[axis:])


@api_boundary
def pmap(fn: Callable[..., Any] | None = None, axis_name: Hashable | None = None, *, in_axes: Any = 0,
         out_axes: Any = 0, static_broadcasted_argnums: int | Sequence[int] = (), devices: Sequence[Any] | None = None,
         donate_argnums: int | Sequence[int] = ()) -> Callable[..., Any]:
    """`fn` run on several devices at once, each on its slice of the mapped arguments
    (jax.pmap); usable as a decorator, bare or with arguments."""
    if fn is None:
        return lambda f: pmap(f, axis_name, in_axes=in_axes, out_axes=out_axes,
                              static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                              donate_argnums=donate_argnums)
    check_axes_specs(in_axes, out_axes, "pmap")
    try:
        hash(axis_name)
    except TypeError:
        raise StagingTypeError(f"pmap axis_name must be hashable, got {axis_name!r}",
                           "name the axis with a string, e.g. axis_name='devices'") from None
    return Pmapped(fn, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, donate_argnums)
