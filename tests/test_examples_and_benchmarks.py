"""Every script in examples/ and benchmarks/ runs here (benchmarks at a tiny size), so none rots."""
import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

import s2s

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mlp_example_runs_and_agrees_with_numpy(tmp_path):
    example = runpy.run_path(os.path.join(ROOT, "examples", "mlp.py"))
    expected, from_interpreter, from_module = example["main"](batch=4, sizes=(6, 5, 3), out_dir=str(tmp_path))
    np.testing.assert_allclose(from_interpreter, expected, rtol=1e-5)
    np.testing.assert_allclose(from_module, expected, rtol=1e-5)
    assert (tmp_path / "mlp_loss.py").exists()


def test_mlp_example_as_a_script():
    result = subprocess.run([sys.executable, "examples/mlp.py"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "agree" in result.stdout


def test_committed_generated_example_is_fresh():
    """examples/generated/mlp_loss.py is what the example writes (regenerate: python examples/mlp.py)."""
    import s2s
    example = runpy.run_path(os.path.join(ROOT, "examples", "mlp.py"))
    rng = np.random.default_rng(0)
    params = example["init_params"](rng)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
    source = s2s.emit_python(example["loss"], params, x, y)
    with open(os.path.join(ROOT, "examples", "generated", "mlp_loss.py")) as f:
        assert f.read() == source


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(os.path.join(ROOT, "benchmarks")) if f.endswith(".py")))
def test_benchmark_runs_at_tiny_size(script):
    """In this process: a benchmark must leave the settings it changes as it found them (one
    that turned jax's x64 off made a later jax while_loop in float32 spin forever)."""
    import jax
    before = (jax.config.jax_enable_x64, s2s.config.cache_key())
    module = runpy.run_path(os.path.join(ROOT, "benchmarks", script))
    module["main"](["--tiny"])
    assert (jax.config.jax_enable_x64, s2s.config.cache_key()) == before
