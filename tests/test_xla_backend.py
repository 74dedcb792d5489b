"""jit(backend="xla"): staged, lowered to StableHLO, compiled and run by jaxlib alone."""
import inspect
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import s2s
from s2s.emit.stablehlo import lower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp_loss(params, x):
    h = np.tanh(x @ params["W"] + params["b"])
    return np.sum(h * h) / 2.0


def test_jit_xla_matches_numpy():
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    x = rng.standard_normal((5, 4))
    np.testing.assert_allclose(s2s.jit(mlp_loss, backend="xla")(params, x), mlp_loss(params, x), rtol=1e-12)


def test_jit_xla_of_grad_matches_the_python_backend():
    rng = np.random.default_rng(1)
    params = {"W": rng.standard_normal((4, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    x = rng.standard_normal((5, 4)).astype(np.float32)
    g_xla = s2s.jit(s2s.grad(mlp_loss), backend="xla")(params, x)
    g_py = s2s.grad(mlp_loss)(params, x)
    for k in params:
        np.testing.assert_allclose(g_xla[k], g_py[k], rtol=1e-5, atol=1e-6)
        assert g_xla[k].dtype == np.float32


def test_lowered_text_is_readable_and_located():
    text = lower(s2s.make_jaxpr(mlp_loss)({"W": np.ones((4, 3)), "b": np.ones(3)}, np.ones((5, 4))))
    assert "func.func public @main(%W: tensor<4x3xf64>, %b: tensor<3xf64>, %x: tensor<5x4xf64>)" in text
    assert "stablehlo.dot_general %x, %W" in text
    tanh_line = inspect.getsourcelines(mlp_loss)[1] + 1
    assert re.search(rf'%h = stablehlo.tanh .* loc\(".*test_xla_backend.py":{tanh_line}:\d+\)', text)


def test_omnistaged_constants_keep_the_module_small():
    def big():
        return np.ones((300, 1024, 1024)).sum()
    text = lower(s2s.make_jaxpr(big)())
    assert len(text) < 2000


def test_jit_of_grad_runs_without_jax():
    """jaxlib imports jax by itself when it can, and jax patches jaxlib: block it."""
    script = textwrap.dedent("""
        import sys
        class BlockJax:
            def find_spec(self, name, path, target=None):
                if name == "jax" or name.startswith("jax."):
                    raise ImportError("jax is blocked in this test")
        sys.meta_path.insert(0, BlockJax())
        import numpy as np
        import s2s
        sys.path.insert(0, "tests")
        from test_xla_backend import mlp_loss
        params = {"W": np.ones((4, 3)) * 0.1, "b": np.zeros(3)}
        x = np.ones((5, 4))
        g = s2s.jit(s2s.grad(mlp_loss), backend="xla")(params, x)
        expected = s2s.grad(mlp_loss)(params, x)
        assert np.allclose(g["W"], expected["W"]) and np.allclose(g["b"], expected["b"])
        assert not any(m == "jax" or m.startswith("jax.") for m in sys.modules), "jax was imported"
        print("ok without jax")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok without jax" in result.stdout


def test_lower_and_compile_expose_stablehlo_hlo_and_xla_figures():
    f = s2s.jit(lambda x: np.tanh(x) * 2.0, backend="xla")
    lowered = f.lower(np.ones(4))
    assert "stablehlo.tanh" in lowered.as_text()
    assert "tanh" in lowered.as_hlo_text() and "ENTRY" in lowered.as_hlo_text()
    compiled = lowered.compile()
    assert "ENTRY" in compiled.as_hlo_text()
    assert compiled.memory_analysis().temp_size_in_bytes >= 0
    assert compiled.cost_analysis() is not None


def test_devices():
    assert s2s.device_count() >= 1
    assert s2s.devices()[0].platform == "cpu"
    assert s2s.local_device_count() == s2s.device_count()
    assert s2s.process_index() == 0 and s2s.process_count() == 1
