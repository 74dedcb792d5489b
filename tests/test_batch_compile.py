"""`s2s compile`: batch compilation of a package's exports, the manifest, incremental
rebuilds, failures with their location, and loading an entry with s2s_runtime alone."""
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from s2s import batch_compile
from s2s.batch_compile import compile_paths
from s2s_runtime import manifest, xla
from s2s_runtime.xla import Executable
from tests.reliability import cache_dir  # noqa: F401  (a fixture)
from tests.test_build_plan import write_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOOD = '''\
import numpy as np
import s2s


@s2s.export("f32[3,4], f32[4]", transforms=("primal", "grad"))
def loss(W, x):
    return np.sum(np.tanh(W @ x))


@s2s.export("{'a': f64[2], 'b': f64[2]}", transforms=("primal",))
def combine(p):
    return p['a'] * 2.0 + np.array([1.0, 2.0]), p['b'] - p['a']


TABLE = np.arange(12.0).reshape(4, 3) / 10.0


@s2s.export("f64[2,4]", transforms=("primal",))
def project(x):
    return np.tanh(x @ TABLE)
'''

BAD = '''\
import numpy as np
import s2s


@s2s.export("f32[3,4], f32[5]", transforms=("primal",))
def broken(W, x):
    y = W @ x
    return y
'''
BAD_LINE = 7


def write_package(root):
    pkg = root / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "good.py").write_text(GOOD)
    (pkg / "sub" / "bad.py").write_text(BAD)
    (pkg / "helper.py").write_text("VALUE = 1\n")   # no exports: not compiled
    return pkg


