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
`reference()`, the same computation as one vmapped function on NumPy.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from s2s import dtypes, tree as tree_util
from s2s.eager import donated_leaves, refuse_donating_twice, staged_or_error
from s2s.core import ClosedJaxpr
from s2s.emit.stablehlo import Lowered, device_dtype, device_dtypes, donation_aliases, lower, replicas_needed
from s2s.errors import StagingError, api_boundary
from s2s.frontend import Staged
from s2s.mapping import axes_per_leaf, is_axis, positional_names, vmap
from s2s.frontend.args import aval_of_arg, describe_arg, is_staged_leaf, normalize_argnums
from s2s.passes.vmap import axis_readers_in, example_aval
from s2s.primitives.pmapped import bind_pmap
from s2s.staging import JaxprBuilder, Tracer, current_builder, named_axis
from s2s_runtime.distributed import process_count, replica_count, replica_devices, several_processes
from s2s_runtime.replicated import ReplicatedExecutable, ShardedArray, device_shards
from s2s_runtime.array import Array
from s2s_runtime.xla import devices as all_devices

__all__ = ["pmap"]


class _Dim:
    """Stands for a leaf in a copy of the call's arguments: its mapped axis (or None)."""
    __slots__ = ("dim",)

    def __init__(self, dim):
        self.dim = dim


@dataclasses.dataclass(frozen=True)
class _Call:
    example_args: tuple   # positional arguments with mapped leaves as one device's avals
    dim_args: tuple       # the same tree, each non-static leaf a _Dim
    size: int


