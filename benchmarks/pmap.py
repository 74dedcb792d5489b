"""A data-parallel MLP training step on 8 CPU devices with `s2s.pmap`, against the same
step with `s2s.jit` on one device on the same total batch, and against `jax.pmap` on the
same 8 CPU devices, in the same run.

    python benchmarks/pmap.py           # full size
    python benchmarks/pmap.py --tiny    # what the test suite runs

The step is grad of a tanh MLP's softmax cross-entropy (784-512-512-10, float32, batch 128
per device, 1024 in all), the gradients averaged over devices with `pmean`, then an SGD
update; the parameters are replicated (`in_axes=None`) and the updated ones returned once
(`out_axes=None`). Every side gets NumPy arrays and its results are read as NumPy. The
client's device count is fixed when first made, so the script runs itself again in a child
process with 8 CPU devices (S2S_NUM_CPU_DEVICES=8, and jax's
--xla_force_host_platform_device_count=8) when it is not in one.
"""
import os
import runpy
import subprocess
import sys
import types

import numpy as np

DEVICES = 8
HERE = os.path.dirname(os.path.abspath(__file__))


def loss(params, x, y):
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    shifted = logits - logits.max(axis=1, keepdims=True)
    return -np.mean(np.sum(y * (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))), axis=1))


def run(tiny: bool):
    import jax
    import jax.numpy as jnp

    import s2s

    xla = types.SimpleNamespace(**runpy.run_path(os.path.join(HERE, "xla.py")))
    assert s2s.device_count() == DEVICES and jax.device_count() == DEVICES
    rng = np.random.default_rng(0)
    sizes = (12, 16, 16, 4) if tiny else (784, 512, 512, 10)
    per_device = 4 if tiny else 128
    batch = DEVICES * per_device
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    xs, ys = x.reshape(DEVICES, per_device, -1), y.reshape(DEVICES, per_device, -1)

    def single_step(params, x, y):
        grads = s2s.grad(loss)(params, x, y)
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, grads)]

    def parallel_step(params, x, y):
        grads = s2s.lax.pmean(s2s.grad(loss)(params, x, y), "batch")
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, grads)]

    jax_loss = xla.fresh(loss, np=jnp)

    def jax_parallel_step(params, x, y):
        grads = jax.lax.pmean(jax.grad(jax_loss)(params, x, y), "batch")
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, grads)]

    with xla.disk_cache_off():
        ours = s2s.pmap(parallel_step, "batch", in_axes=(None, 0, 0), out_axes=None)
        one_device = s2s.jit(single_step)
        theirs = jax.pmap(jax_parallel_step, "batch", in_axes=(None, 0, 0), out_axes=None)

        def run_ours():
            return s2s.tree_map(np.asarray, ours(params, xs, ys))

        def run_one_device():
            return s2s.tree_map(np.asarray, one_device(params, x, y))

        def run_theirs():
            return [(np.asarray(W), np.asarray(b)) for W, b in theirs(params, xs, ys)]
        expected = run_one_device()
        xla.assert_trees_close(run_ours(), expected, rtol=2e-3, atol=1e-5)
        xla.assert_trees_close(run_theirs(), expected, rtol=2e-3, atol=1e-5)
    repeats, calls = (3, 2) if tiny else (15, 5)
    label = "tiny MLP" if tiny else "MLP 784-512-512-10, f32, 8 x b128"
    rows = [(f"pmap step, {label}", "jit on 1 device, b1024" if not tiny else "jit on 1 device",
             *xla.medians_per_call(run_ours, run_one_device, calls, repeats)),
            (f"pmap step, {label}", "jax.pmap on 8 devices",
             *xla.medians_per_call(run_ours, run_theirs, calls, repeats))]
    print(f"{'benchmark':44} {'against':24} {'s2s':>10} {'them':>10} {'s2s/them':>9}")
    for name, against, t_ours, t_theirs in rows:
        print(f"{name:44} {against:24} {xla._fmt(t_ours):>10} {xla._fmt(t_theirs):>10} "
              f"{t_ours / t_theirs:8.2f}x")
    return rows


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("S2S_NUM_CPU_DEVICES") != str(DEVICES):
        env = dict(os.environ, S2S_NUM_CPU_DEVICES=str(DEVICES),
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                              f" --xla_force_host_platform_device_count={DEVICES}").strip())
        env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
        result = subprocess.run([sys.executable, os.path.join(HERE, "pmap.py"), *argv], env=env,
                                capture_output=True, text=True, timeout=1200)
        sys.stdout.write(result.stdout)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        return True
    tiny = "--tiny" in argv
    return run(tiny)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
