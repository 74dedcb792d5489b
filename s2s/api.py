"""The user-facing API: make_jaxpr, emit_python, jit, eval_jaxpr.

Every entry point takes and returns pytrees. Errors that are the user's to fix surface as
one clean compiler-style message, without s2s's internal frames.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import threading
import warnings
import weakref

import numpy as np

from s2s import config, dtypes, tree as tree_util
from s2s.core import ClosedJaxpr, eval_jaxpr as _eval_jaxpr
from s2s.emit.python import EmitOptions, EmittedModule, Signature, emit_module, load_source
from s2s.errors import S2SError
from s2s.frontend import Staged, reraise_clean, stage
from s2s.frontend.args import describe_arg
from s2s.staging import Tracer, current_builder, inline_jaxpr, paused_gc
from s2s.tree import leaf_paths
from s2s_runtime.xla import Array, dispatched_leaves, dispatcher, is_refused_call, jax_x64_setting

tree_util.register_array_type(Array)


def staged_or_error(fn, args, kwargs, static_argnums=(), static_argnames=(),
                    dynamic_argnums=()) -> Staged:
    """Stages `fn`; a user mistake is raised as one clean compiler-style error."""
    try:
        return stage(fn, args, kwargs, static_argnums=static_argnums,
                     static_argnames=static_argnames, dynamic_argnums=dynamic_argnums)
    except S2SError as e:
        reraise_clean(e)


def make_jaxpr(fn, static_argnums=(), static_argnames=(), dynamic_argnums=()):
    """`make_jaxpr(f)(*args)` → the ClosedJaxpr s2s stages `f` into for those arguments."""
    @functools.wraps(fn)
    def make(*args, **kwargs) -> ClosedJaxpr:
        return staged_or_error(fn, args, kwargs, static_argnums, static_argnames, dynamic_argnums).closed
    return make


def eval_jaxpr(closed: ClosedJaxpr, *args) -> list:
    """Runs a ClosedJaxpr with the NumPy reference implementations; returns flat outputs."""
    return _eval_jaxpr(closed, *args)


# ---------------------------------------------------------------------------------------
# Emission


def _path_expr(param: str, path: tuple) -> str | None:
    """`params['W1']`, `layers[0]`, `state.h`; None when a step cannot be written plainly."""
    text = param
    for node_type, key in path:
        if node_type in (dict, list, tuple):
            text += f"[{key!r}]"
        elif hasattr(node_type, "_fields") or dataclasses.is_dataclass(node_type):
            text += f".{key}"
        else:
            return None
    return text


def _output_builder(out_tree: tree_util.PyTreeDef):
    """Writes the return expression for tuple/list/dict/None trees; None for other trees."""
    def expressible(node) -> bool:
        return node.is_leaf or (node.node_type in (tuple, list, dict, type(None))
                                and all(expressible(c) for c in node.children))
    if not expressible(out_tree):
        return None

    def build(node, names):
        if node.is_leaf:
            return next(names)
        parts = [build(c, names) for c in node.children]
        if node.node_type is tuple:
            return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        if node.node_type is list:
            return f"[{', '.join(parts)}]"
        if node.node_type is dict:
            return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(node.aux, parts)) + "}"
        return "None"

    def render(names: list[str]) -> str:
        text = build(out_tree, iter(names))
        return text[1:-1] if out_tree.node_type is tuple and len(out_tree.children) > 1 else text
    return render


def signature_of(staged: Staged) -> Signature:
    """The emitted function's parameters: those of the user's function with staged leaves.

    A parameter whose leaves cannot be reached with plain indexing or attributes (a custom
    pytree node) is passed as the flat list of its staged leaves, `<name>_leaves`.
    """
    paths = leaf_paths(staged.in_tree)
    per_param: dict[int, list[int]] = {}
    for leaf_index, (path, staged_leaf) in enumerate(zip(paths, staged.staged_mask)):
        if staged_leaf:
            per_param.setdefault(path[0][1], []).append(leaf_index)
    params, input_exprs, hints = [], [], []
    for param_index, leaf_indices in per_param.items():
        name = staged.param_names[param_index]
        exprs = [_path_expr(name, paths[i][1:]) for i in leaf_indices]
        if any(e is None for e in exprs):
            name = f"{name}_leaves"
            exprs = [f"{name}[{k}]" for k in range(len(leaf_indices))]
        params.append(name)
        input_exprs.extend(exprs)
        hints.extend(v.hint for v in staged.closed.jaxpr.invars[len(hints):len(hints) + len(exprs)])
    return Signature(params, input_exprs, hints, _output_builder(staged.out_tree))


def _header(staged: Staged, name: str) -> str:
    filename, line = staged.location
    shown = os.path.basename(filename)  # never the checkout's absolute path
    args = ", ".join(f"{n}: {describe_arg(v)}" for n, v in zip(staged.param_names, staged.example_args))
    lines = [f"{name}: generated by s2s from `{staged.description}` ({shown}:{line}).",
             "",
             f"Specialized for ({args}).",
             ]
    if _output_builder(staged.out_tree) is None:
        lines.append(f"Returns the flat leaves of {staged.out_tree}.")
    lines.append("Do not edit: regenerate with `s2s emit`.")
    return "\n".join(lines)


def emitted_module(staged: Staged, name: str | None = None,
                   options: EmitOptions | None = None) -> EmittedModule:
    name = name or staged.name
    if not name.isidentifier():
        name = "f"
    with paused_gc():
        return emit_module(staged.closed, name, signature_of(staged), _header(staged, name), options)


def emit_python(fn, *example_args, static_argnums=(), static_argnames=(), dynamic_argnums=(),
                name: str | None = None, source_comments: bool = True, **example_kwargs) -> str:
    """The source of a standalone module computing `fn` for arguments like the examples.

    Example arguments may be arrays, `s2s.ShapeDtype`s, or static Python values. Large
    constants are embedded compactly (base64); `s2s emit` writes them to a sidecar .npz.
    """
    staged = staged_or_error(fn, example_args, example_kwargs, static_argnums, static_argnames,
                     dynamic_argnums)
    try:
        return emitted_module(staged, name, EmitOptions(source_comments=source_comments)).source
    except S2SError as e:
        reraise_clean(e)


# ---------------------------------------------------------------------------------------
# jit


BACKENDS = ("xla", "python")

# While an XLA call runs with jax's x64 set to s2s's (see Jitted.__call__), `.value` is what
# the caller's thread had before: the user's code sees it again while it is staged.
_callers_jax_x64 = threading.local()
_NO_CALLER = object()


class Jitted:
    """A function compiled for each kind of arguments it is called with.

    backend="xla" lowers the jaxpr to StableHLO and runs it through jaxlib on `device`,
    returning `s2s.Array`s; backend="python" runs the emitted NumPy module. What is compiled
    hangs off the staging-cache entry (see `s2s.frontend`), so it lives as long as the
    user's function and is shared by every jit of the same function.
    """

    def __init__(self, fn, static_argnums=(), static_argnames=(), dynamic_argnums=(),
                 donate_argnums=(), device=None, backend: str = "xla"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(map(repr, BACKENDS))}")
        donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        if backend == "python" and (donate_argnums or device is not None):
            raise ValueError("donate_argnums and device need backend='xla': the Python backend "
                             "runs NumPy on the host")
        static = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
        if static & set(donate_argnums):
            raise ValueError(f"argument(s) {sorted(static & set(donate_argnums))} are both static "
                             "and donated; only arrays can be donated")
        if device is not None and not (hasattr(device, "platform") and hasattr(device, "id")):
            raise TypeError(f"device must be one of s2s.devices(), not {device!r}")
        self.fn = fn
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self.dynamic_argnums = dynamic_argnums
        self.donate_argnums = donate_argnums
        self.device = device
        self.backend = backend
        # Calls whose positional arguments are all arrays skip the staging-cache lookup:
        # (shapes and dtypes, config) -> a function of the arguments.
        self._fast: dict[tuple, object] = {}
        # On the XLA backend, jaxlib's C++ dispatcher makes the calls it has seen (see
        # s2s_runtime.xla.dispatcher): one per configuration, made when first called.
        self._dispatch, self._dispatch_config = None, None
        # The positions the dispatcher keys by value: none when any is counted from the end
        # (the dispatcher takes them as given); s2s still keeps those static.
        self._dispatch_static = tuple(sorted(static)) if all(i >= 0 for i in static) else ()
        self._dispatch_static_names = (static_argnames,) if isinstance(static_argnames, str) \
            else tuple(static_argnames)
        functools.update_wrapper(self, fn, updated=())

    def __getstate__(self):
        """A copy makes its own dispatcher (this one reaches back to this object)."""
        return {**self.__dict__, "_dispatch": None, "_dispatch_config": None}

    def _staged(self, args, kwargs) -> Staged:
        return staged_or_error(self.fn, args, kwargs, self.static_argnums, self.static_argnames,
                               self.dynamic_argnums)

    def __call__(self, *args, **kwargs):
        if self.backend == "python":
            return self._python_call(args, kwargs)
        if self._dispatch_config is not config.cache_key():
            self._new_dispatcher()
        jax_x64 = jax_x64_setting()
        if jax_x64 is not None:   # jax is loaded: type this call by s2s's x64, not jax's
            previous = jax_x64.swap_local(config.values.enable_x64)
            outer, _callers_jax_x64.value = getattr(_callers_jax_x64, "value", _NO_CALLER), previous
        try:
            try:
                return self._dispatch(*args, **kwargs)
            except ValueError as error:
                if not is_refused_call(error):
                    raise
            return self._xla_call(args, kwargs)[0]   # in Python (which says what is wrong, if anything)
        except S2SError as error:   # the user's to fix: shown without the frames it came through
            raise error.with_traceback(None)
        finally:
            if jax_x64 is not None:
                jax_x64.set_local(previous)
                _callers_jax_x64.value = outer

    def _new_dispatcher(self) -> None:
        # The dispatcher reaches this Jitted through a weak reference: it is this object's,
        # and a cycle through it would outlive the user's function.
        this = weakref.ref(self)
        self._dispatch = dispatcher(
            self.__name__ if isinstance(getattr(self, "__name__", None), str) else "jitted",
            lambda *args, **kwargs: this()._xla_call(args, kwargs)[0],
            lambda *args, **kwargs: (*this()._xla_call(args, kwargs), False), self._dispatch_static,
            self._dispatch_static_names)
        self._dispatch_config = config.cache_key()

    def _xla_call(self, args, kwargs):
        """A call made in Python: (the result, what the dispatcher needs to make the next
        call like it by itself, or None). The dispatcher keys static arguments by value and
        type, but not the types inside a tuple, where s2s tells (1, 2) from (1.0, 2.0):
        calls with a static tuple stay in Python."""
        statics = [a for i, a in enumerate(args) if i in self._dispatch_static] + \
            [v for k, v in kwargs.items() if k in self._dispatch_static_names]
        call = None if any(isinstance(a, tuple) for a in statics) else (args, kwargs)
        fast, run = self._seen_kind(args, kwargs)
        if run is not None:
            return run(fast[1], call)
        if _staging_with(args, kwargs):
            return self._inlined(args, kwargs), None
        staged = self._staged_as_called(args, kwargs)
        run = self._xla_runner(staged, args)
        if fast is not None and len(staged.closed.jaxpr.invars) == len(fast[1]):
            self._fast[fast[0]] = run
        return run(staged.flat_inputs(args, kwargs), call)

    def _seen_kind(self, args, kwargs):
        """(the fast-path key and leaves of a call whose positional arguments are all arrays,
        else None; the runner made for that key, or None)."""
        fast = None if (kwargs or self.static_argnums or self.static_argnames) else _array_signature(args)
        return fast, (self._fast.get(fast[0]) if fast is not None else None)

    def _staged_as_called(self, args, kwargs) -> Staged:
        """Staged with jax's x64 as the caller had it, not as the call set it: the user's
        code runs while it is staged, and may call jax."""
        jax_x64 = jax_x64_setting()
        caller = getattr(_callers_jax_x64, "value", _NO_CALLER)
        if jax_x64 is None or caller is _NO_CALLER:
            return self._staged(args, kwargs)
        ours = jax_x64.swap_local(caller)
        try:
            return self._staged(args, kwargs)
        finally:
            jax_x64.set_local(ours)

    def _inlined(self, args, kwargs):
        """Called on staged values, inside a function being staged (`jit(f)` called in
        another jitted or differentiated function): its equations join that function's, as
        jax inlines a nested jit; the backend, device and donation are the outer call's."""
        staged = self._staged(args, kwargs)
        return staged.out_tree.unflatten(inline_jaxpr(staged.closed, staged.flat_inputs(args, kwargs)))

    def _python_call(self, args, kwargs):
        fast, run = self._seen_kind(args, kwargs)
        if run is not None:
            return run(fast[1])
        if _staging_with(args, kwargs):
            return self._inlined(args, kwargs)
        staged = self._staged(args, kwargs)
        run = _python_runner(staged)
        signature = signature_of(staged)
        if fast is not None and len(signature.params) == len(args) == len(fast[1]) and config.values.enable_x64:
            self._fast[fast[0]] = lambda a: run(*map(_host_value, a))
        # Without x64, 64-bit inputs run as the 32-bit types they were staged as.
        return run(*emitted_call_args(staged, signature, args, kwargs,
                                      canonicalize=not config.values.enable_x64))

    def _xla_runner(self, staged: Staged, args):
        """A function of (the jaxpr's inputs, the call's (args, kwargs), or None) that runs
        the executable: (the result, the dispatcher's fast path or None). There is none for
        donating calls (the dispatcher would not mark the donated Arrays) nor for outputs
        without data (float0 tangents of ints, made here as zeros)."""
        donated = _donated_leaves(staged, args, self.donate_argnums)
        device = self.device or devices()[0]
        compiled = staged.artifact(("xla", device.id, tuple(donated)),
                                   lambda: _compile_xla(staged, device, donated))
        executable, consts, out_tree = compiled.executable, compiled.consts, staged.out_tree
        float0_outputs = [i for i, v in enumerate(staged.closed.jaxpr.outvars) if v.aval.dtype == dtypes.float0]
        dispatchable = not compiled.donated and not float0_outputs
        static_argnums, static_argnames = self._dispatch_static, self._dispatch_static_names

        def run(flat, call):
            outs = executable.execute([*consts, *flat], compiled.donated)
            result = list(outs)
            for i in float0_outputs:
                result[i] = np.zeros(outs[i].shape, dtypes.float0)
            result = out_tree.unflatten(result)
            leaves = None
            if dispatchable and call is not None:
                leaves = dispatched_leaves(*call, static_argnums, static_argnames)
            if leaves is None:
                return result, None
            return result, executable.fast_path(leaves, flat, consts, result, outs)
        return run

    def lower(self, *args, **kwargs) -> "Lowered":
        """The StableHLO this function lowers to for these arguments (JAX's `.lower`)."""
        staged = self._staged(args, kwargs)
        return Lowered(_lowered_text(staged, _donated_leaves(staged, args, self.donate_argnums))[0],
                       staged, self.device)