class Pmapped:
    """`pmap(fn, ...)`: called like `fn` on a batch split over devices."""

    def __init__(self, fn, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, donate_argnums=()):
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.axis_name = axis_name
        self.in_axes, self.out_axes = in_axes, out_axes
        self.static_argnums = normalize_argnums(static_broadcasted_argnums, what="static_broadcasted_argnums")
        self.devices = None if devices is None else list(devices)
        self.donate_argnums = normalize_argnums(donate_argnums, what="donate_argnums")
        inner = getattr(fn, "__name__", "f")
        self.__name__ = f"pmap_{inner}" if isinstance(inner, str) and inner.isidentifier() else "pmap"
        self.__qualname__ = self.__name__

    def __repr__(self):
        return f"<s2s pmap({getattr(self.fn, '__qualname__', 'f')})>"

    # -- splitting a call over devices

    def _static_positions(self, count: int) -> set[int]:
        """Which of `count` positional arguments static_broadcasted_argnums names."""
        return set(normalize_argnums(self.static_argnums, count, "static_broadcasted_argnums"))

    def _split(self, args: tuple, devices_needed: bool) -> _Call:
        static = self._static_positions(len(args))
        in_axes = self.in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        if isinstance(in_axes, tuple):
            if len(in_axes) != len(args):
                raise StagingError(f"pmap in_axes has {len(in_axes)} entries but {self.__name__} was "
                                   f"called with {len(args)} positional arguments",
                                   "give in_axes as an int, None, or a tuple with one entry per "
                                   "positional argument")
            per_arg = list(in_axes)
        else:
            per_arg = [in_axes] * len(args)
        names = positional_names(self.fn, len(args))
        example, dims, sizes = [], [], []
        for i, (arg, axis) in enumerate(zip(args, per_arg)):
            if i in static:
                example.append(arg)
                dims.append(arg)
                continue
            leaves, treedef = tree_util.tree_flatten(arg)
            leaf_examples, leaf_dims = [], []
            for leaf, axis in zip(leaves, axes_per_leaf(axis, arg, "in_axes", f"`{names[i]}`", "pmap")):
                if axis is None:
                    leaf_examples.append(leaf)
                    leaf_dims.append(_Dim(None))
                    continue
                if not (isinstance(leaf, (int, float, Tracer)) or is_staged_leaf(leaf)):
                    raise StagingError(f"pmap cannot map `{names[i]}`: {describe_arg(leaf)} is not an array",
                                       "pass arrays for mapped arguments, or None in in_axes")
                aval = aval_of_arg(leaf)
                if not -aval.ndim <= axis < aval.ndim:
                    raise StagingError(f"pmap in_axes {axis} for `{names[i]}` is out of range for an "
                                       f"array of rank {aval.ndim}",
                                       "map an axis the argument has, or pass None to replicate it")
                d = axis % aval.ndim
                sizes.append((names[i], aval.shape[d]))
                leaf_examples.append(example_aval(aval, d))
                leaf_dims.append(_Dim(d))
            example.append(treedef.unflatten(leaf_examples))
            dims.append(treedef.unflatten(leaf_dims))
        if not sizes:
            raise StagingError("pmap maps no argument (in_axes is None for all of them), so it "
                               "cannot tell how many devices to use",
                               "map at least one argument along its device axis")
        size = sizes[0][1]
        for name, n in sizes:
            if n != size:
                listed = ", ".join(f"`{a}` has size {b}" for a, b in sizes)
                raise StagingError(f"pmap got mapped axes of different sizes: {listed}",
                                   "every mapped argument needs one slice per device along its in_axes axis")
        if devices_needed:
            available = self.devices if self.devices is not None else all_devices()
            exactly = self.devices is not None or process_count() > 1   # across processes: all local devices
            if (exactly and size != len(available)) or size > len(available):
                name = sizes[0][0]
                raise StagingError(f"pmap's mapped axis of `{name}` has size {size}, but "
                                   f"{len(available)} device(s) are "
                                   f"{'given' if self.devices is not None else 'available'}",
                                   "the mapped axis needs one slice per device: give it that size "
                                   "(set S2S_NUM_CPU_DEVICES or s2s.config num_cpu_devices for more CPU devices)")
        return _Call(tuple(example), tuple(dims), size)

    def _staged(self, call: _Call, kwargs) -> Staged:
        if self.axis_name is None:
            return staged_or_error(self.fn, call.example_args, kwargs, self.static_argnums)
        with named_axis(self.axis_name, call.size):
            return staged_or_error(self.fn, call.example_args, kwargs, self.static_argnums)

    def _out_axes(self, staged: Staged) -> list:
        """The out_axes entry of each result: out_axes is an int, None, or a tree prefix of
        the results holding them."""
        results = staged.out_tree.unflatten(list(range(staged.out_tree.num_leaves)))
        axes = axes_per_leaf(self.out_axes, results, "out_axes", f"the results of {self.__name__}", "pmap")
        for axis, aval in zip(axes, staged.closed.out_avals):
            if axis is not None and not -(aval.ndim + 1) <= axis <= aval.ndim:
                raise StagingError(f"pmap out_axes {axis} is out of range for a result of rank {aval.ndim} "
                                   f"(with the device axis, rank {aval.ndim + 1})",
                                   f"give an axis from {-(aval.ndim + 1)} to {aval.ndim}, or None for a "
                                   "result that is the same on every device")
        return axes

    def _bind(self, args, kwargs):
        """Called inside a function being staged (by jit, grad, vmap or another pmap): one
        `pmap` equation of the body staged for one device's shapes."""
        if several_processes():   # run on this process's devices (or values) alone: a partial psum
            raise StagingError("a pmap inside jit, grad or vmap, or a pmap with pmaps inside, runs on this "
                               "process's devices only, and this run has several processes: its "
                               "collectives would leave the other processes' values out",
                               "call the pmap at the top level (its collectives span every process), "
                               "and put jit or grad inside it")
        call = self._split(args, devices_needed=False)
        staged = self._staged(call, kwargs)
        outs = bind_pmap(staged.closed, staged.flat_inputs(args, kwargs), axis_name=self.axis_name,
                         axis_size=call.size, in_axes=self._flat_in_axes(call, staged, kwargs),
                         out_axes=self._out_axes(staged))
        return staged.out_tree.unflatten(outs)

    def _with_inner_pmaps(self, staged: Staged, call: _Call, args, kwargs) -> tuple[ClosedJaxpr, list, tuple]:
        """A body with pmaps inside runs on more replicas than this axis has, as jit runs a
        program that calls pmaps: (the jaxpr of one `pmap` equation on the whole arguments,
        its inputs, the key it is kept under in the staging's artifacts)."""
        flat = staged.flat_inputs(args, kwargs)
        avals = [aval_of_arg(x) for x in flat]
        in_dims, out_axes = self._flat_in_axes(call, staged, kwargs), self._out_axes(staged)
        key = ("pmap with pmaps inside", self.axis_name, tuple(in_dims), tuple(out_axes), tuple(avals))

        def build():
            with JaxprBuilder() as builder:
                ins = [builder.new_arg(aval) for aval in avals]
                return builder.build(bind_pmap(staged.closed, ins, axis_name=self.axis_name, axis_size=call.size,
                                               in_axes=in_dims, out_axes=out_axes))
        return staged.artifact(key, build), flat, key

    def _run_with_inner_pmaps(self, staged: Staged, call: _Call, args, kwargs):
        """On every replica the pmaps need together, the results device 0's (the stacked
        arrays, not ShardedArrays)."""
        closed, flat, key = self._with_inner_pmaps(staged, call, args, kwargs)
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

    def _flat_in_axes(self, call: _Call, staged: Staged, kwargs) -> list:
        """Each flat input's device axis (None: every device gets all of it)."""
        return [d.dim if isinstance(d, _Dim) else None
                for d in staged.flat_inputs(call.dim_args, tree_util.tree_map(lambda _: _Dim(None), kwargs))]

    def spmd_module(self, args: tuple, root: str | None = None):
        """What `s2s compile` builds for an exported pmap, as the pmap itself runs it: (the
        staged body, its SPMD module, the replica count, each flat input's device axis,
        each flat output's device axis). None when the body calls pmaps itself: its program
        is then not one replica per device, and is built as a whole, as jit builds it."""
        call = self._split(args, devices_needed=False)
        staged = self._staged(call, {})
        if replicas_needed(staged.closed.jaxpr) > 1:
            return None
        out_axes = [None if axis is None else axis % (a.ndim + 1)
                    for axis, a in zip(self._out_axes(staged), staged.closed.out_avals)]
        return (staged, self._text(staged, call.size, root=root), call.size,
                self._flat_in_axes(call, staged, {}), out_axes)

    @api_boundary
    def __call__(self, *args, **kwargs):
        if current_builder() is not None:   # inside jit, grad, vmap or another pmap
            return self._bind(args, kwargs)
        call = self._split(args, devices_needed=True)
        used = replica_devices(self.devices, call.size)
        call = dataclasses.replace(call, size=len(used))   # across processes: every process's devices
        staged = self._staged(call, kwargs)
        if replicas_needed(staged.closed.jaxpr) > 1:
            return self._run_with_inner_pmaps(staged, call, args, kwargs)
        in_dims = self._flat_in_axes(call, staged, kwargs)
        donated = donated_leaves(staged, args, self.donate_argnums)
        flat = staged.flat_inputs(args, kwargs)
        refuse_donating_twice(flat, donated, 0)
        key = ("pmap", self.axis_name, tuple(d.id for d in used), tuple(in_dims), tuple(sorted(donated)))
        executable = staged.artifact(key, lambda: self._compile(staged, call.size, used, donated, args, kwargs))
        outs = self._run(executable, staged, in_dims, flat, len(executable.devices), self._out_axes(staged))
        for position, label in donated.items():   # its memory is the results' now
            if isinstance(flat[position], Array):
                flat[position]._donate(label)
        return staged.out_tree.unflatten(outs)

    def _compile(self, staged: Staged, size: int, used: list, donated: dict[int, str], args: tuple,
                 kwargs: dict) -> ReplicatedExecutable:
        jaxpr = staged.closed.jaxpr
        return ReplicatedExecutable(self._text(staged, size, donated),
                                    device_dtypes(jaxpr), used,
                                    *self._described(staged, args, kwargs))

    def _described(self, staged: Staged, args: tuple, kwargs: dict) -> tuple[str, dict[str, list[str]]]:
        """This call in words, for the message when the processes of a run are about to run
        different programs: where its function is, and what it runs and is passed (this
        process's arguments, as the user passed them; a static one by its type, as its repr
        may hold an address, which differs between processes)."""
        file, line = staged.location
        static = self._static_positions(len(args))
        passed = [f"a static {type(a).__name__}" if i in static else describe_arg(a) for i, a in enumerate(args)]
        passed += [f"{k}={describe_arg(v)}" for k, v in sorted(kwargs.items())]
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
        results = executable.execute(shards)
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
        call = self._split(args, devices_needed=False)
        call = dataclasses.replace(call, size=replica_count(self.devices, call.size))
        staged = self._staged(call, kwargs)
        self._out_axes(staged)   # an out_axes that does not fit the results is an error here too
        if replicas_needed(staged.closed.jaxpr) > 1:
            return Lowered(lower(self._with_inner_pmaps(staged, call, args, kwargs)[0]))
        return Lowered(self._text(staged, call.size, donated_leaves(staged, args, self.donate_argnums)))