# A script's first line when it loads entries with the runtime alone: importing s2s or jax
# fails (jaxlib imports jax by itself when jax is installed: JAXLIB_NOTES.md).
RUNTIME_ONLY = """\
import sys
class Block:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("s2s", "jax"):
            raise ImportError(name + " is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def built_file(out, name: str, kind: str):
    """The path of the file of `kind` ('mlir', 'hlo', 'exe', 'consts') that the manifest in
    `out` lists for entry `name` (its name holds a hash of its content)."""
    files = json.loads((out / "manifest.json").read_text())["entries"][name]["files"]
    return out / files[kind]


def built_files(out, name: str) -> list[str]:
    """The files the manifest in `out` lists for entry `name`, sorted."""
    return sorted(json.loads((out / "manifest.json").read_text())["entries"][name]["files"].values())


def run_compile(*args):
    return subprocess.run([sys.executable, "-m", "s2s", "compile", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_compile_package_reports_failures_skips_unchanged_and_loads_without_s2s(tmp_path):
    pkg = write_package(tmp_path)
    out = tmp_path / "build"
    result = run_compile(str(pkg), "--out", str(out), "-j", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("good.loss", "good.grad_loss", "good.combine", "good.project"):
        for kind, suffix in (("mlir", ".mlir"), ("hlo", ".hlo.txt"), ("exe", ".exe")):
            path = built_file(out, name, kind)
            assert path.is_file() and re.fullmatch(rf"{name}\.[0-9a-f]{{16}}{suffix}", path.name), path
    assert not [f for f in os.listdir(out) if f.startswith("sub.bad.broken")]
    assert "stablehlo" in built_file(out, "good.loss", "mlir").read_text()
    assert "ENTRY" in built_file(out, "good.grad_loss", "hlo").read_text()

    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["entries"]
    assert set(entries) == {"good.loss", "good.grad_loss", "good.combine", "good.project",
                            "sub.bad.broken"}
    assert entries["good.project"]["num_consts"] == 1 and built_file(out, "good.project", "consts").is_file()
    broken = entries["sub.bad.broken"]
    assert broken["status"] == "failed"
    assert broken["location"] == f"sub/bad.py:{BAD_LINE}"   # relative to the folder compiled
    assert "ShapeError" in broken["error"]
    loss = entries["good.loss"]
    assert loss["status"] == "ok" and loss["transform"] == "primal" and loss["function"] == "loss"
    assert loss["inputs"] == [{"shape": [3, 4], "dtype": "float32"}, {"shape": [4], "dtype": "float32"}]
    assert loss["outputs"] == [{"shape": [], "dtype": "float32"}]
    assert entries["good.grad_loss"]["transform"] == "grad"
    assert loss["module"] == "good.py" and loss["verified"] is True
    assert loss["mlir_sha256"] == hashlib.sha256(built_file(out, "good.loss", "mlir").read_bytes()).hexdigest()
    assert loss["exe_sha256"] == hashlib.sha256(built_file(out, "good.loss", "exe").read_bytes()).hexdigest()
    # progress lines, one per target, and the failure's location on stderr
    assert "[" in result.stderr and "/5] good.grad_loss ok" in result.stderr
    assert f"bad.py:{BAD_LINE}" in result.stderr

    # Second run: nothing changed, so every good entry is skipped (the failure is retried).
    mtime = built_file(out, "good.loss", "exe").stat().st_mtime_ns
    before = (out / "manifest.json").read_bytes()
    again = run_compile(str(pkg), "--out", str(out), "-j", "2")
    assert again.returncode == 1
    for name in ("good.loss", "good.grad_loss", "good.combine"):
        assert f"{name} skipped" in again.stderr, again.stderr
    assert built_file(out, "good.loss", "exe").stat().st_mtime_ns == mtime
    assert (out / "manifest.json").read_bytes() == before   # no timings, no run state

    # Fixing the broken module recompiles it alone; exit status 0.
    (pkg / "sub" / "bad.py").write_text(BAD.replace("f32[5]", "f32[4]"))
    fixed = run_compile(str(pkg), "--out", str(out))
    assert fixed.returncode == 0, fixed.stderr
    assert "sub.bad.broken ok" in fixed.stderr and "good.loss skipped" in fixed.stderr
    assert built_file(out, "sub.bad.broken", "exe").is_file()

    # Load entries with the runtime only: importing s2s or jax is refused.
    script = RUNTIME_ONLY + textwrap.dedent(f"""
        import numpy as np
        from s2s_runtime import manifest
        W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        x = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
        value = manifest.load({str(out / 'manifest.json')!r}, "good.loss")(W, x)
        assert value.dtype == np.float32 and value.shape == ()
        assert np.allclose(value, np.sum(np.tanh(W @ x)), rtol=1e-5), value
        dW = manifest.load({str(out / 'manifest.json')!r}, "good.grad_loss")(W, x)
        expected = np.outer(1 - np.tanh(W @ x) ** 2, x)
        assert np.allclose(dW, expected, rtol=1e-5, atol=1e-6), (dW, expected)
        a, b = np.array([1.0, 2.0]), np.array([5.0, 7.0])
        first, second = manifest.load({str(out / 'manifest.json')!r}, "good.combine")({{"a": a, "b": b}})
        flat_first, _ = manifest.load_flat({str(out / 'manifest.json')!r}, "good.combine")(a, b)
        assert np.array_equal(first, flat_first)
        assert np.allclose(first, a * 2 + np.array([1.0, 2.0])) and np.allclose(second, b - a)
        x2 = np.linspace(-1, 1, 8).reshape(2, 4)
        proj = manifest.load({str(out / 'manifest.json')!r}, "good.project")(x2)
        assert np.allclose(proj, np.tanh(x2 @ (np.arange(12.0).reshape(4, 3) / 10.0)))
        try:
            manifest.load({str(out / 'manifest.json')!r}, "nonexistent")
        except manifest.ManifestError as e:
            assert "good.grad_loss" in str(e)
        else:
            raise AssertionError("no error for a missing entry")
        assert not any(m.split(".")[0] in ("s2s", "jax") for m in sys.modules), "s2s or jax imported"
        print("ok without s2s and jax")
    """)
    loaded = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path),
                            capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    assert "ok without s2s and jax" in loaded.stdout


def test_compile_module_that_fails_to_import_is_reported(tmp_path):
    (tmp_path / "oops.py").write_text("import s2s\n\n@s2s.export('f32[2]')\ndef f(x):\n    return x\n\nraise RuntimeError('boom')\n")
    result = run_compile(str(tmp_path / "oops.py"), "--out", str(tmp_path / "build"))
    assert result.returncode == 1
    entries = json.loads((tmp_path / "build" / "manifest.json").read_text())["entries"]
    (entry,) = entries.values()
    assert entry["status"] == "failed" and "boom" in entry["error"]
    assert entry["location"] == "oops.py:7"
    assert "[1/1] oops.<module> FAILED oops.py:7\n" in result.stderr


RENDEZVOUS = '''\
import os
import time

import numpy as np
import s2s

# Both compiles read the manifest, then import their module: each waits here until the
# other has arrived too, so that both runs overlap for certain.
open(os.path.join({folder!r}, {me!r}), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join({folder!r}, {other!r})) and time.monotonic() < deadline:
    time.sleep(0.01)


@s2s.export("f32[3]", transforms=("primal",))
def {function}(x):
    return np.sin(x)
'''


def test_two_concurrent_compiles_into_one_folder_keep_both_entries(tmp_path):
    for me, other, function in [("a", "b", "first"), ("b", "a", "second")]:
        (tmp_path / f"{function}.py").write_text(RENDEZVOUS.format(
            folder=str(tmp_path), me=me, other=other, function=function))
    out = tmp_path / "build"
    runs = [subprocess.Popen([sys.executable, "-m", "s2s", "compile", str(tmp_path / f"{m}.py"),
                              "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for m in ("first", "second")]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    entries = json.loads((out / "manifest.json").read_text())["entries"]
    assert sorted(entries) == ["first.first", "second.second"]
    assert all(e["status"] == "ok" for e in entries.values())


# ---------------------------------------------------------------------------------------
# Regressions of issue 13: builds a team can trust

FUSED = '''\
import numpy as np
import s2s


@s2s.export("f32[3,4], f32[4]", transforms=("primal", "grad"))
def fused(W, x):
    return np.sum(np.tanh(W @ x) * x[:3])
'''
W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
X = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)


def fused_expected(W, x):
    t = np.tanh(W @ x)
    return {"fused": [np.sum(t * x[:3])], "grad_fused": [np.outer((1 - t ** 2) * x[:3], x)]}


def loads_and_runs(build, module: str, expected: dict) -> None:
    """Every entry of `module` in `build` runs, through manifest.load_flat (arrays in, a list
    of arrays out), to `expected`."""
    for stem, values in expected.items():
        results = manifest.load_flat(str(build / "manifest.json"), f"{module}.{stem}")(W, X)
        assert all(type(r) is np.ndarray for r in results), results
        for got, want in zip(results, values):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_warm_disk_cache_build_writes_executables_that_load(tmp_path, cache_dir):
    (tmp_path / "warm_cache_module.py").write_text(FUSED)
    module = str(tmp_path / "warm_cache_module.py")
    assert compile_paths([module], str(tmp_path / "cold")) == 0
    assert compile_paths([module], str(tmp_path / "warm")) == 0          # a new --out
    assert compile_paths([module], str(tmp_path / "cold"), force=True) == 0   # --force
    for build in ("cold", "warm"):
        loads_and_runs(tmp_path / build, "warm_cache_module", fused_expected(W, X))


class GarbageExecutable(Executable):
    def serialize(self) -> bytes:
        return b"not an executable"


def not_numeric_results(self, *args):
    return [np.array(object(), dtype=object)]


@pytest.mark.parametrize("sabotage", ["bytes that do not load", "results that are not arrays"])
def test_verification_fails_an_entry_whose_executable_does_not_run(tmp_path, monkeypatch, capsys,
                                                                   sabotage):
    (tmp_path / "sabotaged_module.py").write_text(FUSED)
    if sabotage == "bytes that do not load":
        monkeypatch.setattr(batch_compile, "Executable", GarbageExecutable)
    else:
        monkeypatch.setattr(xla.Executable, "__call__", not_numeric_results)
    assert compile_paths([str(tmp_path / "sabotaged_module.py")], str(tmp_path / "build")) == 1
    entries = batch_compile.read_manifest(str(tmp_path / "build"))["entries"]
    assert {e["status"] for e in entries.values()} == {"failed"}
    assert "sabotaged_module.fused FAILED" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "build")) == ["manifest.json"]


def test_no_verify_writes_without_running_and_a_later_verified_build_checks(tmp_path, monkeypatch):
    (tmp_path / "unverified_module.py").write_text(FUSED)
    module, out = str(tmp_path / "unverified_module.py"), str(tmp_path / "build")
    monkeypatch.setattr(batch_compile, "Executable", GarbageExecutable)
    assert compile_paths([module], out, check=False) == 0
    entries = batch_compile.read_manifest(out)["entries"]
    assert [e["verified"] for e in entries.values()] == [False, False]
    assert compile_paths([module], out) == 1   # unverified entries are not up to date


def test_helper_module_change_rebuilds_the_entries_that_use_it(tmp_path):
    write_files(tmp_path / "src", {
        "helpers.py": "import numpy as np\n\ndef act(x):\n    return np.tanh(x)\n",
        "model.py": "import numpy as np\nimport s2s\nfrom helpers import act\n\n\n"
                    "@s2s.export('f64[3]', transforms=('primal',))\ndef uses_helper(x):\n"
                    "    return act(x) * 2.0\n\n\n"
                    "@s2s.export('f64[3]', transforms=('primal',))\ndef no_helper(x):\n"
                    "    return x + 1.0\n"})
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "src"), "--out", str(out)).returncode == 0
    (tmp_path / "src" / "helpers.py").write_text(
        "import numpy as np\n\ndef act(x):\n    return np.sin(x)\n")
    again = run_compile(str(tmp_path / "src"), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "model.uses_helper ok" in again.stderr and "model.no_helper skipped" in again.stderr
    x = np.array([0.1, -0.7, 2.0])
    value = manifest.load(str(out / "manifest.json"), "model.uses_helper")(x)
    np.testing.assert_allclose(value, np.sin(x) * 2.0)


def test_package_modules_import_each_other_relatively_and_absolutely(tmp_path):
    body = "\n\n@s2s.export('f64[3]', transforms=('primal', 'grad'))\ndef loss(x):\n" \
           "    return np.sum(act(x))\n"
    write_files(tmp_path, {
        "imports_pkg/__init__.py": "",
        "imports_pkg/helpers.py": "import numpy as np\n\ndef act(x):\n    return np.tanh(x) * x\n",
        "imports_pkg/models/__init__.py": "",
        "imports_pkg/models/relative.py": "import numpy as np\nimport s2s\n"
                                          "from ..helpers import act\n" + body,
        "imports_pkg/models/absolute.py": "import numpy as np\nimport s2s\n"
                                          "from imports_pkg.helpers import act\n" + body})
    out = tmp_path / "build"
    assert compile_paths([str(tmp_path / "imports_pkg")], str(out)) == 0
    x = np.array([0.3, -1.2, 0.8])
    for module in ("imports_pkg.models.relative", "imports_pkg.models.absolute"):
        value = manifest.load(str(out / "manifest.json"), f"{module}.loss")(x)
        np.testing.assert_allclose(value, np.sum(np.tanh(x) * x))
        gradient = manifest.load(str(out / "manifest.json"), f"{module}.grad_loss")(x)
        np.testing.assert_allclose(gradient, np.tanh(x) + x * (1 - np.tanh(x) ** 2))


def test_adding_a_same_named_export_elsewhere_renames_no_entry(tmp_path, capsys):
    write_files(tmp_path / "src", {"first_namer.py": FUSED})
    out = str(tmp_path / "build")
    assert compile_paths([str(tmp_path / "src")], out) == 0
    before = batch_compile.read_manifest(out)["entries"]
    write_files(tmp_path / "src", {"second_namer.py": FUSED})
    capsys.readouterr()
    assert compile_paths([str(tmp_path / "src")], out) == 0
    entries = batch_compile.read_manifest(out)["entries"]
    assert sorted(entries) == ["first_namer.fused", "first_namer.grad_fused",
                               "second_namer.fused", "second_namer.grad_fused"]
    assert {n: entries[n] for n in before} == before
    assert "first_namer.fused skipped" in capsys.readouterr().err


def test_removed_export_files_are_deleted_and_reported_and_unlisted_files_kept(tmp_path):
    source = FUSED + "\n\n@s2s.export('f32[2]', transforms=('primal',))\ndef dropped(x):\n" \
                     "    return x * 3.0\n"
    write_files(tmp_path / "src", {"shrinking.py": source})
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "src"), "--out", str(out)).returncode == 0
    dropped = built_files(out, "shrinking.dropped")
    write_files(out, {"notes.txt": "mine", "stray.exe": "not listed"})
    (tmp_path / "src" / "shrinking.py").write_text(FUSED)
    again = run_compile(str(tmp_path / "src"), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert f"removed {', '.join(dropped)} (shrinking.dropped: no longer exported)" in again.stderr
    assert sorted(os.listdir(out)) == sorted(
        ["manifest.json", "notes.txt", "stray.exe"]
        + built_files(out, "shrinking.fused") + built_files(out, "shrinking.grad_fused"))
    assert sorted(json.loads((out / "manifest.json").read_text())["entries"]) == [
        "shrinking.fused", "shrinking.grad_fused"]


def test_entries_of_another_version_have_their_files_removed(tmp_path):
    """Regression: entries built by another s2s or jaxlib version were dropped from the
    manifest (their executables do not load here) but their files stayed, listed nowhere."""
    write_files(tmp_path / "one", {"first.py": FUSED})
    write_files(tmp_path / "two", {"second.py": FUSED})
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "one"), "--out", str(out)).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["jaxlib_version"] = "0.0.1"
    (out / "manifest.json").write_text(json.dumps(manifest))
    again = run_compile(str(tmp_path / "two"), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "(first.fused: built by another s2s or jaxlib version)" in again.stderr
    assert not [f for f in os.listdir(out) if f.startswith("first.")]
    assert sorted(json.loads((out / "manifest.json").read_text())["entries"]) == [
        "second.fused", "second.grad_fused"]


def test_a_damaged_manifest_cannot_make_compile_remove_other_files(tmp_path):
    """Removal takes only the kinds of file compile writes: an entry listing the manifest,
    a user's file or a path elsewhere loses nothing of them."""
    source = FUSED + "\n\n@s2s.export('f32[2]', transforms=('primal',))\ndef dropped(x):\n" \
                     "    return x * 3.0\n"
    write_files(tmp_path / "src", {"shrinking.py": source})
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "src"), "--out", str(out)).returncode == 0
    write_files(out, {"notes.txt": "mine"})
    write_files(tmp_path, {"outside.exe": "not the build's"})
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["entries"]["shrinking.dropped"]["files"].update(
        {"a": "manifest.json", "b": "notes.txt", "c": "../outside.exe", "d": "manifest.json.lock"})
    (out / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "src" / "shrinking.py").write_text(FUSED)
    again = run_compile(str(tmp_path / "src"), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "notes.txt").read_text() == "mine" and (tmp_path / "outside.exe").is_file()
    assert sorted(json.loads((out / "manifest.json").read_text())["entries"]) == [
        "shrinking.fused", "shrinking.grad_fused"]


