"""`s2s compile`: batch compilation of a package's exports, the manifest, incremental
rebuilds, failures with their location, and loading an entry with s2s_runtime alone."""
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

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


def run_compile(*args):
    return subprocess.run([sys.executable, "-m", "s2s", "compile", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_compile_package_reports_failures_skips_unchanged_and_loads_without_s2s(tmp_path):
    pkg = write_package(tmp_path)
    out = tmp_path / "build"
    result = run_compile(str(pkg), "--out", str(out), "-j", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("good.loss", "good.grad_loss", "good.combine", "good.project"):
        for suffix in (".mlir", ".hlo.txt", ".exe"):
            assert (out / f"{name}{suffix}").is_file(), f"{name}{suffix} missing\n{result.stderr}"
    assert not (out / "sub.bad.broken.exe").exists()
    assert "stablehlo" in (out / "good.loss.mlir").read_text()
    assert "ENTRY" in (out / "good.grad_loss.hlo.txt").read_text()

    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["entries"]
    assert set(entries) == {"good.loss", "good.grad_loss", "good.combine", "good.project",
                            "sub.bad.broken"}
    assert entries["good.project"]["num_consts"] == 1 and (out / "good.project.consts.npz").is_file()
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
    assert loss["mlir_sha256"] == hashlib.sha256((out / "good.loss.mlir").read_bytes()).hexdigest()
    assert loss["exe_sha256"] == hashlib.sha256((out / "good.loss.exe").read_bytes()).hexdigest()
    # progress lines, one per target, and the failure's location on stderr
    assert "[" in result.stderr and "/5] good.grad_loss ok" in result.stderr
    assert f"bad.py:{BAD_LINE}" in result.stderr

    # Second run: nothing changed, so every good entry is skipped (the failure is retried).
    mtime = (out / "good.loss.exe").stat().st_mtime_ns
    before = (out / "manifest.json").read_bytes()
    again = run_compile(str(pkg), "--out", str(out), "-j", "2")
    assert again.returncode == 1
    for name in ("good.loss", "good.grad_loss", "good.combine"):
        assert f"{name} skipped" in again.stderr, again.stderr
    assert (out / "good.loss.exe").stat().st_mtime_ns == mtime
    assert (out / "manifest.json").read_bytes() == before   # no timings, no run state

    # Fixing the broken module recompiles it alone; exit status 0.
    (pkg / "sub" / "bad.py").write_text(BAD.replace("f32[5]", "f32[4]"))
    fixed = run_compile(str(pkg), "--out", str(out))
    assert fixed.returncode == 0, fixed.stderr
    assert "sub.bad.broken ok" in fixed.stderr and "good.loss skipped" in fixed.stderr
    assert (out / "sub.bad.broken.exe").is_file()

    # Load entries with the runtime only: importing s2s or jax is refused.
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path, target=None):
                for blocked in ("s2s", "jax"):
                    if name == blocked or name.startswith(blocked + "."):
                        raise ImportError(name + " is blocked in this test")
        sys.meta_path.insert(0, Block())
        import numpy as np
        from s2s_runtime import manifest
        W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        x = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
        (value,) = manifest.load({str(out / 'manifest.json')!r}, "good.loss")(W, x)
        assert value.dtype == np.float32 and value.shape == ()
        assert np.allclose(value, np.sum(np.tanh(W @ x)), rtol=1e-5), value
        (dW,) = manifest.load({str(out / 'manifest.json')!r}, "good.grad_loss")(W, x)
        expected = np.outer(1 - np.tanh(W @ x) ** 2, x)
        assert np.allclose(dW, expected, rtol=1e-5, atol=1e-6), (dW, expected)
        a, b = np.array([1.0, 2.0]), np.array([5.0, 7.0])
        first, second = manifest.load({str(out / 'manifest.json')!r}, "good.combine")(a, b)
        assert np.allclose(first, a * 2 + np.array([1.0, 2.0])) and np.allclose(second, b - a)
        x2 = np.linspace(-1, 1, 8).reshape(2, 4)
        (proj,) = manifest.load({str(out / 'manifest.json')!r}, "good.project")(x2)
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
