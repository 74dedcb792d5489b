"""Generated gradient modules run in production with NumPy and s2s-runtime alone (runtime/,
a distribution of its own): in a subprocess where jaxlib, jax and s2s cannot be imported, a
module written by `s2s.emit_python` imports s2s_runtime, runs and matches autograd; one
that calls no runtime helper imports NumPy alone and runs with s2s_runtime blocked too."""
import subprocess
import sys

import autograd
import autograd.numpy as anp
import numpy as np

import s2s
from tests.helpers import CHECKOUT_PATH

# Runs `function` of the emitted module `module` on the arrays of args.npz, saves its result
# to result.npy, and fails if any of `blocked` was imported (a blocked import raises anyway).
RUN_BLOCKED = """\
import sys
BLOCKED = set(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(name + " is blocked in this test")
sys.meta_path.insert(0, Block())
import importlib
import numpy as np
module, function = sys.argv[2], sys.argv[3]
args = np.load("args.npz")
result = getattr(importlib.import_module(module), function)(*(args[f"arg{i}"] for i in range(len(args.files))))
np.save("result.npy", result)
assert not BLOCKED & {name.split(".")[0] for name in sys.modules}, sorted(sys.modules)
"""


def sorted_loss(w, x, idx):
    """Gathers and sorts: its gradient calls rt.sort_multi and rt.scatter_add."""
    h = np.tanh(x @ w)
    return np.sum(np.sort(h[idx]) * np.arange(3.0))


def sorted_loss_autograd(w, x, idx):
    return anp.sum(anp.sort(anp.tanh(anp.dot(x, w))[idx]) * anp.arange(3.0))


def mlp_loss(w, x):
    """Its gradient is NumPy through and through: no runtime helper."""
    return np.sum(np.tanh(x @ w) ** 2)


def mlp_loss_autograd(w, x):
    return anp.sum(anp.tanh(anp.dot(x, w)) ** 2)


def run_emitted(tmp_path, fn, args, blocked) -> tuple[str, np.ndarray]:
    """Writes the module of s2s.grad(fn) into tmp_path and runs it there with `blocked`
    unimportable; returns its source and its result."""
    name = f"grad_{fn.__name__}"
    source = s2s.emit_python(s2s.grad(fn), *args)
    (tmp_path / f"{name}.py").write_text(source)
    np.savez(tmp_path / "args.npz", **{f"arg{i}": a for i, a in enumerate(args)})
    run = subprocess.run([sys.executable, "-c", RUN_BLOCKED, ",".join(blocked), name, name], cwd=tmp_path,
                         capture_output=True, text=True, env={"PYTHONPATH": CHECKOUT_PATH, "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    return source, np.load(tmp_path / "result.npy")


def test_a_gradient_module_runs_with_numpy_and_the_runtime_without_jaxlib_or_s2s(tmp_path):
    rng = np.random.default_rng(0)
    args = (rng.normal(size=3), rng.normal(size=(4, 3)), np.array([3, 0, 2]))
    source, got = run_emitted(tmp_path, sorted_loss, args, blocked=("jaxlib", "jax", "s2s"))
    assert "import s2s_runtime as rt" in source and "rt.sort_multi(" in source, source
    np.testing.assert_allclose(got, autograd.grad(sorted_loss_autograd)(*args), rtol=1e-12, atol=1e-14)


def test_a_module_that_calls_no_helper_imports_and_needs_numpy_alone(tmp_path):
    rng = np.random.default_rng(1)
    args = (rng.normal(size=(3, 2)), rng.normal(size=(4, 3)))
    source, got = run_emitted(tmp_path, mlp_loss, args, blocked=("jaxlib", "jax", "s2s", "s2s_runtime"))
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import numpy as np"], source
    np.testing.assert_allclose(got, autograd.grad(mlp_loss_autograd)(*args), rtol=1e-12, atol=1e-14)