def test_same_package_from_two_checkouts_gives_identical_manifest_and_mlir(tmp_path):
    package = {"repro_pkg/__init__.py": "",
               "repro_pkg/model.py": "import numpy as np\nimport s2s\n\nTABLE = np.eye(3)\n\n\n"
                                     "@s2s.export('f64[3]', transforms=('primal', 'grad'))\n"
                                     "def loss(x):\n    return np.sum(np.tanh(TABLE @ x))\n"}
    for checkout in ("one", "two"):
        write_files(tmp_path / checkout, package)
        result = run_compile(str(tmp_path / checkout / "repro_pkg"), "--out",
                             str(tmp_path / checkout / "build"))
        assert result.returncode == 0, result.stderr
    one, two = tmp_path / "one" / "build", tmp_path / "two" / "build"
    assert sorted(os.listdir(one)) == sorted(os.listdir(two))
    for name in os.listdir(one):
        if name.endswith((".json", ".mlir", ".hlo.txt", ".npz")):
            assert (one / name).read_bytes() == (two / name).read_bytes(), name
    mlir = built_file(one, "repro_pkg.model.loss", "mlir").read_text()
    assert 'loc("repro_pkg/model.py":9:' in mlir and str(tmp_path) not in mlir
    assert 'source_file="repro_pkg/model.py" source_line=9' in built_file(one, "repro_pkg.model.loss", "hlo").read_text()


