"""The user-facing API: make_jaxpr, emit_python, jit, eval_jaxpr.

Every entry point takes and returns pytrees. Errors that are the user's to fix surface as
one clean compiler-style message, without s2s's internal frames.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import threading
import weakref

import numpy as np

from s2s import config, tree as tree_util
from s2s.core import ClosedJaxpr, eval_jaxpr as _eval_jaxpr
from s2s.emit.python import EmitOptions, EmittedModule, Signature, emit_module, load_source
from s2s.errors import S2SError
from s2s.frontend import Staged, bind_arguments, reraise_clean, stage, underlying_function
from s2s.frontend.args import describe_arg
from s2s.frontend.source import function_source
from s2s.staging import paused_gc
from s2s.tree import leaf_paths


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
    fn = staged.fn
    description = fn.describe() if getattr(fn, "__s2s_transform__", False) else None
    while getattr(fn, "__s2s_transform__", False):
        fn = fn.fn
    source = function_source(underlying_function(fn)[0])
    shown = os.path.basename(source.filename)  # never the checkout's absolute path
    args = ", ".join(f"{n}: {describe_arg(v)}" for n, v in zip(staged.param_names, staged.example_args))
    lines = [f"{name}: generated by s2s from `{description or source.name}` ({shown}:{source.node.lineno}).",
             "",
             f"Specialized for ({args}).",
             ]
    if _output_builder(staged.out_tree) is None:
        lines.append(f"Returns the flat leaves of {staged.out_tree}.")
    lines.append("Do not edit: regenerate with `s2s emit`.")
    return "\n".join(lines)


def emitted_module(staged: Staged, name: str | None = None,
                   options: EmitOptions | None = None) -> EmittedModule:
    fn = staged.fn
    name = name or getattr(fn, "__name__", "f")
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


BACKENDS = ("python", "xla")


class Jitted:
    """A function compiled for each kind of arguments it is called with.

    backend="python" runs the emitted NumPy module; backend="xla" lowers the jaxpr to
    StableHLO and runs it through jaxlib. Compiled code is cached per staged signature.
    """

    def __init__(self, fn, static_argnums=(), static_argnames=(), dynamic_argnums=(),
                 backend: str = "python"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(map(repr, BACKENDS))}")
        self.fn = fn
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self.dynamic_argnums = dynamic_argnums
        self.backend = backend
        self._compiled: "weakref.WeakKeyDictionary[Staged, object]" = weakref.WeakKeyDictionary()
        # Calls with only NumPy-array positional arguments skip staging-cache lookups:
        # (shapes and dtypes, config) -> a function of the arguments.
        self._fast: dict[tuple, object] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args, **kwargs):
        fast_key = None if (kwargs or self.static_argnums or self.static_argnames) \
            else _array_signature(args)
        if fast_key is not None:
            fast = self._fast.get(fast_key)
            if fast is not None:
                return fast(args)
        staged = staged_or_error(self.fn, args, kwargs, self.static_argnums, self.static_argnames,
                                 self.dynamic_argnums)
        if self.backend == "xla":
            result = self._call_xla(staged, args, kwargs)
            if fast_key is not None:
                executable, consts, out_tree = self._compiled[staged], staged.closed.consts, staged.out_tree
                self._fast[fast_key] = lambda a: out_tree.unflatten(executable(*consts, *a))
            return result
        with self._lock:
            entry = self._compiled.get(staged)
            if entry is None:
                name = getattr(self.fn, "__name__", "f")
                name = name if name.isidentifier() else "f"
                module = load_source(emitted_module(staged, name).source, name)
                entry = (getattr(module, name), signature_of(staged))
                self._compiled[staged] = entry
        compiled, signature = entry
        out_tree = staged.out_tree

        def run(call_args):
            out = compiled(*call_args)
            if signature.output_builder is None:
                return out_tree.unflatten(out if out_tree.num_leaves != 1 else [out])
            return out
        if fast_key is not None and len(signature.params) == len(args):
            dtypes_in = [v.aval.dtype for v in staged.closed.jaxpr.invars]
            self._fast[fast_key] = run if config.values.enable_x64 else (
                lambda a: run([np.asarray(x, d) for x, d in zip(a, dtypes_in)]))
        # Without x64, 64-bit inputs become the 32-bit types they were staged as.
        return run(emitted_call_args(staged, signature, args, kwargs,
                                     canonicalize=not config.values.enable_x64))

    def _call_xla(self, staged: Staged, args, kwargs):
        from s2s.emit.stablehlo import lower
        from s2s_runtime.xla import Executable
        with self._lock:
            executable = self._compiled.get(staged)
            if executable is None:
                jaxpr = staged.closed.jaxpr
                try:
                    text = lower(staged.closed)
                except S2SError as e:
                    reraise_clean(e)
                executable = Executable(text, [v.aval.dtype for v in jaxpr.constvars + jaxpr.invars])
                self._compiled[staged] = executable
        _, values = bind_arguments(staged.fn, args, kwargs)
        flat = [leaf for leaf, m in zip(tree_util.tree_leaves(values), staged.staged_mask) if m]
        return staged.out_tree.unflatten(executable(*staged.closed.consts, *flat))

    def lower(self, *args, **kwargs) -> "Lowered":
        """The StableHLO this function lowers to for these arguments (JAX's `.lower`)."""
        from s2s.emit.stablehlo import lower
        staged = staged_or_error(self.fn, args, kwargs, self.static_argnums, self.static_argnames,
                                 self.dynamic_argnums)
        try:
            return Lowered(lower(staged.closed), staged)
        except S2SError as e:
            reraise_clean(e)


def _array_signature(args) -> tuple | None:
    """(shape, dtype) of each argument when all are NumPy arrays, with the config; else None."""
    signature = []
    for a in args:
        if type(a) is not np.ndarray:
            return None
        signature.append((a.shape, a.dtype))
    return tuple(signature), config.cache_key()


class Lowered:
    """A function lowered to StableHLO: `.as_text()`, `.as_hlo_text()`, `.compile()`."""

    def __init__(self, text: str, staged: Staged):
        self.text = text
        self.staged = staged

    def as_text(self) -> str:
        return self.text

    def as_hlo_text(self) -> str:
        from s2s_runtime.xla import hlo_text
        return hlo_text(self.text)

    def compile(self) -> "Compiled":
        from s2s_runtime.xla import Executable
        jaxpr = self.staged.closed.jaxpr
        return Compiled(Executable(self.text, [v.aval.dtype for v in jaxpr.constvars + jaxpr.invars]))


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
    names, values = bind_arguments(staged.fn, args, kwargs)
    leaves, treedef = tree_util.tree_flatten(values)
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


def jit(fn=None, *, static_argnums=(), static_argnames=(), dynamic_argnums=(),
        backend: str = "python"):
    """`@s2s.jit` or `s2s.jit(f, static_argnums=...)`."""
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 dynamic_argnums=dynamic_argnums, backend=backend)
    return Jitted(fn, static_argnums, static_argnames, dynamic_argnums, backend)


def stop_gradient(x):
    """The value of `x` (a pytree), treated as a constant by differentiation."""
    from s2s.primitives.elementwise import stop_gradient as stop_gradient_p
    return tree_util.tree_map(stop_gradient_p.bind, x)