@dataclasses.dataclass
class _XlaCompiled:
    executable: object
    donated: dict[int, str]    # executable parameter -> how errors name the donated argument
    consts: list               # the jaxpr's constants, on the device once (Arrays)


def _donated_leaves(staged: Staged, args, donate_argnums) -> dict[int, str]:
    """{jaxpr input index: "`params['W']` of update"} for the leaves of donated positional args."""
    if not donate_argnums:
        return {}
    ranges = tree_util.positional_leaf_ranges(args)
    wanted = {i for a in donate_argnums if -len(args) <= a < len(args) for i in ranges[a]}
    donated, invar = {}, 0
    for leaf_index, (path, staged_leaf) in enumerate(zip(leaf_paths(staged.in_tree), staged.staged_mask)):
        if not staged_leaf:
            continue
        if leaf_index in wanted:
            name = staged.param_names[path[0][1]]
            shown = _path_expr(name, path[1:]) or name
            donated[invar] = f"`{shown}` of {staged.name}"
        invar += 1
    return donated


def _lowered_text(staged: Staged, donated: dict[int, str]) -> tuple[str, dict[int, int]]:
    from s2s.emit.stablehlo import donation_aliases, lower
    invars = staged.closed.jaxpr.invars
    aliases = donation_aliases(staged.closed, [i in donated for i in range(len(invars))])
    unusable = [f"{invars[i].aval.str_short()} ({label})" for i, label in donated.items() if i not in aliases]
    if unusable:
        warnings.warn("Some donated buffers were not usable (no output has the same shape and "
                      f"dtype): {', '.join(unusable)}", UserWarning, stacklevel=4)
    try:
        return lower(staged.closed, aliases=aliases), aliases
    except S2SError as e:
        reraise_clean(e)