def test_module_that_stops_importing_has_its_entries_files_removed_and_says_why(tmp_path):
    write_files(tmp_path / "src", {"breaking.py": FUSED})
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "src"), "--out", str(out)).returncode == 0
    fused = built_files(out, "breaking.fused")
    (tmp_path / "src" / "breaking.py").write_text(FUSED + "\nraise RuntimeError('boom')\n")
    broken = run_compile(str(tmp_path / "src"), "--out", str(out))
    assert broken.returncode == 1
    assert f"removed {', '.join(fused)} (breaking.fused: its module failed to import)" in broken.stderr
    entries = json.loads((out / "manifest.json").read_text())["entries"]
    assert list(entries) == ["breaking.<module>"] and "boom" in entries["breaking.<module>"]["error"]
    assert sorted(os.listdir(out)) == ["manifest.json"]


PMAPPED = '''\
import numpy as np
import s2s
from s2s import lax


def local_step(w, x):
    loss = lax.pmean(np.tanh(x @ w) ** 2, "devices")
    return loss, x * lax.axis_index("devices")


step = s2s.export("f64[3], f64[2,4,3]", transforms=("primal",))(
    s2s.pmap(local_step, "devices", in_axes=(None, 0), out_axes=1))


def local_loss(w, x):
    return lax.pmean(np.sum(np.tanh(x @ w) ** 2), "devices")


loss = s2s.export("f64[3], f64[2,4,3]", transforms=("grad",))(
    s2s.pmap(local_loss, "devices", in_axes=(None, 0), out_axes=None))


def inner(v):
    return lax.psum(v, "j") * (1 + lax.axis_index("i"))


nested = s2s.export("f64[2,2,3]", transforms=("primal",))(s2s.pmap(s2s.pmap(inner, "j"), "i"))
'''


