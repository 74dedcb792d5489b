"""ClosedJaxpr → StableHLO as MLIR text, which jaxlib compiles (`s2s_runtime/xla.py`).

Readable like the Python emitter's output: one op per line, SSA names derived from the
jaxpr's variable names (`%h`, `%h_1`), and `loc("file.py":LINE:COL)` on every op from the
equation's source info, so XLA's HLO metadata points at the user's lines. Constants of the
jaxpr become leading parameters of `@main` (the module stays small however big they are).

Each primitive has a rule in `stablehlo_rules`:

    rule(ctx, eqn, *operands: str) -> list[str]    (the SSA names of the results)

NumPy-style implicit broadcasting is handled here, once: operands of the primitives in
`BROADCASTING` are broadcast to the equation's output shape before their rule runs.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Literal, ShapedArray, Var, host_objects
from s2s.errors import S2SError, ShapeError, UnsupportedFunctionError
from s2s.passes.inline import inline_calls
from s2s_runtime.xla import Executable, hlo_text

stablehlo_rules: dict = {}
BROADCASTING: set = set()   # primitives whose operands broadcast NumPy-style
# primitive -> replicas(eqn): how many XLA replicas an equation runs on (a pmap's size
# times what its body needs); equations of other primitives need what their bodies do.
replica_rules: dict = {}


def register(primitive, rule, broadcasting: bool = False, replicas=None) -> None:
    stablehlo_rules[primitive] = rule
    if broadcasting:
        BROADCASTING.add(primitive)
    if replicas is not None:
        replica_rules[primitive] = replicas


def _bodies(value) -> list:
    """The jaxprs an equation parameter holds (a loop body, a tuple of cond branches)."""
    if isinstance(value, ClosedJaxpr):
        return [value.jaxpr]
    if isinstance(value, (tuple, list)):
        return [jaxpr for item in value for jaxpr in _bodies(item)]
    return []


def replicas_needed(jaxpr) -> int:
    """How many replicas a module computing `jaxpr` runs on: 1, or for each pmap in it its
    size times what its body needs, the largest of those (pmaps one after another share
    the replicas; a nested one multiplies them, as in JAX)."""
    counts = [1]
    for eqn in jaxpr.eqns:
        rule = replica_rules.get(eqn.primitive)
        if rule is not None:
            counts.append(rule(eqn))
        else:
            counts += [replicas_needed(body) for value in eqn.params.values() for body in _bodies(value)]
    return max(counts)


# The state `stablehlo.rng_bit_generator` takes (THREE_FRY: a 64-bit key, then a 64-bit
# counter of the words drawn), one input of a lowered module per generator its code draws
# from, seeded on each call.
RNG_STATE_DTYPE = np.dtype(np.uint64)
RNG_STATE_AVAL = ShapedArray((2,), RNG_STATE_DTYPE)
RNG_STATE_TYPE = "tensor<2xui64>"

_ELEMENT = {"b": None, "f": "f", "i": "i", "u": "ui", "c": "complex"}


def element_type(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype in (dtypes.bool_, dtypes.float0):   # float0 (no data) travels as bool zeros
        return "i1"
    if dtype.kind == "c":
        return f"complex<f{dtype.itemsize * 4}>"
    return f"{_ELEMENT[dtype.kind]}{dtype.itemsize * 8}"


# The most bytes an array can have: NumPy's limit (np.intp), and where XLA's size
# arithmetic overflows too. XLA aborts the whole process on such a shape, so none reaches it.
MAX_ARRAY_BYTES = np.iinfo(np.intp).max


def tensor_type(aval) -> str:
    """The MLIR type of `aval`, which must be an array that can exist: every shape handed
    to XLA is written by this function, so it refuses one too big for memory to address
    with the error NumPy raises for it (a ValueError), where XLA would abort the process."""
    shape = aval.shape
    if math.prod(filter(None, shape)) * max(np.dtype(aval.dtype).itemsize, 1) > MAX_ARRAY_BYTES:
        raise ShapeError(f"array is too big: shape {tuple(shape)} of {np.dtype(aval.dtype).name} holds more "
                         "bytes than any memory can address (NumPy raises the same ValueError)",
                         "check how the shape is computed; an array this size cannot be made")
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{element_type(aval.dtype)}>"


def scalar_text(value, dtype) -> str:
    """An exact MLIR literal for one element: hex bits for floats, decimal for ints."""
    dtype = np.dtype(dtype)
    if dtype == dtypes.float0:
        return "false"
    if dtype == dtypes.bool_:
        return "true" if bool(value) else "false"
    if dtype.kind in "iu":
        integer, bounds = int(value), np.iinfo(dtype)
        if not bounds.min <= integer <= bounds.max:
            raise ShapeError(f"the integer {integer} does not fit {dtype.name}, and XLA has no "
                             "larger integers (Python's are unbounded)",
                             "compute numbers this large outside the jitted function, or as floats")
        return str(integer)
    if dtype.kind == "f":
        bits = np.asarray(value, dtype).view(f"u{dtype.itemsize}").item()
        return f"0x{bits:0{dtype.itemsize * 2}X}"
    if dtype.kind == "c":   # (real, imaginary), each exact like a float
        number, part = np.asarray(value, dtype), np.dtype(f"f{dtype.itemsize // 2}")
        return f"({scalar_text(number.real, part)}, {scalar_text(number.imag, part)})"
    raise UnsupportedFunctionError(f"constants of dtype {dtype} cannot be lowered to StableHLO yet")


def path_inside(path: str, root: str | None) -> str:
    """`path` relative to `root` ('/'-separated) when it lies inside it; else unchanged."""
    if root is None or not os.path.isabs(path):
        return path
    relative = os.path.relpath(path, root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return path
    return relative.replace(os.sep, "/")


def _location(info, root: str | None = None) -> str:
    """` loc("file":line:col)`, the file relative to `root` when it lies inside it."""
    if not info.line:
        return ""
    name = path_inside(info.file, root).replace("\\", "\\\\").replace('"', '\\"')
    return f' loc("{name}":{info.line}:{info.col})'


class LoweringContext:
    """Collects the ops of one function body."""

    def __init__(self, root: str | None = None, replica_axes: tuple = (), replicas: int = 1):
        self.root = root   # source files inside it are located relative to it
        # The named axes mapped over the module's replicas ((name, size), ...), outermost
        # first: the pmaps around the ops being lowered. Collectives over them lower to
        # XLA's cross-replica ops; others cannot lower. `replicas`: the module's count.
        self.replica_axes = tuple(replica_axes)
        self.replicas = replicas
        self.lines: list[str] = []
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}
        self.location = ""
        # The generator state of each host object draws read (`core.HostObject`), as the
        # ops being lowered see it: an argument of @main (`RNG_STATE_TYPE`), or in a
        # region the state it is given (a loop's carry, a state a branch captures); each
        # draw replaces it with the state after it (`random_bits`). A region sees only the
        # states it threads (`drawn_in`), so a draw never reuses numbers an outer op drew.
        self.host_states: dict = {}
        self.host_callbacks = 0   # how many ops call back into Python: the next one's index

    def fresh(self, hint: str | None = None) -> str:
        base = re.sub(r"\W", "_", hint) if hint else "v"
        if base[0].isdigit():
            base = "v" + base
        name, i = base, self._next.get(base, 0)
        while name in self._taken:
            i += 1
            name = f"{base}_{i}"
        self._next[base] = i
        self._taken.add(name)
        return f"%{name}"

    def op(self, text: str, hint: str | None = None, results: int = 1) -> str:
        """Appends `%name = text` with the current location; returns %name (an op with
        several results is written `%name:N = ...` and its results read `%name#i`)."""
        name = self.fresh(hint)
        self.lines.append(f"{name}{f':{results}' if results != 1 else ''} = {text}{self.location}")
        return name

    def constant(self, value, dtype, shape=()) -> str:
        scalar = self.op(f"stablehlo.constant dense<{scalar_text(value, dtype)}> : "
                         f"{tensor_type(ShapedArray((), dtype))}", "c")
        return self.broadcast(scalar, ShapedArray((), dtype), tuple(shape)) if shape else scalar

    def array_constant(self, value, aval: ShapedArray) -> str:
        """`value`, an array of `aval`, written into the module (as its bytes, exactly)."""
        data = np.ascontiguousarray(value, device_dtype(aval.dtype))
        data = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes().hex().upper()
        return self.op(f'stablehlo.constant dense<"0x{data}"> : {tensor_type(aval)}', "c")

    def broadcast(self, name: str, aval: ShapedArray, shape: tuple[int, ...]) -> str:
        """NumPy broadcasting of `name` (of `aval`) to `shape`, as one broadcast_in_dim."""
        shape = tuple(shape)
        if aval.shape == shape:
            return name
        lead = len(shape) - len(aval.shape)
        dims = list(range(lead, len(shape)))
        source = name
        if any(d == 1 and shape[lead + i] != 1 for i, d in enumerate(aval.shape)):
            kept = [i for i, d in enumerate(aval.shape) if not (d == 1 and shape[lead + i] != 1)]
            squeezed = ShapedArray([aval.shape[i] for i in kept], aval.dtype)
            source = self.op(f"stablehlo.reshape {name} : ({tensor_type(aval)}) -> {tensor_type(squeezed)}")
            dims = [lead + i for i in kept]
            aval = squeezed
        target = ShapedArray(shape, aval.dtype)
        return self.op(f"stablehlo.broadcast_in_dim {source}, dims = [{', '.join(map(str, dims))}] : "
                       f"({tensor_type(aval)}) -> {tensor_type(target)}")


def donation_aliases(closed: ClosedJaxpr, donated) -> dict[int, int]:
    """{input index: output index} pairing each donated input (flags per jaxpr input) with
    the first output of the same shape and dtype not taken yet; unpaired ones are left out."""
    outputs = [v.aval.strip_weak_type() for v in closed.jaxpr.outvars]
    taken: set[int] = set()
    aliases = {}
    for i, (v, flag) in enumerate(zip(closed.jaxpr.invars, donated)):
        if not flag:
            continue
        aval = v.aval.strip_weak_type()
        k = next((k for k, out in enumerate(outputs) if k not in taken and out == aval), None)
        if k is not None:
            taken.add(k)
            aliases[i] = k
    return aliases


def lower(closed: ClosedJaxpr, name: str = "main", aliases: dict[int, int] | None = None,
          root: str | None = None, replica_axes: tuple = ()) -> str:
    """The StableHLO module of `closed` as MLIR text; `@main` takes (consts..., args...).

    `aliases` ({input index: output index}, see `donation_aliases`) lets XLA write those
    outputs into the donated inputs' buffers (`tf.aliasing_output`). `root`: a folder whose
    files the `loc(...)`s name relative to it, so the text is the same in any checkout.
    `replica_axes` ((name, size), ...): the module is one SPMD program run on that many
    replicas (`mhlo.num_replicas`), and collectives over those names run across them;
    times what the pmaps inside `closed` need (`replicas_needed`).
    """
    given = closed
    closed = inline_calls(closed)
    jaxpr = closed.jaxpr
    replicas = math.prod(size for _, size in replica_axes) * replicas_needed(jaxpr)
    ctx = LoweringContext(root, replica_axes, replicas)
    env: dict[Var, str] = {}
    params = []
    aliases = aliases or {}
    for i, v in enumerate(list(given.jaxpr.constvars) + list(jaxpr.invars)):
        env[v] = ctx.fresh(v.hint or "arg")
        alias = aliases.get(i - len(given.jaxpr.constvars))
        attribute = f" {{tf.aliasing_output = {alias} : i32}}" if alias is not None else ""
        params.append(f"{env[v]}: {tensor_type(v.aval)}{attribute}")
    _bind_inlined_constants(ctx, given, closed, env)

    drawn = host_objects(jaxpr)
    for obj in drawn:   # (after the jaxpr's own inputs: `device_dtypes`)
        ctx.host_states[obj] = ctx.fresh(f"{obj.name}_state")
        params.append(f"{ctx.host_states[obj]}: {RNG_STATE_TYPE}")
    if replica_axes and drawn:   # every device of a pmap is given the same seeds: it draws its own numbers
        states_per_replica(ctx, drawn, ctx.op("stablehlo.replica_id : tensor<ui32>", "replica"), "tensor<ui32>")
    results = lower_jaxpr(ctx, jaxpr, [env[v] for v in jaxpr.invars], env)
    out_types = [tensor_type(v.aval) for v in jaxpr.outvars]
    body = "\n".join(f"    {line}" for line in ctx.lines)
    ret = f"    return {', '.join(results)} : {', '.join(out_types)}" if results else "    return"
    return (f"module @{name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"  func.func public @main({', '.join(params)}) -> ({', '.join(out_types)}) {{\n"
            f"{body}\n{ret}\n  }}\n}}\n")


def _bind_inlined_constants(ctx: LoweringContext, given: ClosedJaxpr, inlined: ClosedJaxpr, env: dict) -> None:
    """Points each constant of `inlined` (`given` with its calls inlined) at the parameter
    `given`'s caller passes it in: inlining lists constants in the order its equations
    first read them, not `given`'s, and a call's body may bring constants of its own
    (a custom_jvp function reading a global array), which no caller passes: those are
    written into the module."""
    if inlined is given:
        return
    parameter = {}
    for var, value in zip(given.jaxpr.constvars, given.consts):
        parameter.setdefault(id(value), env[var])
    for var, value in zip(inlined.jaxpr.constvars, inlined.consts):
        env[var] = parameter.get(id(value)) or ctx.array_constant(value, var.aval)


def lower_jaxpr(ctx: LoweringContext, jaxpr, in_names: list[str], env: dict | None = None) -> list[str]:
    """Appends the ops of `jaxpr`'s equations to `ctx` (inputs bound to `in_names`, and
    `env` for anything else already lowered); returns the names of its outputs. Control
    flow rules call it for their bodies, inside regions."""
    env = {} if env is None else env
    env.update(zip(jaxpr.invars, in_names))

    def read(v):
        if isinstance(v, Literal):
            return ctx.constant(v.value, v.aval.dtype)
        return env[v]

    for eqn in jaxpr.eqns:
        rule = stablehlo_rules.get(eqn.primitive)
        if rule is None:
            raise UnsupportedFunctionError(f"{eqn.primitive.name} has no StableHLO lowering yet",
                                           "use backend='python' for this function")
        saved, ctx.location = ctx.location, _location(eqn.source_info, ctx.root)
        try:
            operands = [read(v) for v in eqn.invars]
            if eqn.primitive in BROADCASTING:
                shape = eqn.outvars[0].aval.shape
                operands = [ctx.broadcast(o, v.aval.strip_weak_type(), shape)
                            for o, v in zip(operands, eqn.invars)]
            outs = rule(ctx, eqn, *operands)
        except S2SError as error:   # (an array too big to exist, say): told at the user's line
            if eqn.source_info.line:
                error.at(eqn.source_info)
            raise
        for v, out in zip(eqn.outvars, outs):
            env[v] = out
        ctx.location = saved
    return [read(v) for v in jaxpr.outvars]


def _region_lines(ctx: LoweringContext, build, out_types: list[str], states: dict | None = None) -> list[str]:
    """The lines of one region: the ops `build()` appends, then `stablehlo.return` of the
    names it returns. `states` ({generator: its state's name}): the generator states its
    draws start from, the only ones it sees (`LoweringContext.host_states`); `build`
    returns those it ends with among its names where the region passes them on."""
    outer, ctx.lines = ctx.lines, []
    outer_states, ctx.host_states = ctx.host_states, dict(states or {})
    try:
        outs = build()
    finally:
        ctx.host_states = outer_states
    ctx.lines.append(f"stablehlo.return {', '.join(outs)} : {', '.join(out_types)}" if outs
                     else "stablehlo.return")
    lines, ctx.lines = ctx.lines, outer
    return ["  " + line for line in lines]


def region(ctx: LoweringContext, jaxpr, in_names: list[str], drawn: list = ()) -> list[str]:
    """The lines of one region: `jaxpr`'s ops on `in_names`, then `stablehlo.return` of
    its outputs and, after them, the states of the generators in `drawn` (`drawn_in`),
    which it reads from the enclosing code as it stands now (one branch of a case)."""
    states = {obj: ctx.host_states[obj] for obj in drawn}
    return _region_lines(ctx, lambda: lower_jaxpr(ctx, jaxpr, in_names) + [ctx.host_states[obj] for obj in drawn],
                         [tensor_type(v.aval) for v in jaxpr.outvars] + [RNG_STATE_TYPE] * len(drawn), states)


def drawn_in(*jaxprs) -> list:
    """The generators (`core.HostObject`) the equations of `jaxprs` draw from, those of
    the jaxprs they run too, in the order of their first use: a region lowered from them
    is given these generators' states and passes on the states it ends with, so each run
    of it draws anew and the ops after it draw past its numbers."""
    return list(dict.fromkeys(obj for jaxpr in jaxprs for obj in host_objects(jaxpr)))


def while_op(ctx: LoweringContext, init: list[str], avals, hints, condition, body, drawn: list = ()) -> list[str]:
    """A `stablehlo.while` over carries `init` (of `avals`): `condition(carry_names)` and
    `body(carry_names)` append their region's ops and return the names they produce.
    Returns the names of the loop's results.

    `drawn` (`drawn_in` of the condition and body): the generators they draw from, whose
    states the loop carries after its own carries, so each step draws anew; the states
    it ends with replace them in `ctx.host_states`. A condition's region cannot pass a
    state on, so a condition that draws is lowered again at the start of each step and
    after the loop, on the same state (drawing the same numbers), only to carry the state
    past its draws."""
    own = len(init)
    carry = [ctx.fresh(h or "carry") for h in hints] + [ctx.fresh(f"{obj.name}_state") for obj in drawn]
    carried = dict(zip(drawn, carry[own:]))
    types = [tensor_type(a) for a in avals] + [RNG_STATE_TYPE] * len(drawn)
    condition_draws = []

    def test():
        outs = condition(carry[:own])
        condition_draws.append(ctx.host_states != carried)
        return outs

    def step():
        if condition_draws[0]:
            condition(carry[:own])
        return body(carry[:own]) + [ctx.host_states[obj] for obj in drawn]
    test_lines = _region_lines(ctx, test, ["tensor<i1>"], carried)
    step_lines = _region_lines(ctx, step, types, carried)
    name = ctx.fresh("while")
    count = len(carry)
    bindings = ", ".join(f"{c} = {i}" for c, i in zip(carry, [*init, *(ctx.host_states[obj] for obj in drawn)]))
    ctx.lines.append(f"{name}{f':{count}' if count > 1 else ''} = stablehlo.while({bindings}) : "
                     f"{', '.join(types)}")
    ctx.lines += [" cond {", *test_lines, " } do {", *step_lines, f" }}{ctx.location}"]
    results = results_of(name, count)
    ctx.host_states.update(zip(drawn, results[own:]))
    if condition_draws[0]:
        condition(results[:own])
    return results[:own]


def random_bits(ctx: LoweringContext, source, shape: tuple, uint) -> str:
    """`shape` random bits of the unsigned dtype `uint` drawn from `source`'s (a
    `core.HostObject`) state, which the state after them replaces."""
    state = ctx.host_states[source]
    bits_type = tensor_type(ShapedArray(shape, uint))
    name = ctx.op(f'"stablehlo.rng_bit_generator"({state}) {{rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>}}'
                  f" : ({RNG_STATE_TYPE}) -> ({RNG_STATE_TYPE}, {bits_type})", "rng", results=2)
    ctx.host_states[source] = f"{name}#0"
    return f"{name}#1"


def states_per_replica(ctx: LoweringContext, drawn: list, index: str, index_type: str) -> dict:
    """Gives each generator in `drawn` a state of its own on each replica, so that every
    replica (a pmap's device) draws its own numbers from the seeds they all get: a new
    THREE_FRY key and counter drawn from its state, the key (the state's first word; the
    second counts the words drawn) xor this replica's `index` (a scalar of `index_type`).
    Returns the states the code around the replicas continues from, past that draw: the
    same on every replica, and apart from what the replicas draw."""
    if not drawn:
        return {}
    wide = ctx.op(f"stablehlo.convert {index} : ({index_type}) -> tensor<ui64>")
    lane = ctx.op(f"stablehlo.reshape {wide} : (tensor<ui64>) -> tensor<1xui64>")
    in_key = ctx.op(f"stablehlo.concatenate {lane}, {ctx.constant(0, RNG_STATE_DTYPE, (1,))}, dim = 0 : "
                    f"(tensor<1xui64>, tensor<1xui64>) -> {RNG_STATE_TYPE}")
    continuing = {}
    for obj in drawn:
        fresh = random_bits(ctx, obj, RNG_STATE_AVAL.shape, RNG_STATE_DTYPE)
        continuing[obj] = ctx.host_states[obj]
        ctx.host_states[obj] = ctx.op(f"stablehlo.xor {fresh}, {in_key} : {RNG_STATE_TYPE}", f"{obj.name}_state")
    return continuing


def results_of(name: str, count: int) -> list[str]:
    """The SSA names of an op's results: `%w` for one, `%w#0, %w#1, ...` for several."""
    return [name] if count == 1 else [f"{name}#{i}" for i in range(count)]


def out_type(eqn, i: int = 0) -> str:
    return tensor_type(eqn.outvars[i].aval)


def hint(eqn, i: int = 0) -> str | None:
    return eqn.outvars[i].hint


# ---------------------------------------------------------------------------------------
# What jit's and pmap's `.lower()` return


def device_dtype(dtype) -> np.dtype:
    """What an input of `dtype` is sent to XLA as: float0 (no data) as bool."""
    return np.dtype(bool) if dtype == dtypes.float0 else np.dtype(dtype)


def device_dtypes(jaxpr) -> list[np.dtype]:
    """What the inputs of `jaxpr`'s lowering (its consts, its arguments, then the state of
    each generator it draws from) are sent as."""
    return ([device_dtype(v.aval.dtype) for v in jaxpr.constvars + jaxpr.invars]
            + [RNG_STATE_DTYPE] * len(host_objects(jaxpr)))


class Lowered:
    """A function lowered to StableHLO (jit's and pmap's `.lower()`): `.as_text()`,
    `.as_hlo_text()`, and for jit's, whose inputs' dtypes and device it knows, `.compile()`."""

    def __init__(self, text: str, in_dtypes: list[np.dtype] | None = None, device=None):
        self.text = text
        self.in_dtypes = in_dtypes
        self.device = device

    def as_text(self) -> str:
        return self.text

    def as_hlo_text(self) -> str:
        return hlo_text(self.text)

    def compile(self) -> "Compiled":
        if self.in_dtypes is None:
            raise S2SError("compile() of a pmap's lowering is not supported: it runs over several devices",
                           "call the pmapped function, which compiles it")
        return Compiled(Executable(self.text, self.in_dtypes, self.device))


class Compiled:
    """A compiled executable: its optimized HLO and XLA's memory and cost figures."""

    def __init__(self, executable):
        self.executable = executable

    def as_hlo_text(self) -> str:
        return self.executable.optimized_hlo_text()

    def memory_analysis(self):
        return self.executable.memory_analysis()

    def cost_analysis(self):
        return self.executable.cost_analysis()