def _compile_xla(staged: Staged, device, donated: dict[int, str]) -> _XlaCompiled:
    from s2s_runtime.xla import Executable
    text, _ = _lowered_text(staged, donated)
    jaxpr = staged.closed.jaxpr
    executable = Executable(text, [_device_dtype(v.aval.dtype) for v in jaxpr.constvars + jaxpr.invars],
                            device)
    offset = len(jaxpr.constvars)
    consts = [executable.device_array(c, i) for i, c in enumerate(staged.closed.consts)]
    return _XlaCompiled(executable, {offset + i: label for i, label in donated.items()}, consts)


def _device_dtype(dtype) -> np.dtype:
    """What an input of `dtype` is sent to XLA as: float0 (no data) as bool."""
    return np.dtype(bool) if dtype == dtypes.float0 else dtype


def _python_runner(staged: Staged):
    """A function of the emitted module's arguments that runs it and builds the result."""
    def build():
        name = staged.name if staged.name.isidentifier() else "f"
        return getattr(load_source(emitted_module(staged, name).source, name), name)
    compiled = staged.artifact("python", build)
    out_tree = staged.out_tree
    if signature_of(staged).output_builder is not None:
        return compiled

    def run(*call_args):
        out = compiled(*call_args)
        return out_tree.unflatten(out if out_tree.num_leaves != 1 else [out])
    return run