def test_an_exported_pmap_compiles_to_its_spmd_module_and_loads_on_as_many_devices(tmp_path):
    (tmp_path / "parallel.py").write_text(PMAPPED)
    out = tmp_path / "build"
    result = run_compile(str(tmp_path / "parallel.py"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    entries = json.loads((out / "manifest.json").read_text())["entries"]
    entry = entries["parallel.pmap_local_step"]
    assert entry["replicas"] == {"count": 2, "in_axes": [None, 0], "out_axes": [1, 1]}
    # the grad of a pmap calls the pmap primitive: run as jit runs it, inputs whole
    assert entries["parallel.grad_pmap_local_loss"]["replicas"] == {"count": 2, "in_axes": [None, None],
                                                                    "out_axes": [None]}
    assert entry["inputs"] == [{"shape": [3], "dtype": "float64"}, {"shape": [2, 4, 3], "dtype": "float64"}]
    assert entry["outputs"][1] == {"shape": [4, 2, 3], "dtype": "float64"}
    assert "mhlo.num_replicas = 2" in built_file(out, "parallel.pmap_local_step", "mlir").read_text()
    script = RUNTIME_ONLY + textwrap.dedent(f"""
        import numpy as np
        from s2s_runtime import manifest
        step = manifest.load({str(out / 'manifest.json')!r}, "parallel.pmap_local_step")
        w, x = np.array([0.3, -0.2, 0.5]), np.linspace(-1, 1, 24).reshape(2, 4, 3)
        loss, scaled = step(w, x)
        each = np.mean([np.tanh(x[i] @ w) ** 2 for i in range(2)], axis=0)
        assert np.allclose(loss, np.stack([each, each], axis=1))
        assert np.array_equal(scaled, np.stack([x[0] * 0, x[1] * 1], axis=1))
        dw = manifest.load({str(out / 'manifest.json')!r}, "parallel.grad_pmap_local_loss")(w, x)
        h = np.tanh(x @ w)   # d/dw of the mean over devices of sum(tanh(x w)^2)
        assert np.allclose(dw, np.einsum("dbi,db->i", x, 2 * h * (1 - h ** 2)) / 2)
        v = np.arange(12.0).reshape(2, 2, 3)
        both = manifest.load({str(out / 'manifest.json')!r}, "parallel.pmap_pmap_inner")(v)
        assert np.array_equal(both, v.sum(axis=1, keepdims=True) * np.array([1.0, 2.0])[:, None, None]
                              + 0 * v)
        assert not any(m.split(".")[0] in ("s2s", "jax") for m in sys.modules), "s2s or jax imported"
        print("ok on 4 devices")
    """)
    loaded = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), capture_output=True,
                            text=True, env=dict(os.environ, S2S_NUM_CPU_DEVICES="4"))
    assert "ok on 4 devices" in loaded.stdout, loaded.stdout + loaded.stderr
    with pytest.raises(manifest.ManifestError, match="runs as 2 replicas.*has 1 device.*S2S_NUM_CPU_DEVICES=2"):
        manifest.load(str(out / "manifest.json"), "parallel.pmap_local_step")
    emitted = subprocess.run([sys.executable, "-m", "s2s", "emit", str(tmp_path / "parallel.py"),
                              "--out", str(tmp_path / "generated")], cwd=ROOT, capture_output=True, text=True)
    assert emitted.returncode == 0, emitted.stderr
    assert "import s2s\n" not in (tmp_path / "generated" / "pmap_local_step.py").read_text()


