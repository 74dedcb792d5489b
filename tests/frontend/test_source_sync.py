"""The derivative is always of the code that runs (issue 20): s2s reads a function's file,
Python runs its bytecode, and when the two disagree staging stops with a StaleSourceError
instead of differentiating text that does not run. Edited files, reloaded modules, modules
of the same name in two folders, notebook cells and exec'd code with a registered source."""
import gc
import importlib
import linecache
import os
import sys
import weakref
import types

import numpy as np
import pytest

import s2s
from s2s import batch_compile, cli
from s2s.frontend import source as source_module

SINE = "import numpy as np\n\n\ndef helper(x):\n    return np.sin(x)\n\n\ndef f(x):\n    return np.sum(helper(x))\n"
EXP = SINE.replace("np.sin(x)", "np.exp(x) * 2.0")
X = np.array([0.3, 0.7, -1.1])


@pytest.fixture
def package(tmp_path, monkeypatch, request):
    """A folder on sys.path to write modules into, and a maker of module names unique to
    the test (no .pyc files: their one-second timestamps could hide a quick edit from
    `importlib.reload`). The modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    prefix = f"sync_{request.node.name}_{os.getpid()}"
    made = []

    def module_name(name):
        made.append(f"{prefix}_{name}")
        return made[-1]
    yield tmp_path, module_name
    for name in made:
        sys.modules.pop(name, None)


def write_module(tmp_path, name, text):
    (tmp_path / f"{name}.py").write_text(text)


def import_fresh(name):
    importlib.invalidate_caches()
    return importlib.import_module(name)


def test_edit_without_reload_is_an_error_at_the_function(package):
    tmp_path, module_name = package
    name = module_name("m")
    write_module(tmp_path, name, SINE)
    m = import_fresh(name)
    write_module(tmp_path, name, EXP)       # edited, not reloaded: Python still runs the sine
    np.testing.assert_allclose(m.f(X), np.sum(np.sin(X)))
    for transform in (s2s.grad, s2s.jit, lambda f: s2s.jit(s2s.grad(f)),
                      lambda f: s2s.jit(f, backend="python"),
                      lambda f: lambda x: s2s.emit_python(f, x)):
        with pytest.raises(s2s.StaleSourceError) as info:
            transform(m.f)(X)
        message = str(info.value)
        assert f"{name}.py changed since `" in message and "reload the module" in message
        assert f"{name}.py:" in message   # where: the file and line of the stale function


def test_a_staging_from_before_the_edit_stays_the_derivative_of_the_running_code(package):
    tmp_path, module_name = package
    name = module_name("m")
    write_module(tmp_path, name, SINE)
    m = import_fresh(name)
    grad_f = s2s.grad(m.f)
    np.testing.assert_allclose(grad_f(X), np.cos(X))
    write_module(tmp_path, name, EXP)
    np.testing.assert_allclose(grad_f(X), np.cos(X))   # the staged sine: what runs
    # A new staging (other dtypes) reads the text kept with the code object, not the file.
    np.testing.assert_allclose(grad_f(X.astype(np.float32)), np.cos(X), rtol=1e-6)


def test_edit_and_reload_gives_the_new_gradient_and_frees_the_old(package):
    tmp_path, module_name = package
    name = module_name("m")
    write_module(tmp_path, name, SINE)
    m = import_fresh(name)
    np.testing.assert_allclose(s2s.grad(m.f)(X), np.cos(X))
    np.testing.assert_allclose(np.asarray(s2s.jit(m.f)(X)), np.sum(np.sin(X)))
    assert "np.cos(x)" in s2s.emit_python(s2s.grad(m.f), X)
    old_f, old_helper = weakref.ref(m.f), weakref.ref(m.helper)
    old_code = weakref.ref(m.helper.__code__)
    write_module(tmp_path, name, EXP)
    importlib.reload(m)
    np.testing.assert_allclose(m.f(X), np.sum(2 * np.exp(X)))
    np.testing.assert_allclose(s2s.grad(m.f)(X), 2 * np.exp(X))
    np.testing.assert_allclose(np.asarray(s2s.jit(m.f)(X)), np.sum(2 * np.exp(X)))
    np.testing.assert_allclose(np.asarray(s2s.jit(s2s.grad(m.f))(X)), 2 * np.exp(X))
    np.testing.assert_allclose(s2s.jit(s2s.grad(m.f), backend="python")(X), 2 * np.exp(X))
    emitted = s2s.emit_python(s2s.grad(m.f), X)
    assert "np.exp(x)" in emitted and "np.cos" not in emitted
    gc.collect()
    # Nothing of s2s's keeps the old functions (or their code and source) alive.
    assert old_f() is None and old_helper() is None and old_code() is None


def test_reload_after_a_move_only_edit_keeps_working(package):
    tmp_path, module_name = package
    name = module_name("m")
    write_module(tmp_path, name, SINE)
    m = import_fresh(name)
    write_module(tmp_path, name, "# a comment above everything\n\n" + SINE)
    # The code that runs is the code in the file, two lines lower: the same function.
    np.testing.assert_allclose(s2s.grad(m.f)(X), np.cos(X))


def test_two_modules_of_the_same_name_in_different_folders(package, tmp_path):
    _, module_name = package
    results = {}
    for folder in ("a", "b"):   # the same text: equal code objects in two files
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "model.py"
        path.write_text(SINE)
        spec = importlib.util.spec_from_file_location(module_name(f"model_{folder}"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        closed = s2s.make_jaxpr(module.f)(X)
        files = {eqn.source_info.file for eqn in _all_equations(closed.jaxpr)}
        results[folder] = files
        assert files == {str(path)}, files   # each staging reads its own file
    assert results["a"] != results["b"]


def _all_equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                yield from _all_equations(inner)


def _run_cell(filename, text, namespace):
    """What IPython does with a cell: register its text in linecache under a name of its
    own (no file on disk, so no modification time), compile it with that name, run it."""
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(text, filename, "exec"), namespace)


def test_a_cell_run_again_with_new_source_is_staged_from_the_new_cell():
    namespace = {}
    _run_cell("<ipython-input-1-s2s-sync>", SINE, namespace)
    first_f = namespace["f"]
    np.testing.assert_allclose(s2s.grad(first_f)(X), np.cos(X))
    _run_cell("<ipython-input-2-s2s-sync>", EXP, namespace)   # the edited cell, run again
    np.testing.assert_allclose(s2s.grad(namespace["f"])(X), 2 * np.exp(X))
    np.testing.assert_allclose(np.asarray(s2s.jit(namespace["f"])(X)), np.sum(2 * np.exp(X)))
    # The first cell's `f` now calls the second cell's `helper` (one namespace), and its
    # derivative follows what it runs.
    np.testing.assert_allclose(first_f(X), np.sum(2 * np.exp(X)))
    np.testing.assert_allclose(s2s.grad(first_f)(X), 2 * np.exp(X))


ONE_FUNCTION = "import numpy as np\n\n\ndef f(x):\n    return np.sum(np.sin(x))\n"


def test_exec_with_a_registered_source_replaced_under_the_same_name():
    filename = "<s2s-sync-registered>"
    namespace = {}
    _run_cell(filename, ONE_FUNCTION, namespace)
    first_f = namespace["f"]
    _run_cell(filename, ONE_FUNCTION.replace("np.sin(x)", "np.exp(x)"), namespace)
    np.testing.assert_allclose(s2s.grad(namespace["f"])(X), np.exp(X))
    np.testing.assert_allclose(first_f(X), np.sum(np.sin(X)))   # it still runs the sine ...
    with pytest.raises(s2s.StaleSourceError, match="changed since `f` was defined"):
        s2s.grad(first_f)(X)              # ... whose text is gone: never staged from the new one


HELPERS = "import numpy as np\n\n\ndef act(x):\n    return np.tanh(x)\n"
USER = "import numpy as np\nfrom {helpers} import act\n\n\ndef f(x):\n    return np.sum(act(x))\n"


def test_a_helper_edited_in_another_module(package):
    tmp_path, module_name = package
    helpers, user = module_name("helpers"), module_name("user")
    write_module(tmp_path, helpers, HELPERS)
    write_module(tmp_path, user, USER.format(helpers=helpers))
    h, m = import_fresh(helpers), import_fresh(user)
    write_module(tmp_path, helpers, HELPERS.replace("np.tanh(x)", "np.sinh(x)"))
    with pytest.raises(s2s.StaleSourceError, match=f"{helpers}.py changed since `act`"):
        s2s.grad(m.f)(X)                  # not reloaded: the helper's text is not its code
    importlib.reload(h)                   # the helper reloaded, the user module not:
    assert m.act is not h.act             # `m.f` still runs the old `act` ...
    with pytest.raises(s2s.StaleSourceError, match=f"{helpers}.py changed since `act`"):
        s2s.jit(m.f)(X)                   # ... whose text is gone
    importlib.reload(m)                   # both reloaded: the new derivative
    np.testing.assert_allclose(s2s.grad(m.f)(X), np.cosh(X))
    np.testing.assert_allclose(np.asarray(s2s.jit(s2s.grad(m.f))(X)), np.cosh(X))


def test_a_staged_function_with_an_assert_in_a_pytest_rewritten_file():
    def checked(x):
        assert x.ndim == 1, "a vector"
        return np.sum(x * x)
    np.testing.assert_allclose(s2s.grad(checked)(X), 2 * X)


def test_cli_emit_and_check_read_the_current_file(tmp_path, capsys):
    module = tmp_path / "exported.py"
    text = ('import numpy as np\nimport s2s\n\n\n@s2s.export("f64[3]", transforms=("grad",))\n'
            'def f(x):\n    return np.sum(np.sin(x))\n')
    module.write_text(text)
    out = tmp_path / "generated"
    assert cli.main(["emit", str(module), "--out", str(out)]) == 0
    assert cli.main(["check", str(module), "--against", str(out)]) == 0
    module.write_text(text.replace("np.sin(x)", "np.cos(x)"))
    capsys.readouterr()
    assert cli.main(["check", str(module), "--against", str(out)]) == 1
    assert "np.sin" in capsys.readouterr().out   # the diff: committed sine, current cosine


def test_source_entries_go_with_their_code_objects():
    namespace = {}
    _run_cell("<s2s-sync-freed>", SINE, namespace)
    s2s.grad(namespace["f"])(X)
    before = len(source_module._sources)
    namespace.clear()
    gc.collect()
    assert len(source_module._sources) < before


EXPORTED = ('import numpy as np\nimport s2s\nfrom {helpers} import act\n\n\n'
            '@s2s.export("f64[3]", transforms=("grad",))\ndef f(x):\n    return np.sum(act(x))\n')


def compiled_mlir(out: str, entry: str) -> str:
    """The StableHLO text of `entry` in the build folder `out` (its file, named by its
    content's hash, from the manifest)."""
    with open(os.path.join(out, batch_compile.read_manifest(out)["entries"][entry]["files"]["mlir"])) as f:
        return f.read()


def test_compile_run_again_in_one_process_after_an_edit_builds_the_current_file(package, capsys):
    """`s2s compile` follows the files: a process that compiles again after an edit imports
    the module again from its file, and rebuilds the entry (never skips it as up to date
    with the module it imported the first time)."""
    tmp_path, module_name = package
    name = module_name("compiled")
    write_module(tmp_path, name, SINE.replace("def f(x):", '@s2s.export("f64[3]", transforms=("grad",))\ndef f(x):')
                 .replace("import numpy as np\n", "import numpy as np\nimport s2s\n"))
    path, out = str(tmp_path / f"{name}.py"), str(tmp_path / "build")
    assert batch_compile.compile_paths([path], out) == 0
    assert "stablehlo.cosine" in compiled_mlir(out, f"{name}.grad_f")
    write_module(tmp_path, name, open(path).read().replace("np.sin(x)", "np.exp(x)"))
    capsys.readouterr()
    assert batch_compile.compile_paths([path], out) == 0
    assert "1 ok (0 skipped)" in capsys.readouterr().err
    mlir = compiled_mlir(out, f"{name}.grad_f")
    assert "stablehlo.exponential" in mlir and "stablehlo.cosine" not in mlir


def test_cli_check_run_again_after_a_helper_edit_reads_the_edited_helper(package, capsys):
    tmp_path, module_name = package
    helpers, user = module_name("act_helpers"), module_name("act_user")
    write_module(tmp_path, helpers, HELPERS)
    write_module(tmp_path, user, EXPORTED.format(helpers=helpers))
    out = str(tmp_path / "derivatives")
    assert cli.main(["emit", str(tmp_path / f"{user}.py"), "--out", out]) == 0
    write_module(tmp_path, helpers, HELPERS.replace("np.tanh(x)", "np.sinh(x)"))
    capsys.readouterr()
    assert cli.main(["check", str(tmp_path / f"{user}.py"), "--against", out]) == 1
    assert "+    x_bar = np.cosh(x)" in capsys.readouterr().out   # the diff: the edited helper's


def test_nested_tuple_constants_compare_equal_whatever_refers_to_them():
    """np.pad(x, ((1, 0), (0, 2))) compiles to equal nested tuples, which marshal's newer
    formats write differently when an inner tuple has more than one reference (in a
    script, the running module's code keeps some): an unchanged file was refused as stale."""
    text = "def padded(x):\n    return np.pad(x, ((1, 0), (0, 2)))\n"

    def function_code():
        module = compile(text, "padded.py", "exec")
        return next(c for c in module.co_consts if isinstance(c, types.CodeType))

    running, compiled = function_code(), function_code()
    widths = next(c for c in running.co_consts if isinstance(c, tuple))
    extra_references = list(widths) * 2   # what the running module's objects add
    assert source_module._same_code(running, compiled), extra_references


@pytest.mark.parametrize("first, second, same", [
    (0.0, -0.0, False), (1, True, False), (1, 1.0, False), (float("nan"), float("nan"), True),
    (((1, 0), (0, 2)), ((1, 0), (0, 2)), True), (((1, 0),), ((1.0, 0),), False),
    (slice(1, 3), slice(1, 3), True), (slice(1, 3), slice(1, 3, 1), False),
    (frozenset({1, 2}), frozenset({2, 1}), True), ("a", "a", True), (None, None, True),
])
def test_constants_compare_by_type_and_exact_value(first, second, same):
    """Slices too (Python 3.14 keeps `x[1:3]`'s slice as a constant)."""
    assert (source_module._constant_key(first) == source_module._constant_key(second)) is same


def test_a_future_import_of_the_file_is_compiled_with_the_function(package, monkeypatch):
    """s2s compiles only the statement holding the function to check it runs that text
    (the whole file only when it is not found there: moved); `from __future__ import
    annotations` changes how a nested def's annotations compile, and CPython 3.11 compiles
    `np.sum(...)` apart when `np` is imported (here inside a `try`): both are compiled in."""
    def whole_file(*args):
        raise AssertionError("the whole file was compiled: the function's statement did not match")
    monkeypatch.setattr(source_module, "_compiled_functions", whole_file)
    tmp_path, module_name = package
    name = module_name("future")
    write_module(tmp_path, name, "from __future__ import annotations\n\ntry:\n    import numpy as np\n"
                                 "except ImportError:\n    np = None\n\n\n"
                                 "def f(x: np.ndarray, scale: float = 2.0) -> np.ndarray:\n"
                                 "    def sine(y: np.ndarray) -> np.ndarray:   # compiled into f's code\n"
                                 "        return np.sin(y)\n"
                                 "    return np.sum(sine(x) * scale)\n")
    m = import_fresh(name)
    np.testing.assert_allclose(s2s.grad(m.f)(X), 2.0 * np.cos(X))


@pytest.mark.parametrize("edit", ["f", "g"])
def test_two_lambdas_on_one_line_are_checked_each_against_its_own_text(package, edit):
    """`f = lambda ...; g = lambda ...` are two top-level statements on one line: each
    function is found in its own (by its code's columns), and an edit of one is never taken
    for the other's unchanged text (the value staged is always the code that runs)."""
    tmp_path, module_name = package
    name = module_name(f"lambdas_{edit}")
    text = "import numpy as np\nf = lambda x: np.sum(np.sin(x)); g = lambda x: np.sum(np.sin(x))\n"
    write_module(tmp_path, name, text)
    m = import_fresh(name)
    edited = text.replace("np.sin", "np.cos", 1) if edit == "f" else \
        text.replace("np.sum(np.sin(x))\n", "np.sum(np.cos(x))\n")
    write_module(tmp_path, name, edited)
    for fn in (m.f, m.g):
        np.testing.assert_allclose(np.asarray(s2s.jit(fn)(X)), fn(X))