def _staging_with(args, kwargs) -> bool:
    """Whether a call's arguments hold values staged by a function being staged now."""
    return current_builder() is not None and any(
        isinstance(leaf, Tracer) for leaf in tree_util.tree_leaves((args, kwargs)))


def _host_value(value):
    return np.asarray(value) if isinstance(value, Array) else value


def _array_signature(args) -> tuple | None:
    """((tree, (shape, dtype) per leaf, config), leaves) when every leaf of `args` is an
    array (NumPy or s2s), else None: the key of the jit fast path, which skips the
    staging-cache lookup (binding, per-leaf avals) for such calls."""
    signature = []
    for a in args:   # the common case, every argument one array, without flattening
        kind = type(a)
        if kind is not np.ndarray and kind is not Array:
            break
        signature.append((a.shape, a.dtype))
    else:
        return (None, tuple(signature), config.cache_key()), args
    leaves, treedef = tree_util.tree_flatten(args)
    signature = []
    for a in leaves:
        kind = type(a)
        if kind is not np.ndarray and kind is not Array:
            return None
        signature.append((a.shape, a.dtype))
    return (treedef, tuple(signature), config.cache_key()), leaves


class Lowered:
    """A function lowered to StableHLO: `.as_text()`, `.as_hlo_text()`, `.compile()`."""

    def __init__(self, text: str, staged: Staged, device=None):
        self.text = text
        self.staged = staged
        self.device = device

    def as_text(self) -> str:
        return self.text

    def as_hlo_text(self) -> str:
        from s2s_runtime.xla import hlo_text
        return hlo_text(self.text)

    def compile(self) -> "Compiled":
        from s2s_runtime.xla import Executable
        jaxpr = self.staged.closed.jaxpr
        return Compiled(Executable(self.text, [v.aval.dtype for v in jaxpr.constvars + jaxpr.invars],
                                   self.device))


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