def test_a_damaged_replicas_field_is_a_manifest_error(tmp_path):
    (tmp_path / "parallel.py").write_text(PMAPPED)
    out = tmp_path / "build"
    assert run_compile(str(tmp_path / "parallel.py"), "--out", str(out)).returncode == 0
    path = out / "manifest.json"
    good = json.loads(path.read_text())
    for damaged in ({"count": 2, "in_axes": [None, 5], "out_axes": [1, 1]},
                    {"count": 3, "in_axes": [None, 0], "out_axes": [1, 1]},
                    {"count": 2, "in_axes": [None], "out_axes": [1, 1]},
                    {"count": 2, "in_axes": [None, 0], "out_axes": [0, 1]}, [2]):
        manifest_data = json.loads(json.dumps(good))
        manifest_data["entries"]["parallel.pmap_local_step"]["replicas"] = damaged
        path.write_text(json.dumps(manifest_data))
        with pytest.raises(manifest.ManifestError, match="replicas"):
            manifest.load(str(path), "parallel.pmap_local_step")


DRAWING = '''
import numpy as np
import s2s

rng = np.random.default_rng(0)


@s2s.export("f64[3]", transforms=("primal", "grad"))
def noisy_loss(w):
    eps = rng.standard_normal(3)
    return np.sum((w + eps) ** 2)
'''


