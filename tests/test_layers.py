"""The architecture, checked: imports go down the layers of ARCHITECTURE.md, form no cycle,
and sit at the top of their module; a module grown long enough to hold more than one
concern is warned of.

Every module of `s2s/` and `runtime/s2s_runtime/` is parsed (never imported), and every import
statement is read, also those inside functions and classes, so a lazy import cannot hide
an upward reach.
"""
from __future__ import annotations

import ast
import pathlib
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Lowest first. A name stands for that module and everything below it, except the package
# root `s2s` (its __init__), which stands for itself alone; the longest match wins.
LAYERS = [
    ("runtime", ["s2s_runtime"]),
    ("foundation", ["s2s.errors", "s2s.source_info", "s2s.config", "s2s.dtypes", "s2s.tree",
                    "s2s.core"]),
    ("staging", ["s2s.staging"]),
    ("pass ops", ["s2s.passes.lax_ops"]),
    ("passes", ["s2s.passes"]),
    ("emit", ["s2s.emit"]),
    ("primitives", ["s2s.primitives"]),
    ("numpy_api", ["s2s.numpy_api"]),
    ("frontend", ["s2s.frontend"]),
    ("transforms", ["s2s.transformed", "s2s.lax", "s2s.autodiff", "s2s.vmapped", "s2s.pmap",
                    "s2s.custom_derivatives", "s2s.eager", "s2s.donation", "s2s.remat", "s2s.ode"]),
    ("user_api", ["s2s.jit", "s2s.api", "s2s.distributed", "s2s.export", "s2s.test_util", "s2s.autograd"]),
    ("tools", ["s2s.cli", "s2s.review_page", "s2s.provenance", "s2s.batch_compile", "s2s.build_plan",
               "s2s.__main__", "s2s"]),
]

# The one module below the families that reads the primitive registry: passes, backends and
# families reach a primitive they do not declare through its ops (`primitive(ops.pad)`).
REGISTRY_READER = "s2s.passes.lax_ops"
NO_REGISTRY_READS = ("s2s.passes", "s2s.emit", "s2s.primitives")

# Past this many lines a module is warned of, never failed: a module is split where its
# concerns part, not where a count falls.
LONG_MODULE_LINES = 800


# Each package and the folder its distribution builds from (s2s_runtime is a distribution
# of its own, in runtime/).
PACKAGE_ROOTS = {"s2s": ROOT, "s2s_runtime": ROOT / "runtime"}


def _module_files() -> dict[str, pathlib.Path]:
    modules = {}
    for package, root in PACKAGE_ROOTS.items():
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _resolve(name: str) -> str | None:
    """The module an imported name lives in (`s2s.passes.jvp.register` -> `s2s.passes.jvp`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    """Collects (imported module, line, inside a function or class) for one module."""

    def __init__(self, module: str, is_package: bool):
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[str, int, bool]] = []
        self.depth = 0

    def _nested(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested

    def _add(self, name: str | None, node):
        target = _resolve(name) if name else None
        if target is not None:
            self.found.append((target, node.lineno, self.depth > 0))

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level:
            base = self.package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module
        for alias in node.names:   # `from s2s.passes import jvp` imports the module s2s.passes.jvp
            full = f"{module}.{alias.name}"
            self._add(full if full in MODULES else module, node)


def _imports() -> dict[str, list[tuple[str, int, bool]]]:
    result = {}
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        result[module] = [(t, line, nested) for t, line, nested in visitor.found if t != module]
    return result


IMPORTS = _imports()


def layer_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "s2s" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and ARCHITECTURE.md")
    return best[0]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_only_go_down():
    upward = []
    for module, imports in IMPORTS.items():
        for target, line, _ in imports:
            if layer_of(target) > layer_of(module):
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} "
                              f"({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports that reach up a layer:\n" + "\n".join(upward)


def test_runtime_imports_nothing_of_s2s():
    for module, imports in IMPORTS.items():
        if module.startswith("s2s_runtime"):
            assert all(t.startswith("s2s_runtime") for t, _, _ in imports), module


def test_no_import_inside_a_function():
    nested = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {t}"
              for m, imports in IMPORTS.items() for t, line, inside in imports if inside]
    assert not nested, "imports inside functions (put them at the top):\n" + "\n".join(nested)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    graph = {m: sorted({t for t, _, _ in imports}) for m, imports in IMPORTS.items()}
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = graph[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_import_cycles():
    assert _cycles() == []


def test_cycle_finder_sees_a_cycle(monkeypatch):
    """The finder itself: two modules importing each other are one component."""
    monkeypatch.setitem(IMPORTS, "s2s.core", IMPORTS["s2s.core"] + [("s2s.staging", 1, False)])
    assert ["s2s.core", "s2s.staging"] in _cycles()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    """A long module passes with a warning naming it: a family that outgrows one file
    becomes a package (`s2s/primitives/loops/`), and any module that holds more than one
    concern is split where they part."""
    lines = len(MODULES[module].read_text().splitlines())
    if lines > LONG_MODULE_LINES:
        warnings.warn(f"{module} has {lines} lines (over {LONG_MODULE_LINES}): a family that outgrows one "
                      f"file becomes a package; split a module where its concerns part", UserWarning)


def _registry_reads(source: str) -> list[int]:
    """The lines of `source` that name `PRIMITIVES` (a lookup, an import, an attribute)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Name) and node.id == "PRIMITIVES"
                or isinstance(node, ast.Attribute) and node.attr == "PRIMITIVES"
                or isinstance(node, ast.ImportFrom) and any(a.name == "PRIMITIVES" for a in node.names)):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_pass_backend_or_family_names_a_primitive_by_string():
    """A pass looks the equation's primitive up in its table; where it or a family stages or
    recognizes a primitive it does not declare, it does so with an op, never through
    `PRIMITIVES["name"]`: a primitive's name is then written in its family and in one op's
    `@binds`, which tests/primitives/test_ops.py holds to the registry."""
    found = [f"{MODULES[m].relative_to(ROOT)}:{line}" for m in sorted(MODULES)
             if m.split(".")[:2] in [p.split(".") for p in NO_REGISTRY_READS] and m != REGISTRY_READER
             for line in _registry_reads(MODULES[m].read_text())]
    assert not found, "registry lookups outside passes/lax_ops.py (use its ops):\n" + "\n".join(found)


def test_registry_reads_are_seen():
    """The finder itself, on each way of reaching the registry."""
    assert _registry_reads('from s2s.staging import PRIMITIVES\nadd = PRIMITIVES["add"]') == [1, 2]
    assert _registry_reads("import s2s.staging\n\n\nx = s2s.staging.PRIMITIVES") == [4]
    assert _registry_reads("from s2s.passes import lax_ops\nadd = lax_ops.add_any") == []