def devices() -> list:
    """The devices XLA runs on (CPU; S2S_NUM_CPU_DEVICES sets how many, before first use)."""
    from s2s_runtime.xla import devices as runtime_devices
    return runtime_devices()


def device_count() -> int:
    return len(devices())


def local_device_count() -> int:
    """Devices of this process (all of them, until multi-process runs land)."""
    from s2s_runtime.xla import client
    return len(client().local_devices())


def process_index() -> int:
    from s2s_runtime.xla import process_index as runtime_process_index
    return runtime_process_index()


def process_count() -> int:
    """Processes in this run: 1 until multi-process start-up (jaxlib's distributed runtime) lands."""
    return 1


def emitted_call_args(staged: Staged, signature: Signature, args, kwargs,
                      canonicalize: bool = False) -> list:
    """The emitted function's arguments for a call of the user's function.

    With `canonicalize`, each staged array leaf is converted to the dtype it was staged
    as (what `enable_x64=False` needs: float64 inputs run as float32).
    """
    names, values = staged.param_names, staged.bind(args, kwargs)
    leaves, treedef = tree_util.tree_flatten(values)
    leaves = [_host_value(leaf) for leaf in leaves]
    values = treedef.unflatten(leaves)
    if canonicalize:
        staged_dtypes = iter(v.aval.dtype for v in staged.closed.jaxpr.invars)
        converted = []
        for leaf, staged_leaf in zip(leaves, staged.staged_mask):
            if staged_leaf:
                dtype = next(staged_dtypes)
                if isinstance(leaf, np.ndarray):
                    leaf = leaf.astype(dtype, copy=False)
            converted.append(leaf)
        leaves = converted
        values = treedef.unflatten(leaves)
    by_name = dict(zip(names, values))
    out = []
    for param in signature.params:
        if param in by_name:
            out.append(by_name[param])
            continue
        # `<name>_leaves`: the staged leaves of an argument that holds a custom pytree node.
        index = names.index(param[: -len("_leaves")])
        out.append([leaf for leaf, path, staged_leaf in zip(leaves, leaf_paths(treedef), staged.staged_mask)
                    if staged_leaf and path[0][1] == index])
    return out


def jit(fn=None, *, static_argnums=(), static_argnames=(), dynamic_argnums=(), donate_argnums=(),
        device=None, backend: str = "xla"):
    """`@s2s.jit` or `s2s.jit(f, static_argnums=..., donate_argnums=..., device=...)`.

    Donated positional arguments give their buffers to outputs of the same shape and
    dtype; an `s2s.Array` passed there is invalid after the call (DonatedBufferError).
    `device` (one of `s2s.devices()`) alone decides where the computation runs.
    """
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 dynamic_argnums=dynamic_argnums, donate_argnums=donate_argnums,
                                 device=device, backend=backend)
    return Jitted(fn, static_argnums, static_argnames, dynamic_argnums, donate_argnums, device, backend)


def block_until_ready(tree):
    """Waits until every `s2s.Array` in `tree` is computed (jit returns before XLA is done,
    like jax); returns `tree`."""
    for leaf in tree_util.tree_leaves(tree):
        if isinstance(leaf, Array):
            leaf.block_until_ready()
    return tree


def stop_gradient(x):
    """The value of `x` (a pytree), treated as a constant by differentiation."""
    from s2s.primitives.elementwise import stop_gradient as stop_gradient_p
    return tree_util.tree_map(stop_gradient_p.bind, x)