def test_an_exported_function_that_draws_takes_its_generators_as_documented_input(tmp_path):
    (tmp_path / "drawing_module.py").write_text(DRAWING)
    assert compile_paths([str(tmp_path / "drawing_module.py")], str(tmp_path / "build")) == 0
    path = str(tmp_path / "build" / "manifest.json")
    grad = manifest.load(path, "drawing_module.grad_noisy_loss")
    assert grad.entry["generators"] == ["rng"]
    w = np.array([0.5, -1.0, 2.0])
    with pytest.raises(TypeError, match="generators="):
        grad(w)
    first = grad(w, generators=[np.random.default_rng(5)])
    again = grad(w, generators=[np.random.default_rng(5)])
    other = grad(w, generators=[np.random.default_rng(6)])
    np.testing.assert_array_equal(first, again)          # reproducible from the generator's state
    assert not np.array_equal(first, other)
    seeded = grad(w, generators=[np.array([1, 2], np.uint64)])   # or the seed itself
    np.testing.assert_array_equal(seeded, grad(w, generators=[np.array([1, 2], np.uint64)]))
    # d/dw sum((w + eps)^2) = 2 (w + eps): the primal drawn from the same seed gives eps
    value = manifest.load(path, "drawing_module.noisy_loss")
    total = value(w, generators=[np.array([1, 2], np.uint64)])
    eps = seeded / 2 - w
    np.testing.assert_allclose(total, np.sum((w + eps) ** 2))


