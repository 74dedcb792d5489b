"""`s2s compile` end to end, as a team uses it: the CLI in a subprocess on a small package
(relative and absolute imports of a helpers module, one export name in two modules), a
helper edited between builds, and every entry loaded with `s2s_runtime.manifest.load_flat` and
checked against NumPy. Once with an empty disk cache, once with it warm."""
import os
import re
import subprocess
import sys

import numpy as np

from s2s_runtime import manifest
from tests.test_build_plan import write_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HELPERS = "import numpy as np\n\n\ndef act(x):\n    return np.{activation}(x)\n"
PACKAGE = {
    "wf_pkg/__init__.py": "",
    "wf_pkg/helpers.py": HELPERS.format(activation="tanh"),
    "wf_pkg/models/__init__.py": "",
    "wf_pkg/models/dense.py": '''\
import numpy as np
import s2s

from ..helpers import act


@s2s.export("f32[3,4], f32[4]", transforms=("primal", "grad"))
def loss(W, x):
    return np.sum(act(W @ x))
''',
    "wf_pkg/models/conv.py": '''\
import numpy as np
import s2s

from wf_pkg.helpers import act


@s2s.export("f64[3], f64[8]", transforms=("primal",))
def loss(k, x):
    return np.sum(act(k[0] * x[:-2] + k[1] * x[1:-1] + k[2] * x[2:]))


@s2s.export("f64[8]", transforms=("primal",))
def differences(x):
    return x[1:] - x[:-1]
''',
}
DENSE, CONV = "wf_pkg.models.dense", "wf_pkg.models.conv"
ENTRIES = {f"{DENSE}.loss", f"{DENSE}.grad_loss", f"{CONV}.loss", f"{CONV}.differences"}
USES_HELPER = ENTRIES - {f"{CONV}.differences"}

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
X = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
K = np.array([0.5, -0.25, 1.0])
SIGNAL = np.linspace(-2, 2, 8)
ACTIVATIONS = {"tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2), "sin": (np.sin, np.cos)}


def expected(activation: str) -> dict:
    """Each entry's arguments and NumPy's results, for the helper's activation."""
    act, derivative = ACTIVATIONS[activation]
    convolved = K[0] * SIGNAL[:-2] + K[1] * SIGNAL[1:-1] + K[2] * SIGNAL[2:]
    return {f"{DENSE}.loss": ((W, X), [np.sum(act(W @ X))]),
            f"{DENSE}.grad_loss": ((W, X), [np.outer(derivative(W @ X), X)]),
            f"{CONV}.loss": ((K, SIGNAL), [np.sum(act(convolved))]),
            f"{CONV}.differences": ((SIGNAL,), [np.diff(SIGNAL)])}


def compile_cli(source, out, cache, *options) -> dict[str, str]:
    """Runs `s2s compile` as a user would; each entry's progress status (ok, skipped)."""
    env = dict(os.environ, S2S_CACHE_DIR=str(cache))
    result = subprocess.run([sys.executable, "-m", "s2s", "compile", str(source), "--out", str(out),
                             *options], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"^\[\d+/\d+\] (\S+) (ok|skipped)", result.stderr, re.MULTILINE))


def check_every_entry(out, activation: str) -> None:
    for name, (args, wanted) in expected(activation).items():
        results = manifest.load_flat(str(out / "manifest.json"), name)(*args)
        assert all(type(r) is np.ndarray for r in results), (name, results)
        assert [r.dtype for r in results] == [w.dtype for w in wanted], name
        for got, want in zip(results, wanted):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def cache_entries(cache) -> int:
    return len([n for n in os.listdir(cache) if n.endswith(".s2sx")])


def test_compile_edit_rebuild_and_load_with_a_cold_then_warm_disk_cache(tmp_path):
    write_files(tmp_path, PACKAGE)
    package, cache = tmp_path / "wf_pkg", tmp_path / "cache"
    helpers = package / "helpers.py"

    # Cold: an empty cache folder.
    cold = tmp_path / "cold"
    assert compile_cli(package, cold, cache, "-j", "2") == dict.fromkeys(ENTRIES, "ok")
    check_every_entry(cold, "tanh")
    helpers.write_text(HELPERS.format(activation="sin"))
    rebuilt = compile_cli(package, cold, cache)
    assert {n for n, s in rebuilt.items() if s == "ok"} == USES_HELPER
    assert {n for n, s in rebuilt.items() if s == "skipped"} == ENTRIES - USES_HELPER
    check_every_entry(cold, "sin")

    # Warm: every executable is in the cache; a new build folder, then an edit back.
    stored = cache_entries(cache)
    warm = tmp_path / "warm"
    assert compile_cli(package, warm, cache) == dict.fromkeys(ENTRIES, "ok")
    check_every_entry(warm, "sin")
    helpers.write_text(HELPERS.format(activation="tanh"))
    rebuilt = compile_cli(package, warm, cache)
    assert {n for n, s in rebuilt.items() if s == "ok"} == USES_HELPER
    check_every_entry(warm, "tanh")
    assert cache_entries(cache) == stored   # nothing compiled that the cache did not hold
