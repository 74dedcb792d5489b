"""What `s2s compile` builds: the modules under the given paths, imported as Python would
import them, every export staged and lowered, each entry named and keyed.

Modules. A module whose folder has an `__init__.py` belongs to a package: the package root
is found by walking up while `__init__.py` exists, the root's parent goes on sys.path and the
module is imported by its dotted name (`pkg.models.dense`), so relative and absolute imports
between the package's modules work as under `python -m`. A module outside any package is
imported from its file, with its own folder on sys.path. Each run imports them (and their
package, and the plain modules beside them) again from their files (`forget_imported`), so a
process that builds twice builds what the files say, not what it imported the first time.

Names. Each module has a compiled root, the folder its paths are written relative to: the
package root's parent for a package module, else the folder given on the command line (the
module's own folder for a file given by itself). Its qualified name is its dotted path from
that root (`pkg.models.dense`, `sub.tools`), and an entry is named by it and the target's
stem (`pkg.models.dense.grad_loss`): adding a module never renames another's entries.

Keys. Every target is staged and lowered on each run (cheap); its key hashes the StableHLO
text (with its locations), the constants' bytes, the manifest fields staging decides, and the
s2s/jaxlib versions, XLA_FLAGS and host CPU. Whatever the entry depends on, a helper module
included, reaches the key through the text or the constants: an unchanged key means an
unchanged executable, and only XLA compilation is skipped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from importlib import metadata

import numpy as np

import s2s
from s2s import tree as tree_util
from s2s.transformed import staged_or_error
from s2s.core import host_objects
from s2s.emit.stablehlo import RNG_STATE_DTYPE, lower, path_inside, replicas_needed
from s2s.errors import CommandLineError, S2SError
from s2s.export import exports_of
from s2s.frontend.args import ShapeDtype
from s2s.pmap import Pmapped
from s2s_runtime import disk_cache


def versions() -> dict:
    return {"s2s_version": s2s.__version__, "jaxlib_version": metadata.version("jaxlib")}


def sha256(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# Discovery and import


@dataclasses.dataclass(frozen=True)
class Module:
    path: str                  # absolute path of the file
    root: str                  # the compiled root: manifest and .mlir paths are relative to it
    name: str                  # dotted name from the root: `pkg.models.dense`
    in_package: bool           # imported by `name` (else from its file)

    @property
    def relative(self) -> str:
        return path_inside(self.path, self.root)


def _package_top(folder: str) -> str | None:
    """The outermost folder of the package `folder` is in (walking up while `__init__.py`
    exists), or None when it is in no package."""
    top = None
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        top, parent = folder, os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return top


def _module(path: str, given_root: str) -> Module:
    top = _package_top(os.path.dirname(path))
    root = os.path.dirname(top) if top is not None else given_root
    parts = os.path.splitext(os.path.relpath(path, root))[0].split(os.sep)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return Module(path, root, ".".join(parts), top is not None)


def _mentions_export(path: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return "s2s.export" in f.read()


def discover(paths) -> list[Module]:
    """The modules to compile: files as given, folders searched recursively for *.py files
    that mention `s2s.export`. In a fixed order, without repeats."""
    found: dict[str, Module] = {}
    for path in paths:
        if os.path.isfile(path):
            full = os.path.abspath(path)
            found.setdefault(full, _module(full, os.path.dirname(full)))
        elif os.path.isdir(path):
            folder = os.path.abspath(path)
            for root, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if name.endswith(".py") and _mentions_export(full):
                        found.setdefault(full, _module(full, folder))
        else:
            raise CommandLineError(f"s2s: no such file or folder: {path}")
    return list(found.values())


_imported: dict[str, object] = {}


def forget_imported(folder: str, package: str | None = None) -> None:
    """Drops from `sys.modules` what a build is about to import, so that it is imported from
    the files as they are now: top-level modules whose file is in `folder`, and `package`
    with its submodules. `s2s emit`, `check` and `compile` follow the files, and a process
    that runs them twice (a notebook, a test) may hold modules imported before an edit."""
    folder = os.path.realpath(folder)
    importlib.invalidate_caches()   # files added since are found
    for name, loaded in list(sys.modules.items()):
        path = getattr(loaded, "__file__", None)
        if (package is not None and (name == package or name.startswith(package + "."))) or (
                "." not in name and isinstance(path, str)
                and os.path.dirname(os.path.realpath(path)) == folder):
            del sys.modules[name]


def import_afresh(modules: list[Module]) -> None:
    """Makes `import_module` import `modules` (with their packages and the plain modules
    beside them) from their files as they are now, not as this process imported them before."""
    _imported.clear()
    for module in modules:
        forget_imported(os.path.dirname(module.path), module.name.split(".")[0] if module.in_package else None)


def load(paths) -> list[tuple[Module, object]]:
    """Each module under `paths` (`discover`) with the module object, imported afresh. The
    one way every `s2s` command loads the user's code: a package module by its dotted name
    with the package root's parent on sys.path (so its relative and absolute imports work
    with no PYTHONPATH, from any working folder), a plain module from its file."""
    modules = discover(paths)
    import_afresh(modules)
    return [(module, import_module(module)) for module in modules]


def import_module(module: Module):
    """Imports a module once per process: a package member by its dotted name (its root on
    sys.path), a plain module from its file (its folder on sys.path; two files with the same
    name in different folders get distinct module names)."""
    if module.path in _imported:
        return _imported[module.path]
    if module.in_package:
        if module.root not in sys.path:
            sys.path.insert(0, module.root)
        loaded = importlib.import_module(module.name)
        where = getattr(loaded, "__file__", None) or ""
        if not os.path.exists(where) or not os.path.samefile(where, module.path):
            raise ImportError(f"`import {module.name}` gives {where or 'a module without a file'}, "
                              f"not {module.path}: another package of that name comes first on "
                              f"sys.path; rename one of them")
    else:
        name = os.path.splitext(os.path.basename(module.path))[0]
        existing = sys.modules.get(name)
        if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") != module.path:
            name = f"_s2s_compile_{sha256(module.path)[:12]}_{name}"
        directory = os.path.dirname(module.path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        spec = importlib.util.spec_from_file_location(name, module.path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    _imported[module.path] = loaded
    return loaded


# ---------------------------------------------------------------------------------------
# Errors as manifest fields


def error_text(error: BaseException) -> str:
    if isinstance(error, S2SError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def error_location(error: BaseException, module: Module, fallback: str | None = None) -> str | None:
    """file:line of an error (the file relative to the module's root when inside it): an s2s
    error's own location, else the deepest traceback frame in the module, else `fallback`."""
    where = getattr(error, "where", None)
    location = None
    if where is not None and getattr(where, "line", 0):
        location = (where.file, where.line)
    elif isinstance(error, SyntaxError) and error.filename:
        location = (error.filename, error.lineno)
    else:
        for frame in traceback.extract_tb(error.__traceback__):
            if os.path.abspath(frame.filename) == module.path:
                location = (frame.filename, frame.lineno)
    if location is None:
        return fallback
    return f"{path_inside(os.path.abspath(location[0]), module.root)}:{location[1]}"


def _function_location(fn, module: Module) -> str | None:
    try:
        return f"{path_inside(inspect.getsourcefile(fn), module.root)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return None


# ---------------------------------------------------------------------------------------
# Planning: every target staged, lowered, named and keyed


def _describe_leaf(leaf):
    if isinstance(leaf, ShapeDtype):
        return ["aval", list(leaf.shape), leaf.dtype.name]
    if isinstance(leaf, (np.ndarray, np.generic)):
        array = np.ascontiguousarray(leaf)
        return ["array", list(array.shape), array.dtype.name, sha256(array.tobytes())]
    return ["static", type(leaf).__name__, repr(leaf)]


def export_spec(record, transform: str) -> dict:
    """What of the declaration decides the compiled code, as JSON."""
    leaves, treedef = tree_util.tree_flatten(record.args)
    argnums = record.argnums if isinstance(record.argnums, int) else list(record.argnums)
    return {"function": record.fn.__qualname__, "name": record.name, "transform": transform,
            "args_tree": repr(treedef), "args": [_describe_leaf(l) for l in leaves],
            "argnums": argnums}


def _aval(aval, device_axis: int | None = None, devices: int = 1) -> dict:
    """An aval as the manifest writes it; with a `device_axis`, the whole array of which
    `aval` is one device's slice."""
    shape = list(aval.shape)
    if device_axis is not None:
        shape.insert(device_axis, devices)
    return {"shape": shape, "dtype": np.dtype(aval.dtype).name}


@dataclasses.dataclass
class Target:
    """One entry to build: the lowered module and what the manifest says of it."""
    name: str                  # the entry's name and its files' stem
    module: Module
    function: str
    transform: str
    text: str                  # StableHLO, locations relative to the module's root
    consts: list               # the NumPy constants @main takes before the inputs
    fields: dict               # the manifest fields staging decides (avals, trees, dtypes)
    key: str = ""

    def __post_init__(self):
        consts = [[c.dtype.name, list(c.shape), sha256(np.ascontiguousarray(c).tobytes())]
                  for c in self.consts]
        self.key = sha256(json.dumps({
            "mlir": sha256(self.text), "consts": consts, "fields": self.fields, **versions(),
            "environment": list(disk_cache.process_environment())}, sort_keys=True))

    def entry(self) -> dict:
        """The manifest entry's fields known before compiling."""
        return {"name": self.name, "module": self.module.relative, "function": self.function,
                "transform": self.transform, **self.fields, "key": self.key}


def failure(name: str, module: Module, function, transform, error: BaseException,
            fallback: str | None = None) -> dict:
    return {"name": name, "module": module.relative, "function": function,
            "transform": transform, "status": "failed", "error": error_text(error),
            "location": error_location(error, module, fallback)}


def stage_target(name: str, module: Module, record, transform: str, fn) -> Target:
    """`fn` staged for the export's arguments and lowered. An exported pmap (its primal)
    is lowered as `s2s.pmap` runs it, one SPMD module over its devices: its entry records
    the replica count and where each input is split and each output stacked (`replicas`),
    and its avals are the whole arrays a caller passes and gets. Any other program that
    calls pmaps (the grad of an exported pmap, nested pmaps) runs as jit runs it: on the
    replicas its pmaps need, each given every input whole, the results replica 0's."""
    record.check_transform(transform)
    args = record.example_args(transform)
    spmd = fn.spmd_module(args, module.root) if isinstance(fn, Pmapped) else None
    if spmd is not None:
        staged, text, count, in_axes, out_axes = spmd
        replicas = {"count": count, "in_axes": in_axes, "out_axes": out_axes}
    else:
        staged = staged_or_error(fn, args, {})
        text = lower(staged.closed, root=module.root)
        count = replicas_needed(staged.closed.jaxpr)
        replicas = None if count == 1 else {"count": count, "in_axes": [None] * len(staged.closed.jaxpr.invars),
                                            "out_axes": [None] * len(staged.closed.jaxpr.outvars)}
    jaxpr = staged.closed.jaxpr
    consts = [np.asarray(c) for c in staged.closed.consts]
    generators = host_objects(jaxpr)   # each a state input after the arguments (see manifest.load)
    whole = replicas or {"count": 1, "in_axes": [None] * len(jaxpr.invars),
                         "out_axes": [None] * len(jaxpr.outvars)}
    static_leaves = tree_util.tree_leaves(staged.example_args)
    fields = {"spec": export_spec(record, transform), "params": list(staged.param_names),
              "in_tree": repr(staged.in_tree), "staged_mask": list(staged.staged_mask),
              "out_tree": repr(staged.out_tree),
              "in_structure": tree_structure(staged.in_tree, iter(zip(staged.staged_mask, static_leaves)), "input"),
              "out_structure": tree_structure(staged.out_tree, iter([(True, None)] * staged.out_tree.num_leaves),
                                              "output"),
              "inputs": [_aval(v.aval, axis, whole["count"]) for v, axis in zip(jaxpr.invars, whole["in_axes"])],
              "outputs": [_aval(a, axis, whole["count"]) for a, axis in zip(staged.closed.out_avals, whole["out_axes"])],
              "in_dtypes": [np.dtype(v.aval.dtype).name for v in jaxpr.constvars + jaxpr.invars]
                           + [RNG_STATE_DTYPE.name] * len(generators),
              "num_consts": len(consts)}
    if generators:
        fields["generators"] = [g.expression or g.name for g in generators]
    if replicas:
        fields["replicas"] = replicas
    return Target(name, module, record.fn.__qualname__, transform, text, consts, fields)


def tree_structure(treedef, leaves, kind: str, counter=None):
    """A pytree's structure as the JSON `s2s_runtime.manifest.load` rebuilds it (see
    `s2s_runtime.manifest.STRUCTURES`): containers by kind, each staged leaf `{kind: i}`
    (its place among the flat inputs or outputs), each static leaf `{"static": value}`
    when JSON holds it exactly (else `{"static_repr": repr}`, which a structured call
    cannot check, and refuses). `leaves` yields (staged, value) per leaf, in order."""
    counter = counter if counter is not None else iter(range(treedef.num_leaves))
    if treedef.is_leaf:
        staged, value = next(leaves)
        if staged:
            return {kind: next(counter)}
        if value is None or type(value) in (bool, int, float, str):
            return {"static": value}
        return {"static_repr": repr(value)}
    children = [tree_structure(child, leaves, kind, counter) for child in treedef.children]
    node = treedef.node_type
    if node is tuple or node is list:
        return {node.__name__: children}
    if node is dict:
        return {"dict": [[key, child] for key, child in zip(treedef.aux, children)]}
    if node is type(None):
        return {"none": True}
    fields = getattr(node, "_fields", None) or (treedef.aux if dataclasses.is_dataclass(node) else None)
    if fields is not None:
        return {"record": node.__qualname__, "fields": list(fields), "children": children}
    return {"node": node.__qualname__, "children": children}


def plan(modules: list[Module]) -> tuple[list[Target], list[dict]]:
    """The targets of the modules, and failed entries for modules that do not import, exports
    that do not stage, and names that two modules would both give."""
    targets, failures = [], []
    import_afresh(modules)
    for module in modules:
        try:
            records = exports_of(import_module(module))
        except Exception as e:  # the module is the user's: report it, go on with the others
            failures.append(failure(f"{module.name}.<module>", module, None, None, e,
                                    f"{module.relative}:1"))
            continue
        for record in records:
            for transform, (stem, fn) in zip(record.transforms, record.targets()):
                name = f"{module.name}.{stem}"
                try:
                    targets.append(stage_target(name, module, record, transform, fn))
                except Exception as e:
                    failures.append(failure(name, module, record.fn.__qualname__, transform, e,
                                            _function_location(record.fn, module)))
    names = [t.name for t in targets] + [f["name"] for f in failures]
    clashes = {n for n in names if names.count(n) > 1}
    for target in [t for t in targets if t.name in clashes]:
        targets.remove(target)
        failures.append(failure(target.name, target.module, target.function, target.transform,
                                NameError(f"two modules both give an entry {target.name!r} "
                                          f"(a package module and a plain one of the same "
                                          f"dotted name); rename one of the modules")))
    return targets, failures