STRUCTURED = '''
import collections

import numpy as np
import s2s

Parts = collections.namedtuple("Parts", "total doubled")


@s2s.export("{'W': f64[2,3], 'b': f64[3]}, f64[4,2], 3", transforms=("primal", "grad"))
def model(params, x, power):
    return np.sum(np.tanh(x @ params['W'] + params['b']) ** power)


@s2s.export("{'W': f64[2,3], 'b': f64[3]}, f64[4,2]", transforms=("primal",))
def parts(params, x):
    return Parts(np.sum(x @ params['W']), [x * 2.0, None])
'''


def test_a_loaded_entry_takes_the_functions_own_arguments_and_returns_its_own_result_tree(tmp_path):
    """`manifest.load`: dict parameters in (by position or keyword, static arguments as
    compiled), the gradient's dict out, a namedtuple result rebuilt by its fields; the
    flat form beside it; mistakes named by the argument's path."""
    import s2s
    (tmp_path / "structured.py").write_text(STRUCTURED)
    assert compile_paths([str(tmp_path / "structured.py")], str(tmp_path / "build")) == 0
    path = str(tmp_path / "build" / "manifest.json")
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((2, 3)), "b": rng.standard_normal(3)}
    x = rng.standard_normal((4, 2))

    def model(params, x, power):
        return np.sum(np.tanh(x @ params['W'] + params['b']) ** power)
    grad = manifest.load(path, "structured.grad_model")(params, x, 3)
    assert sorted(grad) == ["W", "b"]
    expected = s2s.grad(model)(params, x, 3)
    for key in grad:
        np.testing.assert_allclose(grad[key], expected[key], rtol=1e-12)
    value = manifest.load(path, "structured.model")(x=x, params=params, power=3)
    np.testing.assert_allclose(value, model(params, x, 3), rtol=1e-12)
    flat = manifest.load_flat(path, "structured.grad_model")(params["W"], params["b"], x)
    np.testing.assert_allclose(flat[0], expected["W"], rtol=1e-12)

    result = manifest.load(path, "structured.parts")(params, x)
    assert type(result).__name__ == "Parts" and result._fields == ("total", "doubled")
    np.testing.assert_allclose(result.total, np.sum(x @ params["W"]), rtol=1e-12)
    assert result.doubled[1] is None and np.array_equal(result.doubled[0], x * 2.0)

    loaded = manifest.load(path, "structured.model")
    with pytest.raises(TypeError, match=r"argument power is 2, but the entry was compiled for 3"):
        loaded(params, x, 2)
    with pytest.raises(TypeError, match=r"argument params must be a dict with the keys \['W', 'b'\]"):
        loaded({"W": params["W"]}, x, 3)
    with pytest.raises(TypeError, match=r"missing the argument\(s\) power"):
        loaded(params, x)


def test_a_damaged_structure_is_a_manifest_error(tmp_path):
    (tmp_path / "structured.py").write_text(STRUCTURED)
    assert compile_paths([str(tmp_path / "structured.py")], str(tmp_path / "build")) == 0
    path = tmp_path / "build" / "manifest.json"
    document = json.loads(path.read_text())
    entry = document["entries"]["structured.grad_model"]
    entry["out_structure"]["dict"][0][1] = {"output": 1}   # two leaves numbered 1, none 0
    path.write_text(json.dumps(document))
    with pytest.raises(manifest.ManifestError, match="do not number the entry's 2 outputs once each"):
        manifest.load(str(path), "structured.grad_model")
    entry["out_structure"] = {"tuple": [{"output": 0}, {"weird": 1}]}
    path.write_text(json.dumps(document))
    with pytest.raises(manifest.ManifestError, match="is not a structure node"):
        manifest.load(str(path), "structured.grad_model")
