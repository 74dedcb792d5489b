"""A data-parallel MLP training step on 8 CPU devices with `s2s.pmap`, against the same
step with `s2s.jit` on one device on the same total batch, against `jax.pmap` on the
same 8 CPU devices, and the same pmap over 2 processes of 4 devices each
(`s2s.distributed`, on 127.0.0.1) against 1 process of 8, in the same run.

    python benchmarks/pmap.py           # full size
    python benchmarks/pmap.py --tiny    # what the test suite runs

The step is grad of a tanh MLP's softmax cross-entropy (784-512-512-10, float32, batch 128
per device, 1024 in all), the gradients averaged over devices with `pmean`, then an SGD
update; the parameters are replicated (`in_axes=None`) and the updated ones returned once
(`out_axes=None`). Every side gets NumPy arrays and its results are read as NumPy. The
client's device count is fixed when first made, so the script runs itself again in a child
process with 8 CPU devices (S2S_NUM_CPU_DEVICES=8, and jax's
--xla_force_host_platform_device_count=8) when it is not in one, and as the two processes
of the distributed run (`--process ID PORT`), which check their step against the
one-device step on the full batch and report process 0's time.
"""
import os
import runpy
import socket
import statistics
import subprocess
import sys
import time
import types

import numpy as np

DEVICES = 8
PROCESSES = 2
HERE = os.path.dirname(os.path.abspath(__file__))


def problem(tiny: bool):
    """Parameters, the global batch, and the batch as one slice per device."""
    rng = np.random.default_rng(0)
    sizes = (12, 16, 16, 4) if tiny else (784, 512, 512, 10)
    per_device = 4 if tiny else 128
    batch = DEVICES * per_device
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    return params, x, y, x.reshape(DEVICES, per_device, -1), y.reshape(DEVICES, per_device, -1)


def steps():
    """The loss (grad_numpy.py's MLP softmax cross-entropy), the training step on one
    device's batch, and its data-parallel twin for pmap over the axis "batch" (s2s is
    imported here: the script's parent process may lack it)."""
    import s2s
    loss = runpy.run_path(os.path.join(HERE, "grad_numpy.py"))["mlp_loss"]

    def single_step(params, x, y):
        grads = s2s.grad(loss)(params, x, y)
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, grads)]

    def parallel_step(params, x, y):
        grads = s2s.lax.pmean(s2s.grad(loss)(params, x, y), "batch")
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(params, grads)]
    return loss, single_step, parallel_step


def run(tiny: bool):
    import jax
    import jax.numpy as jnp

    import s2s

    xla = types.SimpleNamespace(**runpy.run_path(os.path.join(HERE, "xla.py")))
    assert s2s.device_count() == DEVICES and jax.device_count() == DEVICES
    params, x, y, xs, ys = problem(tiny)
    loss, single_step, parallel_step = steps()
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
    one_process = median_seconds(run_ours, calls, repeats)
    rows.append(("same pmap step, 2 processes x 4 devices", "1 process x 8 devices", two_processes(tiny),
                 one_process))
    print(f"{'benchmark':44} {'against':24} {'s2s':>10} {'them':>10} {'s2s/them':>9}")
    for name, against, t_ours, t_theirs in rows:
        print(f"{name:44} {against:24} {xla._fmt(t_ours):>10} {xla._fmt(t_theirs):>10} "
              f"{t_ours / t_theirs:8.2f}x")
    return rows


def median_seconds(fn, calls: int, repeats: int) -> float:
    """Seconds per call of `fn`: the median over `repeats` batches of `calls`, after one batch."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times[1:])


def two_processes(tiny: bool) -> float:
    """Seconds per step of the pmap over 2 processes of 4 devices (process 0's median)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, S2S_DISK_CACHE="0")
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, "pmap.py"), "--process", str(i), str(port),
                                 *(["--tiny"] if tiny else [])], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for i in range(PROCESSES)]
    outputs = []
    for worker in workers:
        try:
            outputs.append(worker.communicate(timeout=600)[0])
        finally:
            worker.kill()
        assert worker.returncode == 0, outputs[-1][-4000:] if outputs else "a worker timed out"
    return float(outputs[0].rsplit("seconds per step ", 1)[1].split()[0])


def process_worker(process_id: int, port: int, tiny: bool) -> None:
    """One of the two processes: its half of the devices' slices, the step checked against
    the one-device step on the full batch, then timed (medians of batches of calls)."""
    import s2s
    local = DEVICES // PROCESSES
    s2s.distributed.initialize(f"127.0.0.1:{port}", PROCESSES, process_id, local_device_count=local, timeout=120)
    params, x, y, xs, ys = problem(tiny)
    _, single_step, parallel_step = steps()
    mine = slice(process_id * local, (process_id + 1) * local)
    step = s2s.pmap(parallel_step, "batch", in_axes=(None, 0, 0), out_axes=None)

    def run_step():
        return s2s.tree_map(np.asarray, step(params, xs[mine], ys[mine]))
    for ours, expected in zip(s2s.tree_leaves(run_step()), s2s.tree_leaves(s2s.jit(single_step)(params, x, y))):
        np.testing.assert_allclose(ours, np.asarray(expected), rtol=2e-3, atol=1e-5)
    repeats, calls = (3, 2) if tiny else (15, 5)
    print(f"process {process_id}: seconds per step {median_seconds(run_step, calls, repeats)}")
    s2s.distributed.shutdown()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--process" in argv:
        at = argv.index("--process")
        return process_worker(int(argv[at + 1]), int(argv[at + 2]), "--tiny" in argv) or True
    if os.environ.get("S2S_NUM_CPU_DEVICES") != str(DEVICES):
        env = dict(os.environ, S2S_NUM_CPU_DEVICES=str(DEVICES),
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                              f" --xla_force_host_platform_device_count={DEVICES}").strip())
        root = os.path.dirname(HERE)   # this checkout's s2s, and s2s_runtime in runtime/
        env["PYTHONPATH"] = os.pathsep.join((root, os.path.join(root, "runtime"), env.get("PYTHONPATH", "")))
        result = subprocess.run([sys.executable, os.path.join(HERE, "pmap.py"), *argv], env=env,
                                capture_output=True, text=True, timeout=1200)
        sys.stdout.write(result.stdout)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        return True
    tiny = "--tiny" in argv
    return run(tiny)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