class ReplicatedProgram:
    """A jaxpr with pmaps inside (jit of a pmap, nested pmaps) compiled as one module over
    the replicas its pmaps need (`replicas_needed`), on the first that many of `devices`.
    Outside its pmaps every replica computes the same, so each is given every input whole,
    and the results are replica 0's."""

    def __init__(self, closed: ClosedJaxpr, devices: list):
        replicas = replicas_needed(closed.jaxpr)
        if replicas > len(devices):
            raise StagingError(f"the pmaps in this function need {replicas} devices together, "
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
                                           for x, v in zip(inputs, jaxpr.constvars + jaxpr.invars)])
        return [np.zeros(v.aval.shape, dtypes.float0) if v.aval.dtype == dtypes.float0 else
                Array(per_replica[0], tuple(v.aval.shape), np.dtype(v.aval.dtype), self.executable.devices[0])
                for per_replica, v in zip(results, jaxpr.outvars)]


def _with_axis(shape: tuple, axis: int, size: int) -> tuple:
    axis %= len(shape) + 1
    return tuple(shape[:axis]) + (size,) + tuple(shape[axis:])


@api_boundary
def pmap(fn=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         donate_argnums=()):
    """`fn` run on several devices at once, each on its slice of the mapped arguments
    (jax.pmap); usable as a decorator, bare or with arguments."""
    if fn is None:
        return lambda f: pmap(f, axis_name, in_axes=in_axes, out_axes=out_axes,
                              static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                              donate_argnums=donate_argnums)
    if not callable(fn):
        raise TypeError(f"pmap needs a function, got {type(fn).__name__}")
    specs = tree_util.tree_leaves(in_axes, is_leaf=is_axis)
    if not all(is_axis(a) for a in specs):
        raise StagingError(f"pmap in_axes must hold ints and None (one per positional argument), got {in_axes!r}",
                           "write in_axes like 0, None, or (None, 0, 0)")
    if not all(is_axis(a) for a in tree_util.tree_leaves(out_axes, is_leaf=is_axis)):
        raise StagingError(f"pmap out_axes must hold ints and None (a tree prefix of the results), got "
                           f"{out_axes!r}", "write out_axes like 0, None, or (0, None) for two results")
    try:
        hash(axis_name)
    except TypeError:
        raise StagingError(f"pmap axis_name must be hashable, got {axis_name!r}",
                           "name the axis with a string, e.g. axis_name='devices'") from None
    return Pmapped(fn, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, donate_argnums)
